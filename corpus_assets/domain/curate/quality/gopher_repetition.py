"""``gopher_repetition``: is the text repeating itself? (Gopher; datatrove ``GopherRepetitionFilter``)

Repeated paragraphs, repeated lines, one n-gram covering too much of the text, or repeated
n-grams covering too much of it mark boilerplate, spam and generation loops. Shares are of
characters or of units as published; the n-gram rules read at most ``ngram_window_chars``
characters so the work stays bounded on huge inputs. Differences from datatrove (the top n-gram
must occur twice, the scan that visits only repeated n-grams, codes without ``n``):
docs/curation.md, "Quality".

Code runs only the duplicated-line character share, at 0.6: repeated lines are what marks
generated tables and copy-paste loops, while the other rules measure prose. Answers run it from
50 words.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress
from typing import Optional, Sequence

from pydantic import Field, field_validator

from corpus_assets.domain.curate.quality.base import ANSWERS, CODE, PROSE, FilterConfig, QualityFilter, Reject, fmt, ratio
from corpus_assets.domain.curate.quality.stats import TextStats, dups


def _ngram_thresholds(v: tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
    seen = set()
    for n, share in v:
        if not 1 <= n <= 50:
            raise ValueError(f"n-gram size {n} outside 1..50")
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share {share} for n={n} outside [0, 1]")
        if n in seen:
            raise ValueError(f"n-gram size {n} listed twice")
        seen.add(n)
    return tuple(sorted(v))


class GopherRepetitionConfig(FilterConfig):
    dup_para_frac: Optional[float] = Field(0.3, ge=0, le=1)
    dup_para_char_frac: Optional[float] = Field(0.2, ge=0, le=1)
    dup_line_frac: Optional[float] = Field(0.3, ge=0, le=1)
    dup_line_char_frac: Optional[float] = Field(0.2, ge=0, le=1)
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    min_words_for_ratios: int = Field(0, ge=0)  # fewer words: the filter passes the text
    ngram_window_chars: Optional[int] = Field(1_000_000, ge=1)  # n-gram rules read at most this prefix

    _ngrams = field_validator("top_n_grams", "dup_n_grams")(_ngram_thresholds)


def _top_ngram_chars(words: list[str], n: int) -> int:
    """Characters covered by the most frequent n-gram (the first seen among equals) if it occurs at
    least twice, else 0. An n-gram's characters are its words joined by single spaces."""
    counts = Counter(zip(*(words[i:] for i in range(n))))
    if not counts:
        return 0
    top = max(counts.values())
    if top < 2:
        return 0
    gram = next(g for g, c in counts.items() if c == top)
    return (sum(map(len, gram)) + n - 1) * top


def _dup_ngram_shares(s: TextStats, thresholds: tuple[tuple[int, float], ...], total: int, scale: int) -> None:
    """Reject if, for some n, the duplicated n-grams hold more than the share of ``total``
    characters. Duplicated n-gram characters are counted as Gopher / datatrove do: scan left to
    right; an n-gram already seen counts its characters (words joined without separators) and the
    scan jumps past it, otherwise it is remembered and the scan moves one word.

    Only n-grams occurring twice or more can ever be "already seen", so the scan visits just those
    positions (same result, much less work); and an (n+1)-gram can only occur twice where its
    n-gram prefix does, so the positions narrow as n grows."""
    words = s.words
    n_words = len(words)
    prefix = s.word_prefix_chars
    candidates: Optional[list[int]] = None  # positions whose previous n-gram occurs twice or more
    for n_rule, share in thresholds:
        n = n_rule * scale
        m = n_words - n + 1
        if m < 2:
            return
        if candidates is None:
            positions: Sequence[int] = range(m)
            grams = list(zip(*(words[i:] for i in range(n))))
        else:
            positions = [i for i in candidates if i < m]
            grams = [tuple(words[i : i + n]) for i in positions]
        counts = Counter(grams)
        if len(counts) == len(grams):
            return  # no n-gram repeats, so no longer one does either
        repeated = list(compress(range(len(grams)), map((1).__lt__, map(counts.__getitem__, grams))))
        seen: set[tuple] = set()
        next_free = 0
        chars = 0
        for k in repeated:
            start = positions[k]
            if start < next_free:
                continue  # inside an n-gram already counted: the scan jumped over it
            gram = grams[k]
            if gram in seen:
                chars += prefix[start + n] - prefix[start]
                next_free = start + n
                r = chars / total  # total > 0: there are words
                if r > share:
                    raise Reject("gopher_repetition.dup_ngram", f"n={n_rule} share={fmt(r)} > {share}")
            else:
                seen.add(gram)
        candidates = [positions[k] for k in repeated]


def check(s: TextStats, c: GopherRepetitionConfig, lang: Optional[str]) -> None:
    if c.min_words_for_ratios and s.content_words < c.min_words_for_ratios:
        return
    total = len(s.text)
    if c.dup_para_frac is not None or c.dup_para_char_frac is not None:
        paras = s.paragraphs
        n_dup, dup_chars = dups(paras)
        r = ratio(n_dup, len(paras))
        if c.dup_para_frac is not None and r > c.dup_para_frac:
            raise Reject("gopher_repetition.dup_paragraphs", f"share={fmt(r)} > {c.dup_para_frac}")
        r = ratio(dup_chars, total)
        if c.dup_para_char_frac is not None and r > c.dup_para_char_frac:
            raise Reject("gopher_repetition.dup_paragraph_chars", f"share={fmt(r)} > {c.dup_para_char_frac}")
    if c.dup_line_frac is not None or c.dup_line_char_frac is not None:
        n_dup, dup_chars = s.line_dups
        r = ratio(n_dup, len(s.lines))
        if c.dup_line_frac is not None and r > c.dup_line_frac:
            raise Reject("gopher_repetition.dup_lines", f"share={fmt(r)} > {c.dup_line_frac}")
        r = ratio(dup_chars, total)
        if c.dup_line_char_frac is not None and r > c.dup_line_char_frac:
            raise Reject("gopher_repetition.dup_line_chars", f"share={fmt(r)} > {c.dup_line_char_frac}")
    if not c.top_n_grams and not c.dup_n_grams:
        return
    scale = s.ngram_scale
    if c.ngram_window_chars is not None and total > c.ngram_window_chars:
        # bounded work on huge texts: the n-gram rules read the first ngram_window_chars characters
        s = s.head(c.ngram_window_chars)
        total = len(s.text)
    for n, share in c.top_n_grams:
        chars = _top_ngram_chars(s.words, n * scale)
        r = ratio(chars, total)
        if r > share:
            raise Reject("gopher_repetition.top_ngram", f"n={n} share={fmt(r)} > {share}")
    if c.dup_n_grams:
        _dup_ngram_shares(s, c.dup_n_grams, total, scale)


# answers: the ratio rules from 50 words
ANSWER_OVERRIDES = {"min_words_for_ratios": 50}
# code: only the duplicated-line character share, at 0.6 (generated tables, copy-paste loops)
CODE_OVERRIDES = {
    "dup_para_frac": None,
    "dup_para_char_frac": None,
    "dup_line_frac": None,
    "dup_line_char_frac": 0.6,
    "top_n_grams": [],
    "dup_n_grams": [],
}

# documentation: reference pages repeat their structure (Syntax / Default / Context per directive,
# "Return value: New reference." per function) and code samples repeat lines
DOCUMENTATION_OVERRIDES = {
    "dup_para_frac": 0.5,
    "dup_para_char_frac": 0.4,
    "dup_line_frac": 0.5,
    "dup_line_char_frac": 0.4,
    "top_n_grams": [[2, 0.3], [3, 0.28], [4, 0.26]],
    "dup_n_grams": [[5, 0.35], [6, 0.34], [7, 0.33], [8, 0.32], [9, 0.31], [10, 0.30]],
}

FILTER = QualityFilter(
    name="gopher_repetition",
    config=GopherRepetitionConfig,
    reasons=(
        "gopher_repetition.dup_paragraphs",
        "gopher_repetition.dup_paragraph_chars",
        "gopher_repetition.dup_lines",
        "gopher_repetition.dup_line_chars",
        "gopher_repetition.top_ngram",
        "gopher_repetition.dup_ngram",
    ),
    check=check,
    default_apply={PROSE: {}, CODE: CODE_OVERRIDES, **{key: ANSWER_OVERRIDES for key in ANSWERS}},
    default_profiles={"documentation": {PROSE: DOCUMENTATION_OVERRIDES}, "code": {PROSE: CODE_OVERRIDES}},
)
