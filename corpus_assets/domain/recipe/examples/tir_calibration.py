"""Calibrators for the TIR recipe (seed 002): recorded evaluation reports and a rule-based solver.

Both are factories returning an async ``Calibrator`` that receives ``PublicTask`` objects only,
returns exactly one ``Attempt`` per (task, repeat) and leaves scoring to the executor.
``recorded_responses`` checks every report against the params when created; ``rule_based_solver``
is a deterministic simulated "model" (no model, no GPU) whose draws are seeded per (seed, task,
repeat), and its provenance says ``simulated: true``.

Report format and decisions: docs/recipes.md#calibrators
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from corpus_assets.domain.core.hashing import canonical_digest, canonical_json
from corpus_assets.domain.recipe.examples.tir import TYPES, format_exact, parse_task, solve_task
from corpus_assets.domain.recipe.protocol import (
    Attempt,
    CalibrationBatch,
    CalibrationContext,
    PublicTask,
    RecipeError,
)

__all__ = [
    "DEFAULT_ERROR_RATES",
    "MISSING_FROM_REPORT",
    "REPORT_FIELDS",
    "RecordedReportError",
    "RecordedResponses",
    "RuleBasedSolver",
    "recorded_responses",
    "rule_based_solver",
    "task_set_digest",
]

MISSING_FROM_REPORT = "missing_from_report"
REPORT_FIELDS = (
    "model_ref",
    "harness_ref",
    "backend_model_digest",
    "verifier_digest",
    "trial_id",
    "task_set_digest",
    "executable_digest",
)
_IDENTITY_FIELDS = ("model_ref", "harness_ref", "backend_model_digest", "verifier_digest")
SOLVER_VERSION = "tir-rule-based-solver-v1"
DEFAULT_ERROR_RATES = {
    "modular_arithmetic": 0.25,
    "linear_equation": 0.35,
    "gcd_lcm": 0.3,
    "combinatorics": 0.45,
    "series_sum": 0.5,
    "fraction_arithmetic": 0.4,
    "base_conversion": 0.3,
    "divisibility_count": 0.55,
}


class RecordedReportError(RecipeError):
    """An evaluation report that cannot be reused for this job (identity, trials, task set, format)."""


def task_set_digest(task_ids: Sequence[str]) -> str:
    """sha256 of the canonical JSON of the sorted task ids."""
    return canonical_digest(sorted(task_ids))


# --------------------------------------------------------------------------- recorded responses


@dataclass(frozen=True)
class _Report:
    path: str
    sha256: str
    header: dict
    responses: dict

    def provenance(self, repeat: int) -> dict:
        return {
            "repeat": repeat,
            "path": self.path,
            "sha256": self.sha256,
            "trial_id": self.header["trial_id"],
            "task_set_digest": self.header["task_set_digest"],
            "executable_digest": self.header["executable_digest"],
        }


def _read_report(path: str) -> _Report:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RecordedReportError(f"report {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RecordedReportError(f"report {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordedReportError(f"report {path}: expected a JSON object")
    bad = [f for f in REPORT_FIELDS if not isinstance(data.get(f), str) or not data[f]]
    if bad or not isinstance(data.get("responses"), dict):
        raise RecordedReportError(f"report {path}: missing or empty fields {bad or ['responses']}")
    for task_id, entry in data["responses"].items():
        _check_entry(path, task_id, entry)
    if task_set_digest(list(data["responses"])) != data["task_set_digest"]:
        raise RecordedReportError(f"report {path}: task_set_digest does not match its responses")
    header = {f: data[f] for f in REPORT_FIELDS}
    return _Report(str(path), hashlib.sha256(raw).hexdigest(), header, data["responses"])


def _check_entry(path: str, task_id: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise RecordedReportError(f"report {path}: response for {task_id} is not an object")
    reason = entry.get("failure_reason")
    if reason is not None and (not isinstance(reason, str) or not reason):
        raise RecordedReportError(f"report {path}: failure_reason for {task_id} must be a non-empty string")
    if reason is None and not isinstance(entry.get("text"), str):
        raise RecordedReportError(f"report {path}: response for {task_id} has no string 'text'")


def _check_identity(report: _Report, expected: Mapping[str, str]) -> None:
    for name in _IDENTITY_FIELDS:
        if report.header[name] != expected[name]:
            raise RecordedReportError(
                f"report {report.path}: {name} is {report.header[name]!r}, the job expects {expected[name]!r}"
            )


def _check_batch(batch_index: int, batch: Sequence[_Report], executable_digest: Optional[str]) -> None:
    trials = [r.header["trial_id"] for r in batch]
    if len(set(trials)) != len(trials):
        raise RecordedReportError(f"batch {batch_index}: repeated reports share a trial_id ({trials})")
    for name in ("task_set_digest", "executable_digest"):
        values = {r.header[name] for r in batch}
        if len(values) != 1:
            raise RecordedReportError(f"batch {batch_index}: reports differ in {name} ({sorted(values)})")
    if executable_digest is not None and batch[0].header["executable_digest"] != executable_digest:
        raise RecordedReportError(
            f"batch {batch_index}: executable_digest is {batch[0].header['executable_digest']!r}, "
            f"the job expects {executable_digest!r}"
        )


def _attempt(report: _Report, task_id: str, repeat: int) -> Attempt:
    entry = report.responses.get(task_id)
    if entry is None:
        return Attempt(task_id, repeat, None, MISSING_FROM_REPORT)
    if entry.get("failure_reason") is not None:
        return Attempt(task_id, repeat, None, f"report:{entry['failure_reason']}")
    return Attempt(task_id, repeat, {"text": entry["text"]})


class RecordedResponses:
    """Replays the responses of existing evaluation reports (checked at construction)."""

    def __init__(self, identity: Mapping[str, str], batches: Sequence[Sequence[_Report]]) -> None:
        self.identity = dict(identity)
        self.batches = [tuple(batch) for batch in batches]

    async def __call__(self, tasks: Sequence[PublicTask], context: CalibrationContext) -> CalibrationBatch:
        if not 0 <= context.batch_index < len(self.batches):
            raise RecordedReportError(f"no reports configured for batch {context.batch_index}")
        batch = self.batches[context.batch_index]
        if context.repeats != len(batch):
            raise RecordedReportError(
                f"batch {context.batch_index}: {len(batch)} report(s) for {context.repeats} repeat(s)"
            )
        attempts = tuple(_attempt(report, t.task_id, r) for t in tasks for r, report in enumerate(batch))
        provenance = {
            "method": "tir-recorded-responses-v1",
            **self.identity,
            "batch_index": context.batch_index,
            "reports": [report.provenance(r) for r, report in enumerate(batch)],
        }
        return CalibrationBatch(attempts, provenance)


def recorded_responses(
    *,
    model_ref: str,
    harness_ref: str,
    backend_model_digest: str,
    verifier_digest: str,
    reports: Sequence[Sequence[str]],
    executable_digest: Optional[str] = None,
) -> RecordedResponses:
    """Factory for ``calibration.implementation: …tir_calibration:recorded_responses``."""
    identity = {
        "model_ref": model_ref,
        "harness_ref": harness_ref,
        "backend_model_digest": backend_model_digest,
        "verifier_digest": verifier_digest,
    }
    bad = [k for k, v in identity.items() if not isinstance(v, str) or not v]
    if bad:
        raise RecordedReportError(f"recorded_responses: {bad} must be non-empty strings")
    if isinstance(reports, (str, bytes)) or not reports or any(
        isinstance(b, (str, bytes)) or not b for b in reports
    ):
        raise RecordedReportError("recorded_responses: reports must be a non-empty list of lists (batch → repeats)")
    batches = []
    for b, paths in enumerate(reports):
        batch = [_read_report(str(p)) for p in paths]
        for report in batch:
            _check_identity(report, identity)
        _check_batch(b, batch, executable_digest)
        batches.append(batch)
    return RecordedResponses(identity, batches)


# ----------------------------------------------------------------------------- rule-based solver


def _mistake_table() -> dict[tuple[str, str], Callable[[dict], Fraction]]:
    def geometric(p: dict, terms: int) -> Fraction:
        ratio = Fraction(p["p"], p["q"])
        return sum((p["a"] * ratio**i for i in range(terms)), Fraction(0))

    def fractions(p: dict, op2: str) -> Fraction:
        first = Fraction(p["a"], p["b"]) + (1 if p["op1"] == "+" else -1) * Fraction(p["c"], p["d"])
        return first + (1 if op2 == "+" else -1) * Fraction(p["e"], p["f"])

    return {
        ("modular_arithmetic", "direct"): lambda p: Fraction(pow(p["a"], p["e"] - 1, p["m"])),
        ("modular_arithmetic", "word"): lambda p: Fraction(p["a"] * p["e"] % p["m"]),
        ("linear_equation", "direct"): lambda p: Fraction(p["d"] + p["b"], p["a"] - p["c"]),
        ("linear_equation", "word"): lambda p: Fraction(p["b"] + p["d"], p["a"] - p["c"]),
        ("gcd_lcm", "direct"): lambda p: Fraction(math.lcm(p["a"], p["b"])),
        ("gcd_lcm", "word"): lambda p: Fraction(p["a"] * p["b"]),
        ("combinatorics", "direct"): lambda p: Fraction(math.comb(p["n"], p["k"] - 1)),
        ("combinatorics", "word"): lambda p: Fraction(math.comb(p["n"], p["k"])),
        ("series_sum", "direct"): lambda p: geometric(p, p["n"] - 1),
        ("series_sum", "word"): lambda p: Fraction(p["n"] * p["a"] + p["d"] * p["n"] * p["n"] // 2),
        ("fraction_arithmetic", "direct"): lambda p: fractions(p, "-" if p["op2"] == "+" else "+"),
        ("fraction_arithmetic", "word"): lambda p: sum(
            (Fraction(p[x], p[y]) for x, y in (("a", "b"), ("c", "d"), ("e", "f"))), Fraction(0)
        ),
        ("base_conversion", "direct"): lambda p: Fraction(int(p["digits"][::-1], p["b"])),
        ("base_conversion", "word"): lambda p: Fraction(int(p["x"]) + int(p["y"])),
        ("divisibility_count", "direct"): lambda p: Fraction(p["n"] // p["a"] + p["n"] // p["b"]),
        ("divisibility_count", "word"): lambda p: Fraction(p["n"] // p["k"]),
    }


_MISTAKES = _mistake_table()


def _solver_rng(seed: int, task_id: str, repeat: int) -> np.random.Generator:
    digest = hashlib.sha256(canonical_json([SOLVER_VERSION, int(seed), task_id, int(repeat)])).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest, "big")))


def _terminating_decimal(value: Fraction) -> Optional[str]:
    """``value`` as an exact decimal string, or None if its expansion does not terminate."""
    den = value.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    if den != 1:
        return None
    places = 0
    while (value * 10**places).denominator != 1:
        places += 1
    text = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{text[:-places]}.{text[-places:]}"


def _styled(value: Fraction, rng: np.random.Generator) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    decimal = _terminating_decimal(value)
    num, den = abs(value.numerator), value.denominator
    dfrac = f"-\\dfrac{{{num}}}{{{den}}}" if value < 0 else f"\\dfrac{{{num}}}{{{den}}}"
    styles = [format_exact(value), f"\\frac{{{value.numerator}}}{{{den}}}", dfrac]
    if decimal is not None:
        styles.append(decimal)
    return styles[int(rng.integers(0, len(styles)))]


def _rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise RecipeError(f"rule_based_solver: {name} must be a number in [0, 1], got {value!r}")
    return float(value)


class RuleBasedSolver:
    """A deterministic simulated solver with seeded, type-dependent mistakes."""

    def __init__(self, seed: int, error_rates: Mapping[str, float], failure_rate: float) -> None:
        self.seed = int(seed)
        self.error_rates = dict(error_rates)
        self.failure_rate = failure_rate

    def attempt(self, task: PublicTask, repeat: int) -> Attempt:
        rng = _solver_rng(self.seed, task.task_id, repeat)
        fail_draw, error_draw = rng.random(), rng.random()
        parsed = parse_task(task)
        if parsed is None:
            return Attempt(task.task_id, repeat, None, "unparseable_task")
        if fail_draw < self.failure_rate:
            return Attempt(task.task_id, repeat, None, "simulated_timeout")
        kind, structure, params = parsed
        if error_draw < self.error_rates[kind]:
            answer = _MISTAKES[(kind, structure)](params)
        else:
            answer = solve_task(task)
        shown = _styled(answer, rng)
        text = (
            f"This is a {kind.replace('_', ' ')} problem; I compute it exactly with Python.\n"
            f"```python\n# exact arithmetic with fractions.Fraction\n```\n"
            f"The computation gives {shown}.\n\nFinal answer: \\boxed{{{shown}}}"
        )
        return Attempt(task.task_id, repeat, {"text": text})

    async def __call__(self, tasks: Sequence[PublicTask], context: CalibrationContext) -> CalibrationBatch:
        attempts = tuple(self.attempt(t, r) for t in tasks for r in range(context.repeats))
        provenance = {
            "method": SOLVER_VERSION,
            "simulated": True,
            "seed": self.seed,
            "error_rates": dict(sorted(self.error_rates.items())),
            "failure_rate": self.failure_rate,
        }
        return CalibrationBatch(attempts, provenance)


def rule_based_solver(
    *,
    seed: int = 0,
    error_rate: Optional[float] = None,
    error_rates: Optional[Mapping[str, float]] = None,
    failure_rate: float = 0.0,
) -> RuleBasedSolver:
    """Factory for ``calibration.implementation: …tir_calibration:rule_based_solver``."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RecipeError(f"rule_based_solver: seed must be an integer, got {seed!r}")
    rates = dict(DEFAULT_ERROR_RATES)
    if error_rate is not None:
        rates = {kind: _rate("error_rate", error_rate) for kind in TYPES}
    unknown = sorted(set(error_rates or {}) - set(TYPES))
    if unknown:
        raise RecipeError(f"rule_based_solver: unknown types in error_rates: {unknown}")
    rates.update({k: _rate(f"error_rates[{k}]", v) for k, v in (error_rates or {}).items()})
    return RuleBasedSolver(seed, rates, _rate("failure_rate", failure_rate))
