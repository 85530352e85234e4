"""Near duplicates of taken-down records in every snapshot, not only inside current releases.

A content takedown with ``near_duplicates`` must reach a near copy wherever it is stored — in a
snapshot no release selects, in a copy an older build used and the current one no longer sees.
Dedup edges only cover what current releases cluster, so this search reads the stored MinHash
signatures of every snapshot: a copy whose signature agrees with a seed's on at least
``threshold - SLACK`` of the permutations is a candidate, and a candidate is a near copy when the
real Jaccard of the two texts' shingles (dedup normal form, the dedup policy's shingles) is at
least ``threshold`` — the same test dedup applies. Rules and why: docs/deletion.md
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.hashing import dedup_normal_form
from corpus_assets.domain.dedup.minhash import MinHashPolicy, exact_jaccard, text_shingle_hashes
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import MINHASH_SIGNATURES
from corpus_assets.domain.storage.layer_store import LayerStore

__all__ = ["SLACK", "near_copies", "record_texts"]

SLACK = 0.15  # signature agreement below the threshold still checked by real Jaccard (estimate noise)
_BATCH = 8192


def record_texts(store: LayerStore, snapshots: Iterable[str], ids: set[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(record id, snapshot) -> (text, domain) of the given records, from every layer holding record
    copies in chain order, so the last copy wins: the curated text (PII masked, as dedup compares
    it) where there is one, else the canonical text (a record curation rejected keeps it there)."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    wanted = pa.array(sorted(ids), pa.string())
    if not len(wanted):
        return out
    for snap in snapshots:
        for la in registry.record_copy_layers():
            v = store.current(la.asset, snap)
            if v is None:
                continue
            for b in v.iter_batches(la.main_table, batch_size=_BATCH, columns=["record_id", "text", "domain"]):
                t = pa.Table.from_batches([b])
                t = t.filter(pc.fill_null(pc.is_in(t.column("record_id"), value_set=wanted), False))
                for rid, text, domain in zip(*(t.column(c).to_pylist() for c in ("record_id", "text", "domain"))):
                    out[(rid, snap)] = (text or "", domain or "prose")
    return out


def _signature_batches(store: LayerStore, snapshots: Iterable[str]):
    """(snapshot, record ids, signatures) per stored batch of every snapshot's current signatures."""
    for snap in snapshots:
        v = store.current(MINHASH_SIGNATURES, snap)
        if v is None:
            continue
        dtype = np.dtype(v.manifest.get("signature_dtype") or "uint64")
        for b in v.iter_batches("signatures", batch_size=_BATCH, columns=["record_id", "signature"]):
            yield snap, b.column(0).to_pylist(), [np.frombuffer(x, dtype=dtype) for x in b.column(1).to_pylist()]


def near_copies(store: LayerStore, snapshots: list[str], seeds: set[str], threshold: float,
                policy: MinHashPolicy) -> dict[str, float]:
    """Record id -> best verified Jaccard (>= ``threshold``) with any seed, for every record of
    ``snapshots`` that is not a seed. Seeds without a stored signature are compared by nothing."""
    if not seeds:
        return {}
    seed_sigs: list[np.ndarray] = []
    seed_keys: list[tuple[str, str]] = []
    for snap, ids, sigs in _signature_batches(store, snapshots):
        for rid, sig in zip(ids, sigs):
            if rid in seeds:
                seed_sigs.append(sig)
                seed_keys.append((rid, snap))
    if not seed_sigs:
        return {}
    candidates: set[tuple[str, str]] = set()
    for snap, ids, sigs in _signature_batches(store, snapshots):
        by_width: dict[int, list[int]] = {}
        for i, sig in enumerate(sigs):
            if ids[i] not in seeds:
                by_width.setdefault(sig.size, []).append(i)
        blocks = {w: (rows, np.stack([sigs[i] for i in rows])) for w, rows in by_width.items()}
        for seed in seed_sigs:
            if seed.size not in blocks:
                continue
            rows, block = blocks[seed.size]
            agree = (block == seed.astype(block.dtype)).mean(axis=1)
            candidates.update((ids[rows[j]], snap) for j in np.flatnonzero(agree >= threshold - SLACK).tolist())
    if not candidates:
        return {}
    texts = record_texts(store, snapshots, {rid for rid, _ in candidates} | {rid for rid, _ in seed_keys})
    seed_hashes = [text_shingle_hashes(dedup_normal_form(*texts[k]), policy) for k in seed_keys if k in texts]
    out: dict[str, float] = {}
    for key in sorted(candidates):
        if key not in texts:
            continue
        mine = text_shingle_hashes(dedup_normal_form(*texts[key]), policy)
        best = max((exact_jaccard(mine, s) for s in seed_hashes), default=0.0)
        if best >= threshold:
            out[key[0]] = max(best, out.get(key[0], 0.0))
    return out
