"""A second, independent PII detector: the ``no_pii_in_public`` check's second opinion.

Re-running ``pii.find_pii`` over text it has already redacted can only ever find nothing, so that
check could not fail when ``pii.py`` misses something. This module shares no rule, table or
helper with ``pii.py``: phone numbers come from Google's libphonenumber metadata (the
``phonenumbers`` package), secrets from Yelp's ``detect-secrets`` plugins (their own token
regexes, its JWT validation, its private-key header list), addresses from the standard
library's own classification (``ipaddress ... .is_global``), and the other types from rules
written separately here (their own regexes, Luhn and mod-97 written again). It only follows the
same *policy* (the configured types and exempt IP ranges), so what the configuration deliberately
leaves in the text (a loopback address, a section number) is not reported.

It is built to be sure rather than complete: an item counts only with strong evidence (an e-mail
under a common top-level domain, an address next to a network word or a port, a number that
libphonenumber calls valid, a card number with a scheme prefix and a valid Luhn digit, an SSN
right after its label, a token in an issuer's format). A finding therefore means that the
primary detector missed something real, and a clean public layer gives none.

Pure and deterministic; like ``pii.py`` it returns types and offsets, never values.
Limits: docs/curation.md#pii-corpus_assetsdomaincuratepiipy
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from corpus_assets.domain.curate.pii import PiiConfig

__all__ = ["CROSSCHECK_VERSION", "SecondOpinion", "second_opinion"]

CROSSCHECK_VERSION = "pii-crosscheck-1"


@dataclass(frozen=True, slots=True)
class SecondOpinion:
    """A finding of the second detector: PII type, the rule that found it, and its span."""

    type: str
    rule: str
    start: int
    end: int


# --------------------------------------------------------------------------------------------
# e-mail: an address under a common top-level domain

_COMMON_TLDS = frozenset(
    "com org net edu gov mil int info biz name pro io co ai app dev me tv cc us uk de fr es it nl be "
    "ch at se no dk fi pl cz sk hu ro bg gr pt ie ru ua by kz br ar mx cl pe ve in cn jp kr tw hk sg "
    "my id th vn ph au nz ca za eg il tr ir sa ae eu asia".split()
)
_EMAIL_RX = re.compile(
    r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@"
    r"((?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,8}([A-Za-z]{2,12}))(?![A-Za-z0-9\-]|\.[A-Za-z0-9])"
)


def _emails(text: str) -> Iterable[SecondOpinion]:
    if "@" not in text:
        return
    for m in _EMAIL_RX.finditer(text):
        local = text[m.start() : text.index("@", m.start())]
        if ".." in local or local.endswith("."):
            continue
        if m.group(2).lower() in _COMMON_TLDS:
            yield SecondOpinion("email", "email.common_tld", m.start(), m.end())


# --------------------------------------------------------------------------------------------
# IP addresses: globally routable (stdlib), not exempt by the configuration, in network context

_NET_WORDS = frozenset(
    "ip ipv4 ipv6 address addr host server client from nameserver gateway listen bind connect "
    "connected connection inet peer src dst remote proxy".split()
)
_QUAD_RX = re.compile(r"(?<![0-9A-Za-z_.])((?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3})(?![0-9A-Za-z_]|\.[0-9])")
_V6_RX = re.compile(r"(?<![0-9A-Za-z_:.])((?:[0-9A-Fa-f]{1,4}:){1,7}(?::|[0-9A-Fa-f]{1,4})(?::[0-9A-Fa-f]{1,4}){0,6})(?![0-9A-Za-z_:])")
_LATIN_WORDS = re.compile(r"[A-Za-z][A-Za-z0-9]*")


@functools.lru_cache(maxsize=32)
def _exempt(ranges: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(r) for r in ranges)


def _excluded(addr, config: PiiConfig) -> bool:
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if not addr.is_global:
        return True
    return any(addr.version == n.version and addr in n for n in _exempt(tuple(config.ip_exempt_ranges)))


def _network_context(text: str, s: int, e: int) -> bool:
    if e + 1 < len(text) and text[e] == ":" and text[e + 1].isdigit():
        return True  # address:port
    line_start = text.rfind("\n", 0, s) + 1
    before = text[max(line_start, s - 32) : s]
    # a sentence or clause boundary between the word and the address cuts the context
    before = re.split(r"[.;!?][ \t]|[()\[\]]", before)[-1]
    return any(w.lower() in _NET_WORDS for w in _LATIN_WORDS.findall(before)[-3:])


def _block(text: str, e: int, addr) -> bool:
    """``addr/prefix`` naming a network of /16 (IPv4) or /32 (IPv6) or wider: no one's address."""
    m = re.match(r"/([0-9]{1,3})(?![0-9])", text[e : e + 5])
    if m is None:
        return False
    prefix = int(m.group(1))
    if prefix > (16 if addr.version == 4 else 32):
        return False
    return int(addr) & ((1 << (addr.max_prefixlen - prefix)) - 1) == 0


def _addresses(text: str, config: PiiConfig, want4: bool, want6: bool) -> Iterable[SecondOpinion]:
    if want4 and "." in text:
        for m in _QUAD_RX.finditer(text):
            s, e = m.span(1)
            # "24.2.2.4. Title" and "Section\xa010.1.2.3" are headings and references
            if re.match(r"\.[ \t\xa0]+\S", text[e : e + 3]) or (s > 0 and text[s - 1] == "\xa0"):
                continue
            addr = ipaddress.IPv4Address(m.group(1))
            if _excluded(addr, config) or _block(text, e, addr) or not _network_context(text, s, e):
                continue
            yield SecondOpinion("ipv4", "ipv4.global_in_context", s, e)
    if want6 and ("::" in text or text.count(":") >= 7):
        for m in _V6_RX.finditer(text):
            s, e = m.span(1)
            cand = m.group(1)
            if sum(1 for g in cand.split(":") if g) < 3:
                continue
            try:
                addr = ipaddress.IPv6Address(cand)
            except ValueError:
                continue
            if _excluded(addr, config) or _block(text, e, addr):
                continue
            yield SecondOpinion("ipv6", "ipv6.global", s, e)


# --------------------------------------------------------------------------------------------
# phone numbers: what libphonenumber finds and validates (international format only)

_CODE_CONTEXT = frozenset("=([{<>*/%|&^~,")


def _phones(text: str) -> Iterable[SecondOpinion]:
    if "+" not in text or re.search(r"\+\(?[1-9]", text) is None:
        return
    import phonenumbers

    for match in phonenumbers.PhoneNumberMatcher(text, None, leniency=phonenumbers.Leniency.VALID):
        s, e = match.start, match.end
        if not text[s:e].lstrip("(").startswith("+"):
            continue
        j = s - 1
        while j >= 0 and text[j] in " \t":
            j -= 1
        if j >= 0 and (text[j] in _CODE_CONTEXT or text[j].isdigit()):
            continue
        yield SecondOpinion("phone", "phone.libphonenumber_valid", s, e)


# --------------------------------------------------------------------------------------------
# payment cards and IBANs, checksums written again

_CARD_RX = re.compile(
    r"(?<![0-9A-Za-z_.+#/\-])((?:4[0-9]{3}|5[1-5][0-9]{2}|2[2-7][0-9]{2}|6011|65[0-9]{2})(?:[ \-]?[0-9]{4}){3}"
    r"|3[47][0-9]{2}[ \-]?[0-9]{6}[ \-]?[0-9]{5})(?![0-9A-Za-z_]|[.,/\-][0-9])"
)
_IBAN_RX = re.compile(r"(?<![0-9A-Za-z_])([A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?)(?![0-9A-Za-z_])")


def _luhn(digits: str) -> bool:
    s = 0
    for i, d in enumerate(int(c) for c in reversed(digits)):
        s += (d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2))
    return s % 10 == 0


def _cards(text: str) -> Iterable[SecondOpinion]:
    for m in _CARD_RX.finditer(text):
        digits = re.sub(r"[ \-]", "", m.group(1))
        seps = set(re.findall(r"[ \-]", m.group(1)))
        if len(seps) <= 1 and _luhn(digits):
            yield SecondOpinion("payment_card", "card.scheme_luhn", m.start(1), m.end(1))


def _ibans(text: str) -> Iterable[SecondOpinion]:
    for m in _IBAN_RX.finditer(text):
        compact = m.group(1).replace(" ", "")
        if not 15 <= len(compact) <= 34:
            continue
        moved = compact[4:] + compact[:4]
        if int("".join(str(int(c, 36)) for c in moved)) % 97 == 1:
            yield SecondOpinion("iban", "iban.mod97", m.start(1), m.end(1))


# --------------------------------------------------------------------------------------------
# US SSN right after its label

_SSN_RX = re.compile(
    r"(?i)(?:\bssn\b|social[ \-]security(?:[ \-]n(?:o|umber)\.?)?)[ \t]*(?:#|no\.?|number)?[ \t]*[:=]?[ \t]*"
    r"(?P<v>(?!000|666|9)[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4})(?![0-9\-])"
)


def _ssns(text: str) -> Iterable[SecondOpinion]:
    low = text.lower()
    if "ssn" not in low and "social" not in low:
        return
    for m in _SSN_RX.finditer(text):
        yield SecondOpinion("ssn", "ssn.labelled", m.start("v"), m.end("v"))


# --------------------------------------------------------------------------------------------
# secrets: detect-secrets' plugins


@functools.lru_cache(maxsize=1)
def _detect_secrets_rules() -> tuple[tuple[str, object, re.Pattern[str]], ...]:
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.npm import NpmDetector  # noqa: F401  (its rule needs an .npmrc line)
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.stripe import StripeDetector

    rules = [("aws_access_key", AWSKeyDetector, AWSKeyDetector.denylist[0])]
    for name, cls in (("github_token", GitHubTokenDetector), ("gitlab_token", GitLabTokenDetector),
                      ("slack_token", SlackDetector), ("jwt", JwtTokenDetector), ("stripe_key", StripeDetector),
                      ("openai_key", OpenAIDetector), ("pypi_token", PypiTokenDetector)):
        rules.extend((name, cls, rx) for rx in cls.denylist)
    return tuple(rules)


@functools.lru_cache(maxsize=1)
def _private_key_headers() -> tuple[re.Pattern[str], ...]:
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    return tuple(PrivateKeyDetector.denylist)


_B64ISH = re.compile(r"[ \t]*[A-Za-z0-9+/=]{40,}[ \t]*$")


# a substring each plugin's rule needs (a cheap test before running it)
_NEEDS = {"aws_access_key": ("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), "github_token": ("gh",),
          "gitlab_token": ("gl", "GR1348941"), "slack_token": ("xox", "XOX", "hooks.slack"), "jwt": ("eyJ",),
          "stripe_key": ("k_live_",), "openai_key": ("T3BlbkFJ",), "pypi_token": ("pypi-",)}


def _secrets(text: str) -> Iterable[SecondOpinion]:
    for name, cls, rx in _detect_secrets_rules():
        if not any(n in text for n in _NEEDS[name]):
            continue
        for m in rx.finditer(text):
            s, e = m.span()
            if (s > 0 and text[s - 1].isalnum()) or (e < len(text) and text[e].isalnum() and name != "jwt"):
                continue
            token = m.group()
            if name == "jwt":
                if not (token.count(".") >= 2 and cls.is_formally_valid(token) and len(token) >= 40):
                    continue
            yield SecondOpinion("secret", f"detect_secrets.{name}", s, e)
    if "PRIVATE KEY" in text or "PuTTY-User-Key-File" in text:
        for rx in _private_key_headers():
            for m in rx.finditer(text):
                # a key, not a mention: three base64 lines among the next ten
                following = text[m.end() :].split("\n")[1:11]
                if sum(1 for line in following if _B64ISH.match(line)) >= 3:
                    yield SecondOpinion("secret", "detect_secrets.private_key", m.start(), m.end())


# --------------------------------------------------------------------------------------------


def second_opinion(text: str, config: PiiConfig) -> list[SecondOpinion]:
    """Every item of a configured type that this independent detector is sure of, by start.
    Disabled PII (``config.enabled`` false) and unconfigured types are never reported."""
    if not config.enabled or not text:
        return []
    types = set(config.types)
    out: list[SecondOpinion] = []
    if "email" in types:
        out.extend(_emails(text))
    if types & {"ipv4", "ipv6"}:
        out.extend(_addresses(text, config, "ipv4" in types, "ipv6" in types))
    if "phone" in types:
        out.extend(_phones(text))
    if "payment_card" in types:
        out.extend(_cards(text))
    if "iban" in types:
        out.extend(_ibans(text))
    if "ssn" in types:
        out.extend(_ssns(text))
    if "secret" in types:
        out.extend(_secrets(text))
    out.sort(key=lambda f: (f.start, f.end, f.type))
    return out
