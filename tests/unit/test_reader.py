"""Streaming reader (pure): every block exactly once per epoch, seeded reproducible order, bounded
buffer of references, resume equivalence at every batch cut (shard boundaries, drain, epoch
boundaries) and mid-fill / mid-batch after a failure, JSON state, tampered shards refused."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from corpus_assets.domain.pack.shard_reader import ShardStreamReader, shards_from_manifest, torch_iterable_dataset
from corpus_assets.domain.pack.shards import ShardIntegrityError, write_shard_manifest, write_shards

T = 4
TOKENIZER = "tok-test"


def _write_set(directory, prefix, first_id, n_blocks, shard_positions):
    """Blocks whose token 0 is a global block id (so a batch says which blocks it holds)."""
    ids = np.arange(first_id, first_id + n_blocks)
    tokens = np.stack([ids, ids % 7, ids % 11, np.full_like(ids, 3)], axis=1)
    loss = (tokens % 2).astype(np.uint8)
    seg = np.ones_like(tokens, dtype=np.int32)
    seg[:, -1] = 0
    spans = pa.table({"block": pa.array(np.arange(n_blocks), pa.int64()), "start": [0] * n_blocks,
                      "end": [T - 1] * n_blocks, "source": ["s"] * n_blocks})
    return write_shards(directory, prefix, tokens=tokens, loss_mask=loss, segment_ids=seg, spans=spans,
                        seq_len=T, shard_positions=shard_positions, tokenizer_digest=TOKENIZER, vocab_size=5000,
                        position_ids=np.tile(np.arange(T, dtype=np.int32), (n_blocks, 1)))


@pytest.fixture
def shards(tmp_path):
    """Shards of unequal sizes: 5 shards of 3 blocks + 1 of 2 (17 blocks), then 2 shards of 5 + 1 of 1."""
    d = tmp_path / "shards"
    metas = _write_set(d, "a", 0, 17, shard_positions=3 * T + 2) + _write_set(d, "b", 17, 11, shard_positions=5 * T)
    write_shard_manifest(d, [m for m in metas if m["name"].startswith("a")])
    return [(d, m) for m in metas]


N_BLOCKS = 28


def reader(shards, **kw):
    args = dict(batch_size=3, buffer_size=5, seed=1234, epochs=2)
    args.update(kw)
    return ShardStreamReader(shards, **args)


def ids(batch):
    return batch.tokens[:, 0].astype(int).tolist()


def run(r):
    return [(b.epoch, ids(b)) for b in r]


def test_manifest_gives_the_shard_list(shards):
    listed = shards_from_manifest(shards[0][0])
    assert [m["name"] for _, m in listed] == [m["name"] for _, m in shards if m["name"].startswith("a")]


@pytest.mark.parametrize("buffer_size", [1, 2, 5, 13, 28, 100])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_every_block_exactly_once_per_epoch(shards, buffer_size, batch_size):
    r = reader(shards, batch_size=batch_size, buffer_size=buffer_size, epochs=3)
    out = run(r)
    for e in range(3):
        seen = [i for ep, b in out if ep == e for i in b]
        assert sorted(seen) == list(range(N_BLOCKS)), f"epoch {e}"
        sizes = [len(b) for ep, b in out if ep == e]
        assert all(s == batch_size for s in sizes[:-1]) and 1 <= sizes[-1] <= batch_size  # no batch spans epochs
    assert [ep for ep, _ in out] == sorted(ep for ep, _ in out)
    with pytest.raises(StopIteration):
        next(r)


def test_batches_carry_matching_sidecars_and_refs(shards):
    by_name = {m["name"]: m for _, m in shards}
    for b in reader(shards):
        assert b.tokens.dtype == np.uint16 and b.loss_mask.dtype == np.uint8 and b.segment_ids.dtype == np.int32
        np.testing.assert_array_equal(b.loss_mask, b.tokens % 2)
        np.testing.assert_array_equal(b.segment_ids, np.tile([1, 1, 1, 0], (len(b.tokens), 1)))
        np.testing.assert_array_equal(b.position_ids, np.tile(np.arange(T), (len(b.tokens), 1)))
        for (s, k), tok in zip(b.refs.tolist(), ids(b)):
            meta = shards[s][1]
            assert by_name[meta["name"]]["first_block"] + k + (17 if meta["name"].startswith("b") else 0) == tok


def _as_int32_sidecars(directory, meta):
    """Rewrite a shard's segment / position id files as int32 with metadata to match: a shard as
    written before the sidecar dtypes were narrowed to uint16."""
    import hashlib

    meta = json.loads(json.dumps(meta))
    for role in ("segment_ids", "position_ids"):
        info = meta["files"][role]
        path = directory / info["path"]
        data = np.fromfile(path, dtype="<u2").astype("<i4").tobytes()
        path.write_bytes(data)
        info.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        meta["sidecar_dtypes"][role] = "<i4"
    return meta


def test_shards_with_int32_sidecars_read_the_same_batches(shards):
    """Shard sets written before segment and position ids were stored as uint16 read back the same
    (int32) batches, verified against their own recorded digests."""
    narrow = [(b.epoch, b.tokens.tolist(), b.segment_ids.tolist(), b.position_ids.tolist()) for b in reader(shards)]
    assert all(m["sidecar_dtypes"]["segment_ids"] == "<u2" for _, m in shards)
    wide = [(d, _as_int32_sidecars(d, m)) for d, m in shards]
    got = [(b.epoch, b.tokens.tolist(), b.segment_ids.tolist(), b.position_ids.tolist()) for b in reader(wide)]
    assert got == narrow
    b = next(iter(reader(wide)))
    assert b.segment_ids.dtype == np.int32 and b.position_ids.dtype == np.int32


def test_mixed_sidecar_dtypes_are_refused(shards):
    d, m = shards[0]
    with pytest.raises(ValueError, match="segment_ids dtype"):
        reader([(d, _as_int32_sidecars(d, m))] + shards[1:])


def test_drop_last(shards):
    out = run(reader(shards, batch_size=8, drop_last=True, epochs=2))
    assert [len(b) for _, b in out] == [8, 8, 8] * 2


def test_order_is_seeded_and_shuffled(shards):
    a, b = run(reader(shards)), run(reader(shards))
    assert a == b
    c = run(reader(shards, seed=99))
    assert c != a
    flat = [i for _, bb in a if True for i in bb]
    assert flat[:N_BLOCKS] != list(range(N_BLOCKS))  # shuffled
    assert flat[:N_BLOCKS] != flat[N_BLOCKS:]  # a different order in epoch 1
    seq = run(reader(shards, buffer_size=1, shuffle_shards=False, epochs=1))
    assert [i for _, bb in seq for i in bb] == list(range(N_BLOCKS))  # no shuffle at all: input order


def test_shard_order_is_a_permutation_per_epoch(shards):
    """With buffer 1 the stream is the shard order itself: whole shards in order, permuted per epoch."""
    r = reader(shards, buffer_size=1, batch_size=1, epochs=3)
    refs = [tuple(b.refs[0].tolist()) for b in r]
    orders = []
    for e in range(3):
        ep = refs[e * N_BLOCKS : (e + 1) * N_BLOCKS]
        order = [s for i, (s, _) in enumerate(ep) if i == 0 or ep[i - 1][0] != s]
        assert sorted(order) == list(range(len(shards)))  # each shard visited once, as one run
        for s in order:
            assert [k for ss, k in ep if ss == s] == list(range(shards[s][1]["blocks"]))  # blocks in order
        orders.append(order)
    assert orders[0] != list(range(len(shards)))
    assert len({tuple(o) for o in orders}) > 1


def test_buffer_is_bounded_and_holds_references_only(shards):
    r = reader(shards, buffer_size=5, epochs=2)
    for _ in r:
        assert r.buffer_len() <= 5
        st = r.state_dict()
        assert len(st["buffer"]) <= 5 and st["pending"] == []
        assert all(isinstance(x, int) for ref in st["buffer"] for x in ref)
    assert len(json.dumps(r.state_dict())) < 2000


def _reference(shards, **kw):
    return run(reader(shards, **kw))


def _resume(shards, state, **kw):
    r = reader(shards, **kw)
    r.load_state_dict(json.loads(json.dumps(state)))
    return run(r)


@pytest.mark.parametrize(
    "kw",
    [
        dict(batch_size=3, buffer_size=5, epochs=2),
        dict(batch_size=4, buffer_size=28, epochs=3),  # the buffer holds a whole epoch
        dict(batch_size=5, buffer_size=1, epochs=2),
        dict(batch_size=2, buffer_size=7, epochs=2, drop_last=True),
    ],
)
def test_resume_at_every_batch_cut(shards, kw):
    ref = _reference(shards, **kw)
    phases, epochs = set(), set()
    for k in range(len(ref) + 1):
        r = reader(shards, **kw)
        head = [(b.epoch, ids(b)) for _, b in zip(range(k), r)]
        state = r.state_dict()
        phases.add(state["phase"])
        epochs.add(state["epoch"])
        assert head == ref[:k]
        assert _resume(shards, state, **kw) == ref[k:], f"cut after batch {k}"
    # the cuts covered: mid-stream, the drain (when the buffer outlasts a batch), later epochs
    assert "stream" in phases and epochs >= {0, 1}
    if kw["buffer_size"] > kw["batch_size"]:
        assert "drain" in phases
    # some batch straddles a shard boundary, so some cut lies right after a mid-batch shard change
    straddle = [b for b in reader(shards, **kw) if len(set(b.refs[:, 0].tolist())) > 1]
    assert straddle
    # after the end: the state says done and resumes to nothing
    r = reader(shards, **kw)
    list(r)
    assert r.state_dict()["phase"] == "done" and _resume(shards, r.state_dict(), **kw) == []


def test_resume_forever_stream_across_epochs(shards):
    r = reader(shards, epochs=None, batch_size=5, buffer_size=6)
    first = [ids(next(r)) for _ in range(40)]  # ~7 epochs
    assert r.epoch >= 6
    again = reader(shards, epochs=None, batch_size=5, buffer_size=6)
    cuts = {}
    for k in range(40):
        cuts[k] = json.dumps(again.state_dict())
        assert ids(next(again)) == first[k]
    for k in (0, 5, 6, 17, 33, 39):
        rr = reader(shards, epochs=None, batch_size=5, buffer_size=6)
        rr.load_state_dict(json.loads(cuts[k]))
        assert [ids(next(rr)) for _ in range(40 - k)] == first[k:]


def test_state_is_plain_json(shards):
    r = reader(shards)
    next(r)
    st = r.state_dict()
    assert json.loads(json.dumps(st)) == st
    assert set(st["rng"]) == {"bit_generator", "state", "inc", "has_uint32", "uinteger"}
    assert isinstance(st["rng"]["state"], str)  # 128-bit ints kept exact for any JSON reader


def test_state_from_another_configuration_is_refused(shards):
    st = reader(shards).state_dict()
    with pytest.raises(ValueError, match="seed=1234.*seed=1"):
        reader(shards, seed=1).load_state_dict(st)
    with pytest.raises(ValueError, match="buffer_size"):
        reader(shards, buffer_size=6).load_state_dict(st)
    with pytest.raises(ValueError, match="different shard list"):
        reader(shards[:-1]).load_state_dict(st)
    bad = json.loads(json.dumps(st))
    bad["buffer"] = [[0, 99]]
    with pytest.raises(ValueError, match="not a block"):
        reader(shards).load_state_dict(bad)


def test_mixed_shard_sets_are_refused(shards, tmp_path):
    other = write_shards(tmp_path / "o", "o", tokens=np.zeros((1, 8), np.int32), loss_mask=np.zeros((1, 8), np.uint8),
                         segment_ids=np.zeros((1, 8), np.int32), spans=pa.table({"block": pa.array([0], pa.int64())}),
                         seq_len=8, shard_positions=8, tokenizer_digest=TOKENIZER, vocab_size=100)
    with pytest.raises(ValueError, match="seq_len"):
        ShardStreamReader(shards + [(tmp_path / "o", other[0])], batch_size=2, buffer_size=2, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        reader(shards, batch_size=0)
    with pytest.raises(ValueError, match="never yield"):
        reader(shards, batch_size=N_BLOCKS + 1, drop_last=True, epochs=None)
    with pytest.raises(ValueError, match="empty"):
        ShardStreamReader([], batch_size=2, buffer_size=2, seed=0)


def _tamper(directory, meta, role="bin"):
    p = directory / meta["files"][role]["path"]
    data = p.read_bytes()
    p.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    return lambda: p.write_bytes(data)


def test_tampered_shard_is_refused_before_any_of_its_blocks(shards):
    d, m = shards[4]
    _tamper(d, m, "segment_ids")
    r = reader(shards, buffer_size=1, batch_size=1, shuffle_shards=False)
    got = []
    with pytest.raises(ShardIntegrityError, match=r"shard 'a-00004'.*segment_ids file .*a-00004\.segment_ids\.bin"):
        for b in r:
            got += ids(b)
    assert got == list(range(11))  # shards 0-3 (block 11 still in the 1-slot buffer); nothing of shard 4


@pytest.mark.parametrize(
    "kw, where",
    [
        (dict(batch_size=3, buffer_size=20, epochs=2), "fill"),  # fails while the buffer fills
        (dict(batch_size=4, buffer_size=2, epochs=2), "mid-batch"),  # fails with a partly built batch
    ],
)
def test_failure_mid_fill_or_mid_batch_then_resume(shards, kw, where):
    ref = _reference(shards, **kw)
    r = reader(shards, **kw)
    bad_dir, bad_meta = shards[r._order[3]]  # the 4th shard of epoch 0
    repair = _tamper(bad_dir, bad_meta)
    got = []
    with pytest.raises(ShardIntegrityError):
        for b in r:
            got.append((b.epoch, ids(b)))
    st = r.state_dict()
    if where == "fill":
        assert got == [] and 0 < len(st["buffer"]) < kw["buffer_size"]
    else:
        assert 0 < len(st["pending"]) < kw["batch_size"]
    with pytest.raises(ShardIntegrityError):  # still refused, state unchanged
        next(r)
    assert r.state_dict() == st
    repair()
    assert got + _resume(shards, st, **kw) == ref  # a fresh reader from the saved state
    assert got + run(r) == ref  # the same reader, once the shard is repaired


def test_restored_buffer_refs_are_verified_before_reading(shards):
    kw = dict(batch_size=2, buffer_size=10, epochs=1)
    r = reader(shards, **kw)
    next(r)
    st = r.state_dict()
    s = st["buffer"][0][0]
    _tamper(*shards[s])
    fresh = reader(shards, **kw)
    fresh.load_state_dict(st)
    with pytest.raises(ShardIntegrityError, match=shards[s][1]["name"]):
        list(fresh)


def test_module_does_not_import_torch():
    code = "import corpus_assets.domain.pack.shard_reader, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_torch_adapter(shards):
    torch = pytest.importorskip("torch", reason="torch is not installed (optional): adapter not tested")
    from torch.utils.data import DataLoader

    ds = torch_iterable_dataset(reader(shards, epochs=1))
    items = list(DataLoader(ds, batch_size=None, num_workers=0))
    assert items[0]["tokens"].dtype == torch.int64 and items[0]["loss_mask"].dtype == torch.bool
    flat = Counter(int(x) for it in items for x in it["tokens"][:, 0])
    assert sorted(flat) == list(range(N_BLOCKS)) and set(flat.values()) == {1}
    ds2 = torch_iterable_dataset(reader(shards, epochs=1))
    ds2.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    assert list(ds2) == []
