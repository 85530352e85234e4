"""A content takedown reaches every build of a release, not only the current one, and leaves the
text nowhere on disk.

Three builds of one release (two superseded), each consumed by a training run; the text also sits
in a malformed line that canonicalization set aside and, edited, in two other sources (one that
no release selects). A takedown
filed through `corpus delete --content-file … --near-duplicates` and carried by the real sensor
revokes and withdraws all three builds, lists every consuming run, and afterwards a search of every
file under CORPUS_HOME (Dagster's own storage included) — raw bytes, Parquet decoded, token ids and
shards decoded with every tokenizer, DuckDB tables — finds the text nowhere."""

import collections
import json
from datetime import timedelta

import dagster as dg

from corpus_assets.metadata import KEY_FIGURES

from corpus_assets.cli import main as corpus_main
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.deletion.requests import get
from corpus_assets.domain.release.registry import registry
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_bytes import find_text, tokenizers_under
from release_fixture import DOCS, FIXTURE_TOKENIZER, ITERTOOLS, T0, TOKENIZER, build_snapshots, run_release, setup_release, tick_until_applied

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n")
GOV = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"
TAKEN_DOWN = DOCS["pathlib"]
# an edited copy in another source: a near duplicate (the dedup test: real Jaccard >= 0.6)
NEAR_COPY = TAKEN_DOWN.replace("Temporary files still come from tempfile.",
                               "Temporary files still come from the tempfile module, as before.")
# another edit in a source no release selects: only the stored signatures of every snapshot find it
ARCHIVE_COPY = TAKEN_DOWN.replace("Old code that uses os.path keeps working.",
                                  "Older scripts written against os.path keep on working.")
NEEDLES = ["joins parts with the slash operator", "stop concatenating strings by hand",
           "from the tempfile module, as before", "Older scripts written against os.path"]


def _setup(tmp_path, monkeypatch):
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump.jsonl").write_text(
        json.dumps({"id": "paths", "text": NEAR_COPY}) + "\n"
        + json.dumps({"id": "iter", "text": ITERTOOLS}) + "\n"
        + json.dumps({"id": "cut", "text": TAKEN_DOWN})[:-1] + "\n")  # a line cut short: malformed JSON
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a.jsonl").write_text(json.dumps({"id": "paths", "text": ARCHIVE_COPY}) + "\n")
    extra = "".join(f"  - id: {sid}\n    kind: jsonl\n    root: {root}\n    include: ['*.jsonl']\n"
                    f"    adapter: text_document\n    {GOV}\n" for sid, root in (("site_dump", dump), ("site_archive", archive)))
    return setup_release(tmp_path, monkeypatch, BODY, extra_sources=extra,
                         sources_line="snapshots: {sources: [site_docs, site_chat, site_dump]}\n")


def _consume(capsys, run_id) -> str:
    capsys.readouterr()
    assert corpus_main(["consume", "r1", "--run-id", run_id]) == 0
    return json.loads(capsys.readouterr().out)["build_id"]


# the checks of each layer the purge rewrites (what the purged partitions' materializations must carry)
CHECKS = {"raw_snapshot": ["raw_integrity"], "canonical_records": ["accounting"],
          "curated_records": ["curation_accounting", "no_pii_in_public", "registry_digest_recorded"]}


def _latest_check(instance, asset: str, name: str, partition: str):
    """The latest evaluation of check ``name`` of ``asset`` for ``partition`` (None: never evaluated)."""
    from dagster._core.event_api import PartitionKeyFilter

    records = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey(asset), name), limit=1, partition_filter=PartitionKeyFilter(key=partition))
    return records[0].event.dagster_event.event_specific_data if records and records[0].event else None


def test_a_content_takedown_revokes_every_build_and_leaves_the_text_nowhere(corpus_env, tmp_path, monkeypatch, capsys):
    releases = _setup(tmp_path, monkeypatch)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    spec = releases / "r1.yaml"
    base = spec.read_text()
    consumed = {}
    with dg.DagsterInstance.get() as instance:  # DAGSTER_HOME is inside CORPUS_HOME: its storage is searched too
        build_snapshots(defs, instance, sources=("site_docs", "site_chat", "site_dump", "site_archive"))
        raw = LayerStore(corpus_env).require_current("raw_snapshot", [
            p for p in LayerStore(corpus_env).partitions("raw_snapshot") if p.startswith("site_dump")][0])
        decisions = LayerStore(corpus_env).require_current(
            "canonical_records", raw.partition).read_table("decisions").to_pylist()
        assert {d["item_id"]: d["reason"] for d in decisions}["dump.jsonl#L3"] == "malformed_json"
        for n in range(3):  # three builds: another description is another spec, so another build id
            spec.write_text(base + f"description: build {n}\n")
            assert run_release(defs, instance).success
            consumed[f"train-run-{n}"] = _consume(capsys, f"train-run-{n}")
        builds = sorted(set(consumed.values()))
        assert len(builds) == 3
        assert sorted(r["status"] for r in registry(cat, "r1")) == ["published", "superseded", "superseded"]

        tokenizers = tokenizers_under(corpus_env, [FIXTURE_TOKENIZER])
        before = find_text(corpus_env, NEEDLES, tokenizers)
        # the search sees the text where it is: raw items, records, token views, every build's shards
        kinds = {how for hows in before.values() for how in hows}
        assert {"parquet", "shard"} <= kinds, before
        assert sum("shard" in hows for hows in before.values()) >= 3, before
        assert any(path.startswith("layers/raw_snapshot/site_archive") for path in before), before

        (tmp_path / "notice.txt").write_text(TAKEN_DOWN)
        capsys.readouterr()
        assert corpus_main(["delete", "--content-file", str(tmp_path / "notice.txt"), "--near-duplicates",
                            "--near-threshold", "0.6", "--requester", "legal@example.org", "--reason", "DMCA notice"]) == 0
        request = capsys.readouterr().out.strip().splitlines()[-1]
        tick_until_applied(defs, instance, cat, [request])
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
            idle = defs.resolve_sensor_def("deletion_requests").evaluate_tick(ctx)
        assert not idle.run_requests and idle.skip_message == "no deletion request waits for a step"
        # every partition the purge rewrote has a materialization that tells the truth about it
        store = LayerStore(corpus_env)
        purged = [(a, p) for a in ("raw_snapshot", "canonical_records", "curated_records", "minhash_signatures")
                  for p in store.partitions(a) if p.startswith("site_docs.")] + [("token_views", "r1")]
        for asset, partition in purged:
            (record,) = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
            m = record.asset_materialization
            version = store.peek(asset, partition)
            if asset != "token_views":  # rewritten by the purge itself (token_views: rebuilt by the release run after it)
                assert m.description == f"purged by deletion request {request}", (asset, partition)
            assert m.tags["dagster/data_version"] == version.content_digest, (asset, partition)
            assert m.tags["dagster/code_version"], (asset, partition)
            assert m.metadata["dagster/row_count"].value >= 0
            # the key figures the UI plots, of this version (no gap in the plots after a deletion)
            figures = {k: m.metadata[k].value for k in KEY_FIGURES[asset]}
            assert {k: type(v).__name__ for k, v in figures.items()} == KEY_FIGURES[asset], (asset, figures)
            if asset == "raw_snapshot":
                assert figures["items"] == version.row_count("items")
            if asset in ("canonical_records", "curated_records"):
                outcomes = collections.Counter(version.read_table("decisions", columns=["outcome"]).column(0).to_pylist())
                assert figures["accepted"] == outcomes["accepted"], (asset, outcomes)
        # every check of a purged partition ran against the purge's materialization, and passed
        for asset, partition in purged[:-1]:
            (record,) = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
            for name in CHECKS.get(asset, []):
                ev = _latest_check(instance, asset, name, partition)
                assert ev is not None, (asset, partition, name)
                assert ev.passed, (asset, partition, name, ev.metadata)
                assert ev.target_materialization_data.storage_id == record.storage_id, (asset, partition, name)

    detail = json.loads(get(cat, request).status_detail)
    assert sorted(detail["revoked"]["r1"]) == builds
    assert detail["affected_runs"] == sorted(consumed)
    assert detail["raw_items"] == {"text": 1}  # the malformed line, matched by the JSON string it holds
    rows = {r["build_id"]: r for r in registry(cat, "r1")}
    (current,) = [b for b, r in rows.items() if r["status"] == "published"]
    assert current not in builds
    for b in builds:
        assert rows[b]["status"] == "revoked" and rows[b]["successor_build_id"] == current
        assert rows[b]["affected_runs"] == sorted(consumed) and request in rows[b]["request_ids"]
        bdir = corpus_env / "releases" / "r1" / b
        assert (bdir / "REVOKED.json").is_file() and not (bdir / "shards").exists()
        capsys.readouterr()
        assert corpus_main(["verify", f"r1@{b}"]) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"REVOKED {bdir}: revoked ") and request in out and f"successor {current}" in out
        # a trainer cannot pick a withdrawn build up again by accident
        assert corpus_main(["consume", "r1", "--run-id", "late-run", "--build-id", b]) == 2
        assert "revoked" in capsys.readouterr().err

    # every byte under CORPUS_HOME: no version of any layer, no shard, no table, no log holds it
    assert find_text(corpus_env, NEEDLES, tokenizers) == {}
    assert corpus_main(["verify", "r1"]) == 0

    # the source still holds the lines: a later capture is refused item by item (the malformed line
    # by its bytes, the edited copy by its text digest) and leaves no full-bytes version behind
    key = snapshot_key("site_dump", T0 + timedelta(hours=2))
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshots", [key])
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
    store = LayerStore(corpus_env)
    decisions = {d["item_id"]: (d["outcome"], d["reason"])
                 for d in store.require_current("canonical_records", key).read_table("decisions").to_pylist()}
    assert decisions == {"dump.jsonl#L1": ("deleted", "deletion.tombstoned"), "dump.jsonl#L2": ("accepted", "ok"),
                         "dump.jsonl#L3": ("deleted", "deletion.tombstoned")}
    assert len(store.versions("raw_snapshot", key)) == 1
    assert find_text(corpus_env, NEEDLES, tokenizers) == {}
