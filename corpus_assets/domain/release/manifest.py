"""The release manifest (machine-readable) and the data card (for humans).

``ReleaseManifest`` (pydantic, unknown fields refused everywhere) is the contract; ``write_schema``
exports its JSON Schema to ``docs/release_manifest.schema.json`` and a test keeps the two equal.
``version`` is the build id; ``content_digest``, ``artifacts`` and ``data_card`` are filled by
``publish.py`` (a manifest is never part of its own digest). Public by design: aggregates, ids,
digests and policies only. ``render_data_card`` renders the Markdown card.

Fields and decisions: docs/releases.md#the-manifest
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpus_assets.domain.core.keys import validate_release_name
from corpus_assets.domain.curate.decontam.report import limits_text as decontam_limits_text

__all__ = [
    "MANIFEST_FORMAT",
    "ArtifactEntry",
    "SnapshotRef",
    "SourceEntry",
    "TransformEntry",
    "PipelineInfo",
    "StageCount",
    "DedupInfo",
    "EvaluationInfo",
    "TokenizerProvenance",
    "TokenizerInfo",
    "ShardEntry",
    "SplitStats",
    "SourceSampling",
    "SamplingInfo",
    "TombstoneInfo",
    "ReleaseManifest",
    "validate_manifest",
    "manifest_schema",
    "schema_text",
    "write_schema",
    "installed_distributions",
    "environment_digest",
    "render_data_card",
    "data_card_renderer",
]

MANIFEST_FORMAT = "corpus-release/1"
_HEX64 = r"^[0-9a-f]{64}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArtifactEntry(_Model):
    path: str = Field(description="path relative to the release directory (posix)")
    sha256: str = Field(pattern=_HEX64)
    bytes: int = Field(ge=0)


class SnapshotRef(_Model):
    snapshot: str = Field(description="snapshot key <source_id>.<YYYYMMDDTHHMMSS>")
    raw_version_digest: str = Field(description="content digest of the raw_snapshot layer version")
    curated_version_digest: str = Field(description="content digest of the curated_records layer version")
    items: int = Field(ge=0, description="raw items captured")
    records: int = Field(ge=0, description="curated records kept from this snapshot")


class SourceEntry(_Model):
    source_id: str
    kind: str = Field(description="http_crawl | local_dir | jsonl | parquet | warc")
    license: str
    rights_evidence: str
    allowed_uses: list[str]
    snapshots: list[SnapshotRef]


class TransformEntry(_Model):
    name: str
    version: str = Field(description="code version of the transform")
    policy_version: str
    policy: dict[str, Any] = Field(default_factory=dict)


class PipelineInfo(_Model):
    code_version: str = Field(description="version of the corpus package (and commit when known)")
    environment_digest: str = Field(description="release_manifest.environment_digest()")
    transforms: list[TransformEntry]


class StageCount(_Model):
    stage: str = Field(description="the (sub-)stage that decided, from the stages' decision records")
    outcome: str = Field(description="accepted | rejected | quarantined | deleted")
    reason: str = Field(description="stable reason code ('ok' for a record accepted unchanged)")
    count: int = Field(ge=0)


class DedupInfo(_Model):
    policy: dict[str, Any]
    clusters: dict[str, Any] = Field(description="cluster statistics (sizes, exact / near removals, largest clusters)")


class EvaluationInfo(_Model):
    registry_digest: str = Field(description="digest of the frozen evaluation registry")
    detector_policy: dict[str, Any] = Field(description="normalization, n, threshold, action, review")
    contamination: dict[str, Any] = Field(
        default_factory=dict, description="what was checked and removed (counts by source / benchmark); never 'clean'"
    )


class TokenizerProvenance(_Model):
    """Where the build's token ids come from (docs/tokens.md#tokenizer-layer)."""

    how: Literal["loaded", "trained", "frozen", "from_build"] = Field(
        description="loaded: from a tokenizer.json; trained: on this build's training split; frozen: kept from an "
                    "earlier build of the release (tokenizer.freeze), trained on the splits version named; "
                    "from_build: the tokenizer of the published build named")
    tokenizer_version: str = Field(pattern=_HEX64, description="content digest of the tokenizer layer version that "
                                   "holds it (for from_build: the named build's)")
    loaded_from: Optional[str] = Field(default=None, description="the tokenizer.json it was loaded from")
    release: Optional[str] = Field(default=None, description="the release whose training split it was trained on")
    trained_on_splits_version: Optional[str] = Field(default=None, pattern=_HEX64,
                                                     description="content digest of the splits version it was trained on")
    training_records: Optional[int] = Field(default=None, ge=0)
    from_build: Optional[str] = Field(default=None, description="'<release>@<build id>' (tokenizer.from_build)")
    retrained_because: Optional[str] = Field(
        default=None, description="a frozen tokenizer was replaced by this build's training: which settings changed")


class TokenizerInfo(_Model):
    digest: str
    vocab_size: int = Field(ge=1)
    origin: str = Field(description="one line: loaded from a tokenizer.json, trained on the training split, frozen "
                        "(trained by an earlier build) or taken from a build")
    provenance: Optional[TokenizerProvenance] = Field(
        default=None, description="where the token ids come from (absent only in manifests written before it existed)")


class ShardEntry(_Model):
    split: str
    name: str
    files: dict[str, str] = Field(description="file name -> sha256 of every file of the shard")
    blocks: int = Field(ge=0)
    tokens: int = Field(ge=0)

    @field_validator("files")
    @classmethod
    def _hex_digests(cls, v: dict[str, str]) -> dict[str, str]:
        for name, digest in v.items():
            if not re.fullmatch(_HEX64, digest):
                raise ValueError(f"shard file {name!r}: sha256 must be 64 lowercase hex digits")
        return v


class SplitStats(_Model):
    split: str
    records: int = Field(ge=0)
    tokens: int = Field(ge=0)
    label_tokens: int = Field(ge=0)


class SourceSampling(_Model):
    """The four denominators of §18.8, kept apart."""

    source_id: str
    source_records: int = Field(ge=0, description="records of the source eligible for the training split")
    sampled_records: int = Field(ge=0, description="draws in the mixture plan (repeats counted)")
    materialized_tokens: int = Field(ge=0, description="tokens written to shards")
    label_tokens: int = Field(ge=0, description="tokens that carry loss (effective labels)")


class SamplingInfo(_Model):
    policy: dict[str, Any] = Field(description="mixture policy: unit, weights or alpha, budget, seed, phases")
    per_source: list[SourceSampling]


class TombstoneInfo(_Model):
    generation: int = Field(ge=0)
    request_ids: list[str]
    count: int = Field(ge=0, description="tombstoned record copies applied to this build")


class SnapshotRule(_Model):
    retain: Literal["latest", "union"] = Field(description="snapshots.retain of the release spec")
    statement: str = Field(description="the rule in one sentence")
    left_out: dict[str, int] = Field(default_factory=dict,
                                     description="reason -> accepted copies the release does not use")


class ReleaseManifest(_Model):
    manifest_format: Literal["corpus-release/1"] = MANIFEST_FORMAT
    corpus_id: str
    release: str
    version: str = Field(description="the build id")
    build_id: str = Field(pattern=_HEX64)
    content_digest: str = Field(pattern=_HEX64, description="digest of the artifacts; the manifest is not part of it")
    owner: str = Field(description="responsible team (created_by)")
    created_at: Optional[str] = Field(default=None, description="ISO time of the build (descriptive; not hashed)")
    intended_uses: list[str] = Field(description="the release spec's uses; every source allows all of them")
    excluded_uses: list[str]
    snapshot_rule: Optional[SnapshotRule] = Field(default=None, description="which copies of each record the release "
                                                  "uses (absent only in manifests written before the rule existed)")
    sources: list[SourceEntry]
    pipeline: PipelineInfo
    stage_counts: list[StageCount]
    dedup: DedupInfo
    evaluation: EvaluationInfo
    tokenizer: TokenizerInfo
    shards: list[ShardEntry]
    split_stats: list[SplitStats] = Field(default_factory=list)
    sampling: SamplingInfo
    tombstones: TombstoneInfo
    consumed_by_runs: list[str] = Field(
        default_factory=list, description="known at publish time; the release registry is the live source"
    )
    artifacts: list[ArtifactEntry]
    layer_versions: dict[str, str] = Field(description="asset -> content digest of the layer version used")
    data_card: Optional[ArtifactEntry] = Field(default=None, description="filled by publish when a card is rendered")

    @field_validator("release")
    @classmethod
    def _release_name(cls, v: str) -> str:
        return validate_release_name(v)

    @model_validator(mode="after")
    def _identity(self) -> "ReleaseManifest":
        if self.version != self.build_id:
            raise ValueError(f"version {self.version!r} must equal build_id {self.build_id!r}")
        paths = [a.path for a in self.artifacts]
        if len(paths) != len(set(paths)):
            raise ValueError("artifacts: a path is listed twice")
        return self


def validate_manifest(data: Mapping[str, Any]) -> dict:
    """Validate a manifest dict against ``ReleaseManifest`` and return its JSON form (for publish)."""
    return ReleaseManifest.model_validate(dict(data)).model_dump(mode="json")


# --- schema ---------------------------------------------------------------------------------------


def manifest_schema() -> dict:
    schema = ReleaseManifest.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "corpus-release/1"
    return schema


def schema_text() -> str:
    return json.dumps(manifest_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema(path: Path) -> Path:
    path = Path(path)
    path.write_text(schema_text(), encoding="utf-8")
    return path


# --- environment ------------------------------------------------------------------------------------


def _normalize_dist_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions() -> list[str]:
    """Sorted, de-duplicated ``name==version`` of every installed distribution — of the
    environment this process runs in, read once per process (reading every distribution's
    metadata took 0.6 s of each release build)."""
    return list(_installed_distributions())


@functools.lru_cache(maxsize=1)
def _installed_distributions() -> tuple[str, ...]:
    seen = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name:
            seen.add(f"{_normalize_dist_name(name)}=={dist.version}")
    return tuple(sorted(seen))


def environment_digest(distributions: Optional[list[str]] = None) -> str:
    lines = installed_distributions() if distributions is None else sorted(set(distributions))
    return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()


# --- data card ----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _kv(d: Mapping[str, Any]) -> list[str]:
    if not d:
        return ["(none recorded)"]
    return [f"- `{_cell(k)}`: {_cell(v)}" for k, v in sorted(d.items())]


def _bullets(items: list[str], empty: str) -> list[str]:
    return [f"- {_cell(i)}" for i in items] if items else [empty]


def render_data_card(manifest: ReleaseManifest, *, known_limits: list[str], report_links: Mapping[str, str]) -> str:
    """Markdown data card: uses, sources, transforms, statistics, denominators, limits, reports."""
    m = manifest
    L: list[str] = [f"# Data card — {m.corpus_id} / {m.release}", ""]
    L += [
        f"- build id (version): `{m.build_id}`",
        f"- content digest: `{m.content_digest}`",
        f"- owner: {m.owner}",
        f"- manifest format: `{m.manifest_format}` (machine-readable: `manifest.json`)",
    ]
    if m.created_at:
        L.append(f"- built at: {m.created_at}")
    L += ["", "## Uses", "", "Intended uses:", ""] + _bullets(m.intended_uses, "- (none declared)")
    L += ["", "Excluded uses:", ""] + _bullets(m.excluded_uses, "- (none declared)")
    if m.snapshot_rule is not None:
        r = m.snapshot_rule
        L += ["", "## What the release contains", "", f"Snapshot rule `{r.retain}`: {r.statement}.", ""]
        L += (_table(["left out", "copies"], [[k, v] for k, v in sorted(r.left_out.items())]) if r.left_out
              else ["No accepted copy was left out."])

    L += ["", "## Sources", ""]
    L += _table(
        ["source", "kind", "license", "rights evidence", "allowed uses", "snapshots", "items", "records"],
        [
            [
                s.source_id,
                s.kind,
                s.license,
                s.rights_evidence,
                ", ".join(s.allowed_uses),
                ", ".join(sn.snapshot for sn in s.snapshots),
                sum(sn.items for sn in s.snapshots),
                sum(sn.records for sn in s.snapshots),
            ]
            for s in m.sources
        ],
    )

    L += ["", "## Transforms", "", f"Code version `{m.pipeline.code_version}`, environment digest "
          f"`{m.pipeline.environment_digest}`.", ""]
    L += _table(["transform", "version", "policy version"], [[t.name, t.version, t.policy_version] for t in m.pipeline.transforms])

    L += ["", "## Stage accounting", ""]
    L += _table(["stage", "outcome", "reason", "count"], [[c.stage, c.outcome, c.reason, c.count] for c in m.stage_counts])

    L += ["", "## Per-split statistics", ""]
    by_split: dict[str, list[int]] = {}
    for sh in m.shards:
        agg = by_split.setdefault(sh.split, [0, 0, 0])
        agg[0] += 1
        agg[1] += sh.blocks
        agg[2] += sh.tokens
    stats = {s.split: s for s in m.split_stats}
    splits = sorted(set(by_split) | set(stats))
    L += _table(
        ["split", "records", "tokens", "label tokens", "shards", "blocks", "shard tokens"],
        [
            [
                sp,
                stats[sp].records if sp in stats else "",
                stats[sp].tokens if sp in stats else "",
                stats[sp].label_tokens if sp in stats else "",
                *by_split.get(sp, ["", "", ""]),
            ]
            for sp in splits
        ],
    )

    L += [
        "",
        "## Sampling and the four denominators",
        "",
        "Four denominators per source, never folded into one rate: **source records** (eligible records), "
        "**sampled records** (draws in the plan, repeats counted), **materialized tokens** (tokens written to "
        "shards) and **label tokens** (tokens that carry loss).",
        "",
    ]
    rows = [[s.source_id, s.source_records, s.sampled_records, s.materialized_tokens, s.label_tokens] for s in m.sampling.per_source]
    if m.sampling.per_source:
        rows.append(
            [
                "**total**",
                sum(s.source_records for s in m.sampling.per_source),
                sum(s.sampled_records for s in m.sampling.per_source),
                sum(s.materialized_tokens for s in m.sampling.per_source),
                sum(s.label_tokens for s in m.sampling.per_source),
            ]
        )
    L += _table(["source", "source records", "sampled records", "materialized tokens", "label tokens"], rows)
    L += ["", "Mixture policy:", ""] + _kv(m.sampling.policy)

    L += ["", "## Deduplication", "", "Policy:", ""] + _kv(m.dedup.policy)
    L += ["", "Cluster statistics:", ""] + _kv(m.dedup.clusters)

    L += [
        "",
        "## Contamination",
        "",
        f"Evaluation registry digest `{m.evaluation.registry_digest}`. The check reports what was checked and "
        "removed; lexical matching cannot prove the absence of leakage (paraphrases, translations).",
        "",
        "Detector policy:",
        "",
    ] + _kv(m.evaluation.detector_policy)
    findings = dict(m.evaluation.contamination)
    coverage = findings.pop("coverage", None) or {}
    flagged = findings.pop("flagged_records", None) or {}
    L += ["", "Findings:", ""] + _kv(findings)
    L += ["", "### What was checked", ""]
    if coverage or flagged:
        L += _table(
            ["benchmark", "protected texts", "checked", "unchecked: too short", "unchecked: all n-grams suppressed",
             "long n-gram rule applies", "records flagged (decontaminated)", "records flagged (rejected earlier by another stage)"],
            [[b, c.get("protected", ""), c.get("checked", ""), c.get("too_short", ""), c.get("all_ngrams_suppressed", ""),
              c.get("long_rule", ""), flagged.get(b, {}).get("acted_on", 0), flagged.get(b, {}).get("rejected_earlier", 0)]
             for b, c in sorted({**{b: {} for b in flagged}, **coverage}.items())],
        )
    else:
        L.append("(no per-benchmark coverage recorded by the curated versions)")
    L += ["", "### Limits", ""]
    for para in decontam_limits_text(m.evaluation.detector_policy, coverage or None):
        L += [para, ""]
    L.pop()

    L += ["", "## Tokenizer", "", f"- digest: `{m.tokenizer.digest}`", f"- vocabulary size: {m.tokenizer.vocab_size}",
          f"- origin: {m.tokenizer.origin}"]

    L += ["", "## Shards", ""]
    L += _table(["split", "shard", "blocks", "tokens", "files"], [[s.split, s.name, s.blocks, s.tokens, len(s.files)] for s in m.shards])

    L += [
        "",
        "## Tombstones",
        "",
        f"Tombstone generation {m.tombstones.generation}: {m.tombstones.count} record copies removed, "
        f"requests: {', '.join(m.tombstones.request_ids) if m.tombstones.request_ids else '(none)'}.",
        "",
        "Deleting data from a release does not remove its influence from models already trained on it.",
    ]

    L += ["", "## Known limits", ""] + _bullets(list(known_limits), "- (none declared)")

    L += ["", "## Audit reports", ""]
    if report_links:
        L += [f"- [{_cell(name)}]({link})" for name, link in sorted(report_links.items())]
    else:
        L.append("- (none linked)")

    L += [
        "",
        "## Consumption",
        "",
        "Training runs that consume this version are recorded in the release registry "
        "(`corpus_assets.domain.release.registry.consumers`), the live source of truth"
        + (f"; known at publish time: {', '.join(m.consumed_by_runs)}." if m.consumed_by_runs else "."),
        "",
    ]
    return "\n".join(L)


def data_card_renderer(*, known_limits: list[str], report_links: Mapping[str, str]) -> Callable[[dict], str]:
    """A ``render_card`` callable for ``publish.publish_release``."""

    def render(manifest: dict) -> str:
        return render_data_card(ReleaseManifest.model_validate(manifest), known_limits=known_limits, report_links=report_links)

    return render
