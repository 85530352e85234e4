"""Quality profiles (web, documentation, code, conversation) on real documentation pages.

``tests/data/profiles/pages.json``: whole pages of python3.11-doc, postgresql-doc-15 and
debian-handbook as the filters see them (tests/data/profiles/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, DocumentPayload, Record, raw_parent_id
from corpus_assets.domain.curate.quality import (
    DEFAULT_PROFILES,
    QUALITY_PROFILES,
    QualityConfig,
    StructureConfig,
    TextStats,
    judge_record,
    judge_text,
    quality_policy_version,
)
from corpus_assets.domain.curate.quality.structure import line_kinds
from corpus_assets.domain.ingest.sources_config import Governance, parse_sources

PAGES = {p["path"]: p for p in json.loads((Path(__file__).resolve().parents[1] / "data" / "profiles" / "pages.json").read_text())}
GOV = Governance(license="PSF-2.0", rights_evidence="https://docs.python.org/3/license.html")
CFG = QualityConfig()


def _doc(text: str, lang: str = "en", domain: str = "prose") -> Record:
    return Record(
        record_id="docs:p", source_id="docs", snapshot="docs.s", item_id="p", schema_type="document",
        schema_version=SCHEMA_VERSIONS["document"], adapter="test", adapter_version="1", domain=domain, lang=lang,
        lang_score=0.9, group_id="doc:docs:p", parents=[raw_parent_id("docs", "p")], governance=GOV,
        text_sha256="", record_sha256="", dedup_key="", raw_sha256="", payload=DocumentPayload(text=text),
    )


def _judge(path: str, profile: str):
    page = PAGES[path]
    return judge_record(_doc(page["text"], page["lang"]), CFG, profile)


@pytest.mark.parametrize("path", ["library/mailcap.html", "library/sysconfig.html"])
def test_a_python_api_reference_page_with_braces_is_kept_under_documentation(path):
    assert "{" in PAGES[path]["text"]
    web = _judge(path, "web")
    assert not web.passed and web.reason == "c4.curly_bracket"
    doc = _judge(path, "documentation")
    assert doc.passed, (doc.reason, doc.detail)


@pytest.mark.parametrize("path, reason", [("en-US/index.html", "structure.table_of_contents"),
                                          ("admin.html", "structure.table_of_contents"),
                                          ("reference.html", "structure.index_listing")])
def test_tables_of_contents_and_indexes_are_rejected_under_both(path, reason):
    assert not _judge(path, "web").passed
    doc = _judge(path, "documentation")
    assert (doc.passed, doc.reason) == (False, reason), doc.detail


def test_the_structure_filter_reads_prose_toc_code_and_listing_lines():
    s = TextStats("10.3.1. OpenVPN\n10.3.2. IPsec\nThe server listens on port 1194 by default, see below:\n"
                  "    port 1194\nopenvpn --config /etc/openvpn/server.conf\nStatus\nExtension", 0.3)
    assert line_kinds(s, StructureConfig(enabled=True)) == (10, 4, 5, 2)
    intro = "This part of the book explains how the server is installed, configured and kept running for years."
    text = intro + "\n" + intro + "\n" + "\n".join(f"{i}. Chapter title number {i}" for i in range(1, 30))
    v = judge_text(text, ["structure"], CFG, profile="documentation", apply_key="document/prose")
    assert (v.passed, v.reason) == (False, "structure.table_of_contents")
    # off unless a profile turns it on
    assert judge_text(text, ["structure"], CFG).passed
    v = judge_text("Index\nabs()\nall()\nany()", ["structure"], CFG, profile="documentation", apply_key="document/prose")
    assert v.reason == "structure.few_prose_words"


def test_web_is_todays_thresholds():
    """The web profile runs exactly the plans without any profile: the published thresholds."""
    assert DEFAULT_PROFILES["web"] == {}
    for stype, domain in (("document", "prose"), ("document", "code"), ("messages", "prose"), ("task", "prose")):
        plan = CFG.plan_for(stype, domain, "web")
        assert plan is CFG.plan_for(stype, domain)
        assert "structure" not in plan.filters
    doc = CFG.plan_for("document", "prose", "documentation")
    assert "structure" in doc.filters and "fineweb" not in doc.filters
    assert doc.configs["c4"].filter_curly_bracket is False and CFG.plan_for("document", "prose").configs["c4"].filter_curly_bracket
    # documentation changes prose documents only: code files and conversations are judged as before
    assert CFG.plan_for("document", "code", "documentation") is CFG.plan_for("document", "code")
    assert CFG.plan_for("messages", "prose", "documentation") is CFG.plan_for("messages", "prose")
    # the code profile judges prose documents as code files are judged
    code = CFG.plan_for("document", "prose", "code")
    assert code.filters == ("sanity", "gopher_repetition")
    assert code.configs["gopher_repetition"] == CFG.plan_for("document", "code").configs["gopher_repetition"]


def test_profiles_are_overridable_and_enter_the_policy_version():
    c = QualityConfig(profiles={"documentation": {"document/prose": {"structure": {"enabled": True, "min_prose_words": 5}}}})
    assert c.plan_for("document", "prose", "documentation").configs["structure"].min_prose_words == 5
    # a profile given replaces that profile's defaults; the other profiles keep theirs
    assert "c4" in c.plan_for("document", "prose", "documentation").filters
    assert c.plan_for("document", "prose", "documentation").configs["c4"].filter_curly_bracket is True
    assert c.profiles["code"] == DEFAULT_PROFILES["code"]
    versions = {quality_policy_version(x) for x in (CFG, c, QualityConfig(profiles={"web": {"document/prose": {"c4": {"min_num_sentences": 3}}}}))}
    assert len(versions) == 3
    assert QualityConfig(profiles={}).profiles == CFG.profiles  # nothing given: the defaults
    assert quality_policy_version(QualityConfig()) == quality_policy_version(CFG)


@pytest.mark.parametrize("profiles, message", [
    ({"blog": {}}, "profiles"),
    ({"documentation": {"document/video": {}}}, "is not an apply key"),
    ({"documentation": {"document/prose": {"pair": {}}}}, "does not run"),
    ({"documentation": {"document/prose": {"c4": {"min_num_sentences": -1}}}}, "min_num_sentences"),
    ({"documentation": {"document/prose": {"c4": {"unknown": 1}}}}, "unknown"),
])
def test_bad_profiles_are_errors_that_say_where(profiles, message):
    with pytest.raises(ValidationError, match=message):
        QualityConfig(profiles=profiles)


def test_unknown_profile_at_judge_time():
    with pytest.raises(ValueError, match="unknown quality profile"):
        judge_record(_doc("text"), CFG, "blog")
    assert set(QUALITY_PROFILES) == {"web", "documentation", "code", "conversation"}


def test_sources_declare_a_profile():
    base = {"id": "docs", "kind": "local_dir", "root": "/tmp", "governance": {"license": "x", "rights_evidence": "y"}}
    f = parse_sources({"sources": [base, {**base, "id": "handbook", "profile": "documentation"}]})
    assert [s.profile for s in f.sources] == ["web", "documentation"]
    with pytest.raises(Exception, match="profile"):
        parse_sources({"sources": [{**base, "profile": "blog"}]})


# --- in the curated layer ---------------------------------------------------------------------


def test_the_curated_layer_judges_each_source_with_its_profile(tmp_path):
    from corpus_assets.domain.curate.config import CurationConfig
    from corpus_assets.domain.curate.curated_layer import build_curated, curation_policy_version
    from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
    from corpus_assets.domain.storage.layer_store import LayerStore
    from doc_records import canonical_version

    store = LayerStore(tmp_path)
    pages = list(PAGES.values())
    config = CurationConfig(decontam={"enabled": False})
    outcomes = {}
    for profile in ("web", "documentation"):
        snapshot = f"docs.{profile}"
        canonical = canonical_version(store, snapshot, "docs", pages)
        s = build_curated(store, snapshot, config, EvalRegistry(()), canonical_version=canonical,
                          profiles={"docs": profile, "other": "code"})
        decisions = {d["record_id"].split(":", 1)[1]: d for d in s.version.read_table("decisions").to_pylist()}
        outcomes[profile] = {path: d["outcome"] for path, d in decisions.items()}
        assert s.by_profile == {profile: [len(pages), sum(o == "accepted" for o in outcomes[profile].values()),
                                          sum(len(p["text"]) for p in pages), s.by_profile[profile][3]]}
        assert s.version.manifest["profiles"] == ({"docs": "documentation", "other": "code"} if profile == "documentation"
                                                  else {"other": "code"})
        for d in decisions.values():
            assert d["policy_version"] == s.policy_version
            assert ("profile: documentation" in d["detail"]) == (profile == "documentation")
        if profile == "documentation":
            assert decisions["en-US/index.html"]["reason"] == "structure.table_of_contents"
    assert outcomes["web"] == dict.fromkeys(PAGES, "rejected")
    assert outcomes["documentation"] == {"library/mailcap.html": "accepted", "library/sysconfig.html": "accepted",
                                         "admin.html": "rejected", "reference.html": "rejected",
                                         "en-US/index.html": "rejected"}
    # the profile map is part of the policy; web sources are not (adding one changes nothing)
    base = curation_policy_version(config, "")
    assert curation_policy_version(config, "", {"a": "web"}) == base
    assert curation_policy_version(config, "", {"a": "documentation"}) != base
    with pytest.raises(ValueError, match="unknown quality profile"):
        curation_policy_version(config, "", {"a": "blog"})


def test_a_custom_apply_map_keeps_the_profile_entries_that_still_run():
    c = QualityConfig(apply={"*/*": ["sanity"], "document/prose": ["sanity", "c4"]}, overrides={})
    assert c.profiles["documentation"] == {"document/prose": {"c4": DEFAULT_PROFILES["documentation"]["document/prose"]["c4"]}}
    assert c.plan_for("document", "prose", "documentation").configs["c4"].filter_curly_bracket is False
    assert QualityConfig(apply={"*/*": []}, overrides={}).profiles == {p: {} for p in QUALITY_PROFILES}
    # a profile given is checked against the map as it is
    with pytest.raises(ValidationError, match="does not run"):
        QualityConfig(apply={"*/*": ["sanity"]}, overrides={}, profiles={"documentation": {"*/*": {"c4": {}}}})
