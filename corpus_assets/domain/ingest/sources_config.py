"""``sources.yaml``: the declared sources, validated by pydantic with errors that name the field.

Values may reference environment variables as ``${NAME}`` or ``${NAME:-default}``; ``CORPUS_HOME``
is always defined (it defaults to ``./var`` under the project).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional, Union, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpus_assets.domain.core.config_files import ConfigError, read_yaml, validate

from corpus_assets.domain.core.keys import validate_source_id


# Adapters that map a structured row (JSONL line / Parquet row) to a typed record.
RowAdapterName = Literal[
    "text_document",  # {"text": ...}
    "openai_messages",  # {"messages": [{"role","content","tool_calls"?,"tool_call_id"?}]}
    "sharegpt",  # {"conversations": [{"from","value"}]}
    "alpaca",  # {"instruction","input","output"}
    "preference",  # {"prompt","chosen","rejected"}
    "reasoning",  # {"problem","solution","answer"}
    "task",  # {"task_id"?, "input", "reference"}
]
# Document adapters for byte sources (crawls, local files, WARC).
DocumentDomain = Literal["prose", "code"]


# what data may be used for: a source's governance.allowed_uses and a release's uses
Use = Literal["pretraining", "post_training", "evaluation"]

# the quality thresholds a source's records are judged with (the ``profiles`` of the quality
# config, docs/curation.md#quality-profiles): web crawl (the published thresholds), software
# documentation, code, conversations
QualityProfile = Literal["web", "documentation", "code", "conversation"]
QUALITY_PROFILES: tuple[str, ...] = get_args(QualityProfile)


class Governance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    license: str = Field(min_length=1, description="SPDX id or short license name")
    rights_evidence: str = Field(min_length=1, description="URL or note that shows the right to use it")
    allowed_uses: list[Use] = Field(default_factory=lambda: ["pretraining", "post_training", "evaluation"],
                                    description="a release is built only from sources that allow all of its uses")
    retention: str = "indefinite"


class _SourceBase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    description: str = ""
    governance: Governance
    schedule: Optional[str] = Field(default=None, description="cron for scheduled incremental captures")
    priority: int = Field(default=100, description="lower wins when picking dedup representatives")
    profile: QualityProfile = Field(default="web", description="quality thresholds its records are judged with")

    @field_validator("id")
    @classmethod
    def _valid_id(cls, v: str) -> str:
        return validate_source_id(v)  # InvalidKeyError is a ValueError: pydantic reports it on the field

    @field_validator("schedule")
    @classmethod
    def _valid_cron(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and len(v.split()) != 5:
            raise ValueError(f"cron schedule must have 5 fields, got {v!r}")
        return v


class HttpCrawlSource(_SourceBase):
    kind: Literal["http_crawl"]
    seeds: list[str] = Field(min_length=1)
    allowed_hosts: list[str] = Field(default_factory=list, description="host or host:port; default: the seeds' hosts")
    max_pages: int = Field(default=100, ge=1, le=1_000_000)
    max_bytes_per_page: int = Field(default=5_000_000, ge=1)
    politeness_delay_s: float = Field(default=0.5, ge=0)
    timeout_s: float = Field(default=20.0, gt=0)
    user_agent: str = "corpus-crawler/0.1"
    obey_robots: bool = True
    domain: DocumentDomain = "prose"

    @field_validator("seeds")
    @classmethod
    def _http_seeds(cls, v: list[str]) -> list[str]:
        for url in v:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"seed {url!r} is not an absolute http(s) URL")
        return v

    @model_validator(mode="after")
    def _default_hosts(self) -> "HttpCrawlSource":
        if not self.allowed_hosts:
            self.allowed_hosts = sorted({urlsplit(u).netloc.lower() for u in self.seeds})
        return self


class LocalDirSource(_SourceBase):
    kind: Literal["local_dir"]
    root: Path
    include: list[str] = Field(default_factory=lambda: ["**/*.html", "**/*.htm", "**/*.txt", "**/*.md"])
    domain: DocumentDomain = "prose"
    primary_locale: Optional[str] = Field(
        default=None, pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$",
        description="locale of the source's original pages (en, en-US): among duplicates of one source, a copy "
                    "whose path has this locale (a folder en/ or en-US/, a .en suffix) is preferred as representative",
    )

    @field_validator("include")
    @classmethod
    def _safe_globs(cls, v: list[str]) -> list[str]:
        for pattern in v:
            if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
                raise ValueError(f"glob {pattern!r} must be relative to root and must not contain '..'")
        return v


class _DumpSource(_SourceBase):
    root: Path
    include: list[str] = Field(min_length=1)
    adapter: RowAdapterName
    adapter_version: str = "1"

    @field_validator("include")
    @classmethod
    def _safe_globs(cls, v: list[str]) -> list[str]:
        return LocalDirSource._safe_globs(v)


class JsonlSource(_DumpSource):
    kind: Literal["jsonl"]


class ParquetSource(_DumpSource):
    kind: Literal["parquet"]


class WarcSource(_SourceBase):
    kind: Literal["warc"]
    root: Path
    include: list[str] = Field(default_factory=lambda: ["**/*.warc", "**/*.warc.gz"])
    domain: DocumentDomain = "prose"

    @field_validator("include")
    @classmethod
    def _safe_globs(cls, v: list[str]) -> list[str]:
        return LocalDirSource._safe_globs(v)


class RecipeSource(_SourceBase):
    """A recipe data job (``corpus_assets/domain/recipe``): each capture runs the job and its selected
    tasks become a snapshot of task records (references kept owner-only)."""

    kind: Literal["recipe"]
    config: Path = Field(description="the data job config (YAML/JSON), as for `corpus recipe run --config`")
    output_root: Optional[Path] = Field(default=None, description="job directories; default $CORPUS_HOME/recipes/<id>")
    adapter: Literal["task"] = "task"
    adapter_version: str = "1"


SourceConfig = Annotated[
    Union[HttpCrawlSource, LocalDirSource, JsonlSource, ParquetSource, WarcSource, RecipeSource], Field(discriminator="kind")
]


class CanonicalPolicy(BaseModel):
    """Limits and switches of canonicalization; its fields go into the policy version."""

    model_config = ConfigDict(extra="forbid")
    max_document_bytes: int = Field(default=20_000_000, ge=1)
    max_html_depth: int = Field(default=2_000, ge=10)
    langid_max_chars: int = Field(default=4_000, ge=100)
    # below this fastText probability the record's language is "und" (the score is kept, and the
    # label the model proposed is in the decision detail); 0 turns the floor off
    langid_min_score: float = Field(default=0.3, ge=0.0, le=1.0)


class SourcesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sources: list[SourceConfig] = Field(min_length=1)
    canonical: CanonicalPolicy = Field(default_factory=CanonicalPolicy)

    @model_validator(mode="after")
    def _unique_ids(self) -> "SourcesFile":
        seen: set[str] = set()
        for s in self.sources:
            if s.id in seen:
                raise ValueError(f"duplicate source id {s.id!r}")
            seen.add(s.id)
        return self

    def get(self, source_id: str):
        for s in self.sources:
            if s.id == source_id:
                return s
        known = ", ".join(s.id for s in self.sources)
        raise KeyError(f"unknown source {source_id!r}; sources.yaml declares: {known}")


def parse_sources(data: object, origin: str = "sources.yaml") -> SourcesFile:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping with a 'sources' list at top level")
    return validate(SourcesFile, data, origin)


def load_sources(path: Path | str, env: Optional[dict[str, str]] = None) -> SourcesFile:
    """Read, interpolate and validate a sources file. Relative roots (and recipe config paths)
    resolve against its folder."""
    path = Path(path)
    cfg = parse_sources(read_yaml(path, env), str(path))
    for s in cfg.sources:
        for attr in ("root", "config", "output_root"):
            value = getattr(s, attr, None)
            if isinstance(value, Path) and not value.is_absolute():
                setattr(s, attr, (path.parent / value).resolve())
    return cfg
