"""Real Jaccard of LSH candidate pairs for ``sharded_near_dedup``, from files the tasks read.

The driver (:meth:`TextPairVerifier.prepare`) fetches the texts of the records some candidate pair
names — only those — and writes their shingle hashes (``minhash.text_shingle_hashes`` of
``dedup_normal_form(text, domain)``, what the release has always verified) to a scratch directory:
one flat ``uint64`` file and, per needed record, where its sorted unique hashes start and how many
there are. The prepared :class:`ShingleSets` is a few paths: tasks memory-map the files and compute
``exact_jaccard`` of each pair (:func:`jaccard_sorted`: the sets are stored sorted and unique), so a
task's memory is its pairs, never the release's texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from corpus_assets.domain.dedup.minhash import MinHashPolicy, _hash_spans, _spans

__all__ = ["TextPairVerifier", "ShingleSets", "shingle_hashes_many", "jaccard_sorted"]

BATCH_CHARS = 512 << 10  # texts hashed at once (as ``minhash.signatures`` batches them)


def shingle_hashes_many(forms: list[str], policy: MinHashPolicy) -> list[np.ndarray]:
    """``minhash.text_shingle_hashes(form, policy)`` of every form, hashed a batch at a time: a
    text's shingle spans do not depend on its batch (``minhash._spans``), so each set is the same
    sorted unique uint64 array, for a fraction of the per-text cost."""
    out: list[np.ndarray] = []
    i = 0
    while i < len(forms):
        j, size = i, 0
        while j < len(forms) and (j == i or size + len(forms[j]) <= BATCH_CHARS):
            size += len(forms[j])
            j += 1
        buf, starts, ends, doc = _spans(forms[i:j], policy.shingles)
        hv = _hash_spans(buf, starts, ends, policy.hash_function) if starts.size else np.zeros(0, np.uint64)
        srt = np.lexsort((hv, doc))
        hv, doc = hv[srt].astype(np.uint64, copy=False), doc[srt]
        keep = np.ones(hv.size, dtype=bool)
        keep[1:] = (hv[1:] != hv[:-1]) | (doc[1:] != doc[:-1])
        hv, doc = hv[keep], doc[keep]
        bounds = np.searchsorted(doc, np.arange(j - i + 1))
        out.extend(hv[bounds[k]:bounds[k + 1]] for k in range(j - i))
        i = j
    return out


def jaccard_sorted(a: np.ndarray, b: np.ndarray) -> float:
    """``minhash.exact_jaccard`` of two sorted unique hash arrays (the same value, without
    re-sorting them): 0.0 when either is empty."""
    if a.size == 0 or b.size == 0:
        return 0.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)

# (record indices of the signature rows asked for) -> batches of (those row numbers, normal forms)
NormalForms = Callable[[np.ndarray], Iterator[tuple[np.ndarray, list[str]]]]


@dataclass
class TextPairVerifier:
    """Driver side: ``normal_forms(rows)`` yields the dedup normal forms of signature rows."""

    normal_forms: NormalForms
    policy: MinHashPolicy

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
                for slot, h in zip(slots.tolist(), shingle_hashes_many(forms, self.policy)):
                    starts[slot], lens[slot] = at, h.size
                    out.write(np.ascontiguousarray(h, dtype=np.uint64).tobytes())
                    at += h.size
        np.save(workdir / "needed.npy", needed)
        np.save(workdir / "starts.npy", starts)
        np.save(workdir / "lens.npy", lens)
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
            out[k] = jaccard_sorted(hashes[sa:sa + la], hashes[sb:sb + lb])
        return out
