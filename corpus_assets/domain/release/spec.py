"""``releases/<name>.yaml``: what a release is built from, validated with errors that name the field.

Today a spec names its snapshots and its dedup policy; later issues add split, mixture,
tokenizer and packing sections. Registering a spec (the ``release_specs`` sensor) adds its
``releases`` partition.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpus_assets.domain.core.config_files import ConfigError, read_yaml, validate
from corpus_assets.domain.core.keys import parse_snapshot_key, validate_release_name, validate_source_id


class SnapshotSelection(BaseModel):
    """Explicit snapshot keys, or sources with an optional capture-time window (UTC, inclusive)."""

    model_config = ConfigDict(extra="forbid")
    explicit: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    since: Optional[datetime] = None
    until: Optional[datetime] = None

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


class ReleaseSpec(BaseModel):
    model_config = ConfigDict(extra="allow")  # later sections (split, mixture, tokenizer, packing) arrive with their issues
    name: str
    description: str = ""
    snapshots: SnapshotSelection
    dedup: dict = Field(default_factory=dict, description="dedup policy; validated by the dedup layer")
    split: dict = Field(default_factory=dict, description="split policy; validated by splits.SplitPolicy")
    tokenizer: dict = Field(default_factory=dict, description="tokenizer: a tokenizer.json path or BPE training; tokenizer.TokenizerSpec")
    token_views: dict = Field(default_factory=dict, description="chat template and label policy; token_views.TokenViewPolicy")
    mixture: Optional[dict] = Field(default=None, description="sampling plan of the training split; mixture.MixtureSpec (absent: natural distribution, read once)")
    packing: dict = Field(default_factory=dict, description="block layout; packing.PackingPolicy")
    shards: dict = Field(default_factory=dict, description="shard capacity in positions; shards_layer.ShardSpec")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return validate_release_name(v)  # InvalidKeyError is a ValueError: pydantic reports it on the field


def load_release_spec(path: Path | str) -> ReleaseSpec:
    path = Path(path)
    spec = validate(ReleaseSpec, read_yaml(path) or {}, str(path))
    if spec.name != path.stem:
        raise ConfigError(f"{path}: name {spec.name!r} must match the file name {path.stem!r}")
    return spec


def discover_release_specs(folder: Path | str) -> tuple[dict[str, ReleaseSpec], dict[str, str]]:
    """Valid specs by name, and errors by file for the invalid ones (nothing invalid is registered)."""
    specs: dict[str, ReleaseSpec] = {}
    errors: dict[str, str] = {}
    for p in sorted(Path(folder).glob("*.yaml")):
        try:
            specs[p.stem] = load_release_spec(p)
        except ConfigError as exc:
            errors[p.name] = str(exc)
    return specs, errors
