"""Release-level LSH banding over MinHash signatures, built by sorting — never all pairs.

``b`` bands of ``r`` rows: two records are a candidate pair when one band agrees entirely
(probability ``1 - (1 - s**r)**b``, a curve, so candidates are verified by real Jaccard in
``near``). Each band is sorted on its own and its runs of equal keys emit pairs encoded as
``i * n + j`` int64 codes, so memory stays at the signatures plus one band; band results merge by
sorted union (``merge_candidates``) whatever the split of the bands. Key 0 means *no bucket*
(empty signatures). ``LshPolicy.bucket_cap`` keeps hot buckets bounded without splitting them:
the bucket's ``CAP_PIVOTS`` pivots (its first member and the most central others: most signature
values shared with its first ``CAP_REFERENCES`` members, :func:`central_pivots_first`) come first, the first ``bucket_cap``
members then pair with each other, and every member beyond the cap pairs with the pivots and its
``CAP_WINDOW`` predecessors (:func:`run_pairs`), so a near-duplicate cluster of any size — a star
of copies around one template included — stays linked with O(size) pairs; the cost is counted in
``CandidateStats``. Duplicate codes are removed by sort + neighbour mask
(``np.unique`` / ``np.union1d`` on int64 codes were 15-97x slower on big buckets).

Design and decisions: docs/dedup.md#lsh-banding
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from corpus_assets.domain.core.hashing import canonical_digest

__all__ = [
    "LSH_CODE_VERSION",
    "NO_BUCKET",
    "LshPolicy",
    "optimal_params",
    "search_optimal_params",
    "KNOWN_OPTIMA",
    "candidate_probability",
    "empty_signature_rows",
    "band_key",
    "band_keys",
    "CandidateStats",
    "candidate_pairs",
    "lsh_candidates",
    "merge_candidates",
    "CAP_PIVOTS",
    "CAP_WINDOW",
    "CAP_REFERENCES",
    "central_pivots_first",
    "bucket_runs",
    "run_pairs",
    "sorted_unique",
    "merge_sorted_unique",
]

# lsh-2: members beyond the bucket cap pair with the bucket's pivots and window (lsh-1: nothing)
# lsh-3: a capped bucket's pivots are its most central members (lsh-2: its first members)
LSH_CODE_VERSION = "lsh-3"
CAP_PIVOTS = 4  # members beyond the cap pair with the capped bucket's CAP_PIVOTS pivots ...
CAP_WINDOW = 4  # ... and with the CAP_WINDOW members just before them in the total order
CAP_REFERENCES = 32  # pivots: the members sharing most signature values with the first CAP_REFERENCES
NO_BUCKET = np.uint64(0)
_EMPTY_VALUES = (np.uint64((1 << 32) - 1), np.uint64((1 << 64) - 1))
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


# --------------------------------------------------------------------------------------------
# policy and parameters


# (b, r) of the search below for the usual settings (equal weights; thresholds 0.5 to 0.95 by
# 0.05; 64, 128 or 256 permutations), so that resolving them imports no scipy: importing
# scipy.integrate costs every fresh run or step process ~0.5 s, the search itself ~10 ms.
# tests/unit/test_lsh.py checks every entry against datasketch's own search.
KNOWN_OPTIMA: dict[tuple[float, int], tuple[int, int]] = {
    (0.5, 64): (14, 4), (0.55, 64): (12, 5), (0.6, 64): (10, 6), (0.65, 64): (9, 7), (0.7, 64): (8, 8),
    (0.75, 64): (7, 9), (0.8, 64): (5, 11), (0.85, 64): (4, 15), (0.9, 64): (3, 21), (0.95, 64): (2, 32),
    (0.5, 128): (25, 5), (0.55, 128): (21, 6), (0.6, 128): (18, 7), (0.65, 128): (16, 8), (0.7, 128): (14, 9),
    (0.75, 128): (11, 11), (0.8, 128): (9, 13), (0.85, 128): (8, 16), (0.9, 128): (5, 25), (0.95, 128): (3, 42),
    (0.5, 256): (42, 6), (0.55, 256): (36, 7), (0.6, 256): (32, 8), (0.65, 256): (28, 9), (0.7, 256): (25, 10),
    (0.75, 256): (21, 12), (0.8, 256): (17, 15), (0.85, 256): (13, 19), (0.9, 256): (9, 28), (0.95, 256): (5, 51),
}


def optimal_params(
    threshold: float, num_perm: int, false_positive_weight: float = 0.5, false_negative_weight: float = 0.5
) -> tuple[int, int]:
    """``(b, r)`` minimising ``fp_weight * FP + fn_weight * FN`` over ``b*r <= num_perm``
    (:func:`search_optimal_params`, which refuses invalid settings), from :data:`KNOWN_OPTIMA`
    when the settings are there."""
    if false_positive_weight == 0.5 and false_negative_weight == 0.5:
        known = KNOWN_OPTIMA.get((threshold, num_perm))
        if known is not None:
            return known
    return search_optimal_params(threshold, num_perm, false_positive_weight, false_negative_weight)


@lru_cache(maxsize=256)
def search_optimal_params(
    threshold: float, num_perm: int, false_positive_weight: float = 0.5, false_negative_weight: float = 0.5
) -> tuple[int, int]:
    """The search behind :func:`optimal_params`: FP = ∫_0^t P(s) ds and FN = ∫_t^1 (1 - P(s)) ds,
    P(s) = 1 - (1 - s^r)^b, for every b then r ascending.

    Same search and same integrator (QUADPACK via ``scipy.integrate.quad``, installed with
    datasketch) as ``datasketch.lsh._optimal_param``, so the result is identical — including
    which of two nearly equal optima wins (the first strictly smaller error, b then r ascending).
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError("threshold must be in [0, 1]")
    if num_perm < 1:
        raise ValueError("num_perm must be >= 1")
    from scipy.integrate import quad

    min_error = float("inf")
    opt = (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, int(num_perm / b) + 1):
            fp, _ = quad(lambda s: 1 - (1 - s ** float(r)) ** float(b), 0.0, threshold)
            fn, _ = quad(lambda s: 1 - (1 - (1 - s ** float(r)) ** float(b)), threshold, 1.0)
            error = fp * false_positive_weight + fn * false_negative_weight
            if error < min_error:
                min_error = error
                opt = (b, r)
    return opt


def candidate_probability(s: float, b: int, r: int) -> float:
    """Probability that two records of Jaccard ``s`` share at least one of ``b`` bands of ``r``
    rows (independent rows): ``1 - (1 - s**r)**b``."""
    if not 0.0 <= s <= 1.0:
        raise ValueError("s must be in [0, 1]")
    return 1.0 - (1.0 - s**r) ** b


class LshPolicy(BaseModel):
    """Recorded LSH policy. ``bands``/``rows`` are both given or both left to
    :func:`optimal_params`; ``bucket_cap`` (None = no cap) changes recall and is part of
    :meth:`version`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(0.8, gt=0.0, le=1.0)
    num_perm: int = Field(128, ge=1)
    bands: Optional[int] = Field(None, ge=1)
    rows: Optional[int] = Field(None, ge=1)
    bucket_cap: Optional[int] = Field(None, ge=2)

    @model_validator(mode="after")
    def _check(self) -> "LshPolicy":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("give both bands and rows, or neither (then they come from optimal_params)")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands * rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        return self

    def params(self) -> tuple[int, int]:
        """``(b, r)`` actually used."""
        if self.bands is not None:
            return self.bands, self.rows  # type: ignore[return-value]
        return optimal_params(self.threshold, self.num_perm)

    def record(self) -> dict:
        """What a release records: the resolved parameters, how they were chosen, the cap."""
        b, r = self.params()
        return {
            "code_version": LSH_CODE_VERSION,
            "threshold": self.threshold,
            "num_perm": self.num_perm,
            "bands": b,
            "rows": r,
            "params_from": "explicit" if self.bands is not None else "datasketch_optimal(0.5,0.5)",
            "bucket_cap": self.bucket_cap,
            "cap_pivots": CAP_PIVOTS,
            "cap_window": CAP_WINDOW,
            "cap_pivot_choice": f"central to the first {CAP_REFERENCES} members" if self.bucket_cap else None,
            "p_candidate_at_threshold": candidate_probability(self.threshold, b, r),
        }

    def version(self) -> str:
        """Short digest of :meth:`record`: two policies with the same version give the same
        candidates."""
        return canonical_digest(self.record())[:16]


# --------------------------------------------------------------------------------------------
# band keys


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, in place on a uint64 array (wrapping arithmetic)."""
    h ^= h >> np.uint64(30)
    h *= _M1
    h ^= h >> np.uint64(27)
    h *= _M2
    h ^= h >> np.uint64(31)
    return h


def empty_signature_rows(signatures: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Boolean mask of rows that are the empty-set signature (all values ``2**32-1`` or all
    ``2**64-1``). Computed in chunks so no ``(n, num_perm)`` temporary is made."""
    sig = _as_u64(signatures)
    n = sig.shape[0]
    out = np.zeros(n, dtype=bool)
    for start in range(0, n, chunk):
        blk = sig[start : start + chunk]
        first = blk[:, 0]
        cand = (first == _EMPTY_VALUES[0]) | (first == _EMPTY_VALUES[1])
        if cand.any():
            idx = np.flatnonzero(cand)
            out[start + idx] = (blk[idx] == first[idx, None]).all(axis=1)
    return out


def _as_u64(signatures: np.ndarray) -> np.ndarray:
    """The signature matrix as given when its dtype is unsigned (uint32 signatures of
    datasketch's ``affine32`` scheme are *not* copied to uint64; values are widened one column at
    a time in :func:`band_key`, so a uint32 and a uint64 matrix of equal values give equal keys).
    Signed integers are accepted when non-negative (converted)."""
    sig = np.asarray(signatures)
    if sig.ndim != 2:
        raise ValueError("signatures must be a 2-D array (n, num_perm)")
    if sig.dtype in (np.uint64, np.uint32):
        return sig
    if not np.issubdtype(sig.dtype, np.integer):
        raise ValueError("signatures must be integers")
    if sig.size and sig.min() < 0:
        raise ValueError("signatures must be non-negative")
    return sig.astype(np.uint64)


def band_key(signatures: np.ndarray, band: int, rows: int, empty: Optional[np.ndarray] = None) -> np.ndarray:
    """One uint64 key per record for band ``band`` (columns ``band*rows .. band*rows+rows-1``).
    Deterministic (no process salt); ``NO_BUCKET`` (0) for empty signatures."""
    sig = _as_u64(signatures)
    lo = band * rows
    if band < 0 or rows < 1 or lo + rows > sig.shape[1]:
        raise ValueError(f"band {band} of {rows} rows does not fit a signature of {sig.shape[1]} values")
    seed = ((band + 1) * _GOLDEN) & _MASK64
    h = np.full(sig.shape[0], seed, dtype=np.uint64)
    _mix(h)
    for c in range(lo, lo + rows):
        h ^= sig[:, c].astype(np.uint64, copy=False)
        _mix(h)
    h[h == NO_BUCKET] = np.uint64(1)
    if empty is None:
        empty = empty_signature_rows(sig)
    h[empty] = NO_BUCKET
    return h


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n, bands)`` uint64 key matrix (for tests and small inputs; the release path uses
    :func:`lsh_candidates`, which never materialises it)."""
    sig = _as_u64(signatures)
    if bands * rows > sig.shape[1]:
        raise ValueError(f"bands * rows = {bands * rows} exceeds the signature length {sig.shape[1]}")
    empty = empty_signature_rows(sig)
    out = np.empty((sig.shape[0], bands), dtype=np.uint64)
    for b in range(bands):
        out[:, b] = band_key(sig, b, rows, empty)
    return out


# --------------------------------------------------------------------------------------------
# candidate pairs


@dataclass
class CandidateStats:
    """Counts over all (band, key) buckets (singletons included in ``buckets``; records with an
    empty signature are in none). ``pairs_before_cap`` / ``pair_emissions`` count pairs per
    bucket (a pair that shares k bands counts k times) before / after the cap, the latter
    including ``pivot_pairs`` (those of members beyond the cap with the bucket's pivots and
    window); ``pairs`` is the number of distinct candidate pairs returned."""

    buckets: int = 0
    multi_buckets: int = 0
    capped_buckets: int = 0
    pairs_before_cap: int = 0
    pairs: int = 0
    pair_emissions: int = 0
    members_beyond_cap: int = 0
    largest_bucket: int = 0
    bands_done: int = 0
    pivot_pairs: int = 0

    def add(self, other: "CandidateStats") -> None:
        """Accumulate another band's (or worker's) counts; ``pairs`` is set by the caller after
        the union, ``largest_bucket`` is a max."""
        for f in fields(self):
            if f.name == "pairs":
                continue
            if f.name == "largest_bucket":
                self.largest_bucket = max(self.largest_bucket, other.largest_bucket)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}


def _ragged_arange(counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(c)`` for each c in counts (vectorised)."""
    counts = counts.astype(np.int64, copy=False)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(offsets, counts)


def sorted_unique(a: np.ndarray, kind: str = "quicksort") -> np.ndarray:
    """Distinct values of a 1-D array, sorted: sort + neighbour mask (``np.unique`` on int64 is
    far slower). Sorts ``a`` in place when it is a writable contiguous array."""
    a = np.asarray(a)
    if a.size < 2:
        return a.copy()
    if not (a.flags.writeable and a.flags.c_contiguous):
        a = a.copy()
    a.sort(kind=kind)
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def merge_sorted_unique(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted union of two sorted distinct arrays (concatenate + sort + mask; the stable sort,
    timsort for int64, merges the two sorted runs in linear time)."""
    if a.size == 0:
        return b
    if b.size == 0:
        return a
    return sorted_unique(np.concatenate([a, b]), kind="stable")


def bucket_runs(sorted_keys: np.ndarray, groups: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Runs of equal keys in a sorted key array (and of equal ``groups`` values, e.g. the band,
    when given): ``(starts, lengths, buckets)`` of the runs with at least two members, and the
    number of real buckets (singletons included, ``NO_BUCKET`` excluded)."""
    m = sorted_keys.shape[0]
    if m == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, 0
    new = np.empty(m, dtype=bool)
    new[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=new[1:])
    if groups is not None:
        new[1:] |= groups[1:] != groups[:-1]
    starts = np.flatnonzero(new)
    del new
    lengths = np.diff(np.append(starts, m))
    valid = sorted_keys[starts] != NO_BUCKET
    multi = valid & (lengths >= 2)
    return starts[multi].astype(np.int64), lengths[multi].astype(np.int64), int(valid.sum())


def _central_positions(run: np.ndarray, signature_rows: Callable[[np.ndarray], np.ndarray], pivots: int,
                       block: int = 2048) -> np.ndarray:
    """Positions (ascending) of a capped run's pivots: its first member (first in the total order,
    so a kept representative whenever anything is: members that match it are removed onto it), and
    the ``pivots - 1`` others with the highest mean signature agreement with the run's first
    ``CAP_REFERENCES`` members (a reference is not compared with itself); ties go to the earlier
    position."""
    size = run.size
    ref = np.asarray(signature_rows(run[:CAP_REFERENCES]))
    nref, width = ref.shape
    total = np.empty(size, dtype=np.int64)
    for s in range(0, size, block):
        blk = np.asarray(signature_rows(run[s : s + block]))
        total[s : s + blk.shape[0]] = (blk[:, None, :] == ref[None, :, :]).sum(axis=(1, 2))
    mean = total.astype(np.float64)
    mean[:nref] -= width  # a reference's agreement with itself
    mean[:nref] /= max(nref - 1, 1)
    mean[nref:] /= nref
    mean[0] = np.inf  # the first member is always a pivot
    best = np.lexsort((np.arange(size), -mean))[:pivots]
    return np.sort(best)


def central_pivots_first(
    members: np.ndarray, starts: np.ndarray, sizes: np.ndarray, bucket_cap: Optional[int],
    signature_rows: Callable[[np.ndarray], np.ndarray],
) -> int:
    """In place, for every capped run ``members[start : start + size]`` (``size > bucket_cap``,
    members in the total order): its ``CAP_PIVOTS`` most central members (:func:`_central_positions`)
    (the first member and the most central others) move to the front, the others keep their order. ``signature_rows(values)`` gives the signature
    rows of member values. Returns the number of runs reordered.

    Why: a boilerplate cluster is often a star — copies of one template, each near the template
    but less near each other — and the template can sit anywhere in the total order; a pivot
    chosen by position would leave the copies that match only the template unlinked."""
    if bucket_cap is None:
        return 0
    pivots = min(CAP_PIVOTS, int(bucket_cap))
    done = 0
    for ci in np.flatnonzero(sizes > bucket_cap).tolist():
        s, size = int(starts[ci]), int(sizes[ci])
        run = members[s : s + size].copy()
        top = _central_positions(run, signature_rows, pivots)
        rest = np.ones(size, dtype=bool)
        rest[top] = False
        members[s : s + size] = np.concatenate([run[top], run[rest]])
        done += 1
    return done


def run_pairs(
    starts: np.ndarray, sizes: np.ndarray, bucket_cap: Optional[int]
) -> tuple[np.ndarray, np.ndarray, CandidateStats, np.ndarray]:
    """Candidate pairs of buckets given as runs ``[start, start+size)`` of an array whose members
    are in the total order within each run (a capped run's pivots first:
    :func:`central_pivots_first`). Returns positions ``(p, q)`` with ``p < q``, the counts, and
    the indices (into ``starts``) of the capped runs.

    Capped bucket (``size > c``): all pairs among its first ``c`` members, and each member ``k >= c``
    paired with the pivots ``0 .. P-1`` (``P = min(CAP_PIVOTS, c)``) and its window
    ``max(P, k - CAP_WINDOW) .. k-1`` — ``P + min(W, k - P)`` pairs, none repeated. A cluster whose
    members all match its first member therefore stays one component, at O(size) pairs."""
    stats = CandidateStats()
    sizes = sizes.astype(np.int64, copy=False)
    stats.multi_buckets = int(sizes.size)
    stats.largest_bucket = int(sizes.max()) if sizes.size else 0
    stats.pairs_before_cap = int((sizes * (sizes - 1) // 2).sum())
    if bucket_cap is not None:
        capped = np.flatnonzero(sizes > bucket_cap)
        stats.capped_buckets = int(capped.size)
        stats.members_beyond_cap = int((sizes[capped] - bucket_cap).sum())
        eff = np.minimum(sizes, bucket_cap)
    else:
        capped = np.zeros(0, dtype=np.int64)
        eff = sizes
    # first members: positions st + k for k in 0..L-2, each paired with the L-1-k members after it
    a = np.repeat(starts, eff - 1) + _ragged_arange(eff - 1)
    cnt = np.repeat(eff, eff - 1) - 1 - _ragged_arange(eff - 1)
    q = np.repeat(a, cnt) + 1 + _ragged_arange(cnt)
    p = np.repeat(a, cnt)
    del a, cnt
    if capped.size:
        c = int(bucket_cap)
        piv = min(CAP_PIVOTS, c)
        beyond = sizes[capped] - c
        base = np.repeat(starts[capped], beyond)
        k = c + _ragged_arange(beyond)  # local position of each member beyond the cap
        # pivots
        pp = np.repeat(base, piv) + np.tile(np.arange(piv, dtype=np.int64), k.size)
        pq = np.repeat(base + k, piv)
        # window: k-1, k-2, ... down to max(piv, k-W)
        wcnt = np.minimum(CAP_WINDOW, k - piv)
        wq = np.repeat(base + k, wcnt)
        wp = wq - 1 - _ragged_arange(wcnt)
        stats.pivot_pairs = int(pp.size + wp.size)
        p = np.concatenate([p, pp, wp])
        q = np.concatenate([q, pq, wq])
    stats.pair_emissions = int(p.size)
    return p, q, stats, capped


def _band_pair_codes(
    key_in_order: np.ndarray, bucket_cap: Optional[int], order: Optional[np.ndarray], n: int,
    signatures: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, CandidateStats]:
    """Sorted unique pair codes ``i*n + j`` (record indices, i < j) of one band. ``key_in_order``
    is the band's key column in processing order (``order[p]`` is the record at position p, or
    the identity); members of a bucket are taken in that order (stable sort). With
    ``signatures`` (rows by record index), capped buckets take central pivots."""
    m = key_in_order.shape[0]
    if m == 0:
        return np.zeros(0, dtype=np.int64), CandidateStats(bands_done=1)
    perm = np.argsort(key_in_order, kind="stable")
    starts, sizes, buckets = bucket_runs(key_in_order[perm])
    members = perm if order is None else order[perm]
    del perm
    if signatures is not None:
        central_pivots_first(members, starts, sizes, bucket_cap, lambda rec: signatures[rec])
    first, second, stats, _ = run_pairs(starts, sizes, bucket_cap)
    stats.bands_done, stats.buckets = 1, buckets
    if first.size == 0:
        return np.zeros(0, dtype=np.int64), stats
    p = members[first]
    q = members[second]
    del first, second, members
    lo = np.minimum(p, q).astype(np.int64)
    hi = np.maximum(p, q).astype(np.int64)
    del p, q
    codes = lo * np.int64(n) + hi
    return sorted_unique(codes), stats


class _Union:
    """Sorted union of many sorted distinct code arrays: parts wait until they outweigh the
    union so far, then merge in one concatenate + sort + mask (amortised, instead of re-sorting
    the whole union after every band); memory stays within about twice the union."""

    def __init__(self):
        self.acc = np.zeros(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.size = 0

    def add(self, codes: np.ndarray) -> None:
        if codes.size:
            self.pending.append(codes)
            self.size += codes.size
            if self.size >= self.acc.size:
                self._merge()

    def _merge(self) -> None:
        if self.pending:
            parts = [self.acc, *self.pending] if self.acc.size else self.pending
            self.acc = parts[0] if len(parts) == 1 else sorted_unique(np.concatenate(parts))
            self.pending, self.size = [], 0

    def result(self) -> np.ndarray:
        self._merge()
        return self.acc


def _decode(codes: np.ndarray, n: int) -> np.ndarray:
    out = np.empty((codes.size, 2), dtype=np.int64)
    if codes.size:
        np.floor_divide(codes, n, out=out[:, 0])
        np.remainder(codes, n, out=out[:, 1])
    return out


def _check_order(order: Optional[np.ndarray], n: int) -> Optional[np.ndarray]:
    if order is None:
        return None
    order = np.asarray(order, dtype=np.int64)
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError("order must be a permutation of range(n)")
    return order


def candidate_pairs(
    keys: np.ndarray, bucket_cap: Optional[int], order: Optional[np.ndarray] = None
) -> tuple[np.ndarray, CandidateStats]:
    """Distinct candidate pairs from an ``(n, bands)`` key matrix: int64 ``(k, 2)``, ``i < j``,
    sorted by (i, j). Built by a stable sort of each band column and a scan of runs of equal
    keys. Capped buckets keep the pairs among their first ``bucket_cap`` members in index order
    (or in ``order``, a permutation of record indices, when given) plus the pivot and window
    pairs of the members beyond the cap (:func:`run_pairs`)."""
    keys = np.asarray(keys)
    if keys.ndim != 2:
        raise ValueError("keys must be (n, bands)")
    n = keys.shape[0]
    order = _check_order(order, n)
    total = CandidateStats()
    union = _Union()
    for b in range(keys.shape[1]):
        col = keys[:, b] if order is None else keys[order, b]
        codes, st = _band_pair_codes(np.ascontiguousarray(col, dtype=np.uint64), bucket_cap, order, n)
        total.add(st)
        union.add(codes)
    acc = union.result()
    total.pairs = int(acc.size)
    return _decode(acc, n), total


def lsh_candidates(
    signatures: np.ndarray,
    bands: int,
    rows: int,
    bucket_cap: Optional[int] = None,
    order: Optional[np.ndarray] = None,
    band_range: Optional[tuple[int, int]] = None,
) -> tuple[np.ndarray, CandidateStats]:
    """The release path: band keys computed and sorted one band at a time (never the key
    matrix). ``band_range=(lo, hi)`` does bands ``lo..hi-1`` only — what one worker would do;
    :func:`merge_candidates` of the workers' results equals the single run."""
    sig = _as_u64(signatures)
    n = sig.shape[0]
    if bands * rows > sig.shape[1]:
        raise ValueError(f"bands * rows = {bands * rows} exceeds the signature length {sig.shape[1]}")
    order = _check_order(order, n)
    lo, hi = band_range if band_range is not None else (0, bands)
    if not 0 <= lo <= hi <= bands:
        raise ValueError(f"band_range {band_range} outside 0..{bands}")
    empty = empty_signature_rows(sig)
    total = CandidateStats()
    union = _Union()
    for b in range(lo, hi):
        key = band_key(sig, b, rows, empty)
        if order is not None:
            key = key[order]
        codes, st = _band_pair_codes(key, bucket_cap, order, n, signatures=sig)
        del key
        total.add(st)
        union.add(codes)
        del codes
    acc = union.result()
    total.pairs = int(acc.size)
    return _decode(acc, n), total


def merge_candidates(parts: Iterable[tuple[np.ndarray, CandidateStats]]) -> tuple[np.ndarray, CandidateStats]:
    """Union of candidate pair arrays from disjoint band ranges (workers); counts add up."""
    total = CandidateStats()
    arrays = []
    for pairs, st in parts:
        total.add(st)
        arrays.append(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    if not arrays or sum(a.shape[0] for a in arrays) == 0:
        return np.zeros((0, 2), dtype=np.int64), total
    n = int(max(a.max() for a in arrays if a.size)) + 1
    union = _Union()
    for a in arrays:
        union.add(sorted_unique(a[:, 0] * np.int64(n) + a[:, 1]))
    acc = union.result()
    total.pairs = int(acc.size)
    return _decode(acc, n), total


def naive_candidate_pairs(
    keys: np.ndarray, bucket_cap: Optional[int] = None, order: Optional[np.ndarray] = None,
    signatures: Optional[np.ndarray] = None,
) -> set[tuple[int, int]]:
    """Reference implementation with a dict of buckets and Python loops (tests only; not for
    release scale). With ``signatures``, a capped bucket's pivots are its most central members."""
    out: set[tuple[int, int]] = set()
    keys = np.asarray(keys)
    seq = range(keys.shape[0]) if order is None else [int(x) for x in order]
    for b in range(keys.shape[1]):
        buckets: dict[int, list[int]] = {}
        for i in seq:
            k = int(keys[i, b])
            if k != 0:
                buckets.setdefault(k, []).append(i)
        for members in buckets.values():
            if signatures is not None and bucket_cap is not None and len(members) > bucket_cap:
                refs = members[:CAP_REFERENCES]
                rows = [list(map(int, signatures[m])) for m in members]

                def centrality(pos: int) -> float:
                    others = [r for r in range(len(refs)) if r != pos]
                    return sum(sum(a == b for a, b in zip(rows[pos], rows[r])) for r in others) / max(len(others), 1)

                ranked = sorted(range(1, len(members)), key=lambda pos: (-centrality(pos), pos))
                top = [0] + sorted(ranked[: min(CAP_PIVOTS, bucket_cap) - 1])
                members = [members[t] for t in top] + [m for pos, m in enumerate(members) if pos not in top]
            c = len(members) if bucket_cap is None else min(bucket_cap, len(members))
            partners = {k: range(k) for k in range(c)}
            piv = min(CAP_PIVOTS, c)
            for k in range(c, len(members)):
                partners[k] = sorted(set(range(piv)) | set(range(max(piv, k - CAP_WINDOW), k)))
            for k, js in partners.items():
                for j in js:
                    a, z = members[j], members[k]
                    out.add((min(a, z), max(a, z)))
    return out


def expected_candidate_rate(similarities: Sequence[float], b: int, r: int) -> float:
    """Mean candidate probability over a list of similarities (report helper)."""
    if not similarities:
        return math.nan
    return float(np.mean([candidate_probability(s, b, r) for s in similarities]))
