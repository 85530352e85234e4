"""A tool-integrated-reasoning (TIR) math recipe (seed 002): exact answers, no model needed.

``create_recipe(**params)`` returns a ``TirRecipe``: eight problem types × two structures
("recipes") generated from seeded parameters, the exact answer (integer or fraction) being the
private reference. It implements the plain protocol, sharded generation and ranked selection.
A candidate depends only on (seed, batch, index), so any shard split or worker count gives the
same candidates; templates parse themselves back, so ``clean()`` turns semantic duplicates into
exact ones. Scoring takes the last complete boxed answer and compares exactly (nothing evaluated).

Params and decisions: docs/recipes.md#tir-example
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from corpus_assets.domain.core.hashing import canonical_digest, canonical_json
from corpus_assets.domain.recipe.protocol import (
    DataSample,
    GenerationContext,
    GenerationShard,
    InsufficientDataError,
    PublicTask,
    RankedCandidate,
    RecipeError,
    SelectionContext,
    SelectionPolicy,
    ranked_sort_key,
    select_ranked_candidates,
)

__all__ = [
    "GENERATOR_VERSION",
    "INSTRUCTIONS",
    "REPEATS",
    "STRUCTURES",
    "TYPES",
    "RECIPES",
    "TirRecipe",
    "create_recipe",
    "extract_last_boxed",
    "format_exact",
    "parse_answer",
    "parse_task",
    "public_numbers",
    "score_text",
    "solve_task",
    "task_id_for",
]

GENERATOR_VERSION = "corpus.tir.v1"
INSTRUCTIONS = "Put the final answer in \\boxed{}."
REPEATS = 2
TYPES = (
    "modular_arithmetic",
    "linear_equation",
    "gcd_lcm",
    "combinatorics",
    "series_sum",
    "fraction_arithmetic",
    "base_conversion",
    "divisibility_count",
)
STRUCTURES = ("direct", "word")
RECIPES = tuple((t, s) for t in TYPES for s in STRUCTURES)

_MAX_OPERAND_DIGITS = 12
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

Params = dict


# ---------------------------------------------------------------------------------- exact numbers


def format_exact(value: Fraction) -> str:
    """Canonical exact string: ``"12"``, ``"-7/4"``."""
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _answer_digits(value: Fraction) -> int:
    return max(len(str(abs(value.numerator))), len(str(value.denominator)))


def public_numbers(text: str) -> set[str]:
    """Every maximal digit run and every ``a/b`` in ``text`` (signs ignored)."""
    return set(re.findall(r"\d+", text)) | set(re.findall(r"\d+/\d+", text))


def _appears_in(value: Fraction, text: str) -> bool:
    return format_exact(abs(Fraction(value))) in public_numbers(text)


# ------------------------------------------------------------------------------------- scoring

_BOXED = re.compile(r"\\boxed\s*\{")
_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_FRACTION = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_LATEX_FRACTION = re.compile(r"([+-]?)\s*\\d?frac\s*\{\s*([+-]?\d+)\s*\}\s*\{\s*(\d+)\s*\}")


def extract_last_boxed(text: str) -> Optional[str]:
    """The content of the last ``\\boxed{…}`` whose braces close, or None."""
    found = None
    for match in _BOXED.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = text[match.end() : i - 1]
    return found


def parse_answer(content: str) -> Optional[Fraction]:
    """An exact number from a boxed answer, or None. No expression is ever evaluated."""
    s = content.strip()
    if _INTEGER.fullmatch(s) or _DECIMAL.fullmatch(s):
        return Fraction(s)
    m = _FRACTION.fullmatch(s)
    if m:
        return Fraction(int(m[1]), int(m[2])) if int(m[2]) else None
    m = _LATEX_FRACTION.fullmatch(s)
    if m and int(m[3]):
        value = Fraction(int(m[2]), int(m[3]))
        return -value if m[1] == "-" else value
    return None


def score_text(text: str, reference: Fraction) -> float:
    content = extract_last_boxed(text)
    answer = parse_answer(content) if content is not None else None
    return 1.0 if answer is not None and answer == reference else 0.0


# ------------------------------------------------------------------------------------ templates


@dataclass(frozen=True)
class _Template:
    type: str
    structure: str
    sample: Callable[[np.random.Generator], Params]
    render: Callable[[Params], str]
    pattern: re.Pattern
    read: Callable[[re.Match], Params]
    solve: Callable[[Params], Fraction]
    degenerate: Callable[[Params], Optional[str]]
    canonical: Callable[[Params], Params] = lambda p: p

    def parse(self, text: str) -> Optional[Params]:
        m = self.pattern.fullmatch(text)
        return self.read(m) if m else None


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi, endpoint=True))


def _signed_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return _int(rng, lo, hi) * (1 if _int(rng, 0, 1) else -1)


def _signed(sign: str, digits: str) -> int:
    return -int(digits) if sign == "-" else int(digits)


def _ints(m: re.Match) -> Params:
    return {k: int(v) for k, v in m.groupdict().items()}


def _sorted_pair(p: Params, x: str = "a", y: str = "b") -> Params:
    lo, hi = sorted((p[x], p[y]))
    return {**p, x: lo, y: hi}


def _to_base(value: int, base: int) -> str:
    out = ""
    while value:
        value, digit = divmod(value, base)
        out = _DIGITS[digit] + out
    return out or "0"


def _base_digits_problem(digits: str, base: int) -> Optional[str]:
    if not 2 <= base <= 36 or base == 10:
        return "bad_base"
    if any(_DIGITS.find(ch) < 0 or _DIGITS.find(ch) >= base for ch in digits):
        return "invalid_digit"
    if len(digits) > 1 and digits[0] == "0":
        return "leading_zero"
    return None


def _side(a: int, b: int) -> str:
    return f"{a}x {'-' if b < 0 else '+'} {abs(b)}"


def _count_digit_sum_divisible(n: int, k: int) -> int:
    """How many of 1..n have a digit sum divisible by k (digit DP, O(digits × 10 × k))."""
    digits = str(n)
    free = [[1] + [0] * (k - 1)]  # free[m][r]: m-digit strings (leading zeros allowed) with sum ≡ r
    for _ in range(len(digits)):
        free.append([sum(free[-1][(r - d) % k] for d in range(10)) for r in range(k)])
    count, prefix = 0, 0
    for i, ch in enumerate(digits):
        for d in range(int(ch)):
            count += free[len(digits) - i - 1][-(prefix + d) % k]
        prefix += int(ch)
    return count + (prefix % k == 0) - 1  # + n itself, - the number 0


# --- modular arithmetic


def _modular_degenerate(p: Params) -> Optional[str]:
    if p["m"] < 2:
        return "modulus_below_2"
    return "trivial_power" if p["a"] % p["m"] in (0, 1) else None


_MODULAR_DIRECT = _Template(
    "modular_arithmetic",
    "direct",
    sample=lambda r: {"a": _int(r, 2, 999), "e": _int(r, 100, 10**6), "m": _int(r, 7, 9973)},
    render=lambda p: f"What is the remainder when {p['a']}^{p['e']} is divided by {p['m']}?",
    pattern=re.compile(r"What is the remainder when (?P<a>\d+)\^(?P<e>\d+) is divided by (?P<m>\d+)\?"),
    read=_ints,
    solve=lambda p: Fraction(pow(p["a"], p["e"], p["m"])),
    degenerate=_modular_degenerate,
)

_MODULAR_WORD = _Template(
    "modular_arithmetic",
    "word",
    sample=lambda r: {"a": _int(r, 2, 50), "e": _int(r, 20, 5000), "m": _int(r, 7, 997)},
    render=lambda p: (
        f"A culture starts with a single cell, and every hour each cell splits into {p['a']} cells. "
        f"A lab tags the culture with the remainder of its cell count modulo {p['m']}. "
        f"Which tag does the culture carry after {p['e']} hours?"
    ),
    pattern=re.compile(
        r"A culture starts with a single cell, and every hour each cell splits into (?P<a>\d+) cells\. "
        r"A lab tags the culture with the remainder of its cell count modulo (?P<m>\d+)\. "
        r"Which tag does the culture carry after (?P<e>\d+) hours\?"
    ),
    read=_ints,
    solve=lambda p: Fraction(pow(p["a"], p["e"], p["m"])),
    degenerate=_modular_degenerate,
)

# --- linear equations


def _linear_degenerate(p: Params) -> Optional[str]:
    return "no_unique_solution" if p["a"] == p["c"] else None


_LINEAR_DIRECT = _Template(
    "linear_equation",
    "direct",
    sample=lambda r: {
        "a": _signed_int(r, 2, 25),
        "b": _int(r, -200, 200),
        "c": _signed_int(r, 2, 25),
        "d": _int(r, -200, 200),
    },
    render=lambda p: f"Solve for x: {_side(p['a'], p['b'])} = {_side(p['c'], p['d'])}.",
    pattern=re.compile(
        r"Solve for x: (?P<a>-?\d+)x (?P<bs>[+-]) (?P<b>\d+) = (?P<c>-?\d+)x (?P<ds>[+-]) (?P<d>\d+)\."
    ),
    read=lambda m: {
        "a": int(m["a"]),
        "b": _signed(m["bs"], m["b"]),
        "c": int(m["c"]),
        "d": _signed(m["ds"], m["d"]),
    },
    solve=lambda p: Fraction(p["d"] - p["b"], p["a"] - p["c"]),
    degenerate=_linear_degenerate,
)

_LINEAR_WORD = _Template(
    "linear_equation",
    "word",
    sample=lambda r: {"a": _int(r, 2, 40), "b": _int(r, 1, 500), "c": _int(r, 2, 40), "d": _int(r, 1, 500)},
    render=lambda p: (
        f"A number x has the following property: {p['a']} times x, increased by {p['b']}, "
        f"equals {p['c']} times x, decreased by {p['d']}. Find x."
    ),
    pattern=re.compile(
        r"A number x has the following property: (?P<a>\d+) times x, increased by (?P<b>\d+), "
        r"equals (?P<c>\d+) times x, decreased by (?P<d>\d+)\. Find x\."
    ),
    read=_ints,
    solve=lambda p: Fraction(-(p["b"] + p["d"]), p["a"] - p["c"]),
    degenerate=_linear_degenerate,
)

# --- gcd / lcm


def _pair_degenerate(p: Params) -> Optional[str]:
    if min(p["a"], p["b"]) < 2:
        return "operand_below_2"
    return "equal_operands" if p["a"] == p["b"] else None


def _gcd_sample(r: np.random.Generator) -> Params:
    g = _int(r, 2, 500)
    return {"a": g * _int(r, 2, 200), "b": g * _int(r, 2, 200)}


_GCD_DIRECT = _Template(
    "gcd_lcm",
    "direct",
    sample=_gcd_sample,
    render=lambda p: f"Find the greatest common divisor of {p['a']} and {p['b']}.",
    pattern=re.compile(r"Find the greatest common divisor of (?P<a>\d+) and (?P<b>\d+)\."),
    read=_ints,
    solve=lambda p: Fraction(math.gcd(p["a"], p["b"])),
    degenerate=_pair_degenerate,
    canonical=_sorted_pair,
)

_LCM_WORD = _Template(
    "gcd_lcm",
    "word",
    sample=lambda r: {"a": _int(r, 6, 400), "b": _int(r, 6, 400)},
    render=lambda p: (
        f"Two buses leave a depot at the same moment. One bus returns to the depot every {p['a']} "
        f"minutes and the other every {p['b']} minutes. After how many minutes will both buses "
        f"next be at the depot together?"
    ),
    pattern=re.compile(
        r"Two buses leave a depot at the same moment\. One bus returns to the depot every (?P<a>\d+) "
        r"minutes and the other every (?P<b>\d+) minutes\. After how many minutes will both buses "
        r"next be at the depot together\?"
    ),
    read=_ints,
    solve=lambda p: Fraction(math.lcm(p["a"], p["b"])),
    degenerate=_pair_degenerate,
    canonical=_sorted_pair,
)

# --- combinatorics


def _binomial_sample(r: np.random.Generator) -> Params:
    n = _int(r, 10, 60)
    return {"n": n, "k": _int(r, 2, n - 2)}


_BINOMIAL_DIRECT = _Template(
    "combinatorics",
    "direct",
    sample=_binomial_sample,
    render=lambda p: f"Compute the binomial coefficient C({p['n']}, {p['k']}).",
    pattern=re.compile(r"Compute the binomial coefficient C\((?P<n>\d+), (?P<k>\d+)\)\."),
    read=_ints,
    solve=lambda p: Fraction(math.comb(p["n"], p["k"])),
    degenerate=lambda p: None if 2 <= p["k"] <= p["n"] - 2 and p["n"] <= 10_000 else "k_out_of_range",
    canonical=lambda p: {**p, "k": min(p["k"], p["n"] - p["k"])},
)


def _committee_sample(r: np.random.Generator) -> Params:
    n = _int(r, 8, 45)
    return {"n": n, "k": _int(r, 2, n - 1)}


_COMMITTEE_WORD = _Template(
    "combinatorics",
    "word",
    sample=_committee_sample,
    render=lambda p: (
        f"A club has {p['n']} members, one of whom is the treasurer. In how many ways can a "
        f"committee of {p['k']} members be formed if the treasurer must be on the committee?"
    ),
    pattern=re.compile(
        r"A club has (?P<n>\d+) members, one of whom is the treasurer\. In how many ways can a "
        r"committee of (?P<k>\d+) members be formed if the treasurer must be on the committee\?"
    ),
    read=_ints,
    solve=lambda p: Fraction(math.comb(p["n"] - 1, p["k"] - 1)),
    degenerate=lambda p: None if 2 <= p["k"] <= p["n"] - 1 and p["n"] <= 10_000 else "k_out_of_range",
)

# --- series sums


def _geometric_sample(r: np.random.Generator) -> Params:
    return {"n": _int(r, 3, 10), "a": _int(r, 1, 60), "p": _signed_int(r, 1, 6), "q": _int(r, 1, 5)}


def _geometric_degenerate(p: Params) -> Optional[str]:
    if p["q"] == 0:
        return "zero_denominator"
    if p["p"] == 0 or Fraction(p["p"], p["q"]) in (1, -1):
        return "trivial_ratio"
    if not 3 <= p["n"] <= 200 or p["a"] == 0:
        return "trivial_series"
    return None


def _geometric_sum(p: Params) -> Fraction:
    ratio = Fraction(p["p"], p["q"])
    return sum((p["a"] * ratio**i for i in range(p["n"])), Fraction(0))


def _ratio_text(p: Params) -> str:
    return str(p["p"]) if p["q"] == 1 else f"{p['p']}/{p['q']}"


def _reduce_ratio(p: Params) -> Params:
    ratio = Fraction(p["p"], p["q"])
    return {**p, "p": ratio.numerator, "q": ratio.denominator}


_GEOMETRIC_DIRECT = _Template(
    "series_sum",
    "direct",
    sample=_geometric_sample,
    render=lambda p: (
        f"Find the sum of the first {p['n']} terms of the geometric sequence with first term "
        f"{p['a']} and common ratio {_ratio_text(p)}."
    ),
    pattern=re.compile(
        r"Find the sum of the first (?P<n>\d+) terms of the geometric sequence with first term "
        r"(?P<a>-?\d+) and common ratio (?P<p>-?\d+)(?:/(?P<q>\d+))?\."
    ),
    read=lambda m: {"n": int(m["n"]), "a": int(m["a"]), "p": int(m["p"]), "q": int(m["q"] or 1)},
    solve=_geometric_sum,
    degenerate=_geometric_degenerate,
    canonical=_reduce_ratio,
)

_THEATRE_WORD = _Template(
    "series_sum",
    "word",
    sample=lambda r: {"n": _int(r, 5, 80), "a": _int(r, 5, 60), "d": _int(r, 1, 12)},
    render=lambda p: (
        f"A theatre has {p['n']} rows of seats. The first row has {p['a']} seats and every row "
        f"has {p['d']} more seats than the row in front of it. How many seats does the theatre have?"
    ),
    pattern=re.compile(
        r"A theatre has (?P<n>\d+) rows of seats\. The first row has (?P<a>\d+) seats and every row "
        r"has (?P<d>\d+) more seats than the row in front of it\. How many seats does the theatre have\?"
    ),
    read=_ints,
    solve=lambda p: Fraction(p["n"] * p["a"] + p["d"] * p["n"] * (p["n"] - 1) // 2),
    degenerate=lambda p: None if p["n"] >= 2 and p["d"] >= 1 and p["a"] >= 1 else "trivial_series",
)

# --- fraction arithmetic


def _fractions_degenerate(p: Params) -> Optional[str]:
    if 0 in (p["b"], p["d"], p["f"]):
        return "zero_denominator"
    return "zero_term" if 0 in (p["a"], p["c"], p["e"]) else None


def _proper(r: np.random.Generator, top: int) -> tuple[int, int]:
    den = _int(r, 2, top)
    return _int(r, 1, den - 1), den


def _fraction_sample(r: np.random.Generator) -> Params:
    (a, b), (c, d), (e, f) = (_proper(r, 40) for _ in range(3))
    ops = ("+-"[_int(r, 0, 1)], "+-"[_int(r, 0, 1)])
    return {"a": a, "b": b, "op1": ops[0], "c": c, "d": d, "op2": ops[1], "e": e, "f": f}


def _apply(op: str, x: Fraction, y: Fraction) -> Fraction:
    return x + y if op == "+" else x - y


_FRACTION_DIRECT = _Template(
    "fraction_arithmetic",
    "direct",
    sample=_fraction_sample,
    render=lambda p: (
        f"Compute {p['a']}/{p['b']} {p['op1']} {p['c']}/{p['d']} {p['op2']} {p['e']}/{p['f']} exactly."
    ),
    pattern=re.compile(
        r"Compute (?P<a>\d+)/(?P<b>\d+) (?P<op1>[+-]) (?P<c>\d+)/(?P<d>\d+) (?P<op2>[+-]) "
        r"(?P<e>\d+)/(?P<f>\d+) exactly\."
    ),
    read=lambda m: {k: (v if k.startswith("op") else int(v)) for k, v in m.groupdict().items()},
    solve=lambda p: _apply(
        p["op2"],
        _apply(p["op1"], Fraction(p["a"], p["b"]), Fraction(p["c"], p["d"])),
        Fraction(p["e"], p["f"]),
    ),
    degenerate=_fractions_degenerate,
)


def _tank_sample(r: np.random.Generator) -> Params:
    (a, b), (e, f) = _proper(r, 24), _proper(r, 24)
    d = _int(r, 2, 24)
    return {"a": a, "b": b, "c": _int(r, 1, max(1, d // 2)), "d": d, "e": e, "f": f}


def _tank_degenerate(p: Params) -> Optional[str]:
    reason = _fractions_degenerate(p)
    if reason:
        return reason
    level = Fraction(p["a"], p["b"])
    after_drain = level - Fraction(p["c"], p["d"])
    if level > 1:
        return "more_than_full"
    if after_drain < 0:
        return "drains_below_empty"
    return "overflows" if after_drain + Fraction(p["e"], p["f"]) > 1 else None


_TANK_WORD = _Template(
    "fraction_arithmetic",
    "word",
    sample=_tank_sample,
    render=lambda p: (
        f"A water tank is {p['a']}/{p['b']} full. First, {p['c']}/{p['d']} of the tank's capacity is "
        f"drained; then {p['e']}/{p['f']} of the capacity is added. What fraction of the tank is full now?"
    ),
    pattern=re.compile(
        r"A water tank is (?P<a>\d+)/(?P<b>\d+) full\. First, (?P<c>\d+)/(?P<d>\d+) of the tank's capacity is "
        r"drained; then (?P<e>\d+)/(?P<f>\d+) of the capacity is added\. What fraction of the tank is full now\?"
    ),
    read=_ints,
    solve=lambda p: Fraction(p["a"], p["b"]) - Fraction(p["c"], p["d"]) + Fraction(p["e"], p["f"]),
    degenerate=_tank_degenerate,
)

# --- base conversion


def _base_sample(r: np.random.Generator) -> Params:
    base = _int(r, 2, 15)
    base += base >= 10
    return {"b": base, "digits": _to_base(_int(r, base**3, 10**7), base)}


_BASE_DIRECT = _Template(
    "base_conversion",
    "direct",
    sample=_base_sample,
    render=lambda p: f"Convert the base-{p['b']} number {p['digits']} to base 10.",
    pattern=re.compile(r"Convert the base-(?P<b>\d+) number (?P<digits>[0-9A-Z]+) to base 10\."),
    read=lambda m: {"b": int(m["b"]), "digits": m["digits"]},
    solve=lambda p: Fraction(int(p["digits"], p["b"])),
    degenerate=lambda p: _base_digits_problem(p["digits"], p["b"]),
)


def _scribes_sample(r: np.random.Generator) -> Params:
    base = _int(r, 3, 9)
    x, y = (_to_base(_int(r, base**2, base**6), base) for _ in range(2))
    return {"b": base, "x": x, "y": y}


def _scribes_canonical(p: Params) -> Params:
    x, y = sorted((p["x"], p["y"]), key=lambda digits: int(digits, p["b"]))
    return {**p, "x": x, "y": y}


def _scribes_degenerate(p: Params) -> Optional[str]:
    if not 2 <= p["b"] <= 9:
        return "bad_base"
    return _base_digits_problem(p["x"], p["b"]) or _base_digits_problem(p["y"], p["b"])


_SCRIBES_WORD = _Template(
    "base_conversion",
    "word",
    sample=_scribes_sample,
    render=lambda p: (
        f"A civilization counts in base {p['b']}. Its scribes add the numbers {p['x']} and {p['y']}, "
        f"both written in base {p['b']}. What is the sum, written in base 10?"
    ),
    pattern=re.compile(
        r"A civilization counts in base (?P<b>\d+)\. Its scribes add the numbers (?P<x>\d+) and (?P<y>\d+), "
        r"both written in base (?P=b)\. What is the sum, written in base 10\?"
    ),
    read=lambda m: {"b": int(m["b"]), "x": m["x"], "y": m["y"]},
    solve=lambda p: Fraction(int(p["x"], p["b"]) + int(p["y"], p["b"])),
    degenerate=_scribes_degenerate,
    canonical=_scribes_canonical,
)

# --- divisibility counts


def _count_divisible(p: Params) -> Fraction:
    n, a, b = p["n"], p["a"], p["b"]
    return Fraction(n // a + n // b - n // math.lcm(a, b))


_DIVISIBLE_DIRECT = _Template(
    "divisibility_count",
    "direct",
    sample=lambda r: {"n": _int(r, 1000, 10**9), "a": _int(r, 2, 60), "b": _int(r, 2, 60)},
    render=lambda p: f"How many integers between 1 and {p['n']} inclusive are divisible by {p['a']} or by {p['b']}?",
    pattern=re.compile(
        r"How many integers between 1 and (?P<n>\d+) inclusive are divisible by (?P<a>\d+) or by (?P<b>\d+)\?"
    ),
    read=_ints,
    solve=_count_divisible,
    degenerate=_pair_degenerate,
    canonical=_sorted_pair,
)

_TICKETS_WORD = _Template(
    "divisibility_count",
    "word",
    sample=lambda r: {"n": _int(r, 1000, 50000), "k": _int(r, 3, 12)},
    render=lambda p: (
        f"A ticket machine prints tickets numbered 1 to {p['n']}. A ticket is lucky when the sum of "
        f"the digits of its number is divisible by {p['k']}. How many lucky tickets does the machine print?"
    ),
    pattern=re.compile(
        r"A ticket machine prints tickets numbered 1 to (?P<n>\d+)\. A ticket is lucky when the sum of "
        r"the digits of its number is divisible by (?P<k>\d+)\. How many lucky tickets does the machine print\?"
    ),
    read=_ints,
    solve=lambda p: Fraction(_count_digit_sum_divisible(p["n"], p["k"])),
    degenerate=lambda p: None if p["k"] >= 2 and 1 <= p["n"] <= 10**6 else "out_of_range",
)

_TEMPLATES: dict[tuple[str, str], _Template] = {
    (t.type, t.structure): t
    for t in (
        _MODULAR_DIRECT,
        _MODULAR_WORD,
        _LINEAR_DIRECT,
        _LINEAR_WORD,
        _GCD_DIRECT,
        _LCM_WORD,
        _BINOMIAL_DIRECT,
        _COMMITTEE_WORD,
        _GEOMETRIC_DIRECT,
        _THEATRE_WORD,
        _FRACTION_DIRECT,
        _TANK_WORD,
        _BASE_DIRECT,
        _SCRIBES_WORD,
        _DIVISIBLE_DIRECT,
        _TICKETS_WORD,
    )
}
assert tuple(_TEMPLATES) == RECIPES


# ------------------------------------------------------------------------------- public tasks


def task_id_for(public_input: Mapping) -> str:
    """Stable id: a digest of the canonical JSON of the public input."""
    return "tir-" + canonical_digest(dict(public_input))[:32]


def _normalize_text(text: str) -> str:
    return " ".join(text.split())


def _make_sample(template: _Template, params: Params, answer: Fraction) -> DataSample:
    public_input = {"problem": template.render(params), "instructions": INSTRUCTIONS}
    metadata = {"type": template.type, "structure": template.structure}
    task = PublicTask(task_id_for(public_input), public_input, metadata)
    return DataSample(task, {"answer": format_exact(answer)})


def _make_raw_sample(template: _Template, params: Params) -> DataSample:
    """A generated candidate; a degenerate draw keeps its text and gets ``answer: None`` (``clean`` drops it)."""
    reason = template.degenerate(params)
    if reason is None:
        return _make_sample(template, params, template.solve(params))
    sample = _make_sample(template, params, Fraction(0))
    return DataSample(sample.task, {"answer": None, "degenerate": reason})


def _template_of(task: PublicTask) -> Optional[_Template]:
    meta = task.metadata if isinstance(task.metadata, dict) else {}
    return _TEMPLATES.get((meta.get("type"), meta.get("structure")))


def _problem_of(task: PublicTask) -> Optional[str]:
    data = task.input
    if not isinstance(data, dict) or set(data) != {"problem", "instructions"}:
        return None
    if data["instructions"] != INSTRUCTIONS or not isinstance(data["problem"], str):
        return None
    return _normalize_text(data["problem"])


def _too_large(params: Params) -> bool:
    return any(isinstance(v, int) and len(str(abs(v))) > _MAX_OPERAND_DIGITS for v in params.values())


def parse_task(task: PublicTask) -> Optional[tuple[str, str, Params]]:
    """``(type, structure, params)`` read back from a public task's text, or None.

    Uses only public fields, so a calibrator (which never sees references) may call it.
    """
    template, text = _template_of(task), _problem_of(task)
    if template is None or text is None:
        return None
    params = template.parse(text)
    if params is None or _too_large(params) or template.degenerate(params):
        return None
    return template.type, template.structure, template.canonical(params)


def solve_task(task: PublicTask) -> Optional[Fraction]:
    """The exact answer of a public task, recomputed from its text (None if it does not parse)."""
    parsed = parse_task(task)
    if parsed is None:
        return None
    kind, structure, params = parsed
    return _TEMPLATES[(kind, structure)].solve(params)


def _reference_value(reference: Any) -> Optional[Fraction]:
    if not isinstance(reference, dict) or not isinstance(reference.get("answer"), str):
        return None
    try:
        return Fraction(reference["answer"])
    except (ValueError, ZeroDivisionError):
        return None


# -------------------------------------------------------------------------------------- seeding


def _stream_entropy(seed: int, kind: str, structure: str) -> int:
    payload = canonical_json([GENERATOR_VERSION, int(seed), kind, structure])
    return int.from_bytes(hashlib.sha256(payload).digest(), "big")


def _candidate_rng(seed: int, batch_index: int, index: int) -> tuple[_Template, np.random.Generator]:
    kind, structure = RECIPES[index % len(RECIPES)]
    sequence = np.random.SeedSequence(
        _stream_entropy(seed, kind, structure), spawn_key=(int(batch_index), index // len(RECIPES))
    )
    return _TEMPLATES[(kind, structure)], np.random.Generator(np.random.PCG64(sequence))


def _tie_breaker(seed: int, task_id: str) -> str:
    return hashlib.sha256(canonical_json([GENERATOR_VERSION, "order", int(seed), task_id])).hexdigest()


# ---------------------------------------------------------------------------------------- recipe


def _positive_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecipeError(f"tir: {name} must be an integer >= {minimum}, got {value!r}")
    return value


class TirRecipe:
    """The TIR math recipe; see docs/recipes.md#tir-example for its rules."""

    def __init__(
        self,
        candidate_count: int = 128,
        minimum_one_pass: int = 0,
        maximum_per_recipe: Optional[int] = None,
        minimum_per_type: int = 1,
        max_answer_digits: int = 12,
    ) -> None:
        self.candidate_count = _positive_int("candidate_count", candidate_count, 1)
        self.minimum_one_pass = _positive_int("minimum_one_pass", minimum_one_pass, 0)
        self.maximum_per_recipe = (
            None if maximum_per_recipe is None else _positive_int("maximum_per_recipe", maximum_per_recipe, 1)
        )
        self.minimum_per_type = _positive_int("minimum_per_type", minimum_per_type, 0)
        self.max_answer_digits = _positive_int("max_answer_digits", max_answer_digits, 1)

    # --- generation

    def generation_shards(self, context: GenerationContext, shard_size: int) -> list[GenerationShard]:
        size = _positive_int("shard_size", shard_size, 1)
        return [
            GenerationShard(start, min(start + size, self.candidate_count))
            for start in range(0, self.candidate_count, size)
        ]

    def generate_shard(self, context: GenerationContext, shard: GenerationShard) -> Iterator[DataSample]:
        if not 0 <= shard.start <= shard.stop <= self.candidate_count:
            raise RecipeError(f"tir: shard [{shard.start}, {shard.stop}) outside [0, {self.candidate_count})")
        for index in range(shard.start, shard.stop):
            template, rng = _candidate_rng(context.seed, context.batch_index, index)
            yield _make_raw_sample(template, template.sample(rng))

    def generate(self, context: GenerationContext) -> Iterator[DataSample]:
        for shard in self.generation_shards(context, 64):
            yield from self.generate_shard(context, shard)

    # --- cleaning, scoring, training view

    def clean(self, sample: DataSample) -> Optional[DataSample]:
        parsed = parse_task(sample.task)
        if parsed is None:
            return None
        template, params = _TEMPLATES[parsed[:2]], parsed[2]
        answer = template.solve(params)
        if _reference_value(sample.reference) != answer or _answer_digits(answer) > self.max_answer_digits:
            return None
        cleaned = _make_sample(template, params, answer)
        return None if _appears_in(answer, cleaned.task.input["problem"]) else cleaned

    def score(self, sample: DataSample, response: Any) -> float:
        reference = _reference_value(sample.reference)
        if reference is None:
            raise RecipeError(f"tir: task {sample.task_id} has a malformed reference")
        if not isinstance(response, dict) or not isinstance(response.get("text"), str):
            return 0.0
        return score_text(response["text"], reference)

    def training_row(self, sample: DataSample) -> dict:
        problem = sample.task.input["problem"]
        return {
            "task_id": sample.task_id,
            "messages": [{"role": "user", "content": f"{problem}\n\n{INSTRUCTIONS}"}],
            "answer": f"\\boxed{{{sample.reference['answer']}}}",
        }

    def source_files(self) -> list[Path]:
        return [Path(__file__).resolve()]

    # --- selection

    def selection_policy(self, context: SelectionContext, calibrated: bool) -> SelectionPolicy:
        self._check_feasible(context, calibrated)
        return SelectionPolicy(
            minimum_per_group={kind: self.minimum_per_type for kind in TYPES},
            maximum_per_bucket=self.maximum_per_recipe,
        )

    def rank(
        self, sample: DataSample, scores: Sequence[Optional[float]], context: SelectionContext
    ) -> Optional[RankedCandidate]:
        outcome = _outcome(scores) if context.calibrated else "uncalibrated"
        if outcome is None:
            return None
        kind, structure = sample.task.metadata["type"], sample.task.metadata["structure"]
        return RankedCandidate(
            task_id=sample.task_id,
            priority=1.0 if outcome == "both_wrong" else 0.0,
            tie_breaker=_tie_breaker(context.seed, sample.task_id),
            group=kind,
            bucket=f"{kind}/{structure}",
            metadata={"outcome": outcome},
        )

    def finalize_selection(
        self, selected: list[RankedCandidate], eligible_count: int, context: SelectionContext
    ) -> tuple[list[str], dict]:
        ids = [c.task_id for c in sorted(selected, key=ranked_sort_key)]
        if len(set(ids)) != len(ids):
            raise RecipeError("tir: a task was selected twice")
        stats = self._selection_stats(selected, eligible_count, context)
        self._check_caps(stats)
        problems = self._shortfalls(stats, context)
        if problems:
            raise InsufficientDataError("tir: " + "; ".join(problems))
        return ids, stats

    def select(
        self,
        samples: Sequence[DataSample],
        scores: Mapping[str, list[Optional[float]]],
        context: SelectionContext,
    ) -> list[str]:
        policy = self.selection_policy(context, context.calibrated)
        ranked = [c for c in (self.rank(s, list(scores.get(s.task_id) or []), context) for s in samples) if c]
        ranked.sort(key=ranked_sort_key)
        chosen = select_ranked_candidates(ranked, policy, context.target_count)
        ids, _ = self.finalize_selection(chosen, len(ranked), context)
        return ids

    # --- selection helpers

    def _check_feasible(self, context: SelectionContext, calibrated: bool) -> None:
        target = context.target_count
        if calibrated and context.repeats != REPEATS:
            raise RecipeError(f"tir: calibration needs exactly {REPEATS} repeats, got {context.repeats}")
        if self.minimum_per_type * len(TYPES) > target:
            raise RecipeError(f"tir: minimum_per_type × {len(TYPES)} types exceeds target_count {target}")
        if self.maximum_per_recipe is not None and self.maximum_per_recipe * len(RECIPES) < target:
            raise RecipeError(f"tir: maximum_per_recipe × {len(RECIPES)} recipes is below target_count {target}")
        if self.maximum_per_recipe is not None and self.minimum_per_type > 2 * self.maximum_per_recipe:
            raise RecipeError("tir: minimum_per_type exceeds the two recipes' caps of a type")
        if calibrated and self.minimum_one_pass > target:
            raise RecipeError(f"tir: minimum_one_pass {self.minimum_one_pass} exceeds target_count {target}")

    def _selection_stats(
        self, selected: Sequence[RankedCandidate], eligible_count: int, context: SelectionContext
    ) -> dict:
        per_type = {kind: 0 for kind in TYPES}
        per_recipe = {f"{k}/{s}": 0 for k, s in RECIPES}
        outcomes: dict[str, int] = {}
        for c in selected:
            per_type[c.group] = per_type.get(c.group, 0) + 1
            per_recipe[c.bucket] = per_recipe.get(c.bucket, 0) + 1
            outcome = c.metadata.get("outcome", "unknown")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return {
            "method": "tir-ranked-v1",
            "difficulty_calibrated": bool(context.calibrated),
            "eligible": int(eligible_count),
            "selected": len(selected),
            "target_count": context.target_count,
            "outcomes": dict(sorted(outcomes.items())),
            "per_type": per_type,
            "per_recipe": per_recipe,
            "minimum_per_type": self.minimum_per_type,
            "maximum_per_recipe": self.maximum_per_recipe,
            "minimum_one_pass": self.minimum_one_pass if context.calibrated else None,
        }

    def _check_caps(self, stats: dict) -> None:
        cap = self.maximum_per_recipe
        over = [bucket for bucket, n in stats["per_recipe"].items() if cap is not None and n > cap]
        if over:
            raise RecipeError(f"tir: selection exceeds maximum_per_recipe={cap} in {over}")

    def _shortfalls(self, stats: dict, context: SelectionContext) -> list[str]:
        problems = []
        if stats["selected"] < context.target_count:
            problems.append(
                f"{stats['selected']} of {context.target_count} tasks selectable "
                f"({stats['eligible']} eligible, maximum_per_recipe={self.maximum_per_recipe})"
            )
        short = [kind for kind, n in stats["per_type"].items() if n < self.minimum_per_type]
        if short:
            problems.append(f"types below minimum_per_type={self.minimum_per_type}: {short}")
        one_pass = stats["outcomes"].get("one_pass", 0)
        if context.calibrated and one_pass < self.minimum_one_pass:
            problems.append(f"{one_pass} one-pass tasks selected, minimum_one_pass={self.minimum_one_pass}")
        return problems


def _outcome(scores: Sequence[Optional[float]]) -> Optional[str]:
    """``one_pass`` / ``both_wrong`` for a complete two-attempt calibration, else None (ineligible)."""
    if len(scores) != REPEATS or any(s is None for s in scores):
        return None
    correct = sum(1 for s in scores if s >= 1.0)
    return {0: "both_wrong", 1: "one_pass"}.get(correct)


_PARAMS = ("candidate_count", "minimum_one_pass", "maximum_per_recipe", "minimum_per_type", "max_answer_digits")


def create_recipe(**params: Any) -> TirRecipe:
    """Factory for ``recipe: corpus_assets.domain.recipe.examples.tir:create_recipe``."""
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise RecipeError(f"tir: unknown params {unknown}; known: {list(_PARAMS)}")
    return TirRecipe(**params)
