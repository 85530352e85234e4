"""minhash_signatures: datasketch-compatible MinHash signatures of one snapshot's curated records."""

import dagster as dg

from corpus_assets.assets.curation.curated_records import curated_records
from corpus_assets.domain.core.config_files import ConfigError
from corpus_assets.domain.core.settings import dedup_path
from corpus_assets.domain.dedup.signatures_layer import build_signatures, load_dedup_file
from corpus_assets.domain.layers.registry import CURATED_RECORDS
from corpus_assets.domain.dedup.minhash import MINHASH_CODE_VERSION, minhash_policy_version
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.metadata import version_metadata
from corpus_assets.partitions import snapshots_partitions
from resources.releases import ReleasesResource
from resources.storage import StorageResource


def signatures_code_version() -> str:
    """The MinHash policy version of dedup.yaml as loaded with the definitions (it already names the
    code version): a changed policy shows the signatures unsynced after "Reload definitions"."""
    try:
        return minhash_policy_version(load_dedup_file(dedup_path()).minhash)
    except (ConfigError, OSError):
        return f"{MINHASH_CODE_VERSION}+unreadable-policy"


@dg.asset(
    partitions_def=snapshots_partitions,
    deps=[curated_records],
    group_name="dedup",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=signatures_code_version(),
    description=(
        "MinHash signatures of every curated record of one snapshot (word 5-gram shingles of the dedup "
        "normal form, xxh3 folded to 32 bits, 128 permutations by default: dedup.yaml). Computed once per "
        "snapshot and reused by every release; identical to datasketch's MinHash for the same policy."
    ),
)
def minhash_signatures(context: dg.AssetExecutionContext, storage: StorageResource, releases: ReleasesResource) -> dg.MaterializeResult:
    store = storage.store()
    policy = releases.dedup().minhash
    curated = store.require_current(CURATED_RECORDS, context.partition_key)
    version = build_signatures(store, context.partition_key, policy, curated=curated, log=context.log.info)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            **stored_key_figures(version),  # the KEY_FIGURES, from the stored version (as a purge reports them)
            "minhash_policy": minhash_policy_version(policy),
            "shingles": f"{policy.shingles.unit} {policy.shingles.size}-grams",
            "hash_function": policy.hash_function,
            **version_metadata(version),
        },
    )
