"""The Dagster project loads: `dg check defs` / `dg list defs` accept it, and the real webserver,
started by `dg dev` as `make dev` does, serves the asset graph (workspace.yaml is covered by every
other webserver test)."""

import json
import os
import subprocess
import sys
from pathlib import Path


from processes import free_port, graphql, start_in_group, stop_group, tail, wait_for_webserver

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _dg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "dg"), *args], cwd=PROJECT, capture_output=True, text=True, timeout=300)


def test_dg_checks_and_lists_the_definitions(corpus_env):
    out = _dg("check", "defs")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All definitions loaded successfully" in out.stdout + out.stderr
    assert "superseded" not in out.stdout + out.stderr
    out = _dg("list", "defs", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    listed = json.loads(out.stdout)
    from corpus_assets.definitions import build_definitions

    # built now, from this test's environment (the module's `defs` may come from another test's sources)
    repo = build_definitions().get_repository_def()
    assert {a["asset_key"] for a in listed["assets"]} == {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {j["name"] for j in listed["jobs"]} >= {"snapshot_job", "release_job", "deletion_purge_job", "capture_job"}
    assert {s["name"] for s in listed["sensors"]} == {s.name for s in repo.sensor_defs}
    assert {s["name"] for s in listed["schedules"]} == {s.name for s in repo.schedule_defs}


def test_dg_dev_serves_asset_graph_and_partitions(corpus_env, tmp_path):
    import dagster as dg

    keys = ["demo_chat.20261129T140000", "pydocs.20261129T143000"]
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshots", keys)
    port = free_port()
    log_path = tmp_path / "webserver.log"
    # `make dev`: dg dev, from the project's folder, without workspace.yaml
    proc = start_in_group([str(BIN / "dg"), "dev", "--host", "127.0.0.1", "--port", str(port)],
                          cwd=PROJECT, env=dict(os.environ), log_path=log_path)
    try:
        wait_for_webserver(proc, port, log_path, timeout=180)
        located = graphql(port, "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }")
        assert [e["name"] for e in located["workspaceOrError"]["locationEntries"]] == ["corpus"]
        data = graphql(port, "{ assetNodes { assetKey { path } groupName dependencyKeys { path } } }")
        nodes = {"/".join(n["assetKey"]["path"]): n for n in data["assetNodes"]}
        assert {"raw_snapshot", "canonical_records", "stage_accounting"} <= set(nodes)
        assert nodes["raw_snapshot"]["groupName"] == "ingestion"
        assert {"path": ["raw_snapshot"]} in nodes["canonical_records"]["dependencyKeys"]
        assert {"path": ["canonical_records"]} in nodes["stage_accounting"]["dependencyKeys"]
        data = graphql(
            port,
            '{ assetNodeOrError(assetKey: {path: ["canonical_records"]}) '
            "{ ... on AssetNode { partitionKeysByDimension { name partitionKeys } description } } }",
        )
        node = data["assetNodeOrError"]
        assert node["partitionKeysByDimension"][0]["partitionKeys"] == keys
        assert "decision" in node["description"]
    finally:
        stop_group(proc, timeout=30)
    assert "superseded" not in tail(log_path)
    assert proc.returncode is not None


def test_dagster_cli_materializes_a_snapshot_partition(corpus_env):
    import dagster as dg

    from corpus_assets.domain.demo.inputs import write_demo_inputs
    from corpus_assets.domain.storage.layer_store import LayerStore

    write_demo_inputs(corpus_env / "demo_inputs")
    key = "demo_sharegpt.20261129T140000"
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshots", [key])
    out = subprocess.run(
        [str(BIN / "dagster"), "asset", "materialize", "-m", "corpus_assets.definitions",
         "--select", "raw_snapshot,canonical_records", "--partition", key],
        cwd=PROJECT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    v = LayerStore(corpus_env).require_current("canonical_records", key)
    assert v.row_count("records") == 7 and v.manifest["outcomes"] == {"accepted": 7}


def test_corpus_cli_sources_and_layers(corpus_env, tmp_path):
    out = subprocess.run([str(BIN / "corpus"), "sources"], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pydocs" in out.stdout and "http_crawl" in out.stdout and "valid" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - id: x\n    kind: jsonl\n    root: .\n    include: ['*.jsonl']\n    adapter: guess\n    governance: {license: MIT, rights_evidence: y}\n")
    out = subprocess.run([str(BIN / "corpus"), "sources", "--file", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "sources[0].adapter" in out.stderr
    out = subprocess.run([str(BIN / "corpus"), "layers"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "no layers" in out.stdout
