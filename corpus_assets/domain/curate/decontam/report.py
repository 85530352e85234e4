"""The contamination report: what was checked, how, and what was found.

Counts only, never benchmark text, and never a claim that data is free of evaluation material:
a report without matches says "no matches found under this method", and always states the
method, the registry digest, what was not checked (too short, all n-grams suppressed) and the
limits of lexical matching. It is fed the decisions of a ``Decontaminator`` and merges across
partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional

from corpus_assets.domain.curate.decontam.config import (
    DECONTAM_CODE_VERSION,
    REASON_BENCHMARK_MATCH,
    REASON_MASKED,
    DecontamConfig,
    decontam_policy_version,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.curate.decontam.index import UNIT_ALL_SUPPRESSED, UNIT_TOO_SHORT, ContaminationIndex
from corpus_assets.domain.curate.decontam.masking import merge_spans
from corpus_assets.domain.curate.decontam.normalize import NORMALIZATION_DESCRIPTION, normalize_tokens

if TYPE_CHECKING:
    from corpus_assets.domain.curate.decontam.decontaminator import DecontamDecision

__all__ = ["ContaminationReport"]

_SAMPLE_LIMIT = 50


def _method_fields(config: DecontamConfig) -> dict:
    """The report fields that describe how checking was done (same for every report of a config)."""
    return {
        "code_version": DECONTAM_CODE_VERSION,
        "normalization": NORMALIZATION_DESCRIPTION,
        "n": config.n,
        "short_n": config.short_n,
        "short_item_tokens": config.short_item_tokens,
        "tau": config.tau,
        "max_ngram_item_frequency": config.max_ngram_item_frequency,
        "action": config.action,
        "fields": list(config.fields),
    }


def _reason(action: str) -> str:
    return REASON_MASKED if action == "mask" else REASON_BENCHMARK_MATCH


@dataclass
class ContaminationReport:
    """What was checked and how, and what was found. Never a statement that data is free of
    benchmark material: only "no matches found under this method"."""

    enabled: bool
    code_version: str
    policy_version: str
    registry_digest: str
    normalization: str
    n: int
    short_n: int
    short_item_tokens: int
    tau: float
    max_ngram_item_frequency: int
    action: str
    fields: list[str]
    suppressed_ngrams: dict[int, int]
    registry_items_per_benchmark: dict[str, int]
    units: dict[str, dict[str, dict[str, int]]]  # benchmark -> field -> status counts
    records_checked: int = 0
    chars_checked: int = 0
    records_checked_per_source: dict[str, int] = field(default_factory=dict)
    records_flagged: int = 0
    records_flagged_per_source: dict[str, int] = field(default_factory=dict)
    records_flagged_per_benchmark: dict[str, int] = field(default_factory=dict)
    items_matched_per_benchmark: dict[str, set] = field(default_factory=dict)
    records_removed: int = 0
    records_masked: int = 0
    chars_masked: int = 0
    tokens_removed: int = 0  # normalized tokens of removed records plus tokens inside masked spans
    records_below_tau: int = 0  # records with some shared n-gram but no item reaching tau (kept)
    flagged_sample: list[dict] = field(default_factory=list)  # first flagged (record id, items) for review

    @classmethod
    def for_index(cls, index: ContaminationIndex) -> "ContaminationReport":
        return cls(
            enabled=index.config.enabled,
            policy_version=index.policy_version,
            registry_digest=index.registry_digest,
            **_method_fields(index.config),
            suppressed_ngrams=index.suppressed_ngrams(),
            registry_items_per_benchmark=index.registry_items_per_benchmark(),
            units=index.unit_summary(),
        )

    @classmethod
    def disabled(cls, config: DecontamConfig, registry: Optional[EvalRegistry] = None) -> "ContaminationReport":
        digest = registry.digest if registry is not None else ""
        return cls(
            enabled=False,
            policy_version=decontam_policy_version(config, digest),
            registry_digest=digest,
            **_method_fields(config),
            suppressed_ngrams={},
            registry_items_per_benchmark=registry.benchmarks() if registry is not None else {},
            units={},
        )

    # -- accumulation -------------------------------------------------------------------------

    def add(
        self,
        decision: "DecontamDecision",
        texts: Mapping[str, str],
        *,
        source: str,
        record_id: Optional[str] = None,
    ) -> None:
        """Count one record's decision; ``texts`` are the record's text fields it was made on."""
        self.records_checked += 1
        self.chars_checked += sum(len(t) for t in texts.values())
        self.records_checked_per_source[source] = self.records_checked_per_source.get(source, 0) + 1
        if not decision.flagged:
            if decision.best_below_tau > 0:
                self.records_below_tau += 1
            return
        self.records_flagged += 1
        self.records_flagged_per_source[source] = self.records_flagged_per_source.get(source, 0) + 1
        for b in sorted({m.benchmark for m in decision.matches}):
            self.records_flagged_per_benchmark[b] = self.records_flagged_per_benchmark.get(b, 0) + 1
        for m in decision.matches:
            self.items_matched_per_benchmark.setdefault(m.benchmark, set()).add(m.item_id)
        if decision.action == "remove":
            self.records_removed += 1
            self.tokens_removed += sum(len(normalize_tokens(t)) for t in texts.values())
        elif decision.action == "mask":
            self.records_masked += 1
            for fm in decision.fields:
                text = texts[fm.field]
                spans = merge_spans(sp for m in fm.matches for sp in m.spans)
                self.chars_masked += sum(e - s for s, e in spans)
                self.tokens_removed += sum(len(normalize_tokens(text[s:e])) for s, e in spans)
        if len(self.flagged_sample) < _SAMPLE_LIMIT:
            self.flagged_sample.append(
                {
                    "record_id": record_id,
                    "source": source,
                    "action": decision.action,
                    "items": [
                        {"item": m.item_key, "field": m.field, "record_field": fm.field,
                         "containment": round(m.containment, 4)}
                        for fm in decision.fields
                        for m in fm.matches
                    ],
                }
            )

    def merge(self, other: "ContaminationReport") -> "ContaminationReport":
        """Add another report's counts (same policy version) into this one, e.g. across partitions."""
        if other.policy_version != self.policy_version:
            raise ValueError(f"cannot merge reports of policies {self.policy_version} and {other.policy_version}")
        for name in (
            "records_checked", "chars_checked", "records_flagged", "records_removed", "records_masked",
            "chars_masked", "tokens_removed", "records_below_tau",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("records_checked_per_source", "records_flagged_per_source", "records_flagged_per_benchmark"):
            mine = getattr(self, name)
            for k, v in getattr(other, name).items():
                mine[k] = mine.get(k, 0) + v
        for b, ids in other.items_matched_per_benchmark.items():
            self.items_matched_per_benchmark.setdefault(b, set()).update(ids)
        room = _SAMPLE_LIMIT - len(self.flagged_sample)
        self.flagged_sample.extend(other.flagged_sample[: max(0, room)])
        return self

    # -- output -------------------------------------------------------------------------------

    def unchecked_counts(self) -> dict[str, dict[str, int]]:
        """benchmark -> {too_short, all_ngrams_suppressed} protected texts that were not checked."""
        out: dict[str, dict[str, int]] = {}
        for b, fs in self.units.items():
            out[b] = {
                UNIT_TOO_SHORT: sum(c.get(UNIT_TOO_SHORT, 0) for c in fs.values()),
                UNIT_ALL_SUPPRESSED: sum(c.get(UNIT_ALL_SUPPRESSED, 0) for c in fs.values()),
            }
        return out

    def to_dict(self) -> dict:
        """JSON-ready form for manifests and Dagster metadata (no benchmark text, only ids)."""
        return {
            "enabled": self.enabled,
            "code_version": self.code_version,
            "policy_version": self.policy_version,
            "registry_digest": self.registry_digest,
            "method": {
                "measure": "containment from the benchmark side: |G_n(e) ∩ G_n(d)| / |G_n(e)|",
                "normalization": self.normalization,
                "n": self.n,
                "short_n": self.short_n,
                "short_item_tokens": self.short_item_tokens,
                "items_shorter_than_short_n": "not checked; counted as unchecked",
                "tau": self.tau,
                "max_ngram_item_frequency": self.max_ngram_item_frequency,
                "suppressed_ngrams": {str(k): v for k, v in sorted(self.suppressed_ngrams.items())},
                "retrieval": "hashed n-gram index (xxh64), candidates verified token by token",
                "action": self.action,
                "fields": list(self.fields),
            },
            "registry_items_per_benchmark": dict(self.registry_items_per_benchmark),
            "protected_texts": self.units,
            "unchecked": self.unchecked_counts(),
            "records_checked": self.records_checked,
            "chars_checked": self.chars_checked,
            "records_checked_per_source": dict(sorted(self.records_checked_per_source.items())),
            "records_flagged": self.records_flagged,
            "records_flagged_per_source": dict(sorted(self.records_flagged_per_source.items())),
            "records_flagged_per_benchmark": dict(sorted(self.records_flagged_per_benchmark.items())),
            "items_matched_per_benchmark": {
                b: len(ids) for b, ids in sorted(self.items_matched_per_benchmark.items())
            },
            "records_removed": self.records_removed,
            "records_masked": self.records_masked,
            "chars_masked": self.chars_masked,
            "tokens_removed": self.tokens_removed,
            "records_below_tau": self.records_below_tau,
            "flagged_sample": list(self.flagged_sample),
        }

    def to_markdown(self) -> str:
        """The report for people: method first, then counts, then the limits of the method."""
        L: list[str] = ["# Contamination report", ""]
        if not self.enabled:
            L += [
                "Decontamination was **disabled** by configuration: no record was checked against "
                "the evaluation registry, so this report says nothing about benchmark overlap.",
                "",
                f"- registry digest: `{self.registry_digest or '(none loaded)'}`",
                f"- policy version: `{self.policy_version}` (code `{self.code_version}`)",
            ]
            return "\n".join(L) + "\n"
        L += [
            "## What was checked and how",
            "",
            f"- evaluation registry digest: `{self.registry_digest}`",
            f"- policy version: `{self.policy_version}` (code `{self.code_version}`)",
            "- measure: n-gram containment from the benchmark side, "
            "C_n(e, d) = |G_n(e) ∩ G_n(d)| / |G_n(e)|, per protected text e and record d",
            f"- normalization (both sides): {self.normalization}",
            f"- n = {self.n} for protected texts of at least {self.short_item_tokens} tokens; "
            f"n = {self.short_n} for shorter ones; texts with fewer than {self.short_n} tokens are "
            "**not checked** (counted below)",
            f"- threshold: a record is flagged for an item when C_n >= tau = {self.tau}",
            f"- common n-grams suppressed: those in more than {self.max_ngram_item_frequency} registry "
            "items; suppressed: "
            + (", ".join(f"{v} distinct {k}-grams" for k, v in sorted(self.suppressed_ngrams.items())) or "none"),
            "- retrieval: hashed n-gram index over the registry; every candidate verified token by token",
            f"- fields protected: {', '.join(self.fields)}",
            f"- action on a flagged record: {self.action} (reason code `{_reason(self.action)}`)",
            "",
            "## Registry",
            "",
            f"| benchmark | items | field | protected texts | checked with n = {self.n} | checked with n = {self.short_n} "
            "| unchecked: too short | unchecked: all n-grams suppressed |",
            "|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for b, n_items in sorted(self.registry_items_per_benchmark.items()):
            fs = self.units.get(b, {})
            for f, c in sorted(fs.items()):
                L.append(
                    f"| {b} | {n_items} | {f} | {c.get('protected', 0)} | {c.get(f'n={self.n}', 0)} "
                    f"| {c.get(f'n={self.short_n}', 0) if self.short_n != self.n else 0} | {c.get(UNIT_TOO_SHORT, 0)} "
                    f"| {c.get(UNIT_ALL_SUPPRESSED, 0)} |"
                )
            if not fs:
                L.append(f"| {b} | {n_items} | (no protected field selected) | 0 | 0 | 0 | 0 | 0 |")
        L += [
            "",
            "## Records",
            "",
            f"- records checked: {self.records_checked} ({self.chars_checked} characters)",
            f"- records flagged: {self.records_flagged} (removed {self.records_removed}, masked "
            f"{self.records_masked}; {self.chars_masked} characters masked; {self.tokens_removed} "
            "normalized tokens taken out)",
            f"- records sharing some n-gram with an item but below tau (kept): {self.records_below_tau}",
            "",
            "| source | records checked | records flagged |",
            "|---|---:|---:|",
        ]
        for s, c in sorted(self.records_checked_per_source.items()):
            L.append(f"| {s} | {c} | {self.records_flagged_per_source.get(s, 0)} |")
        L += ["", "| benchmark | records flagged | distinct items matched |", "|---|---:|---:|"]
        for b in sorted(self.registry_items_per_benchmark):
            L.append(
                f"| {b} | {self.records_flagged_per_benchmark.get(b, 0)} "
                f"| {len(self.items_matched_per_benchmark.get(b, ()))} |"
            )
        L += ["", "## Result", ""]
        if self.records_flagged == 0:
            L.append(
                f"No matches found under this method (the normalization, n, tau and registry "
                f"`{self.registry_digest[:16]}` above) in the {self.records_checked} records checked."
            )
        else:
            L.append(
                f"{self.records_flagged} of {self.records_checked} records matched at least one protected "
                f"item under this method and were handled by the action `{self.action}`."
            )
        L += [
            "",
            "## Limits",
            "",
            "This is a lexical check. It does not detect paraphrases, translations, rewritten code or "
            "synthetic restatements that keep an item's answer (Yang et al. 2023), nor items with fewer "
            f"than {self.short_n} tokens, nor items whose n-grams were all suppressed. It shows what was "
            "checked and what was removed; it cannot show that the data holds no evaluation material.",
        ]
        return "\n".join(L) + "\n"
