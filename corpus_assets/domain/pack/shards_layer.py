"""The ``packed_shards`` layer of a release: what the trainer will really read.

train is packed from ``mixture_plan`` in plan order, validation / test from their packable views
in ``token_views`` order, with the release's ``PackingPolicy``, into a content-addressed shard set
``$CORPUS_HOME/shards/<release>/<set digest>/<split>/`` that is staged under ``.tmp-*`` and renamed
into place only when complete; the layer's ``shards`` table points at it. Views are spooled first
(``view_spool``) and packed in bounded chunks, so memory does not grow with the release. The
report keeps the four denominators per source apart.

Method and decisions: docs/packing.md#packed-shards-layer
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Optional

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.faults import pause_point
from corpus_assets.domain.core.hashing import canonical_json
from corpus_assets.domain.storage.dir_locks import new_staging_dir, remove_abandoned, unlock
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.pack.packing import (
    REASON_TOO_LONG,
    Packer,
    PackedBlocks,
    PackingPolicy,
    coverage_check,
    packer_states,
    packing_policy_version,
    plan_blocks,
)
from corpus_assets.domain.pack.shards import (
    ShardIntegrityError,
    ShardWriter,
    open_shard,
    shard_capacity,
    with_record_labels,
    write_shard_manifest,
)
from corpus_assets.domain.pack.shard_reuse import (
    adoptable,
    adopted_stats,
    append_order,
    leading_matches,
    link_shard,
    intact,
    previous_orders,
    previous_shards,
    shard_keys,
)
from corpus_assets.domain.pack.pack_tasks import PackTask, add_counts, label_counts, pack_task, sample_chunks
from corpus_assets.domain.pack.view_spool import SplitViews, SpooledViews
from corpus_assets.domain.pack.view_tail import TAILS_TABLE, PreviousTails, tail_start, tail_table
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import PACKED_SHARDS, layer

# 2: the decisions table; 3: shard content keys, order; 4: tails; 5: decisions in 65536-row groups
SHARDS_LAYER_VERSION = "packed-shards-layer-5"
DEFAULT_SEQ_LEN = 2048  # T when the release spec has no packing.seq_len

SHARDS_TABLES = layer(PACKED_SHARDS).table_specs()



class SpanCoverageError(CorpusError, ValueError):
    """Packed blocks of a split failed the in-memory span-coverage check (nothing was written)."""

    def __init__(self, split: str, details: list) -> None:
        super().__init__(f"packed blocks of {split} fail span coverage: {details[:1]}")
        self.split, self.details = split, details

class ShardSpec(BaseModel):
    """The ``shards`` section of a release spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    positions: int = Field(default=1 << 22, ge=1, description="S: positions per shard; a shard holds floor(S/T) whole blocks")


class PackingSection(PackingPolicy):
    """The ``packing`` section of a release spec, validated when the spec is read: every
    ``PackingPolicy`` field (``seq_len`` defaults to ``DEFAULT_SEQ_LEN``) plus special tokens named
    by text, which only the release tokenizer can turn into ids (``resolve_packing``):
    ``pad_token`` overrides ``pad_id``; ``bos_token`` is required for ``boundary: bos``.

    Not a policy itself: ``resolve_packing`` builds the ``PackingPolicy`` the packer uses (the
    token names and ``order`` are not policy fields and never enter ``packing_policy_version``;
    the order is the layer's: ``shard_reuse``)."""

    seq_len: int = Field(default=DEFAULT_SEQ_LEN, ge=1, description="T, positions per block")
    pad_token: Optional[str] = Field(default=None, min_length=1, description="padding token, by text (overrides pad_id)")
    bos_token: Optional[str] = Field(default=None, min_length=1, description="BOS token, by text (boundary: bos)")
    order: Literal["plan", "append"] = Field(default="plan", description=(
        "sample order: 'plan' (train in mixture-plan order, validation / test in token_views order) or "
        "'append' (samples the previous build packed keep their order, new ones follow in plan order: a "
        "rebuild after an increment keeps every shard before the new samples)"))

    @model_validator(mode="wrap")
    @classmethod
    def _bos_named(cls, data, handler):
        section = handler(data)
        if section.boundary == "bos" and section.bos_token is None:
            from corpus_assets.domain.core.config_files import field_errors

            raise field_errors(cls.__name__, [(("bos_token",), "boundary is 'bos' but no bos_token is named "
                                               "(the token the packer puts at the start of every sample)", None)])
        return section


def resolve_packing(
    section: PackingSection | dict, token_to_id: Callable[[str], Optional[int]], where: str
) -> tuple[PackingPolicy, Optional[int]]:
    """(policy, bos_id) from a ``packing`` section (a dict is validated first); a named token
    missing from the vocabulary is a ``ValueError`` naming the field."""
    if not isinstance(section, PackingSection):
        from corpus_assets.domain.core.config_files import validate

        section = validate(PackingSection, dict(section), f"{where}: packing")
    fields = section.model_dump(exclude={"pad_token", "bos_token", "order"})
    bos_id = None
    if section.pad_token is not None:
        pid = token_to_id(section.pad_token)
        if pid is None:
            raise ValueError(f"{where}: packing.pad_token {section.pad_token!r} is not in the tokenizer's vocabulary")
        fields["pad_id"] = pid
    if section.bos_token is not None:
        bos_id = token_to_id(section.bos_token)
        if bos_id is None:
            raise ValueError(f"{where}: packing.bos_token {section.bos_token!r} is not in the tokenizer's vocabulary")
    return PackingPolicy.model_validate(fields), bos_id


def _plan_rows(mixture_plan: LayerVersion, train: SplitViews) -> np.ndarray:
    """The mixture plan's draws as rows of the spooled training views (one lookup over the whole
    plan's record ids: the table of the split's ids is hashed once)."""
    ids = mixture_plan.read_table("plan", columns=["record_id"]).column(0)
    rows = train.rows_of(ids)
    if (rows < 0).any():
        few = sorted(set(ids.filter(pa.array(rows < 0)).to_pylist()))
        raise ValueError(f"mixture_plan names {len(few)} record(s) without a training view, e.g. {few[:3]}; "
                         "rebuild mixture_plan after token_views")
    return rows


def _pack_and_write(views: SplitViews, rows: np.ndarray, policy: PackingPolicy, bos_id: Optional[int], out: Path,
                    split: str, shard_spec: ShardSpec, tokenizer_digest: str, vocab_size: int,
                    sources: dict, domains: dict, mix_labels: dict, chunk_samples: int = 4096,
                    chunk_tokens: int = 1 << 22):
    """Pack ``rows`` of a split's spooled views with ONE packer, in chunks (at most
    ``chunk_samples`` samples and, unless one sample is longer, ``chunk_tokens`` tokens), writing
    each shard as soon as it is full (``shards.ShardWriter``). The single-process reference that
    the layer's planned, parallel path (``_pack_split_tasks`` + ``pack_tasks.pack_task``) is tested
    byte-identical against; bytes equal a single pack + write (both are chunk-size independent)."""
    packer = Packer(policy, bos_id=bos_id)
    writer = ShardWriter(out, split, seq_len=policy.seq_len, shard_positions=shard_spec.positions,
                         tokenizer_digest=tokenizer_digest, vocab_size=vocab_size, pad_segment_id=0, staged=True)
    stats = None
    ok = True
    per_source: dict[str, dict[str, int]] = {}
    details: list = []
    placed = np.zeros(rows.size, np.int64)  # view tokens that reached the blocks, per sample

    def emit(part: PackedBlocks) -> None:
        nonlocal stats, ok
        stats = part.stats if stats is None else stats + part.stats
        np.add.at(placed, part.placed_samples, part.placed_tokens)
        if not len(part):
            return
        good, detail = coverage_check(part)
        if not good:
            ok = False
            details.append(detail)
            return
        spans = with_record_labels(with_record_labels(part.spans, "source", sources), "domain", domains)
        writer.add(tokens=part.tokens, loss_mask=part.loss_mask, segment_ids=part.segment_ids, spans=spans,
                   position_ids=part.position_ids if policy.reset_positions else None, first_block=part.first_block)
        add_counts(per_source, label_counts(part, mix_labels))

    try:
        for chunk in sample_chunks(views.token_counts(rows), chunk_samples, chunk_tokens):
            ids, mask, offs, lengths, rids, variants = views.gather(rows[chunk])
            emit(packer.add_arrays(ids, mask, offs, lengths, rids, variants))
    finally:
        views.close_reads()
    emit(packer.finish())
    if not ok:
        raise SpanCoverageError(split, details)
    metas = writer.finish()
    return metas, stats, ok, per_source, placed


def build_packed_shards(
    store: LayerStore,
    release: str,
    policy: PackingPolicy,
    shard_spec: ShardSpec,
    *,
    token_views: LayerVersion,
    mixture_plan: LayerVersion,
    tokenizer_digest: str,
    vocab_size: int,
    split_names: list[str],
    bos_id: Optional[int] = None,
    log: Callable[[str], None] = lambda _m: None,
    engine: Optional[Engine] = None,
    task_positions: int = 1 << 23,
    order: str = "plan",
    previous: Optional[LayerVersion] = None,
    reuse_tails: bool = True,
    adopt: bool = True,
) -> tuple[LayerVersion, dict]:
    """Pack every split into the release's shard set and write the layer. The placement is
    planned first (serial, from lengths); then each split's blocks, in ranges of whole shards of
    about ``task_positions`` positions, are packed and written by tasks on ``engine`` (default:
    in process). The files do not depend on the engine or the range size.

    ``previous`` (the release's current ``packed_shards`` version) gives the earlier order under
    ``order="append"``, and shards whose content key it already holds are hard-linked instead of
    packed (``shard_reuse``): the files do not depend on that either. Nor on ``reuse_tails``: the
    tokens of needed views that ``previous`` keeps in its ``tails`` table are taken from there
    instead of token_views (``view_tail``); False reads them all from token_views. ``adopt=False``
    packs every shard (the order still comes from ``previous``): what a rebuild does after a kept
    shard failed its re-read (:func:`set_aside_shard_set`)."""
    engine = engine or Engine()
    per_shard = shard_capacity(shard_spec.positions, policy.seq_len)  # S >= T or a clear error
    train = split_names[0]
    mix_key = mixture_plan.manifest.get("build_spec", {}).get("spec", {}).get("key", "source")

    home = store.home
    set_parent = store.root.shard_sets(release)
    set_parent.mkdir(parents=True, exist_ok=True)
    # Staging (the shard set, the view spool) is locked by this live build (storage/dir_locks):
    # cleanup removes only dead builds' staging, never a concurrent build's.
    remove_abandoned(set_parent)
    tmp, tmp_lock = new_staging_dir(set_parent)
    spool_dir: Optional[Path] = None
    spool_lock: Optional[int] = None
    report: dict = {"policy_version": packing_policy_version(policy), "seq_len": policy.seq_len,
                    "shard_positions": shard_spec.positions, "blocks_per_shard": per_shard, "splits": {}}
    all_meta: dict[str, list[dict]] = {}
    decisions: list[pa.Table] = []
    tails: list[pa.Table] = []  # per split: the views its last shard packs (the next build's spool reads them)
    try:
        spool_dir, spool_lock = new_staging_dir(set_parent, prefix=".tmp-spool-")
        # records and lengths first (row-group ranges as tasks); tokens only of what is packed, below
        spooled = SpooledViews.spool_records(token_views, spool_dir, split_names, engine=engine)
        planned: dict[str, _SplitPlan] = {}
        tasks: list[PackTask] = []
        label_key = "source" if mix_key == "source" else "domain"
        earlier_orders = previous_orders(previous) if order == "append" else {}
        earlier_shards = previous_shards(previous, lambda d: shard_directory(store, d)) if adopt else {}
        for i, split in enumerate(split_names):
            table = spooled.splits[split]
            rows = _plan_rows(mixture_plan, table) if split == train else np.arange(len(table), dtype=np.int64)
            if order == "append":
                rows = append_order(rows, table, earlier_orders.get(split), split)
            if rows.size == 0:
                planned[split] = _SplitPlan(table, rows)
                continue
            header = {"layer": SHARDS_LAYER_VERSION, "policy": packing_policy_version(policy), "bos_id": bos_id,
                      "tokenizer": tokenizer_digest, "vocab_size": vocab_size, "shard_positions": shard_spec.positions,
                      "split": split, "label_key": label_key}
            planned[split] = _pack_split_tasks(table, rows, split, i, spool_dir, tmp / split, policy, bos_id, shard_spec,
                                               per_shard, tokenizer_digest, vocab_size, label_key, task_positions,
                                               header, earlier_shards.get(split, {}))
            tasks += planned[split].tasks
        need = {}
        for split, sp in planned.items():  # the samples of the packed ranges; nothing a kept shard holds
            need[split] = np.zeros(len(sp.table), bool)
            if sp.tasks:
                need[split][sp.rows[sp.tasks[0].state.sample:]] = True
        spool_lines: list[str] = []  # said with the plan below: one stored log event, not two
        spooled.fill(need, engine, log=spool_lines.append, tails=PreviousTails.of(previous) if reuse_tails else None)
        for sp in planned.values():
            if sp.tasks:
                sp.table.save()
        adopted_total = sum(len(p.adopted) for p in planned.values())
        log(f"packed_shards {release}: {sum(1 for v in planned.values() if v.rows.size)} split(s) planned, "
            f"{adopted_total} shard(s) kept from the previous build, "
            f"{len(tasks)} shard range(s) to pack on the {engine.describe()}; " + "; ".join(spool_lines))
        results = iter(engine.map(pack_task, tasks, name="packed-shards"))
        for split in split_names:
            sp = planned[split]
            table, rows, plan = sp.table, sp.rows, sp.plan
            if rows.size == 0:
                log(f"packed_shards {release}/{split}: no views; no shards")
                report["splits"][split] = {"samples": 0, "blocks": 0, "shards": 0}
                all_meta[split] = []
                continue
            metas = [link_shard(p, tmp / split) for p in sp.adopted]
            st = plan.stats + adopted_stats(metas, policy.seq_len)
            per_source: dict = {}
            for m in metas:
                add_counts(per_source, m["packing"]["per_label"])
            placed, details = np.zeros(rows.size, np.int64), []
            for _ in range(len(sp.tasks)):
                res = next(results)
                for m, summary in zip(res.metas, res.summaries):
                    m["packing"] = summary
                    m["content_key"] = sp.keys[len(metas)] if sp.keys else None
                    metas.append(m)
                st = st + res.stats
                add_counts(per_source, res.per_source)
                got = np.load(res.placed_path)
                np.add.at(placed, got[0], got[1])
                details += res.details
            if details:
                raise SpanCoverageError(split, details)
            if sp.adopted:  # samples before the first packed block were placed whole in the kept shards
                _placed_before(placed, table, rows, sp.tasks[0].state.sample, policy, st)
            ok = True
            decisions.append(packing_decisions(table, rows, placed, policy, split))
            try:
                tails.append(tail_table(table, rows, tail_start(plan, len(metas), per_shard), split))
            finally:
                table.close_reads()
            if metas:
                write_shard_manifest(tmp / split, metas)
            all_meta[split] = metas
            report["splits"][split] = {
                "samples": int(rows.size),
                "shards": len(metas),
                "coverage_ok": ok,
                **{k: v for k, v in st.as_dict().items() if k not in ("quarantined", "truncated", "dropped")},
                "quarantined_records": [list(q) for q in st.quarantined],
                "truncated_records": len(st.truncated),
                "dropped_pieces": len(st.dropped),
                "per_source": {k: per_source[k] for k in sorted(per_source)},
            }
            log(f"packed_shards {release}/{split}: {rows.size} samples -> {st.blocks} blocks of {policy.seq_len}, "
                f"{len(metas)} shards, utilization {st.utilization:.1%}, padding {st.padding}, dropped {st.dropped_tokens}")
        pause_point("packed_shards:staged")  # every shard written, nothing renamed or published yet
        set_digest = hashlib.sha256(canonical_json({s: all_meta[s] for s in sorted(all_meta)})).hexdigest()
        final = set_parent / set_digest[:16]
        if final.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if spool_dir is not None:
            shutil.rmtree(spool_dir, ignore_errors=True)
        unlock(spool_lock)
        unlock(tmp_lock)
    store.seal_tree(str(final.relative_to(home)))  # to the object store, before any version names it

    report["shard_set"] = str(final.relative_to(home))
    report["shard_set_digest"] = set_digest
    report["tokenizer_digest"] = tokenizer_digest
    report["denominators"] = _denominators(mixture_plan, token_views, report["splits"].get(train, {}), train)
    rows_out = [
        {"split": split, "name": m["name"], "directory": f"{report['shard_set']}/{split}", "blocks": m["blocks"],
         "tokens": m["tokens"], "content_tokens": m["content_tokens"], "loss_tokens": m["loss_tokens"],
         "bin_sha256": m["files"]["bin"]["sha256"], "meta_json": json.dumps(m, sort_keys=True, separators=(",", ":"))}
        for split in split_names for m in all_meta[split]
    ]
    build = {
        "code_version": SHARDS_LAYER_VERSION,
        "policy": policy.model_dump(mode="json"),
        "policy_version": report["policy_version"],
        "shard_spec": shard_spec.model_dump(mode="json"),
        "bos_id": bos_id,
        "token_views_version": token_views.content_digest,
        "mixture_plan_version": mixture_plan.content_digest,
        "tokenizer_digest": tokenizer_digest,
        "order": order,
    }
    with store.new_version(PACKED_SHARDS, release, SHARDS_TABLES, build) as w:
        w.write("shards", rows_out)
        for table in decisions:
            w.write(DECISIONS_TABLE, table)
        for table in tails:
            w.write(TAILS_TABLE, table)
        version = w.commit(extra_manifest={"report": report})
    # not in the version (its bytes do not depend on what was kept): for the run's log and metadata
    report["kept_shards"] = {s: len(planned[s].adopted) for s in split_names}
    return version, report


@dataclass
class _SplitPlan:
    """One split, planned: its samples (spool rows, in packing order), the block plan, each shard's
    content key, the previous shards it keeps and the tasks that pack the rest."""

    table: SplitViews
    rows: np.ndarray
    plan: object = None
    keys: list = field(default_factory=list)
    adopted: list = field(default_factory=list)  # shard_reuse.PreviousShard, the leading shards
    tasks: list = field(default_factory=list)


def _pack_split_tasks(views: SplitViews, rows: np.ndarray, split: str, index: int, spool_dir: Path, out: Path,
                      policy: PackingPolicy, bos_id: Optional[int], shard_spec: ShardSpec, per_shard: int,
                      tokenizer_digest: str, vocab_size: int, label_key: str,
                      task_positions: int, header: dict, earlier: dict) -> _SplitPlan:
    """The split's block plan, the previous shards it keeps (``shard_reuse.leading_matches``) and
    one task per range of whole shards after them (about ``task_positions`` positions; the last
    range runs to the end). Each task starts at the first sample with a position in its range,
    with the packer state just before it."""
    rows_path = spool_dir / f"rows-{index}.npy"
    np.save(rows_path, rows)
    lengths = views.token_counts(rows)
    take = pa.array(rows, pa.int64())
    rids, variants = views.record_ids.take(take), views.variants.take(take)
    plan = plan_blocks(lengths, policy, bos_id=bos_id, record_ids=rids, variants=variants)
    keys = shard_keys(views, rows, plan, per_shard, header) if adoptable(policy, rows) else []
    adopted = []
    for prev in leading_matches(keys, split, earlier) if keys else []:
        if not intact(prev):
            break
        adopted.append(prev)
    n_plan = int(plan.first_sample.shape[0])  # blocks, plus a dropped tail block
    span = per_shard * max(1, task_positions // (per_shard * policy.seq_len))
    ranges = [(lo, lo + span) for lo in range(len(adopted) * per_shard, n_plan, span)]
    starts = [int(plan.first_sample[lo:hi].min()) for lo, hi in ranges]
    states = dict(zip(sorted(set(starts)), packer_states(lengths, policy, sorted(set(starts)), bos_id=bos_id)))
    tasks = [
        PackTask(split=split, views_dir=str(views.directory), rows_path=str(rows_path), out_dir=str(out),
                 placed_path=str(spool_dir / f"placed-{index}-{k:05d}.npy"), policy=policy, bos_id=bos_id,
                 shard_positions=shard_spec.positions, per_shard=per_shard, tokenizer_digest=tokenizer_digest,
                 vocab_size=vocab_size, lo=lo, hi=None if k == len(ranges) - 1 else hi, state=states[s0],
                 label_key=label_key)
        for k, ((lo, hi), s0) in enumerate(zip(ranges, starts))
    ]
    return _SplitPlan(views, rows, plan, keys, adopted, tasks)


def expected_tokens(lengths: np.ndarray, policy: PackingPolicy) -> np.ndarray:
    """View tokens each sample puts into blocks unless it is in a dropped tail block: over-length
    samples follow the policy (quarantined: 0, truncated: the capacity, split: all of them)."""
    cap = policy.seq_len - (1 if policy.boundary == "bos" else 0)  # the packer's block capacity
    over = (lengths > cap) if policy.mode == "atomic" else np.zeros(lengths.size, bool)
    rule = policy.overlength
    return np.where(over & (rule == "quarantine"), 0, np.where(over & (rule == "truncate"), cap, lengths))


def _placed_before(placed: np.ndarray, views: SplitViews, rows: np.ndarray, first: int, policy: PackingPolicy,
                   stats) -> None:
    """Placement of the samples the kept shards hold: every sample before ``first`` (the first
    sample with a position in a packed block) is whole in kept blocks, and ``first`` itself may
    have begun there (a stream piece, a split piece): it placed what it holds minus any dropped tail."""
    lengths = views.token_counts(rows).astype(np.int64)
    expected = expected_tokens(lengths, policy)
    placed[:first] = expected[:first]
    if first < rows.size:
        rid = views.record_ids[int(rows[first])].as_py()
        dropped = sum(int(e) - int(s) for r, _v, s, e in stats.dropped if r == rid)
        placed[first] = expected[first] - dropped


def packing_decisions(views: SplitViews, rows: np.ndarray, placed: np.ndarray, policy: PackingPolicy,
                      split: str) -> pa.Table:
    """The packing stage's decision per sample of a split (``item_index`` = its position in the
    split's sample sequence; a record drawn twice is two samples), from what reached the blocks.
    Over-length samples follow the policy (quarantined, truncated or split, as the packer applies
    it before placing anything); whatever else did not reach a block was in a dropped tail block."""
    lengths = views.token_counts(rows).astype(np.int64)
    cap = policy.seq_len - (1 if policy.boundary == "bos" else 0)  # the packer's block capacity
    over = (lengths > cap) if policy.mode == "atomic" else np.zeros(rows.size, bool)
    rule = policy.overlength
    expected = expected_tokens(lengths, policy)
    n = int(rows.size)
    action = np.full(n, "accept", dtype=object)
    reason = np.full(n, "ok", dtype=object)
    detail = np.full(n, "", dtype=object)
    pieces = -(-lengths // max(cap, 1))

    def set_(mask, a, r, d):
        action[mask], reason[mask] = a, r
        for i in np.flatnonzero(mask):
            detail[i] = d(int(i))

    set_(over & (rule == "split") & (placed == expected), "modify", "packing.split",
         lambda i: f"{lengths[i]} tokens in {pieces[i]} pieces of at most {cap}")
    set_(over & (rule == "truncate") & (placed == expected), "modify", "packing.truncated",
         lambda i: f"kept the first {cap} of {lengths[i]} tokens")
    set_((placed < expected) & (placed > 0), "modify", "packing.tail_dropped",
         lambda i: f"{expected[i] - placed[i]} of {expected[i]} tokens were in the dropped tail block")
    set_((placed == 0) & (expected > 0), "reject", "packing.tail_dropped", lambda i: "in the dropped tail block")
    set_(lengths == 0, "reject", "packing.empty_sample", lambda i: "a view without tokens")
    set_(over & (rule == "quarantine"), "quarantine", REASON_TOO_LONG,
         lambda i: f"{lengths[i]} tokens > block capacity {cap}")
    take = pa.array(np.asarray(rows, dtype=np.int64), pa.int64())
    return decisions_from_columns(
        n, stage="packing", record_id=views.record_ids.take(take), item_index=np.arange(n, dtype=np.int64), split=split,
        source_id=views.source_ids.take(take), domain=views.domains.take(take),
        action=pa.array(action, pa.string()), reason=pa.array(reason, pa.string()), detail=pa.array(detail, pa.string()),
        policy_version=packing_policy_version(policy), tokens_in=lengths, tokens_out=placed,
    )


def _denominators(mixture_plan: LayerVersion, token_views: LayerVersion, train: dict, train_split: str) -> dict:
    """Per source (or tag, as the mixture is keyed): source records | sampled records |
    materialized tokens | effective label tokens."""
    mix = mixture_plan.manifest.get("report", {}).get("sources", {})
    packed = train.get("per_source", {})
    out = {}
    for src in sorted(set(mix) | set(packed)):
        out[src] = {
            "source_records": mix.get(src, {}).get("available_records", 0),
            "sampled_records": mix.get(src, {}).get("draws", 0),
            "materialized_tokens": packed.get(src, {}).get("materialized_tokens", 0),
            "label_tokens": packed.get(src, {}).get("label_tokens", 0),
        }
    return out


def shard_dirs(store: LayerStore, release: str, split: str) -> list[tuple[Path, dict]]:
    """(directory, metadata) of every shard of ``split`` in the release's current packed_shards
    version — what ``reader.ShardReader`` takes."""
    v = store.require_current(PACKED_SHARDS, release)
    out = []
    for r in v.read_table("shards").to_pylist():
        if r["split"] == split:
            out.append((shard_directory(store, r["directory"]), json.loads(r["meta_json"])))
    return out


def shard_directory(store: LayerStore, directory: str) -> Path:
    """The local path of a ``packed_shards`` row's ``directory`` (``shards/<release>/<set>/<split>``),
    fetching its shard set from the object store first when only the store holds it."""
    shard_set, _, split = directory.rpartition("/")
    return store.tree_dir(shard_set) / split


def shard_set_name(manifest: Optional[dict]) -> Optional[str]:
    """The name of the shard set a ``packed_shards`` version's manifest records
    (``report.shard_set``: ``shards/<release>/<set>``); None when it records none."""
    name = Path((manifest or {}).get("report", {}).get("shard_set", "") or "").name
    return name or None


def set_aside_shard_set(store: LayerStore, version: LayerVersion) -> list[Path]:
    """Move the local shard set a ``packed_shards`` version names out of the way
    (``LayerStore.set_aside_tree``: ``.altered-<set>-<UTC time>-<id>`` beside it, kept for
    inspection, hidden from ``trees``; dropped from the object store, whose seal would keep the
    changed bytes). A set is reused by its name, the digest of what its files should hold, and a
    kept shard is linked when its files have their recorded sizes: a file changed on disk in place
    would otherwise come back in every rebuild. With the set moved aside, a build that packs every
    shard (``adopt=False``) writes it afresh. Returns where each local set went."""
    sets = sorted({r["directory"].rpartition("/")[0]
                   for r in version.read_table("shards", columns=["directory"]).to_pylist()})
    return [moved for moved in (store.set_aside_tree(shard_set, "altered") for shard_set in sets) if moved is not None]


def verify_packed_shards(store: LayerStore, version: LayerVersion, max_problems: int = 5) -> dict[str, dict]:
    """Re-read every shard a ``packed_shards`` version lists — from the shard set on disk (or the
    object store), not from what the packer meant to write — and check it: every file's sha256 and
    size, the ``.idx``, then span coverage (every position covered once, padding by pad spans
    only, padding never in the loss). Per split: shards, blocks, ok, problems (first few)."""
    pad_id = int(version.manifest.get("build_spec", {}).get("policy", {}).get("pad_id", 0))
    out: dict[str, dict] = {}
    for r in version.read_table("shards", columns=["split", "directory", "meta_json"]).to_pylist():
        meta = json.loads(r["meta_json"])
        entry = out.setdefault(r["split"], {"shards": 0, "blocks": 0, "ok": True, "problems": []})
        entry["shards"] += 1
        entry["blocks"] += int(meta.get("blocks", 0))
        problems: list[str] = []
        try:
            view = open_shard(shard_directory(store, r["directory"]), meta, verify=True)
        except (ShardIntegrityError, FileNotFoundError, OSError, ValueError) as exc:
            problems.append(str(exc))
        else:
            blocks = PackedBlocks(
                seq_len=view.seq_len, pad_id=pad_id, first_block=0, tokens=view.tokens, loss_mask=view.loss_mask,
                segment_ids=view.segment_ids,
                position_ids=view.position_ids if view.position_ids is not None else np.zeros_like(view.segment_ids),
                spans=view.spans(), stats=None,
            )
            ok, detail = coverage_check(blocks)
            problems += [f"{meta['name']}: {p}" for p in detail["problems"]]
            view.close()
        if problems:
            entry["ok"] = False
            entry["problems"] = (entry["problems"] + problems)[:max_problems]
    return out
