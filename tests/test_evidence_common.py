"""The statistics every evidence study shares (benchmarks/evidence/common.py): per-unit averaging, the interval over
units, the verdict against the paper's predicted sign, and the claims list, checked against hand computations; the
run cache (atomic appends from several processes) and the report helpers (benchmarks/evidence/report.py)."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.evidence import common  # noqa: E402
from benchmarks.evidence.common import (  # noqa: E402
    NOT_TESTABLE, append_run, claim_record, claims_table, has_run, interval_text, last_third_movement, load_claims,
    load_runs, matching, paired_text, pooled_final_sd, unit_differences, units_needed, write_claims,
)
from benchmarks.evidence.report import (  # noqa: E402
    counted, figure, fmt, markdown_table, mean_sd_text, save_figure,
)

T_2 = 4.302653  # t(0.975, 2 degrees of freedom)


def test_fine_tuning_seeds_are_averaged_inside_a_unit_and_units_make_the_interval():
    arm = {("a", 0): 0.70, ("a", 1): 0.74, ("b", 0): 0.80, ("b", 1): 0.80, ("c", 0): 0.66, ("c", 1): 0.70}
    base = {0: 0.70, 1: 0.72}
    units = unit_differences(arm, base)
    assert units == pytest.approx({"a": 0.01, "b": 0.09, "c": -0.03})
    record = claim_record("arm beats base", "Table 1", 1, "one pretraining run", units.values())
    # mean 0.0233..., sd 0.0611, t(0.975, 2) = 4.302653: half width 0.1518
    assert record["n_units"] == 3 and record["difference"] == pytest.approx(0.023333, abs=1e-6)
    assert record["ci95"][1] - record["difference"] == pytest.approx(4.302653 * 0.0611010 / 3 ** 0.5, abs=1e-5)
    assert record["verdict"] == "inconclusive"


def test_two_arms_with_units_of_their_own_pair_by_unit_and_seed():
    """Both arms pre-trained per unit: each fine-tuning pairs with the other arm's of the same unit and seed."""
    arm = {(42, 0): 0.70, (42, 1): 0.74, (43, 0): 0.60, (44, 0): 0.5}
    other = {(42, 0): 0.65, (42, 1): 0.70, (43, 0): 0.66, (43, 1): 0.9, (45, 0): 0.1}
    assert unit_differences(arm, other) == pytest.approx({42: (0.05 + 0.04) / 2, 43: -0.06})  # 44, 45: unpaired


@pytest.mark.parametrize("values,sign,expected", [
    ([0.05, 0.06, 0.07], 1, "reproduced"), ([0.05, 0.06, 0.07], -1, "not reproduced"),
    ([-0.05, -0.06, -0.07], -1, "reproduced"), ([0.05, -0.06, 0.07], 1, "inconclusive"),
])
def test_the_verdict_follows_the_interval_and_the_predicted_sign(values, sign, expected):
    assert claim_record("c", "p", sign, "u", values)["verdict"] == expected


def test_too_few_units_or_a_measured_reason_give_no_direction():
    assert claim_record("c", "p", 1, "u", [0.1, 0.2])["verdict"] == "inconclusive"
    untestable = claim_record("c", "p", 1, "u", [0.1, 0.2, 0.3], reason="heads' MLM losses within 0.01 (sd 0.02)")
    assert untestable["verdict"] == NOT_TESTABLE and "sd 0.02" in untestable["reason"]


def test_last_third_movement_by_hand():
    """Change from the first point at >= 2/3 of the final step to the end, mean over units; sd of the finals."""
    change, sd, start, end = last_third_movement([[(50, 0.5), (100, 0.6), (150, 0.7)],
                                                  [(50, 0.5), (100, 0.6), (150, 0.64)]])
    assert (start, end) == (100, 150) and change == pytest.approx(0.07)
    assert sd == pytest.approx(math.sqrt(2 * 0.03 ** 2))
    assert last_third_movement([[(50, 0.5), (150, 0.7)]]) is None


def test_pooled_final_sd_by_hand():
    """The root mean of the arms' variances of their final values: finals 0.7, 0.64 (variance 0.0018) and 0.5, 0.6,
    0.7 (variance 0.01) pool to sqrt(0.0059); an arm of one unit has no variance and is left out."""
    arms = [[[(1, 0.1), (2, 0.7)], [(2, 0.64)]], [[(2, 0.5)], [(2, 0.6)], [(2, 0.7)]], [[(2, 9.0)]]]
    assert pooled_final_sd(arms) == pytest.approx(math.sqrt((0.0018 + 0.01) / 2))
    assert math.isnan(pooled_final_sd([[[(2, 9.0)]]]))


def test_units_needed_by_hand():
    """The units a claim's interval would need to exclude 0 at its measured mean and sd (a planning figure): sd 0.02,
    mean 0.01 -> the fewest n with t(0.975, n - 1) * 0.02 / sqrt(n) < 0.01 is 18 (t(0.975, 16) / sqrt(17) = 0.514)."""
    half = T_2 * 0.02 / math.sqrt(3)
    item = {"n_units": 3, "difference": 0.01, "ci95": [0.01 - half, 0.01 + half]}
    assert units_needed(item) == 18
    assert units_needed({**item, "difference": 0.001}) == "> 50"
    assert units_needed({**item, "difference": 0.0, "ci95": [-half, half]}, limit=100) == "> 100"  # never decided
    assert units_needed({**item, "ci95": None}) is None


def test_paired_and_interval_text_by_hand():
    """a - b = 0.01, 0.02, 0.03: mean 0.02, sd 0.01, half width 4.302653 * 0.01 / sqrt(3) = 0.0248; below 3 pairs the
    mean alone and no verdict."""
    assert paired_text([0.51, 0.62, 0.73], [0.5, 0.6, 0.7], 1) == ("+0.020 [-0.005, +0.045] (n = 3)", "inconclusive")
    assert paired_text([0.51, 0.62, 0.73], [0.5, 0.6, 0.7], -1)[1] == "inconclusive"
    assert paired_text([0.6, 0.7, 0.8], [0.5, 0.6, 0.7], -1)[1] == "not reproduced"
    assert paired_text([0.51, 0.62], [0.5, 0.6], 1) == ("+0.015 (n = 2)", "incomplete: 2 seeds so far")
    assert interval_text([1.0, 2.0, 3.0], digits=1) == "+2.0 [-0.5, +4.5]" and interval_text([]) == "-"
    assert interval_text([0.5]) == "+0.500"


def test_report_text_helpers():
    assert fmt(None) == fmt(float("nan")) == "-" and fmt(0.12345, 2) == "0.12"
    assert mean_sd_text([1.0, 2.0, 3.0], 1, n=True) == "2.0 ± 1.0 (3)" and mean_sd_text([0.5]) == "0.500"
    assert mean_sd_text([]) == "-"
    assert markdown_table(["a", "b"], [[1, None]]) == ["| a | b |", "|---|---|", "| 1 |  |", ""]
    assert counted(1, "unit") == "1 unit" and counted(0, "seed") == "0 seeds" and counted(3, "run") == "3 runs"


def test_save_figure_can_draw_one_legend_for_every_panel(tmp_path):
    fig, axes = figure(2, 2, 3.0, 2.0)
    for axis in axes:
        axis.plot([0, 1], [0, 1], label="shared")
    axes[1].plot([0, 1], [1, 0], label="second")
    assert save_figure(fig, tmp_path / "f.png", "a title", legend_columns=2, bottom=0.1) == "f.png"
    (legend,) = fig.legends  # each label once
    assert [text.get_text() for text in legend.get_texts()] == ["shared", "second"]
    assert (tmp_path / "f.png").stat().st_size > 0


def test_matching_runs():
    runs = [{"claim": "a", "seed": 0}, {"claim": "a", "seed": 1, "fraction": 0.1}, {"claim": "b", "seed": 1}]
    assert matching(runs, claim="a") == runs[:2] and matching(runs, seed=1, fraction=0.1) == [runs[1]]
    assert has_run(runs, claim="b") and not has_run(runs, claim="b", fraction=0.1)


def test_claims_and_runs_live_side_by_side_in_one_file(tmp_path):
    path = tmp_path / "m.json"
    append_run(path, {"claim": "x", "value": 1})
    write_claims(path, [claim_record("c", "p", 1, "u", [0.05, 0.06, 0.07])])
    append_run(path, {"claim": "x", "value": 2})  # appending keeps the claims
    assert [r["value"] for r in load_runs(path)] == [1, 2]
    (claim,) = load_claims(path)
    assert claim["verdict"] == "reproduced" and json.loads(path.read_text())["claims"] == [claim]
    (row,) = claims_table(load_claims(path), "[report](docs/evidence/m.md)")
    assert row == "| c | reproduced | +0.060 [+0.035, +0.085] (3 units) | [report](docs/evidence/m.md) |"


def test_the_readme_evidence_table_is_rendered_from_the_claims_lists():
    """README.md's Evidence table is exactly what benchmarks/evidence/summary.py renders from the four JSON claims
    lists (re-render with `python benchmarks/evidence/summary.py --write` after a study's --report)."""
    from benchmarks.evidence import summary

    section = summary.readme_section()
    assert section in (summary.ROOT / "README.md").read_text()
    assert section.count("| MUPPET |") >= 1 and section.count("| AMOS |") >= 1


def _record(low, high, verdict, survives=None, **extra):
    record = {"claim": "x beats y", "verdict": verdict, "difference": (low + high) / 2, "ci95": [low, high],
              "n_units": 3, "setting": "s1, fast", "primary": True, "p_value": 0.004, "q_value": 0.01, **extra}
    return record if survives is None else {**record, "survives_bh": survives}


def test_yes_and_no_both_need_the_same_bar():
    """One rule (summary.answer_word) over (record, the sign that favours the method): yes / no need a decided verdict
    that survives Benjamini-Hochberg at 5% on the method's side / the other side; not shown otherwise."""
    from benchmarks.evidence.summary import answer_word, primary_rows

    assert answer_word([(_record(0.01, 0.05, "reproduced", True), 1)]) == "yes"
    assert answer_word([(_record(0.01, 0.05, "reproduced", False), 1)]) == "not shown"  # not past BH
    assert answer_word([(_record(-0.05, -0.01, "not reproduced", True), 1)]) == "no"
    assert answer_word([(_record(-0.05, -0.01, "not reproduced", False), 1)]) == "not shown"  # the same bar for no
    assert answer_word([(_record(-0.05, 0.01, "inconclusive"), 1)]) == "not shown"
    # meta_lm's claims are MLM - the meta objective (favours -1): an interval above 0 is against the method
    assert answer_word([(_record(0.01, 0.05, "reproduced", True), -1)]) == "no"
    assert answer_word([(_record(0.01, 0.05, "reproduced", True), 1),
                        (_record(-0.05, -0.01, "not reproduced", True), 1)]) == "mixed"
    rows = primary_rows("amos", [_record(-0.05, 0.01, "inconclusive"), {**_record(0.01, 0.05, "reproduced", False),
                                                                          "primary": False}], "link")
    assert rows[0] == ("| AMOS | x beats y | s1, fast | **inconclusive** | -0.020 [-0.050, +0.010] (3 units, p 0.004, "
                       "q 0.01) | link |")
    assert rows[1].startswith("| AMOS | every claim of the list (2) | | 1 inconclusive, 1 reproduced | 1 of 2 "
                              "judged decided, 0 survive")


def test_a_yes_or_no_opens_with_what_it_measured_from_the_records():
    """summary.answer_gist: one clause per answer record past the bar, worded by its entry's `measures`, with its
    difference, the `alike` context records of its task and its attribution control; nothing for "not shown"."""
    from benchmarks.evidence.summary import answer_gist

    control = {"label": "control (a)", "difference": 0.0, "ci95": [-0.02, 0.02], "n_units": 3}
    lost = _record(-0.08, -0.03, "not reproduced", True, task="rt", control=control)
    weak = _record(-0.08, 0.01, "inconclusive", task="news")
    electra = _record(-0.07, -0.04, "not reproduced", True, task="rt")
    answers = [(lost, {"measures": "continued pretraining"}), (weak, {"measures": "continued pretraining"})]
    context = [(electra, {"label": "ELECTRA alike", "alike": True}), ({**electra, "task": "news"},
                                                                      {"label": "ELECTRA alike", "alike": True}),
               (_record(-0.01, 0.01, "inconclusive", task="rt"), {"label": "against ELECTRA"})]
    assert answer_gist("no", answers, context) == ("continued pretraining: -0.055 on rt (ELECTRA alike -0.055); the "
                                                   "pipeline alone (control (a)) +0.000")
    assert answer_gist("not shown", answers, context) == ""
    assert answer_gist("no", [(lost, {})], context) == ""  # an entry without `measures` gives no clause


def test_advice_names_the_record_that_measured_it_with_its_scope():
    """An alternative is named only where one of its records passes the bar in its favour, with that record's setting
    and the settings where it was not shown; else "none shown" with the nearest record."""
    from benchmarks.evidence.summary import instead_text

    good = _record(0.01, 0.05, "reproduced", True, claim="fixed y beats MLM", setting="Two Moons, 160 examples")
    weak = _record(-0.02, 0.06, "inconclusive", claim="fixed y beats MLM", setting="Two Moons, 10 examples")
    alternatives = [{"name": "fixed y", "records": [{"match": {"claim": "fixed y beats MLM"}, "favours": 1}]}]
    text = instead_text([good, weak], alternatives)
    assert text.startswith("**fixed y**: fixed y beats MLM (Two Moons, 160 examples): +0.030 [+0.010, +0.050]")
    assert text.endswith("not shown: fixed y beats MLM (Two Moons, 10 examples): +0.020 [-0.020, +0.060], "
                         "inconclusive, q 0.01")
    text = instead_text([weak], alternatives)
    assert text.startswith("none shown past Benjamini-Hochberg at 5%: fixed y (1 judged record; the nearest to "
                           "passing")
    assert instead_text([], alternatives).endswith("fixed y (not measured yet)")


def test_the_labels_and_the_gate_are_one_rule_outside_the_family():
    """A retired setting keeps its numbers, leaves the BH family and says why; a fine-tuning below its training
    majority is one missing point; an unrecorded training accuracy leaves the gate unapplied and says so."""
    judged = claim_record("a", "p", 1, "u", [0.05, 0.06, 0.07])
    retired = common.retire(claim_record("b", "p", 1, "u", [0.05, 0.06, 0.08]),
                            common.retirement_reason(untuned="no arm tuned", superseded_by="`s2`"))
    assert retired["verdict"] == common.RETIRED and retired["reason"] == "untuned: no arm tuned; superseded by `s2`"
    assert retired["difference"] is not None and retired["p_value"] is None
    with_q = common.with_q_values([judged, retired])
    assert "q_value" in with_q[0] and "q_value" not in with_q[1]
    assert common.retirement_reason() is None
    gate = common.training_gate([(1, "arm seed 1", 0.5, 0.5), (2, "arm seed 2", 0.9, 0.5), (3, "base", None, None)])
    assert [key for key, *_ in gate["failed"]] == [1] and (gate["checked"], gate["unchecked"]) == (2, 1)
    note = common.gate_note(gate)
    assert "1 fine-tuning did not train" in note and "arm seed 1: training 0.5 <= majority 0.5" in note
    assert "not recorded for 1 of 3" in note
    assert common.gate_note(common.training_gate([(1, "a", 0.9, 0.5)])) is None


def test_the_control_decides_the_attribution_by_one_rule():
    """attribution_text: a control decided on the same side moves the difference itself (not the method); one whose
    interval excludes half the difference clears the pipeline; else it is too wide."""
    base = {"difference": -0.05, "ci95": [-0.08, -0.02]}

    def with_control(low, high):
        return {**base, "control": {"claim": "c", "label": "lr 0", "n_units": 3, "difference": (low + high) / 2,
                                    "ci95": [low, high], "verdict": "inconclusive"}}

    assert "not attributed to the method" in common.attribution_text(with_control(-0.06, -0.01))
    assert "the method's updates do" in common.attribution_text(with_control(-0.02, 0.01))  # excludes -0.025
    assert "too wide" in common.attribution_text(with_control(-0.04, 0.02))
    assert common.attribution_text(base) is None
    two = with_control(-0.02, 0.01)
    two["control"]["n_units"] = 2
    assert common.attribution_text(two).endswith("(2 units of the 3 needed)")
    other = with_control(-0.06, -0.01)
    other["control"]["differs"] = "another head"
    assert common.attribution_text(other).endswith(": not comparable (another head), so it attributes nothing")


def test_primaries_come_from_the_dated_file(tmp_path):
    path = tmp_path / "primaries.json"
    path.write_text(json.dumps({"date": "2026-12-02", "methods": {"m": {"primary": [{"match": {"claim": "a",
                                                                                              "size": 40}}]}}}))
    records = [{"claim": "a", "size": 40, "primary": True}, {"claim": "a", "size": 10, "primary": True}]
    assert [r.get("primary") for r in common.mark_primaries(records, "m", path)] == [True, None]
    assert common.load_primaries("other", path) == {}
    dated = json.loads(common.PRIMARIES_PATH.read_text())
    assert dated["date"] and set(dated["methods"]) == {"muppet", "amos", "tartan", "meta_lm"}
    assert all(entry["match"] for method in dated["methods"].values() for entry in method["primary"])


def test_short_settings_drop_parentheses_and_keep_the_first_parts():
    from benchmarks.evidence.summary import short_setting

    assert short_setting({"setting": "MiniLM, mean pooling (the default, `auto`); 5-task mixture; 1% of it; more"}) \
        == "MiniLM, mean pooling; 5-task mixture; 1% of it"
    assert short_setting({"setting": "Two Moons, 10 examples, pretraining (6,000 sequences)"}) == "Two Moons, 10 examples"
    assert short_setting({"setting_name": "cassette", "setting": "x"}) == "`cassette`"


# ---- the statistics and the cache, one helper at a time --------------------------------------------------------------


def test_mean_sd_is_the_sample_sd():
    mean, sd = common.mean_sd([1.0, 2.0, 4.0])
    assert mean == pytest.approx(7 / 3)
    assert sd == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))
    assert math.isnan(common.mean_sd([0.5])[1])


def test_paired_ci_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653 -> half width 4.302653 / sqrt(3) = 2.484138
    mean, lo, hi = common.paired_ci([1.5, 2.5, 3.5], [0.5, 0.5, 0.5])
    assert mean == pytest.approx(2.0)
    assert lo == pytest.approx(2.0 - 2.484138, abs=1e-5)
    assert hi == pytest.approx(2.0 + 2.484138, abs=1e-5)
    with pytest.raises(ValueError, match="paired"):
        common.paired_ci([1, 2], [1])
    with pytest.raises(ValueError, match="at least 2"):
        common.paired_ci([1], [0])


def test_independent_runs_are_the_unit_and_fine_tuning_seeds_are_averaged_first():
    # two pretraining runs (units a, b) x two fine-tuning seeds, against a base fine-tuned with the same seeds
    arm = {("a", 0): 0.70, ("a", 1): 0.74, ("b", 0): 0.60, ("b", 1): 0.66, ("c", 9): 0.5}
    base = {0: 0.65, 1: 0.70}
    differences = common.unit_differences(arm, base)
    assert differences == pytest.approx({"a": ((0.70 - 0.65) + (0.74 - 0.70)) / 2,
                                         "b": ((0.60 - 0.65) + (0.66 - 0.70)) / 2})  # c: no paired seed
    mean, lo, hi = common.unit_ci(differences.values())
    # two units: mean 0.0, sd of (0.045, -0.045) = 0.0636; t(0.975, 1) = 12.7062 -> half width 0.5718
    assert mean == pytest.approx(0.0) and hi - mean == pytest.approx(12.7062 * 0.0636396 / math.sqrt(2), abs=1e-3)
    assert math.isnan(common.unit_ci([0.1])[1])  # one unit: no interval


def test_t_quantile_without_scipy(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)  # import scipy -> ImportError: the fallback runs
    assert common.t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-4)
    assert common.t_quantile(0.975, 9) == pytest.approx(2.262157, abs=1e-4)
    assert common.t_quantile(0.025, 4) == pytest.approx(-2.776445, abs=1e-4)


def test_verdict():
    assert common.verdict(0.01, 0.05, 1) == "reproduced"
    assert common.verdict(-0.05, -0.01, 1) == "not reproduced"
    assert common.verdict(-0.05, -0.01, -1) == "reproduced"
    assert common.verdict(-0.01, 0.02, 1) == "inconclusive"
    with pytest.raises(ValueError, match="expected_sign"):
        common.verdict(0, 1, 0)


def test_append_run_and_has_run(tmp_path):
    path = tmp_path / "sub" / "runs.json"
    assert common.load_runs(path) == []
    common.append_run(path, {"claim": "a", "seed": 0, "value": 0.5})
    common.append_run(path, {"claim": "a", "seed": 1, "value": 0.7})
    runs = common.load_runs(path)
    assert [r["seed"] for r in runs] == [0, 1]
    assert json.loads(path.read_text())["runs"] == runs
    assert common.has_run(runs, claim="a", seed=1) and not common.has_run(runs, claim="a", seed=2)
    assert sorted(p.name for p in path.parent.iterdir()) == [".runs.json.lock", "runs.json"]  # no temp file left
    meta = common.run_meta()
    assert set(meta) >= {"commit", "device", "load_avg", "torch_threads"}


def _append_many(path, start):
    for seed in range(start, start + 40):
        common.append_run(path, {"claim": "a", "seed": seed})


def test_append_run_from_two_processes_loses_nothing(tmp_path):
    import multiprocessing

    path = tmp_path / "runs.json"
    workers = [multiprocessing.get_context("fork").Process(target=_append_many, args=(path, start))
               for start in (0, 1000)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(r["seed"] for r in common.load_runs(path)) == [*range(40), *range(1000, 1040)]
