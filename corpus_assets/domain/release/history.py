"""How long a release keeps the layer versions and shard sets of its older builds.

Every release run writes a new version of each release layer (``dedup_clusters`` ...
``packed_shards``) and a new shard set. Nothing reads the older ones once a newer build is
published: the next run reuses the *current* versions (views, kept shards, band keys), a
published build holds its own shards (hard links or copies), manifest and lineage, deletion reads
builds and current versions, and a rollback re-publishes a build directory. Kept for ever they
grew the data root by a release's intermediate tables at every rebuild (docs/releases.md, "Release
history"); a release rebuilt hourly for a year kept 8,760 copies of them.

So ``release_manifest`` prunes after each publish: a non-current version is dropped once the
version that superseded it (the next one sealed) is older than the grace period — a run that
started before then may still be reading it — and a shard set once no remaining
``packed_shards`` version names it and it has not changed for the grace period (a set younger than
that may be a running build's, not yet named by a version). ``CORPUS_RELEASE_HISTORY_GRACE``:
the period (``24h`` by default; ``90m``, ``7d``, seconds, ``0``), or ``keep`` to keep everything.
A deletion drops the whole history at once (``build.drop_release_history``), grace or not."""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import PACKED_SHARDS
from corpus_assets.domain.pack.shards_layer import shard_set_name
from corpus_assets.domain.storage.layer_store import LayerStore

GRACE_VARIABLE = "CORPUS_RELEASE_HISTORY_GRACE"
DEFAULT_GRACE = "24h"
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_grace(text: str) -> Optional[float]:
    """Seconds from ``24h`` / ``90m`` / ``7d`` / ``30s`` / ``3600``; None for ``keep``."""
    if text.strip().lower() == "keep":
        return None
    m = _DURATION.match(text.lower())
    if m is None:
        raise ValueError(f"{GRACE_VARIABLE}={text!r}: expected a duration such as 24h, 90m, 7d, 3600 or 0, or keep")
    return float(m.group(1)) * _UNITS[m.group(2)]


def history_grace() -> Optional[float]:
    """The grace period in seconds from the environment (None: keep every version)."""
    return parse_grace(os.environ.get(GRACE_VARIABLE, "") or DEFAULT_GRACE)


@dataclass
class HistoryPruned:
    """What one prune did: per layer, versions dropped and non-current versions still kept (within
    the grace period, or with no seal time); shard sets removed and kept besides the current one."""

    dropped: dict = field(default_factory=dict)
    kept: dict = field(default_factory=dict)
    shard_sets_removed: list = field(default_factory=list)
    shard_sets_kept: int = 0

    def summary(self) -> dict:
        return {"versions_dropped": sum(self.dropped.values()), "versions_kept": sum(self.kept.values()),
                "shard_sets_removed": len(self.shard_sets_removed), "shard_sets_kept": self.shard_sets_kept,
                "per_layer_dropped": {k: v for k, v in sorted(self.dropped.items()) if v}}


def _superseded_versions(store: LayerStore, asset: str, release: str, grace: float, now: float) -> tuple[list, int]:
    """(versions to drop, non-current versions kept) of one release layer. A version counts as
    superseded when the next version was sealed — the earliest other seal time at or after its own
    (an object store reports whole seconds, so two versions may share one); the newest version,
    and one with no seal time, never does."""
    current = store.current_version_name(asset, release)
    if current is None:
        return [], 0
    names = store.versions(asset, release)
    sealed = {n: store.sealed_at(asset, release, n) for n in names}
    times = sorted(t for t in sealed.values() if t is not None)
    drop = []
    for name in sorted(names):
        t = sealed[name]
        if name == current or t is None:
            continue
        after = bisect.bisect_right(times, t)
        superseded = t if after - bisect.bisect_left(times, t) > 1 else (times[after] if after < len(times) else None)
        if superseded is not None and now - superseded >= grace:
            drop.append(name)
    return drop, len(names) - len(drop) - (current in names)


def prune_release_history(store: LayerStore, release: str, *, grace_seconds: float, now: float,
                          log=lambda _m: None) -> HistoryPruned:
    """Drop what only the older builds of ``release`` used and no run can still be reading (see
    the module docstring). The current version of every layer and every shard set a remaining
    ``packed_shards`` version names always stay. ``log`` hears each layer that loses versions (the
    first prune of a long history removes many)."""
    out = HistoryPruned()
    for la in registry.release_layers():
        if not la.tables:
            continue
        drop, kept = _superseded_versions(store, la.asset, release, grace_seconds, now)
        for name in drop:
            store.drop_version(la.asset, release, name)
        out.dropped[la.asset], out.kept[la.asset] = len(drop), kept
        if drop:
            log(f"release {release}: {la.asset}: dropped {len(drop)} superseded version(s), kept {kept}")
    named = {shard_set_name(store.version_manifest(PACKED_SHARDS, release, v))
             for v in store.versions(PACKED_SHARDS, release)} - {None}
    current = shard_set_name(store.current_manifest(PACKED_SHARDS, release))
    parent = DataRoot.shard_sets_key(release)
    for name in store.trees(parent):
        if name not in named:
            changed = store.tree_changed_at(f"{parent}/{name}")
            if changed is not None and now - changed >= grace_seconds:
                store.drop_tree(f"{parent}/{name}")
                out.shard_sets_removed.append(name)
                continue
        out.shard_sets_kept += name != current
    return out
