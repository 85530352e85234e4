"""The records a release dedups, read as columns from the layers: never a Python object per record.

``build_dedup`` used to hold every record's text, signature and normal form in Python dicts before
LSH ran; at millions of records that, not LSH, set peak memory. Here one pass over each snapshot's
``curated_records`` (light columns only, never ``text``) and ``minhash_signatures`` (never
``signature``) gives an Arrow table of the light columns in record-id order (the record index),
and the stable total order as one polars sort. What is heavy is read later, row groups at a time,
for the rows that need it only (:meth:`ReleaseInputs.read_rows`): signatures of the exact
representatives into an on-disk matrix, texts of exact-key groups and of LSH candidates.

The order (:func:`order_rank`) is ``clusters_layer.representative_order_key`` (the reference
definition) computed as columns; a unit test holds them equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.progress import SUBPHASE_QUIET_S, Progress
from corpus_assets.domain.dedup.release_view import Excluded, ReleaseView
from corpus_assets.domain.layers.registry import CURATED_RECORDS, MINHASH_SIGNATURES
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion

__all__ = ["ReleaseInputs", "binary_matrix", "load_release_inputs", "order_rank", "eligible_column", "write_signature_rows"]

NO_PRIORITY = 1_000_000  # a source without a declared priority sorts after every declared one
_LIGHT = ("record_id", "source_id", "governance_json", "schema_type", "domain", "lang", "char_count", "group_id")
_LOW_CARDINALITY = ("source_id", "snapshot", "schema_type", "domain", "lang")
_RECORD_SCHEMA = pa.schema([
    ("record_id", pa.string()), ("source_id", pa.string()), ("snapshot", pa.string()), ("dedup_key", pa.string()),
    ("schema_type", pa.string()), ("domain", pa.string()), ("lang", pa.string()), ("char_count", pa.int64()),
    ("eligible", pa.bool_()), ("group_id", pa.string()), ("part", pa.int32()), ("cur_pos", pa.int64()),
    ("sig_pos", pa.int64()),
])
_LEFT_SCHEMA = pa.schema([
    ("record_id", pa.string()), ("source_id", pa.string()), ("schema_type", pa.string()), ("domain", pa.string()),
    ("lang", pa.string()), ("char_count", pa.int64()), ("snapshot", pa.string()),
])


@dataclass
class ReleaseInputs:
    """The copies a release clusters, one row per record index (record-id order), and the copies it
    leaves out (in ``view.excluded`` order). ``records`` columns: record_id, source_id, snapshot,
    dedup_key, schema_type, domain, lang, char_count, eligible, group_id, part (index into
    ``curated``), cur_pos / sig_pos (row number in that snapshot's curated records / signatures)."""

    records: pa.Table
    left_out: pa.Table
    curated: list[LayerVersion]  # per part: the snapshot's curated_records version
    signatures: list[LayerVersion]  # per part: its minhash_signatures version
    signature_dtype: Optional[str]
    signature_digests: dict[str, str]

    @property
    def n(self) -> int:
        return self.records.num_rows

    def column(self, name: str) -> np.ndarray:
        return self.records.column(name).to_numpy()

    def rows_of(self, indices: np.ndarray, snapshots: Iterable[str],
                columns: tuple[str, ...] = ("record_id", "snapshot")) -> pl.DataFrame:
        """Record ``indices`` as a polars frame: ``at`` (the position in ``indices``) and
        ``columns`` as strings, only the rows from ``snapshots`` (what a previous build's tables
        are joined with)."""
        at = pa.array(np.asarray(indices, dtype=np.int64))
        return pl.DataFrame({
            "at": np.arange(len(at), dtype=np.int64),
            **{c: self.records.column(c).take(at).combine_chunks().cast(pa.string()) for c in columns},
        }).filter(pl.col("snapshot").is_in(list(snapshots)))

    def read_rows(self, indices: np.ndarray, which: str, columns: list[str],
                  progress: Optional[Progress] = None) -> Iterator[tuple[np.ndarray, pa.Table]]:
        """``(record indices, rows)`` of ``which`` (``curated`` records or ``signatures``) for the
        given record indices, a row group at a time; only row groups holding one are read."""
        indices = np.asarray(indices, dtype=np.int64)
        part = self.column("part")[indices]
        pos = self.column("cur_pos" if which == "curated" else "sig_pos")[indices]
        versions = self.curated if which == "curated" else self.signatures
        table = "records" if which == "curated" else "signatures"
        done = 0
        for p in np.unique(part).tolist():
            sel = np.flatnonzero(part == p)
            srt = np.argsort(pos[sel], kind="stable")
            idx, want = indices[sel][srt], pos[sel][srt]
            for lo, hi, rows in versions[p].take_rows(table, want, columns=columns):
                yield idx[lo:hi], rows
                done += hi - lo
                if progress is not None:
                    progress.update(done)


def eligible_column(governance_json: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Governance eligibility (license and rights evidence recorded) per row; each distinct
    governance JSON is parsed once (a source's records share theirs)."""
    enc = pc.dictionary_encode(governance_json)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc

    def ok(s: str) -> bool:
        gov = json.loads(s)
        return bool(gov.get("license")) and bool(gov.get("rights_evidence"))

    values = pa.array([ok(s) for s in enc.dictionary.to_pylist()], pa.bool_())
    return values.take(enc.indices)


def order_rank(records: pl.DataFrame, source_priority: Mapping[str, int],
               primary_locales: Mapping[str, str] = {}) -> np.ndarray:
    """Rank (int64, 0 first) of every row in the stable total order of Algorithm 18.1:
    governance eligibility, quality (not scored yet: 0), source priority, a resolved path before a
    copy reached through a symlink, the source's primary locale before other paths, record id —
    ``representative_order_key`` as polars columns and one sort. Needs columns record_id,
    source_id, eligible, group_id."""
    rid, src, gid = pl.col("record_id").cast(pl.String), pl.col("source_id"), pl.col("group_id").cast(pl.String)
    prio = {str(k): int(v) for k, v in source_priority.items()}
    keys = records.select(
        (~pl.col("eligible")).cast(pl.UInt8).alias("ineligible"),
        src.cast(pl.String).replace_strict(prio, default=NO_PRIORITY, return_dtype=pl.Int64).alias("priority")
        if prio else pl.lit(NO_PRIORITY, pl.Int64).alias("priority"),
        # via_symlink: a doc: group other than the record's own
        (gid.str.starts_with("doc:").fill_null(False) & (gid != pl.lit("doc:") + rid).fill_null(True))
        .cast(pl.UInt8).alias("symlinked"),
        (~_in_locale(records, primary_locales)).cast(pl.UInt8).alias("off_locale"),
        rid,
    )
    if keys.height != keys.get_column("record_id").n_unique():
        dup = keys.filter(rid.is_duplicated()).get_column("record_id").sort()[0]
        raise ValueError(f"record id {dup!r} is used twice: the order would not be total")
    order = keys.select(pl.arg_sort_by(["ineligible", "priority", "symlinked", "off_locale", "record_id"])).to_series()
    rank = np.empty(keys.height, dtype=np.int64)
    rank[order.to_numpy()] = np.arange(keys.height, dtype=np.int64)
    return rank


def _in_locale(records: pl.DataFrame, primary_locales: Mapping[str, str]) -> pl.Expr:
    """``clusters_layer.in_locale`` for every row, as one boolean expression."""
    expr = pl.lit(True)
    for source, locale in sorted(primary_locales.items()):
        if not locale:
            continue
        want = locale.lower().replace("_", "-")
        # part + "-" is a prefix of want: en-US matches a folder en/
        prefixes = [want[:i] for i, c in enumerate(want) if c == "-" and i]
        parts = (
            pl.col("record_id").str.slice(len(source) + 1).str.to_lowercase()
            .str.replace_all("_", "-", literal=True).str.replace_all(".", "/", literal=True).str.split("/")
        )
        e = pl.element()
        hit = parts.list.eval((e != "") & ((e == want) | e.str.starts_with(want + "-") | e.is_in(prefixes))).list.any()
        expr = pl.when(pl.col("source_id").cast(pl.String) == source).then(hit).otherwise(expr)
    return expr


def load_release_inputs(store: LayerStore, snapshots: Sequence[str], view: ReleaseView, *,
                        log: Optional[Callable[[str], None]] = None, label: str = "dedup") -> ReleaseInputs:
    """One pass over the light columns of every selected snapshot (see the module docstring).
    Every used copy must have its signature: a snapshot whose signatures are not those of its
    current curated records is refused, naming it."""
    excluded_by_snap: dict[str, list[str]] = {}
    for e in view.excluded:
        excluded_by_snap.setdefault(e.snapshot, []).append(e.record_id)
    used_parts, left_parts = [], []
    curated, sigs, digests = [], [], {}
    dtype = None
    progress = Progress(log, f"{label}: light columns read", unit="rows", quiet_below=SUBPHASE_QUIET_S) if log else None
    read = 0
    for snap in sorted(snapshots):
        sig_v = store.require_current(MINHASH_SIGNATURES, snap)
        digests[snap] = sig_v.content_digest
        dtype = sig_v.manifest.get("signature_dtype") or dtype
        used_ids = view.chosen_ids(snap)  # sorted
        left = excluded_by_snap.get(snap, [])
        if not len(used_ids) and not left:
            continue
        cur_v = store.require_current(CURATED_RECORDS, snap)
        part = len(curated)
        curated.append(cur_v)
        sigs.append(sig_v)
        left_ids = pa.array(sorted(left), pa.string())
        # the whole snapshot's light rows first (governance reduced to a bool per batch), then ONE
        # membership test per id set: pc.is_in hashes its value set on every call, so a test per
        # row group would hash the release's ids once per row group (quadratic in the snapshot)
        pos, rows = 0, []
        for b in cur_v.iter_batches("records", batch_size=65536, columns=list(_LIGHT)):
            t = pa.Table.from_batches([b]).append_column("cur_pos", pa.array(np.arange(pos, pos + b.num_rows)))
            rows.append(t.drop_columns(["governance_json"]).append_column("eligible", eligible_column(t.column("governance_json"))))
            pos += b.num_rows
            read += b.num_rows
            if progress is not None:
                progress.update(read)
        light = pa.concat_tables(rows) if rows else None
        del rows
        if light is not None and len(left_ids):
            lt = light.filter(pc.is_in(light.column("record_id"), value_set=left_ids)).select(
                ["record_id", "source_id", "schema_type", "domain", "lang", "char_count"])
            left_parts.append(lt.append_column("snapshot", pa.array([snap] * lt.num_rows, pa.string())))
        if not len(used_ids):
            continue
        spos, sig_rows = 0, []
        for b in sig_v.iter_batches("signatures", batch_size=65536, columns=["record_id", "snapshot", "dedup_key"]):
            sig_rows.append(pa.Table.from_batches([b]).append_column("sig_pos", pa.array(np.arange(spos, spos + b.num_rows))))
            spos += b.num_rows
        if light is None:
            raise ValueError(f"{snap}: curated_records holds no rows, the release view uses {len(used_ids)} of them")
        cur = light.filter(pc.is_in(light.column("record_id"), value_set=used_ids))
        del light
        sig = pa.concat_tables(sig_rows)
        sig = sig.filter(pc.is_in(sig.column("record_id"), value_set=used_ids))
        joined = _aligned(sig, cur)
        joined = joined.append_column("part", pa.array(np.full(joined.num_rows, part, dtype=np.int32)))
        if joined.num_rows != len(used_ids) or sig.num_rows != joined.num_rows:
            missing = sorted(set(cur.column("record_id").to_pylist()) ^ set(sig.column("record_id").to_pylist()))
            raise ValueError(
                f"{snap}: minhash_signatures does not hold one signature per curated record the release uses "
                f"({len(used_ids)} used, {sig.num_rows} signatures, e.g. {missing[:3]}); rematerialize minhash_signatures[{snap}]")
        # no line per snapshot: a release over years of hourly captures reads tens of thousands of
        # them, and each line is an event Dagster stores; the progress line counts the rows
        used_parts.append(joined.select(list(_RECORD_SCHEMA.names)).cast(_RECORD_SCHEMA))
    if progress is not None:
        progress.finish()
    table = pa.concat_tables(used_parts) if used_parts else _RECORD_SCHEMA.empty_table()
    table = table.take(pc.sort_indices(table, sort_keys=[("record_id", "ascending"), ("part", "ascending")]))
    return ReleaseInputs(_compact(table), _left_out_in_view_order(left_parts, view.excluded), curated, sigs, dtype,
                         dict(sorted(digests.items())))


def _aligned(sig: pa.Table, cur: pa.Table) -> pa.Table:
    """``sig`` inner-joined with ``cur`` on record_id. minhash_signatures writes one row per curated
    record in the curated order (and a purge drops rows from both), so the rows usually already
    pair up: then the columns are put side by side instead of hash-joined (the order of the rows
    does not matter: the caller sorts by record id)."""
    if sig.num_rows == cur.num_rows and pc.all(pc.equal(sig.column("record_id"), cur.column("record_id"))).as_py() is True:
        rest = cur.drop_columns(["record_id"])
        return pa.Table.from_arrays([*sig.columns, *rest.columns], names=[*sig.column_names, *rest.column_names])
    return sig.join(cur, keys="record_id", join_type="inner")


def _compact(t: pa.Table) -> pa.Table:
    """Plain strings for the ids, dictionaries for the columns with few distinct values."""
    cols = {}
    for name in t.column_names:
        c = t.column(name).combine_chunks()
        if pa.types.is_large_string(c.type) or pa.types.is_string_view(c.type):
            c = c.cast(pa.string())
        if name in _LOW_CARDINALITY:
            c = pc.dictionary_encode(c)
        cols[name] = c
    return pa.table(cols)


def _left_out_in_view_order(parts: list[pa.Table], excluded: list[Excluded]) -> pa.Table:
    """The light row of each copy the view leaves out, in ``excluded`` order."""
    order = pa.table({"at": pa.array(np.arange(len(excluded), dtype=np.int64)),
                      "snapshot": pa.array([e.snapshot for e in excluded], pa.string()),
                      "record_id": pa.array([e.record_id for e in excluded], pa.string())})
    rows = pa.concat_tables(parts) if parts else _LEFT_SCHEMA.empty_table()
    out = order.join(rows.cast(_LEFT_SCHEMA), keys=["snapshot", "record_id"], join_type="left outer")
    out = out.take(pc.sort_indices(out, sort_keys=[("at", "ascending")]))
    if out.column("source_id").null_count:
        at = pc.index(pc.is_null(out.column("source_id")), True).as_py()
        raise ValueError(f"copy {out.column('record_id')[at]} of {out.column('snapshot')[at]} left out by the release "
                         "view is not in that snapshot's curated records")
    return _compact(out.select(["record_id", "snapshot", "source_id", "schema_type", "domain", "lang", "char_count"]))


def write_signature_rows(inputs: ReleaseInputs, indices: np.ndarray, path: Path, num_perm: int,
                         progress: Optional[Progress] = None, *, flush: bool = True,
                         only: Optional[np.ndarray] = None) -> np.ndarray:
    """Signatures of record ``indices`` (in that order) into an ``np.save`` file at ``path``,
    written through a memory map a row group at a time. Returns the memory-mapped matrix.
    ``only``: the rows to fill (positions into ``indices``, ascending); the others stay zero, file
    holes nothing reads. ``flush=False`` skips the ``msync``: processes on this machine read the
    map's pages from the page cache anyway; only readers on other machines need it."""
    dtype = np.dtype(inputs.signature_dtype or "uint64")
    indices = np.asarray(indices, dtype=np.int64)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(indices.size, num_perm))
    wanted = indices if only is None else indices[np.asarray(only, dtype=np.int64)]
    if wanted.size:
        row_of = np.full(inputs.n, -1, dtype=np.int64)
        row_of[indices] = np.arange(indices.size)
        for idx, rows in inputs.read_rows(wanted, "signatures", ["signature"], progress):
            out[row_of[idx]] = binary_matrix(rows.column("signature"), dtype, num_perm)
    if flush:
        out.flush()
    return out


def binary_matrix(col: pa.ChunkedArray | pa.Array, dtype: np.dtype, num_perm: int) -> np.ndarray:
    """A binary column of fixed-length rows (signatures, band keys) as an ``(m, num_perm)`` array
    (no copy per row)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        raise ValueError("a signature is null")
    width = num_perm * dtype.itemsize
    off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=off_type)[arr.offset: arr.offset + len(arr) + 1]
    if len(arr) and not np.all(np.diff(offsets) == width):
        raise ValueError(f"signatures are not {num_perm} x {dtype} ({width} bytes) each: "
                         "the minhash policy differs from the one the signatures were built with")
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]: offsets[-1]] if len(arr) else np.zeros(0, np.uint8)
    return data.view(dtype).reshape(len(arr), num_perm)
