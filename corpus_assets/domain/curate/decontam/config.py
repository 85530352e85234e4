"""The decontamination policy: its settings, the version that names them, its reason codes.

Every setting except the registry paths enters the policy version, and the registry enters
through its digest, so a curated version records exactly what it was checked against and how.
Why these defaults: docs/curation.md, "Decontamination".
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, model_validator

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.curate.decontam.eval_registry import DEFAULT_FIELDS

__all__ = [
    "DECONTAM_CODE_VERSION",
    "REASON_BENCHMARK_MATCH",
    "REASON_MASKED",
    "RULE_CONTAINMENT",
    "RULE_LONG_NGRAM",
    "DecontamConfig",
    "decontam_policy_version",
]

DECONTAM_CODE_VERSION = "decontam-2"  # 2: dual rule for long items, per-benchmark template n-grams

# Reason codes of the curated layer's decision rows (part of its data contract).
REASON_BENCHMARK_MATCH = "decontam.benchmark_match"  # action "remove": the record is rejected
REASON_MASKED = "decontam.masked"  # action "mask": the matched spans are replaced, the record is kept

# Which rule flagged a match (the ``rule`` column of the curated layer's ``contamination`` table).
RULE_CONTAINMENT = "containment"  # containment >= tau
RULE_LONG_NGRAM = "long_ngram"  # a long item (>= long_item_tokens) shares >= long_item_min_ngrams n-grams


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
    # dual rule: a protected text of at least long_item_tokens tokens is also flagged when the
    # record holds at least long_item_min_ngrams of its (non-suppressed) n-grams, whatever the
    # containment; None turns the second rule off (containment >= tau only)
    long_item_tokens: Optional[int] = 100
    long_item_min_ngrams: int = 1
    # per-benchmark template n-grams: an n-gram in more than template_share of one benchmark's
    # items (and in at least template_min_items of them) is that benchmark's boilerplate, not evidence
    template_share: float = 0.1
    template_min_items: int = 3
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
        if self.long_item_tokens is not None and self.long_item_tokens < max(self.n, self.short_item_tokens):
            raise ValueError(
                f"long_item_tokens ({self.long_item_tokens}) must be at least n ({self.n}) and "
                f"short_item_tokens ({self.short_item_tokens}): long items are checked with n-grams of length n"
            )
        if self.long_item_min_ngrams < 1:
            raise ValueError("long_item_min_ngrams must be >= 1")
        if not (0.0 < self.template_share <= 1.0):
            raise ValueError(f"template_share must be in (0, 1], got {self.template_share}")
        if self.template_min_items < 2:
            raise ValueError("template_min_items must be >= 2 (an n-gram of one item is never a template)")
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
