"""Which copy of each record a release sees: every source as of its latest selected snapshot.

For each source of a release (rule ``latest``, the default): a record is in the release only if
the source's latest selected snapshot holds it accepted. Sources captured whole (files, dumps,
WARC, recipes) are their latest snapshot: a record absent from it, or rejected or quarantined in
it, is out, whatever older snapshots held. Incremental crawls capture only what changed, so their
state is folded over the selected snapshots in capture order: a page captured again replaces its
earlier copy, a page a later crawl found removed (404/410), refused (robots) or could not accept
is out; a failed fetch (connection error, 5xx) is no news and keeps the earlier copy. Rule
``union`` keeps the newest accepted copy of every record id any selected snapshot holds. Sources
whose ``allowed_uses`` do not cover every use the release declares are out too. Each copy left out
gets a decision reason (``dedup.superseded``, ``snapshots.absent_in_latest``,
``snapshots.not_accepted_in_latest``, ``snapshots.removed_later``, ``governance.use_not_allowed``).
Rules and why: docs/releases.md#what-a-release-contains
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.arrow_columns import run_bounds, strings
from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS
from corpus_assets.domain.storage.layer_store import LayerStore

__all__ = ["RULES", "SUPERSEDED", "ABSENT", "NOT_ACCEPTED", "REMOVED_LATER", "USE_NOT_ALLOWED", "Excluded",
           "ReleaseView", "release_view"]

RULES = ("latest", "union")
SUPERSEDED = "dedup.superseded"
ABSENT = "snapshots.absent_in_latest"
NOT_ACCEPTED = "snapshots.not_accepted_in_latest"
REMOVED_LATER = "snapshots.removed_later"
USE_NOT_ALLOWED = "governance.use_not_allowed"
# crawl outcomes that say nothing about the page itself: the earlier copy stands
NO_NEWS = frozenset({"fetch_error", "http_error"})
STAGE_OF = {SUPERSEDED: "dedup", ABSENT: "snapshots", NOT_ACCEPTED: "snapshots", REMOVED_LATER: "snapshots",
            USE_NOT_ALLOWED: "governance"}


@dataclass(frozen=True)
class Excluded:
    """An accepted copy the release does not use, and why."""

    record_id: str
    snapshot: str
    reason: str
    detail: str
    superseded_by: Optional[str] = None  # the snapshot whose copy is used (reason dedup.superseded)


@dataclass
class ReleaseView:
    rule: str
    uses: tuple[str, ...]
    # snapshot -> the record ids used from it: a sorted Arrow string array (no Python object per record)
    chosen: dict[str, pa.Array] = field(default_factory=dict)
    excluded: list[Excluded] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # reason -> copies left out

    def chosen_ids(self, snapshot: str) -> pa.Array:
        """The record ids used from ``snapshot``, sorted (empty when none)."""
        return self.chosen.get(snapshot, _EMPTY)

    def uses_copy(self, snapshot: str, record_id: str) -> bool:
        return pc.index(self.chosen_ids(snapshot), record_id).as_py() >= 0


_EMPTY = pa.array([], pa.string())


def _ordered(snapshots: Iterable[str]) -> list[str]:
    return sorted(snapshots, key=lambda k: (parse_snapshot_key(k)[1], k))


def _sorted_unique(ids: pa.Array) -> pa.Array:
    """Distinct ids in code-point order (UTF-8 byte order is code-point order: Python's ``sorted``)."""
    u = pc.unique(strings(ids))
    return u.take(pc.sort_indices(u))


def _last_per_id(ids: pa.Array, reasons: pa.Array) -> pa.Table:
    """(record_id, reason) keeping, per id, the reason of its last row: what assigning them in row
    order into a dict keeps."""
    n = len(ids)
    if n == 0:
        return pa.table({"record_id": _EMPTY, "reason": pa.array([], pa.string())})
    t = pa.table({"record_id": strings(ids), "reason": strings(reasons), "seq": pa.array(np.arange(n, dtype=np.int64))})
    last = t.group_by("record_id", use_threads=False).aggregate([("seq", "max")]).column("seq_max")
    return t.take(last).select(["record_id", "reason"])


class _Snapshot:
    """What one snapshot says about its records: the accepted ones (sorted, distinct), and the
    record ids it did not accept with the reason (the curated decision over the canonical one;
    within a table the last row), read from its canonical and curated decisions (ids only)."""

    def __init__(self, store: LayerStore, snapshot: str) -> None:
        source_id = parse_snapshot_key(snapshot)[0]
        self.key = snapshot
        cur = store.require_current(CURATED_RECORDS, snapshot)
        self.accepted = _sorted_unique(cur.read_table("records", columns=["record_id"]).column(0))
        canon = store.require_current(CANONICAL_RECORDS, snapshot).read_table(
            DECISIONS_TABLE, columns=["record_id", "item_id", "outcome", "reason"])
        out = _not_accepted(canon)
        canon = canon.filter(out)
        # an item that never became a record is named as its document would be
        rid = strings(canon.column("record_id"))
        named = pc.fill_null(pc.not_equal(rid, ""), False)
        item_ids = pc.fill_null(pc.cast(canon.column("item_id"), pa.string()), "None")  # as f"{item_id}" names it
        item_name = pc.binary_join_element_wise(pa.scalar(source_id), strings(item_ids), ":")
        canon_ids = pc.if_else(named, rid, item_name)
        cdec = cur.read_table(DECISIONS_TABLE, columns=["record_id", "outcome", "reason"])
        cdec = cdec.filter(pc.and_(_not_accepted(cdec), pc.fill_null(pc.not_equal(strings(cdec.column("record_id")), ""), False)))
        self.refused = _last_per_id(pa.concat_arrays([strings(canon_ids), strings(cdec.column("record_id"))]),
                                    pa.concat_arrays([strings(canon.column("reason")), strings(cdec.column("reason"))]))


def _not_accepted(t: pa.Table) -> pa.Array:
    return pc.fill_null(pc.not_equal(t.column("outcome"), "accepted"), True)


def _state(seen: list[_Snapshot], rule: str, incremental: bool) -> pa.Table:
    """Per record id the source's verdict: ``accepted`` (bool), ``reason`` (why not, may be null)
    and ``where`` (index into ``seen`` of the snapshot that decided)."""
    parts = []
    if rule == "union" or incremental:
        for k, s in enumerate(seen):
            if incremental and s.refused.num_rows:
                r = s.refused
                keep = pc.invert(pc.is_in(r.column("record_id"), value_set=s.accepted))
                keep = pc.and_(keep, pc.fill_null(pc.invert(pc.is_in(r.column("reason"), value_set=pa.array(sorted(NO_NEWS)))), True))
                r = r.filter(keep)
                parts.append(_events(r.column("record_id"), r.column("reason"), False, k))
            parts.append(_events(s.accepted, None, True, k))
    else:
        last, k = seen[-1], len(seen) - 1
        r = last.refused.filter(pc.invert(pc.is_in(last.refused.column("record_id"), value_set=last.accepted)))
        parts += [_events(r.column("record_id"), r.column("reason"), False, k), _events(last.accepted, None, True, k)]
    ev = pa.concat_tables(parts)
    # the last event per id in capture order, acceptance after refusal within a snapshot
    ev = ev.append_column("order", pc.add(pc.multiply(ev.column("where"), 2), pc.cast(ev.column("accepted"), pa.int64())))
    ev = ev.sort_by([("record_id", "ascending"), ("order", "ascending")])
    bounds = run_bounds(ev.column("record_id"))
    return ev.take(pa.array(bounds[1:] - 1)) if ev.num_rows else ev


def _events(ids: pa.Array, reasons: Optional[pa.Array], accepted: bool, where: int) -> pa.Table:
    n = len(ids)
    return pa.table({"record_id": strings(ids),
                     "reason": strings(reasons) if reasons is not None else pa.nulls(n, pa.string()),
                     "accepted": pa.array(np.full(n, accepted)), "where": pa.array(np.full(n, where, dtype=np.int64))})


def release_view(store: LayerStore, snapshots: Iterable[str], *, rule: str = "latest",
                 incremental_sources: Iterable[str] = (), allowed_uses: Optional[Mapping[str, Iterable[str]]] = None,
                 uses: Iterable[str] = ()) -> ReleaseView:
    """The copies a release built from ``snapshots`` uses (see the module docstring).
    ``allowed_uses``: source id -> its governance's allowed uses (a source missing from it is not
    restricted); ``uses``: what the release is for. Record ids stay Arrow columns; only the copies
    left out become ``Excluded`` objects."""
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
                for rid in s.accepted.to_pylist():
                    view.excluded.append(Excluded(rid, s.key, USE_NOT_ALLOWED, detail))
            continue
        state = _state(seen, rule, rule != "union" and source in incremental)
        for k, s in enumerate(seen):
            n = len(s.accepted)
            if not n:
                continue
            at = pc.index_in(s.accepted, value_set=state.column("record_id"))
            found = np.asarray(pc.is_valid(at).to_numpy(zero_copy_only=False), bool)
            st = state.take(pc.fill_null(at, 0)) if found.any() else None
            acc = found & np.asarray(st.column("accepted").to_numpy(zero_copy_only=False), bool) if st is not None else found
            where = (np.asarray(st.column("where").to_numpy(zero_copy_only=False), np.int64) if st is not None
                     else np.zeros(n, np.int64))
            here = acc & (where == k)
            if here.any():
                view.chosen[s.key] = s.accepted.filter(pa.array(here))
            out = np.flatnonzero(~here)
            if not out.size:
                continue
            pick = pa.array(out)
            ids = s.accepted.take(pick).to_pylist()
            reasons = st.column("reason").take(pick).to_pylist() if st is not None else [None] * out.size
            for rid, i, verdict in zip(ids, out.tolist(), reasons):
                w = seen[int(where[i])].key
                if acc[i]:
                    view.excluded.append(Excluded(rid, s.key, SUPERSEDED, f"superseded by the copy in {w}", w))
                elif not found[i] or verdict is None:
                    view.excluded.append(Excluded(rid, s.key, ABSENT, f"not in {seen[-1].key}, the source's latest snapshot"))
                elif source in incremental:
                    view.excluded.append(Excluded(rid, s.key, REMOVED_LATER, f"{verdict} in {w}"))
                else:
                    view.excluded.append(Excluded(rid, s.key, NOT_ACCEPTED, f"{verdict} in {w}, the source's latest snapshot"))
    for e in view.excluded:
        view.counts[e.reason] = view.counts.get(e.reason, 0) + 1
    return view
