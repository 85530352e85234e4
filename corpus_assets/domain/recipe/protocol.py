"""The recipe protocol (seed 002): the types a recipe, a calibrator and the executor share.

A recipe is any object made by an importable ``module:callable`` factory, duck-typed against
``DataRecipe`` (optionally ``ShardedDataRecipe`` / ``RankedDataRecipe``). ``PublicTask`` is what a
calibrator sees; the private ``reference`` lives only on ``DataSample``. Only
``InsufficientDataError`` (a request, not a ``RecipeError``) asks for another batch. A calibrator
returns exactly one ``Attempt`` per (task, repeat) (``check_attempts``); ranked selection is the
deterministic greedy merge ``select_ranked_candidates``.

Decisions: docs/recipes.md#protocol
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from corpus_assets.domain.core.errors import CorpusError

__all__ = [
    "PURPOSES",
    "Attempt",
    "BudgetExhaustedError",
    "CalibrationBatch",
    "CalibrationContext",
    "CalibrationProtocolError",
    "Calibrator",
    "DataRecipe",
    "DataSample",
    "GenerationContext",
    "GenerationShard",
    "InsufficientDataError",
    "PublicTask",
    "RankedCandidate",
    "RankedDataRecipe",
    "RecipeError",
    "ResumeRefusedError",
    "SelectionContext",
    "SelectionPolicy",
    "ShardedDataRecipe",
    "check_attempts",
    "ranked_sort_key",
    "select_ranked_candidates",
]

PURPOSES = ("harness", "model", "joint")


# --------------------------------------------------------------------------------------- errors


class InsufficientDataError(Exception):
    """Raised by ``select()`` / ``finalize_selection()`` to ask the executor for another batch."""


class RecipeError(CorpusError, ValueError):
    """A recipe, calibrator or job violated the protocol; the job fails."""


class BudgetExhaustedError(RecipeError):
    """``max_batches`` or ``max_candidates`` was reached before selection succeeded."""


class ResumeRefusedError(RecipeError):
    """``--resume`` was asked but the job's identity (config, inputs, sources) changed."""


class CalibrationProtocolError(RecipeError):
    """A calibrator returned a duplicate, missing or unknown (task, repeat) attempt."""


# ---------------------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class PublicTask:
    """A task as the world sees it: no answer anywhere in ``input`` or ``metadata``."""

    task_id: str
    input: Any
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DataSample:
    """A public task plus its private reference answer (JSON-serializable)."""

    task: PublicTask
    reference: Any

    @property
    def task_id(self) -> str:
        return self.task.task_id


@dataclass(frozen=True)
class GenerationContext:
    seed: int
    batch_index: int
    target_count: int
    purpose: str
    inputs: tuple[Path, ...] = ()
    params: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class SelectionContext:
    seed: int
    target_count: int
    purpose: str
    calibrated: bool
    repeats: int


@dataclass(frozen=True)
class GenerationShard:
    """A half-open range ``[start, stop)`` of a batch's candidate stream."""

    start: int
    stop: int


# ---------------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Attempt:
    task_id: str
    repeat: int
    response: Any
    failure_reason: Optional[str] = None


@dataclass(frozen=True)
class CalibrationBatch:
    attempts: tuple[Attempt, ...]
    provenance: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CalibrationContext:
    repeats: int
    batch_index: int
    seed: int


@runtime_checkable
class Calibrator(Protocol):
    async def __call__(
        self, tasks: Sequence[PublicTask], context: CalibrationContext
    ) -> CalibrationBatch: ...


def check_attempts(
    attempts: Iterable[Attempt], task_ids: Sequence[str], repeats: int
) -> dict[tuple[str, int], Attempt]:
    """Exactly one ``Attempt`` per (task, repeat), else ``CalibrationProtocolError``.

    Returns the attempts keyed by ``(task_id, repeat)``.
    """
    expected = {(t, r) for t in task_ids for r in range(repeats)}
    got: dict[tuple[str, int], Attempt] = {}
    for a in attempts:
        if not isinstance(a, Attempt):
            raise CalibrationProtocolError(
                f"calibrator returned {type(a).__name__}, expected Attempt"
            )
        if isinstance(a.repeat, bool) or not isinstance(a.repeat, int):
            raise CalibrationProtocolError(
                f"calibrator returned attempt for task_id={a.task_id!r} with a non-integer repeat"
            )
        key = (a.task_id, a.repeat)
        if key not in expected:
            raise CalibrationProtocolError(
                f"calibrator returned an unknown attempt: task_id={a.task_id!r} repeat={a.repeat!r}"
            )
        if key in got:
            raise CalibrationProtocolError(
                f"calibrator returned a duplicate attempt: task_id={a.task_id!r} repeat={a.repeat}"
            )
        if a.failure_reason is not None and not isinstance(a.failure_reason, str):
            raise CalibrationProtocolError(
                f"attempt task_id={a.task_id!r} repeat={a.repeat}: failure_reason must be a string or None"
            )
        got[key] = a
    missing = sorted(expected - got.keys())
    if missing:
        shown = ", ".join(f"({t!r}, {r})" for t, r in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise CalibrationProtocolError(
            f"calibrator returned no attempt for {len(missing)} (task, repeat) pair(s): {shown}{more}"
        )
    return got


# ------------------------------------------------------------------------------------ selection


@dataclass(frozen=True)
class SelectionPolicy:
    minimum_per_group: Mapping[str, int]
    maximum_per_bucket: Optional[int] = None


@dataclass(frozen=True)
class RankedCandidate:
    task_id: str
    priority: float
    tie_breaker: str
    group: str
    bucket: str
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.priority, (int, float)) or not math.isfinite(self.priority):
            raise RecipeError(
                f"RankedCandidate {self.task_id!r}: priority must be a finite number, got {self.priority!r}"
            )
        for name in ("task_id", "tie_breaker", "group", "bucket"):
            if not isinstance(getattr(self, name), str):
                raise RecipeError(f"RankedCandidate {self.task_id!r}: {name} must be a string")


def ranked_sort_key(c: RankedCandidate) -> tuple[float, str, str]:
    """The global order of ranked candidates: ``(priority, tie_breaker, task_id)``."""
    return (float(c.priority), c.tie_breaker, c.task_id)


def select_ranked_candidates(
    ranked: Iterable[RankedCandidate], policy: SelectionPolicy, target_count: int
) -> list[RankedCandidate]:
    """Greedy, deterministic merge of globally ordered candidates.

    ``ranked`` must already be sorted by ``ranked_sort_key``. Pass 1 meets each group's minimum in
    the policy's dict order (a group's minimum is capped at ``target_count`` in total); pass 2 fills
    up to ``target_count`` by global rank. ``maximum_per_bucket`` holds in both passes and a task is
    never selected twice. Returns the selection in global rank order; it may be shorter than
    ``target_count`` (the caller decides whether that is insufficient).
    """
    if target_count < 0:
        raise RecipeError(f"target_count must be >= 0, got {target_count}")
    items = list(ranked)
    cap = policy.maximum_per_bucket
    chosen: set[str] = set()
    per_bucket: dict[str, int] = {}
    selected: list[tuple[int, RankedCandidate]] = []

    def take(i: int, c: RankedCandidate) -> bool:
        if c.task_id in chosen or len(selected) >= target_count:
            return False
        if cap is not None and per_bucket.get(c.bucket, 0) >= cap:
            return False
        chosen.add(c.task_id)
        per_bucket[c.bucket] = per_bucket.get(c.bucket, 0) + 1
        selected.append((i, c))
        return True

    for group, minimum in policy.minimum_per_group.items():
        have = sum(1 for _, c in selected if c.group == group)
        for i, c in enumerate(items):
            if have >= minimum or len(selected) >= target_count:
                break
            if c.group == group and take(i, c):
                have += 1
    for i, c in enumerate(items):
        if len(selected) >= target_count:
            break
        take(i, c)
    selected.sort(key=lambda pair: pair[0])
    return [c for _, c in selected]


# -------------------------------------------------------------------------------------- recipes


@runtime_checkable
class DataRecipe(Protocol):
    def generate(self, context: GenerationContext) -> Iterable[DataSample]: ...

    def clean(self, sample: DataSample) -> Optional[DataSample]: ...

    def score(self, sample: DataSample, response: Any) -> float: ...

    def select(
        self,
        samples: Sequence[DataSample],
        scores: Mapping[str, list[Optional[float]]],
        context: SelectionContext,
    ) -> list[str]: ...

    def training_row(self, sample: DataSample) -> dict: ...


@runtime_checkable
class ShardedDataRecipe(DataRecipe, Protocol):
    def generation_shards(
        self, context: GenerationContext, shard_size: int
    ) -> list[GenerationShard]: ...

    def generate_shard(
        self, context: GenerationContext, shard: GenerationShard
    ) -> Iterable[DataSample]: ...


@runtime_checkable
class RankedDataRecipe(DataRecipe, Protocol):
    def selection_policy(self, context: SelectionContext, calibrated: bool) -> SelectionPolicy: ...

    def rank(
        self, sample: DataSample, scores: list[Optional[float]], context: SelectionContext
    ) -> Optional[RankedCandidate]: ...

    def finalize_selection(
        self, selected: list[RankedCandidate], eligible_count: int, context: SelectionContext
    ) -> tuple[list[str], dict]: ...
