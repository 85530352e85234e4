"""The two dynamic partition sets that carry the work.

- ``snapshots``: one key per captured source snapshot, ``<source_id>.<YYYYMMDDTHHMMSS>`` (UTC).
- ``releases``: one key per release spec ``releases/<name>.yaml`` (used from the dedup layer on).

Keys are validated (corpus_assets.domain.core.keys) before any asset turns them into paths.
"""

import dagster as dg

snapshots_partitions = dg.DynamicPartitionsDefinition(name="snapshots")
releases_partitions = dg.DynamicPartitionsDefinition(name="releases")
