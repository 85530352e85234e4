"""One shard range of one split, packed and written as a task on the release engine (``core/compute.py``).

``shards_layer.build_packed_shards`` plans first, serially and from sample lengths only
(``packing.plan_blocks``: which block every sample lands in), cuts each split's blocks into
ranges of whole shards, and gives every range the packer state just before the first sample
that reaches it (``packing.packer_states``). :func:`pack_task` (top level, one small picklable
argument) resumes a packer there, packs until its last block is sealed, keeps only its own
blocks (``packing.block_window``) and writes their shards under their global names. Placement
depends on lengths only, so every block — and so every shard file — is the one a single packer
over the whole split writes; the layer combines metadata, stats and per-sample placement in
range order.

Why and how: docs/packing.md#parallel-packing
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.pack.packing import (
    PackedBlocks,
    PackerState,
    Packer,
    PackingPolicy,
    PackingStats,
    block_window,
    coverage_check,
    span_sums,
)
from corpus_assets.domain.pack.shard_reuse import shard_packing_summary
from corpus_assets.domain.pack.shards import ShardWriter, with_record_labels
from corpus_assets.domain.pack.view_spool import SplitViews


@dataclass(frozen=True)
class PackTask:
    """Blocks ``[lo, hi)`` of one split (``hi`` None: to the end, the dropped tail included)."""

    split: str
    views_dir: str  # the split's saved view spool (``SplitViews.save``)
    rows_path: str  # .npy: the split's samples as spool rows, in packing order
    out_dir: str  # the split's directory in the staged shard set
    placed_path: str  # .npy this task writes: (2, k) int64, sample index and view tokens placed
    policy: PackingPolicy
    bos_id: Optional[int]
    shard_positions: int
    per_shard: int
    tokenizer_digest: str
    vocab_size: int
    lo: int
    hi: Optional[int]
    state: PackerState  # the packer just before the first sample with a position in [lo, hi)
    label_key: str  # "source" or "domain": what the per-source counts are keyed by (the mixture's key)
    chunk_samples: int = 4096
    chunk_tokens: int = 1 << 22


@dataclass
class PackTaskResult:
    metas: list  # shard metadata, in shard order
    stats: PackingStats  # over this range's blocks (and the dropped tail for the last range)
    per_source: dict
    placed_path: str
    ok: bool = True
    details: list = field(default_factory=list)
    summaries: list = field(default_factory=list)  # per shard of ``metas``: ``shard_reuse.shard_packing_summary``


def sample_chunks(tokens: np.ndarray, max_samples: int, max_tokens: int):
    """Consecutive slices of ``range(len(tokens))`` of at most ``max_samples`` samples and
    ``max_tokens`` tokens (a single longer sample makes a chunk of its own)."""
    lo, n = 0, len(tokens)
    ends = np.cumsum(tokens, dtype=np.int64)
    while lo < n:
        before = ends[lo - 1] if lo else 0
        hi = int(np.searchsorted(ends, before + max_tokens, side="right"))
        hi = min(max(hi, lo + 1), lo + max_samples, n)
        yield slice(lo, hi)
        lo = hi


def label_counts(blocks: PackedBlocks, labels: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per source: materialized tokens (view tokens, BOS excluded) and effective label tokens.
    Label tokens are summed over every span first (the spans tile the blocks: one pass over the
    loss mask), then the view spans are kept."""
    sp = blocks.spans
    if sp.num_rows == 0:
        return {}
    T = blocks.seq_len
    keep = pc.and_(pc.invert(sp.column("pad")), pc.is_valid(sp.column("src_token_start")))
    b = sp.column("block").to_numpy().astype(np.int64) - blocks.first_block
    s = sp.column("start").to_numpy().astype(np.int64)
    e = sp.column("end").to_numpy().astype(np.int64)
    lab_all = span_sums(blocks.loss_mask, b * T + s, b * T + e)
    kept = np.asarray(keep.to_numpy(zero_copy_only=False), bool)
    lab, n_tok = lab_all[kept], (e - s)[kept]
    out: dict[str, dict[str, int]] = {}
    for rid, n, l in zip(sp.filter(keep).column("record_id").to_pylist(), n_tok.tolist(), lab.tolist()):
        c = out.setdefault(labels[rid], {"materialized_tokens": 0, "label_tokens": 0})
        c["materialized_tokens"] += n
        c["label_tokens"] += l
    return out


def add_counts(into: dict, counts: dict) -> None:
    for k, v in counts.items():
        c = into.setdefault(k, {"materialized_tokens": 0, "label_tokens": 0})
        c["materialized_tokens"] += v["materialized_tokens"]
        c["label_tokens"] += v["label_tokens"]


def pack_task(task: PackTask) -> PackTaskResult:
    """Pack and write the shards of one block range (module docstring)."""
    views = SplitViews.load(task.views_dir)
    rows = np.load(task.rows_path, mmap_mode="r")
    policy = task.policy
    last = task.hi is None
    hi = np.iinfo(np.int64).max if last else int(task.hi)
    packer = Packer.resume(policy, task.state, bos_id=task.bos_id)
    writer = ShardWriter(task.out_dir, task.split, seq_len=policy.seq_len, shard_positions=task.shard_positions,
                         tokenizer_digest=task.tokenizer_digest, vocab_size=task.vocab_size, pad_segment_id=0,
                         first_shard_index=task.lo // task.per_shard, staged=True)
    stats = PackingStats(policy.seq_len)
    per_source: dict[str, dict[str, int]] = {}
    placed: list[np.ndarray] = []
    details: list = []
    sources: dict[str, str] = {}
    domains: dict[str, Optional[str]] = {}
    per = task.per_shard
    shard_stats: dict[int, PackingStats] = {}  # per shard index: its blocks' output-side stats
    shard_labels: dict[int, dict] = {}  # and its per-source (or tag) counts

    def emit(part: PackedBlocks) -> None:
        nonlocal stats
        mine = block_window(part, task.lo, hi, keep_dropped=last)
        stats = stats + mine.stats
        placed.append(np.stack([mine.placed_samples, mine.placed_tokens]))
        if not len(mine):
            return
        good, detail = coverage_check(mine)
        if not good:
            details.append(detail)
            return
        spans = with_record_labels(with_record_labels(mine.spans, "source", sources), "domain", domains)
        writer.add(tokens=mine.tokens, loss_mask=mine.loss_mask, segment_ids=mine.segment_ids, spans=spans,
                   position_ids=mine.position_ids if policy.reset_positions else None, first_block=mine.first_block)
        labels = sources if task.label_key == "source" else domains
        first, end = mine.first_block, mine.first_block + len(mine)
        for k in range(first // per, (end - 1) // per + 1):  # the shards this part reaches
            w = mine if first >= k * per and end <= (k + 1) * per else block_window(mine, k * per, (k + 1) * per)
            shard_stats[k] = shard_stats.get(k, PackingStats(policy.seq_len)) + w.stats
            add_counts(shard_labels.setdefault(k, {}), label_counts(w, labels))

    rest = np.asarray(rows[task.state.sample:], dtype=np.int64)
    exhausted = True
    try:
        for chunk in sample_chunks(views.token_counts(rest), task.chunk_samples, task.chunk_tokens):
            sel = rest[chunk]
            ids, mask, offs, lengths, rids, variants = views.gather(sel)
            take = pa.array(sel, pa.int64())
            names = rids.to_pylist()
            sources.update(zip(names, views.source_ids.take(take).to_pylist()))
            domains.update(zip(names, views.domains.take(take).to_pylist()))
            emit(packer.add_arrays(ids, mask, offs, lengths, rids, variants))
            if not last and packer.emitted >= hi:
                exhausted = False
                break
    finally:
        views.close_reads()
    if exhausted:  # blocks still open at the end are sealed by finish (best fit keeps many open)
        emit(packer.finish())
    metas = writer.finish() if not details else []
    np.save(task.placed_path, np.concatenate(placed, axis=1) if placed else np.zeros((2, 0), np.int64))
    summaries = []
    for i in range(len(metas)):
        k = task.lo // per + i
        k_stats = shard_stats.get(k, PackingStats(policy.seq_len))
        k_stats.dropped, k_stats.dropped_tokens = [], 0  # the dropped tail is the split's, not a shard's
        summaries.append(shard_packing_summary(k_stats, shard_labels.get(k, {})))
        add_counts(per_source, shard_labels.get(k, {}))
    return PackTaskResult(metas, stats, per_source, task.placed_path, ok=not details, details=details,
                          summaries=summaries)
