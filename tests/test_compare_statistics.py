"""hf_aux.compare.statistics: intervals and q values against scipy and hand computations, and the coverage of the
95% interval by simulation (no training)."""

from __future__ import annotations

import math
import random

import pytest
import scipy.stats as scipy_stats  # the reference: the test extra installs it

from hf_aux.compare.statistics import (ONE_RUN_FLAG, Comparison, Interval, arm_values, benjamini_hochberg,
                                       compare_arms, one_sample_interval, t_cdf, t_quantile, verdict_words,
                                       welch_dof, welch_interval, with_q_values)


def test_welch_interval_matches_scipy():
    a, b = [0.71, 0.74, 0.69, 0.73], [0.70, 0.66, 0.68]
    found = welch_interval(a, b, small_side_cap=False)  # the textbook interval
    expected = scipy_stats.ttest_ind(a, b, equal_var=False)
    ci = expected.confidence_interval(0.95)
    assert found.difference == pytest.approx(sum(a) / 4 - sum(b) / 3, abs=1e-12)
    assert (found.low, found.high) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert found.dof == pytest.approx(expected.df, rel=1e-9)
    assert found.p_value == pytest.approx(expected.pvalue, rel=1e-7)


def test_welch_by_hand():
    # a = [1, 2, 3]: mean 2, var 1; b = [0, 0, 2, 2]: mean 1, var 4/3. se^2 = 1/3 + 1/3
    va, vb = 1 / 3, (4 / 3) / 4
    dof = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)  # 4.8
    textbook = welch_interval([1, 2, 3], [0, 0, 2, 2], small_side_cap=False)
    half = scipy_stats.t.ppf(0.975, dof) * math.sqrt(va + vb)
    assert (textbook.difference, textbook.low, textbook.high, textbook.dof) == pytest.approx((1, 1 - half, 1 + half,
                                                                                             dof))
    # the side with fewer values (a, 3) carries half the variance: the degrees of freedom are capped at its n - 1
    found = welch_interval([1, 2, 3], [0, 0, 2, 2])
    half = scipy_stats.t.ppf(0.975, 2) * math.sqrt(va + vb)
    assert (found.low, found.high, found.dof) == pytest.approx((1 - half, 1 + half, 2))
    # equal sizes, or the larger side dominating: no cap
    assert welch_interval([1, 2, 3], [0, 0, 4]).dof == pytest.approx(welch_interval([1, 2, 3], [0, 0, 4],
                                                                                    small_side_cap=False).dof)
    assert welch_interval([1.0, 1.1, 1.2], [0, 0, 2, 2]).dof > 2
    assert welch_dof(0.0, 0.0, 3, 4) == 5


@pytest.mark.parametrize("dof", [1, 2, 2.5, 4.7, 30])
def test_t_distribution_matches_scipy(dof):
    for p in (0.025, 0.5, 0.9, 0.975):
        assert t_quantile(p, dof) == pytest.approx(scipy_stats.t.ppf(p, dof), abs=1e-7)
    for t in (-3.0, -0.2, 0.0, 1.5, 7.0):
        assert t_cdf(t, dof) == pytest.approx(scipy_stats.t.cdf(t, dof), abs=1e-10)


def test_t_distribution_by_hand_and_a_published_table():
    # closed forms: dof 1 is Cauchy, P(T <= t) = 1/2 + atan(t) / pi; dof 2: P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-3.0, 0.5, 1.0, 4.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    # two-sided 95% critical values of a printed t table (NIST/SEMATECH e-Handbook 1.3.6.7.2)
    for dof, critical in ((1, 12.706), (2, 4.303), (5, 2.571), (9, 2.262), (30, 2.042), (100, 1.984)):
        assert t_quantile(0.975, dof) == pytest.approx(critical, abs=5e-4)
        assert t_quantile(0.025, dof) == pytest.approx(-critical, abs=5e-4)


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


def _engine(arm, base):
    return compare_arms("arm", arm, "base", base).interval


def _shared_baseline_pairing(arm, base):
    """The old studies' interval: every unit paired with the SAME baseline fine-tunings, t over units."""
    (baseline,) = base.values()
    return one_sample_interval([sum(x - y for x, y in zip(values, baseline)) / len(values) for values in arm.values()])


def test_shared_baseline_pairing_undercovers():
    # the baseline's fine-tuning noise becomes an offset the interval never sees
    rng, hits = random.Random(1234), 0
    for _ in range(2000):
        found = _shared_baseline_pairing(*_simulated_study(rng, True))
        hits += found.low <= 0.0 <= found.high
    assert hits / 2000 < 0.93  # 0.9105


# ---- coverage of the 95% interval over the designs the studies and `hf-aux compare` use (docs/compare.md) ----------
# Every design has equal true means. A unit (training run) = its training noise (sd `ratio` x the fine-tuning sd) +
# the mean of its fine-tunings' noise (sd 1). Paths:
#   one-model: U units (3 fine-tunings each) against ONE baseline model's B fine-tunings (Welch, the engine's rule);
#   two-arms:  U units against a trained baseline of B units (3 fine-tunings each; Welch);
#   paired:    U units of two trained arms paired by seed, B fine-tuning seeds per unit shared by both arms (t over
#              the per-unit differences: the evidence studies' claim_record).
# The engine's degrees of freedom (`welch_dof`) are used as they are; the t quantile comes from scipy, vectorised, so
# 20,000 studies per design run in seconds (docs/compare.md's figures: 200,000, `python tests/test_compare_statistics.py
# 200000`). test_the_vectorised_interval_is_the_engines checks that both compute the same interval.
RATIOS, BASELINE_FINETUNINGS, UNITS, SEEDS_PER_UNIT = (0.3, 1.0, 3.0), (3, 10), (3, 5), 3
DESIGNS = [(path, ratio, b, u) for path in ("one-model", "two-arms", "paired") for ratio in RATIOS
           for b in BASELINE_FINETUNINGS for u in UNITS]


def _design_values(rng, path: str, ratio: float, b: int, u: int, studies: int):
    """(arm values [studies, n_a], baseline values [studies, n_b]) as compare_arms receives them (unit means; a
    one-model baseline's fine-tunings), or for `paired` (per-unit differences [studies, u], None)."""
    def units(n, seeds=SEEDS_PER_UNIT):
        return rng.normal(0, ratio, (studies, n)) + rng.normal(0, 1, (studies, n, seeds)).mean(axis=2)

    if path == "one-model":
        return units(u), rng.normal(0, 1, (studies, b))
    if path == "two-arms":
        return units(u), units(b)
    return units(u, b) - units(u, b), None  # paired: both arms' training and fine-tuning noise per unit


def _covered(arm, base, small_side_cap: bool = True):
    """Per simulated study, whether the engine's 95% interval holds the true zero (and the intervals' half widths)."""
    import numpy as np
    from scipy import stats

    from hf_aux.compare.statistics import welch_dof

    if base is None:  # the paired path: the one-sample t over units
        n = arm.shape[1]
        half = stats.t.ppf(0.975, n - 1) * arm.std(axis=1, ddof=1) / np.sqrt(n)
        return np.abs(arm.mean(axis=1)) <= half, half
    va, vb = arm.var(axis=1, ddof=1) / arm.shape[1], base.var(axis=1, ddof=1) / base.shape[1]
    dof = np.array([welch_dof(x, y, arm.shape[1], base.shape[1], small_side_cap) for x, y in zip(va, vb)])
    half = stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    return np.abs(arm.mean(axis=1) - base.mean(axis=1)) <= half, half


def coverage_table(studies: int, seed: int = 59) -> list[tuple]:
    """(path, sd ratio, baseline fine-tunings, units, coverage with the engine's rule, coverage of textbook Welch)."""
    import numpy as np

    rng, rows = np.random.default_rng(seed), []
    for path, ratio, b, u in DESIGNS:
        arm, base = _design_values(rng, path, ratio, b, u, studies)
        rows.append((path, ratio, b, u, float(_covered(arm, base)[0].mean()),
                     float(_covered(arm, base, small_side_cap=False)[0].mean()) if base is not None else None))
    return rows


@pytest.fixture(scope="module")
def table():
    return coverage_table(20_000)


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: f"{d[0]}-ratio{d[1]}-B{d[2]}-U{d[3]}")
def test_the_95_interval_covers_a_true_zero_in_every_design(table, design):
    """Within a point of 95% and never optimistic by more than that (20,000 studies: the sd of a coverage is 0.0015);
    conservative designs (equal small sizes) up to 99%."""
    (row,) = [r for r in table if r[:4] == design]
    assert 0.94 <= row[4] <= 0.99, row


def test_textbook_welch_undercovers_where_the_cap_applies(table):
    """Without the cap, 3 training runs against 10 fine-tunings of a one-model baseline cover ~93%: the case the cap
    is for (docs/compare.md)."""
    worst = min(r[5] for r in table if r[0] == "one-model" and r[2] == 10 and r[3] == 3)
    assert worst < 0.94
    capped = min(r[4] for r in table if r[0] == "one-model" and r[2] == 10 and r[3] == 3)
    assert capped >= 0.945


def test_the_vectorised_interval_is_the_engines():
    """The simulation's interval (welch_dof + scipy's quantile) is compare_arms' and one_sample_interval's."""
    import numpy as np

    rng = np.random.default_rng(0)
    for path, ratio, b, u in [("one-model", 1.0, 10, 3), ("two-arms", 3.0, 3, 5), ("paired", 0.3, 3, 5)]:
        arm, base = _design_values(rng, path, ratio, b, u, 5)
        _, half = _covered(arm, base)
        for i in range(5):
            if base is None:
                found = one_sample_interval(list(arm[i]))
            else:
                found = compare_arms("arm", {f"u{j}": [v] for j, v in enumerate(arm[i])}, "base",
                                     {"base": list(base[i])} if path == "one-model" else
                                     {f"b{j}": [v] for j, v in enumerate(base[i])}).interval
            assert (found.high - found.low) / 2 == pytest.approx(half[i], rel=1e-6)


if __name__ == "__main__":  # the table of docs/compare.md: python tests/test_compare_statistics.py 200000
    import sys

    print("| path | training / fine-tuning sd | baseline fine-tunings (B) | units | coverage | textbook Welch |")
    print("|---|---|---|---|---|---|")
    for path, ratio, b, u, found, textbook in coverage_table(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000):
        print(f"| {path} | {ratio:g} | {b} | {u} | {100 * found:.1f}% | "
              f"{'-' if textbook is None else f'{100 * textbook:.1f}%'} |")
