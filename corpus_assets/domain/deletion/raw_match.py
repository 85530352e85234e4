"""Raw items that never became records but hold taken-down content.

An item set aside at canonicalization (``malformed_json``, ``schema_violation``, ``invalid_utf8``,
a page too deep to extract, ...) keeps its bytes in ``raw_snapshot`` and its text in the
canonical ``quarantine`` table, where no record digest points at it. A content takedown checks
each such item for the target: the sha256 of its bytes (byte match: what cannot be decoded), the
canonical text digest of its decoded text, of the text HTML extraction gives, and of every
JSON string it holds (a line that no longer parses still holds its strings); and, for takedowns
with ``near_duplicates``, the real Jaccard of each of those texts with the taken-down records'
texts. Rules and why: docs/deletion.md
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from corpus_assets.domain.canonical.extraction import ExtractionError, extract_html, split_mime
from corpus_assets.domain.canonical.normalize import normalize_text
from corpus_assets.domain.core.hashing import dedup_normal_form, sha256_text
from corpus_assets.domain.dedup.minhash import MinHashPolicy, exact_jaccard, text_shingle_hashes

__all__ = ["RawMatcher", "candidate_texts"]

# a JSON string literal, closed or cut off at the end of the line (a truncated record)
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)(?:"|$)', re.DOTALL)
_MIN_FRAGMENT = 16  # shorter strings are keys and labels, not content
_HTML_TYPES = {"text/html", "application/xhtml+xml"}


def _unescape(fragment: str) -> str:
    try:
        return json.loads(f'"{fragment}"')
    except ValueError:
        return fragment.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def candidate_texts(content: bytes, content_type: Optional[str] = None) -> list[str]:
    """The texts an item can hold, normalized as canonical text is: the decoded bytes (invalid
    UTF-8 replaced), the text extracted from HTML, and every JSON string of 16+ characters."""
    decoded = content.decode("utf-8", errors="replace")
    out = [decoded]
    mime, _ = split_mime(content_type)
    if mime in _HTML_TYPES or decoded.lstrip()[:1] == "<":
        try:
            out.append(extract_html(content, "text/html", 10_000)[1])
        except (ExtractionError, ValueError):
            pass
    if '"' in decoded:
        out += [_unescape(m) for m in _JSON_STRING.findall(decoded) if len(m) >= _MIN_FRAGMENT]
    seen: dict[str, None] = {}
    for text in out:
        norm = normalize_text(text)
        if norm:
            seen.setdefault(norm, None)
    return list(seen)


@dataclass
class RawMatcher:
    """Does one raw item hold the target? ``references``: the taken-down records' texts (with
    their domains), compared by real Jaccard when ``near_threshold`` is set."""

    target: str  # the takedown's text digest
    near_threshold: Optional[float] = None
    references: Iterable[tuple[str, str]] = ()
    policy: MinHashPolicy = MinHashPolicy()

    def __post_init__(self) -> None:
        self._refs = [text_shingle_hashes(dedup_normal_form(t, d), self.policy) for t, d in self.references] \
            if self.near_threshold is not None else []

    def match(self, content: Optional[bytes], raw_sha256: Optional[str], content_type: Optional[str] = None) -> Optional[str]:
        """How the item holds the target — ``bytes``, ``text`` or ``near (J=0.912)`` — or None."""
        if content is None:
            return None
        if (raw_sha256 or hashlib.sha256(content).hexdigest()) == self.target:
            return "bytes"
        texts = candidate_texts(content, content_type)
        if any(sha256_text(t) == self.target for t in texts):
            return "text"
        if self._refs:
            best = 0.0
            for t in texts:
                mine = text_shingle_hashes(dedup_normal_form(t, "prose"), self.policy)
                if mine.size:
                    best = max(best, max(exact_jaccard(mine, r) for r in self._refs))
            if best >= self.near_threshold:
                return f"near (J={best:.3f})"
        return None

