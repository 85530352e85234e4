"""Lineage of compacted snapshots, and the release-selection rule that keeps them honest.

Compaction (``compaction.py``) folds the old captures of a source into the newest capture of
the range, which keeps its key, and deletes the others. What each compacted partition replaces is
kept in a sealed tree beside the layers, ``compactions/<snapshot>/lineage.json`` (mirrored to an
object-store data root like shard sets), so it outlives the deleted partitions and a purge of the
compacted one.

A release selection that would have picked only part of a compacted range cannot be answered
the same way any more; ``select_snapshots`` refuses it with the reason instead of silently using
the fold (docs/operations.md#partition-growth-and-instance-storage):

- an explicit key that was compacted away: name the compacted snapshot instead;
- a ``since`` / ``until`` bound strictly inside a compacted range;
- ``retain: union`` over a source with compacted snapshots (a fold keeps each record's latest
  state, not every accepted copy it ever had).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Optional

from corpus_assets.domain.core.atomic_files import atomic_write_bytes
from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import canonical_json
from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.layers.registry import MINHASH_SIGNATURES
from corpus_assets.domain.storage.layer_store import LayerStore

COMPACTIONS = "compactions"  # the sealed-tree folder beside layers/ and shards/
LINEAGE_FILE = "lineage.json"
LINEAGE_FORMAT = "corpus-compaction/1"


class CompactedSelectionError(CorpusError, ValueError):
    """A release selection that compacted snapshots can no longer answer as it was written."""


@dataclass(frozen=True)
class Lineage:
    """One compacted partition: ``snapshot`` (the newest capture of the range, key kept) replaces
    ``replaces`` (older captures, deleted). ``doc`` is the whole lineage.json."""

    snapshot: str
    source: str
    replaces: tuple[str, ...]
    doc: Mapping

    @property
    def captures(self) -> list[str]:
        """Every capture the partition stands for, in capture order (itself last)."""
        return sorted({*self.replaces, self.snapshot}, key=lambda k: (parse_snapshot_key(k)[1], k))

    @property
    def first(self) -> datetime:
        return parse_snapshot_key(self.captures[0])[1]

    @property
    def last(self) -> datetime:
        return parse_snapshot_key(self.snapshot)[1]


def lineage_rel(snapshot: str) -> str:
    return f"{COMPACTIONS}/{snapshot}"


def write_lineage(store: LayerStore, doc: Mapping) -> None:
    """Write (replace) the lineage tree of ``doc['snapshot']`` and seal it. Sealed trees are
    immutable in an object store, so a replaced lineage is dropped first."""
    rel = lineage_rel(doc["snapshot"])
    if doc["snapshot"] in store.trees(COMPACTIONS):
        store.drop_tree(rel)
    d = store.home / rel
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(d / LINEAGE_FILE, canonical_json(dict(doc)))
    store.seal_tree(rel)


def drop_lineage(store: LayerStore, snapshot: str) -> None:
    store.drop_tree(lineage_rel(snapshot))


def read_lineages(store: LayerStore, source: Optional[str] = None) -> dict[str, Lineage]:
    """Compacted snapshot -> its lineage (of one source, or all). One small file per compacted
    partition (a source has about one per month)."""
    out: dict[str, Lineage] = {}
    for name in store.trees(COMPACTIONS):
        src, _ = parse_snapshot_key(name)
        if source is not None and src != source:
            continue
        doc = json.loads((store.tree_dir(lineage_rel(name)) / LINEAGE_FILE).read_bytes())
        if doc.get("format") != LINEAGE_FORMAT:
            raise CorpusError(f"{lineage_rel(name)}/{LINEAGE_FILE}: unknown format {doc.get('format')!r}")
        out[name] = Lineage(doc["snapshot"], doc["source"], tuple(doc["replaces"]), doc)
    return out


def selection_problems(selection, lineages: Mapping[str, Lineage]) -> list[str]:
    """Why ``selection`` (a ``SnapshotSelection``) cannot be answered over compacted snapshots as
    written; empty when it can. Whether the keys it names exist is ``select``'s business."""
    problems: list[str] = []
    replaced = {k: lin for lin in lineages.values() for k in lin.replaces}
    for key in selection.explicit:
        if key in replaced:
            lin = replaced[key]
            problems.append(f"snapshot {key} was compacted into {lin.snapshot} (captures "
                            f"{lin.captures[0]} .. {lin.snapshot}); name {lin.snapshot} instead")
    sources = set(selection.sources)
    for lin in sorted(lineages.values(), key=lambda x: x.snapshot):
        if lin.source not in sources:
            continue
        if selection.retain == "union":
            problems.append(f"retain: union needs every accepted copy of source {lin.source}, but {lin.snapshot} folds "
                            f"captures {lin.captures[0]} .. {lin.snapshot} into their latest state; use retain: latest")
            continue
        times = [parse_snapshot_key(k)[1] for k in lin.captures]
        inside = [t for t in times if (selection.since is None or t >= selection.since)
                  and (selection.until is None or t <= selection.until)]
        if 0 < len(inside) < len(times):
            problems.append(f"the window since={_iso(selection.since)} until={_iso(selection.until)} cuts compacted "
                            f"snapshot {lin.snapshot}, which folds captures {lin.captures[0]} .. {lin.snapshot}; "
                            f"move the bound before {lin.first.isoformat()} or after {lin.last.isoformat()}")
    return problems


def _iso(t: Optional[datetime]) -> str:
    return t.isoformat() if t is not None else "-"


def select_snapshots(selection, store: LayerStore, *, available: Optional[Iterable[str]] = None) -> list[str]:
    """``selection.select`` over the materialized snapshots, refused (``CompactedSelectionError``)
    when a compacted snapshot would make it answer differently from how it was written."""
    problems = selection_problems(selection, read_lineages(store))
    if problems:
        raise CompactedSelectionError("snapshot selection: " + "; ".join(problems))
    return selection.select(list(available) if available is not None else store.partitions(MINHASH_SIGNATURES))
