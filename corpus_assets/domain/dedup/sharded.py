"""Release-scale near dedup: LSH band keys hashed into K bucket shards, each shard's candidates
verified in tasks on the Dask engine, one union-find over the verified edges, Algorithm 18.1.

The contract the dedup layer relies on (and tests pin):

- ``signatures`` is an on-disk ``(n, num_perm)`` matrix (:class:`SignatureFile`), rows in the
  caller's record-index order; nothing here holds all of it in memory at once.
- ``order`` is the stable total order (record indices); every decision depends on it only, never
  on the index order, the shard count K or the worker count.
- ``verifier`` computes real Jaccard inside the tasks: :meth:`PairVerifier.prepare` runs once in
  the driver with the record indices some candidate pair names (the layer fetches just those
  texts) and returns the picklable object the tasks call.

Stages (each a list of :meth:`Engine.map` tasks; results combined in task order only):

1. *keys*: row chunks of the memory-mapped matrix -> ``lsh.band_key`` per band (rows an earlier
   build keyed take its keys instead: :class:`KnownKeys`, ``band_key_cache``) -> entries
   ``(band, key, rank)`` (rank = position in ``order``), grouped by bucket shard
   ``hash(band, key) % K``, one file per chunk;
2. *buckets*: shard s reads its slice of every chunk file, sorts by (band, key, rank), emits the
   pairs of its buckets (``lsh.run_pairs``: capped buckets keep their pivots and windows), as
   ``rank_lo * n + rank_hi`` codes routed to K verification partitions by ``hash(code)`` (with a
   memo, each code's stored Jaccard or NaN alongside: the memo is looked up here only); it also
   writes the ranks its pairs name and its capped buckets;
3. driver: ``verifier.prepare(needed)`` once;
4. *verify*: partition v merges its slices (a pair shared by several bands or shards is one
   code), verifies each distinct pair once with ``verifier.jaccard_many`` and keeps ``J >= tau``;
5. driver: Algorithm 18.1 + union-find over the verified edges (``near.finish_near_dedup``, as
   the in-memory :func:`near.near_dedup`), then the capped-bucket report.

Every bucket lives in exactly one shard and every distinct pair in exactly one partition, so
the pair set, the counts and the output do not depend on K or on the worker count. Memory: a
key task holds one chunk (about ``_CHUNK_BYTES`` of signatures), a bucket task its shard's
entries and pairs (about ``n * bands / K`` entries), a verify task its partition's pairs; the
driver holds n-sized arrays (order, rank, results) and the verified edges, never the matrix nor
all candidate pairs (unless asked for the verdicts: then every distinct pair and its Jaccard, for
``pair_memo``). Design: docs/dedup.md#sharded-lsh
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

import numpy as np

from corpus_assets.domain.core.compute import Engine, engine_from_env
from corpus_assets.domain.core.progress import SUBPHASE_QUIET_S, Progress
from corpus_assets.domain.dedup.lsh import (
    CAP_PIVOTS,
    CAP_WINDOW,
    NO_BUCKET,
    CandidateStats,
    LshPolicy,
    _ragged_arange,
    band_key,
    _mix,
    bucket_runs,
    central_pivots_first,
    empty_signature_rows,
    run_pairs,
    sorted_unique,
)
from corpus_assets.domain.dedup.near import NearDedupResult, finish_near_dedup
from corpus_assets.domain.dedup.pair_memo import PairMemo

__all__ = ["KnownKeys", "SignatureFile", "PairVerifier", "sharded_near_dedup", "REPORT_TOP"]

_CHUNK_BYTES = 64 << 20  # signature bytes per key task
_VERIFY_BATCH = 1 << 18  # pairs per jaccard_many call
REPORT_TOP = 100  # capped buckets listed one by one in the report (the largest); totals cover all
# a band entry is two uint64: the band key, and the tag band << 48 | rank (ranks < 2**48)
_TAG_SHIFT = np.uint64(48)
_RANK_MASK = np.uint64((1 << 48) - 1)
_SHARD_SALT = np.uint64(0xD6E8FEB86659FD93)
_PART_SALT = np.uint64(0xA0761D6478BD642F)


@dataclass(frozen=True)
class SignatureFile:
    """An ``(n, num_perm)`` unsigned signature matrix saved with ``np.save`` (opened memory-mapped)."""

    path: str

    def open(self) -> np.ndarray:
        return np.load(self.path, mmap_mode="r")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.open().shape)  # type: ignore[return-value]


@dataclass(frozen=True)
class KnownKeys:
    """Band keys an earlier build made for some signature rows (``band_key_cache``): ``keys`` an
    ``np.save``'d ``(n, bands)`` uint64 matrix, ``mask`` an ``np.save``'d bool vector of the rows
    it holds (``count`` of them). A known row's signature need not be in the signature file
    (``signatures_complete=False``: it may be zero) unless buckets are capped, whose pivots are
    chosen by the members' signatures."""

    keys: str
    mask: str
    count: int
    signatures_complete: bool = True


class PairVerifier(Protocol):
    def prepare(self, needed: np.ndarray, workdir: Path) -> "PairVerifier":
        """Driver side, once: ``needed`` is the sorted int64 record indices that some candidate
        pair names. Returns the (picklable) verifier the tasks use."""

    def jaccard_many(self, pairs: np.ndarray) -> np.ndarray:
        """Real Jaccard (float64) of each ``(i, j)`` row of an int64 ``(k, 2)`` array."""


# --------------------------------------------------------------------------------------------
# hashing for routing (never part of an output: only which task sees a bucket / a pair)


def _route(values: np.ndarray, salt: np.uint64, k: int) -> np.ndarray:
    """Task index (uint16, so grouping by it is a radix sort) of each value."""
    h = values.astype(np.uint64, copy=True)
    h ^= salt
    _mix(h)
    return ((h >> np.uint64(33)) % np.uint64(k)).astype(np.uint16)


def _group_offsets(groups: np.ndarray, k: int) -> list[int]:
    return np.concatenate([[0], np.cumsum(np.bincount(groups, minlength=k))]).astype(np.int64).tolist()


# --------------------------------------------------------------------------------------------
# tasks (top-level functions, one small picklable dict each)


def _column_major(sig: np.ndarray, ncols: int, block: int = 1024) -> np.ndarray:
    """``sig[:, :ncols]`` as a column-major copy (band_key reads one column at a time, 3x
    faster than strided), transposed in cache-sized row blocks (a whole-array transpose is
    10x slower)."""
    out = np.empty((ncols, sig.shape[0]), dtype=sig.dtype)
    for s in range(0, sig.shape[0], block):
        out[:, s : s + block] = np.asarray(sig[s : s + block, :ncols]).T
    return out.T


def _row_keys(sig: np.ndarray, b: int, r: int) -> np.ndarray:
    """``(len(sig), b)`` band keys of signature rows (``NO_BUCKET`` in every band of an empty one)."""
    empty = empty_signature_rows(sig)
    cols = _column_major(sig, b * r)
    out = np.empty((sig.shape[0], b), dtype=np.uint64)
    for band in range(b):
        out[:, band] = band_key(cols, band, r, empty)
    return out


def _keys_task(job: dict) -> dict:
    """Band keys of rows ``lo..hi`` (taken from ``known`` where it holds them, computed from the
    signatures elsewhere), entries grouped by bucket shard into one file; the rows' key matrix too
    when the job names a ``row_keys`` file."""
    b, r, lo, hi = job["bands"], job["rows"], job["lo"], job["hi"]
    known = np.asarray(np.load(job["known_mask"], mmap_mode="r")[lo:hi]) if job.get("known_mask") else None
    sig = np.load(job["sig"], mmap_mode="r")[lo:hi]
    if known is None or not known.any():
        keys_of_rows = _row_keys(sig, b, r)
    else:
        keys_of_rows = np.array(np.load(job["known_keys"], mmap_mode="r")[lo:hi], dtype=np.uint64)
        todo = np.flatnonzero(~known)
        if todo.size:
            keys_of_rows[todo] = _row_keys(np.asarray(sig[todo]), b, r)
    del sig
    if job.get("row_keys"):
        np.save(job["row_keys"], keys_of_rows)
    # band_key gives NO_BUCKET in every band exactly for an empty signature, and never otherwise
    empty = keys_of_rows[:, 0] == NO_BUCKET
    rank = np.asarray(np.load(job["rank"], mmap_mode="r")[lo:hi])
    live = ~empty
    m = int(live.sum())
    ranks = rank[live].astype(np.uint64)
    out = np.empty((m * b, 2), dtype=np.uint64)  # band-major: every entry of band 0, then band 1, ...
    for band in range(b):
        out[band * m:(band + 1) * m, 0] = keys_of_rows[live, band]
        out[band * m:(band + 1) * m, 1] = ranks | (np.uint64(band) << _TAG_SHIFT)
    del keys_of_rows
    if job["shards"] > 1:  # grouped by bucket shard, band-major within a shard (a stable radix sort)
        shard = _route(out[:, 0] ^ (out[:, 1] >> _TAG_SHIFT), _SHARD_SALT, job["shards"])
        out = out[np.argsort(shard, kind="stable")]
    else:
        shard = np.zeros(out.shape[0], dtype=np.uint16)
    np.save(job["out"], out)
    return {"offsets": _group_offsets(shard, job["shards"]), "empty": int(empty.sum())}


def _pivot_pair_counts(sizes: np.ndarray, cap: int) -> np.ndarray:
    """Pivot + window pairs of a capped bucket of each size (closed form of ``lsh.run_pairs``)."""
    piv = min(CAP_PIVOTS, cap)
    w = CAP_WINDOW

    def f(x):  # sum_{t=0..x} min(w, t), 0 for x < 0
        x = np.asarray(x, dtype=np.int64)
        return np.where(x < 0, 0, np.where(x <= w, x * (x + 1) // 2, w * (w + 1) // 2 + (x - w) * w))

    return (sizes - cap) * piv + f(sizes - 1 - piv) - f(cap - piv - 1)


def _key_tag_order(e: np.ndarray) -> np.ndarray:
    """Permutation sorting entries by key, then tag = (band, rank), so a bucket (band, key) is a
    run with its members in the total order. Keys are almost all distinct: one quicksort of the
    keys, then only the entries of repeated keys are sorted by tag (a full lexsort is 5x slower).
    Entries are distinct (one per record and band), so the result is unique."""
    key = np.ascontiguousarray(e[:, 0])
    perm = np.argsort(key)
    ks = key[perm]
    del key
    if ks.size < 2:
        return perm
    same = np.empty(ks.size, dtype=bool)
    same[0] = False
    np.equal(ks[1:], ks[:-1], out=same[1:])
    rep = same.copy()
    rep[:-1] |= same[1:]  # every member of a run of equal keys
    idx = np.flatnonzero(rep)
    if idx.size:
        run = np.cumsum(~same)[idx]  # run number of each such position
        sub = perm[idx]
        perm[idx] = sub[np.lexsort((e[sub, 1], run))]
    return perm


def read_signature_rows(path: str, rows: np.ndarray) -> np.ndarray:
    """Rows (sorted, distinct) of an ``np.save``'d matrix, read with ``pread``. Not a memmap on
    purpose: random rows of a memory-mapped file in the page cache map 64 KiB around every touched
    page (fault-around) and those pages count in the worker's RSS, so scattered rows would make a
    task appear to hold the whole signature file."""
    head = np.load(path, mmap_mode="r")  # the header only: no data page is touched
    shape, dtype, base = head.shape, head.dtype, head.offset
    del head
    width = int(shape[1]) * dtype.itemsize
    with open(path, "rb") as f:
        fd = f.fileno()
        buf = b"".join(os.pread(fd, width, base + r * width) for r in np.asarray(rows, dtype=np.int64).tolist())
    return np.frombuffer(buf, dtype=dtype).reshape(len(rows), int(shape[1]))


def _rows_by_rank(sig_path: str, order_path: str) -> Callable[[np.ndarray], np.ndarray]:
    """``ranks -> signature rows`` for a capped bucket's members (the only signature rows a
    bucket task reads), read in ascending row order with :func:`read_signature_rows`."""
    order = np.load(order_path, mmap_mode="r")

    def rows(ranks: np.ndarray) -> np.ndarray:
        idx = np.asarray(order[np.asarray(ranks, dtype=np.int64)])
        srt = np.argsort(idx, kind="stable")
        got = read_signature_rows(sig_path, idx[srt])
        out = np.empty_like(got)
        out[srt] = got
        return out

    return rows


def _bucket_task(job: dict) -> dict:
    """One bucket shard: its entries sorted by (band, key, rank), the pairs of its buckets."""
    slices = [np.load(path, mmap_mode="r")[a:z] for path, a, z in job["inputs"] if z > a]
    e = np.concatenate(slices) if slices else np.zeros((0, 2), dtype=np.uint64)
    del slices
    srt = _key_tag_order(e)
    key, tag = e[srt, 0], e[srt, 1]
    del e, srt
    band = tag >> _TAG_SHIFT
    rank = (tag & _RANK_MASK).astype(np.int64)
    del tag
    starts, sizes, buckets = bucket_runs(key, band)
    if job["cap"] is not None and (sizes > job["cap"]).any():
        central_pivots_first(rank, starts, sizes, job["cap"], _rows_by_rank(job["sig"], job["order"]))
    p, q, stats, capped = run_pairs(starts, sizes, job["cap"])
    stats.buckets = buckets
    n, parts = job["n"], job["parts"]
    rp, rq = rank[p], rank[q]
    del p, q
    codes = sorted_unique(np.minimum(rp, rq) * np.int64(n) + np.maximum(rp, rq))
    del rp, rq
    unknown, known_j = codes, None
    if job["memo"] is not None:  # pairs an earlier build verified need no text
        order = np.load(job["order"], mmap_mode="r")
        hit, known_j = job["memo"].lookup(np.asarray(order[codes // n]), np.asarray(order[codes % n]))
        unknown = codes[~hit]
    named = sorted_unique(np.concatenate([unknown // n, unknown % n]))
    del unknown
    np.save(job["named"], named)
    part = _route(codes, _PART_SALT, parts)
    by_part = np.argsort(part, kind="stable")  # each partition's codes stay ascending
    np.save(job["out"], codes[by_part])
    if known_j is not None:  # the memo's Jaccard (NaN: not known) travels with its pair to verification
        np.save(job["known"], known_j[by_part])
    offsets = _group_offsets(part, parts)
    del codes, part, by_part, known_j
    # capped buckets: what was done, for the report (members beyond the cap by rank)
    c_start, c_size = starts[capped], sizes[capped]
    cap = job["cap"] or 0
    beyond = c_size - cap
    table = np.stack([band[c_start].astype(np.int64), c_size, rank[c_start], beyond,
                      _pivot_pair_counts(c_size, cap)], axis=1).astype(np.int64).reshape(-1, 5)
    members = rank[np.repeat(c_start + cap, beyond) + _ragged_arange(beyond)]
    np.savez(job["capped"], table=table, members=members, bucket=np.repeat(np.arange(capped.size), beyond))
    return {"offsets": offsets, "stats": stats.as_dict(), "entries": int(key.size)}


def _distinct_pairs(job: dict) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """A verification partition's distinct pair codes, ascending, and with a memo the Jaccard the
    bucket tasks looked up for each (NaN: not known). A pair two bucket shards both emitted was
    looked up by both with the same answer: the first is kept."""
    inputs = [(path, a, z) for path, a, z in job["inputs"] if z > a]
    if not inputs:
        return np.zeros(0, dtype=np.int64), (np.zeros(0, dtype=np.float64) if job["known"] is not None else None)
    codes = np.concatenate([np.load(path, mmap_mode="r")[a:z] for path, a, z in inputs])
    if job["known"] is None:
        return sorted_unique(codes), None
    known = np.concatenate([np.load(job["known"][path], mmap_mode="r")[a:z] for path, a, z in inputs])
    if len(inputs) > 1:  # one input is one bucket shard's partition: already ascending and distinct
        srt = np.argsort(codes, kind="stable")
        codes, known = codes[srt], known[srt]
        first = np.ones(codes.size, dtype=bool)
        np.not_equal(codes[1:], codes[:-1], out=first[1:])
        codes, known = codes[first], known[first]
    return codes, known


def _verify_task(job: dict) -> dict:
    """One verification partition: distinct pairs, verified once each (a pair whose Jaccard the
    memo knows is not verified again); edges with J >= tau."""
    codes, known = _distinct_pairs(job)
    n = job["n"]
    order = np.load(job["order"], mmap_mode="r")
    verifier = job["verifier"]
    lo_parts, hi_parts, j_parts = [], [], []
    all_j: list[np.ndarray] = []
    hits = 0
    for s in range(0, codes.size, _VERIFY_BATCH):
        c = codes[s : s + _VERIFY_BATCH]
        lo, hi = c // n, c % n
        i, j = np.asarray(order[lo]), np.asarray(order[hi])
        pairs = np.stack([np.minimum(i, j), np.maximum(i, j)], axis=1)
        if known is not None:
            jac = np.array(known[s : s + _VERIFY_BATCH], dtype=np.float64)
            hit = ~np.isnan(jac)
            hits += int(hit.sum())
        else:
            hit, jac = np.zeros(pairs.shape[0], dtype=bool), np.empty(pairs.shape[0], dtype=np.float64)
        miss = ~hit
        if miss.any():
            got = np.asarray(verifier.jaccard_many(pairs[miss]), dtype=np.float64)
            if got.shape != (int(miss.sum()),):
                raise ValueError(f"verifier.jaccard_many returned shape {got.shape} for {int(miss.sum())} pairs")
            jac[miss] = got
        if job["verdicts"]:
            all_j.append(jac)
        keep = jac >= job["tau"]
        lo_parts.append(lo[keep])
        hi_parts.append(hi[keep])
        j_parts.append(jac[keep])
    cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt)  # noqa: E731
    np.savez(job["out"], lo=cat(lo_parts, np.int64), hi=cat(hi_parts, np.int64), j=cat(j_parts, np.float64))
    if job["verdicts"]:  # every distinct pair with its Jaccard, for the next build's memo
        np.savez(job["verdicts"], lo=codes // n, hi=codes % n, j=cat(all_j, np.float64))
    return {"candidates": int(codes.size), "edges": int(sum(x.size for x in lo_parts)), "memo_hits": hits}


# --------------------------------------------------------------------------------------------
# driver


def _run(engine: Engine, fn, jobs: list, name: str, log, label: str, unit: str) -> list:
    """``engine.map`` in batches, so long stages log progress between batches."""
    if log is None:
        return engine.map(fn, jobs, name=name)
    progress = Progress(log, label, total=len(jobs), unit=unit, quiet_below=SUBPHASE_QUIET_S)
    out: list = []
    step = max(4, 4 * engine.workers)
    for s in range(0, len(jobs), step):
        out.extend(engine.map(fn, jobs[s : s + step], name=name))
        progress.update(len(out))
    progress.finish()
    return out


def _capped_report(files: list[Path], order: np.ndarray, component: np.ndarray, has_edge: np.ndarray,
                   cap: Optional[int]) -> dict:
    """Totals over every capped bucket and the ``REPORT_TOP`` largest one by one (size desc,
    then band, then the pivot's rank): for the members beyond the cap, how many got a verified
    edge and how many ended in the leakage group of the bucket's first member (its pivot)."""
    totals = {"buckets": 0, "members_beyond_cap": 0, "pivot_pairs": 0, "members_with_edge": 0,
              "members_in_pivot_group": 0}
    top = np.zeros((0, 7), dtype=np.int64)  # band, size, pivot rank, beyond, pivot pairs, with edge, in group
    for f in files:
        with np.load(f) as z:
            table, members, bucket = z["table"], z["members"], z["bucket"]
        if not table.shape[0]:
            continue
        rec = order[members]
        piv = order[table[bucket, 2]]
        with_edge = np.bincount(bucket, weights=has_edge[rec], minlength=table.shape[0]).astype(np.int64)
        in_group = np.bincount(bucket, weights=component[rec] == component[piv],
                               minlength=table.shape[0]).astype(np.int64)
        totals["buckets"] += int(table.shape[0])
        totals["members_beyond_cap"] += int(table[:, 3].sum())
        totals["pivot_pairs"] += int(table[:, 4].sum())
        totals["members_with_edge"] += int(with_edge.sum())
        totals["members_in_pivot_group"] += int(in_group.sum())
        top = np.concatenate([top, np.column_stack([table, with_edge, in_group])])
        top = top[np.lexsort((top[:, 2], top[:, 0], -top[:, 1]))][:REPORT_TOP]
    largest = [
        {"band": int(b), "size": int(s), "pivot": int(order[pr]), "members_beyond_cap": int(m),
         "pivot_pairs": int(pp), "members_with_edge": int(we), "members_in_pivot_group": int(ig)}
        for b, s, pr, m, pp, we, ig in top.tolist()
    ]
    return {"bucket_cap": cap, "pivots": CAP_PIVOTS, "window": CAP_WINDOW, **totals,
            "largest": largest, "listed": len(largest)}


def sharded_near_dedup(
    signatures: SignatureFile,
    order: np.ndarray,
    policy: LshPolicy,
    verifier: PairVerifier,
    *,
    workdir: Path,
    shards: int = 1,
    engine: Optional[Engine] = None,
    log: Optional[Callable[[str], None]] = None,
    chunk_rows: Optional[int] = None,
    memo: Optional[PairMemo] = None,
    verdicts: bool = False,
    known_keys: Optional[KnownKeys] = None,
    on_row_keys: Optional[Callable[[int, int, np.ndarray], None]] = None,
) -> NearDedupResult:
    """Near dedup of every row of ``signatures`` under ``policy``; see the module docstring.
    ``shards`` is K (bucket shards = verification partitions); ``engine`` defaults to
    :func:`engine_from_env`; ``chunk_rows`` the rows per key task (default: about 64 MiB of
    signatures). ``memo``: Jaccard values an earlier build computed (``pair_memo``), used instead
    of verifying those pairs again (no text is fetched for them); ``verdicts``: return every
    distinct candidate pair with its Jaccard in ``result.verdicts`` (signature rows ``i < j``, in
    partition order: ``pair_memo.verdict_table`` sorts them by content key), what the next build's
    memo is made of; the driver then holds every candidate pair (24 bytes each), not only the
    verified edges. ``known_keys``: band keys an earlier build made for some rows, taken instead
    of keying those rows again; ``on_row_keys(lo, hi, keys)``: called with every row's band keys,
    ``(hi - lo, bands)`` uint64, in row order (what a next build's ``known_keys`` is made of).
    None of these changes the result.
    Intermediate files go to a fresh directory under ``workdir``, removed at the end."""
    if not isinstance(shards, (int, np.integer)) or shards < 1:
        raise ValueError(f"shards must be an integer >= 1, got {shards!r}")
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows!r}")
    engine = engine or engine_from_env()
    sig = signatures.open()
    if sig.ndim != 2:
        raise ValueError(f"{signatures.path}: signatures must be a 2-D (n, num_perm) matrix, got shape {sig.shape}")
    if not np.issubdtype(sig.dtype, np.unsignedinteger):
        raise ValueError(f"{signatures.path}: signatures must be unsigned integers, got {sig.dtype}")
    n, m = sig.shape
    b, r = policy.params()
    if b * r > m:
        raise ValueError(f"policy needs bands * rows = {b * r} signature values, {signatures.path} has {m}")
    if n >= 1 << 48 or b >= 1 << 16:
        raise ValueError(f"at most 2**48 records and 2**16 bands, got {n} and {b}")
    if shards > np.iinfo(np.uint16).max:
        raise ValueError(f"at most {np.iinfo(np.uint16).max} shards, got {shards}")
    if known_keys is not None and not known_keys.signatures_complete and policy.bucket_cap is not None:
        raise ValueError("a capped policy chooses pivots by signature: known band keys need every signature row")
    order = np.asarray(order)
    if order.shape != (n,) or not np.issubdtype(order.dtype, np.integer):
        raise ValueError(f"order must be {n} integer record indices (one per signature row), got shape {order.shape}")
    order = order.astype(np.int64, copy=False)
    rank = np.full(n, -1, dtype=np.int64)
    if n and (order.min() < 0 or order.max() >= n):
        raise ValueError(f"order must be a permutation of range({n}): index out of range")
    rank[order] = np.arange(n, dtype=np.int64)
    if (rank < 0).any():
        raise ValueError(f"order must be a permutation of range({n}): {int((rank < 0).sum())} indices repeated")
    del sig
    k = int(shards)
    tmp = Path(workdir) / f"sharded-lsh-{uuid.uuid4().hex[:12]}"
    tmp.mkdir(parents=True)
    say = log or (lambda _msg: None)
    try:
        np.save(tmp / "rank.npy", rank)
        np.save(tmp / "order.npy", order)
        rows_per = chunk_rows or max(1, _CHUNK_BYTES // max(1, m * _itemsize(signatures)))
        bounds = [(lo, min(n, lo + rows_per)) for lo in range(0, n, rows_per)]
        key_jobs = [{"sig": signatures.path, "rank": str(tmp / "rank.npy"), "lo": lo, "hi": hi, "bands": b,
                     "rows": r, "shards": k, "out": str(tmp / f"keys-{c:06d}.npy"),
                     "known_keys": known_keys.keys if known_keys else None,
                     "known_mask": known_keys.mask if known_keys else None,
                     "row_keys": str(tmp / f"row-keys-{c:06d}.npy") if on_row_keys else None}
                    for c, (lo, hi) in enumerate(bounds)]
        reused = f" ({known_keys.count} keyed by the previous build)" if known_keys is not None else ""
        setup = (f"{n} records, {b} bands x {r} rows{reused}, cap {policy.bucket_cap}, {k} shards, "
                 f"{len(key_jobs)} key chunks of {rows_per} rows, on {engine.describe()}")
        key_res = _run(engine, _keys_task, key_jobs, "lsh-keys", log, "near dedup: band keys", "chunks")
        if on_row_keys is not None:
            for j in key_jobs:
                on_row_keys(j["lo"], j["hi"], np.load(j["row_keys"]))
                Path(j["row_keys"]).unlink()
        bucket_jobs = [{"inputs": [(j["out"], kr["offsets"][s], kr["offsets"][s + 1]) for j, kr in zip(key_jobs, key_res)],
                        "cap": policy.bucket_cap, "n": n, "parts": k, "out": str(tmp / f"pairs-{s:04d}.npy"),
                        "sig": signatures.path, "order": str(tmp / "order.npy"),
                        "named": str(tmp / f"named-{s:04d}.npy"), "capped": str(tmp / f"capped-{s:04d}.npz"),
                        "memo": memo, "known": str(tmp / f"known-{s:04d}.npy")}
                       for s in range(k)]
        bucket_res = _run(engine, _bucket_task, bucket_jobs, "lsh-buckets", log, "near dedup: bucket shards", "shards")
        for j in key_jobs:
            Path(j["out"]).unlink()
        stats = CandidateStats()
        for br in bucket_res:
            stats.add(CandidateStats(**br["stats"]))
        stats.bands_done = b
        needed_mask = np.zeros(n, dtype=bool)
        for j in bucket_jobs:
            needed_mask[order[np.load(j["named"])]] = True
            Path(j["named"]).unlink()
        needed = np.flatnonzero(needed_mask).astype(np.int64)
        del needed_mask
        emitted = (f"{stats.pair_emissions} pair emissions ({stats.pivot_pairs} pivot pairs of {stats.capped_buckets} "
                   f"capped buckets) naming {needed.size} records, whose texts are read")
        ready = verifier.prepare(needed, Path(workdir))
        del needed
        verify_jobs = [{"inputs": [(j["out"], br["offsets"][v], br["offsets"][v + 1]) for j, br in zip(bucket_jobs, bucket_res)],
                        "n": n, "order": str(tmp / "order.npy"), "verifier": ready, "tau": policy.threshold,
                        "out": str(tmp / f"edges-{v:04d}.npz"),
                        # with a memo: each bucket shard's file of looked-up Jaccard values, by its pairs file
                        "known": {j["out"]: j["known"] for j in bucket_jobs} if memo is not None else None,
                        "verdicts": str(tmp / f"verdicts-{v:04d}.npz") if verdicts else None} for v in range(k)]
        verify_res = _run(engine, _verify_task, verify_jobs, "lsh-verify", log, "near dedup: verified partitions",
                          "partitions")
        for j in bucket_jobs:
            Path(j["out"]).unlink()
            Path(j["known"]).unlink(missing_ok=True)
        candidates = sum(x["candidates"] for x in verify_res)
        hits = sum(x["memo_hits"] for x in verify_res)
        stats.pairs = candidates
        lo, hi, jac = _load_edges([Path(j["out"]) for j in verify_jobs])
        known = f" ({hits} known from the previous build's {memo.entries} verdicts)" if memo is not None else ""
        # one line for the phase (each is a stored event): long phases log their progress as they go
        say(f"near dedup: {setup}: {emitted}; {candidates} distinct candidate pairs{known}, {lo.size} verified edges "
            f"(J >= {policy.threshold})")
        pairs = np.stack([order[hi], order[lo]], axis=1) if lo.size else np.zeros((0, 2), dtype=np.int64)
        del lo, hi
        result = finish_near_dedup(order, rank, pairs, jac, policy, candidates, stats)
        result.memo_hits = hits
        if verdicts:
            vlo, vhi, vj = _load_edges([Path(j["verdicts"]) for j in verify_jobs])
            vi, vk = order[vlo], order[vhi]
            result.verdicts = (np.minimum(vi, vk), np.maximum(vi, vk), vj)
        has_edge = np.zeros(n, dtype=bool)
        has_edge[result.edges.reshape(-1)] = True
        result.capped = _capped_report([Path(j["capped"]) for j in bucket_jobs], order, result.component,
                                       has_edge, policy.bucket_cap)
        if result.capped["buckets"]:
            c = result.capped
            say(f"near dedup: {c['buckets']} capped buckets, {c['members_beyond_cap']} members beyond the cap, "
                f"{c['members_with_edge']} with a verified edge, {c['members_in_pivot_group']} in their pivot's group")
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _itemsize(signatures: SignatureFile) -> int:
    return int(signatures.open().dtype.itemsize)


def _load_edges(files: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi, jac = [], [], []
    for f in files:
        with np.load(f) as z:
            lo.append(z["lo"])
            hi.append(z["hi"])
            jac.append(z["j"])
    if not lo:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    return np.concatenate(lo), np.concatenate(hi), np.concatenate(jac)
