"""The layer registry is the one description of every layer: its tables declare every column that
names a record, and the code that deletes records or computes a build id iterates it instead of
keeping lists of its own (a layer added to the registry is purged, scanned and hashed; a layer left
out of it fails tests/integration/test_layer_registry.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import LAYERS, BuildId, OnDeletion, Partitioning, Purge

ROOT = Path(__file__).resolve().parents[2]
# the code that must not keep its own list of layers (deletion, build id, jobs, report refs)
ITERATES_THE_REGISTRY = [
    *sorted((ROOT / "corpus_assets" / "domain" / "deletion").glob("*.py")),
    ROOT / "corpus_assets" / "domain" / "release" / "inputs.py",
    ROOT / "corpus_assets" / "domain" / "release" / "build.py",
    ROOT / "corpus_assets" / "domain" / "reports" / "sql_models.py",
    ROOT / "sensors" / "deletion.py",
    ROOT / "sensors" / "jobs.py",
]
NAMES = {la.asset for la in LAYERS}
# calls that take a layer name first (the layer store's and the registry's)
LAYER_LOOKUPS = {"current", "require_current", "peek", "partitions", "current_manifest", "current_version_name",
                 "drop_versions", "new_version", "open_version", "versions", "current_files", "partition_dir", "layer"}
CONSTANTS = {name for name in dir(registry) if name.isupper() and isinstance(getattr(registry, name), str) and getattr(registry, name) in NAMES}


def test_every_column_that_names_a_record_is_declared():
    for la in LAYERS:
        for name, table in la.tables.items():
            where = f"{la.asset}.{name}"
            assert table.schema is not None, where
            columns = set(table.schema.names)
            assert set(table.record_ids) <= columns, f"{where}: declares record-id columns it does not have"
            undeclared = (columns & set(registry.RECORD_ID_COLUMNS)) - set(table.record_ids)
            assert not undeclared, f"{where}: {sorted(undeclared)} name records but are not declared as record ids"
            if table.purge in (Purge.MARK, Purge.STUB):
                assert "item_index" in columns, f"{where}: markers and stubs are kept per raw item"
            if table.private:
                assert table.purge is not Purge.NONE or not (columns & {"record_id", "text"}) or la.asset == registry.EVAL_REGISTRY, where
        if la.main_table is not None:
            assert la.main_table in la.tables, la.asset


def test_snapshot_layers_form_one_purgeable_chain_and_release_layers_are_rebuilt():
    chain = registry.snapshot_layers()
    assert [la.asset for la in chain] == ["raw_snapshot", "canonical_records", "curated_records", "minhash_signatures"]
    assert all(la.on_deletion is OnDeletion.REWRITE for la in chain)
    # every layer after the first records the version it was built from, so a purge can repoint it
    assert chain[0].upstream_key is None and all(la.upstream_key for la in chain[1:])
    for la in registry.release_layers():
        assert la.on_deletion in (OnDeletion.REBUILD, OnDeletion.REWRITE, OnDeletion.REVOKE), la.asset
    # every layer that holds records is either purged in place or rebuilt from purged inputs
    for la in LAYERS:
        if la.record_tables() or la.shard_spans:
            assert la.on_deletion is not OnDeletion.NONE, la.asset
    # the records deletion requests search are the canonical and curated copies
    assert [la.asset for la in registry.record_copy_layers()] == ["canonical_records", "curated_records"]


def test_every_stored_input_of_a_release_enters_its_build_id():
    for la in LAYERS:
        if la.asset == registry.RELEASE_MANIFEST:
            assert la.build_id is BuildId.NO  # it is the build
        elif la.tables:
            assert la.build_id is not BuildId.NO, f"{la.asset} is stored but would not enter the build id"
    assert {la.asset for la in registry.build_inputs(Partitioning.NONE)} == {"eval_registry"}
    # layers named only by digest are exactly those whose bytes a release never reads
    assert {la.asset for la in LAYERS if la.build_id is BuildId.MANIFEST} == {"raw_snapshot", "minhash_signatures"}


def test_report_models_are_described_as_rebuilt_layers():
    la = registry.report_layer("stage_accounting")
    assert la.partitioning is Partitioning.NONE and la.group == registry.REPORT_GROUP
    assert la.build_id is BuildId.NO and la.on_deletion is OnDeletion.REBUILD
    assert set(la.tables[registry.REPORT_TABLE].record_ids) == set(registry.RECORD_ID_COLUMNS)


def _layer_refs(node: ast.AST) -> int:
    """How many elements of a display name a layer (a string literal or a registry constant)."""
    elts = getattr(node, "elts", [])
    return sum(1 for e in elts if (isinstance(e, ast.Constant) and e.value in NAMES)
               or (isinstance(e, ast.Name) and e.id in CONSTANTS)
               or (isinstance(e, ast.Attribute) and e.attr in CONSTANTS))


def hand_written_layer_lists(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and _layer_refs(node) >= 2:
            found.append(f"{where}: a list of layers")
        elif isinstance(node, ast.Dict) and _layer_refs(ast.Tuple(elts=[k for k in node.keys if k is not None])) >= 2 \
                and any(isinstance(k, (ast.Name, ast.Attribute)) for k in node.keys):
            found.append(f"{where}: a mapping keyed by layers")
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in LAYER_LOOKUPS \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in NAMES:
            found.append(f"{where}: a layer named by a string literal ({node.args[0].value!r})")
    return found


def test_deletion_and_build_id_code_keep_no_list_of_layers():
    assert all(p.is_file() for p in ITERATES_THE_REGISTRY)
    found = [f for p in ITERATES_THE_REGISTRY for f in hand_written_layer_lists(p)]
    assert not found, "iterate corpus_assets/domain/layers/registry.py instead:\n" + "\n".join(found)


def test_the_check_finds_a_hand_written_list(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("SNAPSHOT_LAYERS = ('raw_snapshot', 'canonical_records')\n"
                   "from corpus_assets.domain.layers.registry import TOKEN_VIEWS, SPLITS\n"
                   "RELEASE = {TOKEN_VIEWS: 1, SPLITS: 2}\n"
                   "v = store.current('dedup_clusters', 'r1')\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = hand_written_layer_lists(bad)
    finally:
        ROOT = saved
    assert len(found) == 3, found


def test_asking_for_an_unknown_layer_names_the_registry():
    with pytest.raises(KeyError, match="registry.py"):
        registry.layer("no_such_layer")
