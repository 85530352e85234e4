"""``sanity``: the checks every record gets, whatever its type — not empty, not absurdly long.

A text with no letter or digit carries nothing to train on, and one over ``max_chars`` (The
Stack's 1 MB file limit, in characters) is almost always a dump; both are cheap to detect and
run first, before the prose filters read statistics of the text. A conversation without any
assistant turn has no training target at all (``sanity.no_assistant_turn``, a record check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from corpus_assets.domain.curate.quality.base import DEFAULT_KEYS, FilterConfig, QualityFilter, Reject
from corpus_assets.domain.curate.quality.stats import TextStats, count_alnum

if TYPE_CHECKING:
    from corpus_assets.domain.canonical.records import Record


class SanityConfig(FilterConfig):
    min_alnum_chars: int = Field(1, ge=0)  # fewer letters/digits than this: sanity.empty
    max_chars: Optional[int] = Field(1_000_000, ge=1)  # The Stack's 1 MB file limit, in characters


def check(s: TextStats, c: SanityConfig, lang: Optional[str]) -> None:
    if c.max_chars is not None and len(s.text) > c.max_chars:
        raise Reject("sanity.too_long", f"chars={len(s.text)} > {c.max_chars}")
    if c.min_alnum_chars and count_alnum(s.text, c.min_alnum_chars) < c.min_alnum_chars:
        raise Reject("sanity.empty", f"alnum_chars<{c.min_alnum_chars}")


def check_record(record: "Record", c: SanityConfig, text: Optional[str]) -> None:
    p = record.payload
    if p.kind == "messages" and not any(m.role == "assistant" for m in p.messages):
        raise Reject("sanity.no_assistant_turn", f"messages={len(p.messages)}")


FILTER = QualityFilter(
    name="sanity",
    config=SanityConfig,
    reasons=("sanity.empty", "sanity.too_long", "sanity.no_assistant_turn"),
    check=check,
    check_record=check_record,
    default_apply={key: {} for key in DEFAULT_KEYS},
)
