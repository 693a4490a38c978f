"""Small helpers every evidence study shares (docs/evidence/*.json caches, statistics over seeds, verdicts).

A study appends one JSON object per finished run to ``docs/evidence/<method>.json`` (``{"runs": [...]}``) with
`append_run` (atomic: temp file + rename, so an interrupted study never leaves a half-written file), skips runs
already there with `has_run`, and reports mean ± sd over seeds (`mean_sd`) and paired differences with a t
interval over seeds (`paired_ci`), turned into a one-line verdict by `verdict`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path


def load_runs(path) -> list[dict]:
    """The runs recorded in `path` (``{"runs": [...]}``); an empty list when the file does not exist yet."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ValueError(f"evidence file {path}: expected an object with a 'runs' list")
    return data["runs"]


def append_run(path, run: dict) -> None:
    """Append `run` to `path`'s runs, writing a temp file beside it and renaming it over the old one (atomic)."""
    path = Path(path)
    runs = load_runs(path) + [run]
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump({"runs": runs}, out, indent=1)
            out.write("\n")
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def has_run(runs, **keys) -> bool:
    """Whether a run with all of `keys` (e.g. claim, variant, seed) is among `runs`."""
    return any(all(run.get(k) == v for k, v in keys.items()) for run in runs)


def run_meta() -> dict:
    """What every run object carries about where it ran: commit, device, 1-minute load average, torch threads."""
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"commit": commit, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "load_avg": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads()}


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); sd is nan for a single value."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_sd: no values")
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile (scipy, which scikit-learn, hence hf_aux.two_moons, already needs)."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def paired_ci(a, b, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of the paired differences a - b and its t interval over the pairs: (mean, low, high)."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired_ci: need two equally long lists of >= 2 paired values, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b)]
    mean, sd = mean_sd(diffs)
    half = _t_quantile(0.5 + confidence / 2, len(diffs) - 1) * sd / math.sqrt(len(diffs))
    return mean, mean - half, mean + half


def verdict(lo, hi, expected_sign) -> str:
    """'reproduced' when the interval lies on the expected side of 0 (expected_sign +1 or -1),
    'not reproduced' when it lies on the other side, 'inconclusive' when it contains 0."""
    if expected_sign not in (1, -1):
        raise ValueError(f"verdict: expected_sign must be +1 or -1, got {expected_sign!r}")
    if lo > 0 or hi < 0:
        return "reproduced" if (lo > 0) == (expected_sign > 0) else "not reproduced"
    return "inconclusive"
