"""LSH banding (issue 4): seed §18.4 numbers, datasketch's optimum, sort-based candidates equal
to a dict-of-buckets reference, the bucket cap and its accounting, order/worker invariance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from datasketch.lsh import _optimal_param

from corpus_assets.domain.dedup.lsh import (
    NO_BUCKET,
    CAP_PIVOTS,
    CAP_WINDOW,
    CandidateStats,
    LshPolicy,
    band_key,
    band_keys,
    candidate_pairs,
    candidate_probability,
    empty_signature_rows,
    lsh_candidates,
    merge_candidates,
    naive_candidate_pairs,
    optimal_params,
    search_optimal_params,
    KNOWN_OPTIMA,
)


def planted_signatures(n=600, m=32, families=40, seed=0):
    """Random signatures (values < 2**32) plus families of near-copies (a few values changed),
    so bands collide for the families and almost never otherwise."""
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, 2**32, size=(n, m), dtype=np.uint64)
    for f in range(families):
        members = rng.choice(n, size=rng.integers(2, 7), replace=False)
        base = sig[members[0]].copy()
        for x in members[1:]:
            s = base.copy()
            flip = rng.random(m) < rng.uniform(0.05, 0.5)
            s[flip] = rng.integers(0, 2**32, size=int(flip.sum()), dtype=np.uint64)
            sig[x] = s
    return sig


def as_set(pairs):
    return {(int(i), int(j)) for i, j in pairs}


# ----------------------------------------------------------------------------- seed numbers


def test_seed_candidate_probabilities():
    assert round(candidate_probability(0.8, 20, 5), 5) == 0.99964
    assert round(candidate_probability(0.2, 20, 5), 5) == 0.00638
    assert candidate_probability(0.0, 20, 5) == 0.0
    assert candidate_probability(1.0, 20, 5) == 1.0


@pytest.mark.parametrize("num_perm", [16, 64, 128, 256])
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95])
def test_optimal_params_equal_datasketch(threshold, num_perm):
    assert optimal_params(threshold, num_perm) == _optimal_param(threshold, num_perm, 0.5, 0.5)


@pytest.mark.parametrize("num_perm", [16, 128])
@pytest.mark.parametrize("threshold", [0.3, 0.8, 0.95])
def test_the_search_equals_datasketch(threshold, num_perm):
    assert search_optimal_params(threshold, num_perm) == _optimal_param(threshold, num_perm, 0.5, 0.5)


@pytest.mark.parametrize("key", sorted(KNOWN_OPTIMA))
def test_every_known_optimum_is_datasketchs(key):
    """The table that spares a fresh process importing scipy holds what the search finds."""
    threshold, num_perm = key
    assert KNOWN_OPTIMA[key] == _optimal_param(threshold, num_perm, 0.5, 0.5)


def test_resolving_usual_params_imports_no_scipy():
    import subprocess
    import sys

    code = ("import sys; from corpus_assets.domain.dedup.lsh import LshPolicy; "
            "print(LshPolicy(threshold=0.8, num_perm=128).params(), 'scipy.integrate' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out == ["(9,", "13)", "False"]


@pytest.mark.parametrize("weights", [(0.1, 0.9), (0.9, 0.1), (0.3, 0.7)])
def test_optimal_params_weights_equal_datasketch(weights):
    assert optimal_params(0.8, 128, *weights) == _optimal_param(0.8, 128, *weights)


def test_policy_resolves_and_records_params():
    p = LshPolicy()
    assert p.params() == _optimal_param(0.8, 128, 0.5, 0.5)
    rec = p.record()
    assert (rec["bands"], rec["rows"]) == p.params() and rec["bucket_cap"] is None
    explicit = LshPolicy(num_perm=100, bands=20, rows=5)
    assert explicit.params() == (20, 5)
    assert explicit.record()["params_from"] == "explicit"
    # the cap is part of the policy version
    assert LshPolicy(bucket_cap=100).version() != LshPolicy().version()
    assert LshPolicy().version() == LshPolicy().version()
    with pytest.raises(ValueError):
        LshPolicy(num_perm=64, bands=20, rows=5)  # 100 > 64
    with pytest.raises(ValueError):
        LshPolicy(bands=20)  # rows missing
    with pytest.raises(ValueError):
        LshPolicy(bucket_cap=1)


# ----------------------------------------------------------------------------- band keys


def test_band_keys_deterministic_and_band_local():
    sig = planted_signatures(n=50, m=20)
    k1 = band_keys(sig, 4, 5)
    k2 = band_keys(sig.copy(), 4, 5)
    assert k1.dtype == np.uint64 and k1.shape == (50, 4)
    assert np.array_equal(k1, k2)
    # a key depends only on its band's r values
    other = sig.copy()
    other[:, 5:] = 7
    assert np.array_equal(band_keys(other, 4, 5)[:, 0], k1[:, 0])
    assert not np.array_equal(band_keys(other, 4, 5)[:, 1], k1[:, 1])
    # the same values in a different band give a different key (band index is hashed in)
    same = np.tile(np.arange(5, dtype=np.uint64), (3, 4))
    kk = band_keys(same, 4, 5)
    assert len(set(kk[0].tolist())) == 4
    # known values: pinned so a change of the hash (and so of every release's buckets) is seen
    assert band_key(np.arange(10, dtype=np.uint64).reshape(2, 5), 0, 5).tolist() == [
        6345659936881885042,
        10878572605438931695,
    ]


def test_empty_signatures_get_no_bucket():
    sig = planted_signatures(n=20, m=10)
    sig[3] = 2**32 - 1  # datasketch's empty MinHash
    sig[4] = 2**32 - 1
    sig[7] = np.iinfo(np.uint64).max
    sig[8] = np.iinfo(np.uint64).max
    assert empty_signature_rows(sig).tolist() == [i in (3, 4, 7, 8) for i in range(20)]
    keys = band_keys(sig, 2, 5)
    assert (keys[[3, 4, 7, 8]] == NO_BUCKET).all()
    assert (keys[[0, 1, 2, 5, 6]] != NO_BUCKET).all()
    pairs, _ = candidate_pairs(keys, None)
    assert not ({3, 4, 7, 8} & {int(v) for v in pairs.ravel()})  # identical empties never pair


# ----------------------------------------------------------------------------- candidate pairs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sort_based_pairs_equal_dict_of_buckets(seed):
    sig = planted_signatures(seed=seed)
    keys = band_keys(sig, 8, 4)
    pairs, stats = candidate_pairs(keys, None)
    assert pairs.dtype == np.int64 and pairs.ndim == 2 and pairs.shape[1] == 2
    assert (pairs[:, 0] < pairs[:, 1]).all()
    assert np.array_equal(pairs, np.unique(pairs, axis=0))  # sorted, distinct
    assert as_set(pairs) == naive_candidate_pairs(keys)
    assert stats.pairs == len(pairs) > 0
    assert stats.capped_buckets == 0 and stats.pairs_before_cap == stats.pair_emissions
    # the streaming (band by band, never the key matrix) path gives the same pairs and counts
    pairs2, stats2 = lsh_candidates(sig, 8, 4)
    assert np.array_equal(pairs, pairs2) and stats.as_dict() == stats2.as_dict()


def test_bucket_counts_on_a_small_example():
    keys = np.array([[5, 1], [5, 2], [5, 3], [6, 3], [0, 3]], dtype=np.uint64)
    pairs, st = candidate_pairs(keys, None)
    # band 0: {0,1,2} and {3} (record 4 has no bucket); band 1: {0} {1} {2,3,4}
    assert as_set(pairs) == {(0, 1), (0, 2), (1, 2), (2, 3), (2, 4), (3, 4)}
    assert (st.buckets, st.multi_buckets, st.pairs_before_cap, st.pairs) == (5, 2, 6, 6)


def test_bucket_cap_keeps_first_members_and_pivots_the_rest():
    # one hot bucket of 30 records in band 0, a pair in band 1; cap 4 (pivots 4, window 4)
    assert (CAP_PIVOTS, CAP_WINDOW) == (4, 4)
    n = 32
    keys = np.arange(1, 2 * n + 1, dtype=np.uint64).reshape(n, 2)
    keys[:30, 0] = 99
    keys[[3, 31], 1] = 1000
    pairs, st = candidate_pairs(keys, 4)
    # rule: all pairs among the first `cap` members in index order; each member k beyond the cap
    # pairs with the 4 pivots (members 0..3) and the 4 members just before it (never a pivot twice)
    within = {(i, j) for i in range(4) for j in range(i + 1, 4)}
    pivots = {(j, k) for k in range(4, 30) for j in range(4)}
    window = {(j, k) for k in range(4, 30) for j in range(max(4, k - 4), k)}
    expected = within | pivots | window | {(3, 31)}
    assert as_set(pairs) == expected == naive_candidate_pairs(keys, 4)
    # every member beyond the cap is paired with the first member: the bucket is never split
    assert {k for j, k in as_set(pairs) if j == 0} == set(range(1, 30))
    assert st.capped_buckets == 1 and st.members_beyond_cap == 26
    assert st.pivot_pairs == len(pivots) + len(window) == 26 * 4 + (0 + 1 + 2 + 3) + 22 * 4
    assert st.pairs_before_cap == 30 * 29 // 2 + 1 and st.pair_emissions == 6 + st.pivot_pairs + 1
    assert st.pairs == len(expected) and st.largest_bucket == 30
    uncapped, st0 = candidate_pairs(keys, None)
    assert len(uncapped) == 30 * 29 // 2 + 1 and st0.capped_buckets == 0 and st0.pivot_pairs == 0
    # with an order, the first members (and pivots, windows) are taken in that order
    order = np.arange(n)[::-1].copy()
    pairs_o, _ = candidate_pairs(keys, 4, order=order)
    members = list(range(29, -1, -1))  # the bucket in the total order
    mapped = {(min(members[a], members[b]), max(members[a], members[b])) for a, b in within | pivots | window}
    assert as_set(pairs_o) == mapped | {(3, 31)} == naive_candidate_pairs(keys, 4, order=order)


def test_cap_not_above_the_pivot_count():
    # cap 2 < CAP_PIVOTS: the pivots are the first 2 members, windows start after them
    keys = np.ones((7, 1), dtype=np.uint64)
    pairs, st = candidate_pairs(keys, 2)
    expected = {(0, 1)} | {(j, k) for k in range(2, 7) for j in range(2)} | {
        (j, k) for k in range(2, 7) for j in range(max(2, k - 4), k)}
    assert as_set(pairs) == expected == naive_candidate_pairs(keys, 2)
    assert st.pivot_pairs == len(expected) - 1


def test_cap_on_random_data_matches_reference():
    sig = planted_signatures(n=400, m=12, families=0, seed=5)
    sig[:60, :3] = 1  # template: 60 records share band 0
    keys = band_keys(sig, 4, 3)
    pairs, st = candidate_pairs(keys, 8)
    assert as_set(pairs) == naive_candidate_pairs(keys, 8)
    # the 52 members beyond the cap each pair with 4 pivots and their 4 predecessors: O(size)
    assert st.capped_buckets == 1 and st.members_beyond_cap == 52
    assert st.pivot_pairs == 52 * (CAP_PIVOTS + CAP_WINDOW)
    assert st.pair_emissions == 28 + st.pivot_pairs and st.pairs_before_cap == 60 * 59 // 2


def test_shuffled_input_gives_same_pairs_after_mapping_back():
    sig = planted_signatures(seed=3)
    n = sig.shape[0]
    rng = np.random.default_rng(7)
    perm = rng.permutation(n)  # shuffled[k] = original[perm[k]]
    for cap in (None, 3):
        # order = the stable total order (here: original index); shuffled input carries its rank
        p0, s0 = lsh_candidates(sig, 8, 4, cap, order=np.arange(n))
        inv = np.argsort(perm)
        order_shuffled = inv[np.arange(n)]  # position in shuffled input of original record k
        p1, s1 = lsh_candidates(sig[perm], 8, 4, cap, order=order_shuffled)
        back = np.sort(perm[p1], axis=1)
        back = back[np.lexsort((back[:, 1], back[:, 0]))]
        assert np.array_equal(back, p0)
        assert s0.as_dict() == s1.as_dict()


def test_two_workers_band_split_equals_one():
    sig = planted_signatures(seed=4)
    for cap in (None, 3):
        whole = lsh_candidates(sig, 8, 4, cap)
        merged = merge_candidates([lsh_candidates(sig, 8, 4, cap, band_range=(0, 4)),
                                   lsh_candidates(sig, 8, 4, cap, band_range=(4, 8))])
        assert np.array_equal(whole[0], merged[0])
        assert whole[1].as_dict() == merged[1].as_dict()
        uneven = merge_candidates([lsh_candidates(sig, 8, 4, cap, band_range=(5, 8)),
                                   lsh_candidates(sig, 8, 4, cap, band_range=(0, 5))])
        assert np.array_equal(whole[0], uneven[0])


def test_no_pairs_and_validation():
    sig = np.random.default_rng(0).integers(0, 2**32, size=(30, 16), dtype=np.uint64)
    pairs, st = lsh_candidates(sig, 4, 4)
    assert pairs.shape == (0, 2) and st.pairs == 0 and st.buckets == 120
    assert merge_candidates([])[0].shape == (0, 2)
    with pytest.raises(ValueError):
        lsh_candidates(sig, 5, 4)
    with pytest.raises(ValueError):
        lsh_candidates(sig, 4, 4, order=np.zeros(30, dtype=np.int64))
    assert isinstance(st, CandidateStats)


def test_banding_recall_follows_the_s_curve():
    """Empirical check of 1-(1-s^r)^b on synthetic signatures with a known agreement rate."""
    rng = np.random.default_rng(11)
    n, m, b, r = 4000, 100, 20, 5
    for s, expected in ((0.8, 0.99964), (0.2, 0.00638), (0.5, candidate_probability(0.5, 20, 5))):
        a = rng.integers(0, 2**32, size=(n, m), dtype=np.uint64)
        bb = rng.integers(0, 2**32, size=(n, m), dtype=np.uint64)
        same = rng.random((n, m)) < s
        bb[same] = a[same]
        sig = np.empty((2 * n, m), dtype=np.uint64)
        sig[0::2], sig[1::2] = a, bb
        pairs, _ = lsh_candidates(sig, b, r)
        hit = {(int(i), int(j)) for i, j in pairs if j == i + 1 and i % 2 == 0}
        rate = len(hit) / n
        assert abs(rate - expected) < 0.03, (s, rate, expected)


def test_uint32_signatures_are_not_widened_and_give_the_same_keys():
    sig64 = planted_signatures(n=200, m=16, seed=9)
    sig64[5] = 2**32 - 1  # empty
    sig32 = sig64.astype(np.uint32)
    assert np.array_equal(band_keys(sig32, 4, 4), band_keys(sig64, 4, 4))
    assert empty_signature_rows(sig32).tolist() == empty_signature_rows(sig64).tolist()
    p32, s32 = lsh_candidates(sig32, 4, 4)
    p64, s64 = lsh_candidates(sig64, 4, 4)
    assert np.array_equal(p32, p64) and s32.as_dict() == s64.as_dict()


def test_capped_buckets_take_central_pivots_as_the_reference_does():
    """With signatures (the release path), a capped bucket's pivots are its first member and the
    members sharing most signature values with its first CAP_REFERENCES members; the vectorised
    path and the Python reference agree, in index order and in a shuffled total order."""
    rng = np.random.default_rng(11)
    sig = planted_signatures(n=500, m=12, families=0, seed=9)
    star = rng.choice(500, size=90, replace=False)
    template = sig[star[45]].copy()
    for x in star:
        if x != star[45]:
            s = template.copy()
            flip = rng.random(12) < 0.35
            flip[:3] = False  # every copy shares band 0 with the template: one bucket of 90
            s[flip] = rng.integers(0, 2**32, size=int(flip.sum()), dtype=np.uint64)
            sig[x] = s
    keys = band_keys(sig, 4, 3)
    for order in (None, rng.permutation(500)):
        pairs, st = lsh_candidates(sig, 4, 3, 10, order=order)
        assert st.capped_buckets >= 1
        assert as_set(pairs) == naive_candidate_pairs(keys, 10, order=order, signatures=sig)
        # the template is a pivot: every copy in its bucket is paired with it
        assert {int(x) for x in star if x != star[45]} <= {
            k if j == star[45] else j for j, k in as_set(pairs) if star[45] in (j, k)}
    # without signatures (key matrix only) the pivots are the first members: the template is not
    plain, _ = candidate_pairs(keys, 10)
    assert len({j if k == star[45] else k for j, k in as_set(plain) if star[45] in (j, k)}) < 89
