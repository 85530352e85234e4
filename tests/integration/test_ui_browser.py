"""The Dagster UI in a real browser: a small release is built through Dagster in the persistent
instance at DAGSTER_HOME, `dagster-webserver` serves it on a free loopback port, and headless
chromium (Debian's chromium + chromium-driver, driven by selenium) shows every layer's asset nodes
in the asset graph and the latest materialization's metadata on the release assets' pages.
Screenshots go to the test's tmp dir. Without chromium the test skips, unless
CORPUS_REQUIRE_BROWSER=1 (CI), where it fails."""

import json
import os
import time
import urllib.parse
from pathlib import Path

import dagster as dg
import pytest

import ui_browser
from release_fixture import DOCS, ITERTOOLS, TOKENIZER, build_snapshots, run_release, setup_release
from test_ui_definitions import LAYERS

PROJECT = Path(__file__).resolve().parents[2]
SPEC = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.5}, budget: 40, replacement: true, seed: 7}\n"
        + "packing: {seq_len: 128, mode: atomic, overlength: split, boundary: mask, pad_token: '<|pad|>'}\n"
        + "shards: {positions: 512}\n")


def _require_browser() -> ui_browser.Browser:
    browser, why = ui_browser.find_browser()
    if browser is None:
        if os.environ.get(ui_browser.REQUIRE_ENV) == "1":
            pytest.fail(f"{ui_browser.REQUIRE_ENV}=1 but the browser test cannot run: {why}")
        pytest.skip(f"browser test skipped: {why} (set {ui_browser.REQUIRE_ENV}=1 to make this a failure)")
    return browser


def test_asset_graph_and_release_pages_render_layers_and_latest_metadata(corpus_env, tmp_path, monkeypatch):
    browser = _require_browser()
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never go online
    t0, timings = time.monotonic(), {}

    def lap(what):
        timings[what] = round(time.monotonic() - t0, 1)

    # a small release, built through Dagster into the persistent instance the webserver reads
    setup_release(tmp_path, monkeypatch, SPEC)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        build_snapshots(defs, instance)
        result = run_release(defs, instance)
        assert result.success
        asset_names = sorted(k.to_user_string() for k in defs.get_repository_def().asset_graph.get_all_asset_keys())
    manifest_md = result.asset_materializations_for_node("release_manifest")[0].metadata
    build_id = manifest_md["build_id"].value
    shards_md = result.asset_materializations_for_node("packed_shards")[0].metadata
    blocks = shards_md["blocks"].value
    lap("release built")

    with ui_browser.ui_session(browser, PROJECT, tmp_path) as (base, driver):
        lap("webserver and chromium up")

        # 1. the asset graph with every layer's group expanded: each group and each asset is drawn
        def all_nodes_drawn():
            labels = ui_browser.graph_node_labels(driver)
            if not ui_browser.missing_nodes(asset_names + LAYERS, labels):  # every asset and every group
                return labels
            ui_browser.zoom_out(driver)  # nodes outside the viewport are not drawn: step back
            return None

        expanded = ",".join(f"global@global:{g}" for g in LAYERS)  # the graph's own ?expanded= format
        driver.get(f"{base}/asset-groups?expanded={urllib.parse.quote(expanded)}")
        try:
            labels = ui_browser.wait_until(driver, "every asset node in the expanded graph", all_nodes_drawn, timeout=30)
        except AssertionError:  # the URL format changed: open the graph and press "Expand all groups" (Alt+E)
            driver.get(f"{base}/asset-groups")
            ui_browser.settle_community_modal(driver)
            ui_browser.expand_all_groups(driver)
            labels = ui_browser.wait_until(driver, "every asset node after Expand all groups", all_nodes_drawn, timeout=30)
        ui_browser.settle_community_modal(driver)  # fresh profile: skip the community dialog
        for layer in LAYERS:
            assert layer in labels, f"group {layer} not drawn; nodes: {labels}"
        driver.save_screenshot(str(tmp_path / "asset_graph.png"))
        lap("asset graph")

        # 2. the release asset's page: the latest materialization's metadata, values included
        driver.get(f"{base}/assets/release_manifest")
        # the page renders in parts: wait for all of them (a loaded machine draws the checks last)
        expected = ("Latest materialization", "Latest check results", "build_id", "materialized_tokens",
                    "data_card", "release_job")
        text = ui_browser.wait_for_text(driver, "release_manifest's latest materialization metadata and checks",
                                        [build_id, "four_denominators", *expected], timeout=60)
        for needle in expected:
            assert needle in text, f"{needle!r} not on the release_manifest page"
        driver.save_screenshot(str(tmp_path / "release_manifest.png"))
        lap("release_manifest page")

        # 3. the packed shards' page: utilization and the four denominators are there to plot
        driver.get(f"{base}/assets/packed_shards")
        text = ui_browser.wait_for_text(driver, "packed_shards' latest materialization metadata",
                                        ["train_utilization", "denominators"])
        assert "blocks" in text and str(blocks) in text
        driver.save_screenshot(str(tmp_path / "packed_shards.png"))
        lap("packed_shards page")

        # 4. a new snapshot of a source the release reads: once release_rebuilds has observed the
        # release's inputs (what the daemon stores from its tick), the release partition is unsynced
        docs = dict(DOCS, itertools=ITERTOOLS)
        (tmp_path / "docs" / "docs.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
        with dg.DagsterInstance.get() as instance:
            build_snapshots(defs, instance, minute=5, sources=("site_docs",))
            with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
                tick = defs.resolve_sensor_def("release_rebuilds").evaluate_tick(ctx)
            for event in tick.asset_events:
                instance.report_runless_asset_event(event)
        assert [e.partition for e in tick.asset_events] == ["r1"]
        driver.get(f"{base}/assets/dedup_clusters?view=partitions&partition=r1")
        ui_browser.wait_for_text(driver, "dedup_clusters[r1] shown unsynced", ["Unsynced"])
        driver.save_screenshot(str(tmp_path / "unsynced_release.png"))
        lap("unsynced badge")
    lap("stopped")
    print(f"timings (s since start): {timings}; screenshots in {tmp_path}")
    ui_browser.keep_screenshots(tmp_path, "test_ui_browser")
    for shot in ("asset_graph.png", "release_manifest.png", "packed_shards.png", "unsynced_release.png"):
        assert (tmp_path / shot).stat().st_size > 10_000, f"{shot} looks empty"
