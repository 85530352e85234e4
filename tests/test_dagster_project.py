"""The Dagster project loads: definitions validate, and the real webserver serves the asset graph."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from processes import free_port, graphql, start_webserver, stop_group, wait_for_webserver

PROJECT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_definitions_validate(corpus_env):
    out = subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-m", "corpus_assets.definitions"],
        cwd=PROJECT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_webserver_serves_asset_graph_and_partitions(corpus_env, tmp_path):
    import dagster as dg

    keys = ["demo_chat.20261129T140000", "pydocs.20261129T143000"]
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshots", keys)
    port = free_port()
    log_path = tmp_path / "webserver.log"
    proc = start_webserver(port, PROJECT, dict(os.environ), log_path)
    try:
        wait_for_webserver(proc, port, log_path, timeout=180)
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
    assert proc.returncode is not None
