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
    for r in (r for r in runs if r["claim"].startswith("downstream/")):  # through the engine: its record's fields
        assert 0 <= r["value"] <= 1 and 0 <= r["validation"] <= 1 and 0 <= r["majority_baseline"] <= 1
        assert r["cpu_s"] > 0 and r["wall_s"] > 0 and r["pooling"] == "cls" and r["metric"] == "accuracy"

    # cached: a second run adds nothing; --report renders from the JSON alone
    before = output.read_text()
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evidence" / "amos.py"), "--quick",
                            "--output", str(output)], capture_output=True, text=True, env=env, cwd=str(ROOT),
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert output.read_text() == before
    report = output.with_suffix(".md").read_text()
    for heading in ("Claim 1", "Claim 2", "incomplete: 1 seed so far", "## Retired sections", "section 'Not run'"):
        assert heading in report, heading
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


def test_claim3_pairs_by_pretraining_run():
    """Units are pretraining runs: within one, only the fine-tuning seeds both arms have count, averaged."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import paired_units

    def run(variant, pretrain_seed, seed, value, task="rotten_tomatoes"):
        return {"claim": f"downstream/{task}", "variant": variant, "pretrain_seed": pretrain_seed, "seed": seed,
                "value": value, "validation": value}

    runs = [run("amos", 42, 0, 0.60), run("amos", 42, 1, 0.62), run("amos", 42, 2, 0.70), run("amos", 1, 0, 0.58),
            run("electra", 1, 0, 0.55), run("electra", 42, 1, 0.64), run("electra", 42, 2, 0.66),
            run("electra", 2, 0, 0.99),  # no AMOS run of pretraining seed 2
            run("uniform", 42, 0, 0.61)]
    units, arm, reference = paired_units(runs, "rotten_tomatoes", "electra")
    assert units == [1, 42] and arm == pytest.approx([0.55, 0.65]) and reference == pytest.approx([0.58, 0.66])


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


def _claim_runs(setting="minilm", weights=(0.3, 0.3, 0.4), losses_by_unit=None, pooling="mean"):
    """Three AMOS and ELECTRA pretraining runs of one setting with their fine-tunings on both tasks (AMOS ahead by
    +0.02, 0.00, +0.04 per unit); `weights`: the AMOS runs' mixture at every logged step."""
    losses_by_unit = losses_by_unit or {42: (5.40, 5.38, 5.39), 1: (5.20, 5.41, 5.30), 2: (5.55, 5.35, 5.50)}
    runs = []
    for unit, amos_shift in {42: 0.02, 1: 0.00, 2: 0.04}.items():
        curve = [{"step": 200, **{f"eval_mlm_loss/layer_{d}": loss
                                  for d, loss in zip((2, 3, 4), losses_by_unit[unit])}}]
        train = [{"step": step, **{f"mixture_weight/layer_{d}": w for d, w in zip((2, 3, 4), weights)}}
                 for step in (100, 200)]
        runs.append({"claim": "pretrain", "variant": "amos", "setting": setting, "seed": unit, "value": 0.8,
                     "mlm_layers": [2, 3, 4], "eval_curve": curve, "train_curve": train})
        runs.append({"claim": "pretrain", "variant": "electra", "setting": setting, "seed": unit, "value": 0.8})
        for task in ("rotten_tomatoes", "news_outlet"):
            for seed in (0, 1, 2):
                for variant, shift in (("electra", 0.0), ("amos", amos_shift)):
                    runs.append({"claim": f"downstream/{task}", "variant": variant, "setting": setting,
                                 "pretrain_seed": unit, "seed": seed, "value": 0.70 + 0.01 * seed + shift,
                                 "validation": 0.70, **({"pooling": pooling} if pooling else {})})
    return runs


def test_claims_pair_arms_by_pretraining_run_and_say_when_claim_1_cannot_be_tested():
    """Claim 3: per pretraining seed, AMOS - ELECTRA with the fine-tuning seeds averaged first (3 units, not 9
    pairs), from the mean-pooling fine-tunings; claim 1: "not testable here" when the heads' final MLM losses differ
    by less than their seed-to-seed sd, with the losses in the reason, and the report's claim-1 section gives that
    same verdict."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import claims

    first, rt, news = claims(_claim_runs())[0]
    assert first["verdict"] == "not testable here" and "5.38, 5.38, 5.40" in first["reason"]  # means over runs
    assert "equally strong" in first["reason"] and first["mixture_moved"] == pytest.approx(0.0667, abs=1e-4)
    assert rt["n_units"] == 3 and rt["difference"] == pytest.approx(0.02)  # units +0.02, 0.00, +0.04
    assert rt["ci95"][0] == pytest.approx(0.02 - 4.302653 * 0.02 / 3 ** 0.5, abs=1e-5)
    assert rt["verdict"] == "inconclusive" and "mean pooling" in rt["setting"] and news["claim"].endswith("(Table 1)")
    assert not any(r.get("primary") for r in (first, rt, news))  # 5e-4 is not the primary rate


def test_claim_1_is_not_testable_where_the_mixture_never_moves():
    """At a rate where the weights stay within MIXTURE_MOVED of 1/K at every logged step (1e-5 and 2e-5 here: at most
    0.006), the adversarial mixture is not exercised: "not testable here", whatever the heads' strengths."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import MIXTURE_MOVED, claims, grid_setting

    strong = {42: (6.0, 5.5, 5.0), 1: (6.1, 5.6, 5.1), 2: (6.0, 5.4, 5.0)}  # the heads differ: only the move decides
    still = (1 / 3 - 0.004, 1 / 3 + 0.001, 1 / 3 + 0.003)
    (first, *_), _ = claims(_claim_runs(grid_setting(2e-5), weights=still, losses_by_unit=strong))
    assert first["verdict"] == "not testable here" and "not exercised" in first["reason"]
    assert "within 0.004 of 1/3" in first["reason"] and first["mixture_moved"] < MIXTURE_MOVED
    moved = (1 / 3 - 0.1, 1 / 3, 1 / 3 + 0.1)
    (first, *_), _ = claims(_claim_runs(grid_setting(2e-5), weights=moved, losses_by_unit=strong))
    assert first["verdict"] == "reproduced" and "reason" not in first  # deepest +0.1 in every unit


def test_first_token_claims_are_retired_and_the_primary_rate_is_marked():
    """Fine-tunings that read the first token of MiniLM's mean-pooled body are a broken setting: their claim-3
    records are "setting retired (rerun)" (numbers kept, outside the BH family); the claim-3 records at PRIMARY_RATE
    are the primary claims (docs/evidence/primaries.json)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import PRIMARY_RATE, claim_lines, claims, grid_setting
    from benchmarks.evidence.common import RETIRED

    old = _claim_runs(pooling=None)  # recorded before the pooling field: first-token runs
    first, *retired = claims(old)[0]
    assert first["claim"] == "the mixture moves to the deepest generator head (Fig. 3a)"
    assert [r["verdict"] for r in retired] == [RETIRED, RETIRED] and "q_value" not in retired[0]
    assert retired[0]["reason"].startswith("broken: fine-tuned reading the first token")
    assert retired[0]["difference"] == pytest.approx(0.02)
    runs = old + _claim_runs(grid_setting(PRIMARY_RATE))
    records, arms = claims(runs)
    primary = [r for r in records if r.get("primary")]
    assert [r["claim"].split(" on ")[1] for r in primary] == ["rotten_tomatoes (Table 1)", "news_outlet (Table 1)"]
    assert all(f"{PRIMARY_RATE:g}" in r["setting"] for r in primary)
    text = "\n".join(claim_lines(records, arms))
    assert "**Primary claims**" in text and text.count("| **yes** |") == 2


def test_each_arm_and_the_controls_against_minilm_are_claims_inside_the_family():
    """At the primary rate AMOS and ELECTRA against MiniLM (Welch over the arm's units and MiniLM's fine-tunings), and
    the attribution controls (a) learning rate 0 and (b) 20 steps, are claims with q values; the AMOS record carries
    control (a) of its task, and the report's control section says what it attributes."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import PRIMARY_RATE, claims, control_lines, grid_setting

    name = grid_setting(PRIMARY_RATE)
    runs = _claim_runs(name)
    for task in ("rotten_tomatoes", "news_outlet"):
        runs += [{"claim": f"downstream/{task}", "variant": "minilm", "setting": "minilm", "seed": s,
                  "value": 0.75 + 0.01 * s, "validation": 0.74, "pooling": "mean"} for s in (0, 1, 2)]
        runs += [{"claim": f"downstream/{task}", "variant": "amos", "setting": "control_lr0_20steps",
                  "pretrain_seed": unit, "seed": s, "value": 0.75 + 0.01 * s + 0.001 * k, "validation": 0.74,
                  "pooling": "mean", "classifier_head_activation": "tanh"}
                 for k, unit in enumerate((42, 1, 2)) for s in (0, 1, 2)]
        # the control's first fine-tunings recorded no head and had ELECTRA's GELU one: left out, listed
        runs += [{"claim": f"downstream/{task}", "variant": "amos", "setting": "control_lr0_20steps",
                  "pretrain_seed": 42, "seed": s, "value": 0.5, "validation": 0.5, "pooling": "mean"} for s in (0, 1)]
    records, arms = claims(runs)
    assert len(records) == len(arms)
    versus = {(r["arm_name"], r["setting_name"], r["task"]): r for r in records if r.get("arm_name")}
    amos = versus[("amos", name, "rotten_tomatoes")]
    # AMOS units 0.73, 0.71, 0.75 (mean over seeds of 0.70 + 0.01 s + shift) against MiniLM 0.75, 0.76, 0.77
    assert amos["difference"] == pytest.approx(0.73 - 0.76) and amos["verdict"] in ("not reproduced", "inconclusive")
    assert "q_value" in amos and amos["claim"] == "AMOS pretraining of MiniLM fine-tunes better than MiniLM on " \
                                                  "rotten_tomatoes"
    control = versus[("amos", "control_lr0_20steps", "rotten_tomatoes")]
    assert control["difference"] == pytest.approx(0.001) and "q_value" in control
    assert amos["control"]["setting_name"] == "control_lr0_20steps"
    assert ("electra", name, "news_outlet") in versus
    lines = "\n".join(control_lines(records))
    # the GELU-head fine-tunings are left out (control (a) equals MiniLM + 0.001), and the note says how many
    assert control["classifier_heads"] == {"arm": {"tanh": 9}, "MiniLM": {"tanh (by date)": 3},
                                           "left out": {"gelu (by date)": 2}}
    assert "; 2 fine-tunings with ELECTRA's GELU sentence head" in control["note"]
    # its interval [-0.024, +0.026] (MiniLM's fine-tuning noise counts) does not exclude -0.015, half of -0.03
    assert "## Controls for attribution" in lines and "too wide to exclude half the arm's difference (-0.015)" in lines
    assert "differs" not in amos["control"]
    # seed by seed: unit 42 (k = 0) equals MiniLM's fine-tuning of each seed, units 1 and 2 are 0.001 / 0.002 above
    assert control["seed_matched"] == {"pairs": 9, "equal": 3, "largest": 0.002}
    assert ("rotten_tomatoes, control (a): the AMOS command at learning rate 0 (20 steps, weights unchanged), seed by "
            "seed: 3 of 9 fine-tunings equal MiniLM's of the same fine-tuning seed; largest difference 0.002.") in lines
    assert "seed_matched" not in amos


def test_grid_table_gives_every_rate_against_minilm_with_welch_intervals():
    """Each rate's test difference from base MiniLM with its Welch interval (the grid table)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.evidence.amos import grid_lines, grid_setting

    name = grid_setting(1e-5)
    runs = []
    for task, shift in (("rotten_tomatoes", -0.05), ("news_outlet", 0.0)):
        runs += [{"claim": f"downstream/{task}", "variant": "minilm", "setting": "minilm", "seed": s,
                  "value": 0.70 + 0.01 * s, "validation": 0.7, "pooling": "mean"} for s in (0, 1, 2)]
        runs += [{"claim": f"downstream/{task}", "variant": "amos", "setting": name, "pretrain_seed": unit,
                  "seed": s, "value": 0.71 + shift + 0.01 * s + 0.01 * k, "validation": 0.7, "pooling": "mean"}
                 for k, unit in enumerate((42, 1, 2)) for s in (0, 1, 2)]
    runs += [{"claim": "pretrain", "variant": "amos", "setting": name, "seed": unit, "value": 0.7}
             for unit in (42, 1, 2)]
    (row,) = [line for line in grid_lines(runs) if line.startswith("| 1e-05 | amos | mean | 3 |")]
    assert row.split(" | ")[6].startswith("-0.030 [")  # rotten_tomatoes, test: arm - MiniLM [Welch's interval]
