"""Sequence packing (issue 6): the seeds' arithmetic (hard-coded acceptance facts), boundaries and
loss masks, positions, over-length policies and accounting, best fit, provenance spans and their
coverage check, chunking invariance, determinism and policy errors."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import ValidationError

from corpus_assets.domain.pack import packing
from corpus_assets.domain.pack.packing import (
    REASON_TOO_LONG,
    PackedBlocks,
    Packer,
    PackingPolicy,
    Sample,
    coverage_check,
    iter_packed,
    pack,
    pack_arrays,
    packing_policy_version,
)

EOS = 3
BOS = 2
PAD = 0


def _samples(lengths, *, eos: bool = False, prompt: int = 0, prefix: str = "r") -> list[Sample]:
    """Sample i has ids 1000*(i+1) + 0..L-1 (distinct across samples), loss 1 except the first
    ``prompt`` tokens, char offsets (j, j+1); with ``eos`` the last token is an inserted EOS."""
    out = []
    for i, L in enumerate(lengths):
        ids = (np.arange(L) + 1000 * (i + 1)).astype(np.int32)
        mask = np.ones(L, np.uint8)
        mask[:prompt] = 0
        offs = np.stack([np.arange(L), np.arange(L) + 1], axis=1).astype(np.int32)
        if eos and L:
            ids[-1] = EOS
            offs[-1] = -1
        out.append(Sample(f"{prefix}{i}", None, ids, mask, offs))
    return out


def _fills(pb: PackedBlocks) -> list[int]:
    return (pb.segment_ids != 0).sum(axis=1).tolist()


# --- the seeds' worked examples (acceptance facts) ----------------------------------------------


def test_seed000_lengths_5_4_3_T8_atomic_in_order():
    # 000 §18.6: (5,4,3), T=8, in order -> blocks of 5 and 7, 4 padding, 12/16 = 75 %
    pb = pack(_samples([5, 4, 3]), PackingPolicy(seq_len=8, mode="atomic", fit="in_order"))
    assert pb.stats.blocks == 2
    assert _fills(pb) == [5, 7]
    assert pb.stats.padding == 4
    assert pb.stats.utilization == 0.75
    assert pb.stats.dropped_tokens == 0 and pb.stats.data_loss_rate == 0.0


def test_seed000_lengths_5_4_3_T8_stream_tail_dropped():
    # the same as a stream with the tail dropped: 1 block, 4 tokens dropped, data loss 1/3
    pb = pack(_samples([5, 4, 3]), PackingPolicy(seq_len=8, mode="stream", tail="drop", boundary="none"))
    assert pb.stats.blocks == 1
    assert pb.stats.dropped_tokens == 4
    assert pb.stats.tail_drop_rate == pytest.approx(1 / 3)
    assert pb.stats.data_loss_rate == pytest.approx(1 / 3)
    assert pb.stats.utilization == 1.0  # of the blocks made: only utilization would hide the loss
    # the dropped pieces are named: the last token of r1 and all of r2
    assert pb.stats.dropped == [("r1", None, 3, 4), ("r2", None, 0, 3)]
    # a dropped piece is reported once, its EOS span included
    eos = pack(_samples([5, 4, 3], eos=True), PackingPolicy(seq_len=8, mode="stream", tail="drop", boundary="none"))
    assert eos.stats.dropped == [("r1", None, 3, 4), ("r2", None, 0, 3)]


def test_seed000_three_samples_of_6_T10_need_3_atomic_blocks():
    # lower bound ceil(18/10) = 2, but no two fit together: 3 blocks
    for fit in ("in_order", "best_fit"):
        pb = pack(_samples([6, 6, 6]), PackingPolicy(seq_len=10, fit=fit))
        assert pb.stats.blocks == 3
    assert pack(_samples([6, 6, 6]), PackingPolicy(seq_len=10, mode="stream", boundary="none")).stats.blocks == 2


def test_seed004_naive_padding_vs_packing_vs_stream_T16():
    T = 16
    # naive padding: one document per block, padded to 16 -> 28 / 64 = 43.75 %
    naive = pack(_samples([5, 8, 3, 12]), PackingPolicy(seq_len=T, fit="one_per_block"))
    assert naive.stats.blocks == 4 and naive.stats.positions == 64
    assert naive.stats.utilization == 0.4375
    # greedy packing: [5+8+3 = 16] + [12] -> 28 / 32 = 87.5 %
    packed = pack(_samples([5, 8, 3, 12]), PackingPolicy(seq_len=T, fit="in_order"))
    assert packed.stats.blocks == 2 and _fills(packed) == [16, 12]
    assert packed.stats.utilization == 0.875
    # continuous stream with one EOS per document: 6 + 9 + 4 + 13 = 32 -> 2 full blocks, 100 %
    docs = _samples([6, 9, 4, 13], eos=True)
    for tail in ("drop", "pad"):
        s = pack(docs, PackingPolicy(seq_len=T, mode="stream", tail=tail, boundary="none", pad_id=PAD))
        assert s.stats.blocks == 2 and s.stats.utilization == 1.0
        assert s.stats.padding == 0 and s.stats.dropped_tokens == 0
        assert int((s.tokens == EOS).sum()) == 4  # exactly one EOS per document, never filler
        assert s.stats.inserted_tokens == 4


def _seed000_s18_8(tail: str) -> PackedBlocks:
    # 900 uses of length 100 and 300 of length 400 = 210000 tokens, in the order S S S L x 300;
    # the first 35 tokens of every sample are prompt (masked): 1200 * 35 = 42000 masked tokens.
    lengths = [100, 100, 100, 400] * 300
    samples = _samples(lengths, prompt=35)
    assert sum(lengths) == 210000 and sum(int((s.loss_mask == 0).sum()) for s in samples) == 42000
    return pack(samples, PackingPolicy(seq_len=1024, mode="stream", tail=tail, boundary="none"))


def test_seed000_s18_8_stream_T1024_pad_and_drop():
    pad = _seed000_s18_8("pad")
    assert pad.stats.blocks == 206 and pad.stats.positions == 210944
    assert pad.stats.padding == 944
    assert pad.stats.utilization == pytest.approx(0.9955, abs=5e-5)
    drop = _seed000_s18_8("drop")
    assert drop.stats.blocks == 205
    assert drop.stats.content_tokens == 209920
    assert drop.stats.dropped_tokens == 80


def test_seed000_s18_8_label_rate_with_42000_prompt_tokens_masked():
    pb = _seed000_s18_8("pad")
    bound = 168000 / 210944  # the seed's upper bound, ~79.64 %
    assert bound == pytest.approx(0.7964, abs=5e-5)
    assert pb.stats.label_rate <= bound
    # What this implementation gives: position 0 of a block is never a target, so the label count is
    # 168000 minus the blocks whose first position holds a non-prompt token. Block b starts at stream
    # position 1024*b; in the 700-token period S S S L that is a non-prompt token (offset >= 35 in its
    # sample) for 162 of the 206 blocks -> 167838 labels, 167838 / 210944 ~ 79.57 %.
    assert pb.stats.label_tokens == 167838
    assert pb.stats.label_rate == pytest.approx(167838 / 210944)
    # cross-check of the 162 from the stream itself, without the packer
    stream_mask = np.concatenate([s.loss_mask for s in _samples([100, 100, 100, 400] * 300, prompt=35)])
    assert int(stream_mask[np.arange(206) * 1024].sum()) == 162
    assert int(pb.loss_mask.sum()) == pb.stats.label_tokens


# --- boundaries, loss mask, positions -----------------------------------------------------------

ATOMIC_BOUNDARIES = [("mask", None), ("bos", BOS)]


def _first_token_positions(pb: PackedBlocks) -> list[tuple[int, int, str]]:
    """(row, t, record_id) of every span that starts a record's view (src_token_start == 0)."""
    out = []
    for r in pb.spans.to_pylist():
        if r["src_token_start"] == 0:
            out.append((r["block"] - pb.first_block, r["start"], r["record_id"]))
    return out


@pytest.mark.parametrize("boundary,bos_id", ATOMIC_BOUNDARIES)
@pytest.mark.parametrize("fit", ["in_order", "best_fit"])
def test_atomic_no_position_predicts_the_first_token_of_another_sample(boundary, bos_id, fit):
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 30, size=200).tolist()
    pb = pack(_samples(lengths), PackingPolicy(seq_len=32, boundary=boundary, fit=fit), bos_id=bos_id)
    seg, lm = pb.segment_ids, pb.loss_mask
    assert not lm[:, 0].any()  # position 0 of a block is never a target
    b, t = np.nonzero(lm[:, 1:])
    t = t + 1
    assert (seg[b, t - 1] == seg[b, t]).all() and (seg[b, t] != 0).all()  # every target predicted in its own sample
    firsts = _first_token_positions(pb)
    assert len(firsts) == len(lengths)
    for row, t0, _ in firsts:
        if boundary == "mask":
            assert lm[row, t0] == 0
        else:  # predicted from its own BOS, which is never a target itself
            assert t0 >= 1 and pb.tokens[row, t0 - 1] == BOS and seg[row, t0 - 1] == seg[row, t0]
            assert lm[row, t0] == 1 and lm[row, t0 - 1] == 0
    assert pb.stats.bos_tokens == (len(lengths) if boundary == "bos" else 0)


def test_stream_boundary_none_allows_cross_document_prediction_mask_does_not():
    docs = _samples([5, 6, 7, 3], eos=True)
    none = pack(docs, PackingPolicy(seq_len=8, mode="stream", boundary="none"))
    b, t = np.nonzero(none.loss_mask[:, 1:])
    assert (none.segment_ids[b, t] != none.segment_ids[b, t + 1]).any()  # EOS -> next document's first token
    masked = pack(docs, PackingPolicy(seq_len=8, mode="stream", boundary="mask"))
    b, t = np.nonzero(masked.loss_mask[:, 1:])
    assert (masked.segment_ids[b, t] == masked.segment_ids[b, t + 1]).all()
    assert masked.stats.content_tokens == none.stats.content_tokens == 21


def test_padding_is_never_a_target_and_holds_pad_id():
    lengths = [5, 9, 2, 14, 7, 1, 3]
    for mode, tail, boundary, fit in itertools.product(
        ("atomic", "stream"), ("pad", "drop"), ("mask", "bos", "none"), ("in_order", "best_fit", "one_per_block")
    ):
        if (mode == "atomic" and boundary == "none") or (mode == "stream" and fit != "in_order"):
            continue
        pol = PackingPolicy(seq_len=16, mode=mode, tail=tail, boundary=boundary, fit=fit, pad_id=9)
        pb = pack(_samples(lengths), pol, bos_id=BOS)
        pad = pb.segment_ids == 0
        assert not pb.loss_mask[pad].any()
        assert (pb.tokens[pad] == 9).all()
        assert pb.stats.padding == int(pad.sum())
        assert pb.stats.positions == pb.stats.content_tokens + pb.stats.bos_tokens + pb.stats.padding
        ok, detail = coverage_check(pb)
        assert ok, detail


def test_segment_and_position_ids():
    pol = PackingPolicy(seq_len=8, boundary="bos", reset_positions=True)
    pb = pack(_samples([3, 2, 4]), pol, bos_id=BOS)
    # block 0: BOS a a a BOS b b | pad ; block 1: BOS c c c c | pad pad pad
    assert pb.segment_ids.tolist() == [[1, 1, 1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 0, 0, 0]]
    assert pb.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0], [0, 1, 2, 3, 4, 0, 1, 2]]
    assert pb.tokens[:, 0].tolist() == [BOS, BOS] and pb.tokens[0, 4] == BOS
    plain = pack(_samples([3, 2, 4]), pol.model_copy(update={"reset_positions": False}), bos_id=BOS)
    assert plain.position_ids.tolist() == [list(range(8))] * 2
    # stream: a piece continued from the previous block is a new segment restarting at position 0
    s = pack(_samples([6, 5]), PackingPolicy(seq_len=8, mode="stream", boundary="mask", reset_positions=True))
    assert s.segment_ids.tolist() == [[1, 1, 1, 1, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0, 0, 0]]
    assert s.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1], [0, 1, 2, 0, 1, 2, 3, 4]]
    assert s.loss_mask.tolist() == [[0, 1, 1, 1, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0, 0, 0]]


# --- over-length and accounting -----------------------------------------------------------------


def _accounting_holds(st) -> bool:
    return st.input_tokens == st.content_tokens + st.dropped_tokens + st.truncated_tokens + st.quarantined_tokens


def test_overlength_quarantine_is_reported_with_reason_code():
    pb = pack(_samples([4, 12, 3]), PackingPolicy(seq_len=8, overlength="quarantine"))
    assert pb.stats.quarantined == [("r1", None, REASON_TOO_LONG, 12)]
    assert REASON_TOO_LONG == "packing.too_long"
    assert pb.stats.quarantined_tokens == 12 and pb.stats.content_tokens == 7
    assert "r1" not in pb.spans.column("record_id").to_pylist()
    assert _accounting_holds(pb.stats)
    assert pb.stats.data_loss_rate == pytest.approx(12 / 19)


def test_overlength_truncate_keeps_the_first_tokens():
    pb = pack(_samples([4, 12, 3]), PackingPolicy(seq_len=8, overlength="truncate"))
    assert pb.stats.truncated == [("r1", None, 8, 4)] and pb.stats.truncated_tokens == 4
    row = [r for r in pb.spans.to_pylist() if r["record_id"] == "r1"]
    assert [(r["src_token_start"], r["src_token_end"]) for r in row] == [(0, 8)]
    assert _accounting_holds(pb.stats)
    # with a BOS the capacity is T - 1
    pb = pack(_samples([12]), PackingPolicy(seq_len=8, overlength="truncate", boundary="bos"), bos_id=BOS)
    assert pb.stats.truncated == [("r0", None, 7, 5)]
    assert _accounting_holds(pb.stats)


def test_overlength_split_makes_consecutive_atomic_pieces():
    s = _samples([20])
    pb = pack(s, PackingPolicy(seq_len=8, overlength="split", boundary="mask"))
    assert pb.stats.split_samples == 1 and pb.stats.blocks == 3
    rows = pb.spans.filter(pc.invert(pb.spans.column("pad"))).to_pylist()
    assert [(r["src_token_start"], r["src_token_end"]) for r in rows] == [(0, 8), (8, 16), (16, 20)]
    assert pb.tokens[2, :4].tolist() == s[0].input_ids[16:].tolist()
    assert pb.stats.content_tokens == 20 and _accounting_holds(pb.stats)
    bos = pack(s, PackingPolicy(seq_len=8, overlength="split", boundary="bos"), bos_id=BOS)
    assert bos.stats.blocks == 3 and bos.stats.bos_tokens == 3 and _fills(bos) == [8, 8, 7]


@pytest.mark.parametrize("overlength", ["truncate", "split", "quarantine"])
@pytest.mark.parametrize("mode,boundary,fit", [
    ("atomic", "mask", "in_order"), ("atomic", "bos", "best_fit"), ("atomic", "mask", "one_per_block"),
    ("stream", "none", "in_order"), ("stream", "bos", "in_order"),
])  # fmt: skip
@pytest.mark.parametrize("tail", ["pad", "drop"])
def test_accounting_identity(overlength, mode, boundary, fit, tail):
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 70, size=300).tolist()  # zeros and over-length included
    pol = PackingPolicy(seq_len=32, mode=mode, boundary=boundary, fit=fit, tail=tail, overlength=overlength)
    pb = pack(_samples(lengths), pol, bos_id=BOS, chunk_tokens=500)
    st = pb.stats
    assert st.input_tokens == sum(lengths) and st.input_samples == 300
    assert st.empty_samples == lengths.count(0)
    assert _accounting_holds(st)
    assert st.positions == st.content_tokens + st.bos_tokens + st.padding
    assert st.label_tokens == int(pb.loss_mask.sum())
    assert st.dropped_tokens == sum(b - a for _, _, a, b in st.dropped)
    assert st.quarantined_tokens == sum(q[3] for q in st.quarantined)
    assert st.truncated_tokens == sum(t[3] for t in st.truncated)
    ok, detail = coverage_check(pb)
    assert ok, detail
    # what reached the blocks, per input sample (the packing stage's decisions are built from it):
    # equal to the view-token spans of each sample, and what is missing is exactly the dropped tail
    placed = pb.placed_per_sample(len(lengths))
    assert placed.sum() == st.content_tokens
    views = pb.spans.filter(pc.is_valid(pb.spans.column("src_token_start")))
    from_spans = np.zeros(len(lengths), np.int64)
    for rid, a, b in zip(views["record_id"].to_pylist(), views["start"].to_numpy(), views["end"].to_numpy()):
        from_spans[int(rid[1:])] += b - a
    assert placed.tolist() == from_spans.tolist()
    cap = 32 - (1 if boundary == "bos" else 0)
    over = mode == "atomic"
    kept = np.array([0 if over and overlength == "quarantine" and n > cap else min(n, cap) if over and overlength == "truncate" else n
                     for n in lengths])
    assert (placed <= kept).all() and int((kept - placed).sum()) == st.dropped_tokens


# --- best fit -----------------------------------------------------------------------------------


def test_best_fit_beats_in_order_on_a_crafted_example():
    lengths = [6, 5, 4, 3, 2]
    in_order = pack(_samples(lengths), PackingPolicy(seq_len=10, fit="in_order"))
    best = pack(_samples(lengths), PackingPolicy(seq_len=10, fit="best_fit"))
    assert in_order.stats.blocks == 3 and best.stats.blocks == 2
    assert best.stats.utilization == 1.0
    # 6 -> A; 5 -> B; 4 -> A (room 4 < 5); 3 -> B; 2 -> B. Ties go to the earliest block.
    assert [r["record_id"] for r in best.spans.to_pylist()] == ["r0", "r2", "r1", "r3", "r4"]
    tie = pack(_samples([5, 5, 5, 3, 4]), PackingPolicy(seq_len=8, fit="best_fit", tail="pad"))
    # 5 -> A, 5 -> B, 5 -> C; 3: A, B, C all have room 3 -> A (earliest)
    assert tie.spans.to_pylist()[1]["record_id"] == "r3" and tie.spans.to_pylist()[1]["block"] == 0


def test_best_fit_is_deterministic_never_worse_and_bounded():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 200, size=3000).tolist()
    samples = _samples(lengths)
    pol = PackingPolicy(seq_len=256, fit="best_fit", open_blocks=8)
    a, b = pack(samples, pol), pack(samples, pol, chunk_tokens=1000)
    _assert_same(a, b)
    in_order = pack(samples, PackingPolicy(seq_len=256))
    assert a.stats.blocks <= in_order.stats.blocks
    # open_blocks=1 is exactly Algorithm 18.2
    _assert_same(pack(samples, PackingPolicy(seq_len=256, fit="best_fit", open_blocks=1)), in_order, same_version=False)
    # the packer never holds more than open_blocks blocks
    packer = Packer(pol, chunk_tokens=500)
    for i in range(0, len(samples), 100):
        packer.add(samples[i : i + 100])
        assert packer.open_blocks <= 8


@pytest.mark.skipif(packing._numba is None, reason="numba not installed")
def test_numba_best_fit_equals_python():
    rng = np.random.default_rng(5)
    samples = _samples(rng.integers(1, 100, size=2000).tolist())
    pol = PackingPolicy(seq_len=128, fit="best_fit", open_blocks=5, boundary="bos")
    try:
        packing.use_numba(False)
        py = pack(samples, pol, bos_id=BOS, chunk_tokens=3000)
    finally:
        packing.use_numba(True)
    _assert_same(py, pack(samples, pol, bos_id=BOS, chunk_tokens=3000))


# --- provenance spans ---------------------------------------------------------------------------


def _assert_provenance(pb: PackedBlocks, samples: list[Sample], bos_id=None) -> None:
    """Every non-pad span maps back to its view: tokens, chars, inserted flags; BOS spans hold BOS."""
    by_id = {s.record_id: s for s in samples}
    for r in pb.spans.to_pylist():
        row, a, b = r["block"] - pb.first_block, r["start"], r["end"]
        if r["pad"]:
            assert r["record_id"] is None and r["src_token_start"] is None and r["char_start"] is None
            continue
        s = by_id[r["record_id"]]
        if r["src_token_start"] is None:  # packer BOS
            assert r["inserted"] and b - a == 1 and pb.tokens[row, a] == bos_id
            continue
        i, j = r["src_token_start"], r["src_token_end"]
        assert pb.tokens[row, a:b].tolist() == s.input_ids[i:j].tolist()
        assert r["inserted"] == bool((s.offsets[i:j, 0] < 0).all())
        assert (s.offsets[i:j, 0] < 0).all() or (s.offsets[i:j, 0] >= 0).all()
        if r["inserted"]:
            assert r["char_start"] is None and r["char_end"] is None
        else:
            assert (r["char_start"], r["char_end"]) == (int(s.offsets[i, 0]), int(s.offsets[j - 1, 1]))


def test_stream_pieces_carry_their_source_token_offsets():
    samples = _samples([5, 13, 4], eos=True)
    pb = pack(samples, PackingPolicy(seq_len=6, mode="stream", boundary="none", tail="pad"))
    rows = [(r["block"], r["start"], r["end"], r["record_id"], r["src_token_start"], r["src_token_end"], r["inserted"])
            for r in pb.spans.to_pylist() if not r["pad"]]  # fmt: skip
    assert rows == [
        (0, 0, 4, "r0", 0, 4, False), (0, 4, 5, "r0", 4, 5, True), (0, 5, 6, "r1", 0, 1, False),
        (1, 0, 6, "r1", 1, 7, False),
        (2, 0, 5, "r1", 7, 12, False), (2, 5, 6, "r1", 12, 13, True),
        (3, 0, 3, "r2", 0, 3, False), (3, 3, 4, "r2", 3, 4, True),
    ]  # fmt: skip
    _assert_provenance(pb, samples)
    ok, detail = coverage_check(pb)
    assert ok, detail


@pytest.mark.parametrize("pol", [
    PackingPolicy(seq_len=64, mode="stream", boundary="none"),
    PackingPolicy(seq_len=64, mode="stream", boundary="bos", tail="drop"),
    PackingPolicy(seq_len=64, boundary="bos", overlength="split"),
    PackingPolicy(seq_len=64, fit="best_fit", overlength="truncate", open_blocks=4),
])  # fmt: skip
def test_spans_map_back_to_the_views(pol):
    rng = np.random.default_rng(1)
    samples = _samples(rng.integers(0, 150, size=120).tolist(), eos=True)
    pb = pack(samples, pol, bos_id=BOS, chunk_tokens=700)
    _assert_provenance(pb, samples, BOS)
    assert set(pb.spans.column("transform_version").to_pylist()) == {packing_policy_version(pol)}
    ok, detail = coverage_check(pb)
    assert ok, detail


def test_coverage_check_fails_on_corrupted_spans():
    pb = pack(_samples([5, 9, 3, 7], eos=True), PackingPolicy(seq_len=8, boundary="bos"), bos_id=BOS)
    ok, detail = coverage_check(pb)
    assert ok and detail["problems"] == []
    sp = pb.spans

    def with_spans(t):
        return PackedBlocks(pb.seq_len, pb.pad_id, pb.first_block, pb.tokens, pb.loss_mask, pb.segment_ids,
                            pb.position_ids, t, pb.stats)  # fmt: skip

    missing = with_spans(sp.slice(1))
    ok, detail = coverage_check(missing)
    assert not ok and detail["uncovered"] >= 1
    doubled = with_spans(pa.concat_tables([sp, sp.slice(1, 1)]))
    ok, detail = coverage_check(doubled)
    assert not ok and detail["multiply_covered"] >= 1
    ends = sp.column("end").to_pylist()
    ends[1] += 1  # overlaps the next span
    ok, detail = coverage_check(with_spans(sp.set_column(2, "end", pa.array(ends, pa.int32()))))
    assert not ok
    pad_rows = sp.column("pad").to_pylist()
    rids = sp.column("record_id").to_pylist()
    rids[pad_rows.index(True)] = "r0"  # padding claims a source
    ok, detail = coverage_check(with_spans(sp.set_column(3, "record_id", pa.array(rids, pa.string()))))
    assert not ok and any("pad spans with a source" in p for p in detail["problems"])
    lm = pb.loss_mask.copy()
    lm[pb.segment_ids == 0] = 1
    bad_loss = PackedBlocks(pb.seq_len, pb.pad_id, 0, pb.tokens, lm, pb.segment_ids, pb.position_ids, sp, pb.stats)
    ok, detail = coverage_check(bad_loss)
    assert not ok and any("in the loss" in p for p in detail["problems"])


def test_coverage_check_fails_when_a_tiling_span_holds_the_wrong_kind_of_position():
    """Spans that tile every block exactly once still fail when a content span covers padding
    or a pad span covers content (what the per-span fast path must see as well)."""
    pb = pack(_samples([5, 9, 3, 7], eos=True), PackingPolicy(seq_len=8, boundary="bos"), bos_id=BOS)
    seg = pb.segment_ids.copy()
    content = np.argwhere(seg != 0)[0]
    seg[tuple(content)] = 0  # a content position now looks like padding
    tok = pb.tokens.copy()
    tok[tuple(content)] = pb.pad_id
    lm = pb.loss_mask.copy()
    lm[tuple(content)] = 0
    broken = PackedBlocks(pb.seq_len, pb.pad_id, pb.first_block, tok, lm, seg, pb.position_ids, pb.spans, pb.stats)
    ok, detail = coverage_check(broken)
    assert not ok and detail["pad_covered_by_content"] == 1 and detail["uncovered"] == 0
    assert any("pad positions not covered by exactly one pad span" in p for p in detail["problems"])


def test_span_sums_equal_per_span_sums_whether_or_not_the_spans_tile():
    """span_sums takes one reduceat when the spans tile the positions and a running count
    otherwise; both give each span's own sum, in the spans' order."""
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2, 5000).astype(np.uint8)
    cuts = np.sort(rng.choice(np.arange(1, 5000), 300, replace=False))
    fs, fe = np.concatenate([[0], cuts]), np.concatenate([cuts, [5000]])
    perm = rng.permutation(fs.size)
    fs, fe = fs[perm], fe[perm]
    want = np.array([int(values[a:b].sum()) for a, b in zip(fs, fe)])
    assert np.array_equal(packing.span_sums(values, fs, fe), want)  # tiling: the reduceat path
    assert np.array_equal(packing.span_sums(values, fs[:-5], fe[:-5]), want[:-5])  # a gap: running count
    overlap_s, overlap_e = np.append(fs, 10), np.append(fe, 20)
    assert np.array_equal(packing.span_sums(values, overlap_s, overlap_e), np.append(want, values[10:20].sum()))
    assert packing.span_sums(values, fs[:0], fe[:0]).size == 0


def test_real_token_views_pack_with_eos_spans_and_char_offsets():
    from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, DocumentPayload, Record
    from corpus_assets.domain.ingest.sources_config import Governance
    from corpus_assets.domain.tokens.token_views import rendered_text, token_views
    from corpus_assets.domain.tokens.tokenizer import BpeTrainSpec, TokenizerSpec, train_bpe

    texts = ["The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x + 1\n", "Plain words here."] * 7
    tok = train_bpe(texts * 5, TokenizerSpec(train=BpeTrainSpec(vocab_size=300)))
    gov = Governance(license="CC-BY-4.0", rights_evidence="test")
    records = [
        Record(record_id=f"src:{i}", source_id="src", snapshot="src.20260101T000000", item_id=str(i),
               schema_type="document", schema_version=SCHEMA_VERSIONS["document"], adapter="t", adapter_version="1",
               domain="prose", group_id=f"g{i}", governance=gov, payload=DocumentPayload(text=t))
        for i, t in enumerate(texts)
    ]  # fmt: skip
    views = token_views(records, tok)
    pol = PackingPolicy(seq_len=24, mode="stream", boundary="none", tail="pad", pad_id=tok.eos_id + 1)
    pb = pack(views, pol)
    assert int((pb.tokens == tok.eos_id).sum()) == len(records)  # one EOS per document, never filler
    assert pb.stats.inserted_tokens == len(records)
    _assert_provenance(pb, views)
    for r in pb.spans.to_pylist():
        if not r["pad"] and not r["inserted"]:
            text = rendered_text(records[int(r["record_id"].split(":")[1])])
            row = r["block"]
            assert tok.decode(pb.tokens[row, r["start"] : r["end"]].tolist()) == text[r["char_start"] : r["char_end"]]
    ok, detail = coverage_check(pb)
    assert ok, detail


# --- chunking, determinism, columnar entry point ------------------------------------------------


def _assert_same(a: PackedBlocks, b: PackedBlocks, same_version: bool = True) -> None:
    for name in ("tokens", "loss_mask", "segment_ids", "position_ids"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    if same_version:
        assert a.spans.equals(b.spans)
    else:
        assert a.spans.drop_columns(["transform_version"]).equals(b.spans.drop_columns(["transform_version"]))
    assert a.stats.as_dict() == b.stats.as_dict()


@pytest.mark.parametrize("pol", [
    PackingPolicy(seq_len=50, mode="stream", boundary="none", tail="drop", reset_positions=True),
    PackingPolicy(seq_len=50, mode="stream", boundary="bos"),
    PackingPolicy(seq_len=50, boundary="mask", overlength="split"),
    PackingPolicy(seq_len=50, fit="best_fit", boundary="bos", overlength="quarantine", open_blocks=3, tail="drop"),
])  # fmt: skip
def test_result_does_not_depend_on_chunking_and_is_deterministic(pol):
    rng = np.random.default_rng(2)
    samples = _samples(rng.integers(0, 90, size=400).tolist(), eos=True)
    whole = pack(samples, pol, bos_id=BOS, chunk_tokens=1 << 30)
    _assert_same(whole, pack(samples, pol, bos_id=BOS, chunk_tokens=1 << 30))
    for chunk in (1, 37, 500, 4096):
        _assert_same(whole, pack(samples, pol, bos_id=BOS, chunk_tokens=chunk))
    parts = list(iter_packed(samples, pol, bos_id=BOS, chunk_tokens=300))
    assert len(parts) > 3 and [p.first_block for p in parts] == list(
        np.cumsum([0] + [len(p) for p in parts[:-1]])
    )
    _assert_same(whole, PackedBlocks.concat(parts))
    for p in parts:
        if len(p):
            assert coverage_check(p)[0]
    # columnar entry point gives the same
    lengths = np.array([len(s) for s in samples])
    cols = pack_arrays(
        np.concatenate([s.input_ids for s in samples]), np.concatenate([s.loss_mask for s in samples]),
        np.concatenate([s.offsets for s in samples]), lengths, [s.record_id for s in samples], None, pol, BOS,
    )  # fmt: skip
    _assert_same(whole, cols)


def test_output_dtypes_and_empty_input():
    pb = pack(_samples([3, 4]), PackingPolicy(seq_len=4, mode="stream", boundary="none"))
    assert pb.tokens.dtype == np.int32 and pb.loss_mask.dtype == np.uint8
    assert pb.segment_ids.dtype == np.int32 and pb.position_ids.dtype == np.int32
    assert pb.spans.schema.equals(packing.PACKING_SPANS_SCHEMA)
    empty = pack([], PackingPolicy(seq_len=4))
    assert len(empty) == 0 and empty.stats.blocks == 0 and empty.spans.num_rows == 0
    assert coverage_check(empty)[0]
    zeros = pack(_samples([0, 0]), PackingPolicy(seq_len=4, boundary="bos"), bos_id=BOS)
    assert len(zeros) == 0 and zeros.stats.empty_samples == 2


def test_transform_version():
    pol = PackingPolicy(seq_len=8)
    assert packing_policy_version(pol) == packing_policy_version(PackingPolicy(seq_len=8))
    assert packing_policy_version(pol) != packing_policy_version(PackingPolicy(seq_len=9))
    assert packing_policy_version(pol).startswith("pk1-")
    named = pack(_samples([3]), PackingPolicy(seq_len=8, transform_version="release-7/packing"))
    assert named.spans.column("transform_version").to_pylist() == ["release-7/packing"] * 2


# --- policy errors ------------------------------------------------------------------------------


def test_policy_errors_name_the_field():
    with pytest.raises(ValidationError, match="seq_len"):
        PackingPolicy(seq_len=0)
    with pytest.raises(ValidationError, match="boundary"):
        PackingPolicy(seq_len=8, mode="atomic", boundary="none")
    with pytest.raises(ValidationError, match="fit"):
        PackingPolicy(seq_len=8, mode="stream", fit="best_fit")
    with pytest.raises(ValidationError, match="seq_len"):
        PackingPolicy(seq_len=1, boundary="bos")
    with pytest.raises(ValidationError, match="open_blocks"):
        PackingPolicy(seq_len=8, open_blocks=0)
    with pytest.raises(ValidationError, match="pad_id"):
        PackingPolicy(seq_len=8, pad_id=-1)
    with pytest.raises(ValidationError, match="extra"):
        PackingPolicy(seq_len=8, packing="greedy")
    with pytest.raises(ValueError, match="bos_id"):
        pack(_samples([3]), PackingPolicy(seq_len=8, boundary="bos"))
    with pytest.raises(ValueError, match="bos_id"):
        Packer(PackingPolicy(seq_len=8, boundary="bos"))
    pol = PackingPolicy(seq_len=8)
    with pytest.raises(ValidationError):
        pol.seq_len = 9  # frozen
    with pytest.raises(ValueError, match="flat_ids"):
        pack_arrays(np.zeros(3, np.int32), np.zeros(4, np.uint8), np.zeros((4, 2), np.int32), [4], ["a"], None, pol)
    with pytest.raises(ValueError, match="record_ids"):
        pack_arrays(np.zeros(4, np.int32), np.zeros(4, np.uint8), np.zeros((4, 2), np.int32), [4], ["a", "b"], None, pol)
