"""The manifest model, its committed JSON Schema, the data card, and publishing with both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from corpus_assets.domain.release import manifest as rm
from corpus_assets.domain.release.publish import ReleaseVerificationError, build_id, publish_release, verify_release

PROJECT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = PROJECT / "docs" / "release_manifest.schema.json"
H = "a" * 64


def manifest_fields(bid: str = H) -> dict:
    """Everything the caller fills (publish adds build_id, content_digest, artifacts)."""
    return {
        "corpus_id": "corpus-demo",
        "release": "demo",
        "version": bid,
        "owner": "data-team",
        "created_at": "2026-11-30T12:00:00+00:00",
        "intended_uses": ["pretraining research"],
        "excluded_uses": ["evaluation on demo_benchmark"],
        "sources": [
            {
                "source_id": "demo_chat",
                "kind": "jsonl",
                "license": "CC-BY-4.0",
                "rights_evidence": "https://example.org/terms (2026-11-01)",
                "allowed_uses": ["train", "eval"],
                "snapshots": [
                    {
                        "snapshot": "demo_chat.20261129T140000",
                        "raw_version_digest": "r" * 64,
                        "curated_version_digest": "c" * 64,
                        "items": 12,
                        "records": 9,
                    }
                ],
            }
        ],
        "pipeline": {
            "code_version": "corpus 0.1.0",
            "environment_digest": rm.environment_digest(["a==1", "b==2"]),
            "transforms": [
                {"name": "curated_records", "version": "4", "policy_version": "cur-1", "policy": {"pii": ["email"]}}
            ],
        },
        "stage_counts": [
            {"stage": "curation", "outcome": "accepted", "reason": "", "count": 9},
            {"stage": "curation", "outcome": "rejected", "reason": "decontam.contaminated", "count": 1},
        ],
        "dedup": {"policy": {"threshold": 0.8, "bands": 16}, "clusters": {"exact_removed": 1, "near_removed": 0}},
        "evaluation": {
            "registry_digest": "e" * 64,
            "detector_policy": {"n": 13, "tau": 0.5, "action": "remove"},
            "contamination": {"matched_records": 1},
        },
        "tokenizer": {"digest": "t" * 64, "vocab_size": 512, "origin": "train"},
        "shards": [
            {"split": "train", "name": "train-00000", "files": {"train-00000.bin": "1" * 64}, "blocks": 4, "tokens": 8192},
            {"split": "validation", "name": "validation-00000", "files": {"validation-00000.bin": "2" * 64}, "blocks": 1, "tokens": 2048},
        ],
        "split_stats": [{"split": "train", "records": 8, "tokens": 8000, "label_tokens": 6000}],
        "sampling": {
            "policy": {"unit": "tokens", "alpha": 0.5, "seed": 7},
            "per_source": [
                {"source_id": "demo_chat", "source_records": 900, "sampled_records": 1200,
                 "materialized_tokens": 210000, "label_tokens": 168000}
            ],
        },
        "tombstones": {"generation": 2, "request_ids": ["del-001"], "count": 3},
        "layer_versions": {"curated_records": "c" * 64, "packed_shards": "p" * 64},
    }


def full_manifest() -> dict:
    return {
        **manifest_fields(),
        "build_id": H,
        "content_digest": "b" * 64,
        "artifacts": [{"path": "shards/train-00000.bin", "sha256": "1" * 64, "bytes": 10}],
    }


def test_committed_schema_equals_the_generated_one(tmp_path):
    generated = rm.write_schema(tmp_path / "schema.json")
    assert json.loads(SCHEMA_FILE.read_text()) == json.loads(generated.read_text()), (
        "docs/release_manifest.schema.json is stale: regenerate with "
        "python -c \"from corpus_assets.domain.release.manifest import write_schema; "
        "write_schema('docs/release_manifest.schema.json')\""
    )
    assert SCHEMA_FILE.read_text() == rm.schema_text()


def test_manifest_validates_and_names_bad_fields():
    m = rm.ReleaseManifest.model_validate(full_manifest())
    assert m.manifest_format == "corpus-release/1" and m.consumed_by_runs == [] and m.data_card is None
    with pytest.raises(ValidationError, match="must equal build_id"):
        rm.ReleaseManifest.model_validate({**full_manifest(), "version": "1.0"})
    with pytest.raises(ValidationError, match="licence"):
        rm.ReleaseManifest.model_validate({**full_manifest(), "licence": "x"})
    bad = full_manifest()
    bad["sampling"]["per_source"][0].pop("label_tokens")
    with pytest.raises(ValidationError, match=r"sampling\.per_source\.0\.label_tokens"):
        rm.ReleaseManifest.model_validate(bad)
    with pytest.raises(ValidationError, match="release name"):
        rm.ReleaseManifest.model_validate({**full_manifest(), "release": "../x"})


def test_environment_digest_is_order_free_and_sensitive():
    assert rm.environment_digest(["b==2", "a==1"]) == rm.environment_digest(["a==1", "b==2"])
    assert rm.environment_digest(["a==1", "b==3"]) != rm.environment_digest(["a==1", "b==2"])
    installed = rm.installed_distributions()
    assert any(line.startswith("pydantic==") for line in installed) and installed == sorted(installed)
    assert rm.environment_digest() == rm.environment_digest(installed)


def test_data_card_has_the_four_denominators_limits_and_reports():
    card = rm.render_data_card(
        rm.ReleaseManifest.model_validate(full_manifest()),
        known_limits=["lexical decontamination misses paraphrases", "demo-sized sources"],
        report_links={"stage_accounting": "layers/stage_accounting/_all/v1/result/"},
    )
    for needle in [
        "source records", "sampled records", "materialized tokens", "label tokens",
        "| demo_chat | 900 | 1200 | 210000 | 168000 |",
        "lexical decontamination misses paraphrases", "demo-sized sources",
        "[stage_accounting](layers/stage_accounting/_all/v1/result/)",
        "CC-BY-4.0", "pretraining research", "evaluation on demo_benchmark",
        "curated_records", "decontam.contaminated", "exact_removed", "matched_records",
        "t" * 64, "train-00000", "del-001", "Tombstone generation 2",
        "| train | 8 | 8000 | 6000 | 1 | 4 | 8192 |",
    ]:
        assert needle in card, needle


def test_publish_with_validated_manifest_and_data_card(tmp_path):
    spec = {"release": "demo", "tombstone_generation": 2}
    bid = build_id(spec)

    def stage(tmp: Path) -> None:
        (tmp / "shards").mkdir()
        (tmp / "shards/train-00000.bin").write_bytes(b"\x00" * 64)

    res = publish_release(
        tmp_path, "demo", bid, stage, lambda tmp, files: manifest_fields(bid),
        validate_manifest=rm.validate_manifest,
        render_card=rm.data_card_renderer(known_limits=["small"], report_links={}),
        signing_key=None,
    )
    manifest = rm.ReleaseManifest.model_validate_json((res.path / "manifest.json").read_bytes())
    assert manifest.content_digest == res.content_digest and manifest.version == bid
    assert [a.path for a in manifest.artifacts] == ["shards/train-00000.bin"]
    assert manifest.data_card is not None and manifest.data_card.path == "data_card.md"
    card = (res.path / "data_card.md").read_text()
    assert res.content_digest in card and "small" in card
    verify_release(res.path)
    (res.path / "data_card.md").write_text(card + "edited\n")
    with pytest.raises(ReleaseVerificationError, match=r"data_card\.md was changed|data_card\.md has"):
        verify_release(res.path)


def test_publish_refuses_an_invalid_manifest(tmp_path):
    bad = manifest_fields(build_id({"x": 1}))
    bad.pop("owner")
    with pytest.raises(ValidationError, match="owner"):
        publish_release(
            tmp_path, "demo", build_id({"x": 1}), lambda tmp: (tmp / "f").write_bytes(b"1"),
            lambda tmp, files: bad, validate_manifest=rm.validate_manifest, signing_key=None,
        )
    assert not list((tmp_path / "demo").iterdir())
