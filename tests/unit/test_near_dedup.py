"""Algorithm 18.1 (stable representatives), non-transitivity (seed §18.4), connected components
and the release-level near-dedup determinism (shuffled input, 1 vs 2 workers)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from datasketch import MinHash

from corpus_assets.domain.dedup.lsh import LshPolicy
from corpus_assets.domain.dedup.near import (
    Edge,
    algorithm_18_1,
    connected_components,
    jaccard_sets,
    near_dedup,
    select_representatives,
    signature_agreement,
    stable_order,
)


def all_pairs(n):
    return np.array(list(itertools.combinations(range(n), 2)), dtype=np.int64).reshape(-1, 2)


# ----------------------------------------------------------------------------- seed example

A, B, C = {1, 2}, {1, 2, 3}, {2, 3}
SETS = [A, B, C]
TAU = 2 / 3


def J(i, j):
    return jaccard_sets(SETS[i], SETS[j])


def test_seed_jaccards():
    assert J(0, 1) == J(1, 2) == 2 / 3
    assert J(0, 2) == 1 / 3


def test_non_transitive_example_order_a_b_c():
    assignment, edges = algorithm_18_1([0, 1, 2], all_pairs(3), J, TAU)
    # A kept; B: J(A,B)=2/3 >= tau -> removed into A; C: J(C,B)=2/3 but B is not a kept
    # representative, J(C,A)=1/3 < tau -> C kept. Kept = {A, C}: each removed record has a
    # directly matching kept representative, and C (unlike A) is not similar to A.
    assert assignment == {0: (0, 1.0), 1: (0, 2 / 3), 2: (2, 1.0)}
    assert {x for x, (r, _) in assignment.items() if r == x} == {0, 2}
    # every verified edge (J >= tau), oriented later -> earlier in the order
    assert edges == [Edge(1, 0, 2 / 3), Edge(2, 1, 2 / 3)]
    # the leakage group is the whole connected component {A, B, C}
    labels = connected_components(3, [(e.x, e.y) for e in edges])
    assert labels.tolist() == [0, 0, 0]


def test_non_transitive_example_order_b_a_c():
    assignment, edges = algorithm_18_1([1, 0, 2], all_pairs(3), J, TAU)
    # B first: A and C both match B directly -> only B kept
    assert assignment == {1: (1, 1.0), 0: (1, 2 / 3), 2: (1, 2 / 3)}
    assert edges == [Edge(0, 1, 2 / 3), Edge(2, 1, 2 / 3)]


def test_only_candidates_are_checked():
    # (A,B) is not a candidate: LSH missed it, verification cannot recover it -> both kept
    assignment, edges = algorithm_18_1([0, 1, 2], np.array([[1, 2]]), J, TAU)
    # B kept (no candidate rep), C matches kept B directly -> removed into B
    assert assignment == {0: (0, 1.0), 1: (1, 1.0), 2: (1, 2 / 3)}
    assert edges == [Edge(2, 1, 2 / 3)]


def test_first_matching_representative_in_total_order():
    sets = [{1, 2, 3, 4}, {5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6}]
    jac = lambda i, j: jaccard_sets(sets[i], sets[j])  # noqa: E731
    # order 1, 0, 3, 2: record 2 matches 1 (J=.5) and 0 (J=.5) and 3 (J=.75) at tau .5
    assignment, _ = algorithm_18_1([1, 0, 3, 2], all_pairs(4), jac, 0.5)
    assert assignment[3] == (0, 4 / 6)  # 3 vs 1: 2/8 < .5; vs 0: 4/6
    assert assignment[2] == (1, 0.5)  # first kept rep in the order is 1, even though J(2,3) is larger


# ----------------------------------------------------------------------------- property check


def naive_18_1(order, candidates, jac, tau):
    """Seed Algorithm 18.1, literally: R, D; for x in order, candidates already in R sorted by
    the order; the first with J >= tau is the direct evidence."""
    rank = {x: k for k, x in enumerate(order)}
    nb = {}
    for i, j in candidates:
        nb.setdefault(int(i), set()).add(int(j))
        nb.setdefault(int(j), set()).add(int(i))
    R, D = [], {}
    for x in order:
        for y in sorted((y for y in nb.get(x, ()) if y in R), key=rank.__getitem__):
            v = jac(x, y)
            if v >= tau:
                D[x] = (y, v)
                break
        else:
            R.append(x)
    return R, D


@pytest.mark.parametrize("seed", range(5))
def test_matches_literal_algorithm_and_invariant(seed):
    rng = np.random.default_rng(seed)
    n = 60
    base = [set(rng.choice(40, size=12, replace=False).tolist()) for _ in range(8)]
    sets = []
    for _ in range(n):
        s = set(base[rng.integers(8)])
        s -= set(rng.choice(sorted(s), size=rng.integers(0, 4), replace=False).tolist())
        s |= set(rng.integers(0, 40, size=rng.integers(0, 4)).tolist())
        sets.append(s)
    jac = lambda i, j: jaccard_sets(sets[i], sets[j])  # noqa: E731
    cand = all_pairs(n)
    cand = cand[rng.random(len(cand)) < 0.7]  # LSH misses some pairs
    order = rng.permutation(n).tolist()
    tau = 0.6
    assignment, edges = algorithm_18_1(order, cand, jac, tau)
    R, D = naive_18_1(order, cand, jac, tau)
    assert sorted(x for x, (r, _) in assignment.items() if r == x) == sorted(R)
    assert {x: v for x, v in assignment.items() if v[0] != x} == D
    cset = {(int(i), int(j)) for i, j in cand}
    rank = {x: k for k, x in enumerate(order)}
    for x, (r, v) in assignment.items():
        if r != x:  # invariant: a kept rep, a candidate, directly >= tau
            assert assignment[r][0] == r and (min(x, r), max(x, r)) in cset and v >= tau and v == jac(x, r)
    # verified edges: exactly the candidates with J >= tau, oriented by the order
    assert {(min(e.x, e.y), max(e.x, e.y)) for e in edges} == {p for p in cset if jac(*p) >= tau}
    assert all(rank[e.y] < rank[e.x] for e in edges)


# ----------------------------------------------------------------------------- helpers


def bfs_components(n, edges):
    adj = {i: set() for i in range(n)}
    for a, b in edges:
        adj[a].add(b)
        adj[b].add(a)
    label = [-1] * n
    for s in range(n):
        if label[s] < 0:
            comp, stack = [], [s]
            label[s] = s
            while stack:
                u = stack.pop()
                comp.append(u)
                for v in adj[u]:
                    if label[v] < 0:
                        label[v] = s
                        stack.append(v)
    return label


@pytest.mark.parametrize("seed", range(4))
def test_connected_components_deterministic(seed):
    rng = np.random.default_rng(seed)
    n = 300
    edges = rng.integers(0, n, size=(200, 2))
    edges = np.vstack([edges, np.c_[np.arange(100, 150), np.arange(101, 151)]])  # a long path
    labels = connected_components(n, edges)
    assert labels.tolist() == bfs_components(n, edges.tolist())  # smallest member index
    shuffled = edges[rng.permutation(len(edges))][:, ::-1]
    assert np.array_equal(connected_components(n, shuffled), labels)
    assert connected_components(4, []).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        connected_components(3, [(0, 3)])


def test_stable_order():
    keys = [(0, -0.5, 2, "s:b"), (0, -0.9, 5, "s:z"), (1, -1.0, 0, "s:a"), (0, -0.5, 2, "s:a")]
    assert stable_order(keys).tolist() == [1, 3, 0, 2]
    with pytest.raises(ValueError):
        stable_order([(0, "x"), (0, "x")])


def test_jaccard_sets_refuses_two_empty_sets():
    assert jaccard_sets({1}, set()) == 0.0
    with pytest.raises(ValueError):
        jaccard_sets(set(), set())


def test_select_representatives_array_form():
    cand = all_pairs(3)
    jac = np.array([J(0, 1), J(0, 2), J(1, 2)])
    rep, rep_j, edges, ej = select_representatives([0, 1, 2], cand, jac, TAU)
    assert rep.tolist() == [0, 0, 2] and rep_j.tolist() == [1.0, 2 / 3, 1.0]
    assert edges.tolist() == [[1, 0], [2, 1]] and ej.tolist() == [2 / 3, 2 / 3]


# ----------------------------------------------------------------------------- release level


def make_corpus(n_families=40, seed=0, num_perm=64):
    """Token-set records in near-duplicate families, with real MinHash signatures."""
    rng = np.random.default_rng(seed)
    sets, ids, order_keys = [], [], []
    for f in range(n_families):
        base = set(rng.choice(10_000, size=60, replace=False).tolist())
        for k in range(int(rng.integers(1, 6))):
            s = set(base)
            drop = rng.choice(sorted(s), size=int(rng.integers(0, 12)), replace=False).tolist()
            s -= set(drop)
            s |= set(rng.integers(10_000, 20_000, size=int(rng.integers(0, 8))).tolist())
            sets.append(s)
            rid = f"src{k % 3}:{f:03d}-{k}"
            ids.append(rid)
            order_keys.append((int(rng.integers(0, 2)), -round(float(rng.random()), 2), k % 3, rid))
    sets.append(set())  # an empty text: no bucket, never a candidate
    ids.append("src0:empty")
    order_keys.append((0, 0.0, 0, "src0:empty"))
    sigs = []
    for s in sets:
        m = MinHash(num_perm=num_perm, seed=1)
        for t in sorted(s):
            m.update(str(t).encode())
        sigs.append(m.hashvalues)
    return sets, ids, order_keys, np.asarray(sigs, dtype=np.uint64)


def run(sets, ids, order_keys, sigs, policy, band_ranges=None):
    order = stable_order(order_keys)
    res = near_dedup(
        sigs, order, policy, jaccard=lambda i, j: jaccard_sets(sets[i], sets[j]), band_ranges=band_ranges
    )
    clusters = {ids[i]: (ids[res.representative[i]], float(res.rep_jaccard[i])) for i in range(len(ids))}
    edges = sorted((ids[x], ids[y], float(v)) for (x, y), v in zip(res.edges.tolist(), res.edge_jaccard.tolist()))
    comps = {ids[i]: ids[res.component[i]] for i in range(len(ids))}
    return res, clusters, edges, comps


@pytest.mark.parametrize("cap", [None, 3])
def test_release_near_dedup_is_order_and_worker_invariant(cap):
    sets, ids, keys, sigs = make_corpus()
    policy = LshPolicy(threshold=0.7, num_perm=64, bucket_cap=cap)
    res, clusters, edges, comps = run(sets, ids, keys, sigs, policy)
    assert res.removed > 10 and len(edges) > 10
    assert clusters["src0:empty"] == ("src0:empty", 1.0)
    # shuffled input order, mapped back by record id
    for seed in (1, 2):
        p = np.random.default_rng(seed).permutation(len(ids))
        shuffled = ([sets[i] for i in p], [ids[i] for i in p], [keys[i] for i in p], sigs[p])
        _, c2, e2, k2 = run(*shuffled, policy)
        assert (c2, e2, k2) == (clusters, edges, comps)
    # "2 workers": band ranges computed apart and merged
    b, _ = policy.params()
    _, c3, e3, k3 = run(sets, ids, keys, sigs, policy, band_ranges=[(b // 2, b), (0, b // 2)])
    assert (c3, e3, k3) == (clusters, edges, comps)
    # invariants: each removed record points at a kept rep matching directly; the group label is
    # the first member of its component in the total order; rep and record share a group
    rank = {ids[i]: k for k, i in enumerate(stable_order(keys).tolist())}
    idx = {r: i for i, r in enumerate(ids)}
    for rid, (rep, v) in clusters.items():
        if rep != rid:
            assert clusters[rep][0] == rep and v >= policy.threshold
            assert v == jaccard_sets(sets[idx[rid]], sets[idx[rep]])
            assert comps[rid] == comps[rep]
        assert rank[comps[rid]] <= rank[rid]


def test_result_tables():
    sets, ids, keys, sigs = make_corpus(n_families=10, seed=3)
    res, clusters, edges, comps = run(sets, ids, keys, sigs, LshPolicy(threshold=0.7, num_perm=64))
    t = res.tables(ids)
    assert t["clusters"].column_names == ["record_id", "representative_id", "jaccard", "is_representative"]
    assert t["clusters"].num_rows == len(ids)
    assert t["edges"].num_rows == len(edges)
    assert t["components"].num_rows == len(ids)
    assert res.policy["bands"] * res.policy["rows"] <= 64 and res.policy["tau"] == 0.7


def test_signature_agreement():
    sig = np.array([[1, 2, 3, 4], [1, 2, 0, 0], [9, 9, 9, 9]], dtype=np.uint64)
    assert signature_agreement(sig, np.array([[0, 1], [0, 2]])).tolist() == [0.5, 0.0]
