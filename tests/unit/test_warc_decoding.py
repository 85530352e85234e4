"""WARC responses whose HTTP body cannot be decoded: the raw (still encoded) body is kept and the
item carries ``content_decoding_failed`` through canonicalization (quarantined with that reason);
nothing is lost and nothing is misread as an empty or short document."""

from __future__ import annotations

import gzip
from datetime import datetime, timezone
from pathlib import Path

import pytest

from corpus_assets.domain.canonical.canonical_layer import build_canonical
from corpus_assets.domain.canonical.canonicalize import CanonicalPolicy
from corpus_assets.domain.core.hashing import sha256_bytes
from corpus_assets.domain.core.reasons import OUTCOME_OF, Outcome, Reason
from corpus_assets.domain.ingest.capture import capture_snapshot
from corpus_assets.domain.ingest.file_readers import read_source_items
from corpus_assets.domain.ingest.raw_items import CAPTURED
from corpus_assets.domain.ingest.sources_config import WarcSource
from corpus_assets.domain.storage.layer_store import LayerStore

GOV = {"license": "CC0-1.0", "rights_evidence": "test fixture"}
FIXED = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)
SNAPSHOT = "warcs.20261129T140000"
TEXT = ("<html><head><title>Kept</title></head><body><main><p>" + "A complete page about reading archives "
        "carefully, so that every captured byte is accounted for downstream. " * 8 + "</p></main></body></html>").encode()
GZ = gzip.compress(TEXT, mtime=0)


def warc_record(uri: str, block: bytes, n: int) -> bytes:
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{n:012d}>\r\n"
            f"WARC-Date: 2026-01-01T00:00:00Z\r\nWARC-Target-URI: {uri}\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def http_response(body: bytes, headers: str = "", status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=UTF-8\r\n{headers}\r\n".encode() + body


def chunked(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


GZIP = "Content-Encoding: gzip\r\n"
CHUNKED_GZIP = "Transfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n"
BODIES = {  # uri -> (HTTP body as sent, extra headers)
    "http://ex.test/valid": (GZ, GZIP),
    "http://ex.test/valid-chunked": (chunked(GZ), CHUNKED_GZIP),
    "http://ex.test/truncated": (GZ[: len(GZ) // 2], GZIP),  # fastwarc decodes a short prefix, silently
    "http://ex.test/header-only": (GZ[:10], GZIP),  # decodes to 0 bytes: was "empty_document"
    "http://ex.test/no-trailer": (GZ[:-8], GZIP),  # all data, CRC and size missing
    "http://ex.test/corrupt": (GZ[:40] + bytes(b ^ 0x5A for b in GZ[40:80]) + GZ[80:], GZIP),
    "http://ex.test/truncated-chunked": (chunked(GZ[: len(GZ) // 3]), CHUNKED_GZIP),
    "http://ex.test/trailing-junk": (GZ + b"junk after the member", GZIP),
    "http://ex.test/empty-gzip": (b"", GZIP),  # nothing to decode: empty, as before
    "http://ex.test/plain-corrupt": (b"\x00\x01\x02\xff\xfe binary junk \x00" * 8, ""),  # not encoded: as before
}
FAILED = ["http://ex.test/truncated", "http://ex.test/header-only", "http://ex.test/no-trailer",
          "http://ex.test/corrupt", "http://ex.test/truncated-chunked", "http://ex.test/trailing-junk"]


def _source(root: Path) -> WarcSource:
    return WarcSource(id="warcs", kind="warc", root=root, governance=GOV)


@pytest.fixture
def warc_dir(tmp_path) -> Path:
    root = tmp_path / "warcs"
    root.mkdir()
    (root / "crawl.warc").write_bytes(b"".join(
        warc_record(uri, http_response(body, headers), n) for n, (uri, (body, headers)) in enumerate(BODIES.items())))
    return root


def test_undecodable_bodies_keep_their_encoded_bytes_and_say_why(warc_dir):
    items = {i.uri: i for i in read_source_items(_source(warc_dir), clock=lambda: FIXED)}
    assert list(items) == list(BODIES)  # one item per record, no truncation item: the WARC is fine
    for uri in FAILED:
        it, (body, headers) = items[uri], BODIES[uri]
        assert it.status == Reason.CONTENT_DECODING_FAILED.value, uri
        assert it.content == body, uri  # the body as sent: still chunked / gzip-encoded
        assert it.status_detail.startswith("HTTP body could not be decoded: "), uri
        assert (it.http_status, it.content_type) == (200, "text/html")
        assert it.extra["content_encoding"] == "gzip" and it.extra["charset"] == "utf-8"
        assert ("transfer_encoding" in it.extra) == ("chunked" in headers)
    assert "ended early" in items["http://ex.test/truncated"].status_detail
    assert "ended early" in items["http://ex.test/header-only"].status_detail

    # the valid records are unaffected: decoded payload, captured, the provenance they always had
    for uri in ("http://ex.test/valid", "http://ex.test/valid-chunked"):
        it = items[uri]
        assert (it.status, it.content, it.status_detail, it.http_status) == (CAPTURED, TEXT, "", 200)
        assert it.extra == {"warc_file": "crawl.warc", "warc_date": "2026-01-01T00:00:00Z", "charset": "utf-8"}
    # an empty gzip body and a corrupt body without a content coding are read as before
    assert (items["http://ex.test/empty-gzip"].status, items["http://ex.test/empty-gzip"].content) == (CAPTURED, b"")
    plain = items["http://ex.test/plain-corrupt"]
    assert (plain.status, plain.content) == (CAPTURED, BODIES["http://ex.test/plain-corrupt"][0])
    assert "content_encoding" not in plain.extra


def test_canonicalization_quarantines_them_with_the_reason_and_the_raw_bytes_are_stored(tmp_path, warc_dir):
    store = LayerStore(tmp_path / "home")
    source = _source(warc_dir)
    captured = capture_snapshot(source, SNAPSHOT, store, clock=lambda: FIXED)
    assert captured.status_counts == {CAPTURED: len(BODIES) - len(FAILED),
                                      Reason.CONTENT_DECODING_FAILED.value: len(FAILED)}
    raw = {r["uri"]: r for r in captured.version.read_table("items").to_pylist()}
    for uri in FAILED:
        assert raw[uri]["content"] == BODIES[uri][0] and raw[uri]["byte_length"] == len(BODIES[uri][0])

    summary = build_canonical(store, source, SNAPSHOT, CanonicalPolicy(), raw_version=captured.version)
    decisions = {r["item_id"]: r for r in summary.version.read_table("decisions").to_pylist()}
    by_uri = {raw[u]["item_id"]: u for u in raw}
    reason = {by_uri[i]: (d["outcome"], d["reason"]) for i, d in decisions.items()}
    assert OUTCOME_OF[Reason.CONTENT_DECODING_FAILED] is Outcome.QUARANTINED
    for uri in FAILED:
        assert reason[uri] == ("quarantined", "content_decoding_failed"), uri
    assert reason["http://ex.test/valid"] == reason["http://ex.test/valid-chunked"] == ("accepted", "ok")
    assert reason["http://ex.test/empty-gzip"] == ("rejected", "empty_document")
    assert reason["http://ex.test/plain-corrupt"] == ("quarantined", "binary_content")

    quarantine = {by_uri[q["item_id"]]: q for q in summary.version.read_table("quarantine").to_pylist()}
    for uri in FAILED:
        q = quarantine[uri]
        assert q["reason"] == "content_decoding_failed"
        assert q["detail"] == raw[uri]["status_detail"]
        assert q["raw_sha256"] == sha256_bytes(BODIES[uri][0])  # the bytes are in the raw layer, by digest
    records = summary.version.read_table("records").to_pylist()
    assert len(records) == 2 and all("every captured byte is accounted for" in r["text"] for r in records)
