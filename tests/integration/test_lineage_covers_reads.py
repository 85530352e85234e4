"""Every layer an asset reads is an upstream edge of it in the asset graph (table-level lineage the
UI draws): the snapshot and release jobs run with LayerStore's reads recorded per executing asset."""

from __future__ import annotations

import dagster as dg
import pytest

import release_fixture as rf
from corpus_assets.domain.storage.layer_store import LayerStore

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + rf.TOKENIZER
        + "mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.5}, budget: 40, replacement: true, seed: 7}\n"
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n")


@pytest.fixture
def reads(monkeypatch):
    """{reading asset: {layer read}}; every LayerStore read goes through one of these two methods."""
    seen: dict[str, set[str]] = {}
    by_name, by_version = LayerStore.current_version_name, LayerStore.open_version

    def record(layer: str) -> None:
        try:
            reader = dg.AssetExecutionContext.get().asset_key.to_user_string()
        except Exception:  # not inside an asset step (sensor, test set-up)
            return
        seen.setdefault(reader, set()).add(layer)

    def current_version_name(self, asset, partition):
        record(asset)
        return by_name(self, asset, partition)

    def open_version(self, asset, partition, version):
        record(asset)
        return by_version(self, asset, partition, version)

    monkeypatch.setattr(LayerStore, "current_version_name", current_version_name)
    monkeypatch.setattr(LayerStore, "open_version", open_version)
    return seen


def test_every_layer_an_asset_reads_is_one_of_its_upstream_assets(corpus_env, tmp_path, monkeypatch, reads):
    rf.setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        rf.build_snapshots(defs, instance)
        assert rf.run_release(defs, instance).success
    graph = defs.resolve_asset_graph()
    missing = {}
    for reader, layers in sorted(reads.items()):
        if graph.get(dg.AssetKey(reader)).is_observable:
            continue  # release_inputs observes (fingerprints) the layers; a source asset has no upstream
        parents = {k.to_user_string() for k in graph.get(dg.AssetKey(reader)).parent_keys}
        undeclared = layers - parents - {reader}  # an asset may read its own earlier versions
        if undeclared:
            missing[reader] = sorted(undeclared)
    assert set(reads) >= {"canonical_records", "dedup_clusters", "packed_shards", "release_manifest"}, reads
    assert missing == {}, f"reads without a lineage edge: {missing}"
