"""Sharded near dedup (dedup/sharded.py): clusters larger than the bucket cap stay whole, the
output is byte-identical for any shard count and worker count, it equals the in-memory
near_dedup, and bad inputs are refused clearly."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.dedup.lsh import CAP_PIVOTS, CAP_WINDOW, LshPolicy, lsh_candidates
from corpus_assets.domain.dedup.near import near_dedup
from corpus_assets.domain.dedup.sharded import REPORT_TOP, SignatureFile, sharded_near_dedup
from dedup_verifiers import SetVerifier, jaccard, minhash, planted_corpus

N = 3000
CLUSTERS = [150, 300, 60]  # all above the cap of 20
CAP = 20
POLICY = LshPolicy(threshold=0.7, num_perm=64, bands=16, rows=4, bucket_cap=CAP)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    sets, members = planted_corpus(N, CLUSTERS, seed=1)
    sig = minhash(sets, 64)
    d = tmp_path_factory.mktemp("sharded")
    np.save(d / "sig.npy", sig)
    order = np.random.default_rng(5).permutation(N).astype(np.int64)
    return {"sets": sets, "members": members, "sig": sig, "file": SignatureFile(str(d / "sig.npy")),
            "order": order, "dir": d}


@pytest.fixture(scope="module")
def two_workers():
    return Engine(workers=2)  # a real LocalCluster, started once for the module


def run(corpus, policy=POLICY, tmp=None, **kw):
    verifier = SetVerifier(corpus["sets"])
    work = tmp or corpus["dir"]
    res = sharded_near_dedup(corpus["file"], corpus["order"], policy, verifier, workdir=Path(work), **kw)
    return res, verifier


def digest(res) -> str:
    h = hashlib.sha256()
    for a in (res.representative, res.rep_jaccard, res.edges, res.edge_jaccard, res.component):
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((res.candidates, res.stats.as_dict(), sorted(res.policy.items()), res.capped)).encode())
    return h.hexdigest()


def test_clusters_larger_than_the_cap_stay_whole(corpus):
    res, _ = run(corpus, shards=4)
    order, sets = corpus["order"], corpus["sets"]
    rank = np.empty(N, dtype=np.int64)
    rank[order] = np.arange(N)
    assert res.stats.capped_buckets > 0 and res.stats.largest_bucket > 10 * CAP
    for members in corpus["members"]:
        first = members[np.argmin(rank[members])]
        # every member matches the cluster's first member in the total order (the pivot)
        assert min(jaccard(sets[first], sets[m]) for m in members if m != first) >= POLICY.threshold
        # one leakage group, labelled by that first member; everyone but it removed, onto it
        assert set(res.component[members].tolist()) == {first}
        assert res.representative[first] == first
        others = members[members != first]
        assert (res.representative[others] == first).all()
        assert (res.rep_jaccard[others] >= POLICY.threshold).all()
    clustered = np.concatenate(corpus["members"])
    assert res.removed == clustered.size - len(CLUSTERS)
    # the report: every member beyond the cap got a verified edge and its pivot's group
    rep = res.capped
    assert rep["bucket_cap"] == CAP and (rep["pivots"], rep["window"]) == (CAP_PIVOTS, CAP_WINDOW)
    assert rep["buckets"] == res.stats.capped_buckets and rep["members_beyond_cap"] == res.stats.members_beyond_cap
    assert rep["pivot_pairs"] == res.stats.pivot_pairs > 0
    assert rep["members_with_edge"] == rep["members_in_pivot_group"] == rep["members_beyond_cap"]
    sizes = [b["size"] for b in rep["largest"]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == res.stats.largest_bucket
    assert rep["listed"] == len(rep["largest"]) == rep["buckets"]  # under 100: all listed
    for b in rep["largest"]:
        assert b["members_beyond_cap"] == b["size"] - CAP
        # each member beyond the cap: 4 pivots + up to 4 predecessors -> linear in the size
        assert b["members_beyond_cap"] * CAP_PIVOTS <= b["pivot_pairs"] <= b["members_beyond_cap"] * (CAP_PIVOTS + CAP_WINDOW)
        assert any(b["pivot"] in m.tolist() for m in corpus["members"])
    # pairs stay linear in the cluster sizes: far fewer than all pairs of the buckets
    assert res.stats.pair_emissions < res.stats.pairs_before_cap / 5


def _star_corpus(tmp_path, n=2000, leaves=300, seed=3):
    """One template set of 40 values and ``leaves`` copies of it with 5 values replaced each:
    every copy is near the template (J ~ 0.78 >= tau 0.7) but copies are not near each other
    (J ~ 0.6), and the template sits in the middle of the total order."""
    rng = np.random.default_rng(seed)
    sets = [np.unique(rng.integers(0, 2**40, size=40)) for _ in range(n)]
    template = np.unique(rng.integers(2**40, 2**41, size=40))
    idx = np.sort(rng.choice(n, size=leaves + 1, replace=False))
    t = int(idx[leaves // 2])
    sets[t] = template
    for i in idx.tolist():
        if i != t:
            s = template.copy()
            s[rng.choice(s.size, size=5, replace=False)] = rng.integers(2**42, 2**43, size=5)
            sets[i] = np.unique(s)
    sig = minhash(sets, 64)
    np.save(tmp_path / "star.npy", sig)
    order = rng.permutation(n).astype(np.int64)
    order = np.concatenate([order[order != t][: n // 2], [t], order[order != t][n // 2:]])  # template mid-order
    return {"sets": sets, "sig": sig, "file": SignatureFile(str(tmp_path / "star.npy")), "order": order,
            "dir": tmp_path, "template": t, "leaves": idx[idx != t]}


def test_a_star_cluster_over_the_cap_joins_through_its_template(tmp_path):
    """Boilerplate copies of one template, each near it but not near each other, in buckets far
    over the cap: the template is a central pivot of every such bucket, so every copy that shares
    a bucket with it is verified against it and lands in its leakage group — in the sharded and
    the in-memory path alike."""
    star = _star_corpus(tmp_path)
    sets, t, leaves = star["sets"], star["template"], star["leaves"]
    assert min(jaccard(sets[t], sets[m]) for m in leaves) >= POLICY.threshold
    assert np.median([jaccard(sets[leaves[i]], sets[leaves[i + 1]]) for i in range(50)]) < POLICY.threshold
    res, _ = run(star, shards=4)
    assert res.stats.capped_buckets > 0 and res.stats.largest_bucket > 3 * CAP
    b, r = POLICY.params()
    from corpus_assets.domain.dedup.lsh import band_keys

    keys = band_keys(star["sig"], b, r)
    shares = (keys[leaves] == keys[t]).any(axis=1)
    assert shares.mean() > 0.95
    assert (res.component[leaves[shares]] == res.component[t]).all()
    mem = near_dedup(star["sig"], star["order"], POLICY, jaccard_many=SetVerifier(sets).jaccard_many)
    assert np.array_equal(mem.component, res.component) and np.array_equal(mem.representative, res.representative)


def test_same_bytes_for_any_shard_count_and_worker_count(corpus, two_workers, tmp_path):
    seen = {}
    for shards in (1, 4, 16):
        for engine in (Engine(workers=1), two_workers):
            res, _ = run(corpus, tmp=tmp_path, shards=shards, engine=engine, chunk_rows=700)
            seen[(shards, engine.workers)] = digest(res)
    assert len(set(seen.values())) == 1, seen
    # and the chunking of the key stage does not matter either
    res, _ = run(corpus, tmp=tmp_path, shards=3, chunk_rows=N)
    assert digest(res) == seen[(1, 1)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("sharded-lsh-")]  # scratch removed


def test_equals_the_unsharded_near_dedup(corpus):
    for policy in (POLICY.model_copy(update={"bucket_cap": None}), POLICY):
        res, verifier = run(corpus, policy=policy, shards=4, chunk_rows=1000)
        ref = near_dedup(corpus["sig"], corpus["order"], policy, jaccard_many=verifier.jaccard_many)
        for field in ("representative", "rep_jaccard", "edges", "edge_jaccard", "component"):
            assert np.array_equal(getattr(res, field), getattr(ref, field)), field
        assert res.candidates == ref.candidates and res.stats.as_dict() == ref.stats.as_dict()
        assert res.policy == ref.policy
        if policy.bucket_cap is None:
            assert res.stats.capped_buckets == 0 and res.capped["buckets"] == 0 and res.capped["largest"] == []
        # candidates are distinct pairs; prepare() got exactly the records they name, sorted
        pairs, _ = lsh_candidates(corpus["sig"], 16, 4, policy.bucket_cap, order=corpus["order"])
        assert res.candidates == res.stats.pairs == pairs.shape[0]
        assert verifier.prepared_with.tolist() == sorted(set(pairs.ravel().tolist()))


def test_no_candidates_and_empty_signatures(tmp_path):
    rng = np.random.default_rng(3)
    sig = rng.integers(0, 2**32, size=(200, 64), dtype=np.uint64).astype(np.uint32)
    sig[[5, 9]] = 2**32 - 1  # empty-set signatures: never a candidate
    np.save(tmp_path / "s.npy", sig)
    sets = [np.arange(i * 10, i * 10 + 5) for i in range(200)]
    res, verifier = run({"sets": sets, "file": SignatureFile(str(tmp_path / "s.npy")), "order": np.arange(200),
                         "dir": tmp_path}, shards=4)
    assert res.candidates == 0 and res.removed == 0 and res.edges.shape == (0, 2)
    assert np.array_equal(res.component, np.arange(200)) and verifier.prepared_with.size == 0
    assert res.stats.buckets == 198 * 16


def test_bad_inputs_give_clear_errors(corpus, tmp_path):
    with pytest.raises(ValueError, match="shards must be an integer >= 1"):
        run(corpus, shards=0)
    with pytest.raises(ValueError, match="order must be 3000 integer record indices"):
        sharded_near_dedup(corpus["file"], corpus["order"][:-1], POLICY, SetVerifier(corpus["sets"]), workdir=tmp_path)
    dup = corpus["order"].copy()
    dup[0] = dup[1]
    with pytest.raises(ValueError, match="permutation of range"):
        sharded_near_dedup(corpus["file"], dup, POLICY, SetVerifier(corpus["sets"]), workdir=tmp_path)
    wide = LshPolicy(threshold=0.7, num_perm=128, bands=20, rows=6)
    with pytest.raises(ValueError, match="bands \\* rows = 120 signature values"):
        sharded_near_dedup(corpus["file"], corpus["order"], wide, SetVerifier(corpus["sets"]), workdir=tmp_path)
    np.save(tmp_path / "flat.npy", np.zeros(10, dtype=np.uint32))
    with pytest.raises(ValueError, match="2-D"):
        sharded_near_dedup(SignatureFile(str(tmp_path / "flat.npy")), np.arange(10), POLICY,
                           SetVerifier([]), workdir=tmp_path)


def test_capped_report_is_bounded_and_totals_cover_every_bucket(tmp_path):
    # 40 clusters of 8 members with a cap of 2: hundreds of capped buckets, 100 listed
    sets, members = planted_corpus(1500, [8] * 40, seed=4)
    np.save(tmp_path / "s.npy", minhash(sets, 64))
    corpus = {"sets": sets, "file": SignatureFile(str(tmp_path / "s.npy")), "order": np.arange(1500), "dir": tmp_path}
    policy = POLICY.model_copy(update={"bucket_cap": 2})
    res, _ = run(corpus, policy=policy, shards=4)
    rep = res.capped
    assert rep["buckets"] == res.stats.capped_buckets > REPORT_TOP == rep["listed"] == len(rep["largest"])
    keys = [(-b["size"], b["band"]) for b in rep["largest"]]
    assert keys == sorted(keys)
    assert sum(b["members_beyond_cap"] for b in rep["largest"]) < rep["members_beyond_cap"] == res.stats.members_beyond_cap
    assert rep["pivot_pairs"] == res.stats.pivot_pairs
    # and the clusters are still whole, one representative each
    for m in members:
        assert len(set(res.component[m].tolist())) == 1 and (res.representative[m] == m.min()).all()
    res2, _ = run(corpus, policy=policy, shards=7)
    assert res2.capped == rep
