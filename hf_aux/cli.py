"""Command-line rules shared by every hf_aux run script (run_scripts/run_*.py).

Each rule is written once here and every script calls it, so the scripts cannot drift apart:

- `parse_command_line`: one JSON/YAML file as the only argument holds every argument; otherwise the script's
  embedded defaults (its method's demo job) come first on the command line whenever no data source flag is given,
  so any flag the user gives overrides the default it names (argparse keeps the last value), and giving a data
  source switches the embedded defaults off (transformers' own defaults apply).
- Resume, the output folder's lock and Ctrl-C handling are `hf_aux.run_guard.guard_output_dir`: training resumes
  from `--resume_from_checkpoint` when given (any run's checkpoint folder, e.g. into a new `--output_dir`), else
  from the newest complete `checkpoint-*` in `--output_dir`, else starts afresh.

This module is the seed of the shared command-line layer: later issues add the other shared steps here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from transformers import HfArgumentParser

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


__all__ = ["gives_flag", "parse_command_line"]
