"""Partition growth: compaction keeps the ``snapshots`` partition set bounded without changing
what releases select, and Dagster keeps working with tens of thousands of snapshot partitions.

Compaction facts: old captures of a source fold into one partition (the range's newest
capture, key kept), the replaced partitions leave the instance and the data root, a release
rebuilt afterwards selects the same records with the same tokens, deletions reach the folded
copies, and a release spec the fold would change stops the compaction or its own build with
the reason."""

from __future__ import annotations

import json
from datetime import timedelta

import dagster as dg
import pytest

from http_fixture import serve_site
from release_fixture import DOCS, ITERTOOLS, T0, TOKENIZER, tick_until_applied
from test_crawl_schedule import _crawl_sources, _page, _registry, _tick
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore

RELEASE = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
           + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\nrebuild: manual\n")
SNAPSHOT_LAYERS = ("raw_snapshot", "canonical_records", "curated_records", "minhash_signatures")


def _views(store: LayerStore, release: str) -> dict:
    """record id -> what training reads of it (variant, split, tokens, labels); and the snapshot
    each view names."""
    rows = store.require_current("token_views", release).read_table("views").to_pylist()
    return ({(r["record_id"], r["variant"]): (r["split"], r["input_ids"], r["loss_mask"], r["n_tokens"]) for r in rows},
            {r["record_id"]: r["snapshot"] for r in rows})


def _layer_versions(home, release: str) -> dict:
    """The published build's ``layer_versions`` (every input layer version's content digest)."""
    current = (home / "releases" / release / "CURRENT").read_text().strip()
    return json.loads((home / "releases" / release / current / "manifest.json").read_text())["layer_versions"]


def _build(defs, instance, name):
    result = defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key=name)
    assert result.success
    return result


def _crawl_history(defs, instance, site, base):
    """Four hourly crawls: everything; a removal, a rejected rewrite and a failed fetch; a new page
    and an edit; a page back after its failure. Returns the four snapshot keys."""
    keys = [_tick(defs, instance, "site", T0).key]
    site["/venv.html"] = (404, {"Content-Type": "text/plain"}, b"gone")
    site["/logging.html"] = _page("logging", "Moved to the new handbook.")
    site["/pathlib.html"] = (500, {"Content-Type": "text/plain"}, b"try again later")
    keys.append(_tick(defs, instance, "site", T0 + timedelta(hours=1)).key)
    site["/itertools.html"] = _page("itertools", ITERTOOLS)
    site["/"] = _page("Index", DOCS["gc"] + " Updated index page.", ["/venv.html", "/logging.html", "/pathlib.html",
                                                                        "/itertools.html"])
    keys.append(_tick(defs, instance, "site", T0 + timedelta(hours=2)).key)
    site["/pathlib.html"] = _page("pathlib", DOCS["pathlib"] + " Revised.")
    keys.append(_tick(defs, instance, "site", T0 + timedelta(hours=3)).key)
    return keys


def test_compacting_a_crawl_keeps_what_its_release_selects_and_deletions_reach_the_fold(corpus_env, tmp_path, monkeypatch):
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.deletion.requests import file_request
    from corpus_assets.domain.ingest.compacted import read_lineages
    from corpus_assets.snapshot_compaction import compact_source

    names = ["gc", "venv", "logging", "pathlib"]
    site = {"/": _page("Index", DOCS["gc"], [f"/{n}.html" for n in names[1:]])}
    site.update({f"/{n}.html": _page(n, DOCS[n]) for n in names[1:]})
    rel = tmp_path / "releases"
    rel.mkdir()
    (rel / "crawl.yaml").write_text("name: crawl\nsnapshots: {sources: [site]}\n" + RELEASE)
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    store = LayerStore(corpus_env)
    with serve_site(site) as base, dg.instance_for_test() as instance:
        _crawl_sources(tmp_path, base + "/")
        defs = build_definitions()
        _registry(defs, instance)
        keys = _crawl_history(defs, instance, site, base)
        instance.add_dynamic_partitions("releases", ["crawl"])
        _build(defs, instance, "crawl")
        before, where_before = _views(store, "crawl")
        assert len(set(where_before.values())) > 1  # the release reads copies from several captures

        lines = []
        result = compact_source(instance, defs, store, "site", older_than=timedelta(days=30),
                                now=T0 + timedelta(days=31), releases_dir=rel, log=lines.append)
        # four partitions became one: the newest capture, which now holds the fold
        assert instance.get_dynamic_partitions("snapshots") == [keys[-1]]
        assert (result.partitions_before, result.partitions_after) == (4, 1)
        for asset in SNAPSHOT_LAYERS:
            assert store.partitions(asset) == [keys[-1]]
            assert store.versions(asset, keys[-1]) == [store.current_version_name(asset, keys[-1])]
        (lineage,) = read_lineages(store, "site").values()
        assert lineage.replaces == tuple(keys[:-1]) and lineage.captures == keys
        assert [c["snapshot"] for c in lineage.doc["captures"]] == keys
        assert lineage.doc["left_out_items"]["superseded"] > 0  # older copies of re-captured pages
        # failed fetches (pathlib's 500s, venv's 404 after its removal) are no news: left out, counted
        failed = sum(c["status_counts"].get("http_error", 0) for c in lineage.doc["captures"])
        assert failed == 3 and lineage.doc["left_out_items"]["no_news"] == failed
        assert [c["kept_items"] for c in lineage.doc["captures"]] == [0, 2, 2, 1]
        assert any("folds 3 older capture(s)" in line for line in lines)
        # Dagster saw the rewrite: the folded partition's latest materialization is the compacted version
        rec = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("curated_records"),
                                                                    asset_partitions=[keys[-1]]), limit=1).records[0]
        assert rec.asset_materialization.tags["dagster/data_version"] == store.peek("curated_records", keys[-1]).content_digest

        # the same release, rebuilt over the fold: the same records, views and tokens
        _build(defs, instance, "crawl")
        after, where_after = _views(store, "crawl")
        assert after == before
        assert set(where_after.values()) == {keys[-1]}
        removed = f"site:{base}/venv.html"
        assert removed not in {r for r, _ in after}  # still out: its removal is part of the fold

        assert f"site:{base}/logging.html" not in {r for r, _ in after}  # its rejected rewrite too
        # a deletion request reaches a folded copy
        target = f"site:{base}/itertools.html"
        assert target in {r for r, _ in after}
        cat = Catalog.at(corpus_env / "catalog.duckdb")
        request = file_request(cat, {"kind": "record", "record_id": target, "requester": "dpo@example.org",
                                     "reason": "withdrawn by the author"})
        tick_until_applied(defs, instance, cat, [request])
        records = store.require_current("curated_records", keys[-1]).read_table("records").column("record_id").to_pylist()
        assert target not in records and records
        views, _ = _views(store, "crawl")
        assert target not in {r for r, _ in views}


def test_a_release_spec_the_fold_would_change_stops_it_and_a_spec_naming_a_folded_capture_fails_clearly(
        corpus_env, tmp_path, monkeypatch):
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.ingest.compaction import CompactionError
    from corpus_assets.snapshot_compaction import compact_source

    site = {"/": _page("Index", DOCS["gc"], ["/venv.html"]), "/venv.html": _page("venv", DOCS["venv"])}
    rel = tmp_path / "releases"
    rel.mkdir()
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    store = LayerStore(corpus_env)
    with serve_site(site) as base, dg.instance_for_test() as instance:
        _crawl_sources(tmp_path, base + "/")
        defs = build_definitions()
        _registry(defs, instance)
        k1 = _tick(defs, instance, "site", T0).key
        site["/venv.html"] = _page("venv", DOCS["venv"] + " Edited.")
        k2 = _tick(defs, instance, "site", T0 + timedelta(hours=1)).key
        site["/venv.html"] = _page("venv", DOCS["venv"] + " Edited twice.")
        k3 = _tick(defs, instance, "site", T0 + timedelta(hours=2)).key
        # a window ending between two captures of the range: the fold cannot answer it
        (rel / "window.yaml").write_text("name: window\nsnapshots: {sources: [site], until: '2026-11-29T15:30:00Z'}\n" + RELEASE)
        with pytest.raises(CompactionError, match=r"window: the window since=- until=2026-11-29T15:30:00\+00:00 cuts"):
            compact_source(instance, defs, store, "site", older_than=timedelta(days=1), now=T0 + timedelta(days=2),
                           releases_dir=rel, log=lambda _m: None)
        assert instance.get_dynamic_partitions("snapshots") == [k1, k2, k3]  # nothing changed
        assert all(store.partitions(a) == [k1, k2, k3] for a in SNAPSHOT_LAYERS)
        (rel / "window.yaml").unlink()
        # naming the newest capture of a crawl explicitly: the fold changes what it holds
        (rel / "pinned.yaml").write_text(f"name: pinned\nsnapshots: {{explicit: [{k3}]}}\n" + RELEASE)
        with pytest.raises(CompactionError, match=f"pinned: names {k3}"):
            compact_source(instance, defs, store, "site", older_than=timedelta(days=1), now=T0 + timedelta(days=2),
                           releases_dir=rel, log=lambda _m: None)
        (rel / "pinned.yaml").unlink()
        compact_source(instance, defs, store, "site", older_than=timedelta(days=1), now=T0 + timedelta(days=2),
                       releases_dir=rel, log=lambda _m: None)
        assert instance.get_dynamic_partitions("snapshots") == [k3]
        # a spec written afterwards that names a folded capture: its build fails with the reason
        (rel / "old.yaml").write_text(f"name: old\nsnapshots: {{explicit: [{k1}]}}\n" + RELEASE)
        instance.add_dynamic_partitions("releases", ["old"])
        result = defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="old",
                                                                          raise_on_error=False)
        assert not result.success
        from release_fixture import step_failure
        assert f"snapshot {k1} was compacted into {k3}" in step_failure(result)
        # and the rebuild sensor skips it with a warning instead of failing every release's tick
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
            defs.resolve_sensor_def("release_rebuilds").evaluate_tick(ctx)
        (rel / "old.yaml").unlink()
        # the same month again, one capture later: the compacted partition folds with it, lineage merged
        site["/venv.html"] = _page("venv", DOCS["venv"] + " Edited three times.")
        k4 = _tick(defs, instance, "site", T0 + timedelta(hours=3)).key
        compact_source(instance, defs, store, "site", older_than=timedelta(days=1), now=T0 + timedelta(days=2),
                       releases_dir=rel, log=lambda _m: None)
        assert instance.get_dynamic_partitions("snapshots") == [k4]
        from corpus_assets.domain.ingest.compacted import read_lineages
        (lineage,) = read_lineages(store, "site").values()
        assert lineage.snapshot == k4 and lineage.replaces == (k1, k2, k3)
        assert [c["snapshot"] for c in lineage.doc["captures"]] == [k1, k2, k3, k4]
        texts = store.require_current("curated_records", k4).read_table("records").column("text").to_pylist()
        assert len(texts) == 2 and any(t.endswith("Edited three times.") for t in texts)


def test_a_source_captured_whole_compacts_without_rewriting_and_its_release_is_byte_identical(corpus_env, tmp_path, monkeypatch):
    import release_fixture as rf
    from corpus_assets.definitions import build_definitions
    from corpus_assets.snapshot_compaction import compact_source

    rel = rf.setup_release(tmp_path, monkeypatch, RELEASE)
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        defs = build_definitions()
        rf.build_snapshots(defs, instance, minute=0)
        docs = dict(rf.DOCS, itertools=rf.ITERTOOLS)
        (tmp_path / "docs" / "docs.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
        rf.build_snapshots(defs, instance, minute=10)
        instance.add_dynamic_partitions("releases", ["r1"])
        _build(defs, instance, "r1")
        views_before = store.require_current("token_views", "r1").content_digest
        manifest_before = _layer_versions(corpus_env, "r1")
        newest = {s: max(k for k in instance.get_dynamic_partitions("snapshots") if k.startswith(s + "."))
                  for s in ("site_docs", "site_chat")}
        for source in ("site_docs", "site_chat"):
            result = compact_source(instance, defs, store, source, older_than=timedelta(days=30),
                                    now=rf.T0 + timedelta(days=40), releases_dir=rel, log=lambda _m: None)
            assert result.compacted[0]["rewritten"] == {}  # the newest capture already is the fold
        assert sorted(instance.get_dynamic_partitions("snapshots")) == sorted(newest.values())
        _build(defs, instance, "r1")
        assert store.require_current("token_views", "r1").content_digest == views_before
        after = _layer_versions(corpus_env, "r1")
        # the snapshot-layer versions the build reads are the ones it read before, less the replaced captures
        kept = {k: v for k, v in manifest_before.items() if k.split("/", 1)[-1] in newest.values()}
        assert {k: v for k, v in after.items() if "/" in k} == kept


PARTITION_QUERY = """query($asset: String!, $p: String!) {
  assetNodes(assetKeys: [{path: [$asset]}]) {
    partitionStats { numPartitions numMaterialized numFailed }
    assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions unmaterializedPartitions } }
    partitionKeyConnection(limit: 50, ascending: false) { results hasMore }
    staleStatus(partition: $p)
  }
}"""


RELEASE_STALE = """query($p: String!) {
  assetNodes(assetKeys: [{path: ["dedup_clusters"]}]) { staleStatus(partition: $p) staleCauses(partition: $p) { category } }
}"""


def test_twenty_thousand_snapshot_partitions_keep_sensors_selection_and_the_ui_working(corpus_env, tmp_path, monkeypatch):
    """20,000 registered snapshot partitions (2.3 years of hourly captures of one source) in a
    real SQLite instance: the sensors tick, release selection picks the right snapshots, a
    release builds, and the webserver's partition queries answer. Timings are printed (see
    bench/bench_partitions.py for the 100k figures); nothing here asserts a duration."""
    import os
    import time

    import release_fixture as rf
    from conftest import PROJECT
    from processes import free_port, graphql, start_webserver, stop_group, wait_for_webserver
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.keys import snapshot_key
    from corpus_assets.domain.deletion.requests import file_request
    from corpus_assets.domain.release.spec import load_release_spec

    rel = rf.setup_release(tmp_path, monkeypatch, RELEASE,
                           sources_line="snapshots: {sources: [site_docs, site_chat], since: '2026-11-29T13:30:00Z'}\n")
    timings = {}
    with dg.DagsterInstance.get() as instance:  # sqlite under the test's DAGSTER_HOME, as the webserver reads it
        defs = build_definitions()
        rf.build_snapshots(defs, instance, minute=0)
        materialized = sorted(instance.get_dynamic_partitions("snapshots"))
        # hourly captures of site_docs before the release's window, never materialized
        old = [snapshot_key("site_docs", rf.T0 - timedelta(hours=h)) for h in range(1, 20_001)]
        start = time.monotonic()
        for i in range(0, len(old), 1000):
            instance.add_dynamic_partitions("snapshots", old[i:i + 1000])
        timings["add 20k partitions (batches of 1000)"] = time.monotonic() - start
        keys = instance.get_dynamic_partitions("snapshots")
        assert len(keys) == 20_002

        # selection over every registered key: the window keeps the two captures since 13:30
        spec = load_release_spec(rel / "r1.yaml")
        start = time.monotonic()
        assert spec.snapshots.select(keys) == materialized
        timings["select over 20,002 keys"] = time.monotonic() - start
        window = spec.snapshots.model_copy(update={"since": rf.T0 - timedelta(hours=100), "until": rf.T0 - timedelta(hours=51)})
        assert window.select(keys) == sorted(snapshot_key("site_docs", rf.T0 - timedelta(hours=h)) for h in range(51, 101))

        cat = Catalog.at(corpus_env / "catalog.duckdb")
        request = file_request(cat, {"kind": "record", "record_id": "site_docs:venv", "requester": "dpo@example.org",
                                     "reason": "withdrawn by the author"})
        ticks = {}
        for name in ("release_specs", "captured_snapshots", "release_rebuilds", "deletion_requests"):
            with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
                start = time.monotonic()
                ticks[name] = defs.resolve_sensor_def(name).evaluate_tick(ctx)
                timings[f"sensor {name} tick"] = time.monotonic() - start
        assert [r.partitions_def_name for r in ticks["release_specs"].dynamic_partitions_requests] == ["releases"]
        assert not ticks["captured_snapshots"].run_requests  # nothing captured waits; 20k never-captured keys are skipped
        from corpus_assets.domain.deletion.requests import get
        assert get(cat, request).status != "received", get(cat, request)  # the tick resolved it into tombstones
        instance.add_dynamic_partitions("releases", ["r1"])
        start = time.monotonic()
        _build(defs, instance, "r1")
        timings["release_job over 20,002 snapshot partitions"] = time.monotonic() - start
        assert set(_views(LayerStore(corpus_env), "r1")[1].values()) <= set(materialized)
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
            start = time.monotonic()
            result = defs.resolve_sensor_def("release_rebuilds").evaluate_tick(ctx)
            timings["sensor release_rebuilds tick (built)"] = time.monotonic() - start
        assert [o.partition for o in result.asset_events] in ([], ["r1"])

    port = free_port()
    log = tmp_path / "webserver.log"
    web = start_webserver(port, PROJECT, dict(os.environ), log)
    try:
        wait_for_webserver(web, port, log)
        for asset in ("raw_snapshot", "curated_records", "minhash_signatures"):
            start = time.monotonic()
            (node,) = graphql(port, PARTITION_QUERY, {"asset": asset, "p": materialized[0]})["assetNodes"]
            timings[f"graphql partitions of {asset}"] = time.monotonic() - start
            assert node["partitionStats"] == {"numPartitions": 20_002, "numMaterialized": 2, "numFailed": 0}
            assert sorted(node["assetPartitionStatuses"]["materializedPartitions"]) == materialized
            assert len(node["assetPartitionStatuses"]["unmaterializedPartitions"]) == 20_000
            conn = node["partitionKeyConnection"]
            assert len(conn["results"]) == 50 and conn["hasMore"]
            assert node["staleStatus"] == "FRESH"
        # a release asset reads every snapshot partition (AllPartitionMapping): its partition page answers too
        start = time.monotonic()
        (node,) = graphql(port, RELEASE_STALE, {"p": "r1"})["assetNodes"]
        timings["graphql staleStatus of dedup_clusters[r1]"] = time.monotonic() - start
        assert node["staleStatus"] == "FRESH"
    finally:
        stop_group(web)
    for what, seconds in timings.items():
        print(f"partition growth: {what}: {seconds:.2f}s")


def test_the_postgres_instance_config_is_valid_dagster_config_and_takes_its_connection_from_the_environment(monkeypatch):
    """deploy/dagster.postgres.yaml passes Dagster's own instance-config schema (Postgres itself
    is not needed), names no host or secret, and keeps every other setting of deploy/dagster.yaml."""
    import yaml
    from dagster._config import process_config, resolve_to_config_type
    from dagster._core.instance.config import dagster_instance_config_schema

    from conftest import PROJECT

    config = yaml.safe_load((PROJECT / "deploy" / "dagster.postgres.yaml").read_text())
    db = config["storage"]["postgres"]["postgres_db"]
    assert {k: v for k, v in db.items() if k not in ("port", "scheme")} == {
        "hostname": {"env": "DAGSTER_PG_HOST"}, "username": {"env": "DAGSTER_PG_USER"},
        "password": {"env": "DAGSTER_PG_PASSWORD"}, "db_name": {"env": "DAGSTER_PG_DB"}}
    assert db["scheme"] == "postgresql+psycopg2"  # the driver dagster-postgres brings (docs/operations.md)
    for var in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"):
        monkeypatch.setenv(var, "x")
    schema = resolve_to_config_type(dagster_instance_config_schema())
    result = process_config(schema, config)
    assert result.success, [e.message for e in result.errors]
    shipped = yaml.safe_load((PROJECT / "deploy" / "dagster.yaml").read_text())
    assert {k: v for k, v in config.items() if k != "storage"} == shipped


def test_ranges_are_calendar_months_of_captures_older_than_the_cutoff():
    from datetime import datetime, timezone

    from corpus_assets.domain.ingest.compaction import compaction_ranges

    keys = ["s.20261030T230000", "s.20261031T230000", "s.20261101T000000", "s.20261115T000000",
            "s.20261120T000000", "s.20261201T000000", "s.20261202T000000"]
    cutoff = datetime(2026, 11, 20, tzinfo=timezone.utc)  # the capture at the cutoff itself is not older
    assert compaction_ranges(keys, cutoff) == [keys[0:2], keys[2:4]]
    assert compaction_ranges(keys[:1] + keys[2:3], cutoff) == []  # one capture a month: nothing to fold


def test_selection_problems_name_the_compacted_snapshot_and_what_to_do():
    from corpus_assets.domain.ingest.compacted import Lineage, selection_problems
    from corpus_assets.domain.release.spec import SnapshotSelection

    lin = {"s.20261130T230000": Lineage("s.20261130T230000", "s", ("s.20261101T000000", "s.20261115T000000"), {})}
    ok = [SnapshotSelection(sources=["s"]), SnapshotSelection(sources=["s"], until="2026-11-30T23:00:00Z"),
          SnapshotSelection(sources=["s"], since="2026-12-01T00:00:00Z"), SnapshotSelection(sources=["other"], retain="union"),
          SnapshotSelection(explicit=["s.20261130T230000"])]
    assert [selection_problems(sel, lin) for sel in ok] == [[]] * len(ok)
    (p,) = selection_problems(SnapshotSelection(explicit=["s.20261115T000000"]), lin)
    assert p == ("snapshot s.20261115T000000 was compacted into s.20261130T230000 (captures s.20261101T000000 .. "
                 "s.20261130T230000); name s.20261130T230000 instead")
    (p,) = selection_problems(SnapshotSelection(sources=["s"], since="2026-11-10T00:00:00Z"), lin)
    assert "cuts compacted snapshot s.20261130T230000" in p and "move the bound before 2026-11-01T00:00:00+00:00" in p
    (p,) = selection_problems(SnapshotSelection(sources=["s"], retain="union"), lin)
    assert p.startswith("retain: union needs every accepted copy of source s")


def test_the_cli_refuses_an_age_it_cannot_read(capsys):
    from corpus_assets.cli import main
    from corpus_assets.snapshot_compaction import parse_age

    assert parse_age("30d") == timedelta(days=30) and parse_age("12h") == timedelta(hours=12)
    assert main(["compact-snapshots", "--source", "site", "--older-than", "a month"]) == 2
    assert "--older-than 'a month': give a whole number with h, d or w, e.g. 30d" in capsys.readouterr().err


def test_lineage_lives_in_the_bucket_and_a_replaced_lineage_reaches_another_machine(s3_env, tmp_path):
    """With an object-store data root the lineage is a sealed tree in the bucket: a machine with an
    empty cache reads it, and compacting the month again replaces it (sealed trees are immutable)."""
    from corpus_assets.domain.ingest.compacted import LINEAGE_FORMAT, read_lineages, write_lineage
    from corpus_assets.domain.storage.object_store import ObjectStore

    url = f"s3://{s3_env.new_bucket()}/corpus/home"
    doc = {"format": LINEAGE_FORMAT, "snapshot": "s.20261130T230000", "source": "s", "captures": [],
           "replaces": ["s.20261101T000000"]}
    write_lineage(LayerStore(tmp_path / "a", remote=ObjectStore(url)), doc)
    assert read_lineages(LayerStore(tmp_path / "b", remote=ObjectStore(url)))["s.20261130T230000"].replaces == (
        "s.20261101T000000",)
    write_lineage(LayerStore(tmp_path / "a", remote=ObjectStore(url)),
                  dict(doc, replaces=["s.20261101T000000", "s.20261115T000000"]))
    (lin,) = read_lineages(LayerStore(tmp_path / "c", remote=ObjectStore(url))).values()
    assert lin.replaces == ("s.20261101T000000", "s.20261115T000000")
