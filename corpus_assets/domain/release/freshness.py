"""Is a published release current? The fingerprint of its inputs now, against the one recorded
when it was last built.

The inputs are what a rebuild would read: the release spec as it enters the build id, every
snapshot the spec selects now with the content digest of each snapshot layer's current version,
the unpartitioned layers (the evaluation registry) and the tombstone generation. Only manifests
are read (``LayerStore.peek``), so the check is cheap enough for a sensor tick over hundreds of
snapshot partitions — it does not rely on Dagster's per-partition data-version walk, which stops
above 100 upstream partitions. Why and how the sensor uses it: docs/releases.md#automatic-rebuilds
"""

from __future__ import annotations

from typing import Any, Optional

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.layers import registry
from corpus_assets.domain.ingest.compacted import select_snapshots
from corpus_assets.domain.layers.registry import Partitioning
from corpus_assets.domain.storage.layer_store import UNPARTITIONED, LayerStore

__all__ = ["INPUTS", "INPUTS_FINGERPRINT", "input_components", "fingerprint", "what_changed"]

# the metadata keys release_manifest records them under
INPUTS_FINGERPRINT = "inputs_fingerprint"
INPUTS = "inputs"


def _digest(store: LayerStore, asset: str, partition: str) -> Optional[str]:
    v = store.peek(asset, partition)
    return v.content_digest if v is not None else None


def input_components(store: LayerStore, spec, tombstone_generation: int,
                     snapshots: Optional[list[str]] = None) -> dict[str, Any]:
    """What a rebuild of ``spec`` (a ``ReleaseSpec``) would read now, as digests; ``snapshots``:
    the snapshots a build did read (its dedup version's), instead of what the spec selects now."""
    if snapshots is None:
        snapshots = select_snapshots(spec.snapshots, store)
    return {
        "spec": canonical_digest(spec.as_written()),
        "snapshots": {key: {la.asset: _digest(store, la.asset, key) for la in registry.snapshot_layers()}
                      for key in sorted(snapshots)},
        "unpartitioned": {la.asset: _digest(store, la.asset, UNPARTITIONED)
                          for la in registry.layers(partitioning=Partitioning.NONE)},
        "tombstone_generation": int(tombstone_generation),
    }


def fingerprint(components: dict[str, Any]) -> str:
    return canonical_digest(components)


def what_changed(built: Optional[dict[str, Any]], now: dict[str, Any]) -> list[str]:
    """Why ``now`` differs from ``built``, in words (empty when they agree)."""
    if not built:
        return ["no inputs were recorded for the last build"]
    out = []
    old, new = built.get("snapshots", {}), now["snapshots"]
    added = sorted(set(new) - set(old))
    gone = sorted(set(old) - set(new))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    if added:
        out.append(f"new snapshot(s): {', '.join(added)}")
    if gone:
        out.append(f"snapshot(s) no longer selected: {', '.join(gone)}")
    if changed:
        out.append(f"snapshot(s) rebuilt or purged: {', '.join(changed)}")
    if built.get("spec") != now["spec"]:
        out.append("the release spec changed")
    for asset in sorted(set(built.get("unpartitioned", {})) | set(now["unpartitioned"])):
        if built.get("unpartitioned", {}).get(asset) != now["unpartitioned"].get(asset):
            out.append(f"{asset} changed")
    if built.get("tombstone_generation") != now["tombstone_generation"]:
        out.append(f"tombstones: generation {built.get('tombstone_generation')} -> {now['tombstone_generation']}")
    return out
