"""Group-hash splits: leakage groups -> salted hash u(g) in [0, 1) -> train / validation / test.

What is stable is the *group -> split* mapping, not the proportions (seed §18.5). A leakage group
is the declared ``group_id`` joined with the verified near-duplicate components of
``dedup_clusters``; ``u(g)`` is the first 8 bytes of ``sha256(salt + NUL + key)`` over 2**64, the
salt fixed and part of ``split_policy_version``. With ``previous`` (an earlier *published*
assignment) published records never move; a group that would straddle splits is a ``Conflict``
handled by ``conflict_policy`` and reported, never claimed as strict isolation. Pure Python.

Method and decisions: docs/tokens.md#splits
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import canonical_digest

SPLITS_CODE_VERSION = "1"
_SUM_TOLERANCE = 1e-9


class SplitConflictError(CorpusError, ValueError):
    """Raised under ``conflict_policy: require_new_eval_version`` when a group straddles splits."""

    def __init__(self, conflicts: Sequence["Conflict"]):
        self.conflicts = list(conflicts)
        lines = [c.describe() for c in self.conflicts]
        super().__init__(
            f"{len(self.conflicts)} leakage group(s) now join records published in different splits; "
            "the conflict policy requires a new evaluation version:\n" + "\n".join(lines)
        )


class SplitPolicy(BaseModel):
    """The split section of a release spec.

    Give the split sizes either as ``fractions`` (each in (0, 1], summing to 1) or as cumulative
    ``boundaries`` (strictly increasing, in (0, 1], the last one exactly 1) — not both. With
    neither, 0.8 / 0.1 / 0.1.
    """

    model_config = ConfigDict(extra="forbid")
    names: list[str] = ["train", "validation", "test"]
    fractions: Optional[list[float]] = None
    boundaries: Optional[list[float]] = None
    salt: str = "corpus-split-v1"
    conflict_policy: Literal["quarantine_new", "require_new_eval_version"] = "quarantine_new"

    @field_validator("names")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one split name")
        if any(not isinstance(n, str) or not n.strip() for n in v):
            raise ValueError("split names must be non-empty strings")
        if len(set(v)) != len(v):
            raise ValueError(f"split names must be unique, got {v}")
        return v

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, v: Optional[list[float]]) -> Optional[list[float]]:
        if v is None:
            return v
        for i, f in enumerate(v):
            if not math.isfinite(f) or not 0.0 < f <= 1.0:
                raise ValueError(f"fractions[{i}] = {f} is outside (0, 1]")
        if abs(sum(v) - 1.0) > _SUM_TOLERANCE:
            raise ValueError(f"fractions must sum to 1, got {sum(v)!r}")
        return v

    @field_validator("boundaries")
    @classmethod
    def _boundaries(cls, v: Optional[list[float]]) -> Optional[list[float]]:
        if v is None:
            return v
        for i, b in enumerate(v):
            if not math.isfinite(b) or not 0.0 < b <= 1.0:
                raise ValueError(f"boundaries[{i}] = {b} is outside [0, 1] (each must be in (0, 1])")
        for i in range(1, len(v)):
            if not v[i] > v[i - 1]:
                raise ValueError(f"boundaries must be strictly increasing: boundaries[{i}] = {v[i]} <= {v[i - 1]}")
        if v and abs(v[-1] - 1.0) > _SUM_TOLERANCE:
            raise ValueError(f"the last boundary must be 1, got {v[-1]!r}")
        return v

    @field_validator("salt")
    @classmethod
    def _salt(cls, v: str) -> str:
        if not v:
            raise ValueError("salt must be a non-empty string (fixed configuration)")
        return v

    @model_validator(mode="after")
    def _shape(self) -> "SplitPolicy":
        if self.fractions is not None and self.boundaries is not None:
            raise ValueError("give either 'fractions' or 'boundaries', not both")
        if self.fractions is None and self.boundaries is None:
            if len(self.names) != 3:
                raise ValueError(f"'names' has {len(self.names)} entries; give 'fractions' or 'boundaries' for them")
            self.fractions = [0.8, 0.1, 0.1]
        field_name, values = ("fractions", self.fractions) if self.fractions is not None else ("boundaries", self.boundaries)
        if len(values) != len(self.names):
            raise ValueError(f"'{field_name}' has {len(values)} entries but 'names' has {len(self.names)}")
        return self

    def cumulative_boundaries(self) -> list[float]:
        """Upper bounds of each split's u-interval; the last is exactly 1.0."""
        if self.boundaries is not None:
            out = list(self.boundaries)
        else:
            out, acc = [], 0.0
            for f in self.fractions or []:
                acc += f
                out.append(acc)
        out[-1] = 1.0
        return out

    def target_fractions(self) -> dict[str, float]:
        b = self.cumulative_boundaries()
        return {n: b[i] - (b[i - 1] if i else 0.0) for i, n in enumerate(self.names)}

    def split_of_u(self, u: float) -> str:
        return self.names[bisect.bisect_right(self.cumulative_boundaries(), u)]


def split_policy_version(policy: SplitPolicy) -> str:
    """16 hex digits naming (code version, names, normalized boundaries, salt, conflict policy)."""
    return canonical_digest(
        {
            "code_version": SPLITS_CODE_VERSION,
            "names": policy.names,
            "boundaries": [round(b, 12) for b in policy.cumulative_boundaries()],
            "salt": policy.salt,
            "conflict_policy": policy.conflict_policy,
        }
    )[:16]


def unit_interval(group_key: str, salt: str) -> float:
    """u(g) in [0, 1): first 8 bytes (big-endian) of sha256(salt + NUL + key), divided by 2**64."""
    h = hashlib.sha256(salt.encode("utf-8") + b"\0" + group_key.encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


# ------------------------------------------------------------------------------------------------
# leakage groups


def leakage_groups(
    record_ids: Sequence[str],
    declared_groups: Sequence[Optional[str]],
    near_components: Sequence[Optional[str]],
) -> list[str]:
    """The leakage-group key of each record (same order as ``record_ids``).

    Records are joined when they share a declared group (``None``: the record is its own declared
    group, keyed by its record id) or a near-duplicate component (``None``: no verified edge).
    Joining is transitive (union-find), so a chunk that near-duplicates a chunk of another
    document joins the two documents.

    The key of a leakage group is the smallest *declared* group id in it. Near-dup component ids
    are used only for joining, never as keys: they are named after a representative record that
    can change from one release to the next, whereas declared ids are fixed properties of the
    records. Hence the key (and u(g)) of an existing group is unchanged when a snapshot adds
    records, unless the group merges with a group whose key sorts lower. Such a key change can
    only come from a merge, and :func:`assign` never lets it move published records: a group
    whose published records agree keeps their split whatever u(new key) says, and a merge of
    groups published in different splits is a reported :class:`Conflict`.
    """
    n = len(record_ids)
    if len(declared_groups) != n or len(near_components) != n:
        raise ValueError(
            f"record_ids ({n}), declared_groups ({len(declared_groups)}) and near_components "
            f"({len(near_components)}) must have the same length"
        )
    if len(set(record_ids)) != n:
        raise ValueError("record_ids must be unique")
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)

    declared = [d if d is not None else r for r, d in zip(record_ids, declared_groups)]
    first: dict[tuple[int, str], int] = {}
    for i in range(n):
        for kind, label in ((0, declared[i]), (1, near_components[i])):
            if label is None:
                continue
            j = first.setdefault((kind, label), i)
            if j != i:
                union(i, j)
    key_of_root: dict[int, str] = {}
    for i in range(n):
        r = find(i)
        if r not in key_of_root or declared[i] < key_of_root[r]:
            key_of_root[r] = declared[i]
    return [key_of_root[find(i)] for i in range(n)]


# ------------------------------------------------------------------------------------------------
# design effect


def design_effect(group_sizes: Sequence[int], rho: float) -> float:
    """Design effect of the mean over all observations: 1 + (m_w - 1) * rho.

    Model (seed §18.1): independent groups, equal variance, correlation rho between any two
    observations of the same group. Then Var(mean) = sigma^2/N * [1 + rho * (sum m_i^2 / N - 1)]
    with N = sum m_i, so the exact size to use is the *size-weighted* mean
    m_w = sum(m_i^2) / sum(m_i) (the mean group size seen by an observation). It equals m when
    all groups have size m, which gives the seed's 1 + (m - 1) * rho; for unequal sizes it is
    larger than the plain mean, i.e. large groups cost more than the plain mean suggests.
    rho must be in [0, 1].
    """
    if not 0.0 <= rho <= 1.0 or not math.isfinite(rho):
        raise ValueError(f"rho must be in [0, 1], got {rho!r}")
    sizes = list(group_sizes)
    if not sizes:
        raise ValueError("group_sizes is empty")
    if any(int(m) != m or m < 1 for m in sizes):
        raise ValueError("group sizes must be positive integers")
    total = sum(sizes)
    m_w = sum(m * m for m in sizes) / total
    return 1.0 + (m_w - 1.0) * rho


def effective_sample_size(n: int, deff: float) -> float:
    """n / deff: the number of independent observations with the same variance of the mean."""
    if not deff > 0 or not math.isfinite(deff):
        raise ValueError(f"design effect must be positive, got {deff!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    return n / deff


# ------------------------------------------------------------------------------------------------
# assignment


@dataclass(frozen=True)
class Conflict:
    """A leakage group whose previously published records sit in different splits."""

    group_key: str
    records: list[str]  # every record of the group in this release, sorted
    previous_splits: dict[str, str]  # published record -> its split
    new_records: list[str]  # records of the group not published before, sorted
    action: str  # "quarantined_new" or "require_new_eval_version"

    def describe(self) -> str:
        by_split: dict[str, list[str]] = defaultdict(list)
        for r, s in sorted(self.previous_splits.items()):
            by_split[s].append(r)
        parts = "; ".join(f"{s}: {', '.join(rs)}" for s, rs in sorted(by_split.items()))
        return f"group {self.group_key!r}: previously {parts}; new records: {', '.join(self.new_records) or '-'}"

    def as_dict(self) -> dict:
        return {
            "group_key": self.group_key,
            "records": self.records,
            "previous_splits": dict(sorted(self.previous_splits.items())),
            "new_records": self.new_records,
            "action": self.action,
        }


def split_row(target: float, sizes: Sequence[int], n_records: int, n_group_slots: int) -> dict:
    """One split's line of the report: records, groups and their sizes against the target share
    (``sizes``: records per group in the split; shares are over every assigned record / group)."""
    rec = sum(sizes)
    row = {
        "target": target,
        "records": rec,
        "record_share": rec / n_records if n_records else 0.0,
        "groups": len(sizes),
        "group_share": len(sizes) / n_group_slots if n_group_slots else 0.0,
        "mean_group_size": rec / len(sizes) if sizes else 0.0,
        "weighted_group_size": sum(m * m for m in sizes) / rec if rec else 0.0,
        "max_group_size": max(sizes, default=0),
    }
    row["record_share_drift"] = row["record_share"] - row["target"]
    return row


@dataclass
class SplitAssignment:
    split: dict[str, str]  # record_id -> split name (quarantined records are absent)
    quarantined: list[str]  # sorted
    conflicts: list[Conflict]  # sorted by group key
    group_of: dict[str, str]  # record_id -> leakage group key (every record, quarantined too)
    policy: SplitPolicy
    pinned_groups: list[str] = field(default_factory=list)  # groups whose split came from `previous`

    def report(self, tokens: Optional[dict[str, int]] = None, rho: Optional[float] = None) -> dict:
        """Realized vs target shares per split (records, tokens if given, groups), group sizes,
        and with ``rho`` the design effect / effective sample size per split.

        Shares are over assigned records (quarantined ones are counted separately). A group is
        counted in each split it has assigned records in (only a conflict group can be in two).
        """
        targets = self.policy.target_fractions()
        members: dict[str, dict[str, int]] = {n: defaultdict(int) for n in self.policy.names}
        for r, s in self.split.items():
            members[s][self.group_of[r]] += 1
        n_records = len(self.split)
        n_group_slots = sum(len(g) for g in members.values())
        if tokens is not None:
            missing = sorted(r for r in self.split if r not in tokens)
            if missing:
                raise ValueError(f"tokens missing for {len(missing)} record(s), e.g. {missing[:5]}")
            split_tokens = {n: 0 for n in self.policy.names}
            for r, s in self.split.items():
                split_tokens[s] += tokens[r]
            total_tokens = sum(split_tokens.values())
        splits = {}
        for name in self.policy.names:
            sizes = list(members[name].values())
            rec = sum(sizes)
            row = split_row(targets[name], sizes, n_records, n_group_slots)
            if tokens is not None:
                row["tokens"] = split_tokens[name]
                row["token_share"] = split_tokens[name] / total_tokens if total_tokens else 0.0
                row["token_share_drift"] = row["token_share"] - row["target"]
            if rho is not None and sizes:
                deff = design_effect(sizes, rho)
                row["design_effect"] = deff
                row["effective_sample_size"] = effective_sample_size(rec, deff)
            splits[name] = row
        out = {
            "policy_version": split_policy_version(self.policy),
            "salt": self.policy.salt,
            "records": n_records,
            "groups": len(set(self.group_of.values())),
            "splits": splits,
            "quarantined": {"records": len(self.quarantined), "record_ids": list(self.quarantined)},
            "pinned_groups": len(self.pinned_groups),
            "strict_isolation": not self.conflicts,
            "isolation_broken_groups": [c.group_key for c in self.conflicts],
            "conflicts": [c.as_dict() for c in self.conflicts],
            "rho": rho,
        }
        if tokens is not None:
            out["tokens"] = total_tokens
            out["quarantined"]["tokens"] = sum(tokens.get(r, 0) for r in self.quarantined)
        return out


def assign(
    record_ids: Sequence[str],
    leakage_group_keys: Sequence[str],
    policy: SplitPolicy,
    previous: Optional[dict[str, str]] = None,
) -> SplitAssignment:
    """Assign every record to a split by its leakage group.

    ``previous`` maps record_id -> split of an earlier *published* release (records absent from
    this release are ignored). Per group:

    - no previously published records: split of u(group key);
    - published records all in one split: the whole group goes there (new records follow it even
      if u of a new, merged key says otherwise) — an existing group never moves;
    - published records in different splits (a new edge joined them): a :class:`Conflict`.
      ``quarantine_new``: published records keep their splits, the group's new records are
      quarantined; ``require_new_eval_version``: :class:`SplitConflictError` listing every
      conflict.

    The result does not depend on the input order.
    """
    if len(record_ids) != len(leakage_group_keys):
        raise ValueError(f"record_ids ({len(record_ids)}) and leakage_group_keys ({len(leakage_group_keys)}) differ in length")
    if len(set(record_ids)) != len(record_ids):
        raise ValueError("record_ids must be unique")
    previous = previous or {}
    known = set(policy.names)
    groups: dict[str, list[str]] = defaultdict(list)
    for r, g in zip(record_ids, leakage_group_keys):
        groups[g].append(r)
        if r in previous and previous[r] not in known:
            raise ValueError(f"previous split {previous[r]!r} of record {r!r} is not one of names {policy.names}")

    split: dict[str, str] = {}
    quarantined: list[str] = []
    conflicts: list[Conflict] = []
    pinned: list[str] = []
    for key in sorted(groups):
        members = sorted(groups[key])
        prev = {r: previous[r] for r in members if r in previous}
        prev_splits = set(prev.values())
        if not prev_splits:
            target = policy.split_of_u(unit_interval(key, policy.salt))
            for r in members:
                split[r] = target
        elif len(prev_splits) == 1:
            target = next(iter(prev_splits))
            pinned.append(key)
            for r in members:
                split[r] = target
        else:
            new = [r for r in members if r not in prev]
            action = "quarantined_new" if policy.conflict_policy == "quarantine_new" else "require_new_eval_version"
            conflicts.append(Conflict(key, members, prev, new, action))
            pinned.append(key)
            split.update(prev)
            quarantined.extend(new)
    if conflicts and policy.conflict_policy == "require_new_eval_version":
        raise SplitConflictError(conflicts)
    group_of = dict(zip(record_ids, leakage_group_keys))
    return SplitAssignment(
        split=dict(sorted(split.items())),
        quarantined=sorted(quarantined),
        conflicts=conflicts,
        group_of=dict(sorted(group_of.items())),
        policy=policy,
        pinned_groups=pinned,
    )
