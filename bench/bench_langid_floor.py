#!/usr/bin/env python3
"""Language-ID scores on the four Debian documentation packages, and what a floor turns into ``und``.

Pages: every regular page of python3.11-doc, debian-handbook (26 locales), apache2-doc and
postgresql-doc-15 under ``bench/data/root`` (``bench/fetch_debian_docs.sh``), main text extracted
by the project's ``extract_html`` (the cache of ``bench/decontam/bench_decontam_recall.py``). Each
page goes through ``langid.identify_language`` exactly as canonicalization calls it (first
``langid_max_chars`` = 4,000 characters). Printed: per source, pages below each floor; the pages
below the shipped floor with the label the model proposed.

Run:
    bash bench/fetch_debian_docs.sh
    .venv/bin/python bench/bench_langid_floor.py [--floor 0.3]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "decontam"))

from bench_decontam_recall import load_clean_pages  # noqa: E402

from corpus_assets.domain.canonical.langid import identify_language  # noqa: E402
from corpus_assets.domain.canonical.normalize import normalize_text  # noqa: E402
from corpus_assets.domain.ingest.sources_config import CanonicalPolicy  # noqa: E402

FLOORS = (0.2, 0.3, 0.4, 0.5, 0.65)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floor", type=float, default=CanonicalPolicy().langid_min_score)
    args = ap.parse_args()
    pages = load_clean_pages()
    policy = CanonicalPolicy()
    per_src: dict[str, list] = {}
    below = []
    for pid, src, text in pages:
        lid = identify_language(normalize_text(text), policy.langid_max_chars, args.floor)
        per_src.setdefault(src, []).append(lid)
        if lid.below_floor:
            below.append((lid.score, lid.label, pid))
    print(f"{len(pages)} pages; floor {args.floor}")
    print("| source | pages | " + " | ".join(f"score < {f}" for f in FLOORS) + " | top labels (>= floor) |")
    print("|---|---:|" + "---:|" * len(FLOORS) + "---|")
    for src, lids in sorted(per_src.items()):
        top = Counter(x.lang for x in lids if x.lang != "und").most_common(4)
        print(f"| {src} | {len(lids)} | " + " | ".join(str(sum(x.score < f for x in lids)) for f in FLOORS)
              + " | " + ", ".join(f"{lang} {n}" for lang, n in top) + " |")
    print(f"\npages below the floor {args.floor} (score, label the model proposed, page):")
    for score, label, pid in sorted(below):
        print(f"  {score:.4f} {label:4} {pid}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
