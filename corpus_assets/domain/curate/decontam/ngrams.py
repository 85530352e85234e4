"""Hashes of tokens and token n-grams, computed for a whole text at once.

A token is hashed with xxh64; an n-gram's hash is the polynomial combination
``sum(h(t_i) * M**(n-1-i)) mod 2**64`` of its token hashes, so all n-grams of a document come out
of n vectorized numpy passes. Hash equality only proposes candidates: the index verifies every
candidate token by token, so a collision never changes a containment.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import xxhash

__all__ = ["ngram_hashes", "token_hashes"]

_MULT = 0x9E3779B97F4A7C15  # odd 64-bit multiplier (golden ratio)


@functools.lru_cache(maxsize=64)
def _powers(n: int) -> np.ndarray:
    return np.array([pow(_MULT, n - 1 - i, 1 << 64) for i in range(n)], dtype=np.uint64)


def token_hashes(tokens: Sequence[str]) -> np.ndarray:
    """xxh64 of every token (UTF-8), as uint64."""
    return np.fromiter(map(xxhash.xxh64_intdigest, map(str.encode, tokens)), dtype=np.uint64, count=len(tokens))


def ngram_hashes(th: np.ndarray, n: int) -> np.ndarray:
    """Hash of every n-gram (position p covers tokens p..p+n-1), length max(0, len(th) - n + 1)."""
    m = len(th) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    pw = _powers(n)
    out = th[0:m] * pw[0]
    for i in range(1, n):
        out += th[i : i + m] * pw[i]
    return out
