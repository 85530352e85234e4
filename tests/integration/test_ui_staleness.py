"""An edited curation policy shows in the UI: `curated_records` turns unsynced (GraphQL
staleStatus, what the asset page and the graph show) once the definitions are reloaded, and is
fresh again after the partition is rematerialized."""

from __future__ import annotations

import os
import shutil
import subprocess

import release_fixture as rf
from conftest import PROJECT
from processes import free_port, graphql, start_webserver, stop_group, wait_for_webserver

BIN = PROJECT / ".venv" / "bin"
STALE = """query($p: String!) {
  assetNodes(assetKeys: [{path: ["curated_records"]}]) { staleStatus(partition: $p) staleCauses(partition: $p) { category reason } }
}"""
RELOAD = """mutation { reloadRepositoryLocation(repositoryLocationName: "corpus") { __typename } }"""


def _run(cmd: list[str], env: dict) -> str:
    out = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def test_an_edited_curation_threshold_shows_curated_records_unsynced_until_rematerialized(corpus_env, tmp_path, monkeypatch):
    rf.setup_release(tmp_path, monkeypatch, rf.TOKENIZER)
    policy = tmp_path / "curation.yaml"
    shutil.copy(PROJECT / "curation.yaml", policy)
    shutil.copytree(PROJECT / "eval", tmp_path / "eval")  # the registry files curation.yaml names, relative to it
    env = dict(os.environ, CORPUS_CURATION=str(policy))
    # every step in its own fresh process: the code version is read when the definitions load
    _run([str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", "registry_job"], env)
    key = _run([str(BIN / "corpus"), "snapshot", "site_docs"], env).strip().splitlines()[-1]

    port = free_port()
    log = tmp_path / "webserver.log"
    web = start_webserver(port, PROJECT, env, log)
    try:
        wait_for_webserver(web, port, log)

        def status():
            (node,) = graphql(port, STALE, {"p": key})["assetNodes"]
            return node["staleStatus"], [c["category"] for c in node["staleCauses"]]

        assert status() == ("FRESH", [])
        policy.write_text(policy.read_text().replace("  tau: 0.5", "  tau: 0.6"))
        assert graphql(port, RELOAD)["reloadRepositoryLocation"]["__typename"] == "WorkspaceLocationEntry"
        state, causes = status()
        assert state == "STALE" and "CODE" in causes
        _run([str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", "snapshot_job",
              "--tags", f'{{"dagster/partition": "{key}"}}'], env)
        assert status() == ("FRESH", [])
    finally:
        stop_group(web)


RELEASE_STALE = """query($p: String!) {
  assetNodes(assetKeys: [{path: ["dedup_clusters"]}, {path: ["release_manifest"]}]) {
    assetKey { path } staleStatus(partition: $p) staleCauses(partition: $p) { key { path } category reason dependency { path } }
  }
}"""


def test_a_release_over_150_snapshot_partitions_shows_unsynced_when_a_new_snapshot_arrives(corpus_env, tmp_path, monkeypatch):
    """Dagster walks upstream partition data versions only below 100 partitions; with 150 the
    release's staleness comes from release_inputs, the observed input fingerprint."""
    import json
    import time
    from datetime import timedelta

    import dagster as dg

    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.keys import snapshot_key

    rf.setup_release(tmp_path, monkeypatch, rf.TOKENIZER.join(["split: {fractions: [0.6, 0.2, 0.2]}\n",
                     "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\nrebuild: manual\n"]))
    env = dict(os.environ)
    _run([str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", "registry_job"], env)
    for source in ("site_docs", "site_chat"):
        _run([str(BIN / "corpus"), "snapshot", source], env)
    with dg.DagsterInstance.get() as instance:
        # 148 more snapshot partitions (older captures of site_docs nobody materialized): 150 in all
        instance.add_dynamic_partitions("snapshots", [snapshot_key("site_docs", rf.T0 - timedelta(minutes=30 * i))
                                                      for i in range(1, 149)])
        assert len(instance.get_dynamic_partitions("snapshots")) == 150
        instance.add_dynamic_partitions("releases", ["r1"])
    _run([str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", "release_job",
          "--tags", '{"dagster/partition": "r1"}'], env)

    port = free_port()
    log = tmp_path / "webserver.log"
    web = start_webserver(port, PROJECT, env, log)
    defs = build_definitions()
    try:
        wait_for_webserver(web, port, log)

        def status():
            return {"/".join(n["assetKey"]["path"]): (n["staleStatus"], n["staleCauses"])
                    for n in graphql(port, RELEASE_STALE, {"p": "r1"})["assetNodes"]}

        assert {k: s for k, (s, _) in status().items()} == {"dedup_clusters": "FRESH", "release_manifest": "FRESH"}
        # the source changes and is captured again: partition 151
        docs = dict(rf.DOCS, itertools=rf.ITERTOOLS)
        (tmp_path / "docs" / "docs.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
        time.sleep(1.1)  # snapshot keys have one-second resolution
        new_key = _run([str(BIN / "corpus"), "snapshot", "site_docs"], env).strip().splitlines()[-1]
        # Dagster's own partition walk stops at 100 upstream partitions: it does not see the new one
        assert {k: s for k, (s, _) in status().items()} == {"dedup_clusters": "FRESH", "release_manifest": "FRESH"}
        with dg.DagsterInstance.get() as instance:
            with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
                result = defs.resolve_sensor_def("release_rebuilds").evaluate_tick(ctx)
            assert [r.job_name for r in result.run_requests] == ["reports_job"]  # rebuild: manual
            (obs,) = result.asset_events
            assert obs.partition == "r1" and new_key in obs.metadata["changed_since_last_build"].value
            instance.report_runless_asset_event(obs)  # what the daemon does with a tick's asset events
        now = status()
        assert now["dedup_clusters"][0] == "STALE"
        # the root cause the UI shows: release_inputs has a new data version
        assert any(c["key"] == {"path": ["release_inputs"]} and c["category"] == "DATA"
                   for c in now["dedup_clusters"][1]), now["dedup_clusters"][1]
        assert now["release_manifest"][0] == "STALE"  # downstream of it, as the graph shows
        _run([str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", "release_job",
              "--tags", '{"dagster/partition": "r1"}'], env)
        assert {k: s for k, (s, _) in status().items()} == {"dedup_clusters": "FRESH", "release_manifest": "FRESH"}
        # an edited release spec is unsynced too
        spec = tmp_path / "releases" / "r1.yaml"
        spec.write_text(spec.read_text().replace("seq_len: 128", "seq_len: 64"))
        with dg.DagsterInstance.get() as instance:
            with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
                result = defs.resolve_sensor_def("release_rebuilds").evaluate_tick(ctx)
            (obs,) = result.asset_events
            assert "the release spec changed" in obs.metadata["changed_since_last_build"].value
            instance.report_runless_asset_event(obs)
        assert status()["dedup_clusters"][0] == "STALE"
    finally:
        stop_group(web)
