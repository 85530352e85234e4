"""Shards of packed training blocks, in the Megatron ``IndexedDataset`` format plus sidecars.

A shard holds whole blocks only (``floor(S / T)`` blocks of ``seq_len`` T in at most
``shard_positions`` S, ``S >= T``): ``<name>.bin`` / ``<name>.idx`` (megatron-core reads them), raw
``loss_mask`` / ``segment_ids`` / ``position_ids`` sidecars and ``<name>.spans.parquet``.
``shards.json`` (``write_shard_manifest``) is the publish point, written last. Files are
deterministic (same input, same bytes), written atomically and re-hashed by ``verify_shard``;
``ShardWriter`` streams and gives the same bytes as one ``write_shards`` call.

File formats, metadata and decisions: docs/packing.md#shards
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import sha256_file as file_sha256
from corpus_assets.domain.core.atomic_files import atomic_write, fsync_dir, staged_write

__all__ = [
    "SHARD_FORMAT",
    "MANIFEST_NAME",
    "MEGATRON_INDEX_HEADER",
    "MEGATRON_DTYPE_CODES",
    "ShardIntegrityError",
    "shard_capacity",
    "sidecar_dtypes",
    "token_dtype",
    "shard_name",
    "write_shards",
    "ShardWriter",
    "with_record_labels",
    "write_shard_manifest",
    "load_shard_manifest",
    "verify_shard",
    "check_shard",
    "array_dtypes",
    "file_sha256",
    "megatron_index_bytes",
    "ShardView",
    "open_shard",
]

SHARD_FORMAT = "megatron-mmidx-v1+corpus-sidecars-1"
MANIFEST_NAME = "shards.json"
MEGATRON_INDEX_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_INDEX_VERSION = 1
# megatron.core.datasets.indexed_dataset.DType
MEGATRON_DTYPE_CODES: dict[str, int] = {
    "uint8": 1,
    "int8": 2,
    "int16": 3,
    "int32": 4,
    "int64": 5,
    "float64": 6,
    "float32": 7,
    "uint16": 8,
}
_IDX_FIXED_BYTES = 9 + 8 + 1 + 8 + 8  # header, version, dtype code, sequence count, document count

# What a shard whose metadata names no sidecar dtypes holds (shards written before they were named).
SIDECAR_DTYPES: dict[str, str] = {"loss_mask": "<u1", "segment_ids": "<i4", "position_ids": "<i4"}
DEFAULT_LABEL_COLUMNS = ("source", "domain")
_FILE_MODE = 0o644

PathLike = Union[str, "os.PathLike[str]"]


class ShardIntegrityError(CorpusError, RuntimeError):
    """A shard file is missing, has the wrong size or digest, or its index disagrees with its metadata."""


# --- sizes and names ----------------------------------------------------------------------------


def shard_capacity(shard_positions: int, seq_len: int) -> int:
    """Blocks per shard: ``floor(S / T)``; ``S >= T`` is required (a shard holds whole blocks only)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if shard_positions < seq_len:
        raise ValueError(
            f"shard_positions (S={shard_positions}) must be >= seq_len (T={seq_len}): "
            "a shard holds whole blocks only"
        )
    return shard_positions // seq_len


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (``vocab_size <= 65535``), else ``int32`` (little-endian)."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    if vocab_size > np.iinfo(np.int32).max:
        raise ValueError(f"vocab_size {vocab_size} does not fit int32 token ids")
    return np.dtype("<u2") if vocab_size <= 65535 else np.dtype("<i4")


def sidecar_dtypes(seq_len: int) -> dict[str, str]:
    """Sidecar dtypes of a shard of blocks of ``seq_len``: segment ids (``1..k`` within a block,
    ``k <= seq_len``) and position ids (``< seq_len``) are ``uint16`` when ``seq_len <= 65535``,
    else ``int32``; the loss mask is ``uint8``. Recorded per shard (``sidecar_dtypes``)."""
    narrow = "<u2" if seq_len <= 65535 else "<i4"
    return {"loss_mask": "<u1", "segment_ids": narrow, "position_ids": narrow}


def shard_name(name_prefix: str, index: int) -> str:
    return f"{name_prefix}-{index:05d}"


def _check_name_prefix(name_prefix: str) -> None:
    if not name_prefix or "/" in name_prefix or "\\" in name_prefix or name_prefix.startswith("."):
        raise ValueError(f"name_prefix must be a plain file name, got {name_prefix!r}")


# --- input validation ---------------------------------------------------------------------------


def _as_blocks(name: str, arr: Any, n: int, seq_len: int) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim != 2 or a.shape != (n, seq_len):
        raise ValueError(f"{name} must have shape (n, seq_len) = ({n}, {seq_len}), got {a.shape}")
    if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}")
    return a


def _checked_cast(name: str, a: np.ndarray, dtype: np.dtype, lo: int, hi: int) -> np.ndarray:
    """Cast to ``dtype`` after checking every value lies in ``[lo, hi]`` (no silent wrap-around)."""
    if a.size:
        amin, amax = int(a.min()), int(a.max())
        if amin < lo or amax > hi:
            raise ValueError(f"{name} has values in [{amin}, {amax}], outside the allowed [{lo}, {hi}]")
    return np.ascontiguousarray(a, dtype=dtype)


def _validate_spans(spans: pa.Table, n: int, first_block: int) -> pa.Table:
    """Check the ``block`` column (``first_block .. first_block + n - 1``) and re-base it to 0..n-1."""
    if "block" not in spans.column_names:
        raise ValueError(
            f"spans must have a 'block' column (block index within the input); columns: {spans.column_names}"
        )
    if not pa.types.is_integer(spans.schema.field("block").type):
        raise ValueError(f"spans column 'block' must be integers, got {spans.schema.field('block').type}")
    block = spans.column("block")
    if block.null_count:
        raise ValueError("spans column 'block' has nulls")
    if len(spans):
        lo, hi = pc.min(block).as_py(), pc.max(block).as_py()
        if lo < first_block or hi >= first_block + n:
            raise ValueError(
                f"spans column 'block' has values in [{lo}, {hi}], outside the {n} input blocks "
                f"[{first_block}, {first_block + n})"
            )
    rebased = pc.subtract(pc.cast(block, pa.int64()), pa.scalar(first_block, pa.int64()))
    return spans.set_column(spans.column_names.index("block"), "block", rebased)


def _label_columns_present(spans: pa.Table, label_columns: Sequence[str]) -> list[str]:
    present = [c for c in label_columns if c in spans.column_names]
    if present and not {"start", "end"} <= set(spans.column_names):
        raise ValueError(
            f"spans have label columns {present} but no 'start'/'end' columns to count their tokens"
        )
    return present


# --- atomic, hashed writes ----------------------------------------------------------------------




class _HashingWriter:
    """Writes byte chunks to a file while hashing them."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def write(self, b: bytes | memoryview) -> None:
        self.f.write(b)
        self.h.update(b)
        self.n += len(b)


def _write_bytes_file(path: Path, chunks: Callable[[], Any], staged: bool = False) -> dict:
    """Write the chunks yielded by ``chunks()`` atomically (or, ``staged``, inside a staging
    directory: ``atomic_files.staged_write``); return ``{path, bytes, sha256}``."""
    info: dict = {}

    def write(f: IO[bytes]) -> None:
        hw = _HashingWriter(f)
        for c in chunks():
            hw.write(c)
        info.update(path=path.name, bytes=hw.n, sha256=hw.h.hexdigest())

    (staged_write if staged else atomic_write)(path, write, mode=_FILE_MODE)
    return info


def _array_chunks(a: np.ndarray, rows_per_chunk: int = 1024):
    for i in range(0, a.shape[0], rows_per_chunk):
        yield memoryview(np.ascontiguousarray(a[i : i + rows_per_chunk])).cast("B")


def _write_parquet(path: Path, table: pa.Table, staged: bool = False) -> dict:
    def write(f: IO[bytes]) -> None:
        pq.write_table(table, f, compression="zstd", compression_level=3, write_statistics=True)

    (staged_write if staged else atomic_write)(path, write, mode=_FILE_MODE)
    return {"path": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _write_json(path: Path, obj: Any) -> None:
    data = (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    atomic_write(path, lambda f: f.write(data), mode=_FILE_MODE)


# --- Megatron index -----------------------------------------------------------------------------


def megatron_index_bytes(n_blocks: int, seq_len: int, dtype: np.dtype) -> bytes:
    """The ``.idx`` of ``n_blocks`` sequences of ``seq_len`` ids, one document per sequence."""
    code = MEGATRON_DTYPE_CODES[np.dtype(dtype).name]
    lengths = np.full(n_blocks, seq_len, dtype="<i4")
    pointers = np.arange(n_blocks, dtype="<i8") * (seq_len * np.dtype(dtype).itemsize)
    doc_indices = np.arange(n_blocks + 1, dtype="<i8")
    head = MEGATRON_INDEX_HEADER + struct.pack("<Q", MEGATRON_INDEX_VERSION) + struct.pack("<B", code)
    head += struct.pack("<Q", n_blocks) + struct.pack("<Q", len(doc_indices))
    return head + lengths.tobytes() + pointers.tobytes() + doc_indices.tobytes()


# --- writing ------------------------------------------------------------------------------------


def _token_counts(spans: pa.Table, labels: Sequence[str]) -> dict[str, dict[str, int]]:
    if not labels:
        return {}
    width = pc.subtract(pc.cast(spans.column("end"), pa.int64()), pc.cast(spans.column("start"), pa.int64()))
    out: dict[str, dict[str, int]] = {}
    for col in labels:
        t = pa.table({"label": pc.cast(spans.column(col), pa.string()), "n": width})
        t = t.filter(pc.is_valid(t.column("label")))
        g = t.group_by("label").aggregate([("n", "sum")])
        pairs = zip(g.column("label").to_pylist(), g.column("n_sum").to_pylist())
        out[col] = {k: int(v) for k, v in sorted(pairs)}
    return out


def with_record_labels(spans: pa.Table, column: str, labels: Mapping[str, str]) -> pa.Table:
    """``spans`` plus a label column (e.g. ``source``) looked up by ``record_id``: null where the
    record id is null (padding) — and a ``ValueError`` naming a record id that ``labels`` lacks."""
    if "record_id" not in spans.column_names:
        raise ValueError(f"spans have no 'record_id' column to look {column!r} up by")
    if column in spans.column_names:
        raise ValueError(f"spans already have a {column!r} column")
    ids = spans.column("record_id").to_pylist()
    missing = sorted({r for r in ids if r is not None and r not in labels})
    if missing:
        raise ValueError(f"no {column!r} label for record(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    return spans.append_column(column, pa.array([None if r is None else labels[r] for r in ids], pa.string()))


def _shard_spans(spans: pa.Table, lo: int, hi: int) -> pa.Table:
    block = spans.column("block")
    sel = spans.filter(pc.and_(pc.greater_equal(block, lo), pc.less(block, hi)))
    rebased = pc.subtract(sel.column("block"), pa.scalar(lo, pa.int64()))
    return sel.set_column(sel.column_names.index("block"), "block", rebased)


@dataclass(frozen=True)
class _Inputs:
    tokens: np.ndarray
    loss_mask: np.ndarray
    segment_ids: np.ndarray
    position_ids: Optional[np.ndarray]
    spans: pa.Table
    labels: list[str]


def _prepare(
    tokens: Any,
    loss_mask: Any,
    segment_ids: Any,
    position_ids: Any,
    spans: pa.Table,
    seq_len: int,
    dtype: np.dtype,
    vocab_size: int,
    label_columns: Sequence[str],
    first_block: int,
) -> _Inputs:
    t = np.asarray(tokens)
    if t.ndim != 2:
        raise ValueError(f"tokens must have shape (n, seq_len), got {t.shape}")
    n = t.shape[0]
    t = _checked_cast("tokens", _as_blocks("tokens", t, n, seq_len), dtype, 0, vocab_size - 1)
    lm = _checked_cast("loss_mask", _as_blocks("loss_mask", loss_mask, n, seq_len), np.dtype("<u1"), 0, 1)
    side = sidecar_dtypes(seq_len)
    seg_dt, pos_dt = np.dtype(side["segment_ids"]), np.dtype(side["position_ids"])
    seg = _as_blocks("segment_ids", segment_ids, n, seq_len)
    seg = _checked_cast("segment_ids", seg, seg_dt, 0, seq_len)
    pos = None
    if position_ids is not None:
        pos = _as_blocks("position_ids", position_ids, n, seq_len)
        pos = _checked_cast("position_ids", pos, pos_dt, 0, seq_len - 1)
    if not isinstance(spans, pa.Table):
        raise ValueError(f"spans must be a pyarrow.Table, got {type(spans).__name__}")
    sp = _validate_spans(spans, n, first_block)
    return _Inputs(t, lm, seg, pos, sp, _label_columns_present(sp, label_columns))


def _write_one_shard(
    out: Path,
    name: str,
    inp: _Inputs,
    lo: int,
    hi: int,
    *,
    seq_len: int,
    dtype: np.dtype,
    vocab_size: int,
    tokenizer_digest: str,
    pad_segment_id: Optional[int],
    shard_positions: int,
    first_block: int,
    staged: bool = False,
) -> dict:
    n = hi - lo
    tok, lm, seg = inp.tokens[lo:hi], inp.loss_mask[lo:hi], inp.segment_ids[lo:hi]
    files = {
        "bin": _write_bytes_file(out / f"{name}.bin", lambda: _array_chunks(tok), staged),
        "idx": _write_bytes_file(out / f"{name}.idx", lambda: [megatron_index_bytes(n, seq_len, dtype)], staged),
        "loss_mask": _write_bytes_file(out / f"{name}.loss_mask.bin", lambda: _array_chunks(lm), staged),
        "segment_ids": _write_bytes_file(out / f"{name}.segment_ids.bin", lambda: _array_chunks(seg), staged),
    }
    if inp.position_ids is not None:
        pos = inp.position_ids[lo:hi]
        files["position_ids"] = _write_bytes_file(out / f"{name}.position_ids.bin", lambda: _array_chunks(pos), staged)
    spans = _shard_spans(inp.spans, lo, hi)
    files["spans"] = _write_parquet(out / f"{name}.spans.parquet", spans, staged)
    content = int(np.count_nonzero(seg != pad_segment_id)) if pad_segment_id is not None else n * seq_len
    return {
        "format": SHARD_FORMAT,
        "name": name,
        "seq_len": seq_len,
        "shard_positions": shard_positions,
        "blocks": n,
        "first_block": first_block + lo,
        "tokens": n * seq_len,
        "content_tokens": content,
        "loss_tokens": int(np.count_nonzero(lm)),
        "pad_segment_id": pad_segment_id,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "tokenizer": tokenizer_digest,
        "sidecar_dtypes": {k: v for k, v in sidecar_dtypes(seq_len).items() if k in files},
        "token_counts": _token_counts(spans, inp.labels),
        "files": files,
    }


def write_shards(
    out_dir: PathLike,
    name_prefix: str,
    *,
    tokens: Any,
    loss_mask: Any,
    segment_ids: Any,
    spans: pa.Table,
    seq_len: int,
    shard_positions: int,
    tokenizer_digest: str,
    vocab_size: int,
    position_ids: Any = None,
    pad_segment_id: Optional[int] = 0,
    label_columns: Sequence[str] = DEFAULT_LABEL_COLUMNS,
    first_block: int = 0,
    first_shard_index: int = 0,
    staged: bool = False,
) -> list[dict]:
    """Write the blocks as shards of ``floor(shard_positions / seq_len)`` whole blocks each.

    ``tokens``, ``loss_mask``, ``segment_ids`` (and ``position_ids``) are ``(n, seq_len)``;
    ``spans`` is a pyarrow table whose int ``block`` column is the block index: ``first_block +``
    the row in this input (``packing.PackedBlocks.first_block`` for a chunk of a larger set).
    Returns the shard metadata dicts in order (also what ``write_shard_manifest`` takes). No
    blocks -> no shards. Memory: the input arrays (cast to the file dtypes when they differ); to
    write a large set in bounded memory, call once per chunk of a multiple of ``floor(S/T)``
    blocks with ``first_shard_index`` continuing the numbering, and write one manifest of all.
    ``staged``: ``out_dir`` is a staging directory renamed into place only when complete, so each
    file is written under its name and fsynced, and the directory fsynced once at the end
    (``atomic_files.staged_write``); otherwise every file is replaced atomically on its own.
    """
    _check_name_prefix(name_prefix)
    per_shard = shard_capacity(shard_positions, seq_len)
    if not tokenizer_digest:
        raise ValueError("tokenizer_digest must be a non-empty string")
    dtype = token_dtype(vocab_size)
    if first_block < 0 or first_shard_index < 0:
        raise ValueError(f"first_block and first_shard_index must be >= 0, got {first_block}, {first_shard_index}")
    inp = _prepare(
        tokens, loss_mask, segment_ids, position_ids, spans, seq_len, dtype, vocab_size, label_columns, first_block
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = inp.tokens.shape[0]
    metas = []
    for i, lo in enumerate(range(0, n, per_shard), start=first_shard_index):
        hi = min(lo + per_shard, n)
        metas.append(
            _write_one_shard(
                out,
                shard_name(name_prefix, i),
                inp,
                lo,
                hi,
                seq_len=seq_len,
                dtype=dtype,
                vocab_size=vocab_size,
                tokenizer_digest=tokenizer_digest,
                pad_segment_id=pad_segment_id,
                shard_positions=shard_positions,
                first_block=first_block,
                staged=staged,
            )
        )
    fsync_dir(out)
    return metas


class ShardWriter:
    """Streaming ``write_shards``: ``add`` chunks of consecutive blocks (e.g. each
    ``packing.PackedBlocks`` of ``iter_packed``) of any size; every full shard is written as soon as
    it is complete, the remainder (fewer than ``floor(S/T)`` blocks) waits for the next chunk, and
    ``finish`` writes the last, partial shard. The files are byte-identical to one ``write_shards``
    call over the concatenation. Memory: one chunk plus less than one shard. A writer with
    ``first_shard_index`` k writes shards k, k+1, ... (its first chunk starts at block k*floor(S/T)):
    writers of disjoint shard ranges together write exactly the files one writer would."""

    def __init__(
        self,
        out_dir: PathLike,
        name_prefix: str,
        *,
        seq_len: int,
        shard_positions: int,
        tokenizer_digest: str,
        vocab_size: int,
        pad_segment_id: Optional[int] = 0,
        label_columns: Sequence[str] = DEFAULT_LABEL_COLUMNS,
        first_shard_index: int = 0,
        staged: bool = False,
    ) -> None:
        _check_name_prefix(name_prefix)
        if first_shard_index < 0:
            raise ValueError(f"first_shard_index must be >= 0, got {first_shard_index}")
        self.per_shard = shard_capacity(shard_positions, seq_len)
        self.first_shard_index = first_shard_index  # a writer of a later shard range (parallel packing)
        self.out_dir, self.name_prefix = Path(out_dir), name_prefix
        self._kw = dict(
            seq_len=seq_len,
            shard_positions=shard_positions,
            tokenizer_digest=tokenizer_digest,
            vocab_size=vocab_size,
            pad_segment_id=pad_segment_id,
            label_columns=label_columns,
            staged=staged,
        )
        self.shards: list[dict] = []
        # pending chunks, joined only when a shard is written (joining on every add copied the
        # pending blocks once per chunk: quadratic in the chunks of a shard)
        self._chunks: list[dict[str, np.ndarray]] = []
        self._span_parts: list[pa.Table] = []
        self._count = 0  # pending blocks
        self._first = 0  # global index of the first pending block
        self._finished = False

    def _pending(self) -> int:
        return self._count

    def add(
        self,
        *,
        tokens: Any,
        loss_mask: Any,
        segment_ids: Any,
        spans: pa.Table,
        position_ids: Any = None,
        first_block: Optional[int] = None,
    ) -> list[dict]:
        """Queue the next blocks (``first_block`` = global index of the first, default: right after
        the previous chunk); write every shard now complete and return their metadata."""
        if self._finished:
            raise ValueError("ShardWriter.add after finish")
        expected = self._first + self._pending()
        if first_block is None:
            first_block = expected
        if first_block != expected and (self.shards or self._pending()):
            raise ValueError(f"chunk starts at block {first_block}, expected {expected} (chunks must be consecutive)")
        new = {"tokens": tokens, "loss_mask": loss_mask, "segment_ids": segment_ids}
        if position_ids is not None:
            new["position_ids"] = position_ids
        arrays = {k: np.asarray(v) for k, v in new.items()}
        if not self._chunks:
            self._first = first_block
        elif set(arrays) != set(self._chunks[0]):
            raise ValueError("every chunk must have position_ids, or none")
        self._chunks.append(arrays)
        self._span_parts.append(spans)
        self._count += int(arrays["tokens"].shape[0])
        full = (self._pending() // self.per_shard) * self.per_shard
        return self._write(full) if full else []

    def _joined(self) -> tuple[dict[str, np.ndarray], pa.Table]:
        chunks, parts = self._chunks, self._span_parts
        if len(chunks) == 1:
            return chunks[0], parts[0]
        return ({k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]},
                pa.concat_tables(parts, promote_options="permissive"))

    def _write(self, n: int) -> list[dict]:
        assert self._chunks
        (a, sp), first = self._joined(), self._first
        block = pc.cast(sp.column("block"), pa.int64())
        head = sp.filter(pc.less(block, first + n))
        metas = write_shards(
            self.out_dir,
            self.name_prefix,
            tokens=a["tokens"][:n],
            loss_mask=a["loss_mask"][:n],
            segment_ids=a["segment_ids"][:n],
            position_ids=a["position_ids"][:n] if "position_ids" in a else None,
            spans=head,
            first_block=first,
            first_shard_index=self.first_shard_index + len(self.shards),
            **self._kw,
        )
        self.shards += metas
        rest = {k: v[n:] for k, v in a.items()}
        left = int(rest["tokens"].shape[0])
        self._chunks = [rest] if left else []
        self._span_parts = [sp.filter(pc.greater_equal(block, first + n))] if left else []
        self._count = left
        self._first = first + n
        return metas

    def finish(self) -> list[dict]:
        """Write the last, partial shard (if any blocks wait) and return every shard's metadata."""
        if not self._finished:
            if self._pending():
                self._write(self._pending())
            self._finished = True
        return list(self.shards)


# --- manifest -----------------------------------------------------------------------------------


def _sum_counts(metas: Sequence[Mapping]) -> dict[str, dict[str, int]]:
    total: dict[str, dict[str, int]] = {}
    for m in metas:
        for col, counts in m.get("token_counts", {}).items():
            dst = total.setdefault(col, {})
            for k, v in counts.items():
                dst[k] = dst.get(k, 0) + int(v)
    return {c: dict(sorted(v.items())) for c, v in sorted(total.items())}


def _one_value(metas: Sequence[Mapping], key: str) -> Any:
    values = {json.dumps(m[key]) for m in metas}
    if len(values) > 1:
        raise ValueError(f"shards disagree on {key!r}: {sorted(values)}")
    return metas[0][key] if metas else None


def write_shard_manifest(out_dir: PathLike, shards: Sequence[Mapping]) -> Path:
    """Write ``<out_dir>/shards.json`` (atomically, sorted keys): totals plus every shard's metadata.

    The shards must agree on seq_len, shard_positions, dtype and tokenizer. Written after the shard files, it is
    the point at which the shard set becomes visible."""
    metas = [dict(m) for m in shards]
    manifest = {
        "format": SHARD_FORMAT,
        "seq_len": _one_value(metas, "seq_len"),
        "dtype": _one_value(metas, "dtype"),
        "tokenizer": _one_value(metas, "tokenizer"),
        "shard_positions": _one_value(metas, "shard_positions"),
        "shard_count": len(metas),
        "blocks": sum(int(m["blocks"]) for m in metas),
        "tokens": sum(int(m["tokens"]) for m in metas),
        "content_tokens": sum(int(m["content_tokens"]) for m in metas),
        "loss_tokens": sum(int(m["loss_tokens"]) for m in metas),
        "token_counts": _sum_counts(metas),
        "shards": metas,
    }
    path = Path(out_dir) / MANIFEST_NAME
    _write_json(path, manifest)
    return path


def load_shard_manifest(out_dir: PathLike) -> dict:
    """The ``shards.json`` of a shard directory (``ShardIntegrityError`` when missing or not JSON)."""
    path = Path(out_dir) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ShardIntegrityError(f"{path}: shard manifest missing") from exc
    except json.JSONDecodeError as exc:
        raise ShardIntegrityError(f"{path}: shard manifest is not valid JSON ({exc})") from exc
    if manifest.get("format") != SHARD_FORMAT:
        raise ShardIntegrityError(f"{path}: format {manifest.get('format')!r}, expected {SHARD_FORMAT!r}")
    return manifest


# --- verification and reading -------------------------------------------------------------------


def _check_file(directory: Path, meta: Mapping, role: str, info: Mapping, hash_it: bool) -> None:
    path = directory / info["path"]
    name = meta.get("name", "?")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ShardIntegrityError(f"shard {name!r}: {role} file {path} is missing") from None
    if size != info["bytes"]:
        raise ShardIntegrityError(
            f"shard {name!r}: {role} file {path} has {size} bytes, metadata says {info['bytes']}"
        )
    if hash_it:
        got = file_sha256(path)
        if got != info["sha256"]:
            raise ShardIntegrityError(
                f"shard {name!r}: {role} file {path} sha256 mismatch (metadata {info['sha256']}, file {got})"
            )


def verify_shard(directory: PathLike, meta: Mapping) -> None:
    """Re-hash every file of the shard; ``ShardIntegrityError`` naming the first bad file."""
    d = Path(directory)
    for role, info in sorted(meta["files"].items()):
        _check_file(d, meta, role, info, hash_it=True)


def _read_index(path: Path, meta: Mapping) -> None:
    """Parse the ``.idx`` and check it describes ``meta['blocks']`` whole blocks of ``seq_len``."""
    n, T = int(meta["blocks"]), int(meta["seq_len"])
    dtype = np.dtype(meta["dtype"])
    raw = path.read_bytes()

    def bad(why: str) -> ShardIntegrityError:
        return ShardIntegrityError(f"shard {meta.get('name')!r}: index file {path}: {why}")

    if len(raw) < _IDX_FIXED_BYTES or raw[:9] != MEGATRON_INDEX_HEADER:
        raise bad("not a Megatron MMIDIDX index")
    version, code, seqs, docs = struct.unpack_from("<QBQQ", raw, 9)
    if version != MEGATRON_INDEX_VERSION:
        raise bad(f"version {version}, expected {MEGATRON_INDEX_VERSION}")
    if code != MEGATRON_DTYPE_CODES.get(dtype.name):
        raise bad(f"dtype code {code}, metadata dtype {dtype.name}")
    if seqs != n or docs != n + 1:
        raise bad(f"{seqs} sequences / {docs} document indices, metadata says {n} blocks")
    if raw != megatron_index_bytes(n, T, dtype):
        raise bad(f"lengths/pointers/document indices are not {n} whole blocks of {T}")


@dataclass
class ShardView:
    """Memory-mapped ``(blocks, seq_len)`` arrays of one shard (read-only ``ndarray`` views of the maps)."""

    directory: Path
    meta: Mapping
    tokens: np.ndarray
    loss_mask: np.ndarray
    segment_ids: np.ndarray
    position_ids: Optional[np.ndarray]

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def n_blocks(self) -> int:
        return int(self.meta["blocks"])

    @property
    def seq_len(self) -> int:
        return int(self.meta["seq_len"])

    def block(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not 0 <= i < self.n_blocks:
            raise IndexError(f"shard {self.name!r} has {self.n_blocks} blocks, asked for block {i}")
        return self.tokens[i], self.loss_mask[i], self.segment_ids[i]

    def spans(self) -> pa.Table:
        return pq.ParquetFile(self.directory / self.meta["files"]["spans"]["path"]).read()

    def close(self) -> None:
        """Drop this view's references to the maps; the files are unmapped once no array taken
        from them is alive (never force-unmapped under a live array)."""
        self.tokens = self.loss_mask = self.segment_ids = self.position_ids = None  # type: ignore[assignment]


def _memmap(directory: Path, meta: Mapping, role: str, dtype: Any) -> np.ndarray:
    """A read-only ``(blocks, seq_len)`` array over the memory-mapped file: a plain ``ndarray``
    view of an ``np.memmap`` (indexing a ``memmap`` subclass costs microseconds per row)."""
    shape = (int(meta["blocks"]), int(meta["seq_len"]))
    mm = np.memmap(directory / meta["files"][role]["path"], dtype=np.dtype(dtype), mode="r", shape=shape)
    return mm.view(np.ndarray)


def check_shard(directory: PathLike, meta: Mapping, *, verify: bool = True) -> None:
    """Every check ``open_shard`` makes, without mapping anything: format, every file present with
    its size, sha256 (when ``verify``), and an ``.idx`` of ``blocks`` whole blocks of ``seq_len``."""
    d = Path(directory)
    if meta.get("format") != SHARD_FORMAT:
        raise ShardIntegrityError(
            f"shard {meta.get('name')!r}: format {meta.get('format')!r}, expected {SHARD_FORMAT!r}"
        )
    if int(meta["blocks"]) < 1:
        raise ShardIntegrityError(f"shard {meta.get('name')!r} has no blocks")
    for role, info in sorted(meta["files"].items()):
        _check_file(d, meta, role, info, hash_it=verify)
    _read_index(d / meta["files"]["idx"]["path"], meta)


def array_dtypes(meta: Mapping) -> dict[str, np.dtype]:
    """The dtype of each ``(blocks, seq_len)`` array file of a shard, by role (``bin`` = tokens)."""
    side = meta.get("sidecar_dtypes", SIDECAR_DTYPES)
    out = {"bin": np.dtype(meta["dtype"]).newbyteorder("<")}
    for role in ("loss_mask", "segment_ids", "position_ids"):
        if role in meta["files"]:
            out[role] = np.dtype(side.get(role, SIDECAR_DTYPES[role]))
    return out


def open_shard(directory: PathLike, meta: Mapping, *, verify: bool = True) -> ShardView:
    """Open a shard: ``check_shard`` (sha256 of every file unless ``verify=False``; sizes and the
    ``.idx`` always), then memory-map its arrays."""
    d = Path(directory)
    check_shard(d, meta, verify=verify)
    dt = array_dtypes(meta)
    return ShardView(
        directory=d,
        meta=meta,
        tokens=_memmap(d, meta, "bin", dt["bin"]),
        loss_mask=_memmap(d, meta, "loss_mask", dt["loss_mask"]),
        segment_ids=_memmap(d, meta, "segment_ids", dt["segment_ids"]),
        position_ids=_memmap(d, meta, "position_ids", dt["position_ids"]) if "position_ids" in dt else None,
    )
