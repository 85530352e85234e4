"""Bytes -> text for documents: decoding, binary sniffing and HTML main-text extraction.

``decode_bytes``: a byte-order mark wins; HTML is decoded the way a browser would (declared
charset, UTF-8, then resiliparse's detection); everything else strictly, raising
``TextDecodeError`` (INVALID_UTF8) rather than repairing. ``looks_binary`` catches binary content
whatever its name. ``extract_html`` parses with resiliparse and checks the DOM depth before text
extraction (which is quadratic on absurdly deep trees): deeper than ``max_depth`` raises
``HtmlTooDeepError`` (EXTRACTION_FAILED).

Decoding rules and the depth check: docs/canonical.md#extraction
"""

from __future__ import annotations

import codecs
import functools
import re
from typing import Optional

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding
from resiliparse.parse.html import HTMLTree

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.ingest.raw_items import split_content_type

__all__ = [
    "ExtractionError",
    "TextDecodeError",
    "HtmlTooDeepError",
    "HTML_TYPES",
    "split_mime",
    "decode_bytes",
    "sniff_binary",
    "looks_binary",
    "html_too_deep",
    "extract_html",
]

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_UTF8_LABELS = frozenset({"utf-8", "utf8", "unicode-1-1-utf-8", "us-ascii", "ascii", "ansi_x3.4-1968"})
SNIFF_BYTES = 8192
MAX_CONTROL_SHARE = 0.10


class ExtractionError(CorpusError, ValueError):
    """The document could not be turned into text (reason EXTRACTION_FAILED). Messages hold no content."""


class TextDecodeError(CorpusError, ValueError):
    """Bytes that are not valid text in the declared (or default UTF-8) encoding (reason INVALID_UTF8)."""


class HtmlTooDeepError(ExtractionError):
    """The DOM is nested deeper than the configured limit."""


def split_mime(content_type: Optional[str]) -> tuple[str, Optional[str]]:
    """``'Text/HTML; charset="UTF-8"'`` -> ``('text/html', 'utf-8')`` (the raw layer's parser)."""
    return split_content_type(content_type)


def _known_codec(label: Optional[str]) -> Optional[str]:
    if not label:
        return None
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _bom(data: bytes) -> Optional[tuple[str, int]]:
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8", 3
    if data.startswith(codecs.BOM_UTF16_LE) or data.startswith(codecs.BOM_UTF16_BE):
        return "utf-16", 0  # the utf-16 codec consumes its BOM
    return None


def _strict(data: bytes, codec: str, offset: int = 0) -> str:
    try:
        return data[offset:].decode(codec) if offset else data.decode(codec)
    except UnicodeDecodeError as exc:
        raise TextDecodeError(f"invalid {codec} at byte {exc.start + offset}: {exc.reason}") from None


def _decode_html(data: bytes, charset: Optional[str]) -> str:
    bom = _bom(data)
    if bom is not None:
        return data[bom[1]:].decode(bom[0], errors="replace")
    declared = _known_codec(charset)
    if declared is not None and declared not in ("utf-8", "ascii"):
        return bytes_to_str(data, declared, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    encoding = detect_encoding(data, from_html_meta=True)
    return bytes_to_str(data, encoding, errors="replace")


def decode_bytes(data: bytes, content_type: str, charset: Optional[str] = None) -> str:
    """Decode a document's bytes to ``str`` following the module rules.

    ``charset`` (e.g. ``RawItem.extra["charset"]``) overrides a charset parameter inside
    ``content_type``. Raises ``TextDecodeError`` for non-HTML bytes that do not decode strictly.
    """
    mime, ct_charset = split_mime(content_type)
    charset = (charset or ct_charset or "").lower() or None
    if mime in HTML_TYPES:
        return _decode_html(data, charset)
    bom = _bom(data)
    if bom is not None:
        return _strict(data, bom[0], bom[1])
    if charset is None or charset in _UTF8_LABELS:
        return _strict(data, "utf-8")
    codec = _known_codec(charset)
    if codec is None:  # an unknown label is no licence to guess: UTF-8 or nothing
        return _strict(data, "utf-8")
    return _strict(data, codec)


# --- binary sniffing --------------------------------------------------------------------------

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"%PDF-", "pdf"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"PK\x07\x08", "zip"),
    (b"\x1f\x8b\x08", "gzip"),
    (b"\x7fELF", "elf"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"(\xb5/\xfd", "zstd"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    (b"\x00asm", "wasm"),
    (b"\xca\xfe\xba\xbe", "java class / mach-o"),
    (b"\xcf\xfa\xed\xfe", "mach-o"),
    (b"SQLite format 3\x00", "sqlite"),
    (b"OggS\x00", "ogg"),
)
# control bytes that do not occur in text: C0 except \t \n \v \f \r and ESC, plus DEL
_TEXT_CONTROL_KEEP = b"\t\n\x0b\x0c\r\x1b"
_CONTROL_BYTES = bytes(b for b in [*range(0x20), 0x7F] if b not in _TEXT_CONTROL_KEEP)


def sniff_binary(data: bytes) -> Optional[str]:
    """A short label (``"png"``, ``"nul bytes"`` ...) if ``data`` is binary, else ``None``."""
    head = data[:SNIFF_BYTES]
    for magic, label in _MAGIC:
        if head.startswith(magic):
            return label
    if head.startswith(b"RIFF") and head[8:12] in (b"WEBP", b"WAVE", b"AVI "):
        return "riff"
    if head.startswith(b"BZh") and head[4:10] == b"1AY&SY":
        return "bzip2"
    if head.startswith(b"MZ") and b"PE\x00\x00" in head[:1024]:
        return "pe executable"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None  # UTF-16 text has NUL bytes by design
    if b"\x00" in head:
        return "nul bytes"
    if head:
        controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
        if controls > MAX_CONTROL_SHARE * len(head):
            return "control bytes"
    return None


def looks_binary(data: bytes) -> bool:
    return sniff_binary(data) is not None


# --- HTML -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _depth_selector(depth: int) -> str:
    # matches an element with at least ``depth`` element ancestors-or-self below the document
    return " > ".join(["*"] * depth)


def html_too_deep(tree: HTMLTree, max_depth: int) -> bool:
    """True if some element is nested more than ``max_depth`` elements deep (``<html>`` is depth 1)."""
    return tree.document.query_selector(_depth_selector(max_depth + 1)) is not None


_WS_RE = re.compile(r"\s+")


def extract_html(
    data: bytes,
    content_type: str = "text/html",
    max_depth: int = 2000,
    main_content: bool = True,
    charset: Optional[str] = None,
) -> tuple[Optional[str], str]:
    """``(title, text)`` of an HTML document; raises ``ExtractionError`` / ``HtmlTooDeepError``.

    ``text`` is resiliparse's plain-text rendering with block formatting and list bullets; it is
    not normalized here (see ``normalize.normalize_text``). ``title`` is the ``<title>`` with
    whitespace runs collapsed, or ``None``.
    """
    mime, _ = split_mime(content_type)
    if mime not in HTML_TYPES:
        content_type = "text/html"
    html = decode_bytes(data, content_type, charset=charset)
    try:
        tree = HTMLTree.parse(html)
    except Exception as exc:  # resiliparse's HTMLParserException and friends
        raise ExtractionError(f"HTML parser failed: {type(exc).__name__}") from None
    # a tree can only be deeper than the number of its start tags (+ implied html/head/body)
    if data.count(b"<") + 3 > max_depth and html_too_deep(tree, max_depth):
        raise HtmlTooDeepError(f"HTML nested deeper than {max_depth} elements")
    raw_title = tree.title
    title = _WS_RE.sub(" ", raw_title).strip() if raw_title else ""
    try:
        text = extract_plain_text(tree, main_content=main_content, preserve_formatting=True, list_bullets=True)
    except Exception as exc:
        raise ExtractionError(f"text extraction failed: {type(exc).__name__}") from None
    return (title or None), (text or "")
