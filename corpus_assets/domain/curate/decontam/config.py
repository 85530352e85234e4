"""The decontamination policy: its settings, the version that names them, its reason codes.

Every setting except the registry paths enters the policy version, and the registry enters
through its digest, so a curated version records exactly what it was checked against and how.
Why these defaults: docs/curation.md, "Decontamination".
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.curate.decontam.eval_registry import DEFAULT_FIELDS

__all__ = [
    "DECONTAM_CODE_VERSION",
    "REASON_BENCHMARK_MATCH",
    "REASON_MASKED",
    "DecontamConfig",
    "decontam_policy_version",
]

DECONTAM_CODE_VERSION = "decontam-1"

# Reason codes of the curated layer's decision rows (part of its data contract).
REASON_BENCHMARK_MATCH = "decontam.benchmark_match"  # action "remove": the record is rejected
REASON_MASKED = "decontam.masked"  # action "mask": the matched spans are replaced, the record is kept


class DecontamConfig(BaseModel):
    """Decontamination policy. Every value except the registry paths enters the policy version
    (the registry enters through its digest, wherever its files live)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    registry_files: list[Path] = []
    fields: list[str] = list(DEFAULT_FIELDS)
    n: int = 13
    short_item_tokens: int = 30
    short_n: int = 8
    tau: float = 0.5
    max_ngram_item_frequency: int = 10
    action: Literal["remove", "mask"] = "remove"

    @model_validator(mode="after")
    def _check(self) -> "DecontamConfig":
        if self.n < 1 or self.short_n < 1:
            raise ValueError("n and short_n must be at least 1")
        if self.short_n > self.n:
            raise ValueError(f"short_n ({self.short_n}) must not exceed n ({self.n})")
        if self.short_item_tokens < 0:
            raise ValueError("short_item_tokens must be >= 0")
        if not (0.0 < self.tau <= 1.0):
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        if self.max_ngram_item_frequency < 1:
            raise ValueError("max_ngram_item_frequency must be >= 1")
        if not self.fields or any(not f for f in self.fields) or len(set(self.fields)) != len(self.fields):
            raise ValueError("fields must be a non-empty list of distinct field names")
        return self

    def method(self) -> dict:
        """The settings that determine what is flagged (no paths)."""
        return self.model_dump(mode="json", exclude={"registry_files"})


def decontam_policy_version(config: DecontamConfig, registry_digest: str) -> str:
    """16 hex digits naming (code version, method settings, registry digest)."""
    return canonical_digest(
        {"code_version": DECONTAM_CODE_VERSION, "config": config.method(), "registry_digest": registry_digest}
    )[:16]
