"""The contamination report: what was checked, how, and what was found.

Counts only, never benchmark text, and never a claim that data is free of evaluation material:
a report without matches says "no matches found under this method", and always states the
method, the registry digest, what was not checked (too short, all n-grams suppressed) and the
limits of lexical matching. It is fed the decisions of a ``Decontaminator`` — also for records
another stage rejected first, counted apart — and merges across partitions.

``coverage_per_benchmark`` (protected / checked / unchecked texts per benchmark) and
``limits_text`` are what the curated layer's manifest, its Dagster metadata and the release data
card print, so every place states the same counts and the same limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from corpus_assets.domain.curate.decontam.config import (
    DECONTAM_CODE_VERSION,
    REASON_BENCHMARK_MATCH,
    REASON_MASKED,
    RULE_CONTAINMENT,
    RULE_LONG_NGRAM,
    DecontamConfig,
    decontam_policy_version,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.curate.decontam.index import (
    UNIT_ALL_SUPPRESSED,
    UNIT_CHECKED,
    UNIT_LONG_RULE,
    UNIT_TOO_SHORT,
    ContaminationIndex,
)
from corpus_assets.domain.curate.decontam.masking import merge_spans
from corpus_assets.domain.curate.decontam.normalize import NORMALIZATION_DESCRIPTION, normalize_tokens

if TYPE_CHECKING:
    from corpus_assets.domain.curate.decontam.decontaminator import DecontamDecision

__all__ = ["ContaminationReport", "coverage_per_benchmark", "limits_text"]

_SAMPLE_LIMIT = 50
COVERAGE_KEYS = ("protected", UNIT_CHECKED, UNIT_TOO_SHORT, UNIT_ALL_SUPPRESSED, UNIT_LONG_RULE)


def coverage_per_benchmark(units: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """benchmark -> {protected, checked, too_short, all_ngrams_suppressed, long_rule}: the
    protected texts of each benchmark (all selected fields) and what became of them. ``units``
    is ``ContaminationIndex.unit_summary()`` (benchmark -> field -> counts)."""
    return {
        b: {k: int(sum(c.get(k, 0) for c in fs.values())) for k in COVERAGE_KEYS}
        for b, fs in sorted(units.items())
    }


def limits_text(method: Mapping[str, Any], coverage: Optional[Mapping[str, Mapping[str, int]]] = None) -> list[str]:
    """The limits of the check, as paragraphs, with the unchecked counts when ``coverage`` is given.

    ``method`` holds the settings (``short_n``, ``long_item_tokens``, ``long_item_min_ngrams``,
    ``n``, ``tau``; a ``DecontamConfig.method()`` or the ``method`` part of a report's dict)."""
    short_n = method.get("short_n", "?")
    long_tokens = method.get("long_item_tokens")
    out = [
        "This is a lexical check. It does not detect translations, rewritten code, heavy rewrites or "
        "synthetic restatements that keep an item's answer (Yang et al. 2023); a light paraphrase is "
        + (
            f"found only in protected texts of at least {long_tokens} tokens (the long n-gram rule: "
            f"{method.get('long_item_min_ngrams', 1)} shared {method.get('n', '?')}-gram(s)) or when "
            f"containment still reaches tau = {method.get('tau', '?')}."
            if long_tokens is not None
            else f"found only when containment still reaches tau = {method.get('tau', '?')}."
        )
    ]
    if coverage:
        total = sum(c.get("protected", 0) for c in coverage.values())
        short = sum(c.get(UNIT_TOO_SHORT, 0) for c in coverage.values())
        supp = sum(c.get(UNIT_ALL_SUPPRESSED, 0) for c in coverage.values())
        per = ", ".join(
            f"{b} {c.get(UNIT_TOO_SHORT, 0)} of {c.get('protected', 0)}"
            for b, c in sorted(coverage.items()) if c.get(UNIT_TOO_SHORT, 0)
        )
        out.append(
            f"Not checked: {short} of {total} protected texts have fewer than {short_n} tokens"
            + (f" ({per})" if per else "")
            + f", and {supp} have only suppressed (too common or benchmark-template) n-grams. "
            "Contamination by these texts cannot be seen by this method."
        )
    else:
        out.append(
            f"Not checked: protected texts with fewer than {short_n} tokens, and texts whose n-grams "
            "were all suppressed (too common, or a benchmark's template)."
        )
    out.append(
        "The check shows what was checked and what was removed; it cannot show that the data holds no "
        "evaluation material, and benchmarks outside the registry were not checked at all."
    )
    return out


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
        "long_item_tokens": config.long_item_tokens,
        "long_item_min_ngrams": config.long_item_min_ngrams,
        "template_share": config.template_share,
        "template_min_items": config.template_min_items,
        "action": config.action,
        "fields": list(config.fields),
    }


def _method_fields_of(report: "ContaminationReport") -> dict:
    return {k: getattr(report, k) for k in ("n", "short_n", "tau", "long_item_tokens", "long_item_min_ngrams")}


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
    long_item_tokens: Optional[int]
    long_item_min_ngrams: int
    template_share: float
    template_min_items: int
    action: str
    fields: list[str]
    suppressed_ngrams: dict[int, int]
    template_ngrams: dict[str, dict[int, int]]  # benchmark -> n -> distinct template n-grams suppressed
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
    records_flagged_per_rule: dict[str, int] = field(default_factory=dict)  # records with a match of that rule
    # flagged records another stage rejected first (stage -> records): reported, nothing applied
    records_flagged_rejected_earlier: dict[str, int] = field(default_factory=dict)
    flagged_sample: list[dict] = field(default_factory=list)  # first flagged (record id, items) for review

    @classmethod
    def for_index(cls, index: ContaminationIndex) -> "ContaminationReport":
        return cls(
            enabled=index.config.enabled,
            policy_version=index.policy_version,
            registry_digest=index.registry_digest,
            **_method_fields(index.config),
            suppressed_ngrams=index.suppressed_ngrams(),
            template_ngrams=index.template_ngrams(),
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
            template_ngrams={},
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
        decided_by: str = "decontam",
    ) -> None:
        """Count one record's decision; ``texts`` are the record's text fields it was made on.

        ``decided_by`` other than ``decontam`` (e.g. ``quality``): the record was rejected by that
        stage first; its matches are counted (flagged, per benchmark, per rule) and apart in
        ``records_flagged_rejected_earlier``, but not as removed or masked."""
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
        for r in sorted({m.rule for m in decision.matches if m.rule}):
            self.records_flagged_per_rule[r] = self.records_flagged_per_rule.get(r, 0) + 1
        if decided_by != "decontam":
            self.records_flagged_rejected_earlier[decided_by] = self.records_flagged_rejected_earlier.get(decided_by, 0) + 1
        elif decision.action == "remove":
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
                    "action": decision.action if decided_by == "decontam" else "none",
                    "decided_by": decided_by,
                    "items": [
                        {"item": m.item_key, "field": m.field, "record_field": fm.field,
                         "containment": round(m.containment, 4), "rule": m.rule}
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
        for name in ("records_checked_per_source", "records_flagged_per_source", "records_flagged_per_benchmark",
                     "records_flagged_per_rule", "records_flagged_rejected_earlier"):
            mine = getattr(self, name)
            for k, v in getattr(other, name).items():
                mine[k] = mine.get(k, 0) + v
        for b, ids in other.items_matched_per_benchmark.items():
            self.items_matched_per_benchmark.setdefault(b, set()).update(ids)
        room = _SAMPLE_LIMIT - len(self.flagged_sample)
        self.flagged_sample.extend(other.flagged_sample[: max(0, room)])
        return self

    # -- output -------------------------------------------------------------------------------

    def coverage(self) -> dict[str, dict[str, int]]:
        """benchmark -> {protected, checked, too_short, all_ngrams_suppressed, long_rule}."""
        return coverage_per_benchmark(self.units)

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
                "long_item_tokens": self.long_item_tokens,
                "long_item_min_ngrams": self.long_item_min_ngrams,
                "rules": [
                    f"{RULE_CONTAINMENT}: containment >= tau",
                    f"{RULE_LONG_NGRAM}: a protected text of >= long_item_tokens tokens shares "
                    ">= long_item_min_ngrams n-grams with the record" if self.long_item_tokens is not None
                    else f"{RULE_LONG_NGRAM}: off",
                ],
                "max_ngram_item_frequency": self.max_ngram_item_frequency,
                "suppressed_ngrams": {str(k): v for k, v in sorted(self.suppressed_ngrams.items())},
                "template_share": self.template_share,
                "template_min_items": self.template_min_items,
                "template_ngrams": {
                    b: {str(k): v for k, v in sorted(c.items())} for b, c in sorted(self.template_ngrams.items())
                },
                "retrieval": "hashed n-gram index (xxh64), candidates verified token by token",
                "action": self.action,
                "fields": list(self.fields),
            },
            "registry_items_per_benchmark": dict(self.registry_items_per_benchmark),
            "protected_texts": self.units,
            "coverage": self.coverage(),
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
            "records_flagged_per_rule": dict(sorted(self.records_flagged_per_rule.items())),
            "records_flagged_rejected_earlier": dict(sorted(self.records_flagged_rejected_earlier.items())),
            "limits": limits_text(_method_fields_of(self), self.coverage()),
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
            f"- threshold: a record is flagged for an item when C_n >= tau = {self.tau}"
            + (
                f", or, for a protected text of at least {self.long_item_tokens} tokens, when the record "
                f"shares at least {self.long_item_min_ngrams} of its n-grams (the long n-gram rule)"
                if self.long_item_tokens is not None else " (long n-gram rule off)"
            ),
            f"- common n-grams suppressed: those in more than {self.max_ngram_item_frequency} registry "
            "items; suppressed: "
            + (", ".join(f"{v} distinct {k}-grams" for k, v in sorted(self.suppressed_ngrams.items())) or "none"),
            f"- benchmark templates suppressed: n-grams in more than {self.template_share:.0%} of one "
            f"benchmark's items (and at least {self.template_min_items}); suppressed: "
            + (", ".join(
                f"{b} " + "/".join(f"{v} {k}-grams" for k, v in sorted(c.items()))
                for b, c in sorted(self.template_ngrams.items()) if any(c.values())
            ) or "none"),
            "- retrieval: hashed n-gram index over the registry; every candidate verified token by token",
            f"- fields protected: {', '.join(self.fields)}",
            f"- action on a flagged record: {self.action} (reason code `{_reason(self.action)}`)",
            "",
            "## Registry",
            "",
            f"| benchmark | items | field | protected texts | checked with n = {self.n} | checked with n = {self.short_n} "
            "| unchecked: too short | unchecked: all n-grams suppressed | long n-gram rule applies |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for b, n_items in sorted(self.registry_items_per_benchmark.items()):
            fs = self.units.get(b, {})
            for f, c in sorted(fs.items()):
                L.append(
                    f"| {b} | {n_items} | {f} | {c.get('protected', 0)} | {c.get(f'n={self.n}', 0)} "
                    f"| {c.get(f'n={self.short_n}', 0) if self.short_n != self.n else 0} | {c.get(UNIT_TOO_SHORT, 0)} "
                    f"| {c.get(UNIT_ALL_SUPPRESSED, 0)} | {c.get(UNIT_LONG_RULE, 0)} |"
                )
            if not fs:
                L.append(f"| {b} | {n_items} | (no protected field selected) | 0 | 0 | 0 | 0 | 0 | 0 |")
        L += [
            "",
            "## Records",
            "",
            f"- records checked: {self.records_checked} ({self.chars_checked} characters)",
            f"- records flagged: {self.records_flagged} (removed {self.records_removed}, masked "
            f"{self.records_masked}; {self.chars_masked} characters masked; {self.tokens_removed} "
            "normalized tokens taken out)",
            f"- records sharing some n-gram with an item but not flagged (kept): {self.records_below_tau}",
            "- records flagged per rule: "
            + (", ".join(f"{r} {c}" for r, c in sorted(self.records_flagged_per_rule.items())) or "none"),
            "- flagged records another stage rejected first (reported, nothing applied): "
            + (", ".join(f"{st} {c}" for st, c in sorted(self.records_flagged_rejected_earlier.items())) or "none"),
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
        L += ["", "## Limits", ""]
        for para in limits_text(_method_fields_of(self), self.coverage()):
            L += [para, ""]
        return "\n".join(L) + "\n"
