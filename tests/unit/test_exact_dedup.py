"""Exact dedup (issue 4): whole-object keys, alias rows per source, stable representative,
collision safety by byte comparison."""

from __future__ import annotations

import random

import pytest

from corpus_assets.domain.dedup.exact import ExactGroup, alias_rows, exact_groups, exact_summary
from corpus_assets.domain.core.hashing import canonical_json, dedup_key, dedup_normal_form

# (record_id, source, eligible, quality, source_priority, text, domain)
RECORDS = [
    ("web:1", "web", True, 0.7, 2, "Hello   World", "prose"),
    ("wiki:9", "wiki", True, 0.9, 1, "hello world", "prose"),
    ("forum:3", "forum", False, 0.99, 0, "HELLO world ", "prose"),
    ("web:2", "web", True, 0.9, 1, "hello world", "prose"),
    ("code:1", "code", True, 0.5, 0, "def f():\n    return 1", "code"),
    ("code:2", "code2", True, 0.5, 0, "def f():\n  return 1", "code"),  # indentation differs
    ("web:5", "web", True, 0.1, 3, "something else", "prose"),
]


def order_key(rec):
    rid, _src, eligible, quality, prio, _t, _d = rec
    return (not eligible, -quality, prio, rid)


def setup(records):
    keys = [dedup_key(r[5], r[6]) for r in records]
    texts = [dedup_normal_form(r[5], r[6]).encode() for r in records]
    calls = []

    def normalized(i):
        calls.append(i)
        return texts[i]

    return keys, normalized, [order_key(r) for r in records], calls


def test_groups_representative_and_aliases():
    keys, normalized, okeys, calls = setup(RECORDS)
    groups = exact_groups(keys, normalized, okeys)
    by_rep = {RECORDS[g.representative][0]: [RECORDS[m][0] for m in g.members] for g in groups}
    # eligible first, then quality, then source priority, then record_id: wiki:9 and web:2 tie
    # on (eligible, quality, priority) -> record_id decides; forum:3 is ineligible -> last
    assert by_rep["web:2"] == ["web:2", "wiki:9", "web:1", "forum:3"]
    assert by_rep["code:1"] == ["code:1"] and by_rep["code:2"] == ["code:2"]  # code is not folded
    assert by_rep["web:5"] == ["web:5"]
    assert sorted(calls) == [0, 1, 2, 3]  # bytes are only fetched for shared keys
    rows = list(alias_rows(groups, [r[0] for r in RECORDS], [r[1] for r in RECORDS]))
    assert len(rows) == len(RECORDS)  # one row per (representative, alias record, source)
    hello = [(r["representative_id"], r["record_id"], r["source_id"], r["is_representative"]) for r in rows
             if r["representative_id"] == "web:2"]
    assert hello == [
        ("web:2", "web:2", "web", True),
        ("web:2", "wiki:9", "wiki", False),
        ("web:2", "web:1", "web", False),
        ("web:2", "forum:3", "forum", False),
    ]
    s = exact_summary(groups)
    assert s == {"records": 7, "representatives": 4, "duplicates_removed": 3, "duplicate_groups": 1,
                 "key_collisions": 0}


def test_representative_does_not_depend_on_input_order():
    def rep_map(records):
        keys, normalized, okeys, _ = setup(records)
        return sorted(
            (records[g.representative][0], tuple(records[m][0] for m in g.members))
            for g in exact_groups(keys, normalized, okeys)
        )

    expected = rep_map(RECORDS)
    rng = random.Random(4)
    for _ in range(10):
        shuffled = RECORDS[:]
        rng.shuffle(shuffled)
        assert rep_map(shuffled) == expected
    # "2 workers": grouping within two halves of the keys then merging gives the same groups,
    # because a group only depends on its own key's members
    keys, normalized, okeys, _ = setup(RECORDS)
    whole = exact_groups(keys, normalized, okeys)
    halves = []
    for part in ({k for k in keys if k < "8"}, {k for k in keys if k >= "8"}):
        idx = [i for i, k in enumerate(keys) if k in part]
        sub = exact_groups([keys[i] for i in idx], lambda j: normalized(idx[j]), [okeys[i] for i in idx])
        halves += [ExactGroup(g.key, idx[g.representative], tuple(idx[m] for m in g.members)) for g in sub]
    assert sorted(halves, key=lambda g: (g.key, okeys[g.representative])) == whole


def test_digest_collision_never_merges_different_content():
    # force equal keys for different normalized bytes: they must stay apart
    texts = [b"alpha", b"beta", b"alpha", b"beta", b"gamma"]
    keys = ["same-key"] * 5
    okeys = [(0, f"r{i}") for i in range(5)]
    groups = exact_groups(keys, lambda i: texts[i], okeys)
    assert [(g.representative, g.members) for g in groups] == [(0, (0, 2)), (1, (1, 3)), (4, (4,))]
    assert all(g.key == "same-key" for g in groups)
    assert exact_summary(groups)["key_collisions"] == 1
    with pytest.raises(TypeError):
        exact_groups(["k", "k"], lambda i: "str", [(0,), (1,)])


def test_whole_object_key_not_answer_only():
    # two preference pairs with the same chosen answer but different prompts are different
    # objects: the dedup key is over the whole pair
    a = {"prompt": "Add 2 and 2.", "chosen": "4", "rejected": "5"}
    b = {"prompt": "What is the square root of 16?", "chosen": "4", "rejected": "5"}
    c = dict(a)
    objs = [a, b, c]
    texts = [canonical_json(o).decode() for o in objs]
    keys = [dedup_key(t, "code") for t in texts]  # structured object: no case/space folding
    groups = exact_groups(keys, lambda i: dedup_normal_form(texts[i], "code").encode(),
                          [(0, f"p{i}") for i in range(3)])
    assert sorted(g.members for g in groups) == [(0, 2), (1,)]
    # the answers alone would have (wrongly) collapsed all three
    assert len({dedup_key(o["chosen"], "prose") for o in objs}) == 1


def test_order_keys_must_be_total():
    with pytest.raises(ValueError):
        exact_groups(["k", "k"], lambda i: b"x", [(0, "same"), (0, "same")])
    with pytest.raises(ValueError):
        exact_groups(["k"], lambda i: b"x", [])
