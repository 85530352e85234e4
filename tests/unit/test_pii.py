"""PII detection and redaction (issue 3): corpus_assets/domain/curate/pii.py."""

from __future__ import annotations

import dataclasses
import random

import pytest
from pydantic import ValidationError

from corpus_assets.domain.curate.pii import (
    PII_DETECTOR_VERSION,
    PII_TYPES,
    PLACEHOLDERS,
    RULE_TYPES,
    PiiConfig,
    PiiSpan,
    audit_rows,
    counts_by_type,
    find_pii,
    pii_policy_version,
    quarantine_hits,
    redact,
    redact_fields,
)

CFG = PiiConfig()
# the same rules with no exempt IP range: these tests are about address shapes, and use the
# documentation / private ranges that the default configuration (rightly) leaves alone
SHAPES = PiiConfig(ip_exempt_ranges=[])


def found(text: str, config: PiiConfig = CFG) -> list[tuple[str, str]]:
    return [(s.type, text[s.start : s.end]) for s in find_pii(text, config)]


# ---------------------------------------------------------------------------------------------
# each type in realistic context, with exact spans


@pytest.mark.parametrize(
    "text, expected",
    [
        # e-mail: Debian trailer, Copyright line, bare, subdomains, plus-addressing
        (" -- Matthias Klose <doko@debian.org>  Mon, 02 Jan 2023 13:06:21 +0100", [("email", "doko@debian.org")]),
        ("Copyright: 2000-2003 Roland Bauerschmidt <rb@debian.org>", [("email", "rb@debian.org")]),
        ("Upstream-Contact: chet@po.cwru.edu", [("email", "chet@po.cwru.edu")]),
        ("Thanks to jane.doe+bugs@mail.example.co.uk for the patch.", [("email", "jane.doe+bugs@mail.example.co.uk")]),
        ("mailto:sebastian@breakpoint.cc", [("email", "sebastian@breakpoint.cc")]),
        # IPv4, with port / prefix / range / sentence end
        ("Connect to the server at 192.168.1.10:8080 now.", [("ipv4", "192.168.1.10")]),
        ("Blocked 203.0.113.7/24 and 10.0.0.1-10.0.0.255.", [("ipv4", "203.0.113.7"), ("ipv4", "10.0.0.1"), ("ipv4", "10.0.0.255")]),
        ("The resolver is at IP 8.8.8.8.", [("ipv4", "8.8.8.8")]),
        # IPv6: compressed, full, bracketed with port, zone id, IPv4-embedded, loopback
        ("listen [2001:db8::42]:443 and fe80::1ff:fe23:4567:890a%eth0",
         [("ipv6", "2001:db8::42"), ("ipv6", "fe80::1ff:fe23:4567:890a")]),
        ("full 2001:0db8:85a3:0000:0000:8a2e:0370:7334, mapped ::ffff:192.0.2.128, loopback ::1.",
         [("ipv6", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"), ("ipv6", "::ffff:192.0.2.128"), ("ipv6", "::1")]),
        # phones: international, North American, European national formats, bare after a phone word
        ("Call +1 (415) 555-0132 or +44 (0)20 7946 0958 today.", [("phone", "+1 (415) 555-0132"), ("phone", "+44 (0)20 7946 0958")]),
        ("Office: (415) 555-0132, desk 415-555-0133, fax 415.555.0134", [("phone", "(415) 555-0132"), ("phone", "415-555-0133"), ("phone", "415.555.0134")]),
        ("London 020 7946 0958; Berlin 030 12345678; Paris 01 23 45 67 89; Utrecht 06-12345678",
         [("phone", "020 7946 0958"), ("phone", "030 12345678"), ("phone", "01 23 45 67 89"), ("phone", "06-12345678")]),
        ("Mobil +4915123456789, tel: 4155550132", [("phone", "+4915123456789"), ("phone", "4155550132")]),
        # payment cards: spaced, dashed, bare, Amex layout
        ("paid with 4111 1111 1111 1111 and 5555-5555-5555-4444", [("payment_card", "4111 1111 1111 1111"), ("payment_card", "5555-5555-5555-4444")]),
        ("cards 4012888888881881, amex 3782 822463 10005.", [("payment_card", "4012888888881881"), ("payment_card", "3782 822463 10005")]),
        # IBANs: printed groups and compact; the following word is not taken
        ("Pay to GB82 WEST 1234 5698 7654 32 EUR by Friday", [("iban", "GB82 WEST 1234 5698 7654 32")]),
        ("IBAN: DE89370400440532013000, or NL91 ABNA 0417 1643 00.", [("iban", "DE89370400440532013000"), ("iban", "NL91 ABNA 0417 1643 00")]),
        ("Norway NO9386011117947", [("iban", "NO9386011117947")]),
    ],
)
def test_detects_each_type_in_context(text, expected):
    assert found(text, SHAPES) == expected


def test_spans_are_offsets_into_the_original_text():
    text = "ab 10.1.2.3 cd <x@example.org> ef +33 1 23 45 67 89"
    spans = find_pii(text, SHAPES)
    assert [(s.type, s.start, s.end) for s in spans] == [("ipv4", 3, 11), ("email", 16, 29), ("phone", 34, 51)]
    assert all(isinstance(s, PiiSpan) for s in spans)


def test_redact_substitutes_typed_placeholders_and_keeps_surrounding_text():
    text = (
        "  * Reported by Jane <jane@example.org> from 192.0.2.44 (call +1 415 555 0132),\n"
        "    card 4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32, host 2001:db8::1."
    )
    red, spans = redact(text, SHAPES)
    assert red == (
        "  * Reported by Jane <<EMAIL>> from <IPV4> (call <PHONE>),\n"
        "    card <PAYMENT_CARD>, IBAN <IBAN>, host <IPV6>."
    )
    assert [s.type for s in spans] == ["email", "ipv4", "phone", "payment_card", "iban", "ipv6"]
    assert counts_by_type(spans) == {t: int(t in RULE_TYPES[:6]) for t in PII_TYPES}
    # the spans refer to the original text
    assert text[spans[0].start : spans[0].end] == "jane@example.org"
    assert set(PLACEHOLDERS) == set(PII_TYPES)


def test_text_without_pii_is_returned_unchanged():
    text = "No personal data here: version 2.6.32.1, released 2023-01-15 at 12:30:45."
    assert redact(text, CFG) == (text, [])
    assert redact("", CFG) == ("", [])


# ---------------------------------------------------------------------------------------------
# validation: checksums, versions, dates, times


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # Luhn-invalid
        "card 4111111111111112",
        "card 5555-5555-5555-4445",
        "number 1234 5678 9012 3456",  # Luhn-invalid, no IIN
        "id 9111111111111111",  # Luhn-valid? no IIN for 9
        "IBAN GB83 WEST 1234 5698 7654 32",  # mod-97-invalid (check digits)
        "IBAN DE89 3704 0044 0532 0130 01",  # mod-97-invalid (last digit)
        "IBAN XX82 WEST 1234 5698 7654 32",  # unknown country
        "IBAN GB82 WEST 1234 5698 7654",  # too short for GB
    ],
)
def test_checksum_invalid_numbers_are_not_matched(text):
    assert found(text) == []


def test_luhn_valid_number_without_card_prefix_is_not_a_card():
    # 13-19 digits, Luhn-valid, but 9 is no card scheme's IIN
    digits = "9" + "0" * 14
    check = next(str(d) for d in range(10) if _luhn(digits + str(d)))
    assert _luhn(digits + check)
    assert found(f"ref {digits}{check}") == []


def _luhn(s: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(s)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


@pytest.mark.parametrize(
    "text",
    [
        "New upstream version 2.6.32.1.",
        "Build linux-2.6.32.1 and libfoo (1.2.3.4-1) with v1.2.3.4",
        "Patched 2.6.32.1+dfsg and 1.2.3.4~rc1",
        "Versions 1.2.3.4.5 and 10.20.30.40.50 differ",
        "Section 1.2.3.4 of the manual",
        "bump to 0.9.8.7",
        "octets 256.1.1.1 and 1.2.3.999 and 01.02.03.04",
    ],
)
def test_version_strings_are_not_ip_addresses(text):
    assert [t for t, _ in found(text)] == []


@pytest.mark.parametrize(
    "text",
    [
        "Released 2023-01-15 12:30:45 +0100",
        "Mon, 02 Jan 2023 13:06:21 +0100",
        "On 15.01.2023 at 12:30, and 01/15/2023 10:11:12",
        "Copyright 1999-2004, 2006-2010 Free Software Foundation",
        "51 Franklin Street, Fifth Floor, Boston, MA 02110-1301, USA",
        "ISBN 978-3-16-148410-0 and ISBN-10 0-306-40615-2",
        "Closes: #1024598, #1012345",
        "CVE-2024-28085 fixed; part 123-45-6789",  # an SSN shape without an SSN word nearby
        "timestamp 20230115123045 and epoch 1700000000",
        "MAC 00:1a:2b:3c:4d:5e, time 10:11:12, C++ std::vector and Foo::Bar",
        "price $1,234,567.89 and range 1000-2000",
        "icon@2x.png @PACKAGE_VERSION@ user@localhost lodash@4.17.21 foo@GOT",
    ],
)
def test_dates_times_and_other_numbers_are_not_pii(text):
    assert found(text) == []


# ---------------------------------------------------------------------------------------------
# overlaps


def test_overlap_resolution_is_deterministic():
    # ::ffff:192.0.2.128 contains an IPv4 address: the earlier-starting IPv6 span wins
    text = "mapped ::ffff:192.0.2.128 here"
    assert found(text, SHAPES) == [("ipv6", "::ffff:192.0.2.128")]
    # the same input gives the same spans every time, whatever the order of configured types
    shuffled = list(RULE_TYPES)
    random.Random(3).shuffle(shuffled)
    other = PiiConfig(types=shuffled, ip_exempt_ranges=[])
    sample = "x 4111 1111 1111 1111 y +44 20 7946 0958 z ::ffff:10.0.0.1 GB82 WEST 1234 5698 7654 32"
    assert find_pii(sample, other) == find_pii(sample, SHAPES) == find_pii(sample, SHAPES)
    spans = find_pii(sample, SHAPES)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_overlap_rule_earlier_start_then_longer_then_type_priority():
    from corpus_assets.domain.curate import pii

    # feed the resolver crafted candidates through a stub detector set
    text = "0123456789012345678901234567890"
    cands = {
        "phone": [(2, 10), (20, 25)],
        "ipv4": [(2, 12)],  # same start, longer: wins over phone (2, 10)
        "payment_card": [(11, 15), (20, 25)],  # (11, 15) overlaps the winner; (20, 25) ties with phone
        "iban": [],
    }
    orig = (pii._find_phones, pii._find_ipv4, pii._find_cards, pii._find_ibans)
    try:
        pii._find_phones = lambda t, c, ch: cands["phone"]
        pii._find_ipv4 = lambda t, c, ch: cands["ipv4"]
        pii._find_cards = lambda t, c, ch: cands["payment_card"]
        pii._find_ibans = lambda t, c: cands["iban"]
        spans = pii.find_pii(text + ".", CFG)
    finally:
        pii._find_phones, pii._find_ipv4, pii._find_cards, pii._find_ibans = orig
    assert [(s.type, s.start, s.end) for s in spans] == [("ipv4", 2, 12), ("payment_card", 20, 25)]


# ---------------------------------------------------------------------------------------------
# nothing sensitive in spans, reprs or audit rows


def test_spans_hold_offsets_only_and_repr_has_no_value():
    text = "Reach jane@example.org, 4111 1111 1111 1111 or +44 20 7946 0958 from 192.0.2.44"
    values = ["jane@example.org", "4111 1111 1111 1111", "4111", "+44 20 7946 0958", "192.0.2.44", "jane"]
    red, spans = redact(text, SHAPES)
    assert len(spans) == 4
    for sp in spans:
        assert [f.name for f in dataclasses.fields(sp)] == ["type", "start", "end", "kind"]
        assert sp.kind == ""
        assert all(isinstance(getattr(sp, f), int) for f in ("start", "end"))
        for v in values:
            assert v not in repr(sp) and v not in str(sp)
    for v in values:
        assert v not in red
    with pytest.raises(dataclasses.FrozenInstanceError):
        spans[0].start = 0  # type: ignore[misc]
    rows = audit_rows("rec-1", [("text", s) for s in spans], CFG)
    assert [r["type"] for r in rows] == ["email", "payment_card", "phone", "ipv4"]
    assert set(rows[0]) == {"record_id", "field", "type", "start", "end", "detector_version", "policy_version"}
    assert rows[0]["detector_version"] == PII_DETECTOR_VERSION
    assert rows[0]["policy_version"] == pii_policy_version(CFG)
    flat = repr(rows)
    for v in values:
        assert v not in flat


def test_pii_span_rejects_invalid_values():
    with pytest.raises(ValueError):
        PiiSpan("name", 0, 1)
    with pytest.raises(ValueError):
        PiiSpan("email", 5, 5)


# ---------------------------------------------------------------------------------------------
# typed payloads, quarantine, configuration, policy version


def test_redact_fields_for_typed_payloads():
    fields = {
        "messages[0].content": "Mail me at a@example.org",
        "messages[1].content": "Sure, call +1 415 555 0132 or 4111 1111 1111 1111.",
        "title": "nothing here",
    }
    out, found_ = redact_fields(fields, CFG)
    assert list(out) == list(fields)
    assert out == {
        "messages[0].content": "Mail me at <EMAIL>",
        "messages[1].content": "Sure, call <PHONE> or <PAYMENT_CARD>.",
        "title": "nothing here",
    }
    assert [(p, s.type) for p, s in found_] == [
        ("messages[0].content", "email"), ("messages[1].content", "phone"), ("messages[1].content", "payment_card"),
    ]
    p, s = found_[1]
    assert fields[p][s.start : s.end] == "+1 415 555 0132"
    assert counts_by_type(found_)["payment_card"] == 1


def test_quarantine_types():
    cfg = PiiConfig(quarantine_types=["payment_card"])
    _, spans = redact("card 4111 1111 1111 1111 and a@example.org", cfg)
    assert quarantine_hits(spans, cfg) == ["payment_card"]
    _, spans = redact("just a@example.org", cfg)
    assert quarantine_hits(spans, cfg) == []


def test_types_and_enabled_switches():
    text = "a@example.org 81.2.69.160 +44 20 7946 0958"
    assert [t for t, _ in found(text, PiiConfig(types=["ipv4"]))] == ["ipv4"]
    assert found(text, PiiConfig(enabled=False)) == []
    assert found(text, PiiConfig(types=[])) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"typo_enabeld": True},  # unknown field
        {"types": ["email", "passport"]},  # unknown type
        {"types": ["email", "email"]},
        {"quarantine_types": ["credit_card"]},
        {"types": ["email"], "quarantine_types": ["payment_card"]},  # never detected
        {"phone_min_digits": 3},
    ],
)
def test_config_typos_are_rejected(kwargs):
    with pytest.raises(ValidationError):
        PiiConfig(**kwargs)


def test_policy_version_digests_code_version_and_config():
    base = pii_policy_version(PiiConfig())
    assert base.startswith(PII_DETECTOR_VERSION + "+")
    assert base == pii_policy_version(PiiConfig())
    # type order is normalized, so the same set of types is the same policy
    assert pii_policy_version(PiiConfig(types=list(reversed(RULE_TYPES)))) == base
    others = {
        pii_policy_version(PiiConfig(types=["email", "ipv4"])),
        pii_policy_version(PiiConfig(quarantine_types=["payment_card"])),
        pii_policy_version(PiiConfig(phone_min_digits=11)),
        pii_policy_version(PiiConfig(enabled=False)),
        pii_policy_version(PiiConfig(ipv4_version_heuristics=False)),
        pii_policy_version(PiiConfig(ip_exempt_ranges=["127.0.0.0/8"])),
        pii_policy_version(PiiConfig(ipv4_section_numbers=False)),
        pii_policy_version(PiiConfig(quarantine_secret_kinds=[])),
        pii_policy_version(PiiConfig(secret_assignment_min_entropy=3.5)),
        pii_policy_version(PiiConfig(secret_assignment_min_length=16)),
    }
    assert base not in others and len(others) == 10


def test_phone_min_digits_knob():
    text = "call 020 7946 095"  # 10 digits
    assert found(text) == [("phone", "020 7946 095")]
    assert found(text, PiiConfig(phone_min_digits=11)) == []


def test_ipv4_version_heuristics_knob():
    assert found("libfoo 1.2.3.4") == []
    assert found("libfoo 1.2.3.4", PiiConfig(ipv4_version_heuristics=False)) == [("ipv4", "1.2.3.4")]


# ---------------------------------------------------------------------------------------------
# performance sanity and adversarial input


def test_five_megabytes_of_prose_with_a_few_items():
    rng = random.Random(7)
    words = ("the of and to in a is that for it as was with be by on not this are or from at which "
             "release version 2023 12 3.14 1999-2004 page 42 section 4.2 room 101 done.").split()
    parts, expected = [], {t: 0 for t in PII_TYPES}
    items = [("email", "someone@example.org"), ("ipv4", "from 81.2.69.160"), ("ipv6", "host 2a00:1450:4001:82b::200e"),
             ("phone", "call +44 20 7946 0958"), ("payment_card", "card 4111 1111 1111 1111"),
             ("iban", "IBAN DE89 3704 0044 0532 0130 00")]
    size = 0
    i = 0
    while size < 5_000_000:
        chunk = " ".join(rng.choice(words) for _ in range(200))
        if i % 100 == 0:
            type_, item = items[(i // 100) % len(items)]
            chunk += f" {item} ."
            expected[type_] += 1
        parts.append(chunk)
        size += len(chunk) + 1
        i += 1
    text = "\n".join(parts)
    assert len(text) >= 5_000_000
    red, spans = redact(text, CFG)
    assert counts_by_type(spans) == expected
    assert sum(expected.values()) >= 40
    assert "someone@example.org" not in red and "<EMAIL>" in red


@pytest.mark.parametrize(
    "text",
    [
        "a@" * 100_000,
        "1." * 100_000,
        "1" * 1_000_000,
        "1 " * 100_000,
        "4111 " * 100_000,
        "a" * 500_000 + "@",
        "@" + "a." * 100_000,
        "a-" * 100_000 + "@b.c",
        "::" * 100_000,
        "1:" * 100_000,
        "+1 " * 100_000,
        "(0" * 100_000,
        "GB82 " * 50_000,
        "0 1 " * 100_000,
    ],
    ids=lambda t: repr(t[:8]),
)
def test_adversarial_inputs_complete(text):
    spans = find_pii(text, CFG)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))
