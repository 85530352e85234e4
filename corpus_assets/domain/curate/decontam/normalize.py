"""Text normalization and tokenization, the same function for benchmark items and documents.

Containment is only meaningful if both sides are cut into tokens the same way, and masking needs
to know where each token came from. So there is one tokenizer, ``normalize_tokens``, and the same
one with character offsets, ``tokenize_with_offsets``: maximal runs of word characters (Unicode
letters, numbers, marks, and compatibility characters whose NFKC form holds one), each CJK
ideograph or kana a token by itself, every token NFKC-normalized and case-folded. The word
characters outside ``str.isalnum()`` come from ``unicode_word_table.py`` (generated for the running
Unicode version) so a new process does not scan all code points. Details and limits:
docs/curation.md, "Decontamination".
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterable, NamedTuple

__all__ = [
    "NORMALIZATION_DESCRIPTION",
    "TokenizedText",
    "compute_extra_word_ranges",
    "normalize_tokens",
    "tokenize_with_offsets",
]

NORMALIZATION_DESCRIPTION = (
    "tokens = maximal runs of Unicode letters, numbers and combining marks (plus compatibility "
    "characters whose NFKC form contains one); every Han, hiragana and katakana character is a "
    "token by itself; each token NFKC-normalized and case-folded (and split again if that "
    "introduces a separator); whitespace, punctuation, symbols and '_' separate tokens. "
    "The same function is applied to benchmark items and to training documents."
)

_ASCII_TOKEN_RE = re.compile(r"[A-Za-z0-9]+")

# Han (CJK unified ideographs and extensions, compatibility ideographs), iteration marks,
# hiragana, katakana (incl. phonetic extensions and half-width forms).
_CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3005, 0x3007),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x2FFFF),
    (0x30000, 0x3FFFF),
)


def _ranges_to_class(ranges: Iterable[tuple[int, int]]) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
    return "".join(parts)


def _is_cjk(cp: int) -> bool:
    return cp >= 0x3005 and any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_word_char(c: str) -> bool:
    """Token characters (CJK included): letters, numbers, marks, and compatibility characters
    whose NFKC form contains a letter, number or mark. (For str patterns, ``re``'s ``[^\\W_]``
    is exactly ``str.isalnum()``, i.e. the letters and numbers.)"""
    if c.isalnum():
        return True
    k = unicodedata.category(c)
    if k[0] == "M":
        return True
    if k in ("Cn", "Cs", "Co") or unicodedata.is_normalized("NFKC", c):
        return False
    return any(unicodedata.category(x)[0] in "LNM" for x in unicodedata.normalize("NFKC", c))


def _runs(cps: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


class _TokenRegexes(NamedTuple):
    bmp: re.Pattern  # exact for text without astral characters (fast: BMP-only character sets)
    full: re.Pattern  # exact for any text
    astral: re.Pattern  # finds an astral character


def compute_extra_word_ranges() -> list[tuple[int, int]]:
    """The word characters ``str.isalnum()`` misses (marks, compatibility characters; CJK
    excepted), as inclusive code point ranges. Scans every code point (~2 s): the result for the
    running Unicode version is shipped in unicode_word_table.py (scripts/gen_unicode_word_table.py)."""
    return _runs(
        cp for cp in range(0x80, 0x110000)
        if not chr(cp).isalnum() and not _is_cjk(cp) and _is_word_char(chr(cp))
    )


def _extra_word_ranges() -> list[tuple[int, int]]:
    from corpus_assets.domain.curate.decontam import unicode_word_table as table

    if table.UNIDATA_VERSION == unicodedata.unidata_version:
        return list(table.EXTRA_RANGES)
    return compute_extra_word_ranges()  # another Python, another Unicode database: compute


def _split_at_astral(ranges: Iterable[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    bmp, astral = [], []
    for lo, hi in ranges:
        if hi < 0x10000:
            bmp.append((lo, hi))
        elif lo >= 0x10000:
            astral.append((lo, hi))
        else:
            bmp.append((lo, 0xFFFF))
            astral.append((0x10000, hi))
    return bmp, astral


@functools.lru_cache(maxsize=1)
def _unicode_token_res() -> _TokenRegexes:
    """``CJK char | maximal run of other word chars``, as two equivalent regexes (built once).

    A run is written ``W+(?:E+W*)*|E+(?:W+E*)*`` with W = ``[^\\W_]`` minus CJK (letters and
    numbers, tested by ``re`` in O(1)) and E = the few other word characters (marks and
    compatibility characters), so E's long range list is only consulted where W fails. Python's
    ``re`` stores a character set that holds only BMP characters as a constant-time bitmap, so the
    BMP pattern is several times faster; it is used when the text has no astral character.
    """
    extra_b, extra_a = _split_at_astral(_extra_word_ranges())
    cjk_b = _ranges_to_class(r for r in _CJK_RANGES if r[1] < 0x10000)
    cjk_a = _ranges_to_class(r for r in _CJK_RANGES if r[0] >= 0x10000)
    e_b = _ranges_to_class(extra_b)
    e_a = _ranges_to_class(extra_a)

    def pattern(cjk: str, w_excl: str, e: str) -> str:
        W, E = f"[^\\W_{w_excl}]", f"[{e}]"
        return f"[{cjk}]|{W}+(?:{E}+{W}*)*|{E}+(?:{W}+{E}*)*"

    return _TokenRegexes(
        bmp=re.compile(pattern(cjk_b, cjk_b, e_b)),
        full=re.compile(pattern(cjk_b + cjk_a, cjk_b + cjk_a, e_b + e_a)),
        astral=re.compile("[\U00010000-\U0010FFFF]"),
    )


def _token_re_for(text: str) -> re.Pattern:
    res = _unicode_token_res()
    return res.full if res.astral.search(text) else res.bmp


class TokenizedText(NamedTuple):
    """Normalized tokens and, for each, the [start, end) character span it came from."""

    tokens: list[str]
    starts: list[int]
    ends: list[int]


def _tokenize(text: str, with_offsets: bool) -> TokenizedText:
    if text.isascii():
        low = text.lower()  # for ASCII, NFKC is the identity and casefold() == lower()
        if not with_offsets:
            return TokenizedText(_ASCII_TOKEN_RE.findall(low), [], [])
        toks, starts, ends = [], [], []
        for m in _ASCII_TOKEN_RE.finditer(low):
            toks.append(m.group())
            starts.append(m.start())
            ends.append(m.end())
        return TokenizedText(toks, starts, ends)
    rx = _token_re_for(text)
    if not with_offsets:
        # Same result as the per-run loop below, in a few C-level passes: NUL never composes or
        # reorders with a neighbour under NFKC and is a separator, so normalizing the runs joined
        # by NUL and splitting again gives the concatenation of the per-run results.
        runs = rx.findall(text)
        if not runs:
            return TokenizedText([], [], [])
        joined = "\x00".join(runs)
        if joined.isascii():
            return TokenizedText(joined.lower().split("\x00"), [], [])
        norm = unicodedata.normalize("NFKC", joined).casefold()
        return TokenizedText(_token_re_for(norm).findall(norm), [], [])
    toks, starts, ends = [], [], []
    nfkc = unicodedata.normalize
    for m in rx.finditer(text):
        run = m.group()
        if run.isascii():
            parts = [run.lower()]
        else:
            norm = nfkc("NFKC", run).casefold()
            parts = _token_re_for(norm).findall(norm)
        for p in parts:
            toks.append(p)
            if with_offsets:
                starts.append(m.start())
                ends.append(m.end())
    return TokenizedText(toks, starts, ends)


def normalize_tokens(text: str) -> list[str]:
    """The normalized tokens of ``text`` (see this module's docstring); same function for both sides."""
    return _tokenize(text, False).tokens


def tokenize_with_offsets(text: str) -> TokenizedText:
    """``normalize_tokens`` plus each token's character span in ``text`` (for masking)."""
    return _tokenize(text, True)
