"""The TARTAN evidence study (benchmarks/evidence/tartan.py): `--quick` runs every arm on a tiny model and renders
the report, so a refactor cannot silently break the study; the shared statistics against hand computations."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

EVIDENCE = Path(__file__).resolve().parents[1] / "benchmarks" / "evidence"


def _load(name):
    sys.path.insert(0, str(EVIDENCE))
    spec = importlib.util.spec_from_file_location(f"evidence_{name}", EVIDENCE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study():
    return _load("tartan")


@pytest.fixture(scope="module")
def common():
    return _load("common")


def test_mean_sd_and_paired_ci_by_hand(common):
    mean, sd = common.mean_sd([1.0, 2.0, 4.0])
    assert mean == pytest.approx(7 / 3)
    assert sd == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))
    # differences 0.15, 0.2, 0.25: mean 0.2, sd 0.05, t(0.975, 2) = 4.302653
    diff, lo, hi = common.paired_ci([0.6, 0.7, 0.8], [0.45, 0.5, 0.55])
    assert diff == pytest.approx(0.2)
    assert hi - diff == pytest.approx(4.302653 * 0.05 / math.sqrt(3), rel=1e-5)
    assert lo == pytest.approx(2 * diff - hi)
    assert common.verdict(lo, hi, +1) == "reproduced"
    assert common.verdict(lo, hi, -1) == "not reproduced"
    assert common.verdict(-0.1, 0.2, +1) == "inconclusive"
    with pytest.raises(ValueError, match="paired_ci"):
        common.paired_ci([1.0], [2.0])


def test_append_run_is_cumulative_and_has_run_matches(common, tmp_path):
    path = tmp_path / "e.json"
    assert common.load_runs(path) == []
    common.append_run(path, {"claim": "c", "variant": "a", "seed": 0, "value": 1.0})
    common.append_run(path, {"claim": "c", "variant": "b", "seed": 0, "value": 2.0})
    runs = common.load_runs(path)
    assert [r["variant"] for r in runs] == ["a", "b"]
    assert common.has_run(runs, claim="c", variant="b", seed=0)
    assert not common.has_run(runs, claim="c", variant="b", seed=1)
    assert [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [path]  # no temporary file left behind
    assert json.loads(path.read_text())["runs"][1]["value"] == 2.0


def test_quick_runs_every_arm_and_renders_the_report(study, tmp_path):
    runs = study.quick(str(tmp_path))
    probe = [r for r in runs if r["claim"] == "probe"]
    assert len(probe) == 1 and len(probe[0]["rows"]) == 2 * len(study.PROBE_GRID)
    assert all(len(row["accuracy"]) == 2 and 0 <= min(row["accuracy"]) for row in probe[0]["rows"])
    runs = [r for r in runs if r["claim"] != "probe"]
    arms = {(r["claim"], r["variant"]) for r in runs}
    scheduled = {(claim, v) for claim, names in study.SCHEDULE + study.CASSETTE_SCHEDULE for v in names}
    assert arms == scheduled | {("pilot", "meta_w80")}
    assert {v for _, v in arms} == set(study.VARIANTS) | {"meta_w80"}  # every arm ran
    for run in runs:
        for key in ("claim", "variant", "seed", "metric", "value", "split", "steps", "wall_s", "cpu_s", "device",
                    "commit", "load_avg", "test_accuracy", "test_macro_f1", "test_loss", "validation_macro_f1"):
            assert key in run, (run["variant"], key)
        assert 0.0 <= run["test_accuracy"] <= 1.0 and run["test_loss"] > 0
        assert run["best_step"] in (2, 4)
        assert run["pretrained_mlm_heads"] is (run["variant"] not in ("alone",))  # the tiny checkpoint ships one
    by_variant = {r["variant"]: r for r in runs}
    for name in ("mt", "meta", "mt_uniform", "meta_uniform", "meta_same", "meta_w80"):
        alpha = by_variant[name]["alpha"]
        assert alpha["steps"][-1] == 4 and set(alpha) == {"steps", "end_task", "tapt", "dapt"}
        assert all(abs(sum(alpha[t][i] for t in ("end_task", "tapt", "dapt")) - 1) < 1e-3
                   for i in range(len(alpha["steps"])))
    # MT: the fixed default mixture; META: starts from it (or from uniform) and moves by at most eta per step
    assert by_variant["mt"]["alpha"]["end_task"] == [pytest.approx(study.DEFAULT_MIXTURE[0], abs=1e-4)] * 4
    assert by_variant["meta"]["alpha"]["end_task"][0] == pytest.approx(study.DEFAULT_MIXTURE[0], abs=0.02)
    assert by_variant["meta_uniform"]["alpha"]["end_task"][0] == pytest.approx(1 / 3, abs=0.05)
    assert by_variant["meta_w80"]["alpha"]["end_task"][0] == pytest.approx(0.8, abs=0.02)
    for name in ("tapt_ft", "dapt_ft"):
        assert by_variant[name]["pretrain_mlm_loss"] > 0 and "alpha" not in by_variant[name]
    # cached: a second pass adds nothing
    assert study.run_arm(str(tmp_path / "tartan.json"), study.Setting("quick"), "end_task", study.VARIANTS["alone"],
                         0, str(tmp_path)) is None
    text = (tmp_path / "tartan.md").read_text()
    assert "## Claim 1" in text and "## Claim 2" in text and "incomplete: 1" in text and "## How to continue" in text
    assert "phi* on the frozen body" in text
    for figure in ("tartan_quick_claim1.png", "tartan_quick_claim2.png"):
        assert (tmp_path / figure).stat().st_size > 0
