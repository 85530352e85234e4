"""Mixture plan: which training records are read, how often, in which order (seed §18.5, §18.8).

A plan samples the *training* split of a release (validation and test are never mixed) from a
``MixtureSpec`` and per-source units (``SourceUnits``): a table of draws in training order
(``record_id``, ``source``, ``repeat``, ``phase``, ``n_tokens``) plus a report that keeps target
share, realized document / token shares and effective epochs apart. One unit (documents or
tokens) per spec; phase budgets are split by largest-remainder rounding and draws interleaved by
stride scheduling, so every prefix of a phase already has the target mix. Seeds are SHA-256 of
canonical JSON, never ``hash()``: same spec and inputs, identical plan. Spec errors are pydantic
``ValidationError``, errors against the inputs ``MixtureError``; both name the field.

Method and decisions: docs/packing.md#mixture-plan
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import canonical_digest, canonical_json

__all__ = [
    "MIXTURE_CODE_VERSION",
    "MIXTURE_PLAN_SCHEMA",
    "MixtureError",
    "Phase",
    "MixtureSpec",
    "mixture_spec_version",
    "SourceUnits",
    "largest_remainder",
    "phase_budgets",
    "target_shares",
    "expected_uses",
    "MixturePlan",
    "build_plan",
]

MIXTURE_CODE_VERSION = "1"
_SUM_TOLERANCE = 1e-9


class MixtureError(CorpusError, ValueError):
    """A mixture spec does not fit its inputs (unknown or empty source, q > 0 with p = 0, ...)."""


# --- spec ---------------------------------------------------------------------------------------


def _check_weights(name: str, v: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
    if v is None:
        return v
    if not v:
        raise ValueError(f"{name} is empty; give at least one source")
    for k, w in v.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"{name} keys must be non-empty source names, got {k!r}")
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"{name}[{k!r}] = {w!r}; weights must be finite and >= 0")
    total = math.fsum(v.values())
    if abs(total - 1.0) > _SUM_TOLERANCE:
        raise ValueError(f"{name} must sum to 1 (within {_SUM_TOLERANCE}), got {total!r}")
    return dict(sorted(v.items()))


def _check_alpha(v: Optional[float]) -> Optional[float]:
    if v is not None and (not math.isfinite(v) or not 0.0 <= v <= 1.0):
        raise ValueError(f"alpha = {v!r} is outside [0, 1]")
    return v


def _one_of(where: str, weights: Optional[dict], alpha: Optional[float]) -> None:
    if weights is not None and alpha is not None:
        raise ValueError(f"{where}give either 'weights' or 'alpha', not both")
    if weights is None and alpha is None:
        raise ValueError(f"{where}give one of 'weights' (explicit shares) or 'alpha' (temperature)")


class Phase(BaseModel):
    """A curriculum phase: it ends at fraction ``until`` of the budget and has its own target."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    until: float
    weights: Optional[dict[str, float]] = None
    alpha: Optional[float] = None

    @field_validator("until")
    @classmethod
    def _until(cls, v: float) -> float:
        if not math.isfinite(v) or not 0.0 < v <= 1.0:
            raise ValueError(f"until = {v!r} is outside (0, 1]")
        return v

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        return _check_weights("weights", v)

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: Optional[float]) -> Optional[float]:
        return _check_alpha(v)

    @model_validator(mode="after")
    def _shape(self) -> "Phase":
        _one_of("phase: ", self.weights, self.alpha)
        return self


class MixtureSpec(BaseModel):
    """The mixture section of a release spec (see docs/packing.md#mixture-plan for the semantics)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    unit: Literal["documents", "tokens"]
    weights: Optional[dict[str, float]] = None
    alpha: Optional[float] = None
    budget: int
    replacement: bool = True
    seed: int = 0
    key: Literal["source", "tag"] = "source"
    epoch_limit: float = 4.0
    phases: Optional[list[Phase]] = None
    target_weights: Optional[dict[str, float]] = None

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        return _check_weights("weights", v)

    @field_validator("target_weights")
    @classmethod
    def _target_weights(cls, v: Optional[dict[str, float]]) -> Optional[dict[str, float]]:
        return _check_weights("target_weights", v)

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: Optional[float]) -> Optional[float]:
        return _check_alpha(v)

    @field_validator("budget")
    @classmethod
    def _budget(cls, v: int) -> int:
        if v <= 0:
            raise ValueError(f"budget = {v!r}; it must be > 0 (draws for unit=documents, tokens for unit=tokens)")
        return v

    @field_validator("epoch_limit")
    @classmethod
    def _epoch_limit(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"epoch_limit = {v!r}; it must be a finite number > 0")
        return v

    @field_validator("phases")
    @classmethod
    def _phases(cls, v: Optional[list[Phase]]) -> Optional[list[Phase]]:
        if v is None:
            return v
        if not v:
            raise ValueError("phases is empty; omit it or give at least one phase")
        for i in range(1, len(v)):
            if not v[i].until > v[i - 1].until:
                raise ValueError(
                    f"phases must be strictly increasing in 'until': "
                    f"phases[{i}].until = {v[i].until} <= phases[{i - 1}].until = {v[i - 1].until}"
                )
        if abs(v[-1].until - 1.0) > _SUM_TOLERANCE:
            raise ValueError(f"the last phase must end at until = 1, got phases[{len(v) - 1}].until = {v[-1].until!r}")
        return v

    @model_validator(mode="after")
    def _shape(self) -> "MixtureSpec":
        if self.phases is not None:
            if self.weights is not None or self.alpha is not None:
                raise ValueError("with 'phases', give 'weights' or 'alpha' inside each phase, not at the top level")
        else:
            _one_of("", self.weights, self.alpha)
        return self

    def phase_list(self) -> list[Phase]:
        """The phases; a spec without ``phases`` is one phase ending at 1."""
        if self.phases is not None:
            return list(self.phases)
        return [Phase(until=1.0, weights=self.weights, alpha=self.alpha)]


def mixture_spec_version(spec: MixtureSpec) -> str:
    """16 hex digits naming (code version, every spec field)."""
    return canonical_digest({"code_version": MIXTURE_CODE_VERSION, "spec": spec.model_dump(mode="json")})[:16]


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True, init=False, eq=False)
class SourceUnits:
    """One source of the training split: its record ids (sorted, unique) and, in parallel, the
    token count of each record (from its token views). The ids are an Arrow string array: a
    release's training split is held as columns, not a Python string per record."""

    record_ids: pa.Array  # string, sorted (byte order = code point order), unique, no nulls
    n_tokens: np.ndarray  # int64, >= 0, same length

    def __init__(self, record_ids: "Sequence[str] | pa.Array", n_tokens: Sequence[int]):
        if isinstance(record_ids, pa.ChunkedArray):
            record_ids = record_ids.combine_chunks()
        if isinstance(record_ids, pa.Array):
            if not (pa.types.is_string(record_ids.type) or pa.types.is_large_string(record_ids.type)) or record_ids.null_count:
                raise MixtureError("record_ids must be strings")
            ids = record_ids.cast(pa.string())
        else:
            if not all(isinstance(r, str) for r in record_ids):
                raise MixtureError("record_ids must be strings")
            ids = pa.array(list(record_ids), pa.string())
        tok = np.asarray(n_tokens)
        if tok.size == 0:
            tok = np.empty(0, dtype=np.int64)
        if tok.ndim != 1 or len(tok) != len(ids):
            raise MixtureError(f"n_tokens has {tok.size} entries but record_ids has {len(ids)}; they must be parallel")
        if tok.dtype.kind not in "iu":
            raise MixtureError(f"n_tokens must be integers, got dtype {tok.dtype}")
        tok = tok.astype(np.int64, copy=False)
        if tok.size and int(tok.min()) < 0:
            i = int(np.argmin(tok))
            raise MixtureError(f"n_tokens[{i}] = {int(tok[i])} is negative")
        if len(ids) > 1:
            ascending = pc.greater(ids.slice(1), ids.slice(0, len(ids) - 1))
            bad = np.flatnonzero(~np.asarray(ascending.to_numpy(zero_copy_only=False), dtype=bool))
            if bad.size:
                i = int(bad[0]) + 1
                raise MixtureError(
                    f"record_ids must be sorted and unique: record_ids[{i}] = {ids[i].as_py()!r} "
                    f"<= record_ids[{i - 1}] = {ids[i - 1].as_py()!r} (use SourceUnits.from_counts to sort)"
                )
        object.__setattr__(self, "record_ids", ids)
        object.__setattr__(self, "n_tokens", tok)

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> "SourceUnits":
        """From ``{record_id: n_tokens}`` in any order."""
        items = sorted(counts.items())
        return cls([r for r, _ in items], [int(n) for _, n in items])

    @property
    def n_records(self) -> int:
        return len(self.record_ids)

    @property
    def total_tokens(self) -> int:
        return int(self.n_tokens.sum())

    def units(self, unit: str) -> int:
        """The source's size in the declared unit (records or tokens)."""
        return self.n_records if unit == "documents" else self.total_tokens


def _unit_word(unit: str) -> str:
    return "records" if unit == "documents" else "tokens"


def _check_sources(sources: Mapping[str, SourceUnits]) -> list[str]:
    if not sources:
        raise MixtureError("sources is empty; a mixture needs at least one training source")
    for name, s in sources.items():
        if not isinstance(name, str) or not name:
            raise MixtureError(f"sources keys must be non-empty source names, got {name!r}")
        if not isinstance(s, SourceUnits):
            raise MixtureError(f"sources[{name!r}] must be a SourceUnits, got {type(s).__name__}")
    return sorted(sources)


def _check_known(field_name: str, keys, names: list[str]) -> None:
    unknown = sorted(set(keys) - set(names))
    if unknown:
        raise MixtureError(f"{field_name} names unknown source(s) {unknown}; known sources: {names}")


# --- target shares ------------------------------------------------------------------------------


def phase_budgets(spec: MixtureSpec) -> list[int]:
    """Budget (draws or tokens) of each phase: differences of ``round(until * budget)`` (half up)."""
    ends = [int(math.floor(p.until * spec.budget + 0.5)) for p in spec.phase_list()]
    ends[-1] = spec.budget
    return [e - (ends[i - 1] if i else 0) for i, e in enumerate(ends)]


def _phase_shares(spec: MixtureSpec, phase: Phase, where: str, sources: Mapping[str, SourceUnits], names: list[str]):
    size = {n: sources[n].units(spec.unit) for n in names}
    if phase.weights is not None:
        _check_known(f"{where}weights", phase.weights, names)
        for n, w in phase.weights.items():
            if w > 0 and size[n] == 0:
                raise MixtureError(
                    f"{where}weights[{n!r}] = {w} > 0 but source {n!r} has no {_unit_word(spec.unit)} (unit={spec.unit})"
                )
        total = math.fsum(phase.weights.values())  # 1 within 1e-9; renormalized exactly
        return {n: float(phase.weights.get(n, 0.0)) / total for n in names}
    nonempty = [n for n in names if size[n] > 0]
    if not nonempty:
        raise MixtureError(f"{where}alpha: every source is empty (no {_unit_word(spec.unit)}); nothing to weight")
    mass = {n: float(size[n]) ** phase.alpha if size[n] > 0 else 0.0 for n in names}
    total = math.fsum(mass.values())
    return {n: mass[n] / total for n in names}


def target_shares(spec: MixtureSpec, sources: Mapping[str, SourceUnits]) -> list[dict[str, float]]:
    """Target share p of every source (sorted names), one dict per phase, in the declared unit.

    Validates the spec against ``sources`` (:class:`MixtureError` naming the field): unknown
    sources in ``weights`` / ``phases[j].weights`` / ``target_weights``, a positive weight on an
    empty source, and ``target_weights`` q_i > 0 where the overall p_i = 0.
    """
    names = _check_sources(sources)
    phases = spec.phase_list()
    where = (lambda j: f"phases[{j}].") if spec.phases is not None else (lambda j: "")
    shares = [_phase_shares(spec, ph, where(j), sources, names) for j, ph in enumerate(phases)]
    if spec.target_weights is not None:
        _check_known("target_weights", spec.target_weights, names)
        overall = _overall(shares, phase_budgets(spec), spec.budget, names)
        for n, q in spec.target_weights.items():
            if q > 0 and overall[n] == 0:
                raise MixtureError(
                    f"target_weights[{n!r}] = {q} > 0 but source {n!r} is never sampled (p = 0); "
                    "the importance weight q/p is undefined"
                )
    return shares


def _overall(shares: list[dict[str, float]], budgets: list[int], budget: int, names: list[str]) -> dict[str, float]:
    return {n: math.fsum(b * s[n] for s, b in zip(shares, budgets)) / budget for n in names}


def largest_remainder(shares: Sequence[float], total: int) -> list[int]:
    """Integers summing to ``total`` closest to ``total * shares / sum(shares)`` (Hamilton's method):
    floors, then +1 for the largest remainders, ties by position. Exact rational arithmetic (no
    float drift even for token budgets of 1e12); a zero share always gets 0."""
    fr = [Fraction(s) for s in shares]
    denom = sum(fr)
    if denom <= 0:
        raise MixtureError("shares must have a positive sum")
    ideal = [f * total / denom for f in fr]
    out = [math.floor(x) for x in ideal]
    rest = total - sum(out)
    order = sorted((i for i, f in enumerate(fr) if f > 0), key=lambda i: (-(ideal[i] - out[i]), i))
    for i in order[:rest]:
        out[i] += 1
    return [int(x) for x in out]


def expected_uses(spec: MixtureSpec, sources: Mapping[str, SourceUnits]) -> dict[str, dict]:
    """Closed form, before rounding and sampling: per source the overall target share ``p``, the
    per-phase shares, and the expected draws, tokens and effective epochs (draws of a record are
    uniform inside its source, so a draw has the source's mean length)."""
    shares = target_shares(spec, sources)
    names = sorted(sources)
    budgets = phase_budgets(spec)
    overall = _overall(shares, budgets, spec.budget, names)
    out = {}
    for n in names:
        s = sources[n]
        mean = s.total_tokens / s.n_records if s.n_records else 0.0
        if spec.unit == "documents":
            draws = overall[n] * spec.budget
            tokens = draws * mean
        else:
            tokens = overall[n] * spec.budget
            draws = tokens / mean if mean else 0.0
        units = s.units(spec.unit)
        sampled = draws if spec.unit == "documents" else tokens
        out[n] = {
            "p": overall[n],
            "p_by_phase": [sh[n] for sh in shares],
            "expected_draws": draws,
            "expected_tokens": tokens,
            "expected_effective_epochs": sampled / units if units else 0.0,
        }
    return out


# --- drawing ------------------------------------------------------------------------------------


def _rng(seed: int, *labels) -> np.random.Generator:
    digest = hashlib.sha256(canonical_json(["corpus-mixture", MIXTURE_CODE_VERSION, seed, *labels])).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))


def _take_tokens(cum: np.ndarray, quota: int) -> Optional[int]:
    """Number of leading draws whose cumulative tokens first reach ``quota`` (None: not enough)."""
    k = int(np.searchsorted(cum, quota, side="left"))
    return k + 1 if k < len(cum) else None


def _draw_with_replacement(spec: MixtureSpec, name: str, phase: int, src: SourceUnits, quota: int) -> np.ndarray:
    if quota <= 0:
        return np.empty(0, dtype=np.int64)
    rng = _rng(spec.seed, "with_replacement", name, phase)
    n = src.n_records
    if spec.unit == "documents":
        return rng.integers(0, n, size=quota, dtype=np.int64)
    mean = src.total_tokens / n
    chunk = int(math.ceil(quota / mean * 1.05)) + 64
    parts: list[np.ndarray] = []
    reached = 0
    while True:
        idx = rng.integers(0, n, size=chunk, dtype=np.int64)
        cum = reached + np.cumsum(src.n_tokens[idx])
        k = _take_tokens(cum, quota)
        if k is not None:
            parts.append(idx[:k])
            return np.concatenate(parts)
        parts.append(idx)
        reached = int(cum[-1])
        chunk = int(math.ceil((quota - reached) / mean * 1.05)) + 64


@dataclass
class _PassStream:
    """Without replacement: seeded permutation passes over one source, continued across phases."""

    rng: np.random.Generator
    n_tokens: np.ndarray
    order: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pos: int = 0

    def _extend(self, passes: int) -> None:
        n = len(self.n_tokens)
        perms = np.argsort(self.rng.random((passes, n)), axis=1, kind="stable").ravel()
        self.order = np.concatenate([self.order, perms])

    def take(self, count: int) -> np.ndarray:
        n = len(self.n_tokens)
        missing = self.pos + count - len(self.order)
        if missing > 0:
            self._extend(-(-missing // n))
        out = self.order[self.pos : self.pos + count]
        self.pos += count
        return out

    def take_tokens(self, quota: int) -> np.ndarray:
        if quota <= 0:
            return np.empty(0, dtype=np.int64)
        per_pass = int(self.n_tokens.sum())
        have = int(self.n_tokens[self.order[self.pos :]].sum())
        if have < quota:
            self._extend(-(-(quota - have) // per_pass))
        cum = np.cumsum(self.n_tokens[self.order[self.pos :]])
        k = _take_tokens(cum, quota)
        return self.take(k)


def _interleave(weights: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stride merge of the phase's draws, ``weights[r]`` = unit weight of each draw of source rank r
    (1 per document, or its tokens) in stream order. Returns (source rank, position in that
    source's draws) in plan order.

    Each source's times are non-decreasing, so a stable sort of the concatenation (ordered by
    rank, then stream position) merges sorted runs and breaks ties by source name, then stream
    order."""
    times = []
    for w in weights:
        if len(w) == 0:
            times.append(np.empty(0))
            continue
        cum = np.cumsum(w, dtype=np.float64)
        if cum[-1] > 0:
            times.append((cum - np.asarray(w, dtype=np.float64) / 2.0) / cum[-1])
        else:  # unreachable for quotas > 0 (a token quota is only reached by positive tokens)
            times.append((np.arange(len(w)) + 0.5) / len(w))
    sizes = np.array([len(t) for t in times], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    order = np.argsort(np.concatenate(times), kind="stable")
    rank = np.repeat(np.arange(len(times), dtype=np.int32), sizes)[order]
    return rank, order - starts[rank]


def _occurrences_before(keys: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same key (keys >= 0)."""
    n = len(keys)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    order = np.argsort(keys.astype(np.int64) * n + pos)  # unique keys: any sort is stable
    sk = keys[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = sk[1:] != sk[:-1]
    run_start = np.maximum.accumulate(np.where(starts, pos, 0))
    out = np.empty(n, dtype=np.int64)
    out[order] = pos - run_start
    return out


# --- plan ---------------------------------------------------------------------------------------

MIXTURE_PLAN_SCHEMA = pa.schema(
    [
        ("position", pa.int64()),
        ("record_id", pa.string()),
        ("source", pa.string()),
        ("repeat", pa.int64()),
        ("phase", pa.int32()),
        ("n_tokens", pa.int64()),
    ]
)


@dataclass(frozen=True, eq=False)
class MixturePlan:
    """The draws of a mixture, in training order (row i = position i)."""

    spec: MixtureSpec
    sources: tuple[str, ...]  # sorted source names; source_index points into it
    record_id: pa.Array  # string
    source: np.ndarray  # object array of the source names (shared objects, one per source)
    source_index: np.ndarray  # int32
    repeat: np.ndarray  # int64: earlier draws of the same record in the plan
    phase: np.ndarray  # int32
    n_tokens: np.ndarray  # int64
    _report: dict = field(repr=False)

    def __len__(self) -> int:
        return len(self.record_id)

    def report(self) -> dict:
        """Per source: target share (overall and per phase), realized document and token shares,
        available and distinct drawn units, draws, sampled tokens, effective epochs, importance
        weight (with ``target_weights``); plus per-phase totals and ``warnings``."""
        return copy.deepcopy(self._report)

    def to_table(self) -> pa.Table:
        """The plan rows as an Arrow table (:data:`MIXTURE_PLAN_SCHEMA`)."""
        return pa.table(
            [
                pa.array(np.arange(len(self), dtype=np.int64)),
                self.record_id,
                pa.array(self.source, type=pa.string()),
                pa.array(self.repeat, type=pa.int64()),
                pa.array(self.phase, type=pa.int32()),
                pa.array(self.n_tokens, type=pa.int64()),
            ],
            schema=MIXTURE_PLAN_SCHEMA,
        )


def build_plan(spec: MixtureSpec, sources: Mapping[str, SourceUnits]) -> MixturePlan:
    """Draw the plan (see docs/packing.md#mixture-plan). Deterministic in (spec, sources)."""
    shares = target_shares(spec, sources)
    names = sorted(sources)
    srcs = [sources[n] for n in names]
    budgets = phase_budgets(spec)
    streams = {} if spec.replacement else {n: _PassStream(_rng(spec.seed, "passes", n), sources[n].n_tokens) for n in names}

    idx_parts, rank_parts, phase_parts, quotas = [], [], [], []
    for j, b in enumerate(budgets):
        q = largest_remainder([shares[j][n] for n in names], b)
        quotas.append(q)
        drawn = []
        for r, n in enumerate(names):
            if spec.replacement:
                drawn.append(_draw_with_replacement(spec, n, j, srcs[r], q[r]))
            elif spec.unit == "documents":
                drawn.append(streams[n].take(q[r]))
            else:
                drawn.append(streams[n].take_tokens(q[r]))
        w = [np.ones(len(d)) if spec.unit == "documents" else srcs[r].n_tokens[d] for r, d in enumerate(drawn)]
        rk, sq = _interleave(w)
        starts = np.concatenate([[0], np.cumsum([len(d) for d in drawn])]).astype(np.int64)
        idx_parts.append(np.concatenate(drawn)[starts[rk] + sq])
        rank_parts.append(rk)
        phase_parts.append(np.full(len(rk), j, dtype=np.int32))

    idx = np.concatenate(idx_parts)
    rank = np.concatenate(rank_parts).astype(np.int32)
    phase = np.concatenate(phase_parts)
    offsets = np.concatenate([[0], np.cumsum([s.n_records for s in srcs])]).astype(np.int64)
    gidx = offsets[rank] + idx
    all_ids = pa.concat_arrays([s.record_ids for s in srcs]) if srcs else pa.array([], pa.string())
    all_tok = np.concatenate([s.n_tokens for s in srcs])
    record_id = all_ids.take(pa.array(np.asarray(gidx, dtype=np.int64))) if len(gidx) else pa.array([], pa.string())
    n_tokens = all_tok[gidx] if len(gidx) else np.empty(0, dtype=np.int64)
    repeat = _occurrences_before(gidx)
    source = np.asarray(names, dtype=object)[rank] if len(rank) else np.empty(0, dtype=object)

    rep = _report(spec, names, srcs, shares, budgets, quotas, rank, phase, n_tokens, repeat)
    return MixturePlan(
        spec=spec,
        sources=tuple(names),
        record_id=record_id,
        source=source,
        source_index=rank,
        repeat=repeat,
        phase=phase,
        n_tokens=n_tokens,
        _report=rep,
    )


def _share(x: float, total: float) -> float:
    return x / total if total else 0.0


def _report(spec, names, srcs, shares, budgets, quotas, rank, phase, n_tokens, repeat) -> dict:
    S, P = len(names), len(budgets)
    draws = np.bincount(rank, minlength=S)
    tokens = np.bincount(rank, weights=n_tokens, minlength=S).astype(np.int64)
    cell = phase.astype(np.int64) * S + rank
    draws_pj = np.bincount(cell, minlength=S * P).reshape(P, S)
    tokens_pj = np.bincount(cell, weights=n_tokens, minlength=S * P).astype(np.int64).reshape(P, S)
    first = repeat == 0
    uniq = np.bincount(rank[first], minlength=S)
    uniq_tok = np.bincount(rank[first], weights=n_tokens[first], minlength=S).astype(np.int64)
    max_rep = np.zeros(S, dtype=np.int64)
    np.maximum.at(max_rep, rank, repeat)
    overall = _overall(shares, budgets, spec.budget, names)
    n_draws, n_tok = int(draws.sum()), int(tokens.sum())
    warnings: list[str] = []
    out_sources = {}
    for r, n in enumerate(names):
        s = srcs[r]
        available = s.units(spec.unit)
        sampled = int(draws[r]) if spec.unit == "documents" else int(tokens[r])
        epochs = _share(sampled, available)
        row = {
            "target_share": overall[n],
            "target_share_by_phase": [sh[n] for sh in shares],
            "quota": int(sum(q[r] for q in quotas)),
            "quota_by_phase": [int(q[r]) for q in quotas],
            "draws": int(draws[r]),
            "tokens": int(tokens[r]),
            "document_share": _share(int(draws[r]), n_draws),
            "token_share": _share(int(tokens[r]), n_tok),
            "document_share_by_phase": [_share(int(draws_pj[j, r]), int(draws_pj[j].sum())) for j in range(P)],
            "token_share_by_phase": [_share(int(tokens_pj[j, r]), int(tokens_pj[j].sum())) for j in range(P)],
            "available_records": s.n_records,
            "available_tokens": s.total_tokens,
            "unique_records": int(uniq[r]),
            "unique_tokens": int(uniq_tok[r]),
            "sampled_units": sampled,
            "available_units": available,
            "effective_epochs": epochs,
            "max_repeat": int(max_rep[r]),
        }
        if spec.target_weights is not None:
            q = spec.target_weights.get(n, 0.0)
            row["target_weight"] = q
            row["importance_weight"] = q / overall[n] if overall[n] > 0 else 0.0
            row["importance_weight_by_phase"] = [q / sh[n] if sh[n] > 0 else None for sh in shares]
        out_sources[n] = row
        if available == 0 and any(ph.alpha is not None for ph in spec.phase_list()):
            warnings.append(f"source {n!r} has no {_unit_word(spec.unit)}; alpha gives it p = 0")
        if not spec.replacement and int(max_rep[r]) > 0:
            warnings.append(
                f"source {n!r}: replacement=False but its quota ({sampled} {_unit_word(spec.unit)}) exceeds its "
                f"{available} {_unit_word(spec.unit)}; read in {int(max_rep[r]) + 1} passes (repeat = pass number)"
            )
        if epochs > spec.epoch_limit:
            warnings.append(
                f"source {n!r}: {epochs:.3g} effective epochs ({sampled} sampled / {available} available "
                f"{_unit_word(spec.unit)}) exceed epoch_limit {spec.epoch_limit}"
            )
    phase_rows = []
    ends = np.cumsum(budgets)
    for j in range(P):
        phase_rows.append(
            {
                "phase": j,
                "until": spec.phase_list()[j].until,
                "budget": int(budgets[j]),
                "end": int(ends[j]),
                "draws": int(draws_pj[j].sum()),
                "tokens": int(tokens_pj[j].sum()),
            }
        )
    return {
        "spec_version": mixture_spec_version(spec),
        "unit": spec.unit,
        "key": spec.key,
        "budget": spec.budget,
        "replacement": spec.replacement,
        "seed": spec.seed,
        "epoch_limit": spec.epoch_limit,
        "draws": n_draws,
        "tokens": n_tok,
        "phases": phase_rows,
        "sources": out_sources,
        "warnings": warnings,
    }
