"""token_views: per-record input ids, loss masks and offsets of a release, with the frozen tokenizer."""

import dagster as dg
from pydantic import Field

from corpus_assets.domain.core.compute import engine_from_env
from corpus_assets.domain.core.progress import Progress
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import CURATED_RECORDS, SPLITS, TOKENIZER
from corpus_assets.domain.tokens.token_views_layer import TOKEN_VIEWS_LAYER_VERSION, build_token_views
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.metadata import markdown_table, version_metadata
from corpus_assets.layer_checks import partition_check
from corpus_assets.partitions import every_snapshot, releases_partitions
from corpus_assets.assets.splits_tokens.splits import splits_asset
from corpus_assets.assets.splits_tokens.tokenizer import tokenizer_asset
from resources.releases import ReleasesResource
from resources.storage import StorageResource


class TokenViewsConfig(dg.Config):
    max_records: int = Field(default=1024, ge=1, le=1_000_000, description="records per encode_batch call (memory bound)")
    max_chars: int = Field(default=4_000_000, ge=1, description="payload characters per encode_batch call (memory bound)")
    reuse: bool = Field(default=True, description="reuse views of identical records from any release (same tokenizer and policy)")
    task_records: int = Field(default=2048, ge=1, le=1_000_000,
                              description="records per task on the release engine (CORPUS_RELEASE_WORKERS); never changes a byte")


@dg.asset(
    name="token_views",
    partitions_def=releases_partitions,
    deps=[splits_asset, tokenizer_asset, *every_snapshot(CURATED_RECORDS)],  # the records' text
    group_name="splits_tokens",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=TOKEN_VIEWS_LAYER_VERSION,
    description=(
        "Input ids, loss mask and character offsets for every kept record of every split, encoded in "
        "bounded batches with the frozen tokenizer. Documents end with exactly one EOS; chat-like records "
        "use the versioned chat template with loss on assistant turns only (by default); preference pairs "
        "share identical prompt ids. Views are content-addressed (record digest, tokenizer digest, policy "
        "version): a release reuses views any release already computed and tokenizes only new records."
    ),
    check_specs=[
        partition_check("token_views_accounting", "token_views", releases_partitions,
                          description="kept records with a split = records with views + rejected (by reason code) = rows of its decision record."),
    ],
)
def token_views_asset(
    context: dg.AssetExecutionContext, config: TokenViewsConfig, storage: StorageResource, releases: ReleasesResource
):
    name = context.partition_key
    policy = releases.spec(name).token_views  # typed and checked when the spec was read
    store = storage.store()
    engine = engine_from_env()
    # how the work runs is in every progress line (one stored event each), not a line of its own
    progress = Progress(context.log.info, f"token_views[{name}] ({config.task_records}-record chunks on the {engine.describe()})")

    def on_batch(done: int, total: int, tokens: int) -> None:
        progress.total = total
        progress.update(done, tokens=tokens)

    version, report = build_token_views(
        store, name, policy,
        splits=store.require_current(SPLITS, name),
        tokenizer=store.require_current(TOKENIZER, name),
        max_records=config.max_records, max_chars=config.max_chars, reuse=config.reuse, progress=on_batch,
        engine=engine, task_records=config.task_records,
    )
    progress.finish()
    split_rows = [
        (s, r["records"], r["views"], r["tokens"], r["label_tokens"], f"{r['label_tokens'] / r['tokens']:.3f}" if r["tokens"] else "-")
        for s, r in report["splits"].items()
    ]
    total_tokens = report["tokens"] or 1
    source_rows = [
        (s, r["records"], r["tokens"], f"{r['tokens'] / total_tokens:.1%}", r["label_tokens"])
        for s, r in sorted(report["sources"].items(), key=lambda kv: (-kv[1]["tokens"], kv[0]))
    ]
    rejected = sum(report["rejected"].values())
    yield dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            **stored_key_figures(version),  # the KEY_FIGURES, from the stored version (as a purge reports them)
            "views": dg.MetadataValue.int(report["views"]),
            "rejected": dg.MetadataValue.int(rejected),
            "rejected_by_reason": dg.MetadataValue.json(report["rejected"]),
            "tokenized_records": dg.MetadataValue.int(report["tokenized_records"]),
            "reused_records": dg.MetadataValue.int(report["reused_records"]),
            "adopted_records": dg.MetadataValue.int(report["adopted_records"]),
            "tokenizer_digest": report["tokenizer_digest"],
            "vocab_size": dg.MetadataValue.int(report["vocab_size"]),
            "policy_version": report["policy_version"],
            "per_split": dg.MetadataValue.md(markdown_table(
                ["split", "records", "views", "tokens", "label tokens", "label rate"], split_rows)),
            "tokens_per_source": dg.MetadataValue.md(markdown_table(
                ["source", "records", "tokens", "token share", "label tokens"], source_rows)),
            **{f"{s}_tokens": dg.MetadataValue.int(r["tokens"]) for s, r in report["splits"].items()},
            **version_metadata(version),
        },
    )
    accounted = report["records_with_views"] + rejected
    decided = version.row_count(DECISIONS_TABLE)
    yield dg.AssetCheckResult(
        check_name="token_views_accounting",
        passed=accounted == report["records"] == decided,
        metadata={"records": dg.MetadataValue.int(report["records"]),
                  "with_views": dg.MetadataValue.int(report["records_with_views"]),
                  "rejected": dg.MetadataValue.int(rejected),
                  "decisions": dg.MetadataValue.int(decided)},
    )
