"""Verdicts: run a config's compiled filters on a text or a typed record.

Which text a record is judged on depends on its type (``judged_text``): the document, the
assistant turns of a conversation, the output of an instruction, process and answer of a
reasoning trace, the shared prompt of a preference pair, the public input of a task. The text's
statistics are computed once (``TextStats``) and shared by every filter; record checks run
first, then text checks in registry order, and the first failing rule decides. A rejection
carries the deciding filter's version, a pass the policy version. Pure domain logic: no Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from corpus_assets.domain.canonical.records import Record
from corpus_assets.domain.curate.quality.base import WEB, Reject
from corpus_assets.domain.curate.quality.config import Plan, QualityConfigBase
from corpus_assets.domain.curate.quality.stats import TextStats

__all__ = ["QualityVerdict", "judge_text", "judged_text", "judge_record"]


@dataclass(frozen=True)
class QualityVerdict:
    passed: bool
    reason: Optional[str]  # None when passed, else a member of REASON_CODES
    detail: str  # numbers only, never the text
    filter_version: str  # the deciding filter's version; the policy version when passed


def _run_text(text: str, plan: Plan, config: QualityConfigBase, lang: Optional[str]) -> Optional[QualityVerdict]:
    stats = TextStats(text, config.unspaced_script_share, config.unspaced_ngram_scale)
    for check, cfg, version in plan.text_checks:
        try:
            check(stats, cfg, lang)
        except Reject as r:
            return QualityVerdict(False, r.reason, r.detail, version)
    return None


def _passed(config: QualityConfigBase) -> QualityVerdict:
    return QualityVerdict(True, None, "", config._policy_version)


def judge_text(
    text: str,
    filters: Sequence[str],
    config: QualityConfigBase,
    *,
    lang: Optional[str] = None,
    apply_key: Optional[str] = None,
    profile: Optional[str] = None,
) -> QualityVerdict:
    """Judge a plain text with the named text filters (run in ``FILTER_ORDER``, first failure
    decides). Thresholds are the config's sections, with the overrides of ``apply_key`` if given
    and the quality profile's for that key on top. ``lang`` (a langid label) gates the stop-word
    rule; ``None`` means unknown."""
    plan = config.text_plan(filters, apply_key, profile)
    return _run_text(text, plan, config, lang) or _passed(config)


def judged_text(record: Record) -> Optional[str]:
    """The text the text filters read for a record (``None``: nothing to judge)."""
    p = record.payload
    kind = p.kind
    if kind == "document":
        return p.text
    if kind == "messages":
        parts = [m.content for m in p.messages if m.role == "assistant" and m.content.strip()]
        return "\n\n".join(parts) if parts else None
    if kind == "preference":
        return "\n\n".join(m.content for m in p.prompt if m.role != "tool" and m.content.strip())
    if kind == "instruction":
        return p.output
    if kind == "reasoning":
        return f"{p.process}\n\n{p.answer}"
    if kind == "task":
        return p.input
    raise TypeError(f"unknown payload kind {kind!r}")


def judge_record(record: Record, config: QualityConfigBase, profile: str = WEB) -> QualityVerdict:
    """Judge a typed record with the filters ``config.apply`` declares for its
    ``schema_type``/``domain``, with the thresholds of its source's quality ``profile``, on the
    text ``judged_text`` picks."""
    plan = config.plan_for(record.schema_type, record.domain, profile)
    text = judged_text(record)
    for check, cfg, version in plan.record_checks:
        try:
            check(record, cfg, text)
        except Reject as r:
            return QualityVerdict(False, r.reason, r.detail, version)
    if text is None:
        return _passed(config)
    lang = record.lang if record.lang else None
    return _run_text(text, plan, config, lang) or _passed(config)
