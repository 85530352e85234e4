#!/usr/bin/env python3
"""End-to-end benchmark (issue 9): the demo release pipeline through Dagster on the Debian docs,
with 1 and 2 workers, and the cost of an incremental crawl that adds 1% new documents.

Corpus: the regular ``*.html`` pages that ``bench/fetch_debian_docs.sh`` unpacked under
``bench/data/root`` (order: SHA-1 of the relative path, as the other benchmarks), optionally
limited to the first ``--docs N``. The last ~1% of them (``round(N / 101)``, at least 1) are held
out as the *new* documents of the incremental crawl; the other pages (the *base*) are split
alternately into two halves. Each half is a ``local_dir`` source (``debian_a``, ``debian_b``)
whose root holds hard links to its pages, so the base corpus is two snapshot partitions; the new
pages are a third ``local_dir`` source (``debian_new``: the drop folder of the crawl's delta, since
a ``local_dir`` snapshot re-reads its whole root). A release spec ``e2e`` is the demo's
(``releases/demo.yaml``: same dedup, split, token views, packing and shard settings) with the
three sources, a byte-level BPE trained on the training split (``--vocab-size``), no
``max_tokens`` limit and no mixture section (the training split read once, so the packed shards
cover the whole corpus instead of the demo's 60 draws).

Workers: a worker is one Python process that has imported the project and built its Definitions
and opens the run's persistent Dagster instance (a temp ``DAGSTER_HOME``, SQLite storage); it
executes the runs it is handed one after the other with ``execute_in_process`` (what ``corpus
snapshot`` and ``corpus demo`` do), or with ``--executor multiprocess`` through
``dagster.execute_job`` with Dagster's multiprocess executor (one subprocess per step). Workers are
started and warm before the clock starts; their start-up time is reported separately.

For W = 1 and W = 2 (each in a fresh temp ``CORPUS_HOME``/``DAGSTER_HOME``; the order alternates
between ``--rounds``):
  setup (not timed)  registry_job (eval_registry), the snapshot partitions added, the ``e2e``
                     release registered by the project's ``release_specs`` sensor;
  snapshot phase     ``snapshot_job`` (raw_snapshot -> canonical_records -> curated_records ->
                     minhash_signatures) for both partitions, pulled from one queue by W workers;
  release phase      ``release_job`` (dedup_clusters -> splits -> tokenizer -> token_views ->
                     mixture_plan -> packed_shards -> release_manifest) for ``e2e`` on one worker
                     (a release is one partition whose steps depend on each other).
Per stage: the Dagster step's start->end (event log), summed over partitions ("busy"), and the
base pages per second of it; per phase and end to end: wall clock. Speedup = (2-worker docs/s) /
(1-worker docs/s) of the same round.

Incremental crawl (in the 1-worker home, after its release): the ``debian_new`` snapshot partition
is added and ``snapshot_job`` runs for it alone on the warm worker: cost b; the full rebuild a =
the 1-worker snapshot phase (every base partition from scratch). ``--inc-repeats`` (default 3)
times it more than once: the first run is the new pages' first snapshot, the others re-capture the
same pages as further new partitions of ``debian_new`` (snapshot layers reuse nothing across
partitions, so each is the same work); b is the median. Printed: b / a in wall clock (target < 5%;
release-level steps excluded) and in worker CPU seconds. Also timed, each on a further new
partition of the same pages: the incremental snapshot in a fresh worker process (spawn to done, as
``corpus snapshot`` runs it: start-up, imports and first-call costs included; compared with a plus
one start-up), and with the executors of ``--inc-executors`` (Dagster's multiprocess executor, one
process per step, as runs launched from the UI or the daemon use by default; and the same with
``start_method: forkserver`` preloading the project). Then, for information, ``release_job``
again after the first increment (with the token views it had to recompute).

Instance: each temp ``DAGSTER_HOME`` has no ``dagster.yaml`` (Dagster's defaults: SQLite storage, no
pool limits) unless ``--instance-config FILE`` copies one in, e.g. ``deploy/dagster.yaml`` (its
``catalog_writer`` pool, limit 1, then keeps the two partitions' raw_snapshot and
canonical_records steps from running at the same time; the report prints how long both partitions
ran the same stage at once).

Noise: the machine may be shared. Each phase reports the workers' CPU seconds and the cores that
other processes used meanwhile (from /proc/stat), so a slowed phase can be recognised;
``--rounds`` alternates the order of the two modes; ``--wait-quiet S`` waits (at most S seconds)
for an idle machine before each timed phase.

Run:  bash bench/fetch_debian_docs.sh && .venv/bin/python bench/bench_e2e.py
      .venv/bin/python bench/bench_e2e.py --quick      (smoke run: 200 pages, 1 round)
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ (for _common)

from _common import DEFAULT_ROOT, MB, PROJECT, cpu_model, discover_pages  # noqa: E402

RELEASE = "e2e"
EXECUTORS = ("in_process", "multiprocess", "forkserver")
SOURCES = ("debian_a", "debian_b")
NEW_SOURCE = "debian_new"
BASE_STAMP = "20260101T000000"
NEW_STAMP = "20260102T000000"
SNAPSHOT_STEPS = ("raw_snapshot", "canonical_records", "curated_records", "minhash_signatures")
RELEASE_STEPS = ("release_inputs", "dedup_clusters", "splits", "tokenizer", "token_views", "mixture_plan", "packed_shards",
                 "release_manifest")


# --------------------------------------------------------------------------------------------
# worker process: imports the project once, then executes the runs it is sent on stdin


def _reply(out, obj) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def _step_times(instance, run_id: str) -> dict[str, list[float]]:
    return {s.step_key: [s.start_time, s.end_time] for s in instance.get_run_step_stats(run_id)}


def _snapshot_counts(store, key: str) -> dict:
    from corpus_assets.domain.layers.registry import CANONICAL_RECORDS
    from corpus_assets.domain.layers.registry import RAW_SNAPSHOT
    from corpus_assets.domain.layers.registry import CURATED_RECORDS

    raw = store.require_current(RAW_SNAPSHOT, key)
    can = store.require_current(CANONICAL_RECORDS, key).manifest.get("outcomes", {})
    cur = store.require_current(CURATED_RECORDS, key).manifest.get("outcomes", {})
    sig = store.require_current("minhash_signatures", key)
    raw_bytes = sum(f["bytes"] for f in raw.manifest["tables"]["items"]["files"])
    return {"raw_items": raw.row_count("items"), "raw_stored_bytes": raw_bytes, "canonical": can,
            "curated": cur, "signatures": sig.row_count("signatures")}


def _release_counts(store, name: str) -> dict:
    dedup = store.require_current("dedup_clusters", name).manifest
    splits = store.require_current("splits", name).manifest["report"]
    tok = store.require_current("tokenizer", name).manifest
    tv = store.require_current("token_views", name).manifest["report"]
    mix = store.require_current("mixture_plan", name).manifest["report"]
    pk = store.require_current("packed_shards", name).manifest["report"]
    return {
        "dedup_records": dedup["records"], "dedup_kept": dedup["kept"],
        "exact_removed": dedup["exact"]["duplicates_removed"], "near_removed": dedup["near_removed"],
        "splits": {s: r["records"] for s, r in splits["splits"].items()},
        "tokenizer_vocab": tok["vocab_size"], "tokenizer_training_records": tok.get("training_records"),
        "views": tv["views"], "tokens": tv["tokens"], "views_rejected": tv["rejected"],
        "mixture_draws": mix.get("draws"),
        "blocks": {s: r.get("blocks", 0) for s, r in pk["splits"].items()},
        "utilization": {s: r.get("utilization", 0) for s, r in pk["splits"].items()},
    }


def run_worker(executor: str) -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)  # replies; everything else printed goes to stderr
    os.dup2(2, 1)
    import dagster as dg

    from corpus_assets.definitions import build_definitions
    from corpus_assets.partitions import releases_partitions, snapshots_partitions

    defs = build_definitions()
    instance = dg.DagsterInstance.get()
    store = defs.resources["storage"].store()

    # CPU time of this process (all its threads), sampled every 50 ms, so each step's CPU seconds can
    # be read off between its start and end (Dagster's event log only has wall-clock times)
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        while True:
            samples.append((time.time(), time.process_time()))
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()

    def cpu_at(t: float) -> float:
        i = bisect.bisect_left(samples, (t, -1.0))
        if i <= 0:
            return samples[0][1]
        if i >= len(samples):
            return samples[-1][1]
        (t0, c0), (t1, c1) = samples[i - 1], samples[i]
        return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)

    def step_cpu(steps: dict, how: str) -> dict:
        if how != "in_process":
            return {}  # steps run in child processes
        time.sleep(0.1)  # one more sample after the last step ended
        return {k: cpu_at(e) - cpu_at(s) for k, (s, e) in steps.items() if s is not None and e is not None}

    _reply(out, {"ready": True, "pid": os.getpid()})

    def execute(job: str, partition: str, max_concurrent: int, how: str):
        if how == "in_process":
            res = defs.resolve_job_def(job).execute_in_process(
                instance=instance, partition_key=partition, raise_on_error=True
            )
            return res.run_id
        from dagster._core.definitions.reconstruct import ReconstructableRepository

        recon = ReconstructableRepository.for_module(
            "corpus_assets.definitions", "defs", working_directory=str(PROJECT)
        ).get_reconstructable_job(job)
        mp: dict = {"max_concurrent": max_concurrent}
        if how == "forkserver":  # step processes forked from a server that has imported the project once
            mp["start_method"] = {"forkserver": {"preload_modules": ["corpus_assets.definitions"]}}
        with dg.execute_job(
            recon, instance=instance, tags={"dagster/partition": partition},
            run_config={"execution": {"config": {"multiprocess": mp}}}, raise_on_error=True,
        ) as res:
            return res.run_id

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "quit":
                break
            if op == "setup":
                t0 = time.time()
                defs.resolve_job_def("registry_job").execute_in_process(instance=instance, raise_on_error=True)
                instance.add_dynamic_partitions(snapshots_partitions.name, cmd["snapshots"])
                sensor = defs.resolve_sensor_def("release_specs")
                tick = sensor.evaluate_tick(dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs))
                for req in tick.dynamic_partitions_requests or []:
                    instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
                if RELEASE not in instance.get_dynamic_partitions(releases_partitions.name):
                    raise RuntimeError(f"the release_specs sensor did not register {RELEASE!r}: {tick}")
                _reply(out, {"ok": True, "seconds": time.time() - t0})
            elif op == "add_partition":
                instance.add_dynamic_partitions(snapshots_partitions.name, [cmd["key"]])
                _reply(out, {"ok": True})
            elif op == "run":
                t0, c0 = time.time(), os.times()
                how = cmd.get("executor") or executor
                run_id = execute(cmd["job"], cmd["partition"], cmd.get("max_concurrent", 1), how)
                t1, c1 = time.time(), os.times()
                cpu = (c1.user + c1.system + c1.children_user + c1.children_system) - (
                    c0.user + c0.system + c0.children_user + c0.children_system)
                counts = (_snapshot_counts(store, cmd["partition"]) if cmd["job"] == "snapshot_job"
                          else _release_counts(store, cmd["partition"]))
                if cmd["job"] == "release_job":
                    ev = instance.get_latest_materialization_event(dg.AssetKey("token_views"))
                    meta = ev.asset_materialization.metadata if ev and ev.asset_materialization else {}
                    for k in ("tokenized_records", "reused_records", "tokenizer_digest"):
                        if k in meta:
                            counts[k] = getattr(meta[k], "value", meta[k])
                steps = _step_times(instance, run_id)
                _reply(out, {"ok": True, "run_id": run_id, "start": t0, "end": t1, "cpu": cpu,
                             "steps": steps, "step_cpu": step_cpu(steps, how), "counts": counts,
                             "executor": how})
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception:  # reported to the driver, which stops the benchmark
            _reply(out, {"ok": False, "error": traceback.format_exc()})
    instance.dispose()
    return 0


# --------------------------------------------------------------------------------------------
# driver


class Worker:
    def __init__(self, name: str, env: dict, log_path: Path, executor: str):
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--executor", executor],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=str(PROJECT), text=True,
        )
        hello = self._read()
        self.startup_s = time.perf_counter() - t0
        if not hello.get("ready"):
            raise RuntimeError(f"worker {name} did not start: {hello}")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited (code {self.proc.poll()}); log: {self.log_path}\n"
                               + _tail(self.log_path))
        return json.loads(line)

    def call(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if not reply.get("ok"):
            raise RuntimeError(f"worker {self.name}: {cmd} failed:\n{reply.get('error')}\nlog: {self.log_path}")
        return reply

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
        except Exception:
            pass
        if self.proc.poll() is None:  # only this worker's own process, by its handle
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores from /proc/stat (0, 0 where there is none)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def cores_busy(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Average number of busy cores between two machine_cpu() samples (whole machine, every process)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return busy / total * (os.cpu_count() or 1) if total > 0 else float("nan")


def stage_inputs(root: Path, rels: list[str], dest: Path) -> int:
    """Hard links (copies across filesystems) of the pages under dest, same relative paths."""
    total = 0
    for rel in rels:
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
        total += dst.stat().st_size
    return total


def write_configs(tmp: Path, inputs: Path, vocab_size: int) -> tuple[Path, Path]:
    import yaml

    project_sources = yaml.safe_load((PROJECT / "sources.yaml").read_text())
    gov = {"license": "various (see each package's debian/copyright)", "rights_evidence": "bench only"}
    sources = {
        "canonical": project_sources.get("canonical", {}),
        "sources": [
            {"id": sid, "kind": "local_dir", "description": f"Debian documentation pages ({sid})",
             "root": str(inputs / sid), "include": ["**/*.html", "**/*.htm"], "governance": gov}
            for sid in (*SOURCES, NEW_SOURCE)
        ],
    }
    sources_path = tmp / "sources.yaml"
    sources_path.write_text(yaml.safe_dump(sources, sort_keys=False))
    demo = yaml.safe_load((PROJECT / "releases" / "demo.yaml").read_text())
    spec = {
        "name": RELEASE,
        "description": "bench_e2e: the demo release over the Debian documentation sources",
        "snapshots": {"sources": [*SOURCES, NEW_SOURCE]},
        "dedup": demo["dedup"],
        "split": demo["split"],
        "tokenizer": {**demo["tokenizer"], "train": {**demo["tokenizer"]["train"], "vocab_size": vocab_size}},
        "token_views": {k: v for k, v in demo["token_views"].items() if k != "max_tokens"},
        "packing": demo["packing"],
        "shards": demo["shards"],
    }
    releases = tmp / "releases"
    releases.mkdir()
    (releases / f"{RELEASE}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return sources_path, releases


def mode_env(home: Path, sources_path: Path, releases: Path, instance_config: Path | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        CORPUS_HOME=str(home), DAGSTER_HOME=str(home / "dagster"), CORPUS_SOURCES=str(sources_path),
        CORPUS_RELEASES=str(releases), CORPUS_CURATION=str(PROJECT / "curation.yaml"),
        CORPUS_DEDUP=str(PROJECT / "dedup.yaml"),
    )
    env.pop("CORPUS_SIGNING_KEY", None)
    # Dagster's multiprocess executor as the Definitions' executor, so ``execute_job`` runs with a
    # ``multiprocess`` run config can use it; ``execute_in_process`` (the in_process runs) ignores it.
    # Until 2026-12-07 this popped the variable, leaving the project's in-process default, and every
    # multiprocess / forkserver run failed with "unexpected config entry multiprocess".
    env["CORPUS_EXECUTOR"] = "multiprocess"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH", "")]))
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    if instance_config is not None:
        shutil.copyfile(instance_config, home / "dagster" / "dagster.yaml")
    return env


def wait_quiet(max_wait: float, threshold: float, echo) -> tuple[float, float]:
    """Wait (at most max_wait s) until the machine is quiet: fewer than ``threshold`` cores busy over
    a 3 s sample. Returns (seconds waited, busy cores of the last sample)."""
    t0 = time.perf_counter()
    while True:
        a = machine_cpu()
        time.sleep(3)
        busy = cores_busy(a, machine_cpu())
        waited = time.perf_counter() - t0
        if busy < threshold or waited >= max_wait or busy != busy:  # nan: no /proc/stat
            if waited > 3.5:
                echo(f"  waited {waited:.0f} s for a quiet machine ({busy:.2f} cores busy now)")
            return waited, busy


class Phase:
    """Wall clock and whole-machine CPU over a phase."""

    def __enter__(self):
        self.t0, self.m0 = time.perf_counter(), machine_cpu()
        return self

    def __exit__(self, *exc):
        self.wall, self.cores = time.perf_counter() - self.t0, cores_busy(self.m0, machine_cpu())
        return False

    def result(self, worker_cpu: float) -> dict:
        # cores used by processes other than the benchmark's workers, on average over the phase
        other = max(0.0, self.cores - worker_cpu / self.wall) if self.wall > 0 else float("nan")
        return {"wall": self.wall, "machine_cores": self.cores, "worker_cpu": worker_cpu, "other_cores": other}


def run_mode(n_workers: int, home: Path, env: dict, args, keys: list[str], new_key: str | None, echo) -> dict:
    """One fresh home: setup, snapshot phase with n_workers, release phase; the incremental crawl if new_key."""
    workers: list[Worker] = []
    try:
        for i in range(n_workers):
            workers.append(Worker(f"w{n_workers}.{i}", env, home / f"worker-{i}.log", args.executor))
        startup = [w.startup_s for w in workers]
        setup = workers[0].call(op="setup", snapshots=keys)["seconds"]
        echo(f"  {n_workers} worker(s) ready (start-up {', '.join(f'{s:.1f}' for s in startup)} s), setup {setup:.1f} s")
        waited = wait_quiet(args.wait_quiet, args.quiet_cores, echo) if args.wait_quiet else (0.0, float("nan"))

        todo: queue.Queue = queue.Queue()
        for k in keys:
            todo.put(k)
        results: dict[str, dict] = {}
        errors: list[BaseException] = []

        def drain(w: Worker) -> None:
            while not errors:
                try:
                    key = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[key] = w.call(op="run", job="snapshot_job", partition=key, max_concurrent=1) | {"worker": w.name}
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    errors.append(exc)

        with Phase() as ph:
            threads = [threading.Thread(target=drain, args=(w,)) for w in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]
        snap = ph.result(sum(r["cpu"] for r in results.values()))
        echo(f"  snapshot phase: {snap['wall']:.1f} s (workers' CPU {snap['worker_cpu']:.1f} s; "
             f"other processes {snap['other_cores']:.2f} cores)")
        with Phase() as ph:
            release = workers[0].call(op="run", job="release_job", partition=RELEASE, max_concurrent=1)
        rel = ph.result(release["cpu"])
        echo(f"  release phase: {rel['wall']:.1f} s (worker CPU {rel['worker_cpu']:.1f} s; other processes {rel['other_cores']:.2f} cores)")
        out = {"workers": n_workers, "startup": startup, "setup": setup, "waited": waited, "snapshots": results,
               "snapshot": snap, "release": release, "release_phase": rel}

        if new_key:
            # the crawl's delta: a new snapshot partition holding only the new pages
            inc_runs = []
            for j in range(args.inc_repeats):
                key = new_key if j == 0 else f"{NEW_SOURCE}.{NEW_STAMP[:-2]}{j:02d}"
                workers[0].call(op="add_partition", key=key)
                if args.wait_quiet:
                    wait_quiet(args.wait_quiet, args.quiet_cores, echo)
                with Phase() as ph:
                    inc = workers[0].call(op="run", job="snapshot_job", partition=key, max_concurrent=1)
                inc_runs.append({**inc, "phase": ph.result(inc["cpu"]), "key": key})
                echo(f"  incremental snapshot {key}: {ph.wall:.2f} s (worker CPU {inc['cpu']:.2f} s; "
                     f"other processes {inc_runs[-1]['phase']['other_cores']:.2f} cores)")
                if j == 0:
                    with Phase() as ph:
                        rel2 = workers[0].call(op="run", job="release_job", partition=RELEASE, max_concurrent=1)
                    out["release_after"], out["release_after_phase"] = rel2, ph.result(rel2["cpu"])
                    echo(f"  release phase after the increment: {ph.wall:.1f} s")
            out["incremental_runs"] = inc_runs
            extra = []
            for j, how in enumerate(e for e in args.inc_executors.split(",") if e.strip()):
                how = how.strip()
                if how not in EXECUTORS:
                    raise SystemExit(f"unknown executor {how!r}; choose from {', '.join(EXECUTORS)}")
                key = f"{NEW_SOURCE}.{NEW_STAMP[:-4]}01{j:02d}"
                workers[0].call(op="add_partition", key=key)
                with Phase() as ph:
                    r = workers[0].call(op="run", job="snapshot_job", partition=key, max_concurrent=1, executor=how)
                extra.append({**r, "phase": ph.result(r["cpu"]), "key": key})
                echo(f"  incremental snapshot {key} with the {how} executor: {ph.wall:.2f} s")
            out["incremental_other_executors"] = extra
            # a fresh process per crawl (as `corpus snapshot` runs it): start-up, imports and first-call
            # costs (models, lazily built tables) are paid by the incremental run itself
            key = f"{NEW_SOURCE}.{NEW_STAMP[:-4]}0200"
            workers[0].call(op="add_partition", key=key)
            with Phase() as ph:
                cold = Worker("cold", env, home / "worker-cold.log", args.executor)
                try:
                    r = cold.call(op="run", job="snapshot_job", partition=key, max_concurrent=1)
                finally:
                    cold.close()
            out["incremental_cold"] = {**r, "phase": ph.result(r["cpu"]), "key": key, "startup": cold.startup_s}
            echo(f"  incremental snapshot {key} in a fresh process: {ph.wall:.2f} s (start-up {cold.startup_s:.2f} s)")
        return out
    finally:
        for w in workers:
            w.close()


def step_seconds(run: dict) -> dict[str, float]:
    return {k: e - s for k, (s, e) in run["steps"].items() if s is not None and e is not None}


def per_stage(mode: dict) -> dict[str, tuple[float, float]]:
    """stage -> (busy wall seconds, CPU seconds), snapshot stages summed over the partitions."""
    out: dict[str, tuple[float, float]] = {}
    for r in [*mode["snapshots"].values(), mode["release"]]:
        cpu = r.get("step_cpu", {})
        for k, v in step_seconds(r).items():
            b, c = out.get(k, (0.0, 0.0))
            out[k] = (b + v, c + cpu.get(k, float("nan")))
    return out


def _f(x: float, fmt: str) -> str:
    return "-" if x != x else format(x, fmt)


def report(info: dict, rounds: list[dict], echo) -> dict:
    docs = info["base_docs"]
    summary: dict = {"rounds": []}
    for i, rnd in enumerate(rounds, 1):
        m1, m2 = rnd[1], rnd[2]
        print(f"\n=== round {i} (order: {' then '.join(f'{w} worker(s)' for w in rnd['order'])}) ===")
        s1, s2 = per_stage(m1), per_stage(m2)
        print("per stage: busy = Dagster step start->end (event log), CPU = the worker's user+sys in that interval,")
        print("both summed over the 2 snapshot partitions; docs/s = base pages / busy s (per worker process;")
        print("with 2 workers the partitions' steps overlap); docs/CPU-s = base pages / CPU s")
        hdr = (f"{'stage':<19}{'1w busy':>9}{'1w CPU':>8}{'docs/s':>9}{'docs/CPU-s':>11}"
               f"{'2w busy':>9}{'2w CPU':>8}{'docs/s':>9}{'docs/CPU-s':>11}")
        print(hdr)
        print("-" * len(hdr))
        for stage in (*SNAPSHOT_STEPS, *RELEASE_STEPS):
            if stage not in s1 or stage not in s2:
                continue
            (b1, c1), (b2, c2) = s1[stage], s2[stage]
            print(f"{stage:<19}{b1:>9.2f}{_f(c1, '.2f'):>8}{docs / b1:>9.1f}{_f(docs / c1 if c1 else float('nan'), '.1f'):>11}"
                  f"{b2:>9.2f}{_f(c2, '.2f'):>8}{docs / b2:>9.1f}{_f(docs / c2 if c2 else float('nan'), '.1f'):>11}")

        e1 = m1["snapshot"]["wall"] + m1["release_phase"]["wall"]
        e2 = m2["snapshot"]["wall"] + m2["release_phase"]["wall"]
        c_e1 = m1["snapshot"]["worker_cpu"] + m1["release_phase"]["worker_cpu"]
        c_e2 = m2["snapshot"]["worker_cpu"] + m2["release_phase"]["worker_cpu"]
        o_e1 = (m1["snapshot"]["other_cores"] * m1["snapshot"]["wall"] + m1["release_phase"]["other_cores"] * m1["release_phase"]["wall"]) / e1
        o_e2 = (m2["snapshot"]["other_cores"] * m2["snapshot"]["wall"] + m2["release_phase"]["other_cores"] * m2["release_phase"]["wall"]) / e2
        rows = [
            ("snapshot phase", m1["snapshot"]["wall"], m2["snapshot"]["wall"], m1["snapshot"]["worker_cpu"],
             m2["snapshot"]["worker_cpu"], m1["snapshot"]["other_cores"], m2["snapshot"]["other_cores"]),
            ("release phase", m1["release_phase"]["wall"], m2["release_phase"]["wall"], m1["release_phase"]["worker_cpu"],
             m2["release_phase"]["worker_cpu"], m1["release_phase"]["other_cores"], m2["release_phase"]["other_cores"]),
            ("end to end", e1, e2, c_e1, c_e2, o_e1, o_e2),
        ]
        print(f"\nwall clock over the {docs} base pages (warm workers; start-up and setup excluded); CPU = workers'")
        print("user+sys; other = cores used meanwhile by processes outside this benchmark (2 = the whole machine)")
        hdr = (f"{'':<16}{'1w s':>8}{'docs/s':>8}{'CPU s':>8}{'other':>7}"
               f"{'2w s':>9}{'docs/s':>8}{'CPU s':>8}{'other':>7}{'speedup 2w/1w':>15}")
        print(hdr)
        print("-" * len(hdr))
        for label, t1, t2, c1, c2, o1, o2 in rows:
            print(f"{label:<16}{t1:>8.2f}{docs / t1:>8.1f}{c1:>8.1f}{o1:>7.2f}"
                  f"{t2:>9.2f}{docs / t2:>8.1f}{c2:>8.1f}{o2:>7.2f}{t1 / t2:>14.2f}x")
        runs2 = list(m2["snapshots"].values())
        if len(runs2) == 2:
            def overlap(stage: str) -> float:
                (s0, e0), (s1, e1) = runs2[0]["steps"].get(stage, (0, 0)), runs2[1]["steps"].get(stage, (0, 0))
                return max(0.0, min(e0, e1) - max(s0, s1)) if None not in (s0, e0, s1, e1) else 0.0
            print("2 workers: seconds during which both partitions ran the same stage at once: "
                  + ", ".join(f"{k} {overlap(k):.2f}" for k in SNAPSHOT_STEPS))
        ov1 = sum(r["end"] - r["start"] - sum(step_seconds(r).values()) for r in m1["snapshots"].values())
        ov_rel = (m1["release"]["end"] - m1["release"]["start"]) - sum(step_seconds(m1["release"]).values())
        print(f"Dagster run overhead outside the steps (1 worker): {ov1:.2f} s over the {len(m1['snapshots'])} "
              f"snapshot runs, {ov_rel:.2f} s in the release run")
        print(f"worker start-up (interpreter + imports + Definitions + instance), not timed above: "
              f"{', '.join(f'{x:.2f}' for x in m1['startup'])} s (1w), {', '.join(f'{x:.2f}' for x in m2['startup'])} s (2w); "
              f"setup (registry_job, partitions, release_specs sensor) {m1['setup']:.2f} / {m2['setup']:.2f} s")

        a = m1["snapshot"]["wall"]
        runs = m1["incremental_runs"]
        walls = [r["phase"]["wall"] for r in runs]
        med = sorted(range(len(runs)), key=lambda j: walls[j])[(len(runs) - 1) // 2]  # the median run (lower middle)
        inc, ip = runs[med], runs[med]["phase"]
        b = ip["wall"]
        st = m1["startup"][0]
        inc_steps, inc_cpu = step_seconds(inc), inc.get("step_cpu", {})
        new_docs = info["new_docs"]
        print(f"\nincremental crawl: {new_docs} new pages ({new_docs / docs:.2%} of the {docs} base pages) in a new "
              f"snapshot partition ({inc['counts']['raw_items']} items)")
        print(f"  (a) full rebuild: both base partitions from scratch, 1 worker: {a:.2f} s "
              f"(CPU {m1['snapshot']['worker_cpu']:.2f} s, other processes {m1['snapshot']['other_cores']:.2f} cores)")
        if len(runs) > 1:
            print(f"  (b) snapshot_job for the new partition only, same warm worker, {len(runs)} times (the first is "
                  f"the new pages' first snapshot, the others re-capture them as further new partitions): "
                  + ", ".join(f"{w:.2f}" for w in walls) + " s; median:")
        print(f"  (b) {b:.2f} s (CPU {ip['worker_cpu']:.2f} s, other processes {ip['other_cores']:.2f} cores)"
              + ("" if len(runs) > 1 else "  [snapshot_job for the new partition only, same warm worker]"))
        print("      steps (wall / CPU s): " + ", ".join(
            f"{k} {inc_steps[k]:.2f}/{_f(inc_cpu.get(k, float('nan')), '.2f')}" for k in SNAPSHOT_STEPS if k in inc_steps)
            + f"; run overhead outside the steps {inc['end'] - inc['start'] - sum(inc_steps.values()):.2f}")
        ratio = b / a
        ratio_cpu = ip["worker_cpu"] / m1["snapshot"]["worker_cpu"]
        print(f"  ratio b/a = {ratio:.2%} wall (target < 5%, release-level steps excluded): "
              f"{'MET' if ratio < 0.05 else 'NOT MET'}; CPU ratio {ratio_cpu:.2%}")
        cold = m1["incremental_cold"]
        cold_steps = step_seconds(cold)
        ratio_cold = cold["phase"]["wall"] / (a + st)
        print(f"  fresh process per run (as `corpus snapshot` runs it): the incremental snapshot in a new worker process "
              f"took {cold['phase']['wall']:.2f} s from spawn to done (start-up {cold['startup']:.2f} s, steps "
              + ", ".join(f"{k} {cold_steps[k]:.2f}" for k in SNAPSHOT_STEPS if k in cold_steps)
              + f"); vs a + the 1-worker start-up ({a + st:.2f} s): {ratio_cold:.2%}")
        print(f"  per page: full rebuild {a / docs * 1000:.2f} ms, incremental {b / max(new_docs, 1) * 1000:.2f} ms")
        for r in m1.get("incremental_other_executors", []):
            steps = step_seconds(r)
            outside = r["end"] - r["start"] - sum(steps.values())
            print(f"  b with the {r['executor']} executor (one process per step{', forked from a server with the project preloaded' if r['executor'] == 'forkserver' else ''}): "
                  f"{r['phase']['wall']:.2f} s = {r['phase']['wall'] / a:.2%} of a (the same executor would also slow a); "
                  f"steps {sum(steps.values()):.2f} s, outside the steps {outside:.2f} s "
                  f"(other processes {r['phase']['other_cores']:.2f} cores)")
        ra, rp = m1["release_after"], m1["release_after_phase"]
        print(f"  informational: release_job after the increment {rp['wall']:.2f} s (first release {m1['release_phase']['wall']:.2f} s): "
              + ", ".join(f"{k} {v:.2f}" for k, v in step_seconds(ra).items()))
        c0, c1 = m1["release"]["counts"], ra["counts"]
        if "tokenized_records" in c1:
            changed = c0.get("tokenizer_digest") != c1.get("tokenizer_digest")
            print(f"    token views: {c1['tokenized_records']} records tokenized, {c1['reused_records']} reused "
                  f"(first release: {c0.get('tokenized_records')} tokenized); retrained tokenizer "
                  f"{'changed (new digest, so no cached view matches)' if changed else 'unchanged'}")
        summary["rounds"].append({
            "order": rnd["order"], "stages_1w": s1, "stages_2w": s2,
            "snapshot_docs_s": [docs / m1["snapshot"]["wall"], docs / m2["snapshot"]["wall"]],
            "release_docs_s": [docs / m1["release_phase"]["wall"], docs / m2["release_phase"]["wall"]],
            "e2e_docs_s": [docs / e1, docs / e2],
            "speedup_snapshot": m1["snapshot"]["wall"] / m2["snapshot"]["wall"], "speedup_e2e": e1 / e2,
            "incremental_ratio": ratio, "incremental_ratio_cpu": ratio_cpu, "incremental_ratio_cold": ratio_cold,
            "a": a, "b": b, "modes": {1: m1, 2: m2},
        })
    if len(rounds) > 1:
        rs = summary["rounds"]
        sp = ", ".join(f"{r['speedup_e2e']:.2f}x" for r in rs)
        ss = ", ".join(f"{r['speedup_snapshot']:.2f}x" for r in rs)
        ir = ", ".join(f"{r['incremental_ratio']:.2%}" for r in rs)
        print(f"\nover {len(rounds)} rounds: speedup 2w/1w end to end {sp}; snapshot phase {ss}; incremental b/a {ir}")
        # each mode's least disturbed round (the fastest), as the other benchmarks report each side's best round
        print("best round of each mode (least disturbed by other load):")
        for label, key in (("snapshot phase", "snapshot"), ("release phase", "release_phase")):
            best = {w: min((rnd[w] for rnd in rounds), key=lambda m: m[key]["wall"]) for w in (1, 2)}
            t1, t2 = best[1][key]["wall"], best[2][key]["wall"]
            print(f"  {label:<15} 1w {t1:.2f} s ({docs / t1:.1f} docs/s, other {best[1][key]['other_cores']:.2f} cores), "
                  f"2w {t2:.2f} s ({docs / t2:.1f} docs/s, other {best[2][key]['other_cores']:.2f} cores): speedup {t1 / t2:.2f}x")
        e = {w: min(m[w]["snapshot"]["wall"] + m[w]["release_phase"]["wall"] for m in rounds) for w in (1, 2)}
        print(f"  {'end to end':<15} 1w {e[1]:.2f} s ({docs / e[1]:.1f} docs/s), 2w {e[2]:.2f} s ({docs / e[2]:.1f} docs/s): "
              f"speedup {e[1] / e[2]:.2f}x")
        print(f"  incremental b/a: lowest {min(r['incremental_ratio'] for r in rs):.2%}, highest {max(r['incremental_ratio'] for r in rs):.2%}")
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where fetch_debian_docs.sh unpacked the pages")
    p.add_argument("--docs", type=int, default=0, help="use the first N pages (base + new; 0: all)")
    p.add_argument("--new-fraction", type=float, default=0.01, help="new pages of the incremental crawl relative to the base (default 0.01)")
    p.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary trained by the release (default 4096)")
    p.add_argument("--rounds", type=int, default=1, help="repeat the 1-worker and 2-worker runs, alternating their order")
    p.add_argument("--inc-repeats", type=int, default=3,
                   help="incremental snapshots to time (the first holds the new pages; the others re-capture them as "
                        "further new partitions); b = the median (default 3)")
    p.add_argument("--executor", choices=EXECUTORS, default="in_process",
                   help="how a worker executes a run: execute_in_process (default), or execute_job with Dagster's "
                        "multiprocess executor (one spawned process per step), or the same with start_method "
                        "forkserver preloading corpus_assets.definitions")
    p.add_argument("--inc-executors", default="multiprocess,forkserver",
                   help="also time the incremental snapshot with these executors, once each, on further new "
                        "partitions (comma list; '' for none; default multiprocess,forkserver)")
    p.add_argument("--instance-config", type=Path, default=None,
                   help="copy this dagster.yaml into each temp DAGSTER_HOME (e.g. the project's shipped instance "
                        "config, whose pools limit concurrent steps); default: none, Dagster's defaults")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="before each timed phase, wait up to this long for the machine to be quiet (default 0: do not wait)")
    p.add_argument("--quiet-cores", type=float, default=0.3, help="'quiet' = fewer busy cores than this over 3 s (default 0.3)")
    p.add_argument("--quick", action="store_true", help="smoke run: 200 pages, vocabulary 512, 1 round")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (homes, worker logs)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return run_worker(args.executor)
    if args.quick:
        args.docs = args.docs or 200
        args.vocab_size = 512
        args.rounds = 1
        args.inc_repeats = 1

    def echo(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    root = args.root.resolve()
    if not root.is_dir():
        raise SystemExit(f"{root} does not exist: run `bash bench/fetch_debian_docs.sh` first")
    pages = discover_pages(root)
    if args.docs:
        pages = pages[: args.docs]
    n_new = max(1, round(len(pages) * args.new_fraction / (1 + args.new_fraction)))
    if len(pages) - n_new < 2:
        raise SystemExit(f"need at least {n_new + 2} pages, have {len(pages)}")
    base, new = pages[:-n_new], pages[-n_new:]
    halves = {SOURCES[0]: base[0::2], SOURCES[1]: base[1::2]}

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="corpus-bench-e2e-"))
    try:
        inputs = tmp / "inputs"
        sizes = {sid: stage_inputs(root, rels, inputs / sid) for sid, rels in halves.items()}
        sizes[NEW_SOURCE] = stage_inputs(root, new, inputs / NEW_SOURCE)
        sources_path, releases = write_configs(tmp, inputs, args.vocab_size)
        keys = [f"{sid}.{BASE_STAMP}" for sid in SOURCES]
        new_key = f"{NEW_SOURCE}.{NEW_STAMP}"
        info = {"base_docs": len(base), "new_docs": len(new), "bytes": sizes}

        print(f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}; "
              f"load average at start {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"pages: {len(base)} base ({(sizes[SOURCES[0]] + sizes[SOURCES[1]]) / MB:.1f} MB) in 2 snapshot partitions "
              f"({SOURCES[0]} {len(halves[SOURCES[0]])}, {SOURCES[1]} {len(halves[SOURCES[1]])}) + {len(new)} new "
              f"({sizes[NEW_SOURCE] / MB:.2f} MB) for the incremental crawl; from {root}")
        print(f"release {RELEASE}: releases/demo.yaml settings with BPE vocab {args.vocab_size}, no mixture (training split "
              f"read once), no max_tokens; executor: {args.executor}; instance config: "
              f"{args.instance_config or 'none (Dagster defaults, SQLite storage)'}")

        rounds: list[dict] = []
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            rnd: dict = {"order": order}
            for w in order:
                echo(f"round {r + 1}: {w} worker(s)")
                home = tmp / f"round{r + 1}-w{w}"
                env = mode_env(home, sources_path, releases, args.instance_config)
                rnd[w] = run_mode(w, home, env, args, keys, new_key if w == 1 else None, echo)
                if not args.keep:
                    shutil.rmtree(home, ignore_errors=True)
            rounds.append(rnd)

        m = rounds[0][1]
        print("\nsnapshot outcomes (round 1, 1 worker):")
        for k, r in sorted(m["snapshots"].items()):
            v = r["counts"]
            print(f"  {k}: raw {v['raw_items']}, canonical {v['canonical']}, curated {v['curated']}, signatures {v['signatures']}")
        rc = m["release"]["counts"]
        print(f"release: {rc['dedup_records']} curated records -> {rc['dedup_kept']} kept ({rc['exact_removed']} exact, "
              f"{rc['near_removed']} near duplicates removed); splits {rc['splits']}; vocab {rc['tokenizer_vocab']}; "
              f"{rc['views']} views, {rc['tokens']} tokens (rejected {rc['views_rejected'] or 0}); blocks {rc['blocks']}")
        summary = report(info, rounds, echo)
        print(f"\nbenchmark wall time {time.perf_counter() - started:.0f} s; load average at end "
              f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.json:
            args.json.write_text(json.dumps({"info": info, "args": {k: str(v) for k, v in vars(args).items()},
                                             **summary}, indent=2, default=str))
    finally:
        if args.keep:
            echo(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
