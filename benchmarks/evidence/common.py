"""Helpers every evidence study shares: the JSON run cache (atomic appends, so an interrupted study continues),
the run's metadata, and the statistics of the reports (mean ± sd, paired t interval over seeds, verdicts)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile

import torch


def load_runs(path) -> list[dict]:
    """The runs stored in `path` ({"runs": [...]}); [] when the file does not exist yet."""
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        data = json.load(f)
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"evidence file {path!r}: field 'runs': expected a list of run objects")
    return runs


def append_run(path, run: dict) -> None:
    """Add one finished run to `path`, atomically: a temporary file in the same folder, then a rename (a study
    killed mid-write leaves the previous file intact)."""
    runs = load_runs(path) + [run]
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".runs-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as f:
            json.dump({"runs": runs}, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def has_run(runs, **keys) -> bool:
    """Whether a run matching every key=value is already stored."""
    return any(all(run.get(k) == v for k, v in keys.items()) for run in runs)


def run_meta() -> dict:
    """commit (short hash of HEAD, '+dirty' when the work tree has changes), device, 1-minute load average at
    start, and torch's thread count."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"commit": commit, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "load_avg": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads()}


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_sd: no values")
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def paired_ci(a, b, confidence=0.95) -> tuple[float, float, float]:
    """Mean of the paired differences a_i - b_i and its Student-t interval: (mean, low, high)."""
    from scipy import stats

    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired_ci: needs two equally long lists of at least 2 values, got {len(a)} and {len(b)}")
    differences = [float(x) - float(y) for x, y in zip(a, b)]
    mean, sd = mean_sd(differences)
    half = stats.t.ppf(0.5 + confidence / 2, len(differences) - 1) * sd / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def verdict(lo, hi, expected_sign) -> str:
    """'reproduced' when the interval lies on the expected side of 0 (expected_sign +1 or -1), 'not reproduced'
    when it lies on the other side, 'inconclusive' when it contains 0."""
    if expected_sign not in (1, -1):
        raise ValueError(f"verdict: field 'expected_sign': expected +1 or -1, got {expected_sign!r}")
    if lo > 0 or hi < 0:
        return "reproduced" if (lo > 0) == (expected_sign > 0) else "not reproduced"
    return "inconclusive"
