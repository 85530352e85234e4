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
