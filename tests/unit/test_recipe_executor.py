"""Recipe data jobs (issue 8): executor, checkpoints/resume, snapshot verification, HF export, CLI.

The toy recipe and calibrators live in tests/recipe_toy.py (importable as ``recipe_toy``: pytest
puts tests/ on sys.path; subprocesses get it through PYTHONPATH).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from corpus_assets.domain.recipe.cli import recipe_main
from processes import default_signals
from corpus_assets.domain.recipe.config import DataJobConfig, JobConfigError, load_config
from corpus_assets.domain.recipe.executor import JobCancelled, run_data_job, run_data_job_async
from corpus_assets.domain.recipe.hf_export import SOURCE_FILE, export_hf_dataset
from corpus_assets.domain.recipe.protocol import (
    BudgetExhaustedError,
    CalibrationProtocolError,
    RankedCandidate,
    RecipeError,
    ResumeRefusedError,
    SelectionPolicy,
    select_ranked_candidates,
)
from corpus_assets.domain.recipe.snapshot import SnapshotError, load_snapshot

TESTS = Path(__file__).resolve().parents[1]
PROJECT = TESTS.parent
CAL = "recipe_toy:create_calibrator"


def cfg(**kw) -> DataJobConfig:
    data = {"recipe": "recipe_toy:create_recipe", "target_count": 6, "seed": 7, "params": {"count": 16}}
    data.update(kw)
    return DataJobConfig.model_validate(data)


def calibrated(repeats: int = 2, **params) -> dict:
    return {"implementation": CAL, "repeats": repeats, "params": params}


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def secrets_of(snapshot) -> list[str]:
    return [ref["secret"] for ref in snapshot.references().values()]


def rewrite_manifest(dataset: Path) -> None:
    """Re-seal a hand-edited dataset (digests, rows, dataset_id) so only alignment checks can fail."""
    import hashlib

    from corpus_assets.domain.recipe.snapshot import CONTENT_FILES, compute_dataset_id

    m = json.loads((dataset / "manifest.json").read_text())
    for name in CONTENT_FILES:
        data = (dataset / name).read_bytes()
        m["files"][name]["sha256"] = hashlib.sha256(data).hexdigest()
        m["files"][name]["rows"] = len(data.splitlines())
    m["dataset_id"] = compute_dataset_id({n: m["files"][n]["sha256"] for n in CONTENT_FILES})
    (dataset / "manifest.json").write_text(json.dumps(m, sort_keys=True, indent=2) + "\n")


# ------------------------------------------------------------------------------- basic outputs


def test_run_without_calibrator_publishes_owner_only_dataset(tmp_path):
    snap = run_data_job(cfg(), tmp_path / "job")
    out = tmp_path / "job"
    ds = out / "dataset"
    assert snap.path == ds
    assert stat.S_IMODE(ds.stat().st_mode) == 0o700
    for name in ("public.jsonl", "references.jsonl", "train.jsonl", "probes.jsonl", "report.json", "manifest.json"):
        assert stat.S_IMODE((ds / name).stat().st_mode) == 0o600, name
    assert json.loads((out / "job.json").read_text())["status"] == "succeeded"
    assert json.loads((out / "config.json").read_text())["target_count"] == 6
    assert json.loads((out / "progress.json").read_text())["stage"] == "done"
    assert (out / "work" / "checkpoints.sqlite3").is_file()

    m = snap.manifest
    assert m["calibrated"] is False and m["calibration"] is None
    assert m["dataset_id"] == snap.dataset_id
    assert set(m["files"]) == {"public.jsonl", "references.jsonl", "train.jsonl", "probes.jsonl", "report.json"}
    assert m["recipe"]["factory"] == "recipe_toy:create_recipe"
    assert any(p.endswith("recipe_toy.py") for p in m["recipe"]["sources"])
    assert any(p.endswith("executor.py") for p in m["backend"]["sources"])
    report = snap.report()
    assert report["calibration"]["calibrated"] is False
    assert report["selection"]["claims_model_difficulty_calibration"] is False
    assert report["generation"]["raw_candidates"] == 16
    assert report["selection"]["selected"] == 6

    tasks = snap.public_tasks()
    assert len(tasks) == 6 and [t.task_id for t in tasks] == list(snap.references())
    assert [r["task_id"] for r in snap.training_rows()] == [t.task_id for t in tasks]
    assert snap.probes() == []
    assert all(t.input["problem"] == t.input["problem"].strip() for t in tasks)  # cleaned
    public = (ds / "public.jsonl").read_text()
    assert "reference" not in public and "SECRET" not in public
    assert load_snapshot(ds).dataset_id == snap.dataset_id


def test_more_batches_until_selection_is_sufficient(tmp_path):
    snap = run_data_job(cfg(target_count=20, max_batches=3), tmp_path / "job")
    report = snap.report()
    assert report["selection"]["batches_used"] == 2
    assert [b["batch"] for b in report["generation"]["batches"]] == [0, 1]
    assert report["selection"]["insufficient"][0]["message"] == "only 16 eligible task(s), need 20"
    assert (tmp_path / "job" / "work" / "batch-1-public.jsonl").is_file()


def test_async_api(tmp_path):
    a = asyncio.run(run_data_job_async(cfg(), tmp_path / "a"))
    b = run_data_job(cfg(), tmp_path / "b")
    assert a.dataset_id == b.dataset_id


# ------------------------------------------------------------------------------------- budgets


def test_budget_exhaustion_max_batches_is_a_clear_error(tmp_path):
    with pytest.raises(BudgetExhaustedError) as e:
        run_data_job(cfg(target_count=100, max_batches=2), tmp_path / "job")
    msg = str(e.value)
    assert "after 2 batch(es) (max_batches=2)" in msg
    assert "32 raw candidate(s)" in msg and "target_count=100" in msg
    assert "only 32 eligible task(s), need 100" in msg
    job = json.loads((tmp_path / "job" / "job.json").read_text())
    assert job["status"] == "failed" and "BudgetExhaustedError" in job["error"]
    assert not (tmp_path / "job" / "dataset").exists()


def test_budget_exhaustion_max_candidates_cuts_the_batch(tmp_path):
    with pytest.raises(BudgetExhaustedError) as e:
        run_data_job(cfg(target_count=30, max_batches=5, max_candidates=20), tmp_path / "job")
    assert "20 raw candidate(s) (max_candidates=20)" in str(e.value)
    assert "after 2 batch(es)" in str(e.value)


# --------------------------------------------------------------------------------- calibration


def test_calibration_scores_probes_and_provenance(tmp_path):
    snap = run_data_job(cfg(params={"count": 30}, calibration=calibrated(2, fail_mod=5)), tmp_path / "job")
    m = snap.manifest
    assert m["calibrated"] is True
    assert m["calibration"]["repeats"] == 2
    assert m["calibration"]["provenance"][0]["provenance"]["method"] == "toy-calibrator-v1"
    probes = snap.probes()
    ids = [t.task_id for t in snap.public_tasks()]
    assert [(p["task_id"], p["repeat"]) for p in probes] == [(t, r) for t in ids for r in range(2)]
    refs = snap.references()
    for p in probes:
        if p["failure_reason"] is not None:
            assert p["score"] is None
        else:
            assert p["score"] == (1.0 if p["response"]["answer"] == refs[p["task_id"]]["answer"] else 0.0)
    # selection drops incomplete and always-correct tasks
    for t in ids:
        scores = [p["score"] for p in probes if p["task_id"] == t]
        assert None not in scores and sum(scores) < 2
    report = snap.report()
    assert report["calibration"]["attempts"] == 60 and report["calibration"]["failures"] > 0
    assert report["selection"]["claims_model_difficulty_calibration"] is True


@pytest.mark.parametrize("mode", ["duplicate", "missing", "unknown"])
def test_calibrator_protocol_violations_are_rejected(tmp_path, mode):
    with pytest.raises(CalibrationProtocolError, match=mode if mode != "missing" else "no attempt"):
        run_data_job(cfg(calibration=calibrated(2, mode=mode)), tmp_path / "job")
    assert json.loads((tmp_path / "job" / "job.json").read_text())["status"] == "failed"


def test_score_outside_unit_interval_is_an_error(tmp_path):
    with pytest.raises(RecipeError, match=r"must be finite and in \[0, 1\]"):
        run_data_job(cfg(params={"count": 8, "bad_score": True}, calibration=calibrated(1)), tmp_path / "job")


# ------------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_worker_count_does_not_change_the_result(tmp_path, backend):
    base = dict(
        recipe="recipe_toy:create_ranked_recipe",
        target_count=10,
        max_batches=3,
        params={"count": 30, "span": 40, "alias_every": 4, "drop_mod": 5, "maximum_per_bucket": 4},
        calibration=calibrated(2, fail_mod=11),
    )
    one = run_data_job(cfg(**base, execution={"max_workers": 1, "batch_size": 3}), tmp_path / "one")
    four = run_data_job(
        cfg(**base, execution={"max_workers": 4, "batch_size": 5, "backend": backend, "prefetch": 3}),
        tmp_path / "four",
    )
    assert one.dataset_id == four.dataset_id
    assert [t.task_id for t in one.public_tasks()] == [t.task_id for t in four.public_tasks()]
    assert one.report() == four.report()
    report = one.report()
    assert report["selection"]["mode"] == "ranked"
    assert report["dedup"]["duplicate_input"] > 0  # the aliases
    assert report["cleaning"]["removed"] > 0


def test_plain_selection_with_four_process_workers_matches_one_thread(tmp_path):
    base = dict(params={"count": 20}, calibration=calibrated(2))
    a = run_data_job(cfg(**base), tmp_path / "a")
    b = run_data_job(cfg(**base, execution={"max_workers": 4, "batch_size": 2, "backend": "process"}), tmp_path / "b")
    assert a.dataset_id == b.dataset_id


def test_sharded_generation_equals_plain_generation(tmp_path):
    a = run_data_job(cfg(params={"count": 20}, calibration=calibrated(2)), tmp_path / "a")
    b = run_data_job(
        cfg(recipe="recipe_toy:create_sharded_recipe", params={"count": 20}, calibration=calibrated(2),
            execution={"max_workers": 3, "batch_size": 6}),
        tmp_path / "b",
    )
    assert a.dataset_id == b.dataset_id
    assert b.manifest["generation"]["sharded"] is True and a.manifest["generation"]["sharded"] is False


def test_select_ranked_candidates_minimums_caps_and_order():
    cands = [RankedCandidate(f"t{i}", float(i // 2), f"{9 - i}", "a" if i % 3 == 0 else "b", f"k{i % 2}") for i in range(10)]
    ordered = sorted(cands, key=lambda c: (c.priority, c.tie_breaker, c.task_id))
    got = select_ranked_candidates(ordered, SelectionPolicy({"a": 3}, maximum_per_bucket=3), 5)
    ids = [c.task_id for c in got]
    assert len(ids) == 5 and len(set(ids)) == 5
    assert sum(1 for c in got if c.group == "a") >= 3
    assert max(sum(1 for c in got if c.bucket == k) for k in ("k0", "k1")) <= 3
    assert ids == [c.task_id for c in ordered if c.task_id in ids]  # global rank order
    with pytest.raises(RecipeError, match="finite"):
        RankedCandidate("x", float("nan"), "", "g", "b")


# ------------------------------------------------------------------ dedup, exclusion, conflicts


def test_exclusion_files_exclude(tmp_path):
    first = run_data_job(cfg(params={"count": 20}), tmp_path / "first")
    chosen = {t.task_id for t in first.public_tasks()}
    second = run_data_job(
        cfg(params={"count": 20}, exclude=[str(first.path / "public.jsonl")]), tmp_path / "second"
    )
    assert chosen.isdisjoint(t.task_id for t in second.public_tasks())
    report = second.report()
    assert report["exclusion"] == {"files": 1, "excluded_task_ids": 6, "excluded": 6}
    assert second.manifest["exclude"] == {str(first.path / "public.jsonl"): first.manifest["files"]["public.jsonl"]["sha256"]}


def test_exclude_file_rows_need_task_id(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(RecipeError, match=r"exclude\[0\].*line 1 has no top-level string task_id"):
        run_data_job(cfg(exclude=[str(bad)]), tmp_path / "job")


def test_conflicting_reference_for_repeated_public_input_is_an_error(tmp_path):
    with pytest.raises(RecipeError, match=r"tasks 'add-\d+-\d+' and 'conflict-\d+-\d+' have the same public input but conflicting references"):
        run_data_job(cfg(params={"count": 8, "conflict": True}), tmp_path / "job")


def test_same_task_id_across_batches_is_deduplicated(tmp_path):
    # span 4 → only 16 distinct additions; batches repeat task ids with identical content
    with pytest.raises(BudgetExhaustedError):
        run_data_job(cfg(target_count=40, max_batches=3, params={"count": 30, "span": 4}), tmp_path / "job")
    snap = run_data_job(cfg(target_count=16, max_batches=5, params={"count": 30, "span": 4}), tmp_path / "ok")
    report = snap.report()
    assert report["pool"]["candidates"] == 16
    assert report["dedup"]["duplicate_task_id"] == report["generation"]["raw_candidates"] - 16


# ---------------------------------------------------------------------------------- retries


def test_only_oserror_and_timeout_are_retried(tmp_path):
    counter = tmp_path / "clean-attempts"
    params = {"count": 4, "flaky_file": str(counter), "flaky_times": 2, "flaky_error": "oserror"}
    ex = {"max_retries": 2, "retry_delay": 0, "batch_size": 100}
    run_data_job(cfg(target_count=2, params=params, execution=ex), tmp_path / "ok")
    # two failed chunk attempts (first clean call raises each time), then 4 clean calls
    assert lines(counter) == 2 + 4

    counter.unlink()
    with pytest.raises(OSError, match="flaky clean"):
        run_data_job(cfg(target_count=2, params={**params, "flaky_times": 5}, execution=ex), tmp_path / "exhausted")
    assert lines(counter) == 3  # 1 + max_retries

    counter.unlink()
    with pytest.raises(ValueError, match="flaky clean"):
        run_data_job(cfg(target_count=2, params={**params, "flaky_error": "value"}, execution=ex), tmp_path / "value")
    assert lines(counter) == 1  # never retried

    cal_counter = tmp_path / "cal-attempts"
    run_data_job(
        cfg(target_count=2, params={"count": 12}, execution=ex,
            calibration=calibrated(1, flaky_file=str(cal_counter), flaky_times=2, flaky_error="timeout")),
        tmp_path / "cal",
    )
    assert lines(cal_counter) == 3
    cal_counter.unlink()
    with pytest.raises(ValueError, match="flaky calibrator"):
        run_data_job(
            cfg(target_count=2, params={"count": 12}, execution=ex,
                calibration=calibrated(1, flaky_file=str(cal_counter), flaky_times=2, flaky_error="value")),
            tmp_path / "cal-value",
        )
    assert lines(cal_counter) == 1


def test_generation_is_replayed_after_a_transient_error(tmp_path):
    flaky = tmp_path / "gen-failures"
    ex = {"max_retries": 3, "retry_delay": 0, "batch_size": 4}
    a = run_data_job(cfg(params={"count": 16, "generate_flaky_file": str(flaky), "generate_flaky_times": 2},
                         execution=ex), tmp_path / "a")
    assert lines(flaky) == 3
    b = run_data_job(cfg(params={"count": 16}), tmp_path / "b")
    assert a.dataset_id == b.dataset_id  # consumed candidates were skipped on replay, not doubled
    assert a.report()["generation"]["raw_candidates"] == 16


def test_backoff_is_exponential_and_capped():
    from corpus_assets.domain.recipe.workers import backoff_delay, is_retryable

    assert [backoff_delay(a, 1.0) for a in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert is_retryable(ConnectionResetError()) and is_retryable(TimeoutError())
    assert not is_retryable(ValueError()) and not is_retryable(RecipeError("x"))


# ------------------------------------------------------------------------------------ resume


def _write_config(path: Path, body: dict) -> Path:
    path.write_text(yaml.safe_dump(body))
    return path


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(PROJECT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


_RUNNER = "import sys; from corpus_assets.domain.recipe.cli import recipe_main; sys.exit(recipe_main(sys.argv[1:]))"


def test_resume_after_sigkill_mid_calibration_reuses_committed_blocks(tmp_path):
    calls = tmp_path / "calls"
    body = {
        "recipe": "recipe_toy:create_recipe",
        "target_count": 6,
        "seed": 3,
        "params": {"count": 24},
        "calibration": {"implementation": CAL, "repeats": 2, "params": {"call_log": str(calls), "sleep": 0.4}},
        "execution": {"batch_size": 4, "max_workers": 1},
    }
    config = _write_config(tmp_path / "job.yaml", body)
    out = tmp_path / "job"
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, "run", "--config", str(config), "--output", str(out)],
        env=_env(), cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while lines(calls) < 3:  # chunk 2 started → chunks 0 and 1 are committed
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "calibration never started"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    started_before_kill = lines(calls)
    assert json.loads((out / "job.json").read_text())["status"] == "running"
    assert not (out / "dataset").exists()

    chunks = 6  # 24 tasks / batch_size 4
    assert recipe_main(["run", "--config", str(config), "--output", str(out), "--resume"]) == 0
    resumed_calls = lines(calls) - started_before_kill
    assert 0 < resumed_calls <= chunks - (started_before_kill - 1)  # committed chunks were not re-run
    resumed = load_snapshot(out / "dataset")
    assert json.loads((out / "job.json").read_text())["status"] == "succeeded"

    fresh_calls = tmp_path / "fresh-calls"
    body["calibration"]["params"]["call_log"] = str(fresh_calls)
    fresh = run_data_job(load_config(_write_config(tmp_path / "fresh.yaml", body)), tmp_path / "fresh")
    assert lines(fresh_calls) == chunks
    assert fresh.dataset_id == resumed.dataset_id


def test_finished_job_resumes_to_its_verified_snapshot(tmp_path):
    gen_log = tmp_path / "generate-calls"
    calls = tmp_path / "calls"
    c = cfg(params={"count": 16, "generate_log": str(gen_log)}, calibration=calibrated(2, call_log=str(calls)))
    first = run_data_job(c, tmp_path / "job")
    before = (lines(gen_log), lines(calls))
    again = run_data_job(c, tmp_path / "job", resume=True)
    assert again.dataset_id == first.dataset_id
    assert (lines(gen_log), lines(calls)) == before  # nothing recomputed
    (tmp_path / "job" / "dataset" / "train.jsonl").write_text("tampered\n")
    with pytest.raises(SnapshotError, match="train.jsonl"):
        run_data_job(c, tmp_path / "job", resume=True)


def test_resume_refuses_changed_config_inputs_and_sources(tmp_path):
    extra = tmp_path / "helper.txt"
    extra.write_text("v1")
    excl = tmp_path / "exclude.jsonl"
    excl.write_text('{"task_id": "nope"}\n')
    c = cfg(target_count=100, params={"count": 8, "source_file": str(extra)}, exclude=[str(excl)])
    with pytest.raises(BudgetExhaustedError):
        run_data_job(c, tmp_path / "job")

    changed = cfg(target_count=99, params={"count": 8, "source_file": str(extra)}, exclude=[str(excl)])
    with pytest.raises(ResumeRefusedError, match=r"config changed \(field\(s\): target_count\)"):
        run_data_job(changed, tmp_path / "job", resume=True)

    excl.write_text('{"task_id": "other"}\n')
    with pytest.raises(ResumeRefusedError, match=f"exclude file {excl} changed"):
        run_data_job(c, tmp_path / "job", resume=True)
    excl.write_text('{"task_id": "nope"}\n')

    extra.write_text("v2")
    with pytest.raises(ResumeRefusedError, match=f"recipe source {extra} changed"):
        run_data_job(c, tmp_path / "job", resume=True)
    extra.write_text("v1")
    # the refusals left the job alone
    assert json.loads((tmp_path / "job" / "job.json").read_text())["status"] == "failed"
    with pytest.raises(BudgetExhaustedError):
        run_data_job(c, tmp_path / "job", resume=True)


def test_output_directory_rules(tmp_path):
    with pytest.raises(RecipeError, match="no data job"):
        run_data_job(cfg(), tmp_path / "missing", resume=True)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(RecipeError, match="not empty"):
        run_data_job(cfg(), tmp_path / "busy")
    (tmp_path / "empty").mkdir()
    run_data_job(cfg(), tmp_path / "empty")


def test_cancel_event_waits_and_records_cancelled_then_resume_matches(tmp_path):
    calls = tmp_path / "calls"
    c = cfg(params={"count": 20}, calibration=calibrated(2, call_log=str(calls), sleep=0.2),
            execution={"batch_size": 4})
    cancel = threading.Event()
    box = {}

    def target():
        try:
            run_data_job(c, tmp_path / "job", cancel_event=cancel)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    while lines(calls) < 2:
        time.sleep(0.01)
    cancel.set()
    t.join(30)
    assert isinstance(box.get("error"), JobCancelled)
    assert json.loads((tmp_path / "job" / "job.json").read_text())["status"] == "cancelled"
    resumed = run_data_job(c, tmp_path / "job", resume=True)
    fresh = run_data_job(c, tmp_path / "fresh")
    assert resumed.dataset_id == fresh.dataset_id


def test_a_running_job_is_locked(tmp_path):
    import fcntl

    with pytest.raises(BudgetExhaustedError):
        run_data_job(cfg(target_count=100), tmp_path / "job")
    fd = os.open(tmp_path / "job" / "work" / "job.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RecipeError, match="another process is running this data job"):
            run_data_job(cfg(target_count=100), tmp_path / "job", resume=True)
    finally:
        os.close(fd)
    assert json.loads((tmp_path / "job" / "job.json").read_text())["status"] == "failed"


def test_sigint_cancels_the_cli_job_cleanly(tmp_path):
    calls = tmp_path / "calls"
    config = _write_config(
        tmp_path / "job.yaml",
        {"recipe": "recipe_toy:create_recipe", "target_count": 4, "params": {"count": 20},
         "calibration": {"implementation": CAL, "repeats": 1, "params": {"call_log": str(calls), "sleep": 0.5}},
         "execution": {"batch_size": 2, "max_workers": 2, "backend": "process"}},
    )
    out = tmp_path / "job"
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, "run", "--config", str(config), "--output", str(out)],
        env=_env(), cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # a runner started in the background (nohup, CI) inherits SIGINT ignored, and Python then
        # installs no KeyboardInterrupt handler: give the CLI the default handlers a terminal gives
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 120
    while lines(calls) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert "corpus recipe: cancelled" in err.decode()
    assert json.loads((out / "job.json").read_text())["status"] == "cancelled"
    assert recipe_main(["run", "--config", str(config), "--output", str(out), "--resume"]) == 0


def test_cancelling_the_async_caller_cancels_the_job(tmp_path):
    calls = tmp_path / "calls"
    c = cfg(params={"count": 20}, calibration=calibrated(1, call_log=str(calls), sleep=0.2), execution={"batch_size": 2})

    async def main():
        task = asyncio.create_task(run_data_job_async(c, tmp_path / "job"))
        while lines(calls) < 1:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert json.loads((tmp_path / "job" / "job.json").read_text())["status"] == "cancelled"


# ------------------------------------------------------------------------- secrets and logs


def test_references_never_appear_in_public_or_logs(tmp_path, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    config = _write_config(
        tmp_path / "job.yaml",
        {"recipe": "recipe_toy:create_recipe", "target_count": 8, "params": {"count": 24, "alias_every": 3},
         "calibration": {"implementation": CAL, "repeats": 2}, "execution": {"batch_size": 5, "max_workers": 2}},
    )
    assert recipe_main(["run", "--config", str(config), "--output", str(tmp_path / "job")]) == 0
    captured = capsys.readouterr()
    snap = load_snapshot(tmp_path / "job" / "dataset")
    secrets = secrets_of(snap)
    assert len(secrets) == 8
    refs_text = (snap.path / "references.jsonl").read_text()
    assert all(s in refs_text for s in secrets)  # they exist, privately
    visible = [
        caplog.text, captured.out, captured.err,
        (snap.path / "public.jsonl").read_text(),
        (tmp_path / "job" / "job.json").read_text(),
        (tmp_path / "job" / "progress.json").read_text(),
        (tmp_path / "job" / "work" / "batch-0-public.jsonl").read_text(),
    ]
    assert caplog.text  # the job did log
    for text in visible:
        assert "SECRET-REF" not in text
        assert '"reference"' not in text
    for row in map(json.loads, (snap.path / "public.jsonl").read_text().splitlines()):
        assert set(row) == {"task_id", "input", "metadata"}


# ----------------------------------------------------------------------------- verification


def test_load_snapshot_refuses_tampering_and_misalignment(tmp_path):
    snap = run_data_job(cfg(calibration=calibrated(2)), tmp_path / "job")
    ds = snap.path

    original = (ds / "public.jsonl").read_text()
    (ds / "public.jsonl").write_text(original.replace("What is", "What's"))
    with pytest.raises(SnapshotError, match="public.jsonl: content digest does not match"):
        load_snapshot(ds)
    with pytest.raises(SnapshotError, match="public.jsonl"):
        snap.public_tasks()  # accessors re-verify too
    (ds / "public.jsonl").write_text(original)
    load_snapshot(ds)

    refs = (ds / "references.jsonl").read_text().splitlines()
    refs[0], refs[1] = refs[1], refs[0]
    (ds / "references.jsonl").write_text("\n".join(refs) + "\n")
    with pytest.raises(SnapshotError, match="references.jsonl: content digest"):
        load_snapshot(ds)
    rewrite_manifest(ds)
    with pytest.raises(SnapshotError, match=r"references.jsonl: rows are not aligned with public.jsonl \(first difference at row 1\)"):
        load_snapshot(ds)

    m = json.loads((ds / "manifest.json").read_text())
    m["dataset_id"] = "0" * 64
    (ds / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(SnapshotError, match="dataset_id does not match"):
        load_snapshot(ds)


def test_load_snapshot_refuses_public_rows_with_extra_fields(tmp_path):
    snap = run_data_job(cfg(), tmp_path / "job")
    ds = snap.path
    rows = [json.loads(x) for x in (ds / "public.jsonl").read_text().splitlines()]
    rows[0]["answer"] = 1
    (ds / "public.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    rewrite_manifest(ds)
    with pytest.raises(SnapshotError, match="public.jsonl line 1: fields must be exactly"):
        load_snapshot(ds)


# --------------------------------------------------------------------------------- HF export


def test_hf_export_reads_back_with_datasets_and_records_source(tmp_path):
    datasets = pytest.importorskip("datasets")
    snap = run_data_job(cfg(calibration=calibrated(2)), tmp_path / "job")
    path = export_hf_dataset(snap, tmp_path / "hf")
    loaded = datasets.load_from_disk(str(path))
    assert loaded.num_rows == 6
    assert loaded.to_list() == snap.training_rows()
    described = json.loads(loaded.info.description)["corpus_source"]
    assert described["dataset_id"] == snap.dataset_id
    assert described["manifest_sha256"] == snap.manifest_digest
    source = json.loads((path / SOURCE_FILE).read_text())
    assert source == described and source["rows"] == 6 and source["calibrated"] is True
    with pytest.raises(RecipeError, match="not empty"):
        export_hf_dataset(snap, tmp_path / "hf")


# ------------------------------------------------------------------------------ CLI and config


def test_cli_last_line_is_json_and_errors_exit_2(tmp_path, capsys):
    pytest.importorskip("datasets")
    config = _write_config(tmp_path / "job.yaml", {"recipe": "recipe_toy:create_recipe", "target_count": 4})
    out, hf = tmp_path / "job", tmp_path / "hf"
    assert recipe_main(["run", "--config", str(config), "--output", str(out), "--export-hf", str(hf)]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == {
        "dataset_id": load_snapshot(out / "dataset").dataset_id,
        "dataset_path": str(out / "dataset"),
        "training_dataset_path": str(hf),
    }
    # resume of a finished job, without export
    assert recipe_main(["run", "--config", str(config), "--output", str(out), "--resume"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(last) == {"dataset_id", "dataset_path"}

    assert recipe_main(["run", "--config", str(config), "--output", str(out)]) == 2
    assert "corpus recipe: error: output directory" in capsys.readouterr().err
    bad = _write_config(tmp_path / "bad.yaml", {"recipe": "recipe_toy:create_recipe", "target_count": 0, "max_batch": 3})
    assert recipe_main(["run", "--config", str(bad), "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "corpus recipe: error:" in err and "target_count" in err and "max_batch" in err
    assert recipe_main(["run", "--output", str(tmp_path / "y")]) == 2
    assert "--config" in capsys.readouterr().err


def test_load_config_resolves_paths_and_names_fields(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "in.jsonl").write_text("{}\n")
    path = _write_config(
        tmp_path / "sub" / "job.yaml",
        {"recipe": "m:f", "target_count": 3, "inputs": ["in.jsonl"], "exclude": ["../ex.jsonl"],
         "execution": {"backend": "process", "max_workers": 2}},
    )
    c = load_config(path)
    assert c.inputs == [tmp_path / "sub" / "in.jsonl"] and c.exclude == [tmp_path / "ex.jsonl"]
    assert c.execution.prefetch_chunks == 4
    for body, field in (
        ({"recipe": "nocolon", "target_count": 1}, "recipe"),
        ({"recipe": "m:f", "target_count": 1, "purpose": "fun"}, "purpose"),
        ({"recipe": "m:f", "target_count": 1, "execution": {"max_workers": 0}}, "execution.max_workers"),
        ({"recipe": "m:f", "target_count": 1, "execution": {"backend": "ray"}}, "execution.backend"),
        ({"recipe": "m:f", "target_count": 1, "calibration": {"implementation": "a:b", "repeats": 0}}, "calibration.repeats"),
    ):
        with pytest.raises(JobConfigError, match=field.replace(".", r"\.")):
            load_config(_write_config(tmp_path / "bad.yaml", body))


def test_job_identity_follows_the_imports_and_does_not_depend_on_the_checkout_folder(tmp_path):
    from corpus_assets.domain.recipe.identity import executor_source_files, source_key

    keys = {source_key(p) for p in executor_source_files()}
    assert all(not k.startswith("/") for k in keys), keys
    # every corpus_assets module a real run loads (outside the recipe's own examples) is in the identity
    probe = (
        "import sys, json\n"
        "from corpus_assets.domain.recipe.config import DataJobConfig\n"
        "from corpus_assets.domain.recipe.executor import run_data_job\n"
        "c = DataJobConfig.model_validate({'recipe': 'recipe_toy:create_recipe', 'target_count': 4, 'seed': 1, 'params': {'count': 8}})\n"
        f"run_data_job(c, {str(tmp_path / 'job')!r})\n"
        "mods = sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('corpus_assets') and getattr(m, '__file__', None)\n"
        "              and not n.endswith('__init__') and not m.__file__.endswith('__init__.py') and '.examples' not in n)\n"
        "print(json.dumps(mods))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(PROJECT)]))
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    loaded = {source_key(Path(f)) for f in json.loads(out.stdout.strip().splitlines()[-1])}
    assert loaded <= keys, sorted(loaded - keys)
    # the same package in another folder has the same executor identity
    import shutil

    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(PROJECT / "corpus_assets", elsewhere / "corpus_assets", ignore=shutil.ignore_patterns("__pycache__"))
    ident = ("import json; from corpus_assets.domain.recipe import identity;"
             "print(identity.__file__); print(json.dumps(identity.source_digests(identity.executor_source_files(), 'executor')))")
    here = subprocess.run([sys.executable, "-c", ident], env=dict(os.environ, PYTHONPATH=str(PROJECT)), cwd=PROJECT,
                          capture_output=True, text=True, check=True).stdout
    there = subprocess.run([sys.executable, "-c", ident], env=dict(os.environ, PYTHONPATH=str(elsewhere)), cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert there.splitlines()[0].startswith(str(elsewhere)) and here.splitlines()[0].startswith(str(PROJECT))
    here, there = json.loads(here.splitlines()[1]), json.loads(there.splitlines()[1])
    assert there == here and set(here) == keys
