"""Build the demo end to end through Dagster, in the persistent instance the UI shows.

1. write the demo dumps under $CORPUS_HOME/demo_inputs
2. start Python's pydoc server on 127.0.0.1 and evaluate the crawl schedule for real
   (incremental capture; a rerun with nothing changed skips)
3. snapshot every file source, then run snapshot_job for each new partition
4. materialize the SQL report models and print a summary with the paths written
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

import dagster as dg

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS, RAW_SNAPSHOT
from corpus_assets.domain.demo.inputs import write_demo_inputs
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.demo.pydoc_server import free_port, port_is_free, pydoc_server
from corpus_assets.domain.core.settings import catalog_path, ensure_homes
from corpus_assets.partitions import snapshots_partitions
from sensors.crawl_schedules import capture_schedule_name

DEFAULT_PYDOC_PORT = 7464


def run_snapshot(defs: dg.Definitions, instance: dg.DagsterInstance, key: str) -> dg.ExecuteInProcessResult:
    result = defs.resolve_job_def("snapshot_job").execute_in_process(
        instance=instance, partition_key=key, raise_on_error=True
    )
    return result


def _build(defs, instance, sources, port, echo):
    """Capture and materialize every demo source in ``instance``; return (new keys, skip messages)."""
    defs.resolve_job_def("registry_job").execute_in_process(instance=instance, raise_on_error=True)
    new_keys: list[str] = []
    skipped: list[str] = []
    with pydoc_server(port) as base:
        echo(f"pydoc documentation server: {base}")
        for s in sources.sources:
            if s.kind != "http_crawl":
                continue
            # the schedule's tick requests a capture_job run; the run crawls and keeps the snapshot
            # only if something changed; then its materialization (the captured_snapshots sensor's job)
            schedule = defs.resolve_schedule_def(capture_schedule_name(s.id))
            ctx = dg.build_schedule_context(
                instance=instance,
                scheduled_execution_time=datetime.now(timezone.utc),
                repository_def=defs.get_repository_def(),
            )
            data = schedule.evaluate_tick(ctx)
            if data.skip_message:
                skipped.append(f"{s.id}: {data.skip_message}")
            for req in data.run_requests or []:
                run = defs.resolve_job_def("capture_job").execute_in_process(
                    instance=instance, run_config=req.run_config, tags=req.tags, raise_on_error=True)
                captured = run.output_for_node("capture_source")
                if captured["committed"]:
                    run_snapshot(defs, instance, captured["snapshot"])
                    new_keys.append(captured["snapshot"])
                else:
                    skipped.append(f"{s.id}: {captured['reason']}")
    for s in sources.sources:
        if s.kind == "http_crawl":
            continue
        key = snapshot_key(s.id, datetime.now(timezone.utc))
        instance.add_dynamic_partitions(snapshots_partitions.name, [key])
        run_snapshot(defs, instance, key)
        new_keys.append(key)
    # register release specs through the real sensor, then build the demo release
    sensor = defs.resolve_sensor_def("release_specs")
    with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:  # closed: no dangling instance
        tick = sensor.evaluate_tick(ctx)
    for req in tick.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="demo", raise_on_error=True)
    defs.resolve_job_def("reports_job").execute_in_process(instance=instance, raise_on_error=True)

    return new_keys, skipped


def run_demo(port: int | None = None, echo=print) -> dict:
    home, dagster_home = ensure_homes()
    inputs = write_demo_inputs(DataRoot(home).demo_inputs)
    echo(f"demo inputs: {len(inputs)} files under {DataRoot(home).demo_inputs}")
    if port is None:
        port = int(os.environ.get("CORPUS_PYDOC_PORT", DEFAULT_PYDOC_PORT))
        if not port_is_free(port):
            port = free_port()
    os.environ["CORPUS_PYDOC_PORT"] = str(port)

    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    resources = defs.resources
    sources = resources["sources"].load()
    with dg.DagsterInstance.get() as instance:
        new_keys, skipped = _build(defs, instance, sources, port, echo)

    store = resources["storage"].store()
    echo("")
    echo(f"{'':<40} {'canonical':^33} | {'curated':^26}")
    echo(f"{'snapshot':<40} {'items':>6} {'accepted':>8} {'rejected':>8} {'quarant.':>8} | "
         f"{'kept':>8} {'rejected':>8} {'quarant.':>8}")
    rows = []
    curated = {}
    for key in new_keys:
        raw = store.require_current(RAW_SNAPSHOT, key)
        can = store.require_current(CANONICAL_RECORDS, key)
        cur = store.require_current(CURATED_RECORDS, key).manifest.get("outcomes", {})
        o = can.manifest.get("outcomes", {})
        rows.append((key, raw.row_count("items"), o.get("accepted", 0), o.get("rejected", 0), o.get("quarantined", 0)))
        curated[key] = (cur.get("accepted", 0), cur.get("rejected", 0), cur.get("quarantined", 0))
        echo(f"{key:<40} {rows[-1][1]:>6} {rows[-1][2]:>8} {rows[-1][3]:>8} {rows[-1][4]:>8} | "
             f"{curated[key][0]:>8} {curated[key][1]:>8} {curated[key][2]:>8}")
    for line in skipped:
        echo(f"skipped  {line}")
    dedup = store.require_current("dedup_clusters", "demo").manifest
    echo(
        f"release demo: {dedup['records']} curated records -> {dedup['kept']} kept after dedup "
        f"({dedup['exact']['duplicates_removed']} exact, {dedup['near_removed']} near duplicates removed)"
    )
    split_report = store.require_current("splits", "demo").manifest["report"]
    echo("release demo splits: " + ", ".join(
        f"{name} {r['records']} records ({r['record_share']:.0%} vs target {r['target']:.0%})"
        for name, r in split_report["splits"].items()))
    tok = store.require_current("tokenizer", "demo").manifest
    echo(f"release demo tokenizer: {tok['tokenizer_digest'][:16]} (vocab {tok['vocab_size']}, "
         f"trained on {tok.get('training_records', 0)} training-split records)")
    tv = store.require_current("token_views", "demo").manifest["report"]
    echo(f"release demo token views: {tv['views']} views, {tv['tokens']} tokens, label-token rate "
         f"{tv['label_token_rate']:.1%}; " + ", ".join(f"{s} {r['tokens']} tokens" for s, r in tv["splits"].items())
         + (f"; rejected {tv['rejected']}" if tv["rejected"] else ""))
    mix = store.require_current("mixture_plan", "demo").manifest["report"]
    echo(f"release demo mixture: {mix['draws']} draws ({mix['unit']}) over {len(mix['sources'])} sources; "
         "effective epochs " + ", ".join(f"{s} {r['effective_epochs']:.1f}" for s, r in mix["sources"].items()))
    for w in mix["warnings"]:
        echo(f"  warning: {w}")
    pk = store.require_current("packed_shards", "demo").manifest["report"]
    echo(f"release demo packed shards (T={pk['seq_len']}): " + ", ".join(
        f"{s} {r.get('blocks', 0)} blocks / {r.get('shards', 0)} shards, utilization {r.get('utilization', 0):.1%}, "
        f"padding {r.get('padding', 0)}, label rate {r.get('label_rate', 0):.1%}" for s, r in pk["splits"].items()))
    accounting = [r for r in store.require_current("stage_accounting", "_all").read_table("result").to_pylist()
                  if r["release"] == "demo"]
    echo("release demo stage accounting (dbt_like_sql/stage_accounting.sql; in = accepted + rejected + quarantined + deleted):")
    echo(f"  {'stage':<18} {'in':>7} {'accepted':>8} {'modified':>8} {'rejected':>8} {'quarant.':>8} {'deleted':>7} {'tokens out':>10}")
    for r in accounting:
        tokens = "" if r["tokens_out"] is None else r["tokens_out"]
        echo(f"  {r['layer']:<18} {r['records_in']:>7} {r['accepted']:>8} {r['modified']:>8} {r['rejected']:>8} "
             f"{r['quarantined']:>8} {r['deleted']:>7} {tokens:>10}")
    from corpus_assets.domain.release.publish import current_release

    published = current_release(DataRoot(home).releases, "demo")
    if published is not None:
        echo(f"release demo published: {published}  (check it: corpus verify demo)")
    echo("")
    if store.remote is not None:
        echo(f"data root (CORPUS_HOME): {store.remote.url}  (layers/, shards/, releases/; cached locally below)")
        echo(f"local root (CORPUS_LOCAL): {home}")
    else:
        echo(f"data root (CORPUS_HOME): {home}")
    echo(f"  raw snapshots:     {store.layers_root / RAW_SNAPSHOT}  (owner-only)")
    echo(f"  canonical records: {store.layers_root / CANONICAL_RECORDS}")
    echo(f"  curated records:   {store.layers_root / CURATED_RECORDS}")
    echo(f"  eval registry:     {store.layers_root / 'eval_registry'}  (owner-only)")
    echo(f"  signatures:        {store.layers_root / 'minhash_signatures'}")
    echo(f"  dedup clusters:    {store.layers_root / 'dedup_clusters' / 'demo'}")
    echo(f"  splits, tokenizer: {store.layers_root / 'splits' / 'demo'}, {store.layers_root / 'tokenizer' / 'demo'}")
    echo(f"  token views:       {store.layers_root / 'token_views' / 'demo'}")
    echo(f"  mixture plan:      {store.layers_root / 'mixture_plan' / 'demo'}")
    echo(f"  packed shards:     {home / pk['shard_set']}  (Megatron .bin/.idx + sidecars + spans)")
    echo(f"  releases:          {DataRoot(home).releases}  (manifest.json, data_card.md, shards/)")
    echo(f"  SQL reports:       {store.layers_root}/<model>/_all/  (one per dbt_like_sql/*.sql)")
    echo(f"  catalog:           {catalog_path()}")
    echo(f"Dagster home:        {dagster_home}")
    echo("Open the UI: make ui  (then http://127.0.0.1:3000)")
    return {"snapshots": rows, "curated": curated, "skipped": skipped, "home": str(home), "dedup": dedup,
            "splits": split_report, "tokenizer": tok, "token_views": tv, "mixture": mix, "packed_shards": pk,
            "stage_accounting": accounting, "published": str(published) if published else None}
