"""LSH band keys kept from one dedup build of a release to the next, so a rebuild after an
increment keys only the records whose signatures it has not keyed before.

A record's band keys are a function of its MinHash signature, the LSH ``bands`` and ``rows`` and
the key function (``lsh.band_key``, versioned by ``LSH_CODE_VERSION``). A build keeps the keys of
its exact representatives in the ``band_keys`` table (snapshot, record id, ``bands`` little-endian
uint64; :func:`band_key_rows`) and records under what it made them (``band_keys`` in the manifest:
:func:`band_keys_record`). The next build takes a representative's keys from there
(:func:`known_band_keys`) when the record is the same copy of the same snapshot and that
snapshot's ``minhash_signatures`` version is the one the earlier build read (its content digest,
``build_spec.signatures``), under the same parameters and code. Everything else is keyed from its
signature. A stored key is the value ``band_key`` computes from the same signature, so the
candidates, clusters and every table are the same bytes with or without the cache (tested).

Cost: 8 bytes per band per representative on disk (72 B at 9 bands, against 1 KiB of a 128-value
uint64 signature), and an increment reads those instead of the signatures of every record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import polars as pl
import pyarrow as pa

from corpus_assets.domain.dedup.lsh import LSH_CODE_VERSION
from corpus_assets.domain.dedup.release_inputs import ReleaseInputs, binary_matrix
from corpus_assets.domain.dedup.sharded import KnownKeys
from corpus_assets.domain.layers.registry import BAND_KEYS_SCHEMA
from corpus_assets.domain.storage.layer_store import LayerVersion

__all__ = ["BAND_KEYS_TABLE", "band_key_rows", "band_keys_record", "known_band_keys"]

BAND_KEYS_TABLE = "band_keys"
_KEY = np.dtype("<u8")


def band_keys_record(bands: int, rows: int) -> dict:
    """What a version's band keys were made with (its manifest's ``band_keys``)."""
    return {"bands": int(bands), "rows": int(rows), "code_version": LSH_CODE_VERSION}


def band_key_rows(inputs: ReleaseInputs, indices: np.ndarray, keys: np.ndarray) -> pa.Table:
    """The ``band_keys`` rows of record ``indices`` (exact representatives, in that order) with
    their ``(len(indices), bands)`` uint64 keys."""
    keys = np.ascontiguousarray(keys, dtype=_KEY)
    n, width = keys.shape[0], keys.shape[1] * _KEY.itemsize
    at = pa.array(np.asarray(indices, dtype=np.int64))
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    col = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(keys.view(np.uint8))])
    return pa.table({
        "snapshot": inputs.records.column("snapshot").take(at).cast(pa.string()),
        "record_id": inputs.records.column("record_id").take(at).cast(pa.string()),
        "keys": col.cast(pa.binary()),
    }, schema=BAND_KEYS_SCHEMA)


def known_band_keys(previous: Optional[LayerVersion], inputs: ReleaseInputs, indices: np.ndarray, bands: int,
                    rows: int, workdir: Path, *, needs_signatures: bool = False) -> tuple[KnownKeys, np.ndarray]:
    """The keys ``previous`` (the release's current dedup version) holds for record ``indices``, as
    the :class:`KnownKeys` the near-dedup tasks read (files under ``workdir``: an ``np.save`` matrix
    ``(len(indices), bands)`` uint64, zero where not known — file holes — and the boolean mask of
    the rows it holds), with that mask. The signatures of the known rows need not be written unless
    ``needs_signatures`` (a bucket cap chooses pivots by signature) or no row is known
    (``KnownKeys.signatures_complete``). Only row groups of ``band_keys`` holding a wanted row are read."""
    indices = np.asarray(indices, dtype=np.int64)
    workdir = Path(workdir)
    keys_path, mask_path = workdir / "known-keys.npy", workdir / "known.npy"
    out = np.lib.format.open_memmap(keys_path, mode="w+", dtype=np.uint64, shape=(indices.size, bands))
    known = np.zeros(indices.size, dtype=bool)
    for rows_at, keys in _stored_keys(previous, inputs, indices, bands, rows):
        out[rows_at] = keys
        known[rows_at] = True
    out.flush()
    del out
    np.save(mask_path, known)
    count = int(known.sum())
    return KnownKeys(str(keys_path), str(mask_path), count, needs_signatures or count == 0), known


def _stored_keys(previous: Optional[LayerVersion], inputs: ReleaseInputs, indices: np.ndarray, bands: int,
                 rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(positions in indices, their keys)`` batches of the rows ``previous`` keyed from the same
    signatures under the same parameters and code; nothing when it cannot be trusted."""
    if previous is None or not indices.size or BAND_KEYS_TABLE not in previous.manifest.get("tables", {}):
        return
    if previous.manifest.get(BAND_KEYS_TABLE) != band_keys_record(bands, rows):
        return
    read = (previous.manifest.get("build_spec") or {}).get("signatures") or {}
    same = sorted(s for s, digest in inputs.signature_digests.items() if read.get(s) == digest)
    if not same:
        return
    wanted = inputs.rows_of(indices, same)
    stored = pl.from_arrow(previous.read_table(BAND_KEYS_TABLE, columns=["snapshot", "record_id"])) \
        .with_row_index("pos").filter(pl.col("snapshot").is_in(same))
    match = wanted.join(stored, on=["snapshot", "record_id"], how="inner").sort("pos")
    rows_at = match.get_column("at").to_numpy().astype(np.int64)
    pos = match.get_column("pos").to_numpy().astype(np.int64)
    for lo, hi, t in previous.take_rows(BAND_KEYS_TABLE, pos, columns=["keys"]):
        yield rows_at[lo:hi], binary_matrix(t.column("keys"), _KEY, bands)
