"""tokenizer: the release's frozen tokenizer, named by its digest."""

import time
from pathlib import Path

import dagster as dg

from corpus_assets.domain.layers.registry import SPLITS
from corpus_assets.domain.tokens.tokenizer_layer import TOKENIZER_LAYER_CODE_VERSION, build_tokenizer
from corpus_assets.metadata import version_metadata
from corpus_assets.partitions import releases_partitions
from corpus_assets.assets.splits_tokens.splits import splits_asset
from resources.releases import ReleasesResource
from resources.storage import StorageResource


@dg.asset(
    name="tokenizer",
    partitions_def=releases_partitions,
    deps=[splits_asset],
    group_name="splits_tokens",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=TOKENIZER_LAYER_CODE_VERSION,
    description=(
        "The release's frozen tokenizer: a HuggingFace tokenizer.json loaded from a path, or byte-level "
        "BPE trained on the training split only (never on validation or test). Identified by the digest "
        "of tokenizer.json + special tokens + chat template version + EOS."
    ),
)
def tokenizer_asset(context: dg.AssetExecutionContext, storage: StorageResource, releases: ReleasesResource) -> dg.MaterializeResult:
    name = context.partition_key
    spec = releases.spec(name).tokenizer_spec()  # typed and checked when the spec was read
    store = storage.store()
    started = time.monotonic()
    context.log.info(f"tokenizer[{name}]: " + (f"training byte-level BPE (vocab {spec.train.vocab_size}) on the training split"
                                              if spec.train is not None else f"loading {spec.path}"))
    version, frozen = build_tokenizer(
        store, name, spec, splits=store.require_current(SPLITS, name), base_dir=Path(releases.folder)
    )
    trained_on = version.manifest.get("training_records")
    elapsed = time.monotonic() - started
    context.log.info(f"tokenizer[{name}]: {frozen.digest[:16]} (vocab {frozen.vocab_size}) in {elapsed:.1f}s"
                     + (f", {trained_on} training records ({trained_on / max(elapsed, 1e-9):,.0f} records/s)" if trained_on else ""))
    return dg.MaterializeResult(
        data_version=dg.DataVersion(frozen.digest),
        metadata={
            "tokenizer_digest": frozen.digest,
            "vocab_size": dg.MetadataValue.int(frozen.vocab_size),
            "eos_token": spec.eos_token,
            "eos_id": dg.MetadataValue.int(frozen.eos_id),
            "chat_template_version": spec.chat_template_version,
            "origin": "trained on the training split" if spec.train is not None else f"loaded from {spec.path}",
            **version_metadata(version),
        },
    )
