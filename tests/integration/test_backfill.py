"""A per-partition backfill of the snapshot assets through the real daemon, with the shipped
instance config (deploy/dagster.yaml): launched over GraphQL as the UI does, run by
`dagster-daemon run`, waited for until the backfill reports success; every partition's layers
exist, a catalog writer waits while another holder has the `catalog_writer` slot, and no two
steps of the pool ever ran at the same time."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
from dagster._core.events import DagsterEventType

import release_fixture as rf
from conftest import PROJECT
from processes import free_port, graphql, start_in_group, start_webserver, stop_group, wait_for_webserver
from processes import tail as _tail
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore

BIN = PROJECT / ".venv" / "bin"
SNAPSHOT_ASSETS = ["raw_snapshot", "canonical_records", "curated_records", "minhash_signatures"]
POOL = "catalog_writer"
POOL_ASSETS = {"raw_snapshot"}  # the snapshot asset in the pool (canonical_records only reads tombstones)
HOLDER = ("test-holder-run", "external_catalog_writer")  # a pool slot claimed by the test itself

LAUNCH = """mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
  }
}"""
STATUS = """query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status numPartitions }
    ... on Error { message }
  }
}"""


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    """A server leading its own process group (so it and its code server stop together)."""
    return start_in_group(cmd, cwd=PROJECT, env=env, log_path=log)


def _run_flight(instance: dg.DagsterInstance, run_id: str) -> tuple[float, float]:
    """(launched, finished) timestamps of a run from its event log."""
    wanted = {DagsterEventType.RUN_STARTING, DagsterEventType.RUN_SUCCESS}
    times = {r.dagster_event.event_type: r.timestamp for r in instance.all_logs(run_id, of_type=wanted)}
    return times[DagsterEventType.RUN_STARTING], times[DagsterEventType.RUN_SUCCESS]


def _backfill_events(instance: dg.DagsterInstance, backfill_id: str):
    for run in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id})):
        for record in instance.all_logs(run.run_id):
            if record.dagster_event is not None and record.dagster_event.step_key in POOL_ASSETS:
                yield record


def _blocked_pool_steps(instance: dg.DagsterInstance, backfill_id: str) -> list:
    return [r for r in _backfill_events(instance, backfill_id)
            if (r.dagster_event.message or "").startswith(f"Step blocked by limit for pool {POOL}")]


def _started_pool_steps(instance: dg.DagsterInstance, backfill_id: str) -> list:
    return [r for r in _backfill_events(instance, backfill_id) if r.dagster_event.event_type_value == "STEP_START"]


def _step_intervals(instance: dg.DagsterInstance, run_id: str) -> dict[str, tuple[float, float]]:
    """step key -> (STEP_START, STEP_SUCCESS) timestamps from the run's event log."""
    starts, ends = {}, {}
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            starts[event.step_key] = record.timestamp
        elif event.event_type_value == "STEP_SUCCESS":
            ends[event.step_key] = record.timestamp
    return {k: (starts[k], ends[k]) for k in starts if k in ends}


def test_snapshot_backfill_through_the_daemon_respects_the_catalog_writer_pool(corpus_env, tmp_path, monkeypatch):
    # three snapshot partitions of two file sources; no release spec (the release sensor stays idle)
    rf.setup_release(tmp_path, monkeypatch, rf.TOKENIZER)
    shutil.rmtree(tmp_path / "releases")
    (tmp_path / "releases").mkdir()
    keys = [snapshot_key("site_docs", rf.T0), snapshot_key("site_chat", rf.T0 + timedelta(minutes=1)),
            snapshot_key("site_docs", rf.T0 + timedelta(minutes=2))]
    dagster_home = Path(os.environ["DAGSTER_HOME"])
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", dagster_home / "dagster.yaml")  # what `make dev` installs
    from corpus_assets.definitions import build_definitions

    with dg.DagsterInstance.get() as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.run_queue_config.max_concurrent_runs >= 2
        backfill_limits = config.run_queue_config.tag_concurrency_limits
        # curation needs the frozen evaluation registry (built once, as `corpus demo` does)
        assert build_definitions().resolve_job_def("registry_job").execute_in_process(instance=instance).success
        instance.add_dynamic_partitions("snapshots", keys)

    # Steps in the run process (CORPUS_EXECUTOR, docs/operations.md) keep the test short; pool slots
    # are claimed by the same InstanceConcurrencyContext as under the default multiprocess executor.
    env = dict(os.environ, CORPUS_EXECUTOR="in_process")
    port = free_port()
    web_log, daemon_log = tmp_path / "webserver.log", tmp_path / "daemon.log"
    web = start_webserver(port, PROJECT, env, web_log)
    daemon = None
    try:
        wait_for_webserver(web, port, web_log)
        # what the UI's "Materialize → backfill" sends for the selected snapshot assets and partitions
        data = graphql(port, LAUNCH, {"params": {
            "partitionNames": keys,
            "assetSelection": [{"path": [a]} for a in SNAPSHOT_ASSETS],
            "title": "test_backfill",
        }})["launchPartitionBackfill"]
        assert data["__typename"] == "LaunchBackfillSuccess", data
        backfill_id = data["backfillId"]
        # Another catalog writer is busy (as a long crawl capture would be): the test holds the
        # pool's only slot, so the backfill's first catalog-writing step must wait for it.
        with dg.DagsterInstance.get() as instance:
            slots = instance.event_log_storage
            slots.initialize_concurrency_limit_to_default(POOL)
            assert slots.claim_concurrency_slot(POOL, HOLDER[0], HOLDER[1]).is_claimed
        # the daemon picks the requested backfill up on its first iteration
        daemon = _start([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], env, daemon_log)
        deadline = time.monotonic() + 120
        with dg.DagsterInstance.get() as instance:
            while not _blocked_pool_steps(instance, backfill_id):
                assert daemon.poll() is None, f"dagster-daemon exited:\n{_tail(daemon_log)}"
                assert time.monotonic() < deadline, f"no step waited for the pool:\n{_tail(daemon_log)}"
                time.sleep(0.5)
            time.sleep(1)
            assert not _started_pool_steps(instance, backfill_id), "a catalog writer started while the slot was held"
            released = time.time()
            instance.event_log_storage.free_concurrency_slot_for_step(HOLDER[0], HOLDER[1])
        deadline = time.monotonic() + 240
        while True:
            assert daemon.poll() is None, f"dagster-daemon exited:\n{_tail(daemon_log)}"
            status = graphql(port, STATUS, {"id": backfill_id})["partitionBackfillOrError"]
            assert status["__typename"] == "PartitionBackfill", status
            if status["status"] in ("COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"):
                break
            assert time.monotonic() < deadline, f"backfill still {status['status']}:\n{_tail(daemon_log)}"
            time.sleep(1)
        assert status["status"] == "COMPLETED_SUCCESS", f"{status}\n{_tail(daemon_log)}"
        assert status["numPartitions"] == len(keys)
    finally:
        if daemon is not None:
            stop_group(daemon)
        stop_group(web)

    # every partition has all four layers
    store = LayerStore(corpus_env)
    for key in keys:
        for asset in SNAPSHOT_ASSETS:
            assert store.current(asset, key) is not None, (asset, key)

    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
        assert sorted(r.tags["dagster/partition"] for r in runs) == sorted(keys)  # one run per partition
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        # never more backfill runs in flight (launch to success) than the shipped tag limit allows
        flights = sorted(_run_flight(instance, r.run_id) for r in runs)
        limit = next(t["limit"] for t in backfill_limits if t["key"] == "dagster/backfill")
        assert max(sum(1 for s, e in flights if s <= t < e) for t, _ in flights) <= limit, flights
        pool_steps = []
        for run in runs:
            for step, (start, end) in _step_intervals(instance, run.run_id).items():
                if step in POOL_ASSETS:
                    pool_steps.append((start, end, step, run.tags["dagster/partition"]))
        assert len(pool_steps) == len(POOL_ASSETS) * len(keys)
        pool_steps.sort()
        assert pool_steps[0][0] >= released, "a catalog writer ran while the test held the slot"
        for a, b in zip(pool_steps, pool_steps[1:]):
            assert b[0] >= a[1], f"catalog writers overlapped: {a} and {b}"
        info = instance.event_log_storage.get_concurrency_info(POOL)
        assert info.slot_count == 1 and not info.claimed_slots  # the shipped default limit; nothing left held
