"""The AMOS evidence study's --quick mode: every pretraining arm and both fine-tuning tasks run end to end on tiny
models, the JSON cache holds what the report reads, and --report renders the claims and figures from it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quick_study_runs_every_variant_and_renders_the_report(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "AMOS_EVIDENCE_WORK": str(tmp_path / "work")}
    output = tmp_path / "amos.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evidence" / "amos.py"), "--quick", "--output",
                          str(output)], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    runs = json.loads(output.read_text())["runs"]
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import ORDER, TASKS, head_names

    pretraining = {r["variant"]: r for r in runs if r["claim"] == "pretrain"}
    assert sorted(pretraining) == sorted(ORDER)
    for name, r in pretraining.items():
        for key in ("seed", "steps", "wall_s", "cpu_s", "device", "commit", "load_avg", "split", "metric"):
            assert key in r, (name, key)
        assert [e["step"] for e in r["eval_curve"]] == [2, 4] and r["steps"] == 4
        assert 0 <= r["value"] <= 1
        check = r["plain_transformers_check"]  # plain transformers scores the replaced tokens as AmosModel does
        assert check["plain_class"] == "ElectraForPreTraining" and check["max_abs_logit_difference"] < 1e-4
        assert abs(check["plain_auc/mixture"] - check["amos_auc"]) < 1e-6
        heads = head_names(r)
        if len(heads) > 1:  # the discriminator's separation of each head's samples alone, at every evaluation
            assert all(f"eval_rtd_auc/{h}" in e for e in r["eval_curve"] for h in heads)
            assert all(f"plain_auc/{h}" in check for h in heads)
    assert pretraining["electra"]["mlm_layers"] == [2] and pretraining["amos"]["mlm_layers"] == [1, 2]
    assert head_names(pretraining["separate_gens"]) == ["generator_1_depth_1", "generator_2_depth_2"]
    weights = pretraining["amos"]["train_curve"][-1]
    assert abs(weights["mixture_weight/layer_1"] + weights["mixture_weight/layer_2"] - 1) < 1e-5
    # 'w. final mix weights' trains with the AMOS run's last logged weights of the same seed, all the way
    final = [weights["mixture_weight/layer_1"], weights["mixture_weight/layer_2"]]
    fixed = pretraining["final_mix_weights"]
    assert fixed["fixed_weights"] == final
    for entry in fixed["train_curve"]:
        assert [entry["mixture_weight/layer_1"], entry["mixture_weight/layer_2"]] == pytest.approx(final, abs=1e-5)
    downstream = {(r["claim"], r["variant"]) for r in runs if r["claim"].startswith("downstream/")}
    assert downstream == {(f"downstream/{task}", name) for task in TASKS for name in ORDER}

    # cached: a second run adds nothing; --report renders from the JSON alone
    before = output.read_text()
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evidence" / "amos.py"), "--quick",
                            "--output", str(output)], capture_output=True, text=True, env=env, cwd=str(ROOT),
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert output.read_text() == before
    report = output.with_suffix(".md").read_text()
    for heading in ("Claim 1", "Claim 2", "Claim 3", "How to continue", "incomplete: 1 seed so far", "Not run",
                    "three 4-layer gen."):
        assert heading in report, heading
    assert "Arms without a pretraining run" not in report  # --quick runs every arm
    assert (tmp_path / "amos_mixture_weights.png").is_file() and (tmp_path / "amos_curriculum.png").is_file()


def test_shared_statistics_by_hand():
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.common import mean_sd, paired_ci, verdict

    assert mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
    # differences 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653: 2 -/+ 4.302653 / sqrt(3)
    mean, lo, hi = paired_ci([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert mean == 2.0 and abs(lo - (2 - 2.4841377)) < 1e-6 and abs(hi - (2 + 2.4841377)) < 1e-6
    assert verdict(lo, hi, +1) == "inconclusive"
    assert verdict(0.1, 0.3, +1) == "reproduced" and verdict(0.1, 0.3, -1) == "not reproduced"
    assert verdict(float("nan"), float("nan"), +1) == "inconclusive"


def test_select_splits_the_plan_into_disjoint_shares():
    from benchmarks.evidence.amos import SETTINGS, plan, select

    steps = plan(SETTINGS["minilm"])
    electra = select(steps, arms=["electra"])
    rest = select(steps, arms=["minilm", "amos"])
    assert electra == [("pretrain", "electra", seed) for seed in (42, 1, 2)]
    assert rest == [("pretrain", "amos", 42), ("base", "minilm", None), ("pretrain", "amos", 1),
                    ("pretrain", "amos", 2)]
    assert not set(electra) & set(rest)
    assert select(steps, arms=["amos"], seeds=[1, 2]) == [("pretrain", "amos", 1), ("pretrain", "amos", 2)]
    assert select(steps) == steps


def test_starting_point_rows_pair_by_finetuning_seed_and_average_pretraining_seeds():
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import _starting_point_rows

    runs = [{"variant": "minilm", "seed": s, "value": v} for s, v in ((0, 0.70), (1, 0.72), (2, 0.74))]
    # amos: two pretraining seeds per fine-tuning seed, means 0.60, 0.61, 0.65 -> differences -0.10, -0.11, -0.09
    finetunings = ((0, (0.59, 0.61)), (1, (0.60, 0.62)), (2, (0.64, 0.66)))
    runs += [{"variant": "amos", "seed": s, "pretrain_seed": p, "value": v}
             for s, values in finetunings for p, v in zip((42, 1), values)]
    (row,) = [line for line in _starting_point_rows(runs) if line.startswith("| amos")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "2" and cells[2].startswith("-0.100 [") and cells[3] == "hurts"
    low, high = (float(x) for x in cells[2].split("[")[1].split("]")[0].split(", "))
    half = 4.302653 * 0.01 / 3 ** 0.5  # t(0.975, 2) * sd of (-0.10, -0.11, -0.09) / sqrt(3)
    assert abs(low - (-0.100 - half)) < 1.5e-3 and abs(high - (-0.100 + half)) < 1.5e-3


def test_claim3_pairs_by_pretraining_run_and_the_forest_plot_draws_arms_with_two_runs(tmp_path):
    """Units are pretraining runs: within one, only the fine-tuning seeds both arms have count, averaged."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import _downstream_plot, _paired_with_reference

    def run(variant, pretrain_seed, seed, value, task="rotten_tomatoes"):
        return {"claim": f"downstream/{task}", "variant": variant, "pretrain_seed": pretrain_seed, "seed": seed,
                "value": value}

    runs = [run("amos", 42, 0, 0.60), run("amos", 42, 1, 0.62), run("amos", 42, 2, 0.70), run("amos", 1, 0, 0.58),
            run("electra", 1, 0, 0.55), run("electra", 42, 1, 0.64), run("electra", 42, 2, 0.66),
            run("electra", 2, 0, 0.99),  # no AMOS run of pretraining seed 2
            run("uniform", 42, 0, 0.61)]
    task_runs = [r for r in runs if r["claim"] == "downstream/rotten_tomatoes"]
    units, arm, reference = _paired_with_reference(task_runs, "electra")
    assert units == [1, 42] and arm == pytest.approx([0.55, 0.65]) and reference == pytest.approx([0.58, 0.66])
    assert _downstream_plot(runs, tmp_path / "forest.png") and (tmp_path / "forest.png").stat().st_size > 0
    assert not _downstream_plot([r for r in runs if r["variant"] != "electra"], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()  # uniform has one pair: no interval to draw


def test_not_run_section_names_the_missing_arms_and_seeds_with_the_measured_cost():
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import ORDER, SETTINGS, _not_run_lines

    setting = SETTINGS["minilm"]
    runs = [{"claim": "pretrain", "variant": name, "seed": seed, "cpu_s": 600.0}
            for name in ORDER if name != "separate_gens" for seed in setting["pretrain_seeds"]
            if (name, seed) != ("electra", 2)]
    runs += [{"claim": "downstream/rotten_tomatoes", "variant": "amos", "seed": 0, "pretrain_seed": seed,
              "cpu_s": 300.0} for seed in setting["pretrain_seeds"]]
    text = "\n".join(_not_run_lines(runs, setting))
    assert "three 4-layer gen." in text
    assert "`electra` (seeds 2), `separate_gens` (seeds 42, 1, 2)" in text
    assert "about 15 CPU minutes" in text  # (3 x 600 + 3 x 300) s over 3 AMOS pretraining seeds


def test_grid_rows_use_pretraining_runs_as_units_against_minilm():
    """The learning-rate grid: each rate's pretraining runs are the units (fine-tuning seeds averaged first), paired
    with MiniLM fine-tuned on the same seeds; the default setting's runs are its 5e-4 row."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import grid_lines, grid_rows, grid_setting

    name = grid_setting(2e-5)
    runs = []
    for task in ("rotten_tomatoes", "news_outlet"):
        runs += [{"claim": f"downstream/{task}", "variant": "minilm", "setting": "minilm", "seed": s, "value": 0.70,
                  "validation": 0.72} for s in (0, 1)]
        for unit, shift in ((42, -0.02), (1, 0.0), (2, 0.02)):
            runs += [{"claim": f"downstream/{task}", "variant": "amos", "setting": name, "pretrain_seed": unit,
                      "seed": s, "value": 0.70 + shift + 0.01 * s, "validation": 0.72 + shift} for s in (0, 1)]
    runs += [{"claim": "pretrain", "variant": "amos", "setting": name, "seed": unit, "value": 0.8}
             for unit in (42, 1, 2)]
    (row,) = grid_rows(runs)
    assert (row["rate"], row["arm"], row["units"], row["rotten_tomatoes/units"]) == (2e-5, "amos", 3, 3)
    mean, lo, hi = row["rotten_tomatoes/test"]  # unit differences -0.015, +0.005, +0.025: mean 0.005, sd 0.02
    assert mean == pytest.approx(0.005) and hi - mean == pytest.approx(4.302653 * 0.02 / 3 ** 0.5, abs=1e-6)
    assert row["rotten_tomatoes/validation"][0] == pytest.approx(0.0)
    table = "\n".join(grid_lines(runs))
    assert "| 2e-05 | amos | cls | 3 | 0.800 |" in table and table.rstrip().count("| yes | no |") == 1  # (b): lower end
    # runs read with mean pooling form their own row, paired with MiniLM read with mean pooling only
    for task in ("rotten_tomatoes", "news_outlet"):
        runs += [{"claim": f"downstream/{task}", "variant": "minilm", "setting": "minilm", "seed": s, "value": 0.80,
                  "validation": 0.80, "pooling": "mean"} for s in (0, 1)]
        runs += [{"claim": f"downstream/{task}", "variant": "amos", "setting": name, "pretrain_seed": unit,
                  "seed": s, "value": 0.75, "validation": 0.77, "pooling": "mean"} for unit in (42, 1) for s in (0, 1)]
    cls_row, mean_row = grid_rows(runs)
    assert cls_row["rotten_tomatoes/test"][0] == pytest.approx(0.005) and cls_row["rotten_tomatoes/units"] == 3
    assert mean_row["pooling"] == "mean" and mean_row["rotten_tomatoes/units"] == 2
    assert mean_row["rotten_tomatoes/test"][0] == pytest.approx(-0.05)
    assert mean_row["news_outlet/validation"][0] == pytest.approx(-0.03)


def test_claims_pair_arms_by_pretraining_run_and_say_when_claim_1_cannot_be_tested():
    """Claim 3: per pretraining seed, AMOS - ELECTRA with the fine-tuning seeds averaged first (3 units, not 9
    pairs); claim 1: "not testable here" when the heads' final MLM losses differ by less than their seed-to-seed sd,
    with the losses in the reason."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import claims

    runs = []
    for unit, (amos_shift, losses) in {42: (0.02, (5.40, 5.38, 5.39)), 1: (0.00, (5.20, 5.41, 5.30)),
                                       2: (0.04, (5.55, 5.35, 5.50))}.items():
        curve = [{"step": 200, **{f"eval_mlm_loss/layer_{d}": loss for d, loss in zip((2, 3, 4), losses)}}]
        train = [{"step": 200, "mixture_weight/layer_2": 0.3, "mixture_weight/layer_3": 0.3,
                  "mixture_weight/layer_4": 0.4}]
        runs.append({"claim": "pretrain", "variant": "amos", "setting": "minilm", "seed": unit, "value": 0.8,
                     "mlm_layers": [2, 3, 4], "eval_curve": curve, "train_curve": train})
        runs.append({"claim": "pretrain", "variant": "electra", "setting": "minilm", "seed": unit, "value": 0.8})
        for task in ("rotten_tomatoes", "news_outlet"):
            for seed in (0, 1, 2):
                runs.append({"claim": f"downstream/{task}", "variant": "electra", "setting": "minilm",
                             "pretrain_seed": unit, "seed": seed, "value": 0.70 + 0.01 * seed})
                runs.append({"claim": f"downstream/{task}", "variant": "amos", "setting": "minilm",
                             "pretrain_seed": unit, "seed": seed, "value": 0.70 + 0.01 * seed + amos_shift})
    first, rt, news = claims(runs)
    assert first["verdict"] == "not testable here" and "5.38, 5.38, 5.40" in first["reason"]  # means over runs
    assert rt["n_units"] == 3 and rt["difference"] == pytest.approx(0.02)  # units +0.02, 0.00, +0.04
    assert rt["ci95"][0] == pytest.approx(0.02 - 4.302653 * 0.02 / 3 ** 0.5, abs=1e-5)
    assert rt["verdict"] == "inconclusive" and "cls pooling" in rt["setting"] and news["claim"].endswith("(Table 1)")
