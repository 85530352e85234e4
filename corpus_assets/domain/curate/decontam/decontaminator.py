"""The per-record decontamination decision: the one path the curated layer and the benchmark run.

``Decontaminator.decide`` takes a record's text fields (path -> text, in the order to check
them) and asks the index, field by field, for the flagged protected texts (containment >= tau,
or the long n-gram rule for long texts).
With action ``remove`` the first field with a match decides: the record is rejected with
``decontam.benchmark_match`` and the matched item ids in the detail, and the remaining fields are
not checked. With action ``mask`` every field is checked and each matched field keeps its text
with the matched spans replaced; the record is kept, modified, with ``decontam.masked``. The
decision also gives the rows of the curated layer's ``contamination`` table. ``check`` is the
same decision plus a running ``ContaminationReport``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Optional, Union

from corpus_assets.domain.curate.decontam.config import (
    REASON_BENCHMARK_MATCH,
    REASON_MASKED,
    DecontamConfig,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.curate.decontam.index import ContaminationIndex, Match
from corpus_assets.domain.curate.decontam.masking import DEFAULT_PLACEHOLDER, mask_spans
from corpus_assets.domain.curate.decontam.report import ContaminationReport

__all__ = ["TEXT_FIELD", "DecontamDecision", "Decontaminator", "FieldMatches"]

TEXT_FIELD = "text"  # the field name ``check`` gives a plain string
_DETAIL_ITEMS = 5  # matched item ids named in a rejection's detail; the rest are counted


@dataclass(frozen=True)
class FieldMatches:
    """The flagged matches (containment >= tau, or the long n-gram rule) found in one text field."""

    field: str  # the field's path in the record, e.g. "text", "messages[1].content"
    matches: tuple[Match, ...]  # sorted by containment (descending), then benchmark, item id, field


@dataclass(frozen=True)
class DecontamDecision:
    """What happens to one record: keep it, remove it, or keep it with matched spans masked."""

    action: Literal["keep", "remove", "mask"]
    reason: Optional[str] = None  # REASON_BENCHMARK_MATCH (remove), REASON_MASKED (mask), None (keep)
    detail: str = ""  # remove: "matched <benchmark>/<item id>, ... (+N more)"
    fields: tuple[FieldMatches, ...] = ()  # the fields with a flagged match, in the order checked
    masked: Mapping[str, str] = field(default_factory=dict)  # mask: field -> text with the spans replaced
    best_below_tau: float = 0.0  # highest containment among candidates that were not flagged

    @property
    def flagged(self) -> bool:
        return bool(self.fields)

    @property
    def matches(self) -> tuple[Match, ...]:
        """Every flagged match, field by field."""
        return tuple(m for fm in self.fields for m in fm.matches)

    @property
    def matched_fields(self) -> tuple[str, ...]:
        return tuple(fm.field for fm in self.fields)

    @property
    def matched_item_ids(self) -> tuple[str, ...]:
        return tuple(sorted({m.item_key for m in self.matches}))

    def contamination_rows(self, record_id: str, source_id: str, decided_by: str = "decontam") -> list[dict]:
        """Rows of the curated layer's ``contamination`` table: one per flagged match.

        ``decided_by`` is the stage whose decision stands for the record: ``decontam`` when this
        decision was applied, or the stage that rejected the record first (``quality``); then the
        action is ``none`` (the match is reported, nothing was done because of it)."""
        action = self.action if decided_by == "decontam" else "none"
        return [
            {
                "record_id": record_id,
                "source_id": source_id,
                "benchmark": m.benchmark,
                "item_id": m.item_id,
                "field": m.field,
                "containment": float(m.containment),
                "matched_ngrams": int(m.matched_ngrams),
                "item_ngrams": int(m.item_ngrams),
                "rule": m.rule,
                "action": action,
                "decided_by": decided_by,
            }
            for m in self.matches
        ]


def _rejection_detail(item_ids: list[str]) -> str:
    more = len(item_ids) - _DETAIL_ITEMS
    return "matched " + ", ".join(item_ids[:_DETAIL_ITEMS]) + (f" (+{more} more)" if more > 0 else "")


class Decontaminator:
    """Applies the policy of an index to records. Cheap to construct (the report it keeps for
    ``check`` is built on first use)."""

    def __init__(
        self,
        index: Optional[ContaminationIndex],
        config: Optional[DecontamConfig] = None,
        registry: Optional[EvalRegistry] = None,
        placeholder: str = DEFAULT_PLACEHOLDER,
    ) -> None:
        """``Decontaminator(index)`` applies the index's policy; ``Decontaminator(None, config)``
        with a disabled config keeps every record and reports that nothing was checked."""
        self.config = index.config if index is not None else config
        if self.config is None:
            raise ValueError("a Decontaminator needs an index, or a disabled config")
        if self.config.enabled and index is None:
            raise ValueError("decontamination is enabled but no ContaminationIndex was given")
        self.index = index if self.config.enabled else None
        self.placeholder = placeholder
        self._registry = registry
        self._report: Optional[ContaminationReport] = None

    @classmethod
    def from_registry(cls, registry: EvalRegistry, config: DecontamConfig) -> "Decontaminator":
        if not config.enabled:
            return cls(None, config, registry)
        return cls(ContaminationIndex.build(registry, config))

    @property
    def report(self) -> ContaminationReport:
        """The report of every record passed to ``check`` so far."""
        if self._report is None:
            self._report = (
                ContaminationReport.for_index(self.index) if self.index is not None
                else ContaminationReport.disabled(self.config, self._registry)
            )
        return self._report

    def decide(self, texts: Mapping[str, str]) -> DecontamDecision:
        """The decision for one record whose text fields are ``texts`` (checked in that order)."""
        if self.index is None:
            return DecontamDecision("keep")
        mask = self.config.action == "mask"
        flagged: list[FieldMatches] = []
        masked: dict[str, str] = {}
        below = 0.0
        for name, text in texts.items():
            cands = self.index.candidates(text)
            hits = tuple(m for m in cands if m.flagged)
            below = max(below, max((m.containment for m in cands if not m.flagged), default=0.0))
            if not hits:
                continue
            flagged.append(FieldMatches(name, hits))
            if not mask:
                break  # the first matched field rejects the record
            masked[name] = mask_spans(text, [sp for m in hits for sp in m.spans], self.placeholder)
        if not flagged:
            return DecontamDecision("keep", best_below_tau=below)
        if mask:
            return DecontamDecision("mask", REASON_MASKED, "", tuple(flagged), masked, below)
        ids = sorted({m.item_key for m in flagged[0].matches})
        return DecontamDecision("remove", REASON_BENCHMARK_MATCH, _rejection_detail(ids), tuple(flagged), {}, below)

    def check(
        self, record: Union[str, Mapping[str, str]], *, source: str, record_id: Optional[str] = None
    ) -> DecontamDecision:
        """``decide``, counted in ``report``. A plain string is a record with one field, ``"text"``."""
        texts = {TEXT_FIELD: record} if isinstance(record, str) else record
        decision = self.decide(texts)
        if self.index is not None:
            self.report.add(decision, texts, source=source, record_id=record_id)
        return decision
