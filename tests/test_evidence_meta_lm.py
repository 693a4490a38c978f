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
        (v, t) for v in ("mlm", "soft", "soft_fixed_y") for t in study.QUICK_CLAIM2.tasks}
    assert all(0.0 <= r["majority"] <= 100.0 and r["finetune_lr"] in study.QUICK_CLAIM2.finetune_lrs
               for r in text_runs)
    # "did not train" is read from training accuracy: every fine-tuning records it with its training set's majority
    for run in runs:
        if run["claim"] in ("two_moons", "text_tasks"):
            assert 0.0 <= run["train_accuracy"] <= 100.0 and 0.0 < run["train_majority"] <= 100.0, run["claim"]
    moon = next(r for r in runs if r["claim"] == "two_moons")
    assert moon["train_majority"] == pytest.approx(study.moons_train_majority(moon["seed"], moon["finetune_size"]))
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
    assert "1 of the 3 units needed" in text and "| reproduced |" not in text  # one seed: no verdict
    # the report opens its findings with the claims table, and --quick wrote the same claims into the JSON
    assert text.index("## Claims and verdicts") < text.index("## Claim 1: Two Moons, Table 10")
    written = common.load_claims(json_path)
    assert written and all(item["n_units"] <= 1 for item in written)  # a unit that did not train is a missing point
    assert {item["verdict"] for item in written} <= {"inconclusive", "no verdict"}  # one unit each: no direction
    assert any(item["claim"] == "Text: soft labels with fixed y fine-tune better than MLM" for item in written)
    assert json.loads(json_path.read_text())["runs"] == common.load_runs(json_path)  # the runs are kept
    assert (tmp_path / "report" / "meta_lm_two_moons.png").exists()
    assert not (tmp_path / "report" / "meta_lm_text_teacher.png").exists()  # retired with claim 2's teacher section


T_975_2 = 4.302652729911275  # Student's t, 0.975 quantile, 2 degrees of freedom (3 units)


def _moons(variant, size, seed, value, train=100.0, majority=50.0):
    return {"claim": "two_moons", "variant": variant, "finetune_size": size, "seed": seed, "value": value,
            "train_accuracy": train, "train_majority": majority}


def _find(records, claim_start, **fields):
    found = [r for r in records if r["claim"].startswith(claim_start)
             and all(r.get(k) == v for k, v in fields.items())]
    assert len(found) == 1, (claim_start, fields, len(found))
    return found[0]


def test_moons_claims_have_the_seeds_of_one_size_as_units_paired_with_the_papers_sign_per_size():
    """Units = the seeds of one size (not summed over sizes), paired by seed; MLM - meta is predicted > 0 up to 40
    examples; MLM - soft at 80 and 160 gets no verdict (§4.2 Results: soft's lead there is "not statistically
    significant", so the paper predicts no sign); fixed y only where the paper ran it (10, 160)."""
    runs = []
    for seed, (mlm, hard, soft) in enumerate([(70.0, 60.0, 65.0), (80.0, 72.0, 74.0), (75.0, 66.0, 70.0)]):
        runs += [_moons("mlm", 10, seed, mlm), _moons("hard", 10, seed, hard), _moons("soft", 10, seed, soft),
                 _moons("soft_fixed_y", 10, seed, 90.0)]
    for seed, (mlm, soft) in enumerate([(90.0, 87.0), (92.0, 88.0), (94.0, 89.0)]):
        runs += [_moons("mlm", 160, seed, mlm), _moons("soft", 160, seed, soft)]
    runs += [_moons("hard", 160, 0, 85.0), _moons("hard", 160, 1, 86.0)]  # 2 seeds only
    runs += [_moons("mlm", 10, 7, 99.0)]  # a seed no other objective has: not paired, no unit
    runs += [_moons(v, 40, s, 70.0 + s) for v in ("soft_fixed_y", "mlm") for s in range(3)]  # fixed y: no claim at 40
    records = study.claims(runs)

    hard = _find(records, "Two Moons: MLM fine-tunes at least as well as hard", size=10)
    # MLM - Hard per seed: 10, 8, 9 -> mean 9, sd 1, half-width t * 1 / sqrt(3)
    assert hard["n_units"] == 3 and hard["difference"] == pytest.approx(9.0)
    assert hard["ci95"] == [pytest.approx(9 - T_975_2 / 3 ** 0.5, abs=1e-5),
                            pytest.approx(9 + T_975_2 / 3 ** 0.5, abs=1e-5)]
    assert hard["predicted_sign"] == 1 and hard["verdict"] == "reproduced"
    assert hard["per_unit"] == {"0": 10.0, "1": 8.0, "2": 9.0} and "61.4 vs Hard 60.6" in hard["paper"]
    # MLM - Soft at 160: +3, +4, +5, an interval above 0, but the paper calls the gap there not significant
    soft = _find(records, "Two Moons: MLM vs soft", size=160)
    assert soft["predicted_sign"] is None and soft["difference"] == pytest.approx(4.0) and soft["ci95"][0] > 0
    assert soft["verdict"] == "no verdict" and "not statistically significant" in soft["reason"]
    assert "q_value" not in soft and soft["p_value"] is None and "slightly higher" in soft["paper"]
    assert _find(records, "Two Moons: MLM vs soft", size=10)["predicted_sign"] == 1
    few = _find(records, "Two Moons: MLM fine-tunes at least as well as hard", size=160)
    assert few["n_units"] == 2 and few["verdict"] == "inconclusive" and few["reason"] == "2 of the 3 units needed"
    assert {r["size"] for r in records if "fixed y" in r["claim"]} == {10}  # 160 lacks fixed y; 40: no claim
    assert not any(r.get("size") == 40 for r in records)

    # a seed added later is one more unit of the same claim
    more = study.claims(runs + [_moons("mlm", 10, 3, 81.0), _moons("hard", 10, 3, 72.0)])
    assert _find(more, "Two Moons: MLM fine-tunes at least as well as hard", size=10)["n_units"] == 4


def test_did_not_train_is_read_from_training_accuracy_never_from_the_test_result():
    """A unit in which an arm's fine-tuning ends at or below its TRAINING set's majority class did not train: it is
    one missing data point (the shared gate, common.training_gate), left out of the interval, the claim judged on the
    rest and reported over every unit beside it; an arm at the majority class on TEST that fit its training set is an
    outcome, counted like any other."""
    runs = []
    for seed, (mlm, soft) in enumerate([(70.0, 49.6), (80.0, 60.0), (75.0, 50.0), (72.0, 52.0)]):
        runs += [_moons("mlm", 10, seed, mlm), _moons("soft", 10, seed, soft)]  # soft fits its training set
    record = _find(study.claims(runs), "Two Moons: MLM vs soft", size=10)
    assert record["verdict"] == "reproduced" and "note" not in record  # +20.4, +20.0, +25.0, +20.0: floors counted
    runs[5] = _moons("soft", 10, 2, 50.0, train=60.0, majority=60.0)  # predicts one class on its training set
    record = _find(study.claims(runs), "Two Moons: MLM vs soft", size=10)
    assert record["verdict"] == "reproduced" and record["n_units"] == 3 and record["per_unit"] == {
        "0": pytest.approx(20.4), "1": pytest.approx(20.0), "3": pytest.approx(20.0)}
    assert "1 fine-tuning did not train" in record["note"] and "Soft seed 2: training 60 <= majority 60" in \
        record["note"]
    assert record["all_units"]["n_units"] == 4  # over every unit, the failed one included: reported, not judged
    assert record["all_units"]["difference"] == pytest.approx((20.4 + 20.0 + 25.0 + 20.0) / 4)
    # a run recorded without its training set's majority gets it from the seed's data (seed 0's first 10 labelled
    # points hold 7 of one class), never from the test split
    assert study.moons_train_majority(0, 10) == pytest.approx(70.0)
    old = {k: v for k, v in _moons("soft", 10, 0, 49.6, train=70.0).items() if k != "train_majority"}
    assert study._train_record(old) == (70.0, pytest.approx(70.0))


def test_teacher_claims_are_one_per_measure_with_the_seeds_as_units_and_the_sizes_averaged():
    """The paper: the hard teacher "never strays from generating MLM tasks"; here it is MLM-like in 1 of 3 seeds,
    which the record says with the per-seed shares. A seed's teachers at several sizes are one observation (same data,
    init and order): the sizes are averaged inside the seed, one claim per measure, not one per size. The soft teacher
    is downstream-like everywhere: 0 mixed in every seed is "not reproduced", read from the exact zeros."""
    runs = []
    for size, shift in ((10, 0.0), (20, 0.02)):
        for seed, (share, p_copy) in enumerate([(0.54, 0.058), (0.09, 0.054), (0.06, 0.054)]):
            common_fields = {"claim": "teacher_share", "metric": "share_mlm_like_argmax", "finetune_size": size,
                             "seed": seed, "sequences": 256}
            runs.append({**common_fields, "variant": "hard", "value": share, "share_mlm_like": share + shift,
                         "share_downstream_like": 0.0, "mean_y_label": 0.0, "mean_p_y_copy": p_copy})
            runs.append({**common_fields, "variant": "soft", "value": 0.0, "share_mlm_like": 0.0,
                         "share_downstream_like": 1.0, "mean_y_label": 1.0, "mean_p_y_copy": 0.008})
    records = study.claims(runs)
    assert len(records) == 4 and all(r["sizes"] == [10, 20] and "size" not in r for r in records)
    mlm_like = _find(records, "Teacher: the hard-label teacher's pseudo examples are MLM-like")
    # per seed, the mean of its two sizes (shares +0.01), - 1/2: +0.05, -0.40, -0.43 -> mean -0.26, sd 0.2685
    assert mlm_like["per_seed"] == {"0": 0.55, "1": 0.1, "2": 0.07}
    assert mlm_like["per_unit"] == {"0": pytest.approx(0.05), "1": pytest.approx(-0.40), "2": pytest.approx(-0.43)}
    assert mlm_like["n_units"] == 3 and mlm_like["difference"] == pytest.approx(-0.26)
    half = T_975_2 * math.sqrt((0.31 ** 2 + 0.14 ** 2 + 0.17 ** 2) / 2) / math.sqrt(3)
    assert mlm_like["ci95"] == [pytest.approx(-0.26 - half, abs=1e-5), pytest.approx(-0.26 + half, abs=1e-5)]
    assert mlm_like["verdict"] == "inconclusive" and mlm_like["note"].startswith("MLM-like in 1 of 3 seeds (seed 0)")
    sampled = _find(records, "Teacher: the hard-label teacher's sampled")
    assert sampled["difference"] == pytest.approx((0.058 + 0.054 + 0.054) / 3 - 0.5)
    assert sampled["verdict"] == "not reproduced"
    downstream = _find(records, "Teacher: the soft-label teacher writes more downstream-like")
    assert downstream["per_unit"] == {"0": 1.0, "1": 1.0, "2": 1.0} and downstream["verdict"] == "reproduced"
    mixture = _find(records, "Teacher: the soft-label teacher mixes")
    assert mixture["difference"] == 0.0 and mixture["verdict"] == "not reproduced"
    assert "0 in all 3 seeds" in mixture["verdict_basis"] and "1,536 in all" in mixture["verdict_basis"]
    assert mixture["p_value"] is None and "q_value" not in mixture  # decided without an interval: outside BH
    runs[-1] = {**runs[-1], "share_downstream_like": 0.9}  # one seed's soft teacher mixes a little at one size
    mixture = _find(study.claims(runs), "Teacher: the soft-label teacher mixes")
    assert mixture["verdict"] == "inconclusive" and "verdict_basis" not in mixture


def test_text_claims_average_the_tasks_inside_each_pretraining_run():
    runs = []
    values = {"mlm": {"a": (60.0, 62.0, 64.0), "b": (30.0, 34.0, 32.0)},
              "soft": {"a": (50.0, 58.0, 61.0), "b": (20.0, 30.0, 20.0)}}
    for variant, tasks in values.items():
        for task, by_seed in tasks.items():
            for seed, value in enumerate(by_seed):
                runs.append({"claim": "text_tasks", "variant": variant, "task": task, "seed": seed, "value": value,
                             "majority": {"a": 50.0, "b": 10.0}[task], "train_accuracy": 90.0,
                             "train_majority": {"a": 50.0, "b": 10.0}[task]})
    records = study.claims(runs)
    task_a = _find(records, "Text: MLM pretraining", task="a")
    assert task_a["per_unit"] == {"0": 10.0, "1": 4.0, "2": 3.0} and task_a["predicted_sign"] == 1
    average = _find(records, "Text: MLM pretraining", task="average of 2 tasks")
    # per unit, the mean over tasks of MLM - soft: (10 + 10) / 2, (4 + 4) / 2, (3 + 12) / 2
    assert average["n_units"] == 3 and average["per_unit"] == {"0": 10.0, "1": 4.0, "2": 7.5}
    majority = _find(records, "Text: soft labels end below the majority class")
    # soft's task average per unit 35, 44, 40.5 against the majority average 30
    assert majority["per_unit"] == {"0": 5.0, "1": 14.0, "2": 10.5} and majority["predicted_sign"] == -1
    mean = 29.5 / 3
    half = T_975_2 * math.sqrt(((5 - mean) ** 2 + (14 - mean) ** 2 + (10.5 - mean) ** 2) / 2) / math.sqrt(3)
    assert majority["ci95"] == [pytest.approx(mean - half, abs=1e-5), pytest.approx(mean + half, abs=1e-5)]
    assert majority["verdict"] == "inconclusive"  # [-1.4, +21.1] holds 0
    assert task_a["verdict"] == "inconclusive" and average["verdict"] == "inconclusive"

    # runs recorded without their training accuracy: the gate cannot be applied; judged, and the record says so
    unrecorded = [{k: v for k, v in r.items() if k not in ("train_accuracy", "train_majority")} for r in runs]
    for record in study.claims(unrecorded):
        assert record["verdict"] == "inconclusive" and "q_value" in record
        assert record["claim"].startswith("Text: soft labels end below") or "not recorded" in record["note"]
    # a soft fine-tuning at its training set's majority: that unit is a missing point of the claims on task a and on
    # the average (its task set is incomplete there), not of task b's; "below the majority class" has no gate
    (index,) = [i for i, r in enumerate(runs) if (r["variant"], r["task"], r["seed"]) == ("soft", "a", 0)]
    runs[index] = {**runs[index], "train_accuracy": 50.0}
    gated = study.claims(runs)
    assert _find(gated, "Text: MLM pretraining", task="a")["n_units"] == 2
    assert _find(gated, "Text: MLM pretraining", task="average of 2 tasks")["n_units"] == 2
    assert _find(gated, "Text: MLM pretraining", task="b")["n_units"] == 3
    assert _find(gated, "Text: soft labels end below the majority class")["n_units"] == 3
    # fixed y against MLM on text, where it ran (issue #59): one more pair of claims per task and on the average
    fixed = [{**r, "variant": "soft_fixed_y", "value": r["value"] + 5.0} for r in runs if r["variant"] == "mlm"]
    versus = _find(study.claims(runs + fixed), "Text: soft labels with fixed y", task="b")
    assert versus["difference"] == pytest.approx(5.0) and versus["predicted_sign"] == 1


def test_comparisons_the_paper_makes_no_claim_about_are_reported_without_a_verdict(tmp_path):
    """Fixed y at 20-80 examples and soft vs hard accuracy: the paper states nothing, so the report shows the paired
    difference over seeds with its interval and no verdict, even where the interval excludes 0."""
    runs = []
    for seed, (fixed, soft) in enumerate([(70.0, 60.0), (72.0, 61.0), (71.0, 62.0)]):
        runs += [_moons("soft_fixed_y", 40, seed, fixed), _moons("soft", 40, seed, soft),
                 _moons("hard", 40, seed, 50.0)]
    text = study.render_report(runs, tmp_path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| no claim: Soft (fixed y) - Soft | 40 examples"))
    assert "| +10.0 [" in row and "| no verdict | the paper did not run fixed y at this size |" in row
    assert not any(r.get("size") == 40 and "fixed y" in r["claim"] for r in study.claims(runs))


def test_primary_claims_are_mlm_against_both_meta_objectives_at_40_examples():
    runs = []
    for size in (10, 40):
        for seed in range(3):
            runs += [_moons(v, size, seed, 70.0 + seed + (v == "mlm")) for v in ("mlm", "hard", "soft")]
    records = study.claims(runs)
    primary = [r for r in records if r.get("primary")]
    assert [(r["claim"].split(" (")[0], r["size"]) for r in primary] == [
        ("Two Moons: MLM fine-tunes at least as well as hard labels", 40), ("Two Moons: MLM vs soft labels", 40)]
    assert "**Primary claims**" in "\n".join(study.claim_lines(records))
