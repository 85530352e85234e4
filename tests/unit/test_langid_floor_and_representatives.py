"""Language ID with a confidence floor, and dedup representatives that prefer a resolved path and
the source's primary locale (issue 17).

The pages are the ones the issue names, as ``bench/fetch_debian_docs.sh`` unpacks them:
PostgreSQL 15's ``gist.html`` (a table of contents the model labels ``en`` at 0.18) and
apache2-doc, whose ``manual/da/caching.html`` is a symlink to ``../en/caching.html``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus_assets.domain.canonical.canonicalize import POLICY_VERSION, canonicalize_item, policy_version
from corpus_assets.domain.canonical.langid import UNDETERMINED, identify_language
from corpus_assets.domain.canonical.records import record_to_row
from corpus_assets.domain.core.reasons import Outcome
from corpus_assets.domain.dedup.clusters_layer import in_locale, representative_order_key, via_symlink
from corpus_assets.domain.dedup.exact import exact_groups
from corpus_assets.domain.dedup.near import stable_order
from corpus_assets.domain.ingest.file_readers import read_source_items
from corpus_assets.domain.ingest.sources_config import CanonicalPolicy, Governance, LocalDirSource, parse_sources

GOV = Governance(license="Apache-2.0", rights_evidence="/usr/share/doc/apache2-doc/copyright")

GIST_TOC = (
    "Chapter\u00a068.\u00a0GiST Indexes\nPrev\u00a0\t\tUp\t\tPart\u00a0VII.\u00a0Internals\t\tHome\t\t\u00a0Next\n\n"
    "Chapter\u00a068.\u00a0GiST Indexes\n\nTable of Contents\n\n68.1. Introduction\n68.2. Built-in Operator Classes\n"
    "68.3. Extensibility\n68.4. Implementation\n68.4.1. GiST Index Build Methods\n68.5. Examples\n"
    "Prev\u00a0\t\tUp\t\t\u00a0Next\n67.4.\u00a0Implementation\u00a0\t\tHome\t\t\u00a068.1.\u00a0Introduction"
)
CACHING = (
    "<html><head><title>Caching Guide - Apache HTTP Server Version 2.4</title></head><body><div id=\"page-content\">"
    "<h1>Caching Guide</h1><p>This document supplements the mod_cache, mod_cache_disk, mod_file_cache and "
    "htcacheclean reference documentation. It describes how to use the Apache HTTP Server's caching features to "
    "accelerate web and proxy serving, while avoiding common problems and misconfigurations.</p>"
    "<h2>Introduction</h2><p>The Apache HTTP server offers a range of caching features that are designed to improve "
    "the performance of the server in various ways.</p></div></body></html>"
)


# ------------------------------------------------------------------------------------------------
# language ID floor


def test_langid_below_the_floor_is_und_with_its_score_kept():
    lid = identify_language(GIST_TOC, 4000, 0.3)
    assert lid.lang == UNDETERMINED and lid.label == "en" and 0.0 < lid.score < 0.3
    assert lid.below_floor and lid.detail(0.3) == f"langid en {lid.score:.4f} below floor 0.3: und"
    # the floor off: the same label and score as before
    off = identify_language(GIST_TOC, 4000, 0.0)
    assert (off.lang, off.score) == ("en", lid.score) and not off.below_floor and off.detail(0.0) == ""
    # a confident page keeps its label
    prose = identify_language("The Apache HTTP server offers a range of caching features that are designed to "
                              "improve the performance of the server in various ways.", 4000, 0.3)
    assert prose.lang == "en" and prose.score >= 0.3 and not prose.below_floor
    # no letters: und with 0.0, not "below the floor"
    assert identify_language("68.1 68.2 -- 68.3", 4000, 0.3) == (UNDETERMINED, 0.0, UNDETERMINED)


def test_canonical_record_below_the_floor_keeps_its_score_and_says_why():
    from corpus_assets.domain.ingest.raw_items import RawItem

    src = LocalDirSource(id="pgdoc", kind="local_dir", root="/usr/share/doc/postgresql-doc-15", governance=GOV)
    body = "".join(f"<p>{line}</p>" for line in GIST_TOC.split("\n") if line.strip())
    page = f"<html><head><title>GiST Indexes</title></head><body><main>{body}</main></body></html>".encode()
    it = RawItem(item_id="html/gist.html", uri="file:///usr/share/doc/postgresql-doc-15/html/gist.html",
                 retrieved_at="2026-11-29T14:00:00Z", content=page, content_type="text/html")
    out = canonicalize_item(it, 0, src, "pgdoc.20261129T140000", CanonicalPolicy())
    assert out.outcome is Outcome.ACCEPTED
    rec = out.record
    assert rec.lang == "und" and 0.0 < rec.lang_score < 0.3
    assert record_to_row(rec)["lang_score"] == rec.lang_score
    assert out.detail.startswith("langid en ") and out.detail.endswith("below floor 0.3: und")
    off = canonicalize_item(it, 0, src, "pgdoc.20261129T140000", CanonicalPolicy(langid_min_score=0.0))
    assert (off.record.lang, off.record.lang_score, off.detail) == ("en", rec.lang_score, "")


def test_langid_floor_is_policy_and_enters_the_policy_version(tmp_path):
    assert CanonicalPolicy().langid_min_score == 0.3
    assert policy_version(CanonicalPolicy(langid_min_score=0.5)) != POLICY_VERSION
    with pytest.raises(ValueError):
        CanonicalPolicy(langid_min_score=1.5)
    cfg = parse_sources({"canonical": {"langid_min_score": 0.25},
                         "sources": [{"id": "d", "kind": "local_dir", "root": str(tmp_path),
                                      "governance": GOV.model_dump()}]})
    assert cfg.canonical.langid_min_score == 0.25
    shipped = (Path(__file__).resolve().parents[2] / "sources.yaml").read_text()
    assert "langid_min_score: 0.3" in shipped


# ------------------------------------------------------------------------------------------------
# representatives


def _apache_tree(root: Path) -> None:
    (root / "en").mkdir(parents=True)
    (root / "da").mkdir()
    (root / "fr").mkdir()
    (root / "en" / "caching.html").write_text(CACHING)
    (root / "da" / "caching.html").symlink_to("../en/caching.html")
    (root / "fr" / "caching.html").write_text(CACHING)  # an untranslated copy, a real file


def _rows(root: Path, source: LocalDirSource) -> list[dict]:
    rows = []
    for i, it in enumerate(read_source_items(source)):
        out = canonicalize_item(it, i, source, f"{source.id}.20261129T140000", CanonicalPolicy())
        assert out.outcome is Outcome.ACCEPTED, out.detail
        rows.append(record_to_row(out.record))
    return rows


def _representative(rows: list[dict], primary_locales: dict) -> str:
    keys = [representative_order_key(r, {"apache2doc": 10}, primary_locales) for r in rows]
    stable_order(keys)  # a total order (raises on a tie)
    (group,) = exact_groups([r["dedup_key"] for r in rows], lambda i: rows[i]["text"].encode(), keys)
    assert len(group.members) == 3
    return rows[group.representative]["record_id"]


def test_capture_records_the_resolved_path_and_canonical_groups_the_copies(tmp_path):
    root = tmp_path / "manual"
    _apache_tree(root)
    src = LocalDirSource(id="apache2doc", kind="local_dir", root=root, include=["**/*.html", "*/*.html"], governance=GOV)
    items = {it.item_id: it for it in read_source_items(src)}
    assert items["da/caching.html"].extra["resolved_path"] == "en/caching.html"
    assert "resolved_path" not in items["en/caching.html"].extra and "resolved_path" not in items["fr/caching.html"].extra
    rows = {r["record_id"]: r for r in _rows(root, src)}
    assert rows["apache2doc:da/caching.html"]["group_id"] == "doc:apache2doc:en/caching.html"
    assert rows["apache2doc:en/caching.html"]["group_id"] == "doc:apache2doc:en/caching.html"
    assert via_symlink("apache2doc:da/caching.html", rows["apache2doc:da/caching.html"]["group_id"])
    assert not via_symlink("apache2doc:en/caching.html", rows["apache2doc:en/caching.html"]["group_id"])
    assert not via_symlink("pydocs:http://127.0.0.1/x", "url:http://127.0.0.1/x")


def test_representative_prefers_the_resolved_path_and_the_primary_locale(tmp_path):
    root = tmp_path / "manual"
    _apache_tree(root)
    src = LocalDirSource(id="apache2doc", kind="local_dir", root=root, include=["*/*.html"], governance=GOV,
                         primary_locale="en")
    rows = _rows(root, src)
    # by record id alone da/ (the symlink) would win; the resolved copy comes first, and among the
    # real files the primary locale
    assert sorted(r["record_id"] for r in rows)[0] == "apache2doc:da/caching.html"
    assert _representative(rows, {"apache2doc": "en"}) == "apache2doc:en/caching.html"
    # without a primary locale the symlinked da/ still comes last; en/ before fr/ by record id
    assert _representative(rows, {}) == "apache2doc:en/caching.html"
    # the primary locale decides between two real files: declared fr, the fr copy is kept
    assert _representative(rows, {"apache2doc": "fr"}) == "apache2doc:fr/caching.html"
    # and the order stays stable whatever the input order
    assert _representative(list(reversed(rows)), {"apache2doc": "en"}) == "apache2doc:en/caching.html"


def test_in_locale_reads_folders_suffixes_and_regional_forms():
    assert in_locale("hb:html/en-US/sect.apt.html", "hb", "en")
    assert in_locale("hb:html/en_GB/a.html", "hb", "en")
    assert in_locale("ap:manual/caching.html.en", "ap", "en")
    assert in_locale("ap:en/caching.html", "ap", "en-US")
    assert not in_locale("hb:html/da-DK/sect.apt.html", "hb", "en")
    assert not in_locale("pg:html/gist.html", "pg", "en")  # no locale in the path
    assert in_locale("pg:html/gist.html", "pg", None)  # no locale declared: every path is in it
    with pytest.raises(ValueError):
        LocalDirSource(id="x", kind="local_dir", root="/x", governance=GOV, primary_locale="../en")


def test_order_key_keeps_eligibility_and_source_priority_first():
    base = {"governance_json": json.dumps(GOV.model_dump()), "source_id": "a"}
    sym = {**base, "record_id": "a:da/x.html", "group_id": "doc:a:en/x.html"}
    other = {**base, "source_id": "b", "record_id": "b:en/x.html", "group_id": "doc:b:en/x.html"}
    # a symlinked copy of a higher-priority source still comes before another source's file
    assert representative_order_key(sym, {"a": 1, "b": 2}) < representative_order_key(other, {"a": 1, "b": 2})
    inelig = {**other, "governance_json": json.dumps({"license": "", "rights_evidence": ""})}
    assert representative_order_key(sym, {"a": 9, "b": 1}) < representative_order_key(inelig, {"a": 9, "b": 1})
