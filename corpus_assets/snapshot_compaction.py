"""``corpus compact-snapshots``: keep the ``snapshots`` partition set bounded (Dagster wiring of
``domain/ingest/compaction.py``).

For one source, the captures older than a cutoff are compacted one calendar month at a time into
the month's newest capture; then the replaced partitions' layer versions are deleted and their
keys removed from the instance (``delete_dynamic_partition``), so hourly captures leave about
``24 x days kept + 12 per year`` partitions per source instead of 8,760 a year
(docs/operations.md#partition-growth-and-instance-storage).

Before anything is written, every valid release spec is checked against the compaction: one
that would answer differently afterwards (names a capture of the range explicitly, cuts a range
with since/until, or keeps every copy with ``retain: union``) stops it, naming the spec. A folded
partition's rewritten layer versions are reported to Dagster as materializations (data version =
content digest, code version, key figures) with their checks, as a purge reports its rewrites.
A run that stopped half way is finished by the next one (replaced captures that still have layers
or a partition are retired first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Optional

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG

from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.ingest.compacted import Lineage, read_lineages, selection_problems
from corpus_assets.domain.ingest.compaction import CompactionError, compact, compaction_ranges, ordered, plan_compaction, retire
from corpus_assets.domain.layers import registry as layer_registry
from corpus_assets.domain.release.spec import discover_release_specs
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.layer_checks import stored_checks
from corpus_assets.metadata import standard_metadata
from corpus_assets.partitions import snapshots_partitions

Log = Callable[[str], None]


@dataclass
class SourceCompaction:
    source: str
    compacted: list[dict] = field(default_factory=list)  # one per range: target, replaces, rewritten
    retired: list[str] = field(default_factory=list)
    partitions_before: int = 0
    partitions_after: int = 0


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``2w``: how old a capture must be to be compacted."""
    units = {"h": 3600, "d": 86400, "w": 7 * 86400}
    t = text.strip().lower()
    if len(t) < 2 or t[-1] not in units or not t[:-1].isdigit():
        raise ValueError(f"--older-than {text!r}: give a whole number with h, d or w, e.g. 30d")
    return timedelta(seconds=int(t[:-1]) * units[t[-1]])


def spec_problems(releases_dir: Optional[Path], lineage: Lineage, incremental: bool) -> list[str]:
    """``release: why`` for every valid release spec that ``lineage`` (a planned compaction)
    would make answer differently."""
    if releases_dir is None or not Path(releases_dir).is_dir():
        return []
    specs, _ = discover_release_specs(releases_dir)
    out = []
    in_range = set(lineage.captures) - (set() if incremental else {lineage.snapshot})
    for name, spec in sorted(specs.items()):
        sel = spec.snapshots
        problems = selection_problems(sel, {lineage.snapshot: lineage})
        named = sorted(in_range & set(sel.explicit))
        if named and not problems:
            problems = [f"names {', '.join(named)}, which the fold of {lineage.captures[0]} .. {lineage.snapshot} changes"]
        out.extend(f"{name}: {p}" for p in problems)
    return out


def _source_keys(instance: dg.DagsterInstance, source: str) -> list[str]:
    out = []
    for key in instance.get_dynamic_partitions(snapshots_partitions.name):
        try:
            if parse_snapshot_key(key)[0] == source:
                out.append(key)
        except ValueError:
            continue
    return ordered(out)


def _retire(instance, store: LayerStore, keys, log: Log) -> list[str]:
    keys = ordered(keys)
    retire(store, keys, log=log)
    for key in keys:
        if instance.has_dynamic_partition(snapshots_partitions.name, key):
            instance.delete_dynamic_partition(snapshots_partitions.name, key)
    return keys


def _failed_checks(store: LayerStore, target: str, rewritten: dict, curation) -> list[str]:
    return [f"{asset}[{target}].{r.check_name}" for asset in rewritten
            for r in stored_checks(asset, store, target, curation=curation) or [] if not r.passed]


def _report(instance, defs: dg.Definitions, store: LayerStore, target: str, rewritten: dict, curation) -> None:
    """A materialization, and its checks, for every layer version the fold wrote."""
    graph = defs.resolve_asset_graph()
    for asset, moved in rewritten.items():
        v = store.require_current(asset, target)
        tags = {DATA_VERSION_TAG: v.content_digest}
        code_version = graph.get(dg.AssetKey(asset)).code_version
        if code_version:
            tags[CODE_VERSION_TAG] = code_version
        metadata = {"version": v.version, "content_digest": v.content_digest, "compacted_from_version": moved["from"],
                    "replaces": dg.MetadataValue.json(v.manifest.get("compaction", {}).get("replaces", []))}
        metadata.update(standard_metadata(v))
        metadata.update(stored_key_figures(v))
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=asset, partition=target, tags=tags, metadata=metadata,
            description=f"compacted: folds {len(metadata['replaces'].value)} older capture(s)"))
        results = stored_checks(asset, store, target, curation=curation)
        if not results:
            continue
        rec = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[target]), limit=1).records
        where = AssetCheckEvaluationTargetMaterializationData(
            storage_id=rec[0].storage_id, run_id=rec[0].run_id, timestamp=rec[0].timestamp) if rec else None
        for r in results:
            instance.report_runless_asset_event(dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey(asset), check_name=r.check_name, passed=r.passed, metadata=r.metadata,
                severity=r.severity, partition=target, target_materialization_data=where))


def compact_source(instance: dg.DagsterInstance, defs: dg.Definitions, store: LayerStore, source_id: str, *,
                   older_than: timedelta, now: Optional[datetime] = None, releases_dir: Optional[Path] = None,
                   log: Log = print, dry_run: bool = False) -> SourceCompaction:
    """Compact ``source_id``'s captures older than ``now - older_than`` (one partition per month)."""
    source = defs.resources["sources"].load().get(source_id)
    incremental = source.kind == "http_crawl"
    now = now or datetime.now(timezone.utc)
    out = SourceCompaction(source_id)
    # finish what an interrupted run left: captures a lineage replaces that still exist somewhere
    lingering = {k for lin in read_lineages(store, source_id).values() for k in lin.replaces
                 if instance.has_dynamic_partition(snapshots_partitions.name, k)
                 or any(store.current_version_name(la.asset, k) for la in layer_registry.snapshot_layers())}
    if lingering and not dry_run:
        log(f"{source_id}: finishing an earlier compaction: retiring {len(lingering)} replaced capture(s)")
        out.retired += _retire(instance, store, lingering, log)
    keys = _source_keys(instance, source_id)
    out.partitions_before = len(keys)
    cutoff = now - older_than
    ranges = compaction_ranges(keys, cutoff)
    log(f"{source_id}: {len(keys)} snapshot partition(s); {sum(map(len, ranges))} captured before "
        f"{cutoff.isoformat()} in {len(ranges)} month range(s) of two or more")
    curation_cache: dict = {}

    def curation():
        if not curation_cache:
            from corpus_assets.assets.curation.eval_registry import load_current_registry
            from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry

            cfg = defs.resources["curation"].load()
            curation_cache["v"] = (cfg, load_current_registry(store) if cfg.decontam.enabled else EvalRegistry(()))
        return curation_cache["v"]

    for captures in ranges:
        plan = plan_compaction(store, captures, incremental=incremental, log=log)
        planned = Lineage(plan.target, source_id, tuple(plan.replaces), {})
        blocked = spec_problems(releases_dir, planned, incremental)
        if blocked:
            raise CompactionError(f"compacting {captures[0]} .. {plan.target} would change what these release specs "
                                  f"select: {'; '.join(blocked)}")
        if dry_run:
            log(f"{source_id}: would fold {len(plan.replaces)} capture(s) into {plan.target} "
                f"({'rewriting its layers' if plan.rewrite else 'already the fold'}); left out: {plan.dropped}")
            out.compacted.append({"target": plan.target, "replaces": plan.replaces, "rewritten": {}, "dry_run": True})
            continue
        result = compact(store, plan, log=log,
                         check=lambda rewritten: _failed_checks(store, plan.target, rewritten, curation))
        if result.rewritten:
            _report(instance, defs, store, plan.target, result.rewritten, curation)
        replaced = [k for k in plan.captures if k != plan.target]
        out.retired += _retire(instance, store, replaced, log)
        for la in layer_registry.snapshot_layers():  # the target's pre-fold versions: a subset of the fold
            store.drop_versions(la.asset, plan.target)
        out.compacted.append({"target": plan.target, "replaces": plan.replaces, "rewritten": result.rewritten})
    out.partitions_after = len(_source_keys(instance, source_id))
    log(f"{source_id}: {out.partitions_before} -> {out.partitions_after} snapshot partition(s)"
        + (" (dry run)" if dry_run else ""))
    return out
