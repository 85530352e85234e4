"""``fineweb``: the line-shape rules FineWeb added on top of C4 and Gopher (datatrove ``FineWebQualityFilter``).

Too few lines ending in terminal punctuation, too many short lines, characters in repeated
lines, or too many newlines per word mark menus, listings and boilerplate that pass the other
filters. Terminal punctuation is the Unicode Sentence_Terminal characters of the scripts in
common modern use; in unspaced mode the short-line rule measures display width. Because C4
removes nothing here, this filter judges the whole text, not C4's cleaned text as in the
FineWeb pipeline (docs/curation.md, "Quality").
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from corpus_assets.domain.curate.quality.base import PROSE, FilterConfig, QualityFilter, Reject, fmt, ratio
from corpus_assets.domain.curate.quality.stats import TextStats

# Sentence_Terminal characters of the scripts in common modern use (datatrove: all 159 of them)
TERMINAL_PUNCTUATION = (
    ".", "!", "?", "։", "؟", "۔", "؞", "܀", "܁", "܂", "߹", "।", "॥", "၊", "။", "።", "፧", "፨", "᙮",
    "។", "៕", "᠃", "᠉", "‼", "‽", "⁇", "⁈", "⁉", "。", "꓿", "﹒", "﹖", "﹗", "！", "．", "？", "｡",
)  # fmt: skip


class FineWebConfig(FilterConfig):
    line_punct_thr: Optional[float] = Field(0.12, ge=0, le=1)
    line_punct_exclude_zero: bool = False
    stop_chars: tuple[str, ...] = TERMINAL_PUNCTUATION
    short_line_thr: Optional[float] = Field(0.67, ge=0, le=1)
    short_line_length: int = Field(30, ge=0)
    char_duplicates_ratio: Optional[float] = Field(0.01, ge=0, le=1)
    new_line_ratio: Optional[float] = Field(0.3, ge=0)

    @field_validator("stop_chars")
    @classmethod
    def _non_empty_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or any(not s for s in v):
            raise ValueError("needs at least one entry and no empty strings")
        return v


def check(s: TextStats, c: FineWebConfig, lang: Optional[str]) -> None:
    lines = s.lines
    n_lines = len(lines)
    if c.line_punct_thr is not None:
        stop = c.stop_chars
        r = ratio(sum(1 for line in lines if line.endswith(stop)), n_lines)
        if r < c.line_punct_thr and not (r == 0 and c.line_punct_exclude_zero):
            raise Reject("fineweb.line_punctuation", f"share={fmt(r)} < {c.line_punct_thr} lines={n_lines}")
    if c.short_line_thr is not None:
        limit = c.short_line_length
        if s.unspaced_mode:
            short = sum(1 for line in lines if s.width(line) <= limit)
        else:
            short = sum(1 for line in lines if len(line) <= limit)
        r = ratio(short, n_lines)
        if r > c.short_line_thr:
            raise Reject("fineweb.short_lines", f"share={fmt(r)} > {c.short_line_thr}")
    if c.char_duplicates_ratio is not None:
        r = ratio(s.line_dups[1], len(s.text) - s.newlines)
        if r > c.char_duplicates_ratio:
            raise Reject("fineweb.dup_line_chars", f"share={fmt(r)} > {c.char_duplicates_ratio}")
    if c.new_line_ratio is not None:
        n_words = len(s.words)
        newlines = s.newlines
        if (n_words == 0 and newlines > 0) or (n_words and newlines / n_words > c.new_line_ratio):
            raise Reject("fineweb.newline_ratio", f"newlines={newlines} words={n_words} > {c.new_line_ratio}")


FILTER = QualityFilter(
    name="fineweb",
    config=FineWebConfig,
    reasons=("fineweb.line_punctuation", "fineweb.short_lines", "fineweb.dup_line_chars", "fineweb.newline_ratio"),
    check=check,
    default_apply={PROSE: {}},
    default_profiles={
        # line shapes of web prose: in documentation few lines end in punctuation (code, tables),
        # many are short, per-entry metadata repeats ("Status: Core" under each directive);
        # repetition is left to the relaxed Gopher rules, listings to the structure filter
        "documentation": {PROSE: {"enabled": False}},
        "code": {PROSE: {"enabled": False}},
        "conversation": {PROSE: {"line_punct_thr": None, "short_line_thr": None, "new_line_ratio": None}},
    },
)
