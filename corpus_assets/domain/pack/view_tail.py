"""The views a release's next build will pack again, kept with each ``packed_shards`` version.

A rebuild under ``packing.order: append`` keeps every shard of a split but the last and packs
again from the first sample of that last shard: the tail of the earlier samples, then the new
ones. The earlier samples' views are spread over every row group of ``token_views`` (the training
order is a permutation of the split; validation and test rows sit in every group), so spooling
their tokens from the views decodes the whole table, once per rebuild.

So every build writes, per split, the token columns of the distinct views whose samples reach its
last shard (the ``tails`` table: ``tail_table``). The next build's spool takes a needed row's
tokens from there when the row's view identity (record id, variant, cache key) and token count
are unchanged (``PreviousTails``), and reads from ``token_views`` only the rest. A cache key fixes
the tokens (``token_views.cache_key`` covers the record's content, the tokenizer and the view
policy), so the spool holds the same bytes either way, and the packed files do not depend on it.
The tail depends only on the plan and the views, not on which shards were kept, so the layer's
own bytes do not either.

The token columns are bytes (``_as_bytes``), not Arrow lists: the table is written by every
build and read by the next, and list columns took about twice as long both ways. A previous
build whose tails are list columns (older code) is not read: its tokens come from token_views.

Why and how: docs/packing.md#rebuilds-that-keep-shards
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.core.arrow_columns import equal_mask, strings
from corpus_assets.domain.layers.registry import TAILS_SCHEMA
from corpus_assets.domain.pack.packing import BlockPlan
from corpus_assets.domain.pack.view_spool import checked_tokens
from corpus_assets.domain.storage.layer_store import LayerVersion

TAILS_TABLE = "tails"
_IDENTITY = ["split", "record_id", "variant", "cache_key", "n_tokens"]
_TOKENS = ["n_tokens", "input_ids_le", "loss_mask_u8", "offsets_le"]


def tail_start(plan: BlockPlan, shards: int, per_shard: int) -> Optional[int]:
    """The first sample with a position in the last of ``shards`` shards (None: no shard)."""
    lo = (shards - 1) * per_shard
    if shards < 1 or lo >= plan.first_sample.shape[0]:
        return None
    return int(plan.first_sample[lo:].min())


def tail_table(views, rows: np.ndarray, start: Optional[int], split: str) -> pa.Table:
    """The split's tail: one row per distinct view among the samples ``rows[start:]`` (spool rows
    in packing order), in token_views order, with its tokens as the spool holds them."""
    if start is None or start >= rows.size:
        return TAILS_SCHEMA.empty_table()
    picked = np.unique(np.asarray(rows[start:], dtype=np.int64))
    if (np.frombuffer(views.starts, dtype=np.int64)[picked] < 0).any():
        # every sample from the last shard on is packed, so spooled; a miss would make the table
        # depend on which shards were kept
        raise RuntimeError(f"packed_shards {split}: a tail sample has no tokens spooled")
    ids, mask, offs, lengths, rids, variants = views.gather(picked)
    bounds = np.zeros(picked.size + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    take = pa.array(picked, pa.int64())
    return pa.table({
        "split": pa.array([split] * picked.size, pa.string()),
        "record_id": strings(rids),
        "variant": strings(variants),
        "cache_key": strings(views.column("cache_key").take(take)),
        "n_tokens": pa.array(lengths.astype(np.int32), pa.int32()),
        "input_ids_le": _as_bytes(ids, "<i4", bounds),
        "loss_mask_u8": _as_bytes(mask, "u1", bounds),
        "offsets_le": _as_bytes(offs, "<i4", 2 * bounds),
    }, schema=TAILS_SCHEMA)


def _as_bytes(values: np.ndarray, dtype: str, bounds: np.ndarray) -> pa.Array:
    """One binary value per view: its slice ``values[bounds[i]:bounds[i + 1]]`` (flat) as bytes."""
    data = np.ascontiguousarray(values, dtype=dtype).reshape(-1)
    step = data.dtype.itemsize
    return pa.Array.from_buffers(pa.large_binary(), bounds.size - 1,
                                 [None, pa.py_buffer(np.asarray(bounds * step, np.int64)), pa.py_buffer(data)])


def _from_bytes(col: pa.Array, dtype: str) -> np.ndarray:
    """The values of a ``_as_bytes`` column, concatenated in row order (no copy of the bytes)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if col.null_count:
        raise ValueError("a tails row has no tokens")
    _validity, offset_buf, data_buf = col.buffers()
    if not len(col) or data_buf is None:
        return np.zeros(0, dtype)
    offsets = np.frombuffer(offset_buf, np.int64)[col.offset:col.offset + len(col) + 1]
    return np.frombuffer(data_buf, np.uint8)[offsets[0]:offsets[-1]].view(dtype)


def _tail_tokens(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n_tokens, and the flat ids, masks and (n, 2) offsets of a batch of tail rows."""
    n = np.asarray(batch.column("n_tokens").to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = _from_bytes(batch.column("input_ids_le"), "<i4").astype(np.int32, copy=False)
    mask = _from_bytes(batch.column("loss_mask_u8"), "u1")
    offs = _from_bytes(batch.column("offsets_le"), "<i4").astype(np.int32, copy=False)
    return checked_tokens(n, ids, mask, offs, "tails")


def _same(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Element-wise equality where two nulls are equal."""
    eq = pc.fill_null(pc.equal(a, b), False)
    both = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(eq, both).to_numpy(zero_copy_only=False), dtype=bool)


class PreviousTails:
    """The ``tails`` table of the release's previous ``packed_shards`` version, matched against a
    new build's spool: ``match`` says which tail rows hold the tokens of which spool rows, and
    ``write`` copies their tokens into the spool's maps."""

    def __init__(self, version: LayerVersion) -> None:
        self.version = version
        self._ident = version.read_table(TAILS_TABLE, columns=_IDENTITY)

    @classmethod
    def of(cls, previous: Optional[LayerVersion]) -> Optional["PreviousTails"]:
        """None when there is no previous version, or it was written before tails were kept or
        while they were list columns (that build's tokens are read from token_views instead)."""
        if previous is None or TAILS_TABLE not in previous.manifest.get("tables", {}):
            return None
        if pq.read_schema(previous.table_files(TAILS_TABLE)[0]).names != TAILS_SCHEMA.names:
            return None
        return cls(previous)

    def __len__(self) -> int:
        return self._ident.num_rows

    def match(self, split: str, views) -> tuple[np.ndarray, np.ndarray]:
        """(tail rows, spool rows): the rows of ``split``'s tail whose view is in the spool with the
        same variant, cache key and token count, and the spool row of each."""
        empty = np.zeros(0, np.int64)
        if not len(views) or not len(self):
            return empty, empty
        sel = np.flatnonzero(equal_mask(self._ident.column("split"), split))
        if not sel.size:
            return empty, empty
        tail = self._ident.take(pa.array(sel, pa.int64()))
        rows = views.rows_of(tail.column("record_id"))
        found = rows >= 0
        at = pa.array(np.where(found, rows, 0), pa.int64())
        lengths = np.frombuffer(views.lengths, dtype=np.int64)[np.where(found, rows, 0)]
        same = (found
                & _same(views.variants.take(at), strings(tail.column("variant")))
                & _same(views.column("cache_key").take(at), strings(tail.column("cache_key")))
                & (lengths == np.asarray(tail.column("n_tokens").to_numpy(zero_copy_only=False), np.int64)))
        return sel[same], rows[same]

    def tokens(self, plan: dict[str, np.ndarray]):
        """``(split, n_tokens, ids, mask, offsets)`` of the tail rows ``plan[split]`` (rows of this
        table in ascending order), batch by batch in table order: per split, the rows' tokens
        concatenated in that order (``view_spool.SpooledViews.fill`` lays their maps out so)."""
        owner = np.full(len(self), -1, np.int64)
        names = sorted(plan)
        for k, name in enumerate(names):
            owner[plan[name]] = k
        g = 0
        for batch in self.version.iter_batches(TAILS_TABLE, batch_size=1024, columns=_TOKENS):
            mine = owner[g:g + batch.num_rows]
            g += batch.num_rows
            for k in np.unique(mine[mine >= 0]):
                yield (names[int(k)], *_tail_tokens(batch.filter(pa.array(mine == k))))
