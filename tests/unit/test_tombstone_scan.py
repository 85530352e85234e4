"""The tombstone scan looks ids up with Arrow hash lookups, and a release's check scans only its own
partitions: the same findings as the per-value scan of the whole store (issue 18: a release build
must not read every layer of every snapshot and release once a deletion exists)."""

from __future__ import annotations

import random
from typing import Iterable, Optional

import pyarrow as pa

from corpus_assets.domain.deletion import tombstones
from corpus_assets.domain.deletion.purge import (
    DELETED_OUTCOME, DELETED_STATUS, _scan_table, id_checks, scan_for_tombstoned, without_markers,
)
from corpus_assets.domain.deletion.tombstones import TombstoneSet
from corpus_assets.domain.layers.registry import Purge, Table
from test_deletion import DUMP, ITEMS, RELEASE, WEB, build_release, file_and_resolve, req
from test_deletion import world  # noqa: F401  (fixture)


def per_value_scan(ts: TombstoneSet, t: pa.Table, table: Optional[Table]) -> Iterable[tuple[str, str, str, int]]:
    """The lookup as it was before the hash lookups: every distinct value of every id column through
    ``is_tombstoned``, with the rows that hold it (kept here as the reference; the marker rules are
    the module's)."""
    t, leaks = without_markers(t, table)
    yield from leaks
    for column, arg in id_checks(table):
        if column not in t.column_names:
            continue
        values = t.column(column).to_pylist()
        for value in set(values):
            if value:
                hit = ts.is_tombstoned(**{arg: value})
                if hit is not None:
                    yield column, value, hit, values.count(value)


def _random_case(rng: random.Random) -> tuple[TombstoneSet, pa.Table, Optional[Table]]:
    sources = ["web", "dump", "wiki", "we", "web:x"]
    ids = [f"{rng.choice(sources)}:{rng.randrange(40)}" for _ in range(60)] + ["", "nocolon", "web", ":lead"]
    uris = [f"https://h/{i}" for i in range(30)]
    digests = [f"{i:064x}" for i in range(30)]
    n = rng.randrange(0, 80)

    def col(pool, nulls=True):
        return pa.array([None if nulls and rng.random() < 0.1 else rng.choice(pool) for _ in range(n)], pa.string())

    data = {"record_id": col(ids), "representative_id": col(ids), "uri": col(uris), "source_id": col(sources),
            "text_sha256": col(digests), "raw_sha256": col(digests)}
    if rng.random() < 0.5:
        data["outcome"] = col(["accepted", DELETED_OUTCOME])
    if rng.random() < 0.3:
        data["status"] = col(["ok", DELETED_STATUS])
        data["byte_length"] = pa.array([rng.choice([None, 3]) for _ in range(n)], pa.int64())
    t = pa.table({k: v for k, v in data.items() if rng.random() < 0.8 or k == "record_id"})
    pick = lambda pool, k: {v: f"req-{rng.randrange(5)}" for v in rng.sample(pool, k)}  # noqa: E731
    ts = TombstoneSet(
        generation=1,
        record_ids=pick([i for i in ids if i], rng.randrange(0, 8)),
        uris=pick(uris, rng.randrange(0, 4)),
        sources=pick(sources, rng.choice([0, 0, 1, 2])),
        digests=pick(digests, rng.randrange(0, 4)),
        raw_digests=pick(digests, rng.randrange(0, 4)),
    )
    table = rng.choice([None, Table(None, record_ids=("record_id",), purge=Purge.MARK),
                        Table(None, record_ids=("record_id", "representative_id"), purge=Purge.DROP),
                        Table(None, record_ids=(), purge=Purge.STUB)])
    return ts, t, table


def test_hash_lookups_find_what_the_per_value_scan_finds():
    rng = random.Random(18)
    hits = 0
    for _ in range(400):
        ts, t, table = _random_case(rng)
        want = sorted(per_value_scan(ts, t, table))
        got = list(_scan_table(ts, t, table))
        assert sorted(got) == want
        assert len(got) == len({g[:2] for g in got})  # each (column, value) once per table, with its rows
        hits += len(want)
    assert hits > 200  # the cases do find tombstoned ids (sources by prefix, uris, digests, stubs)


def test_a_scan_limited_to_partitions_finds_what_filtering_the_whole_store_finds(world):
    store, catalog = world
    file_and_resolve(store, catalog, req(kind="record", record_id="dump:L1"))
    file_and_resolve(store, catalog, req(kind="uri", uri="https://web.example/b"))
    ts = tombstones.load_tombstones(catalog)
    everything = scan_for_tombstoned(store, ts)
    assert {f["partition"] for f in everything} >= {RELEASE} and len({f["partition"] for f in everything}) > 2
    for scope in ({RELEASE}, {RELEASE, *list(ITEMS)[:1]}, set(ITEMS), set()):
        assert scan_for_tombstoned(store, ts, partitions=scope) == [f for f in everything if f["partition"] in scope]


def test_versions_found_clean_are_skipped_until_the_tombstones_change(world):
    from corpus_assets.domain.deletion.clean_scans import known_clean, record_clean, tombstone_fingerprint
    from corpus_assets.domain.deletion.purge import ScanCoverage

    store, catalog = world
    file_and_resolve(store, catalog, req(kind="record", record_id="web:ghost"))  # names nothing on disk
    ts = tombstones.load_tombstones(catalog)
    fp = tombstone_fingerprint(ts)
    first = ScanCoverage()
    assert scan_for_tombstoned(store, ts, coverage=first) == []
    assert first.read > 10 and first.skipped == 0 and len(first.clean) == first.read
    assert record_clean(catalog, fp, first.clean) == first.read
    assert known_clean(catalog, fp) == frozenset(first.clean)
    again = ScanCoverage()
    assert scan_for_tombstoned(store, ts, known_clean=known_clean(catalog, fp), coverage=again) == []
    assert (again.read, again.skipped) == (0, first.read)  # nothing read a second time

    # a rebuilt version (new version id) is read again under the same tombstones
    build_release(store, snapshots=(WEB, DUMP))
    rebuilt = ScanCoverage()
    scan_for_tombstoned(store, ts, known_clean=known_clean(catalog, fp), coverage=rebuilt)
    assert rebuilt.read > 0 and {r[1] for r in rebuilt.clean} == {RELEASE}
    record_clean(catalog, fp, rebuilt.clean)

    # a new tombstone naming a record that is there: a new fingerprint, nothing known under it, and
    # the record found wherever it is, exactly as a scan that remembers nothing finds it
    file_and_resolve(store, catalog, req(kind="record", record_id="dump:L1"))
    ts2 = tombstones.load_tombstones(catalog)
    fp2 = tombstone_fingerprint(ts2)
    assert fp2 != fp and known_clean(catalog, fp2) == frozenset()
    after = ScanCoverage()
    found = scan_for_tombstoned(store, ts2, known_clean=known_clean(catalog, fp2), coverage=after)
    assert found and found == scan_for_tombstoned(store, ts2)
    dirty = {(f["asset"], f["partition"], f["version"]) for f in found}
    assert after.read == first.read and not dirty & {r[:3] for r in after.clean}  # a version with a hit is never clean
    # the memo of the old set does not hide it: looked up by the new set's fingerprint only
    assert scan_for_tombstoned(store, ts2, known_clean=known_clean(catalog, fp)) != found
