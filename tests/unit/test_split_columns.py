"""The splits layer's column path gives what the record-level rules give: the same leakage group,
u and split for every record and the same report, on releases with chains of near-duplicate
components across declared groups, records without a declared group, and none with a component."""

import random

import pyarrow as pa
import pytest

from corpus_assets.domain.tokens.split_columns import assign_columns, leakage_group_column
from corpus_assets.domain.tokens.splits import SplitPolicy, assign, leakage_groups, unit_interval


def _release(seed: int, n: int):
    rng = random.Random(seed)
    ids = [f"src:{rng.randrange(10**9):09d}/{i}" for i in range(n)]
    rng.shuffle(ids)
    declared = [None if rng.random() < 0.3 else f"doc:{rng.randrange(max(1, n // 3))}" for _ in ids]
    comps = [None if rng.random() < 0.6 else f"c{rng.randrange(max(1, n // 5))}" for _ in ids]
    return ids, declared, comps


@pytest.mark.parametrize("seed,n", [(0, 1), (1, 7), (2, 200), (3, 3000)])
def test_column_path_matches_record_rules(seed, n):
    ids, declared, comps = _release(seed, n)
    policy = SplitPolicy(fractions=[0.7, 0.2, 0.1], salt=f"salt-{seed}")
    want_keys = leakage_groups(ids, declared, comps)
    keys = leakage_group_column(pa.array(ids), pa.array(declared, pa.string()), pa.array(comps, pa.string()))
    assert keys.to_pylist() == want_keys
    got = assign_columns(keys, policy)
    want = assign(ids, want_keys, policy)
    assert got.split.to_pylist() == [want.split[r] for r in ids]
    assert got.u.to_pylist() == [unit_interval(k, policy.salt) for k in want_keys]
    assert got.report == want.report()


def test_a_chain_of_components_joins_declared_groups_and_takes_the_smallest_key():
    ids = ["r1", "r2", "r3", "r4", "r5"]
    declared = ["doc:b", "doc:b", "doc:a", None, "doc:c"]
    comps = [None, "x", "x", "y", "y"]  # r2 ~ r3 joins doc:b with doc:a; r4 ~ r5 joins r4 with doc:c
    keys = leakage_group_column(pa.array(ids), pa.array(declared, pa.string()), pa.array(comps, pa.string()))
    assert keys.to_pylist() == ["doc:a", "doc:a", "doc:a", "doc:c", "doc:c"]


def test_bad_columns_are_refused():
    with pytest.raises(ValueError, match="unique"):
        leakage_group_column(pa.array(["a", "a"]), pa.array([None, None], pa.string()), pa.array([None, None], pa.string()))
    with pytest.raises(ValueError, match="same length"):
        leakage_group_column(pa.array(["a", "b"]), pa.array([None], pa.string()), pa.array([None, None], pa.string()))
