#!/usr/bin/env python3
"""Labelled PII set from real technical documentation (issue 17): the Debian doc packages
python3.11-doc, postgresql-doc-15, apache2-doc and debian-handbook (every locale), plus planted
real-format values for the types the docs do not hold (SSNs, secrets, national phone formats).

Text: every non-symlink ``*.html`` of the four packages under ``--doc-root`` (as unpacked by
``bench/fetch_debian_docs.sh`` or ``apt-get download`` + ``dpkg-deb -x``), extracted with the
project's own ``corpus_assets.domain.canonical.extraction.extract_html`` (resiliparse main content,
what a ``local_dir`` source yields), cut into blocks of whole paragraphs of at most ``--block``
characters.

Gold labels on the real text come from a labeller written separately from the detector under
test (from ``corpus_assets.domain.curate`` it imports only the policy's list of exempt IP ranges,
no rule) and follow the policy, not the detector's rules:

- email: ``local@domain.tld`` with an alphabetic TLD that is not a file extension; Message-IDs
  (``<20030112190404.GE29873@host>``) are negatives;
- ipv4 / ipv6: every address the standard library calls global (``is_global``, and for IPv6 not
  ``is_reserved``), unless it is a section number or a network block; negatives: section numbers
  (every dotted number that the package's own HTML puts in a heading, a table of contents or a
  cross-reference link), non-routable addresses (loopback, private, link-local, documentation,
  reserved, multicast), network blocks (``/16`` or wider), Python slices (``a[::2]``), versions
  (after version / zlib / gcc / kernel / release / section, glued as ``pkg-1.2.3.4`` /
  ``==1.2.3.4``, or ``1.0.0.127.in-addr.arpa``);
- phone: North American 3-3-4 numbers with separators (area and exchange 2-9) and numbers that
  libphonenumber validates in international format (``+``/``00``); ``REVIEWED`` lists the few
  other phone-shaped strings of the docs, decided by hand;
- secret: PEM private-key blocks with a body, detect-secrets-format tokens, and ``REVIEWED``;
- ssn: ``AAA-GG-SSSS`` within 40 characters of "SSN" / "social security".

Anything else is unlabelled text: a detection there counts as a false positive. Inserted items
(seeded per block id, so the file is byte-identical on a re-run) are appended as their own line
after a random line of a random third of the blocks, with a carrier (a log line, a config line,
a sentence): positives of every type (SSN, secrets, 00-prefixed / BR / UK / DE / FR / IN / US
phones, public IPv4 / IPv6 in log lines, cards, IBANs) and hard negatives (``bind(('127.0.0.1',
80))``, ``listen 127.0.0.1:8080;``, ``see section 24.2.2.4``, ``+2147483647``, ``password =
"hunter2"``, a private-key header without a key, ...).

  .venv/bin/python bench/pii/build_docs_set.py --doc-root bench/data/root/usr/share/doc
  -> bench/data/pii-docs/labelled.jsonl + manifest.json  (git-ignored: rebuilt, never committed)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html as htmllib
import ipaddress
import json
import random
import re
import string
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(HERE))

from corpus_assets.domain.canonical.extraction import extract_html  # noqa: E402
from corpus_assets.domain.curate.pii import DEFAULT_IP_EXEMPT_RANGES  # noqa: E402  (the policy's ranges only)
from build_labelled_set import CARD_BRANDS, IBAN_BBAN, KNOWN_IBANS, TEST_CARDS, group4, iban_check, luhn_complete, make_bban  # noqa: E402

PACKAGES = ("python3.11", "postgresql-doc-15", "apache2-doc", "debian-handbook")
DEFAULT_ROOT = PROJECT / "bench" / "data" / "root" / "usr" / "share" / "doc"
DEFAULT_OUT = PROJECT / "bench" / "data" / "pii-docs"

# phone-shaped or secret-shaped strings of the real docs that the format rules below cannot
# decide, decided by hand (they are public documentation examples): value -> (type or None)
REVIEWED: dict[str, str | None] = {
    "098-765-4321": "phone",  # a phone column in an example user table (sqlite3 / postgres docs)
    "FS7CUxsY3xkusv7EkbT9yae": "secret",  # the generated root password that virt-install prints (handbook)
}

FILE_EXT = frozenset("png jpg jpeg gif svg ico css js py sh md txt html htm xml json yaml yml conf cfg ini log "
                     "gz tar deb rpm pdf c h cpp o so exe dll pl rb php".split())
EMAIL_NET = re.compile(r"(?<![A-Za-z0-9._%+\-])([A-Za-z0-9._%+\-]+)@((?:[A-Za-z0-9\-]+\.)+([A-Za-z]{2,24}))(?![A-Za-z0-9\-])")
QUAD_NET = re.compile(r"(?<![0-9.])([0-9]{1,3}(?:\.[0-9]{1,3}){3})(?![0-9]|\.[0-9])")
V6_NET = re.compile(r"(?<![0-9A-Za-z_:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.[0-9]{1,3}){0,3})")
NANP_NET = re.compile(r"(?<![0-9A-Za-z_.+\-])(?<![0-9] )(\(?[2-9][0-9]{2}\)?)([ .\-])([2-9][0-9]{2})\2([0-9]{4})(?![0-9A-Za-z_]|[.\-][0-9])")
INTL_NET = re.compile(r"(?<![0-9A-Za-z_.+\-])((?:\+|00)[1-9][0-9 ().\-]{6,20}[0-9])(?![0-9])")
SHAPED_NET = re.compile(r"(?<![0-9A-Za-z_.+\-])(0[0-9]{2}-[0-9]{3}-[0-9]{4})(?![0-9])")
SSN_NET = re.compile(r"(?<![0-9\-])([0-8][0-9]{2}-[0-9]{2}-[0-9]{4})(?![0-9\-])")
PEM = re.compile(r"-----BEGIN ([A-Z ]*PRIVATE KEY)-----\n(?:[A-Za-z0-9+/=]{16,}\n){2,}-----END \1-----")
SECTION_IN_HTML = re.compile(r"<(h[1-6]|a|dt|title|caption)\b[^>]*>(.*?)</\1>", re.S | re.I)
DOTTED = re.compile(r"(?<![0-9.])([0-9]+(?:\.[0-9]+){3,})(?![0-9])")
TAG = re.compile(r"<[^>]+>")


# ----------------------------------------------------------------------------------------------
# pages and blocks


def pages(root: Path) -> tuple[list[dict], dict[str, set[str]]]:
    out, sections = [], defaultdict(set)
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.html")):
            if path.is_symlink():
                continue
            rel = path.relative_to(root)
            data = path.read_bytes()
            group = f"{pkg}/{rel.parts[2] if pkg == 'debian-handbook' and len(rel.parts) > 3 else ''}"
            markup = data.decode("utf-8", "replace")
            for m in SECTION_IN_HTML.finditer(markup):
                inner = htmllib.unescape(TAG.sub("", m.group(2)))
                sections[group].update(DOTTED.findall(inner))
            try:
                _title, text = extract_html(data)
            except Exception:
                continue
            out.append({"package": pkg, "group": group, "path": str(rel), "text": text})
    return out, sections


def blocks(page: dict, limit: int) -> list[str]:
    out, cur = [], ""
    for para in page["text"].split("\n\n"):
        if cur and len(cur) + 2 + len(para) > limit:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{para}" if cur else para
        while len(cur) > 2 * limit:  # a giant paragraph: cut at a line
            cut = cur.rfind("\n", 0, limit)
            cut = cut if cut > 0 else limit
            out.append(cur[:cut])
            cur = cur[cut:].lstrip("\n")
    if cur.strip():
        out.append(cur)
    return out


# ----------------------------------------------------------------------------------------------
# the labeller (real text)


# the policy (not a rule of the detector): the configured default exempt ranges
EXEMPT = [ipaddress.ip_network(r) for r in DEFAULT_IP_EXEMPT_RANGES]
# a dotted quad right after these words, or glued like this, is a version or a section number
VERSION_BEFORE = re.compile(r"(?i)(?:\bversions?|\bzlib|\bgcc|\bthunderbird|\bfirefox|\bsections?|\bnovas|\bltree"
                            r"|\bkernel|\brelease)[\s(/\-=\[']*$|==$|[A-Za-z]-$|\w/$")


def _global(addr) -> bool:
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if not addr.is_global or addr.is_multicast or addr.is_reserved:
        return False
    return not any(addr.version == n.version and addr in n for n in EXEMPT)


def _block_after(text: str, e: int, addr) -> bool:
    m = re.match(r"/([0-9]{1,3})(?![0-9])", text[e : e + 5])
    if not m:
        return False
    p = int(m.group(1))
    host_bits = addr.max_prefixlen - p
    return p <= (16 if addr.version == 4 else 32) and host_bits >= 0 and int(addr) & ((1 << host_bits) - 1) == 0


def label(text: str, sections: set[str]) -> tuple[list[dict], list[dict], Counter]:
    spans, negs, unsure = [], [], Counter()

    def pos(t, s, e):
        spans.append({"type": t, "start": s, "end": e, "origin": "real"})

    def neg(k, s, e):
        negs.append({"kind": k, "start": s, "end": e, "origin": "real"})

    for m in EMAIL_NET.finditer(text):
        local, tld = m.group(1), m.group(3).lower()
        if local.startswith(".") or tld in FILE_EXT:
            neg("at_sign", m.start(), m.end())
        elif sum(c.isdigit() for c in local) >= 10:
            neg("message_id", m.start(), m.end())
        else:
            pos("email", m.start(), m.end())
    for m in QUAD_NET.finditer(text):
        s, e = m.span(1)
        q = m.group(1)
        parts = q.split(".")
        if any(int(p) > 255 or (len(p) > 1 and p[0] == "0") for p in parts):
            continue
        if (s > 0 and (text[s - 1].isalnum() or text[s - 1] == "_")) or (e < len(text) and (text[e].isalnum() or text[e] == "_")):
            continue
        if q in sections:
            neg("section_number", s, e)
            continue
        if VERSION_BEFORE.search(text[max(0, s - 24) : s]) or text.startswith((".in-addr.arpa", ".tar"), e):
            neg("version_number", s, e)
            continue
        addr = ipaddress.IPv4Address(q)
        if not _global(addr):
            neg("non_routable_ip", s, e)
        elif _block_after(text, e, addr):
            neg("network_block", s, e)
        else:
            pos("ipv4", s, e)
    for m in V6_NET.finditer(text):
        s, e = m.span(1)
        cand = m.group(1)
        if cand.endswith(":") and not cand.endswith("::"):
            cand, e = cand[:-1], e - 1
        if cand.count(":") < 2 or not any(c.isdigit() for c in cand) or (e < len(text) and (text[e].isalnum() or text[e] == "_")):
            continue
        try:
            addr = ipaddress.IPv6Address(cand)
        except ValueError:
            continue
        if "::" not in cand and cand.count(":") < 7 and "." not in cand:
            continue
        if s > 0 and text[s - 1] == "[" and re.fullmatch(r"::[0-9]+", cand) and text[e : e + 1] == "]":
            neg("python_slice", s, e)
        elif not _global(addr):
            neg("non_routable_ip", s, e)
        elif _block_after(text, e, addr):
            neg("network_block", s, e)
        else:
            pos("ipv6", s, e)
    for m in NANP_NET.finditer(text):
        pos("phone", m.start(), m.end())
    import phonenumbers

    for m in INTL_NET.finditer(text):
        raw = m.group(1)
        num = "+" + raw[2:] if raw.startswith("00") else raw
        try:
            ok = phonenumbers.is_valid_number(phonenumbers.parse(num, None))
        except phonenumbers.NumberParseException:
            ok = False
        (pos("phone", *m.span(1)) if ok else neg("invalid_intl_number", *m.span(1)))
    for m in SHAPED_NET.finditer(text):
        t = REVIEWED.get(m.group(1), "unsure")
        if t == "phone":
            pos("phone", *m.span(1))
        elif t == "unsure":
            unsure[("phone", m.group(1))] += 1
    low = text.lower()
    for m in SSN_NET.finditer(text):
        near = low[max(0, m.start() - 40) : m.start()]
        if "ssn" in near or "social security" in near:
            pos("ssn", *m.span(1))
    for m in PEM.finditer(text):
        pos("secret", m.start(), m.end())
    for value, t in REVIEWED.items():
        if t == "secret":
            for m in re.finditer(re.escape(value), text):
                pos("secret", m.start(), m.end())
    # overlapping gold spans: keep the earlier / longer one (an e-mail holding a dotted quad ...)
    spans.sort(key=lambda g: (g["start"], -g["end"]))
    kept, last = [], -1
    for g in spans:
        if g["start"] >= last:
            kept.append(g)
            last = g["end"]
    return kept, negs, unsure


# ----------------------------------------------------------------------------------------------
# planted values


def _d(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _alnum(rng: random.Random, n: int, pool: str = string.ascii_letters + string.digits) -> str:
    return "".join(rng.choice(pool) for _ in range(n))


def _b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")


def gen_ssn(rng):
    while True:
        area = rng.randint(1, 899)
        if area != 666:
            break
    g, s = rng.randint(1, 99), rng.randint(1, 9999)
    return f"{area:03d}-{g:02d}-{s:04d}" if rng.random() < 0.85 else f"{area:03d} {g:02d} {s:04d}"


def gen_secret(rng) -> tuple[str, str, str]:
    """(carrier with {} for the value, value, kind)."""
    k = rng.randrange(10)
    if k == 0:
        return rng.choice(["aws_access_key_id = {}", "export AWS_ACCESS_KEY_ID={}", '"AccessKeyId": "{}",']), \
            "AKIA" + _alnum(rng, 16, string.ascii_uppercase + "234567"), "aws_access_key"
    if k == 1:
        return rng.choice(["export GITHUB_TOKEN={}", "git clone https://{}@github.com/falcot/site.git", "token: {}"]), \
            rng.choice(["ghp_", "gho_", "ghs_"]) + _alnum(rng, 36), "github_token"
    if k == 2:
        return rng.choice(["GITLAB_TOKEN={}", "curl --header \"PRIVATE-TOKEN: {}\" https://gitlab.example.com/api/v4/projects"]), \
            "glpat-" + _alnum(rng, 20, string.ascii_letters + string.digits + "_-"), "gitlab_token"
    if k == 3:
        return rng.choice(["SLACK_BOT_TOKEN={}", "slack_token = '{}'"]), \
            f"xoxb-{_d(rng, 12)}-{_d(rng, 13)}-{_alnum(rng, 24)}", "slack_token"
    if k == 4:
        head = _b64url({"alg": rng.choice(["HS256", "RS256"]), "typ": "JWT"})
        body = _b64url({"sub": _d(rng, 10), "name": "Roland Mas", "iat": int(_d(rng, 9)) + 1_500_000_000})
        sig = _alnum(rng, 43, string.ascii_letters + string.digits + "_-")
        return rng.choice(["Authorization: Bearer {}", "jwt={}", "the session cookie was {}"]), f"{head}.{body}.{sig}", "jwt"
    if k == 5:
        b64 = string.ascii_letters + string.digits + "+/"
        kind = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY"])
        body = "\n".join(_alnum(rng, 64, b64) for _ in range(rng.randint(3, 8))) + "\n" + _alnum(rng, rng.randint(8, 60), b64) + "=="
        return "{}", f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----", "private_key"
    pool = string.ascii_letters + string.digits + "!#%^*-_"
    if k == 6:
        return rng.choice(['DB_PASSWORD="{}"', "password = '{}'", "    password: {}", "ldap_bind_pw={}"]), \
            _alnum(rng, rng.randint(12, 20), pool) + _d(rng, 2), "assignment"
    if k == 7:
        return rng.choice(["api_key = {}", '"api_key": "{}",', "API_KEY={}"]), \
            "".join(rng.choice("0123456789abcdef") for _ in range(32)), "assignment"
    if k == 8:
        return rng.choice(['client_secret: "{}"', "secret_key = '{}'"]), _alnum(rng, 32) + _d(rng, 2), "assignment"
    return "stripe.api_key = '{}'", "sk_live_" + _alnum(rng, 24), "stripe_key"


def gen_phone(rng) -> str:
    d = lambda n: _d(rng, n)  # noqa: E731
    return rng.choice([
        f"0044 20 {d(4)} {d(4)}", f"0044 7700 {d(6)}", f"+44 20 7946 {d(4)}", f"020 7946 {d(4)}", f"07700 900{d(3)}",
        f"+55 11 9{d(4)}-{d(4)}", f"+55 21 {d(4)}-{d(4)}", f"(11) 9{d(4)}-{d(4)}", f"(21) 3{d(3)}-{d(4)}", f"0055 11 9{d(4)} {d(4)}",
        f"+49 30 {d(8)}", f"030 {d(8)}", f"0171 {d(7)}", f"+49 (0)89 {d(7)}", f"0049 30 {d(4)} {d(4)}", f"030/{d(7)}",
        f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}", f"01 {d(2)} {d(2)} {d(2)} {d(2)}", f"06 {d(2)} {d(2)} {d(2)} {d(2)}", f"0033 6 {d(2)} {d(2)} {d(2)} {d(2)}",
        f"+91 98{d(3)} {d(5)}", f"+91-11-{d(4)}-{d(4)}", f"011 {d(4)} {d(4)}", f"098{d(3)} {d(5)}",
        f"+1 415 555 {d(4)}", f"(415) 555-{d(4)}", f"415-555-{d(4)}", f"001 212 555 {d(4)}",
    ])


def gen_ipv4(rng) -> str:
    while True:
        a = ipaddress.IPv4Address(rng.getrandbits(32))
        if _global(a):
            return str(a)


def gen_ipv6(rng) -> str:
    base = rng.choice([0x2A00, 0x2A01, 0x2A02, 0x2600, 0x2604, 0x2800, 0x2C0F])
    a = ipaddress.IPv6Address((base << 112) | rng.getrandbits(80))
    return a.compressed if rng.random() < 0.8 else a.exploded


def gen_card(rng) -> str:
    num = rng.choice(TEST_CARDS) if rng.random() < 0.4 else luhn_complete(*rng.choice(CARD_BRANDS), rng)
    if len(num) == 15:
        return f"{num[:4]} {num[4:10]} {num[10:]}"
    return rng.choice([group4(num), num, "-".join(group4(num).split(" "))])


def gen_iban(rng) -> str:
    iban = rng.choice(KNOWN_IBANS) if rng.random() < 0.3 else (lambda cc: iban_check(cc, make_bban(rng, IBAN_BBAN[cc])))(rng.choice(sorted(IBAN_BBAN)))
    return group4(iban) if rng.random() < 0.6 else iban


CARRIERS = {
    "ssn": ["Employee SSN: {}", "social security number {} on file", "{} (SSN)", "SSN {}"],
    "phone": ["Call us on {} from abroad.", "Tel.: {}", "WhatsApp: {}", "Telefon: {}", "Téléphone : {}",
              "Phone: {}", "Fax {}", "contact the office at {}"],
    "ipv4": ['{} - - [27/Nov/2004:13:33:34 +0100] "GET / HTTP/1.1" 200 4210',
             "[Sat Nov 27 13:33:34 2004] [error] [client {}] File does not exist: /var/www/favicon.ico",
             "sshd[2716]: Failed password for root from {} port 51226 ssh2",
             "Connection from {} closed.", "nameserver {}", "Require not ip {}", "ping {}"],
    "ipv6": ["Accepted publickey for rhertzog from {} port 40322 ssh2", "[client {}] AH01630: client denied",
             "server {} port 443", "AAAA record points at {}."],
    "payment_card": ["paid with card {}", "Card number: {}"],
    "iban": ["IBAN: {}", "please transfer to {} before Friday"],
}
NEGATIVES = [
    ("loopback_code", "sock.bind(('127.0.0.1', {port}))"),
    ("loopback_code", "server {{ listen 127.0.0.1:{port}; server_name localhost; }}"),
    ("private_ip", "Require ip 192.168.{a}.0/24"),
    ("documentation_ip", "Listen 192.0.2.{a}:80"),
    ("section_ref", "see section {s} for the details"),
    ("section_heading", "{s}. Nondeterministic Collations"),
    ("int_max", "integer\t\t4 bytes\t\t-2147483648 to +2147483647"),
    ("int_max", "#define INT_MAX +2147483647"),
    ("weak_password", 'password = "hunter2"'),
    ("env_password", 'api_key = os.environ["API_KEY"]'),
    ("key_header", "The key file starts with -----BEGIN RSA PRIVATE KEY----- and must stay private."),
    ("ssn_shape", "part number {ssn} is out of stock"),
    ("hex_dump", "0000: 02 23 44 30 13 40 ac 34 df 3d bf 9a"),
    ("version", "New in version 3.11.{a}.1"),
]


def plant(text: str, rng: random.Random, spans: list[dict], negs: list[dict], stats: Counter) -> str:
    lines = text.split("\n")
    n_items = rng.choice([1, 1, 2])
    for _ in range(n_items):
        if rng.random() < 0.75:
            t = rng.choice(["ssn", "secret", "secret", "phone", "phone", "phone", "ipv4", "ipv6", "payment_card", "iban"])
            if t == "secret":
                carrier, value, kind = gen_secret(rng)
            else:
                value = {"ssn": gen_ssn, "phone": gen_phone, "ipv4": gen_ipv4, "ipv6": gen_ipv6,
                         "payment_card": gen_card, "iban": gen_iban}[t](rng)
                carrier, kind = rng.choice(CARRIERS[t]), t
            line = carrier.replace("{}", value, 1)
            off = carrier.index("{}")
            item = ("span", t, off, off + len(value), kind)
        else:
            kind, tmpl = rng.choice(NEGATIVES)
            line = tmpl.format(port=rng.choice([80, 443, 8080, 5432]), a=rng.randint(1, 250),
                               s=f"{rng.randint(1, 60)}.{rng.randint(1, 9)}.{rng.randint(1, 9)}.{rng.randint(1, 9)}",
                               ssn=f"{rng.randint(100, 899)}-{rng.randint(10, 99)}-{_d(rng, 4)}")
            item = ("neg", kind, 0, len(line), kind)
        at = rng.randrange(len(lines) + 1)
        lines.insert(at, line)
        start = sum(len(ln) + 1 for ln in lines[:at])
        # shift every label at or after the inserted line
        for lst in (spans, negs):
            for g in lst:
                if g["start"] >= start:
                    g["start"] += len(line) + 1
                    g["end"] += len(line) + 1
        if item[0] == "span":
            spans.append({"type": item[1], "start": start + item[2], "end": start + item[3], "origin": "inserted",
                          "kind": item[4]})
            stats[f"inserted:{item[1]}" + (f".{item[4]}" if item[1] == "secret" else "")] += 1
        else:
            negs.append({"kind": item[1], "start": start, "end": start + len(line), "origin": "inserted"})
            stats[f"negative:{item[1]}"] += 1
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--doc-root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", default="corpus-pii-docs-1")
    ap.add_argument("--block", type=int, default=1500, help="block size in characters (whole paragraphs)")
    ap.add_argument("--clean-share", type=int, default=10, help="keep 1 in N blocks without any candidate")
    args = ap.parse_args(argv)
    missing = [p for p in PACKAGES if not (args.doc_root / p).is_dir()]
    if missing:
        print(f"missing under {args.doc_root}: {missing} (bench/fetch_debian_docs.sh; apt-get download "
              "apache2-doc postgresql-doc-15 && dpkg-deb -x)", file=sys.stderr)
        return 2
    all_pages, sections = pages(args.doc_root)
    records, stats, unsure = [], Counter(), Counter()
    total_blocks = 0
    for page in all_pages:
        for i, text in enumerate(blocks(page, args.block)):
            total_blocks += 1
            rid = f"{page['path']}#{i}"
            spans, negs, uns = label(text, sections[page["group"]])
            unsure.update(uns)
            h = int(hashlib.sha256(f"{args.seed}:{rid}".encode()).hexdigest()[:8], 16)
            candidate = bool(spans or negs) or re.search(r"[0-9]{3}|@|:[0-9A-Fa-f]*:|PRIVATE KEY|password|secret|token", text, re.I)
            if not candidate and h % args.clean_share:
                continue
            rng = random.Random(f"{args.seed}:{rid}")
            if rng.random() < 1 / 3:
                text = plant(text, rng, spans, negs, stats)
            spans.sort(key=lambda g: (g["start"], g["end"]))
            negs.sort(key=lambda g: (g["start"], g["end"]))
            for a, b in zip(spans, spans[1:]):
                assert a["end"] <= b["start"], (rid, a, b)
            records.append({"id": rid, "source": page["package"], "package": page["package"], "text": text,
                            "spans": spans, "negatives": negs})
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "labelled.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    gold = Counter(f"{s['type']}/{s['origin']}" for r in records for s in r["spans"])
    negc = Counter(f"{n['kind']}/{n['origin']}" for r in records for n in r["negatives"])
    manifest = {
        "file": "labelled.jsonl", "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "pages": len(all_pages), "blocks": total_blocks, "records": len(records),
        "records_by_package": dict(Counter(r["package"] for r in records)),
        "text_bytes": sum(len(r["text"].encode()) for r in records),
        "gold_by_type_origin": dict(sorted(gold.items())), "negatives_by_kind_origin": dict(sorted(negc.items())),
        "inserted": dict(sorted(stats.items())),
        "unsure_unlabelled": {f"{t}:{v}": c for (t, v), c in sorted(unsure.items())},
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"},
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    print(json.dumps({k: manifest[k] for k in ("pages", "blocks", "records", "text_bytes", "gold_by_type_origin",
                                                 "negatives_by_kind_origin", "unsure_unlabelled", "sha256")},
                     indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
