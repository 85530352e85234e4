"""Template removal (corpus_assets/domain/curate/templates.py) on excerpts of real pages.

``tests/data/templates/pages.json``: the first 24 and last 6 lines (lines cut at 300 characters)
of the canonical text of real pages of Debian's apache2-doc 2.4.71, postgresql-doc-15 15.20 and
debian-handbook 11.20220922, as ``canonicalize_item`` extracts them (tests/data/templates/README.md).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from corpus_assets.domain.curate.config import CurationConfig
from corpus_assets.domain.curate.curated_layer import build_curated, curation_policy_version
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.curate.templates import (
    TemplateConfig,
    TemplateCounter,
    _LossyCounter,
    build_template_index,
)
from corpus_assets.domain.storage.layer_store import LayerStore
from doc_records import canonical_version

PAGES = json.loads((Path(__file__).resolve().parents[1] / "data" / "templates" / "pages.json").read_text())
APACHE, POSTGRES, HANDBOOK = PAGES["apache2-doc"], PAGES["postgresql-doc-15"], PAGES["debian-handbook"]


def _items(source: str, pages: list[dict]) -> list[tuple]:
    return [(source, p["text"], p["title"], p["lang"]) for p in pages]


def _strip_all(source: str, pages: list[dict], config: TemplateConfig | None = None):
    index = build_template_index(_items(source, pages), config)
    return index, [index.strip(source, p["text"], p["title"], p["lang"]) for p in pages]


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.split("\n") if line.strip()]


def test_apache_navigation_is_removed_and_the_content_kept():
    index, out = _strip_all("apache2doc", APACHE)
    st = index.stats["apache2doc"]
    assert st.pages == 14 and st.threshold == 5 and st.template_keys > 0
    for page, s in zip(APACHE, out):
        kept = _lines(s.text)
        for nav in ("Apache HTTP Server Version 2.4", "<-", "Apache > HTTP Server > Documentation > Version 2.4 > Modules"):
            assert nav not in kept, (page["path"], nav)
        assert not any(line.startswith("Available Languages:") for line in kept), page["path"]
        # the module's own lines stay: its name, its description row, its summary paragraph
        title = [line for line in _lines(page["text"]) if line.startswith("Apache Module ")]
        assert title and title[0] in kept
        assert any(line.startswith("Description: ") for line in kept)
        assert s.lines_removed >= 5 and 0 < s.removed_share < 0.5  # excerpts: the header is a large share
    # a language bar with a language no other page lists: all cells but one are template cells
    page = APACHE[3]
    rare = page["text"].replace("Available Languages: ", "Available Languages:  da  |", 1)
    assert [line for line in _lines(rare) if line.startswith("Available Languages: da | en | fr")]
    assert not any(line.startswith("Available Languages:") for line in _lines(index.strip("apache2doc", rare).text))


def test_postgres_navigation_header_and_footer_are_removed_with_the_repeated_title():
    index, out = _strip_all("postgresql", POSTGRES)
    for page, s in zip(POSTGRES, out):
        before, kept = _lines(page["text"]), _lines(s.text)
        assert not any(line.startswith("Prev Up") or " Home " in f" {line} " for line in kept), (page["path"], kept[:3])
        # the navigation header repeated the page's title; the heading below it stays, once
        assert before[0] == " ".join(page["title"].split()) and before.count(before[0]) >= 2
        assert kept.count(before[0]) == before.count(before[0]) - 1, page["path"]
        assert len(kept) >= len(before) - 12


def test_handbook_header_is_removed():
    index, out = _strip_all("handbook", HANDBOOK)
    assert index.stats["handbook"].template_keys >= 1
    for page, s in zip(HANDBOOK, out):
        assert _lines(page["text"])[0] == "Product SiteDocumentation Site"
        assert "Product SiteDocumentation Site" not in s.text
        assert _lines(s.text) == _lines(page["text"])[1:]  # nothing else changes
        assert not s.text.startswith("\n")


def test_lines_repeated_inside_one_page_are_kept():
    """Code that repeats inside ONE page is content: document frequency counts a page once."""
    pages = [dict(p) for p in APACHE]
    block = "<Location \"/private\">\n    Require valid-user\n</Location>"
    repeated = "\n\n".join(["Require valid-user"] * 4 + ["CacheSocache shmcb"] * 3)
    pages[3]["text"] = pages[3]["text"] + "\n\n" + block + "\n\n" + repeated + "\n\n" + block
    _, out = _strip_all("apache2doc", pages)
    kept, text = out[3].text, pages[3]["text"]
    assert out[3].lines_removed > 0
    for line in ("Require valid-user", "CacheSocache shmcb", "</Location>", "<Location \"/private\">"):
        assert kept.count(line) == text.count(line) >= 2, line


def test_code_repeated_across_pages_is_kept():
    """A code line in many pages stands among other code lines (not a template block), and a line
    that looks like code never is a template line by itself."""
    pages = [dict(p) for p in APACHE]
    for i, p in enumerate(pages):
        code = f"<Directory \"/srv/site{i}\">\n    AllowOverride None\n    Require all granted\n</Directory>"
        p["text"] = p["text"] + "\n\n" + code + "\n\nasyncio.run(main())"
    _, out = _strip_all("apache2doc", pages)
    for s in out:
        assert "</Directory>" in s.text and "    Require all granted" in s.text and "asyncio.run(main())" in s.text


def test_a_source_with_too_few_pages_is_left_untouched():
    few = POSTGRES[:9]
    index, out = _strip_all("postgresql", few)
    assert index.stats["postgresql"].threshold == 0 and index.stats["postgresql"].template_keys == 0
    assert [s.text for s in out] == [p["text"] for p in few]
    assert all(s.lines_removed == 0 and s.detail() == "" for s in out)
    # the same pages are stripped once the source has enough of them (min_pages is configurable)
    _, out = _strip_all("postgresql", few, TemplateConfig(min_pages=9))
    assert all(s.lines_removed for s in out)


def test_sources_are_counted_apart():
    """A line that is a template of one source is nothing in another."""
    index = build_template_index(_items("handbook", HANDBOOK) + _items("other", APACHE[:3]))
    other = APACHE[0]["text"] + "\n\nProduct SiteDocumentation Site"
    assert index.strip("other", other).text == other
    assert "Product SiteDocumentation Site" not in index.strip("handbook", HANDBOOK[0]["text"]).text


def test_result_does_not_depend_on_the_record_order():
    items = _items("apache2doc", APACHE) + _items("postgresql", POSTGRES) + _items("handbook", HANDBOOK)
    first = build_template_index(items)
    shuffled = list(items)
    random.Random(7).shuffle(shuffled)
    second = build_template_index(shuffled)
    for sid, text, title, lang in items:
        a, b = first.strip(sid, text, title, lang), second.strip(sid, text, title, lang)
        assert (a.text, a.lines_removed, a.chars_removed) == (b.text, b.lines_removed, b.chars_removed)
    assert {k: v.as_dict() for k, v in first.stats.items()} == {k: v.as_dict() for k, v in second.stats.items()}
    assert first.groups.keys() == second.groups.keys()
    assert all(first.groups[g] == second.groups[g] for g in first.groups)


def test_a_page_of_template_lines_only_is_left_as_it_is():
    index, _ = _strip_all("handbook", HANDBOOK)
    s = index.strip("handbook", "Product SiteDocumentation Site")
    assert s.all_template and s.text == "Product SiteDocumentation Site" and s.lines_removed == 0
    assert s.detail() == "templates: every line is a template line, text left as it is"
    assert index.stats["handbook"].all_template == 1


def test_the_counter_is_bounded_and_exact_below_its_bucket_width():
    rng = np.random.default_rng(0)
    # below 1 / count_error pages: exact counts
    c = _LossyCounter(0.01)
    for _ in range(98):
        c.add(np.unique(rng.integers(1, 10**12, 50, dtype=np.uint64)))
    c.add(np.array([5], dtype=np.uint64))
    assert len(c.at_least(1)[0]) == 98 * 50 + 1
    # beyond it: keys seen once are forgotten at each bucket's end, a frequent key is kept, and
    # its count is low by at most count_error x pages
    c = _LossyCounter(0.01)
    common = np.uint64(42)
    for i in range(5000):
        keys = rng.integers(100, 10**12, 50, dtype=np.uint64)
        if i % 10 == 0:
            keys = np.append(keys, common)
        c.add(np.unique(keys))
        assert len(c.keys) <= 2 * 100 * 51  # about two buckets of distinct keys, however many pages
    keys, counts = c.at_least(450)
    assert common in keys and 500 - 0.01 * 5000 <= counts[list(keys).index(common)] <= 500


def test_the_counter_passes_are_ordered():
    counter = TemplateCounter(TemplateConfig())
    counter.add("s", "a")
    counter.isolation("s", "a")
    with pytest.raises(RuntimeError):
        counter.add("s", "b")


def test_config_is_strict_and_enters_the_policy_version():
    with pytest.raises(ValueError):
        TemplateConfig(min_share=0)
    with pytest.raises(ValueError):
        TemplateConfig(unknown=1)
    base = CurationConfig()
    assert base.templates.enabled and base.templates.min_pages == 10
    changed = CurationConfig(templates={"min_share": 0.05})
    off = CurationConfig(templates={"enabled": False})
    versions = {curation_policy_version(c, "") for c in (base, changed, off)}
    assert len(versions) == 3


# --- in the curated layer ---------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_curated_layer_removes_templates_before_the_filters(tmp_path, enabled):
    store = LayerStore(tmp_path)
    canonical = canonical_version(store, "pg.s1", "pg", POSTGRES)
    config = CurationConfig(templates={"enabled": enabled}, decontam={"enabled": False})
    s = build_curated(store, "pg.s1", config, EvalRegistry(()), canonical_version=canonical, batch_size=5)
    decisions = {d["record_id"]: d for d in s.version.read_table("decisions").to_pylist()}
    records = {r["record_id"]: json.loads(r["payload_json"])["text"] for r in s.version.read_table("records").to_pylist()}
    assert len(decisions) == len(POSTGRES)
    if not enabled:
        assert s.templates == {} and s.version.manifest["templates"] == {}
        assert not any("templates" in d["detail"] for d in decisions.values())
        assert all("Prev" in text for text in records.values())
        return
    st = s.templates["pg"]
    assert st.pages == 14 and st.records == 14 and 0 < st.removed_share < 0.5
    assert s.version.manifest["templates"]["pg"]["records"] == 14
    for d in decisions.values():
        # every record had its navigation removed; the share is in the detail whatever decided
        assert "templates: removed" in d["detail"] and " of chars" in d["detail"], d
        if d["outcome"] == "accepted":
            assert (d["stage"], d["action"]) in {("templates", "modify"), ("pii", "modify")}
            assert d["reason"] in {"templates.removed", "templates.removed+pii.redacted"}
            assert d["chars_out"] < d["chars_in"]
        else:
            assert d["stage"] == "quality"
    assert records, "some pages pass the filters once their navigation is gone"
    for text in records.values():
        assert "Prev" not in text and "\tHome\t" not in text
