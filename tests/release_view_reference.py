"""``release_view`` as of commit adb455c: Python sets and dicts of record ids per snapshot. Kept
only as the reference tests/unit/test_release_view_columns.py compares the columnar view with (every
chosen copy and every copy left out, with its reason and detail, in the same order)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS
from corpus_assets.domain.storage.layer_store import LayerStore

# the reasons and the Excluded record are the module's own: only the way of deciding is frozen here
from corpus_assets.domain.dedup.release_view import (
    ABSENT, NO_NEWS, NOT_ACCEPTED, REMOVED_LATER, RULES, SUPERSEDED, USE_NOT_ALLOWED, Excluded,
)


@dataclass
class ReleaseView:
    rule: str
    uses: tuple[str, ...]
    chosen: dict[str, set[str]] = field(default_factory=dict)  # snapshot -> record ids used from it
    excluded: list[Excluded] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # reason -> copies left out

    def uses_copy(self, snapshot: str, record_id: str) -> bool:
        return record_id in self.chosen.get(snapshot, ())


def _ordered(snapshots: Iterable[str]) -> list[str]:
    return sorted(snapshots, key=lambda k: (parse_snapshot_key(k)[1], k))


def _ids(version, table: str, columns: list[str]):
    for b in version.iter_batches(table, batch_size=8192, columns=columns):
        yield from zip(*(b.column(c).to_pylist() for c in columns))


class _Snapshot:
    """What one snapshot says about its records: the accepted ones, and the record ids it did not
    accept (with the reason), read from its canonical and curated decisions (ids only)."""

    def __init__(self, store: LayerStore, snapshot: str) -> None:
        source_id = parse_snapshot_key(snapshot)[0]
        self.key = snapshot
        self.accepted = {rid for (rid,) in _ids(store.require_current(CURATED_RECORDS, snapshot), "records", ["record_id"])}
        self.refused: dict[str, str] = {}
        canon = store.require_current(CANONICAL_RECORDS, snapshot)
        for rid, item_id, outcome, reason in _ids(canon, DECISIONS_TABLE, ["record_id", "item_id", "outcome", "reason"]):
            if outcome != "accepted":
                # an item that never became a record is named as its document would be
                self.refused[rid or f"{source_id}:{item_id}"] = reason
        cur = store.require_current(CURATED_RECORDS, snapshot)
        for rid, outcome, reason in _ids(cur, DECISIONS_TABLE, ["record_id", "outcome", "reason"]):
            if outcome != "accepted" and rid:
                self.refused[rid] = reason


def release_view(store: LayerStore, snapshots: Iterable[str], *, rule: str = "latest",
                 incremental_sources: Iterable[str] = (), allowed_uses: Optional[Mapping[str, Iterable[str]]] = None,
                 uses: Iterable[str] = ()) -> ReleaseView:
    """The copies a release built from ``snapshots`` uses (see the module docstring).
    ``allowed_uses``: source id -> its governance's allowed uses (a source missing from it is not
    restricted); ``uses``: what the release is for."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    view = ReleaseView(rule=rule, uses=tuple(sorted(set(uses))))
    incremental = set(incremental_sources)
    by_source: dict[str, list[str]] = {}
    for snap in _ordered(set(snapshots)):
        by_source.setdefault(parse_snapshot_key(snap)[0], []).append(snap)
    for source, snaps in sorted(by_source.items()):
        seen = [_Snapshot(store, s) for s in snaps]
        allowed = None if allowed_uses is None or source not in allowed_uses else set(allowed_uses[source])
        missing = sorted(set(view.uses) - allowed) if allowed is not None else []
        if missing:
            detail = (f"source {source} allows {', '.join(sorted(allowed)) or 'no use'}; "
                      f"the release is for {', '.join(view.uses)}")
            for s in seen:
                for rid in sorted(s.accepted):
                    view.excluded.append(Excluded(rid, s.key, USE_NOT_ALLOWED, detail))
            continue
        if rule == "union":
            state = {}
            for s in seen:
                state.update({rid: ("accepted", s.key) for rid in s.accepted})
        elif source in incremental:
            state = {}
            for s in seen:  # capture order: a later snapshot overrides what it mentions
                for rid, reason in s.refused.items():
                    if rid not in s.accepted and reason not in NO_NEWS:
                        state[rid] = (reason, s.key)
                state.update({rid: ("accepted", s.key) for rid in s.accepted})
        else:
            last = seen[-1]
            state = {rid: ("accepted", last.key) for rid in last.accepted}
            state.update({rid: (reason, last.key) for rid, reason in last.refused.items() if rid not in last.accepted})
        for s in seen:
            for rid in sorted(s.accepted):
                verdict, where = state.get(rid, (None, None))
                if verdict == "accepted" and where == s.key:
                    view.chosen.setdefault(s.key, set()).add(rid)
                elif verdict == "accepted":
                    view.excluded.append(Excluded(rid, s.key, SUPERSEDED, f"superseded by the copy in {where}", where))
                elif verdict is None:
                    view.excluded.append(Excluded(rid, s.key, ABSENT, f"not in {seen[-1].key}, the source's latest snapshot"))
                elif source in incremental:
                    view.excluded.append(Excluded(rid, s.key, REMOVED_LATER, f"{verdict} in {where}"))
                else:
                    view.excluded.append(Excluded(rid, s.key, NOT_ACCEPTED, f"{verdict} in {where}, the source's latest snapshot"))
    for e in view.excluded:
        view.counts[e.reason] = view.counts.get(e.reason, 0) + 1
    return view
