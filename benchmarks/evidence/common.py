"""Small helpers shared by the evidence studies (docs/evidence/<method>.json and .md): the JSON run cache with an
atomic append, run metadata, mean ± sd, the paired t interval over seeds, and the one-line verdict."""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np


def load_runs(path) -> list[dict]:
    """Every run object in the study's JSON file ({"runs": [...]}); [] when the file does not exist yet."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path) as f:
        return list(json.load(f).get("runs", []))


def append_run(path, run: dict) -> None:
    """Append one finished run to the JSON file atomically (temporary file in the same folder, then rename), so an
    interrupted study never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = load_runs(path) + [run]
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as f:
            json.dump({"runs": runs}, f, indent=1)
            f.write("\n")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def has_run(runs, **keys) -> bool:
    """Whether a run with all these key values is already cached."""
    return any(all(run.get(key) == value for key, value in keys.items()) for run in runs)


def run_meta() -> dict:
    """What every run object carries besides its results: commit, device, load average at start, torch threads."""
    import torch

    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"commit": commit, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "load_average": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads()}


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0.0 for a single value)."""
    values = np.asarray(list(values), dtype=np.float64)
    if values.size == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0


def paired_ci(a, b, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of the paired differences a - b and its Student-t interval over the pairs (seeds): (mean, lo, hi).
    NaN bounds with fewer than two pairs."""
    from scipy.stats import t

    a, b = np.asarray(list(a), dtype=np.float64), np.asarray(list(b), dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_ci: fields 'a'/'b': {a.size} vs {b.size} values; pairs need equal lengths")
    differences = a - b
    mean = float(differences.mean()) if differences.size else float("nan")
    if differences.size < 2:
        return mean, float("nan"), float("nan")
    half = t.ppf(0.5 + confidence / 2, differences.size - 1) * differences.std(ddof=1) / math.sqrt(differences.size)
    return mean, float(mean - half), float(mean + half)


def verdict(lo, hi, expected_sign) -> str:
    """'reproduced' when the interval excludes 0 on the expected side (+1 or -1), 'not reproduced' when it excludes
    0 on the other side, 'inconclusive' when it contains 0 (or is undefined)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 <= hi:
        return "inconclusive"
    return "reproduced" if (lo > 0) == (expected_sign > 0) else "not reproduced"
