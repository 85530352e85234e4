"""packed_shards staging, with real processes: a build's cleanup removes only the staging of dead
builds (their dir_locks lock is gone), never a live concurrent build's shard-set staging or view
spool, and the bytes it writes do not depend on what it cleaned up."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from corpus_assets.domain.layers.registry import MIXTURE_PLAN, TOKEN_VIEWS, VIEWS_SCHEMA, layer
from corpus_assets.domain.pack.mixture_layer import build_mixture_plan
from corpus_assets.domain.pack.packing import PackingPolicy
from corpus_assets.domain.pack.shards_layer import ShardSpec, build_packed_shards, verify_packed_shards
from corpus_assets.domain.storage.layer_store import LayerStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from processes import kill_at_pause_point, wait_for_marker  # noqa: E402

RELEASE = "r1"
POLICY = {"seq_len": 16, "overlength": "split"}
TOKENIZER = "tok-sha256-" + "ab" * 16
VOCAB = 1000
SPLITS = ["train", "validation", "test"]
REPO = Path(__file__).resolve().parents[2]


def _views() -> pa.Table:
    rows = []
    for i in range(24):
        n = 3 + (i * 5) % 23  # some longer than a block: split
        rows.append({
            "record_id": f"rec-{i:02d}", "variant": None,
            "split": SPLITS[0] if i % 4 else SPLITS[1 + (i // 4) % 2],
            "source_id": ("web", "code")[i % 2], "snapshot": ("web", "code")[i % 2] + ".20240101T000000",
            "domain": ("prose", "code")[i % 2], "cache_key": f"key-{i}",
            "n_tokens": n, "label_tokens": n,
            "input_ids": [(i * 37 + k * 11) % (VOCAB - 1) + 1 for k in range(n)],
            "loss_mask": [1] * n, "offsets": [x for k in range(n) for x in (k, k + 1)], "segments_json": "[]",
        })
    return pa.Table.from_pylist(rows, schema=VIEWS_SCHEMA)


def _inputs(home: Path) -> LayerStore:
    """token_views and mixture_plan of RELEASE, committed in ``home``."""
    store = LayerStore(home)
    with store.new_version(TOKEN_VIEWS, RELEASE, layer(TOKEN_VIEWS).table_specs(), {"test": "views"}) as w:
        w.write("views", _views())
        views = w.commit()
    build_mixture_plan(store, RELEASE, None, token_views=views, train_split=SPLITS[0])
    return store


def _build(store: LayerStore, positions: int):
    return build_packed_shards(
        store, RELEASE, PackingPolicy(**POLICY), ShardSpec(positions=positions),
        token_views=store.require_current(TOKEN_VIEWS, RELEASE), mixture_plan=store.require_current(MIXTURE_PLAN, RELEASE),
        tokenizer_digest=TOKENIZER, vocab_size=VOCAB, split_names=SPLITS,
    )


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


# A packed_shards build in its own process. "hold": it stops at the packed_shards:staged point
# (shard set staged under .tmp-*, views still spooled under .tmp-spool-*) until the go file exists,
# then finishes and prints its result. "kill": the real fault-injection pause point, armed by the
# environment (the test SIGKILLs it there).
_BUILDER = r"""
import json, sys, time
from pathlib import Path
import corpus_assets.domain.pack.shards_layer as sl
from corpus_assets.domain.layers.registry import MIXTURE_PLAN, TOKEN_VIEWS
from corpus_assets.domain.pack.packing import PackingPolicy
from corpus_assets.domain.storage.layer_store import LayerStore

home, release, policy, positions, tokenizer, vocab, splits, mode, marker, go = sys.argv[1:]
if mode == "hold":
    def hold(name):
        if name == "packed_shards:staged":
            Path(marker).write_text(name)
            while not Path(go).exists():
                time.sleep(0.05)
    sl.pause_point = hold
store = LayerStore(home)
version, report = sl.build_packed_shards(
    store, release, PackingPolicy(**json.loads(policy)), sl.ShardSpec(positions=int(positions)),
    token_views=store.require_current(TOKEN_VIEWS, release), mixture_plan=store.require_current(MIXTURE_PLAN, release),
    tokenizer_digest=tokenizer, vocab_size=int(vocab), split_names=json.loads(splits))
print(json.dumps({"digest": version.content_digest, "shard_set": report["shard_set"]}), flush=True)
"""


def _builder_cmd(home: Path, positions: int, mode: str, marker: Path, go: Path) -> list[str]:
    return [sys.executable, "-c", _BUILDER, str(home), RELEASE, json.dumps(POLICY), str(positions), TOKENIZER,
            str(VOCAB), json.dumps(SPLITS), mode, str(marker), str(go)]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def test_cleanup_keeps_a_live_builds_staging_removes_a_dead_ones_and_bytes_are_unchanged(tmp_path):
    # reference bytes: each build alone, in a fresh home
    ref_store = _inputs(tmp_path / "ref")
    ref_a, ref_a_report = _build(ref_store, positions=64)
    ref_a_files = _tree(ref_store.home / ref_a_report["shard_set"])
    ref_b_store = _inputs(tmp_path / "ref-b")
    ref_b, ref_b_report = _build(ref_b_store, positions=48)
    assert ref_b_report["shard_set"] != ref_a_report["shard_set"]  # two different shard sets

    home = tmp_path / "home"
    store = _inputs(home)
    set_parent = home / "shards" / RELEASE

    # 1) a build killed with its shard set staged and its views spooled leaves both behind
    kill_at_pause_point(_builder_cmd(home, 48, "kill", tmp_path / "unused", tmp_path / "unused"),
                        "packed_shards:staged", tmp_path / "killed-at", env=_env())
    dead = sorted(p.name for p in set_parent.iterdir())
    assert len(dead) == 2 and all(n.startswith(".tmp-") for n in dead)
    assert any(n.startswith(".tmp-spool-") for n in dead)

    # 2) a live build (positions 48) holds at the same point: its staging is complete and locked
    marker, go = tmp_path / "live-staged", tmp_path / "go"
    live = subprocess.Popen(_builder_cmd(home, 48, "hold", marker, go), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_marker(marker, live, marker.name)
        live_staging = {p.name: _tree(p) for p in set_parent.iterdir() if p.name not in dead}
        assert len(live_staging) == 2 and any(n.startswith(".tmp-spool-") for n in live_staging)
        assert all(files for files in live_staging.values())  # shards staged, views spooled

        # 3) a build in this process (positions 64) cleans up: the dead build's staging goes, the
        #    live build's stays untouched, and its own bytes are those of a build alone
        version, report = _build(store, positions=64)
        names = {p.name for p in set_parent.iterdir()}
        assert not names & set(dead)
        assert {n: _tree(set_parent / n) for n in live_staging} == live_staging
        assert names == set(live_staging) | {report["shard_set"].rsplit("/", 1)[1]}
        assert version.content_digest == ref_a.content_digest
        assert report["shard_set"] == ref_a_report["shard_set"]
        assert _tree(home / report["shard_set"]) == ref_a_files

        # 4) the live build finishes from its intact staging: same result as alone, shards verify
        go.write_text("go")
        out, err = live.communicate(timeout=180)
    finally:
        if live.poll() is None:
            os.killpg(live.pid, signal.SIGKILL)
            live.wait(30)
    assert live.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"digest": ref_b.content_digest, "shard_set": ref_b_report["shard_set"]}
    assert _tree(home / result["shard_set"]) == _tree(ref_b_store.home / ref_b_report["shard_set"])
    assert all(s["ok"] for s in verify_packed_shards(store, store.require_current("packed_shards", RELEASE)).values())
    assert sorted(p.name for p in set_parent.iterdir()) == sorted(
        {ref_a_report["shard_set"].rsplit("/", 1)[1], ref_b_report["shard_set"].rsplit("/", 1)[1]})
