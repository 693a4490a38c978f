"""`hf-aux export`: one task of a multi-task (MUPPET-style) checkpoint as a classifier that plain transformers serves.

    hf-aux export --model <hf-aux muppet output> --task <name> --output_dir <new folder>

The output folder is the one-task checkpoint `hf-aux finetune` would write for that task's trained head
(`MultiTaskModel.one_task_model`, then `save_pretrained`: see hf_aux.modeling.export), with the checkpoint's
tokenizer. Classification and regression heads only (any other is refused with the tasks that can be exported);
an existing, non-empty output folder is refused too (nothing there is overwritten).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

EXPORTED_KINDS = ("classification", "regression")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-aux export", allow_abbrev=False,
        description="Write one task of a multi-task (MUPPET-style) checkpoint as a classifier that "
                    "AutoModelForSequenceClassification and pipeline('text-classification') load with its trained head "
                    "and label names.")
    parser.add_argument("--model", required=True, help="a MUPPET-style checkpoint (the output of hf-aux muppet): a "
                        "folder or a Hub id")
    parser.add_argument("--task", required=True, help="the classification or regression task whose head to export")
    parser.add_argument("--output_dir", required=True, help="a new (or empty) folder for the one-task classifier")
    parser.add_argument("--revision", default=None, help="with a Hub id: the branch, tag or commit to read")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = make_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        export_task(args.model, args.task, args.output_dir, revision=args.revision)
    except ValueError as error:  # a user's mistake: one line naming the task, field or folder
        print(f"hf-aux export: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def export_task(model: str, task: str, output_dir: str, revision: str | None = None) -> Path:
    """Write task `task` of the MUPPET-style checkpoint `model` into `output_dir` (module docstring); returns it."""
    output = Path(output_dir)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"field 'output_dir': {output_dir} exists and is not empty; give a new or empty folder "
                         "(nothing is overwritten)")
    from transformers import AutoTokenizer
    from transformers.utils import cached_file

    from ..modeling.export import AUTO_CLASS, needs_remote_code
    from ..modeling.multitask import MULTITASK_CONFIG_NAME, MultiTaskModel

    hub = {"revision": revision} if revision else {}
    if cached_file(model, MULTITASK_CONFIG_NAME, _raise_exceptions_for_missing_entries=False, **hub) is None:
        raise ValueError(f"field 'model': {model} is not a MUPPET-style checkpoint (no {MULTITASK_CONFIG_NAME}): it "
                         "has no task heads to export")
    source = MultiTaskModel.from_pretrained(model, **hub)
    exportable = [t["name"] for t in source.config.tasks if t["kind"] in EXPORTED_KINDS]
    if task not in source.task_names:
        raise ValueError(f"task '{task}': field 'task': {model} has no such task; its tasks are {source.task_names} "
                         f"(classification/regression, which export: {exportable})")
    kind = source.config.task(task)["kind"]
    if kind not in EXPORTED_KINDS:
        raise ValueError(f"task '{task}': field 'kind': a {kind} head has no transformers sequence classifier to "
                         f"export to; the tasks of {model} that export (classification/regression): {exportable}")
    one_task = source.one_task_model(task).eval()
    one_task.save_pretrained(output)
    try:
        AutoTokenizer.from_pretrained(model, **hub).save_pretrained(output)
    except (OSError, ValueError) as error:  # a checkpoint saved without its tokenizer: the pipeline needs one given
        logger.warning("%s: no tokenizer copied (%s); pass tokenizer=... to the pipeline", model, error)
    remote = needs_remote_code(one_task.body.config, one_task.config.pooling, one_task.config.classifier_head)
    print(f"{task} ({kind}, {one_task.config.pooling} pooling) of {model} -> {output}: "
          f"{AUTO_CLASS}.from_pretrained / pipeline('text-classification', model=...)"
          + (", trust_remote_code=True" if remote else ""))
    return output
