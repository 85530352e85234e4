#!/usr/bin/env python3
"""Build the PII labelled set (issue 3) from real Debian text on this machine.

Records are real text: the most recent entries of every ``/usr/share/doc/*/changelog.Debian.gz``
and the paragraphs of every ``/usr/share/doc/*/copyright`` that carry a copyright statement.
Their e-mail addresses are real (maintainers, uploaders, copyright holders) and are labelled by
rules about the *format of those files*, never by the detector under test (this script imports
nothing from ``corpus_assets``):

  R1  changelog trailer   `` -- Name <address>  date``           -> the address
  R2  copyright fields    ``Copyright:`` / ``Upstream-Contact:`` / ``Maintainer:`` lines, their
                          continuation lines and lines starting "Copyright"/"(C)"/"©": each
                          whitespace token holding exactly one ``@`` whose domain has a dot and
                          an alphabetic top-level label, stripped of ``<>()[],;:"'`` around it
  R3  anywhere            ``<local@domain.tld>`` in angle brackets

Label completeness. A line is kept only if every possible PII item in it is accounted for by
these rules or is certainly *not* PII; a deliberately broad net (much broader than any detector)
finds lines that might hold unlabelled PII, and those lines are dropped (counted by reason in the
manifest):

  unlabelled_at    an ``@`` outside a labelled address whose token has ``.letter`` after it
  dotted_quad      four dot-separated numbers all <= 255 (outside the changelog header)
  ipv6_like        a token with ``:`` that ``ipaddress`` accepts as IPv6
  long_number      a run of >= 7 digits (joined by spaces, dots, dashes, slashes, parentheses,
                   optionally after ``+``) that is not a year / year range list, a ZIP+4 code, a
                   ``#bug`` number, part of a whitespace-delimited token holding letters
                   (``CVE-2024-28085``, ``gost3411-2012``, hex digests) or a dotted number with
                   three or more parts
  phone_word       the words tel / phone / fax / mobile
  iban_like        ``[A-Z]{2}[0-9]{2}`` followed by 4+ letters/digits

Real hard negatives are kept and marked: changelog header versions, trailer dates/times, year
ranges, ZIP+4 codes, ``#bug`` numbers, ``@`` tokens that cannot be addresses, ``::`` tokens.

Inserted items. Deterministically (a seeded ``random.Random`` per record) about two thirds of
the records get synthetic-but-realistic items inserted at a word boundary of a real body line,
with the offsets recorded: IPv4 / IPv6 addresses, phone numbers in several national and
international formats, Luhn-valid card numbers (well-known test numbers and generated ones with
real IIN prefixes), mod-97-valid IBANs (well-known examples and generated ones), bare e-mail
addresses (real addresses from other trailers). Hard negatives are inserted the same way:
version strings (4-5 numeric parts, some taken from real changelog headers), dates, times, ISBNs,
hashes, UUIDs, MAC addresses, Luhn-invalid card numbers, IBANs with a wrong check, ``@``
non-addresses, SSN-like and ZIP codes, ``Foo::Bar`` scope operators.

Output (``bench/data/`` is git-ignored): ``bench/data/pii/labelled.jsonl``, one record per line

    {"id", "source": "changelog"|"copyright", "package", "text",
     "spans":     [{"type", "start", "end", "origin": "real"|"inserted"}],   # gold PII
     "negatives": [{"kind", "start", "end", "origin"}]}                      # marked hard negatives

and ``bench/data/pii/manifest.json`` (counts, dropped lines by reason, parameters, digest).
Same machine (same /usr/share/doc) and same parameters -> byte-identical output.

Run:  .venv/bin/python bench/pii/build_labelled_set.py
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import ipaddress
import json
import os
import random
import re
import string
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "data" / "pii"
DOC_ROOT = "/usr/share/doc"

# ----------------------------------------------------------------------------------------------
# independent labelling rules (R1-R3) and the completeness net

TRAILER = re.compile(r"^ -- (?P<name>.+?) <(?P<email>[^<>\s@]+@[^<>\s@]+)>  (?P<date>.+)$")
HEADER = re.compile(r"^(?P<pkg>[a-z0-9][a-z0-9+.\-]*) \((?P<version>[^)\s]+)\) [^;]+;.*$")
ANGLE_EMAIL = re.compile(r"<([A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,})>")
EMAIL_TOKEN = re.compile(r"^[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}$")
COPYRIGHT_FIELD = re.compile(r"^(Copyright|Upstream-Contact|Maintainer|Upstream-Maintainer|Contact)\s*:", re.I)
COPYRIGHT_LINE = re.compile(r"^\s*(?:Copyright|\(C\)|©)", re.I)
TRAILER_DATE = re.compile(r"[A-Z][a-z]{2}, \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}")

NET_DOTTED_QUAD = re.compile(r"(?<![\d.])(\d+)\.(\d+)\.(\d+)\.(\d+)")
NET_IPV6 = re.compile(r"[0-9A-Za-z:.%]*:[0-9A-Za-z:.%]*")
NET_LONG_NUMBER = re.compile(r"\+?\(?\d[\d ().\-/]*\d\)?")
NET_IBAN = re.compile(r"[A-Z]{2}[0-9]{2}[ ]?[A-Z0-9]{4}")
NET_PHONE_WORD = re.compile(r"\b(?:tel|phone|telephone|fax|mobile)\b", re.I)
YEARS = re.compile(r"^(?:(?:19|20)\d{2})(?:\s*[-/,]\s*(?:(?:19|20)\d{2}|\d{2}))*$")
ZIP4 = re.compile(r"^\d{5}-\d{4}$")


def _strip_token(tok: str, start: int) -> tuple[str, int]:
    lead = len(tok) - len(tok.lstrip("<>()[],;:\"'"))
    tok2 = tok.strip("<>()[],;:\"'")
    tok2 = tok2.rstrip(".")
    return tok2, start + lead


def label_line(line: str, kind: str, in_copyright_field: bool) -> tuple[list[tuple], list[tuple], str | None]:
    """(gold spans, negative marks, drop reason or None) for one real line, offsets in the line.

    kind: 'header' | 'trailer' | 'body'."""
    spans: list[tuple[str, int, int]] = []
    negs: list[tuple[str, int, int]] = []
    covered: list[tuple[int, int]] = []

    def add(type_: str, s: int, e: int) -> None:
        if not any(s < ce and cs < e for cs, ce in covered):
            spans.append((type_, s, e))
            covered.append((s, e))

    if kind == "trailer":
        m = TRAILER.match(line)
        add("email", m.start("email"), m.end("email"))
        d = TRAILER_DATE.search(line, m.start("date"))
        if d:
            negs.append(("date_time", d.start(), d.end()))
    if kind == "header":
        m = HEADER.match(line)
        negs.append(("version", m.start("version"), m.end("version")))
    for m in ANGLE_EMAIL.finditer(line):  # R3
        add("email", m.start(1), m.end(1))
    if in_copyright_field or COPYRIGHT_LINE.match(line) or COPYRIGHT_FIELD.match(line):  # R2
        for t in re.finditer(r"\S+", line):
            tok, s = _strip_token(t.group(), t.start())
            if tok.count("@") == 1 and EMAIL_TOKEN.match(tok):
                add("email", s, s + len(tok))

    # completeness net: every '@' must be labelled or certainly not an address
    for i, ch in enumerate(line):
        if ch == "@" and not any(cs <= i < ce for cs, ce in covered):
            tok_s = max(line.rfind(" ", 0, i), line.rfind("\t", 0, i)) + 1
            tok_e = line.find(" ", i)
            tok = line[tok_s : tok_e if tok_e >= 0 else len(line)]
            after = tok[tok.index("@", i - tok_s) + 1 :] if "@" in tok else ""
            if re.search(r"\.[A-Za-z]", after):
                return spans, negs, "unlabelled_at"
            negs.append(("at_sign", i, i + 1))
    if kind != "header":
        for m in NET_DOTTED_QUAD.finditer(line):
            if all(int(g) <= 255 for g in m.groups()):
                return spans, negs, "dotted_quad"
    for m in NET_IPV6.finditer(line):
        tok = m.group().strip(".:[]%")
        for cand in {tok, tok.split("%")[0]}:
            try:
                ipaddress.IPv6Address(cand)
                return spans, negs, "ipv6_like"
            except ValueError:
                pass
        if "::" in m.group():
            negs.append(("scope_operator", m.start(), m.end()))
    if NET_PHONE_WORD.search(line):
        return spans, negs, "phone_word"
    if NET_IBAN.search(line):
        return spans, negs, "iban_like"
    if kind == "body":
        for m in NET_LONG_NUMBER.finditer(line):
            digits = sum(c.isdigit() for c in m.group())
            if digits < 7:
                continue
            g = m.group().strip(" ().-/+")
            if YEARS.match(g):
                negs.append(("years", m.start(), m.end()))
            elif ZIP4.match(g):
                negs.append(("zip", m.start(), m.end()))
            elif m.start() > 0 and line[m.start() - 1] == "#" and g.isdigit():
                negs.append(("bug_number", m.start(), m.end()))
            else:
                # the whitespace-delimited token around the number
                ts = max(line.rfind(" ", 0, m.start()), line.rfind("\t", 0, m.start())) + 1
                te = line.find(" ", m.end())
                token = line[ts : te if te >= 0 else len(line)].strip("()[]<>,;:\"'")
                if re.search(r"[A-Za-z_]", token) and not token.startswith(("+", "(")):
                    # CVE-2024-28085, gost3411-2012, a hex digest, Policy-20040205/#def, 3.24.36-33-g5554113c74
                    negs.append(("in_identifier", m.start(), m.end()))
                elif re.fullmatch(r"\d+(?:\.\d+){2,}\.?", token):
                    negs.append(("dotted_numbers", m.start(), m.end()))
                else:
                    return spans, negs, "long_number"
    return spans, negs, None


# ----------------------------------------------------------------------------------------------
# real records


def changelog_records(max_entries: int, max_lines: int, drops: Counter, versions: list[str]) -> list[dict]:
    records = []
    seen_digests: set[str] = set()
    for path in sorted(glob.glob(os.path.join(DOC_ROOT, "*", "changelog.Debian.gz"))):
        package = path.split("/")[-2]
        try:
            raw = gzip.open(path, "rb").read()
        except OSError:
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if digest in seen_digests:  # symlinked doc dirs / identical changelogs
            continue
        seen_digests.add(digest)
        text = raw.decode("utf-8", errors="replace")
        entries, cur = [], []
        for line in text.split("\n"):
            if HEADER.match(line) and cur:
                entries.append(cur)
                cur = []
            cur.append(line)
        if cur:
            entries.append(cur)
        for idx, entry in enumerate(entries[:max_entries]):
            while entry and not entry[-1].strip():
                entry.pop()
            if not entry or not HEADER.match(entry[0]) or not TRAILER.match(entry[-1]):
                continue
            if len(entry) > max_lines:
                entry = entry[: max_lines - 1] + [entry[-1]]
            m = HEADER.match(entry[0])
            v = m.group("version").split(":")[-1].split("-")[0]
            if re.fullmatch(r"\d+(?:\.\d+){3,4}", v):
                versions.append(v)
            kinds = ["header"] + ["body"] * (len(entry) - 2) + ["trailer"]
            records.append(
                {"id": f"changelog/{package}/{idx}", "source": "changelog", "package": package,
                 "lines": _label_lines(entry, kinds, drops)}
            )
    return records


def copyright_records(max_paragraphs: int, max_lines: int, drops: Counter) -> list[dict]:
    records = []
    seen_digests: set[str] = set()
    for path in sorted(glob.glob(os.path.join(DOC_ROOT, "*", "copyright"))):
        package = path.split("/")[-2]
        try:
            raw = open(path, "rb").read()
        except OSError:
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if digest in seen_digests:
            continue
        seen_digests.add(digest)
        text = raw.decode("utf-8", errors="replace")
        paragraphs = [p for p in re.split(r"\n\s*\n", text) if re.search(r"copyright|upstream-contact", p, re.I)]
        for idx, para in enumerate(paragraphs[:max_paragraphs]):
            lines = para.split("\n")[:max_lines]
            records.append(
                {"id": f"copyright/{package}/{idx}", "source": "copyright", "package": package,
                 "lines": _label_lines(lines, ["body"] * len(lines), drops, copyright=True)}
            )
    return records


def _label_lines(lines: list[str], kinds: list[str], drops: Counter, copyright: bool = False) -> list[dict]:
    out = []
    in_field = False
    for line, kind in zip(lines, kinds):
        if copyright:
            if COPYRIGHT_FIELD.match(line):
                in_field = True
            elif line and not line[0].isspace():
                in_field = False
        spans, negs, reason = label_line(line, kind, in_field and copyright)
        if reason is not None:
            drops[reason] += 1
            continue
        out.append({"text": line, "kind": kind, "spans": [[t, s, e, "real"] for t, s, e in spans],
                    "negs": [[k, s, e, "real"] for k, s, e in negs]})
    return out


# ----------------------------------------------------------------------------------------------
# synthetic positives (all valid by construction) and hard negatives


def luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        if luhn_ok(body + check):
            return body + check
    raise AssertionError


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_check(country: str, bban: str) -> str:
    n = int("".join(str(int(c, 36)) for c in bban + country + "00"))
    return f"{country}{98 - n % 97:02d}{bban}"


def iban_ok(iban: str) -> bool:
    s = iban.replace(" ", "")
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


def group4(s: str) -> str:
    return " ".join(s[i : i + 4] for i in range(0, len(s), 4))


TEST_CARDS = [
    "4111111111111111", "4012888888881881", "4222222222222", "5555555555554444", "5105105105105100",
    "2221000000000009", "378282246310005", "371449635398431", "6011111111111117", "6011000990139424",
    "30569309025904", "38520000023237", "3530111333300000", "3566002020360505", "6200000000000005",
]  # fmt: skip
CARD_BRANDS = [("4", 16), ("4", 13), ("51", 16), ("53", 16), ("55", 16), ("2223", 16), ("34", 15), ("37", 15),
               ("6011", 16), ("65", 16), ("3528", 16), ("3589", 16), ("36", 14), ("62", 16), ("62", 19)]
KNOWN_IBANS = ["GB82WEST12345698765432", "DE89370400440532013000", "FR1420041010050500013M02606",
               "NL91ABNA0417164300", "ES9121000418450200051332", "IT60X0542811101000000123456",
               "BE68539007547034", "CH9300762011623852957", "AT611904300234573201", "PL61109010140000071219812874",
               "SE4550000000058398257466", "NO9386011117947", "IE29AIBK93115212345678", "DK5000400440116243"]
# country -> BBAN builder (structure per the IBAN registry: a = letters, n = digits)
IBAN_BBAN = {
    "GB": "4a14n", "DE": "18n", "FR": "23n", "NL": "4a10n", "ES": "20n", "IT": "1a22n", "BE": "12n",
    "CH": "17n", "AT": "16n", "PL": "24n", "SE": "20n", "NO": "11n", "IE": "4a14n", "PT": "21n",
    "DK": "14n", "FI": "14n",
}
US_AREAS = ["201", "202", "212", "213", "305", "312", "404", "415", "503", "512", "602", "617", "646",
            "702", "713", "718", "818", "917"]


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def make_bban(rng: random.Random, spec: str) -> str:
    out = ""
    for count, cls in re.findall(r"(\d+)([an])", spec):
        pool = string.ascii_uppercase if cls == "a" else string.digits
        out += "".join(rng.choice(pool) for _ in range(int(count)))
    return out


def gen_phone(rng: random.Random) -> str:
    d = lambda n: _digits(rng, n)  # noqa: E731
    area, exch = rng.choice(US_AREAS), str(rng.randint(2, 9)) + d(2)
    fmt = rng.randrange(24)
    return [
        f"+1 {area} {exch} {d(4)}", f"+1 ({area}) {exch}-{d(4)}", f"({area}) {exch}-{d(4)}",
        f"{area}-{exch}-{d(4)}", f"{area}.{exch}.{d(4)}", f"1-800-{exch}-{d(4)}",
        f"+44 20 7946 0{d(3)}", f"+44 (0)20 7946 0{d(3)}", f"020 7946 0{d(3)}", f"0161 496 0{d(3)}",
        f"+44 7700 900{d(3)}", f"07700 900{d(3)}", f"+49 30 {d(8)}", f"+49 (0)89 {d(7)}",
        f"030 {d(8)}", f"0171 {d(7)}", f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}", f"06 {d(2)} {d(2)} {d(2)} {d(2)}",
        f"+31 6 {d(8)}", f"06-{d(8)}", f"+91 98{d(3)} {d(5)}", f"+61 2 {d(4)} {d(4)}", f"+81 3-{d(4)}-{d(4)}",
        f"+4915{d(9)}",
    ][fmt]


def gen_item(type_: str, rng: random.Random, emails: list[str]) -> str:
    if type_ == "email":
        return rng.choice(emails)
    if type_ == "ipv4":
        k = rng.randrange(7)
        if k == 6:  # first octet 1-9: public resolvers and random addresses
            return rng.choice(["8.8.8.8", "1.1.1.1", "9.9.9.9", "8.8.4.4",
                               f"{rng.randint(1, 9)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"])
        if k == 0:
            return f"192.0.2.{rng.randint(1, 254)}"
        if k == 1:
            return f"203.0.113.{rng.randint(1, 254)}"
        if k == 2:
            return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        if k == 3:
            return f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        if k == 4:
            return f"172.{rng.randint(16, 31)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        return f"{rng.randint(11, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if type_ == "ipv6":
        k = rng.randrange(5)
        if k == 0:
            return "::1"
        if k == 1:
            return f"::ffff:192.0.2.{rng.randint(1, 254)}"
        base = rng.choice([0x20010DB8 << 96, 0xFE80 << 112, (0x2A00 + rng.randrange(0x500)) << 112])
        addr = ipaddress.IPv6Address(base | (rng.getrandbits(64) if k != 2 else rng.getrandbits(16)))
        return addr.exploded if k == 3 else addr.compressed
    if type_ == "phone":
        return gen_phone(rng)
    if type_ == "payment_card":
        if rng.random() < 0.4:
            num = rng.choice(TEST_CARDS)
        else:
            prefix, length = rng.choice(CARD_BRANDS)
            num = luhn_complete(prefix, length, rng)
        fmt = rng.randrange(3)
        if len(num) == 15 and fmt != 2:
            return f"{num[:4]} {num[4:10]} {num[10:]}"
        return group4(num) if fmt == 0 else ("-".join(group4(num).split(" ")) if fmt == 1 else num)
    if type_ == "iban":
        if rng.random() < 0.3:
            iban = rng.choice(KNOWN_IBANS)
        else:
            cc = rng.choice(sorted(IBAN_BBAN))
            iban = iban_check(cc, make_bban(rng, IBAN_BBAN[cc]))
        assert iban_ok(iban)
        return group4(iban) if rng.random() < 0.6 else iban
    raise ValueError(type_)


POS_TEMPLATES = {
    "email": ["mail {}", "{}", "(reported by {})", "Thanks to {} for the patch", "contact: {}"],
    "ipv4": ["from {}", "server {}", "on {}:8080", "({})", "{}", "IP {}/24", "listen {}", "host {}."],
    "ipv6": ["from {}", "[{}]:443", "{}", "address {}", "({})", "host {}."],
    "phone": ["call {}", "tel. {}", "{}", "phone: {}", "(mobile {})", "fax {}", "at {}."],
    "payment_card": ["card {}", "{}", "paid with {}", "(cc {})", "number {}."],
    "iban": ["IBAN {}", "{}", "account {}", "to {} please", "IBAN: {}."],
}


def gen_negative(rng: random.Random, versions: list[str]) -> tuple[str, str]:
    """(kind, phrase with the negative as a whole); the whole phrase is marked."""
    d = lambda n: _digits(rng, n)  # noqa: E731
    kind = rng.choice(["version", "version", "version", "date", "time", "isbn", "hash", "uuid", "mac",
                       "luhn_invalid", "iban_invalid", "at_sign", "ssn_like", "number_range", "scope_operator",
                       "bug_number", "timestamp", "tz_offset", "price"])
    if kind == "version":
        v = rng.choice(versions) if versions and rng.random() < 0.5 else ".".join(
            str(x) for x in [rng.randint(1, 5), rng.randint(0, 20), rng.randint(0, 60), rng.randint(0, 30)]
            + ([rng.randint(0, 9)] if rng.random() < 0.2 else []))
        t = rng.choice(["New upstream version {}", "{}", "to {}", "linux-{}", "(= {}-1)", "v{}", "{}+dfsg",
                        "release {}", "kernel {}", "libfoo {}"])
        return kind, t.format(v)
    if kind == "date":
        y, m, dd = rng.randint(1995, 2025), rng.randint(1, 12), rng.randint(1, 28)
        return kind, rng.choice([f"{y}-{m:02d}-{dd:02d}", f"{dd:02d}.{m:02d}.{y}", f"{m:02d}/{dd:02d}/{y}",
                                 f"{y}-{m:02d}-{dd:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
                                 f"{dd:02d}/{m:02d}/{y} {rng.randint(10, 23)}"])
    if kind == "time":
        return kind, rng.choice([f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
                                 f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
                                 f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{d(3)}"])
    if kind == "isbn":
        return kind, rng.choice(["ISBN 978-3-16-148410-0", "978-0-596-52068-7", "ISBN-10 0-306-40615-2",
                                 "ISBN 978-1-4028-9462-6", "9780596520687"])
    if kind == "hash":
        return kind, rng.choice(["".join(rng.choice("0123456789abcdef") for _ in range(40)),
                                 "commit " + "".join(rng.choice("0123456789abcdef") for _ in range(12)),
                                 "md5sum " + "".join(rng.choice("0123456789abcdef") for _ in range(32)),
                                 d(16) + "".join(rng.choice("abcdef") for _ in range(4))])
    if kind == "uuid":
        h = "".join(rng.choice("0123456789abcdef") for _ in range(32))
        return kind, f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if kind == "mac":
        return kind, ":".join(f"{rng.randrange(256):02x}" for _ in range(6))
    if kind == "luhn_invalid":
        num = rng.choice(TEST_CARDS)
        bad = num[:-1] + str((int(num[-1]) + rng.randint(1, 9)) % 10)
        assert not luhn_ok(bad)
        return kind, rng.choice([group4(bad), bad, "-".join(group4(bad).split(" "))])
    if kind == "iban_invalid":
        iban = rng.choice(KNOWN_IBANS)
        bad = iban[:2] + f"{(int(iban[2:4]) + rng.randint(1, 50)) % 100:02d}" + iban[4:]
        if iban_ok(bad):
            bad = iban[:-1] + str((int(iban[-1]) + 1) % 10)
        assert not iban_ok(bad)
        return kind, group4(bad) if rng.random() < 0.6 else bad
    if kind == "at_sign":
        return kind, rng.choice(["icon@2x.png", "@VERSION@", "user@localhost", "lodash@4.17.21", "foo@GOT",
                                 "@PACKAGE_NAME@", "git@host", "pkg@1.2.3", "image@3x.jpg"])
    if kind == "ssn_like":
        return kind, f"{rng.randint(100, 899)}-{rng.randint(10, 99)}-{d(4)}"
    if kind == "number_range":
        a = rng.randint(1000, 9000)
        return kind, rng.choice([f"{a}-{a + rng.randint(1, 999)}", f"pages {rng.randint(10, 400)}-{rng.randint(401, 900)}",
                                 f"{rng.randint(1, 999)},{d(3)},{d(3)}", f"0x{rng.getrandbits(32):08x}",
                                 f"1.{d(3)}e-{rng.randint(2, 15)}", f"{d(3)} {d(3)} {d(3)}"])
    if kind == "scope_operator":
        return kind, rng.choice(["std::vector", "Foo::Bar", "Gtk::Window", "a::b", "DBI::db"])
    if kind == "bug_number":
        return kind, f"Closes: #{rng.randint(100000, 1100000)}"
    if kind == "timestamp":
        return kind, rng.choice([f"{rng.randint(2000, 2025)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}T{d(6)}Z",
                                 f"{rng.randint(2000, 2025)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{d(6)}",
                                 str(rng.randint(1_000_000_000, 1_800_000_000))])
    if kind == "tz_offset":
        return kind, rng.choice(["+0100", "-0500", "+0530", "UTC+02:00"])
    if kind == "price":
        return kind, rng.choice([f"${rng.randint(1, 99999):,}.{d(2)}", f"EUR {rng.randint(100, 9999999):,}",
                                 f"{rng.randint(1, 999)}.{d(2)} USD"])
    raise AssertionError(kind)


def insert_into(line: dict, rng: random.Random, phrase: str, mark_start: int, mark_end: int,
                label: list, into: str) -> bool:
    """Insert ``phrase`` at a word boundary of ``line`` (after a space), shifting the line's labels;
    ``label`` = [type or kind, ..., origin] gets offsets [mark_start, mark_end) within the phrase."""
    text = line["text"]
    occupied = [(s, e) for _, s, e, _ in line["spans"] + line["negs"]]
    boundaries = [i + 1 for i, ch in enumerate(text) if ch == " " and i + 1 < len(text) and text[i + 1] != " "]
    boundaries = [b for b in boundaries if not any(s < b < e for s, e in occupied)]
    boundaries.append(len(text))
    p = rng.choice(boundaries)
    ins = phrase + " " if p < len(text) else (" " if text and not text.endswith(" ") else "") + phrase
    off = 0 if p < len(text) else len(ins) - len(phrase)
    for lst in (line["spans"], line["negs"]):
        for item in lst:
            if item[1] >= p:
                item[1] += len(ins)
                item[2] += len(ins)
    line["text"] = text[:p] + ins + text[p:]
    line[into].append([label[0], p + off + mark_start, p + off + mark_end, "inserted"])
    return True


def _routable(value: str) -> bool:
    addr = ipaddress.ip_address(value)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_global and not addr.is_multicast and not addr.is_reserved


def add_insertions(record: dict, rng: random.Random, emails: list[str], versions: list[str], stats: Counter) -> None:
    body = [ln for ln in record["lines"] if ln["kind"] == "body" and ln["text"].strip()]
    if not body:
        return
    roll = rng.random()
    if roll < 0.66:
        for _ in range(rng.choice([1, 1, 2])):
            type_ = rng.choice(["ipv4", "ipv6", "phone", "phone", "payment_card", "iban", "email", "ipv4"])
            value = gen_item(type_, rng, [e for e in emails if e])
            template = rng.choice(POS_TEMPLATES[type_])
            phrase = template.format(value)
            s = template.index("{}")
            if type_ in ("ipv4", "ipv6") and not _routable(value):
                # loopback / private / documentation / link-local: not PII under the default
                # policy (issue 17), so a hard negative now
                insert_into(rng.choice(body), rng, phrase, s, s + len(value), ["non_routable_ip"], "negs")
                stats["negative:non_routable_ip"] += 1
                continue
            insert_into(rng.choice(body), rng, phrase, s, s + len(value), [type_], "spans")
            stats[f"inserted:{type_}"] += 1
    if rng.random() < 0.5:
        for _ in range(rng.choice([1, 2])):
            kind, phrase = gen_negative(rng, versions)
            insert_into(rng.choice(body), rng, phrase, 0, len(phrase), [kind], "negs")
            stats[f"negative:{kind}"] += 1


def finalize(record: dict) -> dict:
    parts, spans, negs, pos = [], [], [], 0
    for ln in record["lines"]:
        parts.append(ln["text"])
        for t, s, e, o in ln["spans"]:
            spans.append({"type": t, "start": pos + s, "end": pos + e, "origin": o})
        for k, s, e, o in ln["negs"]:
            negs.append({"kind": k, "start": pos + s, "end": pos + e, "origin": o})
        pos += len(ln["text"]) + 1
    text = "\n".join(parts)
    spans.sort(key=lambda x: (x["start"], x["end"]))
    negs.sort(key=lambda x: (x["start"], x["end"]))
    for a, b in zip(spans, spans[1:]):
        assert a["end"] <= b["start"], (record["id"], a, b)
    return {"id": record["id"], "source": record["source"], "package": record["package"], "text": text,
            "spans": spans, "negatives": negs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", default="corpus-pii-1")
    ap.add_argument("--changelog-entries", type=int, default=3, help="most recent entries per changelog")
    ap.add_argument("--copyright-paragraphs", type=int, default=2)
    ap.add_argument("--max-lines", type=int, default=40)
    args = ap.parse_args(argv)

    drops: Counter = Counter()
    versions: list[str] = []
    records = changelog_records(args.changelog_entries, args.max_lines, drops, versions)
    records += copyright_records(args.copyright_paragraphs, args.max_lines, drops)
    records = [r for r in records if r["lines"]]
    emails = sorted({
        ln["text"][s:e] for r in records for ln in r["lines"] for t, s, e, _ in ln["spans"] if ln["kind"] == "trailer"
    })
    versions = sorted(set(versions))
    stats: Counter = Counter()
    for r in records:
        rng = random.Random(f"{args.seed}:{r['id']}")
        add_insertions(r, rng, emails, versions, stats)
    final = [finalize(r) for r in records]

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "labelled.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for r in final:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    gold = Counter((s["type"], s["origin"]) for r in final for s in r["spans"])
    negs = Counter((n["kind"], n["origin"]) for r in final for n in r["negatives"])
    manifest = {
        "file": str(path.relative_to(args.out)),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "records": len(final),
        "records_by_source": dict(Counter(r["source"] for r in final)),
        "text_bytes": sum(len(r["text"].encode()) for r in final),
        "gold_by_type_origin": {f"{t}/{o}": c for (t, o), c in sorted(gold.items())},
        "negatives_by_kind_origin": {f"{k}/{o}": c for (k, o), c in sorted(negs.items())},
        "dropped_lines_by_reason": dict(sorted(drops.items())),
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "out"},
        "doc_root": DOC_ROOT,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: manifest[k] for k in ("records", "records_by_source", "text_bytes", "gold_by_type_origin",
                                                 "dropped_lines_by_reason", "sha256")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
