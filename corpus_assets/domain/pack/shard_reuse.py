"""Rebuilds that keep the shards they did not change: the append order and shard adoption.

A release rebuilt after an increment used to re-pack every block: the training order (a seeded
permutation of the whole split) moved every sample, so every shard changed. Two pieces make the
cost follow the change instead:

* **Append order** (``packing.order: append``): the samples the release's previous
  ``packed_shards`` version packed keep their relative order (read back from its decisions
  table); samples that are new follow, in plan order. Samples that are gone (deleted, deduplicated,
  moved split) leave the order; nothing else moves. Each record must be read once per split.
* **Shard adoption**: every shard gets a content key, sha256 over the packing configuration, the
  shard's index and the identity of every sample up to the last one that can reach the shard
  (cache key of its token view, record id, variant, source, domain, token count; each field
  length-prefixed).
  Blocks are placed from lengths alone, so equal prefixes give equal blocks; a shard whose key
  equals the previous
  version's shard of the same name is hard-linked (its files, its metadata) instead of packed.
  The leading run of equal keys is adopted; the last shard of a split is always packed (it holds
  the tail and the ``finish`` of the packer). ``best_fit`` keeps blocks open for later samples,
  so no prefix bounds a shard: it is never adopted.

The files do not depend on adoption: a build that adopts writes the same shard set (same bytes,
same set digest) as one that packs every shard of the same order (tests/unit/test_shard_reuse.py).

Why and how: docs/packing.md#rebuilds-that-keep-shards
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.arrow_columns import strings
from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import canonical_json
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.pack.packing import BlockPlan, PackingPolicy, PackingStats
from corpus_assets.domain.pack.shards import shard_name
from corpus_assets.domain.pack.view_spool import SplitViews

KEY_COLUMNS = ("cache_key", "record_id", "variant", "source_id", "domain")  # a sample's identity in a key
OUTPUT_STATS = ("blocks", "content_tokens", "bos_tokens", "inserted_tokens", "padding", "label_tokens")
_KEY_CHUNK = 1 << 20  # samples per hashed batch of identity lines


class AppendOrderError(CorpusError, ValueError):
    """``packing.order: append`` over a split that reads a record more than once."""


def previous_orders(previous) -> dict[str, pa.Array]:
    """Per split, the record ids in the order the previous ``packed_shards`` version packed them
    (its packing decisions, by ``item_index``; one read of the table); {} without a previous version."""
    if previous is None:
        return {}
    t = previous.read_table(DECISIONS_TABLE, columns=["split", "record_id", "item_index"])
    t = t.take(pc.sort_indices(t, sort_keys=[("split", "ascending"), ("item_index", "ascending")]))
    return {split: t.filter(pc.equal(t.column("split"), split)).column("record_id").combine_chunks()
            for split in pc.unique(t.column("split")).to_pylist()}


def append_order(rows: np.ndarray, views: SplitViews, earlier: Optional[pa.Array], split: str) -> np.ndarray:
    """``rows`` (spool rows in plan order) reordered: rows whose record was packed before first, in
    that earlier order; then the others in plan order."""
    rows = np.asarray(rows, dtype=np.int64)
    if np.unique(rows).size != rows.size:
        raise AppendOrderError(f"packing.order is 'append' but the {split} split reads a record more than once "
                               "(a mixture with repeats); append needs each record once: use order 'plan'")
    if earlier is None or not len(earlier) or not rows.size:
        return rows
    old = views.rows_of(earlier)
    wanted = np.zeros(len(views), bool)
    wanted[rows] = True
    old = old[old >= 0]
    old = old[wanted[old]]
    was_old = np.zeros(len(views), bool)
    was_old[old] = True
    return np.concatenate([old, rows[~was_old[rows]]])


def adoptable(policy: PackingPolicy, rows: np.ndarray) -> bool:
    """Whether shard keys bound a shard's content: a placement that fills blocks in sample order
    (not best fit) and a split that reads each record once (a sample is its record)."""
    return policy.fit != "best_fit" and np.unique(rows).size == rows.size


def shard_keys(views: SplitViews, rows: np.ndarray, plan: BlockPlan, per_shard: int, header: dict) -> list[str]:
    """The content key of every shard of a split (module docstring), in shard order. Shard j's
    blocks hold pieces of samples up to the first sample of block (j+1)*per_shard (a stream piece
    may continue it), so its key covers that prefix; the last shard's covers every sample."""
    n = int(rows.size)
    n_shards = -(-plan.blocks // per_shard) if plan.blocks else 0
    ends = [min(n, int(plan.first_sample[(j + 1) * per_shard]) + 1) if (j + 1) * per_shard < plan.first_sample.size
            else n for j in range(n_shards)]
    h = hashlib.sha256(canonical_json(header))
    keys: list[str] = []
    done = j = 0  # samples hashed so far; next shard
    for lo in range(0, n, _KEY_CHUNK):
        hi = min(n, lo + _KEY_CHUNK)
        take = pa.array(rows[lo:hi], pa.int64())
        n_tokens = pa.array(views.token_counts(rows[lo:hi]), pa.int64()).cast(pa.string())  # what placement reads
        lines = _identity_lines([strings(views.column(c).take(take)) for c in KEY_COLUMNS] + [n_tokens])
        offs = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1].tolist()
        data = memoryview(lines.buffers()[2] or b"")
        while j < n_shards and ends[j] <= hi:
            h.update(data[offs[done - lo]:offs[ends[j] - lo]])
            done = ends[j]
            keys.append(hashlib.sha256(h.digest() + f":{j}".encode()).hexdigest())
            j += 1
        if done < hi:
            h.update(data[offs[done - lo]:offs[hi - lo]])
            done = hi
    keys += [hashlib.sha256(h.digest() + f":{k}".encode()).hexdigest() for k in range(j, n_shards)]
    return keys


def _identity_lines(columns: list[pa.Array]) -> pa.Array:
    """One line per sample: every field as ``<byte length>:<bytes>`` (null: ``-``), so no record
    id, whatever bytes it holds, can make two different sample sequences hash alike."""
    parts = []
    for c in columns:
        size = pc.cast(pc.binary_length(c), pa.string())
        parts.append(pc.fill_null(pc.binary_join_element_wise(size, c, ":"), "-"))
    return pc.binary_join_element_wise(*parts, pa.array([""] * len(columns[0]), pa.string()), ";")


@dataclass
class PreviousShard:
    """A shard of the previous version; its folder is resolved (from the object store, when only
    the store holds it) only when the shard is about to be kept."""

    location: str  # the ``directory`` of its row: ``shards/<release>/<set>/<split>``
    meta: dict
    resolve: Callable[[str], Path]

    @cached_property
    def directory(self) -> Path:
        return self.resolve(self.location)


def previous_shards(previous, directory_of: Callable[[str], Path]) -> dict[str, dict[str, PreviousShard]]:
    """Per split, shard name -> the previous version's shard (those that carry a content key)."""
    if previous is None:
        return {}
    out: dict[str, dict[str, PreviousShard]] = {}
    for r in previous.read_table("shards", columns=["split", "directory", "meta_json"]).to_pylist():
        meta = json.loads(r["meta_json"])
        if meta.get("content_key") and meta.get("packing"):
            out.setdefault(r["split"], {})[meta["name"]] = PreviousShard(r["directory"], meta, directory_of)
    return out


def leading_matches(keys: list[str], split: str, earlier: dict[str, PreviousShard]) -> list[PreviousShard]:
    """The previous shards to adopt: the leading run of shards whose key matches, never the last."""
    out = []
    for j, key in enumerate(keys[:-1]):
        prev = earlier.get(shard_name(split, j))
        if prev is None or prev.meta.get("content_key") != key:
            break
        out.append(prev)
    return out


def intact(prev: PreviousShard) -> bool:
    """Every file of a previous shard is still on disk at its recorded size (a removed or altered
    shard set is packed again, not adopted)."""
    try:
        return all((prev.directory / f["path"]).stat().st_size == int(f["bytes"]) for f in prev.meta["files"].values())
    except OSError:
        return False


def link_shard(prev: PreviousShard, out_dir: Path) -> dict:
    """Hard-link (copy across file systems) every file of a previous shard into ``out_dir``; its
    metadata, unchanged. A size mismatch is an error (the previous set was altered)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for role, info in sorted(prev.meta["files"].items()):
        src, dst = prev.directory / info["path"], out_dir / info["path"]
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        if dst.stat().st_size != int(info["bytes"]):
            raise CorpusError(f"adopted shard {prev.meta['name']}: {role} file {src} is {dst.stat().st_size} bytes, "
                              f"its metadata says {info['bytes']}")
    return dict(prev.meta)


def adopted_stats(metas: list[dict], seq_len: int) -> PackingStats:
    """Output-side packing stats of adopted shards, from their metadata (``packing.stats``)."""
    st = PackingStats(seq_len)
    for m in metas:
        for name in OUTPUT_STATS:
            setattr(st, name, getattr(st, name) + int(m["packing"]["stats"][name]))
    return st


def shard_packing_summary(stats: PackingStats, per_label: dict) -> dict:
    """What a shard's metadata keeps so a later build can adopt it without reading it: its
    output-side stats and its per-source (or per-tag) token counts."""
    return {"stats": {k: int(getattr(stats, k)) for k in OUTPUT_STATS},
            "per_label": {k: dict(v) for k, v in sorted(per_label.items())}}
