"""Worker functions (clean, generate a shard, score, rank, project) and the bounded, ordered pool.

Every worker builds its own recipe from the factory (no instance state crosses stages); work is
cut into chunks of ``batch_size`` and ``WorkerPool.map_ordered`` yields results in submission
order, so results do not depend on the worker count. Prefetch is bounded; only ``OSError`` /
``TimeoutError`` are retried (capped exponential backoff); cancellation waits for running
workers. Errors name task id, repeat and field, never a reference.

Decisions: docs/recipes.md#workers
"""

from __future__ import annotations

import collections
import json
import math
import multiprocessing
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Iterable, Iterator, Optional

from corpus_assets.domain.recipe.config import ExecutionConfig
from corpus_assets.domain.recipe.plugins import create_recipe
from corpus_assets.domain.recipe.protocol import (
    DataSample,
    GenerationContext,
    GenerationShard,
    RankedCandidate,
    RecipeError,
    SelectionContext,
)
from corpus_assets.domain.recipe.samples import dumps, record_to_sample, sample_to_record

__all__ = [
    "JobCancelled",
    "MAX_BACKOFF",
    "RecipeSpec",
    "WorkerPool",
    "backoff_delay",
    "clean_chunk",
    "is_retryable",
    "rank_chunk",
    "score_chunk",
    "shard_chunk",
    "train_chunk",
    "worker_recipe",
]

MAX_BACKOFF = 60.0

RecipeSpec = tuple[str, str]  # (factory "module:callable", canonical JSON of params)


class JobCancelled(Exception):
    """The job was cancelled (cancel event or KeyboardInterrupt); its state is consistent."""


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (OSError, TimeoutError))


def backoff_delay(attempt: int, base: float) -> float:
    return min(base * (2**attempt), MAX_BACKOFF)


def sleep_unless_cancelled(seconds: float, cancel: threading.Event) -> None:
    if cancel.wait(seconds):
        raise JobCancelled("cancelled during retry backoff")


# ----------------------------------------------------------------------------- worker functions

_local = threading.local()


def worker_recipe(spec: RecipeSpec) -> Any:
    cache = getattr(_local, "recipes", None)
    if cache is None:
        cache = _local.recipes = {}
    recipe = cache.get(spec)
    if recipe is None:
        recipe = cache[spec] = create_recipe(spec[0], json.loads(spec[1]))
    return recipe


def _clean_one(recipe: Any, raw: Any, batch: int, index: int) -> Optional[dict]:
    if not isinstance(raw, DataSample):
        raise RecipeError(
            f"generate (batch {batch}, candidate {index}) yielded {type(raw).__name__}, expected DataSample"
        )
    cleaned = recipe.clean(raw)
    if cleaned is None:
        return None
    return sample_to_record(cleaned, f"clean (batch {batch}, candidate {index})")


def clean_chunk(spec: RecipeSpec, batch: int, start: int, raws: list) -> list[Optional[dict]]:
    """``clean`` each raw candidate; ``None`` marks one the recipe excluded."""
    recipe = worker_recipe(spec)
    return [_clean_one(recipe, raw, batch, start + i) for i, raw in enumerate(raws)]


def shard_chunk(
    spec: RecipeSpec, context: GenerationContext, shard: GenerationShard
) -> list[Optional[dict]]:
    """Generate one shard (at most ``stop - start`` candidates) and clean it."""
    recipe = worker_recipe(spec)
    limit = shard.stop - shard.start
    out: list[Optional[dict]] = []
    for raw in recipe.generate_shard(context, shard):
        if len(out) >= limit:
            raise RecipeError(
                f"generate_shard (batch {context.batch_index}, shard [{shard.start}, {shard.stop})) "
                f"yielded more than {limit} candidates"
            )
        out.append(_clean_one(recipe, raw, context.batch_index, shard.start + len(out)))
    return out


def _check_score(value: Any, task_id: str, repeat: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecipeError(
            f"score for task {task_id!r} repeat {repeat} is a {type(value).__name__}, expected a float in [0, 1]"
        )
    value = float(value)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise RecipeError(f"score for task {task_id!r} repeat {repeat} is {value!r}: must be finite and in [0, 1]")
    return value


def score_chunk(spec: RecipeSpec, items: list[tuple[dict, list[tuple[int, Any]]]]) -> list[list[tuple[int, float]]]:
    """Score each task's successful responses with its private reference."""
    recipe = worker_recipe(spec)
    out = []
    for record, responses in items:
        sample = record_to_sample(record)
        out.append(
            [(r, _check_score(recipe.score(sample, resp), record["task_id"], r)) for r, resp in responses]
        )
    return out


def rank_chunk(
    spec: RecipeSpec, items: list[tuple[dict, list[Optional[float]]]], context: SelectionContext
) -> list[Optional[dict]]:
    recipe = worker_recipe(spec)
    out: list[Optional[dict]] = []
    for record, scores in items:
        tid = record["task_id"]
        c = recipe.rank(record_to_sample(record), list(scores), context)
        if c is None:
            out.append(None)
            continue
        if not isinstance(c, RankedCandidate):
            raise RecipeError(f"rank for task {tid!r} returned {type(c).__name__}, expected RankedCandidate or None")
        if c.task_id != tid:
            raise RecipeError(f"rank for task {tid!r} returned a candidate for task {c.task_id!r}")
        try:
            metadata = json.loads(dumps(c.metadata))
        except (TypeError, ValueError):
            raise RecipeError(f"rank for task {tid!r}: metadata is not JSON-serializable") from None
        out.append(
            {
                "priority": float(c.priority),
                "tie_breaker": c.tie_breaker,
                "group": c.group,
                "bucket": c.bucket,
                "metadata": metadata,
            }
        )
    return out


def train_chunk(spec: RecipeSpec, records: list[dict]) -> list[str]:
    """Project selected samples to training rows (canonical JSON strings carrying ``task_id``)."""
    recipe = worker_recipe(spec)
    out = []
    for record in records:
        tid = record["task_id"]
        row = recipe.training_row(record_to_sample(record))
        if not isinstance(row, dict):
            raise RecipeError(f"training_row for task {tid!r} returned {type(row).__name__}, expected dict")
        if "task_id" in row and row["task_id"] != tid:
            raise RecipeError(f"training_row for task {tid!r} carries a different task_id {row['task_id']!r}")
        row = {"task_id": tid, **row}
        try:
            out.append(dumps(row))
        except (TypeError, ValueError):
            raise RecipeError(f"training_row for task {tid!r} is not JSON-serializable") from None
    return out


# ---------------------------------------------------------------------------------------- pool


class WorkerPool:
    """A thread or spawn-process pool that maps chunks in order with bounded prefetch and retries."""

    def __init__(self, execution: ExecutionConfig, cancel: threading.Event) -> None:
        self.execution = execution
        self.cancel = cancel
        if execution.backend == "process":
            self._pool: Any = ProcessPoolExecutor(
                max_workers=execution.max_workers, mp_context=multiprocessing.get_context("spawn")
            )
        else:
            self._pool = ThreadPoolExecutor(max_workers=execution.max_workers, thread_name_prefix="recipe-worker")

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _wait(self, future: Future) -> Any:
        while True:
            if self.cancel.is_set():
                raise JobCancelled("cancelled while waiting for workers")
            try:
                return future.result(timeout=0.1)
            except FutureTimeout:
                continue
            except KeyboardInterrupt:
                self.cancel.set()
                raise JobCancelled("interrupted in a worker") from None

    def map_ordered(
        self, fn: Callable[..., Any], jobs: Iterable[tuple[Any, tuple]]
    ) -> Iterator[tuple[Any, Any]]:
        """Run ``fn(*args)`` for each ``(key, args)``; yield ``(key, result)`` in input order."""
        ex = self.execution
        pending: collections.deque[tuple[Any, tuple, Future, int]] = collections.deque()
        it = iter(jobs)
        exhausted = False

        def fill() -> None:
            nonlocal exhausted
            while not exhausted and len(pending) < ex.prefetch_chunks:
                if self.cancel.is_set():
                    raise JobCancelled("cancelled before submitting work")
                try:
                    key, args = next(it)
                except StopIteration:
                    exhausted = True
                    return
                pending.append((key, args, self._pool.submit(fn, *args), 0))

        try:
            fill()
            while pending:
                key, args, fut, attempt = pending.popleft()
                while True:
                    try:
                        result = self._wait(fut)
                        break
                    except JobCancelled:
                        raise
                    except Exception as exc:
                        if not is_retryable(exc) or attempt >= ex.max_retries:
                            raise
                        sleep_unless_cancelled(backoff_delay(attempt, ex.retry_delay), self.cancel)
                        attempt += 1
                        fut = self._pool.submit(fn, *args)
                yield key, result
                fill()
        finally:
            for _, _, fut, _ in pending:
                fut.cancel()


def iterate_with_retry(
    make: Callable[[], Iterable[Any]], execution: ExecutionConfig, cancel: threading.Event
) -> Iterator[Any]:
    """Iterate ``make()``; on OSError/TimeoutError re-create it and skip what was consumed.

    Relies on the iterable being deterministic (a recipe's generation must replay).
    """
    consumed = 0
    attempt = 0
    while True:
        try:
            it = iter(make())
            skipped = 0
            while skipped < consumed:
                next(it)
                skipped += 1
            for item in it:
                consumed += 1
                yield item
            return
        except StopIteration:
            raise RecipeError("generation yielded fewer candidates when replayed after a retry") from None
        except Exception as exc:
            if not is_retryable(exc) or attempt >= execution.max_retries:
                raise
            sleep_unless_cancelled(backoff_delay(attempt, execution.retry_delay), cancel)
            attempt += 1


def call_with_retry(fn: Callable[[], Any], execution: ExecutionConfig, cancel: threading.Event) -> Any:
    """Call ``fn()`` retrying OSError/TimeoutError with capped exponential backoff."""
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc) or attempt >= execution.max_retries:
                raise
            sleep_unless_cancelled(backoff_delay(attempt, execution.retry_delay), cancel)
            attempt += 1
