"""``pair``: the rules of a preference record as a pair (ours; no published counterpart).

A preference record teaches the difference between its two answers, so it is judged as a pair:
the shared prompt and both answers must say something (a letter or digit), and the answers must
differ. Neither answer is judged as a text of its own: a deliberately worse ``rejected`` must
not drop the pair, and dropping one side would break it. A record check only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from corpus_assets.domain.curate.quality.base import FilterConfig, QualityFilter, Reject
from corpus_assets.domain.curate.quality.stats import count_alnum

if TYPE_CHECKING:
    from corpus_assets.domain.canonical.records import Record


class PairConfig(FilterConfig):
    min_alnum_chars: int = Field(1, ge=0)  # prompt / answer with fewer letters/digits is empty
    fold_identical: bool = True  # compare answers after case and whitespace folding (else exact)


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def check_record(record: "Record", c: PairConfig, text: Optional[str]) -> None:
    """``text``: the judged text of a preference record, its shared prompt."""
    p = record.payload
    if p.kind != "preference":
        return
    if count_alnum(text or "", c.min_alnum_chars) < c.min_alnum_chars:
        raise Reject("pair.empty_prompt", f"prompt_alnum_chars<{c.min_alnum_chars}")
    for side in ("chosen", "rejected"):
        if count_alnum(getattr(p, side).content, c.min_alnum_chars) < c.min_alnum_chars:
            raise Reject("pair.empty_answer", f"{side}_alnum_chars<{c.min_alnum_chars}")
    a, b = p.chosen.content, p.rejected.content
    if (_fold(a) == _fold(b)) if c.fold_identical else (a == b):
        raise Reject("pair.identical_answers", f"chars={len(a)},{len(b)}")


FILTER = QualityFilter(
    name="pair",
    config=PairConfig,
    reasons=("pair.empty_prompt", "pair.empty_answer", "pair.identical_answers"),
    check_record=check_record,
    record_types=("preference",),
    default_apply={"preference/*": {}},
)
