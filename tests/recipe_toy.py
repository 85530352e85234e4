"""A tiny toy recipe and toy calibrators for tests/test_recipe_executor.py.

Tasks are additions ``What is a + b?`` with the exact answer as private reference; every
reference also carries a ``secret`` string (``SECRET-REF-...``) that must never show up in
public.jsonl or in logs. Knobs (all recipe / calibrator params) let tests provoke duplicates,
conflicts, flaky failures and slow calibration; side files count calls across threads, processes
and runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import zlib
from pathlib import Path
from typing import Any, Optional

from corpus_assets.domain.recipe.protocol import (
    Attempt,
    CalibrationBatch,
    DataSample,
    GenerationShard,
    InsufficientDataError,
    PublicTask,
    RankedCandidate,
    SelectionPolicy,
)

_PROBLEM = re.compile(r"What is (\d+) \+ (\d+)\?")


def _bump(path: Optional[str]) -> int:
    """Append a line to a side file; return how many lines it had before."""
    if not path:
        return 0
    p = Path(path)
    before = len(p.read_text().splitlines()) if p.exists() else 0
    with open(p, "a") as f:
        f.write("x\n")
    return before


_ERRORS = {"oserror": OSError, "timeout": TimeoutError, "value": ValueError}


def make_sample(a: int, b: int, task_id: Optional[str] = None, answer: Optional[int] = None) -> DataSample:
    return DataSample(
        PublicTask(task_id or f"add-{a}-{b}", {"problem": f"What is {a} + {b}?  "}, {"kind": "add"}),
        {"answer": a + b if answer is None else answer, "secret": f"SECRET-REF-{a}-{b}"},
    )


class ToyRecipe:
    def __init__(
        self,
        count: int = 24,
        span: int = 1000,
        drop_mod: int = 0,
        alias_every: int = 0,
        conflict: bool = False,
        flaky_file: Optional[str] = None,
        flaky_times: int = 0,
        flaky_error: str = "oserror",
        bad_score: bool = False,
        source_file: Optional[str] = None,
        generate_log: Optional[str] = None,
        generate_flaky_file: Optional[str] = None,
        generate_flaky_times: int = 0,
    ) -> None:
        self.count, self.span, self.drop_mod = count, span, drop_mod
        self.alias_every, self.conflict = alias_every, conflict
        self.flaky_file, self.flaky_times, self.flaky_error = flaky_file, flaky_times, flaky_error
        self.bad_score = bad_score
        self.source_file = source_file
        self.generate_log = generate_log
        self.generate_flaky_file, self.generate_flaky_times = generate_flaky_file, generate_flaky_times

    def source_files(self) -> list[Path]:
        return [Path(self.source_file)] if self.source_file else []

    def generate(self, context):
        _bump(self.generate_log)
        rng = random.Random(f"{context.seed}:{context.batch_index}")
        for i in range(self.count):
            a, b = rng.randrange(self.span), rng.randrange(self.span)
            if i == 5 and self.generate_flaky_file and _bump(self.generate_flaky_file) < self.generate_flaky_times:
                raise ConnectionResetError("flaky generator")
            yield make_sample(a, b)
            if self.alias_every and i % self.alias_every == 0:
                yield make_sample(a, b, task_id=f"alias-{a}-{b}")
            if self.conflict and i == 1:
                yield make_sample(a, b, task_id=f"conflict-{a}-{b}", answer=a + b + 7)

    def clean(self, sample: DataSample) -> Optional[DataSample]:
        if self.flaky_file and _bump(self.flaky_file) < self.flaky_times:
            raise _ERRORS[self.flaky_error]("flaky clean")
        m = _PROBLEM.search(sample.task.input["problem"])
        a, b = int(m.group(1)), int(m.group(2))
        if self.drop_mod and (a + b) % self.drop_mod == 0:
            return None
        task = PublicTask(sample.task_id, {"problem": sample.task.input["problem"].strip()}, dict(sample.task.metadata))
        return DataSample(task, sample.reference)

    def score(self, sample: DataSample, response: Any) -> float:
        if self.bad_score:
            return 1.5
        return 1.0 if isinstance(response, dict) and response.get("answer") == sample.reference["answer"] else 0.0

    @staticmethod
    def _kind(scores: list) -> Optional[str]:
        if not scores:
            return "uncalibrated"
        if any(s is None for s in scores):
            return None  # incomplete
        mean = sum(scores) / len(scores)
        if mean == 1.0:
            return None  # always correct: too easy
        return "mixed" if mean > 0 else "wrong"

    def select(self, samples, scores, context) -> list[str]:
        order = {"mixed": 0, "wrong": 1, "uncalibrated": 2}
        eligible = []
        for s in samples:
            kind = self._kind(scores[s.task_id])
            if kind is not None:
                eligible.append((order[kind], s.task_id))
        eligible.sort()
        if len(eligible) < context.target_count:
            raise InsufficientDataError(f"only {len(eligible)} eligible task(s), need {context.target_count}")
        return [tid for _, tid in eligible[: context.target_count]]

    def training_row(self, sample: DataSample) -> dict:
        return {
            "task_id": sample.task_id,
            "messages": [{"role": "user", "content": sample.task.input["problem"]}],
            "answer": f"\\boxed{{{sample.reference['answer']}}}",
        }


class ToyRankedRecipe(ToyRecipe):
    def __init__(self, minimum_small: int = 2, maximum_per_bucket: Optional[int] = 3, **kw) -> None:
        super().__init__(**kw)
        self.minimum_small, self.maximum_per_bucket = minimum_small, maximum_per_bucket

    def selection_policy(self, context, calibrated):
        return SelectionPolicy({"small": self.minimum_small}, self.maximum_per_bucket)

    def rank(self, sample, scores, context):
        kind = self._kind(scores)
        if kind is None:
            return None
        m = _PROBLEM.search(sample.task.input["problem"])
        a, b = int(m.group(1)), int(m.group(2))
        priority = {"mixed": 0.0, "wrong": 1.0, "uncalibrated": 2.0}[kind]
        return RankedCandidate(
            task_id=sample.task_id,
            priority=priority,
            tie_breaker=f"{zlib.crc32(sample.task_id.encode()):08x}",
            group="small" if a + b < self.span // 2 else "large",
            bucket=f"a{a % 4}",
            metadata={"kind": kind},
        )

    def finalize_selection(self, selected, eligible_count, context):
        if len(selected) < context.target_count:
            raise InsufficientDataError(f"ranked merge gave {len(selected)} of {context.target_count}")
        groups: dict[str, int] = {}
        for c in selected:
            groups[c.group] = groups.get(c.group, 0) + 1
        return [c.task_id for c in selected], {"groups": dict(sorted(groups.items())), "eligible": eligible_count}


class ToyShardedRecipe(ToyRecipe):
    def generation_shards(self, context, shard_size):
        total = self.count
        return [GenerationShard(s, min(s + shard_size, total)) for s in range(0, total, shard_size)]

    def generate_shard(self, context, shard):
        return itertools.islice(self.generate(context), shard.start, shard.stop)


def create_recipe(**params) -> ToyRecipe:
    return ToyRecipe(**params)


def create_ranked_recipe(**params) -> ToyRankedRecipe:
    return ToyRankedRecipe(**params)


def create_sharded_recipe(**params) -> ToyShardedRecipe:
    return ToyShardedRecipe(**params)


class ToyCalibrator:
    """Answers deterministically from the public problem; wrong for some (task, repeat)."""

    def __init__(
        self,
        mode: str = "ok",
        call_log: Optional[str] = None,
        sleep: float = 0.0,
        flaky_file: Optional[str] = None,
        flaky_times: int = 0,
        flaky_error: str = "timeout",
        fail_mod: int = 0,
    ) -> None:
        self.mode, self.call_log, self.sleep = mode, call_log, sleep
        self.flaky_file, self.flaky_times, self.flaky_error = flaky_file, flaky_times, flaky_error
        self.fail_mod = fail_mod

    async def __call__(self, tasks, context) -> CalibrationBatch:
        _bump(self.call_log)
        for t in tasks:  # the executor must hand over public tasks only
            if not isinstance(t, PublicTask) or "SECRET" in json.dumps([t.input, t.metadata]):
                raise AssertionError("calibrator received private data")
        if self.flaky_file and _bump(self.flaky_file) < self.flaky_times:
            raise _ERRORS[self.flaky_error]("flaky calibrator")
        if self.sleep:
            await asyncio.sleep(self.sleep)
        attempts = []
        for t in tasks:
            m = _PROBLEM.search(t.input["problem"])
            total = int(m.group(1)) + int(m.group(2))
            for r in range(context.repeats):
                h = zlib.crc32(f"{t.task_id}:{r}".encode())
                if self.fail_mod and h % self.fail_mod == 0:
                    attempts.append(Attempt(t.task_id, r, None, "toy-timeout"))
                else:
                    attempts.append(Attempt(t.task_id, r, {"answer": total if h % 3 else total + 1}))
        if self.mode == "duplicate":
            attempts.append(attempts[0])
        elif self.mode == "missing":
            attempts.pop()
        elif self.mode == "unknown":
            attempts.append(Attempt("no-such-task", 0, {"answer": 0}))
        return CalibrationBatch(tuple(attempts), {"method": "toy-calibrator-v1", "tasks": len(tasks)})


def create_calibrator(**params) -> ToyCalibrator:
    return ToyCalibrator(**params)
