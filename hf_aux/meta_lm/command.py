"""`hf-aux meta-lm`: pretrain a masked-LM student with a meta-learned objective (teacher-student, Shen:
*Meta-learning a Language Modeling Objective*), or with the plain MLM baseline, shaped like transformers'
run_mlm.py. Unlabelled side: text files or a dataset; labelled side: a mixture file of classification tasks.

Without --two_moons, --train_file, --dataset_name or --mixture the demo config (hf_aux/meta_lm/demo.yaml:
the paper's Two Moons setting, reduced) supplies the defaults, and any --config file or flag overrides them. The
student is saved as a plain masked-LM checkpoint, the teacher in `<output_dir>/teacher/`. Usage: docs/meta_lm.md
and run_scripts/run_meta_lm.py. The heavy imports (Trainer, datasets) happen in the functions, so --help stays
fast.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from .config import MetaLMConfig
from ..cli.arguments import ModelArguments as SharedModelArguments
from ..cli.parser import command_parser, demo_config_path, given_by_user, parse_command_line
from ..cli.run import require_max_steps
from ..errors import UserInputError, explain_hub_errors, hub_id_or_none, refuse_unless_encoder_with

logger = logging.getLogger(__name__)

DATA_SOURCE_FLAGS = ("--two_moons", "--train_file", "--dataset_name", "--mixture")


@dataclass
class ModelArguments(SharedModelArguments):
    model_name_or_path: str | None = field(default=None, metadata={"help": "Student checkpoint; None = from scratch."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer (default: model_name_or_path)."})
    model_type: str = field(default="bert", metadata={"help": "Student architecture when training from scratch."})
    config_overrides: str | None = field(default=None, metadata={
        "help": "From scratch: 'key=value,...' overrides of the default config (as run_mlm.py)."})
    teacher_name_or_path: str | None = field(default=None, metadata={
        "help": "A saved MetaLMTeacher; default: a fresh teacher the student's size (§4.1)."})
    attn_implementation: str = field(default="eager", metadata={
        "help": "Student attention; soft labels need 'eager' (double backward)."})


@dataclass
class DataTrainingArguments:
    two_moons: bool = field(default=False, metadata={"help": "Use the paper's Two Moons data (§4.2)."})
    two_moons_num_unlabelled: int = field(default=2000, metadata={"help": "Two Moons unlabelled sequences."})
    two_moons_finetune_size: int = field(default=160, metadata={"help": "Two Moons labelled points (10..160)."})
    train_file: list[str] | None = field(default=None, metadata={"help": "Unlabelled text files (txt/csv/json)."})
    dataset_name: str | None = field(default=None, metadata={"help": "Unlabelled dataset (Hub id or local path)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration."})
    text_column_name: str = field(default="text", metadata={"help": "Column holding unlabelled text."})
    mixture: str | None = field(default=None, metadata={"help": "Mixture file of classification TaskSpecs."})
    block_size: int = field(default=128, metadata={"help": "Tokens per unlabelled block (and labelled input)."})
    validation_split_percentage: int = field(default=5, metadata={"help": "Unlabelled text held out for eval."})
    validation_file: str | None = field(default=None, metadata={
        "help": "Held-out unlabelled text for evaluation (txt/csv/json), instead of validation_split_percentage "
                "of the blocks (which a stream does not have)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the unlabelled blocks."})
    streaming: bool = field(default=False, metadata={
        "help": "Read --train_file / --dataset_name as a stream (datasets' streaming=True), tokenised into blocks as "
                "training reads them, in order: x_u batches and the MLM task's support/query batches (each its own "
                "pass over the corpus). Bounded memory, nothing written to the datasets cache, an exact resume. Needs "
                "--max_steps; no held-out share of a stream (give --validation_file to evaluate)."})


def make_parser() -> HfArgumentParser:
    return command_parser((ModelArguments, DataTrainingArguments, MetaLMConfig), "meta_lm", DATA_SOURCE_FLAGS)


def parse_args(argv: list[str] | None = None):
    model_args, data_args, training_args = parse_command_line(make_parser(), argv,
                                                              demo_config=demo_config_path("meta_lm"),
                                                              data_source_flags=DATA_SOURCE_FLAGS)
    check_two_moons_model(model_args, data_args, training_args)
    return model_args, data_args, training_args


def check_two_moons_model(model_args: ModelArguments, data_args: DataTrainingArguments, training_args) -> None:
    """The Two Moons data are tokens of their own 512-token vocabulary (hf_aux.meta_lm.two_moons): a model given
    with the demo (no data source named) would be trained, and saved, beside a tokenizer it does not know."""
    if not data_args.two_moons:
        return
    if model_args.model_name_or_path and not given_by_user(training_args, "two_moons"):
        raise UserInputError(
            "ModelArguments: field 'model_name_or_path': without a data source hf-aux meta-lm runs the Two Moons "
            "demo, which builds its own model and 512-token tokenizer; to train "
            f"{model_args.model_name_or_path!r}, give text it can read (--train_file or --dataset_name, and --mixture "
            "for --objective hard/soft), or drop --model_name_or_path for the demo")
    if model_args.tokenizer_name:
        raise UserInputError("ModelArguments: field 'tokenizer_name': the Two Moons data (--two_moons) come with "
                             "their own 512-token tokenizer; drop --tokenizer_name, or give text (--train_file or "
                             "--dataset_name) for that tokenizer")


def check_student_architecture(model_args: ModelArguments, data_args: DataTrainingArguments) -> None:
    """Before any work: the student is a masked-LM encoder (an `AutoModelForMaskedLM` class, not an
    encoder-decoder, whose masked-LM class is a seq2seq model that needs decoder inputs)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

    if model_args.model_name_or_path:
        field_name, name = "model_name_or_path", repr(model_args.model_name_or_path)
        with explain_hub_errors("ModelArguments", field_name, model_args.model_name_or_path):
            config = AutoConfig.from_pretrained(model_args.model_name_or_path, **model_args.hub_kwargs())
    elif data_args.two_moons:
        return  # the demo's own BERT
    else:
        field_name, name = "model_type", repr(model_args.model_type)
        if model_args.model_type not in CONFIG_MAPPING:
            raise UserInputError(f"ModelArguments: field 'model_type': unknown model type {name} (an AutoConfig "
                                 "model type of a masked-LM encoder: bert, roberta, deberta-v2, electra, modernbert, "
                                 "...)")
        config = CONFIG_MAPPING[model_args.model_type]()
    works = ("hf-aux meta-lm trains a masked-LM encoder (an AutoModelForMaskedLM such as BERT, RoBERTa, DeBERTa-v2, "
             "ELECTRA or ModernBERT)")
    refuse_unless_encoder_with(config, MODEL_FOR_MASKED_LM_MAPPING, "AutoModelForMaskedLM", "masked-LM", field_name,
                               name, works)


def check_streaming(data_args: DataTrainingArguments, training_args) -> None:
    """--streaming reads a given corpus for a given number of steps (a stream has no length)."""
    if data_args.two_moons or (data_args.train_file is None and data_args.dataset_name is None):
        raise UserInputError("DataTrainingArguments: field 'streaming': streams --train_file or --dataset_name; the "
                             "Two Moons data are built in memory (give a corpus, or drop --streaming)")
    require_max_steps(training_args)


def load_labelled_tasks(path: str, tokenizer, block_size: int) -> dict:
    """{task name: Dataset of input_ids and class index `label`} from a mixture file of classification tasks."""
    from ..tasks.loading import load_mixture, load_task_splits

    tasks = {}
    for task in load_mixture(path):
        if task.kind != "classification":
            raise UserInputError(f"task '{task.name}': field 'kind': the meta-LM objective takes classification tasks "
                                 f"(label token as output), got {task.kind!r}")
        with explain_hub_errors(f"mixture task '{task.name}'", "dataset_name", task.dataset_name):
            train = load_task_splits(task)["train"]

        def encode(batch, task=task):
            texts = [batch[c] for c in task.text_columns]
            encoded = tokenizer(*texts, truncation=True, max_length=block_size)
            # string labels (checked against label_names by load_task_splits) become their class index
            index = {name: i for i, name in enumerate(task.label_names or [])}
            labels = [index[x] if isinstance(x, str) else int(x) for x in batch[task.label_column]]
            return {"input_ids": encoded["input_ids"], "class_index": labels}

        # a new column name: map keeps an existing column's type (a string label column would stay strings)
        tasks[task.name] = train.map(encode, batched=True, remove_columns=train.column_names).rename_column(
            "class_index", "label")
    return tasks


def build_data(data_args, model_args, training_args):
    """-> tokenizer, unlabelled train/eval blocks, labelled tasks, student config."""
    import datasets
    from transformers import AutoConfig, AutoTokenizer

    from ..tasks.data import group_texts_for_mlm
    from ..tasks.streaming import resumable_mlm_blocks, stream_train_text
    from .teacher import add_meta_lm_tokens
    from ..tasks.validation import check_corpus, check_holdout_split, load_data_files

    if data_args.two_moons:
        from .two_moons import TASK_NAME, two_moons_data, two_moons_model_config, two_moons_tokenizer

        tokenizer = two_moons_tokenizer()
        moons = two_moons_data(num_unlabelled=data_args.two_moons_num_unlabelled,
                               finetune_size=data_args.two_moons_finetune_size, seed=training_args.seed)
        blocks = moons["unlabelled"].map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
        split = blocks.select_columns(["input_ids", "attention_mask"]).train_test_split(
            test_size=data_args.validation_split_percentage / 100, seed=0)
        labelled = moons["train"].map(lambda b: {"input_ids": tokenizer(b["text"])["input_ids"]}, batched=True,
                                      remove_columns=["text"])
        return tokenizer, split["train"], split["test"], {TASK_NAME: labelled}, two_moons_model_config(tokenizer)

    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_name is None:
        raise UserInputError("run_meta_lm: field 'tokenizer_name': give a tokenizer (or a model) for your own data")
    if data_args.streaming:  # read while training (hf_aux.tasks.streaming); the files are checked by stream_train_text
        raw = stream_train_text("DataTrainingArguments", data_args.text_column_name,
                                train_file=data_args.train_file, dataset_name=data_args.dataset_name,
                                dataset_config=data_args.dataset_config_name, cache_dir=model_args.cache_dir)
    elif data_args.train_file:
        raw = load_data_files({"train": data_args.train_file}, "DataTrainingArguments: field 'train_file'")["train"]
    elif data_args.dataset_name:
        with explain_hub_errors("DataTrainingArguments", "dataset_name", data_args.dataset_name):
            raw = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name, split="train",
                                        cache_dir=model_args.cache_dir, token=model_args.token)
    else:
        raise UserInputError("run_meta_lm: field 'train_file': give unlabelled text (--train_file or --dataset_name)")
    if not data_args.streaming:
        check_corpus(raw, data_args.text_column_name, "DataTrainingArguments: field 'text_column_name'")
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            tokenizer_name):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, **model_args.hub_kwargs())
    held_out = None
    if data_args.validation_file is not None:
        held_out = load_data_files({"validation": data_args.validation_file},
                                   "DataTrainingArguments: field 'validation_file'")["validation"]
        check_corpus(held_out, data_args.text_column_name, "DataTrainingArguments: field 'text_column_name'",
                     "validation")
    with training_args.main_process_first(desc="grouping texts"):
        if data_args.streaming:  # every block of the corpus, in order, made as training reads it
            train = resumable_mlm_blocks(raw, tokenizer, data_args.text_column_name, data_args.block_size,
                                         data_args.max_train_samples)
        else:
            train = group_texts_for_mlm(raw, tokenizer, data_args.text_column_name, data_args.block_size)
        if held_out is not None:
            held_out = group_texts_for_mlm(held_out, tokenizer, data_args.text_column_name, data_args.block_size)
    if held_out is None and not data_args.streaming:  # hold out a share of the blocks
        check_holdout_split(len(train), data_args.validation_split_percentage,
                            "DataTrainingArguments: field 'validation_split_percentage'",
                            f"blocks of {data_args.block_size} tokens")
        split = train.train_test_split(test_size=data_args.validation_split_percentage / 100, seed=0)
        train, held_out = split["train"], split["test"]
    labelled = load_labelled_tasks(data_args.mixture, tokenizer, data_args.block_size) if data_args.mixture else {}
    num_labels = max([max(t["label"]) + 1 for t in labelled.values()], default=0)
    add_meta_lm_tokens(tokenizer, list(labelled), num_labels)
    if model_args.model_name_or_path:
        with explain_hub_errors("ModelArguments", "model_name_or_path", model_args.model_name_or_path):
            config = AutoConfig.from_pretrained(model_args.model_name_or_path, **model_args.hub_kwargs())
    else:
        config = AutoConfig.for_model(model_args.model_type, vocab_size=len(tokenizer),
                                      pad_token_id=tokenizer.pad_token_id)
        if model_args.config_overrides:
            config.update_from_string(model_args.config_overrides)
    return tokenizer, train, held_out, labelled, config


def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: MetaLMConfig | None = None):
    """Run the job; with no arguments, parse them from sys.argv (parse_args). Returns the trainer (the saved
    results of a finished run when it is already complete)."""
    from transformers import AutoModelForMaskedLM

    from .teacher import MetaLMTeacher
    from .trainer import MetaLMTrainer
    from ..cli.run import finish_run, record_metrics, start_run, train_and_save
    from ..runtime.hub import push_trainer_output
    from ..runtime.run_guard import drop_implied_evaluation

    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args = parse_args()
    if training_args.objective != "mlm" and training_args.mlm_task_probability < 1 and not (
            data_args.two_moons or data_args.mixture):
        raise UserInputError(f"DataTrainingArguments: field 'mixture': --objective {training_args.objective} learns "
                             "the teacher from labelled tasks (the support and query batches): give --mixture "
                             "tasks.yaml (classification tasks), or --objective mlm for plain masked-LM pretraining")
    if data_args.streaming:
        check_streaming(data_args, training_args)
    check_student_architecture(model_args, data_args)
    run = start_run(training_args, model_args, data_args)
    if run.nothing_to_do:
        return run.results

    tokenizer, train_blocks, eval_blocks, labelled, config = build_data(data_args, model_args, training_args)
    if data_args.max_train_samples is not None and not data_args.streaming:  # a stream is cut by build_data
        train_blocks = train_blocks.select(range(min(data_args.max_train_samples, len(train_blocks))))
    drop_implied_evaluation(training_args, eval_blocks is not None, "no held-out text")
    if training_args.do_eval and eval_blocks is None:
        raise UserInputError("DataTrainingArguments: field 'validation_file': --do_eval with --streaming needs "
                             "held-out text (a stream has no held-out share): give --validation_file")
    if model_args.model_name_or_path:
        with explain_hub_errors("ModelArguments", "model_name_or_path", model_args.model_name_or_path):
            student = AutoModelForMaskedLM.from_pretrained(model_args.model_name_or_path,
                                                           attn_implementation=model_args.attn_implementation,
                                                           **model_args.hub_kwargs())
    else:
        student = AutoModelForMaskedLM.from_config(config, attn_implementation=model_args.attn_implementation)
    vocabulary = student.get_input_embeddings().num_embeddings
    if data_args.two_moons and vocabulary != len(tokenizer):  # --two_moons with a model: its tokens, not the model's
        logger.warning("--two_moons: %s's input embeddings (%d tokens) are resized to the Two Moons tokenizer's %d "
                       "tokens: its own token embeddings do not carry over", model_args.model_name_or_path, vocabulary,
                       len(tokenizer))
        student.resize_token_embeddings(len(tokenizer))
    elif vocabulary < len(tokenizer):
        student.resize_token_embeddings(len(tokenizer))
    teacher = None
    if training_args.objective != "mlm" and model_args.teacher_name_or_path:
        with explain_hub_errors("ModelArguments", "teacher_name_or_path", model_args.teacher_name_or_path):
            teacher = MetaLMTeacher.from_pretrained(model_args.teacher_name_or_path, **model_args.hub_kwargs())
    elif training_args.objective != "mlm":
        teacher = MetaLMTeacher.from_student_config(student.config)

    trainer = MetaLMTrainer(model=student, teacher=teacher, args=training_args, labelled_tasks=labelled,
                            train_dataset=train_blocks if training_args.do_train else None,
                            eval_dataset=eval_blocks if training_args.do_eval else None, processing_class=tokenizer,
                            defer_hub_pushes=training_args.push_to_hub)
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's
    if training_args.do_train:  # a stream has no length
        train_and_save(trainer, run, **({} if data_args.streaming else {"train_samples": len(train_blocks)}))
    eval_metrics = None
    if training_args.do_eval:
        eval_metrics = trainer.evaluate()
        eval_metrics["eval_samples"] = len(eval_blocks)
        eval_metrics["perplexity"] = math.exp(min(eval_metrics["eval_loss"], 50))
        record_metrics(trainer, "eval", eval_metrics)
    hub_dataset = hub_id_or_none(data_args.dataset_name)
    saved = finish_run(trainer, finetuned_from=model_args.model_name_or_path, metrics=eval_metrics,
                       license=model_args.license, license_name=model_args.license_name,
                       dataset_tags=[hub_dataset] if hub_dataset else None,
                       dataset_args=[data_args.dataset_config_name] if hub_dataset else None,
                       unlabelled_name="two_moons" if data_args.two_moons else None)
    if saved and training_args.push_to_hub:  # the one push: the output folder, token-checked
        push_trainer_output(trainer)
    return trainer

