"""Two machines, one bucket: the Dask executor with `CORPUS_HOME` on a real S3-compatible server
(moto on 127.0.0.1). The snapshots are built on "machine A" (its own local cache), the release on
"machine B" (another, empty cache); they share only the bucket, the catalog file and Dagster's
instance. B's steps find A's layers in the bucket, the release is sealed there, and a third
machine verifies it from the bucket alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import timedelta

import dagster as dg
import pytest

import release_fixture as rf
from conftest import PROJECT
from corpus_assets.cli import main as corpus_main
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore

if os.environ.get("CORPUS_REQUIRE_DISTRIBUTED"):  # CI: a missing extra fails instead of skipping
    import dask.distributed  # noqa: F401
else:
    pytest.importorskip("dask.distributed", reason="the `distributed` extra is not installed: pip install -e '.[distributed]'")

BIN = PROJECT / ".venv" / "bin"
RELEASE_BODY = "split: {fractions: [0.5, 0.25, 0.25]}\n" + rf.TOKENIZER
SNAPSHOT_LAYERS = ["raw_snapshot", "canonical_records", "curated_records", "minhash_signatures"]


def test_snapshots_on_one_machine_and_the_release_on_another_share_only_the_bucket(
        corpus_env, s3_env, tmp_path, monkeypatch, capsys):
    rf.setup_release(tmp_path, monkeypatch, RELEASE_BODY)
    keys = [snapshot_key("site_docs", rf.T0), snapshot_key("site_chat", rf.T0 + timedelta(minutes=1))]
    bucket = s3_env.new_bucket()
    shared = tmp_path / "shared"  # what the machines share besides the bucket: the control plane
    (shared / "dagster").mkdir(parents=True)
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", shared / "dagster" / "dagster.yaml")
    machine = {name: tmp_path / f"machine_{name}" for name in ("ops", "a", "b", "c")}
    common = {"CORPUS_HOME": f"s3://{bucket}/corpus", "CORPUS_CATALOG": str(shared / "catalog.duckdb"),
              "DAGSTER_HOME": str(shared / "dagster")}
    for k, v in {**common, "CORPUS_LOCAL": str(machine["ops"])}.items():
        monkeypatch.setenv(k, v)
    from corpus_assets.definitions import build_definitions

    with dg.DagsterInstance.get() as instance:
        assert build_definitions().resolve_job_def("registry_job").execute_in_process(instance=instance).success
        instance.add_dynamic_partitions("snapshots", keys)
        instance.add_dynamic_partitions("releases", ["r1"])

    def execute(job: str, partition: str, on: str) -> None:
        # a LocalCluster of two Dask workers started for the run, on the given machine's local root
        env = dict(os.environ, **common, CORPUS_LOCAL=str(machine[on]), CORPUS_EXECUTOR="dask", CORPUS_DASK_WORKERS="2")
        env.pop("CORPUS_DASK_SCHEDULER", None)
        out = subprocess.run(
            [str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", job,
             "--tags", json.dumps({"dagster/partition": partition})],
            cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300,
        )
        assert out.returncode == 0, f"{job} {partition} on {on}:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"

    for key in keys:
        execute("snapshot_job", key, on="a")
    execute("release_job", "r1", on="b")

    keys_in_bucket = s3_env.keys(bucket, "corpus/")
    bid = s3_env.client().get_object(Bucket=bucket, Key="corpus/releases/r1/CURRENT")["Body"].read().decode().strip()
    assert f"corpus/releases/r1/{bid}/manifest.json" in keys_in_bucket
    # machine A built the snapshots and holds no release layer; machine B never built a snapshot
    # layer, yet holds the curated records and signatures its steps read — fetched from the bucket
    assert not (machine["a"] / "layers" / "token_views").exists()
    assert not (machine["b"] / "layers" / "raw_snapshot").exists()
    store_b = LayerStore(machine["b"])
    for asset in ("curated_records", "minhash_signatures"):
        for key in keys:
            name = LayerStore.from_env(machine["c"]).current_version_name(asset, key)
            assert store_b.open_version(asset, key, name).manifest["version"] == name
            assert (machine["a"] / "layers" / asset / key / name).is_dir()  # A wrote the same version
    # the control plane is shared: the registry names B's build, the snapshots A's captures
    with dg.DagsterInstance.get() as instance:
        runs = [r for r in instance.get_runs() if r.tags.get("dagster/partition") in (*keys, "r1")]
        assert len(runs) == 3 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)

    # machine C: nothing local; the bucket alone verifies the release and lists every layer
    monkeypatch.setenv("CORPUS_LOCAL", str(machine["c"]))
    capsys.readouterr()
    assert corpus_main(["verify", "r1"]) == 0
    assert f"OK {machine['c'] / 'releases' / 'r1' / bid}" in capsys.readouterr().out
    assert corpus_main(["releases", "r1"]) == 0
    assert bid[:16] in capsys.readouterr().out
    store_c = LayerStore.from_env(machine["c"])
    assert {(a, p) for a in SNAPSHOT_LAYERS for p in keys} <= {(a, p) for a in store_c.assets() for p in store_c.partitions(a)}
