#!/usr/bin/env python3
"""Template removal on real documentation sites (issue 17): extraction F1, navigation lines, kept pages.

Pages: the four Debian documentation packages ``bench/fetch_debian_docs.sh`` unpacks under
``bench/data/root`` (regular ``.html`` files only, symlinks skipped), one ``local_dir``-like source
each:

  python_doc       usr/share/doc/python3.11/html          (python3.11-doc)
  apache2_doc      usr/share/doc/apache2-doc/manual       (apache2-doc)
  postgresql_doc   usr/share/doc/postgresql-doc-15/html   (postgresql-doc-15)
  debian_handbook  usr/share/doc/debian-handbook/html     (debian-handbook, 26 locales)

Each page goes through this project's ``canonicalize_item`` (as ``bench_canonicalize.py`` does);
the accepted records of a source are written as a ``canonical_records`` version of its own
snapshot in a temporary data root, and curated there by the real ``build_curated`` with the
shipped ``curation.yaml`` (its eval registry included) twice: with ``templates.enabled: false``
("before": what the pipeline did until now) and as shipped ("after").

Measured:

(a) Extraction F1 on python_doc: for every page with a reStructuredText source
    (``_sources/<page>.rst.txt``), bag-of-words precision / recall / F1 (lower-cased ``\\w+``
    tokens as a multiset) of the record text against that source: bare resiliparse (the
    canonical text) vs the same text after template removal (``find_templates`` + ``strip``, the
    functions ``build_curated`` runs; before any quality filter, on every page). Micro (pooled
    tokens) and macro (mean over pages).
(b) On apache2_doc, postgresql_doc and debian_handbook: the share of *kept* (accepted) records
    whose text still holds a navigation line, before and after, and the accepted pages before and
    after, per source. A navigation line is one matching ``NAV_PATTERNS`` below, written from the
    templates of these three sites (their headers, breadcrumbs, language bars, "top" / "<-"
    links, "Prev / Up / Home / Next" tables, the handbook's "Product Site / Documentation Site").

Run:  bash bench/fetch_debian_docs.sh && .venv/bin/python bench/bench_templates.py
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ (for _common)

from _common import DEFAULT_ROOT, PROJECT, discover_pages  # noqa: E402

SOURCES = {
    "python_doc": "usr/share/doc/python3.11/html",
    "apache2_doc": "usr/share/doc/apache2-doc/manual",
    "postgresql_doc": "usr/share/doc/postgresql-doc-15/html",
    "debian_handbook": "usr/share/doc/debian-handbook/html",
}
NAV_SOURCES = ("apache2_doc", "postgresql_doc", "debian_handbook")

_APACHE_HEADERS = (
    "Apache HTTP Server Version 2.4", "Serveur HTTP Apache Version 2.4", "Apache HTTP サーバ バージョン 2.4",
    "Apache HTTP Sunucusu Sürüm 2.4", "Versión 2.4 del Servidor HTTP Apache", "Apache HTTP 服务器版本 2.4",
    "Servidor HTTP Apache Versão 2.4", "HTTP сервер Apache Версия 2.4",
)
_APACHE_LANGUAGE_BARS = (
    "Available Languages", "Langues Disponibles", "가능한 언어", "翻訳済み言語", "Mevcut Diller",
    "Idiomas disponibles", "Verfügbare Sprachen", "可用语言", "Línguas Disponíveis",
)
# (name, pattern on the line with whitespace runs collapsed to one space)
NAV_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("apache header", re.compile("^(" + "|".join(map(re.escape, _APACHE_HEADERS)) + ")$")),
    ("apache breadcrumb", re.compile(r"^Apache > ")),
    ("apache language bar", re.compile("^(" + "|".join(map(re.escape, _APACHE_LANGUAGE_BARS)) + "):")),
    ("apache top / back link", re.compile(r"^(top|<-)$")),
    ("postgresql Prev / Up / Next row", re.compile(r"^Prev Up\b")),
    ("postgresql ... Home ... row", re.compile(r"\tHome(\t|$)")),  # matched on the raw line (cells)
    ("handbook header", re.compile(r"^Product Site ?Documentation Site$")),
)


def nav_lines(text: str) -> list[tuple[str, str]]:
    """(pattern name, line) of every navigation line of a text."""
    out = []
    for raw in text.split("\n"):
        line = " ".join(raw.split())
        if not line:
            continue
        for name, pat in NAV_PATTERNS:
            if pat.search(raw if "Home" in name else line):
                out.append((name, line))
                break
    return out


# --------------------------------------------------------------------------------------------
# records


def canonical_version(store, sid: str, root: Path, limit: int):
    """Canonicalize a source's pages; write the accepted records as its canonical version."""
    from corpus_assets.domain.canonical.canonical_layer import CANONICAL_TABLES
    from corpus_assets.domain.canonical.canonicalize import canonicalize_item
    from corpus_assets.domain.canonical.records import record_to_row
    from corpus_assets.domain.core.keys import snapshot_key
    from corpus_assets.domain.ingest.raw_items import CAPTURED, RawItem
    from corpus_assets.domain.ingest.sources_config import CanonicalPolicy, Governance, LocalDirSource
    from corpus_assets.domain.layers.registry import CANONICAL_RECORDS

    source = LocalDirSource(id=sid, kind="local_dir", root=root,
                            governance=Governance(license="see debian/copyright", rights_evidence="bench only"))
    snapshot = snapshot_key(sid, datetime(2026, 1, 1, tzinfo=timezone.utc))
    rels = sorted(discover_pages(root))
    if limit:
        rels = rels[:limit]
    rows, outcomes = [], Counter()
    t0 = time.perf_counter()
    for i, rel in enumerate(rels):
        item = RawItem(item_id=rel, uri=f"file:///{rel}", retrieved_at="2026-01-01T00:00:00Z",
                       content=(root / rel).read_bytes(), status=CAPTURED, content_type="text/html")
        out = canonicalize_item(item, i, source, snapshot, CanonicalPolicy())
        outcomes[out.reason.value] += 1
        if out.record is not None:
            row = record_to_row(out.record)
            row["item_id"] = rel
            rows.append(row)
    with store.new_version(CANONICAL_RECORDS, snapshot, CANONICAL_TABLES, {"bench": sid}) as w:
        w.write("records", rows)
        version = w.commit(extra_manifest={"items_in": len(rels)})
    return snapshot, version, {"pages": len(rels), "records": len(rows), "outcomes": dict(outcomes),
                               "seconds": time.perf_counter() - t0}


def curate(store, sid: str, snapshot: str, version, config, registry) -> dict:
    """One build_curated run: outcomes, kept records with a navigation line, the top reasons."""
    from corpus_assets.domain.curate.curated_layer import build_curated

    t0 = time.perf_counter()
    s = build_curated(store, snapshot, config, registry, canonical_version=version)
    seconds = time.perf_counter() - t0
    decisions = s.version.read_table("decisions", columns=["outcome", "stage", "reason"]).to_pylist()
    kept = s.version.read_table("records", columns=["record_id", "payload_json"]).to_pylist()
    with_nav, kinds = 0, Counter()
    for r in kept:
        found = nav_lines(json.loads(r["payload_json"]).get("text") or "")
        with_nav += bool(found)
        kinds.update({name for name, _ in found})
    rejected = Counter(d["reason"] for d in decisions if d["outcome"] == "rejected")
    st = s.templates.get(sid)
    return {
        "records_in": s.records_in, "accepted": s.outcomes.get("accepted", 0),
        "rejected": s.outcomes.get("rejected", 0), "quarantined": s.outcomes.get("quarantined", 0),
        "kept_with_nav": with_nav, "nav_kinds": dict(kinds), "top_rejections": rejected.most_common(5),
        "seconds": seconds, "templates": st.as_dict() if st is not None else None,
    }


# --------------------------------------------------------------------------------------------
# extraction F1 (python_doc)

_WORD_RE = re.compile(r"\w+")


def _bag(text: str) -> Counter:
    return Counter(_WORD_RE.findall(text.lower()))


def extraction_f1(version, root: Path, config) -> dict:
    """Bag-of-words P/R/F1 against ``_sources/*.rst.txt``: bare resiliparse vs after template removal."""
    from corpus_assets.domain.curate.curated_layer import find_templates

    index = find_templates(version, config)
    sums = {side: [0, 0, 0] for side in ("bare", "templates")}
    per_page = {side: [] for side in sums}
    emptied = worse = better = 0
    for r in version.read_table("records", columns=["source_id", "item_id", "lang", "payload_json"]).to_pylist():
        src = root / "_sources" / (r["item_id"][: -len(".html")] + ".rst.txt")
        if not r["item_id"].endswith(".html") or not src.is_file():
            continue
        ref = _bag(src.read_text(encoding="utf-8", errors="replace"))
        payload = json.loads(r["payload_json"])
        stripped = index.strip(r["source_id"], payload["text"], payload.get("title"), r["lang"])
        f1s = []
        for side, text in (("bare", payload["text"]), ("templates", stripped.text)):
            bag = _bag(text)
            inter = sum((bag & ref).values())
            n_out, n_ref = sum(bag.values()), sum(ref.values())
            p, rc = inter / n_out if n_out else 0.0, inter / n_ref if n_ref else 0.0
            f = 2 * p * rc / (p + rc) if p + rc else 0.0
            per_page[side].append((p, rc, f))
            t = sums[side]
            t[0] += inter
            t[1] += n_out
            t[2] += n_ref
            f1s.append(f)
        emptied += not stripped.text.strip()
        better += f1s[1] > f1s[0]
        worse += f1s[1] < f1s[0]
    out = {"pages": len(per_page["bare"]), "pages_better": better, "pages_worse": worse, "pages_emptied": emptied}
    for side, (inter, n_out, n_ref) in sums.items():
        p, rc = inter / n_out, inter / n_ref
        pages = per_page[side]
        out[side] = {
            "micro": {"P": p, "R": rc, "F1": 2 * p * rc / (p + rc)},
            "macro": {k: sum(x[i] for x in pages) / len(pages) for i, k in enumerate(("P", "R", "F1"))},
        }
    return out


# --------------------------------------------------------------------------------------------
# driver


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where fetch_debian_docs.sh unpacked the pages")
    p.add_argument("--curation", type=Path, default=PROJECT / "curation.yaml", help="the curation policy (default: the shipped one)")
    p.add_argument("--sources", default=",".join(SOURCES), help=f"comma list of {', '.join(SOURCES)}")
    p.add_argument("--limit", type=int, default=0, help="at most this many pages per source (0: all)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
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
    after = load_curation(args.curation)
    before = after.model_copy(update={"templates": after.templates.model_copy(update={"enabled": False})})
    registry = build_registry(after.decontam.registry_files) if after.decontam.enabled else EvalRegistry(())
    print(f"curation policy: {args.curation} (templates {after.templates.model_dump(mode='json')}); "
          f"eval registry {len(registry)} protected texts")

    results: dict = {"sources": {}}
    with tempfile.TemporaryDirectory(prefix="bench-templates-") as tmp:
        store = LayerStore(Path(tmp))
        for sid in sources:
            src_root = root / SOURCES[sid]
            snapshot, version, info = canonical_version(store, sid, src_root, args.limit)
            print(f"\n{sid}: {info['pages']} pages under {src_root}, {info['records']} canonical records "
                  f"({info['seconds']:.1f} s)")
            res = {"canonical": info, "before": curate(store, sid, snapshot, version, before, registry),
                   "after": curate(store, sid, snapshot, version, after, registry)}
            if sid == "python_doc":
                res["f1"] = extraction_f1(version, src_root, after.templates)
            results["sources"][sid] = res
            for side in ("before", "after"):
                r = res[side]
                print(f"  {side:<6} accepted {r['accepted']:>5} of {r['records_in']} "
                      f"({r['accepted'] / max(1, r['records_in']):.1%}); kept with a navigation line "
                      f"{r['kept_with_nav']} ({r['kept_with_nav'] / max(1, r['accepted']):.2%}); "
                      f"curate {r['seconds']:.1f} s; top rejections {r['top_rejections'][:3]}")
            t = res["after"]["templates"]
            if t:
                print(f"  templates: {t['template_keys']} template keys, {t['template_patterns']} row patterns in "
                      f"{t['groups']} groups; {t['records']} records stripped of {t['lines_removed']} lines "
                      f"({t['removed_share']:.2%} of chars); {t['all_template']} all-template records kept as they are")
            if "f1" in res:
                f = res["f1"]
                print(f"  extraction F1 against _sources/*.rst.txt, {f['pages']} pages "
                      f"({f['pages_better']} better, {f['pages_worse']} worse, {f['pages_emptied']} emptied):")
                for side in ("bare", "templates"):
                    mi, ma = f[side]["micro"], f[side]["macro"]
                    print(f"    {side:<10} micro P {mi['P']:.4f} R {mi['R']:.4f} F1 {mi['F1']:.4f} | "
                          f"macro P {ma['P']:.4f} R {ma['R']:.4f} F1 {ma['F1']:.4f}")

    print("\nsummary")
    print(f"{'source':<16}{'records':>8}{'accepted before':>17}{'accepted after':>16}"
          f"{'nav kept before':>17}{'nav kept after':>16}")
    for sid, res in results["sources"].items():
        b, a = res["before"], res["after"]
        nb, na = b["kept_with_nav"] / max(1, b["accepted"]), a["kept_with_nav"] / max(1, a["accepted"])
        print(f"{sid:<16}{b['records_in']:>8}{b['accepted']:>17}{a['accepted']:>16}{nb:>17.2%}{na:>16.2%}")
    targets = []
    if "python_doc" in results["sources"]:
        f = results["sources"]["python_doc"]["f1"]
        ok = all(f["templates"][k]["F1"] >= f["bare"][k]["F1"] for k in ("micro", "macro"))
        targets.append(f"F1 with template removal >= bare resiliparse (micro and macro): {'MET' if ok else 'NOT MET'}")
    for sid in NAV_SOURCES:
        if sid in results["sources"]:
            a = results["sources"][sid]["after"]
            share = a["kept_with_nav"] / max(1, a["accepted"])
            targets.append(f"{sid}: kept records with a navigation line {share:.2%} < 2%: {'MET' if share < 0.02 else 'NOT MET'}")
    for t in targets:
        print(t)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
