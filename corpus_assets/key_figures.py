"""The key figures (``metadata.KEY_FIGURES``) of the layers a deletion purge rewrites, computed
from a stored version only — so a normal materialization and a purge's materialization plot the
same figures from the same code, and the UI's plots have no gap after a deletion."""

from __future__ import annotations

from collections import Counter

import dagster as dg
import pyarrow.compute as pc

from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import (
    CANONICAL_RECORDS, CURATED_RECORDS, MINHASH_SIGNATURES, RAW_SNAPSHOT, TOKEN_VIEWS,
)
from corpus_assets.domain.storage.layer_store import LayerVersion
from corpus_assets.metadata import ratio

__all__ = ["stored_key_figures", "decision_outcomes"]

_BATCH = 65536


def decision_outcomes(version: LayerVersion) -> dict[str, int]:
    """Rows of the version's decision record per outcome (deleted ones included)."""
    counts: Counter = Counter()
    for batch in version.iter_batches(DECISIONS_TABLE, batch_size=_BATCH, columns=["outcome"]):
        counts.update(batch.column(0).to_pylist())
    return dict(counts)


def _sums(version: LayerVersion, table: str, columns: list[str]) -> list[int]:
    totals = [0] * len(columns)
    for batch in version.iter_batches(table, batch_size=_BATCH, columns=columns):
        for i in range(len(columns)):
            totals[i] += int(pc.sum(batch.column(i)).as_py() or 0)
    return totals


def _outcome_figures(outcomes: dict[str, int], total_key: str, total: int, rate_key: str) -> dict:
    return {
        total_key: dg.MetadataValue.int(total),
        **{o: dg.MetadataValue.int(outcomes.get(o, 0)) for o in ("accepted", "rejected", "quarantined")},
        rate_key: dg.MetadataValue.float(ratio(outcomes.get("accepted", 0), total)),
    }


def stored_key_figures(version: LayerVersion) -> dict:
    """KEY_FIGURES of ``version``'s asset as Dagster metadata ({} for an asset not listed here)."""
    asset = version.asset
    if asset == RAW_SNAPSHOT:
        table = version.manifest["tables"]["items"]
        return {"items": dg.MetadataValue.int(int(table["rows"])),
                "stored_bytes": dg.MetadataValue.int(sum(int(f["bytes"]) for f in table["files"]))}
    if asset == CANONICAL_RECORDS:  # every raw item is decided exactly once
        return _outcome_figures(decision_outcomes(version), "items_in", version.row_count(DECISIONS_TABLE), "acceptance_rate")
    if asset == CURATED_RECORDS:  # every canonical record is decided exactly once
        chars_in, chars_out = _sums(version, DECISIONS_TABLE, ["chars_in", "chars_out"])
        return {**_outcome_figures(decision_outcomes(version), "records_in", version.row_count(DECISIONS_TABLE), "retention_rate"),
                "chars_in": dg.MetadataValue.int(chars_in), "chars_out": dg.MetadataValue.int(chars_out),
                "char_retention_rate": dg.MetadataValue.float(ratio(chars_out, chars_in))}
    if asset == MINHASH_SIGNATURES:
        return {"records": dg.MetadataValue.int(version.row_count("signatures")),
                "num_perm": dg.MetadataValue.int(int(version.manifest["num_perm"]))}
    if asset == TOKEN_VIEWS:  # one decision per kept record with a split; tokens summed over its views
        tokens, label_tokens = _sums(version, "views", ["n_tokens", "label_tokens"])
        return {"records": dg.MetadataValue.int(version.row_count(DECISIONS_TABLE)),
                "tokens": dg.MetadataValue.int(tokens), "label_tokens": dg.MetadataValue.int(label_tokens),
                "label_token_rate": dg.MetadataValue.float(round(ratio(label_tokens, tokens), 6))}
    return {}
