"""The asset checks of every layer a deletion purge rewrites, computed from the stored versions
only — so a normal materialization and a purge report the same checks through one code path.

Checks are per partition (``AssetCheckSpec(partitions_def=…)``): one snapshot that fails leaves
the others green in the UI. Dagster 1.13 marks partitioned checks as a preview and warns on every
definitions load; the warning is filtered for this one call.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional

import dagster as dg

from corpus_assets.domain.canonical.accounting import check_canonical_accounting
from corpus_assets.domain.curate.curated_layer import check_no_pii_in_public
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.key_figures import decision_outcomes
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS, RAW_SNAPSHOT
from corpus_assets.domain.storage.layer_store import LayerIntegrityError, LayerStore, LayerVersion

__all__ = ["partition_check", "raw_snapshot_checks", "canonical_records_checks", "curated_records_checks",
           "stored_checks"]


def partition_check(name: str, asset: str, partitions_def: dg.PartitionsDefinition, description: str,
                    blocking: bool = False) -> dg.AssetCheckSpec:
    """A check evaluated per partition of ``asset``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(name, asset=asset, partitions_def=partitions_def, description=description,
                                 blocking=blocking)


def raw_snapshot_checks(version: LayerVersion) -> list[dg.AssetCheckResult]:
    try:
        version.verify()
        return [dg.AssetCheckResult(check_name="raw_integrity", passed=True)]
    except LayerIntegrityError as exc:
        return [dg.AssetCheckResult(check_name="raw_integrity", passed=False, metadata={"error": str(exc)})]


def canonical_records_checks(raw: LayerVersion, version: LayerVersion) -> list[dg.AssetCheckResult]:
    report = check_canonical_accounting(raw, version)
    return [dg.AssetCheckResult(
        check_name="accounting",
        passed=report.passed,
        metadata={
            "in": dg.MetadataValue.int(report.items_in),
            "accepted": dg.MetadataValue.int(report.accepted),
            "rejected": dg.MetadataValue.int(report.rejected),
            "quarantined": dg.MetadataValue.int(report.quarantined),
            "problems": "; ".join(report.problems) or "none",
        },
    )]


def curated_records_checks(canonical: LayerVersion, version: LayerVersion, config,
                           registry: EvalRegistry) -> list[dg.AssetCheckResult]:
    """``config``: the CurationConfig; ``registry``: the current evaluation registry (empty when
    decontamination is off). A purged record keeps its decision, marked ``deleted``, and leaves
    the canonical records: every record still in canonical_records has exactly one other decision."""
    outcomes = decision_outcomes(version)
    live = sum(n for o, n in outcomes.items() if o != "deleted")
    canonical_in = canonical.row_count("records")
    pii_problems = check_no_pii_in_public(version, config)
    return [
        dg.AssetCheckResult(
            check_name="curation_accounting",
            passed=live == canonical_in and version.row_count("records") == outcomes.get("accepted", 0)
            and set(outcomes) <= {"accepted", "rejected", "quarantined", "deleted"},
            metadata={"in": dg.MetadataValue.int(canonical_in), **{k: dg.MetadataValue.int(v) for k, v in sorted(outcomes.items())}},
        ),
        dg.AssetCheckResult(
            check_name="no_pii_in_public",
            passed=not pii_problems,
            metadata={"findings": dg.MetadataValue.int(len(pii_problems)),
                      "second_detector_findings": dg.MetadataValue.int(sum(p.endswith("(second detector)") for p in pii_problems)),
                      "records": ", ".join(sorted({p.rsplit(': ', 1)[0] for p in pii_problems})[:20]) or "none"},
        ),
        dg.AssetCheckResult(
            check_name="registry_digest_recorded",
            passed=version.manifest.get("eval_registry_digest") == registry.digest,
            metadata={"eval_registry_digest": registry.digest},
        ),
    ]


def stored_checks(asset: str, store: LayerStore, partition: str, *,
                  curation: Callable[[], tuple[object, EvalRegistry]]) -> Optional[list[dg.AssetCheckResult]]:
    """The checks of ``asset``'s current version of ``partition``, or None when the asset has no
    checks here. ``curation``: () -> (CurationConfig, current registry), read only when needed."""
    if asset == RAW_SNAPSHOT:
        return raw_snapshot_checks(store.require_current(RAW_SNAPSHOT, partition))
    if asset == CANONICAL_RECORDS:
        return canonical_records_checks(store.require_current(RAW_SNAPSHOT, partition),
                                        store.require_current(CANONICAL_RECORDS, partition))
    if asset == CURATED_RECORDS:
        config, registry = curation()
        return curated_records_checks(store.require_current(CANONICAL_RECORDS, partition),
                                      store.require_current(CURATED_RECORDS, partition), config, registry)
    return None
