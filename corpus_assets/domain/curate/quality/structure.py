"""``structure``: is a documentation page more than a table of contents or an index? (ours)

The documentation profile relaxes the web thresholds so that reference pages, API listings and
code samples pass; this filter then rejects what a documentation site generates besides its
content: tables of contents, module / directive / keyword indexes, and pages with next to no
prose. Off by default (the web thresholds reject such pages through their line rules); the
``documentation`` quality profile switches it on.

Every line of the text is one of four kinds (in this order):

- *TOC entry*: a section number (``10.3.1.``, ``F.2``, ``Chapter 5.``, ``Part III.``,
  ``Appendix B.``) and a short title (at most ``toc_entry_chars`` characters);
- *prose*: at least ``prose_line_words`` words, ending with sentence punctuation (the FineWeb
  terminal characters) or a colon (a sentence introducing a code sample or a list), or holding
  a sentence end inside (a paragraph whose last sentence ends in a link or a name);
- *code*: it holds code characters (``( ) [ ] { } = ; < > $ # \\ / " ' ` *``), is indented by
  two spaces or more, or starts with a prompt (``>>>``, ``...``);
- *listing*: any other line — an index entry, a table row of names, a short heading.

Rules, by share of the text's words: fewer than ``min_prose_words`` words in prose lines
(``structure.few_prose_words``); more than ``max_toc_share`` in TOC entries
(``structure.table_of_contents``); more than ``max_listing_share`` in listing lines, or more than
``max_long_listing_share`` on a page of at least ``long_page_lines`` lines
(``structure.index_listing``: a reference entry's short table of columns may be mostly listing,
a page of hundreds of entries is an index). Code lines count for no rule: a page of code with a
few sentences of prose passes.
"""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field

from corpus_assets.domain.curate.quality.base import PROSE, FilterConfig, QualityFilter, Reject, fmt, ratio
from corpus_assets.domain.curate.quality.fineweb import TERMINAL_PUNCTUATION
from corpus_assets.domain.curate.quality.stats import TextStats

_TOC_RE = re.compile(r"^\s*(?:(?:\d+|[A-Z])(?:\.\d+)*\.?|(?:Chapter|Part|Appendix)\s+(?:\d+|[IVXLC]+|[A-Z])\.?)\s+\S")
_PROSE_END = (*TERMINAL_PUNCTUATION, ":", "：")
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s+[A-Z])|[。！？](?=\S)")  # a sentence ends, another starts
_CODE_RE = re.compile(r"[()\[\]{}=;<>$#\\/\"'`*]|^\s{2,}\S|^\s*(?:>>>|\.\.\.)")


class StructureConfig(FilterConfig):
    enabled: bool = False  # on in the documentation profile
    min_prose_words: Optional[int] = Field(20, ge=0)
    max_toc_share: Optional[float] = Field(0.5, ge=0, le=1)
    max_listing_share: Optional[float] = Field(0.7, ge=0, le=1)
    max_long_listing_share: Optional[float] = Field(0.6, ge=0, le=1)
    long_page_lines: int = Field(100, ge=1)
    prose_line_words: int = Field(6, ge=1)
    toc_entry_chars: int = Field(100, ge=1)


def line_kinds(s: TextStats, c: StructureConfig) -> tuple[int, int, int, int]:
    """Words in (prose, TOC entry, code, listing) lines."""
    prose = toc = code = listing = 0
    for line in s.lines:
        n = len(s.line_words(line))
        if len(line) <= c.toc_entry_chars and _TOC_RE.match(line):
            toc += n
        elif n >= c.prose_line_words and (line.endswith(_PROSE_END) or _SENTENCE_END_RE.search(line)):
            prose += n
        elif _CODE_RE.search(line):
            code += n
        else:
            listing += n
    return prose, toc, code, listing


def check(s: TextStats, c: StructureConfig, lang: Optional[str]) -> None:
    prose, toc, code, listing = line_kinds(s, c)
    words = prose + toc + code + listing
    if c.min_prose_words is not None and prose < c.min_prose_words:
        raise Reject("structure.few_prose_words", f"prose_words={prose} < {c.min_prose_words}")
    if c.max_toc_share is not None:
        r = ratio(toc, words)
        if r > c.max_toc_share:
            raise Reject("structure.table_of_contents", f"toc_share={fmt(r)} > {c.max_toc_share}")
    r = ratio(listing, words)
    if c.max_listing_share is not None and r > c.max_listing_share:
        raise Reject("structure.index_listing", f"listing_share={fmt(r)} > {c.max_listing_share}")
    if c.max_long_listing_share is not None and len(s.lines) >= c.long_page_lines and r > c.max_long_listing_share:
        raise Reject("structure.index_listing",
                     f"listing_share={fmt(r)} > {c.max_long_listing_share} lines={len(s.lines)} >= {c.long_page_lines}")


FILTER = QualityFilter(
    name="structure",
    config=StructureConfig,
    reasons=("structure.few_prose_words", "structure.table_of_contents", "structure.index_listing"),
    check=check,
    default_apply={PROSE: {}},
    default_profiles={"documentation": {PROSE: {"enabled": True}}},
)
