"""Exact dedup over the dedup key of the declared object, with aliases kept.

The object is the whole record (document, conversation, preference pair), never only an answer;
the key is ``hashing.dedup_key``. Equal keys are only candidates (groups are split by normalized
bytes, so a collision never merges content); the representative is the first member by the
stable total order key, never by partition or completion order; every member keeps an alias row
(``alias_rows``), so no source's governance is lost.

Decisions: docs/dedup.md#exact-dedup
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["EXACT_DEDUP_CODE_VERSION", "ExactGroup", "exact_groups", "alias_rows", "exact_summary",
           "ExactArrays", "exact_arrays", "split_by_bytes"]

EXACT_DEDUP_CODE_VERSION = "exact-dedup-1"


@dataclass(frozen=True)
class ExactGroup:
    """Records with identical normalized content. ``members`` are sorted by the total order, so
    ``members[0] == representative``."""

    key: str
    representative: int
    members: tuple[int, ...]

    @property
    def duplicates(self) -> tuple[int, ...]:
        return self.members[1:]


def exact_groups(
    dedup_keys: Sequence[str],
    normalized_texts: Callable[[int], bytes],
    order_keys: Sequence[tuple],
) -> list[ExactGroup]:
    """One group per distinct normalized content, singletons included (every record is in
    exactly one group). ``normalized_texts(i)`` is only called for records whose key is shared.
    Groups are listed by (key, representative's order key). The order keys must be distinct
    (end them with the record id)."""
    n = len(dedup_keys)
    if len(order_keys) != n:
        raise ValueError("one order key per record")
    by_key: dict[str, list[int]] = {}
    for i, k in enumerate(dedup_keys):
        by_key.setdefault(k, []).append(i)
    groups: list[ExactGroup] = []
    for key in sorted(by_key):
        idx = sorted(by_key[key], key=order_keys.__getitem__)
        for a, b in zip(idx, idx[1:]):
            if order_keys[a] == order_keys[b]:
                raise ValueError(f"order keys are not a total order: records {a} and {b} share {order_keys[a]!r}")
        if len(idx) == 1:
            groups.append(ExactGroup(key, idx[0], (idx[0],)))
            continue
        # split by the normalized bytes themselves: dict equality is exact byte equality
        by_bytes: dict[bytes, list[int]] = {}
        for i in idx:  # in total order, so each sub-list stays in total order
            data = normalized_texts(i)
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError("normalized_texts must return bytes")
            by_bytes.setdefault(bytes(data), []).append(i)
        subs = sorted(by_bytes.values(), key=lambda m: order_keys[m[0]])
        for members in subs:
            groups.append(ExactGroup(key, members[0], tuple(members)))
    return groups


def alias_rows(
    groups: Sequence[ExactGroup], record_ids: Sequence[str], source_ids: Sequence[str]
) -> Iterator[dict]:
    """One row per (representative, alias record, source) — every member, the representative
    included (``is_representative``), so each source's governance stays attached to the content
    that is kept."""
    for g in groups:
        rep_id = record_ids[g.representative]
        for i in g.members:
            yield {
                "dedup_key": g.key,
                "representative_id": rep_id,
                "record_id": record_ids[i],
                "source_id": source_ids[i],
                "is_representative": i == g.representative,
            }


def exact_summary(groups: Sequence[ExactGroup]) -> dict:
    """Counts for reports: records, kept representatives, removed duplicates, groups with
    duplicates, keys split because different bytes shared a key (collisions)."""
    keys: dict[str, int] = {}
    for g in groups:
        keys[g.key] = keys.get(g.key, 0) + 1
    records = sum(len(g.members) for g in groups)
    return {
        "records": records,
        "representatives": len(groups),
        "duplicates_removed": records - len(groups),
        "duplicate_groups": sum(1 for g in groups if len(g.members) > 1),
        "key_collisions": sum(1 for c in keys.values() if c > 1),
    }


# ---------------------------------------------------------------------------------------------
# the same groups as arrays, for release scale (no Python object per record)


@dataclass(frozen=True)
class ExactArrays:
    """:func:`exact_groups` as arrays over record indices: ``representative[i]`` (i itself for a
    representative), ``alias_order`` (record indices in the order :func:`alias_rows` lists them:
    groups by (key, representative's rank), members by rank) and :func:`exact_summary`'s counts."""

    representative: np.ndarray
    alias_order: np.ndarray
    summary: dict


def split_by_bytes(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """For records sharing a key (columns ``idx``, ``key``, ``rank``, ``normal``: the normalized
    text): ``(idx, rep)``, each record's representative the first by rank among the records with the
    same key *and* the same normalized bytes. One sort by (key, normal, rank); equal neighbours are
    compared as strings, which is byte equality."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = pc.sort_indices(table, sort_keys=[("key", "ascending"), ("normal", "ascending"), ("rank", "ascending")])
    key = table.column("key").take(order)
    normal = table.column("normal").take(order)
    new = np.ones(n, dtype=bool)
    if n > 1:
        differ = pc.or_(pc.not_equal(key.slice(1), key.slice(0, n - 1)), pc.not_equal(normal.slice(1), normal.slice(0, n - 1)))
        new[1:] = differ.to_numpy(zero_copy_only=False)
    idx = table.column("idx").take(order).to_numpy().astype(np.int64, copy=False)
    return idx, idx[np.flatnonzero(new)][np.cumsum(new) - 1]


def exact_arrays(
    keys: pl.Series,
    rank: np.ndarray,
    split: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    enabled: bool = True,
) -> ExactArrays:
    """Exact groups of ``n`` records from their dedup ``keys`` and ranks in the total order (distinct).
    ``split(indices)`` gets the sorted record indices whose key is shared and returns
    ``(indices, representatives)`` from the normalized bytes (:func:`split_by_bytes`); it is not called
    when no key is shared. ``enabled=False``: every record is its own group (exact dedup off)."""
    n = len(keys)
    rank = np.asarray(rank, dtype=np.int64)
    if rank.shape != (n,):
        raise ValueError("one rank per record")
    if np.unique(rank).size != n:
        raise ValueError("ranks are not a total order: two records share one")
    frame = pl.DataFrame({"key": keys, "rank": rank}).with_row_index("idx").with_columns(pl.col("idx").cast(pl.Int64))
    rep = np.arange(n, dtype=np.int64)
    counts = frame.group_by("key").len()
    shared = counts.filter(pl.col("len") > 1)
    if enabled:
        cand = frame.join(shared.select("key"), on="key", how="semi").get_column("idx").sort().to_numpy()
        if cand.size:
            idx, reps = split(cand)
            rep[np.asarray(idx, dtype=np.int64)] = np.asarray(reps, dtype=np.int64)
        frame = frame.with_columns(pl.Series("rep", rep))
        alias_order = (frame.with_columns(pl.Series("rep_rank", rank[rep]))
                       .sort(["key", "rep_rank", "rank"]).get_column("idx").to_numpy())
        groups = int((rep == np.arange(n)).sum())
        sizes = np.bincount(rep, minlength=n)
        per_key = frame.filter(pl.col("idx") == pl.col("rep")).group_by("key").len()
        collisions = int(per_key.filter(pl.col("len") > 1).height)
        dup_groups = int((sizes > 1).sum())
    else:
        alias_order = np.arange(n, dtype=np.int64)
        groups, collisions, dup_groups = n, int(shared.height), 0
    summary = {
        "records": n,
        "representatives": groups,
        "duplicates_removed": n - groups,
        "duplicate_groups": dup_groups,
        "key_collisions": collisions,
    }
    return ExactArrays(rep, np.asarray(alias_order, dtype=np.int64), summary)
