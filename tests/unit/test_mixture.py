"""Mixture plan (seed §18.5 temperature mixing and target correction, §18.8 worked example;
effective epochs e_k = w_k D / U_k): the plan realizes the target, keeps target / document /
token shares apart, counts repeats and epochs, curriculum phases, importance weights, errors."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError

from corpus_assets.domain.pack.mixture import (
    MIXTURE_PLAN_SCHEMA,
    MixtureError,
    MixtureSpec,
    Phase,
    SourceUnits,
    build_plan,
    expected_uses,
    largest_remainder,
    phase_budgets,
    target_shares,
)


def _source(prefix: str, n: int, length: int | list[int] = 100) -> SourceUnits:
    lengths = [length] * n if isinstance(length, int) else list(length)
    return SourceUnits([f"{prefix}:{i:06d}" for i in range(n)], lengths)


def _seed_sources() -> dict[str, SourceUnits]:
    """Seed §18.8: 900 short records (100 tokens) and 100 long records (400 tokens)."""
    return {"short": _source("short", 900, 100), "long": _source("long", 100, 400)}


SEED_SPEC = MixtureSpec(unit="documents", alpha=0.5, budget=1200)


def _counts(plan) -> Counter:
    return Counter(plan.source.tolist())


# ------------------------------------------------------------------------------------------------
# seed example (acceptance facts)


def test_seed_alpha_half_gives_p_075_025():
    (p,) = target_shares(SEED_SPEC, _seed_sources())
    assert p == {"long": pytest.approx(0.25), "short": pytest.approx(0.75)}


def test_seed_expected_uses_900_and_300_draws_210000_tokens():
    e = expected_uses(SEED_SPEC, _seed_sources())
    assert e["short"]["expected_draws"] == pytest.approx(900)
    assert e["long"]["expected_draws"] == pytest.approx(300)
    assert e["short"]["expected_tokens"] == pytest.approx(90_000)
    assert e["long"]["expected_tokens"] == pytest.approx(120_000)
    assert e["short"]["expected_effective_epochs"] == pytest.approx(1.0)
    assert e["long"]["expected_effective_epochs"] == pytest.approx(3.0)


def test_seed_plan_realizes_900_and_300_draws_exactly():
    plan = build_plan(SEED_SPEC, _seed_sources())
    assert len(plan) == 1200
    assert _counts(plan) == {"short": 900, "long": 300}
    rep = plan.report()
    assert rep["sources"]["short"]["document_share"] == 0.75
    assert rep["sources"]["long"]["document_share"] == 0.25
    assert rep["sources"]["short"]["target_share"] == pytest.approx(0.75)
    assert rep["sources"]["long"]["target_share"] == pytest.approx(0.25)


def test_seed_plan_token_shares_are_3_7_and_4_7_of_210000():
    plan = build_plan(SEED_SPEC, _seed_sources())
    assert int(plan.n_tokens.sum()) == 210_000
    assert int(plan.n_tokens[plan.source == "long"].sum()) == 120_000
    rep = plan.report()
    assert rep["tokens"] == 210_000
    assert rep["sources"]["long"]["tokens"] == 120_000
    assert rep["sources"]["short"]["token_share"] == pytest.approx(3 / 7)
    assert rep["sources"]["long"]["token_share"] == pytest.approx(4 / 7)


def test_seed_plan_effective_epochs_1_and_3():
    rep = build_plan(SEED_SPEC, _seed_sources()).report()
    short, long = rep["sources"]["short"], rep["sources"]["long"]
    assert (short["sampled_units"], short["available_units"], short["effective_epochs"]) == (900, 900, 1.0)
    assert (long["sampled_units"], long["available_units"], long["effective_epochs"]) == (300, 100, 3.0)
    # drawing with replacement, the distinct records drawn are fewer than the draws
    assert 0 < short["unique_records"] < 900 and 0 < long["unique_records"] <= 100
    assert short["unique_tokens"] == 100 * short["unique_records"]
    assert rep["warnings"] == []  # 3 epochs <= epoch_limit 4


def test_reading_each_source_once_gives_0_9_to_0_1_not_the_target():
    sources = _seed_sources()
    # concatenation = every record once = the natural mix, alpha = 1 without replacement
    once = build_plan(MixtureSpec(unit="documents", alpha=1.0, budget=1000, replacement=False), sources)
    assert Counter(once.record_id.to_pylist()) == Counter({f"short:{i:06d}": 1 for i in range(900)} | {f"long:{i:06d}": 1 for i in range(100)})
    assert once.report()["sources"]["short"]["document_share"] == 0.9
    assert once.report()["sources"]["long"]["document_share"] == 0.1
    # the plan of the alpha = 1/2 spec does realize 0.75 / 0.25
    plan = build_plan(SEED_SPEC, sources)
    assert plan.report()["sources"]["short"]["document_share"] == 0.75


# ------------------------------------------------------------------------------------------------
# target shares


def _three() -> dict[str, SourceUnits]:
    return {"a": _source("a", 600), "b": _source("b", 300), "c": _source("c", 100)}


def test_alpha_zero_is_uniform_over_sources():
    spec = MixtureSpec(unit="documents", alpha=0.0, budget=900)
    (p,) = target_shares(spec, _three())
    assert p == {"a": pytest.approx(1 / 3), "b": pytest.approx(1 / 3), "c": pytest.approx(1 / 3)}
    assert _counts(build_plan(spec, _three())) == {"a": 300, "b": 300, "c": 300}


def test_alpha_one_is_natural_proportions():
    spec = MixtureSpec(unit="documents", alpha=1.0, budget=2000)
    (p,) = target_shares(spec, _three())
    assert p == {"a": pytest.approx(0.6), "b": pytest.approx(0.3), "c": pytest.approx(0.1)}
    assert _counts(build_plan(spec, _three())) == {"a": 1200, "b": 600, "c": 200}


def test_explicit_weights_and_unnamed_sources_get_nothing():
    spec = MixtureSpec(unit="documents", weights={"a": 0.5, "c": 0.5}, budget=1000)
    plan = build_plan(spec, _three())
    assert _counts(plan) == {"a": 500, "c": 500}
    rep = plan.report()["sources"]
    assert rep["b"]["draws"] == 0 and rep["b"]["target_share"] == 0.0
    assert rep["c"]["effective_epochs"] == 5.0


def test_largest_remainder_sums_to_budget_and_breaks_ties_by_name_order():
    assert largest_remainder([1 / 3, 1 / 3, 1 / 3], 100) == [34, 33, 33]
    assert largest_remainder([0.75, 0.25], 1201) == [901, 300]  # 900.75 / 300.25
    assert largest_remainder([0.5, 0.0, 0.5], 3) == [2, 0, 1]  # a zero share never gets the extra unit
    assert largest_remainder([0.1] * 10, 10**12) == [10**11] * 10  # no float drift at token scale
    spec = MixtureSpec(unit="documents", alpha=0.0, budget=100)
    assert _counts(build_plan(spec, _three())) == {"a": 34, "b": 33, "c": 33}


# ------------------------------------------------------------------------------------------------
# tokens unit


def test_tokens_unit_budget_is_tokens_and_sizes_are_tokens():
    sources = {"short": _source("short", 100, 100), "long": _source("long", 100, 300)}  # 10000 / 30000 tokens
    by_docs = target_shares(MixtureSpec(unit="documents", alpha=1.0, budget=10), sources)[0]
    by_tokens = target_shares(MixtureSpec(unit="tokens", alpha=1.0, budget=10), sources)[0]
    assert by_docs == {"long": pytest.approx(0.5), "short": pytest.approx(0.5)}
    assert by_tokens == {"long": pytest.approx(0.75), "short": pytest.approx(0.25)}

    plan = build_plan(MixtureSpec(unit="tokens", weights={"short": 0.5, "long": 0.5}, budget=60_000), sources)
    assert _counts(plan) == {"short": 300, "long": 100}  # 30000 tokens each
    rep = plan.report()
    assert rep["tokens"] == 60_000
    assert rep["sources"]["long"]["token_share"] == 0.5
    assert rep["sources"]["long"]["document_share"] == 0.25
    assert rep["sources"]["long"]["sampled_units"] == 30_000
    assert rep["sources"]["long"]["effective_epochs"] == 1.0  # 30000 sampled / 30000 available tokens


def test_tokens_unit_last_draw_overshoots_by_less_than_one_record():
    sources = {"a": _source("a", 50, 300), "b": _source("b", 50, 700)}
    for replacement in (True, False):
        plan = build_plan(
            MixtureSpec(unit="tokens", weights={"a": 0.5, "b": 0.5}, budget=10_000, replacement=replacement), sources
        )
        rep = plan.report()["sources"]
        # quota 5000 tokens each: 17 * 300 = 5100 >= 5000 > 16 * 300; 8 * 700 = 5600 >= 5000 > 7 * 700
        assert (rep["a"]["draws"], rep["a"]["tokens"]) == (17, 5100)
        assert (rep["b"]["draws"], rep["b"]["tokens"]) == (8, 5600)


def test_tokens_unit_with_varied_lengths_reaches_each_quota():
    rng = np.random.default_rng(7)
    la, lb = rng.integers(0, 2000, 5000), rng.integers(1, 50, 3000)
    sources = {"a": _source("a", 5000, la.tolist()), "b": _source("b", 3000, lb.tolist())}
    for replacement in (True, False):
        spec = MixtureSpec(unit="tokens", weights={"a": 0.3, "b": 0.7}, budget=2_000_000, replacement=replacement)
        rep = build_plan(spec, sources).report()["sources"]
        assert 600_000 <= rep["a"]["tokens"] < 600_000 + 2000
        assert 1_400_000 <= rep["b"]["tokens"] < 1_400_000 + 50


# ------------------------------------------------------------------------------------------------
# repeats, passes, interleaving


def test_with_replacement_repeat_counts_earlier_draws_of_the_record():
    plan = build_plan(SEED_SPEC, _seed_sources())
    seen: Counter = Counter()
    for rid, rep in zip(plan.record_id.to_pylist(), plan.repeat.tolist()):
        assert rep == seen[rid]
        seen[rid] += 1
    report = plan.report()["sources"]
    assert report["long"]["unique_records"] == len({r for r in plan.record_id.to_pylist() if r.startswith("long:")})
    assert report["long"]["max_repeat"] == max(seen[r] for r in seen if r.startswith("long:")) - 1


def test_without_replacement_below_source_size_draws_distinct_records():
    sources = {"a": _source("a", 100)}
    plan = build_plan(MixtureSpec(unit="documents", weights={"a": 1.0}, budget=50, replacement=False), sources)
    assert len(set(plan.record_id.to_pylist())) == 50
    assert plan.repeat.tolist() == [0] * 50
    assert plan.report()["warnings"] == []
    assert plan.report()["sources"]["a"]["effective_epochs"] == 0.5


def test_without_replacement_above_source_size_reads_passes_and_repeat_is_the_pass():
    sources = {"a": _source("a", 100)}
    plan = build_plan(MixtureSpec(unit="documents", weights={"a": 1.0}, budget=250, replacement=False), sources)
    ids = plan.record_id.to_pylist()
    everything = {f"a:{i:06d}" for i in range(100)}
    assert set(ids[:100]) == everything and set(ids[100:200]) == everything  # two full passes
    assert len(set(ids[200:])) == 50  # a partial third pass, no record twice
    assert plan.repeat.tolist() == [0] * 100 + [1] * 100 + [2] * 50
    assert ids[:100] != ids[100:200]  # each pass is its own permutation
    rep = plan.report()
    assert rep["sources"]["a"]["effective_epochs"] == 2.5
    assert rep["sources"]["a"]["unique_records"] == 100
    assert any("replacement=False" in w and "3 passes" in w and "'a'" in w for w in rep["warnings"])


def test_interleaving_keeps_every_prefix_at_the_target_mix():
    plan = build_plan(SEED_SPEC, _seed_sources())
    is_long = (plan.source == "long").astype(int)
    prefix_long = np.cumsum(is_long)
    t = np.arange(1, len(plan) + 1)
    # any prefix: the long source is within 1.5 draws of a quarter of the prefix ((1 + S) / 2, S = 2)
    assert np.max(np.abs(prefix_long - 0.25 * t)) <= 1.5
    assert is_long[:4].sum() == 1 and is_long[:8].sum() == 2


def test_prefix_property_with_many_uneven_sources():
    sizes = {"a": 5000, "b": 1700, "c": 290, "d": 13}
    sources = {k: _source(k, n) for k, n in sizes.items()}
    plan = build_plan(MixtureSpec(unit="documents", alpha=0.3, budget=20_000), sources)
    counts = plan.report()["sources"]
    t = np.arange(1, len(plan) + 1)
    for k in sizes:
        prefix = np.cumsum(plan.source == k)
        assert np.max(np.abs(prefix - counts[k]["draws"] / 20_000 * t)) <= (1 + 4) / 2


# ------------------------------------------------------------------------------------------------
# curriculum


def _curriculum(replacement: bool = True) -> MixtureSpec:
    return MixtureSpec(
        unit="documents",
        budget=1000,
        replacement=replacement,
        phases=[Phase(until=0.25, weights={"a": 1.0}), Phase(until=1.0, weights={"a": 0.2, "b": 0.8})],
    )


def test_curriculum_phase_column_and_per_phase_shares():
    sources = {"a": _source("a", 400), "b": _source("b", 1000)}
    spec = _curriculum()
    assert phase_budgets(spec) == [250, 750]
    plan = build_plan(spec, sources)
    assert plan.phase.tolist() == [0] * 250 + [1] * 750
    assert set(plan.source[:250].tolist()) == {"a"}
    assert Counter(plan.source[250:].tolist()) == {"a": 150, "b": 600}
    rep = plan.report()
    a = rep["sources"]["a"]
    assert a["target_share_by_phase"] == [1.0, 0.2]
    assert a["document_share_by_phase"] == [1.0, 0.2]
    assert a["quota_by_phase"] == [250, 150]
    assert a["target_share"] == pytest.approx(0.25 * 1.0 + 0.75 * 0.2)
    assert a["document_share"] == 0.4
    assert [p["budget"] for p in rep["phases"]] == [250, 750]


def test_curriculum_without_replacement_continues_the_pass_across_phases():
    sources = {"a": _source("a", 400), "b": _source("b", 1000)}
    plan = build_plan(_curriculum(replacement=False), sources)
    a_ids = plan.record_id.filter(pa.array(plan.source == "a")).to_pylist()
    assert len(a_ids) == 400 and len(set(a_ids)) == 400  # 250 + 150 draws: one pass, no repeat
    assert int(plan.repeat.max()) == 0


def test_curriculum_phase_with_alpha():
    spec = MixtureSpec(
        unit="documents",
        budget=2000,
        phases=[Phase(until=0.5, alpha=0.0), Phase(until=1.0, alpha=1.0)],
    )
    sources = {"a": _source("a", 900), "b": _source("b", 100)}
    plan = build_plan(spec, sources)
    assert Counter(plan.source[:1000].tolist()) == {"a": 500, "b": 500}
    assert Counter(plan.source[1000:].tolist()) == {"a": 900, "b": 100}


# ------------------------------------------------------------------------------------------------
# importance weights, epoch limit


def test_importance_weight_is_q_over_p_and_restores_q_in_expectation():
    spec = SEED_SPEC.model_copy(update={"target_weights": {"short": 0.5, "long": 0.5}})
    plan = build_plan(spec, _seed_sources())
    rep = plan.report()["sources"]
    assert rep["short"]["importance_weight"] == pytest.approx(0.5 / 0.75)
    assert rep["long"]["importance_weight"] == pytest.approx(0.5 / 0.25)
    # weighting every draw by q/p turns the 0.75 / 0.25 plan into 0.5 / 0.5 of the weighted loss
    w = np.where(plan.source == "long", rep["long"]["importance_weight"], rep["short"]["importance_weight"])
    assert w[plan.source == "long"].sum() / len(plan) == pytest.approx(0.5)
    assert w.sum() / len(plan) == pytest.approx(1.0)


def test_importance_weight_per_phase():
    spec = _curriculum().model_copy(update={"target_weights": {"a": 0.5, "b": 0.5}})
    rep = build_plan(spec, {"a": _source("a", 400), "b": _source("b", 1000)}).report()["sources"]
    assert rep["a"]["importance_weight"] == pytest.approx(0.5 / 0.4)
    assert rep["a"]["importance_weight_by_phase"] == [pytest.approx(0.5), pytest.approx(2.5)]
    assert rep["b"]["importance_weight_by_phase"] == [None, pytest.approx(0.625)]


def test_epoch_limit_warning_names_the_source():
    sources = {"big": _source("big", 1000), "tiny": _source("tiny", 10)}
    spec = MixtureSpec(unit="documents", weights={"big": 0.9, "tiny": 0.1}, budget=1000)
    rep = build_plan(spec, sources).report()
    assert rep["sources"]["tiny"]["effective_epochs"] == 10.0
    assert len(rep["warnings"]) == 1
    assert "'tiny'" in rep["warnings"][0] and "epoch_limit 4" in rep["warnings"][0]
    assert build_plan(spec.model_copy(update={"epoch_limit": 10.0}), sources).report()["warnings"] == []


def test_alpha_gives_an_empty_source_p_zero_and_a_warning():
    sources = {"a": _source("a", 10), "empty": SourceUnits([], [])}
    plan = build_plan(MixtureSpec(unit="documents", alpha=0.0, budget=10), sources)
    assert _counts(plan) == {"a": 10}
    assert any("'empty'" in w and "no records" in w for w in plan.report()["warnings"])


# ------------------------------------------------------------------------------------------------
# determinism, output table, scale


def _arrays(plan):
    return (plan.record_id.to_pylist(), plan.source.tolist(), plan.repeat.tolist(), plan.phase.tolist(), plan.n_tokens.tolist())


def test_same_spec_and_inputs_give_the_identical_plan_whatever_the_dict_order():
    sources = _seed_sources()
    reversed_sources = dict(reversed(list(sources.items())))
    for spec in (SEED_SPEC, SEED_SPEC.model_copy(update={"replacement": False}), _curriculum()):
        srcs = sources if spec.phases is None else {"a": _source("a", 400), "b": _source("b", 1000)}
        rev = reversed_sources if spec.phases is None else {"b": _source("b", 1000), "a": _source("a", 400)}
        assert _arrays(build_plan(spec, srcs)) == _arrays(build_plan(spec, srcs))
        assert _arrays(build_plan(spec, srcs)) == _arrays(build_plan(spec, rev))
        assert build_plan(spec, srcs).report() == build_plan(spec, rev).report()


def test_from_counts_sorts_record_ids():
    a = SourceUnits.from_counts({"r3": 3, "r1": 1, "r2": 2})
    assert a.record_ids.to_pylist() == ["r1", "r2", "r3"] and a.n_tokens.tolist() == [1, 2, 3]


def test_seed_changes_which_records_but_not_how_many():
    p0 = build_plan(SEED_SPEC, _seed_sources())
    p1 = build_plan(SEED_SPEC.model_copy(update={"seed": 1}), _seed_sources())
    assert p0.record_id.to_pylist() != p1.record_id.to_pylist()
    assert _counts(p0) == _counts(p1) == {"short": 900, "long": 300}
    assert p0.source.tolist() == p1.source.tolist()  # the interleaving is deterministic, not random


def test_to_table_has_the_plan_rows():
    plan = build_plan(SEED_SPEC, _seed_sources())
    table = plan.to_table()
    assert table.schema == MIXTURE_PLAN_SCHEMA
    assert table.column_names == ["position", "record_id", "source", "repeat", "phase", "n_tokens"]
    assert table.num_rows == 1200
    assert table.column("position").to_pylist() == list(range(1200))
    assert table.column("record_id").to_pylist() == plan.record_id.to_pylist()
    assert table.column("source").to_pylist() == plan.source.tolist()
    assert table.column("repeat").to_pylist() == plan.repeat.tolist()
    assert sum(table.column("n_tokens").to_pylist()) == 210_000


def test_a_million_draws_are_planned_with_exact_quotas():
    """Scale (no wall-clock assertion: machines are noisy; bench/ measures speed)."""
    rng = np.random.default_rng(0)
    sources = {
        f"s{k}": SourceUnits([f"s{k}:{i:07d}" for i in range(n)], rng.integers(1, 2000, n))
        for k, n in enumerate([300_000, 100_000, 30_000, 1_000])
    }
    for replacement in (True, False):
        spec = MixtureSpec(unit="documents", weights={"s0": 0.4, "s1": 0.3, "s2": 0.2, "s3": 0.1},
                           budget=1_000_000, replacement=replacement)
        plan = build_plan(spec, sources)
        assert len(plan) == 1_000_000
        counts = {s: int((plan.source == s).sum()) for s in sources}
        assert counts == {"s0": 400_000, "s1": 300_000, "s2": 200_000, "s3": 100_000}


# ------------------------------------------------------------------------------------------------
# errors: spec


def _spec_error(**kw) -> str:
    base = {"unit": "documents", "budget": 10}
    with pytest.raises(ValidationError) as exc:
        MixtureSpec(**(base | kw))
    return str(exc.value)


def test_weights_must_sum_to_one():
    msg = _spec_error(weights={"a": 0.5, "b": 0.4})
    assert "weights" in msg and "sum to 1" in msg
    assert MixtureSpec(unit="documents", budget=10, weights={"a": 0.5, "b": 0.5 + 1e-12}).weights is not None


def test_weights_must_be_non_negative():
    msg = _spec_error(weights={"a": 1.5, "b": -0.5})
    assert "weights['b']" in msg and ">= 0" in msg


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan")])
def test_alpha_outside_0_1(alpha):
    msg = _spec_error(alpha=alpha)
    assert "alpha" in msg and "outside [0, 1]" in msg


def test_exactly_one_of_weights_and_alpha():
    assert "not both" in _spec_error(weights={"a": 1.0}, alpha=0.5)
    msg = _spec_error()
    assert "'weights'" in msg and "'alpha'" in msg


def test_phases_must_increase_and_end_at_one():
    msg = _spec_error(phases=[{"until": 0.6, "alpha": 1.0}, {"until": 0.4, "alpha": 1.0}, {"until": 1.0, "alpha": 1.0}])
    assert "phases" in msg and "strictly increasing" in msg and "phases[1].until" in msg
    msg = _spec_error(phases=[{"until": 0.5, "alpha": 1.0}, {"until": 0.9, "alpha": 1.0}])
    assert "phases[1].until" in msg and "until = 1" in msg
    msg = _spec_error(phases=[{"until": 1.5, "alpha": 1.0}])
    assert "until" in msg and "(0, 1]" in msg


def test_phases_exclude_top_level_weights_and_alpha():
    msg = _spec_error(alpha=0.5, phases=[{"until": 1.0, "alpha": 1.0}])
    assert "phases" in msg and "top level" in msg
    msg = _spec_error(phases=[{"until": 1.0, "alpha": 1.0, "weights": {"a": 1.0}}])
    assert "phases.0" in msg and "not both" in msg


def test_budget_must_be_positive_and_unknown_fields_are_refused():
    assert "budget" in _spec_error(budget=0, alpha=1.0)
    assert "bogus" in _spec_error(alpha=1.0, bogus=1)


def test_target_weights_must_sum_to_one():
    msg = _spec_error(alpha=1.0, target_weights={"a": 0.2})
    assert "target_weights" in msg and "sum to 1" in msg


# ------------------------------------------------------------------------------------------------
# errors: spec against its inputs


def test_unknown_source_in_weights_is_named_with_the_known_ones():
    spec = MixtureSpec(unit="documents", weights={"short": 0.5, "web": 0.5}, budget=10)
    with pytest.raises(MixtureError) as exc:
        build_plan(spec, _seed_sources())
    msg = str(exc.value)
    assert msg.startswith("weights") and "'web'" in msg and "known sources: ['long', 'short']" in msg


def test_unknown_source_in_phase_weights_and_target_weights():
    spec = MixtureSpec(
        unit="documents", budget=10, phases=[Phase(until=0.5, alpha=1.0), Phase(until=1.0, weights={"web": 1.0})]
    )
    with pytest.raises(MixtureError, match=r"phases\[1\]\.weights names unknown source\(s\) \['web'\]"):
        build_plan(spec, _seed_sources())
    spec = SEED_SPEC.model_copy(update={"target_weights": {"short": 0.5, "web": 0.5}})
    with pytest.raises(MixtureError, match=r"target_weights names unknown source\(s\) \['web'\]"):
        build_plan(spec, _seed_sources())


def test_zero_size_source_with_positive_weight():
    sources = {"a": _source("a", 10), "b": SourceUnits([], [])}
    with pytest.raises(MixtureError, match=r"weights\['b'\] = 0\.5 > 0 but source 'b' has no records"):
        build_plan(MixtureSpec(unit="documents", weights={"a": 0.5, "b": 0.5}, budget=10), sources)
    sources = {"a": _source("a", 10), "b": _source("b", 10, 0)}  # records, but zero tokens
    build_plan(MixtureSpec(unit="documents", weights={"a": 0.5, "b": 0.5}, budget=10), sources)
    with pytest.raises(MixtureError, match=r"weights\['b'\] = 0\.5 > 0 but source 'b' has no tokens"):
        build_plan(MixtureSpec(unit="tokens", weights={"a": 0.5, "b": 0.5}, budget=10), sources)


def test_target_weight_on_a_source_never_sampled():
    spec = MixtureSpec(unit="documents", weights={"a": 1.0, "b": 0.0}, budget=10, target_weights={"a": 0.5, "b": 0.5})
    with pytest.raises(MixtureError, match=r"target_weights\['b'\] = 0\.5 > 0 .*p = 0"):
        build_plan(spec, {"a": _source("a", 10), "b": _source("b", 10)})


def test_bad_source_inputs():
    with pytest.raises(MixtureError, match="sources is empty"):
        build_plan(SEED_SPEC, {})
    with pytest.raises(MixtureError, match=r"record_ids must be sorted and unique: record_ids\[1\]"):
        SourceUnits(["b", "a"], [1, 1])
    with pytest.raises(MixtureError, match="record_ids must be sorted and unique"):
        SourceUnits(["a", "a"], [1, 1])
    with pytest.raises(MixtureError, match="n_tokens has 1 entries but record_ids has 2"):
        SourceUnits(["a", "b"], [1])
    with pytest.raises(MixtureError, match=r"n_tokens\[1\] = -3 is negative"):
        SourceUnits(["a", "b"], [1, -3])
    with pytest.raises(MixtureError, match="every source is empty"):
        build_plan(MixtureSpec(unit="documents", alpha=0.5, budget=10), {"e": SourceUnits([], [])})
