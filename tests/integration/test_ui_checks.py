"""Asset checks are per partition in the UI: a snapshot whose raw bytes no longer match their
manifest fails `raw_integrity` for that partition only, and the others stay green (GraphQL
`partitionStatuses`, what the asset's Checks tab shows)."""

from __future__ import annotations

import os

import dagster as dg

import release_fixture as rf
from conftest import PROJECT
from processes import free_port, graphql, start_webserver, stop_group, wait_for_webserver

CHECKS = """{ assetNodes(assetKeys: [{path: ["raw_snapshot"]}]) { assetChecksOrError { ... on AssetChecks { checks {
  name partitionStatuses { ... on AssetCheckDefaultPartitionStatuses { succeededPartitions failedPartitions } } } } } } }"""


def test_a_failed_check_in_one_snapshot_leaves_the_other_snapshots_green(corpus_env, tmp_path, monkeypatch):
    rf.setup_release(tmp_path, monkeypatch, rf.TOKENIZER)
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.keys import snapshot_key
    from corpus_assets.domain.storage.layer_store import LayerStore

    defs = build_definitions()
    keys = [snapshot_key(src, rf.T0) for src in ("site_docs", "site_chat")]

    def materialize_raw(instance, key):
        return defs.resolve_job_def("snapshot_job").execute_in_process(
            instance=instance, partition_key=key, asset_selection=[dg.AssetKey("raw_snapshot")]).success

    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshots", keys)
        for key in keys:
            assert materialize_raw(instance, key)
        # the stored bytes of one snapshot change behind the store's back (a disk fault, a hand edit)
        version = LayerStore(corpus_env).require_current("raw_snapshot", keys[0])
        (damaged,) = version.table_files("items")[:1]
        os.chmod(damaged, 0o600)
        damaged.write_bytes(damaged.read_bytes()[:-8] + b"tampered")
        assert materialize_raw(instance, keys[0])  # re-verifies the stored version: the check fails, not the run

    port = free_port()
    log = tmp_path / "webserver.log"
    web = start_webserver(port, PROJECT, dict(os.environ), log)
    try:
        wait_for_webserver(web, port, log)
        (node,) = graphql(port, CHECKS)["assetNodes"]
        (check,) = [c for c in node["assetChecksOrError"]["checks"] if c["name"] == "raw_integrity"]
        assert check["partitionStatuses"] == {"succeededPartitions": [keys[1]], "failedPartitions": [keys[0]]}
    finally:
        stop_group(web)
