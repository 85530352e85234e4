"""no_pii_in_public (check_no_pii_in_public) over a real curated layer version: it uses a second,
independent detector, so it fails when the primary detector misses a value (issue 17)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from corpus_assets.domain.canonical.canonical_layer import CANONICAL_TABLES
from corpus_assets.domain.canonical.records import record_to_row
from corpus_assets.domain.curate import curated_layer, pii
from corpus_assets.domain.curate.config import CurationConfig
from corpus_assets.domain.curate.curated_layer import build_curated, check_no_pii_in_public
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS
from corpus_assets.domain.storage.layer_store import LayerStore
from test_deletion import make_record  # noqa: E402  (tests/unit is on sys.path, as for test_purge.py)

SNAP = "docs.20260101T000000"
TEXTS = {
    "a": "Bug reports go to maria.lopez@example.org; the build host answers on 81.2.69.160:22.",
    "b": "24.2.2.4. Nondeterministic Collations\nsock.bind(('127.0.0.1', 80)) and listen 127.0.0.1:8080;",
    "c": "Use the key AKIAIOSFODNN7EXAMPLE only in the sandbox; integer max is +2147483647.",
}


@pytest.fixture
def curate(tmp_path, monkeypatch):
    # quality is not under test here: every record passes it
    monkeypatch.setattr(curated_layer, "judge_record", lambda record, config, profile="web": SimpleNamespace(passed=True))
    store = LayerStore(tmp_path)
    rows = [record_to_row(make_record(SNAP, k, t)) for k, t in TEXTS.items()]
    with store.new_version(CANONICAL_RECORDS, SNAP, CANONICAL_TABLES, {"t": 1}) as w:
        w.write("records", rows)
        w.write("decisions", [])
        w.write("quarantine", [])
        canon = w.commit(extra_manifest={"items_in": len(rows), "outcomes": {"accepted": len(rows)}})
    config = CurationConfig(decontam={"enabled": False})

    def run():
        summary = build_curated(store, SNAP, config, EvalRegistry(()), canonical_version=canon)
        return summary.version, config

    return run


def test_check_passes_when_the_primary_redacted_everything(curate):
    version, config = curate()
    texts = {r["record_id"]: r["text"] for r in version.read_table("records").to_pylist()}
    assert texts["docs:a"] == "Bug reports go to <EMAIL>; the build host answers on <IPV4>:22."
    assert texts["docs:b"] == TEXTS["b"]  # section number and loopback addresses are left alone
    assert texts["docs:c"] == "Use the key <SECRET> only in the sandbox; integer max is +2147483647."
    assert check_no_pii_in_public(version, config) == []


def test_check_fails_when_the_primary_misses_a_planted_value(curate, monkeypatch):
    # a primary detector that misses e-mail addresses and AWS keys: it redacts, and re-checks, nothing of them
    monkeypatch.setattr(pii, "_find_emails", lambda text, config: iter(()))
    rules = tuple((k, rx) for k, rx in pii._SECRET_RULES if k != "aws_access_key")
    monkeypatch.setattr(pii, "_SECRET_RULES", rules)
    version, config = curate()
    texts = {r["record_id"]: r["text"] for r in version.read_table("records").to_pylist()}
    assert "maria.lopez@example.org" in texts["docs:a"] and "AKIAIOSFODNN7EXAMPLE" in texts["docs:c"]
    assert [sp.type for sp in pii.find_pii(texts["docs:a"], config.pii)] == []  # the primary alone sees nothing
    problems = check_no_pii_in_public(version, config)
    assert problems == ["docs:a: email (second detector)", "docs:c: secret (second detector)"]
    assert not any("maria" in p or "AKIA" in p for p in problems)  # never the value
