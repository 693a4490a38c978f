"""Your own data, first try (issue #36): each method's installed command given only the user's small data files and
--output_dir (plus a step cap; the meta-learned objectives also the model and the labelled tasks they need) trains
and saves a model that plain transformers loads; a command that would do nothing says so before any work; the
kind of a task is read from its labels; explicit interval flags act; the TARTAN demo's starting mixture fits both
modes."""

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import write_command_data, write_own_files
from transformers import AutoModel, AutoModelForMaskedLM

from hf_aux.cli import finetune, muppet, tartan
from hf_aux.tartan.command import apply_demo_task_mixture
from hf_aux.muppet.config import MuppetConfig
from hf_aux.tartan.config import TartanConfig
from hf_aux.tasks.validation import infer_task_kind

HF_AUX = str(Path(sys.executable).parent / "hf-aux")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A user's files: train.csv / dev.csv with string labels, corpus.txt, a mixture file that names kinds and
    classes nowhere, labelled.yaml (one task, string labels), and a small local model for the meta-learned LM."""
    return write_own_files(write_command_data(tmp_path_factory.mktemp("own"), "hf-aux-tests/tiny-bert"))


def hf_aux(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([HF_AUX, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)


FIRST_TRIES = {  # method -> its arguments beyond --output_dir, as a user types them the first time
    "muppet": lambda d: ["--mixture_file", d / "mix.yaml", "--max_steps", "2"],
    "amos": lambda d: ["--train_file", d / "corpus.txt", "--max_steps", "2"],
    "tartan": lambda d: ["--train_file", d / "train.csv", "--validation_file", d / "dev.csv", "--auxiliary",
                         f"tapt={d / 'corpus.txt'}", "--max_steps", "2"],
    "tartan-mt": lambda d: ["--train_file", d / "train.csv", "--validation_file", d / "dev.csv", "--auxiliary",
                            f"tapt={d / 'corpus.txt'}", "--mode", "mt", "--max_steps", "2"],  # no --task_weights
    "finetune": lambda d: ["--train_file", d / "train.csv", "--validation_file", d / "dev.csv", "--max_steps", "2"],
    "meta-lm": lambda d: ["--train_file", d / "corpus.txt", "--mixture", d / "labelled.yaml", "--model_name_or_path",
                          d / "tiny_bert", "--max_steps", "2"],
}


@pytest.mark.parametrize("method", sorted(FIRST_TRIES))
def test_a_command_given_only_your_data_trains_and_saves_a_model(method, own, tmp_path):
    out = tmp_path / "out"
    done = hf_aux(method.split("-mt")[0], *FIRST_TRIES[method](own), "--output_dir", out, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2  # it trained
    assert (out / "README.md").is_file()
    assert (out / "eval_results.json").is_file()  # every one of these has validation data: it was evaluated
    loader = AutoModelForMaskedLM if method == "meta-lm" else AutoModel
    loader.from_pretrained(out)  # plain transformers loads what was saved
    if method == "tartan-mt":  # the paper's uniform weights, fixed
        weights = json.loads((out / "task_weights.json").read_text())
        assert weights["mode"] == "mt" and weights["weights"] == pytest.approx([0.5, 0.5])


def test_a_command_that_would_do_nothing_says_so_before_any_work(own, tmp_path):
    out = tmp_path / "out"
    done = hf_aux("finetune", "--train_file", own / "train.csv", "--validation_file", own / "dev.csv", "--do_train",
                  "false", "--do_eval", "false", "--output_dir", out, cwd=tmp_path)
    assert done.returncode != 0
    assert "'do_train', 'do_eval', 'do_predict': nothing to do" in done.stderr
    assert not out.exists()


def test_a_run_that_saves_no_model_writes_no_card(own, tmp_path):
    """Evaluating a trained model into a new folder: metrics, but no card for a model that is not there."""
    trained = tmp_path / "trained"
    assert hf_aux("finetune", *FIRST_TRIES["finetune"](own), "--output_dir", trained, cwd=tmp_path).returncode == 0
    out = tmp_path / "eval-only"
    done = hf_aux("finetune", "--model_name_or_path", trained, "--validation_file", own / "dev.csv",
                  "--task_kind", "classification", "--output_dir", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "eval_results.json").is_file() and not (out / "README.md").exists()


@pytest.mark.parametrize("labels, kind", [([0, 1, 1], "classification"), (["neg", "pos"], "classification"),
                                          ([0.5, 3.25], "regression"), ([1.0, 2.5, 4.0], "regression")])
def test_the_kind_of_a_task_is_read_from_its_labels(labels, kind):
    from datasets import Dataset

    splits = {"train": Dataset.from_dict({"text": ["x"] * len(labels), "label": labels})}
    assert infer_task_kind(splits, {}, "where", "--task_kind") == kind


@pytest.mark.parametrize("column, message", [({"label": [0.0, 1.0]}, "whole numbers written as floats"),
                                             ({"label": [[0, 1], [1]]}, "holds lists")])
def test_labels_that_do_not_say_the_kind_ask_for_it(column, message):
    from datasets import Dataset

    data = Dataset.from_dict({"text": ["x", "y"], **column})
    with pytest.raises(ValueError, match=f"field 'task_kind'.*{message}.*--task_kind"):
        infer_task_kind({"train": data}, {}, "DataTrainingArguments: field 'task_kind'", "--task_kind")
    choices = Dataset.from_dict({"question": ["q"], "choices": [["a", "b"]], "label": [1]})
    assert infer_task_kind({"train": choices}, {}, "where", "hint") == "multiple_choice"


def test_no_label_column_asks_for_the_label_column_not_the_kind():
    from datasets import Dataset

    data = Dataset.from_dict({"text": ["x", "y"], "labels": [1, 2]})
    with pytest.raises(ValueError, match=r"^DataTrainingArguments: field 'label_column': no 'label' column in the data; "
                                         r"did you mean 'labels'\? \(columns: \['text', 'labels'\]\); pass "
                                         r"--label_column with the column that holds the labels$"):
        infer_task_kind({"train": data}, {}, "DataTrainingArguments: field 'task_kind'", "--task_kind",
                        "DataTrainingArguments: field 'label_column'", "--label_column")


def test_data_means_training_and_evaluation_unless_asked_otherwise(own, tmp_path):
    files = ["--train_file", str(own / "train.csv"), "--validation_file", str(own / "dev.csv"), "--output_dir",
             str(tmp_path)]
    _, _, args = finetune.parse_args(files)
    assert args.do_train and args.do_eval and not args.do_predict
    _, _, args = finetune.parse_args([*files, "--do_train", "false"])
    assert not args.do_train and args.do_eval
    with pytest.raises(ValueError, match="nothing to do"):
        finetune.parse_args([*files, "--do_train", "false", "--do_eval", "false"])
    # an argument file naming a data source follows the same rule
    (tmp_path / "args.json").write_text(json.dumps({"train_file": str(own / "train.csv"), "output_dir": str(tmp_path)}))
    assert finetune.parse_args([str(tmp_path / "args.json")])[2].do_train


def test_an_explicit_steps_flag_takes_effect_under_the_demo_configs_epoch_strategy(tmp_path, caplog):
    *_, args, _ = muppet.parse_args(["--output_dir", str(tmp_path), "--save_steps", "5"])
    assert str(args.save_strategy.value) == "steps" and args.save_steps == 5  # the demo config says epoch
    *_, args, _ = muppet.parse_args(["--output_dir", str(tmp_path)])
    assert str(args.save_strategy.value) == "epoch"
    with caplog.at_level(logging.WARNING, logger="hf_aux"):
        *_, args, _ = muppet.parse_args(["--output_dir", str(tmp_path), "--save_strategy", "epoch", "--save_steps",
                                         "5"])
    assert str(args.save_strategy.value) == "epoch"
    assert "--save_steps 5 has no effect: --save_strategy is 'epoch'" in caplog.text


def test_every_methods_defaults_are_valid_on_their_own(tmp_path):
    assert MuppetConfig(output_dir=str(tmp_path)).gradient_accumulation_steps == 2  # heterogeneous on 1 process
    mt = TartanConfig(output_dir=str(tmp_path), mode="mt")
    assert mt.task_weights is None  # the trainer's uniform weights
    # the demo's starting mixture, as each mode reads weights
    apply_demo_task_mixture(mt, [0.9, 0.05, 0.05], 3)
    assert mt.task_weights == pytest.approx([0.9, 0.05, 0.05])
    meta = TartanConfig(output_dir=str(tmp_path), mode="meta")
    apply_demo_task_mixture(meta, [0.9, 0.05, 0.05], 3)
    assert meta.task_weights == pytest.approx([math.log(0.9), math.log(0.05), math.log(0.05)])
    other = TartanConfig(output_dir=str(tmp_path), mode="mt")
    apply_demo_task_mixture(other, [0.9, 0.05, 0.05], 2)  # the demo's tasks changed: uniform
    assert other.task_weights is None
    given = TartanConfig(output_dir=str(tmp_path), mode="mt", task_weights=[1.0, 1.0])
    apply_demo_task_mixture(given, [0.9, 0.1], 2)
    assert given.task_weights == [1.0, 1.0]
    # the demo with --mode mt parses (its mixture is no longer META's logits)
    _, data_args, args, _ = tartan.parse_args(["--output_dir", str(tmp_path), "--mode", "mt"])
    assert args.task_weights is None and data_args.demo_task_mixture == [0.9, 0.05, 0.05]


@pytest.mark.parametrize("extra, message", [
    (["--mixture", "{labelled}"], "field 'tokenizer_name': give a tokenizer"),
    (["--model_name_or_path", "{tiny}"], "field 'mixture': --objective soft learns the teacher from labelled tasks")])
def test_the_meta_learned_objectives_name_what_they_still_need(own, tmp_path, extra, message):
    extra = [e.format(tiny=own / "tiny_bert", labelled=own / "labelled.yaml") for e in extra]
    done = hf_aux("meta-lm", "--train_file", own / "corpus.txt", *extra, "--output_dir", tmp_path / "out",
                  cwd=tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "out").exists()
