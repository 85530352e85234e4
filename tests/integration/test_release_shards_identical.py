"""A release is the same bytes whatever ``dedup.shards`` and ``CORPUS_RELEASE_WORKERS`` are (issue 18).

The snapshots are built once; each configuration then builds the release through Dagster in a copy
of that data root: dedup_clusters (with exact and near copies to cluster), splits, token views,
the mixture plan, packed shards and the release manifest. Every file the release phase writes must
be byte-identical to the one-shard, in-process build, apart from the fields that name the run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from release_fixture import DOCS, TOKENIZER, build_snapshots, run_release, setup_release, step_failure

BODY = (
    "split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
    + "mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.5}, budget: 40, replacement: true, seed: 7}\n"
    + "packing: {seq_len: 128, mode: atomic, overlength: split, boundary: mask, pad_token: '<|pad|>'}\n"
    + "shards: {positions: 512}\n"
)
# an exact copy (case and spacing changed) and near copies, so every shard count has clusters to agree on
EXTRA = {
    "gc_copy": "  " + DOCS["gc"].upper(),
    "venv_near": DOCS["venv"].replace("its own scripts", "its own shell scripts"),
    "logging_near": DOCS["logging"].replace("perhaps a network service", "maybe a network service"),
    "pathlib_near": DOCS["pathlib"].replace("Old code", "Legacy code"),
}
CONFIGS = [(1, 1), (4, 1), (16, 1), (1, 2), (4, 2), (16, 2)]  # (dedup.shards, CORPUS_RELEASE_WORKERS)
# JSON fields that name the run or the moment, not the content
RUN_FIELDS = {"run_id", "created_at", "built_at", "published_at", "started_at", "finished_at", "timestamp", "path"}


def _scrub(value, key=None):
    if isinstance(value, dict):
        if key == "data_card":  # the card names its build time; its text is compared without that line
            return {k: v for k, v in value.items() if k not in ("sha256", "bytes")}
        return {k: _scrub(v, k) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _digests(home: Path, seed: Path) -> dict[str, str]:
    """Digest of every file the release phase wrote or changed (JSON with its run fields left out);
    not the Dagster home nor the catalog database, which record runs and times."""
    out = {}
    for p in sorted(home.rglob("*")):
        rel = p.relative_to(home)
        if not p.is_file() or rel.parts[0] == "dagster" or p.suffix in (".duckdb", ".wal", ".lock"):
            continue
        data = p.read_bytes()
        before = seed / rel
        if before.is_file() and before.read_bytes() == data:
            continue  # a snapshot-phase file, untouched
        if p.suffix == ".json":
            data = json.dumps(_scrub(json.loads(data)), sort_keys=True).encode()
        elif p.name == "data_card.md":
            data = b"\n".join(line for line in data.split(b"\n") if not line.startswith(b"- built at: "))
        out[rel.as_posix()] = hashlib.sha256(data).hexdigest()
    return out


def test_dedup_shards_and_release_workers_never_change_a_byte(corpus_env, tmp_path, monkeypatch):
    rel = setup_release(tmp_path, monkeypatch, BODY, extra_docs=EXTRA)
    from corpus_assets.definitions import build_definitions

    with dg.instance_for_test() as instance:
        build_snapshots(build_definitions(), instance)
        seed = tmp_path / "after_snapshots"
        shutil.copytree(corpus_env, seed, ignore=shutil.ignore_patterns("dagster"))
        builds = {}
        for shards, workers in CONFIGS:
            home = tmp_path / f"home_k{shards}_w{workers}"
            shutil.copytree(seed, home)
            (home / "dagster").mkdir()
            monkeypatch.setenv("CORPUS_HOME", str(home))
            monkeypatch.setenv("CORPUS_RELEASE_WORKERS", str(workers))
            (rel / "r1.yaml").write_text("name: r1\nsnapshots: {sources: [site_docs, site_chat]}\n"
                                         + BODY.replace("split:", f"dedup: {{shards: {shards}}}\nsplit:", 1))
            result = run_release(build_definitions(), instance)
            assert result.success, step_failure(result)
            builds[(shards, workers)] = _digests(home, seed)

    first = builds[CONFIGS[0]]
    layers = {k.split("/")[1] for k in first if k.startswith("layers/")}
    assert {"dedup_clusters", "packed_shards", "token_views"} <= layers, layers
    assert any(k.startswith("shards/") for k in first) and any(k.startswith("releases/") for k in first)
    from corpus_assets.domain.storage.layer_store import LayerStore

    clusters = LayerStore(tmp_path / "home_k1_w1").require_current("dedup_clusters", "r1").read_table("clusters")
    kinds = clusters.column("kind").to_pylist()
    assert kinds.count("exact") >= 1 and kinds.count("near") >= 2  # there was something to shard
    for config, files in builds.items():
        assert sorted(files) == sorted(first), config
        differ = sorted(k for k in files if files[k] != first[k])
        assert not differ, (config, differ)


@pytest.mark.parametrize("shards", [0, -1])
def test_a_shard_count_below_one_is_refused_naming_the_field(tmp_path, shards):
    from corpus_assets.domain.core.config_files import ConfigError
    from corpus_assets.domain.release.spec import load_release_spec

    p = tmp_path / "r1.yaml"
    p.write_text(f"name: r1\nsnapshots: {{sources: [a]}}\ndedup: {{shards: {shards}}}\n")
    with pytest.raises(ConfigError, match="dedup.shards"):
        load_release_spec(p)
