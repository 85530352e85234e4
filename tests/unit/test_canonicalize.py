"""Raw item -> canonical outcome: every reason code, normalization, extraction, language ID, digests."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from ftfy.badness import is_bad

from corpus_assets.domain.canonical import canonicalize as canon
from corpus_assets.domain.canonical.canonicalize import (
    POLICY_VERSION,
    CanonicalPolicy,
    canonicalize_item,
    policy_version,
)
from corpus_assets.domain.canonical.extraction import (
    HtmlTooDeepError,
    TextDecodeError,
    decode_bytes,
    extract_html,
    looks_binary,
    sniff_binary,
)
from corpus_assets.domain.core.hashing import canonical_json, dedup_key, sha256_bytes, sha256_text
from corpus_assets.domain.canonical.langid import LANGID_MODEL_DIGEST, LANGID_MODEL_PATH, detect_language
from corpus_assets.domain.canonical.normalize import might_be_mojibake, normalize_text
from corpus_assets.domain.ingest.raw_items import CAPTURE_FAILURES, RawItem
from corpus_assets.domain.core.reasons import OUTCOME_OF, Outcome, Reason
from corpus_assets.domain.canonical.records import RECORDS_SCHEMA, record_digest, record_to_row, row_to_record, text_view
from corpus_assets.domain.ingest.sources_config import (
    Governance,
    HttpCrawlSource,
    JsonlSource,
    LocalDirSource,
    ParquetSource,
    WarcSource,
)

GOV = Governance(license="CC-BY-4.0", rights_evidence="https://example.org/license")
POLICY = CanonicalPolicy()
SNAP = "docs.20261129T140000"
DOCS = LocalDirSource(id="docs", kind="local_dir", root="/data/docs", governance=GOV)
CODE_DOCS = LocalDirSource(id="code", kind="local_dir", root="/data/code", governance=GOV, domain="code")
SITE = HttpCrawlSource(id="site", kind="http_crawl", seeds=["https://docs.example.org/"], governance=GOV)
WARC = WarcSource(id="arch", kind="warc", root="/data/warc", governance=GOV)

EN = (
    "Open the file with a context manager so that it is closed even when an error occurs. "
    "The with statement guarantees that the cleanup code runs, which keeps file handles from leaking "
    "in long-running programs and makes the intent of the code obvious to every reader."
)
DE = (
    "Öffnen Sie die Datei mit einem Kontextmanager, damit sie auch dann geschlossen wird, wenn ein Fehler "
    "auftritt. Die with-Anweisung garantiert, dass der Aufräumcode ausgeführt wird, und macht die Absicht "
    "des Programms für jeden Leser deutlich."
)
ZH = (
    "使用上下文管理器打开文件，这样即使发生错误，文件也会被关闭。with 语句保证清理代码一定会执行，"
    "可以防止长时间运行的程序泄漏文件句柄，并让每一位读者都能清楚地理解代码的意图。数据工程既要保证处理链能够持续运行，"
    "也要解释每个训练词元为何进入数据集。"
)


def item(content, item_id="page.html", content_type="text/html", uri=None, **kw) -> RawItem:
    return RawItem(item_id=item_id, uri=uri or f"file:///data/docs/{item_id}", retrieved_at="2026-11-29T14:00:00Z",
                   content=content, content_type=content_type, **kw)


def html(body: str, title: str = "Page") -> bytes:
    return f"<html><head><title>{title}</title></head><body><main>{body}</main></body></html>".encode()


def run(it, source=DOCS, snapshot=SNAP, policy=POLICY, index=0):
    out = canonicalize_item(it, index, source, snapshot, policy)
    assert out.item_index == index and out.item_id == it.item_id
    assert out.outcome is OUTCOME_OF[out.reason]
    assert (out.record is not None) == (out.outcome is Outcome.ACCEPTED)
    assert len(out.detail) <= 300
    return out


def reason_of(it, source=DOCS, **kw):
    return run(it, source, **kw).reason


# --- capture statuses, size, emptiness --------------------------------------------------------


@pytest.mark.parametrize("status", sorted(r.value for r in CAPTURE_FAILURES))
def test_capture_failures_keep_their_reason(status):
    out = run(item(None, status=status, status_detail="HTTP 404"))
    assert out.reason.value == status and out.detail == "HTTP 404"
    assert out.outcome is OUTCOME_OF[Reason(status)]


def test_unknown_capture_status_is_quarantined():
    assert reason_of(item(b"x", status="weird")) is Reason.UNREADABLE_INPUT


@pytest.mark.parametrize("content", [None, b""])
def test_no_content_is_an_empty_document(content):
    out = run(item(content))
    assert out.reason is Reason.EMPTY_DOCUMENT and out.outcome is Outcome.REJECTED


def test_fifty_megabyte_document_is_too_large_before_any_work(monkeypatch):
    big = b"All work and no play makes a dull corpus. " * (50 * 1024 * 1024 // 42)
    # nothing after the size check may run: make decoding and extraction explode if called
    monkeypatch.setattr(canon, "sniff_binary", lambda *_: pytest.fail("sniffed an oversized item"))
    monkeypatch.setattr(canon, "decode_bytes", lambda *_a, **_k: pytest.fail("decoded an oversized item"))
    out = run(item(big, "big.txt", "text/plain"))
    assert out.reason is Reason.TOO_LARGE and out.outcome is Outcome.QUARANTINED
    assert str(POLICY.max_document_bytes) in out.detail
    row_source = JsonlSource(id="d", kind="jsonl", root="/x", include=["*"], adapter="text_document", governance=GOV)
    small = CanonicalPolicy(max_document_bytes=10)
    assert reason_of(item(b'{"text": "longer than ten bytes"}', "a.jsonl#L1", "application/x-jsonl-line"), row_source, policy=small) is Reason.TOO_LARGE


# --- binary, types, decoding ------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, label",
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, "png"),
        (b"GIF89a" + bytes(100), "gif"),
        (b"\xff\xd8\xff\xe0" + bytes(100), "jpeg"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "pdf"),
        (b"PK\x03\x04\x14\x00" + bytes(40), "zip"),
        (b"\x1f\x8b\x08\x00" + bytes(40), "gzip"),
        (b"\x7fELF\x02\x01\x01" + bytes(40), "elf"),
        (b"<html><body>text\x00with a NUL</body></html>", "nul bytes"),
        (bytes(range(1, 9)) * 100 + b"<p>x</p>", "control bytes"),
    ],
)
def test_binary_content_is_quarantined_even_when_named_html(data, label):
    assert sniff_binary(data) == label and looks_binary(data)
    out = run(item(data, "image.html", "text/html"))
    assert out.reason is Reason.BINARY_CONTENT and label in out.detail


def test_text_with_ordinary_controls_is_not_binary():
    assert not looks_binary(b"col1\tcol2\r\nline\x0cpage \x1b[1mbold\x1b[0m")
    assert not looks_binary("hi".encode("utf-16"))


@pytest.mark.parametrize(
    "it, source",
    [
        (item(b"a,b\n1,2\n", "t.csv", "text/csv"), DOCS),
        (item(b"x", "blob.bin", "application/octet-stream"), DOCS),
        # an API response: JSON without a source-code extension
        (item(b"{}", "https://docs.example.org/api", "application/json", uri="https://docs.example.org/api"), SITE),
        (item(b"WARC-Type: warcinfo\r\n", "rec-1", "application/warc-fields", uri="urn:x"), WARC),
    ],
)
def test_unsupported_content_types(it, source):
    assert reason_of(it, source) is Reason.UNSUPPORTED_CONTENT_TYPE


def test_invalid_utf8_text_is_quarantined_and_declared_charsets_are_honoured():
    out = run(item(b"caf\xe9 au lait", "menu.txt", "text/plain"))
    assert out.reason is Reason.INVALID_UTF8 and "byte 3" in out.detail
    ok = run(item("café au lait".encode("latin-1"), "menu.txt", "text/plain", extra={"charset": "iso-8859-1"}))
    assert ok.record.payload.text == "café au lait"
    ok2 = run(item("café".encode("cp1252"), "menu.txt", "text/plain; charset=windows-1252"))
    assert ok2.record.payload.text == "café"
    with pytest.raises(TextDecodeError):
        decode_bytes(b"\xff\xfe\xfd", "application/json")
    assert decode_bytes(b"\xef\xbb\xbfhi", "text/plain") == "hi"
    # an unknown charset label is no licence to guess: UTF-8 or nothing
    assert decode_bytes("ok ✓".encode(), "text/plain; charset=x-made-up") == "ok ✓"
    with pytest.raises(TextDecodeError):
        decode_bytes(b"caf\xe9", "text/plain; charset=x-made-up")
    assert decode_bytes("hi ✓".encode("utf-16"), "text/plain") == "hi ✓"


def test_html_charsets_header_meta_and_detection():
    latin = ("<html><body><main><p>" + "Crème brûlée à la française, très bien. " * 5 + "</p></main></body></html>").encode("cp1252")
    out = run(item(latin, extra={"charset": "windows-1252"}))
    assert "Crème brûlée" in out.record.payload.text
    meta = "<html><head><meta charset='koi8-r'></head><body><main><p>Привет, мир! Это проверка кодировки.</p></main></body></html>".encode("koi8-r")
    assert "Привет, мир" in run(item(meta)).record.payload.text
    undeclared = run(item(latin))  # not UTF-8, no header: detection
    assert "Crème brûlée" in undeclared.record.payload.text


# --- HTML extraction --------------------------------------------------------------------------


def test_html_document_record():
    body = f"<h1>Reading files</h1><p>{EN}</p><pre>with open(p) as f:\n    data = f.read()</pre>"
    out = run(item(html(body, "Reading  files\n"), "guide/files.html"))
    rec = out.record
    assert out.reason is Reason.OK and rec.schema_type == "document" and rec.adapter == "html_resiliparse"
    assert rec.payload.title == "Reading files"
    assert rec.payload.text.startswith("Reading files\n\nOpen the file")
    assert "    data = f.read()" in rec.payload.text  # <pre> indentation survives
    assert rec.record_id == "docs:guide/files.html" and rec.parents == ["raw:docs:guide/files.html"]
    assert rec.group_id == "doc:docs:guide/files.html" and rec.payload.url is None  # no local paths in content
    assert rec.domain == "prose" and rec.lang == "en" and rec.lang_score > 0.8
    assert rec.raw_sha256 == sha256_bytes(html(body, "Reading  files\n"))
    assert rec.text_sha256 == sha256_text(text_view(rec))
    assert rec.dedup_key == dedup_key(text_view(rec), "prose")


def test_crawled_page_uses_its_url():
    out = run(item(html(f"<p>{EN}</p>"), "https://docs.example.org/a.html", uri="https://docs.example.org/a.html"), SITE)
    assert out.record.payload.url == "https://docs.example.org/a.html"
    assert out.record.group_id == "url:https://docs.example.org/a.html"
    assert out.record.record_id == "site:https://docs.example.org/a.html"


def test_html_without_text_is_an_empty_document():
    assert reason_of(item(b"<html><head><title>x</title></head><body>  <script>var a=1;</script></body></html>")) is Reason.EMPTY_DOCUMENT


def test_hundred_thousand_nested_divs_are_quarantined_quickly():
    deep = b"<html><body>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000 + b"</body></html>"
    out = run(item(deep, "nested.html"))
    assert out.reason is Reason.EXTRACTION_FAILED and "deeper than 2000" in out.detail
    with pytest.raises(HtmlTooDeepError):
        extract_html(b"<div>" * 50 + b"x", max_depth=20)
    # within the limit: extracted normally
    ok = run(item(b"<html><body>" + b"<div>" * 1500 + EN.encode() + b"</div>" * 1500 + b"</body></html>", "ok.html"))
    assert ok.reason is Reason.OK and ok.record.payload.text == EN


def test_main_content_switch():
    page = b"<html><body><nav><ul><li><a href='/'>Home</a></li><li><a href='/x'>Docs</a></li></ul></nav><main><p>" + EN.encode() + b"</p></main></body></html>"
    _, main = extract_html(page)
    _, full = extract_html(page, main_content=False)
    assert EN in main and "Home" not in main
    assert "Home" in full and EN in full


# --- normalization ----------------------------------------------------------------------------


def test_normalization_facts():
    # "你好" as UTF-8 bytes read as Windows-1252 ("ä½ å¥½", the third byte is a no-break space)
    assert "你好".encode("utf-8").decode("latin-1") == "ä½\xa0å¥½"
    assert normalize_text("ä½\xa0å¥½") == "你好"
    assert normalize_text("The cafÃ© serves crÃ¨me brÃ»lÃ©e") == "The café serves crème brûlée"
    assert normalize_text("e\u0301") == "é"  # NFC
    assert normalize_text("a\r\nb\rc") == "a\nb\nc"
    assert normalize_text("nul\x00byte\x07 bell\x7f del") == "nulbyte bell del"
    assert normalize_text("\ufeffbom and zero\ufeffwidth") == "bom and zerowidth"
    assert normalize_text("emoji 👩\u200d💻 and ZWNJ می\u200cخواهم") == "emoji 👩\u200d💻 and ZWNJ می\u200cخواهم"
    assert normalize_text("“smart” quotes — dashes… ﬁ ligature &amp;") == "“smart” quotes — dashes… ﬁ ligature &amp;"
    code = "def f(x):   \n\tif x:  \n        return [1,  2]\n\n\n"
    assert normalize_text(code) == "def f(x):   \n\tif x:  \n        return [1,  2]"  # only the end is stripped
    assert normalize_text("  leading kept") == "  leading kept"


def _mojibake_samples():
    texts = ["你好，世界", "Grüße aus München", "naïve café", "Привет", "Ελληνικά", "“quoted” — dash", "日本語のテキスト", "½ × ² €"]
    out = []
    for t in texts:
        for enc in ("cp1252", "latin-1", "cp1251", "mac_roman", "cp437", "cp1253"):
            try:
                out.append(t.encode("utf-8").decode(enc))
            except UnicodeDecodeError:
                pass
    rng = random.Random(7)
    alphabet = "aeé üß€œŒÃÂ ÂÃ©®°·»‘’“”–—…ƒˆ‰Š‹ŒŽ\x81\x9dÐØÙàâóä×²³ВГРСвЂβΒΓΞΟā√≈│┌═░ "
    for _ in range(3000):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    return out


def test_mojibake_shortcut_agrees_with_ftfy():
    for s in _mojibake_samples():
        assert might_be_mojibake(s) == is_bad(s), repr(s)
        padded = "plain ascii text " * 20 + s + " more text ü " * 10
        assert might_be_mojibake(padded) == is_bad(padded), repr(s)


def test_mojibake_repaired_in_documents():
    broken = ("The café serves crème brûlée every day. " * 3).encode("utf-8").decode("cp1252").encode("utf-8")
    out = run(item(broken, "menu.md", "text/markdown"))
    assert out.record.payload.text == ("The café serves crème brûlée every day. " * 3).rstrip()


def test_code_file_whitespace_preserved_in_text_and_dedup_key():
    src = "import os\n\n\ndef main():  \n\tpath = os.getcwd()   # trailing spaces kept  \n        return path\n"
    out = run(item(src.encode(), "tool/main.py", "application/octet-stream"), DOCS)
    rec = out.record
    assert out.reason is Reason.OK and rec.domain == "code" and rec.adapter == "text_bytes"
    assert rec.payload.text == src.rstrip() and rec.payload.content_type == "text/plain"
    assert rec.dedup_key == dedup_key(src.rstrip(), "code")
    reindented = src.replace("\tpath", "    path")
    other = run(item(reindented.encode(), "tool/main2.py", "application/octet-stream")).record
    assert other.dedup_key != rec.dedup_key
    # the same two texts as prose documents would share a key
    assert dedup_key(src.rstrip(), "prose") == dedup_key(reindented.rstrip(), "prose")
    md = run(item(b"# Notes\n\n    def f():\n        return 1\n", "notes.md", "text/markdown"), CODE_DOCS).record
    assert md.domain == "code"  # source domain


# --- language ID ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, lang", [(EN, "en"), (DE, "de"), (ZH, "zh")])
def test_language_of_paragraphs(text, lang):
    got, score = detect_language(text, 4000)
    assert got == lang and 0.5 < score <= 1.0
    out = run(item(html(f"<p>{text}</p>"), f"{lang}.html"))
    assert out.record.lang == lang


def test_language_id_edge_cases():
    assert detect_language("1234 5678 -- !!", 4000) == ("und", 0.0)
    assert detect_language("", 4000) == ("und", 0.0)
    # only the first max_chars characters count
    assert detect_language(EN + " " + ZH * 30, 100)[0] == "en"
    assert detect_language("line one\nline two\r\nline three of English text", 4000)[0] == "en"
    assert LANGID_MODEL_PATH.name == "lid.176.ftz" and len(LANGID_MODEL_DIGEST) == 64


# --- rows ---------------------------------------------------------------------------------

JSONL = JsonlSource(id="dump", kind="jsonl", root="/x", include=["*.jsonl"], adapter="text_document", governance=GOV)
CHAT = JsonlSource(id="chat", kind="jsonl", root="/x", include=["*.jsonl"], adapter="openai_messages", governance=GOV)
TASKS = ParquetSource(id="tasks", kind="parquet", root="/x", include=["*.parquet"], adapter="task", governance=GOV)


def line(content: bytes, n: int = 1):
    return item(content, f"a.jsonl#L{n}", "application/x-jsonl-line", uri="a.jsonl")


@pytest.mark.parametrize(
    "content, reason, fragment",
    [
        (b"   \t", Reason.EMPTY_DOCUMENT, "blank"),
        (b"\xff\xfe bad utf8", Reason.INVALID_UTF8, "byte 0"),
        (b"{not json", Reason.MALFORMED_JSON, "line 1, column 2"),
        (b'{"text": NaN}', Reason.MALFORMED_JSON, "NaN"),
        (b'{"text": "a", "text": "b"}', Reason.MALFORMED_JSON, "duplicate key"),
        (b"[" * 100_000 + b"]" * 100_000, Reason.MALFORMED_JSON, ""),
        (b"[1, 2]", Reason.NOT_AN_OBJECT, "array"),
        (b'"just a string"', Reason.NOT_AN_OBJECT, "string"),
        (b'{"no_text": 1}', Reason.UNKNOWN_SCHEMA, "text"),
        (b'{"text": "x", "extra": 1}', Reason.SCHEMA_VIOLATION, "'extra'"),
        (b'{"text": "lone \\ud800 surrogate"}', Reason.INVALID_UTF8, "surrogate"),
        (b'{"text": ""}', Reason.EMPTY_DOCUMENT, "empty"),
    ],
)
def test_jsonl_line_failures(content, reason, fragment):
    out = run(line(content), JSONL)
    assert out.reason is reason and fragment in out.detail


def test_jsonl_document_rows_and_surrogate_pairs():
    out = run(line('{"id": "d1", "text": "Emoji \\ud83d\\ude00 are fine.", "url": "https://x.test/d1"}'.encode()), JSONL)
    rec = out.record
    assert rec.payload.text == "Emoji 😀 are fine." and rec.record_id == "dump:d1"
    assert rec.group_id == "url:https://x.test/d1" and rec.adapter == "text_document"
    assert run(line(b'\xef\xbb\xbf{"text": "BOM on the first line."}'), JSONL).reason is Reason.OK


def test_unsupported_adapter_version_is_unknown_schema():
    v2 = JsonlSource(id="dump", kind="jsonl", root="/x", include=["*"], adapter="text_document", adapter_version="2", governance=GOV)
    out = run(line(b'{"text": "x"}'), v2)
    assert out.reason is Reason.UNKNOWN_SCHEMA and "version" in out.detail


def test_chat_rows_records_and_domains():
    rows = [
        {"id": "chat-0003", "messages": [
            {"role": "user", "content": "What's the weather in Lisbon right now?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Lisbon\"}"}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 19, \"sky\": \"clear\"}"},
            {"role": "assistant", "content": "It is 19 °C with a clear sky in Lisbon."}]},
        {"id": "chat-0001", "messages": [
            {"role": "user", "content": "How do I read a file line by line?"},
            {"role": "assistant", "content": "Iterate over the file object:\n\n```python\nwith open(path) as f:\n    for line in f:\n        handle(line)\n```"}]},
        {"id": "chat-0005", "messages": [
            {"role": "user", "content": "Convert 10 miles to kilometres."},
            {"role": "tool", "tool_call_id": "call_missing", "content": "16.09"},
            {"role": "assistant", "content": "About 16.09 km."}]},
    ]
    outs = [run(line(json.dumps(r, ensure_ascii=False).encode(), i + 1), CHAT, index=i) for i, r in enumerate(rows)]
    assert [o.reason for o in outs] == [Reason.OK, Reason.OK, Reason.SCHEMA_VIOLATION]
    assert "answers no earlier" in outs[2].detail
    weather, code = outs[0].record, outs[1].record
    assert weather.record_id == "chat:chat-0003" and weather.schema_type == "messages" and weather.adapter == "openai_messages"
    assert weather.group_id == "conversation:chat:chat-0003" and weather.domain == "prose" and weather.lang == "en"
    assert code.domain == "code"  # a fenced block: never fold its whitespace
    assert code.dedup_key == dedup_key(text_view(code), "code")


def test_task_reference_never_reaches_the_public_record():
    ref = "REF-7f3a: the gcd is twenty-one"
    row = {"task_id": "t-gcd-01", "input": "Compute gcd(462, 1071). Give the final answer in \\boxed{}.", "reference": ref, "metadata": {"type": "number_theory"}}
    it = item(canonical_json(row), "tasks.parquet#R1", "application/x-parquet-row", uri="tasks.parquet")
    out = run(it, TASKS)
    rec = out.record
    assert out.reason is Reason.OK and rec.schema_type == "task"
    assert out.private_reference == {"record_id": "tasks:t-gcd-01", "reference": ref}
    public = [rec.model_dump_json(), text_view(rec), json.dumps(record_to_row(rec), ensure_ascii=False), repr(rec)]
    for blob in public:
        assert ref not in blob and "twenty-one" not in blob
    assert "reference" not in json.loads(record_to_row(rec)["payload_json"])
    leaky = {"input": "Solve it.", "reference": "a long secret reference answer", "metadata": {"answer": "a long secret reference answer"}}
    assert run(item(canonical_json(leaky), "tasks.parquet#R2", "application/x-parquet-row"), TASKS).reason is Reason.SCHEMA_VIOLATION


# --- robustness ---------------------------------------------------------------------------


def test_unexpected_errors_become_quarantines_with_the_exception_type(monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("do not show this content")

    monkeypatch.setattr(canon, "extract_html", boom)
    out = run(item(html(f"<p>{EN}</p>")))
    assert out.reason is Reason.EXTRACTION_FAILED and "RuntimeError" in out.detail and "content" not in out.detail
    monkeypatch.setattr(canon._adapters, "adapt_row", boom)
    out = run(line(b'{"text": "fine"}'), JSONL)
    assert out.reason is Reason.SCHEMA_VIOLATION and "RuntimeError" in out.detail


# --- determinism and digests --------------------------------------------------------------


def test_same_item_twice_gives_identical_rows():
    for it, source in [
        (item(html(f"<h1>T</h1><p>{EN}</p><p>{DE}</p>")), DOCS),
        (line('{"id": 1, "text": "Déjà vu, twice."}'.encode()), JSONL),
    ]:
        a = record_to_row(run(it, source).record)
        b = record_to_row(run(it, source).record)
        assert a == b
        # canonical rows fit the Arrow schema and read back into the same record
        assert pa.Table.from_pylist([a], schema=RECORDS_SCHEMA).to_pylist() == [a]
        back = row_to_record(a)
        assert record_to_row(back) == a and record_digest(back) == a["record_sha256"]


def test_record_digest_is_independent_of_the_snapshot():
    it = item(html(f"<p>{EN}</p>"), "a.html")
    a = run(it, snapshot="docs.20261129T140000").record
    b = run(it, snapshot="docs.20270101T000000").record
    assert a.snapshot != b.snapshot
    assert a.record_sha256 == b.record_sha256 and a.dedup_key == b.dedup_key and a.text_sha256 == b.text_sha256
    c = run(item(html(f"<p>{EN} Changed.</p>"), "a.html")).record
    assert c.record_sha256 != a.record_sha256


def test_policy_version_is_stable_and_tracks_policy_values():
    assert POLICY_VERSION == policy_version(CanonicalPolicy()) == policy_version()
    assert POLICY_VERSION.startswith(canon.CODE_VERSION + "+")
    assert policy_version(CanonicalPolicy(max_html_depth=500)) != POLICY_VERSION
    assert policy_version(CanonicalPolicy(langid_max_chars=1000)) != POLICY_VERSION
