"""With the real daemon (`make dev`'s instance config): a new snapshot of a source a published
release reads makes the release rebuild on its own — the release_rebuilds sensor requests it with
the reason — and the SQL reports refresh after it; the new build's data card lists the snapshot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import dagster as dg

import release_fixture as rf
from conftest import PROJECT
from processes import start_in_group, stop_group, tail

BIN = PROJECT / ".venv" / "bin"
BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + rf.TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n"
        + "rebuild: {mode: on_new_snapshots, min_interval_minutes: 0}\n")


def _succeeded(instance, job: str, since: float):
    return [r for r in instance.get_runs(filters=dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.SUCCESS]))
            if (instance.get_run_record_by_id(r.run_id).create_timestamp.timestamp() >= since)]


def test_a_new_snapshot_rebuilds_the_release_and_the_reports_through_the_daemon(corpus_env, tmp_path, monkeypatch):
    rf.setup_release(tmp_path, monkeypatch, BODY)
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", Path(os.environ["DAGSTER_HOME"]) / "dagster.yaml")
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        rf.build_snapshots(defs, instance)
        assert rf.run_release(defs, instance).success
        assert defs.resolve_job_def("reports_job").execute_in_process(instance=instance).success
    # a source changes and is captured again (what a scheduled capture does)
    docs = dict(rf.DOCS, itertools=rf.ITERTOOLS)
    (tmp_path / "docs" / "docs.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
    time.sleep(1.1)  # snapshot keys have one-second resolution
    out = subprocess.run([str(BIN / "corpus"), "snapshot", "site_docs"], cwd=PROJECT, env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)  # as a user runs it: its own process
    assert out.returncode == 0, out.stderr[-4000:]
    with dg.DagsterInstance.get() as instance:
        key = sorted(p for p in instance.get_dynamic_partitions("snapshots") if p.startswith("site_docs."))[-1]
    started = time.time()
    env = dict(os.environ, CORPUS_EXECUTOR="in_process")
    log = tmp_path / "daemon.log"
    daemon = start_in_group([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=PROJECT, env=env, log_path=log)
    try:
        deadline = time.monotonic() + 300
        with dg.DagsterInstance.get() as instance:
            while True:
                assert daemon.poll() is None, f"dagster-daemon exited:\n{tail(log)}"
                assert time.monotonic() < deadline, f"no automatic rebuild and refresh:\n{tail(log)}"
                rebuilt = _succeeded(instance, "release_job", started)
                refreshed = [r for r in _succeeded(instance, "reports_job", started)
                             if rebuilt and r.run_id != rebuilt[0].run_id]
                if rebuilt and refreshed:
                    break
                time.sleep(2)
            run = rebuilt[0]
            assert run.tags["corpus/rebuild_reason"] == f"new snapshot(s): {key}"
            assert run.tags["dagster/sensor_name"] == "release_rebuilds"
            assert refreshed[0].tags["dagster/sensor_name"] == "release_rebuilds"
            md = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("release_manifest"), asset_partitions=["r1"]), limit=1).records[0].asset_materialization.metadata
        card = (Path(md["path"].value) / "data_card.md").read_text()
        assert key in card
        with dg.DagsterInstance.get() as instance:
            # the daemon stored the tick's observation: the fingerprint the rebuild then recorded
            observed = instance.fetch_observations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("release_inputs"), asset_partitions=["r1"]), limit=10).records
            obs = observed[0]  # the latest: the rebuild's own observation
            by_tick = [o for o in observed if not o.run_id]  # stored by the daemon from the sensor's tick
            assert len(by_tick) == 1 and key in by_tick[0].asset_observation.metadata["changed_since_last_build"].value
            assert obs.asset_observation.tags["dagster/data_version"] == md["inputs_fingerprint"].value
        _screenshot_the_tick(tmp_path)
    finally:
        stop_group(daemon)


def _screenshot_the_tick(tmp_path: Path) -> None:
    """The sensor's page in a real browser: the tick that requested the rebuild, with its run."""
    import ui_browser

    browser, why = ui_browser.find_browser()
    if browser is None:
        if os.environ.get(ui_browser.REQUIRE_ENV) == "1":
            raise AssertionError(f"{ui_browser.REQUIRE_ENV}=1 but the browser cannot run: {why}")
        print(f"automation tick screenshot skipped: {why}")
        return
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never go online
    with ui_browser.ui_session(browser, PROJECT, tmp_path) as (base, driver):
        driver.get(f"{base}/locations/corpus/sensors/release_rebuilds")
        ui_browser.settle_community_modal(driver)
        ui_browser.wait_for_text(driver, "the release_rebuilds tick that requested the rebuild",
                                 ["release_rebuilds", "1 run requested"], timeout=45)
        driver.save_screenshot(str(tmp_path / "automation_tick.png"))
    ui_browser.keep_screenshots(tmp_path, "test_automation_daemon")
    assert (tmp_path / "automation_tick.png").stat().st_size > 10_000
