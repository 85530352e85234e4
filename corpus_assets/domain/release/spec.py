"""``releases/<name>.yaml``: what a release is built from, checked completely when it is read.

A spec names its snapshots and one typed section per build step (``dedup``, ``split``,
``tokenizer``, ``token_views``, ``mixture``, ``packing``, ``shards``), each forbidding unknown
fields; ``load_release_spec`` also checks the rules that span fields or sections, so a bad spec
is refused, naming file and field, before any asset runs. ``ReleaseSpec.as_written()`` (the
sections as written, not their typed dumps) is the identity in build ids, so section defaults
never change a build id.

Sections, checks and identity: docs/releases.md#release-specs
"""

from __future__ import annotations

import copy
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError, to_jsonable_python

from corpus_assets.domain.core.config_files import ConfigError, ConfigProblem, field_errors, read_yaml, validate
from corpus_assets.domain.core.keys import parse_snapshot_key, validate_release_name, validate_source_id
from corpus_assets.domain.dedup.clusters_layer import ReleaseDedupPolicy
from corpus_assets.domain.ingest.sources_config import Use
from corpus_assets.domain.pack.mixture import MixtureSpec
from corpus_assets.domain.pack.shards_layer import PackingSection, ShardSpec
from corpus_assets.domain.tokens.splits import SplitPolicy
from corpus_assets.domain.tokens.token_views import CHAT_TEMPLATES, TokenViewPolicy
from corpus_assets.domain.tokens.tokenizer import TokenizerSpec

# the per-step sections, in the order of ReleaseSpec's fields
SECTIONS = ("dedup", "split", "tokenizer", "token_views", "mixture", "packing", "shards")
# fields that say how a step runs, not what it builds (the output is the same for every value):
# never part of the identity, so changing one neither changes a build id nor triggers a rebuild
EXECUTION_SETTINGS = {"dedup": ("shards",)}


class SnapshotSelection(BaseModel):
    """Explicit snapshot keys, or sources with an optional capture-time window (UTC, inclusive),
    and which copies of their records the release keeps (docs/releases.md#what-a-release-contains)."""

    model_config = ConfigDict(extra="forbid")
    explicit: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    since: Optional[datetime] = None
    until: Optional[datetime] = None
    retain: Literal["latest", "union"] = Field(
        default="latest",
        description="latest: each source as of its latest selected snapshot; union: every record's newest accepted copy")

    @field_validator("explicit")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for key in v:
            parse_snapshot_key(key)
        if len(set(v)) != len(v):
            raise ValueError("a snapshot key is listed twice")
        return v

    @field_validator("sources")
    @classmethod
    def _sources(cls, v: list[str]) -> list[str]:
        for s in v:
            validate_source_id(s)
        return v

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, v: Optional[datetime]) -> Optional[datetime]:
        if v is not None and v.tzinfo is None:
            raise ValueError("give the time with a timezone, e.g. 2026-11-01T00:00:00Z")
        return v.astimezone(timezone.utc) if v is not None else None

    @model_validator(mode="after")
    def _one_way(self) -> "SnapshotSelection":
        if bool(self.explicit) == bool(self.sources):
            raise ValueError("give either 'explicit' snapshot keys or 'sources' (with optional since/until), not both or neither")
        if self.explicit and (self.since or self.until):
            raise ValueError("'since'/'until' apply to 'sources' only")
        if self.since and self.until and self.since > self.until:
            raise ValueError("'since' is after 'until'")
        return self

    def select(self, available: list[str]) -> list[str]:
        """The snapshot keys of this release among ``available`` (sorted). Explicit keys must all exist."""
        if self.explicit:
            missing = sorted(set(self.explicit) - set(available))
            if missing:
                raise ValueError(f"snapshots not materialized: {', '.join(missing)}")
            return sorted(self.explicit)
        chosen = []
        for key in available:
            source, when = parse_snapshot_key(key)
            if source in self.sources and (self.since is None or when >= self.since) and (self.until is None or when <= self.until):
                chosen.append(key)
        return sorted(chosen)


class RebuildPolicy(BaseModel):
    """When the ``release_rebuilds`` sensor rebuilds a published release on its own. Operational,
    not content: it is not part of the build id."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["manual", "on_new_snapshots"] = Field(
        default="on_new_snapshots",
        description="on_new_snapshots: rebuild when the release's inputs change; manual: only when asked")
    min_interval_minutes: float = Field(
        default=30, ge=0, description="debounce: at most one automatic rebuild per this many minutes")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"mode": v} if isinstance(v, str) else v


class ReleaseSpec(BaseModel):
    """A release spec with every section typed (see docs/releases.md#release-specs)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    uses: list[Use] = Field(default_factory=lambda: ["pretraining"], min_length=1,
                            description="what the release is for; sources whose allowed_uses miss one are left out")
    snapshots: SnapshotSelection
    dedup: ReleaseDedupPolicy = Field(default_factory=ReleaseDedupPolicy, description="exact and near-duplicate policy")
    split: SplitPolicy = Field(default_factory=SplitPolicy, description="train / validation / test assignment")
    tokenizer: Optional[TokenizerSpec] = Field(
        default=None, description="a tokenizer.json path, BPE training (optionally frozen after the first build) or "
                                  "a published build's tokenizer (absent: the tokenizer asset refuses to run)")
    token_views: TokenViewPolicy = Field(default_factory=TokenViewPolicy, description="chat template and label policy")
    mixture: Optional[MixtureSpec] = Field(
        default=None, description="sampling plan of the training split (absent: natural distribution, read once)")
    packing: PackingSection = Field(default_factory=PackingSection, description="block layout; seq_len 2048 when absent")
    shards: ShardSpec = Field(default_factory=ShardSpec, description="shard capacity in positions")
    rebuild: RebuildPolicy = Field(default_factory=RebuildPolicy,
                                   description="`manual`, or `on_new_snapshots` (default) with a debounce interval")
    _written: dict = PrivateAttr(default_factory=dict)  # the sections as written, for as_written()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return validate_release_name(v)  # InvalidKeyError is a ValueError: pydantic reports it on the field

    @field_validator("dedup", "split", "tokenizer", "token_views", "packing", "shards", mode="before")
    @classmethod
    def _section_given(cls, v: Any) -> Any:
        if v is None:  # `split:` with nothing after it; only mixture may be null
            raise PydanticCustomError("dict_type", "Input should be a valid dictionary (or leave the section out)")
        return v

    @model_validator(mode="wrap")
    @classmethod
    def _whole_spec(cls, data: Any, handler, info: ValidationInfo) -> "ReleaseSpec":
        spec = handler(data)
        if isinstance(data, dict):
            spec._written = copy.deepcopy({k: data[k] for k in SECTIONS if k in data})
        base = (info.context or {}).get("releases_dir")
        problems = spec._cross_section_problems(Path(base) if base is not None else None)
        if problems:
            raise field_errors(cls.__name__, problems)
        return spec

    def _cross_section_problems(self, releases_dir: Optional[Path]) -> list[tuple[tuple, str, object]]:
        """Rules that span fields of different sections (or need the releases folder)."""
        out: list[tuple[tuple, str, object]] = []
        tok = self.tokenizer
        if tok is not None and tok.path is not None and releases_dir is not None:
            path = tok.path if tok.path.is_absolute() else releases_dir / tok.path
            if not path.exists():
                where = "" if tok.path.is_absolute() else f" (a relative path is read from the releases folder {releases_dir})"
                out.append((("tokenizer", "path"), f"{path}: no such file{where}", str(tok.path)))
            elif not path.is_file():
                out.append((("tokenizer", "path"), f"{path}: not a file", str(tok.path)))
        if tok is not None and tok.from_build is None:  # from_build: the named build's template (checked when built)
            if tok.chat_template_version not in CHAT_TEMPLATES:
                out.append((("tokenizer", "chat_template_version"),
                            f"unknown chat template {tok.chat_template_version!r}; known: {sorted(CHAT_TEMPLATES)}",
                            tok.chat_template_version))
            elif tok.chat_template_version != self.token_views.chat_template:
                out.append((("token_views", "chat_template"),
                            f"{self.token_views.chat_template!r} differs from tokenizer.chat_template_version "
                            f"{tok.chat_template_version!r}: views are rendered with the template the tokenizer is frozen with",
                            self.token_views.chat_template))
        if self.shards.positions < self.packing.seq_len:
            out.append((("shards", "positions"),
                        f"shard_positions (S={self.shards.positions}) must be >= seq_len (T={self.packing.seq_len}): "
                        "a shard holds whole blocks only (packing.seq_len)", self.shards.positions))
        m = self.mixture
        if m is not None and m.key == "source":
            known = self.source_ids()
            named = [(("mixture", "weights"), m.weights), (("mixture", "target_weights"), m.target_weights)]
            named += [(("mixture", "phases", j, "weights"), ph.weights) for j, ph in enumerate(m.phases or [])]
            for loc, weights in named:
                unknown = sorted(set(weights or {}) - set(known))
                if unknown:
                    out.append((loc, f"names unknown source(s) {unknown}; the release's snapshots select sources {known}",
                                dict(weights)))
        return out

    def source_ids(self) -> list[str]:
        """The sources this release can draw from: ``snapshots.sources``, or the sources of the
        explicit snapshot keys (sorted)."""
        if self.snapshots.sources:
            return sorted(set(self.snapshots.sources))
        return sorted({parse_snapshot_key(k)[0] for k in self.snapshots.explicit})

    def tokenizer_spec(self) -> TokenizerSpec:
        """The ``tokenizer`` section; a ``ConfigError`` naming the file and section when it is absent."""
        if self.tokenizer is None:
            origin = f"releases/{self.name}.yaml"
            msg = ("the spec has no tokenizer section; give 'path' (a tokenizer.json), 'train' (byte-level BPE settings, "
                   "optionally with 'freeze: true') or 'from_build' ('<release>@<build id>')")
            raise ConfigError(f"{origin}: tokenizer: {msg}", origin=origin, problems=[ConfigProblem("tokenizer", msg)])
        return self.tokenizer

    def as_written(self) -> dict[str, Any]:
        """The spec as it enters build ids (``release_manifest``) and the sensor's cursor: name,
        description, the typed ``snapshots`` dump, and every section exactly as written in the YAML
        (JSON form; an absent section is ``{}``, an absent ``mixture`` is None) without its
        execution settings (``EXECUTION_SETTINGS``: ``dedup.shards``), plus ``uses`` and
        ``snapshots.retain`` when written. Defaults are not in it: a model that gains a default never
        changes an existing build id."""
        out: dict[str, Any] = self.model_dump(mode="json", include={"name", "description", "snapshots"})
        # fields added later enter the identity only when written, so older specs keep their build ids
        if "retain" not in self.snapshots.model_fields_set:
            out["snapshots"].pop("retain")
        for key in SECTIONS:
            absent = None if key == "mixture" else {}
            out[key] = to_jsonable_python(self._written.get(key, absent))
            if key in EXECUTION_SETTINGS and isinstance(out[key], dict):
                out[key] = {k: v for k, v in out[key].items() if k not in EXECUTION_SETTINGS[key]}
        if "uses" in self.model_fields_set:
            out["uses"] = list(self.uses)
        return out


# Parsed specs by path: (the file's bytes, the environment its values were expanded with) -> spec.
# A run reads the same spec in every asset; parsing the YAML is most of the cost.
_CACHE: dict[str, tuple[tuple, ReleaseSpec]] = {}
_CACHE_MAX = 256
_CACHE_LOCK = threading.Lock()


def load_release_spec(path: Path | str) -> ReleaseSpec:
    """Read and check ``path`` completely; a ``ConfigError`` naming the file and each wrong field.

    The file is read on every call; it is parsed and validated again unless its bytes and the
    environment (``${VAR}`` expansion) are those of the last successful call for the same path,
    in which case that result (a copy) is returned after the rules that look at other files
    (``tokenizer.path`` exists) are checked again. A changed file is therefore always re-parsed."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError:
        raw = None  # read_yaml reports it
    key = None if raw is None else (raw, tuple(sorted(os.environ.items())))
    if key is not None:
        with _CACHE_LOCK:
            hit = _CACHE.get(str(path))
        if hit is not None and hit[0] == key and not hit[1]._cross_section_problems(path.parent):
            return hit[1].model_copy(deep=True)
    spec = _load_release_spec(path)
    if key is not None:
        try:
            same = path.read_bytes() == raw  # the file read_yaml parsed is the one the key names
        except OSError:
            same = False
        if same:
            with _CACHE_LOCK:
                _CACHE.pop(str(path), None)
                while len(_CACHE) >= _CACHE_MAX:
                    _CACHE.pop(next(iter(_CACHE)))
                _CACHE[str(path)] = (key, spec.model_copy(deep=True))
    return spec


def _load_release_spec(path: Path) -> ReleaseSpec:
    spec = validate(ReleaseSpec, read_yaml(path) or {}, str(path), context={"releases_dir": path.parent})
    if spec.name != path.stem:
        msg = f"name {spec.name!r} must match the file name {path.stem!r}"
        raise ConfigError(f"{path}: {msg}", origin=str(path), problems=[ConfigProblem("name", msg)])
    return spec


def discover_release_specs(folder: Path | str) -> tuple[dict[str, ReleaseSpec], dict[str, ConfigError]]:
    """Valid specs by name, and the error of each invalid one by file name (nothing invalid is registered)."""
    specs: dict[str, ReleaseSpec] = {}
    errors: dict[str, ConfigError] = {}
    for p in sorted(Path(folder).glob("*.yaml")):
        try:
            specs[p.stem] = load_release_spec(p)
        except ConfigError as exc:
            errors[p.name] = exc
    return specs, errors
