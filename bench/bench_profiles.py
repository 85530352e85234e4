#!/usr/bin/env python3
"""Quality profiles on real documentation (issue 17): kept and rejected shares, web vs documentation.

The four Debian documentation packages of ``bench_templates.py`` (python3.11-doc, apache2-doc,
postgresql-doc-15, debian-handbook; ``bench/fetch_debian_docs.sh``), one source each, canonicalized
by ``canonicalize_item`` and curated by the real ``build_curated`` with the shipped
``curation.yaml`` (template removal on), once with every source on the ``web`` profile (the
published thresholds) and once with the source on ``documentation`` (``build_curated(...,
profiles={source: "documentation"})``, what ``profile: documentation`` in sources.yaml does).

Per source and profile: records kept (accepted) and rejected, their shares, the character
retention of the kept records, and the rejection reasons. ``--examples FILE`` writes, per
source, the pages kept under documentation that web rejects and the pages documentation
rejects, with their reason and detail (the list docs/curation.md's hand-checked examples were
drawn from).

Run:  bash bench/fetch_debian_docs.sh && .venv/bin/python bench/bench_profiles.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ (for _common, bench_templates)

from _common import DEFAULT_ROOT, PROJECT  # noqa: E402
from bench_templates import SOURCES, canonical_version  # noqa: E402

PROFILES = ("web", "documentation")


def curate(store, sid: str, snapshot: str, version, config, registry, profile: str) -> dict:
    from corpus_assets.domain.curate.curated_layer import build_curated

    s = build_curated(store, snapshot, config, registry, canonical_version=version, profiles={sid: profile})
    decisions = s.version.read_table(
        "decisions", columns=["record_id", "outcome", "stage", "reason", "detail", "chars_in", "chars_out"]).to_pylist()
    chars_in = sum(d["chars_in"] for d in decisions)
    kept = [d for d in decisions if d["outcome"] == "accepted"]
    return {
        "records": len(decisions),
        "kept": len(kept),
        "rejected": sum(d["outcome"] == "rejected" for d in decisions),
        "quarantined": sum(d["outcome"] == "quarantined" for d in decisions),
        "chars_in": chars_in,
        "kept_chars_in": sum(d["chars_in"] for d in kept),
        "chars_out": sum(d["chars_out"] for d in kept),
        "reasons": Counter(d["reason"] for d in decisions if d["outcome"] == "rejected").most_common(),
        "decisions": {d["record_id"]: (d["outcome"], d["reason"], d["detail"]) for d in decisions},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where fetch_debian_docs.sh unpacked the pages")
    p.add_argument("--curation", type=Path, default=PROJECT / "curation.yaml", help="the curation policy (default: the shipped one)")
    p.add_argument("--sources", default=",".join(SOURCES), help=f"comma list of {', '.join(SOURCES)}")
    p.add_argument("--limit", type=int, default=0, help="at most this many pages per source (0: all)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--examples", type=Path, help="write the kept / rejected pages per source (with reasons) here")
    args = p.parse_args(argv)

    from corpus_assets.domain.curate.config import load_curation
    from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry, build_registry
    from corpus_assets.domain.storage.layer_store import LayerStore

    root = args.root.resolve()
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    for s in sources:
        if s not in SOURCES:
            raise SystemExit(f"unknown source {s!r}; choose from {', '.join(SOURCES)}")
        if not (root / SOURCES[s]).is_dir():
            raise SystemExit(f"{root / SOURCES[s]} does not exist: run `bash bench/fetch_debian_docs.sh` first")
    config = load_curation(args.curation)
    registry = build_registry(config.decontam.registry_files) if config.decontam.enabled else EvalRegistry(())
    print(f"curation policy: {args.curation} (templates {'on' if config.templates.enabled else 'off'}); "
          f"eval registry {len(registry)} protected texts")

    results: dict = {}
    examples: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-profiles-") as tmp:
        store = LayerStore(Path(tmp))
        for sid in sources:
            snapshot, version, info = canonical_version(store, sid, root / SOURCES[sid], args.limit)
            res = {prof: curate(store, sid, snapshot, version, config, registry, prof) for prof in PROFILES}
            results[sid] = {prof: {k: v for k, v in r.items() if k != "decisions"} for prof, r in res.items()}
            web, doc = res["web"]["decisions"], res["documentation"]["decisions"]
            examples[sid] = {
                "kept_by_documentation_rejected_by_web": sorted(
                    (rid, web[rid][1], web[rid][2]) for rid in doc if doc[rid][0] == "accepted" and web[rid][0] != "accepted"),
                "rejected_by_documentation": sorted((rid, doc[rid][1], doc[rid][2]) for rid in doc if doc[rid][0] == "rejected"),
                "kept_by_web_rejected_by_documentation": sorted(
                    (rid, doc[rid][1], doc[rid][2]) for rid in doc if web[rid][0] == "accepted" and doc[rid][0] != "accepted"),
            }
            print(f"\n{sid}: {info['records']} records")
            for prof in PROFILES:
                r = res[prof]
                print(f"  {prof:<14} kept {r['kept']:>5} ({r['kept'] / r['records']:.1%}), rejected {r['rejected']:>5} "
                      f"({r['rejected'] / r['records']:.1%}), quarantined {r['quarantined']}; kept chars "
                      f"{r['chars_out'] / max(1, r['chars_in']):.1%} of all; top rejections {r['reasons'][:4]}")
            print(f"  documentation keeps {len(examples[sid]['kept_by_documentation_rejected_by_web'])} pages web rejects, "
                  f"rejects {len(examples[sid]['kept_by_web_rejected_by_documentation'])} web keeps")

    print("\nsummary (kept share of records; characters kept)")
    print(f"{'source':<16}{'records':>8}" + "".join(f"{p + ' kept':>20}{p + ' chars':>20}" for p in PROFILES))
    for sid, res in results.items():
        row = f"{sid:<16}{res['web']['records']:>8}"
        for prof in PROFILES:
            r = res[prof]
            row += f"{r['kept'] / r['records']:>20.1%}{r['chars_out'] / max(1, r['chars_in']):>20.1%}"
        print(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.examples:
        args.examples.write_text(json.dumps(examples, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
