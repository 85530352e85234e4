"""PII detection and redaction: e-mail addresses, IPv4/IPv6 addresses, phone numbers, payment card
numbers, IBANs, US social security numbers and secrets (API keys, tokens, private keys), each
replaced by a typed placeholder.

Pure and deterministic (no Dagster, logging, network or model): rules that cannot backtrack
catastrophically plus checks in Python, each skipped when a cheap pre-filter rules its type out.
What leaves this module is offsets, never values (``PiiSpan``, ``audit_rows``); callers must not log
matched substrings either. Any change to a rule, a table or a default must bump
``PII_DETECTOR_VERSION`` (digested by ``pii_policy_version``).

Rules and why: docs/curation.md#pii-corpus_assetsdomaincuratepiipy (limits: each ``_find_*``)
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpus_assets.domain.core.hashing import canonical_digest

__all__ = [
    "PII_TYPES",
    "RULE_TYPES",
    "NER_TYPES",
    "PLACEHOLDERS",
    "PII_DETECTOR_VERSION",
    "PiiConfig",
    "PiiSpan",
    "pii_policy_version",
    "find_pii",
    "redact",
    "redact_fields",
    "counts_by_type",
    "quarantine_hits",
    "audit_rows",
    "IBAN_LENGTHS",
    "SECRET_KINDS",
    "DEFAULT_IP_EXEMPT_RANGES",
]

# rule-based types (the default), then the types only the optional NER backend finds (pii_ner.py)
RULE_TYPES: tuple[str, ...] = ("email", "ipv4", "ipv6", "phone", "payment_card", "iban", "ssn", "secret")
NER_TYPES: tuple[str, ...] = ("person", "street_address")
PII_TYPES: tuple[str, ...] = RULE_TYPES + NER_TYPES
PLACEHOLDERS: dict[str, str] = {
    "email": "<EMAIL>",
    "ipv4": "<IPV4>",
    "ipv6": "<IPV6>",
    "phone": "<PHONE>",
    "payment_card": "<PAYMENT_CARD>",
    "iban": "<IBAN>",
    "ssn": "<SSN>",
    "secret": "<SECRET>",
    "person": "<PERSON>",
    "street_address": "<ADDRESS>",
}
# what kind of secret a ``secret`` span is (PiiSpan.kind; a category, never a value)
SECRET_KINDS: tuple[str, ...] = (
    "private_key", "aws_access_key", "github_token", "gitlab_token", "slack_token", "slack_webhook",
    "jwt", "stripe_key", "google_api_key", "npm_token", "pypi_token", "openai_key", "assignment",
)

# Bump whenever a rule, a table or a default changes (it is part of every policy version).
# pii-2: exempt IP ranges, section numbers, 00-prefixed and national phone formats, whole-or-nothing
# phones, country-code table, SSN, secrets.
PII_DETECTOR_VERSION = "pii-2"

# When two candidate spans start at the same offset and have the same length, the type listed
# first here wins (the stronger, checksum-validated evidence first).
_TIE_PRIORITY: dict[str, int] = {
    t: i for i, t in enumerate(("secret", "iban", "payment_card", "email", "ipv6", "ipv4", "ssn", "phone",
                                "street_address", "person"))
}

# Addresses in these ranges identify no one (loopback, private, shared, link-local, documentation,
# unspecified, multicast, reserved, IETF protocol assignments): not PII unless the configuration
# says otherwise (``PiiConfig.ip_exempt_ranges``). An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is
# judged by its IPv4 address.
DEFAULT_IP_EXEMPT_RANGES: tuple[str, ...] = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "2001::/23", "2001:db8::/32", "fc00::/7", "fe80::/10", "ff00::/8",
    # IPv6 space outside the global unicast 2000::/3 is reserved or unassigned (this also covers
    # MAC-like 12:34:56:78:90:ab:cd:ef and ::1:25 in netstat output)
    "::/3", "4000::/2", "8000::/2", "c000::/3", "e000::/4", "f000::/5", "f800::/6", "fe00::/9", "fec0::/10",
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# configuration


class PiiConfig(BaseModel):
    """What to detect and what to do with it; every field goes into :func:`pii_policy_version`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # detected types (validated against PII_TYPES, normalized to PII_TYPES order); person and
    # street_address need ner_backend: presidio
    types: list[str] = Field(default_factory=lambda: list(RULE_TYPES))
    # optional NER backend for person names and street addresses (pii_ner.py; the ner extra)
    ner_backend: Literal["none", "presidio"] = "none"
    ner_min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    # a record holding any of these types is quarantined instead of redacted (must be detected types)
    quarantine_types: list[str] = Field(default_factory=list)
    # national phone numbers (trunk prefix 0, or North American 3-3-4): minimum digit count
    phone_min_digits: int = Field(default=10, ge=7, le=15)
    # international phone numbers (+CC ...), country code included: minimum digit count
    phone_min_digits_international: int = Field(default=9, ge=7, le=15)
    # refuse dotted quads that read as version numbers (version/release/kernel/... just before,
    # pkg-1.2.3.4, 1.2.3.4-1 / +dfsg / ~rc, all octets single digits without an IP word nearby)
    ipv4_version_heuristics: bool = True
    # refuse e-mail candidates whose top-level domain is a common file extension (icon@2x.png)
    email_reject_file_extensions: bool = True
    # addresses inside these networks are not PII (CIDR, IPv4 or IPv6; [] detects every address)
    ip_exempt_ranges: list[str] = Field(default_factory=lambda: list(DEFAULT_IP_EXEMPT_RANGES))
    # refuse dotted quads that read as section numbers (``24.2.2.4. Title``, ``Section\xa010.1.2.3``,
    # after section / chapter / appendix / step ... in the same clause)
    ipv4_section_numbers: bool = True
    # a record holding a secret of one of these kinds is quarantined, not redacted (SECRET_KINDS)
    quarantine_secret_kinds: list[str] = Field(default_factory=lambda: ["private_key"])
    # generic ``password=`` / ``api_key:`` assignments: the value's least length and Shannon
    # entropy (bits per character) for it to count as a secret
    secret_assignment_min_length: int = Field(default=10, ge=6, le=64)
    secret_assignment_min_entropy: float = Field(default=3.0, ge=0.0, le=6.0)

    @field_validator("ip_exempt_ranges")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        out = []
        for v in value:
            try:
                out.append(str(ipaddress.ip_network(v, strict=True)))
            except ValueError as exc:
                raise ValueError(f"ip_exempt_ranges: {v!r} is not a network ({exc})") from None
        if len(set(out)) != len(out):
            raise ValueError("ip_exempt_ranges must not repeat")
        return out

    @field_validator("quarantine_secret_kinds")
    @classmethod
    def _secret_kinds(cls, value: list[str]) -> list[str]:
        unknown = [k for k in value if k not in SECRET_KINDS]
        if unknown:
            raise ValueError(f"unknown secret kind(s) {unknown}; known: {list(SECRET_KINDS)}")
        return [k for k in SECRET_KINDS if k in value]

    @field_validator("types", "quarantine_types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        unknown = [t for t in value if t not in PII_TYPES]
        if unknown:
            raise ValueError(f"unknown PII type(s) {unknown}; known: {list(PII_TYPES)}")
        if len(set(value)) != len(value):
            raise ValueError("PII types must not repeat")
        return [t for t in PII_TYPES if t in value]

    @model_validator(mode="after")
    def _ner_types_need_the_backend(self) -> "PiiConfig":
        ner = [t for t in self.types if t in NER_TYPES]
        if ner and self.ner_backend == "none":
            raise ValueError(f"types {ner} need ner_backend: presidio (pip install -e '.[ner]')")
        return self

    @model_validator(mode="after")
    def _quarantine_subset(self) -> "PiiConfig":
        missing = [t for t in self.quarantine_types if t not in self.types]
        if missing:
            raise ValueError(f"quarantine_types {missing} are not in types, so they would never be detected")
        return self


def pii_policy_version(config: PiiConfig) -> str:
    """``pii-N+<16 hex>``: a digest of the detector version, its rule tables and the config."""
    spec = {
        "detector_version": PII_DETECTOR_VERSION,
        "placeholders": PLACEHOLDERS,
        "iban_lengths": IBAN_LENGTHS,
        "card_iins": [list(r) for r in _CARD_IINS],
        "email_file_extensions": sorted(_FILE_EXTENSIONS),
        "ipv4_version_words": sorted(_VERSION_WORDS),
        "ip_words": sorted(_IP_WORDS),
        "phone_words": sorted(_PHONE_WORDS),
        "section_words": sorted(_SECTION_WORDS),
        "country_codes": sorted(_COUNTRY_CODES),
        "phone_cc_max": _PHONE_CC_MAX,
        "ssn_words": list(_SSN_CONTEXT),
        "secret_rules": [[k, rx.pattern] for k, rx in _SECRET_RULES],
        "secret_keys": _SECRET_KEY.pattern,
        "config": config.model_dump(mode="json"),
    }
    if config.ner_backend != "none":
        from corpus_assets.domain.curate.pii_ner import ner_spec

        spec["ner"] = ner_spec()  # the model package and its version decide the output too
    return f"{PII_DETECTOR_VERSION}+{canonical_digest(spec)[:16]}"


# --------------------------------------------------------------------------------------------
# spans


@dataclass(frozen=True, slots=True)
class PiiSpan:
    """A detected item: its type and half-open span ``[start, end)`` in the original text, and for
    a ``secret`` its kind (one of SECRET_KINDS, e.g. ``private_key``; empty for other types).

    Deliberately holds no value, so neither ``repr()`` nor serialization can leak one.
    """

    type: str
    start: int
    end: int
    kind: str = ""

    def __post_init__(self) -> None:
        if self.type not in PII_TYPES:
            raise ValueError(f"unknown PII type {self.type!r}")
        if not (0 <= self.start < self.end):
            raise ValueError(f"invalid span [{self.start}, {self.end})")
        if (self.type == "secret") != bool(self.kind) or (self.kind and self.kind not in SECRET_KINDS):
            raise ValueError(f"invalid kind {self.kind!r} for type {self.type!r}")


# --------------------------------------------------------------------------------------------
# helpers shared by detectors


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _before(text: str, i: int) -> str:
    return text[i - 1] if i > 0 else ""


def _after(text: str, i: int) -> str:
    return text[i] if i < len(text) else ""


def _window(text: str, start: int, width: int) -> str:
    """Lower-cased text before ``start`` on the same line, at most ``width`` characters."""
    lo = max(0, start - width)
    nl = text.rfind("\n", lo, start)
    if nl >= 0:
        lo = nl + 1
    return text[lo:start].lower()


@functools.lru_cache(maxsize=32)
def _exempt_networks(ranges: tuple[str, ...]) -> tuple[tuple, tuple]:
    nets = [ipaddress.ip_network(r) for r in ranges]
    return tuple(n for n in nets if n.version == 4), tuple(n for n in nets if n.version == 6)


def _ip_exempt(address: str, config: PiiConfig) -> bool:
    """Whether ``address`` (a valid IPv4 or IPv6 string) lies in one of ``ip_exempt_ranges``."""
    if not config.ip_exempt_ranges:
        return False
    v4, v6 = _exempt_networks(tuple(config.ip_exempt_ranges))
    addr = ipaddress.ip_address(address)
    if addr.version == 6:
        mapped = addr.ipv4_mapped
        if mapped is None:
            return any(addr in n for n in v6)
        addr = mapped
    return any(addr in n for n in v4)


def _routing_block(text: str, s: int, e: int, address: str) -> bool:
    """``address/prefix`` naming a large network (host bits zero, prefix at most /16 for IPv4 or
    /32 for IPv6: ``128.1.0.0/16``, ``2000::/3``): a routing block, no one's address."""
    if e + 1 >= len(text) or text[e] != "/" or not text[e + 1].isdigit():
        return False
    j = e + 1
    while j < len(text) and j < e + 4 and text[j].isdigit():
        j += 1
    prefix = int(text[e + 1 : j])
    addr = ipaddress.ip_address(address)
    limit = 16 if addr.version == 4 else 32
    if prefix > limit:
        return False
    try:
        ipaddress.ip_network(f"{address}/{prefix}", strict=True)
    except ValueError:
        return False
    return True


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# --------------------------------------------------------------------------------------------
# e-mail

# common file extensions that are not (or rarely) mail top-level domains; "py", "sh" and "md" are
# real ccTLDs, refused anyway because foo@bar.py is far more often a file than an address (ccTLDs
# in real mail use such as .cc, .pl, .la, .ps, .so, .ts, .bz stay accepted)
_FILE_EXTENSIONS = frozenset(
    "png jpg jpeg gif bmp svg ico webp tif tiff txt text log lock gz tgz xz bz2 zst lz lzma "
    "tar deb udeb rpm dsc changes buildinfo pdf dvi html htm xhtml xml json yaml yml toml "
    "ini cfg conf js mjs css scss cpp cxx hpp hh py pyc pm rb sh bash "
    "java class jar exe dll md rst patch diff orig rej bak tmp swp".split()
)
_EMAIL_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_EMAIL_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,63}|xn--[A-Za-z0-9-]{1,59})"
    r"(?![A-Za-z0-9_-])"
)
_EMAIL_MAX_LOCAL = 64
_EMAIL_MAX_DOMAIN = 253


def _find_emails(text: str, config: PiiConfig) -> Iterable[tuple[int, int]]:
    """``local@domain.tld`` with an RFC-5321-ish dot-atom local part (letters, digits, ``._%+-``,
    at most 64 characters, no leading/trailing/double dot) and a DNS domain with at least one dot
    and an alphabetic (or ``xn--``) top-level label. Anchored on each ``@`` (the local part is
    scanned leftwards, bounded), so text without ``@`` costs one ``in`` test and ``a@a@a@...``
    stays linear. Debian's ``Name <a@b.org>`` yields the address only.

    Limits: obfuscations (``a at b dot org``), quoted local parts, non-ASCII local parts and IP
    literal domains are not detected; with ``email_reject_file_extensions`` a TLD that is a
    common file extension (``icon@2x.png``) is refused, which misses real ``.py``/``.sh``/``.md``
    addresses."""
    n = len(text)
    at = text.find("@")
    while at != -1:
        nxt = at + 1
        # local part: scan left over allowed characters (bounded)
        s = at
        while s > 0 and at - s < _EMAIL_MAX_LOCAL + 1 and text[s - 1] in _EMAIL_LOCAL_CHARS:
            s -= 1
        if at - s <= _EMAIL_MAX_LOCAL:
            while s < at and text[s] == ".":
                s += 1
            local = text[s:at]
            if local and not local.endswith(".") and ".." not in local:
                limit = min(n, at + 1 + _EMAIL_MAX_DOMAIN)
                m = _EMAIL_DOMAIN.match(text, at + 1, limit)
                cut_short = m is not None and m.end() == limit < n and (text[limit].isalnum() or text[limit] in "-.")
                if m is not None and not cut_short:
                    tld = m.group(1).lower()
                    if not (config.email_reject_file_extensions and tld in _FILE_EXTENSIONS):
                        yield s, m.end()
                        nxt = m.end()
        at = text.find("@", nxt)


# --------------------------------------------------------------------------------------------
# numeric chunks: IPv4, phone and card candidates only ever lie inside one

# a maximal run of ASCII digits joined by at most two separator characters; one linear scan
_NUMERIC_CHUNK = re.compile(r"[0-9]+(?:[ ().\-/]{1,2}[0-9]+)*")
_CHUNK_MAX_LEFT = 2  # '+' or '(' (or both) just before the first digit belong to the chunk


def _numeric_chunks(text: str) -> list[tuple[int, int]]:
    chunks = []
    for m in _NUMERIC_CHUNK.finditer(text):
        s, e = m.span()
        lo = max(0, s - _CHUNK_MAX_LEFT)
        while s > lo and text[s - 1] in "+(":
            s -= 1
        chunks.append((s, e))
    return chunks


# --------------------------------------------------------------------------------------------
# IPv4

_IPV4_CAND = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
_IPV4_AT = re.compile(r"(?:[0-9]{1,3}\.){3}[0-9]{1,3}")
_VERSION_WORDS = frozenset(
    "version versions ver release released releases upstream kernel linux update updated updates "
    "upgrade upgraded upgrades bump bumped snapshot firmware build revision rev changelog tag "
    "tagged package packaged backport backported debian ubuntu fixed".split()
)
_IP_WORDS = frozenset(
    "ip ipv4 ips address addresses addr host hosts hostname server servers dns nameserver gateway "
    "netmask subnet route router ping listen listening bind proxy port client clients peer "
    "connect connection connecting connected from via inet src dst source destination remote "
    "firewall blocked banned vpn lan wan virtualhost namevirtualhost require allow deny balancermember".split()
)
_WORD_RE = re.compile(r"[a-z][a-z0-9]*")
_IPV4_AT_ANY = re.compile(r"(?<![0-9.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9.])")
# words (several languages: the Debian docs ship in 26) that put a section number after them
_SECTION_WORDS = frozenset(
    "section sections sect sec chapter chapters chap appendix appendices paragraph clause "
    "abschnitt abschnitte kapitel anhang "
    "chapitre chapitres annexe paragraphe "
    "sección secciones capítulo capítulos apartado apéndice "
    "seção secção seções anexo "
    "sezione sezioni capitolo appendice "
    "secció seccions capítol apèndix "
    "seksjon kapittel avsnitt sektion kapitlet afsnit hoofdstuk sectie paragraaf bijlage "
    "rozdział sekcja kapitola oddíl sekce bölüm bölümü "
    "раздел разделе разделы глава главе приложение "
    "phần chương mục 第 節 节 章 절 장".split()
)
_UWORD_RE = re.compile(r"[^\W\d_]+")
# a dotted quad that is a heading / TOC entry: at the start of its line, then '.' and a space
_HEADING_AFTER = re.compile(r"\.[ \t\xa0]+[^\W\d_]")
_XREF_AFTER = re.compile(r"[ \xa0]+[–—][ \xa0]+[„“\"«‘'「]")
_HEADING_AFTER_ANY = re.compile(r"\.[ \t\xa0]+[^\s\d]")
_LINE_LEAD = re.compile(r"[ \t\xa0•*·\-–#>]*")


def _octets_ok(parts: list[str]) -> bool:
    for p in parts:
        if len(p) > 1 and p[0] == "0":
            return False
        if int(p) > 255:
            return False
    return True


_CLAUSE_END = re.compile(r"[.;,:!?](?:\s|$)|[()\[\]*|\n]")


def _clause_start(text: str, start: int, width: int = 40) -> int:
    """Where the clause holding ``start`` begins, at most ``width`` characters back."""
    lo = max(0, start - width)
    cut = lo
    for m in _CLAUSE_END.finditer(text, lo, start):
        cut = m.end()
    return cut


def _clause_words(text: str, start: int, width: int = 40, count: int = 3) -> list[str]:
    """The last ``count`` lower-cased words before ``start`` in the same clause (a clause ends at
    a newline, a bracket, ``*``, ``|``, or ``. ; , : ! ?`` followed by a space)."""
    window = text[max(0, start - width) : start]
    cut = 0
    for m in _CLAUSE_END.finditer(window):
        cut = m.end()
    return _WORD_RE.findall(window[cut:].lower())[-count:]


def _ipv4_at(text: str, i: int) -> bool:
    m = _IPV4_AT.match(text, i)
    return m is not None and _octets_ok(m.group().split("."))


def _ipv4_at_end(text: str, end: int) -> bool:
    """Whether an IPv4 address ends exactly at ``end`` (for ranges a.b.c.d-e.f.g.h)."""
    for width in range(7, 16):
        s = end - width
        if s < 0:
            break
        m = _IPV4_AT.fullmatch(text, s, end)
        if m is not None and not (s > 0 and (text[s - 1].isdigit() or text[s - 1] == ".")):
            return _octets_ok(m.group().split("."))
    return False


def _find_ipv4(text: str, config: PiiConfig, chunks: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """Dotted quads ``a.b.c.d``, each octet 0-255 without leading zeros, not part of a longer
    dotted or alphanumeric token (``1.2.3.4.5``, ``v1.2.3.4``, ``x1.2.3.4`` are refused; a
    sentence-final dot is fine; ``:port`` and ``/prefix`` may follow).

    Version numbers (decided: precision first). With ``ipv4_version_heuristics`` a quad is also
    refused when it reads as a version: the first octet is 0 (``0.9.8.7``; ``0.0.0.0`` is kept);
    it is glued to a name by ``-`` (``linux-2.6.32.1``) or followed by ``-``/``+``/``~`` and an
    alphanumeric (``1.2.3.4-1``, ``2.6.32.1+dfsg``) unless that is another address (a range);
    a version word (version, release, upstream, kernel, update, bump, ...) is among the three
    words before it in the same clause and no IP word (ip, address, host, server, dns, from,
    VirtualHost, Require, ...) is; or the first octet is a single digit (``2.6.32.1``,
    ``1.2.3.4``) and no IP word is. A ``:port`` or ``/prefix`` right after the quad, `` - - [``
    after it (a common-log-format line) and another address earlier in the same clause (a list of
    addresses) count as IP context.

    Then (pii-2) a quad is refused when it reads as a section number (``ipv4_section_numbers``,
    see ``_section_number``), when it lies in one of ``ip_exempt_ranges`` (loopback, private,
    documentation, link-local, ... by default: ``bind(('127.0.0.1', 80))`` is no PII), when it
    names a network of /16 or wider (``128.1.0.0/16``), and before ``.in-addr.arpa``.

    Known limits: a version without such context (``libfoo 2.6.32.1``) is still taken as an
    address; an address after a version word with no IP word (``updated to 10.1.2.3``) and a
    public address with a single-digit first octet and no IP context (``(8.8.8.8)``) are missed."""
    n = len(text)
    headings: set[str] = set()  # dotted quads standing as headings in this text, computed once when needed
    for cs, ce in chunks:
        if ce - cs < 7 or text.find(".", cs, ce) == -1:
            continue
        for m in _IPV4_CAND.finditer(text, cs, ce):
            s, e = m.span()
            parts = m.group().split(".")
            if not _octets_ok(parts):
                continue
            prev = _before(text, s)
            if prev and (_is_word(prev) or prev == "."):
                continue
            nxt = _after(text, e)
            if nxt and _is_word(nxt):
                continue
            if nxt == "." and e + 1 < n and text[e + 1].isdigit():
                continue
            if text.startswith(".in-addr.arpa", e):
                continue  # a reverse-DNS name (1.0.0.127.in-addr.arpa), not an address
            words: set[str] | None = None
            if config.ipv4_version_heuristics:
                if parts[0] == "0" and any(p != "0" for p in parts):
                    continue
                if prev == "-" and s >= 2 and _is_word(text[s - 2]) and not _ipv4_at_end(text, s - 1):
                    continue
                if nxt in ("-", "+", "~") and e + 1 < n and text[e + 1].isalnum():
                    if not (nxt == "-" and _ipv4_at(text, e + 1)):
                        continue
                words = set(_clause_words(text, s))
                ip_context = (
                    bool(words & _IP_WORDS)
                    or (nxt in (":", "/") and e + 1 < n and text[e + 1].isdigit())
                    or text.startswith(" - - [", e)  # common log format: the client address
                    or _IPV4_AT_ANY.search(text, _clause_start(text, s), s) is not None  # a list of addresses
                )
                if not ip_context and (words & _VERSION_WORDS or len(parts[0]) == 1):
                    continue
            if config.ipv4_section_numbers and _section_number(text, s, e, words, headings):
                continue
            if _ip_exempt(m.group(), config) or _routing_block(text, s, e, m.group()):
                continue
            yield s, e


def _at_line_start(text: str, s: int) -> bool:
    ls = text.rfind("\n", 0, s) + 1
    return _LINE_LEAD.fullmatch(text, ls, s) is not None


_HEADING_QUAD = re.compile(r"(?m)^[ \t\xa0•*·\-–#>]*([0-9]{1,3}(?:\.[0-9]{1,3}){3})\.[ \t\xa0]+[^\s\d]")


def _section_number(text: str, s: int, e: int, words: set[str] | None, headings: set[str] | None = None) -> bool:
    """Whether the dotted quad ``text[s:e]`` reads as a section number (``ipv4_section_numbers``):

    - it is followed by ``.``, a space (or no-break space) and a letter (``24.2.2.4. Nondeterministic
      Collations``, ``12.3.2.3.\\xa0Creare``) and no IP word stands before it in its clause
      (``connection from 81.2.69.160. Then`` stays an address);
    - it follows a word joined by a no-break space, as DocBook writes cross-references
      (``Seksjon\\xa011.1.7.3``), or is followed by a dash and an opening quote (``11.1.7.3 –
      „Integrating``), with no IP word in the clause;
    - a section word (section, chapter, appendix, step, Abschnitt, chapitre, sección, раздел, ...)
      is among the three words before it in its clause, with no IP word;
    - the same number stands as a heading elsewhere in the text (at the start of a line, then
      ``. Title``), so a table of contents or a cross-reference on that page is taken too.

    Limits: a section number in a language whose section word is not listed, without a no-break
    space and not a heading in the same text, is still taken as an address (when its octets are
    valid and it is not in an exempt range)."""
    if words is None:
        words = set(_clause_words(text, s))
    if words & _IP_WORDS:
        return False
    n = len(text)
    if e < n and text[e] == "." and _HEADING_AFTER.match(text, e):
        return True
    if e < n and text[e] == "." and _HEADING_AFTER_ANY.match(text, e) and _at_line_start(text, s):
        return True  # "14.5.4.3. .te files"
    if s >= 2 and text[s - 1] == "\xa0" and text[s - 2].isalpha():
        return True
    if _XREF_AFTER.match(text, e):
        return True  # "(11.1.7.3 – „Integrating ...“)": a cross-reference with its title
    lo = max(0, s - 40)
    window = text[lo:s]
    cut = 0
    for m in _CLAUSE_END.finditer(window):
        cut = m.end()
    if set(w.lower() for w in _UWORD_RE.findall(window[cut:])[-3:]) & _SECTION_WORDS:
        return True
    if window[cut:].rstrip(" \t\xa0")[-1:] in ("第", "§"):
        return True  # CJK "第 14.3.4.1 节" (no spaces between the words), "§ 1.2.3.4"
    if headings is None:
        return False
    if not headings:
        headings.update(m.group(1) for m in _HEADING_QUAD.finditer(text))
        headings.add("")  # computed
    return text[s:e] in headings


# --------------------------------------------------------------------------------------------
# IPv6

_IPV6_CAND = re.compile(
    r"(?=[0-9A-Fa-f]{0,4}:)(?<![0-9A-Za-z_:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.[0-9]{1,3}){0,3}"
)


def _find_ipv6(text: str, config: PiiConfig) -> Iterable[tuple[int, int]]:
    """Full, compressed (``::``) and IPv4-embedded IPv6 addresses, validated by
    :class:`ipaddress.IPv6Address`; a zone (``%eth0``), ``[...]`` brackets and ``:port`` outside
    brackets are not part of the span. Refused: candidates glued to a word character, ``:`` or
    ``.``; candidates without any decimal digit (``a::b``, ``dead::beef``, ``Foo::Bar`` style
    scope operators); times (``10:11:12``) and MAC addresses, which ``ipaddress`` rejects.
    Only runs when the text holds ``::`` or at least six colons.
    Limit: a letters-only address such as ``fe::ab`` is missed."""
    if "::" not in text and text.count(":") < 6:
        return
    n = len(text)
    for m in _IPV6_CAND.finditer(text):
        s, e = m.span()
        cand = m.group()
        # a single trailing ':' (end of a clause) is punctuation, '::' is not
        if cand.endswith(":") and not cand.endswith("::"):
            cand = cand[:-1]
            e -= 1
            nxt = _after(text, e)
        else:
            nxt = _after(text, e)
            if nxt == ":":  # more groups than an address can have
                continue
        if nxt and (_is_word(nxt) or (nxt == "." and e + 1 < n and text[e + 1].isalnum())):
            continue
        if "::" not in cand and cand.count(":") < 7 and "." not in cand:
            continue
        if not any(c.isdigit() for c in cand):
            continue
        if cand.startswith("::") and cand.count(":") == 2 and "." not in cand and cand != "::1":
            continue  # ``::2`` alone: a Python slice (``a[::2]``) far more often than an address
        try:
            ipaddress.IPv6Address(cand)
        except ValueError:
            continue
        if _ip_exempt(cand, config) or _routing_block(text, s, e, cand):
            continue
        yield s, e


# --------------------------------------------------------------------------------------------
# phone numbers

_PHONE_WORDS = frozenset("tel phone telephone fax mobile mob cell cellphone call whatsapp sms".split())
# characters that may not stand right before a number (a longer token, a price, a bug number)
_NUM_BAD_PREV = r"\w+#.\-/:@$€£=,"
# international: '+' or '00', then one digit per unit, each optionally wrapped in / followed by a
# single separator; every unit consumes exactly one digit, so matching is linear
_PHONE_INTL = re.compile(
    rf"(?<![{_NUM_BAD_PREV}])(?:\+\(?|00)[1-9]\)?[ .\-/]?(?:\(?[0-9]\)?[ .\-/]?){{5,13}}\(?[0-9]\)?(?![0-9])"
)
# Brazil, international: +55 / 0055, area code (optionally in brackets), 8 or 9 digits written
# 4-4 / 5-4 with a dash, a dot or a space before the last four (+55 11 93537-2120)
_PHONE_BR_INTL = re.compile(
    rf"(?<![{_NUM_BAD_PREV}])(?:\+|00)55[ .\-]?(?:\([1-9][0-9]\)|[1-9][0-9])[ .\-]?9?[0-9]{{4}}[ .\-]?[0-9]{{4}}(?![0-9])"
)
# Brazil, national: (11) 93537-2120 / (11) 3537-2120
_PHONE_BR = re.compile(rf"(?<![{_NUM_BAD_PREV}])\([1-9][0-9]\) ?9?[0-9]{{4}}-[0-9]{{4}}(?![0-9])")
# North American 3-3-4 (area and exchange codes start with 2-9), optionally with a leading 1
_PHONE_NANP = re.compile(
    rf"(?<![{_NUM_BAD_PREV}])(?:1[ .\-])?(?:\([2-9][0-9]{{2}}\) ?|[2-9][0-9]{{2}}(?P<sep>[ .\-]))"
    r"[2-9][0-9]{2}(?(sep)(?P=sep)|[ .\-])[0-9]{4}(?![0-9])"
)
# national numbers with a trunk prefix 0 (then 1-9: '00' is the international prefix): groups
# separated by one separator each
_PHONE_TRUNK = re.compile(
    rf"(?<![{_NUM_BAD_PREV}(])(?:\(0[1-9][0-9]{{0,3}}\)|0[1-9][0-9]{{0,4}})(?:[ .\-/][0-9]{{2,8}}){{1,4}}(?![0-9])"
)
# bare digits after a phone word: a trunk-0 number, a North American 10 (or 1 + 10) digits, or an
# Indian mobile number written 5-5 (98765 43210)
_PHONE_BARE_DIALABLE = re.compile(r"0[1-9][0-9]{8,11}|1?[2-9][0-9]{2}[2-9][0-9]{6}|[6-9][0-9]{4} [0-9]{5}")
_DATE_PREFIX = re.compile(
    r"(?:[0-9]{1,2}([./\-])[0-9]{1,2}\1(?:19|20)[0-9]{2}|(?:19|20)[0-9]{2}([./\-])[0-9]{1,2}\2[0-9]{1,2})(?![0-9])"
)
# assigned ITU-T E.164 country codes (prefix-free: at most one of them starts a number)
_COUNTRY_CODES = frozenset(
    "1 7 20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 60 61 62 63 64 65 66 "
    "81 82 84 86 90 91 92 93 94 95 98 211 212 213 216 218 220 221 222 223 224 225 226 227 228 229 230 231 "
    "232 233 234 235 236 237 238 239 240 241 242 243 244 245 246 247 248 249 250 251 252 253 254 255 256 "
    "257 258 260 261 262 263 264 265 266 267 268 269 290 291 297 298 299 350 351 352 353 354 355 356 357 "
    "358 359 370 371 372 373 374 375 376 377 378 380 381 382 383 385 386 387 389 420 421 423 500 501 502 "
    "503 504 505 506 507 508 509 590 591 592 593 594 595 596 597 598 599 670 672 673 674 675 676 677 678 "
    "679 680 681 682 683 685 686 687 688 689 690 691 692 800 808 850 852 853 855 856 870 878 880 881 882 "
    "883 886 888 960 961 962 963 964 965 966 967 968 970 971 972 973 974 975 976 977 979 992 993 994 995 "
    "996 998".split()
)
# characters that, as the last non-space character before a bare '+digits' run, make it code (an
# assignment, an argument, an operand: ``x = +2147483647``, ``f(+2147483647)``)
_CODE_BEFORE = frozenset("=([{<>*/%|&^~,")


def _phone_ok(text: str, s: int, e: int, min_digits: int, max_digits: int) -> bool:
    prev = _before(text, s)
    if prev and (_is_word(prev) or prev in "+#.-/:@$€£=,"):
        return False
    nxt = _after(text, e)
    if nxt and _is_word(nxt):
        return False
    if nxt in (".", "-", "/", ":", ",") and e + 1 < len(text) and text[e + 1].isdigit():
        return False
    cand = text[s:e]
    ndigits = sum(c.isdigit() for c in cand)
    if not (min_digits <= ndigits <= max_digits):
        return False
    if cand.count("(") != cand.count(")") or cand.count("(") > 1:
        return False
    if _DATE_PREFIX.match(cand.lstrip("+(")):
        return False
    if "isbn" in _window(text, s, 12):
        return False
    return True


def _country_code(text: str, i: int) -> str | None:
    """The assigned country code whose digits start at ``text[i]`` (brackets skipped), or None."""
    digits = "".join(c for c in text[i : i + 6] if c.isdigit())[:3]
    for k in (1, 2, 3):
        if digits[:k] in _COUNTRY_CODES:
            return digits[:k]
    return None


def _find_phones(text: str, config: PiiConfig, chunks: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """Phone numbers, precision first, each taken whole or not at all:

    - international: ``+CC`` or ``00CC`` (an assigned E.164 country code) and up to 15 digits in
      groups separated by single spaces, dots, dashes or slashes, with at most one parenthesized
      group (``+44 (0)20 7946 0958``, ``+1-415-555-0132``, ``0044 20 8014 5530``,
      ``+4915123456789``), at least ``phone_min_digits_international`` digits (``00`` not
      counted); a ``00`` number needs at least two separators, a ``+`` number written without
      any is refused right after ``= ( [ { , < > * / % | & ^ ~`` (code: ``x = +2147483647``);
    - Brazil: ``+55 11 93537-2120``, ``0055 (11) 3537-2120``, national ``(11) 93537-2120``;
    - North American ``(415) 555-0132`` / ``415-555-0132`` / ``415.555.0132`` /
      ``1-800-555-0199`` (area and exchange codes start with 2-9, one separator kind);
    - national numbers with a trunk 0 then 1-9 and at least one separator, one separator kind,
      groups of 2-8 digits (UK ``020 7946 0958`` / ``07700 900123``, DE ``030 12345678`` /
      ``(0171) 1234567`` / ``030/1234567``, FR ``01 23 45 67 89``, IN ``011 2345 6789`` /
      ``098765 43210`` (a trunk group of up to 6 digits), NL ``06-12345678``), ``phone_min_digits`` to 13 digits; written in pairs
      only as the French 5 pairs (a hex dump ``02 23 44 30 13 40`` is not a number);
    - a bare run of digits (trunk 0 and 10-13 digits, North American 10 / 1+10 digits, Indian
      mobile 5-5) only within 24 characters after a phone word (tel, phone, fax, mobile, call, ...).

    International numbers are capped at the E.164 length of common country codes (+1 and +7: 11
    digits, +44: 12, +33/+31/+34/+61: 11, +55: 13, ...; others 15); a code that is not assigned
    (``+2147483647``: no country code 2, 21 or 214) is no phone number.

    Whole or nothing: a number must start where its run of digits (joined by up to two separator
    characters) starts, and may end only where that run ends or where its separator kind changes
    (``+1 312 536 6626 3.9.8`` -> ``+1 312 536 6626``); a run that goes on with the same separator
    past the longest valid number is no phone number at all (never ``<PHONE> 5530``).

    Never: a candidate glued to a word character or preceded by ``+ # . - / : @ = ,`` or a
    currency sign, or followed by ``. - / : ,`` and a digit (part of a longer number); one that
    starts with a date (``01.02.2023``, ``2023-01-15``); anything right after "ISBN". Times never
    match (``:`` is no separator), nor do ZIP+4 codes (9 digits) or year ranges (8 digits).

    Limits: national formats without a trunk 0 outside North America and Brazil (``612 345
    678``), and vanity numbers, are missed unless written with ``+``/``00``; a number that
    directly follows another number with only a space between them is missed; so is one followed
    by a space and another number (``+4915123456789 12``)."""
    intl_min = config.phone_min_digits_international
    nat_min = config.phone_min_digits
    for cs, ce in chunks:
        width = ce - cs
        if width < min(intl_min, nat_min):
            continue
        s = cs + 1 if text.startswith("(+", cs) else cs
        if text[s] == "+" or (text.startswith("00", s) and s + 2 < ce and text[s + 2] in "123456789"):
            e = _intl_phone(text, s, ce, intl_min)
            if e is not None:
                yield s, e
            continue
        if _IBAN_HEAD_BEFORE.search(text, max(0, cs - 40), cs) is not None:
            continue  # the digits of an IBAN (a mod-97-invalid one, or one not detected)
        m = _PHONE_BR.match(text, cs, ce)
        if m is not None and _phone_ok(text, cs, m.end(), 10, 11) and not _continues(text, m.end(), ce, " "):
            yield cs, m.end()
            continue
        for rx, max_digits in ((_PHONE_NANP, 11), (_PHONE_TRUNK, 13)):
            m = rx.match(text, cs, ce)
            if m is not None:
                e = _phone_end(text, cs, m.end(), ce, nat_min, max_digits, skip_first=rx is _PHONE_NANP)
                if e is not None and (rx is not _PHONE_TRUNK or _trunk_groups_ok(text, cs, e)):
                    yield cs, e
                    break
        else:
            if 9 <= width <= 16 and _PHONE_BARE_DIALABLE.fullmatch(text, cs, ce) is not None:
                words = set(_WORD_RE.findall(_window(text, cs, 24)))
                if words & _PHONE_WORDS and _phone_ok(text, cs, ce, nat_min, 15):
                    yield cs, ce


def _intl_phone(text: str, s: int, ce: int, intl_min: int) -> int | None:
    """The end of the international number starting with ``+`` or ``00`` at ``s``, or None."""
    double0 = text[s] == "0"
    cc = _country_code(text, s + (2 if double0 else 1))
    if cc is None:
        return None
    extra = 2 if double0 else 0
    if cc == "55":
        m = _PHONE_BR_INTL.match(text, s, ce)
        if m is not None and _phone_ok(text, s, m.end(), 12 + extra, 13 + extra):
            if not _continues(text, m.end(), ce, None):
                return m.end()
            return None
    m = _PHONE_INTL.match(text, s, ce)
    if m is None:
        return None
    # a "(0)" trunk digit written inside an international number does not count
    max_digits = _PHONE_CC_MAX.get(cc, 15) + ("(0)" in m.group()) + extra
    e = _phone_end(text, s, m.end(), ce, intl_min + extra, max_digits, skip_first=True)
    if e is None:
        return None
    nseps = sum(1 for _ in _PHONE_SEP.finditer(text, s, e))
    if double0 and nseps < 2:
        return None
    if nseps == 0:
        j = s - 1
        while j >= 0 and text[j] in " \t":
            j -= 1
        if j >= 0 and text[j] in _CODE_BEFORE:
            return None
    return e


def _trunk_groups_ok(text: str, s: int, e: int) -> bool:
    """Digit pairs only in the French layout: 5 groups of 2 (``01 23 45 67 89``); four or more
    groups of one equal width of at most 3 digits are a list (``012 013 023 123``), no number."""
    groups = [g for g in _PHONE_SEP.split(text[s:e]) if g]
    if all(len(g) <= 2 for g in groups):
        return len(groups) == 5 and all(len(g) == 2 for g in groups)
    if len(groups) >= 4 and len({len(g) for g in groups}) == 1:
        return False  # "012 013 023 123": a list of equal-width numbers
    return True


_PHONE_SEP = re.compile(r"[ .\-/()]+")
# most digits (country code included) of numbers under common country codes (E.164 national
# significant number lengths); other codes may have up to 15
_PHONE_CC_MAX = {
    "1": 11, "7": 11, "27": 11, "30": 12, "31": 11, "32": 11, "33": 11, "34": 11, "36": 11, "41": 11,
    "44": 12, "45": 10, "47": 10, "48": 11, "55": 13, "61": 11, "65": 10, "81": 12, "86": 13, "90": 12,
    "91": 12,
}  # fmt: skip
_IBAN_HEAD_BEFORE = re.compile(r"(?<![A-Za-z0-9_])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4})* $")


def _continues(text: str, end: int, ce: int, kind: str | None) -> bool:
    """Whether the run of digit groups goes on after ``end`` with the number's own separator
    ``kind`` (a single space when the number has none): then the number is not whole."""
    if end >= ce:
        return False
    m = _PHONE_SEP.match(text, end, ce)
    if m is None or m.end() >= ce:
        return False
    g = m.group()
    if "(" in g or ")" in g or g != (kind or " "):
        return False
    j = m.end()
    while j < ce and text[j].isdigit():
        j += 1
    if j >= ce:
        return True
    m2 = _PHONE_SEP.match(text, j, ce)
    return m2 is not None and m2.group() == g


def _phone_end(text: str, s: int, e: int, ce: int, min_digits: int, max_digits: int, skip_first: bool) -> int | None:
    """The end of the phone number in the candidate ``text[s:e]`` (its digit run ends at
    ``ce``), or None.

    The separators between digit groups must be of one kind, not counting those next to a
    parenthesis and (``skip_first``) the one after the country / leading code. Where the kind
    changes, the number ends before the group in front of the change (``+1 312 536 6626 3.9.8``
    -> ``+1 312 536 6626``) or, if that is too short, at the change. Nothing else is cut off: if
    the whole candidate is no valid number, or the digit run goes on with the same separator,
    there is no number (whole or nothing)."""
    seps = [(m.start(), m.end(), m.group()) for m in _PHONE_SEP.finditer(text, s, e) if m.start() > s]
    ends = [a for a, _, _ in seps] + [e]  # group k ends at ends[k]
    kinds = [(i, g) for i, (_, _, g) in enumerate(seps) if "(" not in g and ")" not in g]
    if skip_first and kinds and kinds[0][0] == 0:
        first_kind = kinds[0][1]
        kinds = kinds[1:]
    else:
        first_kind = None
    change = next((i for i, g in kinds if g != kinds[0][1]), None) if kinds else None
    main_kind = kinds[0][1] if kinds else first_kind
    order = [len(ends) - 1] if change is None else [change - 1, change]
    for k in order:
        if 0 <= k < len(ends) and _phone_ok(text, s, ends[k], min_digits, max_digits):
            if k == len(ends) - 1 and _continues(text, ends[k], ce, main_kind):
                return None
            return ends[k]
    return None


# --------------------------------------------------------------------------------------------
# payment cards

# printed layouts only: bare 13-19 digits; groups of four (last group 1-4); Amex 4-6-5; Diners 4-6-4
_CARD_CAND = re.compile(
    r"[1-9](?<![\w.+#/\-][1-9])(?:"
    r"[0-9]{12,18}"
    r"|[0-9]{3}(?P<s>[ \-])[0-9]{4}(?:(?P=s)[0-9]{4}){1,3}(?:(?P=s)[0-9]{1,4})?"
    r"|[0-9]{3}(?P<t>[ \-])[0-9]{6}(?P=t)[0-9]{4,5}"
    r")(?![0-9])"
)
# (prefix low, prefix high, allowed lengths): issuer identification number ranges of the
# major schemes, compared on the first len(low) digits
_CARD_IINS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("4", "4", (13, 16, 19)),  # Visa
    ("51", "55", (16,)),  # Mastercard
    ("2221", "2720", (16,)),  # Mastercard 2-series
    ("34", "34", (15,)),  # American Express
    ("37", "37", (15,)),
    ("6011", "6011", (16, 17, 18, 19)),  # Discover
    ("644", "649", (16, 17, 18, 19)),
    ("65", "65", (16, 17, 18, 19)),
    ("300", "305", (14, 15, 16, 17, 18, 19)),  # Diners Club
    ("3095", "3095", (14, 15, 16, 17, 18, 19)),
    ("36", "36", (14, 15, 16, 17, 18, 19)),
    ("38", "39", (14, 15, 16, 17, 18, 19)),
    ("3528", "3589", (16, 17, 18, 19)),  # JCB
    ("62", "62", (16, 17, 18, 19)),  # UnionPay (incl. Discover 622126-622925)
    ("2200", "2204", (16, 17, 18, 19)),  # Mir
    ("50", "50", (13, 14, 15, 16, 17, 18, 19)),  # Maestro
    ("56", "58", (13, 14, 15, 16, 17, 18, 19)),
    ("6304", "6304", (13, 14, 15, 16, 17, 18, 19)),
    ("67", "67", (13, 14, 15, 16, 17, 18, 19)),
)


def _iin_ok(digits: str) -> bool:
    n = len(digits)
    for lo, hi, lengths in _CARD_IINS:
        if n in lengths and lo <= digits[: len(lo)] <= hi:
            return True
    return False


def _card_ok(cand: str) -> bool:
    digits = cand.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and _iin_ok(digits) and _luhn_ok(digits)


def _find_cards(text: str, config: PiiConfig, chunks: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """13-19 digits, bare or in a printed layout with one kind of separator (space or dash):
    4-4-4-4 with an optional last group of 1-4 (13-19 digits), Amex 4-6-5, Diners 4-6-4;
    Luhn-valid, with the IIN prefix and length of a major scheme (Visa, Mastercard, Amex,
    Discover, Diners, JCB, UnionPay, Mir, Maestro); not glued to a word character or to
    ``. - + # /``. When a grouped candidate fails, the same candidate without its last group is
    tried (``4111 1111 1111 1111 2024``).

    Limit: a bare 13-19 digit identifier that happens to be Luhn-valid with a card prefix (one in
    ten of those with a matching prefix and length) is taken for a card."""
    n = len(text)
    for cs, ce in chunks:
        if ce - cs < 13:
            continue
        pos = cs
        while (m := _CARD_CAND.search(text, pos, ce)) is not None:
            s, e = m.span()
            cand = m.group()
            ends = [e]
            sep = m.group("s") or m.group("t")
            if sep and cand.count(sep) >= 3:
                ends.append(s + cand.rindex(sep))
            found = None
            for end in ends:
                nxt = _after(text, end)
                if nxt and _is_word(nxt):
                    continue
                if nxt in (".", "-", "/", ",") and end + 1 < n and text[end + 1].isdigit():
                    continue
                if _card_ok(text[s:end]):
                    found = end
                    break
            if found is not None:
                yield s, found
                pos = found
            else:
                pos = s + 1


# --------------------------------------------------------------------------------------------
# IBAN

# IBAN length per country, SWIFT IBAN registry (cross-checked against python-stdnum 2.2's iban.dat)
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip
_IBAN_CAND = re.compile(r"[A-Z](?<![0-9A-Za-z_][A-Z])[A-Z][0-9]{2}(?: ?[A-Z0-9]){10,30}")


def _iban_mod97_ok(compact: str) -> bool:
    rearranged = compact[4:] + compact[:4]
    value = 0
    for ch in rearranged:
        value = (value * 100 + (ord(ch) - 55) if ch.isalpha() else value * 10 + (ord(ch) - 48)) % 97
    return value == 1


def _find_ibans(text: str, config: PiiConfig) -> Iterable[tuple[int, int]]:
    """Country code + 2 check digits + BBAN (upper-case letters and digits), exactly as long as
    the country's IBAN, written compact or in the printed groups of four, mod-97 == 1. The span
    ends where the country length ends, so a following word (``... 7654 32 EUR``) is not taken.
    Limits: lower-case IBANs and groupings other than fours are missed; the BBAN's per-country
    letter/digit structure is not checked (the length and mod-97 are)."""
    n = len(text)
    pos = 0
    while (m := _IBAN_CAND.search(text, pos)) is not None:
        s = m.start()
        pos = s + 1
        if s > 0 and _is_word(text[s - 1]):
            continue
        length = IBAN_LENGTHS.get(text[s : s + 2])
        if length is None:
            continue
        # walk exactly `length` alphanumerics, allowing single spaces only at group boundaries
        i, count, spaced, ok = s, 0, None, True
        while count < length:
            if i >= n:
                ok = False
                break
            ch = text[i]
            if ch == " ":
                if count % 4 != 0 or count == 0 or spaced is False:
                    ok = False
                    break
                spaced = True
                i += 1
                continue
            if not (ch.isdigit() or "A" <= ch <= "Z"):
                ok = False
                break
            if count == 4 and spaced is None:
                spaced = False
            count += 1
            i += 1
        if not ok or count != length:
            continue
        if i < n and _is_word(text[i]):
            continue
        compact = text[s:i].replace(" ", "")
        if _iban_mod97_ok(compact):
            yield s, i
            pos = i


# --------------------------------------------------------------------------------------------
# US social security numbers

_SSN_CAND = re.compile(r"(?<![\w\-/.+#$])([0-8][0-9]{2})([- ]?)([0-9]{2})\2([0-9]{4})(?![\w\-/]|[.,:][0-9])")
# the words that must stand near a number for it to be taken as an SSN
_SSN_CONTEXT = (
    "ssn", "ssns", "ss#", "ss #", "ss no", "social security", "social-security", "soc sec", "soc. sec",
    "socsec", "ssa-", "tin/ssn", "ssn/tin",
)
_SSN_HINTS = ("ssn", "ss#", "ss #", "ss no", "social", "soc sec", "soc. sec", "socsec", "ssa-")
_SSN_CONTEXT_RE = re.compile(
    r"(?<![a-z0-9])(?:" + "|".join(re.escape(w) for w in _SSN_CONTEXT) + r")(?![a-z])"
)


def _find_ssns(text: str, config: PiiConfig) -> Iterable[tuple[int, int]]:
    """US social security numbers ``AAA-GG-SSSS`` (or with spaces, or 9 bare digits), taken only
    with context: "SSN", "social security", "soc sec", "SS#" ... within 48 characters before the
    number on its line, or 24 after it (``123-45-6789 (SSN)``). Area 001-899 except 666, group
    01-99, serial 0001-9999 (the SSA's rules: 000, 666, 9xx, 00 and 0000 are never issued).
    Limits: an SSN without such a word nearby (a bare ``123-45-6789``) is missed on purpose: the
    same shape is a part number, a case number, a phone extension; numbers that were issued but
    are famous samples (078-05-1120) are still taken."""
    low = text.lower()
    if not any(w in low for w in _SSN_HINTS) or _SSN_CONTEXT_RE.search(low) is None:
        return
    if len(low) != len(text):  # keep the offsets (a few characters lower-case to two)
        low = text.translate(_ASCII_LOWER)
    for m in _SSN_CAND.finditer(text):
        area, group, serial = m.group(1), m.group(3), m.group(4)  # group 2: the separator
        if area in ("000", "666") or group == "00" or serial == "0000":
            continue
        s, e = m.span()
        ls = text.rfind("\n", 0, s) + 1
        le = text.find("\n", e)
        le = len(text) if le == -1 else le
        if (_SSN_CONTEXT_RE.search(low, max(ls, s - 48), s) is None
                and _SSN_CONTEXT_RE.search(low, e, min(le, e + 24)) is None):
            continue
        yield s, e


# --------------------------------------------------------------------------------------------
# secrets

# (kind, rule): tokens whose format is their evidence (prefixes that the issuers document)
_SECRET_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("aws_access_key", re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])")),
    ("github_token", re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82})(?![A-Za-z0-9_])")),
    ("gitlab_token", re.compile(
        r"(?<![A-Za-z0-9_\-])(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|gloas|glagent)-[A-Za-z0-9_\-]{20,64}(?![A-Za-z0-9_\-])")),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9\-])xox[abposre]-[0-9]{6,}(?:-[0-9A-Za-z]{6,}){1,4}(?![A-Za-z0-9\-])")),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}")),
    ("jwt", re.compile(
        r"(?<![A-Za-z0-9_\-.])eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{16,}(?![A-Za-z0-9_\-])")),
    ("stripe_key", re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)_live_[0-9A-Za-z]{24,99}(?![A-Za-z0-9_])")),
    ("google_api_key", re.compile(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])")),
    ("npm_token", re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9_])")),
    ("pypi_token", re.compile(r"(?<![A-Za-z0-9_])pypi-AgE[A-Za-z0-9_\-]{60,}")),
    ("openai_key", re.compile(r"(?<![A-Za-z0-9_\-])sk-(?:proj-)?[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}")),
)
# a substring that each rule needs: the rule runs only on text that holds one
_SECRET_NEEDS: dict[str, tuple[str, ...]] = {
    "aws_access_key": ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), "github_token": ("gho_", "ghp_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "gloas-", "glagent-"), "slack_token": ("xox",), "slack_webhook": ("hooks.slack.com",), "jwt": ("eyJ",),
    "stripe_key": ("k_live_",), "google_api_key": ("AIza",), "npm_token": ("npm_",), "pypi_token": ("pypi-AgE",),
    "openai_key": ("T3BlbkFJ",),
}  # fmt: skip
_PEM_BEGIN = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_PEM_HEADER_LINE = re.compile(r"[ \t]*[A-Za-z][A-Za-z0-9\-]*: [^\n]*\n")
_B64_LINE = re.compile(r"[ \t]*([A-Za-z0-9+/=]{16,})[ \t]*\r?\n?")
# key names whose value is a secret; the value is what gets redacted, never the name
_SECRET_KEY = re.compile(
    r"(?i)(?<![a-z0-9])"
    r"(?:password|passwd|passphrase|pwd|pw|secret|secret[_\-]?key|api[_\-]?key|apikey|api[_\-]?secret|"
    r"access[_\-]?key(?:[_\-]?id)?|secret[_\-]?access[_\-]?key|auth[_\-]?token|access[_\-]?token|"
    r"refresh[_\-]?token|bearer[_\-]?token|client[_\-]?secret|private[_\-]?key|token)"
    r"[\"']?[ \t]*(?:=|:=|=>|:)[ \t]*"
    r"(?:\"(?P<dq>[^\"\s]{1,200})\"|'(?P<sq>[^'\s]{1,200})'|(?P<bare>[^\s\"',;<>(){}\[\]]{1,200}))"
)
# a cheap, case-sensitive pre-scan over the ASCII-lowered text: a key-name tail, then an operator
_SECRET_KEY_HINT = re.compile(r"(?:passw(?:or)?d|passphrase|pwd|pw|secret|key|token)[\"']?[ \t]*(?:=|:)")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_PLACEHOLDER_WORDS = ("xxx", "***", "example", "changeme", "change_me", "your", "password", "secret", "placeholder",
                      "dummy", "redacted", "sample", "token", "<", ">", "${", "$(", "%(", "{{", "...")
_SECRET_VALUE_CHARS = re.compile(r"[A-Za-z0-9+/=_\-.!@#$%^&*~:]+")


def _entropy(value: str) -> float:
    n = len(value)
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _jwt_ok(token: str) -> bool:
    import base64
    import json

    head = token.split(".", 1)[0]
    try:
        obj = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(obj, dict) and ("alg" in obj or "typ" in obj)


def _assignment_value_ok(value: str, config: PiiConfig) -> bool:
    if len(value) < config.secret_assignment_min_length or _SECRET_VALUE_CHARS.fullmatch(value) is None:
        return False
    low = value.lower()
    if any(w in low for w in _PLACEHOLDER_WORDS) or value[0] in "$/.&*" or value.startswith(("%(", "%{", "%s", "%d")):
        return False
    classes = (any(c.islower() for c in value) + any(c.isupper() for c in value) + any(c.isdigit() for c in value)
               + any(not c.isalnum() for c in value))
    if classes < 2 or (not any(c.isdigit() for c in value) and len(value) < 20):
        return False  # a word, a CamelCase name, a hyphenated-phrase
    if re.fullmatch(r"[A-Za-z]+(?:[\-_ ][A-Za-z]+)+", value):
        return False  # words joined by - or _
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+", value):
        return False  # settings.API_KEY, os.environ.get
    return _entropy(value) >= config.secret_assignment_min_entropy


def _find_secrets(text: str, config: PiiConfig) -> Iterable[tuple[int, int, str]]:
    """Secrets, each with its kind:

    - ``private_key``: a PEM / OpenSSH / PGP private-key block: the ``-----BEGIN ... PRIVATE
      KEY-----`` line, optional ``Name: value`` header lines, at least 64 characters of base64
      on lines of their own, and the matching ``-----END ...-----`` line if there is one (the span
      covers all of it). A header line alone (documentation naming the format) is not a key;
    - tokens by their issuers' documented formats: AWS access key ids (``AKIA``/``ASIA``... + 16),
      GitHub (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36, ``github_pat_``), GitLab
      (``glpat-`` ...), Slack (``xoxb-``/``xoxp-``... with numeric parts, incoming-webhook URLs),
      JWTs (three base64url parts whose header decodes to a JSON object with ``alg``/``typ``),
      Stripe live keys, Google API keys (``AIza`` + 35), npm, PyPI and OpenAI tokens;
    - ``assignment``: the value of ``password=`` / ``api_key:`` / ``client_secret =>`` /
      ``"token": "..."`` (key names ending in password, passwd, secret, api_key, access_key,
      auth_token, token, private_key, ...), quoted or bare, at least
      ``secret_assignment_min_length`` characters, Shannon entropy at least
      ``secret_assignment_min_entropy`` bits per character, two character classes and a digit
      (or at least 20 characters), not words joined by ``-``/``_``, and no placeholder (``xxx``, ``changeme``, ``<...>``, ``${VAR}``,
      ``your_...``, an attribute path such as ``settings.API_KEY``). Only the value is redacted.

    Limits: tokens of other issuers and secrets that are not assigned to a key name are missed;
    a random-looking value assigned to a ``token``/``password`` key in documentation is taken."""
    if "-----BEGIN" in text:
        for m in _PEM_BEGIN.finditer(text):
            i = m.end()
            if i < len(text) and text[i] == "\r":
                i += 1
            if i < len(text) and text[i] == "\n":
                i += 1
            while (h := _PEM_HEADER_LINE.match(text, i)) is not None:
                i = h.end()
            body = 0
            while (b := _B64_LINE.match(text, i)) is not None and b.end() > i:
                body += len(b.group(1))
                i = b.end()
            if body < 64:
                continue
            end_marker = f"-----END {m.group(1)}-----"
            j = text.find(end_marker, i, i + 200)
            e = j + len(end_marker) if j != -1 else i
            while e > m.start() and text[e - 1] in " \t\r\n":
                e -= 1
            yield m.start(), e, "private_key"
    for kind, rx in _SECRET_RULES:
        if any(p in text for p in _SECRET_NEEDS[kind]):
            for m in rx.finditer(text):
                if kind == "jwt" and not _jwt_ok(m.group()):
                    continue
                yield m.start(), m.end(), kind
    low = text.lower()
    if len(low) != len(text):  # a few characters lower-case to two ('İ'): keep the offsets
        low = text.translate(_ASCII_LOWER)
    pos = 0
    for hit in _SECRET_KEY_HINT.finditer(low):
        # the key name ends at the hint: search the full rule over a short window around it
        m = _SECRET_KEY.search(text, max(pos, hit.start() - 24), hit.end() + 210)
        if m is None or m.start() > hit.start():
            continue
        pos = m.end()
        grp = "dq" if m.group("dq") is not None else "sq" if m.group("sq") is not None else "bare"
        value = m.group(grp)
        if grp == "bare":
            value = value.rstrip(".:")
        if _assignment_value_ok(value, config):
            s = m.start(grp)
            yield s, s + len(value), "assignment"


# --------------------------------------------------------------------------------------------
# public API

def find_pii(text: str, config: PiiConfig) -> list[PiiSpan]:
    """All detected items, sorted by start, non-overlapping, offsets in ``text``.

    Overlaps are resolved deterministically: secrets first (a token is redacted as a secret even
    where it also reads as an e-mail or a number), then the earlier start wins, then the longer
    span, then the type by a fixed priority (secret, iban, payment_card, email, ipv6, ipv4, ssn, phone)."""
    if not config.enabled or not text or not config.types:
        return []
    found: list[tuple[str, Iterable[tuple]]] = []
    types = config.types
    if "secret" in types:
        found.append(("secret", _find_secrets(text, config)))
    if "ssn" in types:
        found.append(("ssn", _find_ssns(text, config)))
    ner = [t for t in types if t in NER_TYPES]
    if ner and config.ner_backend == "presidio":
        from corpus_assets.domain.curate.pii_ner import find_entities

        by_type: dict[str, list[tuple[int, int]]] = {}
        for t, s, e in find_entities(text, ner, config.ner_min_score):
            by_type.setdefault(t, []).append((s, e))
        found.extend(by_type.items())
    if "email" in types and "@" in text:
        found.append(("email", _find_emails(text, config)))
    if "ipv6" in types and ":" in text:
        found.append(("ipv6", _find_ipv6(text, config)))
    if "iban" in types:
        found.append(("iban", _find_ibans(text, config)))
    if {"ipv4", "phone", "payment_card"} & set(types):
        chunks = _numeric_chunks(text)
        if chunks:
            if "ipv4" in types and "." in text:
                found.append(("ipv4", _find_ipv4(text, config, chunks)))
            if "phone" in types:
                found.append(("phone", _find_phones(text, config, chunks)))
            if "payment_card" in types:
                found.append(("payment_card", _find_cards(text, config, chunks)))
    candidates: list[tuple[int, int, int, str, str]] = []
    for type_, spans_ in found:
        prio = 2 * _TIE_PRIORITY[type_]
        # a token known by its format wins over the same value found as a generic assignment
        candidates.extend(
            (sp[0], sp[0] - sp[1], prio + (sp[2] == "assignment"), type_, sp[2]) if len(sp) > 2
            else (sp[0], sp[0] - sp[1], prio, type_, "")
            for sp in spans_
        )
    candidates.sort()
    # secrets first: a token inside what also reads as an e-mail (https://oauth2:glpat-...@host)
    # or a number is redacted as the secret; then every other type around them
    secrets: list[tuple[int, int]] = []
    last_end = 0
    for s, neg_len, _, type_, _kind in candidates:
        if type_ == "secret" and s >= last_end:
            secrets.append((s, s - neg_len))
            last_end = s - neg_len
    chosen = set(secrets)
    starts = [a for a, _ in secrets]  # sorted, non-overlapping
    spans: list[PiiSpan] = []
    last_end = 0
    for s, neg_len, _, type_, kind in candidates:
        e = s - neg_len
        if s < last_end:
            continue
        if type_ == "secret":
            if (s, e) not in chosen:
                continue
        elif secrets:
            k = bisect.bisect_left(starts, e) - 1  # the last secret starting before e
            if k >= 0 and secrets[k][1] > s:
                continue
        spans.append(PiiSpan(type_, s, e, kind))
        last_end = e
    return spans


def _apply(text: str, spans: list[PiiSpan]) -> str:
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for sp in spans:
        out.append(text[pos : sp.start])
        out.append(PLACEHOLDERS[sp.type])
        pos = sp.end
    out.append(text[pos:])
    return "".join(out)


def redact(text: str, config: PiiConfig) -> tuple[str, list[PiiSpan]]:
    """``text`` with every detected item replaced by its type's placeholder, and the spans found
    (offsets in the original ``text``)."""
    spans = find_pii(text, config)
    return _apply(text, spans), spans


def redact_fields(
    fields: Mapping[str, str], config: PiiConfig
) -> tuple[dict[str, str], list[tuple[str, PiiSpan]]]:
    """:func:`redact` over the text fields of a typed payload (field path -> text, e.g.
    ``"messages[1].content"``). Returns the redacted fields (same keys, same order) and
    ``(field path, span)`` pairs in field order, offsets in each field's original text."""
    out: dict[str, str] = {}
    found: list[tuple[str, PiiSpan]] = []
    for path, value in fields.items():
        red, spans = redact(value, config)
        out[path] = red
        found.extend((path, sp) for sp in spans)
    return out, found


def counts_by_type(spans: Iterable[PiiSpan | tuple[str, PiiSpan]]) -> dict[str, int]:
    """Per-type counts (every type in ``PII_TYPES``, zeros included) of spans or (field, span) pairs."""
    counts = dict.fromkeys(PII_TYPES, 0)
    for item in spans:
        sp = item[1] if isinstance(item, tuple) else item
        counts[sp.type] += 1
    return counts


def quarantine_hits(spans: Iterable[PiiSpan | tuple[str, PiiSpan]], config: PiiConfig) -> list[str]:
    """The ``quarantine_types`` found among ``spans`` (PII_TYPES order), then ``secret.<kind>`` for
    each of ``quarantine_secret_kinds`` found (SECRET_KINDS order; a private key by default);
    non-empty means the record is to be quarantined instead of redacted."""
    items = [item[1] if isinstance(item, tuple) else item for item in spans]
    found = {sp.type for sp in items}
    kinds = {sp.kind for sp in items if sp.type == "secret"}
    hits = [t for t in config.quarantine_types if t in found]
    if "secret" not in hits:
        hits += [f"secret.{k}" for k in config.quarantine_secret_kinds if k in kinds]
    return hits


def audit_rows(record_id: str, field_spans: Iterable[tuple[str, PiiSpan]], config: PiiConfig) -> list[dict]:
    """Audit-trail rows for one record: record id, field path, type, span, detector and policy
    version. By construction no row holds a matched value."""
    policy = pii_policy_version(config)
    return [
        {
            "record_id": record_id,
            "field": path,
            "type": sp.type,
            "start": sp.start,
            "end": sp.end,
            "detector_version": PII_DETECTOR_VERSION,
            "policy_version": policy,
        }
        for path, sp in field_spans
    ]
