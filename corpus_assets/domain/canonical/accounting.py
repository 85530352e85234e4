"""Stage accounting: every input item ends as exactly one of accepted / rejected / quarantined."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from corpus_assets.domain.storage.layer_store import LayerVersion


@dataclass
class AccountingReport:
    passed: bool
    items_in: int
    accepted: int
    rejected: int
    quarantined: int
    records: int
    quarantine_rows: int
    problems: list[str]


def _files_sql(files) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in files) + "]"


def check_canonical_accounting(raw: LayerVersion, canonical: LayerVersion) -> AccountingReport:
    """in = accepted + rejected + quarantined, each raw item decided exactly once, tables agree."""
    items_in = raw.row_count("items")
    con = duckdb.connect()
    try:
        dec = _files_sql(canonical.table_files("decisions"))
        counts = dict(
            con.execute(f"SELECT outcome, count(*) FROM read_parquet({dec}) GROUP BY outcome").fetchall()
        )
        distinct, lo, hi, total = con.execute(
            f"SELECT count(DISTINCT item_index), min(item_index), max(item_index), count(*) FROM read_parquet({dec})"
        ).fetchone()
        rec = _files_sql(canonical.table_files("records"))
        ids, distinct_ids = con.execute(f"SELECT count(record_id), count(DISTINCT record_id) FROM read_parquet({rec})").fetchone()
    finally:
        con.close()
    accepted, rejected, quarantined, deleted = (counts.get(k, 0) for k in ("accepted", "rejected", "quarantined", "deleted"))
    problems = []
    unknown = set(counts) - {"accepted", "rejected", "quarantined", "deleted"}
    if unknown:
        problems.append(f"unknown outcomes {sorted(unknown)}")
    if accepted + rejected + quarantined + deleted != items_in:
        problems.append(
            f"in={items_in} but accepted+rejected+quarantined+deleted={accepted + rejected + quarantined + deleted}")
    if total != items_in or distinct != items_in or (items_in and (lo != 0 or hi != items_in - 1)):
        problems.append(f"decisions do not cover raw items 0..{items_in - 1} exactly once")
    records = canonical.row_count("records")
    if records != accepted:
        problems.append(f"{records} records stored but {accepted} accepted")
    if ids != distinct_ids:
        problems.append(f"{ids - distinct_ids} duplicate record ids among stored records")
    quarantine_rows = canonical.row_count("quarantine")
    if quarantine_rows != quarantined:
        problems.append(f"{quarantine_rows} quarantine rows but {quarantined} quarantined")
    return AccountingReport(
        not problems, items_in, accepted, rejected, quarantined, records, quarantine_rows, problems
    )
