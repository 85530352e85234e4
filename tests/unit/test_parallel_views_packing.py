"""Token views and packed shards built as tasks on the release engine: the bytes are the serial
build's whatever the worker count (the synchronous scheduler vs a real two-process LocalCluster,
one per module) and whatever the chunk (task) size — views, decisions, report, every shard file,
the shard manifests and the layer version."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from corpus_assets.domain.canonical.records import (
    SCHEMA_VERSIONS,
    DocumentPayload,
    Message,
    MessagesPayload,
    Record,
    record_digest,
    record_to_row,
)
from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.curate.curated_layer import CURATED_TABLES
from corpus_assets.domain.ingest.sources_config import Governance
from corpus_assets.domain.layers.registry import CURATED_RECORDS, SPLITS, TOKEN_VIEWS
from corpus_assets.domain.pack.mixture import MixtureSpec
from corpus_assets.domain.pack.mixture_layer import build_mixture_plan
from corpus_assets.domain.pack.packing import (
    PackedBlocks,
    Packer,
    PackingPolicy,
    block_window,
    packer_states,
    plan_blocks,
)
from corpus_assets.domain.pack.shards_layer import ShardSpec, build_packed_shards
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.tokens.splits_layer import SPLITS_TABLES
from corpus_assets.domain.tokens.token_views import TokenViewPolicy
from corpus_assets.domain.tokens.token_views_layer import build_token_views
from corpus_assets.domain.tokens.tokenizer import TokenizerSpec
from corpus_assets.domain.tokens.tokenizer_layer import build_tokenizer

TOKENIZER_JSON = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "tiny_bpe.json"
RELEASE = "r1"
SNAPSHOTS = ["docs.20260101T000000", "chat.20260101T000000"]
SPLIT_NAMES = ["train", "validation", "test"]
GOV = Governance(license="CC0-1.0", rights_evidence="https://example.org/rights")
WORDS = ("packing reads views in plan order and every block holds whole samples while the stream mode "
         "cuts a long document wherever the block ends so the spans say where each piece came from").split()


@pytest.fixture(scope="module")
def cluster():
    """A real Dask LocalCluster of two single-threaded worker processes, shared by the module."""
    engine = Engine(workers=2)
    assert engine.kind == "local"
    yield engine


def _text(i: int) -> str:
    n = 5 + (i * 37) % 160 + (400 if i % 23 == 0 else 0)  # a few long ones: over max_tokens / over a block
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n)) + f" ({i})."


def _record(snapshot: str, i: int) -> Record:
    source = snapshot.split(".")[0]
    if source == "chat":
        payload = MessagesPayload(messages=[
            Message(role="user", content=f"question {i}: " + _text(i)[:80]),
            Message(role="assistant", content=_text(i + 1)[:200]),
        ])
        schema = "messages"
    else:
        payload = DocumentPayload(text=_text(i))
        schema = "document"
    r = Record(record_id=f"{source}:{i:04d}", source_id=source, snapshot=snapshot, item_id=str(i), schema_type=schema,
               schema_version=SCHEMA_VERSIONS[schema], adapter="test", adapter_version="1",
               domain="code" if i % 3 == 0 else "prose", lang="en", group_id=f"g{i}", governance=GOV, payload=payload)
    r.record_sha256 = record_digest(r)
    return r


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A data root with curated records of two snapshots (documents and chats), the release's
    splits (some records not kept, some kept without a split) and its tokenizer."""
    home = tmp_path_factory.mktemp("world")
    store = LayerStore(home, rows_per_group=64)  # several row groups per snapshot
    assignments = []
    for s, snap in enumerate(SNAPSHOTS):
        n = 420 if s == 0 else 180
        records = [_record(snap, i) for i in range(n)]
        with store.new_version(CURATED_RECORDS, snap, CURATED_TABLES, {"test": snap}) as w:
            w.write("records", [record_to_row(r) for r in records])
            w.commit()
        for i, r in enumerate(records):
            kept = i % 11 != 5
            split = None if i % 29 == 7 else SPLIT_NAMES[0 if i % 5 else 1 + (i // 5) % 2]
            assignments.append({"record_id": r.record_id, "source_id": r.source_id, "snapshot": snap, "kept": kept,
                                "group_key": r.group_id, "u": 0.5, "split": split})
    with store.new_version(SPLITS, RELEASE, SPLITS_TABLES, {"test": "splits"}) as w:
        w.write("assignments", assignments)
        splits = w.commit()
    spec = TokenizerSpec(path=TOKENIZER_JSON, special_tokens=["<|endoftext|>", "<|pad|>"], eos_token="<|endoftext|>")
    build_tokenizer(store, RELEASE, spec, splits=splits)
    return home


def _copy(world: Path, dest: Path) -> LayerStore:
    shutil.copytree(world, dest)
    return LayerStore(dest, rows_per_group=64)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def _views(store: LayerStore, engine: Engine, task_records: int, **kw):
    version, report = build_token_views(
        store, RELEASE, TokenViewPolicy(max_tokens=220), splits=store.require_current(SPLITS, RELEASE),
        tokenizer=store.require_current("tokenizer", RELEASE), engine=engine, task_records=task_records, **kw)
    return version, report


def test_token_views_are_byte_identical_for_any_worker_count_and_chunk_size(world, tmp_path, cluster):
    builds = {}
    for name, engine, task_records, max_records in (
        ("serial, one chunk", Engine(), 100_000, 1024),
        ("serial, chunks of 37", Engine(), 37, 1024),
        ("2 workers, chunks of 37", cluster, 37, 1024),
        ("2 workers, chunks of 128, batches of 5", cluster, 128, 5),
    ):
        store = _copy(world, tmp_path / name.replace(" ", "_").replace(",", ""))
        version, report = _views(store, engine, task_records, max_records=max_records, reuse=False)
        builds[name] = (version, report, _tree(version.root))
    (v0, r0, t0), *others = builds.values()
    # the fixture exercises what the chunks must carry: every split, both sources, rejections
    kept_with_split = sum(1 for n in (420, 180) for i in range(n) if i % 11 != 5 and i % 29 != 7)
    assert r0["records"] == kept_with_split and r0["rejected"]["token_views.too_long"] > 0
    assert set(r0["splits"]) == set(SPLIT_NAMES) and set(r0["sources"]) == {"docs", "chat"}
    assert r0["records_with_views"] + sum(r0["rejected"].values()) == r0["records"] == v0.row_count("decisions")
    for (v, r, t), name in zip(others, list(builds)[1:]):
        assert t == t0, name  # every parquet part of views and decisions, and the manifest
        assert v.content_digest == v0.content_digest and r == r0, name
    # rows in the fixed order: snapshots sorted, then curated order
    ids = v0.read_table("decisions", columns=["record_id"]).column(0).to_pylist()
    assert ids == sorted(ids, key=lambda rid: (rid.split(":")[0] != "chat", rid))


def test_reused_views_through_tasks_give_the_same_bytes(world, tmp_path, cluster):
    store = _copy(world, tmp_path / "home")
    fresh, _ = _views(store, Engine(), 64, reuse=False)
    tree = _tree(fresh.root)
    shutil.rmtree(fresh.root.parent)  # keep no token views of r1: only r2's can be reused
    # the same splits and tokenizer as release r2: its views are the cache of r1's build
    for layer in (SPLITS, "tokenizer"):
        shutil.copytree(store.partition_dir(layer, RELEASE), store.partition_dir(layer, "r2"))
    _views_r2 = build_token_views(store, "r2", TokenViewPolicy(max_tokens=220), splits=store.require_current(SPLITS, "r2"),
                                  tokenizer=store.require_current("tokenizer", "r2"), task_records=50, reuse=False)
    assert _views_r2[1]["tokenized_records"] == _views_r2[1]["records"]
    cached, report = _views(store, cluster, 41, reuse=True, adopt=False)  # row by row through the spill
    assert report["reused_records"] == report["records"] - sum(report["rejected"].values())
    assert report["tokenized_records"] == sum(report["rejected"].values())  # too long: never stored, re-decided
    assert report["adopted_records"] == 0
    assert _tree(cached.root) == tree and cached.content_digest == fresh.content_digest
    # nothing left behind: no spill, no task files
    assert not [p.name for p in store.partition_dir(TOKEN_VIEWS, RELEASE).iterdir() if p.name.startswith((".tmp-", ".reuse-"))]



def test_unchanged_snapshots_adopt_the_stored_files_and_the_bytes_equal_a_fresh_build(world, tmp_path):
    """An increment changes one snapshot: the other's views and decisions files are hard links of
    the stored build's, and the new version is byte for byte what a build without any reuse makes."""
    store = _copy(world, tmp_path / "home")
    first, _ = _views(store, Engine(), 64, reuse=False)
    # one chat record moves from train to validation: only the chat snapshot's inputs change
    rows = store.require_current(SPLITS, RELEASE).read_table("assignments").to_pylist()
    moved = next(r for r in rows if r["snapshot"] == SNAPSHOTS[1] and r["kept"] and r["split"] == "train")
    moved["split"] = "validation"
    with store.new_version(SPLITS, RELEASE, SPLITS_TABLES, {"test": "splits, one record moved"}) as w:
        w.write("assignments", rows)
        w.commit()
    second, report = _views(store, Engine(), 64)
    docs = sum(1 for r in rows if r["snapshot"] == SNAPSHOTS[0] and r["kept"] and r["split"] is not None)
    assert report["adopted_records"] == docs and report["tokenized_records"] > 0
    assert report["tokenized_records"] + report["reused_records"] + report["adopted_records"] == report["records"]
    # each snapshot fills a row group (64 rows here), so each is a segment of its own
    assert [e["snapshots"] for e in second.manifest["segments"]] == [[s] for s in sorted(SNAPSHOTS)]
    segments = {e["snapshots"][0]: e for e in second.manifest["segments"]}
    old = {e["snapshots"][0]: e for e in first.manifest["segments"]}
    assert segments[SNAPSHOTS[0]]["key"] == old[SNAPSHOTS[0]]["key"] != segments[SNAPSHOTS[1]]["key"]
    for table in ("views", "decisions"):
        for new_name, old_name in zip(segments[SNAPSHOTS[0]]["tables"][table]["files"],
                                      old[SNAPSHOTS[0]]["tables"][table]["files"], strict=True):
            assert (second.root / table / new_name).stat().st_ino == (first.root / table / old_name).stat().st_ino
    assert second.verify() is None  # every adopted file matches the digest the manifest gives it
    tree = _tree(second.root)
    fresh, fresh_report = _views(store, Engine(), 64, reuse=False)
    assert fresh.content_digest == second.content_digest and _tree(fresh.root) == tree
    assert fresh_report["adopted_records"] == 0
    assert {k: v for k, v in fresh_report.items() if not k.endswith("_records")} == \
        {k: v for k, v in report.items() if not k.endswith("_records")}


def test_an_adopted_file_of_the_wrong_size_is_refused(tmp_path):
    from corpus_assets.domain.storage.layer_store import LayerIntegrityError, TableSpec
    import pyarrow as pa

    store = LayerStore(tmp_path)
    spec = {"t": TableSpec(pa.schema([("x", pa.int64())]))}
    with store.new_version("a", "p", spec, {}) as w:
        w.write("t", [{"x": 1}, {"x": 2}])
        v = w.commit()
    f = v.manifest["tables"]["t"]["files"][0]
    with store.new_version("a", "q", spec, {}) as w:
        with pytest.raises(LayerIntegrityError, match="bytes"):
            w.table("t").adopt(v.root / f["path"], rows=2, sha256=f["sha256"], size=f["bytes"] + 1)
    with store.new_version("a", "q", spec, {}) as w:
        w.table("t").adopt(v.root / f["path"], rows=2, sha256=f["sha256"], size=f["bytes"])
        w.write("t", [{"x": 3}])
        q = w.commit()
    assert q.read_table("t").column("x").to_pylist() == [1, 2, 3] and q.row_count("t") == 3
    assert len(q.manifest["tables"]["t"]["files"]) == 2  # the adopted file, then the new rows' own


POLICIES = {
    "atomic in order, split": PackingPolicy(seq_len=32, mode="atomic", overlength="split", boundary="mask"),
    "atomic best fit, drop": PackingPolicy(seq_len=32, mode="atomic", fit="best_fit", open_blocks=8, overlength="split",
                                           tail="drop"),
    "atomic bos, truncate, positions": PackingPolicy(seq_len=32, mode="atomic", boundary="bos", overlength="truncate",
                                                     reset_positions=True),
    "stream bos, drop": PackingPolicy(seq_len=32, mode="stream", boundary="bos", tail="drop"),
    "stream none": PackingPolicy(seq_len=32, mode="stream", boundary="none"),
}


@pytest.fixture(scope="module")
def packing_world(world, tmp_path_factory) -> Path:
    """The world with its token views and a mixture plan drawing records several times."""
    home = tmp_path_factory.mktemp("packing") / "home"
    store = _copy(world, home)
    views, _ = _views(store, Engine(), 256, reuse=False)
    spec = MixtureSpec(unit="documents", weights={"docs": 0.7, "chat": 0.3}, budget=500, replacement=True, seed=3)
    build_mixture_plan(store, RELEASE, spec, token_views=views, train_split="train")
    return home


def _pack(store: LayerStore, policy: PackingPolicy, engine: Engine, task_positions: int, positions: int = 512):
    return build_packed_shards(
        store, RELEASE, policy, ShardSpec(positions=positions), token_views=store.require_current(TOKEN_VIEWS, RELEASE),
        mixture_plan=store.require_current("mixture_plan", RELEASE), tokenizer_digest="tok-" + "ab" * 8,
        vocab_size=300, split_names=SPLIT_NAMES, bos_id=1, engine=engine, task_positions=task_positions)


@pytest.mark.parametrize("name", list(POLICIES))
def test_packed_shards_are_byte_identical_for_any_worker_count_and_range_size(packing_world, tmp_path, cluster, name):
    policy = POLICIES[name]
    results = []
    for label, engine, task_positions in (("serial, one range", Engine(), 1 << 30), ("serial, ranges of one shard", Engine(), 512),
                                          ("2 workers, one shard", cluster, 512), ("2 workers, 3 shards", cluster, 3 * 512)):
        store = _copy(packing_world, tmp_path / label.replace(" ", "_").replace(",", ""))
        version, report = _pack(store, policy, engine, task_positions)
        results.append((label, version, report, _tree(store.home / "shards"), _tree(version.root)))
    _, v0, r0, shards0, layer0 = results[0]
    train = r0["splits"]["train"]
    # many shard ranges, so the ranges (and their resumed packers) really are exercised
    assert train["shards"] >= 10 and train["samples"] == 500
    assert train["input_tokens"] == (train["content_tokens"] + train["dropped_tokens"] + train["truncated_tokens"]
                                     + train["quarantined_tokens"])
    for label, v, r, shards, layer in results[1:]:
        assert shards == shards0, label  # every .bin/.idx/sidecar/spans file and shards.json
        assert layer == layer0 and v.content_digest == v0.content_digest, label  # shards + decisions tables
        assert r == r0, label


def _samples(n: int, seed: int):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 110, n)
    lengths[::17] = 0  # empty samples are skipped and counted
    N = int(lengths.sum())
    ids = rng.integers(2, 300, N).astype(np.int32)
    mask = rng.integers(0, 2, N).astype(np.uint8)
    offs = np.stack([np.arange(N), np.arange(N) + 1], 1).astype(np.int32)
    offs[rng.random(N) < 0.05] = -1  # inserted tokens
    return lengths, ids, mask, offs, [f"rec-{i % (n // 2)}" for i in range(n)]


@pytest.mark.parametrize("policy", [
    PackingPolicy(seq_len=40, mode="stream", boundary="none", tail="drop"),
    PackingPolicy(seq_len=40, mode="stream", boundary="mask", reset_positions=True),
    PackingPolicy(seq_len=40, mode="atomic", overlength="quarantine", tail="drop"),
    PackingPolicy(seq_len=40, mode="atomic", fit="best_fit", open_blocks=16, overlength="split"),
    PackingPolicy(seq_len=40, mode="atomic", fit="one_per_block", boundary="bos", overlength="truncate", tail="drop"),
], ids=lambda p: f"{p.mode}-{p.fit}-{p.boundary}-{p.tail}")
def test_resumed_packers_over_block_ranges_rebuild_exactly_one_packers_blocks(policy):
    """The planning behind parallel packing: a packer resumed from the planned state before the
    first sample of a block range seals exactly the blocks of that range one packer over
    everything seals (arrays, spans, placed tokens), and the range stats add up to its stats."""
    lengths, ids, mask, offs, rids = _samples(600, 1)
    starts = np.concatenate([[0], np.cumsum(lengths)])

    def feed(packer, s0, stop=None):
        out = []
        for lo in range(s0, len(lengths), 45):
            hi = min(lo + 45, len(lengths))
            a, b = starts[lo], starts[hi]
            out.append(packer.add_arrays(ids[a:b], mask[a:b], offs[a:b], lengths[lo:hi], rids[lo:hi], None))
            if stop is not None and packer.emitted >= stop:
                return out
        return out + [packer.finish()]

    one = Packer(policy, bos_id=1)
    whole = PackedBlocks.concat(feed(one, 0))
    plan = plan_blocks(lengths, policy, bos_id=1, record_ids=rids)
    assert plan.blocks == len(whole)
    for span in (1, 4, 25):
        ranges = [(lo, min(lo + span, len(plan.first_sample))) for lo in range(0, len(plan.first_sample), span)]
        firsts = [int(plan.first_sample[lo:hi].min()) for lo, hi in ranges]
        states = dict(zip(sorted(set(firsts)), packer_states(lengths, policy, sorted(set(firsts)), bos_id=1)))
        parts, stats = [], plan.stats
        for k, ((lo, hi), s0) in enumerate(zip(ranges, firsts)):
            last = k == len(ranges) - 1
            top = 1 << 62 if last else hi
            mine = [block_window(p, lo, top, keep_dropped=last)
                    for p in feed(Packer.resume(policy, states[s0], bos_id=1), s0, None if last else hi)]
            for p in mine:
                stats = stats + p.stats
            parts += [p for p in mine if len(p)]
        rebuilt = PackedBlocks.concat(parts)
        for field in ("tokens", "loss_mask", "segment_ids", "position_ids"):
            assert np.array_equal(getattr(rebuilt, field), getattr(whole, field)), (span, field)
        assert rebuilt.spans.equals(whole.spans), span
        assert np.array_equal(rebuilt.placed_per_sample(len(lengths)), whole.placed_per_sample(len(lengths)))
        assert stats.as_dict() == whole.stats.as_dict(), span


def test_packer_states_are_the_placement_before_each_sample():
    lengths = np.array([5, 7, 3])
    with pytest.raises(ValueError, match="ascending"):
        packer_states(lengths, PackingPolicy(seq_len=8), [2, 1])
    states = packer_states(lengths, PackingPolicy(seq_len=8), [0, 1, 3])
    # in order: [5] then 7 does not fit -> block 0 sealed, [7] open; 3 does not fit -> [3] open
    assert [(s.sample, s.emitted, s.fills) for s in states] == [(0, 0, ()), (1, 0, (5,)), (3, 2, (3,))]


def _small_snapshots_world(home: Path, keys: list[str]) -> LayerStore:
    """Curated records of many small snapshots (5 records each, fewer than a row group), all kept
    in train, and the release's tokenizer."""
    store = LayerStore(home, rows_per_group=64)
    assignments = []
    for snap in keys:
        base = 10 * int(snap[11:13] + snap[14:18])  # from the key (day, hour, minute): ids never depend on the others
        records = [_record(snap, base + i) for i in range(5)]
        with store.new_version(CURATED_RECORDS, snap, CURATED_TABLES, {"test": snap}) as w:
            w.write("records", [record_to_row(r) for r in records])
            w.commit()
        assignments += [{"record_id": r.record_id, "source_id": r.source_id, "snapshot": snap, "kept": True,
                         "group_key": r.group_id, "u": 0.5, "split": "train"} for r in records]
    with store.new_version(SPLITS, RELEASE, SPLITS_TABLES, {"test": "splits"}) as w:
        w.write("assignments", assignments)
        splits = w.commit()
    if store.current("tokenizer", RELEASE) is None:
        spec = TokenizerSpec(path=TOKENIZER_JSON, special_tokens=["<|endoftext|>", "<|pad|>"], eos_token="<|endoftext|>")
        build_tokenizer(store, RELEASE, spec, splits=splits)
    return store


def test_small_snapshots_share_segments_and_a_new_capture_rebuilds_only_its_own(tmp_path):
    """Hourly captures are small: they share part files (about 16 snapshots a segment, cut where a
    key's hash says), so the file count does not follow the capture count, and a new capture
    changes only the segment it lands in — the others are adopted, the bytes are a fresh build's."""
    keys = [f"docs.202601{d:02d}T{h:02d}0000" for d in range(1, 5) for h in range(24)]  # 96 hourly captures
    store = _small_snapshots_world(tmp_path / "home", keys)
    first, _ = _views(store, Engine(), 64, reuse=False)
    segs = [e["snapshots"] for e in first.manifest["segments"]]
    assert [s for seg in segs for s in seg] == sorted(keys)  # every snapshot once, in order
    assert 1 < len(segs) < len(keys) // 4
    assert len(first.manifest["tables"]["views"]["files"]) == len(segs)
    # a new capture between two stored ones
    new = "docs.20260102T013000"
    store = _small_snapshots_world(tmp_path / "home", sorted(keys + [new]))
    second, report = _views(store, Engine(), 64)
    changed = [e for e in second.manifest["segments"] if new in e["snapshots"]]
    assert len(changed) == 1
    untouched = sum(e["records"] for e in second.manifest["segments"] if new not in e["snapshots"])
    assert report["adopted_records"] == untouched > 0
    assert {e["key"] for e in second.manifest["segments"]} - {e["key"] for e in first.manifest["segments"]} \
        == {changed[0]["key"]}
    fresh, _ = _views(store, Engine(), 64, reuse=False)
    assert fresh.content_digest == second.content_digest and _tree(fresh.root) == _tree(second.root)
