"""One task from a checkpoint: the model `hf-aux finetune` and `hf-aux compare` fine-tune, on the body of a plain
or MUPPET-style checkpoint, its head fresh or re-used from the checkpoint's (MUPPET §4)."""

from __future__ import annotations

import logging

from transformers.utils import cached_file

from ..tasks.spec import TaskSpec
from .multitask import MULTITASK_CONFIG_NAME, MultiTaskModel, MultiTaskModelConfig

logger = logging.getLogger(__name__)


def checkpoint_head_for(source: MultiTaskModel, task: TaskSpec):
    """The head of `source` that `task` can start from, or None: a same-named classification/regression/token
    classification head (kind and labels must agree), the unified multiple-choice or span head."""
    if task.kind in ("classification", "regression", "token_classification"):
        if task.name not in source.task_names:
            return None
        saved = source.config.task(task.name)
        if saved["kind"] != task.kind or saved["num_labels"] != task.num_labels:
            raise ValueError(f"task '{task.name}': field 'num_labels': the checkpoint's head is {saved['kind']} with "
                             f"{saved['num_labels']} outputs, the task is {task.kind} with {task.num_labels}")
        if saved.get("label_names") and task.label_names and saved["label_names"] != task.label_names:
            raise ValueError(f"task '{task.name}': field 'label_names': the checkpoint's head predicts "
                             f"{saved['label_names']}, the task has {task.label_names}")
        heads = source.token_heads if task.kind == "token_classification" else source.classification_heads
        return heads[task.name]
    if task.kind == "multiple_choice":
        return source.multiple_choice_head
    return source.span_head


def single_task_model(model_name_or_path: str, task: TaskSpec, reuse_head: bool = False,
                      classifier_dropout: float | None = None, pooling: str | None = None,
                      **hub_kwargs) -> tuple[MultiTaskModel, bool]:
    """(a one-task `MultiTaskModel` on the body of `model_name_or_path`, whether its head was re-used).

    A MUPPET-style checkpoint loads with all its saved heads; with `reuse_head` the task's head starts from the
    checkpoint's (`checkpoint_head_for`), else (and for a plain checkpoint) it starts fresh. `classifier_dropout`
    and `pooling` None keep the checkpoint's (a plain encoder's: `auto`, see `MultiTaskModel.from_pretrained`)."""
    metadata = cached_file(model_name_or_path, MULTITASK_CONFIG_NAME, _raise_exceptions_for_missing_entries=False,
                           **hub_kwargs)
    source = MultiTaskModel.from_pretrained(model_name_or_path, tasks=None if metadata is not None else [task],
                                            pooling=pooling, **hub_kwargs)
    saved_head = checkpoint_head_for(source, task) if metadata is not None and reuse_head else None
    config = MultiTaskModelConfig(
        encoder=source.body.config, tasks=[task.head_metadata()],
        classifier_dropout=source.config.classifier_dropout if classifier_dropout is None else classifier_dropout,
        spectral_norm_heads=source.config.spectral_norm_heads, pooling=source.config.pooling)
    model = MultiTaskModel(config, body=source.body)
    if saved_head is not None:
        checkpoint_head_for(model, task).load_state_dict(saved_head.state_dict())
        logger.info("task '%s': head re-used from %s", task.name, model_name_or_path)
        return model, True
    if reuse_head:
        logger.warning("task '%s': --reuse_head, but %s has no %s head for it: starting a fresh head", task.name,
                       model_name_or_path, task.kind)
    return model, False
