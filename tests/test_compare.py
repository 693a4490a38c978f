"""`hf-aux compare` on a tiny BERT: the installed command, the same fine-tuning as `hf-aux finetune`, continuing
after a kill without repeating a finished fine-tuning, failed fine-tunings, one tokenisation per tokenizer, the
learning-rate rule and the errors for bad input (before any fine-tuning)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tiny import write_command_data

from hf_aux.compare import report
from hf_aux.compare.command import main, parse_args
from hf_aux.compare.statistics import welch_interval

def compare_main(argv: list[str]) -> dict:
    """The command's own steps, in process: parse as `hf-aux compare` does, then run."""
    return main(*parse_args(argv))


STEPS = ["--max_steps", "3", "--per_device_train_batch_size", "8", "--report_to", "none"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """tiny_bert (the baseline), three perturbed copies (units of an arm) and a labelled task in files."""
    from transformers import AutoModel

    folder = tmp_path_factory.mktemp("compare")
    write_command_data(folder, "tiny")
    for unit in (1, 2, 3):
        torch.manual_seed(unit)
        model = AutoModel.from_pretrained(folder / "tiny_bert")
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        model.save_pretrained(folder / f"unit{unit}")
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
            if (folder / "tiny_bert" / name).exists():
                shutil.copy(folder / "tiny_bert" / name, folder / f"unit{unit}")
    return folder


def task_flags(d: Path) -> list[str]:
    return ["--train_file", str(d / "train.jsonl"), "--validation_file", str(d / "validation.jsonl"),
            "--test_file", str(d / "train.jsonl")]


def arms(d: Path) -> list[str]:
    return ["--arm", f"base={d / 'tiny_bert'}", "--arm", f"new={d / 'unit1'},{d / 'unit2'},{d / 'unit3'}"]


def test_installed_command_writes_every_output(data, tmp_path):
    command = shutil.which("hf-aux", path=os.path.dirname(sys.executable)) or shutil.which("hf-aux")
    out = tmp_path / "cmp"
    done = subprocess.run([command, "compare", *arms(data), *task_flags(data), "--seeds", "2", *STEPS,
                           "--output_dir", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    content = json.loads((out / "compare.json").read_text())
    assert len(content["finetunings"]) == 8 and {f["status"] for f in content["finetunings"]} == {"ok"}
    assert "new: " in done.stdout and "minus base" in done.stdout
    (comparison,) = content["comparisons"]
    values = {}
    for f in content["finetunings"]:
        values.setdefault((f["arm"], f["model"]), []).append(f["test"]["accuracy"])
    new = [sum(v) / len(v) for (arm, _), v in values.items() if arm == "new"]
    base = values[("base", str(data / "tiny_bert"))]
    expected = welch_interval(new, base)
    assert comparison["difference"] == pytest.approx(expected.difference)
    if expected.low == expected.low:  # an interval exists (the values vary)
        assert comparison["ci95"] == pytest.approx([expected.low, expected.high])
    markdown = (out / "compare.md").read_text()
    assert "| new |" in markdown and "Benjamini-Hochberg" in markdown
    assert (out / "compare.png").stat().st_size > 10_000
    assert not (out / "finetunings").exists() or not any((out / "finetunings").iterdir())  # nothing left behind


def test_fine_tuning_is_the_one_hf_aux_finetune_makes(data, tmp_path):
    from hf_aux.finetune.command import main as finetune_main
    from hf_aux.finetune.command import parse_args as finetune_args

    content = compare_main([*arms(data), *task_flags(data), "--seeds", "1", "--seed", "7", *STEPS,
                            "--output_dir", str(tmp_path / "cmp")])
    results = finetune_main(*finetune_args(["--model_name_or_path", str(data / "unit2"), *task_flags(data),
                                            "--seed", "7", "--do_train", "--do_eval", "--do_predict", *STEPS,
                                            "--output_dir", str(tmp_path / "ft")]))
    (record,) = [f for f in content["finetunings"] if f["model"].endswith("unit2")]
    assert record["seed"] == 7
    assert record["test"]["loss"] == pytest.approx(results["test_loss"], abs=1e-6)
    assert record["validation"]["loss"] == pytest.approx(results["eval_loss"], abs=1e-6)
    assert record["train"]["train_loss"] == pytest.approx(results["train_loss"], abs=1e-6)


def test_fine_tune_entry_point_is_the_same_fine_tuning(data, tmp_path):
    """The studies' entry point: hf-aux finetune's flags in, the same numbers out, the logged evaluations kept on
    request, nothing left on disk; a second call with the same task reuses the loaded and tokenised splits."""
    import hf_aux.finetune.command as finetune
    from hf_aux.compare.command import fine_tune

    flags = ["--model_name_or_path", str(data / "unit3"), *task_flags(data), "--seed", "5", *STEPS,
             "--eval_strategy", "steps", "--eval_steps", "1"]
    results = finetune.main(*finetune.parse_args([*flags, "--do_train", "--do_eval", "--do_predict",
                                                  "--output_dir", str(tmp_path / "ft")]))
    scratch = tmp_path / "scratch"
    record = fine_tune([*flags, "--output_dir", str(scratch)], keep_evaluations=True)
    assert record["status"] == "ok" and record["train_examples"] == results["train_examples"]
    assert record["test"]["loss"] == pytest.approx(results["test_loss"], abs=1e-6)
    assert record["test"]["accuracy"] == pytest.approx(results["test_accuracy"], abs=1e-9)
    assert record["validation"]["loss"] == pytest.approx(results["eval_loss"], abs=1e-6)
    assert [h["step"] for h in record["history"]] == [1, 2, 3]
    assert not any(scratch.rglob("*.safetensors"))
    calls = []
    original = finetune.tokenize_splits
    finetune.tokenize_splits = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        again = fine_tune([*flags, "--output_dir", str(scratch)])
    finally:
        finetune.tokenize_splits = original
    assert calls == [] and "history" not in again and again["status"] == "ok"
    best = fine_tune([*flags, "--output_dir", str(scratch), "--load_best_model_at_end", "--save_strategy", "steps",
                      "--save_steps", "1"], keep_evaluations=True)  # its checkpoints are kept to pick the best
    assert best["status"] == "ok" and [h["step"] for h in best["history"]] == [1, 2, 3]


def test_killed_comparison_continues_without_repeating(data, tmp_path):
    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "hf_aux", "compare", *arms(data), *task_flags(data), "--seeds", "3",
            *STEPS, "--output_dir", str(out)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "compare.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        if results.is_file() and len(json.loads(results.read_text()).get("finetunings", [])) >= 3:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = json.loads(results.read_text())["finetunings"]
    assert 3 <= len(before) < 12
    content = compare_main([*arms(data), *task_flags(data), "--seeds", "3", *STEPS, "--output_dir", str(out)])
    after = content["finetunings"]
    assert len(after) == 12  # every planned fine-tuning once
    assert after[:len(before)] == before  # the finished ones kept as they were (their wall times too)
    keys = [(f["model_key"], f["seed"]) for f in after]
    assert len(set(keys)) == len(keys)


def test_a_model_that_does_not_train_is_reported_failed(data, tmp_path):
    from transformers import AutoModel

    broken = tmp_path / "broken"
    model = AutoModel.from_pretrained(data / "unit1")
    with torch.no_grad():
        model.embeddings.LayerNorm.weight.fill_(float("nan"))
    model.save_pretrained(broken)
    shutil.copy(data / "tiny_bert" / "tokenizer.json", broken)
    shutil.copy(data / "tiny_bert" / "tokenizer_config.json", broken)
    content = compare_main(["--arm", f"base={data / 'tiny_bert'}", "--arm",
                            f"new={data / 'unit1'},{broken},{data / 'unit3'}", *task_flags(data), "--seeds", "2",
                            *STEPS, "--output_dir", str(tmp_path / "cmp")])
    failed = [f for f in content["finetunings"] if f["status"] == "failed"]
    assert len(failed) == 2 and all(f["model"] == str(broken) and "non-finite" in f["error"] for f in failed)
    (comparison,) = content["comparisons"]
    assert comparison["n_units"] == 2  # the failed unit is not averaged in
    assert "3 are needed" in comparison["verdict"]
    markdown = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| new | 3 | 4 (2) |" in markdown and "failed: " in markdown


def test_each_tokenizer_tokenises_the_task_once(data, tmp_path, monkeypatch):
    import hf_aux.finetune.pipeline as finetune

    calls = []
    original = finetune.tokenize_splits
    monkeypatch.setattr(finetune, "tokenize_splits", lambda *a, **k: calls.append(1) or original(*a, **k))
    compare_main([*arms(data), *task_flags(data), "--seeds", "2", *STEPS, "--output_dir", str(tmp_path / "cmp")])
    assert len(calls) == 1  # 8 fine-tunings, one tokenizer


def test_each_arm_picks_its_learning_rate_on_validation(data, tmp_path):
    content = compare_main([*arms(data), *task_flags(data), "--seeds", "1", "--learning_rates", "1e-5", "1e-3",
                            *STEPS, "--output_dir", str(tmp_path / "cmp")])
    assert len(content["finetunings"]) == 8
    picked = report.picked_rates(content)
    for arm in ("base", "new"):
        means = {}
        for f in content["finetunings"]:
            if f["arm"] == arm:
                means.setdefault(f["learning_rate"], []).append(f["validation"]["accuracy"])
        best = max(means, key=lambda rate: sum(means[rate]) / len(means[rate]))
        assert sum(means[picked[arm]]) == pytest.approx(sum(means[best]))


def test_picked_rate_rule_by_hand():
    content = {"task": {"metric": "mse", "higher_is_better": False}, "settings": {"learning_rate": [1e-5, 1e-4]},
               "arms": [{"name": "a", "models": ["m"]}],
               "finetunings": [{"arm": "a", "status": "ok", "learning_rate": 1e-5, "validation": {"mse": 0.3}},
                               {"arm": "a", "status": "ok", "learning_rate": 1e-4, "validation": {"mse": 0.2}},
                               {"arm": "a", "status": "failed", "learning_rate": 1e-5}]}
    assert report.picked_rates(content) == {"a": 1e-4}  # lower is better for mse


@pytest.mark.parametrize("change, message", [
    (lambda d: ["--arm", f"base={d / 'tiny_bert'}"], "at least two arms"),
    (lambda d: ["--arm", f"base={d / 'tiny_bert'}", "--arm", "new="], "names no model"),
    (lambda d: ["--arm", f"base={d / 'tiny_bert'}", "--arm", f"base={d / 'unit1'}"], "must differ"),
    (lambda d: ["--arm", f"base={d / 'tiny_bert'}", "--arm", f"new={d / 'nowhere'}"], "does not exist"),
    (lambda d: ["--arm", f"base={d / 'tiny_bert'}", "--arm", f"new={d}"], "holds no model"),
    (lambda d: [*arms(d), "--seeds", "0"], "field 'seeds'"),
    (lambda d: ["--arm", f"base={d / 'tiny_bert'}", "--arm", f"new={d / 'unit1'},{d / 'tiny_bert'}"], "is given twice"),
    (lambda d: [*arms(d), "--baseline", "other"], "--baseline 'other': no such arm"),
    (lambda d: [*arms(d), "--metric", "bleu"], "field 'metric'"),
    (lambda d: [*arms(d), "--model_name_or_path", str(d / "unit1")], "takes its models from --arm"),
    (lambda d: [*arms(d), "--push_to_hub", "--hub_model_id", "me/x"], "nothing to push"),
    (lambda d: [*arms(d), "--task_kind", "seq2seq"], "supports"),  # a task no arm can be fine-tuned on
])
def test_bad_input_is_refused_before_any_fine_tuning(data, tmp_path, change, message):
    out = tmp_path / "cmp"
    with pytest.raises(ValueError, match=message):
        compare_main([*change(data), *task_flags(data), *STEPS, "--output_dir", str(out)])
    assert not (out / "compare.json").exists() or not json.loads((out / "compare.json").read_text())["finetunings"]


def test_other_settings_in_the_same_folder_are_refused(data, tmp_path):
    out = tmp_path / "cmp"
    compare_main([*arms(data), *task_flags(data), "--seeds", "1", *STEPS, "--output_dir", str(out)])
    kept = (out / "compare.json").read_text()
    with pytest.raises(ValueError, match="other settings.*train_fraction"):
        compare_main([*arms(data), *task_flags(data), "--seeds", "1", "--train_fraction", "0.5", *STEPS,
                      "--output_dir", str(out)])
    assert (out / "compare.json").read_text() == kept  # the earlier comparison is untouched


def test_a_mistake_is_one_line_with_exit_2(data, tmp_path):
    command = shutil.which("hf-aux", path=os.path.dirname(sys.executable)) or shutil.which("hf-aux")
    done = subprocess.run([command, "compare", "--arm", f"base={data / 'tiny_bert'}", "--arm", "new=nowhere/at/all",
                           *task_flags(data), "--output_dir", str(tmp_path / "cmp")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert line.startswith("hf-aux compare: error: --arm new: model 'nowhere/at/all' does not exist")
    assert not (tmp_path / "cmp" / "compare.json").exists()


def test_help_fits_a_screen_with_the_data_and_output_then_the_arms():
    command = shutil.which("hf-aux", path=os.path.dirname(sys.executable)) or shutil.which("hf-aux")
    short = subprocess.run([command, "compare", "--help"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "80"}).stdout.splitlines()
    full = subprocess.run([command, "compare", "--help-all"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"}).stdout
    titles = [line for line in short if line and not line.startswith(" ") and line.endswith(":")]
    assert titles[:2] == ["DataTrainingArguments: the data, and where the run writes:",
                          "CompareArguments: the arms and the comparison:"]
    assert len(short) <= 150 and short[short.index(titles[1]) + 1].split()[0] == "--arm"
    assert short[-1].endswith("more Trainer flags: hf-aux compare --help-all")
    assert "--adam_beta1" in full and "--adam_beta1" not in "\n".join(short)
