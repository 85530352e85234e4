#!/usr/bin/env python3
"""Partition growth (issue 18): what tens of thousands of ``snapshots`` partitions cost Dagster.

For each size (the baseline, 1,000 partitions by default, then the measured size, 100,000 by
default), a fresh SQLite DagsterInstance in a temporary DAGSTER_HOME gets two materialized
snapshots (the two small jsonl sources of tests/release_fixture.py, through the real
``snapshot_job``) plus hourly keys of one source going back in time, registered with
``add_dynamic_partitions`` in batches of 1,000. Then, timed with ``time.perf_counter``: listing
the partitions, 100 ``has_dynamic_partition`` calls, the release selection over every key, one
tick of each project sensor (``release_specs``, ``captured_snapshots``, ``release_rebuilds``,
``deletion_requests``, with one deletion request filed), a full ``release_job`` over the two
materialized snapshots, and, against a real ``dagster-webserver``, the partition queries of the
asset page (``partitionStats``, ``assetPartitionStatuses``, ``partitionKeyConnection``) for
``raw_snapshot`` and the ``staleStatus`` of the release asset ``dedup_clusters``. Each size runs
in its own process. Printed: seconds per size and the ratio measured / baseline.

    nice -n 5 .venv/bin/python bench/bench_partitions.py [--partitions 100000] [--baseline 1000] [--no-graphql]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT / "tests"))

PARTITIONS = """query($asset: String!) { assetNodes(assetKeys: [{path: [$asset]}]) {
  partitionStats { numPartitions numMaterialized }
  assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions unmaterializedPartitions } }
  partitionKeyConnection(limit: 50, ascending: false) { results hasMore } } }"""
STALE = """query { assetNodes(assetKeys: [{path: ["dedup_clusters"]}]) { staleStatus(partition: "r1") } }"""
RELEASE = ("split: {fractions: [0.6, 0.2, 0.2]}\n"
           "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\nrebuild: manual\n")


def _timed(out: dict, what: str, fn):
    start = time.perf_counter()
    value = fn()
    out[what] = time.perf_counter() - start
    return value


def one(root: Path, n: int, graphql_too: bool) -> dict:
    """Everything for one size, in this process (the caller runs it in a fresh one)."""
    home = root / "home"
    (home / "dagster").mkdir(parents=True)
    os.environ.update(CORPUS_HOME=str(home), DAGSTER_HOME=str(home / "dagster"),
                      CORPUS_CURATION=str(PROJECT / "curation.yaml"))

    class _MP:  # setup_release's monkeypatch: plain environment here
        def setenv(self, k, v):
            os.environ[k] = v

    import dagster as dg

    import release_fixture as rf
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.keys import snapshot_key
    from corpus_assets.domain.deletion.requests import file_request
    from corpus_assets.domain.release.spec import load_release_spec
    from corpus_assets.domain.storage.catalog import Catalog

    rel = rf.setup_release(root, _MP(), rf.TOKENIZER + RELEASE,
                           sources_line="snapshots: {sources: [site_docs, site_chat], since: '2026-11-29T13:30:00Z'}\n")
    t: dict = {}
    with dg.DagsterInstance.get() as instance:
        defs = build_definitions()
        rf.build_snapshots(defs, instance, minute=0)
        old = [snapshot_key("site_docs", rf.T0 - timedelta(hours=h)) for h in range(1, n - 1)]

        def add():
            for i in range(0, len(old), 1000):
                instance.add_dynamic_partitions("snapshots", old[i:i + 1000])
        _timed(t, "add_dynamic_partitions (batches of 1,000)", add)
        keys = _timed(t, "get_dynamic_partitions", lambda: instance.get_dynamic_partitions("snapshots"))
        assert len(keys) == n, len(keys)
        instance.has_dynamic_partition("snapshots", old[0])  # warm: the first call opens the storage
        _timed(t, "100 x has_dynamic_partition", lambda: [instance.has_dynamic_partition("snapshots", k) for k in old[::max(1, len(old) // 100)][:100]])
        spec = load_release_spec(rel / "r1.yaml")
        chosen = _timed(t, "release selection over every key", lambda: spec.snapshots.select(keys))
        assert len(chosen) == 2, chosen
        file_request(Catalog.at(home / "catalog.duckdb"), {"kind": "record", "record_id": "site_docs:venv",
                                                            "requester": "bench@example.org", "reason": "bench"})
        for name in ("release_specs", "captured_snapshots", "release_rebuilds", "deletion_requests"):
            with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
                _timed(t, f"sensor tick: {name}", lambda: defs.resolve_sensor_def(name).evaluate_tick(ctx))
        instance.add_dynamic_partitions("releases", ["r1"])
        ok = _timed(t, "release_job (2 materialized snapshots)", lambda: defs.resolve_job_def("release_job")
                    .execute_in_process(instance=instance, partition_key="r1").success)
        assert ok
    t["sqlite files (MB)"] = sum(p.stat().st_size for p in (home / "dagster").rglob("*.db")) / 1e6
    if graphql_too:
        from processes import free_port, graphql, start_webserver, stop_group, wait_for_webserver

        port = free_port()
        log = root / "webserver.log"
        web = start_webserver(port, PROJECT, dict(os.environ), log)
        try:
            wait_for_webserver(web, port, log, timeout=300)
            (node,) = _timed(t, "graphql: raw_snapshot partition page", lambda: graphql(port, PARTITIONS, {"asset": "raw_snapshot"}))["assetNodes"]
            assert node["partitionStats"]["numPartitions"] == n
            (node,) = _timed(t, "graphql: dedup_clusters[r1] staleStatus", lambda: graphql(port, STALE))["assetNodes"]
        finally:
            stop_group(web)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--baseline", type=int, default=1_000)
    ap.add_argument("--no-graphql", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(Path(args.root), args.one, not args.no_graphql)))
        return
    results = {}
    for n in (args.baseline, args.partitions):
        with tempfile.TemporaryDirectory(prefix=f"bench-partitions-{n}-") as d:
            cmd = [sys.executable, __file__, "--one", str(n), "--root", d] + (["--no-graphql"] if args.no_graphql else [])
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PROJECT), str(PROJECT / "tests")]))
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=PROJECT)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if out.returncode != 0 or line is None:
                sys.exit(f"size {n} failed:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}")
            results[n] = json.loads(line[len("RESULT "):])
    b, m = args.baseline, args.partitions
    print(f"baseline: {b:,} snapshot partitions; measured: {m:,} (same run, fresh SQLite instance each)")
    print(f"{'operation':<46} {f'{b:,}':>10} {f'{m:,}':>10} {'ratio':>7}")
    for what in results[b]:
        x, y = results[b][what], results[m][what]
        unit = "" if "MB" in what else "s"
        print(f"{what:<46} {x:>9.2f}{unit} {y:>9.2f}{unit} {y / x if x else float('nan'):>7.1f}")


if __name__ == "__main__":
    main()
