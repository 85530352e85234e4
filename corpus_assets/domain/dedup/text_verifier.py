"""Real Jaccard of LSH candidate pairs for ``sharded_near_dedup``, from files the tasks read.

The driver (:meth:`TextPairVerifier.prepare`) fetches the texts of the records some candidate pair
names — only those — and writes their shingle hashes (``minhash.text_shingle_hashes`` of
``dedup_normal_form(text, domain)``, what the release has always verified) to a scratch directory:
one flat ``uint64`` file and, per needed record, where its sorted unique hashes start and how many
there are. The prepared :class:`ShingleSets` is a few paths: tasks memory-map the files and compute
``exact_jaccard`` of each pair, so a task's memory is its pairs, never the release's texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from corpus_assets.domain.dedup.minhash import MinHashPolicy, exact_jaccard, text_shingle_hashes

__all__ = ["TextPairVerifier", "ShingleSets"]

# (record indices of the signature rows asked for) -> batches of (those row numbers, normal forms)
NormalForms = Callable[[np.ndarray], Iterator[tuple[np.ndarray, list[str]]]]


@dataclass
class TextPairVerifier:
    """Driver side: ``normal_forms(rows)`` yields the dedup normal forms of signature rows."""

    normal_forms: NormalForms
    policy: MinHashPolicy
    log: Optional[Callable[[str], None]] = None

    def prepare(self, needed: np.ndarray, workdir: Path) -> "ShingleSets":
        needed = np.asarray(needed, dtype=np.int64)
        if needed.size and np.any(needed[1:] <= needed[:-1]):
            raise ValueError("needed must be sorted and unique")
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        starts = np.zeros(needed.size, dtype=np.int64)
        lens = np.zeros(needed.size, dtype=np.int64)
        hashes_path = workdir / "shingle_hashes.u64"
        at = 0
        with open(hashes_path, "wb") as out:
            for rows, forms in self.normal_forms(needed):
                slots = np.searchsorted(needed, rows)
                for slot, form in zip(slots.tolist(), forms):
                    h = np.ascontiguousarray(text_shingle_hashes(form, self.policy), dtype=np.uint64)
                    starts[slot], lens[slot] = at, h.size
                    out.write(h.tobytes())
                    at += h.size
        np.save(workdir / "needed.npy", needed)
        np.save(workdir / "starts.npy", starts)
        np.save(workdir / "lens.npy", lens)
        if self.log:
            self.log(f"near dedup: shingle sets of {needed.size} candidate records written ({at * 8 / 2**20:.1f} MiB)")
        return ShingleSets(str(workdir), int(at))


@dataclass
class ShingleSets:
    """Task side (picklable: a directory and a length): real Jaccard of signature-row pairs."""

    workdir: str
    total: int
    _loaded: Optional[tuple] = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {"workdir": self.workdir, "total": self.total, "_loaded": None}

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._loaded is None:
            d = Path(self.workdir)
            hashes = (np.memmap(d / "shingle_hashes.u64", dtype=np.uint64, mode="r", shape=(self.total,))
                      if self.total else np.zeros(0, dtype=np.uint64))
            self._loaded = (np.load(d / "needed.npy"), np.load(d / "starts.npy"), np.load(d / "lens.npy"), hashes)
        return self._loaded

    def jaccard_many(self, pairs: np.ndarray) -> np.ndarray:
        needed, starts, lens, hashes = self._arrays()
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if pairs.size == 0:
            return np.zeros(0, dtype=np.float64)
        slots = np.searchsorted(needed, pairs)
        bad = (slots >= needed.size) | (needed[np.minimum(slots, max(needed.size - 1, 0))] != pairs) if needed.size else \
            np.ones(pairs.shape, bool)
        if bad.any():
            raise ValueError(f"pair names row {int(pairs[bad][0])}, which prepare() was not given")
        s, ln = starts[slots], lens[slots]
        out = np.empty(pairs.shape[0], dtype=np.float64)
        for k, (sa, la, sb, lb) in enumerate(zip(s[:, 0].tolist(), ln[:, 0].tolist(), s[:, 1].tolist(), ln[:, 1].tolist())):
            out[k] = exact_jaccard(hashes[sa:sa + la], hashes[sb:sb + lb])
        return out
