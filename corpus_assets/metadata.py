"""Helpers that turn counts into the metadata a user reads in the Dagster UI.

The rule for metadata values (so the UI's "Plots" tab can chart a figure across materializations,
and a figure keeps one type from one materialization to the next):

- a count (records, items, tokens, blocks, bytes, findings) is ``dg.MetadataValue.int(n)``;
- a rate or share in [0, 1] (retention, acceptance, duplicate rate, utilization, label-token rate)
  is ``dg.MetadataValue.float(ratio(part, whole))`` (or ``round(x, 6)`` when the domain already
  computed it): named ``*_rate`` / ``*utilization``, never a percentage string;
- a flag is ``dg.MetadataValue.bool``; tables are ``dg.MetadataValue.md`` (``markdown_table`` /
  ``counts_table``), paths ``dg.MetadataValue.path``, nested structures ``dg.MetadataValue.json``;
  identifiers, digests and policy versions are plain strings.

Plain Python ints / floats would also be accepted by Dagster (it wraps them itself); we still
wrap every number explicitly, in check results too, so the type is visible at the call site.
``KEY_FIGURES`` lists the figures each asset emits for the UI's plots; tests/test_ui_definitions.py
materializes a small release and asserts their types.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import dagster as dg


# asset -> {metadata key: "int" | "float"}: the figures the UI plots over time (retention, duplicate
# rate, tokens, utilization, ...). Every materialization of the asset carries each of them.
KEY_FIGURES: dict[str, dict[str, str]] = {
    "raw_snapshot": {"items": "int", "stored_bytes": "int"},
    "canonical_records": {"items_in": "int", "accepted": "int", "rejected": "int", "quarantined": "int",
                          "acceptance_rate": "float"},
    "eval_registry": {"items": "int"},
    "curated_records": {"records_in": "int", "accepted": "int", "rejected": "int", "quarantined": "int",
                        "retention_rate": "float", "chars_in": "int", "chars_out": "int",
                        "char_retention_rate": "float"},
    "minhash_signatures": {"records": "int", "num_perm": "int"},
    "dedup_clusters": {"records": "int", "kept": "int", "exact_duplicates": "int", "near_duplicates": "int",
                       "duplicate_rate": "float"},
    "splits": {"records": "int", "leakage_groups": "int"},
    "tokenizer": {"vocab_size": "int"},
    "token_views": {"records": "int", "tokens": "int", "label_tokens": "int", "label_token_rate": "float"},
    "mixture_plan": {"draws": "int", "tokens": "int", "max_effective_epochs": "float"},
    "packed_shards": {"blocks": "int", "shards": "int", "train_utilization": "float", "train_padding": "int",
                      "train_label_token_rate": "float"},
    "release_manifest": {"artifacts": "int", "shards": "int", "source_records": "int", "sampled_records": "int",
                         "materialized_tokens": "int", "label_tokens": "int"},
}


def ratio(part: float, whole: float, digits: int = 6) -> float:
    """part / whole rounded to ``digits`` places; 0.0 when whole is 0 (nothing to divide)."""
    return round(part / whole, digits) if whole else 0.0


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence], limit: int = 50) -> str:
    rows = list(rows)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows[:limit]:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more rows not shown_")
    return "\n".join(lines)


def counts_table(counts: Mapping[str, int], key_header: str) -> str:
    total = sum(counts.values()) or 1
    return markdown_table(
        [key_header, "count", "share"],
        [(k, v, f"{v / total:.1%}") for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))],
    )


def standard_metadata(version) -> dict:
    """Dagster's standard keys for a layer version, from its manifest (nothing is read but it):
    ``dagster/row_count`` of the layer's main table and ``dagster/column_schema`` of its columns,
    so the UI's row-count plot and column view work on every tabular layer."""
    from corpus_assets.domain.layers import registry

    if not registry.is_layer(version.asset):
        return {}
    main = registry.layer(version.asset).main_table
    table = version.manifest["tables"].get(main) if main else None
    if table is None:
        return {}
    columns = [dg.TableColumn(name=c.split(":", 1)[0], type=c.split(":", 1)[1] if ":" in c else "unknown")
               for c in table.get("schema", [])]
    out = {"dagster/row_count": dg.MetadataValue.int(int(table["rows"]))}
    if columns:
        out["dagster/column_schema"] = dg.TableSchema(columns=columns)
    return out


def version_metadata(version) -> dict:
    return {
        "version": dg.MetadataValue.text(version.version),
        "content_digest": dg.MetadataValue.text(version.content_digest),
        "path": dg.MetadataValue.path(str(version.root)),
        **({"object_store": dg.MetadataValue.url(version.location)} if version.location else {}),
        **standard_metadata(version),
    }
