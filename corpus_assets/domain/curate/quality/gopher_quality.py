"""``gopher_quality``: does the text read like human prose? (Gopher, Rae et al. 2021, Table A1)

Published thresholds as in datatrove's ``GopherQualityFilter``: a word count range, a mean word
length range, few ``#`` and ellipses per word, not all bullets, few lines ending in an ellipsis,
mostly alphabetic words and a few English stop words. Every rule reads the shared statistics;
where we differ from datatrove (word definition, line ratios, stop-word forms, bullets,
unspaced scripts) is written up in docs/curation.md, "Quality".

Answers (messages, instruction, reasoning, preference prompts) run it relaxed: one word is
enough, the ratio rules start at 50 words, and the word-length minimum, bullet, alphabetic and
stop-word rules are off (short, listy, numeric, code or non-English answers are legitimate).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator

from corpus_assets.domain.curate.quality.base import ANSWERS, PROSE, FilterConfig, QualityFilter, Reject, fmt, ratio
from corpus_assets.domain.curate.quality.stats import TextStats

_STOP_SUFFIXES = ("", ",", ".", ";", ":", "!", "?")


class GopherQualityConfig(FilterConfig):
    min_doc_words: Optional[int] = Field(50, ge=0)
    max_doc_words: Optional[int] = Field(100_000, ge=1)
    min_avg_word_length: Optional[float] = Field(3.0, ge=0)
    max_avg_word_length: Optional[float] = Field(10.0, ge=0)
    max_symbol_word_ratio: Optional[float] = Field(0.1, ge=0)  # '#' and ellipses, each, per word
    max_bullet_lines_ratio: Optional[float] = Field(0.9, ge=0, le=1)
    max_ellipsis_lines_ratio: Optional[float] = Field(0.3, ge=0, le=1)
    min_alpha_words_ratio: Optional[float] = Field(0.8, ge=0, le=1)  # datatrove: max_non_alpha_words_ratio
    min_stop_words: Optional[int] = Field(2, ge=0)  # distinct stop words present
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
    stop_words_lang: Optional[str] = "en"  # run the stop-word rule only for this lang (and "und"); None: always
    bullet_prefixes: tuple[str, ...] = ("•", "-", "*", "‣", "◦", "▪", "●")
    min_words_for_ratios: int = Field(0, ge=0)  # fewer words: skip every rule after the word counts

    @field_validator("stop_words", "bullet_prefixes")
    @classmethod
    def _non_empty_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("entries must be non-empty strings")
        return v


def check(s: TextStats, c: GopherQualityConfig, lang: Optional[str]) -> None:
    n_content = s.content_words
    if c.min_doc_words is not None and n_content < c.min_doc_words:
        raise Reject("gopher_quality.too_few_words", f"words={n_content} < {c.min_doc_words}")
    if c.max_doc_words is not None and n_content > c.max_doc_words:
        raise Reject("gopher_quality.too_many_words", f"words={n_content} > {c.max_doc_words}")
    if n_content < c.min_words_for_ratios:
        return
    n_words = len(s.words)
    mean = None
    if not s.unspaced_mode and (c.min_avg_word_length is not None or c.max_avg_word_length is not None):
        mean = s.mean_word_length
    if mean is not None:
        if c.min_avg_word_length is not None and mean < c.min_avg_word_length:
            raise Reject("gopher_quality.short_mean_word_length", f"mean={fmt(mean)} < {c.min_avg_word_length}")
        if c.max_avg_word_length is not None and mean > c.max_avg_word_length:
            raise Reject("gopher_quality.long_mean_word_length", f"mean={fmt(mean)} > {c.max_avg_word_length}")
    if c.max_symbol_word_ratio is not None:
        r = ratio(s.text.count("#"), n_words)
        if r > c.max_symbol_word_ratio:
            raise Reject("gopher_quality.hash_ratio", f"ratio={fmt(r)} > {c.max_symbol_word_ratio}")
        r = ratio(s.text.count("...") + s.text.count("…"), n_words)
        if r > c.max_symbol_word_ratio:
            raise Reject("gopher_quality.ellipsis_ratio", f"ratio={fmt(r)} > {c.max_symbol_word_ratio}")
    lines = s.lines
    if c.max_bullet_lines_ratio is not None:
        prefixes = c.bullet_prefixes
        r = ratio(sum(1 for line in lines if line.lstrip().startswith(prefixes)), len(lines))
        if r > c.max_bullet_lines_ratio:
            raise Reject("gopher_quality.bullet_lines", f"share={fmt(r)} > {c.max_bullet_lines_ratio}")
    if c.max_ellipsis_lines_ratio is not None:
        r = ratio(sum(1 for line in lines if line.endswith(("...", "…"))), len(lines))
        if r > c.max_ellipsis_lines_ratio:
            raise Reject("gopher_quality.ellipsis_lines", f"share={fmt(r)} > {c.max_ellipsis_lines_ratio}")
    if c.min_alpha_words_ratio is not None:
        r = ratio(s.letter_words, n_words)
        if r < c.min_alpha_words_ratio:
            raise Reject("gopher_quality.few_alpha_words", f"share={fmt(r)} < {c.min_alpha_words_ratio}")
    if c.min_stop_words and not s.unspaced_mode and (
        c.stop_words_lang is None or lang in (None, "und", c.stop_words_lang)
    ):
        ws = s.word_set
        found = 0
        for sw in c.stop_words:
            for form in {sw.lower(), sw.capitalize(), sw.upper()}:
                if any(form + suffix in ws for suffix in _STOP_SUFFIXES):
                    found += 1
                    break
        if found < c.min_stop_words:
            raise Reject("gopher_quality.few_stop_words", f"stop_words={found} < {c.min_stop_words}")


# answers: one word is enough, ratio rules from 50 words, the prose-only rules off
ANSWER_OVERRIDES: dict[str, Any] = {
    "min_doc_words": 1,
    "min_words_for_ratios": 50,
    "min_avg_word_length": None,
    "max_bullet_lines_ratio": None,
    "min_alpha_words_ratio": None,
    "min_stop_words": None,
}

# documentation: identifiers are long words, code tokens and numbers are not alphabetic, `#` starts
# shell and configuration comments and `...` a doctest continuation, reference lists are bullets
DOCUMENTATION_OVERRIDES: dict[str, Any] = {
    "max_avg_word_length": 15,
    "min_alpha_words_ratio": 0.5,
    "max_symbol_word_ratio": 0.5,
    "max_ellipsis_lines_ratio": None,
    "max_bullet_lines_ratio": None,
}

FILTER = QualityFilter(
    name="gopher_quality",
    config=GopherQualityConfig,
    reasons=(
        "gopher_quality.too_few_words",
        "gopher_quality.too_many_words",
        "gopher_quality.short_mean_word_length",
        "gopher_quality.long_mean_word_length",
        "gopher_quality.hash_ratio",
        "gopher_quality.ellipsis_ratio",
        "gopher_quality.bullet_lines",
        "gopher_quality.ellipsis_lines",
        "gopher_quality.few_alpha_words",
        "gopher_quality.few_stop_words",
    ),
    check=check,
    default_apply={PROSE: {}, **{key: ANSWER_OVERRIDES for key in ANSWERS}},
    default_profiles={
        "documentation": {PROSE: DOCUMENTATION_OVERRIDES},
        "code": {PROSE: {"enabled": False}},
        "conversation": {PROSE: {"min_doc_words": 20, "max_bullet_lines_ratio": None}},
    },
)
