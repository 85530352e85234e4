"""Test corpora for the sharded near dedup: integer shingle sets, their MinHash signatures and a
:class:`~corpus_assets.domain.dedup.sharded.PairVerifier` computing real Jaccard from the sets.

A module of its own (imported as ``dedup_verifiers``: tests/ is on sys.path through its conftest, and spawned Dask workers inherit sys.path) so that Dask worker processes of a
LocalCluster can unpickle the verifier: test modules themselves are not importable there."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from corpus_assets.domain.dedup.lsh import _mix as _mix_in_place  # splitmix64, the release's own mixer


def _mix(h: np.ndarray) -> np.ndarray:
    return _mix_in_place(h.copy())


def minhash(sets: list[np.ndarray], num_perm: int, seed: int = 1) -> np.ndarray:
    """uint32 ``(n, num_perm)`` MinHash signatures: for hash k, the minimum over the set of the
    low 32 bits of splitmix64(x ^ salt_k)."""
    salts = _mix(np.arange(1, num_perm + 1, dtype=np.uint64) * np.uint64(seed * 7919 + 1))
    lengths = np.array([s.size for s in sets])
    flat = np.concatenate(sets).astype(np.uint64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty((len(sets), num_perm), dtype=np.uint32)
    for k in range(num_perm):
        h = (_mix(flat ^ salts[k]) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        out[:, k] = np.minimum.reduceat(h, starts)
    return out


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


class SetVerifier:
    """Real Jaccard over integer sets. ``prepare`` keeps only the records some candidate names
    (written to one file under ``workdir``, as the dedup layer fetches only those texts) and
    returns a verifier that reads that file in the task."""

    def __init__(self, sets: list[np.ndarray]):
        self.sets = sets
        self.prepared_with: np.ndarray | None = None

    def prepare(self, needed: np.ndarray, workdir: Path) -> "PreparedSets":
        self.prepared_with = np.asarray(needed).copy()
        chosen = [self.sets[int(i)] for i in needed]
        lengths = np.array([s.size for s in chosen], dtype=np.int64)
        path = Path(workdir) / "sets.npz"
        np.savez(path, index=np.asarray(needed, dtype=np.int64),
                 values=np.concatenate(chosen) if chosen else np.zeros(0, np.int64),
                 offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        return PreparedSets(str(path))

    def jaccard_many(self, pairs: np.ndarray) -> np.ndarray:  # the unsharded near_dedup's callable
        return np.array([jaccard(self.sets[i], self.sets[j]) for i, j in np.asarray(pairs).tolist()], dtype=np.float64)


class PreparedSets:
    def __init__(self, path: str):
        self.path = path

    def jaccard_many(self, pairs: np.ndarray) -> np.ndarray:
        with np.load(self.path) as z:
            index, values, offsets = z["index"], z["values"], z["offsets"]
        pos = np.searchsorted(index, np.asarray(pairs))
        if pairs.size and not np.array_equal(index[pos], pairs):
            raise KeyError("a pair names a record prepare() was not given")
        out = np.empty(pairs.shape[0], dtype=np.float64)
        for k, (a, b) in enumerate(pos.tolist()):
            out[k] = jaccard(values[offsets[a]:offsets[a + 1]], values[offsets[b]:offsets[b + 1]])
        return out


def planted_corpus(n: int, clusters: list[int], *, set_size: int = 40, changed: int = 2, seed: int = 0):
    """``n`` random sets; the first records of ``clusters[c]`` random positions each form a
    near-duplicate cluster: a base set of ``set_size + 20`` values with ``changed`` of them
    replaced per member (J to the base >= (s-c)/(s+c), between members >= (s-2c)/(s+2c)).
    Returns (sets, cluster member lists in index order)."""
    rng = np.random.default_rng(seed)
    sets = [np.unique(rng.integers(0, 2**40, size=set_size)) for _ in range(n)]
    positions = rng.permutation(n)
    members, at = [], 0
    for size in clusters:
        idx = np.sort(positions[at:at + size])
        at += size
        base = np.unique(rng.integers(0, 2**40, size=set_size + 20))
        for i in idx.tolist():
            s = base.copy()
            s[rng.choice(s.size, size=changed, replace=False)] = rng.integers(2**41, 2**42, size=changed)
            sets[i] = np.unique(s)
        members.append(idx)
    return sets, members
