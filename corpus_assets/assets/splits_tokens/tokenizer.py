"""tokenizer: the release's frozen tokenizer, named by its digest."""

import time
from pathlib import Path

import dagster as dg

from corpus_assets.domain.layers.registry import SPLITS
from corpus_assets.domain.tokens.tokenizer_layer import TOKENIZER_LAYER_CODE_VERSION, build_tokenizer, tokenizer_info
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
        "The release's frozen tokenizer: a HuggingFace tokenizer.json loaded from a path, byte-level BPE "
        "trained on the training split only (never on validation or test; with freeze: true trained once and "
        "kept while its settings are unchanged), or a published build's tokenizer (from_build). Identified by "
        "the digest of tokenizer.json + special tokens + chat template version + EOS."
    ),
)
def tokenizer_asset(context: dg.AssetExecutionContext, storage: StorageResource, releases: ReleasesResource) -> dg.MaterializeResult:
    name = context.partition_key
    release_spec = releases.spec(name)  # typed and checked when the spec was read
    spec = release_spec.tokenizer_spec()
    store = storage.store()
    started = time.monotonic()
    # said only before training, the long case; loading or keeping a tokenizer is in the line below
    built = build_tokenizer(store, name, spec, splits=store.require_current(SPLITS, name), base_dir=Path(releases.folder),
                            before_training=lambda: context.log.info(
                                f"tokenizer[{name}]: training byte-level BPE (vocab {spec.train.vocab_size}) on the training split"
                                + (", frozen: reused while its training settings are unchanged" if spec.freeze else "")))
    frozen = built.tokenizer
    if frozen.spec.chat_template_version != release_spec.token_views.chat_template:
        raise ValueError(f"release {name!r}: the tokenizer is frozen with chat template {frozen.spec.chat_template_version!r}, "
                         f"token_views.chat_template is {release_spec.token_views.chat_template!r}")
    prov = built.version.manifest.get("provenance", {})
    elapsed = time.monotonic() - started
    (context.log.warning if prov.get("retrained_because") and built.how == "trained" else context.log.info)(
        f"tokenizer[{name}]: {frozen.digest[:16]} (vocab {frozen.vocab_size}) in {elapsed:.1f}s: {built.note}")
    info = tokenizer_info(built.version, store.require_current(SPLITS, name).content_digest)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(frozen.digest),
        metadata={
            "tokenizer_digest": frozen.digest,
            "vocab_size": dg.MetadataValue.int(frozen.vocab_size),
            "eos_token": frozen.spec.eos_token,
            "eos_id": dg.MetadataValue.int(frozen.eos_id),
            "chat_template_version": frozen.spec.chat_template_version,
            "origin": info["origin"],
            "how": built.how,  # loaded | trained | frozen (stored version reused, not retrained) | from_build
            "provenance": dg.MetadataValue.json(info["provenance"]),
            "note": built.note,
            **version_metadata(built.version),
        },
    )
