"""Snapshot compaction: fold many old captures of a source into one partition, so the number of
snapshot partitions stays bounded however often a source is captured.

A compaction range (by default one calendar month of captures older than a cutoff) is folded
into its newest capture, which keeps its key; the older captures are then retired (every layer
version deleted, the Dagster partition removed by the caller). The fold is the release view's own
``latest`` rule (``domain/dedup/release_view.py``), so a release selecting the compacted partition
plus any later captures sees the same records as it did over the captures themselves:

- a source captured whole (files, dumps, WARC, recipes): only the newest capture counts, so the
  newest capture *is* the fold and nothing is rewritten;
- an incremental crawl: every record id's latest word wins (its accepted copy, or the removal /
  refusal that ended it); each winning unit's rows are copied verbatim from the capture that
  holds them into new versions of every snapshot layer of the newest capture (``snapshot`` set to
  its key, raw ``item_index`` renumbered), so record ids, digests, texts, signatures and the
  decisions of the kept units are the bytes the pipeline wrote. Copies a later capture
  superseded, and failed fetches (no news), are left out and counted in the lineage.

Deletion stubs are units like any other (a purged record stays purged). Lineage (which captures a
partition replaces, their raw versions and decision counts, what was left out) goes to
``compacted.py``'s tree. Compaction is refused, with the reason, when the captures of a range were
built by different code or policy versions (rebuild them first) or when a raw item's records won
in different captures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.core.progress import Progress
from corpus_assets.domain.dedup.release_view import NO_NEWS
from corpus_assets.domain.ingest.compacted import LINEAGE_FORMAT, Lineage, drop_lineage, read_lineages, write_lineage
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS, RAW_SNAPSHOT, snapshot_layers
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion

__all__ = ["CompactionError", "CompactionPlan", "CompactionResult", "compaction_ranges", "plan_compaction",
           "compact", "retire", "ordered"]

Log = Optional[Callable[[str], None]]
_MANIFEST_KEYS = {"layout_version", "asset", "partition", "version", "content_digest", "tables", "build_spec"}
_VOLATILE_SPEC = {"snapshot", "source", "purges", "compaction"}  # differ per capture without changing the rows' meaning
_BATCH = 2048


class CompactionError(CorpusError, RuntimeError):
    """A range that cannot be compacted as asked (the message says why and what to do)."""


def ordered(keys: Iterable[str]) -> list[str]:
    return sorted(set(keys), key=lambda k: (parse_snapshot_key(k)[1], k))


def compaction_ranges(keys: Iterable[str], older_than: datetime) -> list[list[str]]:
    """The captures captured before ``older_than``, one range per UTC calendar month (capture
    order), only ranges of two or more: each becomes one partition."""
    months: dict[tuple[int, int], list[str]] = {}
    for key in ordered(keys):
        when = parse_snapshot_key(key)[1]
        if when < older_than:
            months.setdefault((when.year, when.month), []).append(key)
    return [r for _, r in sorted(months.items()) if len(r) > 1]


@dataclass
class _Capture:
    """What one capture says about its units (as ``release_view._Snapshot`` reads it), and where
    each unit's rows are: unit id = record id, or ``<source>:<item_id>`` for an item that never
    became a record."""

    key: str
    versions: dict[str, LayerVersion]
    accepted: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)
    items_of: dict[str, set[int]] = field(default_factory=dict)
    units_of_item: dict[int, set[str]] = field(default_factory=dict)
    item_ids: dict[int, str] = field(default_factory=dict)


def _columns(version: LayerVersion, table: str, columns: list[str]):
    for b in version.iter_batches(table, batch_size=8192, columns=columns):
        yield from zip(*(b.column(c).to_pylist() for c in columns))


def _read_capture(store: LayerStore, key: str) -> _Capture:
    source = parse_snapshot_key(key)[0]
    versions = {}
    for la in snapshot_layers():
        v = store.current(la.asset, key)
        if v is None:
            raise CompactionError(f"{key}: {la.asset} is not materialized; materialize the snapshot before compacting it")
        versions[la.asset] = v
    cap = _Capture(key, versions)
    for rid, idx, item_id, outcome, reason in _columns(versions[CANONICAL_RECORDS], DECISIONS_TABLE,
                                                       ["record_id", "item_index", "item_id", "outcome", "reason"]):
        unit = rid or f"{source}:{item_id}"
        cap.items_of.setdefault(unit, set()).add(idx)
        cap.units_of_item.setdefault(idx, set()).add(unit)
        cap.item_ids[idx] = item_id
        if outcome != "accepted":
            cap.refused[unit] = reason
    cap.accepted = {rid for (rid,) in _columns(versions[CURATED_RECORDS], "records", ["record_id"])}
    for rid, outcome, reason in _columns(versions[CURATED_RECORDS], DECISIONS_TABLE, ["record_id", "outcome", "reason"]):
        if outcome != "accepted" and rid:
            cap.refused[rid] = reason
    return cap


def _fold(caps: list[_Capture], incremental: bool) -> dict[str, tuple[str, str]]:
    """unit -> (verdict, capture holding it): the release view's ``latest`` rule over ``caps``."""
    state: dict[str, tuple[str, str]] = {}
    if not incremental:
        last = caps[-1]
        state = {u: (reason, last.key) for u, reason in last.refused.items() if u not in last.accepted}
        state.update({u: ("accepted", last.key) for u in last.accepted})
        # units of the newest capture that no stage refused or accepted (none today): kept as they are
        for u in last.items_of:
            state.setdefault(u, ("kept", last.key))
        return state
    for c in caps:
        for u, reason in c.refused.items():
            if u not in c.accepted and reason not in NO_NEWS:
                state[u] = (reason, c.key)
        state.update({u: ("accepted", c.key) for u in c.accepted})
    return state


@dataclass
class CompactionPlan:
    source: str
    target: str  # the newest capture of the range: keeps its key and holds the fold
    captures: list[str]  # every capture of the range, in capture order (target last)
    incremental: bool
    state: dict[str, tuple[str, str]]
    items: dict[str, list[int]]  # capture -> raw item indexes kept from it (capture order of indexes)
    read_versions: dict[str, dict[str, str]]  # capture -> asset -> version name read
    dropped: dict[str, int]
    earlier: dict[str, Lineage]  # captures of the range that were compacted before: their lineage

    @property
    def replaces(self) -> list[str]:
        keys = {k for k in self.captures if k != self.target}
        for lin in self.earlier.values():
            keys.update(lin.replaces)
        return ordered(keys)

    @property
    def rewrite(self) -> bool:
        """False when the target already is the fold (a source captured whole)."""
        if set(self.items) != {self.target}:
            return True
        return len(self.items[self.target]) != len(self._target_items)

    _target_items: set = field(default_factory=set)


def plan_compaction(store: LayerStore, captures: Iterable[str], *, incremental: bool, log: Log = None) -> CompactionPlan:
    """Read the captures of one range and decide what the compacted partition keeps."""
    keys = ordered(captures)
    sources = {parse_snapshot_key(k)[0] for k in keys}
    if len(sources) != 1 or len(keys) < 2:
        raise CompactionError(f"a compaction range is two or more captures of one source, got {keys}")
    source = sources.pop()
    progress = Progress(log or (lambda _m: None), f"compaction plan {source}", total=len(keys), unit="captures")
    caps = []
    for i, k in enumerate(keys, 1):
        caps.append(_read_capture(store, k))
        progress.update(i)
    progress.finish()
    state = _fold(caps, incremental)
    by_key = {c.key: c for c in caps}
    chosen: dict[str, set[str]] = {}
    for unit, (_, where) in state.items():
        chosen.setdefault(where, set()).add(unit)
    items: dict[str, list[int]] = {}
    seen_ids: dict[str, str] = {}
    for key in keys:
        if key not in chosen:
            continue
        cap = by_key[key]
        idx = sorted({i for u in chosen[key] for i in cap.items_of.get(u, ())})
        for i in idx:
            split = cap.units_of_item[i] - chosen[key]
            if split:
                raise CompactionError(
                    f"{key}: raw item {cap.item_ids[i]!r} holds records whose latest copies are in different captures "
                    f"({', '.join(sorted(split))} won elsewhere); such a range cannot be folded item by item")
            other = seen_ids.get(cap.item_ids[i])
            if other is not None:
                raise CompactionError(f"raw item {cap.item_ids[i]!r} would be kept from both {other} and {key}")
            seen_ids[cap.item_ids[i]] = key
        items[key] = idx
    kept = {(k, i) for k, idx in items.items() for i in idx}
    dropped: Counter = Counter()
    for cap in caps:
        for i, units in cap.units_of_item.items():
            if (cap.key, i) in kept:
                continue
            reasons = {cap.refused.get(u) for u in units}
            dropped["no_news" if reasons and reasons <= NO_NEWS else "superseded"] += 1
    _check_same_build(caps, {k for k in items})
    lineages = read_lineages(store, source)
    plan = CompactionPlan(source, keys[-1], keys, incremental, state, items,
                          {c.key: {a: v.version for a, v in c.versions.items()} for c in caps},
                          dict(sorted(dropped.items())), {k: lineages[k] for k in keys if k in lineages})
    plan._target_items = set(by_key[keys[-1]].units_of_item)
    return plan


def _comparable(version: LayerVersion, upstream_key: Optional[str]) -> dict:
    spec = {k: v for k, v in version.manifest.get("build_spec", {}).items() if k not in _VOLATILE_SPEC and k != upstream_key}
    return {"build_spec": spec, "schemas": {t: m["schema"] for t, m in sorted(version.manifest["tables"].items())}}


def _check_same_build(caps: list[_Capture], contributing: set[str]) -> None:
    """Rows of different captures go into one version: they must come from the same code and
    policy, or the version's manifest would describe some of them wrongly."""
    target = caps[-1]
    for la in snapshot_layers():
        want = _comparable(target.versions[la.asset], la.upstream_key)
        for c in caps:
            if c.key in contributing and _comparable(c.versions[la.asset], la.upstream_key) != want:
                raise CompactionError(
                    f"{la.asset}: {c.key} was built by other code or policy than {target.key} "
                    f"(build spec / schema differ); rematerialize the range's snapshots with the current code first")


@dataclass
class CompactionResult:
    plan: CompactionPlan
    lineage: dict
    rewritten: dict[str, dict[str, str]]  # asset -> {"from": old version, "to": new version}
    retired: list[str] = field(default_factory=list)


def _filtered(batch: pa.RecordBatch, units: pa.Array, items: pa.Array) -> pa.Table:
    t = pa.Table.from_batches([batch])
    names = t.schema.names
    # a row naming a record follows the record; a row naming only a raw item follows the item
    mask = None
    if "record_id" in names:
        mask = pc.fill_null(pc.is_in(t.column("record_id"), value_set=units), False)
    if "item_index" in names:
        m = pc.fill_null(pc.is_in(t.column("item_index"), value_set=items), False)
        if mask is not None:
            m = pc.and_(m, pc.is_null(t.column("record_id")))
        mask = m if mask is None else pc.or_(mask, m)
    if mask is None:
        raise CompactionError(f"a table with columns {names} names neither records nor raw items; cannot fold it")
    return t.filter(mask)


def _relabel(t: pa.Table, target: str, renumber: Mapping[int, int]) -> pa.Table:
    if "snapshot" in t.schema.names:
        t = t.set_column(t.schema.get_field_index("snapshot"), "snapshot",
                         pa.array([target] * t.num_rows, t.schema.field("snapshot").type))
    if "item_index" in t.schema.names:
        old = t.column("item_index").to_pylist()
        t = t.set_column(t.schema.get_field_index("item_index"), "item_index",
                         pa.array([renumber.get(i, i) if i is not None else None for i in old], pa.int64()))
    return t


def _write_layer(store: LayerStore, la, plan: CompactionPlan, upstream: Optional[LayerVersion],
                 renumber: dict[tuple[str, int], int]) -> LayerVersion:
    target_v = store.open_version(la.asset, plan.target, plan.read_versions[plan.target][la.asset])
    specs = {n: s for n, s in la.table_specs().items() if n in target_v.manifest["tables"]}
    build_spec = dict(target_v.manifest.get("build_spec", {}))
    if upstream is not None and la.upstream_key:
        build_spec[la.upstream_key] = upstream.content_digest
    build_spec["compaction"] = {"replaces": plan.replaces}
    counted = {(t, c) for t, c in la.manifest_counts.values()}
    values: dict[tuple[str, Optional[str]], Counter] = {k: Counter() for k in counted}
    if store.current_version_name(la.asset, plan.target) != plan.read_versions[plan.target][la.asset]:
        raise CompactionError(f"{la.asset}/{plan.target} changed during compaction (a purge?); run it again")
    raw_indexed = la.asset in (RAW_SNAPSHOT, CANONICAL_RECORDS)  # where item_index is the raw item's position
    with store.new_version(la.asset, plan.target, specs, build_spec) as w:  # publishes only over what was read
        for key in plan.captures:
            if key not in plan.items:
                continue
            v = store.open_version(la.asset, key, plan.read_versions[key][la.asset])
            units = pa.array(sorted(u for u, (_, where) in plan.state.items() if where == key), pa.string())
            cap_items = plan.items[key]
            items = pa.array(cap_items, pa.int64())
            # the records of a kept item are kept with it (an accepted item's record id is its unit)
            local = {i: renumber[(key, i)] for i in cap_items} if raw_indexed else {}
            for name in sorted(specs):
                for batch in v.iter_batches(name, batch_size=_BATCH):
                    t = _relabel(_filtered(batch, units, items), plan.target, local)
                    if not t.num_rows:
                        continue
                    for (table, column), cnt in values.items():
                        if table == name:
                            cnt.update({"": t.num_rows} if column is None else
                                       Counter(x for x in t.column(column).to_pylist()))
                    w.write(name, t)
        manifest = {k: val for k, val in target_v.manifest.items() if k not in _MANIFEST_KEYS}
        for mkey, (table, column) in la.manifest_counts.items():
            manifest[mkey] = values[(table, column)].get("", 0) if column is None else dict(sorted(values[(table, column)].items()))
        if "items_in" in manifest:  # canonical: one decision per raw item
            manifest["items_in"] = len(renumber)
        # the registry's counts above are recomputed; other report fields (template and profile
        # statistics, decontamination coverage) are the newest capture's, and say so
        manifest["compaction"] = {"replaces": plan.replaces, "report_fields_as_of": plan.target, "from_versions": {
            k: store.open_version(la.asset, k, plan.read_versions[k][la.asset]).content_digest for k in plan.captures}}
        return w.commit(extra_manifest=manifest)


def _lineage_doc(store: LayerStore, plan: CompactionPlan, versions: Mapping[str, str]) -> dict:
    captures = []
    for lin in plan.earlier.values():  # a partition compacted before: its captures as its lineage lists them
        captures.extend({**c, "compacted_into": lin.snapshot} for c in lin.doc["captures"])
    for key in plan.captures:
        if key in plan.earlier:
            continue
        raw = store.open_version(RAW_SNAPSHOT, key, plan.read_versions[key][RAW_SNAPSHOT])
        canon = store.open_version(CANONICAL_RECORDS, key, plan.read_versions[key][CANONICAL_RECORDS])
        cur = store.open_version(CURATED_RECORDS, key, plan.read_versions[key][CURATED_RECORDS])
        captures.append({"snapshot": key, "raw_version": raw.content_digest, "items": raw.row_count("items"),
                         "status_counts": raw.manifest.get("status_counts", {}),
                         "canonical_outcomes": canon.manifest.get("outcomes", {}),
                         "curated_outcomes": cur.manifest.get("outcomes", {}),
                         "kept_items": len(plan.items.get(key, ()))})
    captures.sort(key=lambda c: (parse_snapshot_key(c["snapshot"])[1], c["snapshot"]))
    return {"format": LINEAGE_FORMAT, "snapshot": plan.target, "source": plan.source,
            "rule": "incremental" if plan.incremental else "whole", "replaces": plan.replaces,
            "captures": captures, "left_out_items": dict(plan.dropped),
            "units": dict(sorted(Counter(v for v, _ in plan.state.values()).items())),
            "versions": dict(sorted(versions.items()))}


def compact(store: LayerStore, plan: CompactionPlan, *, log: Log = None,
            check: Optional[Callable[[dict], list[str]]] = None) -> CompactionResult:
    """Write the fold into the target's layers (when it is not already the fold), check it says
    what the plan says (and ``check(rewritten)``: the failed layer checks, if given), write the
    lineage. On any failure the target's layers are restored. The replaced captures are
    untouched: ``retire`` them."""
    say = log or (lambda _m: None)
    rewritten: dict[str, dict[str, str]] = {}
    if plan.rewrite:
        renumber: dict[tuple[str, int], int] = {}
        for key in plan.captures:
            for i in plan.items.get(key, ()):
                renumber[(key, i)] = len(renumber)
        upstream = None
        try:
            for la in snapshot_layers():
                new = _write_layer(store, la, plan, upstream, renumber)
                rewritten[la.asset] = {"from": plan.read_versions[plan.target][la.asset], "to": new.version}
                say(f"compaction {plan.target}: {la.asset} folded into version {new.version}")
                upstream = new
            _verify(store, plan)
            failed = check(rewritten) if check is not None else []
            if failed:
                raise CompactionError(f"{plan.target}: checks of the folded partition failed ({', '.join(failed)}); "
                                      "its layers were restored and nothing was retired")
        except BaseException:
            _restore(store, plan, rewritten)
            raise
    versions = {a: (store.peek(a, plan.target).content_digest) for a in (la.asset for la in snapshot_layers())}
    doc = _lineage_doc(store, plan, versions)
    write_lineage(store, doc)
    for key in plan.earlier:
        if key != plan.target:
            drop_lineage(store, key)
    say(f"compaction {plan.target}: folds {len(plan.replaces)} older capture(s) of {plan.source} "
        f"({plan.captures[0]} .. {plan.target}); left out: {plan.dropped or 'nothing'}")
    return CompactionResult(plan, doc, rewritten)


def _restore(store: LayerStore, plan: CompactionPlan, rewritten: Mapping[str, Mapping[str, str]]) -> None:
    for asset in rewritten:
        store.set_current(asset, plan.target, plan.read_versions[plan.target][asset])


def _verify(store: LayerStore, plan: CompactionPlan) -> None:
    """The compacted partition, read like any capture, says what the fold said, and no capture of
    the range changed while it was written (a purge that ran meanwhile)."""
    after = _read_capture(store, plan.target)
    got = _fold([after], incremental=True)
    want = {u: v for u, (v, _) in plan.state.items()}
    got_v = {u: v for u, (v, _) in got.items()}
    if got_v != want:
        diff = sorted(set(got_v.items()) ^ set(want.items()))[:5]
        raise CompactionError(f"{plan.target}: the folded partition does not say what the fold did (e.g. {diff}); "
                              "nothing was retired")
    for key, assets in plan.read_versions.items():
        for asset, name in assets.items():
            if key != plan.target and store.current_version_name(asset, key) != name:
                raise CompactionError(f"{asset}/{key} changed during compaction (a purge?); nothing was retired, run it again")


def retire(store: LayerStore, keys: Iterable[str], *, log: Log = None) -> list[str]:
    """Delete every layer version of the replaced captures (and drop the compacted partitions'
    superseded versions is the caller's choice). Returns the keys retired."""
    done = []
    for key in ordered(keys):
        for la in snapshot_layers():
            store.drop_versions(la.asset, key, keep_current=False)
        done.append(key)
    if log and done:
        log(f"compaction: retired {len(done)} capture partition(s): {done[0]} .. {done[-1]}")
    return done
