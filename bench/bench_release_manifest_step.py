#!/usr/bin/env python3
"""The ``release_manifest`` step alone (issue 18): how long publishing a release rebuild takes —
reconcile, tombstones, build id, staging, Algorithm 18.3 publish, registration and the three asset
checks — measured as Dagster measures it (STEP_START -> STEP_SUCCESS of the step) and as the wall
clock of a run that executes only that step.

Input: a folder kept by ``bench/bench_increment.py --keep DIR`` (its ``inc`` release has two
builds: the first and the increment). The folder is copied once to ``--work`` (default: a temp
dir); each repetition then puts the copy back into the state just before the increment's
``release_manifest`` ran — the increment build's directory removed, CURRENT naming the first build,
the catalog's registry as it was then — and runs ``release_job`` with only ``release_manifest``
selected for the ``inc`` partition, in process. So every repetition is a fresh publish of the same
build id the increment published (same inputs, same bytes), like the step in an increment run.

Printed: per repetition the step time and run wall; then the median and minimum of each.

Run:  nice -n 5 .venv/bin/python bench/bench_release_manifest_step.py --data /tmp/kept [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))


def prepare(work: Path, release: str) -> tuple[str, str]:
    """Roll ``release`` back to just before its last build was published; return (first, last)."""
    import duckdb

    rdir = work / "home" / "releases" / release
    last = (rdir / "CURRENT").read_text().strip()
    con = duckdb.connect(str(work / "home" / "catalog.duckdb"))
    try:
        rows = con.execute("SELECT build_id FROM release_registry WHERE release = ? ORDER BY published_at, build_id",
                           [release]).fetchall()
        builds = [r[0] for r in rows]
        assert builds[-1] == last and len(builds) >= 2, builds
        first = builds[-2]
        con.execute("DELETE FROM release_registry WHERE release = ? AND build_id = ?", [release, last])
        con.execute("UPDATE release_registry SET status = 'published' WHERE release = ? AND build_id = ?", [release, first])
    finally:
        con.close()
    shutil.rmtree(rdir / last)
    (rdir / "CURRENT").write_text(first + "\n")
    shutil.copy2(work / "home" / "catalog.duckdb", work / "catalog.pristine")
    return first, last


def reset(work: Path, release: str, first: str, last: str) -> None:
    rdir = work / "home" / "releases" / release
    shutil.rmtree(rdir / last, ignore_errors=True)
    (rdir / "CURRENT").write_text(first + "\n")
    shutil.copy2(work / "catalog.pristine", work / "home" / "catalog.duckdb")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a folder kept by bench_increment.py --keep")
    ap.add_argument("--work", type=Path, default=None, help="copy it here (must not exist; default: a temp dir)")
    ap.add_argument("--release", default="inc")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_release_manifest_step-")
        work = Path(tmp.name) / "data"
    else:
        work = args.work
    shutil.copytree(args.data, work, symlinks=True)
    first, last = prepare(work, args.release)
    home = work / "home"
    os.environ.update(CORPUS_HOME=str(home), DAGSTER_HOME=str(home / "dagster"), CORPUS_SOURCES=str(work / "sources.yaml"),
                      CORPUS_RELEASES=str(work / "releases"), CORPUS_CURATION=str(PROJECT / "curation.yaml"))

    import dagster as dg
    from dagster import DagsterInstance

    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    instance = DagsterInstance.get()
    job = defs.resolve_job_def("release_job")
    steps, walls = [], []
    for i in range(args.repeat):
        reset(work, args.release, first, last)
        started = time.perf_counter()
        res = job.execute_in_process(instance=instance, partition_key=args.release, raise_on_error=True,
                                     asset_selection=[dg.AssetKey("release_manifest")])
        wall = time.perf_counter() - started
        start = end = None
        for e in instance.all_logs(res.run_id):
            ev = e.dagster_event
            if ev is not None and e.step_key == "release_manifest":
                if ev.event_type == dg.DagsterEventType.STEP_START:
                    start = e.timestamp
                elif ev.event_type == dg.DagsterEventType.STEP_SUCCESS:
                    end = e.timestamp
        published = (home / "releases" / args.release / "CURRENT").read_text().strip()
        assert published == last, f"published {published}, expected the increment's build {last}"
        steps.append(end - start)
        walls.append(wall)
        print(f"repetition {i + 1}: step {steps[-1]:.3f} s, run wall {wall:.3f} s", flush=True)
    print(json.dumps({"step_median": round(statistics.median(steps), 3), "step_min": round(min(steps), 3),
                      "wall_median": round(statistics.median(walls), 3), "wall_min": round(min(walls), 3),
                      "repeat": args.repeat, "build_id": last}))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
