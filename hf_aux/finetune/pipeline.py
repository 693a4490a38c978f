"""`hf-aux finetune`'s steps as functions, for its command (hf_aux.finetune.command) and for `hf-aux compare`, which
fine-tunes many checkpoints alike: the task from its one source, its splits, the tokenizer and the single-task model,
the tokenised splits, the trainer and one split's evaluation. `data_args` / `model_args` are the command's
`DataTrainingArguments` / `ModelArguments` (any object with those fields)."""

from __future__ import annotations

import logging

from ..errors import UserInputError

logger = logging.getLogger(__name__)

SUPPORTED_KINDS = ("classification", "regression", "multiple_choice", "extractive_qa", "token_classification")

# DataTrainingArguments field -> TaskSpec field
COLUMN_FIELDS = {"text_columns": "text_columns", "label_column": "label_column", "task_label_names": "label_names",
                 "num_labels": "num_labels", "choices_column": "choices_column", "question_column": "question_column",
                 "context_column": "context_column", "answers_column": "answers_column",
                 "tokens_column": "tokens_column", "tags_column": "tags_column"}


def build_task(data_args):
    """The task's `TaskSpec` from the one task source given (hf_aux.tasks reads every kind of source)."""
    from ..tasks.loading import task_from_data_files, task_from_file, task_from_hub
    from ..tasks.validation import infer_task_kind, load_data_files

    columns = {spec_field: getattr(data_args, arg) for arg, spec_field in COLUMN_FIELDS.items()
               if getattr(data_args, arg) is not None}
    hint = "--task_label_names or --num_labels"
    if data_args.demo_task is not None:
        from ..tasks.demo import demo_task

        options = {"name": data_args.task_name} if data_args.task_name else {}
        task = demo_task(data_args.demo_task, seed=data_args.subset_seed, **options)
    elif data_args.task_file is not None:
        task = task_from_file(data_args.task_file, data_args.task_name,
                              where="DataTrainingArguments: field 'task_file'")
    elif data_args.dataset_name is not None:
        task = task_from_hub(data_args.dataset_name, data_args.task_kind, data_args.dataset_config_name,
                                 name=data_args.task_name, columns=columns, labels_hint=hint,
                                 owner="DataTrainingArguments", validation_fraction=data_args.validation_fraction)
    else:
        files = {split: path for split, path in (("train", data_args.train_file),
                                                  ("validation", data_args.validation_file),
                                                  ("test", data_args.test_file)) if path is not None}
        kind = data_args.task_kind or infer_task_kind(
            load_data_files(files, "DataTrainingArguments: field 'train_file'"), columns,
            "DataTrainingArguments: field 'task_kind'", "--task_kind", "DataTrainingArguments: field 'label_column'",
            "--label_column")
        if data_args.task_kind is None:
            logger.info("task kind from the data: %s (--task_kind sets it)", kind)
        task = task_from_data_files(data_args.task_name or "task", kind, files, columns=columns,
                                    labels_hint=hint, validation_fraction=data_args.validation_fraction)
    if task.kind == "extractive_qa" and data_args.doc_stride >= data_args.max_seq_length:
        raise UserInputError(f"DataTrainingArguments: field 'doc_stride': {data_args.doc_stride} must be below "
                         f"max_seq_length={data_args.max_seq_length} (windows overlap by doc_stride tokens)")
    if task.kind not in SUPPORTED_KINDS:
        raise UserInputError(f"task '{task.name}': field 'kind': hf-aux finetune supports {list(SUPPORTED_KINDS)}; "
                         f"{task.kind} needs generation for ROUGE, which MultiTaskModel does not provide")
    return task


def select_train_rows(train, data_args):
    """The --train_fraction share of a fixed shuffle, then the --max_train_samples cap."""
    from ..tasks.batches import fixed_share

    train = fixed_share(train, data_args.train_fraction, data_args.subset_seed)
    if data_args.max_train_samples is not None:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    return train


def build_compute_metrics(task, data_args, raw=None, features=None):
    """`compute_metrics` for Trainer. extractive_qa needs the raw split and its features (with offsets) to map
    span logits back to text."""
    from ..tasks.metrics import compute_task_metrics, qa_metrics

    def compute_metrics(prediction):
        if task.kind == "extractive_qa":
            return qa_metrics(_qa_texts(task, prediction, raw, features, data_args), raw[task.answers_column])
        return compute_task_metrics(task.kind, prediction.predictions, prediction.label_ids,
                                    label_names=list(task.id2label.values()) or None)

    return compute_metrics


def _qa_texts(task, prediction, raw, features, data_args) -> list[str]:
    """Each extractive-QA example's answer text, from the span logits of its windows."""
    from ..tasks.metrics import postprocess_qa_predictions

    start_logits, end_logits = prediction.predictions
    return postprocess_qa_predictions(raw, features, start_logits, end_logits, n_best=data_args.n_best_size,
                                      max_answer_length=data_args.max_answer_length,
                                      context_column=task.context_column, allow_null=data_args.allow_null_answer)


def prediction_rows(task, prediction, raw, features, data_args) -> list[dict]:
    """Per-example predictions for --do_predict: class name, value, choice index, answer text, or the tag names
    of the words (token classification: one per word the truncation kept, read at its first sub-token)."""
    import numpy as np

    if task.kind == "extractive_qa":
        texts = _qa_texts(task, prediction, raw, features, data_args)
        return [{"index": i, "prediction": text} for i, text in enumerate(texts)]
    if task.kind == "token_classification":
        names = task.id2label
        tags = np.asarray(prediction.predictions).argmax(-1)  # [N, L]
        return [{"index": i, "prediction": [names[int(t)] for t, label in zip(row, labels) if label != -100]}
                for i, (row, labels) in enumerate(zip(tags, features["labels"]))]
    if task.kind == "regression":
        values = np.asarray(prediction.predictions).reshape(-1)
        return [{"index": i, "prediction": float(v)} for i, v in enumerate(values)]
    choices = np.asarray(prediction.predictions).argmax(-1)
    if task.kind == "classification":
        names = task.id2label
        return [{"index": i, "prediction": names[int(c)]} for i, c in enumerate(choices)]
    return [{"index": i, "prediction": int(c)} for i, c in enumerate(choices)]


def load_data(data_args, training_args):
    """(task, raw splits): the task from its one source, its splits, the --train_fraction share of train and the row
    caps. An implied evaluation is dropped where there is no validation split; an asked-for action without its
    split is an error naming both."""
    from ..tasks.loading import load_task_splits
    from ..runtime.run_guard import drop_implied_evaluation

    task = build_task(data_args)
    raw = load_task_splits(task, seed=data_args.subset_seed)
    drop_implied_evaluation(training_args, "validation" in raw, f"task '{task.name}' has no validation split")
    for split, flag in (("train", "do_train"), ("validation", "do_eval"), ("test", "do_predict")):
        if getattr(training_args, flag) and split not in raw:
            raise UserInputError(f"task '{task.name}': field '{split}_split': --{flag} needs a {split} split; the data "
                                 f"has {list(raw)}")
    if "train" in raw:
        raw["train"] = select_train_rows(raw["train"], data_args)
    for split, cap in (("validation", data_args.max_eval_samples), ("test", data_args.max_predict_samples)):
        if cap is not None and split in raw:
            raw[split] = raw[split].select(range(min(cap, len(raw[split]))))
    return task, raw


def load_tokenizer(model_args):
    from transformers import AutoTokenizer

    from ..errors import explain_hub_errors

    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    with explain_hub_errors("ModelArguments", "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path",
                            tokenizer_name):
        return AutoTokenizer.from_pretrained(tokenizer_name, **model_args.hub_kwargs())


def load_model(model_args, task, tokenizer):
    """(the one-task model on --model_name_or_path's body, whether its head was re-used: --reuse_head)."""
    from ..errors import explain_hub_errors
    from ..modeling.multitask import single_task_model

    with explain_hub_errors("ModelArguments", "model_name_or_path", model_args.model_name_or_path):
        model, reused_head = single_task_model(model_args.model_name_or_path, task, model_args.reuse_head,
                                               model_args.classifier_dropout,
                                               pooling=None if model_args.pooling == "auto" else model_args.pooling,
                                               **model_args.hub_kwargs())
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        raise UserInputError(f"ModelArguments: field 'tokenizer_name': the tokenizer has {len(tokenizer)} tokens, the "
                         f"model's embeddings only {model.get_input_embeddings().num_embeddings}")
    return model, reused_head


def tokenize_splits(task, raw: dict, tokenizer, data_args, training_args) -> dict:
    """The features of the splits the run's actions use (train for --do_train, test for --do_predict)."""
    from ..tasks.data import tokenize_task

    tokenize = {"max_length": data_args.max_seq_length, "doc_stride": data_args.doc_stride}
    features = {}
    with training_args.main_process_first(desc="tokenizing"):
        for split in raw:
            if (split == "train" and not training_args.do_train) or (split == "test" and not training_args.do_predict):
                continue
            # evaluation splits of extractive QA keep their offsets to map span logits back to text
            keep_offsets = task.kind == "extractive_qa" and split != "train"
            features[split] = tokenize_task(task, raw[split], tokenizer, keep_qa_offsets=keep_offsets, **tokenize)
    return features


def make_trainer(model, training_args, task, data_args, raw: dict, features: dict, tokenizer):
    """hf_aux's base trainer on the task's features; its non-finite guard watches the model's loss too (a NaN/Inf
    stops before any save)."""
    from ..runtime.trainer import AuxTrainer
    from ..tasks.data import MultiTaskCollator

    # batches carry task_ids and the task_name column the collator reads: keep every column
    training_args.remove_unused_columns = False
    training_args.label_names = (["start_positions", "end_positions"] if task.kind == "extractive_qa"
                                 else ["labels"])
    return AuxTrainer(
        model=model,
        args=training_args,
        train_dataset=features.get("train") if training_args.do_train else None,
        eval_dataset=features.get("validation"),
        processing_class=tokenizer,
        data_collator=MultiTaskCollator(tokenizer, [task.name]),
        compute_metrics=build_compute_metrics(task, data_args, raw.get("validation"), features.get("validation")),
        defer_hub_pushes=training_args.push_to_hub,
    )


def evaluate_split(trainer, task, data_args, raw: dict, features: dict, split: str, prefix: str):
    """(the split's metrics with the task's trivial baselines and its size, all under `prefix`_; the prediction;
    the baselines by their own names)."""
    from ..tasks.metrics import baseline_metrics

    trainer.compute_metrics = build_compute_metrics(task, data_args, raw[split], features[split])
    prediction = trainer.predict(features[split], metric_key_prefix=prefix)
    metrics = dict(prediction.metrics)
    baselines = baseline_metrics(task, raw.get("train"), raw[split])
    metrics.update({f"{prefix}_{k}": v for k, v in baselines.items()})
    metrics[f"{prefix}_samples"] = len(raw[split])
    return metrics, prediction, baselines
