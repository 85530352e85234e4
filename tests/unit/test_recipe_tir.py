"""The TIR example recipe (issue 8, seed 002): scorer, generation, cleaning, selection, calibrators."""

from __future__ import annotations

import asyncio
import collections
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest

from corpus_assets.domain.recipe.examples import tir
from corpus_assets.domain.recipe.examples.tir import (
    INSTRUCTIONS,
    RECIPES,
    STRUCTURES,
    TYPES,
    create_recipe,
    task_id_for,
)
from corpus_assets.domain.recipe.examples.tir_calibration import (
    MISSING_FROM_REPORT,
    RecordedReportError,
    recorded_responses,
    rule_based_solver,
    task_set_digest,
)
from corpus_assets.domain.recipe.protocol import (
    CalibrationContext,
    DataSample,
    GenerationContext,
    GenerationShard,
    InsufficientDataError,
    PublicTask,
    RecipeError,
    SelectionContext,
    check_attempts,
    ranked_sort_key,
    select_ranked_candidates,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "recipes" / "tir_math.yaml"


def gen_context(seed: int = 42, batch_index: int = 0) -> GenerationContext:
    return GenerationContext(seed=seed, batch_index=batch_index, target_count=64, purpose="joint")


def sel_context(target: int, calibrated: bool = True, seed: int = 42, repeats: int = 2) -> SelectionContext:
    return SelectionContext(
        seed=seed, target_count=target, purpose="joint", calibrated=calibrated, repeats=repeats if calibrated else 0
    )


def cleaned_pool(candidate_count: int = 320, seed: int = 42, batch_index: int = 0) -> list[DataSample]:
    recipe = create_recipe(candidate_count=candidate_count)
    out = [recipe.clean(s) for s in recipe.generate(gen_context(seed, batch_index))]
    return [s for s in out if s is not None]


@pytest.fixture(scope="module")
def pool() -> list[DataSample]:
    return cleaned_pool()


def by_recipe(samples: list[DataSample]) -> dict[tuple[str, str], list[DataSample]]:
    out: dict[tuple[str, str], list[DataSample]] = collections.defaultdict(list)
    for s in samples:
        out[(s.task.metadata["type"], s.task.metadata["structure"])].append(s)
    return out


def make_sample(problem: str, kind: str, structure: str, answer: str | None) -> DataSample:
    public_input = {"problem": problem, "instructions": INSTRUCTIONS}
    task = PublicTask(task_id_for(public_input), public_input, {"type": kind, "structure": structure})
    return DataSample(task, {"answer": answer})


# ------------------------------------------------------------------------------------- scorer

SCORER_TABLE = [
    ("integer", "so \\boxed{12}", "12", 1.0),
    ("negative integer", "\\boxed{-12}", "-12", 1.0),
    ("integer with spaces", "\\boxed{ 12 }", "12", 1.0),
    ("wrong integer", "\\boxed{13}", "12", 0.0),
    ("decimal equal to integer", "\\boxed{12.0}", "12", 1.0),
    ("decimal exactly 3/4", "\\boxed{0.75}", "3/4", 1.0),
    ("decimal not exactly 1/3", "\\boxed{0.333}", "1/3", 0.0),
    ("fraction string", "\\boxed{3/4}", "3/4", 1.0),
    ("unreduced fraction string", "\\boxed{6/8}", "3/4", 1.0),
    ("negative fraction string", "\\boxed{-3/4}", "-3/4", 1.0),
    ("latex frac", "\\boxed{\\frac{3}{4}}", "3/4", 1.0),
    ("latex dfrac with negative numerator", "\\boxed{\\dfrac{-3}{4}}", "-3/4", 1.0),
    ("latex frac with outer sign", "\\boxed{-\\frac{3}{4}}", "-3/4", 1.0),
    ("latex sign matters", "\\boxed{\\dfrac{3}{4}}", "-3/4", 0.0),
    ("last boxed wins (right)", "first \\boxed{1}, finally \\boxed{3}", "3", 1.0),
    ("last boxed wins (wrong)", "first \\boxed{3}, finally \\boxed{1}", "3", 0.0),
    ("unparseable last boxed is wrong", "\\boxed{3} then \\boxed{three}", "3", 0.0),
    ("unclosed trailing boxed ignored", "\\boxed{3} and \\boxed{4", "3", 1.0),
    ("no expression evaluation", "\\boxed{1+2}", "3", 0.0),
    ("no function evaluation", "\\boxed{\\sqrt{9}}", "3", 0.0),
    ("zero denominator", "\\boxed{3/0}", "3", 0.0),
    ("no boxed answer", "the answer is 3", "3", 0.0),
    ("empty boxed", "\\boxed{}", "3", 0.0),
]


@pytest.mark.parametrize("text,answer,expected", [row[1:] for row in SCORER_TABLE], ids=[r[0] for r in SCORER_TABLE])
def test_scorer_table(text, answer, expected):
    recipe = create_recipe()
    sample = make_sample("Find x.", "linear_equation", "direct", answer)
    assert recipe.score(sample, {"text": text}) == expected


@pytest.mark.parametrize("response", ["\\boxed{3}", None, {"content": "\\boxed{3}"}, {"text": 3}])
def test_scorer_needs_an_object_with_text(response):
    sample = make_sample("Find x.", "linear_equation", "direct", "3")
    assert create_recipe().score(sample, response) == 0.0


# ------------------------------------------------------------- types, structures, exact answers


def test_every_type_and_structure_is_generated(pool):
    groups = by_recipe(pool)
    assert set(groups) == set(RECIPES)
    assert len(TYPES) == 8 and len(STRUCTURES) == 2 and len(RECIPES) == 16
    for kind in TYPES:  # the two structures of a type read differently
        direct, word = groups[(kind, "direct")][0], groups[(kind, "word")][0]
        assert direct.task.input["problem"].split()[:3] != word.task.input["problem"].split()[:3]


def _nums(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


def _horner(digits: str, base: int) -> int:
    value = 0
    for ch in digits:
        value = value * base + "0123456789ABCDEF".index(ch)
    return value


def _linear(problem: str) -> Fraction:
    lhs, rhs = problem.removeprefix("Solve for x: ").rstrip(".").split(" = ")
    expr = re.sub(r"(\d)x", r"\1*x", f"({lhs}) - ({rhs})")
    f0, f1 = (eval(expr, {"x": Fraction(v)}) for v in (0, 1))  # noqa: S307 - our own test text
    return -Fraction(f0) / (f1 - f0)


def _fraction_expression(problem: str) -> Fraction:
    expr = problem.removeprefix("Compute ").removesuffix(" exactly.")
    return eval(re.sub(r"(\d+)/(\d+)", r"Fraction(\1, \2)", expr), {"Fraction": Fraction})  # noqa: S307


def _divisible_or(n: int, a: int, b: int) -> int:
    period = math.lcm(a, b)
    hits = [i for i in range(1, period + 1) if i % a == 0 or i % b == 0]
    return (n // period) * len(hits) + sum(1 for i in hits if i <= n % period)


def independent_answer(kind: str, structure: str, problem: str) -> Fraction:
    """Solve the problem from its text, without the recipe's templates or solvers."""
    n = _nums(problem)
    if kind == "modular_arithmetic":
        a, e, m = (n[0], n[1], n[2]) if structure == "direct" else (n[0], n[2], n[1])
        return Fraction(pow(a, e, m))
    if kind == "linear_equation":
        return _linear(problem) if structure == "direct" else Fraction(-n[3] - n[1], n[0] - n[2])
    if kind == "gcd_lcm":
        return Fraction(math.gcd(n[0], n[1]) if structure == "direct" else math.lcm(n[0], n[1]))
    if kind == "combinatorics":
        return Fraction(math.comb(n[0], n[1]) if structure == "direct" else math.comb(n[0] - 1, n[1] - 1))
    if kind == "series_sum" and structure == "direct":
        terms, first = n[0], n[1]
        ratio = Fraction(problem.split("common ratio ")[1].rstrip("."))
        return first * (1 - ratio**terms) / (1 - ratio)
    if kind == "series_sum":
        return Fraction(sum(n[1] + i * n[2] for i in range(n[0])))
    if kind == "fraction_arithmetic" and structure == "direct":
        return _fraction_expression(problem)
    if kind == "fraction_arithmetic":
        f = [Fraction(int(a), int(b)) for a, b in re.findall(r"(\d+)/(\d+)", problem)]
        return f[0] - f[1] + f[2]
    if kind == "base_conversion" and structure == "direct":
        base, digits = re.search(r"base-(\d+) number (\w+)", problem).groups()
        return Fraction(_horner(digits, int(base)))
    if kind == "base_conversion":
        base, x, y = re.search(r"base (\d+)\. Its scribes add the numbers (\d+) and (\d+)", problem).groups()
        return Fraction(_horner(x, int(base)) + _horner(y, int(base)))
    if structure == "direct":
        return Fraction(_divisible_or(n[1], n[2], n[3]))
    return Fraction(sum(1 for i in range(1, n[1] + 1) if sum(map(int, str(i))) % n[2] == 0))


def test_references_are_exact_answers_of_the_problem_text(pool):
    checked = collections.Counter()
    for s in pool:
        kind, structure = s.task.metadata["type"], s.task.metadata["structure"]
        expected = independent_answer(kind, structure, s.task.input["problem"])
        assert Fraction(s.reference["answer"]) == expected, s.task.input["problem"]
        assert s.reference["answer"] == tir.format_exact(expected)  # canonical exact string
        checked[(kind, structure)] += 1
    assert set(checked) == set(RECIPES) and min(checked.values()) >= 5
    assert any("/" in s.reference["answer"] for s in pool)  # some answers are proper fractions


def test_no_answer_in_public_fields(pool):
    for s in pool:
        public = {"task_id": s.task_id, "input": s.task.input, "metadata": s.task.metadata}
        text = json.dumps(public)
        answer = s.reference["answer"]
        assert set(s.task.input) == {"problem", "instructions"}
        assert set(s.task.metadata) == {"type", "structure"}
        assert '"answer"' not in text  # no field of that name
        assert all("\\boxed{" + answer not in v for v in s.task.input.values())
        tokens = set(re.findall(r"\d+/\d+|\d+", s.task.input["problem"]))
        assert answer.lstrip("-") not in tokens


def test_training_row_is_the_public_problem_and_the_exact_boxed_answer(pool):
    recipe = create_recipe()
    for s in pool[:40]:
        row = recipe.training_row(s)
        assert set(row) == {"task_id", "messages", "answer"}
        assert row["task_id"] == s.task_id
        assert row["messages"] == [{"role": "user", "content": f"{s.task.input['problem']}\n\n{INSTRUCTIONS}"}]
        assert row["answer"] == "\\boxed{" + s.reference["answer"] + "}"
        assert recipe.score(s, {"text": row["answer"]}) == 1.0
        json.dumps(row)


# ------------------------------------------------------------------- stable ids and sharding


def _shard_union(recipe, context, shard_size: int, reverse: bool = False) -> list[tuple[str, str]]:
    shards = recipe.generation_shards(context, shard_size)
    assert shards[0].start == 0 and shards[-1].stop == recipe.candidate_count
    assert all(a.stop == b.start for a, b in zip(shards, shards[1:]))
    out = {}
    for shard in reversed(shards) if reverse else shards:
        for i, s in enumerate(recipe.generate_shard(context, shard)):
            out[shard.start + i] = (s.task_id, json.dumps(s.reference))
    return [out[i] for i in sorted(out)]


def test_generation_is_independent_of_shard_split_and_worker_count():
    recipe = create_recipe(candidate_count=100)
    context = gen_context()
    whole = [(s.task_id, json.dumps(s.reference)) for s in recipe.generate(context)]
    assert len(whole) == 100
    for size in (1, 7, 16, 64, 1000):
        assert _shard_union(recipe, context, size) == whole
    assert _shard_union(recipe, context, 13, reverse=True) == whole
    # a fresh instance (another worker) gives the same tasks
    again = [(s.task_id, json.dumps(s.reference)) for s in create_recipe(candidate_count=100).generate(context)]
    assert again == whole
    # a longer batch extends the same stream: its first 100 candidates are these
    longer = [(s.task_id, json.dumps(s.reference)) for s in create_recipe(candidate_count=160).generate(context)]
    assert longer[:100] == whole


def test_task_ids_are_content_digests_and_change_with_seed_and_batch(pool):
    for s in pool:
        assert s.task_id == task_id_for(s.task.input)
    ids = {s.task_id for s in pool}
    assert len(ids) == len(pool)
    assert not ids & {s.task_id for s in cleaned_pool(seed=43)}
    assert not ids & {s.task_id for s in cleaned_pool(batch_index=1)}


def test_generator_output_is_pinned():
    """Guards against silent generator drift (numpy stream or template changes need a new GENERATOR_VERSION)."""
    recipe = create_recipe(candidate_count=16)
    first = list(recipe.generate(gen_context()))
    assert first[0].task.input["problem"] == "What is the remainder when 85^824583 is divided by 8917?"
    assert first[0].reference == {"answer": "1479"}
    assert first[4].task.input["problem"] == "Find the greatest common divisor of 73780 and 67270."


def test_sharded_generation_in_threads_matches():
    from concurrent.futures import ThreadPoolExecutor

    recipe = create_recipe(candidate_count=96)
    context = gen_context()
    whole = [s.task_id for s in recipe.generate(context)]
    for workers in (1, 4):
        shards = recipe.generation_shards(context, 10)
        with ThreadPoolExecutor(workers) as pool_:
            parts = list(pool_.map(lambda sh: [s.task_id for s in create_recipe(candidate_count=96).generate_shard(context, sh)], shards))
        assert [t for part in parts for t in part] == whole


def test_shard_outside_the_batch_is_refused():
    with pytest.raises(RecipeError):
        list(create_recipe(candidate_count=10).generate_shard(gen_context(), GenerationShard(5, 11)))


# ------------------------------------------------------------------------------------ cleaning


def test_clean_canonicalizes_and_drops_degenerate_or_malformed():
    recipe = create_recipe()
    gcd = make_sample("Find the greatest common divisor of 1071 and 462.", "gcd_lcm", "direct", "21")
    cleaned = recipe.clean(gcd)
    assert cleaned.task.input["problem"] == "Find the greatest common divisor of 462 and 1071."
    assert cleaned.task_id == task_id_for(cleaned.task.input) != gcd.task_id
    assert recipe.clean(cleaned) == cleaned  # idempotent
    binom = recipe.clean(make_sample("Compute the binomial coefficient C(20, 17).", "combinatorics", "direct", "1140"))
    assert binom.task.input["problem"] == "Compute the binomial coefficient C(20, 3)."
    spaced = recipe.clean(make_sample("Find  the greatest common\ndivisor of 462 and 1071. ", "gcd_lcm", "direct", "21"))
    assert spaced == cleaned  # whitespace-normalized: an exact duplicate for the executor's dedup

    dropped = {
        "answer among the problem's numbers": make_sample(
            "Find the greatest common divisor of 12 and 84.", "gcd_lcm", "direct", "12"
        ),
        "no unique solution": make_sample("Solve for x: 3x + 1 = 3x + 2.", "linear_equation", "direct", "0"),
        "answer too large": make_sample(
            "Compute the binomial coefficient C(60, 30).", "combinatorics", "direct", str(math.comb(60, 30))
        ),
        "wrong reference": make_sample("Find the greatest common divisor of 462 and 1071.", "gcd_lcm", "direct", "7"),
        "reference missing": make_sample("Find the greatest common divisor of 462 and 1071.", "gcd_lcm", "direct", None),
        "text does not match its template": make_sample("What is gcd(462, 1071)?", "gcd_lcm", "direct", "21"),
        "unknown type": make_sample("Find the greatest common divisor of 462 and 1071.", "algebra", "direct", "21"),
        "tank overflows": make_sample(
            "A water tank is 3/4 full. First, 1/8 of the tank's capacity is drained; then 1/2 of the capacity "
            "is added. What fraction of the tank is full now?",
            "fraction_arithmetic",
            "word",
            "9/8",
        ),
        "equal operands": make_sample(
            "How many integers between 1 and 1000 inclusive are divisible by 7 or by 7?",
            "divisibility_count",
            "direct",
            "142",
        ),
        "invalid digit for the base": make_sample("Convert the base-3 number 1213 to base 10.", "base_conversion", "direct", "49"),
    }
    for why, sample in dropped.items():
        assert recipe.clean(sample) is None, why
    extra_field = DataSample(
        PublicTask(gcd.task_id, {**gcd.task.input, "hint": "21"}, dict(gcd.task.metadata)), gcd.reference
    )
    assert recipe.clean(extra_field) is None
    assert create_recipe(max_answer_digits=3).clean(gcd) is not None
    assert create_recipe(max_answer_digits=1).clean(gcd) is None


def test_degenerate_draws_are_generated_then_cleaned_away():
    recipe = create_recipe(candidate_count=640)
    raw = list(recipe.generate(gen_context()))
    degenerate = [s for s in raw if s.reference["answer"] is None]
    assert degenerate and all(recipe.clean(s) is None for s in degenerate)
    kept = [recipe.clean(s) for s in raw]
    assert 0.6 * len(raw) < sum(k is not None for k in kept) < len(raw)


def test_unknown_params_are_refused():
    with pytest.raises(RecipeError, match="unknown params"):
        create_recipe(candidate_cnt=3)
    with pytest.raises(RecipeError):
        create_recipe(candidate_count=0)


# ----------------------------------------------------------------------------------- selection

OUTCOMES = {"one": [1.0, 0.0], "one_b": [0.0, 1.0], "wrong": [0.0, 0.0], "right": [1.0, 1.0], "incomplete": [None, 1.0]}


def scored_pool(pool, per_recipe: int, pattern) -> tuple[list[DataSample], dict[str, list]]:
    """``per_recipe`` samples of every recipe; ``pattern(kind, structure, i)`` names each one's outcome."""
    samples, scores = [], {}
    for (kind, structure), group in sorted(by_recipe(pool).items()):
        for i, s in enumerate(group[:per_recipe]):
            samples.append(s)
            outcome = pattern(kind, structure, i)
            if outcome != "absent":
                scores[s.task_id] = list(OUTCOMES[outcome])
    return samples, scores


def outcome_of(scores, task_id):
    return sum(1 for v in scores[task_id] if v == 1.0)


def test_selection_drops_incomplete_and_always_correct(pool):
    cycle = ["one", "wrong", "right", "incomplete", "absent", "one_b"]
    samples, scores = scored_pool(pool, 6, lambda k, s, i: cycle[i])
    recipe = create_recipe()
    eligible = {t for t, v in scores.items() if None not in v and sum(x == 1.0 for x in v) < 2}
    assert len(eligible) == 48
    ids = recipe.select(samples, scores, sel_context(48))
    assert set(ids) == eligible and len(ids) == len(set(ids)) == 48
    short = {t: v[:1] for t, v in scores.items()}  # one repeat of two: incomplete
    with pytest.raises(InsufficientDataError):
        recipe.select(samples, short, sel_context(8))
    with pytest.raises(InsufficientDataError, match="49"):
        recipe.select(samples, scores, sel_context(49))


def test_selection_prefers_one_correct_then_fills_with_both_wrong(pool):
    samples, scores = scored_pool(pool, 6, lambda k, s, i: ["one", "one_b", "wrong", "wrong", "one", "right"][i])
    recipe = create_recipe()
    ids = recipe.select(samples, scores, sel_context(40))
    assert all(outcome_of(scores, t) == 1 for t in ids)  # 48 one-pass available
    ids = recipe.select(samples, scores, sel_context(60))
    counts = collections.Counter(outcome_of(scores, t) for t in ids)
    assert counts == {1: 48, 0: 12}


def test_selection_meets_type_coverage_before_rank(pool):
    starved = "combinatorics"
    samples, scores = scored_pool(pool, 6, lambda k, s, i: "wrong" if k == starved else "one")
    ids = create_recipe(minimum_per_type=2).select(samples, scores, sel_context(16))
    kinds = collections.Counter(next(s for s in samples if s.task_id == t).task.metadata["type"] for t in ids)
    assert kinds[starved] == 2 and min(kinds[k] for k in TYPES) >= 2
    # without a minimum the lower-ranked both-wrong tasks are not needed
    ids = create_recipe(minimum_per_type=0).select(samples, scores, sel_context(16))
    assert all(outcome_of(scores, t) == 1 for t in ids)
    # a type with no eligible task: ask for another batch
    samples, scores = scored_pool(pool, 6, lambda k, s, i: "right" if k == starved else "one")
    with pytest.raises(InsufficientDataError, match=starved):
        create_recipe(minimum_per_type=1).select(samples, scores, sel_context(16))


def test_selection_respects_per_recipe_caps(pool):
    samples, scores = scored_pool(pool, 6, lambda k, s, i: "one" if (k, s) == RECIPES[0] else "wrong")
    recipe = create_recipe(maximum_per_recipe=2)
    ids = recipe.select(samples, scores, sel_context(32))
    buckets = collections.Counter(
        "/".join(next(s for s in samples if s.task_id == t).task.metadata.values()) for t in ids
    )
    assert set(buckets.values()) == {2} and len(buckets) == 16
    with pytest.raises(RecipeError, match="maximum_per_recipe"):  # 16 × 2 < 33: no batch can help
        recipe.select(samples, scores, sel_context(33))
    # caps bind on a thin pool (26 eligible, 18 within the caps): another batch is needed
    thin, thin_scores = scored_pool(pool, 6, lambda k, s, i: "wrong" if i == 0 or k == TYPES[0] else "right")
    assert len(create_recipe().select(thin, thin_scores, sel_context(20))) == 20
    with pytest.raises(InsufficientDataError, match="18 of 20"):
        create_recipe(maximum_per_recipe=2).select(thin, thin_scores, sel_context(20))


def test_selection_minimum_one_pass(pool):
    samples, scores = scored_pool(pool, 4, lambda k, s, i: "one" if i == 0 and k in TYPES[:5] else "wrong")
    assert sum(outcome_of(scores, t) == 1 for t in scores) == 10
    assert len(create_recipe(minimum_one_pass=10).select(samples, scores, sel_context(20))) == 20
    with pytest.raises(InsufficientDataError, match="minimum_one_pass=11"):
        create_recipe(minimum_one_pass=11).select(samples, scores, sel_context(20))
    with pytest.raises(RecipeError):
        create_recipe(minimum_one_pass=21).select(samples, scores, sel_context(20))


def test_selection_needs_two_repeats_when_calibrated(pool):
    samples, scores = scored_pool(pool, 2, lambda k, s, i: "one")
    with pytest.raises(RecipeError, match="2 repeats"):
        create_recipe().select(samples, scores, sel_context(8, repeats=3))


def test_ranked_path_equals_select_and_is_order_independent(pool):
    samples, scores = scored_pool(pool, 6, lambda k, s, i: ["one", "wrong", "right", "one_b", "wrong", "one"][i])
    recipe = create_recipe(minimum_per_type=3, maximum_per_recipe=4, minimum_one_pass=20)
    context = sel_context(40)
    policy = recipe.selection_policy(context, True)
    assert list(policy.minimum_per_group) == list(TYPES) and policy.maximum_per_bucket == 4
    ranked = sorted(
        (c for c in (recipe.rank(s, scores.get(s.task_id, []), context) for s in samples) if c), key=ranked_sort_key
    )
    assert all(c.group == c.bucket.split("/")[0] for c in ranked)
    ids, stats = recipe.finalize_selection(select_ranked_candidates(ranked, policy, 40), len(ranked), context)
    assert ids == recipe.select(samples, scores, context)
    assert ids == recipe.select(list(reversed(samples)), dict(reversed(list(scores.items()))), context)
    assert stats["difficulty_calibrated"] is True and stats["eligible"] == len(ranked) == 80
    assert stats["selected"] == 40 and sum(stats["outcomes"].values()) == 40
    assert stats["outcomes"]["one_pass"] >= 20 and min(stats["per_type"].values()) >= 3
    assert max(stats["per_recipe"].values()) <= 4
    json.dumps(stats)


def test_uncalibrated_selection_is_seeded_with_coverage_and_no_calibration_claim(pool):
    samples = [s for group in by_recipe(pool).values() for s in group[:5]]
    recipe = create_recipe(minimum_per_type=2, maximum_per_recipe=3)
    context = sel_context(32, calibrated=False)
    ids = recipe.select(samples, {}, context)
    assert len(ids) == 32 and ids == recipe.select(list(reversed(samples)), {}, context)
    assert ids != recipe.select(samples, {}, sel_context(32, calibrated=False, seed=7))
    ranked = sorted((recipe.rank(s, [], context) for s in samples), key=ranked_sort_key)
    _, stats = recipe.finalize_selection(
        select_ranked_candidates(ranked, recipe.selection_policy(context, False), 32), len(ranked), context
    )
    assert stats["difficulty_calibrated"] is False and stats["minimum_one_pass"] is None
    assert stats["outcomes"] == {"uncalibrated": 32} and "one_pass" not in json.dumps(stats["outcomes"])
    assert min(stats["per_type"].values()) >= 2 and max(stats["per_recipe"].values()) <= 3


# ---------------------------------------------------------------------------- recorded responses

IDENTITY = {
    "model_ref": "/models/tir-checkpoint-7",
    "harness_ref": "tir-harness-2",
    "backend_model_digest": "sha256:model",
    "verifier_digest": "sha256:verifier",
}


def write_report(path: Path, trial_id: str, responses: dict, **overrides) -> Path:
    """A report in the documented format; ``overrides`` replace header fields."""
    report = {
        **IDENTITY,
        "trial_id": trial_id,
        "task_set_digest": task_set_digest(list(responses)),
        "executable_digest": "sha256:exe",
        "responses": responses,
        **overrides,
    }
    path.write_text(json.dumps(report))
    return path


def calib(repeats: int = 2, batch_index: int = 0) -> CalibrationContext:
    return CalibrationContext(repeats=repeats, batch_index=batch_index, seed=42)


@pytest.fixture()
def report_tasks(pool) -> list[DataSample]:
    return pool[:6]


def two_reports(tmp_path, samples, **overrides) -> list[list[str]]:
    responses = {s.task_id: {"text": f"\\boxed{{{s.reference['answer']}}}", "score": 1.0} for s in samples}
    a = write_report(tmp_path / "r0.json", "trial-a", responses)
    b = write_report(tmp_path / "r1.json", **{"trial_id": "trial-b", "responses": responses, **overrides})
    return [[str(a), str(b)]]


def test_recorded_responses_replays_text_and_ignores_stored_scores(tmp_path, report_tasks):
    responses = {s.task_id: {"text": f"\\boxed{{{s.reference['answer']}}}"} for s in report_tasks[:4]}
    wrong = report_tasks[3]
    responses[wrong.task_id] = {"text": "\\boxed{1+2}", "score": 1.0}  # a stored score is not trusted
    responses[report_tasks[4].task_id] = {"failure_reason": "timeout"}
    responses["tir-not-asked-for"] = {"text": "\\boxed{0}"}
    paths = [
        [str(write_report(tmp_path / "a.json", "trial-a", responses)),
         str(write_report(tmp_path / "b.json", "trial-b", responses))]
    ]
    calibrator = recorded_responses(**IDENTITY, reports=paths, executable_digest="sha256:exe")
    tasks = [s.task for s in report_tasks]
    batch = asyncio.run(calibrator(tasks, calib()))
    got = check_attempts(batch.attempts, [t.task_id for t in tasks], 2)
    recipe = create_recipe()
    for s in report_tasks[:3]:
        assert got[(s.task_id, 0)].response == {"text": f"\\boxed{{{s.reference['answer']}}}"}
        assert recipe.score(s, got[(s.task_id, 1)].response) == 1.0
    assert got[(wrong.task_id, 0)].response == {"text": "\\boxed{1+2}"}
    assert recipe.score(wrong, got[(wrong.task_id, 0)].response) == 0.0
    assert got[(report_tasks[4].task_id, 0)].failure_reason == "report:timeout"
    missing = report_tasks[5].task_id
    assert {got[(missing, r)].failure_reason for r in (0, 1)} == {MISSING_FROM_REPORT}
    prov = batch.provenance
    assert {k: prov[k] for k in IDENTITY} == IDENTITY
    assert [r["trial_id"] for r in prov["reports"]] == ["trial-a", "trial-b"]
    import hashlib

    assert prov["reports"][0]["sha256"] == hashlib.sha256((tmp_path / "a.json").read_bytes()).hexdigest()
    json.dumps(prov)


@pytest.mark.parametrize("field", sorted(IDENTITY))
def test_recorded_responses_refuses_another_model_harness_or_digest(tmp_path, report_tasks, field):
    paths = two_reports(tmp_path, report_tasks, **{field: "something-else"})
    with pytest.raises(RecordedReportError, match=field):
        recorded_responses(**IDENTITY, reports=paths)
    ok = two_reports(tmp_path, report_tasks)
    with pytest.raises(RecordedReportError, match=field):
        recorded_responses(**{**IDENTITY, field: "expected-other"}, reports=ok)


def test_recorded_responses_refuses_one_trial_counted_twice(tmp_path, report_tasks):
    with pytest.raises(RecordedReportError, match="trial_id"):
        recorded_responses(**IDENTITY, reports=two_reports(tmp_path, report_tasks, trial_id="trial-a"))


def test_recorded_responses_refuses_different_task_sets(tmp_path, report_tasks):
    a = write_report(tmp_path / "a.json", "t1", {s.task_id: {"text": "\\boxed{1}"} for s in report_tasks})
    b = write_report(tmp_path / "b.json", "t2", {s.task_id: {"text": "\\boxed{1}"} for s in report_tasks[1:]})
    with pytest.raises(RecordedReportError, match="task_set_digest"):
        recorded_responses(**IDENTITY, reports=[[str(a), str(b)]])


def test_recorded_responses_refuses_inconsistent_or_malformed_reports(tmp_path, report_tasks):
    with pytest.raises(RecordedReportError, match="executable_digest"):
        recorded_responses(**IDENTITY, reports=two_reports(tmp_path, report_tasks, executable_digest="sha256:other"))
    with pytest.raises(RecordedReportError, match="executable_digest"):
        recorded_responses(**IDENTITY, reports=two_reports(tmp_path, report_tasks), executable_digest="sha256:x")
    with pytest.raises(RecordedReportError, match="does not match its responses"):
        recorded_responses(**IDENTITY, reports=two_reports(tmp_path, report_tasks, task_set_digest="sha256:lie"))
    with pytest.raises(RecordedReportError, match="cannot be read"):
        recorded_responses(**IDENTITY, reports=[[str(tmp_path / "nope.json")]])
    bad = write_report(tmp_path / "bad.json", "t", {report_tasks[0].task_id: {"score": 1.0}})
    with pytest.raises(RecordedReportError, match="text"):
        recorded_responses(**IDENTITY, reports=[[str(bad)]])
    with pytest.raises(RecordedReportError):
        recorded_responses(**IDENTITY, reports=[str(bad)])  # not a list of lists


def test_recorded_responses_refuses_unconfigured_batches_and_repeat_mismatch(tmp_path, report_tasks):
    calibrator = recorded_responses(**IDENTITY, reports=two_reports(tmp_path, report_tasks))
    tasks = [s.task for s in report_tasks]
    with pytest.raises(RecordedReportError, match="batch 1"):
        asyncio.run(calibrator(tasks, calib(batch_index=1)))
    with pytest.raises(RecordedReportError, match="repeat"):
        asyncio.run(calibrator(tasks, calib(repeats=3)))


# ----------------------------------------------------------------------------- rule-based solver


def run_solver(solver, samples, chunk: int | None = None):
    tasks = [s.task for s in samples]
    chunks = [tasks] if chunk is None else [tasks[i : i + chunk] for i in range(0, len(tasks), chunk)]
    attempts = []
    for part in chunks:
        batch = asyncio.run(solver(part, calib()))
        attempts.extend(batch.attempts)
    return check_attempts(attempts, [t.task_id for t in tasks], 2), batch.provenance


def outcomes_by_task(recipe, samples, attempts) -> dict[str, list]:
    return {
        s.task_id: [
            None if attempts[(s.task_id, r)].failure_reason else recipe.score(s, attempts[(s.task_id, r)].response)
            for r in range(2)
        ]
        for s in samples
    }


def test_rule_based_solver_is_deterministic_and_gives_every_outcome(pool):
    recipe = create_recipe()
    first, provenance = run_solver(rule_based_solver(seed=3), pool)
    again, _ = run_solver(rule_based_solver(seed=3), list(reversed(pool)), chunk=7)
    assert first == again
    other, _ = run_solver(rule_based_solver(seed=4), pool)
    assert other != first
    assert provenance["simulated"] is True and provenance["method"].startswith("tir-rule-based-solver")
    scores = outcomes_by_task(recipe, pool, first)
    kinds = collections.Counter(sum(v) for v in scores.values())
    assert kinds[0] > 10 and kinds[1] > 30 and kinds[2] > 30
    per_type = collections.defaultdict(list)  # mistakes depend on the type's error rate
    for s in pool:
        per_type[s.task.metadata["type"]].extend(scores[s.task_id])
    accuracy = {k: sum(v) / len(v) for k, v in per_type.items()}
    assert accuracy["modular_arithmetic"] > accuracy["divisibility_count"]
    texts = " ".join(a.response["text"] for a in first.values())
    assert "\\frac{" in texts and "\\dfrac{" in texts and re.search(r"\\boxed\{-?\d+/\d+\}", texts)


def test_rule_based_solver_error_and_failure_rates(pool):
    recipe = create_recipe()
    sample = pool[:64]
    right, _ = run_solver(rule_based_solver(error_rate=0.0), sample)
    assert all(v == [1.0, 1.0] for v in outcomes_by_task(recipe, sample, right).values())
    wrong, _ = run_solver(rule_based_solver(error_rate=1.0), sample)
    flat = [x for v in outcomes_by_task(recipe, sample, wrong).values() for x in v]
    assert sum(flat) <= 0.1 * len(flat)  # a mistake can coincide with the answer (gcd 1: product = lcm)
    only_gcd, _ = run_solver(rule_based_solver(error_rate=0.0, error_rates={"gcd_lcm": 1.0}), sample)
    for s in sample:
        if s.task.metadata["type"] != "gcd_lcm":
            assert recipe.score(s, only_gcd[(s.task_id, 0)].response) == 1.0
    failed, _ = run_solver(rule_based_solver(failure_rate=1.0), sample)
    assert {a.failure_reason for a in failed.values()} == {"simulated_timeout"}
    with pytest.raises(RecipeError):
        rule_based_solver(error_rates={"algebra": 0.5})
    with pytest.raises(RecipeError):
        rule_based_solver(error_rate=1.5)


def test_rule_based_solver_reports_unparseable_tasks_as_failures():
    task = PublicTask("tir-x", {"problem": "What is love?", "instructions": INSTRUCTIONS}, {"type": "gcd_lcm", "structure": "direct"})
    batch = asyncio.run(rule_based_solver()([task], calib()))
    assert {a.failure_reason for a in batch.attempts} == {"unparseable_task"}


# ------------------------------------------------------------------------------- example config


def test_example_config_loads_and_builds_its_plugins():
    from corpus_assets.domain.recipe.config import load_config

    config = load_config(CONFIG)
    assert config.recipe == "corpus_assets.domain.recipe.examples.tir:create_recipe"
    assert (config.target_count, config.purpose, config.seed) == (64, "joint", 42)
    assert config.calibration.repeats == 2 and config.calibration.implementation.endswith(":rule_based_solver")
    assert (config.execution.max_workers, config.execution.batch_size, config.execution.backend) == (2, 64, "thread")
    recipe = create_recipe(**config.params)
    recipe.selection_policy(sel_context(config.target_count), True)  # feasible settings
    rule_based_solver(**config.calibration.params)


# ------------------------------------------------------------------------------- end to end


def tir_job(**param_updates):
    from corpus_assets.domain.recipe.config import load_config

    config = load_config(CONFIG)
    params = {
        **config.params,
        "candidate_count": 64,
        "minimum_one_pass": 4,
        "minimum_per_type": 1,
        "maximum_per_recipe": 2,
        **param_updates,
    }
    return config.model_copy(update={"target_count": 16, "params": params})


def with_execution(config, **execution):
    return config.model_copy(update={"execution": config.execution.model_copy(update=execution)})


def test_tir_job_end_to_end(tmp_path):
    from corpus_assets.domain.recipe.executor import run_data_job

    config = tir_job()
    snap = run_data_job(config, tmp_path / "job")
    samples = snap.samples()
    assert len(samples) == len(snap.task_ids()) == len(snap.training_rows()) == 16
    assert {s.task.metadata["type"] for s in samples} == set(TYPES)  # minimum_per_type = 1

    stats = snap.report()["selection"]["stats"]
    assert stats["difficulty_calibrated"] is True and stats["selected"] == stats["target_count"] == 16
    assert sum(stats["outcomes"].values()) == 16 and stats["outcomes"]["one_pass"] >= 4
    assert set(stats["outcomes"]) <= {"one_pass", "both_wrong"}
    assert min(stats["per_type"].values()) >= 1 and max(stats["per_recipe"].values()) <= 2

    recipe = create_recipe(**config.params)
    probes = collections.defaultdict(dict)
    for p in snap.probes():
        probes[p["task_id"]][p["repeat"]] = p
    by_id = {s.task_id: s for s in samples}
    for task_id, attempts in probes.items():
        assert sorted(attempts) == [0, 1]
        scores = [attempts[r]["score"] for r in (0, 1)]
        assert None not in scores and sum(scores) < 2  # complete, not always correct
        assert scores == [recipe.score(by_id[task_id], attempts[r]["response"]) for r in (0, 1)]
    assert set(probes) == set(by_id)

    for s, row in zip(samples, snap.training_rows()):
        assert Fraction(s.reference["answer"]) == independent_answer(
            s.task.metadata["type"], s.task.metadata["structure"], s.task.input["problem"]
        )
        assert row == recipe.training_row(s)
        assert s.reference["answer"].lstrip("-") not in set(re.findall(r"\d+/\d+|\d+", s.task.input["problem"]))
    public_text = (snap.path / "public.jsonl").read_text()
    assert '"answer"' not in public_text and '"reference"' not in public_text
    provenance = snap.manifest["calibration"]["provenance"]
    assert provenance and all(p["provenance"]["simulated"] is True for p in provenance)

    same = {
        snap.dataset_id,
        run_data_job(with_execution(config, max_workers=4, batch_size=16), tmp_path / "t4").dataset_id,
        run_data_job(with_execution(config, max_workers=2, batch_size=24, backend="process"), tmp_path / "p2").dataset_id,
    }
    assert len(same) == 1  # independent of worker count, chunking and backend


def test_tir_job_asks_for_more_batches_then_exhausts_its_budget(tmp_path):
    from corpus_assets.domain.recipe.config import CalibrationConfig
    from corpus_assets.domain.recipe.executor import run_data_job
    from corpus_assets.domain.recipe.protocol import BudgetExhaustedError

    config = tir_job(candidate_count=32, minimum_one_pass=16).model_copy(update={"max_batches": 4})
    snap = run_data_job(config, tmp_path / "more")
    selection = snap.report()["selection"]
    assert selection["batches_used"] >= 2 and selection["insufficient"]
    assert "minimum_one_pass=16" in selection["insufficient"][0]["message"]
    assert selection["stats"]["outcomes"] == {"one_pass": 16}

    always_right = CalibrationConfig(
        implementation="corpus_assets.domain.recipe.examples.tir_calibration:rule_based_solver",
        repeats=2,
        params={"error_rate": 0.0},
    )
    config = tir_job().model_copy(update={"max_batches": 2, "calibration": always_right})
    with pytest.raises(BudgetExhaustedError):  # every task is correct twice: nothing is eligible
        run_data_job(config, tmp_path / "exhausted")
