#!/usr/bin/env python3
"""Release increments (issue 18): what a release rebuild costs after +1% new records, with a
frozen tokenizer, as a share of a full release build of the same records.

Records (real text on every machine with CPython; nothing downloaded): every ``*.py`` file of the
running Python's standard library (``sysconfig.get_paths()["stdlib"]``, site-packages excluded,
sorted by relative path), cut at blank lines into pieces merged up to at least ``--min-chars``
characters; every 51st piece is held out. The rest is the ``stdlib`` source (one jsonl
file, ``text_document`` adapter, ``profile: code``); the held-out pieces are split alternately into
two delta sources (``stdlib_new1``, ``stdlib_new2``: each 1% of the base, 50 base pieces per delta
piece), the drop folders of two increments (a jsonl snapshot re-reads its whole file, so a delta
arrives as its own source). Until 2026-12-07 every 101st piece was held out, so each delta was
0.5% of the base, not the 1% this bench names (docs/benchmarks.md says which runs measured that).

Release spec (``inc`` and, for the baseline, ``full``; identical): the three sources, split
0.8/0.1/0.1, byte-level BPE trained on the training split (``--vocab-size``) with ``freeze: true``,
no mixture (the training split read once), atomic packing at ``--seq-len`` in ``--order`` (default
``append``: the samples of the previous build keep their order, so the shards before the new samples
are kept; ``plan``: the training permutation moves every sample), shards of ``--shard-blocks``
blocks (default 16: many small shards; the project default is 2^22 positions, 2048 blocks of 2048).

Steps, one process, one persistent Dagster instance (temp ``DAGSTER_HOME``, SQLite), release_job run
the way ``corpus`` / the UI launch it:
  capture     registry_job (untimed); snapshot_job of ``stdlib``
  first       release_job(inc) — the first build (trains and freezes the tokenizer)
  capture     snapshot_job of ``stdlib_new1``
  full        release_job(full) — the baseline: a full release build of the same records as
              ``increment`` (base + the first delta), in process, nothing to reuse (its own tokenizer,
              trained on its own training split, has a digest no stored view was made with)
  increment   release_job(inc) — execute_in_process (the project default executor, in process),
              right after ``full``: the two runs of a pair meet the machine in the same state
  floor       release_job(inc) again, right after ``increment``: the same inputs, nothing new — what
              any release run costs at this size (Dagster's run and steps, each layer's pass over the
              release, the publish reading every shard); increment - floor is what the +1% adds
  capture     snapshot_job of ``stdlib_new2``
  increment2  release_job(inc) — dagster.execute_job with Dagster's multiprocess executor (a
              process per step), the same amount of new work as ``increment`` (skip: --no-multiprocess)
  dagster alone  release_job's assets and checks with empty bodies (the same keys, partitions,
              dependencies, resources; ``bare_release_definitions``), on a release partition of its own,
              max(3, --repeat) times: Dagster's run and step machinery alone, the part of the floor no
              layer can remove
Printed per run: wall clock of the run, its CPU time (every thread of the process, and reaped child
processes), the sum of its steps (Dagster's STEP_START -> STEP_SUCCESS)
and each step; the token views' tokenized / reused / adopted record counts; the ratios increment / full (target
<= 10%: the release rebuild alone against a full release build, snapshots already captured), increment / first
(the same against the run's other full build, of the base records: the spread of the two says how noisy the
machine was), end to end
(snapshot_job of the +1% plus the increment, against snapshot_job of every source the full build reads
plus the full build) and increment2 (multiprocess) / increment.

``--site-packages-mb M`` makes the release bigger with the same kind of text: after the standard
library's pieces come those of the environment's site-packages ``*.py`` (the project's pinned
dependencies, sorted by relative path) up to M million characters, held out the same way.

Run:  .venv/bin/python bench/bench_increment.py [--min-chars 600] [--vocab-size 8192] [--seq-len 2048] [--shard-blocks 16]
      [--order append|plan] [--site-packages-mb 0] [--no-multiprocess] [--deletion] [--instance-config FILE]
      [--profile FILE] [--repeat N]

``--repeat N`` runs N pairs (full, then increment, then the floor), every run from the same stored state, and
reports the runs with the median wall of each kind, every wall, and the ratio of each pair with
their median: on a noisy machine one run's ratio says little, and a pair's two runs share the
machine's state of the moment (until 2026-12-07 15:30 UTC the N increments ran before the N full builds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import sysconfig
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from statistics import median
from typing import Optional

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(PROJECT))

from _common import cpu_model  # noqa: E402

HOLD_OUT_EVERY = 51  # each of the two deltas: 1 piece per 102 = 1% of the 100 base pieces per 102
STEPS = ("release_inputs", "dedup_clusters", "splits", "tokenizer", "token_views", "mixture_plan", "packed_shards",
         "release_manifest")


def python_files(root: Path) -> list[Path]:
    """Every ``*.py`` file under ``root`` outside site-packages, sorted by relative path."""
    return sorted((p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts and p.is_file()),
                  key=lambda p: p.relative_to(root).as_posix())


def file_pieces(files: list[Path], min_chars: int, max_chars: float = float("inf")) -> list[str]:
    """The files cut at blank lines into pieces merged up to at least ``min_chars`` characters,
    stopping after the file whose pieces reach ``max_chars`` characters in all."""
    pieces: list[str] = []
    total = 0
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        cur: list[str] = []
        size = 0
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            cur.append(block)
            size += len(block)
            if size >= min_chars:
                pieces.append("\n\n".join(cur))
                total += len(pieces[-1])
                cur, size = [], 0
        if cur and size >= min_chars // 4:
            pieces.append("\n\n".join(cur))
            total += len(pieces[-1])
        if total >= max_chars:
            break
    return pieces


def corpus_pieces(min_chars: int, site_packages_mb: float) -> list[str]:
    """The standard library's pieces, then (``site_packages_mb`` > 0) the pieces of the running
    environment's site-packages (``sysconfig.get_paths()["purelib"]``: the project's pinned
    dependencies) up to that many million characters: the same kind of text, more of it."""
    pieces = file_pieces(python_files(Path(sysconfig.get_paths()["stdlib"])), min_chars)
    if site_packages_mb > 0:
        purelib = Path(sysconfig.get_paths()["purelib"])
        files = sorted((p for p in purelib.rglob("*.py") if p.is_file()), key=lambda p: p.relative_to(purelib).as_posix())
        pieces += file_pieces(files, min_chars, site_packages_mb * 1e6)
    return pieces


def _write_jsonl(folder: Path, items: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "records.jsonl", "w", encoding="utf-8") as f:
        for rid, text in items:
            f.write(json.dumps({"id": rid, "text": text}) + "\n")


def setup(root: Path, args) -> dict[str, int]:
    pieces = corpus_pieces(args.min_chars, args.site_packages_mb)
    if args.limit:
        pieces = pieces[: args.limit]
    # 1 piece in 51 held out, alternating between the two deltas: each delta is 1% of the base
    base = [(f"p{i:06d}", t) for i, t in enumerate(pieces) if i % HOLD_OUT_EVERY != HOLD_OUT_EVERY - 1]
    held = [(f"p{i:06d}", t) for i, t in enumerate(pieces) if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1]
    _write_jsonl(root / "stdlib", base)
    _write_jsonl(root / "stdlib_new1", held[0::2])
    _write_jsonl(root / "stdlib_new2", held[1::2])
    gov = "governance: {license: PSF-2.0, rights_evidence: https://docs.python.org/3/license.html}"
    (root / "sources.yaml").write_text("sources:\n" + "".join(
        f"  - id: {s}\n    kind: jsonl\n    root: {root / s}\n    include: ['*.jsonl']\n    adapter: text_document\n"
        f"    profile: code\n    {gov}\n" for s in ("stdlib", "stdlib_new1", "stdlib_new2")))
    rel = root / "releases"
    rel.mkdir()
    body = ("snapshots: {sources: [stdlib, stdlib_new1, stdlib_new2]}\n"
            "split: {fractions: [0.8, 0.1, 0.1]}\n"
            f"tokenizer: {{train: {{vocab_size: {args.vocab_size}, min_frequency: 2}}, freeze: true, "
            "special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'}\n"
            f"packing: {{seq_len: {args.seq_len}, mode: atomic, overlength: split, pad_token: '<|pad|>', order: {args.order}}}\n"
            f"shards: {{positions: {args.shard_blocks * args.seq_len}}}\n")
    for name in ("inc", "full"):
        (rel / f"{name}.yaml").write_text(f"name: {name}\n" + body)
    home = root / "home"
    (home / "dagster").mkdir(parents=True)
    if args.instance_config is not None:  # e.g. deploy/dagster.postgres.yaml (its DAGSTER_PG_* from the environment)
        shutil.copyfile(args.instance_config, home / "dagster" / "dagster.yaml")
    os.environ.update(CORPUS_HOME=str(home), DAGSTER_HOME=str(home / "dagster"), CORPUS_SOURCES=str(root / "sources.yaml"),
                      CORPUS_RELEASES=str(rel), CORPUS_CURATION=str(PROJECT / "curation.yaml"))
    os.environ["CORPUS_EXECUTOR"] = "multiprocess"  # for execute_job; execute_in_process always runs in process
    return {"base": len(base), "new1": len(held[0::2]), "new2": len(held[1::2]),
            "chars": sum(len(t) for _, t in base)}


def step_times(instance, run_id: str) -> dict[str, float]:
    import dagster as dg

    starts: dict[str, float] = {}
    out: dict[str, float] = {}
    for e in instance.all_logs(run_id):
        ev = e.dagster_event
        if ev is None or e.step_key is None:
            continue
        if ev.event_type == dg.DagsterEventType.STEP_START:
            starts[e.step_key] = e.timestamp
        elif ev.event_type == dg.DagsterEventType.STEP_SUCCESS and e.step_key in starts:
            out[e.step_key] = e.timestamp - starts[e.step_key]
    return out


def token_view_counts(instance, run_id: str) -> tuple[int, int, int]:
    import dagster as dg

    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = e.dagster_event.event_specific_data.materialization
        if m.asset_key.path[-1] == "token_views":
            md = m.metadata
            return (md["tokenized_records"].value, md["reused_records"].value,
                    md["adopted_records"].value if "adopted_records" in md else 0)
    return -1, -1, -1


def shards_kept(instance, run_id: str) -> tuple[int, int]:
    """(shards kept from the previous build, shards) of the run's packed_shards."""
    import dagster as dg

    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = e.dagster_event.event_specific_data.materialization
        if m.asset_key.path[-1] == "packed_shards":
            md = m.metadata
            return (md["shards_kept"].value if "shards_kept" in md else 0), md["shards"].value
    return -1, -1


def tombstone_scan(instance, run_id: str) -> str:
    """The run's no_tombstoned_records check: passed, layer versions read / skipped as known clean."""
    import dagster as dg

    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        d = e.dagster_event.event_specific_data
        if d.check_name == "no_tombstoned_records" and d.metadata.get("tombstones") and d.metadata["tombstones"].value \
                and "versions_scanned" in d.metadata:
            return (f"{'passed' if d.passed else 'FAILED'}, {d.metadata['versions_scanned'].value} versions read, "
                    f"{d.metadata['versions_known_clean'].value} known clean")
    return "no tombstones"


def _empty_body(specs: list, checks: list):
    import dagster as dg

    def body(context):
        for spec in specs:
            yield dg.MaterializeResult(asset_key=spec.key)
        for check in checks:
            yield dg.AssetCheckResult(asset_key=check.asset_key, check_name=check.name, passed=True)
    return body


def _empty_observation(context):
    import dagster as dg

    return dg.DataVersionsByPartition({context.partition_key: dg.DataVersion("bare")})


def bare_release_definitions(defs):
    """Definitions whose ``release_job_bare`` has release_job's assets and checks — the same keys,
    partitions, dependencies (partition mappings included), resources and executor — with bodies
    that do nothing: what Dagster's run and step machinery alone costs for a release run, the part
    of the floor no layer can remove. Every other asset is the project's, unchanged (the release
    assets' upstream dependencies)."""
    import dagster as dg

    keys = {dg.AssetKey(step) for step in STEPS}
    partitions = defs.resolve_job_def("release_job").partitions_def
    bare, others = [], []
    for ad in defs.assets:
        if isinstance(ad, dg.SourceAsset):  # release_inputs: an observable source asset, observed by the run
            if ad.key in keys:
                bare.append(dg.observable_source_asset(
                    key=ad.key, partitions_def=ad.partitions_def, group_name=ad.group_name,
                    required_resource_keys=set(ad.required_resource_keys))(_empty_observation))
            else:
                others.append(ad)
            continue
        own = set(ad.keys) & keys
        if not own:
            others.append(ad)
            continue
        if own != set(ad.keys):
            raise RuntimeError(f"{ad.op.name} mixes release assets with others: cannot stand in for it")
        specs, checks = list(ad.specs), list(ad.check_specs)
        bare.append(dg.multi_asset(name=ad.op.name, specs=specs, check_specs=checks,
                                   required_resource_keys=set(ad.required_resource_keys))(_empty_body(specs, checks)))
    if {k for ad in bare for k in (ad.keys if isinstance(ad, dg.AssetsDefinition) else [ad.key])} != keys:
        raise RuntimeError(f"release_job's assets are not {sorted(s for s in STEPS)}: update STEPS")
    job = dg.define_asset_job("release_job_bare", selection=dg.AssetSelection.assets(*keys), partitions_def=partitions)
    return dg.Definitions(assets=bare + others, asset_checks=defs.asset_checks, resources=defs.resources,
                          executor=defs.executor, jobs=[job])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-chars", type=int, default=600, help="a record is blank-line blocks merged up to this size")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N pieces (0: all)")
    ap.add_argument("--site-packages-mb", type=float, default=0.0,
                    help="add this many million characters of the environment's site-packages *.py (a bigger release)")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--shard-blocks", type=int, default=16, help="blocks per shard (shards.positions = this x seq_len)")
    ap.add_argument("--order", choices=("append", "plan"), default="append",
                    help="packing.order: append keeps the shards before the new samples; plan re-orders the training split")
    ap.add_argument("--no-multiprocess", action="store_true", help="skip the multiprocess-executor increment")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write a cProfile of the (in-process) increment run to this file (pstats format)")
    ap.add_argument("--deletion", action="store_true",
                    help="apply a deletion request (one base record) after the first capture: every build then runs "
                         "the no_tombstoned_records scan")
    ap.add_argument("--instance-config", type=Path, default=None,
                    help="copy this dagster.yaml into the bench's DAGSTER_HOME (default: none, Dagster's SQLite storage)")
    ap.add_argument("--keep", type=Path, default=None, help="build under this folder and keep it (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run this many pairs (full build, then increment), every run from the same stored state "
                         "(the data root is copied before the first and restored before each other; Dagster's instance "
                         "keeps every run); report the runs with the median wall and every pair's ratio: on a noisy "
                         "machine one run's ratio says little")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_increment-")
        root = Path(tmp.name)
    else:
        root = args.keep
        root.mkdir(parents=True, exist_ok=False)
    sizes = setup(root, args)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; python {sys.version.split()[0]}; instance config "
          f"{args.instance_config or 'none (Dagster defaults, SQLite storage)'}")
    print(f"records: base {sizes['base']:,} ({sizes['chars'] / 1e6:.1f} M chars), increments {sizes['new1']:,} + "
          f"{sizes['new2']:,} ({sizes['new1'] / max(sizes['base'], 1):.2%} + {sizes['new2'] / max(sizes['base'], 1):.2%} "
          f"of the base); vocab {args.vocab_size}, seq_len {args.seq_len}, {args.shard_blocks} blocks per shard, "
          f"packing.order {args.order}", flush=True)

    import dagster as dg
    from dagster import DagsterInstance

    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.keys import snapshot_key

    defs = build_definitions()
    instance = DagsterInstance.get()
    t0 = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)
    instance.add_dynamic_partitions("releases", ["inc", "full"])
    assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success

    captures: dict[str, float] = {}  # source -> seconds of its snapshot_job (for the end-to-end ratio)

    def snapshot(source: str, minute: int) -> None:
        key = snapshot_key(source, t0 + timedelta(minutes=minute))
        instance.add_dynamic_partitions("snapshots", [key])
        started = time.perf_counter()
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
        captures[source] = time.perf_counter() - started
        print(f"(not in the release ratio) snapshot_job {key}: {captures[source]:.1f} s", flush=True)

    def cpu_seconds() -> float:
        """CPU time of this process (every thread: tokenizers and Arrow run their own) and its
        reaped children (the multiprocess executor's step processes)."""
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def release(name: str, how: str = "in_process") -> dict:
        started, cpu0 = time.perf_counter(), cpu_seconds()
        if how == "in_process":
            run_id = defs.resolve_job_def("release_job").execute_in_process(
                instance=instance, partition_key=name, raise_on_error=True).run_id
        else:
            from dagster._core.definitions.reconstruct import ReconstructableRepository

            recon = ReconstructableRepository.for_module(
                "corpus_assets.definitions", "defs", working_directory=str(PROJECT)).get_reconstructable_job("release_job")
            with dg.execute_job(recon, instance=instance, tags={"dagster/partition": name}, raise_on_error=True,
                                run_config={"execution": {"config": {"multiprocess": {"max_concurrent": 1}}}}) as res:
                run_id = res.run_id
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu0
        return {"wall": wall, "cpu": cpu, "steps": step_times(instance, run_id), "views": token_view_counts(instance, run_id),
                "shards": shards_kept(instance, run_id), "scan": tombstone_scan(instance, run_id)}

    home = Path(os.environ["CORPUS_HOME"])
    saved = root / "saved-data-root"

    def save_data_root() -> None:
        """Everything under CORPUS_HOME but Dagster's home (which stays live and keeps every run)."""
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(home, saved, symlinks=True, ignore=lambda d, names: ["dagster"] if Path(d) == home else [])

    def restore_data_root() -> None:
        for entry in home.iterdir():
            if entry.name != "dagster":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        shutil.copytree(saved, home, symlinks=True, dirs_exist_ok=True)

    def paired(profile: Optional[Path] = None) -> tuple[dict, dict, dict, list[tuple[float, float, float]]]:
        """``--repeat`` pairs of (full build, increment), each run from the data root as it is now,
        the two runs of a pair back to back so that they meet the machine in the same state, each
        pair followed by the floor (the increment rebuilt with nothing new); the increment, full and
        floor runs with the median wall of each kind (every wall kept), and per pair the ratios
        (increment / full wall, increment / full CPU, floor / full wall)."""
        if args.repeat > 1:
            save_data_root()
        fulls, incs, floors = [], [], []
        for i in range(args.repeat):
            if args.repeat > 1:
                restore_data_root()
            fulls.append(release("full"))
            if args.repeat > 1:
                restore_data_root()
            if profile is not None and i == 0:
                import cProfile

                prof = cProfile.Profile()
                incs.append(prof.runcall(release, "inc"))
                prof.dump_stats(str(profile))
            else:
                incs.append(release("inc"))
            floors.append(release("inc"))  # nothing new since the increment: what any release_job run costs
            print(f"pair {i + 1}/{args.repeat}: full {fulls[-1]['wall']:.2f} s wall ({fulls[-1]['cpu']:.1f} s CPU), "
                  f"increment {incs[-1]['wall']:.2f} s ({incs[-1]['cpu']:.1f} s CPU): "
                  f"wall {incs[-1]['wall'] / fulls[-1]['wall']:.1%}, CPU {incs[-1]['cpu'] / fulls[-1]['cpu']:.1%}; "
                  f"then a rebuild with nothing new {floors[-1]['wall']:.2f} s = {floors[-1]['wall'] / fulls[-1]['wall']:.1%}",
                  flush=True)
        shutil.rmtree(saved, ignore_errors=True)

        def pick(done: list[dict]) -> dict:
            mid = sorted(done, key=lambda r: r["wall"])[(len(done) - 1) // 2]
            return {**mid, "walls": [r["wall"] for r in done], "step_sums": [sum(r["steps"].values()) for r in done]}

        ratios = [(i["wall"] / f["wall"], i["cpu"] / f["cpu"], z["wall"] / f["wall"]) for i, f, z in zip(incs, fulls, floors)]
        return pick(incs), pick(fulls), pick(floors), ratios

    snapshot("stdlib", 0)
    if args.deletion:
        apply_deletion(snapshot_key("stdlib", t0), "stdlib:p000001")
    runs: dict[str, dict] = {}
    runs["first"] = release("inc")
    report("first", runs["first"])
    snapshot("stdlib_new1", 10)
    # the increment ends each pair, so the data root after the pairs holds it: increment2 builds on it
    runs["increment"], runs["full"], runs["floor"], pair_ratios = paired(args.profile)
    report("increment", runs["increment"])
    report("full (baseline)", runs["full"])
    report("floor (nothing new)", runs["floor"])
    if not args.no_multiprocess:
        snapshot("stdlib_new2", 20)
        runs["increment2"] = release("inc", "multiprocess")
        report("increment2 (multiprocess executor)", runs["increment2"])

    # Dagster alone: release_job's assets and checks with empty bodies, on their own release partition
    # (nothing of inc is touched), a few times for a median: the part of the floor no layer can remove
    instance.add_dynamic_partitions("releases", ["bare"])
    bare_job = bare_release_definitions(defs).resolve_job_def("release_job_bare")
    bare = []
    for _ in range(max(3, args.repeat)):
        started, cpu0 = time.perf_counter(), cpu_seconds()
        run_id = bare_job.execute_in_process(instance=instance, partition_key="bare", raise_on_error=True).run_id
        bare.append({"wall": time.perf_counter() - started, "cpu": cpu_seconds() - cpu0, "steps": step_times(instance, run_id),
                     "views": (0, 0, 0), "shards": (0, 0), "scan": "none (empty bodies)"})
    runs["dagster alone"] = {**sorted(bare, key=lambda r: r["wall"])[(len(bare) - 1) // 2], "walls": [r["wall"] for r in bare]}
    report("dagster alone (empty bodies)", runs["dagster alone"])

    print()
    header = f"{'step':<18}" + "".join(f"{k:>14}" for k in runs)
    print(header)
    for step in STEPS:
        print(f"{step:<18}" + "".join(f"{r['steps'].get(step, float('nan')):>14.2f}" for r in runs.values()))
    print(f"{'sum of steps':<18}" + "".join(f"{sum(r['steps'].values()):>14.2f}" for r in runs.values()))
    print(f"{'run wall':<18}" + "".join(f"{r['wall']:>14.2f}" for r in runs.values()))
    print(f"{'run CPU':<18}" + "".join(f"{r['cpu']:>14.2f}" for r in runs.values()))
    print(f"{'views tok/reu/ado':<18}" + "".join(f"{'%d/%d/%d' % r['views']:>14}" for r in runs.values()))
    print(f"{'shards kept/all':<18}" + "".join(f"{'%d/%d' % r['shards']:>14}" for r in runs.values()))
    inc, full = runs["increment"], runs["full"]
    print(f"\nincrement / full: wall {inc['wall'] / full['wall']:.1%}, steps {sum(inc['steps'].values()) / sum(full['steps'].values()):.1%}, "
          f"CPU {inc['cpu'] / full['cpu']:.1%} "
          "(target <= 10%)" + (f"; median runs of {args.repeat} pairs" if args.repeat > 1 else ""))
    if args.repeat > 1:
        walls, cpus = [w for w, _, _ in pair_ratios], [c for _, c, _ in pair_ratios]
        print("  per pair (full, then the increment right after it), wall: " + " / ".join(f"{r:.1%}" for r in walls)
              + f", median {median(walls):.1%}; CPU: " + " / ".join(f"{r:.1%}" for r in cpus) + f", median {median(cpus):.1%}")
        print("  increment walls " + " / ".join(f"{w:.2f}" for w in inc["walls"]) + " s; full walls "
              + " / ".join(f"{w:.2f}" for w in full["walls"]) + " s; steps: median increment "
              f"{median(inc['step_sums']):.2f} s / median full {median(full['step_sums']):.2f} s = "
              f"{median(inc['step_sums']) / median(full['step_sums']):.1%}")
    # The floor: release_job over the same inputs right after the increment, nothing new to build.
    # Every run pays it (Dagster's run and step machinery, each layer's pass over the whole release,
    # the publish re-reading every shard); what the +1% adds on top of it is the increment's margin.
    floor = runs["floor"]
    floor_ratios = [z for _, _, z in pair_ratios]
    print(f"floor (a rebuild with nothing new, right after the increment) / full: wall {floor['wall'] / full['wall']:.1%}"
          + (" (per pair " + " / ".join(f"{r:.1%}" for r in floor_ratios) + ")" if args.repeat > 1 else "")
          + f"; the increment's margin over it, (increment - floor) / full: {(inc['wall'] - floor['wall']) / full['wall']:.1%}")
    alone = runs["dagster alone"]
    print(f"dagster alone (release_job's {len(STEPS)} assets and their checks, bodies empty; walls "
          + " / ".join(f"{w:.2f}" for w in alone["walls"]) + f" s) / full: wall {alone['wall'] / full['wall']:.1%}; "
          f"the layers' part of the floor, (floor - dagster alone) / full: {(floor['wall'] - alone['wall']) / full['wall']:.1%}")
    # the same increment against the other full build of this run (1% fewer records, its tokenizer
    # trained too): how much of the ratio is one slow or fast full build on a noisy machine
    print(f"increment / first: wall {inc['wall'] / runs['first']['wall']:.1%} (a full build of the base records)")
    # End to end: what taking the +1% into a release costs (its capture + the release rebuild) against
    # building the same release from nothing (every capture it reads + the full release build).
    delta = captures["stdlib_new1"] + inc["wall"]
    scratch = sum(captures.values()) + full["wall"]
    print(f"end to end: (snapshot_job of the +1% {captures['stdlib_new1']:.2f} s + increment {inc['wall']:.2f} s) / "
          f"(snapshot_job of {', '.join(captures)} {sum(captures.values()):.2f} s + full {full['wall']:.2f} s) = "
          f"{delta / scratch:.1%}")
    if "increment2" in runs:
        mp = runs["increment2"]
        print(f"increment, multiprocess / in_process executor: wall {mp['wall'] / inc['wall']:.2f}x "
              f"({mp['wall'] - sum(mp['steps'].values()):.1f} s of its run outside steps; sum of steps "
              f"{sum(mp['steps'].values()) / sum(inc['steps'].values()):.2f}x)")
    if tmp is not None:
        tmp.cleanup()


def apply_deletion(snapshot: str, record_id: str) -> None:
    """File, resolve and apply a record deletion the way the deletion_requests sensor's purge run
    does: tombstones written, the snapshot's layers purged."""
    from corpus_assets.domain.deletion import requests, tombstones
    from corpus_assets.domain.deletion.purge import purge_snapshot
    from corpus_assets.domain.storage.catalog import Catalog
    from corpus_assets.domain.storage.layer_store import LayerStore

    home = Path(os.environ["CORPUS_HOME"])
    store, catalog = LayerStore(home), Catalog.at(home / "catalog.duckdb")
    rid = requests.file_request(catalog, {"kind": "record", "record_id": record_id, "requester": "bench@example.org",
                                          "reason": "bench: a deletion already applied"})
    res = tombstones.resolve(store, requests.get(catalog, rid))
    tombstones.write_tombstones(catalog, rid, res)
    report = purge_snapshot(store, snapshot, tombstones.load_tombstones(catalog), request_ids=[rid])
    print(f"(not in the release ratio) deletion {rid[:12]} of {record_id} applied to {snapshot}: "
          f"{'purged' if report['affected'] else 'nothing to purge'}", flush=True)


def report(label: str, run: dict) -> None:
    top = sorted(run["steps"].items(), key=lambda kv: -kv[1])[:3]
    print(f"{label}: {run['wall']:.1f} s wall; views tokenized/reused/adopted {'/'.join(map(str, run['views']))}; slowest "
          + ", ".join(f"{k} {v:.1f} s" for k, v in top) + f"; tombstone scan: {run['scan']}", flush=True)


if __name__ == "__main__":
    main()
