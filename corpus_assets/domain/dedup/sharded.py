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

Reference implementation (one process, K ignored) until the sharded one lands; same output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

import numpy as np

from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.dedup.lsh import LshPolicy, lsh_candidates
from corpus_assets.domain.dedup.near import NearDedupResult, near_dedup

__all__ = ["SignatureFile", "PairVerifier", "sharded_near_dedup"]


@dataclass(frozen=True)
class SignatureFile:
    """An ``(n, num_perm)`` unsigned signature matrix saved with ``np.save`` (opened memory-mapped)."""

    path: str

    def open(self) -> np.ndarray:
        return np.load(self.path, mmap_mode="r")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.open().shape)  # type: ignore[return-value]


class PairVerifier(Protocol):
    def prepare(self, needed: np.ndarray, workdir: Path) -> "PairVerifier":
        """Driver side, once: ``needed`` is the sorted int64 record indices that some candidate
        pair names. Returns the (picklable) verifier the tasks use."""

    def jaccard_many(self, pairs: np.ndarray) -> np.ndarray:
        """Real Jaccard (float64) of each ``(i, j)`` row of an int64 ``(k, 2)`` array."""


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
) -> NearDedupResult:
    """Near dedup of every row of ``signatures`` under ``policy``; see the module docstring."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    sig = np.asarray(signatures.open())
    b, r = policy.params()
    pairs, _ = lsh_candidates(sig, b, r, policy.bucket_cap, order=np.asarray(order, dtype=np.int64))
    needed = np.unique(pairs.reshape(-1)) if pairs.size else np.zeros(0, dtype=np.int64)
    ready = verifier.prepare(needed, Path(workdir))
    return near_dedup(sig, order, policy, jaccard_many=ready.jaccard_many)
