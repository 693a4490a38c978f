"""Small generic helpers shared by the evidence studies (benchmarks/evidence/<method>.py): the JSON run cache,
run metadata, and the statistics every report needs (mean +- sd, paired t intervals over independent units, the
verdict against the paper's predicted sign), and the claims list (../shared/EVIDENCE.md).

The cache is one JSON file `{"runs": [...], "claims": [...]}`; each finished run appends its object atomically
(temp file + rename, under a lock), so an interrupted study continues where it stopped and a reader never sees half
a file. The claims are recomputed from the runs by the study's report step (`claim_record`, `write_claims`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path


def load_runs(path) -> list[dict]:
    """Every run object in the cache file (an empty list when the file does not exist yet)."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path) as handle:
        content = json.load(handle)
    runs = content.get("runs") if isinstance(content, dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"{path}: field 'runs': expected a list of run objects")
    return runs


def _update(path, change) -> None:
    """Rewrite the cache file as `change(content)` (content: the whole JSON object), atomically (a temp file beside
    it, then rename), holding a lock beside it so that processes sharing a study cannot lose each other's writes."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        content = {"runs": load_runs(path)}
        if path.is_file():
            content = {**json.loads(path.read_text()), **content}
        content = change(content)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(content, out, indent=1)
                out.write("\n")
            os.replace(temp, path)
        except BaseException:
            if os.path.exists(temp):
                os.remove(temp)
            raise


def append_run(path, run: dict) -> None:
    """Append one run object to the cache file (atomically, under the lock; the claims list is kept)."""
    _update(path, lambda content: {**content, "runs": content["runs"] + [run]})


def write_claims(path, claims: list[dict]) -> None:
    """Replace the cache file's claims list (`claim_record` objects), keeping its runs."""
    _update(path, lambda content: {**content, "claims": list(claims)})


def load_claims(path) -> list[dict]:
    """The cache file's claims list (empty when there is none yet)."""
    path = Path(path)
    return list(json.loads(path.read_text()).get("claims", [])) if path.is_file() else []


def has_run(runs, **keys) -> bool:
    """Whether a cached run matches every given key/value."""
    return any(all(run.get(k) == v for k, v in keys.items()) for run in runs)


def run_meta() -> dict:
    """Where and how a run ran: the repository commit, device, 1-minute load average at start, torch threads."""
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"commit": commit, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "load_avg": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads()}


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); sd is nan for fewer than two values, both for none."""
    values = [float(v) for v in values]
    if not values:
        return float("nan"), float("nan")
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t with `dof` degrees of freedom (scipy's when installed, else bisection on the
    regularised incomplete beta function computed by continued fraction)."""
    try:
        from scipy import stats

        return float(stats.t.ppf(p, dof))
    except ImportError:
        pass

    def cdf(t: float) -> float:
        x = dof / (dof + t * t)
        tail = 0.5 * _incomplete_beta(dof / 2.0, 0.5, x)
        return 1.0 - tail if t > 0 else tail

    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


_t_quantile = t_quantile  # the name one study's tests use


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) (Numerical Recipes' continued fraction, Lentz's method)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)) / a
    c, d, result = 1.0, 1.0 - (a + b) * x / (a + 1), 0.0
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    result = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
            c = 1.0 + numerator / c
            c = c if abs(c) > 1e-300 else 1e-300
            result *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * result


def paired_ci(a, b, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean of a - b, lower, upper): the t interval over paired seeds. Needs at least two pairs."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b):
        raise ValueError(f"paired_ci: fields 'a', 'b': {len(a)} and {len(b)} values are not paired")
    if len(a) < 2:
        raise ValueError(f"paired_ci: field 'a': a t interval needs at least 2 pairs, got {len(a)}")
    diffs = [x - y for x, y in zip(a, b)]
    mean, sd = mean_sd(diffs)
    half = t_quantile(0.5 + confidence / 2, len(diffs) - 1) * sd / math.sqrt(len(diffs))
    return mean, mean - half, mean + half


def verdict(lo: float, hi: float, expected_sign: int) -> str:
    """'reproduced' when the interval lies entirely on the paper's side of 0, 'not reproduced' when it lies
    entirely on the other side, 'inconclusive' when it includes 0."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    if expected_sign not in (1, -1):
        raise ValueError(f"verdict: field 'expected_sign': must be 1 or -1, got {expected_sign}")
    if lo > 0 or hi < 0:
        return "reproduced" if (lo > 0) == (expected_sign > 0) else "not reproduced"
    return "inconclusive"


def unit_differences(arm: dict, base: dict) -> dict:
    """Per independent unit (e.g. one pretraining run), the mean over its fine-tuning seeds of arm - base.

    arm: {(unit, seed): value}; base: {seed: value} (a shared starting point fine-tuned with the same seeds, so each
    arm value is paired with the base of its seed). Fine-tuning seeds inside a unit are averaged first: they are
    not extra units (../shared/EVIDENCE.md). Returns {unit: difference} for units with at least one paired seed."""
    units: dict = {}
    for (unit, seed), value in arm.items():
        if seed in base:
            units.setdefault(unit, []).append(float(value) - float(base[seed]))
    return {unit: sum(values) / len(values) for unit, values in units.items()}


NOT_TESTABLE = "not testable here"


def claim_record(claim: str, paper: str, predicted_sign: int, unit: str, differences,
                 reason: str | None = None, **extra) -> dict:
    """One entry of the claims list (../shared/EVIDENCE.md): `differences` are the per-unit differences (arm - base,
    e.g. `unit_differences(...).values()`) whose sign the paper predicts (`predicted_sign` in THIS setting). The
    verdict follows mechanically from the 95% interval over units; with `reason` (the measured reason), or fewer
    than 3 units, it is "not testable here" / "inconclusive" and says why. `extra`: further fields (setting, arms)."""
    values = [float(v) for v in differences]
    mean, lo, hi = unit_ci(values) if values else (float("nan"),) * 3
    record = {"claim": claim, "paper": paper, "predicted_sign": predicted_sign, "unit": unit,
              "n_units": len(values), "difference": None if math.isnan(mean) else round(mean, 6),
              "ci95": None if math.isnan(lo) else [round(lo, 6), round(hi, 6)], **extra}
    if reason is not None:
        return {**record, "verdict": NOT_TESTABLE, "reason": reason}
    if len(values) < 3:
        return {**record, "verdict": "inconclusive", "reason": f"{len(values)} of the 3 units needed"}
    return {**record, "verdict": verdict(lo, hi, predicted_sign)}


def difference_text(item: dict, digits: int = 3) -> str:
    """A claim record's difference with its 95% interval, "+0.051 [+0.022, +0.080]" ("-" without a difference)."""
    if item.get("difference") is None:
        return "-"
    text = f"{item['difference']:+.{digits}f}"
    if item.get("ci95"):
        text += f" [{item['ci95'][0]:+.{digits}f}, {item['ci95'][1]:+.{digits}f}]"
    return text


def claims_table(claims: list[dict], link: str) -> list[str]:
    """The README's Evidence rows of one method's claims: claim | verdict | difference [95% CI] | link."""
    return [f"| {item['claim']} | {item['verdict']} | {difference_text(item)} ({item['n_units']} units) | {link} |"
            for item in claims]


def unit_ci(differences, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, lower, upper): the t interval over independent units' differences (`unit_differences`); nan bounds
    for fewer than two units."""
    values = [float(v) for v in differences]
    if len(values) < 2:
        mean = mean_sd(values)[0]
        return mean, float("nan"), float("nan")
    return paired_ci(values, [0.0] * len(values), confidence)
