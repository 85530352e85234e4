"""PII detection and redaction: e-mail addresses, IPv4/IPv6 addresses, phone numbers, payment card
numbers and IBANs, each replaced by a typed placeholder.

Pure and deterministic (no Dagster, logging, network or model): rules that cannot backtrack
catastrophically plus checks in Python, each skipped when a cheap pre-filter rules its type out.
What leaves this module is offsets, never values (``PiiSpan``, ``audit_rows``); callers must not log
matched substrings either. Any change to a rule, a table or a default must bump
``PII_DETECTOR_VERSION`` (digested by ``pii_policy_version``).

Rules and why: docs/curation.md#pii-corpus_assetsdomaincuratepiipy (limits: each ``_find_*``)
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpus_assets.domain.core.hashing import canonical_digest

__all__ = [
    "PII_TYPES",
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
]

PII_TYPES: tuple[str, ...] = ("email", "ipv4", "ipv6", "phone", "payment_card", "iban")
PLACEHOLDERS: dict[str, str] = {
    "email": "<EMAIL>",
    "ipv4": "<IPV4>",
    "ipv6": "<IPV6>",
    "phone": "<PHONE>",
    "payment_card": "<PAYMENT_CARD>",
    "iban": "<IBAN>",
}

# Bump whenever a rule, a table or a default changes (it is part of every policy version).
PII_DETECTOR_VERSION = "pii-1"

# When two candidate spans start at the same offset and have the same length, the type listed
# first here wins (the stronger, checksum-validated evidence first).
_TIE_PRIORITY: dict[str, int] = {
    t: i for i, t in enumerate(("iban", "payment_card", "email", "ipv6", "ipv4", "phone"))
}


# --------------------------------------------------------------------------------------------
# configuration


class PiiConfig(BaseModel):
    """What to detect and what to do with it; every field goes into :func:`pii_policy_version`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # detected types (validated against PII_TYPES, normalized to PII_TYPES order)
    types: list[str] = Field(default_factory=lambda: list(PII_TYPES))
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
        "config": config.model_dump(mode="json"),
    }
    return f"{PII_DETECTOR_VERSION}+{canonical_digest(spec)[:16]}"


# --------------------------------------------------------------------------------------------
# spans


@dataclass(frozen=True, slots=True)
class PiiSpan:
    """A detected item: its type and half-open span ``[start, end)`` in the original text.

    Deliberately holds no value, so neither ``repr()`` nor serialization can leak one.
    """

    type: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.type not in PII_TYPES:
            raise ValueError(f"unknown PII type {self.type!r}")
        if not (0 <= self.start < self.end):
            raise ValueError(f"invalid span [{self.start}, {self.end})")


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
    "firewall blocked banned vpn lan wan".split()
)
_WORD_RE = re.compile(r"[a-z][a-z0-9]*")


def _octets_ok(parts: list[str]) -> bool:
    for p in parts:
        if len(p) > 1 and p[0] == "0":
            return False
        if int(p) > 255:
            return False
    return True


_CLAUSE_END = re.compile(r"[.;,:!?](?:\s|$)|[()\[\]*|\n]")


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
    words before it in the same clause and no IP word (ip, address, host, server, dns, from, ...)
    is; or the first octet is a single digit (``2.6.32.1``, ``1.2.3.4``) and no IP word is. A
    ``:port`` or ``/prefix`` right after the quad counts as IP context. Known
    limits: a version without such context (``libfoo 2.6.32.1``) is still taken as an address,
    and an address after a version word with no IP word (``updated to 10.1.2.3``) is missed."""
    n = len(text)
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
            if config.ipv4_version_heuristics:
                if parts[0] == "0" and any(p != "0" for p in parts):
                    continue
                if prev == "-" and s >= 2 and _is_word(text[s - 2]) and not _ipv4_at_end(text, s - 1):
                    continue
                if nxt in ("-", "+", "~") and e + 1 < n and text[e + 1].isalnum():
                    if not (nxt == "-" and _ipv4_at(text, e + 1)):
                        continue
                words = set(_clause_words(text, s))
                ip_context = bool(words & _IP_WORDS) or (
                    nxt in (":", "/") and e + 1 < n and text[e + 1].isdigit()
                )
                if not ip_context and (words & _VERSION_WORDS or len(parts[0]) == 1):
                    continue
            yield s, e


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
        try:
            ipaddress.IPv6Address(cand)
        except ValueError:
            continue
        yield s, e


# --------------------------------------------------------------------------------------------
# phone numbers

_PHONE_WORDS = frozenset("tel phone telephone fax mobile mob cell cellphone call whatsapp sms".split())
# characters that may not stand right before a number (a longer token, a price, a bug number)
_NUM_BAD_PREV = r"\w+#.\-/:@$€£=,"
# international: '+' then one digit per unit, each optionally wrapped in / followed by a single
# separator; every unit consumes exactly one digit, so matching is linear
_PHONE_INTL = re.compile(
    rf"(?<![{_NUM_BAD_PREV}])\+\(?[1-9]\)?[ .\-/]?(?:\(?[0-9]\)?[ .\-/]?){{5,13}}\(?[0-9]\)?(?![0-9])"
)
# North American 3-3-4 (area and exchange codes start with 2-9), optionally with a leading 1
_PHONE_NANP = re.compile(
    rf"(?<![{_NUM_BAD_PREV}])(?:1[ .\-])?(?:\([2-9][0-9]{{2}}\) ?|[2-9][0-9]{{2}}(?P<sep>[ .\-]))"
    r"[2-9][0-9]{2}(?(sep)(?P=sep)|[ .\-])[0-9]{4}(?![0-9])"
)
# national numbers with a trunk prefix 0: groups separated by one separator each
_PHONE_TRUNK = re.compile(
    rf"(?<![{_NUM_BAD_PREV}(])(?:\(0[0-9]{{1,4}}\)|0[0-9]{{1,4}})(?:[ .\-/][0-9]{{2,8}}){{1,4}}(?![0-9])"
)
# bare digits after a phone word: a trunk-0 number or a North American 10 (or 1 + 10) digits
_PHONE_BARE_DIALABLE = re.compile(r"0[1-9][0-9]{8,11}|1?[2-9][0-9]{2}[2-9][0-9]{6}")
_DATE_PREFIX = re.compile(
    r"(?:[0-9]{1,2}([./\-])[0-9]{1,2}\1(?:19|20)[0-9]{2}|(?:19|20)[0-9]{2}([./\-])[0-9]{1,2}\2[0-9]{1,2})(?![0-9])"
)


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


def _find_phones(text: str, config: PiiConfig, chunks: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """Phone numbers, precision first:

    - international: ``+CC`` and up to 15 digits in groups separated by single spaces, dots,
      dashes or slashes, with at most one parenthesized group (``+44 (0)20 7946 0958``,
      ``+1-415-555-0132``, ``+4915123456789``), at least ``phone_min_digits_international``
      digits;
    - North American ``(415) 555-0132`` / ``415-555-0132`` / ``415.555.0132`` /
      ``1-800-555-0199`` (area and exchange codes start with 2-9, one separator kind);
    - national numbers with a trunk 0 and at least one separator, one separator kind, groups of
      2-8 digits (``020 7946 0958``, ``030 12345678``, ``01 23 45 67 89``, ``06-12345678``,
      ``(0171) 1234567``), ``phone_min_digits`` to 13 digits;
    - a bare run of digits (trunk 0 and 10-13 digits, or North American 10 / 1+10 digits) only
      within 24 characters after a phone word (tel, phone, fax, mobile, call, ...) on the line.

    International numbers are capped at the E.164 length of common country codes (+1 and +7: 11
    digits, +44: 12, +33/+31/+34/+61: 11, ...; others 15).

    A number must start where its run of digits (joined by up to two separator characters)
    starts, so the tail of a longer number (an IBAN, a card, a list) is never taken; and it ends
    where its separator kind changes (see ``_phone_end``).

    Never: a candidate glued to a word character or preceded by ``+ # . - / : @ = ,`` or a
    currency sign, or followed by ``. - / : ,`` and a digit (part of a longer number); one that
    starts with a date (``01.02.2023``, ``2023-01-15``); anything right after "ISBN". Times never
    match (``:`` is no separator), nor do ZIP+4 codes (9 digits) or year ranges (8 digits).

    Limits: national formats without a trunk 0 outside North America (``612 345 678``), the
    ``00`` international prefix and vanity numbers are missed unless written with ``+``; a
    number that directly follows another number with only a space between them is missed; an
    international number under a country code without a known length, directly followed by a
    space and more digits, takes them in while the total stays within 15 digits."""
    intl_min = config.phone_min_digits_international
    nat_min = config.phone_min_digits
    for cs, ce in chunks:
        width = ce - cs
        if width < min(intl_min, nat_min):
            continue
        if text[cs] == "+" or text[cs : cs + 2] == "(+":
            m = _PHONE_INTL.match(text, cs, ce)
            if m is not None:
                # a "(0)" trunk digit written inside an international number does not count
                max_digits = _cc_max_digits(text, cs) + ("(0)" in m.group())
                e = _phone_end(text, cs, m.end(), intl_min, max_digits, skip_first=True)
                if e is not None:
                    yield cs, e
            continue
        if _IBAN_HEAD_BEFORE.search(text, max(0, cs - 40), cs) is not None:
            continue  # the digits of an IBAN (a mod-97-invalid one, or one not detected)
        for rx, max_digits in ((_PHONE_NANP, 11), (_PHONE_TRUNK, 13)):
            m = rx.match(text, cs, ce)
            if m is not None:
                e = _phone_end(text, cs, m.end(), nat_min, max_digits, skip_first=rx is _PHONE_NANP)
                if e is not None:
                    yield cs, e
                    break
        else:
            if 9 <= width <= 16 and _PHONE_BARE_DIALABLE.fullmatch(text, cs, ce) is not None:
                words = set(_WORD_RE.findall(_window(text, cs, 24)))
                if words & _PHONE_WORDS and _phone_ok(text, cs, ce, nat_min, 15):
                    yield cs, ce


_PHONE_SEP = re.compile(r"[ .\-/()]+")
# most digits (country code included) of numbers under common country codes (E.164 national
# significant number lengths); other codes may have up to 15
_PHONE_CC_MAX = {
    "1": 11, "7": 11, "27": 11, "30": 12, "31": 11, "32": 11, "33": 11, "34": 11, "36": 11, "41": 11,
    "44": 12, "45": 10, "47": 10, "48": 11, "61": 11, "65": 10, "81": 12, "86": 13, "90": 12, "91": 12,
}  # fmt: skip


def _cc_max_digits(text: str, s: int) -> int:
    digits = "".join(c for c in text[s : s + 6] if c.isdigit())
    return _PHONE_CC_MAX.get(digits[:1]) or _PHONE_CC_MAX.get(digits[:2]) or 15
_IBAN_HEAD_BEFORE = re.compile(r"(?<![A-Za-z0-9_])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4})* $")


def _phone_end(text: str, s: int, e: int, min_digits: int, max_digits: int, skip_first: bool) -> int | None:
    """The end of the phone number in the candidate ``text[s:e]``, or None.

    The separators between digit groups must be of one kind, not counting those next to a
    parenthesis and (``skip_first``) the one after the country / leading code. Where the kind
    changes, the number ends before the group in front of the change (``+1 312 536 6626 3.9.8``
    -> ``+1 312 536 6626``) or, if that is too short, at the change; then up to two trailing
    groups are dropped while the candidate is invalid (``0171 1098058 13:35``)."""
    seps = [(m.start(), m.end(), m.group()) for m in _PHONE_SEP.finditer(text, s, e) if m.start() > s]
    ends = [a for a, _, _ in seps] + [e]  # group k ends at ends[k]
    kinds = [(i, g) for i, (_, _, g) in enumerate(seps) if "(" not in g and ")" not in g]
    if skip_first and kinds and kinds[0][0] == 0:
        kinds = kinds[1:]
    order: list[int]
    change = next((i for i, g in kinds if g != kinds[0][1]), None) if kinds else None
    if change is None:
        last = len(ends) - 1
        order = [last, last - 1, last - 2]
    else:
        order = [change - 1, change, change - 2]
    for k in order:
        if 0 <= k < len(ends) and _phone_ok(text, s, ends[k], min_digits, max_digits):
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
# public API

def find_pii(text: str, config: PiiConfig) -> list[PiiSpan]:
    """All detected items, sorted by start, non-overlapping, offsets in ``text``.

    Overlaps are resolved deterministically: the earlier start wins, then the longer span, then
    the type by a fixed priority (iban, payment_card, email, ipv6, ipv4, phone)."""
    if not config.enabled or not text or not config.types:
        return []
    found: list[tuple[str, Iterable[tuple[int, int]]]] = []
    types = config.types
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
    candidates: list[tuple[int, int, int, str]] = []
    for type_, spans_ in found:
        prio = _TIE_PRIORITY[type_]
        candidates.extend((s, s - e, prio, type_) for s, e in spans_)
    candidates.sort()
    spans: list[PiiSpan] = []
    last_end = 0
    for s, neg_len, _, type_ in candidates:
        if s >= last_end:
            spans.append(PiiSpan(type_, s, s - neg_len))
            last_end = s - neg_len
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
    """The ``quarantine_types`` found among ``spans`` (PII_TYPES order); non-empty means the
    record is to be quarantined instead of redacted."""
    found = {(item[1] if isinstance(item, tuple) else item).type for item in spans}
    return [t for t in config.quarantine_types if t in found]


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
