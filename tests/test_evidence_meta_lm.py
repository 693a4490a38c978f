"""benchmarks/evidence/meta_lm.py: `--quick` runs every variant of every claim for a few steps and renders the
report, so a refactor cannot silently break the study; the statistics helpers against hand computations."""

import json
import math

import pytest

from benchmarks.evidence import common
from benchmarks.evidence import meta_lm as study


def test_mean_sd_and_paired_ci_match_hand_computations():
    assert common.mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
    mean, sd = common.mean_sd([5.0])
    assert mean == 5.0 and math.isnan(sd)
    # differences 1, 2, 3: mean 2, sd 1, t_{0.975, 2} = 4.302653 -> half-width 4.302653 / sqrt(3)
    mean, low, high = common.paired_ci([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert mean == pytest.approx(2.0)
    assert (low, high) == (pytest.approx(2.0 - half, abs=1e-6), pytest.approx(2.0 + half, abs=1e-6))
    assert common._t_quantile(0.975, 2) == pytest.approx(4.302652729911275, abs=1e-6)
    assert common.verdict(0.5, 1.0, +1) == "reproduced"
    assert common.verdict(0.5, 1.0, -1) == "not reproduced"
    assert common.verdict(-0.5, 1.0, +1) == "inconclusive"


def test_json_cache_appends_atomically_and_finds_runs(tmp_path):
    path = tmp_path / "e.json"
    assert common.load_runs(path) == []
    common.append_run(path, {"claim": "c", "variant": "a", "seed": 0, "value": 1.0})
    common.append_run(path, {"claim": "c", "variant": "a", "seed": 1, "value": 2.0})
    runs = common.load_runs(path)
    assert [r["seed"] for r in runs] == [0, 1]
    assert common.has_run(runs, claim="c", variant="a", seed=1)
    assert not common.has_run(runs, claim="c", variant="b", seed=1)
    assert json.loads(path.read_text())["runs"] == runs
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == ["e.json"]  # no temp file left


def test_comparison_reports_incomplete_below_three_seeds():
    diff, result, n = study.comparison({0: 60.0, 1: 62.0}, {0: 50.0, 1: 55.0}, +1)
    assert result == "incomplete: 2 seeds so far" and n == "2"
    _, result, _ = study.comparison({0: 60.0, 1: 62.0, 2: 61.0}, {0: 50.0, 1: 51.0, 2: 52.0}, +1)
    assert result == "reproduced"


def test_quick_runs_every_variant_and_renders_the_report(tmp_path):
    json_path = tmp_path / "meta_lm.json"
    runs = study.main(["--quick", "--json", str(json_path)])
    moons = {r["variant"] for r in runs if r["claim"] == "two_moons"}
    assert moons == set(study.MOONS_OBJECTIVES)
    for run in runs:
        for key in ("claim", "variant", "seed", "metric", "value", "split", "steps", "wall_s", "cpu_s", "device",
                    "commit", "load_avg"):
            assert key in run, (run["claim"], key)
    for run in runs:
        if run["claim"] == "two_moons":
            assert 0.0 <= run["value"] <= 100.0
    shares = {r["variant"]: r for r in runs if r["claim"] == "teacher_share"}
    assert set(shares) == {"hard", "soft"}
    for row in shares.values():
        assert row["share_mlm_like"] + row["share_downstream_like"] + row["share_mixed"] == pytest.approx(1.0)
        for key in ("mean_y_copy", "mean_y_label", "mean_x_mask", "mean_p_y_copy", "mean_p_y_label"):
            assert 0.0 <= row[key] <= 1.0
    text_runs = [r for r in runs if r["claim"] == "text_tasks"]
    assert {(r["variant"], r["task"]) for r in text_runs} == {
        (v, t) for v in ("mlm", "soft") for t in study.QUICK_CLAIM2.tasks}
    assert all(0.0 <= r["majority"] <= 100.0 and r["finetune_lr"] in study.QUICK_CLAIM2.finetune_lrs
               for r in text_runs)
    soft = next(r for r in runs if r["claim"] == "text_pretraining" and r["variant"] == "soft")
    soft_logs = soft["logs"]
    for key in ("x_top_token_share", "y_top_token_share", "mean_y_task", "mean_y_label", "mean_x_mask"):
        assert 0.0 <= soft["teacher"][key] <= 1.0
    assert {"meta/x_hat_distinct", "meta/x_hat_pooled_entropy", "meta/x_hat_position_entropy"} <= set(soft_logs[-1])
    # a second call finds every run cached and adds nothing
    assert len(study.main(["--quick", "--json", str(json_path)])) == len(runs)
    report = study.render_report(runs, tmp_path / "report")
    text = report.read_text()
    assert "## Claim 1: Two Moons, Table 10" in text
    assert "incomplete: 1 seeds so far" in text and "| reproduced |" not in text  # one seed: no verdict
    assert (tmp_path / "report" / "meta_lm_two_moons.png").exists()
    assert (tmp_path / "report" / "meta_lm_text_teacher.png").exists()
