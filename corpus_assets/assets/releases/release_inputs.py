"""release_inputs: what a build of each release would read now, observed as one data version.

Dagster judges a partitioned asset stale by walking the data versions of its upstream partitions,
and stops doing so at 100 of them (SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD): a release
reading every snapshot partition loses its staleness after ~2 days of 30-minute crawls. This
observable source asset, partitioned like the releases and upstream of ``dedup_clusters`` one to
one, carries the release's input fingerprint (``release/freshness.py``: the spec as written, the
selected snapshots' layer digests, the evaluation registry, the tombstone generation) as its data
version. A new observation with another fingerprint turns the release unsynced in the UI however
many snapshots it reads; an edited release spec does the same.

Observed at the start of every ``release_job`` run (so a build records what it read) and by the
``release_rebuilds`` sensor whenever the fingerprint moves.
"""

import warnings

import dagster as dg

from corpus_assets.domain.core.settings import catalog_path
from corpus_assets.domain.deletion.tombstones import tombstone_generation
from corpus_assets.domain.layers.registry import RELEASE_INPUTS
from corpus_assets.domain.release.freshness import fingerprint, input_components
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.partitions import releases_partitions
from resources.releases import ReleasesResource
from resources.storage import StorageResource

# observable source assets and DataVersionsByPartition are beta in Dagster 1.13 and warn on every
# definitions load; the API is what this asset needs (docs/architecture.md, "Staleness")
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=r".*(observable_source_asset|DataVersionsByPartition).*")


@dg.observable_source_asset(
    name=RELEASE_INPUTS,
    partitions_def=releases_partitions,
    group_name="dedup",
    tags={"dagster/kind/python": ""},  # observable_source_asset takes no kinds= / owners= in 1.13
    description=(
        "The fingerprint of everything a build of the release reads (its spec as written, every snapshot "
        "it selects with the digests of their layers, the evaluation registry, the tombstone generation), "
        "observed per release as a data version: when it moves the release shows unsynced, however many "
        "snapshot partitions it reads. Observed by each release_job run and by the release_rebuilds sensor."
    ),
)
def release_inputs(context, storage: StorageResource, releases: ReleasesResource) -> dg.DataVersionsByPartition:
    store = storage.store()
    generation = tombstone_generation(Catalog.at(catalog_path()))
    if context.has_partition_key:  # a release_job run: its spec must load, or the run fails here
        name = context.partition_key
        return dg.DataVersionsByPartition({name: current_fingerprint(store, releases.spec(name), generation)})
    versions = {}  # "Observe" from the UI, no partition: every release whose spec loads
    for name in sorted(context.instance.get_dynamic_partitions(releases_partitions.name)):
        try:
            spec = releases.spec(name)
        except (OSError, ValueError) as exc:
            context.log.warning(f"release_inputs[{name}]: not observed, its spec does not load: {exc}")
            continue
        versions[name] = current_fingerprint(store, spec, generation)
        context.log.info(f"release_inputs[{name}]: {versions[name].value[:16]}")
    return dg.DataVersionsByPartition(versions)


def current_fingerprint(store, spec, generation: int) -> dg.DataVersion:
    return dg.DataVersion(fingerprint(input_components(store, spec, generation)))
