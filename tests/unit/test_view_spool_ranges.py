"""The spool's task ranges: consecutive row groups of about equal size, so two workers finish
together (the spool's bytes do not depend on the cut: test_packed_shards_pipeline)."""

from __future__ import annotations

import random

from corpus_assets.domain.pack.view_spool import balanced_ranges


def test_ranges_cover_every_item_once_in_order_without_empty_ranges():
    rng = random.Random(7)
    for _ in range(200):
        k = rng.randint(1, 40)
        items = [(0, g) for g in range(k)]
        sizes = [rng.choice([0, 1, rng.randint(1, 10**6)]) for _ in range(k)]
        n = rng.randint(1, 50)
        ranges = balanced_ranges(items, sizes, n)
        assert [x for r in ranges for x in r] == items
        assert all(ranges) and len(ranges) <= min(n, k)


def test_no_range_exceeds_its_share_by_more_than_one_item():
    rng = random.Random(11)
    for _ in range(200):
        k = rng.randint(2, 60)
        sizes = [rng.randint(1, 1000) for _ in range(k)]
        n = rng.randint(2, k)
        ranges = balanced_ranges(list(range(k)), sizes, n)
        share = sum(sizes) / n
        for r in ranges:
            assert sum(sizes[i] for i in r) <= share + max(sizes)


def test_a_real_views_table_is_cut_evenly_and_a_big_group_stands_alone():
    # the bench release's row-group sizes (MB), and one group far larger than the rest
    sizes = [27, 22, 29, 27, 27, 18, 23, 26, 30, 33, 18, 2]
    ranges = balanced_ranges(list(range(12)), sizes, 4)
    totals = [sum(sizes[i] for i in r) for r in ranges]
    assert len(ranges) == 4 and max(totals) - min(totals) <= max(sizes)
    assert balanced_ranges(list(range(5)), [1, 1, 1, 1, 100], 2) == [(0, 1, 2, 3), (4,)]
    assert balanced_ranges([], [], 8) == []
    # as many items as ranges or fewer: one item each
    assert balanced_ranges(list(range(3)), [5, 0, 9], 8) == [(0,), (1,), (2,)]
