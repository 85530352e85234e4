"""curated_records: quality-filtered, decontaminated, PII-redacted records with honest accounting."""

import dagster as dg
from pydantic import Field

from corpus_assets.assets.ingestion.canonical_records import canonical_records
from corpus_assets.domain.core.config_files import ConfigError
from corpus_assets.domain.core.settings import curation_path
from corpus_assets.domain.curate.config import load_curation
from corpus_assets.domain.curate.curated_layer import (
    CURATED_CODE_VERSION,
    build_curated,
    curation_policy_version,
)
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.ingest.sources_config import SourcesFile
from corpus_assets.assets.curation.eval_registry import eval_registry, load_current_registry
from corpus_assets.layer_checks import curated_records_checks, partition_check
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.metadata import counts_table, markdown_table, version_metadata
from corpus_assets.partitions import snapshots_partitions
from resources.curation import CurationResource
from resources.sources import SourcesResource
from resources.storage import StorageResource


def declared_profiles(sources: SourcesFile) -> dict[str, str]:
    """source id -> quality profile (sources.yaml ``profile``)."""
    return {s.id: s.profile for s in sources.sources}


def curated_code_version() -> str:
    """The curated layer's code version plus a digest of the curation policy (curation.yaml as
    loaded when the definitions load), so an edited threshold shows ``curated_records`` unsynced
    in the UI (after "Reload definitions") until it is rematerialized. The sources' quality
    profiles (sources.yaml) are not in it, as no other sources.yaml setting is in a code version:
    they enter each version's policy version and build spec when it is built."""
    try:
        cfg = load_curation(curation_path())
    except (ConfigError, OSError):
        return f"{CURATED_CODE_VERSION}+unreadable-policy"  # the run itself reports what is wrong
    # the policy version (thresholds, PII and decontamination settings; no file paths, so another
    # checkout folder gives the same code version); the registry's content is an upstream asset
    policy = curation_policy_version(cfg, registry_digest="").split("+", 1)[1]
    return f"{CURATED_CODE_VERSION}+{policy[:12]}"


def _contamination_md(s, cfg, registry: EvalRegistry) -> str:
    """Per benchmark: protected texts, what could not be checked, flagged records (also those quality
    rejected first), then the method and its limits (the same text as the release data card's)."""
    method = (f"Method: n-gram containment from the benchmark side, n={cfg.decontam.n} (short items: "
              f"n={cfg.decontam.short_n}), tau={cfg.decontam.tau}, long n-gram rule for items of "
              f">= {cfg.decontam.long_item_tokens} tokens ({cfg.decontam.long_item_min_ngrams} shared n-gram(s)), "
              f"action={cfg.decontam.action}, registry {registry.digest[:16]} ({len(registry)} protected fields). "
              "Absence of matches means none were found by this method, not that the data is clean.")
    rep = s.decontam
    if rep is None:
        return "_decontamination disabled: nothing was checked_\n\n" + method
    cov = rep.coverage()
    rows = [(b, c["protected"], c["checked"], c["too_short"], c["all_ngrams_suppressed"], c["long_rule"],
             s.contamination.get(b, 0)) for b, c in cov.items()]
    table = markdown_table(["benchmark", "protected texts", "checked", "unchecked: too short",
                            "unchecked: all n-grams suppressed", "long n-gram rule applies", "records flagged"], rows)
    earlier = ", ".join(f"{st} {n}" for st, n in sorted(rep.records_flagged_rejected_earlier.items())) or "none"
    per_rule = ", ".join(f"{r} {n}" for r, n in sorted(rep.records_flagged_per_rule.items())) or "none"
    return "\n\n".join([
        table,
        f"Records flagged: {rep.records_flagged} of {rep.records_checked} checked (per rule: {per_rule}); "
        f"of them rejected by another stage first (reported, nothing applied): {earlier}.",
        method,
        "**Limits.** " + " ".join(rep.to_dict()["limits"]),
    ])


class CurateConfig(dg.Config):
    batch_size: int = Field(default=256, ge=1, le=100_000, description="records per processing batch (memory bound)")


@dg.asset(
    partitions_def=snapshots_partitions,
    deps=[canonical_records, eval_registry],
    group_name="curation",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=curated_code_version(),
    description=(
        "Curated records of one snapshot: per-source template removal (lines that recur across the "
        "source's pages: breadcrumbs, language bars, navigation headers), type- and domain-aware quality "
        "filters (Gopher quality and "
        "repetition, C4, FineWeb), n-gram-containment decontamination against eval_registry, and PII "
        "redaction with typed placeholders. One decision per canonical record with stage, reason code "
        "and policy version; the PII audit keeps spans, never values; quarantined records are owner-only."
    ),
    check_specs=[
        partition_check("curation_accounting", "curated_records", snapshots_partitions,
                        "canonical records in = accepted + rejected + quarantined (a purged record keeps its decision, marked deleted)."),
        partition_check("no_pii_in_public", "curated_records", snapshots_partitions,
                        "Re-detection finds no PII of a redacted type in the public records."),
        partition_check("registry_digest_recorded", "curated_records", snapshots_partitions,
                        "The curated version records the digest of the current eval registry."),
    ],
)
def curated_records(
    context: dg.AssetExecutionContext,
    config: CurateConfig,
    storage: StorageResource,
    curation: CurationResource,
    sources: SourcesResource,
) -> dg.MaterializeResult:
    key = context.partition_key
    store = storage.store()
    cfg = curation.load()
    # Without decontamination there is nothing to protect against, so no registry is required.
    registry = load_current_registry(store) if cfg.decontam.enabled else EvalRegistry(())
    canonical = store.require_current(CANONICAL_RECORDS, key)
    s = build_curated(
        store, key, cfg, registry, canonical_version=canonical, batch_size=config.batch_size, log=context.log.info,
        profiles=declared_profiles(sources.load()),
    )
    v = s.version
    retention_rows = [
        (src, lang, f"{stage}: {reason}", r[0], r[1], r[2], r[3], f"{r[3] / r[2]:.1%}" if r[2] else "-")
        for (src, lang, stage, reason), r in sorted(s.retention.items())
    ]
    reason_rows = [(st, o, rsn, c) for (st, o, rsn), c in sorted(s.by_reason.items(), key=lambda kv: (-kv[1], kv[0]))]
    profile_rows = [
        (p, ", ".join(sid for sid, sp in sorted(s.profiles.items()) if sp == p) or "all others", r[0], r[1],
         f"{r[1] / r[0]:.1%}" if r[0] else "-", f"{r[3] / r[2]:.1%}" if r[2] else "-")
        for p, r in sorted(s.by_profile.items())
    ]
    template_rows = [
        (src, t.pages, t.threshold or "-", t.groups, t.template_keys, t.template_patterns, t.records, t.lines_removed,
         f"{t.removed_share:.2%}", t.all_template)
        for src, t in sorted(s.templates.items())
    ]
    return dg.MaterializeResult(
        data_version=dg.DataVersion(v.content_digest),
        metadata={
            **stored_key_figures(v),  # the KEY_FIGURES, from the stored version (as a purge reports them)
            "modified": dg.MetadataValue.int(s.modified),
            "retention": dg.MetadataValue.md(markdown_table(
                ["source", "lang", "stage: reason", "records in", "records out", "chars in", "chars out", "char retention"],
                retention_rows)),
            "decisions": dg.MetadataValue.md(markdown_table(["stage", "outcome", "reason", "records"], reason_rows)),
            "quality_profiles": dg.MetadataValue.md(markdown_table(
                ["profile", "sources", "records in", "accepted", "kept share", "char retention"], profile_rows)),
            "templates": dg.MetadataValue.md(
                (markdown_table(["source", "pages", "frequent from (pages)", "groups with templates", "template keys",
                                 "row patterns", "records stripped", "lines removed", "chars removed",
                                 "all-template records (kept as is)"], template_rows)
                 if template_rows else "_no document records read_")
                if cfg.templates.enabled else "_template removal is off (curation.yaml templates.enabled)_"
            ),
            "pii_by_type": dg.MetadataValue.md(counts_table(s.pii_counts, "pii type") if s.pii_counts else "_none detected_"),
            "contamination": dg.MetadataValue.md(_contamination_md(s, cfg, registry)),
            "eval_registry_digest": registry.digest,
            "policy_version": s.policy_version,
            **version_metadata(v),
        },
        check_results=curated_records_checks(canonical, v, cfg, registry),
    )
