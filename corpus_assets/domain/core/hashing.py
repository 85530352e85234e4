"""The four digests of the architecture guide, kept apart because they answer different questions.

- raw-bytes digest: were the captured bytes the same?
- extracted-text digest: did extraction produce the same text?
- canonical-record digest: is the typed record the same (fixed serialization: sorted keys, UTF-8)?
- dedup key: are two records the same *content* under a domain-aware normalization
  (whitespace folding for prose; never for code, where indentation is syntax)?
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from typing import Any

_WS_RE = re.compile(r"\s+")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (files larger than memory are fine)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _reject_non_finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError("canonical JSON refuses NaN and infinite numbers")
    if isinstance(obj, dict):
        for v in obj.values():
            _reject_non_finite(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _reject_non_finite(v)
    return obj


def canonical_json(obj: Any) -> bytes:
    """Fixed serialization: sorted keys, no insignificant whitespace, UTF-8, no NaN/Infinity."""
    _reject_non_finite(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def canonical_digest(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj))


def dedup_normal_form(text: str, domain: str) -> str:
    """Domain-aware normalization used for exact-dedup equality.

    prose: NFKC, case-folded, every whitespace run folded to one space, trimmed.
    code (and anything not declared prose): NFC and newline unification only; indentation and
    inner whitespace are kept because they carry meaning.
    """
    if domain == "prose":
        return _WS_RE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))


def dedup_key(text: str, domain: str) -> str:
    return sha256_text(f"{domain}\x00" + dedup_normal_form(text, domain))
