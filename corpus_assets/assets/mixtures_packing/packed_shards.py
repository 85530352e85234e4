"""packed_shards: fixed-length training blocks with provenance spans, in trainer-readable shards."""

import dagster as dg
from pydantic import Field

from corpus_assets.domain.core.compute import engine_from_env
from corpus_assets.domain.layers.registry import MIXTURE_PLAN, PACKED_SHARDS, TOKENIZER, TOKEN_VIEWS
from corpus_assets.domain.core.progress import SUBPHASE_QUIET_S, Progress
from corpus_assets.domain.pack.shards_layer import (
    SHARDS_LAYER_VERSION,
    SpanCoverageError,
    build_packed_shards,
    resolve_packing,
    set_aside_shard_set,
    verify_packed_shards,
)
from corpus_assets.domain.tokens.token_views_layer import frozen_tokenizer_of
from corpus_assets.metadata import markdown_table, version_metadata
from corpus_assets.assets.mixtures_packing.mixture_plan import mixture_plan_asset
from corpus_assets.layer_checks import partition_check
from corpus_assets.partitions import releases_partitions
from resources.releases import ReleasesResource
from resources.storage import StorageResource


class PackedShardsConfig(dg.Config):
    task_positions: int = Field(default=1 << 23, ge=1, description=(
        "positions per packing task (rounded to whole shards) on the release engine (CORPUS_RELEASE_WORKERS); "
        "never changes a byte"))


@dg.asset(
    name="packed_shards",
    partitions_def=releases_partitions,
    deps=[mixture_plan_asset, TOKEN_VIEWS, TOKENIZER],  # packs the plan's token views with the tokenizer's ids
    group_name="mixtures_packing",
    kinds={"python", "numpy", "parquet"},
    owners=["team:corpus"],
    code_version=SHARDS_LAYER_VERSION,
    description=(
        "Training blocks of T positions packed from the mixture plan (train) and the natural order of "
        "validation / test (stream, or atomic by Algorithm 18.2 / best fit), with segment ids, loss masks "
        "where padding and cross-sample predictions are never targets, and provenance spans for every "
        "position. Written as Megatron indexed-dataset shards (.bin/.idx) plus sidecars, in a "
        "content-addressed shard set under `$CORPUS_HOME/shards/<release>/`."
    ),
    check_specs=[
        partition_check("span_coverage", "packed_shards", releases_partitions, blocking=True,
                          description="Re-reads every written shard (sha256, index) and checks its provenance spans: every "
                                      "position covered exactly once, padding only by pad spans and never in the loss. "
                                      "A set that fails it is moved aside and written afresh once, every shard packed "
                                      "(none kept): the check reports that second reading, and the materialization "
                                      "what the first found. Blocking: release_manifest does not run on shards that fail it."),
    ],
)
def packed_shards_asset(context: dg.AssetExecutionContext, config: PackedShardsConfig, storage: StorageResource,
                        releases: ReleasesResource):
    name = context.partition_key
    rspec = releases.spec(name)
    store = storage.store()
    tok = frozen_tokenizer_of(store.require_current(TOKENIZER, name))
    where = f"releases/{name}.yaml"
    policy, bos_id = resolve_packing(rspec.packing, tok.tokenizer.token_to_id, where)
    shard_spec, names = rspec.shards, rspec.split.names  # typed and checked when the spec was read
    # a quick step says nothing more than its per-split lines (each a stored Dagster event)
    progress = Progress(context.log.info, f"packed_shards[{name}]", unit="splits", total=len(names),
                        quiet_below=SUBPHASE_QUIET_S)
    done: set[str] = set()

    def log(msg: str) -> None:
        context.log.info(msg)
        # a split is done when its summary line ("packed_shards <release>/<split>: ...") is logged;
        # other lines (spooling, shard writes) are not splits
        done.update(s for s in names if msg.startswith(f"packed_shards {name}/{s}:"))
        progress.update(len(done))

    previous = store.current(PACKED_SHARDS, name)  # its order (packing.order: append) and the shards it keeps

    def build(adopt: bool):
        return build_packed_shards(
            store, name, policy, shard_spec,
            token_views=store.require_current(TOKEN_VIEWS, name),
            mixture_plan=store.require_current(MIXTURE_PLAN, name),
            tokenizer_digest=tok.digest, vocab_size=tok.vocab_size, split_names=names, bos_id=bos_id, log=log,
            engine=engine_from_env(), task_positions=config.task_positions,  # shard ranges as tasks; never changes a byte
            order=rspec.packing.order, previous=previous, adopt=adopt,
        )

    try:
        version, report = build(adopt=True)
        # the span check re-reads the set on disk; a set that fails it (a file changed in place: kept
        # shards are linked and sets reused by name, so it would come back in every rebuild) is moved
        # aside and written afresh, every shard packed, once
        verified = verify_packed_shards(store, version)
        repacked: dict = {}
        if not all(v["ok"] for v in verified.values()):
            problems = [p for v in verified.values() for p in v["problems"]]
            aside = set_aside_shard_set(store, version)
            context.log.warning(
                f"packed_shards[{name}]: the shard set failed its re-read ({'; '.join(problems[:3])}); moved it "
                f"aside to {', '.join(str(a) for a in aside) or '(nothing local)'} and packing every shard again")
            repacked = {"problems": problems, "set_aside": [str(a) for a in aside]}
            version, report = build(adopt=False)
            verified = verify_packed_shards(store, version)
    except SpanCoverageError as exc:
        # the check's failure is recorded (and shown on the asset) before it blocks the release
        yield dg.AssetCheckResult(check_name="span_coverage", passed=False, metadata={
            "split": exc.split, "problems": dg.MetadataValue.json([str(d) for d in exc.details[:20]])})
        raise dg.Failure(description=str(exc)) from exc
    progress.finish()
    splits = report["splits"]
    split_rows = [
        (s, r.get("samples", 0), r.get("blocks", 0), r.get("shards", 0), f"{r.get('utilization', 0):.2%}", r.get("padding", 0),
         r.get("dropped_tokens", 0), r.get("truncated_tokens", 0), len(r.get("quarantined_records", [])), f"{r.get('label_rate', 0):.2%}")
        for s, r in splits.items()
    ]
    den_rows = [(s, d["source_records"], d["sampled_records"], d["materialized_tokens"], d["label_tokens"])
                for s, d in report["denominators"].items()]
    train = splits.get(names[0], {})
    yield dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            "blocks": dg.MetadataValue.int(sum(r.get("blocks", 0) for r in splits.values())),
            "shards": dg.MetadataValue.int(sum(r.get("shards", 0) for r in splits.values())),
            "seq_len": dg.MetadataValue.int(policy.seq_len),
            "mode": f"{policy.mode} ({policy.fit}, tail {policy.tail}, boundary {policy.boundary})",
            "train_utilization": dg.MetadataValue.float(round(train.get("utilization", 0.0), 6)),
            "train_padding": dg.MetadataValue.int(train.get("padding", 0)),
            "train_dropped_tokens": dg.MetadataValue.int(train.get("dropped_tokens", 0)),
            "train_label_token_rate": dg.MetadataValue.float(round(train.get("label_rate", 0.0), 6)),
            "per_split": dg.MetadataValue.md(markdown_table(
                ["split", "samples", "blocks", "shards", "utilization", "padding", "dropped", "truncated", "quarantined", "label rate"],
                split_rows)),
            "denominators": dg.MetadataValue.md(markdown_table(
                ["source", "source records", "sampled records", "materialized tokens", "effective label tokens"], den_rows)),
            "tokenizer_digest": report["tokenizer_digest"],
            "shard_set": dg.MetadataValue.path(str(store.home / report["shard_set"])),
            "policy_version": report["policy_version"],
            "order": rspec.packing.order,
            "shards_kept": dg.MetadataValue.int(sum(report["kept_shards"].values())),
            **({"repacked_after_reread": dg.MetadataValue.json(repacked)} if repacked else {}),
            **version_metadata(version),
        },
    )
    yield dg.AssetCheckResult(
        check_name="span_coverage",
        passed=all(v["ok"] for v in verified.values()),
        metadata={
            "shards_checked": dg.MetadataValue.int(sum(v["shards"] for v in verified.values())),
            "blocks_checked": dg.MetadataValue.int(sum(v["blocks"] for v in verified.values())),
            **({"repacked_after": dg.MetadataValue.json(repacked["problems"][:20])} if repacked else {}),
            "per_split": dg.MetadataValue.md(markdown_table(
                ["split", "shards", "blocks", "ok", "problems"],
                [(k, v["shards"], v["blocks"], v["ok"], "; ".join(v["problems"]) or "none") for k, v in sorted(verified.items())])),
        },
    )
