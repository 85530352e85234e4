"""The decision record: one schema for what every stage did to every record it was given.

Every stage that can drop, change or quarantine a record (canonicalize, curate, dedup, splits,
token views, mixture, packing) writes a ``decisions`` table with these columns, one row per unit
of its input (a raw item, a record, a packing sample). So one query counts every stage from raw
items to packed tokens (``dbt_like_sql/stage_accounting.sql``), and for every stage
``in = accepted + rejected + quarantined + deleted``. ``action`` says what happened to an
accepted record (kept as is, or modified: redacted, masked, truncated, split); ``reason`` is a
stable code (part of the data contract), ``detail`` a short human text without content.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.reasons import Outcome

DECISIONS_TABLE = "decisions"

DECISIONS_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),  # null for a raw item that never became a record
        ("item_index", pa.int64()),  # position in the stage's input: raw item (canonicalize), sample (packing)
        ("item_id", pa.string()),  # the raw item's id (canonicalize)
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("split", pa.string()),  # the record's split, from the splits stage on
        ("schema_type", pa.string()),
        ("domain", pa.string()),
        ("lang", pa.string()),
        ("stage", pa.string()),  # the (sub-)stage that decided: canonicalize, quality, decontam, pii, curate, dedup, ...
        ("outcome", pa.string()),  # accepted | rejected | quarantined | deleted
        ("action", pa.string()),  # accept | modify | reject | quarantine | delete
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("policy_version", pa.string()),
        ("chars_in", pa.int64()),
        ("chars_out", pa.int64()),
        ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()),
    ]
)
COLUMNS = tuple(DECISIONS_SCHEMA.names)

ACCEPT, MODIFY, REJECT, QUARANTINE, DELETE = "accept", "modify", "reject", "quarantine", "delete"
# the outcome each action implies: stages cannot disagree about it
OUTCOME_OF_ACTION = {
    ACCEPT: Outcome.ACCEPTED.value,
    MODIFY: Outcome.ACCEPTED.value,
    REJECT: Outcome.REJECTED.value,
    QUARANTINE: Outcome.QUARANTINED.value,
    DELETE: Outcome.DELETED.value,
}
ACTION_OF_OUTCOME = {Outcome.ACCEPTED.value: ACCEPT, Outcome.REJECTED.value: REJECT,
                     Outcome.QUARANTINED.value: QUARANTINE, Outcome.DELETED.value: DELETE}
OK = "ok"


def decision(*, stage: str, action: str, reason: str = OK, policy_version: str = "", detail: str = "",
             **fields: Any) -> dict:
    """One decision row; the outcome follows from the action, unknown fields are refused."""
    if action not in OUTCOME_OF_ACTION:
        raise ValueError(f"action {action!r}: expected one of {', '.join(OUTCOME_OF_ACTION)}")
    unknown = set(fields) - set(COLUMNS)
    if unknown:
        raise ValueError(f"decision: unknown fields {sorted(unknown)}")
    row = dict.fromkeys(COLUMNS)
    row.update(fields, stage=stage, action=action, outcome=OUTCOME_OF_ACTION[action], reason=reason,
               detail=detail, policy_version=policy_version)
    return row


def decisions_table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([dict(dict.fromkeys(COLUMNS), **r) for r in rows], schema=DECISIONS_SCHEMA)


def decisions_from_columns(n: int, **columns: Any) -> pa.Table:
    """A decisions table of ``n`` rows from whole columns (arrays, lists or one value repeated):
    how stages with many rows (dedup, packing) build theirs without a dict per row."""
    unknown = set(columns) - set(COLUMNS)
    if unknown:
        raise ValueError(f"decisions: unknown columns {sorted(unknown)}")
    if "outcome" in columns:
        raise ValueError("decisions: give the action; the outcome follows from it")
    action = columns.get("action")
    if action is None:
        raise ValueError("decisions: an action is required")
    if isinstance(action, str):
        actions, outcome = [action], OUTCOME_OF_ACTION.get(action)
    elif isinstance(action, (pa.Array, pa.ChunkedArray)):  # a column: mapped in Arrow, no row objects
        actions = pc.unique(action).to_pylist()
        known = pa.array(list(OUTCOME_OF_ACTION), pa.string())
        outcome = pa.array(list(OUTCOME_OF_ACTION.values()), pa.string()).take(pc.index_in(action.cast(pa.string()), known))
    else:
        actions = list(action)
        outcome = [OUTCOME_OF_ACTION.get(a) for a in actions]
    bad = sorted({a for a in actions if a not in OUTCOME_OF_ACTION}, key=str)
    if bad:
        raise ValueError(f"decisions: unknown actions {bad}")
    columns = dict(columns, outcome=outcome)
    columns.setdefault("reason", OK)
    arrays = []
    for field in DECISIONS_SCHEMA:
        value = columns.get(field.name)
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        if value is None:
            arrays.append(pa.nulls(n, field.type))
            continue
        if isinstance(value, (str, int)):  # one value for every row: repeated in Arrow, no list of n
            arrays.append(pa.repeat(pa.scalar(value, field.type), n))
            continue
        array = value.cast(field.type) if isinstance(value, pa.Array) else pa.array(value, field.type)
        if len(array) != n:
            raise ValueError(f"decisions: column {field.name} has {len(array)} rows, expected {n}")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=DECISIONS_SCHEMA)


def outcome_counts(table: pa.Table) -> dict[str, int]:
    if table.num_rows == 0:
        return {}
    return {str(r["values"]): int(r["counts"]) for r in pc.value_counts(table.column("outcome")).to_pylist()}


def action_for(outcome: str, modified: bool = False) -> str:
    return MODIFY if modified and outcome == Outcome.ACCEPTED.value else ACTION_OF_OUTCOME[outcome]


def check_decisions(table: pa.Table, expected_in: Optional[int] = None) -> list[str]:
    """Problems with a decisions table: unknown outcomes or actions, an outcome that contradicts its
    action, and (given) a row count other than the stage's input."""
    problems = []
    rows = table.select(["outcome", "action"]).to_pylist() if table.num_rows else []
    bad = {(r["outcome"], r["action"]) for r in rows if OUTCOME_OF_ACTION.get(r["action"]) != r["outcome"]}
    if bad:
        problems.append(f"outcome/action pairs that do not agree: {sorted(bad, key=str)}")
    if expected_in is not None and table.num_rows != expected_in:
        problems.append(f"{table.num_rows} decisions for {expected_in} inputs")
    return problems
