"""The statistics every text filter reads, computed once per text and shared by all of them.

Filters must not tokenize on their own: ``judge_text`` / ``judge_record`` build one ``TextStats``
per text and hand it to each filter in turn, and every statistic is computed lazily, at most
once, the first time a filter asks for it. That is what keeps five filters about as fast as one.

Definitions (docs/curation.md, "Quality", has the reasoning):

- a *word* is a whitespace-delimited run (``str.split``), except that each character of a
  script written without spaces (Han, Hiragana, Katakana, Thai, Lao, Tibetan, Myanmar, Khmer)
  is a word by itself, with any CJK punctuation next to it attached;
- a *symbol word* has no letter or digit;
- *lines* are the non-blank lines with trailing whitespace removed (indentation kept);
- *paragraphs* are separated by blank lines;
- *unspaced mode*: at least ``unspaced_share`` of the non-whitespace characters belong to the
  scripts written without spaces.
"""

from __future__ import annotations

import re
from functools import cached_property
from itertools import accumulate, filterfalse
from typing import Optional

__all__ = ["TextStats", "count_alnum", "dups", "UNSPACED_RE", "ALNUM_RE", "LETTER_RE"]

# scripts written without spaces between words
_UNSPACED_CLASS = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff\u31f0-\u31ff"  # Hiragana, Katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U0003134f"  # Han extensions
)
_CJK_PUNCT = "\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
UNSPACED_RE = re.compile(f"[{_UNSPACED_CLASS}]")
# one unspaced-script character with the CJK punctuation around it, or a run of anything else
_TOKEN_RE = re.compile(f"[{_CJK_PUNCT}]*[{_UNSPACED_CLASS}][{_CJK_PUNCT}]*|[^\\s{_UNSPACED_CLASS}]+")
ALNUM_RE = re.compile(r"[^\W_]")
LETTER_RE = re.compile(r"[^\W\d_]")
_PARA_RE = re.compile(r"\n[ \t\r\f\v]*\n\s*")


def count_alnum(text: str, at_least: int) -> int:
    """Letters/digits in ``text``, counting only up to ``at_least`` (cheap on long texts)."""
    if at_least <= 0:
        return 0
    n = 0
    for _ in ALNUM_RE.finditer(text):
        n += 1
        if n >= at_least:
            break
    return n


def dups(units: list[str]) -> tuple[int, int]:
    """(number, characters) of the units that repeat an earlier unit."""
    if len(set(units)) == len(units):
        return 0, 0
    seen: set[str] = set()
    n = chars = 0
    for u in units:
        if u in seen:
            n += 1
            chars += len(u)
        else:
            seen.add(u)
    return n, chars


class TextStats:
    """Lazily computed statistics of one text; each is computed at most once."""

    def __init__(self, text: str, unspaced_share: float, ngram_scale: int = 1) -> None:
        self.text = text
        self._unspaced_share = unspaced_share
        self._ngram_scale = ngram_scale

    def head(self, chars: int) -> "TextStats":
        """Fresh statistics of the first ``chars`` characters, with the same settings."""
        return TextStats(self.text[:chars], self._unspaced_share, self._ngram_scale)

    @cached_property
    def has_unspaced(self) -> bool:
        return UNSPACED_RE.search(self.text) is not None

    @cached_property
    def words(self) -> list[str]:
        return _TOKEN_RE.findall(self.text) if self.has_unspaced else self.text.split()

    @cached_property
    def n_unspaced(self) -> int:
        return UNSPACED_RE.subn("", self.text)[1] if self.has_unspaced else 0

    @cached_property
    def nonspace_chars(self) -> int:
        return sum(map(len, self.words))

    @cached_property
    def unspaced_mode(self) -> bool:
        if not self.has_unspaced:
            return False
        return self.n_unspaced >= self._unspaced_share * self.nonspace_chars

    @cached_property
    def ngram_scale(self) -> int:
        """How many words an n-gram rule's ``n`` stands for: the configured scale in unspaced
        mode (words are characters there), else 1."""
        return self._ngram_scale if self.unspaced_mode else 1

    @cached_property
    def _mixed(self) -> tuple[int, int, int, int, int]:
        """For texts with unspaced-script characters: (symbol words, their characters, words with a
        letter, unspaced-script words, characters of the other words with a letter or digit). An
        unspaced-script character (combining marks included) is a letter. Purely alphabetic words
        (str.isalpha, C speed) need no further look."""
        words = self.words
        rest = list(filterfalse(str.isalpha, words))
        n_sym = sym_chars = 0
        n_letter = len(words) - len(rest)
        unspaced = UNSPACED_RE.search
        letter = LETTER_RE.search
        alnum = ALNUM_RE.search
        for w in rest:
            if letter(w) is not None or unspaced(w) is not None:
                n_letter += 1
            elif alnum(w) is None:
                n_sym += 1
                sym_chars += len(w)
        unspaced_words = list(filter(unspaced, words))
        spaced_chars = self.nonspace_chars - sym_chars - sum(map(len, unspaced_words))
        return n_sym, sym_chars, n_letter, len(unspaced_words), spaced_chars

    @cached_property
    def _spaced(self) -> tuple[int, int, int]:
        """For texts without unspaced-script characters: (symbol words, their characters, words
        with a letter). Only the words that are not purely alphabetic (str.isalpha, C speed) are
        looked at one by one."""
        rest = list(filterfalse(str.isalpha, self.words))
        n_sym = sym_chars = 0
        n_letter = len(self.words) - len(rest)
        letter = LETTER_RE.search
        alnum = ALNUM_RE.search
        for w in rest:
            if letter(w) is not None:
                n_letter += 1
            elif alnum(w) is None:
                n_sym += 1
                sym_chars += len(w)
        return n_sym, sym_chars, n_letter

    @cached_property
    def symbol_words(self) -> tuple[int, int]:
        """(count, characters) of words without a letter or digit."""
        if self.has_unspaced:
            return self._mixed[0], self._mixed[1]
        return self._spaced[0], self._spaced[1]

    @cached_property
    def letter_words(self) -> int:
        return self._mixed[2] if self.has_unspaced else self._spaced[2]

    @cached_property
    def mean_word_length(self) -> Optional[float]:
        """Mean length of the words with a letter or digit, unspaced-script words left out (they
        are one character); ``None`` if there is no such word."""
        if self.has_unspaced:
            n = self.content_words - self._mixed[3]
            return self._mixed[4] / n if n > 0 else None
        n = self.content_words
        return (self.nonspace_chars - self.symbol_words[1]) / n if n > 0 else None

    @cached_property
    def content_words(self) -> int:
        """Words with a letter or digit (the ones the word minimum counts)."""
        return len(self.words) - self.symbol_words[0]

    @cached_property
    def word_set(self) -> set[str]:
        return set(self.words)

    @cached_property
    def lines(self) -> list[str]:
        """Non-blank lines, trailing whitespace removed."""
        return [line for line in map(str.rstrip, self.text.split("\n")) if line]

    @cached_property
    def line_dups(self) -> tuple[int, int]:
        """(number, characters) of the lines that repeat an earlier line."""
        return dups(self.lines)

    @cached_property
    def paragraphs(self) -> list[str]:
        stripped = self.text.strip()
        return _PARA_RE.split(stripped) if stripped else []

    @cached_property
    def newlines(self) -> int:
        return self.text.count("\n")

    @cached_property
    def word_prefix_chars(self) -> list[int]:
        """``[0, len(w0), len(w0) + len(w1), ...]``: the characters of words ``i..j`` are
        ``p[j + 1] - p[i]``."""
        return list(accumulate(map(len, self.words), initial=0))

    def width(self, line: str) -> int:
        """Line length; in unspaced mode an unspaced-script character counts 2 (full width)."""
        if self.unspaced_mode:
            return len(line) + UNSPACED_RE.subn("", line)[1]
        return len(line)

    def line_words(self, line: str) -> list[str]:
        """The words of one line, by the same definition as ``words``."""
        return _TOKEN_RE.findall(line) if self.has_unspaced else line.split()
