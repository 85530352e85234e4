#!/usr/bin/env python3
"""Exact-duplicate representatives on real documentation trees: symlinked copies and locales.

Sources (``bench/fetch_debian_docs.sh`` unpacks them under ``bench/data/root``), as ``local_dir``
sources with the capture, canonicalization and exact-dedup code of the pipeline:

- ``apache2doc``: ``usr/share/doc/apache2-doc/manual``, every ``*.html`` at any depth (its locale
  folders ``da/``, ``de/``, ... hold symlinks to ``../en/...`` for untranslated pages),
  ``primary_locale: en``;
- ``handbook``: ``usr/share/doc/debian-handbook/html`` (26 locale folders), ``primary_locale: en-US``.

For every exact-duplicate group (same dedup key and normalized bytes) the representative is chosen
twice: by the order before issue 17 (eligibility, quality, source priority, record id) and by
``representative_order_key`` (… resolved path, primary locale, record id). Printed: groups, and
how many representatives are a symlinked copy, or outside the primary locale while the group has
a copy inside it.

Run:
    bash bench/fetch_debian_docs.sh
    .venv/bin/python bench/bench_representatives.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from corpus_assets.domain.canonical.canonicalize import canonicalize_item  # noqa: E402
from corpus_assets.domain.canonical.records import record_to_row  # noqa: E402
from corpus_assets.domain.core.hashing import dedup_normal_form  # noqa: E402
from corpus_assets.domain.core.reasons import Outcome  # noqa: E402
from corpus_assets.domain.dedup.clusters_layer import (  # noqa: E402
    _eligible,
    in_locale,
    representative_order_key,
    via_symlink,
)
from corpus_assets.domain.dedup.exact import exact_groups  # noqa: E402
from corpus_assets.domain.ingest.file_readers import read_source_items  # noqa: E402
from corpus_assets.domain.ingest.sources_config import CanonicalPolicy, Governance, LocalDirSource  # noqa: E402

DOC = HERE / "data" / "root" / "usr" / "share" / "doc"
GOV = Governance(license="see copyright", rights_evidence="/usr/share/doc/<package>/copyright")
SOURCES = [
    LocalDirSource(id="apache2doc", kind="local_dir", root=DOC / "apache2-doc" / "manual",
                   include=["**/*.html", "*/*.html", "*/*/*.html"], governance=GOV, primary_locale="en"),
    LocalDirSource(id="handbook", kind="local_dir", root=DOC / "debian-handbook" / "html",
                   include=["**/*.html", "*/*.html"], governance=GOV, primary_locale="en-US"),
]


def old_key(r: dict) -> tuple:
    return (0 if _eligible(r["governance_json"]) else 1, 0, 100, r["record_id"])


def main() -> int:
    policy = CanonicalPolicy()
    print("| source | records | through a symlink | exact groups with 2+ copies | symlinked representative (before → after) "
          "| representative outside the primary locale though the group has a copy in it (before → after) |")
    print("|---|---:|---:|---:|---:|---:|")
    for src in SOURCES:
        if not Path(src.root).is_dir():
            print(f"{src.root} missing: run bench/fetch_debian_docs.sh", file=sys.stderr)
            return 1
        rows = []
        for i, it in enumerate(read_source_items(src)):
            out = canonicalize_item(it, i, src, f"{src.id}.20261202T000000", policy)
            if out.outcome is Outcome.ACCEPTED:
                rows.append(record_to_row(out.record))
        normal = [dedup_normal_form(r["text"], r["domain"]).encode() for r in rows]
        sym = [via_symlink(r["record_id"], r["group_id"]) for r in rows]
        loc = [in_locale(r["record_id"], src.id, src.primary_locale) for r in rows]
        counts = {}
        for name, keys in (("before", [old_key(r) for r in rows]),
                           ("after", [representative_order_key(r, {src.id: 100}, {src.id: src.primary_locale}) for r in rows])):
            groups = [g for g in exact_groups([r["dedup_key"] for r in rows], normal.__getitem__, keys) if len(g.members) > 1]
            counts[name] = (
                len(groups),
                sum(sym[g.representative] for g in groups),
                sum((not loc[g.representative]) and any(loc[m] for m in g.members) for g in groups),
            )
        b, a = counts["before"], counts["after"]
        print(f"| {src.id} | {len(rows)} | {sum(sym)} | {a[0]} | {b[1]} → {a[1]} | {b[2]} → {a[2]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
