"""Wall time of one snapshot run and one release run, in-process executor vs Dagster's
multiprocess executor, through `dagster job execute` (what a launched run does).

Baseline: the multiprocess executor (Dagster's default, each step in its own process). Data: the
first N pages of the Debian handbook (en-US) that `bench/fetch_debian_docs.sh` unpacked, as a
`local_dir` source, and a small release over it with the fixture tokenizer. Prints seconds per
run and the ratio multiprocess / in_process for each job.

    .venv/bin/python bench/bench_executor.py [--pages 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
BIN = PROJECT / ".venv" / "bin"
HANDBOOK = HERE / "data" / "root" / "usr" / "share" / "doc" / "debian-handbook" / "html" / "en-US"
TOKENIZER = PROJECT / "tests" / "data" / "tokenizer" / "tiny_bpe.json"


def _setup(root: Path, pages: int) -> dict:
    site = root / "site"
    site.mkdir(parents=True)
    found = sorted(HANDBOOK.glob("*.html"))[:pages]
    if not found:
        sys.exit(f"no pages under {HANDBOOK}: run bench/fetch_debian_docs.sh first")
    for p in found:
        shutil.copy(p, site / p.name)
    home = root / "home"
    (home / "dagster").mkdir(parents=True)
    (root / "sources.yaml").write_text(
        f"sources:\n  - id: handbook\n    kind: local_dir\n    root: {site}\n"
        "    governance: {license: GPL-2.0-or-later, rights_evidence: https://debian-handbook.info/}\n")
    rel = root / "releases"
    rel.mkdir()
    (rel / "hb.yaml").write_text(
        "name: hb\nsnapshots: {sources: [handbook]}\nsplit: {fractions: [0.8, 0.1, 0.1]}\n"
        f"tokenizer: {{path: '{TOKENIZER}', special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'}}\n"
        "packing: {seq_len: 512, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 65536}\n")
    return dict(os.environ, CORPUS_HOME=str(home), DAGSTER_HOME=str(home / "dagster"),
                CORPUS_SOURCES=str(root / "sources.yaml"), CORPUS_RELEASES=str(rel),
                CORPUS_CURATION=str(PROJECT / "curation.yaml"))


def _execute(env: dict, job: str, partition: str, executor: str) -> float:
    started = time.perf_counter()
    out = subprocess.run(
        [str(BIN / "dagster"), "job", "execute", "-m", "corpus_assets.definitions", "-j", job,
         "--tags", json.dumps({"dagster/partition": partition})],
        cwd=PROJECT, env=dict(env, CORPUS_EXECUTOR=executor), capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{job} {partition} ({executor}) failed:\n{out.stderr[-4000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=60)
    args = ap.parse_args()
    times: dict[tuple[str, str], float] = {}
    t0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    for i, executor in enumerate(("multiprocess", "in_process")):
        with tempfile.TemporaryDirectory() as tmp:  # a fresh data root per executor: same work for both
            env = _setup(Path(tmp), args.pages)
            sys.path.insert(0, str(PROJECT))
            os.environ.update({k: env[k] for k in ("CORPUS_HOME", "DAGSTER_HOME", "CORPUS_SOURCES", "CORPUS_RELEASES", "CORPUS_CURATION")})
            import dagster as dg

            from corpus_assets.definitions import build_definitions
            from corpus_assets.domain.core.keys import snapshot_key

            key = snapshot_key("handbook", t0 + timedelta(minutes=i))
            with dg.DagsterInstance.get() as instance:
                assert build_definitions().resolve_job_def("registry_job").execute_in_process(instance=instance).success
                instance.add_dynamic_partitions("snapshots", [key])
                instance.add_dynamic_partitions("releases", ["hb"])
            times[("snapshot_job", executor)] = _execute(env, "snapshot_job", key, executor)
            times[("release_job", executor)] = _execute(env, "release_job", "hb", executor)
    print(f"{args.pages} Debian handbook pages, `dagster job execute`, {os.cpu_count()} cores")
    print(f"{'job':<14} {'multiprocess s':>15} {'in_process s':>13} {'multiprocess / in_process':>26}")
    for job in ("snapshot_job", "release_job"):
        mp, ip = times[(job, "multiprocess")], times[(job, "in_process")]
        print(f"{job:<14} {mp:>15.1f} {ip:>13.1f} {mp / ip:>26.2f}")


if __name__ == "__main__":
    main()
