"""The same Definitions on a real Dask distributed cluster, chosen by configuration only
(CORPUS_EXECUTOR=dask): two snapshot partitions and a release, run with the plain `dagster job
execute` command, give the same layers as the in-process reference build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

import release_fixture as rf
from conftest import PROJECT
from processes import start_in_group, stop_group
from processes import tail as _tail
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore

if os.environ.get("CORPUS_REQUIRE_DISTRIBUTED"):  # CI: a missing extra fails instead of skipping
    import dask.distributed  # noqa: F401
else:
    pytest.importorskip("dask.distributed", reason="the `distributed` extra is not installed: pip install -e '.[distributed]'")

BIN = PROJECT / ".venv" / "bin"
SNAPSHOT_LAYERS = ["raw_snapshot", "canonical_records", "curated_records", "minhash_signatures"]
RELEASE_LAYERS = ["dedup_clusters", "splits", "tokenizer", "token_views", "mixture_plan", "packed_shards"]
RELEASE_BODY = "split: {fractions: [0.5, 0.25, 0.25]}\n" + rf.TOKENIZER


def test_executor_is_chosen_by_environment():
    from corpus_assets.definitions import executor_from_env

    assert executor_from_env({}) is dg.in_process_executor  # the project's default: a run's steps in its process
    assert executor_from_env({"CORPUS_EXECUTOR": "default"}) is dg.in_process_executor
    assert executor_from_env({"CORPUS_EXECUTOR": "multiprocess"}) is None  # Dagster's multiprocess executor
    assert executor_from_env({"CORPUS_EXECUTOR": "in_process"}) is dg.in_process_executor
    local = executor_from_env({"CORPUS_EXECUTOR": "dask", "CORPUS_DASK_WORKERS": "3"})
    assert local.name == "dask"
    existing = executor_from_env({"CORPUS_EXECUTOR": "dask", "CORPUS_DASK_SCHEDULER": "tcp://127.0.0.1:8786"})
    assert existing.name == "dask"
    try:
        import dagster_k8s  # noqa: F401  (the optional `k8s` extra)
    except ImportError:
        with pytest.raises(ImportError, match="dagster-k8s"):
            executor_from_env({"CORPUS_EXECUTOR": "k8s"})
    else:
        assert executor_from_env({"CORPUS_EXECUTOR": "k8s"}).name == "k8s"
    with pytest.raises(ValueError, match="CORPUS_EXECUTOR"):
        executor_from_env({"CORPUS_EXECUTOR": "celery"})
    with pytest.raises(ValueError, match="CORPUS_DASK_WORKERS"):
        executor_from_env({"CORPUS_EXECUTOR": "dask", "CORPUS_DASK_WORKERS": "0"})


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    return start_in_group(cmd, cwd=PROJECT, env=env, log_path=log)


def _stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    stop_group(proc, timeout)


def _layer_digests(home: Path, keys: list[str]) -> dict[str, str]:
    store = LayerStore(home)
    out = {}
    for key in keys:
        for asset in SNAPSHOT_LAYERS:
            version = store.require_current(asset, key)
            if asset == "raw_snapshot":
                # the capture time of each item is the only field two captures of a file differ in
                table = version.read_table("items").drop(["retrieved_at"])
                out[f"{asset}/{key}"] = json.dumps(table.to_pylist(), sort_keys=True, default=str)
            else:
                out[f"{asset}/{key}"] = version.content_digest
    for asset in RELEASE_LAYERS:
        out[f"{asset}/r1"] = store.require_current(asset, "r1").content_digest
    current = (home / "releases" / "r1" / "CURRENT").read_text().strip()
    manifest = json.loads((home / "releases" / "r1" / current / "manifest.json").read_text())
    out["release_manifest/r1"] = manifest["content_digest"]
    return out


def _step_pids(instance: dg.DagsterInstance, run: dg.DagsterRun) -> tuple[int, dict[str, int]]:
    """The pid of the run's orchestrating process and, per step, the pid that executed it."""
    run_pid, steps = None, {}
    for record in instance.all_logs(run.run_id):
        event = record.dagster_event
        if event is None:
            continue
        if event.event_type_value == "PIPELINE_START":
            run_pid = event.pid
        elif event.event_type_value == "STEP_START":
            steps[event.step_key] = event.pid
    return run_pid, steps


def test_two_snapshots_and_a_release_on_a_dask_cluster_match_the_reference_build(corpus_env, tmp_path, monkeypatch):
    rf.setup_release(tmp_path, monkeypatch, RELEASE_BODY)
    keys = [snapshot_key("site_docs", rf.T0), snapshot_key("site_chat", rf.T0 + timedelta(minutes=1))]
    from corpus_assets.definitions import build_definitions

    # reference: the same Definitions in process (the executor every other test uses)
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        rf.build_snapshots(defs, instance)
        assert rf.run_release(defs, instance).success
    reference = _layer_digests(corpus_env, keys)

    # a fresh data root and a persistent instance with the shipped config (pools on), for the cluster
    home = tmp_path / "dask_home"
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True)
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", dagster_home / "dagster.yaml")
    monkeypatch.setenv("CORPUS_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with dg.DagsterInstance.get() as instance:
        assert build_definitions().resolve_job_def("registry_job").execute_in_process(instance=instance).success
        instance.add_dynamic_partitions("snapshots", keys)
        instance.add_dynamic_partitions("releases", ["r1"])

    env = dict(os.environ, CORPUS_EXECUTOR="dask")
    env.pop("CORPUS_DASK_SCHEDULER", None)
    # a standing cluster as an operator would run one: a scheduler and two single-threaded workers
    scheduler_file = tmp_path / "scheduler.json"
    procs: list[subprocess.Popen] = []
    worker_logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    try:
        procs.append(_start([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                             "--scheduler-file", str(scheduler_file)], env, tmp_path / "scheduler.log"))
        for i, log in enumerate(worker_logs):
            procs.append(_start([str(BIN / "dask"), "worker", "--scheduler-file", str(scheduler_file),
                                 "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                 "--name", f"corpus-worker-{i}"], env, log))
        worker_pids = {p.pid for p in procs[1:]}
        from dask.distributed import Client

        deadline = time.monotonic() + 120
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, _tail(tmp_path / "scheduler.log")
            time.sleep(0.2)
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            address = client.scheduler.address

        def execute(job: str, partition: str, **extra: str) -> None:
            out = subprocess.run(
                [str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", job,
                 "--tags", json.dumps({"dagster/partition": partition})],
                cwd=PROJECT, env=dict(env, **extra), capture_output=True, text=True, timeout=300,
            )
            assert out.returncode == 0, f"{job} {partition}:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"

        # the first snapshot on a LocalCluster of two worker processes started for the run ...
        execute("snapshot_job", keys[0], CORPUS_DASK_WORKERS="2")
        # ... the second snapshot and the release on the standing cluster
        execute("snapshot_job", keys[1], CORPUS_DASK_SCHEDULER=address)
        execute("release_job", "r1", CORPUS_DASK_SCHEDULER=address)
    finally:
        for proc in reversed(procs):
            _stop(proc)

    with dg.DagsterInstance.get() as instance:
        runs = {(r.job_name, r.tags["dagster/partition"]): r
                for r in instance.get_runs() if "dagster/partition" in r.tags}
        assert set(runs) == {("snapshot_job", keys[0]), ("snapshot_job", keys[1]), ("release_job", "r1")}
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs.values())
        used = set()
        for (job, partition), run in runs.items():
            run_pid, steps = _step_pids(instance, run)
            expected = SNAPSHOT_LAYERS if job == "snapshot_job" else ["release_inputs"] + RELEASE_LAYERS + ["release_manifest"]
            assert set(steps) == set(expected), (job, steps)
            # no step ran in the orchestrating process; on the standing cluster, every step ran in a worker
            assert run_pid not in steps.values(), (job, run_pid, steps)
            if partition != keys[0]:
                assert set(steps.values()) <= worker_pids, (job, steps, worker_pids)
                used |= set(steps.values())
        assert used == worker_pids  # both workers took steps
        # the executor claimed catalog_writer slots (the pool got its shipped default) and freed them all
        info = instance.event_log_storage.get_concurrency_info("catalog_writer")
        assert info.slot_count == 1 and not info.claimed_slots

    # the cluster built exactly what the reference build did
    assert _layer_digests(home, keys) == reference


def test_kubernetes_config_in_the_operations_doc_is_valid(monkeypatch):
    """The instance config and run config shown in docs/operations.md pass dagster-k8s's schemas."""
    pytest.importorskip("dagster_k8s", reason="the `k8s` extra is not installed: pip install -e '.[k8s]'")
    import re

    import yaml
    from dagster._config import Shape, process_config, validate_config
    from dagster._core.instance.config import dagster_instance_config_schema
    from dagster_k8s import K8sRunLauncher

    from corpus_assets.definitions import build_definitions

    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", (PROJECT / "docs" / "operations.md").read_text(), re.S)]
    instance = next(b for b in blocks if "run_launcher" in b)
    run_config = next(b for b in blocks if "execution" in b)
    assert validate_config(Shape(dagster_instance_config_schema()), instance).success
    launcher = process_config(K8sRunLauncher.config_type(), instance["run_launcher"]["config"])
    assert launcher.success, launcher.errors
    monkeypatch.setenv("CORPUS_EXECUTOR", "k8s")
    with dg.instance_for_test():  # loading definitions reads the current instance's state storage
        job = build_definitions().resolve_job_def("release_job")
        assert job.executor_def.name == "k8s"
        checked = process_config(job.run_config_schema.run_config_schema_type, run_config)
    assert checked.success, [e.message for e in checked.errors]
