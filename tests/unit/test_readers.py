"""Readers of file sources: what a user can rely on for local dirs, JSONL, Parquet and WARC inputs."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus_assets.domain.ingest.raw_items import CAPTURED
from corpus_assets.domain.ingest.file_readers import read_source_items
from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.ingest.sources_config import (
    ConfigError,
    JsonlSource,
    LocalDirSource,
    ParquetSource,
    WarcSource,
    parse_sources,
)

GOV = {"license": "CC0-1.0", "rights_evidence": "test fixture"}
FIXED = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)


def read(source) -> list:
    return list(read_source_items(source, clock=lambda: FIXED))


def jsonl_source(root: Path, include=("**/*.jsonl", "**/*.jsonl.gz")) -> JsonlSource:
    return JsonlSource(id="dump", kind="jsonl", root=root, include=list(include), adapter="text_document",
                       governance=GOV)


def warc_source(root: Path) -> WarcSource:
    return WarcSource(id="warcs", kind="warc", root=root, governance=GOV)


# --- local_dir ---------------------------------------------------------------------------------


def test_local_dir_reads_files_in_sorted_order_with_relative_ids(tmp_path):
    for name in ["z.md", "b/page.html", "a.txt", "b/a.htm", "ignored.bin"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    os.utime(tmp_path / "a.txt", (0, 0))
    items = read(LocalDirSource(id="docs", kind="local_dir", root=tmp_path, governance=GOV))
    assert [i.item_id for i in items] == ["a.txt", "b/a.htm", "b/page.html", "z.md"]
    assert [i.content_type for i in items] == ["text/plain", "text/html", "text/html", "text/markdown"]
    assert items[0].content == b"a.txt" and items[0].status == CAPTURED
    assert items[0].uri == (tmp_path / "a.txt").as_uri()
    assert items[0].retrieved_at == "2026-11-29T14:00:00.000000Z"  # from the clock, not the file mtime
    assert items[0].extra["mtime"].startswith("1970-01-01")


def test_a_50_mb_document_is_captured_whole(tmp_path):
    data = b"0123456789abcdef" * (50 * 1024 * 1024 // 16)
    (tmp_path / "big.txt").write_bytes(data)
    [item] = read(LocalDirSource(id="docs", kind="local_dir", root=tmp_path, governance=GOV))
    assert len(item.content) == 50 * 1024 * 1024
    assert hashlib.sha256(item.content).digest() == hashlib.sha256(data).digest()


def test_symlink_escaping_the_root_is_refused_and_not_read(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    (root / "ok.txt").write_bytes(b"ok")
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "inside_link.txt").symlink_to(root / "ok.txt")
    items = read(LocalDirSource(id="docs", kind="local_dir", root=root, governance=GOV))
    by_id = {i.item_id: i for i in items}
    assert by_id["link.txt"].status == Reason.UNREADABLE_INPUT.value
    assert "escapes the source root" in by_id["link.txt"].status_detail and by_id["link.txt"].content is None
    assert by_id["inside_link.txt"].content == b"ok"  # links that stay inside the root are fine


def test_missing_root_raises_naming_source_and_root(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match=r"'docs'.*nope"):
        read(LocalDirSource(id="docs", kind="local_dir", root=missing, governance=GOV))


def test_glob_with_parent_reference_is_rejected_by_config():
    source = {"id": "docs", "kind": "local_dir", "root": "/data", "include": ["../*.txt"], "governance": GOV}
    data = {"sources": [source]}
    with pytest.raises(ConfigError, match=r"sources\[0\]\.include.*'\.\.'"):
        parse_sources(data)


# --- jsonl -------------------------------------------------------------------------------------


def test_every_jsonl_line_is_an_item_with_its_raw_bytes(tmp_path):
    raw = b'{"text": "one"}\n\n   \n{not json\n{"text": "caf\xe9 latin-1"}\r\n{"text": "no newline at end"}'
    (tmp_path / "a.jsonl").write_bytes(raw)
    items = read(jsonl_source(tmp_path))
    assert [i.item_id for i in items] == [f"a.jsonl#L{n}" for n in range(1, 7)]
    assert [i.content for i in items] == [b'{"text": "one"}', b"", b"   ", b"{not json", b'{"text": "caf\xe9 latin-1"}',
                                          b'{"text": "no newline at end"}']
    assert all(i.status == CAPTURED and i.content_type == "application/x-jsonl-line" for i in items)
    assert items[3].extra == {"file": "a.jsonl", "line": 4}


def _lines(n: int) -> list[bytes]:
    # varied content so gzip output is long enough to cut in the middle
    return [json.dumps({"text": f"line {i} " + hashlib.sha256(str(i).encode()).hexdigest()}).encode() for i in range(n)]


def test_truncated_jsonl_gz_yields_complete_lines_then_one_truncated_item(tmp_path):
    lines = _lines(3000)
    blob = gzip.compress(b"\n".join(lines) + b"\n")
    (tmp_path / "a.jsonl.gz").write_bytes(blob[: len(blob) * 2 // 3])
    (tmp_path / "b.jsonl").write_bytes(b'{"text": "next file"}\n')
    items = read(jsonl_source(tmp_path))
    a_items = [i for i in items if i.item_id.startswith("a.jsonl.gz#L")]
    assert 0 < len(a_items) < len(lines)
    assert [i.content for i in a_items] == lines[: len(a_items)]  # complete lines only, in order
    truncated = [i for i in items if i.status == Reason.TRUNCATED_ARCHIVE.value]
    assert [i.item_id for i in truncated] == ["a.jsonl.gz#truncated"]
    assert f"gzip stream ended early after line {len(a_items)}" in truncated[0].status_detail
    assert truncated[0].content is None
    assert items[-1].item_id == "b.jsonl#L1" and items[-1].content == b'{"text": "next file"}'


def test_corrupt_gzip_is_reported_as_truncated_archive(tmp_path):
    blob = bytearray(gzip.compress(b"\n".join(_lines(3000))))
    blob[len(blob) // 2 : len(blob) // 2 + 64] = b"\x00" * 64
    (tmp_path / "a.jsonl.gz").write_bytes(bytes(blob))
    items = read(jsonl_source(tmp_path))
    assert items[-1].status == Reason.TRUNCATED_ARCHIVE.value
    assert "gzip" in items[-1].status_detail and len(items) > 1


def test_multi_member_gzip_is_read_completely(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n') + gzip.compress(b'{"a": 2}\n'))
    items = read(jsonl_source(tmp_path))
    assert [i.content for i in items] == [b'{"a": 1}', b'{"a": 2}']


# --- parquet -----------------------------------------------------------------------------------


def test_parquet_rows_become_canonical_json_items(tmp_path):
    table = pa.table({
        "text": ["first", "second"],
        "blob": [b"utf8 bytes", b"\xff\xfe"],
        "when": pa.array([datetime(2026, 1, 2, 3, 4, 5), None], type=pa.timestamp("s")),
        "score": [1.5, float("nan")],
    })
    pq.write_table(table, tmp_path / "rows.parquet", row_group_size=1)
    (tmp_path / "zz_corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    src = ParquetSource(id="pq", kind="parquet", root=tmp_path, include=["*.parquet"], adapter="text_document",
                        governance=GOV)
    items = read(src)
    assert [i.item_id for i in items] == ["rows.parquet#R1", "rows.parquet#R2", "zz_corrupt.parquet"]
    assert items[0].content == b'{"blob":"utf8 bytes","score":1.5,"text":"first","when":"2026-01-02T03:04:05"}'
    assert json.loads(items[1].content) == {"blob": "//4=", "score": "NaN", "text": "second", "when": None}
    assert items[0].content_type == "application/x-parquet-row"
    assert items[2].status == Reason.UNREADABLE_INPUT.value and items[2].content is None


# --- warc --------------------------------------------------------------------------------------


def warc_record(warc_type: str, uri: str, block: bytes, block_type: str, n: int) -> bytes:
    head = (f"WARC/1.0\r\nWARC-Type: {warc_type}\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{n:012d}>\r\n"
            f"WARC-Date: 2026-01-0{n % 9 + 1}T00:00:00Z\r\nWARC-Target-URI: {uri}\r\nContent-Type: {block_type}\r\n"
            f"Content-Length: {len(block)}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def http_response(body: bytes, ctype: str = "text/html; charset=UTF-8", extra: str = "",
                  status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{extra}\r\n".encode() + body


def sample_records() -> list[bytes]:
    chunked_gzip = gzip.compress(b"<p>decoded</p>")
    chunked = b"%x\r\n" % len(chunked_gzip) + chunked_gzip + b"\r\n0\r\n\r\n"
    return [
        warc_record("warcinfo", "", b"software: hand-written\r\n", "application/warc-fields", 0),
        warc_record("request", "http://ex.test/1", b"GET /1 HTTP/1.1\r\nHost: ex.test\r\n\r\n",
                    "application/http; msgtype=request", 1),
        warc_record("response", "http://ex.test/1", http_response(b"<p>one</p>" * 40),
                    "application/http; msgtype=response", 2),
        warc_record("response", "http://ex.test/2",
                    http_response(chunked, extra="Transfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n"),
                    "application/http; msgtype=response", 3),
        warc_record("response", "http://ex.test/missing", http_response(b"gone", "text/plain", status="404 Not Found"),
                    "application/http; msgtype=response", 4),
        warc_record("response", "http://ex.test/3", http_response(b"<p>three</p>" * 40),
                    "application/http; msgtype=response", 5),
    ]


def test_warc_response_records_become_items_with_http_payloads(tmp_path):
    (tmp_path / "crawl.warc").write_bytes(b"".join(sample_records()))
    items = read(warc_source(tmp_path))
    assert [i.uri for i in items] == ["http://ex.test/1", "http://ex.test/2", "http://ex.test/missing",
                                      "http://ex.test/3"]
    first = items[0]
    assert first.item_id == "<urn:uuid:00000000-0000-0000-0000-000000000002>"
    assert first.content == b"<p>one</p>" * 40  # payload only, no HTTP headers
    assert (first.content_type, first.http_status, first.status) == ("text/html", 200, CAPTURED)
    assert first.extra == {"warc_file": "crawl.warc", "warc_date": "2026-01-03T00:00:00Z", "charset": "utf-8"}
    assert items[1].content == b"<p>decoded</p>"  # chunked transfer and gzip content encoding undone
    assert items[2].http_status == 404 and items[2].content == b"gone"


@pytest.mark.parametrize("gz, cut, complete", [
    (False, "in_last_block", 3),
    (False, "in_last_header", 3),
    (False, "in_separator", 4),  # the last block is whole; only the record separator is missing
    (True, "in_last_member", 3),
    (True, "in_gzip_trailer", 4),  # everything decompressed, but the member's CRC/size trailer is missing
])
def test_truncated_warc_yields_complete_records_then_one_truncated_item(tmp_path, gz, cut, complete):
    records = sample_records()
    if gz:
        members = [gzip.compress(r) for r in records]
        last = members[-1]
        blob = b"".join(members[:-1]) + (last[: len(last) // 2] if cut == "in_last_member" else last[:-4])
    else:
        last = records[-1]
        keep = {"in_last_block": len(last) - 100, "in_last_header": 60, "in_separator": len(last) - 2}[cut]
        blob = b"".join(records[:-1]) + last[:keep]
    name = "crawl.warc.gz" if gz else "crawl.warc"
    (tmp_path / name).write_bytes(blob)
    (tmp_path / "next.warc").write_bytes(records[2])
    items = read(warc_source(tmp_path))
    mine = [i for i in items if i.item_id.startswith("<urn") and i.extra["warc_file"] == name]
    uris = ["http://ex.test/1", "http://ex.test/2", "http://ex.test/missing", "http://ex.test/3"]
    assert [i.uri for i in mine] == uris[:complete]
    truncated = [i for i in items if i.status == Reason.TRUNCATED_ARCHIVE.value]
    assert [i.item_id for i in truncated] == [f"{name}#truncated"] and truncated[0].content is None
    assert items[-1].extra["warc_file"] == "next.warc" and items[-1].content == b"<p>one</p>" * 40


def test_complete_warc_gz_with_one_member_per_record_has_no_truncation_item(tmp_path):
    (tmp_path / "crawl.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in sample_records()))
    items = read(warc_source(tmp_path))
    assert len(items) == 4 and all(i.status == CAPTURED for i in items)


# --- general -------------------------------------------------------------------------------------


def test_reading_twice_gives_the_same_items(tmp_path):
    for name in ["c.jsonl", "a.jsonl", "sub/b.jsonl"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b'{"x": 1}\n{"x": 2}\n')
    once, again = read(jsonl_source(tmp_path)), read(jsonl_source(tmp_path))
    assert [i.item_id for i in once] == ["a.jsonl#L1", "a.jsonl#L2", "c.jsonl#L1", "c.jsonl#L2", "sub/b.jsonl#L1",
                                         "sub/b.jsonl#L2"]
    assert once == again

