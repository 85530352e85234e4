"""Group-hash splits (seed §18.1 design effect, §18.5 group split and conflicts)."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from corpus_assets.domain.tokens.splits import (
    SplitConflictError,
    SplitPolicy,
    assign,
    design_effect,
    effective_sample_size,
    leakage_groups,
    split_policy_version,
    unit_interval,
)

POLICY = SplitPolicy()


def _split_of(key: str, policy: SplitPolicy = POLICY) -> str:
    return policy.split_of_u(unit_interval(key, policy.salt))


def _keys_in(split: str, count: int, prefix: str = "g", policy: SplitPolicy = POLICY) -> list[str]:
    out, i = [], 0
    while len(out) < count:
        k = f"{prefix}{i:05d}"
        if _split_of(k, policy) == split:
            out.append(k)
        i += 1
    return out


# ------------------------------------------------------------------------------------------------
# design effect (seed §18.1)


def test_seed_example_five_answers_rho_half_is_about_3333_effective():
    sizes = [5] * 2000  # 2000 problems x 5 answers = 10000 observations
    deff = design_effect(sizes, 0.5)
    assert deff == pytest.approx(3.0)
    assert effective_sample_size(10000, deff) == pytest.approx(3333.33, abs=0.01)


def test_design_effect_uses_size_weighted_mean_for_unequal_groups():
    # 1 group of 10 and 10 singletons: N = 20, sum m^2 = 110, m_w = 5.5 (plain mean would be 20/11)
    assert design_effect([10] + [1] * 10, 0.5) == pytest.approx(1 + 4.5 * 0.5)
    assert design_effect([1] * 100, 0.9) == pytest.approx(1.0)  # singletons: no clustering
    assert design_effect([4] * 10, 0.0) == pytest.approx(1.0)  # independent within groups
    assert design_effect([4] * 10, 1.0) == pytest.approx(4.0)  # perfectly correlated: one per group


@pytest.mark.parametrize("rho", [-0.1, 1.5, float("nan")])
def test_design_effect_rejects_bad_rho(rho):
    with pytest.raises(ValueError, match="rho"):
        design_effect([5, 5], rho)


def test_design_effect_rejects_bad_sizes():
    with pytest.raises(ValueError):
        design_effect([], 0.5)
    with pytest.raises(ValueError):
        design_effect([0, 3], 0.5)
    with pytest.raises(ValueError):
        effective_sample_size(10, 0.0)


# ------------------------------------------------------------------------------------------------
# policy validation


def test_default_policy_is_80_10_10():
    assert POLICY.cumulative_boundaries() == [pytest.approx(0.8), pytest.approx(0.9), 1.0]
    assert POLICY.target_fractions() == {"train": pytest.approx(0.8), "validation": pytest.approx(0.1), "test": pytest.approx(0.1)}
    assert SplitPolicy(boundaries=[0.8, 0.9, 1.0]).cumulative_boundaries() == POLICY.cumulative_boundaries()


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"boundaries": [0.8, 0.7, 1.0]}, "boundaries", "strictly increasing"),
        ({"boundaries": [0.8, 0.8, 1.0]}, "boundaries", "strictly increasing"),
        ({"boundaries": [0.8, 0.9, 1.2]}, "boundaries", "outside [0, 1]"),
        ({"boundaries": [-0.1, 0.9, 1.0]}, "boundaries", "outside [0, 1]"),
        ({"boundaries": [0.5, 0.9, 0.95]}, "boundaries", "last boundary must be 1"),
        ({"fractions": [0.8, 0.1, 0.05]}, "fractions", "sum to 1"),
        ({"fractions": [0.8, 0.3, -0.1]}, "fractions", "outside (0, 1]"),
        ({"fractions": [0.9, 0.1]}, "fractions", "'names' has 3"),
        ({"boundaries": [0.9, 1.0]}, "boundaries", "'names' has 3"),
        ({"names": ["train", "train", "test"]}, "names", "unique"),
        ({"salt": ""}, "salt", "salt"),
        ({"fractions": [0.8, 0.1, 0.1], "boundaries": [0.8, 0.9, 1.0]}, "fractions", "not both"),
        ({"conflict_policy": "ignore"}, "conflict_policy", ""),
        ({"seed": 3}, "seed", "xtra"),
    ],
)
def test_policy_errors_name_the_field(kwargs, field, words):
    with pytest.raises(ValidationError) as exc:
        SplitPolicy(**kwargs)
    msg = str(exc.value)
    assert field in msg
    assert words in msg


def test_policy_version_is_stable_and_tracks_salt_and_boundaries():
    v = split_policy_version(POLICY)
    assert v == split_policy_version(SplitPolicy()) == split_policy_version(SplitPolicy(boundaries=[0.8, 0.9, 1.0]))
    assert len(v) == 16
    assert split_policy_version(SplitPolicy(salt="other")) != v
    assert split_policy_version(SplitPolicy(fractions=[0.9, 0.05, 0.05])) != v
    assert split_policy_version(SplitPolicy(conflict_policy="require_new_eval_version")) != v


# ------------------------------------------------------------------------------------------------
# u(g)


def test_unit_interval_is_deterministic_salted_and_roughly_uniform():
    assert unit_interval("doc-1", "s") == unit_interval("doc-1", "s")
    assert unit_interval("doc-1", "s") != unit_interval("doc-1", "t")
    # the NUL separator: ("ab", "c") and ("a", "bc") do not collide
    assert unit_interval("c", "ab") != unit_interval("bc", "a")
    us = [unit_interval(f"group-{i}", POLICY.salt) for i in range(10_000)]
    assert all(0.0 <= u < 1.0 for u in us)
    deciles = [0] * 10
    for u in us:
        deciles[int(u * 10)] += 1
    assert all(abs(c / 10_000 - 0.1) < 0.015 for c in deciles), deciles
    shares = {n: 0 for n in POLICY.names}
    for u in us:
        shares[POLICY.split_of_u(u)] += 1
    assert abs(shares["train"] / 10_000 - 0.8) < 0.02
    assert abs(shares["validation"] / 10_000 - 0.1) < 0.015
    assert abs(shares["test"] / 10_000 - 0.1) < 0.015


def test_split_of_u_boundaries():
    assert POLICY.split_of_u(0.0) == "train"
    assert POLICY.split_of_u(0.7999) == "train"
    assert POLICY.split_of_u(0.8) == "validation"
    assert POLICY.split_of_u(0.9) == "test"
    assert POLICY.split_of_u(0.999999) == "test"


# ------------------------------------------------------------------------------------------------
# leakage groups


def test_leakage_groups_join_declared_and_near_components_transitively():
    ids = ["r1", "r2", "r3", "r4", "r5", "r6"]
    declared = ["doc-b", "doc-b", "doc-a", "doc-c", None, None]
    # r2 ~ r3 near duplicates (joins doc-b and doc-a); r5 ~ r6; r4 alone
    near = [None, "c1", "c1", None, "c2", "c2"]
    keys = leakage_groups(ids, declared, near)
    assert keys == ["doc-a", "doc-a", "doc-a", "doc-c", "r5", "r5"]


def test_leakage_groups_do_not_depend_on_order_and_check_input():
    rng = random.Random(7)
    ids = [f"r{i}" for i in range(300)]
    declared = [f"d{rng.randrange(120)}" if rng.random() < 0.8 else None for _ in ids]
    near = [f"c{rng.randrange(40)}" if rng.random() < 0.3 else None for _ in ids]
    base = dict(zip(ids, leakage_groups(ids, declared, near)))
    order = list(range(300))
    rng.shuffle(order)
    shuffled = leakage_groups([ids[i] for i in order], [declared[i] for i in order], [near[i] for i in order])
    assert dict(zip([ids[i] for i in order], shuffled)) == base
    with pytest.raises(ValueError, match="same length"):
        leakage_groups(["a"], [], [None])
    with pytest.raises(ValueError, match="unique"):
        leakage_groups(["a", "a"], [None, None], [None, None])


# ------------------------------------------------------------------------------------------------
# assignment, proportions


def test_whole_group_goes_to_one_split_and_order_does_not_matter():
    rng = random.Random(1)
    ids = [f"r{i}" for i in range(2000)]
    keys = [f"g{rng.randrange(400)}" for _ in ids]
    a = assign(ids, keys, POLICY)
    for r, g in zip(ids, keys):
        assert a.split[r] == _split_of(g)
    order = list(range(len(ids)))
    rng.shuffle(order)
    b = assign([ids[i] for i in order], [keys[i] for i in order], POLICY)
    assert b.split == a.split and b.quarantined == a.quarantined == [] and b.conflicts == []
    assert list(b.split) == sorted(b.split)
    assert a.report() == b.report()


def test_realized_record_shares_drift_from_target_when_group_sizes_differ():
    # 1000 groups whose u(g) is spread as usual; the test groups are 20x larger than the rest.
    keys = [f"fam{i:04d}" for i in range(1000)]
    ids, gks, tokens = [], [], {}
    for k in keys:
        size = 20 if _split_of(k) == "test" else 1
        for j in range(size):
            rid = f"{k}/{j}"
            ids.append(rid)
            gks.append(k)
            tokens[rid] = 10 if _split_of(k) == "train" else 100
    rep = assign(ids, gks, POLICY).report(tokens=tokens, rho=0.5)
    s = rep["splits"]
    # groups land ~80/10/10 ...
    assert abs(s["train"]["group_share"] - 0.8) < 0.04
    assert abs(s["test"]["group_share"] - 0.1) < 0.03
    # ... but records and tokens do not
    assert s["train"]["record_share"] < 0.4
    assert s["test"]["record_share"] > 0.5
    assert s["train"]["token_share"] < s["train"]["record_share"]  # train records are short
    assert s["test"]["record_share_drift"] == pytest.approx(s["test"]["record_share"] - 0.1)
    assert sum(v["record_share"] for v in s.values()) == pytest.approx(1.0)
    assert sum(v["token_share"] for v in s.values()) == pytest.approx(1.0)
    assert rep["records"] == len(ids) and rep["tokens"] == sum(tokens.values())
    # design effect from the known group sizes: test groups are 20 records each
    assert s["test"]["design_effect"] == pytest.approx(1 + 19 * 0.5)
    assert s["test"]["effective_sample_size"] == pytest.approx(s["test"]["records"] / 10.5)
    assert s["train"]["design_effect"] == pytest.approx(1.0)  # singletons
    assert rep["strict_isolation"] is True


def test_one_giant_document_dominates_record_shares():
    ids = [f"big/{i}" for i in range(3000)] + [f"s{i}" for i in range(1000)]
    keys = ["big"] * 3000 + [f"s{i}" for i in range(1000)]
    rep = assign(ids, keys, POLICY).report()
    giant = _split_of("big")
    assert rep["splits"][giant]["record_share"] > 0.75
    assert rep["splits"][giant]["max_group_size"] == 3000


def test_report_requires_tokens_for_every_assigned_record():
    a = assign(["a", "b"], ["a", "b"], POLICY)
    with pytest.raises(ValueError, match="tokens missing"):
        a.report(tokens={"a": 3})


# ------------------------------------------------------------------------------------------------
# incremental releases: groups never move; conflicts


def _release(rng: random.Random, start: int, count: int, n_groups: int, near_rate: float):
    ids = [f"rec{start + i:06d}" for i in range(count)]
    declared = [f"doc{rng.randrange(n_groups):05d}" for _ in ids]
    near = [f"near{rng.randrange(n_groups // 4)}" if rng.random() < near_rate else None for _ in ids]
    return ids, declared, near


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adding_a_snapshot_never_moves_an_existing_group(seed):
    rng = random.Random(seed)
    ids1, dec1, near1 = _release(rng, 0, 1500, 600, 0.0)
    keys1 = leakage_groups(ids1, dec1, near1)
    first = assign(ids1, keys1, POLICY)
    assert first.conflicts == []
    published = first.split

    # snapshot 2: new records in old and new documents, some with near edges into old records
    ids2, dec2, near2 = _release(rng, 1500, 800, 900, 0.0)
    near_old = list(near1)
    near_new = list(near2)
    for i in range(len(ids2)):
        if rng.random() < 0.2:  # verified edge between this new record and a random old record
            j = rng.randrange(len(ids1))
            label = near_old[j] or f"edge{i}"
            near_old[j] = label
            near_new[i] = label
    ids = ids1 + ids2
    keys = leakage_groups(ids, dec1 + dec2, near_old + near_new)
    second = assign(ids, keys, POLICY, previous=published)

    # the scenario is not trivial: keys changed by merges, u(new key) would move some records,
    # and some merges join groups published in different splits
    old_group = dict(zip(ids1, keys1))
    new_group = dict(zip(ids, keys))
    assert sum(old_group[r] != new_group[r] for r in ids1) > 100
    assert sum(_split_of(new_group[r]) != published[r] for r in ids1) > 50
    assert len(second.conflicts) > 5
    # no published record moves, whether or not its group merged or changed key
    for r, s in published.items():
        assert second.split[r] == s
    # new records follow their group's published split; only conflict groups quarantine them
    group_of = dict(zip(ids, keys))
    conflict_keys = {c.group_key for c in second.conflicts}
    for r in ids2:
        g = group_of[r]
        old_splits = {published[o] for o in ids1 if group_of[o] == g}
        if g in conflict_keys:
            assert r in second.quarantined and r not in second.split
        elif old_splits:
            assert second.split[r] == old_splits.pop()
        else:
            assert second.split[r] == _split_of(g)
    assert set(second.quarantined) <= set(ids2)
    rep = second.report()
    assert rep["strict_isolation"] is (not second.conflicts)
    assert sorted(rep["isolation_broken_groups"]) == sorted(conflict_keys)


def test_new_group_whose_key_sorts_lower_does_not_move_the_old_group():
    # old group "doc-m" is published; a new document "doc-a" near-duplicates it -> merged key "doc-a"
    old_key = _keys_in("test", 1, "doc-m")[0]
    new_key = _keys_in("train", 1, "doc-a")[0]
    assert new_key < old_key and _split_of(old_key) != _split_of(new_key)  # u(new key) would move it
    published = assign(["m1", "m2"], [old_key, old_key], POLICY).split
    keys = leakage_groups(["m1", "m2", "a1"], [old_key, old_key, new_key], ["c", None, "c"])
    assert keys == [new_key] * 3
    second = assign(["m1", "m2", "a1"], keys, POLICY, previous=published)
    assert second.split == {"m1": "test", "m2": "test", "a1": "test"}
    assert second.conflicts == [] and second.pinned_groups == [new_key]
    # without the published splits the merged group would go by u(new key)
    assert assign(["m1", "m2", "a1"], keys, POLICY).split["m1"] == "train"


def _conflict_setup():
    # two documents published in different splits, plus an unrelated one
    a_key = _keys_in("train", 1, "docA")[0]
    b_key = _keys_in("test", 1, "docB")[0]
    c_key = _keys_in("validation", 1, "docC")[0]
    ids1 = ["a1", "a2", "b1", "b2", "c1"]
    dec1 = [a_key, a_key, b_key, b_key, c_key]
    first = assign(ids1, leakage_groups(ids1, dec1, [None] * 5), POLICY)
    assert first.split == {"a1": "train", "a2": "train", "b1": "test", "b2": "test", "c1": "validation"}
    # snapshot 2: new record n1 of doc A; new record x1 (own document) near-duplicates a2 and b1,
    # which joins A and B; new record c2 of doc C
    ids = ids1 + ["n1", "x1", "c2"]
    dec = dec1 + [a_key, "x-doc", c_key]
    near = [None, "e", "e", None, None, None, "e", None]
    keys = leakage_groups(ids, dec, near)
    return first.split, ids, keys, min(a_key, b_key, "x-doc")


def test_edge_joining_groups_in_different_splits_is_reported_and_new_records_quarantined():
    published, ids, keys, merged = _conflict_setup()
    out = assign(ids, keys, POLICY, previous=published)
    assert len(out.conflicts) == 1
    c = out.conflicts[0]
    assert c.group_key == merged
    assert c.records == ["a1", "a2", "b1", "b2", "n1", "x1"]
    assert c.previous_splits == {"a1": "train", "a2": "train", "b1": "test", "b2": "test"}
    assert c.new_records == ["n1", "x1"]
    assert c.action == "quarantined_new"
    # exactly the new records of the conflict group are quarantined; old ones keep their splits
    assert out.quarantined == ["n1", "x1"]
    assert {r: out.split[r] for r in ["a1", "a2", "b1", "b2"]} == {"a1": "train", "a2": "train", "b1": "test", "b2": "test"}
    assert out.split["c2"] == "validation"  # unrelated group: new record follows its group
    rep = out.report(tokens={r: 5 for r in ids})
    assert rep["strict_isolation"] is False
    assert rep["isolation_broken_groups"] == [merged]
    assert rep["quarantined"] == {"records": 2, "record_ids": ["n1", "x1"], "tokens": 10}
    assert rep["conflicts"][0]["records"] == c.records
    assert "a1" in c.describe() and "x1" in c.describe()


def test_conflict_under_require_new_eval_version_raises_listing_the_records():
    published, ids, keys, merged = _conflict_setup()
    policy = SplitPolicy(conflict_policy="require_new_eval_version")
    with pytest.raises(SplitConflictError) as exc:
        assign(ids, keys, policy, previous=published)
    msg = str(exc.value)
    for r in ["a1", "a2", "b1", "b2", "n1", "x1"]:
        assert r in msg
    assert "new evaluation version" in msg
    assert [c.group_key for c in exc.value.conflicts] == [merged]
    assert exc.value.conflicts[0].action == "require_new_eval_version"


def test_previous_split_must_be_a_known_name():
    with pytest.raises(ValueError, match="not one of names"):
        assign(["a"], ["a"], POLICY, previous={"a": "dev"})


def test_assign_checks_input():
    with pytest.raises(ValueError, match="length"):
        assign(["a", "b"], ["a"], POLICY)
    with pytest.raises(ValueError, match="unique"):
        assign(["a", "a"], ["a", "a"], POLICY)
