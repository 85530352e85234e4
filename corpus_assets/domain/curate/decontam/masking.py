"""Replace character spans of a text with a placeholder (the ``mask`` action).

Masking keeps a record whose protected passage is a small part of it: the spans covered by the
matched n-grams (from the tokenizer's offsets, so they start and end on token boundaries) are
merged and replaced, everything else is kept as it was.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["DEFAULT_PLACEHOLDER", "mask_spans", "merge_spans"]

DEFAULT_PLACEHOLDER = "<EVAL_REDACTED>"


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted [start, end) spans with overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def mask_spans(text: str, spans: Iterable[tuple[int, int]], placeholder: str = DEFAULT_PLACEHOLDER) -> str:
    """Replace every (merged) [start, end) span of ``text`` with ``placeholder``; the rest is kept."""
    merged = merge_spans(spans)
    for s, e in merged:
        if not (0 <= s < e <= len(text)):
            raise ValueError(f"span ({s}, {e}) outside text of length {len(text)}")
    parts, pos = [], 0
    for s, e in merged:
        parts.append(text[pos:s])
        parts.append(placeholder)
        pos = e
    parts.append(text[pos:])
    return "".join(parts)
