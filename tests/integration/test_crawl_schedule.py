"""Scheduled incremental crawls through the real schedule evaluation, then the runs they request:
the schedule only requests a capture_job run, the run crawls, the captured_snapshots sensor
requests the snapshot's materialization."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg

import os

from conftest import PROJECT, write_sources
from processes import free_port, graphql, start_webserver, stop_group, wait_for_webserver
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.demo.pydoc_server import pydoc_server
from http_fixture import serve_site

def _registry(defs, instance):
    """curated_records (in snapshot_job) needs the frozen evaluation registry first."""
    assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success


T0 = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)


def _page(title, body, links=()):
    a = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (200, {"Content-Type": "text/html; charset=utf-8"},
            f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1><p>{body}</p><ul>{a}</ul></main></body></html>".encode())


class Tick:
    """What one scheduled tick led to: the capture run's answer and the snapshot it materialized."""

    def __init__(self, captured: dict, materialized: list[str]):
        self.captured, self.materialized = captured, materialized

    @property
    def key(self) -> str:
        (key,) = self.materialized
        return key


def _tick(defs, instance, source_id, when) -> Tick:
    """The schedule's tick (it only requests a capture_job run), that run, then the
    captured_snapshots sensor's tick and the snapshot_job run it requests."""
    schedule = defs.resolve_schedule_def(f"capture_{source_id}")
    ctx = dg.build_schedule_context(instance=instance, scheduled_execution_time=when, repository_def=defs.get_repository_def())
    data = schedule.evaluate_tick(ctx)
    (req,) = data.run_requests
    assert req.run_key == req.tags["corpus/snapshot"]
    run = defs.resolve_job_def("capture_job").execute_in_process(instance=instance, run_config=req.run_config, tags=req.tags)
    assert run.success
    captured = run.output_for_node("capture_source")
    sensor = defs.resolve_sensor_def("captured_snapshots")
    materialized = []
    with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:  # closed: no dangling instance
        requested = sensor.evaluate_tick(ctx).run_requests or []
    for rr in requested:
        result = defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=rr.partition_key)
        assert result.success
        materialized.append(rr.partition_key)
    return Tick(captured, materialized)


def _crawl_sources(tmp_path, seed, **extra):
    opts = "\n".join(f"    {k}: {v}" for k, v in extra.items())
    write_sources(tmp_path / "sources.yaml", f"""
sources:
  - id: site
    kind: http_crawl
    seeds: ["{seed}"]
    max_pages: 20
    politeness_delay_s: 0
    schedule: "0 * * * *"
{opts}
    governance: {{license: CC-BY-4.0, rights_evidence: https://example.org/license}}
""")


def _records(home, key):
    v = LayerStore(home).require_current("canonical_records", key)
    return v.read_table("records").to_pylist(), v.read_table("decisions").to_pylist()


def test_incremental_crawl_adds_snapshots_only_for_changes(corpus_env, tmp_path):
    text = "Python dictionaries map hashable keys to values and keep insertion order. " * 8
    site = {
        "/": _page("Index", text, ["/a.html", "/b.html", "/gone.html"]),
        "/a.html": _page("A", "Page A explains list comprehensions in depth. " * 10),
        "/b.html": _page("B", "Page B explains generators and lazy evaluation. " * 10),
        "/gone.html": _page("Gone", "This page will disappear from the site soon. " * 10),
        "/robots.txt": (200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /private/\n"),
    }
    with serve_site(site) as base:
        _crawl_sources(tmp_path, base + "/")
        from corpus_assets.definitions import build_definitions

        defs = build_definitions()
        with dg.instance_for_test() as instance:
            _registry(defs, instance)
            first = _tick(defs, instance, "site", T0)
            key1 = first.key
            assert key1 == "site.20261129T140000"
            assert instance.get_dynamic_partitions("snapshots") == [key1]
            records, _ = _records(corpus_env, key1)
            assert sorted(r["item_id"] for r in records) == sorted(base + p for p in ["/", "/a.html", "/b.html", "/gone.html"])

            # nothing changed: no partition, no snapshot run, a reason
            second = _tick(defs, instance, "site", T0 + timedelta(hours=1))
            assert not second.materialized and second.captured["reason"] == "nothing new, changed or removed"
            assert not (corpus_env / "layers" / "raw_snapshot" / "site.20261129T150000").exists()  # no empty folder left
            assert instance.get_dynamic_partitions("snapshots") == [key1]

            # one page edited, one removed: the snapshot holds only those
            site["/b.html"] = _page("B", "Page B now also covers async generators. " * 10)
            site["/gone.html"] = (404, {"Content-Type": "text/plain"}, b"gone")
            third = _tick(defs, instance, "site", T0 + timedelta(hours=2))
            key3 = third.key
            records, decisions = _records(corpus_env, key3)
            assert [r["item_id"] for r in records] == [base + "/b.html"]
            removed = [d for d in decisions if d["reason"] == "source_removed"]
            assert [d["item_id"] for d in removed] == [base + "/gone.html"]
            state = Catalog.at(corpus_env / "catalog.duckdb").crawl_state("site")
            assert state[base + "/gone.html"].status == "removed"
            assert state[base + "/a.html"].status == "active"
            snaps = Catalog.at(corpus_env / "catalog.duckdb").snapshots("site")
            assert [s["snapshot"] for s in snaps] == [key1, key3]


def test_crawl_of_the_real_pydoc_server(corpus_env, tmp_path):
    with pydoc_server() as base:
        _crawl_sources(tmp_path, base, max_pages=8)
        from corpus_assets.definitions import build_definitions

        defs = build_definitions()
        with dg.instance_for_test() as instance:
            _registry(defs, instance)
            data = _tick(defs, instance, "site", T0)
            key = data.key
            records, decisions = _records(corpus_env, key)
            assert len(records) >= 5
            assert all(r["schema_type"] == "document" for r in records)
            # pydoc pages are mostly identifier listings: fastText proposes fr / ca / en at 0.07-0.30,
            # which the language-ID floor (0.3) stores as "und" with the score kept
            assert sum(r["lang"] in ("en", "und") for r in records) >= len(records) // 2
            floored = [d for d in decisions if d["outcome"] == "accepted" and "below floor" in (d["detail"] or "")]
            assert {r["record_id"] for r in records if r["lang"] == "und" and r["lang_score"] > 0} == {
                d["record_id"] for d in floored}
            assert {d["outcome"] for d in decisions} <= {"accepted", "rejected", "quarantined"}
            # the next tick continues from the frontier: only pages never captured before
            again = _tick(defs, instance, "site", T0 + timedelta(minutes=30))
            key2 = again.key
            first = {r["item_id"] for r in records}
            second, _ = _records(corpus_env, key2)
            assert second and not (first & {r["item_id"] for r in second})


def test_a_release_sees_the_crawl_as_of_its_latest_snapshot(corpus_env, tmp_path, monkeypatch):
    """Crawls capture only what changed, so a release folds them in capture order: a page found
    removed (404) or whose re-capture quality rejects leaves the release; a page that failed to
    fetch (500) or did not change keeps its earlier copy."""
    from release_fixture import DOCS, TOKENIZER

    names = ["gc", "venv", "logging", "pathlib"]
    site = {"/": _page("Index", DOCS["gc"], [f"/{n}.html" for n in names[1:]])}
    site.update({f"/{n}.html": _page(n, DOCS[n]) for n in names[1:]})
    rel = tmp_path / "releases"
    rel.mkdir()
    (rel / "crawl.yaml").write_text("name: crawl\nsnapshots: {sources: [site]}\nsplit: {fractions: [0.6, 0.2, 0.2]}\n"
                                    + TOKENIZER + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\n"
                                    "shards: {positions: 1024}\n")
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    with serve_site(site) as base:
        _crawl_sources(tmp_path, base + "/")
        from corpus_assets.definitions import build_definitions

        defs = build_definitions()
        with dg.instance_for_test() as instance:
            _registry(defs, instance)
            key1 = _tick(defs, instance, "site", T0).key
            site["/venv.html"] = (404, {"Content-Type": "text/plain"}, b"gone")
            site["/logging.html"] = _page("logging", "Moved to the new handbook.")
            site["/pathlib.html"] = (500, {"Content-Type": "text/plain"}, b"try again later")
            key2 = _tick(defs, instance, "site", T0 + timedelta(hours=1)).key
            instance.add_dynamic_partitions("releases", ["crawl"])
            assert defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="crawl").success
    store = LayerStore(corpus_env)
    views = {r["record_id"] for r in store.require_current("token_views", "crawl").read_table("views").to_pylist()}
    rid = {n: f"site:{base}/{n}.html" for n in names[1:]}
    assert f"site:{base}/" in views and rid["pathlib"] in views  # unchanged, and a failed fetch: no news
    assert rid["venv"] not in views and rid["logging"] not in views
    decisions = {(r["record_id"], r["snapshot"]): r for r in
                 store.require_current("dedup_clusters", "crawl").read_table("decisions").to_pylist()}
    assert decisions[(rid["venv"], key1)]["reason"] == "snapshots.removed_later"
    assert decisions[(rid["venv"], key1)]["detail"] == f"source_removed in {key2}"
    assert decisions[(rid["logging"], key1)]["reason"] == "snapshots.removed_later"
    assert decisions[(rid["pathlib"], key1)]["action"] == "accept"


DRY_RUN = """mutation($selector: ScheduleSelector!, $timestamp: Float) {
  scheduleDryRun(selectorData: $selector, timestamp: $timestamp) {
    __typename
    ... on DryRunInstigationTick { evaluationResult { runRequests { runKey runConfigYaml } skipReason error { message } } }
    ... on PythonError { message stack }
  }
}"""


def test_previewing_a_crawl_tick_in_the_ui_crawls_nothing_and_the_real_tick_materializes(corpus_env, tmp_path):
    text = "Python sets hold unique hashable members and support fast membership tests. " * 8
    site = {"/": _page("Index", text, ["/a.html"]), "/a.html": _page("A", "Page A explains set algebra. " * 12)}
    fetched: list = []
    with serve_site(site, fetched) as base:
        _crawl_sources(tmp_path, base + "/")
        port = free_port()
        web = start_webserver(port, PROJECT, dict(os.environ), tmp_path / "webserver.log")
        try:
            wait_for_webserver(web, port, tmp_path / "webserver.log")
            selector = {"repositoryLocationName": "corpus", "repositoryName": "__repository__", "scheduleName": "capture_site"}
            for _ in range(2):  # "Preview tick result", twice: both answer the same, neither does anything
                data = graphql(port, DRY_RUN, {"selector": selector, "timestamp": T0.timestamp()})["scheduleDryRun"]
                assert data["__typename"] == "DryRunInstigationTick", data
                (rr,) = data["evaluationResult"]["runRequests"]
                assert rr["runKey"] == "site.20261129T140000" and "site.20261129T140000" in rr["runConfigYaml"]
        finally:
            stop_group(web)
        assert fetched == []  # not one page requested
        assert not (corpus_env / "layers").exists() or not any((corpus_env / "layers").rglob("*"))
        with dg.DagsterInstance.get() as instance:
            assert instance.get_dynamic_partitions("snapshots") == []
            if (corpus_env / "catalog.duckdb").exists():
                assert Catalog.at(corpus_env / "catalog.duckdb").snapshots("site") == []
            # the real tick: the capture run crawls, the sensor materializes the snapshot
            from corpus_assets.definitions import build_definitions

            defs = build_definitions()
            _registry(defs, instance)
            tick = _tick(defs, instance, "site", T0)
            assert tick.key == "site.20261129T140000" and tick.captured["committed"]
            assert fetched
            assert instance.get_materialized_partitions(dg.AssetKey("curated_records")) == {tick.key}
