"""Leakage groups and splits of a whole release as Arrow columns.

The same result as ``splits.leakage_groups`` then ``splits.assign`` without published splits to
keep, but with no Python object per record: the splits layer runs over every record of a
release (issue 18: no per-record dicts of the whole release). Python touches one string per
leakage *group*, to hash its key (u(g) is sha256, ``splits.unit_interval``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.arrow_columns import strings
from corpus_assets.domain.dedup.near import connected_components
from corpus_assets.domain.tokens.splits import SplitPolicy, split_policy_version, split_row, unit_interval


def _codes(column: pa.Array) -> tuple[np.ndarray, np.ndarray, int]:
    """(dictionary code per row, which rows have one, dictionary size) of a string column."""
    enc = pc.dictionary_encode(column)
    valid = np.asarray(pc.is_valid(enc.indices).to_numpy(zero_copy_only=False), dtype=bool)
    codes = np.asarray(pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, valid, len(enc.dictionary)


def leakage_group_column(record_ids, declared_groups, near_components) -> pa.Array:
    """The leakage-group key of each record, as ``splits.leakage_groups`` defines it: records
    sharing a declared group (null: the record's own id) or a near-duplicate component are joined
    transitively, and a group is keyed by the smallest declared group id in it."""
    ids, declared, near = strings(record_ids), strings(declared_groups), strings(near_components)
    n = len(ids)
    if len(declared) != n or len(near) != n:
        raise ValueError(f"record_ids ({n}), declared_groups ({len(declared)}) and near_components "
                         f"({len(near)}) must have the same length")
    if pc.count_distinct(ids).as_py() != n or ids.null_count:
        raise ValueError("record_ids must be unique")
    if n == 0:
        return pa.array([], pa.string())
    declared = pc.coalesce(declared, ids)
    d_codes, _, n_declared = _codes(declared)
    c_codes, has_comp, n_comp = _codes(near)
    rows = np.arange(n, dtype=np.int64)
    # a bipartite graph: record i -- node of its declared group -- node of its component
    edges = np.concatenate([
        np.stack([rows, n + d_codes], axis=1),
        np.stack([rows[has_comp], n + n_declared + c_codes[has_comp]], axis=1),
    ])
    component = connected_components(n + n_declared + n_comp, edges)[:n]  # its smallest record
    order = np.asarray(pc.sort_indices(declared).to_numpy(), dtype=np.int64)  # byte order = str order
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rows
    smallest = np.full(n, n, dtype=np.int64)
    np.minimum.at(smallest, component, rank)
    return declared.take(pa.array(order[smallest[component]]))


def _group_u(groups: pa.Array, salt: str, known: Optional[tuple[pa.Array, pa.Array]]) -> np.ndarray:
    """u of each distinct group key: taken from ``known`` where it has the key, hashed otherwise."""
    u = np.full(len(groups), np.nan, dtype=np.float64)
    if known is not None and len(known[0]):
        at = pc.index_in(groups, value_set=strings(known[0]))
        found = np.asarray(pc.is_valid(at).to_numpy(zero_copy_only=False), dtype=bool)
        taken = np.asarray(pc.fill_null(at, 0).to_numpy(zero_copy_only=False), dtype=np.int64)[found]
        u[found] = np.asarray(known[1].to_numpy(zero_copy_only=False), dtype=np.float64)[taken]
    else:
        found = np.zeros(len(groups), dtype=bool)
    missing = np.flatnonzero(~found)
    if missing.size:
        names = groups.take(pa.array(missing)).to_pylist()
        u[missing] = np.fromiter((unit_interval(k, salt) for k in names), dtype=np.float64, count=missing.size)
    return u


@dataclass(frozen=True)
class SplitColumns:
    """Every record's leakage group key, u(group) and split, in the order of the input."""

    group_key: pa.Array
    u: pa.Array  # float64
    split: pa.Array  # string
    report: dict  # as SplitAssignment.report() gives it


def assign_columns(group_keys, policy: SplitPolicy, known: Optional[tuple[pa.Array, pa.Array]] = None) -> SplitColumns:
    """Split of every record by u of its group key (``SplitPolicy.split_of_u``), and the report
    ``SplitAssignment.report()`` gives for the same assignment (no group pinned, none quarantined).
    ``known``: (group keys, their u) under the same salt, e.g. an earlier build's; only keys not
    among them are hashed (u is a pure function of salt and key, so the result is the same)."""
    keys = strings(group_keys)
    enc = pc.dictionary_encode(keys)
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    u_group = _group_u(enc.dictionary, policy.salt, known)
    split_of_group = np.searchsorted(np.asarray(policy.cumulative_boundaries()), u_group, side="right")
    names = policy.names
    split = pa.array(names, pa.string()).take(pa.array(split_of_group[codes]))
    sizes = np.bincount(codes, minlength=len(u_group))  # records per group
    n = len(keys)
    targets = policy.target_fractions()
    splits = {}
    for i, name in enumerate(names):
        mine = sizes[split_of_group == i].tolist()
        splits[name] = split_row(targets[name], mine, n, len(u_group))
    report = {
        "policy_version": split_policy_version(policy),
        "salt": policy.salt,
        "records": n,
        "groups": len(u_group),
        "splits": splits,
        "quarantined": {"records": 0, "record_ids": []},
        "pinned_groups": 0,
        "strict_isolation": True,
        "isolation_broken_groups": [],
        "conflicts": [],
        "rho": None,
    }
    return SplitColumns(group_key=keys, u=pa.array(u_group[codes], pa.float64()), split=split, report=report)
