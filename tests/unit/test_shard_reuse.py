"""Rebuilds that keep shards (``pack/shard_reuse.py``): under ``packing.order: append`` the samples
of the previous build keep their order, and a rebuild after an increment hard-links every shard
before the new samples instead of packing it — writing exactly the shard set (every byte, the set
digest, the layer version) that packing every shard of the same order writes."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from corpus_assets.domain.canonical.records import DocumentPayload, Record, SCHEMA_VERSIONS, record_digest, record_to_row
from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.curate.curated_layer import CURATED_TABLES
from corpus_assets.domain.ingest.sources_config import Governance
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import CURATED_RECORDS, SPLITS, TOKEN_VIEWS
from corpus_assets.domain.pack.mixture import MixtureSpec
from corpus_assets.domain.pack.mixture_layer import build_mixture_plan
from corpus_assets.domain.pack.packing import PackingPolicy, plan_blocks
from corpus_assets.domain.pack.shard_reuse import AppendOrderError, shard_keys
from corpus_assets.domain.pack.shards_layer import PackingSection, ShardSpec, build_packed_shards, resolve_packing
from corpus_assets.domain.pack.view_spool import SplitViews
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.tokens.splits_layer import SPLITS_TABLES
from corpus_assets.domain.tokens.token_views import TokenViewPolicy
from corpus_assets.domain.tokens.token_views_layer import build_token_views
from corpus_assets.domain.tokens.tokenizer import TokenizerSpec
from corpus_assets.domain.tokens.tokenizer_layer import build_tokenizer

TOKENIZER_JSON = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "tiny_bpe.json"
RELEASE = "r1"
SPLIT_NAMES = ["train", "validation", "test"]
GOV = Governance(license="CC0-1.0", rights_evidence="https://example.org/rights")
WORDS = "a rebuild keeps the shards it did not change and packs only what follows the first new sample".split()
POLICIES = {
    "atomic in order": PackingPolicy(seq_len=32, mode="atomic", overlength="split"),
    "stream": PackingPolicy(seq_len=32, mode="stream", boundary="none", tail="drop"),
    "best fit": PackingPolicy(seq_len=32, mode="atomic", fit="best_fit", open_blocks=4, overlength="truncate"),
}


def _record(snapshot: str, i: int) -> Record:
    n = 3 + (i * 13) % 40 + (60 if i % 31 == 0 else 0)  # a few longer than a block
    text = " ".join(WORDS[(i * 5 + k) % len(WORDS)] for k in range(n)) + f" ({i})."
    r = Record(record_id=f"docs:{i:04d}", source_id="docs", snapshot=snapshot, item_id=str(i), schema_type="document",
               schema_version=SCHEMA_VERSIONS["document"], adapter="test", adapter_version="1",
               domain="prose", lang="en", group_id=f"g{i}", governance=GOV, payload=DocumentPayload(text=text))
    r.record_sha256 = record_digest(r)
    return r


def _split(i: int) -> str:
    return SPLIT_NAMES[0 if i % 5 else 1 + (i // 5) % 2]


class World:
    """A release's layers up to token views, rebuilt as records arrive or are deleted."""

    def __init__(self, home: Path) -> None:
        self.store = LayerStore(home, rows_per_group=64)
        self.snapshots: dict[str, list[int]] = {}
        self.dropped: set[int] = set()

    def capture(self, snapshot: str, ids: range) -> None:
        with self.store.new_version(CURATED_RECORDS, snapshot, CURATED_TABLES, {"test": snapshot}) as w:
            w.write("records", [record_to_row(_record(snapshot, i)) for i in ids])
            w.commit()
        self.snapshots[snapshot] = list(ids)

    def release_layers(self, mixture=None, view_policy: TokenViewPolicy = TokenViewPolicy(max_tokens=400)) -> None:
        rows = [{"record_id": f"docs:{i:04d}", "source_id": "docs", "snapshot": snap, "kept": i not in self.dropped,
                 "group_key": f"g{i}", "u": 0.5, "split": _split(i)}
                for snap, ids in self.snapshots.items() for i in ids]
        with self.store.new_version(SPLITS, RELEASE, SPLITS_TABLES, {"test": len(rows), "dropped": sorted(self.dropped)}) as w:
            w.write("assignments", rows)
            splits = w.commit()
        if self.store.current("tokenizer", RELEASE) is None:  # frozen after the first build
            spec = TokenizerSpec(path=TOKENIZER_JSON, special_tokens=["<|endoftext|>", "<|pad|>"], eos_token="<|endoftext|>")
            build_tokenizer(self.store, RELEASE, spec, splits=splits)
        views, _ = build_token_views(self.store, RELEASE, view_policy, splits=splits,
                                     tokenizer=self.store.require_current("tokenizer", RELEASE), engine=Engine())
        build_mixture_plan(self.store, RELEASE, mixture, token_views=views, train_split="train")


def _pack(store: LayerStore, policy: PackingPolicy, previous, order: str = "append", engine: Engine | None = None,
          log=lambda _m: None, reuse_tails: bool = True):
    return build_packed_shards(
        store, RELEASE, policy, ShardSpec(positions=4 * policy.seq_len), token_views=store.require_current(TOKEN_VIEWS, RELEASE),
        mixture_plan=store.require_current("mixture_plan", RELEASE), tokenizer_digest="tok-" + "cd" * 8, vocab_size=300,
        split_names=SPLIT_NAMES, bos_id=None, engine=engine or Engine(), task_positions=8 * policy.seq_len,
        order=order, previous=previous, log=log, reuse_tails=reuse_tails)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _order(version, split: str) -> list[str]:
    t = version.read_table(DECISIONS_TABLE, columns=["split", "record_id", "item_index"])
    t = t.filter(pc.equal(t.column("split"), split))
    return t.take(pc.sort_indices(t.column("item_index"))).column("record_id").to_pylist()


def _spool_line(lines: list[str]) -> str:
    """What the spool said, from the line that plans the packing."""
    return next("token views spooled:" + m.split("token views spooled:", 1)[1] for m in lines if "token views spooled:" in m)


def _from_tails(spooled: str) -> int:
    """Records the spool took from the previous build's tails, from its log line."""
    return int(spooled.split("(")[-1].split(" records from the previous build's tails")[0])


def _rebuild_both_ways(world: World, tmp: Path, label: str, policy: PackingPolicy):
    """Pack the world's current layers against its current packed_shards version twice: keeping
    shards and taking spooled tokens from the previous build's tails (in the world's own store)
    and, in a copy whose earlier shard sets are gone, packing every shard from tokens read from
    token_views only. Returns (kept version, report)."""
    ref_home = tmp / f"{label}-reference"
    shutil.copytree(world.store.home, ref_home)
    shutil.rmtree(ref_home / "shards")  # nothing to keep: every shard is packed
    ref = LayerStore(ref_home, rows_per_group=64)
    v_ref, r_ref = _pack(ref, policy, ref.current("packed_shards", RELEASE), reuse_tails=False)
    lines: list[str] = []
    v, r = _pack(world.store, policy, world.store.current("packed_shards", RELEASE), log=lines.append)
    spooled = _spool_line(lines)
    if sum(r["kept_shards"].values()):  # what a kept shard holds is not even read from the token views
        done, of = (int(x) for x in spooled.split("train ")[1].split(" records")[0].split("/"))
        assert done < of, spooled
    # the views the previous build's last shards packed come from its tails, not from token_views
    assert _from_tails(spooled) > 0, spooled
    assert r_ref["kept_shards"] == {s: 0 for s in SPLIT_NAMES}
    assert _files(world.store.home / r["shard_set"]) == _files(ref_home / r_ref["shard_set"]), label
    assert r["shard_set_digest"] == r_ref["shard_set_digest"] and v.content_digest == v_ref.content_digest, label
    assert {k: x for k, x in r.items() if k != "kept_shards"} == {k: x for k, x in r_ref.items() if k != "kept_shards"}
    return v, r


@pytest.mark.parametrize("name", list(POLICIES))
def test_an_increment_keeps_the_shards_before_its_samples_and_writes_what_packing_everything_writes(tmp_path, name):
    policy = POLICIES[name]
    world = World(tmp_path / "home")
    world.capture("docs.20260101T000000", range(0, 300))
    world.release_layers()
    v1, r1 = _pack(world.store, policy, None)
    assert r1["kept_shards"] == {s: 0 for s in SPLIT_NAMES}
    train1 = _order(v1, "train")
    assert r1["splits"]["train"]["shards"] >= 10  # many shards, so there is something to keep

    world.capture("docs.20260102T000000", range(300, 309))  # +3%
    world.release_layers()
    v2, r2 = _rebuild_both_ways(world, tmp_path, "increment", policy)
    train2 = _order(v2, "train")
    assert train2[:len(train1)] == train1  # the earlier samples keep their order; the new ones follow
    new = train2[len(train1):]
    assert new and all(int(r.split(":")[1]) >= 300 for r in new)
    if policy.fit == "best_fit":  # open blocks take later samples: no prefix bounds a shard
        assert sum(r2["kept_shards"].values()) == 0
    else:
        for split in SPLIT_NAMES:  # every shard of the first build but its last (which the new samples fill)
            before = r1["splits"][split]["shards"]
            assert before - 1 <= r2["kept_shards"][split] <= min(before, r2["splits"][split]["shards"] - 1), split

    # a deletion in the middle: the shards before it are kept, the order of the rest is unchanged
    gone = int(train1[len(train1) // 2].split(":")[1])
    world.dropped.add(gone)
    world.release_layers()
    v3, r3 = _rebuild_both_ways(world, tmp_path, "deletion", policy)
    assert _order(v3, "train") == [r for r in train2 if r != f"docs:{gone:04d}"]
    if policy.fit != "best_fit":
        kept = r3["kept_shards"]["train"]
        assert 1 <= kept < r2["splits"]["train"]["shards"] // 2 + 1
    # the kept shards are the earlier build's files, linked: nothing of them was written again
    if sum(r3["kept_shards"].values()):
        old = world.store.home / r2["shard_set"] / "train" / "train-00000.bin"
        new = world.store.home / r3["shard_set"] / "train" / "train-00000.bin"
        assert old.stat().st_ino == new.stat().st_ino


def test_the_plan_order_keeps_a_shard_only_while_the_samples_up_to_it_are_unchanged(tmp_path):
    """Without append the new records land inside the training permutation: the shards before the
    first of them are kept, none after it, and the set is still what packing everything writes."""
    policy = POLICIES["atomic in order"]
    world = World(tmp_path / "home")
    world.capture("docs.20260101T000000", range(0, 300))
    world.release_layers()
    v1, _ = _pack(world.store, policy, None, order="plan")
    world.capture("docs.20260102T000000", range(300, 310))
    world.release_layers()
    ref_home = tmp_path / "ref"
    shutil.copytree(world.store.home, ref_home)
    shutil.rmtree(ref_home / "shards")
    ref = LayerStore(ref_home, rows_per_group=64)
    _, r_ref = _pack(ref, policy, ref.current("packed_shards", RELEASE), order="plan")
    v2, r = _pack(world.store, policy, world.store.current("packed_shards", RELEASE), order="plan")
    assert r["shard_set_digest"] == r_ref["shard_set_digest"]
    before, after = _order(v1, "train"), _order(v2, "train")
    first_new = next(i for i, rid in enumerate(after) if int(rid.split(":")[1]) >= 300)
    assert after[:first_new] == before[:first_new] and after != before[:len(after)]
    kept = r["kept_shards"]["train"]
    assert kept < r["splits"]["train"]["shards"] - 1
    # every kept shard's samples come before the first new one: the kept blocks hold no later sample
    spans = [world.store.home / r["shard_set"] / "train" / f"train-{k:05d}.spans.parquet" for k in range(kept)]
    held = {rid for p in spans for rid in pq.read_table(p, columns=["record_id"]).column(0).to_pylist() if rid}
    assert held <= set(after[:first_new])


def test_append_refuses_a_plan_that_reads_a_record_twice(tmp_path):
    world = World(tmp_path / "home")
    world.capture("docs.20260101T000000", range(0, 120))
    world.release_layers(MixtureSpec(unit="documents", weights={"docs": 1.0}, budget=200, replacement=True, seed=1))
    with pytest.raises(AppendOrderError, match="more than once"):
        _pack(world.store, POLICIES["atomic in order"], None)


def test_order_is_a_spec_field_and_never_part_of_the_packing_policy():
    plain, _ = resolve_packing({"seq_len": 64}, lambda _t: None, "r.yaml")
    appended, _ = resolve_packing({"seq_len": 64, "order": "append"}, lambda _t: None, "r.yaml")
    assert plain == appended  # same packer, same policy version: only the layer's order differs
    with pytest.raises(ValueError, match="order"):
        PackingSection.model_validate({"order": "shuffled"})


def _spool(tmp: Path, ids: list[str], lengths: list[int]) -> SplitViews:
    sv = SplitViews(tmp)
    n = len(ids)
    cols = {"record_id": pa.array(ids, pa.string()), "variant": pa.nulls(n, pa.string()),
            "source_id": pa.array(["docs"] * n, pa.string()), "domain": pa.array(["prose"] * n, pa.string()),
            "cache_key": pa.array([hashlib.sha256(i.encode()).hexdigest() for i in ids], pa.string())}
    sv._add_records(cols, np.asarray(lengths, np.int64))
    return sv


def test_a_shard_key_covers_exactly_the_samples_that_can_reach_the_shard(tmp_path):
    policy = POLICIES["atomic in order"]
    lengths = [10] * 64  # three samples per block of 32, four blocks per shard
    base = [f"docs:{i:03d}" for i in range(64)]

    def keys(ids, lens=lengths):
        sv = _spool(tmp_path / str(len(list(tmp_path.iterdir()))), ids, lens)
        rows = np.arange(len(ids), dtype=np.int64)
        return shard_keys(sv, rows, plan_blocks(np.asarray(lens), policy), 4, {"split": "train"})

    k0 = keys(base)
    assert len(k0) == 6 and len(set(k0)) == 6 and keys(base) == k0
    changed = base[:40] + ["docs:new"] + base[41:]  # sample 40 is in block 13, shard 3
    k1 = keys(changed)
    assert k1[:3] == k0[:3] and all(a != b for a, b in zip(k1[3:], k0[3:]))
    longer = lengths[:40] + [11] + lengths[41:]  # same ids, one view one token longer
    assert keys(base, longer)[:3] == k0[:3] and keys(base, longer)[3] != k0[3]
    # fields are length-prefixed: ids that concatenate alike still give different keys
    assert keys(["a;b", "c"] + base[2:]) != keys(["a", ";bc"] + base[2:])


def test_a_view_whose_cache_key_changed_is_not_taken_from_the_tails(tmp_path):
    """The tails hold tokens by view identity: after a view-policy change every record has a new
    cache key, so the rebuild reads every token from token_views again."""
    policy = POLICIES["atomic in order"]
    world = World(tmp_path / "home")
    world.capture("docs.20260101T000000", range(0, 300))
    world.release_layers()
    v1, _ = _pack(world.store, policy, None)
    tails = v1.read_table("tails")
    assert tails.num_rows and set(tails.column("split").to_pylist()) == set(SPLIT_NAMES)
    world.release_layers(view_policy=TokenViewPolicy(max_tokens=399))  # same tokens, new cache keys
    lines: list[str] = []
    _pack(world.store, policy, world.store.current("packed_shards", RELEASE), log=lines.append)
    spooled = _spool_line(lines)
    assert _from_tails(spooled) == 0, spooled


def test_tails_kept_as_list_columns_by_older_code_are_not_read(tmp_path):
    """A previous build whose tails table has the list columns of older code: the spool reads
    those views from token_views (it never guesses at another layout)."""
    from corpus_assets.domain.pack.view_tail import TAILS_TABLE, PreviousTails
    from corpus_assets.domain.storage.layer_store import TableSpec

    old = pa.schema([("split", pa.string()), ("record_id", pa.string()), ("variant", pa.string()),
                     ("cache_key", pa.string()), ("n_tokens", pa.int32()), ("input_ids", pa.list_(pa.int32())),
                     ("loss_mask", pa.list_(pa.uint8())), ("offsets", pa.list_(pa.int32()))])
    store = LayerStore(tmp_path)
    with store.new_version("packed_shards", RELEASE, {TAILS_TABLE: TableSpec(old)}, {"old": True}) as w:
        w.write(TAILS_TABLE, [{"split": "train", "record_id": "docs:0001", "variant": "text", "cache_key": "k",
                               "n_tokens": 1, "input_ids": [5], "loss_mask": [1], "offsets": [0, 1]}])
        previous = w.commit()
    assert PreviousTails.of(previous) is None


def test_tail_token_bytes_give_back_each_views_values():
    """The tails' byte columns: any run of rows (a slice, a filter, an empty view) gives back the
    values of those views, concatenated in row order."""
    from corpus_assets.domain.pack.view_tail import _as_bytes, _from_bytes

    rng = np.random.default_rng(18)
    lengths = np.array([3, 0, 7, 1, 0, 5])
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    ids = rng.integers(0, 2**31 - 1, bounds[-1]).astype(np.int32)
    col = _as_bytes(ids, "<i4", bounds)
    views = [ids[bounds[i]:bounds[i + 1]].tolist() for i in range(lengths.size)]
    assert _from_bytes(col, "<i4").tolist() == ids.tolist()
    for lo, hi in ((1, 4), (2, 3), (4, 5), (0, 0)):
        assert _from_bytes(col.slice(lo, hi - lo), "<i4").tolist() == sum(views[lo:hi], [])
    keep = [True, False, False, True, True, True]
    assert _from_bytes(col.filter(pa.array(keep)), "<i4").tolist() == sum((v for v, k in zip(views, keep) if k), [])
