"""A source that changes between captures: a release sees each source as of its latest selected
snapshot. A page removed from the source, and a page whose edit quality now rejects, are in no
table of the release and in no decoded shard, though the first snapshot still holds them; a
`retain: union` release keeps them and its manifest says which rule it used."""

import json
import os
import subprocess
import time

import dagster as dg
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from conftest import PROJECT, write_sources
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.pack.shards_layer import shard_directory
from corpus_assets.domain.storage.layer_store import LayerStore
from megatron_format_reader import read_indexed_dataset
from release_fixture import DOCS, FIXTURE_TOKENIZER, TOKENIZER

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n")
PAGE = "<html><head><title>{title}</title></head><body><main><h1>{title}</h1><p>{text}</p></main></body></html>"
REMOVED, EDITED, KEPT = "pathlib", "logging", "gc"
MOVED = "This page has moved to the new handbook."  # too short for the quality filters: rejected


def _page(name: str, text: str) -> str:
    return PAGE.format(title=f"The {name} module", text=text)


def _snapshot(capsys) -> str:
    """`corpus snapshot site`, as a user runs it: its own process (which also keeps Dagster's
    process-wide definitions state of earlier tests out of it)."""
    time.sleep(1.05)  # snapshot keys have one-second resolution
    out = subprocess.run([str(PROJECT / ".venv" / "bin" / "corpus"), "snapshot", "site"], cwd=PROJECT,
                         env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip().splitlines()[-1]


def _release_ids(store: LayerStore, release: str) -> dict[str, set]:
    """Record ids in every record-bearing table of the release's layers (the registry's list; the
    decision records, which name every copy left out and why, aside) and in the shards' spans."""
    out = {}
    for la in registry.release_layers():
        v = store.current(la.asset, release)
        if v is None:
            continue
        for name, table in la.record_tables().items():
            if name != DECISIONS_TABLE and table.readable:
                out[f"{la.asset}.{name}"] = {x for c in table.record_ids for x in v.read_table(name, columns=[c]).column(0).to_pylist()}
    out["shards"] = set()
    for d in _shard_dirs(store, release):
        for f in d.glob("*.spans.parquet"):
            out["shards"].update(r for r in pq.read_table(f, columns=["record_id"]).column(0).to_pylist() if r)
    return out


def _shard_dirs(store: LayerStore, release: str):
    return sorted({shard_directory(store, r["directory"])
                   for r in store.require_current("packed_shards", release).read_table("shards").to_pylist()})


def _decoded_shards(store, release) -> str:
    tok = Tokenizer.from_file(str(FIXTURE_TOKENIZER))
    texts = []
    for d in _shard_dirs(store, release):
        for idx in sorted(d.glob("*.idx")):
            data = read_indexed_dataset(idx.with_suffix(""))
            texts += [tok.decode(data.sequence(i).tolist(), skip_special_tokens=True) for i in range(len(data))]
    return "\n".join(texts)


def _phrases(text: str) -> list[str]:
    """Phrases of six words from the text; a block boundary may cut one, never all."""
    words = text.split()
    return [" ".join(words[i:i + 6]) for i in range(0, len(words) - 6, 6)]


def test_removed_and_newly_rejected_pages_do_not_come_back_from_older_snapshots(corpus_env, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    site.mkdir()
    for name in (KEPT, "venv", EDITED, REMOVED):
        (site / f"{name}.html").write_text(_page(name, DOCS[name]))
    write_sources(tmp_path / "sources.yaml", f"""
sources:
  - id: site
    kind: local_dir
    root: {site}
    governance: {{license: CC0-1.0, rights_evidence: https://example.org/rights}}
""")
    rel = tmp_path / "releases"
    rel.mkdir()
    (rel / "latest.yaml").write_text("name: latest\nsnapshots: {sources: [site]}\n" + BODY)
    (rel / "kept.yaml").write_text("name: kept\nsnapshots: {sources: [site], retain: union}\n" + BODY)
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    # entered, so Dagster binds its definitions-state storage to this instance (a bare get() left
    # a stale binding from an earlier test in the same process)
    with dg.DagsterInstance.get() as instance:
        assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
        first = _snapshot(capsys)
        (site / f"{REMOVED}.html").unlink()
        (site / f"{EDITED}.html").write_text(_page(EDITED, MOVED))
        second = _snapshot(capsys)
        store = LayerStore(corpus_env)
        curated = {k: {r["record_id"]: r for r in store.require_current("curated_records", k).read_table("records").to_pylist()}
                   for k in (first, second)}
        removed_id, edited_id, kept_id = (next(r for r in curated[first] if r.endswith(f"{n}.html")) for n in (REMOVED, EDITED, KEPT))
        assert {removed_id, edited_id, kept_id} <= set(curated[first])  # the first capture accepted all of them
        assert removed_id not in curated[second] and edited_id not in curated[second] and kept_id in curated[second]
        edited_refusal = {r["record_id"]: r["outcome"] for r in store.require_current("curated_records", second)
                          .read_table("decisions").to_pylist()}
        assert edited_refusal[edited_id] != "accepted"

        for name in ("latest", "kept"):
            instance.add_dynamic_partitions("releases", [name])
            assert defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key=name).success

        # rule latest: in no table of the release, in no decoded shard, each left-out copy with its reason
        latest = _release_ids(store, "latest")
        assert {"dedup_clusters.clusters", "splits.assignments", "token_views.views", "mixture_plan.plan", "shards"} <= set(latest)
        for table, ids in latest.items():
            assert removed_id not in ids and edited_id not in ids, table
        assert kept_id in latest["token_views.views"] and kept_id in latest["dedup_clusters.clusters"]
        decoded = _decoded_shards(store, "latest")
        assert any(p in decoded for p in _phrases(DOCS[KEPT]))  # the decoding works: a kept page is there
        for gone in (DOCS[REMOVED], DOCS[EDITED]):
            assert not [p for p in _phrases(gone) if p in decoded]
        decisions = {(r["record_id"], r["snapshot"]): r for r in store.require_current("dedup_clusters", "latest")
                     .read_table("decisions").to_pylist()}
        assert decisions[(removed_id, first)]["reason"] == "snapshots.absent_in_latest"
        assert decisions[(edited_id, first)]["reason"] == "snapshots.not_accepted_in_latest"
        assert second in decisions[(edited_id, first)]["detail"]
        assert decisions[(kept_id, first)]["reason"] == "dedup.superseded"
        assert decisions[(kept_id, second)]["action"] == "accept"
        manifest = json.loads((next((corpus_env / "releases" / "latest").glob("*/manifest.json"))).read_text())
        assert manifest["snapshot_rule"]["retain"] == "latest"
        assert manifest["snapshot_rule"]["left_out"] == {"dedup.superseded": 2, "snapshots.absent_in_latest": 1,
                                                         "snapshots.not_accepted_in_latest": 1}
        assert manifest["intended_uses"] == ["pretraining"]
        card = (next((corpus_env / "releases" / "latest").glob("*/data_card.md"))).read_text()
        assert "Snapshot rule `latest`: each source as of its latest selected snapshot" in card
        # the data card says what decontamination could not check (eval/demo_benchmark.jsonl: the
        # answers "5050" and "50" are too short), with its Limits section
        findings = manifest["evaluation"]["contamination"]
        assert findings["coverage"]["demo_math"]["too_short"] == 2 and findings["unchecked_protected_texts"] == 2
        assert "### What was checked" in card and "### Limits" in card
        assert "Not checked: 2 of 10 protected texts have fewer than 8 tokens (demo_math 2 of 6)" in card

        # rule union: the older copies are kept, and the manifest says so
        kept = _release_ids(store, "kept")
        for table in ("dedup_clusters.clusters", "splits.assignments", "token_views.views", "shards"):
            assert {removed_id, edited_id, kept_id} <= kept[table], table
        decoded = _decoded_shards(store, "kept")
        assert any(p in decoded for p in _phrases(DOCS[REMOVED])) and any(p in decoded for p in _phrases(DOCS[EDITED]))
        manifest = json.loads((next((corpus_env / "releases" / "kept").glob("*/manifest.json"))).read_text())
        assert manifest["snapshot_rule"]["retain"] == "union"
        assert manifest["snapshot_rule"]["left_out"] == {"dedup.superseded": 2}
        assert "every record's newest accepted copy" in manifest["snapshot_rule"]["statement"]
