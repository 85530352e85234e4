"""Shards (pure): whole blocks only (S=18, T=8 -> 2 blocks), S < T refused, Megatron .idx/.bin read
back by an independent reader (and by megatron-core when installed), aligned sidecars, spans
re-based per shard, token counts, byte determinism, atomic 0644 files, tamper detection."""

from __future__ import annotations

import json
import os
import stat
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from corpus_assets.domain.pack.shards import (
    MANIFEST_NAME,
    SHARD_FORMAT,
    ShardIntegrityError,
    ShardWriter,
    load_shard_manifest,
    open_shard,
    shard_capacity,
    token_dtype,
    verify_shard,
    with_record_labels,
    write_shard_manifest,
    write_shards,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from megatron_format_reader import read_indexed_dataset  # noqa: E402

TOKENIZER = "tok-sha256-" + "ab" * 16


def pack(doc_lengths, seq_len, vocab=1000, seed=0, sources=("web", "code")):
    """A small atomic packer (Algorithm 18.2 shape): documents never split, tail padded with
    segment 0 / loss 0; one span per document; position ids reset per document."""
    rng = np.random.default_rng(seed)
    blocks_t, blocks_l, blocks_s, blocks_p = [], [], [], []
    rows = {"block": [], "start": [], "end": [], "record_id": [], "source": []}
    cur_t, cur_s, cur_p, cur_l, seg = [], [], [], [], 0

    def seal():
        pad = seq_len - len(cur_t)
        blocks_t.append(cur_t + [0] * pad)
        blocks_s.append(cur_s + [0] * pad)
        blocks_p.append(cur_p + [0] * pad)
        blocks_l.append(cur_l + [0] * pad)

    for d, L in enumerate(doc_lengths):
        assert 1 <= L <= seq_len
        if len(cur_t) + L > seq_len:
            seal()
            cur_t, cur_s, cur_p, cur_l, seg = [], [], [], [], 0
        seg += 1
        rows["block"].append(len(blocks_t))
        rows["start"].append(len(cur_t))
        rows["end"].append(len(cur_t) + L)
        rows["record_id"].append(f"r{d}")
        rows["source"].append(sources[d % len(sources)])
        cur_t += rng.integers(1, vocab, L).tolist()
        cur_s += [seg] * L
        cur_p += list(range(L))
        cur_l += [1] * (L - 1) + [0]
    if cur_t:
        seal()
    return (
        np.array(blocks_t, dtype=np.int64),
        np.array(blocks_l, dtype=np.uint8),
        np.array(blocks_s, dtype=np.int32),
        np.array(blocks_p, dtype=np.int32),
        pa.table(rows, schema=pa.schema([("block", pa.int64()), ("start", pa.int32()), ("end", pa.int32()),
                                         ("record_id", pa.string()), ("source", pa.string())])),
    )


def write(tmp, tokens, loss, seg, spans, *, seq_len=8, shard_positions=18, vocab=1000, **kw):
    return write_shards(
        tmp, "train", tokens=tokens, loss_mask=loss, segment_ids=seg, spans=spans, seq_len=seq_len,
        shard_positions=shard_positions, tokenizer_digest=TOKENIZER, vocab_size=vocab, **kw,
    )


@pytest.fixture
def packed():
    return pack([3, 4, 5, 8, 2, 2, 2, 7, 1, 6, 3, 3], seq_len=8)


def test_capacity_is_floor_s_over_t_and_s_below_t_is_refused():
    assert shard_capacity(18, 8) == 2
    assert shard_capacity(8, 8) == 1
    assert shard_capacity(2048 * 1000 + 5, 2048) == 1000
    with pytest.raises(ValueError, match=r"shard_positions \(S=7\).*seq_len \(T=8\)"):
        shard_capacity(7, 8)


def test_s_below_t_refused_by_write_shards(tmp_path, packed):
    t, l, s, _, spans = packed
    with pytest.raises(ValueError, match="shard_positions"):
        write(tmp_path, t, l, s, spans, shard_positions=7)
    assert not list(tmp_path.iterdir())


def test_token_dtype_threshold():
    assert token_dtype(50257) == np.dtype("<u2")
    assert token_dtype(65535) == np.dtype("<u2")
    assert token_dtype(65536) == np.dtype("<i4")
    assert token_dtype(151_936) == np.dtype("<i4")


def test_s18_t8_shards_hold_two_whole_blocks(tmp_path, packed):
    t, l, s, _, spans = packed
    n = len(t)
    metas = write(tmp_path, t, l, s, spans)
    assert [m["blocks"] for m in metas] == [2] * (n // 2) + ([1] if n % 2 else [])
    assert [m["first_block"] for m in metas] == list(range(0, n, 2))
    for m in metas:
        assert m["tokens"] == m["blocks"] * 8 <= 18
        assert m["seq_len"] == 8 and m["shard_positions"] == 18
        assert m["dtype"] == "uint16" and m["tokenizer"] == TOKENIZER and m["format"] == SHARD_FORMAT
        assert os.path.getsize(tmp_path / m["files"]["bin"]["path"]) == m["blocks"] * 8 * 2
    assert sum(m["blocks"] for m in metas) == n


def test_independent_reader_reads_back_exactly_the_input(tmp_path, packed):
    t, l, s, _, spans = packed
    metas = write(tmp_path, t, l, s, spans)
    got = []
    for m in metas:
        ds = read_indexed_dataset(tmp_path / m["name"])
        assert ds.dtype == np.dtype("<u2")
        assert len(ds) == m["blocks"]
        assert ds.lengths.tolist() == [8] * m["blocks"]
        assert ds.document_indices.tolist() == list(range(m["blocks"] + 1))  # one document per block
        got += [ds.sequence(i).astype(np.int64) for i in range(len(ds))]
    np.testing.assert_array_equal(np.stack(got), t)


def test_int32_tokens_for_large_vocab(tmp_path):
    t, l, s, _, spans = pack([5, 8, 3], seq_len=8, vocab=200_000, seed=3)
    t[0, 0] = 199_999
    metas = write(tmp_path, t, l, s, spans, vocab=200_000)
    assert metas[0]["dtype"] == "int32"
    ds = read_indexed_dataset(tmp_path / metas[0]["name"])
    assert ds.dtype == np.dtype("<i4") and int(ds.sequence(0)[0]) == 199_999


def test_sidecars_align_with_tokens_and_spans_are_rebased(tmp_path, packed):
    t, l, s, p, spans = packed
    metas = write(tmp_path, t, l, s, spans, position_ids=p)
    for m in metas:
        lo, hi = m["first_block"], m["first_block"] + m["blocks"]
        raw_lm = np.fromfile(tmp_path / f"{m['name']}.loss_mask.bin", dtype=np.uint8).reshape(-1, 8)
        assert m["sidecar_dtypes"] == {"loss_mask": "<u1", "segment_ids": "<u2", "position_ids": "<u2"}
        raw_seg = np.fromfile(tmp_path / f"{m['name']}.segment_ids.bin", dtype="<u2").reshape(-1, 8)
        raw_pos = np.fromfile(tmp_path / f"{m['name']}.position_ids.bin", dtype="<u2").reshape(-1, 8)
        np.testing.assert_array_equal(raw_lm, l[lo:hi])
        np.testing.assert_array_equal(raw_seg, s[lo:hi])
        np.testing.assert_array_equal(raw_pos, p[lo:hi])
        v = open_shard(tmp_path, m)
        assert v.n_blocks == m["blocks"]
        for i in range(v.n_blocks):
            bt, bl, bs = v.block(i)
            np.testing.assert_array_equal(bt, t[lo + i])
            np.testing.assert_array_equal(bl, l[lo + i])
            np.testing.assert_array_equal(bs, s[lo + i])
        np.testing.assert_array_equal(v.position_ids, p[lo:hi])
        with pytest.raises(IndexError):
            v.block(v.n_blocks)
        sp = v.spans()
        expected = spans.filter(pa.compute.and_(pa.compute.greater_equal(spans["block"], lo),
                                                pa.compute.less(spans["block"], hi)))
        assert sp["block"].to_pylist() == [b - lo for b in expected["block"].to_pylist()]
        assert sp["record_id"].to_pylist() == expected["record_id"].to_pylist()
        # every span covers exactly the positions of its segment
        for b, st, en in zip(sp["block"].to_pylist(), sp["start"].to_pylist(), sp["end"].to_pylist()):
            seg_ids = v.segment_ids[b, st:en]
            assert len(set(seg_ids.tolist())) == 1 and seg_ids[0] != 0
        v.close()


def test_counts_content_loss_and_sources(tmp_path, packed):
    t, l, s, _, spans = packed
    metas = write(tmp_path, t, l, s, spans)
    for m in metas:
        lo, hi = m["first_block"], m["first_block"] + m["blocks"]
        assert m["content_tokens"] == int((s[lo:hi] != 0).sum())
        assert m["loss_tokens"] == int(l[lo:hi].sum())
        assert sum(m["token_counts"]["source"].values()) == m["content_tokens"]
        assert "domain" not in m["token_counts"]  # no such column in the spans
    path = write_shard_manifest(tmp_path, metas)
    man = load_shard_manifest(tmp_path)
    assert path.name == MANIFEST_NAME
    assert man["blocks"] == len(t) and man["tokens"] == len(t) * 8
    widths = (spans["end"].to_numpy() - spans["start"].to_numpy())
    src = spans["source"].to_pylist()
    assert man["token_counts"]["source"] == {
        k: int(sum(w for w, x in zip(widths, src) if x == k)) for k in sorted(set(src))
    }
    assert man["shards"] == metas


def test_null_labels_not_counted_and_labels_need_start_end(tmp_path):
    t, l, s, _, spans = pack([3, 4], seq_len=8)
    spans = spans.set_column(4, "source", pa.array(["web", None]))
    metas = write(tmp_path / "a", t, l, s, spans)
    assert metas[0]["token_counts"]["source"] == {"web": 3}
    with pytest.raises(ValueError, match="start"):
        write(tmp_path / "b", t, l, s, spans.drop_columns(["start"]))


def test_byte_determinism(tmp_path, packed):
    t, l, s, p, spans = packed
    a = write(tmp_path / "a", t, l, s, spans, position_ids=p)
    b = write(tmp_path / "b", t, l, s, spans, position_ids=p)
    assert a == b
    write_shard_manifest(tmp_path / "a", a)
    write_shard_manifest(tmp_path / "b", b)
    files_a = sorted(f.name for f in (tmp_path / "a").iterdir())
    assert files_a == sorted(f.name for f in (tmp_path / "b").iterdir())
    for name in files_a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # rewriting in place gives the same bytes and leaves no temporary files
    c = write(tmp_path / "a", t, l, s, spans, position_ids=p)
    assert c == a
    assert not [f for f in (tmp_path / "a").iterdir() if f.name.startswith(".")]


def test_files_are_0644_and_json_is_plain(tmp_path, packed):
    t, l, s, _, spans = packed
    metas = write(tmp_path, t, l, s, spans)
    write_shard_manifest(tmp_path, metas)
    for f in tmp_path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f.name
    json.loads((tmp_path / MANIFEST_NAME).read_text())


def test_bad_inputs_are_refused(tmp_path, packed):
    t, l, s, _, spans = packed
    with pytest.raises(ValueError, match="tokens .*outside"):
        write(tmp_path, t, l, s, spans, vocab=5)
    with pytest.raises(ValueError, match="loss_mask"):
        write(tmp_path, t, l * 2 + 1, s, spans)
    with pytest.raises(ValueError, match=r"segment_ids must have shape"):
        write(tmp_path, t, l, s[:, :4], spans)
    with pytest.raises(ValueError, match="tokens must have shape"):
        write(tmp_path, t, l, s, spans, seq_len=4)
    with pytest.raises(ValueError, match="'block'"):
        write(tmp_path, t, l, s, spans.drop_columns(["block"]))
    bad = spans.set_column(0, "block", pa.array([len(t)] * len(spans), pa.int64()))
    with pytest.raises(ValueError, match="outside the"):
        write(tmp_path, t, l, s, bad)
    with pytest.raises(ValueError, match="name_prefix"):
        write_shards(tmp_path, "a/b", tokens=t, loss_mask=l, segment_ids=s, spans=spans, seq_len=8,
                     shard_positions=18, tokenizer_digest=TOKENIZER, vocab_size=1000)


def test_chunked_writes_with_global_block_ids_match_one_write(tmp_path, packed):
    """A chunk of a larger set (spans with global block ids, as ``PackedBlocks.first_block`` gives
    them) written with ``first_block`` / ``first_shard_index`` = the same bytes as one write."""
    import pyarrow.compute as pc

    t, l, s, _, spans = packed
    whole = write(tmp_path / "whole", t, l, s, spans)
    first = spans.filter(pc.less(spans["block"], 4))
    rest = spans.filter(pc.greater_equal(spans["block"], 4))  # block ids stay global: 4, 5, ...
    a = write(tmp_path / "chunks", t[:4], l[:4], s[:4], first)
    b = write(tmp_path / "chunks", t[4:], l[4:], s[4:], rest, first_block=4, first_shard_index=len(a))
    assert a + b == whole  # names, first_block, counts and every file digest
    with pytest.raises(ValueError, match=r"outside the .* input blocks \[5, "):
        write(tmp_path / "bad", t[4:], l[4:], s[4:], rest, first_block=5)


@pytest.mark.parametrize("chunks", [[12], [1, 1, 10], [3, 4, 5], [5, 0, 7], [11, 1]])
def test_streaming_writer_matches_one_write(tmp_path, chunks):
    import pyarrow.compute as pc

    t, l, s, p, spans = pack([3, 4, 5, 8, 2, 2, 2, 7, 1, 6, 3, 3, 8, 8, 5, 4, 4, 6, 7], seq_len=8)
    n = len(t)
    assert n >= 12
    chunks = chunks[:-1] + [n - sum(chunks[:-1])]
    whole = write(tmp_path / "whole", t, l, s, spans, position_ids=p, shard_positions=3 * 8 + 5)
    w = ShardWriter(tmp_path / "stream", "train", seq_len=8, shard_positions=3 * 8 + 5,
                    tokenizer_digest=TOKENIZER, vocab_size=1000)
    lo = 0
    written = []
    for c in chunks:
        hi = lo + c
        sel = spans.filter(pc.and_(pc.greater_equal(spans["block"], lo), pc.less(spans["block"], hi)))
        written += w.add(tokens=t[lo:hi], loss_mask=l[lo:hi], segment_ids=s[lo:hi], position_ids=p[lo:hi], spans=sel)
        assert w._pending() < 3  # never more than one partial shard waits
        lo = hi
    assert w.finish() == whole
    assert written == whole[: len(written)] and len(written) >= len(whole) - 1
    with pytest.raises(ValueError, match="after finish"):
        w.add(tokens=t[:1], loss_mask=l[:1], segment_ids=s[:1], spans=spans.slice(0, 0))


def test_streaming_writer_refuses_a_gap(tmp_path, packed):
    t, l, s, _, spans = packed
    w = ShardWriter(tmp_path, "train", seq_len=8, shard_positions=18, tokenizer_digest=TOKENIZER, vocab_size=1000)
    w.add(tokens=t[:3], loss_mask=l[:3], segment_ids=s[:3], spans=spans.filter(pa.compute.less(spans["block"], 3)))
    with pytest.raises(ValueError, match="expected 3"):
        w.add(tokens=t[4:], loss_mask=l[4:], segment_ids=s[4:], spans=spans.slice(0, 0), first_block=4)


def test_record_labels_join_by_record_id(tmp_path):
    t, l, s, _, spans = pack([3, 4, 2], seq_len=8)
    spans = spans.drop_columns(["source"])
    pad = pa.table({"block": pa.array([0], pa.int64()), "start": pa.array([7], pa.int32()),
                    "end": pa.array([8], pa.int32()), "record_id": pa.array([None], pa.string())})
    spans = pa.concat_tables([spans, pad])
    labelled = with_record_labels(spans, "source", {"r0": "web", "r1": "code", "r2": "web"})
    assert labelled["source"].to_pylist() == ["web", "code", "web", None]
    metas = write(tmp_path, t, l, s, labelled)
    assert metas[0]["token_counts"] == {"source": {"code": 4, "web": 5}}  # the pad row is not counted
    with pytest.raises(ValueError, match=r"record\(s\) \['r2'\]"):
        with_record_labels(spans, "source", {"r0": "web", "r1": "code"})


def test_no_blocks_no_shards(tmp_path):
    empty = np.zeros((0, 8), dtype=np.int32)
    spans = pa.table({"block": pa.array([], pa.int64())})
    assert write(tmp_path, empty, empty, empty, spans) == []


@pytest.mark.parametrize("role", ["bin", "idx", "loss_mask", "segment_ids", "spans"])
def test_tamper_is_detected_naming_the_file(tmp_path, packed, role):
    t, l, s, _, spans = packed
    metas = write(tmp_path, t, l, s, spans)
    m = metas[1]
    verify_shard(tmp_path, m)
    path = tmp_path / m["files"][role]["path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ShardIntegrityError, match=rf"{role} file .*{path.name}.* sha256 mismatch"):
        verify_shard(tmp_path, m)
    with pytest.raises(ShardIntegrityError, match=path.name):
        open_shard(tmp_path, m)
    verify_shard(tmp_path, metas[0])  # the other shards are untouched


def test_missing_and_truncated_files(tmp_path, packed):
    t, l, s, _, spans = packed
    m = write(tmp_path, t, l, s, spans)[0]
    seg = tmp_path / m["files"]["segment_ids"]["path"]
    seg.write_bytes(seg.read_bytes()[:-4])
    with pytest.raises(ShardIntegrityError, match=rf"{seg.name} has \d+ bytes"):
        open_shard(tmp_path, m, verify=False)  # sizes are checked even without hashing
    seg.unlink()
    with pytest.raises(ShardIntegrityError, match=rf"segment_ids file .*{seg.name} is missing"):
        verify_shard(tmp_path, m)


def test_index_that_disagrees_with_metadata_is_refused(tmp_path, packed):
    t, l, s, _, spans = packed
    metas = write(tmp_path, t, l, s, spans)
    wrong = dict(metas[0], seq_len=4, blocks=4)  # same bytes, a different reading of them
    wrong["files"] = dict(wrong["files"])
    with pytest.raises(ShardIntegrityError, match=r"index file .*train-00000\.idx"):
        open_shard(tmp_path, wrong, verify=False)


def _megatron_indexed_dataset():
    """megatron-core's module, imported here (it pulls in torch: seconds) or the test is skipped.
    torch and megatron-core are optional, not project dependencies."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.datasets.indexed_dataset as mod
    except Exception as exc:  # ImportError, or a torch that fails to load
        pytest.skip(
            f"megatron.core is not importable ({type(exc).__name__}: {exc}); "
            "`pip install torch megatron-core` to run this compatibility test"
        )
    return mod


@pytest.mark.parametrize("vocab", [1000, 200_000])
def test_megatron_core_indexed_dataset_reads_our_shards(tmp_path, vocab):
    megatron_mod = _megatron_indexed_dataset()
    t, l, s, _, spans = pack([3, 4, 5, 8, 2, 2, 2, 7, 1, 6, 3, 3], seq_len=8, vocab=vocab, seed=7)
    metas = write(tmp_path, t, l, s, spans, vocab=vocab)
    got = []
    for m in metas:
        ds = megatron_mod.IndexedDataset(str(tmp_path / m["name"]))
        assert len(ds) == m["blocks"]
        assert ds.document_indices.tolist() == list(range(m["blocks"] + 1))
        assert ds.sequence_lengths.tolist() == [8] * m["blocks"]
        got += [np.asarray(ds[i]).astype(np.int64) for i in range(len(ds))]
        whole = ds[0 : len(ds)]  # contiguous slice read
        assert [x.tolist() for x in whole] == t[m["first_block"] : m["first_block"] + m["blocks"]].tolist()
        del ds
    np.testing.assert_array_equal(np.stack(got), t)


def test_segment_and_position_ids_outside_a_block_are_refused(tmp_path, packed):
    """Segment ids are 1..k <= seq_len within a block and position ids < seq_len: what uint16
    sidecars hold; anything else is a clear error, never a wrapped value on disk."""
    t, l, s, p, spans = packed
    bad = s.copy()
    bad[0, 0] = 9  # seq_len is 8
    with pytest.raises(ValueError, match=r"segment_ids has values in \[0, 9\], outside the allowed \[0, 8\]"):
        write(tmp_path / "a", t, l, bad, spans)
    bad_pos = p.copy()
    bad_pos[0, 0] = -1
    with pytest.raises(ValueError, match=r"position_ids has values in \[-1, .*outside the allowed \[0, 7\]"):
        write(tmp_path / "b", t, l, s, spans, position_ids=bad_pos)
