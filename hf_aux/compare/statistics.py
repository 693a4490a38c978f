"""The statistics of `hf-aux compare` and of the evidence studies (docs/compare.md says why each rule):
1. an arm's units are its training runs (model folders); a unit's value is the mean of its fine-tunings;
2. arm minus baseline: Welch's two-sample t interval over the two arms' values, so it holds every source of noise
   of both (pairing units with the same baseline fine-tunings would hide the baseline's own fine-tuning noise); its
   degrees of freedom capped where the side with fewer values dominates the variance (`welch_dof`);
3. an arm of ONE model contributes its fine-tunings: right for a fixed baseline model; a compared arm of one model
   is one checkpoint, not its method, so the comparison is flagged and gets no verdict words;
4. multiplicity: Benjamini-Hochberg q values over the comparisons of one report.
Pure Python (no scipy): Student's t from the regularised incomplete beta function."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MIN_UNITS = 3  # units an arm needs before a comparison gets verdict words (../shared/EVIDENCE.md)
ONE_RUN_FLAG = "fine-tuning noise only: one training run of this arm"


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); sd is nan for fewer than two values, both for none."""
    values = [float(v) for v in values]
    if not values:
        return float("nan"), float("nan")
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# Not scipy (143 MB; once installed, transformers imports it in every hf-aux command: +0.14 s); torch's StudentT: no cdf
def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) (continued fraction, modified Lentz's method)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-13:
            break
    return front * result


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * _incomplete_beta(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t (bisection on `t_cdf`; exact to ~1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: field 'p': {p} not in (0, 1)")
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, dof) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Interval:
    """difference = mean(a) - mean(b), its confidence interval [low, high], the degrees of freedom and the
    two-sided p value of 'no difference' (nan where there is too little data for a variance)."""

    difference: float
    low: float
    high: float
    dof: float
    p_value: float


def _t_interval(difference: float, variance_of_difference: float, dof: float, confidence: float) -> Interval:
    if variance_of_difference == 0:  # every value alike: the interval is the point (the t interval's limit)
        return Interval(difference, difference, difference, dof, 1.0 if difference == 0 else 0.0)
    if not (variance_of_difference > 0 and dof > 0 and math.isfinite(dof)):  # fewer than 2 values: no variance
        return Interval(difference, float("nan"), float("nan"), dof, float("nan"))
    se = math.sqrt(variance_of_difference)
    half = t_quantile(0.5 + confidence / 2, dof) * se
    p_value = 2.0 * (1.0 - t_cdf(abs(difference) / se, dof))
    return Interval(difference, difference - half, difference + half, dof, min(1.0, p_value))


def welch_dof(va: float, vb: float, n_a: int, n_b: int, small_side_cap: bool = True) -> float:
    """The degrees of freedom of Welch's interval, from each side's variance of its mean (va = sd_a^2 / n_a, ...).

    Welch-Satterthwaite's estimate, capped at n - 1 of the side with FEWER values when that side carries at least
    half the variance of the difference (`small_side_cap`). Why: with few values on the side that dominates the
    variance (3 training runs against 10 fine-tunings of a one-model baseline), the estimated degrees of freedom are
    often far above what that side's variance estimate holds, and the 95% interval covers a true zero in only ~93%
    of studies; the cap (the Hsu / Banerjee bound applied where it is needed) brings every simulated design of
    tests/test_compare_statistics.py back to >= 94.5% (docs/compare.md: the table). Equal sizes: no cap."""
    if va + vb <= 0:
        return n_a + n_b - 2
    dof = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    if small_side_cap and n_a != n_b:
        small_variance, small_n = (va, n_a) if n_a < n_b else (vb, n_b)
        if small_variance >= (va + vb) / 2:
            dof = min(dof, small_n - 1)
    return dof


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95,
                   small_side_cap: bool = True) -> Interval:
    """Welch's interval for mean(a) - mean(b) (unequal variances; Welch-Satterthwaite degrees of freedom, capped as
    `welch_dof` says; `small_side_cap=False`: the textbook interval, as scipy's ttest_ind(equal_var=False))."""
    (mean_a, sd_a), (mean_b, sd_b) = mean_sd(a), mean_sd(b)
    if len(a) < 2 or len(b) < 2:
        return _t_interval(mean_a - mean_b, float("nan"), float("nan"), confidence)
    va, vb = sd_a ** 2 / len(a), sd_b ** 2 / len(b)
    return _t_interval(mean_a - mean_b, va + vb, welch_dof(va, vb, len(a), len(b), small_side_cap), confidence)


def one_sample_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The t interval for the mean of `values` (e.g. per-unit differences of arms that share a seed by design)."""
    mean, sd = mean_sd(values)
    if len(values) < 2:
        return _t_interval(mean, float("nan"), float("nan"), confidence)
    return _t_interval(mean, sd ** 2 / len(values), len(values) - 1, confidence)


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg q values in the order given: q_(i) = min over j >= i of p_(j) * m / j (p ascending),
    capped at 1; nan p values (no interval) are left out of the family and get nan."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if p is not None and math.isfinite(p))
    m = len(indexed)
    q = [float("nan")] * len(p_values)
    running = 1.0
    for rank in range(m, 0, -1):
        p, index = indexed[rank - 1]
        running = min(running, p * m / rank)
        q[index] = running
    return q


def arm_values(fine_tunings: Mapping[str, Sequence[float]]) -> tuple[list[float], bool]:
    """(the values an arm contributes, whether they are units) from unit -> its fine-tunings' values (rules 1, 3)."""
    units = [list(map(float, values)) for values in fine_tunings.values() if len(values)]
    if len(units) == 1:
        return units[0], False
    return [sum(values) / len(values) for values in units], True


@dataclass(frozen=True)
class Comparison:
    """One arm against the baseline: the interval of arm - baseline, the number of units on each side, the q value
    within its family (nan until `with_q_values`), and a flag where the arm's values are not training runs."""

    arm: str
    baseline: str
    interval: Interval
    n_units: int
    n_baseline_units: int
    q_value: float = float("nan")
    flag: str | None = None


def compare_arms(arm: str, fine_tunings: Mapping[str, Sequence[float]], baseline: str,
                 baseline_fine_tunings: Mapping[str, Sequence[float]], confidence: float = 0.95) -> Comparison:
    """arm - baseline by the rules of the module docstring. Both mappings: unit -> its fine-tunings' values."""
    values, are_units = arm_values(fine_tunings)
    reference, _ = arm_values(baseline_fine_tunings)
    n_units = len([v for v in fine_tunings.values() if len(v)])
    flag = None
    if not are_units:
        flag = ONE_RUN_FLAG
    elif n_units < MIN_UNITS:
        flag = f"{n_units} training runs of this arm: {MIN_UNITS} are needed for a verdict"
    return Comparison(arm, baseline, welch_interval(values, reference, confidence), n_units,
                      len([v for v in baseline_fine_tunings.values() if len(v)]), flag=flag)


def with_q_values(comparisons: Iterable[Comparison]) -> list[Comparison]:
    """The comparisons of one report with their Benjamini-Hochberg q values (the report is the family)."""
    comparisons = list(comparisons)
    q = benjamini_hochberg([c.interval.p_value for c in comparisons])
    return [dataclasses.replace(c, q_value=value) for c, value in zip(comparisons, q)]


def verdict_words(comparison: Comparison, higher_is_better: bool = True, alpha: float = 0.05) -> str:
    """Words that do not overclaim: 'better' / 'worse' only for an arm of >= 3 training runs whose interval excludes
    0, with whether it survives Benjamini-Hochberg at `alpha`; otherwise what the interval can and cannot say."""
    if comparison.flag is not None:
        return comparison.flag
    interval = comparison.interval
    if not math.isfinite(interval.low):
        return "no interval: fewer than 2 values on a side"
    if interval.low <= 0 <= interval.high:
        return "no difference shown (the interval contains 0)"
    better = (interval.low > 0) == higher_is_better
    survives = "survives" if comparison.q_value <= alpha else "does not survive"
    return f"{'better' if better else 'worse'} than {comparison.baseline} ({survives} Benjamini-Hochberg at {alpha:g})"
