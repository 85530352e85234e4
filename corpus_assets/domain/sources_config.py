"""``sources.yaml``: the declared sources, validated by pydantic with errors that name the field.

Values may reference environment variables as ``${NAME}`` or ``${NAME:-default}``; ``CORPUS_HOME``
is always defined (it defaults to ``./var`` under the project).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal, Optional, Union
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from corpus_assets.domain.keys import InvalidKeyError, validate_source_id

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

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


class ConfigError(ValueError):
    """A configuration file that does not validate; the message names the file and field."""


class Governance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    license: str = Field(min_length=1, description="SPDX id or short license name")
    rights_evidence: str = Field(min_length=1, description="URL or note that shows the right to use it")
    allowed_uses: list[str] = Field(default_factory=lambda: ["pretraining", "post_training", "evaluation"])
    retention: str = "indefinite"


class _SourceBase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    description: str = ""
    governance: Governance
    schedule: Optional[str] = Field(default=None, description="cron for scheduled incremental captures")
    priority: int = Field(default=100, description="lower wins when picking dedup representatives")

    @field_validator("id")
    @classmethod
    def _valid_id(cls, v: str) -> str:
        try:
            return validate_source_id(v)
        except InvalidKeyError as exc:
            raise ValueError(str(exc)) from None

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


SourceConfig = Annotated[
    Union[HttpCrawlSource, LocalDirSource, JsonlSource, ParquetSource, WarcSource], Field(discriminator="kind")
]


class CanonicalPolicy(BaseModel):
    """Limits and switches of canonicalization; its fields go into the policy version."""

    model_config = ConfigDict(extra="forbid")
    max_document_bytes: int = Field(default=20_000_000, ge=1)
    max_html_depth: int = Field(default=2_000, ge=10)
    langid_max_chars: int = Field(default=4_000, ge=100)


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


def expand_env(text: str, env: Optional[dict[str, str]] = None) -> str:
    env = dict(os.environ if env is None else env)

    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"environment variable ${{{name}}} is not set and has no default")

    return _ENV_RE.sub(sub, text)


def _expand_values(data, env: dict[str, str]):
    """Interpolate ${VAR} in string values only (comments and keys are left alone)."""
    if isinstance(data, str):
        return expand_env(data, env)
    if isinstance(data, list):
        return [_expand_values(v, env) for v in data]
    if isinstance(data, dict):
        return {k: _expand_values(v, env) for k, v in data.items()}
    return data


def _format_validation_error(path: str, exc: ValidationError, data: dict) -> str:
    lines = [f"{path}: invalid configuration"]
    for err in exc.errors():
        loc_parts = []
        for part in err["loc"]:
            # drop pydantic's discriminator tags like 'http_crawl' inside union locations
            if isinstance(part, int):
                loc_parts.append(f"[{part}]")
            elif part in ("http_crawl", "local_dir", "jsonl", "parquet", "warc"):
                continue
            else:
                loc_parts.append(("." if loc_parts else "") + str(part))
        loc = "".join(loc_parts) or "(top level)"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)


def parse_sources(data: object, origin: str = "sources.yaml") -> SourcesFile:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping with a 'sources' list at top level")
    try:
        return SourcesFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(origin, exc, data)) from None


def load_sources(path: Path | str, env: Optional[dict[str, str]] = None) -> SourcesFile:
    """Read, interpolate and validate a sources file. Relative roots resolve against its folder."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read sources file: {exc}") from None
    env = dict(os.environ if env is None else env)
    env.setdefault("CORPUS_HOME", str(Path("var").resolve()))
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    data = _expand_values(data, env)
    cfg = parse_sources(data, str(path))
    for s in cfg.sources:
        root = getattr(s, "root", None)
        if root is not None and not root.is_absolute():
            s.root = (path.parent / root).resolve()
    return cfg
