"""Jobs shared by schedules and sensors; what each selects comes from the layer registry."""

import dagster as dg

from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import RELEASE_INPUTS, REPORT_GROUP, Partitioning


def _assets(layers) -> dg.AssetSelection:
    return dg.AssetSelection.assets(*(la.asset for la in layers))


snapshot_job = dg.define_asset_job(
    "snapshot_job",
    selection=_assets(registry.snapshot_layers()),
    description="Capture (or verify) one snapshot partition, canonicalize, curate and sign it.",
)

registry_job = dg.define_asset_job(
    "registry_job",
    selection=_assets(registry.layers(partitioning=Partitioning.NONE)),
    description="Rebuild the frozen evaluation registry from the benchmark files in curation.yaml.",
)

release_job = dg.define_asset_job(
    "release_job",
    # release_inputs is observed first, so the build records the input fingerprint it read
    selection=_assets(registry.release_layers()) | dg.AssetSelection.assets(RELEASE_INPUTS),
    description="Observe what one release partition reads (release_inputs), then build its release-level layers: dedup clusters, splits, tokenizer, token views, mixture plan, packed shards, and publish it (release manifest).",
)

reports_job = dg.define_asset_job(
    "reports_job",
    selection=dg.AssetSelection.groups(REPORT_GROUP),
    description="Recompute the SQL report models over the current layer versions.",
)
