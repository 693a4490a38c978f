"""Bad input and faults across the five run scripts, table-driven (issue 17): each case writes its files, calls
the script's parser and main() in-process, and checks the error's type and that its message names the task /
flag / file, the field and the row where it applies. Every case fails before any model is loaded or trained
(seconds in all); the non-finite, output-folder, signal and Hub cases that need training run 1-3 steps of a tiny
model (hidden 32, 2 layers)."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from tiny import save_tiny_bert

import importlib

SCRIPTS = ("run_finetune", "run_tartan", "run_amos", "run_muppet", "run_meta_lm")
MODULES = {name: importlib.import_module(f"hf_aux.{name[4:]}.command") for name in SCRIPTS}  # what each script calls
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--seed", "0", "--save_strategy", "no"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


def parse(script: str, argv: list[str]):
    return MODULES[script].parse_args(argv)


def run_script(script: str, argv: list[str]):
    """The script as its `if __name__ == "__main__"` block runs it, in this process."""
    return MODULES[script].main(*parse(script, argv))


def jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def sentences(n: int, label=lambda i: ["neg", "pos"][i % 2], text=lambda i: f"the movie was good number {i}"):
    return [{"sentence": text(i), "label": label(i)} for i in range(n)]


GOOD = jsonl(sentences(8))
CORPUS = "\n".join(f"the movie was very good and the plot was fun number {i}" for i in range(40)) + "\n"
QA_ROW = {"question": "what is the capital", "context": "paris is the capital of france",
          "answers": {"text": ["paris"], "answer_start": [0]}}


def mixture(tasks: list[dict]) -> str:
    return json.dumps({"tasks": tasks})


def sentiment_task(**overrides) -> dict:
    return {"name": "sentiment", "kind": "classification", "text_columns": ["sentence"], "label_names": ["neg", "pos"],
            "data_files": {"train": "train.jsonl", "validation": "dev.jsonl"}, **overrides}


# ---- each script's arguments for a 2-step run on files in the case's folder {d} ----------------------------------
def finetune_argv(*extra, train="train.jsonl", dev="dev.jsonl", kind="classification"):
    data = ["--train_file", f"{{d}}/{train}", "--validation_file", f"{{d}}/{dev}", "--task_kind", kind,
            "--text_columns", "sentence", "--label_column", "label"]
    return ["--model_name_or_path", "{tiny}", *data, "--do_train", "--do_eval", "--max_steps", "2",
            "--output_dir", "{d}/out", *QUIET, *extra]


def finetune_file_argv(*extra, source=("--task_file", "{d}/task.json")):
    return ["--model_name_or_path", "{tiny}", *source, "--do_train", "--do_eval", "--max_steps", "2",
            "--output_dir", "{d}/out", *QUIET, *extra]


def tartan_argv(*extra, train="train.jsonl", dev="dev.jsonl", auxiliary=("none",)):
    return ["--model_name_or_path", "{tiny}", "--train_file", f"{{d}}/{train}", "--validation_file", f"{{d}}/{dev}",
            "--text_columns", "sentence", "--label_column", "label", "--auxiliary", *auxiliary, "--mode", "mt",
            "--max_seq_length", "16", "--do_train", "--do_eval", "--max_steps", "2", "--output_dir", "{d}/out",
            *QUIET, *extra]


AMOS_SIZES = ["--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2", "--intermediate_size",
              "64", "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2", "--max_seq_length", "16"]


def amos_argv(*extra, corpus="corpus.txt"):
    return ["--train_file", f"{{d}}/{corpus}", "--tokenizer_name", "{tiny}", *AMOS_SIZES, "--do_train", "--do_eval",
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--output_dir", "{d}/out", *QUIET, *extra]


def muppet_argv(*extra, mixture_file="mix.json"):
    return ["--model_name_or_path", "{tiny}", "--mixture_file", f"{{d}}/{mixture_file}", "--do_train", "--do_eval",
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--max_seq_length", "16",
            "--output_dir", "{d}/out", *QUIET, *extra]


META_SIZES = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,max_position_embeddings=64"


def meta_lm_argv(*extra, corpus="corpus.txt", mixture_file="mix.json", objective="mlm"):
    return ["--train_file", f"{{d}}/{corpus}", "--mixture", f"{{d}}/{mixture_file}", "--tokenizer_name", "{tiny}",
            "--config_overrides", META_SIZES, "--block_size", "16", "--objective", objective, "--do_train",
            "--max_steps", "2", "--per_device_train_batch_size", "2", "--output_dir", "{d}/out", *QUIET, *extra]


@dataclass
class Case:
    id: str
    script: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    error: type[BaseException] = ValueError
    needles: tuple[str, ...] = ()


LATIN1_CSV = "sentence,label\ncaf\u00e9 was good,pos\nbad,neg\n".encode("latin-1")
RAGGED_CSV = "sentence,label\nthe movie was good,pos\nthe movie, sadly, was bad,neg\n"
TWO_SPLITS = {"train.jsonl": GOOD, "dev.jsonl": GOOD}

CASES = [
    # ---- run_finetune: data files, encodings, cells ----
    Case("ft-missing-train", "run_finetune", finetune_argv(), {"dev.jsonl": GOOD}, ValueError,
         ("data_files", "train.jsonl", "does not exist")),
    Case("ft-empty-train", "run_finetune", finetune_argv(), {"train.jsonl": "", "dev.jsonl": GOOD}, ValueError,
         ("train.jsonl", "is empty")),
    Case("ft-blank-lines-train", "run_finetune", finetune_argv(), {"train.jsonl": "\n\n", "dev.jsonl": GOOD},
         ValueError, ("train.jsonl", "no rows")),
    Case("ft-bad-json-line", "run_finetune", finetune_argv(),
         {"train.jsonl": GOOD + '{"sentence": "x", "label": \n', "dev.jsonl": GOOD}, ValueError,
         ("train.jsonl", "line 9", "not valid JSON")),
    Case("ft-json-line-not-object", "run_finetune", finetune_argv(),
         {"train.jsonl": GOOD + "[1, 2]\n", "dev.jsonl": GOOD}, ValueError, ("train.jsonl", "line 9", "list")),
    Case("ft-latin1-csv", "run_finetune", finetune_argv(train="train.csv", dev="dev.csv"),
         {"train.csv": LATIN1_CSV, "dev.csv": "sentence,label\ngood,pos\nbad,neg\n"}, ValueError,
         ("train.csv", "not UTF-8", "line 2")),
    Case("ft-ragged-csv", "run_finetune", finetune_argv(train="train.csv", dev="dev.csv"),
         {"train.csv": RAGGED_CSV, "dev.csv": "sentence,label\ngood,pos\nbad,neg\n"}, ValueError,
         ("train.csv", "line 3", "4 fields", "header has 2")),
    Case("ft-header-only-csv", "run_finetune", finetune_argv(train="train.csv", dev="dev.csv"),
         {"train.csv": "sentence,label\ngood,pos\nbad,neg\n", "dev.csv": "sentence,label\n"}, ValueError,
         ("dev.csv", "no data rows")),
    Case("ft-none-text", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl(sentences(8, text=lambda i: None if i == 3 else "good")), "dev.jsonl": GOOD},
         ValueError, ("task 'task'", "text_columns", "train.jsonl row 4:", "sentence", "None")),
    Case("ft-all-empty-text", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl(sentences(8, text=lambda i: "")), "dev.jsonl": GOOD}, ValueError,
         ("text_columns", "sentence", "every one of the 8 train rows")),
    Case("ft-many-empty-text", "run_finetune", finetune_argv(),
         {"train.jsonl": GOOD, "dev.jsonl": jsonl(sentences(8, text=lambda i: "" if i < 3 else "good"))}, ValueError,
         ("text_columns", "3 of 8 validation rows", "first: ", "dev.jsonl row 1)")),
    Case("ft-number-text", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl(sentences(8, text=lambda i: i)), "dev.jsonl": jsonl(sentences(8, text=lambda i: i))},
         ValueError, ("text_columns", "train.jsonl row 1:", "int", "not text")),
    Case("ft-splits-disagree-on-types", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl(sentences(8, text=lambda i: i)), "dev.jsonl": GOOD}, ValueError,
         ("data_files", "train.jsonl", "could not read", "same columns and types")),
    Case("ft-none-label", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl(sentences(8, label=lambda i: None if i == 5 else "pos")), "dev.jsonl": GOOD},
         ValueError, ("label_column", "train.jsonl row 6:", "None")),
    Case("ft-mixed-labels", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl(sentences(8, label=lambda i: i if i % 2 else "pos")), "dev.jsonl": GOOD},
         ValueError, ("label_column", "all strings or all non-negative integers")),
    Case("ft-label-out-of-range", "run_finetune", finetune_argv("--num_labels", "2"),
         {"train.jsonl": jsonl(sentences(8, label=lambda i: i % 3)), "dev.jsonl": jsonl(sentences(4, label=int))},
         ValueError,
         ("label_column", "train.jsonl row 3:", "out of range")),
    Case("ft-missing-text-column", "run_finetune", finetune_argv(),
         {"train.jsonl": jsonl([{"text": "good", "label": "pos"}] * 4),
          "dev.jsonl": jsonl([{"text": "bad", "label": "neg"}] * 4)}, ValueError,
         ("text_columns", "'sentence' not in the train data")),
    Case("ft-mc-none-choice", "run_finetune", ["--model_name_or_path", "{tiny}", "--train_file", "{d}/train.jsonl",
                                                "--task_kind", "multiple_choice", "--do_train", "--max_steps", "1",
                                                "--output_dir", "{d}/out", *QUIET],
         {"train.jsonl": jsonl([{"question": "q", "choices": ["a", None], "label": 0}] * 3)}, ValueError,
         ("choices_column", "train.jsonl row 1:", "None")),
    Case("ft-qa-no-answer-start", "run_finetune", finetune_file_argv(),
         {"task.json": json.dumps({"name": "qa", "kind": "extractive_qa", "data_files": {"train": "qa.jsonl",
                                   "validation": "qa.jsonl"}}),
          "qa.jsonl": jsonl([QA_ROW, {**QA_ROW, "answers": {"text": ["paris"], "start": [0]}}])}, ValueError,
         ("task 'qa'", "answers_column", "qa.jsonl row 2:", "answer_start")),
    Case("ft-qa-answer-elsewhere", "run_finetune", finetune_file_argv(),
         {"task.json": json.dumps({"name": "qa", "kind": "extractive_qa", "data_files": {"train": "qa.jsonl",
                                   "validation": "qa.jsonl"}}),
          "qa.jsonl": jsonl([QA_ROW, {**QA_ROW, "answers": {"text": ["paris"], "answer_start": [4]}}])}, ValueError,
         ("answers_column", "qa.jsonl row 2:", "not at character 4")),
    Case("ft-qa-none-context", "run_finetune", finetune_file_argv(),
         {"task.json": json.dumps({"name": "qa", "kind": "extractive_qa", "data_files": {"train": "qa.jsonl",
                                   "validation": "qa.jsonl"}}),
          "qa.jsonl": jsonl([QA_ROW, {**QA_ROW, "context": None, "answers": {"text": [], "answer_start": []}}])},
         ValueError, ("context_column", "qa.jsonl row 2:")),
    # ---- run_finetune: task files ----
    Case("ft-task-file-bad-yaml", "run_finetune", finetune_file_argv(source=("--task_file", "{d}/task.yaml")),
         {"task.yaml": "name: t\nkind: classification\n  label_names: [a, b\n"}, ValueError,
         ("task_file", "task.yaml", "not valid YAML", "line")),
    Case("ft-task-file-bad-json", "run_finetune", finetune_file_argv(), {"task.json": '{"name": "t",\n "kind": }'},
         ValueError, ("task_file", "task.json", "not valid JSON", "line 2")),
    Case("ft-task-file-missing", "run_finetune", finetune_file_argv(), {}, ValueError,
         ("task_file", "task.json", "does not exist")),
    Case("ft-task-file-dev-split", "run_finetune", finetune_file_argv(),
         {"task.json": json.dumps(sentiment_task(data_files={"train": "train.jsonl", "dev": "dev.jsonl"})),
          **TWO_SPLITS}, ValueError, ("task 'sentiment'", "data_files", "'dev'", "validation_split")),
    Case("ft-task-file-unknown-field", "run_finetune", finetune_file_argv(),
         {"task.json": json.dumps(sentiment_task(label_colum="label")), **TWO_SPLITS}, ValueError,
         ("task 'sentiment'", "label_colum", "unknown field")),
    Case("ft-task-file-not-mapping", "run_finetune", finetune_file_argv(), {"task.json": "[1, 2]"}, ValueError,
         ("task_file", "mapping")),
    Case("ft-unknown-kind", "run_finetune", finetune_argv(kind="ranking"), TWO_SPLITS, ValueError,
         ("task_kind", "ranking")),
    Case("ft-seq2seq", "run_finetune", finetune_argv(kind="seq2seq"), TWO_SPLITS, ValueError, ("kind", "seq2seq")),
    Case("ft-train-fraction", "run_finetune", finetune_argv("--train_fraction", "0"), TWO_SPLITS, ValueError,
         ("train_fraction",)),
    Case("ft-eval-without-validation", "run_finetune",
         ["--model_name_or_path", "{tiny}", "--train_file", "{d}/train.jsonl", "--task_kind", "classification",
          "--text_columns", "sentence", "--do_train", "--do_eval", "--output_dir", "{d}/out", *QUIET],
         {"train.jsonl": GOOD}, ValueError, ("validation_split", "--do_eval")),
    Case("ft-nothing-to-do", "run_finetune", [*[a for a in finetune_argv() if a not in ("--do_train", "--do_eval")],
                                              "--do_train", "false", "--do_eval", "false"],
         TWO_SPLITS, ValueError, ("do_train", "nothing to do")),
    Case("ft-unknown-flag", "run_finetune", finetune_argv("--lerning_rate", "1e-3"), TWO_SPLITS, ValueError,
         ("--lerning_rate",)),
    Case("ft-two-sources", "run_finetune", finetune_argv("--demo_task", "imdb"), TWO_SPLITS, ValueError,
         ("demo_task", "exactly one")),
    Case("ft-mixed-formats", "run_finetune", finetune_argv(dev="dev.csv"), {"train.jsonl": GOOD,
                                                                             "dev.csv": "sentence,label\na,pos\n"},
         ValueError, ("train_file", "formats")),
    Case("ft-damaged-parquet", "run_finetune", finetune_argv(train="train.parquet", dev="dev.parquet"),
         {"train.parquet": b"PAR1 not really parquet", "dev.parquet": b"PAR1 nor this"}, ValueError,
         ("data_files", "train.parquet", "could not read")),
    Case("ft-resume-from-missing", "run_finetune", finetune_argv("--resume_from_checkpoint", "{d}/checkpoint-9"),
         TWO_SPLITS, ValueError, ("resume_from_checkpoint", "checkpoint-9", "not a folder")),
    Case("ft-empty-task-yaml", "run_finetune", finetune_file_argv(source=("--task_file", "{d}/task.yaml")),
         {"task.yaml": "# nothing yet\n"}, ValueError, ("task_file", "task.yaml", "mapping")),
    Case("ft-output-dir-is-a-file", "run_finetune", finetune_argv("--output_dir", "{d}/train.jsonl"), TWO_SPLITS,
         ValueError, ("output_dir", "train.jsonl", "is a file")),
    # ---- run_tartan ----
    Case("tartan-no-validation-file", "run_tartan", [a for a in tartan_argv() if a not in ("--validation_file",
                                                                                          "{d}/dev.jsonl")],
         TWO_SPLITS, ValueError, ("validation_file",)),
    Case("tartan-empty-validation", "run_tartan", tartan_argv(), {"train.jsonl": GOOD, "dev.jsonl": ""}, ValueError,
         ("dev.jsonl", "is empty")),
    Case("tartan-header-only-validation", "run_tartan", tartan_argv(train="train.csv", dev="dev.csv"),
         {"train.csv": "sentence,label\ngood,pos\nbad,neg\n", "dev.csv": "sentence,label\n"}, ValueError,
         ("dev.csv", "no data rows")),
    Case("tartan-none-label", "run_tartan", tartan_argv(),
         {"train.jsonl": jsonl(sentences(8, label=lambda i: None if i == 2 else "pos")), "dev.jsonl": GOOD},
         ValueError, ("label_column", "train.jsonl row 3:", "None")),
    Case("tartan-mixed-labels", "run_tartan", tartan_argv(),
         {"train.jsonl": jsonl(sentences(8, label=lambda i: i if i % 2 else "pos")), "dev.jsonl": GOOD},
         ValueError, ("label_column", "all strings")),
    Case("tartan-none-text-validation", "run_tartan", tartan_argv(),
         {"train.jsonl": GOOD, "dev.jsonl": jsonl(sentences(8, text=lambda i: None if i == 4 else "good"))},
         ValueError, ("end_task", "text_columns", "dev.jsonl row 5:")),
    Case("tartan-latin1-train", "run_tartan", tartan_argv(train="train.csv", dev="dev.csv"),
         {"train.csv": LATIN1_CSV, "dev.csv": "sentence,label\ngood,pos\nbad,neg\n"}, ValueError,
         ("train_file", "train.csv", "not UTF-8")),
    Case("tartan-aux-missing-file", "run_tartan", tartan_argv(auxiliary=("dapt={d}/nothing.txt",)), TWO_SPLITS,
         ValueError, ("task 'dapt'", "auxiliary", "nothing.txt", "does not exist")),
    Case("tartan-aux-bad-spec", "run_tartan", tartan_argv(auxiliary=("dapt",)), TWO_SPLITS, ValueError,
         ("auxiliary", "'dapt'", "name=source")),
    Case("tartan-aux-blank-corpus", "run_tartan", tartan_argv(auxiliary=("dapt={d}/aux.txt",)),
         {**TWO_SPLITS, "aux.txt": "\n \n\n"}, ValueError, ("task 'dapt'", "auxiliary", "aux.txt")),
    Case("tartan-aux-no-text-column", "run_tartan", tartan_argv(auxiliary=("dapt={d}/aux.jsonl",)),
         {**TWO_SPLITS, "aux.jsonl": jsonl([{"body": "good"}] * 3)}, ValueError,
         ("task 'dapt'", "auxiliary", "'text' not in")),
    Case("tartan-bad-mode", "run_tartan", tartan_argv("--mode", "both"), TWO_SPLITS, (ValueError, SystemExit), ()),
    # ---- run_amos ----
    Case("amos-three-words", "run_amos", amos_argv(), {"corpus.txt": "three words only\n"}, ValueError,
         ("validation_split_percentage", "1 documents", "too few")),
    Case("amos-three-words-no-holdout", "run_amos", amos_argv("--validation_split_percentage", "0"),
         {"corpus.txt": "three words only\n"}, ValueError, ("block_size", "fewer than 16 tokens")),
    Case("amos-missing-corpus", "run_amos", amos_argv(), {}, ValueError,
         ("train_file", "corpus.txt", "does not exist")),
    Case("amos-empty-corpus", "run_amos", amos_argv(), {"corpus.txt": ""}, ValueError, ("train_file", "is empty")),
    Case("amos-blank-corpus", "run_amos", amos_argv(), {"corpus.txt": "\n\n  \n"}, ValueError,
         ("train_file", "no rows")),
    Case("amos-latin1-corpus", "run_amos", amos_argv(), {"corpus.txt": "caf\u00e9 good\n".encode("latin-1")},
         ValueError, ("train_file", "corpus.txt", "not UTF-8", "line 1")),
    Case("amos-no-text-column", "run_amos", amos_argv(corpus="corpus.jsonl"),
         {"corpus.jsonl": jsonl([{"body": "good movie"}] * 30)}, ValueError,
         ("text_column_name", "'text' not in")),
    Case("amos-bad-extension", "run_amos", amos_argv(corpus="corpus.docx"), {"corpus.docx": "x"}, ValueError,
         ("train_file", "corpus.docx", "unsupported extension")),
    Case("amos-split-100", "run_amos", amos_argv("--validation_split_percentage", "100"), {"corpus.txt": CORPUS},
         ValueError, ("validation_split_percentage",)),
    Case("amos-two-sources", "run_amos", amos_argv("--dataset_name", "x/y"), {"corpus.txt": CORPUS}, ValueError,
         ("dataset_name", "train_file")),
    Case("amos-bad-mixture", "run_amos", amos_argv("--mixture", "bogus"), {"corpus.txt": CORPUS}, ValueError,
         ("argument --mixture: invalid choice: 'bogus'",)),
    Case("amos-rtd-weight", "run_amos", amos_argv("--rtd_weight", "0"), {"corpus.txt": CORPUS}, ValueError,
         ("rtd_weight",)),
    # ---- run_muppet: mixture files ----
    Case("muppet-bad-yaml", "run_muppet", muppet_argv(mixture_file="mix.yaml"),
         {"mix.yaml": "tasks:\n  - name: a\n    kind: [classification\n"}, ValueError,
         ("mixture file", "mix.yaml", "not valid YAML", "line")),
    Case("muppet-bad-json", "run_muppet", muppet_argv(), {"mix.json": '{"tasks": [\n{"name": "a",}\n]}'},
         ValueError, ("mixture file", "mix.json", "not valid JSON", "line 2")),
    Case("muppet-no-tasks", "run_muppet", muppet_argv(), {"mix.json": '{"task": []}'}, ValueError,
         ("mix.json", "'tasks'")),
    Case("muppet-missing-file", "run_muppet", muppet_argv(), {}, ValueError, ("mixture file", "does not exist")),
    Case("muppet-dev-split", "run_muppet", muppet_argv(),
         {"mix.json": mixture([sentiment_task(data_files={"train": "train.jsonl", "dev": "dev.jsonl"})]),
          **TWO_SPLITS}, ValueError, ("task 'sentiment'", "data_files", "'dev'")),
    Case("muppet-dev-split-mapped-ok-but-missing-file", "run_muppet", muppet_argv(),
         {"mix.json": mixture([sentiment_task(data_files={"train": "train.jsonl", "dev": "nothere.jsonl"},
                                              validation_split="dev")]), "train.jsonl": GOOD}, ValueError,
         ("task 'sentiment'", "data_files", "nothere.jsonl", "does not exist")),
    Case("muppet-duplicate-names", "run_muppet", muppet_argv(),
         {"mix.json": mixture([sentiment_task(), sentiment_task()]), **TWO_SPLITS}, ValueError,
         ("task 'sentiment'", "twice")),
    Case("muppet-unknown-kind", "run_muppet", muppet_argv(),
         {"mix.json": mixture([sentiment_task(kind="tagging")]), **TWO_SPLITS}, ValueError,
         ("task 'sentiment'", "kind", "tagging")),
    Case("muppet-empty-targets", "run_muppet", muppet_argv(),
         {"mix.json": mixture([{"name": "summ", "kind": "seq2seq", "data_files": {"train": "s.jsonl"}}]),
          "s.jsonl": jsonl([{"source": "the movie was good", "target": ""}] * 6)}, ValueError,
         ("task 'summ'", "target_column", "every one of the 6 train rows")),
    Case("muppet-none-text", "run_muppet", muppet_argv(),
         {"mix.json": mixture([sentiment_task()]),
          "train.jsonl": jsonl(sentences(8, text=lambda i: None if i == 6 else "good")), "dev.jsonl": GOOD},
         ValueError, ("task 'sentiment'", "text_columns", "train.jsonl row 7:")),
    Case("muppet-label-not-named", "run_muppet", muppet_argv(),
         {"mix.json": mixture([sentiment_task()]), "train.jsonl": jsonl(sentences(8, label=lambda i: "meh")),
          "dev.jsonl": GOOD}, ValueError, ("task 'sentiment'", "label_column", "'meh'")),
    Case("muppet-both-sources", "run_muppet", muppet_argv("--demo_tasks", "imdb"), {"mix.json": "{}"}, ValueError,
         ("mixture_file", "demo_tasks")),
    # ---- run_meta_lm ----
    Case("metalm-missing-corpus", "run_meta_lm", meta_lm_argv(), {"mix.json": mixture([sentiment_task()])},
         ValueError, ("train_file", "corpus.txt", "does not exist")),
    Case("metalm-tiny-corpus", "run_meta_lm", meta_lm_argv(), {"corpus.txt": "three words only\n"}, ValueError,
         ("block_size", "fewer than 16 tokens")),
    Case("metalm-too-few-blocks", "run_meta_lm", meta_lm_argv(),
         {"corpus.txt": "the movie was very good and the plot was fun and the actor was great\n",
          "mix.json": mixture([sentiment_task()]), **TWO_SPLITS}, ValueError,
         ("validation_split_percentage", "too few")),
    Case("metalm-regression-task", "run_meta_lm", meta_lm_argv(),
         {"corpus.txt": CORPUS, "mix.json": mixture([{"name": "score", "kind": "regression",
                                                      "text_columns": ["sentence"], "data_files": "train.jsonl"}]),
          "train.jsonl": jsonl(sentences(8, label=lambda i: 0.5))}, ValueError,
         ("task 'score'", "kind", "classification")),
    Case("metalm-bad-mixture-yaml", "run_meta_lm", meta_lm_argv(mixture_file="mix.yaml"),
         {"corpus.txt": CORPUS, "mix.yaml": "tasks: [\n"}, ValueError, ("mixture file", "mix.yaml", "YAML")),
    Case("metalm-label-not-named", "run_meta_lm", meta_lm_argv(),
         {"corpus.txt": CORPUS, "mix.json": mixture([sentiment_task()]),
          "train.jsonl": jsonl(sentences(8, label=lambda i: "great")), "dev.jsonl": GOOD}, ValueError,
         ("task 'sentiment'", "label_column", "'great'")),
    Case("metalm-no-tokenizer", "run_meta_lm",
         [a for a in meta_lm_argv() if a not in ("--tokenizer_name", "{tiny}")], {"corpus.txt": CORPUS}, ValueError,
         ("tokenizer_name",)),
]


def _fill(argv: list[str], folder: Path, tiny: str) -> list[str]:
    return [a.replace("{d}", str(folder)).replace("{tiny}", tiny) for a in argv]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_error_before_any_work(case: Case, tmp_path, tiny_dir, monkeypatch):
    for name, content in case.files.items():
        path = tmp_path / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(case.error) as raised:
        run_script(case.script, _fill(case.argv, tmp_path, tiny_dir))
    message = str(raised.value)
    for needle in case.needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert not (tmp_path / "out" / "model.safetensors").exists()  # nothing was trained


def test_case_table_is_large_and_covers_every_script():
    assert len(CASES) >= 60
    assert {c.script for c in CASES} == set(SCRIPTS)
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_renders_for_every_script(script, capsys):
    with pytest.raises(SystemExit) as raised:
        parse(script, ["--help"])
    assert raised.value.code == 0
    assert "--output_dir" in capsys.readouterr().out


# ---- non-finite training --------------------------------------------------------------------------------------
from hf_aux.runtime.nonfinite import NonFiniteTrainingError  # noqa: E402

MIXTURE_FILES = {"mix.json": mixture([sentiment_task()]), "train.jsonl": jsonl(sentences(16)),
                 "dev.jsonl": jsonl(sentences(8))}
TRAINING_RUNS = {  # each script's 4-step run on the case folder's files: argv, files
    "run_finetune": (finetune_argv, {"train.jsonl": jsonl(sentences(16)), "dev.jsonl": jsonl(sentences(8))}),
    "run_tartan": (lambda *extra: tartan_argv(*extra, auxiliary=("tapt=tapt",)),
                   {"train.jsonl": jsonl(sentences(16)), "dev.jsonl": jsonl(sentences(8))}),
    "run_amos": (amos_argv, {"corpus.txt": CORPUS}),
    "run_muppet": (muppet_argv, MIXTURE_FILES),
    "run_meta_lm": (meta_lm_argv, {"corpus.txt": CORPUS, **MIXTURE_FILES}),
    "run_meta_lm-hard": (lambda *extra: meta_lm_argv(*extra, objective="hard"), {"corpus.txt": CORPUS,
                                                                                 **MIXTURE_FILES}),
}


def training_case(name: str, folder: Path, tiny: str, *extra: str) -> tuple[str, list[str]]:
    argv, files = TRAINING_RUNS[name]
    for file, content in files.items():
        (folder / file).write_text(content)
    return name.split("-")[0], _fill(argv(*extra), folder, tiny)


def all_finite(folder: Path) -> bool:
    from safetensors.torch import load_file

    return all(bool(torch.isfinite(t.float()).all()) for path in folder.rglob("*.safetensors")
               for t in load_file(path).values())


@pytest.mark.parametrize("name", list(TRAINING_RUNS))
def test_huge_learning_rate_stops_before_anything_non_finite_is_saved(name, tmp_path, tiny_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script, argv = training_case(name, tmp_path, tiny_dir, "--learning_rate", "1e30", "--max_steps", "4",
                                 "--save_strategy", "steps", "--save_steps", "1")
    with pytest.raises(NonFiniteTrainingError) as raised:
        run_script(script, argv)
    message = str(raised.value)
    assert "non-finite" in message and "at step" in message or "after optimizer step" in message, message
    assert "--on_nonfinite skip" in message
    out = tmp_path / "out"
    assert not (out / "model.safetensors").exists()  # no final model
    assert all_finite(out)  # every checkpoint written before the failure holds finite numbers only


class _Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x, labels):
        return {"loss": ((self.linear(x).squeeze(-1) - labels) ** 2).mean()}


def _train_regressor(tmp_path, rows, policy: str):
    from datasets import Dataset
    from transformers import Trainer

    from hf_aux.runtime.config import TokenSafeTrainingArguments
    from hf_aux.runtime.nonfinite import install_nonfinite_guard

    torch.manual_seed(0)
    model = _Regressor()
    args = TokenSafeTrainingArguments(
        output_dir=str(tmp_path / policy), per_device_train_batch_size=1, max_steps=len(rows), learning_rate=0.1,
        lr_scheduler_type="constant", report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
        on_nonfinite=policy, logging_steps=1)
    data = Dataset.from_list([{"x": x, "labels": y} for x, y in rows]).with_format("torch")
    trainer = Trainer(model=model, args=args, train_dataset=data)
    install_nonfinite_guard(trainer, watch_model_loss=True)
    trainer.get_train_dataloader = lambda: torch.utils.data.DataLoader(data, batch_size=1, shuffle=False)
    trainer.train()
    return model.linear.weight.detach().clone(), trainer


def test_on_nonfinite_skip_skips_exactly_the_bad_step_and_stop_names_it(tmp_path):
    good_a, bad, good_b = ([1.0, 2.0], 3.0), ([float("nan"), 1.0], 1.0), ([0.5, -1.0], 0.0)
    skipped, trainer = _train_regressor(tmp_path, [good_a, bad, good_b], "skip")
    # the bad step changed nothing (parameters, Adam moments and step count): as if it had never been there,
    # except that the constant schedule counted it
    reference, _ = _train_regressor(tmp_path, [good_a, good_b, good_b], "stop")
    two_steps, _ = _train_regressor(tmp_path, [good_a, good_b], "stop")
    assert torch.isfinite(skipped).all()
    assert torch.equal(skipped, two_steps) and not torch.equal(skipped, reference)
    guard = next(c for c in trainer.callback_handler.callbacks if type(c).__name__ == "NonFiniteGuard")
    assert guard.skipped == 1
    with pytest.raises(NonFiniteTrainingError, match=r"at step 2: loss nan; non-finite gradients in 2 of 2"):
        _train_regressor(tmp_path, [good_a, bad, good_b], "stop")
    with pytest.raises(ValueError, match="on_nonfinite"):
        from hf_aux.runtime.config import TokenSafeTrainingArguments

        TokenSafeTrainingArguments(output_dir=str(tmp_path), on_nonfinite="ignore")



@pytest.mark.parametrize("policy, found_after", [("stop", "after optimizer step 3 (finite after step 0: the update "
                                                           "of one of steps 1-3 made them so)"),
                                                 ("skip", "after optimizer step 2")])
def test_a_watched_module_is_checked_where_the_model_is(tmp_path, policy, found_after):
    """A module its trainer updates beside the model (the meta-learned objective's teacher) is checked on the
    guard's schedule, named in the error: with 'stop' where Trainer logs (here every 3rd step), not at every
    step; with 'skip' after every update."""
    from transformers import TrainerCallback

    helper = torch.nn.Linear(2, 2)

    class Corrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                with torch.no_grad():
                    helper.weight[0, 0] = float("nan")

    rows = [([1.0, 2.0], 3.0)] * 4
    from datasets import Dataset
    from transformers import Trainer

    from hf_aux.runtime.config import TokenSafeTrainingArguments
    from hf_aux.runtime.nonfinite import install_nonfinite_guard

    args = TokenSafeTrainingArguments(
        output_dir=str(tmp_path / policy), per_device_train_batch_size=1, max_steps=4, learning_rate=0.1,
        report_to="none", save_strategy="no", disable_tqdm=True, seed=0, on_nonfinite=policy, logging_steps=3)
    data = Dataset.from_list([{"x": x, "labels": y} for x, y in rows]).with_format("torch")
    trainer = Trainer(model=_Regressor(), args=args, train_dataset=data, callbacks=[Corrupt()])
    install_nonfinite_guard(trainer).watch("the helper", helper)
    with pytest.raises(NonFiniteTrainingError, match=r"non-finite parameters of the helper "
                                                     + re.escape(found_after) + r": 1 of 2 parameter tensors"):
        trainer.train()


# ---- output folders: finished runs, other configurations, locks, incomplete checkpoints ---------------------------
import hashlib  # noqa: E402
import subprocess  # noqa: E402

from hf_aux.runtime.run_guard import OutputDirError, lock_path, release_lock  # noqa: E402


def digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def finetune_run(tmp_path, tiny_dir, *extra, steps: int = 3):
    files = {"train.jsonl": jsonl(sentences(16)), "dev.jsonl": jsonl(sentences(8))}
    for name, content in files.items():
        if not (tmp_path / name).exists():
            (tmp_path / name).write_text(content)
    argv = [a for a in finetune_argv("--max_steps", str(steps), "--per_device_train_batch_size", "4")
            if a != "--do_eval"]
    return _fill(argv + list(extra), tmp_path, tiny_dir)


def test_a_finished_run_is_neither_repeated_nor_overwritten_by_another_configuration(tmp_path, tiny_dir, capsys):
    out = tmp_path / "out"
    run_script("run_finetune", finetune_run(tmp_path, tiny_dir))
    finished = digest(out)
    # the identical command again: nothing is trained (no step past max_steps), and it says so
    results = run_script("run_finetune", finetune_run(tmp_path, tiny_dir))
    assert "already holds this finished run (step 3 of 3); nothing to do" in capsys.readouterr().out
    assert results["train_samples"] == 16 and digest(out) == finished
    # another configuration is refused, naming what differs; nothing in the folder changes
    with pytest.raises(OutputDirError, match=r"another configuration \(learning_rate: 5e-05 -> 0.001\).*"
                                             r"--overwrite_output_dir"):
        run_script("run_finetune", finetune_run(tmp_path, tiny_dir, "--learning_rate", "1e-3"))
    assert digest(out) == finished
    # unless asked for
    run_script("run_finetune", finetune_run(tmp_path, tiny_dir, "--learning_rate", "1e-3", "--overwrite_output_dir"))
    assert digest(out)["model.safetensors"] != finished["model.safetensors"]


def test_a_folder_used_by_a_live_process_is_refused_and_a_stale_lock_is_replaced(tmp_path, tiny_dir, caplog):
    out = tmp_path / "out"
    out.mkdir()
    import signal

    from tiny import hold_lock

    holder = hold_lock(out)  # another process holds the folder's lock
    try:
        with pytest.raises(OutputDirError, match=rf"in use by process {holder.pid}.*another --output_dir"):
            run_script("run_finetune", finetune_run(tmp_path, tiny_dir, steps=1))
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: its lock file stays, naming it
        holder.wait()
    lock = json.loads(lock_path(out).read_text())
    assert lock["pid"] == holder.pid
    # the process is gone: its lock no longer blocks, and is replaced with a warning
    run_script("run_finetune", finetune_run(tmp_path, tiny_dir, steps=1))
    assert "Replacing the stale lock" in caplog.text
    # a record left by an earlier boot, or naming a live process (a PID reused after the crash), blocks nothing
    for left in ({**lock, "pid": 1, "boot_id": "an-earlier-boot"}, {**lock, "pid": os.getppid(), "start_time": "1"}):
        release_lock(lock_path(out))  # as at the end of this process: the next run is another process's
        lock_path(out).write_text(json.dumps(left))
        caplog.clear()
        run_script("run_finetune", finetune_run(tmp_path, tiny_dir, steps=1))  # finished: nothing to do, no error
        assert "Replacing the stale lock" in caplog.text


def test_an_incomplete_last_checkpoint_is_skipped_and_the_run_resumes_exactly(tmp_path, tiny_dir, capsys):
    out = tmp_path / "out"
    checkpointed = ("--save_strategy", "steps", "--save_steps", "1")
    run_script("run_finetune", finetune_run(tmp_path, tiny_dir, *checkpointed, steps=4))
    reference = (out / "model.safetensors").read_bytes()
    # as if killed while writing checkpoint-4: its weights half written, no trainer_state.json; no final model
    for name in ("model.safetensors", "trainer_state.json", "train_results.json", "all_results.json"):
        (out / name).unlink()
    weights = out / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (out / "checkpoint-4" / "trainer_state.json").unlink()
    run_script("run_finetune", finetune_run(tmp_path, tiny_dir, *checkpointed, steps=4))
    assert "skipping incomplete checkpoint" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == reference  # resumed from checkpoint-3, exactly
    assert len(list((out / "_incomplete_checkpoints").iterdir())) == 1
    # a damaged checkpoint named explicitly is an error naming the file and the choices
    damaged = out / "checkpoint-3" / "optimizer.pt"
    damaged.write_bytes(damaged.read_bytes()[:100])
    with pytest.raises(OutputDirError, match=r"resume_from_checkpoint.*checkpoint-3.*optimizer.pt is truncated.*"
                                             r"earlier checkpoint"):
        run_script("run_finetune", finetune_run(tmp_path, tiny_dir, *checkpointed, "--resume_from_checkpoint",
                                                str(out / "checkpoint-3"), steps=4))


# ---- SIGINT / SIGTERM ---------------------------------------------------------------------------------------------
import signal  # noqa: E402

SLOW_RUN = """import sys, time
sys.path.insert(0, {tests!r})
import transformers
step = transformers.Trainer.training_step
def slow_step(self, *args, **kwargs):  # 0.3 s a step: time for the test to send its signal mid-run
    time.sleep(0.3)
    return step(self, *args, **kwargs)
transformers.Trainer.training_step = slow_step
from script_loader import load_run_script
script = load_run_script("run_finetune")
script.main(*script.parse_args(sys.argv[1:]))
"""


def test_ctrl_c_saves_a_checkpoint_exits_non_zero_with_one_line_and_the_rerun_resumes_exactly(tmp_path, tiny_dir,
                                                                                               caplog):
    argv = finetune_run(tmp_path, tiny_dir, "--logging_steps", "1", steps=6)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-c", SLOW_RUN.format(tests=str(Path(__file__).parent)), *argv]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path)
    for line in process.stdout:  # the first logged step
        if "'loss'" in line:
            process.send_signal(signal.SIGINT)
            break
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGINT, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("hf_aux: interrupted by SIGINT at step ") and "of 6" in last, last
    step = int(last.split(" at step ")[1].split()[0])
    assert 1 <= step < 6 and f"saved {tmp_path / 'out' / f'checkpoint-{step}'}" in last
    assert not (tmp_path / "out" / "model.safetensors").exists()
    # the same command again resumes from that checkpoint and ends exactly where an uninterrupted run ends
    with caplog.at_level("WARNING", logger="hf_aux.runtime.run_guard"):
        run_script("run_finetune", argv)
    assert f"Resuming from {tmp_path / 'out' / f'checkpoint-{step}'}" in caplog.text
    reference = tmp_path / "reference"
    run_script("run_finetune", [a if a != str(tmp_path / "out") else str(reference) for a in argv])
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()


def test_sigterm_during_training_in_process_checkpoints_and_exits_143(tmp_path, tiny_dir, capsys):
    from transformers import TrainerCallback

    class TerminateAtStep2(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    import hf_aux.runtime.trainer

    original = hf_aux.runtime.trainer.AuxTrainer  # hf_aux.finetune.command.main imports it when it runs

    class AuxTrainer(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(TerminateAtStep2())

    hf_aux.runtime.trainer.AuxTrainer = AuxTrainer
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as raised:
            run_script("run_finetune", finetune_run(tmp_path, tiny_dir, steps=4))
    finally:
        hf_aux.runtime.trainer.AuxTrainer = original
    assert raised.value.code == 128 + signal.SIGTERM
    assert f"interrupted by SIGTERM at step 2 of 4: saved {tmp_path / 'out' / 'checkpoint-2'}" in \
        capsys.readouterr().err
    assert (tmp_path / "out" / "checkpoint-2" / "trainer_state.json").is_file()
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers are put back


# ---- the Hub: a silent, failing or refusing server ends the run in bounded time, naming endpoint and operation ----
import time  # noqa: E402

import hf_aux.runtime.hub as hub_module  # noqa: E402
from hf_aux.runtime.hub import HubPushError  # noqa: E402
from hub_server import DEFAULT_USER, local_hub  # noqa: E402, F401 - `local_hub` is a fixture

TOKEN = "hf_FaultsTokenThatMustNeverBeSaved0123456789"


@pytest.fixture
def quick_hub_timeouts(monkeypatch):
    """1 s timeouts and 2 attempts (the defaults: 10 s connect, 60 s read, 3 attempts; before any work the 30 s
    bound: 6 s connect, 7.5 s read, 2 attempts)."""
    monkeypatch.setattr(hub_module, "HUB_ATTEMPTS", 2)
    monkeypatch.setattr(hub_module, "HUB_START_BOUND", 4.0)  # 1 s to answer at the start
    monkeypatch.setattr(hub_module, "HUB_READ_TIMEOUT", 1.0)
    hub_module.install_hub_timeouts(connect=1.0, read=1.0)
    yield
    hub_module.install_hub_timeouts()


def push_run(tmp_path, tiny_dir, repo, *extra):
    return finetune_run(tmp_path, tiny_dir, "--do_eval", "--push_to_hub", "--hub_model_id", f"{DEFAULT_USER}/{repo}",
                        "--hub_token", TOKEN, *extra, steps=2)


def test_a_silent_hub_ends_the_run_in_bounded_time_naming_endpoint_and_operation(local_hub, quick_hub_timeouts,
                                                                                  tmp_path, tiny_dir):
    local_hub.stall()
    start = time.monotonic()
    with pytest.raises(HubPushError) as raised:
        run_script("run_finetune", push_run(tmp_path, tiny_dir, "silent"))
    assert time.monotonic() - start < 20  # 2 attempts x 1 s + back-off; unbounded before
    message = str(raised.value)
    assert f"{local_hub.url}/{DEFAULT_USER}/silent (create_repo)" in message
    assert "did not answer within 1 s" in message and "failed 2 times" in message
    assert "Nothing was trained" in message and TOKEN not in message
    assert not (tmp_path / "out").exists()


def test_a_silent_hub_fails_a_fresh_run_within_30_seconds_with_the_default_timeouts(local_hub, tmp_path, tiny_dir):
    """Nothing is at stake before training: the repository step gives up within HUB_START_BOUND (30 s), a hard bound
    measured here with the default timeouts, where the final upload keeps its longer retries."""
    local_hub.stall()
    start = time.monotonic()
    with pytest.raises(HubPushError) as raised:
        run_script("run_finetune", push_run(tmp_path, tiny_dir, "silent-default"))
    elapsed = time.monotonic() - start
    assert elapsed < 30, elapsed
    message = str(raised.value)
    assert "(create_repo)" in message and "did not answer within 7.5 s" in message and "failed 2 times" in message
    assert not (tmp_path / "out").exists()


def test_the_start_bound_gives_back_the_timeouts_installed_before():
    hub_module.install_hub_timeouts(connect=1.0, read=2.0)
    try:
        with hub_module.hub_timeouts(6.0, 7.5):
            assert hub_module._installed == (6.0, 7.5)
        assert hub_module._installed == (1.0, 2.0)  # not the module defaults
    finally:
        hub_module.install_hub_timeouts()


def test_a_refused_token_is_not_retried(local_hub, quick_hub_timeouts, tmp_path, tiny_dir):
    local_hub.accept_only("hf_another_token")
    with pytest.raises(HubPushError, match=r"\(create_repo\).*rejected the token \(401"):
        run_script("run_finetune", push_run(tmp_path, tiny_dir, "refused"))
    assert len([r for r in local_hub.requests if r.path == "/api/repos/create"]) == 1


def test_5xx_on_upload_leaves_evaluation_metrics_and_card_written_and_only_hf_aux_pushes(
        local_hub, quick_hub_timeouts, tmp_path, tiny_dir, caplog):
    local_hub.fail(500, path_contains="/commit/")
    with pytest.raises(HubPushError) as raised:
        run_script("run_finetune", push_run(tmp_path, tiny_dir, "failing", "--save_strategy", "steps",
                                            "--save_steps", "1", "--hub_strategy", "checkpoint"))
    message = str(raised.value)
    assert "upload_folder (commit)" in message and "answered 500" in message and "failed 2 times" in message
    assert "intact" in message and TOKEN not in message
    out = tmp_path / "out"
    # evaluation, metrics and the card were written before the push could fail
    assert {"model.safetensors", "eval_results.json", "all_results.json", "README.md"} <= {p.name for p in
                                                                                            out.iterdir()}
    # one failed checkpoint push (2 attempts) stopped further checkpoint pushes; then the final push (2 attempts):
    # Trainer pushed nothing on its own
    commits = [r for r in local_hub.requests if "/commit/" in r.path]
    assert len(commits) == 4
    assert "Checkpoint push failed; no more checkpoint pushes" in caplog.text


def test_string_labels_in_a_meta_lm_mixture_train(tmp_path, tiny_dir, monkeypatch):
    """Was a TypeError (max() over strings): labels named in label_names become their class index."""
    monkeypatch.chdir(tmp_path)
    script, argv = training_case("run_meta_lm-hard", tmp_path, tiny_dir, "--max_steps", "2")
    trainer = run_script(script, argv)
    assert trainer.state.global_step == 2 and (tmp_path / "out" / "model.safetensors").is_file()


def test_an_interrupt_outside_the_training_steps_is_one_line_and_exit_128_plus_signal(capsys):
    """run_command, every script's entry point: Ctrl-C or SIGTERM while data or models load (or during evaluation)
    ends with one line on stderr and 128 + the signal number, not a traceback; SIGTERM's handler is restored."""
    import os
    import signal
    import time

    from hf_aux.runtime.run_guard import run_command

    def loading():
        raise KeyboardInterrupt

    def terminated():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this returns

    previous = signal.getsignal(signal.SIGTERM)
    for body, code, name in ((loading, 130, "SIGINT"), (terminated, 143, "SIGTERM")):
        with pytest.raises(SystemExit) as exit_info:
            run_command(body)
        assert exit_info.value.code == code
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"hf_aux: interrupted by {name} outside the training steps")
        assert signal.getsignal(signal.SIGTERM) is previous
    assert run_command(lambda x: x + 1, 1) == 2 and signal.getsignal(signal.SIGTERM) is previous
