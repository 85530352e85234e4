"""Readers for file sources (local_dir, jsonl, parquet, warc): every matched file becomes raw items.

Why it looks like this:
- deterministic: files are read in sorted relative-path order, so two runs over the same tree
  produce the same item sequence;
- confined: every matched path goes through ``keys.confine``; a symlink out of the root is reported
  as an UNREADABLE_INPUT item and never opened;
- streaming: JSONL and WARC are read incrementally (a dump is never held whole in memory);
- accountable: damage is an item, not an exception. A truncated or corrupt gzip/WARC yields every
  complete item read before the damage and then exactly one TRUNCATED_ARCHIVE item for that file;
  the next file is still read.
"""

from __future__ import annotations

import base64
import io
import math
import zlib
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq
from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType

from corpus_assets.domain.core.hashing import canonical_json
from corpus_assets.domain.core.keys import PathEscapeError, confine
from corpus_assets.domain.ingest.raw_items import Clock, RawItem, split_content_type, utc_timestamp
from corpus_assets.domain.core.reasons import Reason

Log = Callable[[str], None]

JSONL_LINE_TYPE = "application/x-jsonl-line"
PARQUET_ROW_TYPE = "application/x-parquet-row"
CONTENT_TYPES = {
    ".html": "text/html",
    ".htm": "text/html",
    ".xhtml": "application/xhtml+xml",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
}
PARQUET_BATCH_ROWS = 1024
_CHUNK = 1 << 16
_MAX_DETAIL = 300


def read_source_items(source, *, clock: Optional[Clock] = None, log: Optional[Log] = None) -> Iterator[RawItem]:
    """All raw items of a file source, in deterministic order. Raises FileNotFoundError for a missing root."""
    read_file = _READERS.get(getattr(source, "kind", None))
    if read_file is None:
        raise ValueError(f"source {source.id!r}: kind {source.kind!r} is not a file source")
    root = Path(source.root).absolute()
    if not root.is_dir():
        raise FileNotFoundError(f"source {source.id!r}: root {str(root)!r} does not exist or is not a directory")
    ctx = _Ctx(root, clock)
    files = items = problems = 0
    for rel, path in _matched_files(root, source.include):
        files += 1
        for item in _read_one(ctx, rel, path, read_file):
            items += 1
            if item.status != "captured":
                problems += 1
                if log and item.status in (Reason.TRUNCATED_ARCHIVE.value, Reason.UNREADABLE_INPUT.value):
                    log(f"{source.id}: {item.status} {item.item_id}: {item.status_detail}")
            yield item
    if log:
        log(f"{source.id}: read {files} files under {root}: {items} items, {problems} not captured")


class _Ctx:
    def __init__(self, root: Path, clock: Optional[Clock]):
        self.root = root
        self.clock = clock

    def item(self, item_id: str, rel: str, content: Optional[bytes], **kw) -> RawItem:
        return RawItem(item_id=item_id, uri=(self.root / rel).as_uri(), retrieved_at=utc_timestamp(self.clock),
                       content=content, **kw)

    def failure(self, item_id: str, rel: str, reason: Reason, detail: str) -> RawItem:
        return self.item(item_id, rel, None, status=reason.value, status_detail=detail[:_MAX_DETAIL])


def _matched_files(root: Path, patterns: Iterable[str]) -> list[tuple[str, Path]]:
    found: dict[str, Path] = {}
    for pattern in patterns:
        for path in root.glob(pattern):
            if not path.is_dir():
                found.setdefault(path.relative_to(root).as_posix(), path)
    return sorted(found.items())


def _read_one(ctx: _Ctx, rel: str, path: Path, read_file) -> Iterator[RawItem]:
    try:
        resolved = confine(ctx.root, path)
    except PathEscapeError:
        yield ctx.failure(rel, rel, Reason.UNREADABLE_INPUT, "symlink escapes the source root; not read")
        return
    if not resolved.is_file():
        yield ctx.failure(rel, rel, Reason.UNREADABLE_INPUT, "not a regular file (broken symlink or special file)")
        return
    try:
        fh = open(resolved, "rb")
    except OSError as exc:
        yield ctx.failure(rel, rel, Reason.UNREADABLE_INPUT, f"cannot open file: {exc.strerror or exc}")
        return
    with fh:
        yield from read_file(ctx, rel, resolved, fh)


def _guarded(ctx: _Ctx, rel: str, what: str, items: Iterator[RawItem], errors: tuple) -> Iterator[RawItem]:
    """Pass items through; a read error ends the file with one UNREADABLE_INPUT item (never a raise)."""
    count = 0
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except errors as exc:
            yield ctx.failure(rel, rel, Reason.UNREADABLE_INPUT, f"cannot read {what} after {count} items: {exc}")
            return
        count += 1
        yield item


# --- local_dir -------------------------------------------------------------------------------


def _read_local(ctx: _Ctx, rel: str, path: Path, fh) -> Iterator[RawItem]:
    """One item per file, whole bytes (size limits belong to canonicalization, not capture).

    ``path`` is the resolved file. When the matched path reaches it through a symlink (of the file
    or of a folder on the way), ``extra["resolved_path"]`` is the file's own path under the root:
    ``da/caching.html`` -> ``en/caching.html`` in apache2-doc. Canonicalization gives both copies
    that file's group, and dedup prefers the resolved copy as representative."""
    try:
        data = fh.read()
        mtime = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat()
    except OSError as exc:
        yield ctx.failure(rel, rel, Reason.UNREADABLE_INPUT, f"cannot read file: {exc.strerror or exc}")
        return
    ctype = CONTENT_TYPES.get(Path(rel).suffix.lower(), "application/octet-stream")
    extra = {"mtime": mtime}
    resolved_rel = path.relative_to(ctx.root.resolve()).as_posix()
    if resolved_rel != rel:
        extra["resolved_path"] = resolved_rel
    yield ctx.item(rel, rel, data, content_type=ctype, extra=extra)


# --- jsonl -----------------------------------------------------------------------------------


class _Gunzip(io.RawIOBase):
    """Streaming multi-member gunzip that records damage in ``error`` and then reports EOF.

    Python's ``gzip`` module raises on a truncated member and drops what it had decoded in that
    call; this keeps every byte decoded before the damage so callers can emit the complete lines or
    records and one TRUNCATED_ARCHIVE item.
    """

    def __init__(self, fh):
        self._fh = fh
        self._dec = None  # decompressor of the member in progress
        self._input = b""
        self._out = b""
        self._pos = 0
        self._done = False
        self.error: Optional[str] = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while self._pos >= len(self._out):
            if self._done:
                return 0
            self._out, self._pos = self._decode_some(), 0
        n = min(len(buf), len(self._out) - self._pos)
        buf[:n] = self._out[self._pos : self._pos + n]
        self._pos += n
        return n

    def _decode_some(self) -> bytes:
        if not self._input:
            self._input = self._fh.read(_CHUNK)
            if not self._input:
                self._done = True
                if self._dec is not None:
                    self.error = "gzip stream ended early"
                return b""
        if self._dec is None:
            self._input = self._input.lstrip(b"\x00")  # zero padding between members is legal
            if not self._input:
                return b""
            self._dec = zlib.decompressobj(wbits=31)
        try:
            out = self._dec.decompress(self._input, _CHUNK)
        except zlib.error as exc:
            self._done, self.error = True, f"corrupt gzip data ({exc})"
            return b""
        if self._dec.eof:
            self._input, self._dec = self._dec.unused_data, None
        else:
            self._input = self._dec.unconsumed_tail
        return out


def _read_jsonl(ctx: _Ctx, rel: str, path: Path, fh) -> Iterator[RawItem]:
    """One item per line, bytes untouched (no decoding), blank lines included so counts stay exact."""
    gunzip = _Gunzip(fh) if path.name.lower().endswith(".gz") else None
    stream = io.BufferedReader(gunzip, _CHUNK) if gunzip is not None else fh
    lineno = 0
    dropped_partial = False

    def lines() -> Iterator[RawItem]:
        nonlocal lineno, dropped_partial
        while line := stream.readline():
            if gunzip is not None and gunzip.error and not line.endswith(b"\n"):
                dropped_partial = True  # the damaged tail of a line, not a complete line
                return
            lineno += 1
            content = line[:-1] if line.endswith(b"\n") else line
            if content.endswith(b"\r"):
                content = content[:-1]
            yield ctx.item(f"{rel}#L{lineno}", rel, content, content_type=JSONL_LINE_TYPE,
                           extra={"file": rel, "line": lineno})

    yield from _guarded(ctx, rel, "JSONL file", lines(), (OSError,))
    if gunzip is not None and gunzip.error:
        detail = f"{gunzip.error} after line {lineno}"
        if dropped_partial:
            detail += "; an incomplete final line was dropped"
        yield ctx.failure(f"{rel}#truncated", rel, Reason.TRUNCATED_ARCHIVE, detail)


# --- parquet ---------------------------------------------------------------------------------


def _jsonable(value):
    """Map Arrow's Python values to JSON: bytes -> UTF-8 text (base64 if not UTF-8), times -> ISO,
    non-finite floats -> "NaN"/"Infinity"/"-Infinity", anything else exotic -> str()."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def _read_parquet(ctx: _Ctx, rel: str, path: Path, fh) -> Iterator[RawItem]:
    """One item per row (1-based ``#R`` like JSONL's ``#L``), content = canonical JSON of the row."""

    def rows() -> Iterator[RawItem]:
        rowno = 0
        for batch in pq.ParquetFile(fh).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                rowno += 1
                yield ctx.item(f"{rel}#R{rowno}", rel, canonical_json(_jsonable(row)),
                               content_type=PARQUET_ROW_TYPE, extra={"file": rel, "row": rowno})

    yield from _guarded(ctx, rel, "Parquet file", rows(), (pa.ArrowException, OSError, ValueError))


# --- warc ------------------------------------------------------------------------------------


class _TrackedReader:
    """The stream handed to fastwarc: counts bytes and keeps the last four.

    fastwarc does not report truncation: it yields a short final record or silently drops a
    record cut inside its headers. A complete WARC (after gunzip) ends with the record separator
    CRLF CRLF, so the tail tells whether the last record ended where the file did.
    """

    def __init__(self, inner):
        self._inner = inner
        self.bytes_read = 0
        self.tail = b""

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        if data:
            self.bytes_read += len(data)
            self.tail = (self.tail + data[-4:])[-4:]
        return data

    def tell(self) -> int:
        return self.bytes_read

    def seek(self, offset: int, whence: int = 0) -> int:
        if (whence == 0 and offset == self.bytes_read) or (whence == 1 and offset == 0):
            return self.bytes_read
        raise io.UnsupportedOperation("stream is not seekable")

    def close(self) -> None:
        pass  # the caller owns the file


def _read_warc(ctx: _Ctx, rel: str, path: Path, fh) -> Iterator[RawItem]:
    """One item per response record, payload without HTTP headers (transfer/content encodings decoded).

    Truncation is detected, in this order, by: a gzip member that ended early or is corrupt; a
    record whose block is shorter than its Content-Length or whose headers are incomplete;
    fastwarc raising; or a stream that does not end with CRLF CRLF.
    """
    gunzip = _Gunzip(fh) if path.name.lower().endswith(".gz") else None
    stream = _TrackedReader(io.BufferedReader(gunzip, _CHUNK) if gunzip is not None else fh)
    records = 0
    problem: Optional[str] = None
    try:
        for rec in ArchiveIterator(stream, record_types=WarcRecordType.any_type, parse_http=False):
            record_id = rec.headers.get("WARC-Record-ID")
            if not record_id or rec.headers.get("Content-Length") is None:
                problem = "a record's WARC headers are incomplete"
                break
            if rec.record_type != WarcRecordType.response:
                got, expected = rec.reader.consume(), rec.content_length
                block = None
            else:
                block = rec.reader.read()
                got, expected = len(block), rec.content_length
            if got < expected:
                problem = f"record {record_id} has {got} of {expected} bytes"
                break
            if block is not None:
                records += 1
                yield _warc_item(ctx, rel, rec, record_id, block)
    except Exception as exc:  # fastwarc raises assorted errors (incl. Rust panics) on damaged input
        problem = f"WARC reader failed ({type(exc).__name__}: {exc})"
    if gunzip is not None and gunzip.error:
        problem = gunzip.error
    elif problem is None and stream.bytes_read and stream.tail != b"\r\n\r\n":
        problem = "file does not end with a complete record"
    if problem:
        yield ctx.failure(f"{rel}#truncated", rel, Reason.TRUNCATED_ARCHIVE,
                          f"{problem}; {records} complete response records read")


def _warc_item(ctx: _Ctx, rel: str, rec, record_id: str, block: bytes) -> RawItem:
    headers = rec.headers
    extra = {"warc_file": rel, "warc_date": headers.get("WARC-Date")}
    base = dict(item_id=record_id, uri=headers.get("WARC-Target-URI") or "", retrieved_at=utc_timestamp(ctx.clock))
    block_type, _ = split_content_type(headers.get("Content-Type"))
    if block_type != "application/http":  # e.g. dns: records; keep the block, canonicalization decides
        return RawItem(content=block, content_type=block_type, extra=extra, **base)
    try:
        http = _http_message(block, "none")  # headers only: the body stays as it was sent
        status = http.http_headers.status_code if http.http_headers is not None else None
        if status is None:
            raise ValueError("no HTTP status line")
    except Exception as exc:  # malformed HTTP
        return RawItem(content=None, status=Reason.UNREADABLE_INPUT.value, extra=extra,
                       status_detail=f"HTTP response in record could not be parsed: {exc}"[:_MAX_DETAIL], **base)
    http_headers = http.http_headers
    ctype, charset = split_content_type(http_headers.get("Content-Type"))
    if charset:
        extra["charset"] = charset
    try:
        payload = _decoded_body(block, http_headers)
    except Exception as exc:  # corrupt or truncated content / transfer coding: keep the encoded body
        for key, header in (("content_encoding", "Content-Encoding"), ("transfer_encoding", "Transfer-Encoding")):
            value = ", ".join(http_headers.get_multiple(header))
            if value:
                extra[key] = value[:_MAX_DETAIL]
        return RawItem(content=http.reader.read(), content_type=ctype, http_status=status, extra=extra,
                       status=Reason.CONTENT_DECODING_FAILED.value,
                       status_detail=f"HTTP body could not be decoded: {exc}"[:_MAX_DETAIL], **base)
    return RawItem(content=payload, content_type=ctype, http_status=status, extra=extra, **base)


# zlib window bits of the content codings whose end is checked: gzip members / a zlib stream
_CHECKED_CODINGS = {"gzip": 31, "x-gzip": 31, "deflate": 15}


def _http_message(block: bytes, decode: str) -> WarcRecord:
    """The HTTP message in a response record's block, headers parsed (``decode``: fastwarc's
    ``auto_decode``, which raises on a corrupt body)."""
    http = WarcRecord()
    http.init_headers(WarcRecordType.response, content_length=len(block))
    http.is_http = True
    http.set_bytes_content(block)
    http.parse_http(auto_decode=decode)
    return http


def _decoded_body(block: bytes, http_headers) -> bytes:
    """The body with its transfer and content codings undone (fastwarc), or an exception saying why
    it cannot be. fastwarc returns whatever a truncated gzip / deflate stream decoded to so far
    (often nothing) without complaint, so those codings are also decoded strictly here: every
    member to its end, trailer and CRC included. An empty body has nothing to decode."""
    payload = _http_message(block, "all").reader.read()
    codings = [c.strip().lower() for v in http_headers.get_multiple("Content-Encoding") for c in v.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if codings and all(c in _CHECKED_CODINGS for c in codings):
        body = _http_message(block, "transfer").reader.read()
        for coding in reversed(codings):  # the coding applied last is listed last
            if not body:
                break
            body = _decode_strictly(body, coding)
    return payload


def _decode_strictly(data: bytes, coding: str) -> bytes:
    wbits = _CHECKED_CODINGS[coding]
    out = []
    while data:
        d = zlib.decompressobj(wbits)
        try:
            out.append(d.decompress(data))
            out.append(d.flush())
        except zlib.error as exc:
            raise ValueError(f"corrupt {coding} data ({exc})") from None
        if not d.eof:
            raise ValueError(f"{coding} stream ended early")
        data = d.unused_data
        if data and wbits != 31:  # only gzip allows further members
            raise ValueError(f"{len(data)} bytes after the end of the {coding} stream")
    return b"".join(out)


_READERS = {"local_dir": _read_local, "jsonl": _read_jsonl, "parquet": _read_parquet, "warc": _read_warc}
