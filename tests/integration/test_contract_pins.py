"""The data contract users and their stored data rely on, pinned: what a restructuring must not
change without saying so.

* the Dagster surface: asset keys, partitions, groups, code versions, dependencies, checks, jobs
  (and the assets they select), sensors, schedules;
* default policy digests (what a materialization records as its policy version);
* the on-disk layout a small release really writes: layer and partition naming, every table's
  columns, types and privacy, manifest and build-spec keys, code and policy versions recorded in
  manifests, shard-set and release file names, catalog tables;
* the reason-code catalogue, and the reason codes the small release really produces.

The pinned values are in ``contract_pins.json`` beside this file. They were taken from the code
before the move into per-layer packages; a deliberate change of the contract rewrites them with
``CORPUS_UPDATE_PINS=1 pytest tests/integration/test_contract_pins.py`` and the diff of that file
is what a reviewer reads. Library-dependent inputs (the langid model digest, library versions)
are fixed here, so a library upgrade does not fail the pin while a code change does.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from release_fixture import TOKENIZER, build_snapshots, run_release, setup_release

PINS = Path(__file__).with_name("contract_pins.json")
UPDATE = os.environ.get("CORPUS_UPDATE_PINS") == "1"

# a small release that exercises every release layer (atomic packing with split over-length
# samples, a mixture, shards of several blocks) and curation (PII redaction and quarantine,
# decontamination against the shipped eval/demo_benchmark.jsonl, quality rejections)
SPEC = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "token_views: {max_tokens: 4096}\n"
        + "mixture: {unit: documents, alpha: 0.5, budget: 12, replacement: true, seed: 0}\n"
        + "packing: {seq_len: 128, mode: atomic, overlength: split, boundary: mask, pad_token: '<|pad|>'}\n"
        + "shards: {positions: 512}\n")


def _benchmark_question() -> str:
    line = (Path(__file__).resolve().parents[2] / "eval" / "demo_benchmark.jsonl").read_text().splitlines()[0]
    return json.loads(line)["question"]


EXTRA_DOCS = {
    "contact": (
        "The maintainers read every report that reaches the mailing list. Write to maintainers@example.org "
        "when the nightly build breaks, and include the commit you tested, the platform and the full log. "
        "Questions about packaging, releases and continuous integration are answered within a week. Each "
        "answer is added to the frequently asked questions page, so the next person finds it without asking. "
        "Security reports go to a separate address listed on the security page."
    ),
    "card": (
        "The treasurer keeps the receipts of the project in one shared folder. Last month the hosted runners "
        "were paid with the card 4111 1111 1111 1111, and the invoice lists the runners, the hours they ran "
        "and the storage the caches used. Receipts are filed before the accounts of the quarter are closed. "
        "Sponsors receive a short summary of the spending at the end of every year. Questions about a "
        "payment go to the treasurer directly."
    ),
    "tiny": "Too short.",
}


def _type_name(t) -> str:
    return str(t)


def _schema(path: Path) -> list[list[str]]:
    return [[f.name, _type_name(f.type)] for f in pq.read_schema(path)]


def _private(path: Path) -> bool:
    return not (path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH))


def _partition_kind(partition: str) -> str:
    if partition == "_all":
        return "_all"
    if re.fullmatch(r"[a-z0-9][a-z0-9_-]*\.\d{8}T\d{6}", partition):
        return "<source>.<YYYYMMDDTHHMMSS>"
    return "<release>"


def _shape(name: str) -> str:
    """A file or directory name with its variable parts replaced (digests, numbers)."""
    name = re.sub(r"[0-9a-f]{16,}", "<digest>", name)
    return re.sub(r"\d{5}", "<n>", name)


# --- the Dagster surface ------------------------------------------------------------------------


def dagster_surface() -> dict:
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    assets = {}
    for spec in defs.resolve_all_asset_specs():
        name = spec.key.to_user_string()
        assets[name] = {
            "code_version": spec.code_version,
            "partitions": getattr(spec.partitions_def, "name", None),
            "group": spec.group_name,
            "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
            "checks": sorted(ck.name for ck in graph.asset_check_keys if ck.asset_key == spec.key),
        }
    jobs = {}
    for job in defs.jobs:
        resolved = defs.resolve_job_def(job.name)
        keys = resolved.asset_layer.selected_asset_keys if resolved.asset_layer else set()
        jobs[job.name] = sorted(k.to_user_string() for k in keys)
    return {
        "assets": dict(sorted(assets.items())),
        "jobs": dict(sorted(jobs.items())),
        "sensors": sorted(s.name for s in defs.sensors),
        "schedules": sorted(s.name for s in defs.schedules),
    }


# --- default policy digests ---------------------------------------------------------------------


def policy_digests(monkeypatch) -> dict:
    from corpus_assets.domain.canonical import canonicalize
    from corpus_assets.domain.curate.curated_layer import curation_policy_version
    from corpus_assets.domain.curate.config import CurationConfig, load_curation
    from corpus_assets.domain.curate.decontam import DecontamConfig, decontam_policy_version
    from corpus_assets.domain.dedup.clusters_layer import ReleaseDedupPolicy
    from corpus_assets.domain.dedup.signatures_layer import load_dedup_file
    from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
    from corpus_assets.domain.core.hashing import canonical_digest
    from corpus_assets.domain.dedup.minhash import MinHashPolicy, minhash_policy_version
    from corpus_assets.domain.pack.mixture import MixtureSpec, mixture_spec_version
    from corpus_assets.domain.pack.packing import PackingPolicy, packing_policy_version
    from corpus_assets.domain.curate.pii import PiiConfig, pii_policy_version
    from corpus_assets.domain.curate.quality import FILTER_ORDER, QualityConfig, filter_version, quality_policy_version
    from corpus_assets.domain.release.spec import load_release_spec
    from corpus_assets.domain.ingest.sources_config import CanonicalPolicy
    from corpus_assets.domain.tokens.splits import SplitPolicy, split_policy_version
    from corpus_assets.domain.tokens.token_views import TokenViewPolicy, view_policy_version

    project = Path(__file__).resolve().parents[2]
    # library-dependent inputs, fixed: a library upgrade may change them, a code move must not
    monkeypatch.setattr(canonicalize, "LANGID_MODEL_DIGEST", "pinned-langid-model")
    monkeypatch.setattr(canonicalize, "_LIBRARIES", {"pinned": "libraries"})
    quality = QualityConfig()
    shipped = load_curation(project / "curation.yaml")
    empty = EvalRegistry(()).digest
    return {
        "canonical": canonicalize.policy_version(CanonicalPolicy()),
        "curation_default": curation_policy_version(CurationConfig(), empty),
        "curation_shipped": curation_policy_version(shipped, empty),
        "quality": quality_policy_version(quality),
        "quality_filters": {name: filter_version(name, getattr(quality, name), quality) for name in FILTER_ORDER},
        "decontam": decontam_policy_version(DecontamConfig(), empty),
        "pii": pii_policy_version(PiiConfig()),
        "minhash_default": minhash_policy_version(MinHashPolicy()),
        "minhash_shipped": minhash_policy_version(load_dedup_file(project / "dedup.yaml").minhash),
        # what enters the dedup build spec (execution settings such as dedup.shards do not)
        "release_dedup_default": canonical_digest(ReleaseDedupPolicy().build_record()),
        "split": split_policy_version(SplitPolicy()),
        "token_views": view_policy_version(TokenViewPolicy()),
        "mixture": mixture_spec_version(MixtureSpec(unit="documents", alpha=1.0, budget=100)),
        "packing": packing_policy_version(PackingPolicy(seq_len=2048)),
        # what the build spec embeds for the shipped demo release (its part of every demo build id)
        "demo_release_spec": canonical_digest(load_release_spec(project / "releases" / "demo.yaml").as_written()),
    }


def reason_catalogue() -> dict:
    from corpus_assets.domain.pack import packing
    from corpus_assets.domain.tokens import token_views
    from corpus_assets.domain.curate.quality import REASON_CODES
    from corpus_assets.domain.core.reasons import OUTCOME_OF, Reason

    return {
        "canonical": {r.value: OUTCOME_OF[r].value for r in Reason},
        "quality": sorted(REASON_CODES),
        "token_views": [token_views.REASON_TOO_LONG],
        "packing": [packing.REASON_TOO_LONG],
    }


# --- the on-disk layout of a small release ------------------------------------------------------


def disk_layout(home: Path) -> dict:
    layers: dict = {}
    recorded: dict = {}
    reasons: set = set()
    for asset_dir in sorted(p for p in (home / "layers").iterdir() if p.is_dir()):
        asset = asset_dir.name
        entry = layers.setdefault(asset, {"partitions": set(), "tables": {}, "manifest_keys": set(), "build_spec_keys": set()})
        for part_dir in sorted(p for p in asset_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            entry["partitions"].add(_partition_kind(part_dir.name))
            current = (part_dir / "CURRENT").read_text().strip()
            vdir = part_dir / current
            manifest = json.loads((vdir / "_manifest.json").read_text())
            entry["manifest_keys"].update(manifest)
            build = manifest.get("build_spec", {})
            entry["build_spec_keys"].update(build)
            for key in ("code_version", "policy_version"):
                for value in (build.get(key), manifest.get(key)):
                    if isinstance(value, str) and value:
                        recorded.setdefault(asset, {}).setdefault(key, set()).add(value)
            for table, meta in manifest["tables"].items():
                files = sorted((vdir / table).glob("part-*.parquet"))
                assert files, f"{asset}/{table}: no part files"
                entry["tables"][table] = {"columns": _schema(files[0]), "private": _private(files[0]),
                                         "file_names": sorted({_shape(f.name) for f in files})}
                names = pq.read_schema(files[0]).names
                if "reason" in names:
                    for f in files:
                        reasons.update(r for r in pq.read_table(f, columns=["reason"]).column(0).to_pylist() if r)
    for asset, entry in layers.items():
        for key in ("partitions", "manifest_keys", "build_spec_keys"):
            entry[key] = sorted(entry[key])
    shard_files: set = set()
    for path in (home / "shards").rglob("*"):
        if path.is_file():
            rel = path.relative_to(home / "shards").parts
            shard_files.add("/".join(["<release>", _shape(rel[1]), *(_shape(p) for p in rel[2:])]))
    release_files: set = set()
    for path in (home / "releases").rglob("*"):
        if path.is_file():
            rel = path.relative_to(home / "releases").parts
            release_files.add("/".join(["<release>", *(_shape(p) for p in rel[1:])]))
    spans = next((home / "shards").rglob("*.spans.parquet"))
    return {
        "layers": layers,
        "recorded_versions": {a: {k: sorted(v) for k, v in d.items()} for a, d in sorted(recorded.items())},
        "reasons_written": sorted(reasons),
        "shard_files": sorted(shard_files),
        "spans_columns": _schema(spans),
        "release_files": sorted(release_files),
    }


def catalog_tables(home: Path) -> dict:
    from corpus_assets.domain.storage.catalog import Catalog

    out = {}
    with Catalog.at(home / "catalog.duckdb").transaction() as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
    for table, column, dtype in rows:
        out.setdefault(table, []).append([column, dtype])
    return out


# --- the pins -----------------------------------------------------------------------------------


def _check(section: str, current) -> None:
    current = json.loads(json.dumps(current, sort_keys=True))
    pins = json.loads(PINS.read_text()) if PINS.exists() else {}
    if UPDATE:
        pins[section] = current
        PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
        return
    assert section in pins, f"{PINS.name} has no {section!r} section: run with CORPUS_UPDATE_PINS=1 once"
    expected = pins[section]
    if current != expected:
        dump = PINS.with_suffix(f".{section}.current.json")
        dump.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
        pytest.fail(f"the {section} contract changed; compare {PINS.name} with {dump.name} "
                    "(a deliberate change: CORPUS_UPDATE_PINS=1)")


def test_dagster_surface_is_pinned(corpus_env):
    _check("dagster", dagster_surface())


def test_default_policy_digests_and_reason_catalogue_are_pinned(monkeypatch):
    _check("policies", policy_digests(monkeypatch))
    _check("reason_catalogue", reason_catalogue())


def test_on_disk_layout_of_a_small_release_is_pinned(corpus_env, tmp_path, monkeypatch):
    bench = ("Our weekly puzzle column collects questions that readers send in and answers them in plain words. "
             f"This week a reader asked the following. {_benchmark_question()} The reader wanted to know how to "
             "think about it rather than only the number. So the column walks through the pairing trick step by "
             "step. It also shows why the trick works for any count of consecutive numbers, not just this one. "
             "Next week we look at a puzzle about clocks.")
    setup_release(tmp_path, monkeypatch, SPEC, extra_docs=dict(EXTRA_DOCS, bench=bench))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        assert run_release(defs, instance).success
        assert defs.resolve_job_def("reports_job").execute_in_process(instance=instance).success
    layout = disk_layout(corpus_env)
    # the fixture reaches the stages it is meant to pin
    assert {"pii.redacted", "pii.quarantined_type", "decontam.benchmark_match"} <= set(layout["reasons_written"]), layout["reasons_written"]
    _check("layout", layout)
    _check("catalog", catalog_tables(corpus_env))
