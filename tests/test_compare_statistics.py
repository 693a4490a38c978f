"""hf_aux.compare.statistics: intervals and q values against scipy and hand computations, and the coverage of the
95% interval by simulation (no training)."""

from __future__ import annotations

import math
import random

import pytest
import scipy.stats as scipy_stats  # the reference: the test extra installs it

from hf_aux.compare.statistics import (ONE_RUN_FLAG, Comparison, Interval, arm_values, benjamini_hochberg,
                                       compare_arms, one_sample_interval, t_cdf, t_quantile, verdict_words,
                                       welch_interval, with_q_values)


def test_welch_interval_matches_scipy():
    a, b = [0.71, 0.74, 0.69, 0.73], [0.70, 0.66, 0.68]
    found = welch_interval(a, b)
    expected = scipy_stats.ttest_ind(a, b, equal_var=False)
    ci = expected.confidence_interval(0.95)
    assert found.difference == pytest.approx(sum(a) / 4 - sum(b) / 3, abs=1e-12)
    assert (found.low, found.high) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert found.dof == pytest.approx(expected.df, rel=1e-9)
    assert found.p_value == pytest.approx(expected.pvalue, rel=1e-7)


def test_welch_by_hand():
    # a = [1, 2, 3]: mean 2, var 1; b = [0, 0, 2, 2]: mean 1, var 4/3. se^2 = 1/3 + 1/3
    found = welch_interval([1, 2, 3], [0, 0, 2, 2])
    va, vb = 1 / 3, (4 / 3) / 4
    dof = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)
    half = scipy_stats.t.ppf(0.975, dof) * math.sqrt(va + vb)
    assert (found.difference, found.low, found.high, found.dof) == pytest.approx((1, 1 - half, 1 + half, dof))


@pytest.mark.parametrize("dof", [1, 2, 2.5, 4.7, 30])
def test_t_distribution_matches_scipy(dof):
    for p in (0.025, 0.5, 0.9, 0.975):
        assert t_quantile(p, dof) == pytest.approx(scipy_stats.t.ppf(p, dof), abs=1e-7)
    for t in (-3.0, -0.2, 0.0, 1.5, 7.0):
        assert t_cdf(t, dof) == pytest.approx(scipy_stats.t.cdf(t, dof), abs=1e-10)


def test_benjamini_hochberg_by_hand():
    # sorted p: 0.01 (rank 1), 0.03 (2), 0.04 (3), 0.2 (4); m = 4: p * m / rank = 0.04, 0.06, 0.0533, 0.2; then the
    # running minimum from the largest rank down: 0.2, 0.0533, 0.0533, 0.04
    q = benjamini_hochberg([0.04, 0.01, 0.2, 0.03, float("nan")])
    assert q[:4] == pytest.approx([0.16 / 3, 0.04, 0.2, 0.16 / 3])
    assert math.isnan(q[4])
    assert q[:4] == pytest.approx(list(scipy_stats.false_discovery_control([0.04, 0.01, 0.2, 0.03])))


def test_arm_values_and_flags():
    assert arm_values({"m": [0.5, 0.7]}) == ([0.5, 0.7], False)  # one model: its fine-tunings
    assert arm_values({"a": [0.5, 0.7], "b": [0.9, 0.9]}) == (pytest.approx([0.6, 0.9]), True)  # unit means
    base = {"base": [0.5, 0.52, 0.48]}
    one = compare_arms("x", {"m": [0.6, 0.62, 0.58]}, "base", base)
    assert one.flag == ONE_RUN_FLAG
    assert verdict_words(one) == ONE_RUN_FLAG  # never verdict words for one training run
    two = compare_arms("x", {"a": [0.6], "b": [0.62]}, "base", base)
    assert "3 are needed" in two.flag
    three = compare_arms("x", {"a": [0.6, 0.61], "b": [0.62, 0.6], "c": [0.59, 0.63]}, "base", base)
    assert three.flag is None and three.n_units == 3 and three.n_baseline_units == 1
    assert three.interval == welch_interval([0.605, 0.61, 0.61], [0.5, 0.52, 0.48])


def test_verdict_words_do_not_overclaim():
    def comparison(low, high, q):
        return Comparison("x", "base", Interval((low + high) / 2, low, high, 4.0, 0.01), 3, 1, q)

    assert verdict_words(comparison(0.01, 0.05, 0.01)).startswith("better than base (survives")
    assert "does not survive" in verdict_words(comparison(0.01, 0.05, 0.2))
    assert verdict_words(comparison(0.01, 0.05, 0.01), higher_is_better=False).startswith("worse")
    assert verdict_words(comparison(-0.02, 0.05, 0.5)).startswith("no difference shown")
    found = with_q_values([comparison(0.01, 0.05, float("nan")), comparison(-0.1, 0.2, float("nan"))])
    assert [c.q_value for c in found] == pytest.approx([0.01, 0.01])


def _simulated_study(rng, one_model_baseline: bool, units=3, seeds=3, unit_sd=1.0, finetune_sd=1.0):
    """Two arms whose true means are equal: each unit = its training noise + each fine-tuning's noise. A one-model
    baseline has fine-tuning noise only (it is one fixed model)."""
    def unit():
        shift = rng.gauss(0, unit_sd)
        return [shift + rng.gauss(0, finetune_sd) for _ in range(seeds)]

    arm = {f"unit{i}": unit() for i in range(units)}
    base = ({"base": [rng.gauss(0, finetune_sd) for _ in range(seeds)]} if one_model_baseline
            else {f"base{i}": unit() for i in range(units)})
    return arm, base


def _coverage(one_model_baseline: bool, interval, units: int = 3, studies: int = 2000) -> float:
    rng = random.Random(1234)
    hits = 0
    for _ in range(studies):
        found = interval(*_simulated_study(rng, one_model_baseline, units=units))
        hits += found.low <= 0.0 <= found.high
    return hits / studies


def _engine(arm, base):
    return compare_arms("arm", arm, "base", base).interval


def _shared_baseline_pairing(arm, base):
    """The old studies' interval: every unit paired with the SAME baseline fine-tunings, t over units."""
    (baseline,) = base.values()
    return one_sample_interval([sum(x - y for x, y in zip(values, baseline)) / len(values) for values in arm.values()])


def test_coverage_with_several_units_per_arm():
    assert 0.93 <= _coverage(False, _engine, units=4) <= 0.97  # 0.9505 (3 units each: 0.970, Welch is conservative)


def test_coverage_with_a_one_model_baseline():
    assert 0.93 <= _coverage(True, _engine) <= 0.97  # 0.963: 3 units against one model's 3 fine-tunings


def test_shared_baseline_pairing_undercovers():
    # the baseline's fine-tuning noise becomes an offset the interval never sees
    assert _coverage(True, _shared_baseline_pairing) < 0.93  # 0.9105
