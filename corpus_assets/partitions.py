"""The two dynamic partition sets that carry the work.

- ``snapshots``: one key per captured source snapshot, ``<source_id>.<YYYYMMDDTHHMMSS>`` (UTC).
- ``releases``: one key per release spec ``releases/<name>.yaml`` (used from the dedup layer on).

The ``snapshots`` set is kept bounded by compaction (``corpus compact-snapshots``,
``corpus_assets/snapshot_compaction.py``): old captures of a source fold into one partition per
month and their keys are deleted (docs/operations.md#partition-growth-and-instance-storage).

Keys are validated (corpus_assets.domain.core.keys) before any asset turns them into paths. The
project's sensors, schedules and CLI only ever add valid keys; the UI's "Add partition" accepts
anything, so ``invalid_keys`` finds what does not belong (``corpus partitions prune`` removes it).
"""

import dagster as dg

from corpus_assets.domain.core.keys import InvalidKeyError, parse_snapshot_key, validate_release_name

snapshots_partitions = dg.DynamicPartitionsDefinition(name="snapshots")
releases_partitions = dg.DynamicPartitionsDefinition(name="releases")



def every_snapshot(*assets: str) -> list[dg.AssetDep]:
    """Lineage edges from a release-partitioned asset to snapshot layers it reads (every
    partition: which snapshots a release selects is decided at run time by its spec)."""
    return [dg.AssetDep(a, partition_mapping=dg.AllPartitionMapping()) for a in assets]


_VALIDATORS = {snapshots_partitions.name: parse_snapshot_key, releases_partitions.name: validate_release_name}


def invalid_keys(instance: dg.DagsterInstance) -> dict[str, list[tuple[str, str]]]:
    """{partition set: [(key, why it is not a valid key)]} over both dynamic partition sets."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, validate in _VALIDATORS.items():
        for key in instance.get_dynamic_partitions(name):
            try:
                validate(key)
            except (InvalidKeyError, ValueError) as exc:
                out.setdefault(name, []).append((key, str(exc)))
    return out
