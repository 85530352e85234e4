"""The release view in Arrow columns (``dedup/release_view.py``) decides exactly what the
record-level version it replaced decided (``tests/release_view_reference.py``): the same copies
chosen per snapshot and the same copies left out, in the same order, with the same reason and
detail — over random capture histories of whole and incremental sources, both rules, sources
whose uses the release does not cover, ids refused by the canonical or the curated stage, items
that never became records, and empty snapshots."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import release_view_reference as reference  # noqa: E402
from corpus_assets.domain.canonical.canonical_layer import CANONICAL_TABLES  # noqa: E402
from corpus_assets.domain.curate.curated_layer import CURATED_TABLES  # noqa: E402
from corpus_assets.domain.dedup.release_view import release_view  # noqa: E402
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE  # noqa: E402
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS  # noqa: E402
from corpus_assets.domain.storage.layer_store import LayerStore  # noqa: E402

REASONS = ["http_404", "robots", "fetch_error", "http_error", "quality.too_short", "pii.too_dense", None]


def _capture(store: LayerStore, snapshot: str, rng: random.Random, ids: list[str]) -> None:
    """One snapshot: some ids accepted (curated records), some refused by canonicalization (with
    or without a record id: an item that never became a record), some refused by curation."""
    source = snapshot.split(".")[0]
    accepted = sorted(rng.sample(ids, rng.randint(0, len(ids))))
    rest = [i for i in ids if i not in accepted]
    canon_refused = rng.sample(rest, rng.randint(0, len(rest)))
    cur_refused = rng.sample(rest, rng.randint(0, len(rest)))
    canon = []
    for rid in canon_refused + rng.sample(accepted, min(len(accepted), 2)):  # a refused copy of an accepted id too
        named = rng.random() < 0.7
        canon.append({"record_id": f"{source}:{rid}" if named else rng.choice([None, ""]), "item_id": rid,
                      "outcome": rng.choice(["rejected", "quarantined", None]), "reason": rng.choice(REASONS)})
    canon += [{"record_id": f"{source}:{rid}", "item_id": rid, "outcome": "accepted", "reason": None} for rid in accepted]
    rng.shuffle(canon)
    with store.new_version(CANONICAL_RECORDS, snapshot, CANONICAL_TABLES, {"t": snapshot}) as w:
        w.write(DECISIONS_TABLE, canon)
        w.commit()
    cur = [{"record_id": rng.choice([f"{source}:{rid}", f"{source}:{rid}", None, ""]), "outcome": "rejected",
            "reason": rng.choice(REASONS)} for rid in cur_refused]
    cur += [{"record_id": f"{source}:{rid}", "outcome": "accepted", "reason": None} for rid in accepted]
    rng.shuffle(cur)
    with store.new_version(CURATED_RECORDS, snapshot, CURATED_TABLES, {"t": snapshot}) as w:
        w.write("records", [{"record_id": f"{source}:{rid}"} for rid in accepted])
        w.write(DECISIONS_TABLE, cur)
        w.commit()


def _as_compared(view) -> tuple:
    chosen = {k: sorted(v) if isinstance(v, set) else v.to_pylist() for k, v in view.chosen.items() if len(v)}
    return chosen, [(e.record_id, e.snapshot, e.reason, e.detail, e.superseded_by) for e in view.excluded], view.counts


@pytest.mark.parametrize("seed", range(12))
def test_the_columnar_view_decides_what_the_record_level_view_decided(tmp_path, seed):
    rng = random.Random(seed)
    store = LayerStore(tmp_path)
    sources = ["crawl", "files", "mirror"]
    snapshots = []
    for source in sources:
        ids = [f"p{i:02d}" + rng.choice(["", "é", "Z", "a"]) for i in range(rng.randint(0, 25))]
        for k in range(rng.randint(1, 4)):
            snap = f"{source}.2026010{k + 1}T0{rng.randint(0, 9)}0000"
            if snap in snapshots:
                continue
            _capture(store, snap, rng, ids)
            snapshots.append(snap)
    for rule in ("latest", "union"):
        for incremental in ([], ["crawl"], ["crawl", "mirror"]):
            for allowed, uses in ((None, ()), ({"files": ["research"]}, ("research", "commercial")),
                                  ({"mirror": ["research"]}, ("research",))):
                kw = dict(rule=rule, incremental_sources=incremental, allowed_uses=allowed, uses=uses)
                want = reference.release_view(store, snapshots, **kw)
                got = release_view(store, snapshots, **kw)
                assert _as_compared(got) == _as_compared(want), (rule, incremental, allowed, uses)
                for snap in snapshots:
                    for rid in got.chosen_ids(snap).to_pylist()[:3]:
                        assert got.uses_copy(snap, rid) and not got.uses_copy(snap, rid + "~")
