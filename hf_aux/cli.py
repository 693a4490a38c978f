"""Command-line rules shared by every hf_aux run script (run_scripts/run_*.py).

Each rule is written once here and every script calls it, so the scripts cannot drift apart:

- `parse_command_line`: one JSON/YAML file as the only argument holds every argument; otherwise the script's
  embedded defaults (its method's demo job) come first on the command line whenever no data source flag is given,
  so any flag the user gives overrides the default it names (argparse keeps the last value), and giving a data
  source switches the embedded defaults off (transformers' own defaults apply).
- `checkpoint_to_resume`: training resumes from `--resume_from_checkpoint` when given (any run's checkpoint folder,
  e.g. into a new `--output_dir`), else from the last `checkpoint-*` in `--output_dir`, else starts afresh.

This module is the seed of the shared command-line layer: later issues add the other shared steps here.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from transformers import HfArgumentParser, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

logger = logging.getLogger(__name__)

ARGUMENT_FILE_SUFFIXES = (".json", ".yaml", ".yml")


def gives_flag(argv: Sequence[str], flag: str) -> bool:
    """Whether the command line `argv` sets `flag` (as `--flag value` or `--flag=value`)."""
    return any(argument == flag or argument.startswith(flag + "=") for argument in argv)


def parse_command_line(parser: HfArgumentParser, argv: Sequence[str] | None = None, *,
                       embedded_defaults: Sequence[str] = (), data_source_flags: Sequence[str] = ()) -> tuple:
    """The script's argument dataclasses from `argv` (default: `sys.argv[1:]`).

    A single `.json`/`.yaml`/`.yml` argument is read as the file holding every argument (no embedded defaults).
    Otherwise, when `argv` sets none of `data_source_flags`, `embedded_defaults` are put before `argv`: the
    embedded demo job runs, and every flag in `argv` overrides the default of the same name."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(ARGUMENT_FILE_SUFFIXES):
        path = os.path.abspath(argv[0])
        parsed = parser.parse_json_file(path) if path.endswith(".json") else parser.parse_yaml_file(path)
        return tuple(parsed)
    if not any(gives_flag(argv, flag) for flag in data_source_flags):
        argv = list(embedded_defaults) + argv  # later flags win in argparse
    return tuple(parser.parse_args_into_dataclasses(args=argv))


def checkpoint_to_resume(training_args: TrainingArguments) -> str | None:
    """The checkpoint training starts from: `resume_from_checkpoint or last_checkpoint`, where last_checkpoint is
    the newest `checkpoint-*` folder in `output_dir`. None when not training or when there is nothing to resume."""
    if not training_args.do_train:
        return None
    explicit = training_args.resume_from_checkpoint
    if explicit:
        if not os.path.isdir(explicit):
            raise ValueError(f"TrainingArguments: field 'resume_from_checkpoint': {explicit!r} is not a checkpoint "
                             "folder")
        logger.info("Resuming from %s (--resume_from_checkpoint)", explicit)
        return explicit
    last = get_last_checkpoint(training_args.output_dir) if os.path.isdir(training_args.output_dir) else None
    if last is not None:
        logger.info("Resuming from %s, the last checkpoint in --output_dir (pass a new --output_dir to start "
                    "afresh)", last)
    return last


__all__ = ["checkpoint_to_resume", "gives_flag", "parse_command_line"]
