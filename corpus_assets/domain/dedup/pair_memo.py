"""Verdicts of LSH candidate pairs kept from one build of a release to the next, so a rebuild
after an increment verifies only the candidate pairs it has not verified before.

The real Jaccard of a candidate pair depends on the two records' dedup normal forms and the
shingling only, and a record's ``dedup_key`` is the sha256 of its domain and normal form
(``hashing.dedup_key``). A build therefore keeps every distinct candidate pair it verified, keyed
by the first 128 bits of both dedup keys (:func:`verdict_table`: columns ``a0, a1, b0, b1,
jaccard``, the two keys ordered so ``a <= b``, rows sorted), and the next build looks its candidates
up there (:class:`PairMemo`) before it fetches texts: a hit is the stored float64, the value
verification computes from the same normal forms, so clusters, edges and decisions are the same
bytes with or without the memo. A key collision among 10^8 records has probability about 1e-23;
still, rows whose 128-bit key another row of the build shares (a forged or real dedup-key
collision: exact dedup keeps such records apart by their bytes) never enter nor use the memo, and
entries whose 64-bit lookup hash collides are dropped from it (verified again, never guessed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.dedup.lsh import _mix
from corpus_assets.domain.layers.registry import VERDICTS_SCHEMA

__all__ = ["VERDICTS_SCHEMA", "PairMemo", "key_words", "unshared", "verdict_table", "write_memo"]


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint8)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint8)
_SALT = np.uint64(0x9E3779B97F4A7C15)


def key_words(dedup_keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``(n, 2)`` uint64: the first 128 bits of each 64-hex-digit ``dedup_key``, without a Python
    object per key (the digits are read straight from the Arrow buffer)."""
    arr = dedup_keys.combine_chunks() if isinstance(dedup_keys, pa.ChunkedArray) else dedup_keys
    arr = arr.cast(pa.string())
    n = len(arr)
    if n == 0:
        return np.zeros((0, 2), dtype=np.uint64)
    if arr.null_count or not pc.all(pc.equal(pc.utf8_length(arr), 64)).as_py():
        raise ValueError("dedup keys must be 64 lowercase hex digits (hashing.dedup_key), found another value")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset: arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]: offsets[-1]].reshape(n, 64)
    prefix = np.ascontiguousarray(data[:, :32])
    if (_HEX[prefix] == 255).any():
        raise ValueError("dedup keys must be 64 lowercase hex digits (hashing.dedup_key), found another character")
    words = np.frombuffer(bytes.fromhex(prefix.tobytes().decode("ascii")), dtype=">u8")
    return words.astype(np.uint64).reshape(n, 2)


def unshared(keys: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows whose key no other row has (only those take part in the memo)."""
    out = np.ones(keys.shape[0], dtype=bool)
    if keys.shape[0] < 2:
        return out
    srt = np.lexsort((keys[:, 1], keys[:, 0]))
    k = keys[srt]
    same = (k[1:] == k[:-1]).all(axis=1)
    dup = np.zeros(keys.shape[0], dtype=bool)
    dup[1:] |= same
    dup[:-1] |= same
    out[srt[dup]] = False
    return out


def _ordered(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two keys of each pair with the smaller first (Jaccard is symmetric)."""
    swap = (a[:, 0] > b[:, 0]) | ((a[:, 0] == b[:, 0]) & (a[:, 1] > b[:, 1]))
    lo, hi = a.copy(), b.copy()
    lo[swap], hi[swap] = b[swap], a[swap]
    return lo, hi


def _pair_hash(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    h = a[:, 0] ^ _SALT
    for word in (a[:, 1], b[:, 0], b[:, 1]):
        _mix(h)
        h ^= word
    return _mix(h)


def verdict_table(keys: np.ndarray, i: np.ndarray, j: np.ndarray, jaccard: np.ndarray) -> pa.Table:
    """The ``pair_verdicts`` rows of a build: every distinct key pair among the verified pairs
    ``(i[k], j[k])`` (rows of ``keys``) with its Jaccard, sorted by the keys — the same table
    whatever order the pairs came in. Pairs naming a row with a shared key are left out."""
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    ok = unshared(keys)
    ok = ok[i] & ok[j]
    a, b = _ordered(keys[i[ok]], keys[j[ok]])
    jac = np.asarray(jaccard, dtype=np.float64)[ok]
    srt = np.lexsort((b[:, 1], b[:, 0], a[:, 1], a[:, 0]))
    a, b, jac = a[srt], b[srt], jac[srt]
    keep = np.ones(jac.size, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]).any(axis=1) | (b[1:] != b[:-1]).any(axis=1)
    a, b, jac = a[keep], b[keep], jac[keep]
    return pa.table({"a0": a[:, 0], "a1": a[:, 1], "b0": b[:, 0], "b1": b[:, 1], "jaccard": jac},
                    schema=VERDICTS_SCHEMA)


def write_memo(verdicts: pa.Table, keys: np.ndarray, workdir: Path) -> "PairMemo":
    """A :class:`PairMemo` over an earlier build's ``pair_verdicts`` for the signature rows whose
    128-bit keys are ``keys``; its arrays go to ``workdir`` (tasks memory-map them)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    col = lambda name: verdicts.column(name).to_numpy().astype(np.uint64, copy=False)  # noqa: E731
    a = np.stack([col("a0"), col("a1")], axis=1) if verdicts.num_rows else np.zeros((0, 2), np.uint64)
    b = np.stack([col("b0"), col("b1")], axis=1) if verdicts.num_rows else np.zeros((0, 2), np.uint64)
    jac = verdicts.column("jaccard").to_numpy().astype(np.float64, copy=False)
    h = _pair_hash(a, b)
    srt = np.argsort(h, kind="stable")
    h, a, b, jac = h[srt], a[srt], b[srt], jac[srt]
    unique = np.ones(h.size, dtype=bool)  # a lookup hash shared by two entries: drop both
    if h.size > 1:
        dup = h[1:] == h[:-1]
        unique[1:] &= ~dup
        unique[:-1] &= ~dup
    arrays = (("h", h[unique]), ("a", a[unique]), ("b", b[unique]), ("j", jac[unique]), ("keys", keys),
              ("usable", unshared(keys)))
    for name, arr in arrays:
        np.save(workdir / f"{name}.npy", np.ascontiguousarray(arr))
    return PairMemo(str(workdir), int(unique.sum()))


@dataclass
class PairMemo:
    """Task side (picklable: a directory): the stored Jaccard of signature-row pairs a previous
    build verified. :meth:`lookup` says which pairs it knows and their values."""

    workdir: str
    entries: int
    _loaded: Optional[tuple] = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {"workdir": self.workdir, "entries": self.entries, "_loaded": None}

    def _arrays(self) -> tuple[np.ndarray, ...]:
        if self._loaded is None:
            d = Path(self.workdir)
            self._loaded = tuple(np.load(d / f"{name}.npy", mmap_mode="r")
                                 for name in ("h", "a", "b", "j", "keys", "usable"))
        return self._loaded

    def lookup(self, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit, jaccard)`` for the row pairs ``(i[k], j[k])``; ``jaccard`` is NaN where not hit."""
        h_all, a_all, b_all, j_all, keys, usable = self._arrays()
        i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
        jac = np.full(i.size, np.nan, dtype=np.float64)
        if i.size == 0 or h_all.size == 0:
            return np.zeros(i.size, dtype=bool), jac
        a, b = _ordered(np.asarray(keys[i]), np.asarray(keys[j]))
        h = _pair_hash(a, b)
        pos = np.minimum(np.searchsorted(h_all, h), h_all.size - 1)
        hit = (np.asarray(h_all[pos]) == h) & np.asarray(usable[i]) & np.asarray(usable[j])
        cand = np.flatnonzero(hit)
        if cand.size:
            p = pos[cand]
            same = (np.asarray(a_all[p]) == a[cand]).all(axis=1) & (np.asarray(b_all[p]) == b[cand]).all(axis=1)
            hit[cand[~same]] = False
            jac[cand[same]] = np.asarray(j_all[p[same]])
        return hit, jac
