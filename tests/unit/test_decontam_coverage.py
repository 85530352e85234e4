"""Decontamination that says what it could not check (issue 17): unchecked protected texts counted
per benchmark and reported in the curated manifest, the report and the data card (with its Limits
section); the dual rule (containment >= tau, or a shared 13-gram for long protected texts); a
benchmark's template n-grams suppressed; contamination rows for records quality rejects first.

The clean page text is an excerpt of the Python 3.11 ``difflib`` documentation and of the
PostgreSQL 15 ``CREATE INDEX`` page (as ``bench/fetch_debian_docs.sh`` fetches them).
"""

from __future__ import annotations

import json

import pytest

from corpus_assets.domain.curate.decontam import (
    RULE_CONTAINMENT,
    RULE_LONG_NGRAM,
    ContaminationIndex,
    DecontamConfig,
    Decontaminator,
    coverage_per_benchmark,
    limits_text,
    normalize_tokens,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalItem, EvalRegistry

DIFFLIB_PAGE = (
    "difflib — Helpers for computing deltas\n\nSource code: Lib/difflib.py\n\n"
    "This module provides classes and functions for comparing sequences. It can be used for example, for "
    "comparing files, and can produce information about file differences in various formats, including HTML "
    "and context and unified diffs. For comparing directories and files, see also, the filecmp module.\n\n"
    "class difflib.SequenceMatcher\n\n"
    "This is a flexible class for comparing pairs of sequences of any type, so long as the sequence elements "
    "are hashable. The basic algorithm predates, and is a little fancier than, an algorithm published in the "
    "late 1980's by Ratcliff and Obershelp under the hyperbolic name \"gestalt pattern matching.\" The idea is "
    "to find the longest contiguous matching subsequence that contains no \"junk\" elements; these \"junk\" "
    "elements are ones that are uninteresting in some sense, such as blank lines or whitespace. (Handling junk "
    "is an extension to the Ratcliff and Obershelp algorithm.) The same idea is then applied recursively to the "
    "pieces of the sequences to the left and to the right of the matching subsequence. This does not yield "
    "minimal edit sequences, but does tend to yield matches that \"look right\" to people.\n\n"
    "Timing: The basic Ratcliff-Obershelp algorithm is cubic time in the worst case and quadratic time in the "
    "expected case. SequenceMatcher is quadratic time for the worst case and has expected-case behavior "
    "dependent in a complicated way on how many elements the sequences have in common; best case time is linear."
)
POSTGRES_PAGE = (
    "CREATE INDEX — define a new index\n\nDescription\n\n"
    "CREATE INDEX constructs an index on the specified column(s) of the specified relation, which can be a "
    "table or a materialized view. Indexes are primarily used to enhance database performance (though "
    "inappropriate use can result in slower performance).\n\n"
    "The key field(s) for the index are specified as column names, or alternatively as expressions written in "
    "parentheses. Multiple fields can be specified if the index method supports multicolumn indexes.\n\n"
    "An index field can be an expression computed from the values of one or more columns of the table row. "
    "This feature can be used to obtain fast access to data based on some transformation of the basic data. "
    "For example, an index computed on upper(col) would allow the clause WHERE upper(col) = 'JIM' to use an index."
)

# a long exam item (>= 100 tokens) about the same subject as the difflib page, in other words: it
# shares short phrases ("longest contiguous matching subsequence") with the page, never 13 tokens
LONG_ITEM = (
    "A version control tool compares two revisions of a configuration file line by line. Its matcher "
    "first looks for the longest contiguous matching subsequence of lines, ignoring blank lines, and then "
    "repeats the search on the parts of both files to the left and to the right of that block. The team "
    "notices that on two files of ten thousand lines each the comparison takes several minutes, while on "
    "files of one hundred lines it finishes instantly. Which of the following best explains the slowdown, "
    "and which change to the tool would reduce the running time the most without changing its output?"
)
# the same item lightly paraphrased: 11 of its ~110 words changed, spread over the sentences
LONG_ITEM_PARAPHRASE = (
    "A version control program compares two revisions of a configuration file line by line. Its matcher "
    "first searches for the longest contiguous matching subsequence of lines, skipping blank lines, and then "
    "repeats the search on the parts of both files to the left and to the right of that region. The team "
    "observes that on two files of ten thousand lines each the comparison needs several minutes, while on "
    "files of one hundred lines it completes instantly. Which of the following best explains the delay, "
    "and which change to the program would cut the running time the most without altering its output?"
)
SHORT_ANSWERS = ["Not wrong, Not wrong", "Saturn", "391", "O(n log n)"]
TEMPLATE = (
    "Solve the following problem step by step. Show your reasoning, and give the final answer on the last "
    "line by itself in the form Answer: followed by the number only."
)
PROBLEMS = [
    "The warehouse ships 240 parcels on Monday and a quarter more on Tuesday. How many parcels does it ship on the two days together?",
    "The library lends 85 books in the morning and twice as many in the afternoon. How many books does it lend that day?",
    "A cyclist rides 18 kilometres every weekday and 40 kilometres on Saturday. How far does she ride in one week?",
    "The bakery sells 36 loaves before noon and 29 after noon, and gives 7 to a shelter. How many loaves leave the shop?",
    "A tank holds 600 litres and loses 45 litres a day through a leak. How many litres are left after eight days?",
    "A school orders 14 boxes of pencils with 24 pencils in each box and hands out 300. How many pencils are left?",
    "A farmer plants 12 rows of 35 lettuces and sells 190 of them at the market. How many lettuces remain in the field?",
    "The tickets cost 12 dollars for adults and 7 for children. What does a family of two adults and three children pay?",
]


def _registry(*extra: EvalItem) -> EvalRegistry:
    items = [EvalItem("examqa", "q-1", "question", LONG_ITEM), EvalItem("examqa", "q-1", "answer", "B")]
    items += [EvalItem("mmlu_like", f"m-{i}", "answer", a) for i, a in enumerate(SHORT_ANSWERS)]
    items += [EvalItem("mmlu_like", "m-9", "question",
                       "Which planet in the solar system has the largest number of known moons?")]
    return EvalRegistry(tuple(items) + extra)


def _prompted() -> list[EvalItem]:
    return [EvalItem("prompted", f"p-{i}", "question", f"{TEMPLATE}\n\n{p}\n\n" + " ".join(
        f"Step {j}: we work out the quantity mentioned in the problem and keep the intermediate result." for j in range(4)))
        for i, p in enumerate(PROBLEMS)]


def test_the_long_item_is_long_and_the_paraphrase_is_light():
    a, b = normalize_tokens(LONG_ITEM), normalize_tokens(LONG_ITEM_PARAPHRASE)
    assert len(a) >= 100 and len(a) == len(b)
    changed = sum(x != y for x, y in zip(a, b))
    assert 0.05 <= changed / len(a) <= 0.12


# ------------------------------------------------------------------------------------------------
# what could not be checked


def test_unchecked_short_texts_are_counted_per_benchmark():
    index = ContaminationIndex.build(_registry(), DecontamConfig())
    cov = coverage_per_benchmark(index.unit_summary())
    assert cov["examqa"] == {"protected": 2, "checked": 1, "too_short": 1, "all_ngrams_suppressed": 0, "long_rule": 1}
    # "Not wrong, Not wrong", "Saturn", "391", "O(n log n)" have fewer than short_n = 8 tokens
    assert cov["mmlu_like"] == {"protected": 5, "checked": 1, "too_short": 4, "all_ngrams_suppressed": 0, "long_rule": 0}
    report = Decontaminator(index).report
    d = report.to_dict()
    assert d["coverage"] == cov
    assert any("Not checked: 5 of 7 protected texts have fewer than 8 tokens (examqa 1 of 2, mmlu_like 4 of 5)" in p
               for p in d["limits"])
    md = report.to_markdown()
    assert "## Limits" in md and "mmlu_like 4 of 5" in md and "long n-gram rule applies" in md


def test_limits_text_without_a_long_rule_says_so():
    paras = limits_text(DecontamConfig(long_item_tokens=None).method())
    assert "found only when containment still reaches tau = 0.5" in paras[0]
    assert "cannot show that the data holds no evaluation material" in paras[-1]


def test_data_card_prints_coverage_and_the_limits_section():
    from corpus_assets.domain.release import manifest as rm
    from test_release_manifest import full_manifest

    m = full_manifest()
    index = ContaminationIndex.build(_registry(), DecontamConfig())
    m["evaluation"]["detector_policy"] = DecontamConfig().method()
    m["evaluation"]["contamination"] = {
        "benchmarks": {"examqa": 1, "mmlu_like": 5}, "removed": 1,
        "coverage": coverage_per_benchmark(index.unit_summary()),
        "flagged_records": {"examqa": {"acted_on": 1, "rejected_earlier": 2}},
        "unchecked_protected_texts": 5,
    }
    card = rm.render_data_card(rm.ReleaseManifest.model_validate(m), known_limits=[], report_links={})
    section = card.split("## Contamination", 1)[1].split("## Tokenizer", 1)[0]
    assert "### What was checked" in section and "### Limits" in section
    assert "| examqa | 2 | 1 | 1 | 0 | 1 | 1 | 2 |" in section
    assert "| mmlu_like | 5 | 1 | 4 | 0 | 0 | 0 | 0 |" in section
    assert "Not checked: 5 of 7 protected texts have fewer than 8 tokens" in section
    assert "`unchecked_protected_texts`: 5" in section


# ------------------------------------------------------------------------------------------------
# the dual rule


def test_dual_rule_catches_a_light_paraphrase_of_a_long_item_that_containment_misses():
    reg = _registry()
    old = ContaminationIndex.build(reg, DecontamConfig(long_item_tokens=None))
    new = ContaminationIndex.build(reg, DecontamConfig())
    page = DIFFLIB_PAGE + "\n\nExam preparation\n\n" + LONG_ITEM_PARAPHRASE + "\n\n" + POSTGRES_PAGE
    (cand,) = old.candidates(page)
    assert cand.item_key == "examqa/q-1" and cand.containment < 0.5 and not cand.flagged  # containment alone misses it
    (hit,) = new.match(page)
    assert (hit.item_key, hit.rule, hit.item_tokens >= 100) == ("examqa/q-1", RULE_LONG_NGRAM, True)
    assert hit.containment == cand.containment  # same measure, another rule
    d = Decontaminator(new).decide({"text": page})
    assert d.action == "remove" and d.contamination_rows("web:p", "web")[0]["rule"] == RULE_LONG_NGRAM
    # verbatim it is flagged by containment, under both policies
    assert [m.rule for m in new.match(LONG_ITEM)] == [RULE_CONTAINMENT]


def test_dual_rule_does_not_flag_clean_documentation():
    new = ContaminationIndex.build(_registry(*_prompted()), DecontamConfig())
    for page in (DIFFLIB_PAGE, POSTGRES_PAGE, DIFFLIB_PAGE + "\n\n" + POSTGRES_PAGE):
        assert new.match(page) == []
        assert Decontaminator(new).decide({"text": page}).action == "keep"


def test_long_rule_needs_long_items_and_is_configurable():
    reg = _registry()
    with pytest.raises(ValueError, match="long_item_tokens"):
        DecontamConfig(long_item_tokens=20)
    strict = ContaminationIndex.build(reg, DecontamConfig(long_item_tokens=200))  # the item is shorter
    assert strict.match(LONG_ITEM_PARAPHRASE) == []
    two = ContaminationIndex.build(reg, DecontamConfig(long_item_min_ngrams=50))
    assert two.match(LONG_ITEM_PARAPHRASE) == []
    assert DecontamConfig().method()["long_item_tokens"] == 100


# ------------------------------------------------------------------------------------------------
# benchmark templates


def test_a_benchmark_template_shared_by_most_items_does_not_flag_a_record():
    reg = _registry(*_prompted())
    assert len(normalize_tokens(TEMPLATE)) >= 26  # 14+ 13-grams of boilerplate in every item
    # a page about prompting that quotes the instruction; the text after it starts like an item does
    page = DIFFLIB_PAGE + "\n\nA typical instruction reads: " + TEMPLATE + "\n\nThe warehouse example in the tutorial is different."
    index = ContaminationIndex.build(reg, DecontamConfig())
    assert index.template_ngrams()["prompted"][13] > 0 and index.template_ngrams()["examqa"][13] == 0
    assert index.match(page) == []
    # without the per-benchmark template rule (the 8 items are below the registry-wide limit of
    # 10), the long n-gram rule would flag every item of the benchmark
    loose = ContaminationIndex.build(reg, DecontamConfig(template_share=1.0))
    assert {m.item_id for m in loose.match(page)} == {f"p-{i}" for i in range(len(PROBLEMS))}
    # the items themselves are still found, by their own text
    item = next(it for it in reg.items if it.item_id == "p-3")
    assert [m.item_id for m in index.match("Worksheet: " + item.text)] == ["p-3"]
    report = Decontaminator(index).report.to_markdown()
    assert "benchmark templates suppressed" in report and "prompted" in report


# ------------------------------------------------------------------------------------------------
# every record is checked


def _document_record(text: str):
    from corpus_assets.domain.canonical.records import (
        SCHEMA_VERSIONS,
        DocumentPayload,
        Record,
        raw_parent_id,
        record_digest,
        text_view,
    )
    from corpus_assets.domain.core.hashing import dedup_key, sha256_text
    from corpus_assets.domain.ingest.sources_config import Governance

    payload = DocumentPayload(text=text, title="Exam notes")
    rec = Record.model_validate(dict(
        record_id="forum:t-9", source_id="forum", snapshot="forum.20260101T000000", item_id="t-9",
        schema_type=payload.kind, schema_version=SCHEMA_VERSIONS[payload.kind], adapter="test",
        adapter_version="1", domain="prose", lang="en", lang_score=0.95, group_id="g9",
        parents=[raw_parent_id("forum", "t-9")],
        governance=Governance(license="CC-BY-4.0", rights_evidence="https://example.org/license"),
        payload=payload,
    ))
    tv = text_view(rec)
    rec.text_sha256, rec.dedup_key, rec.raw_sha256 = sha256_text(tv), dedup_key(tv, rec.domain), "0" * 64
    rec.record_sha256 = record_digest(rec)
    return rec


def test_a_quality_rejected_record_still_gets_its_contamination_row():
    from corpus_assets.domain.canonical.records import record_to_row
    from corpus_assets.domain.curate import curated_layer as cl
    from corpus_assets.domain.curate.config import CurationConfig
    from corpus_assets.domain.curate.quality import judge_record

    reg = _registry()
    config = CurationConfig()  # the shipped quality policy
    # a forum dump of the exam item: too short and repetitive for the web quality rules
    rec = _document_record(LONG_ITEM + "\n\n" + "\n".join(["bump"] * 30))
    assert not judge_record(rec, config.quality).passed
    index = ContaminationIndex.build(reg, config.decontam)
    policy = cl.curation_policy_version(config, reg.digest)
    summary = cl.CurationSummary(version=None, policy_version=policy, records_in=0)
    summary.decontam = Decontaminator(index).report
    buf = {name: [] for name in cl.CURATED_TABLES}
    cl._curate_one(record_to_row(rec), config, index, policy, buf, summary)
    (decision,) = buf["decisions"]
    assert (decision["stage"], decision["outcome"]) == ("quality", "rejected")  # quality's decision stands
    (row,) = buf["contamination"]
    assert (row["record_id"], row["benchmark"], row["item_id"]) == ("forum:t-9", "examqa", "q-1")
    assert (row["action"], row["decided_by"], row["rule"]) == ("none", "quality", RULE_CONTAINMENT)
    assert summary.contamination == {"examqa": 1}
    rep = summary.decontam
    assert (rep.records_flagged, rep.records_removed, rep.records_flagged_rejected_earlier) == (1, 0, {"quality": 1})
    manifest = cl.decontam_manifest(rep)
    assert manifest["coverage"]["mmlu_like"]["too_short"] == 4 and manifest["limits"]
    json.dumps(manifest)  # manifest-ready
