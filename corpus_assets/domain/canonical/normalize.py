"""Text normalization of canonical records: one function for prose and code.

``normalize_text`` never folds, collapses or re-indents whitespace, so it is safe for code (the
prose / code difference lives only in ``hashing.dedup_key``). In order: mojibake repair with
``ftfy.fix_encoding`` only, NFC, CRLF / CR -> LF, control characters removed (zero-width joiners
and similar are kept), trailing whitespace of the whole text stripped. The fast path runs ftfy's
test only around trigger characters and gives exactly ``ftfy.fix_encoding``'s result.

Each step and why: docs/canonical.md#normalization
"""

from __future__ import annotations

import re
import unicodedata

import ftfy
from ftfy.badness import BADNESS_RE

__all__ = ["normalize_text", "might_be_mojibake", "repair_mojibake"]

_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ufffe\uffff\ud800-\udfff]")


def _mojibake_trigger_chars() -> str:
    """Every non-ASCII character that appears literally (or inside a range) in ftfy's BADNESS_RE.

    Each alternative of that expression contains at least one such character and matches at most
    7 characters, so a text without them cannot be "bad", and a match always lies within a few
    characters of one of them.
    """
    pattern = BADNESS_RE.pattern
    chars: set[str] = set()
    for i, ch in enumerate(pattern):
        if ord(ch) > 0x7F:
            chars.add(ch)
            # a range "a-b" between two non-ASCII characters
            if i + 2 < len(pattern) and pattern[i + 1] == "-" and ord(pattern[i + 2]) > 0x7F:
                lo, hi = ord(ch), ord(pattern[i + 2])
                if lo <= hi:
                    chars.update(chr(c) for c in range(lo, hi + 1))
    chars.update(chr(c) for c in range(0x80, 0xA0))  # C1 controls, whatever their spelling in the pattern
    return "".join(sorted(chars))


_TRIGGERS = re.escape(_mojibake_trigger_chars())
# Characters that can make up a one-trigger match on their own (C1 controls, the ligature œ,
# "Ã"/"Â" next to ASCII); every other alternative of BADNESS_RE holds two trigger characters at
# most 5 characters apart. Text without such a candidate cannot be "bad".
_CANDIDATE_RE = re.compile(
    "[\x80-\x9f\u0152\u0153\u00c2\u00c3]|[" + _TRIGGERS + "][^" + _TRIGGERS + "]{0,5}[" + _TRIGGERS + "]"
)
_WINDOW = 8  # > longest BADNESS_RE match (7 characters)
_MAX_CANDIDATES = 64


def might_be_mojibake(text: str) -> bool:
    """Exactly ``ftfy.badness.is_bad(text)`` (the gate of ``ftfy.fix_encoding``), computed only on
    windows around candidate spots instead of the whole text."""
    if text.isascii():
        return False
    search = BADNESS_RE.search
    start = end = -1
    for n, m in enumerate(_CANDIDATE_RE.finditer(text)):
        if n == _MAX_CANDIDATES:
            # dense candidates (Cyrillic, German ...): one plain search over the rest is cheaper.
            # Everything before ``start`` was already checked window by window.
            return search(text, max(start, 0)) is not None
        s, e = max(0, m.start() - _WINDOW), m.end() + _WINDOW
        if s <= end:
            end = e
            continue
        if end >= 0 and search(text, start, end):
            return True
        start, end = s, e
    return end >= 0 and search(text, start, end) is not None


def repair_mojibake(text: str) -> str:
    """``ftfy.fix_encoding(text)``, skipped when ftfy's own gate would leave the text unchanged."""
    if might_be_mojibake(text):
        return ftfy.fix_encoding(text)
    return text


def normalize_text(text: str) -> str:
    """Canonical text: mojibake repaired, NFC, LF newlines, no control characters, no trailing whitespace."""
    if not text.isascii():
        text = repair_mojibake(text)
        if not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL_RE.sub("", text)
    return text.rstrip()
