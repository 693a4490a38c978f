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

import dataclasses
import json
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
        return tuple(_parse_argument_file(parser, os.path.abspath(argv[0])))
    if not any(gives_flag(argv, flag) for flag in data_source_flags):
        argv = list(embedded_defaults) + argv  # later flags win in argparse
    return tuple(parser.parse_args_into_dataclasses(args=argv))


def _parse_argument_file(parser: HfArgumentParser, path: str) -> tuple:
    """The dataclasses from one JSON/YAML argument file, or a ValueError naming the file and what is wrong in it
    (a missing file, a syntax error with its line, keys no argument class knows, values of the wrong type)."""
    import yaml

    if not os.path.isfile(path):
        raise ValueError(f"argument file {path!r} does not exist; pass the path of a .json/.yaml file of arguments")
    try:
        parsed = parser.parse_json_file(path) if path.endswith(".json") else parser.parse_yaml_file(path)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"argument file {path!r} is not valid {'JSON' if path.endswith('.json') else 'YAML'}: "
                         f"{error}") from error
    except (ValueError, TypeError) as error:  # unknown keys, a field's own check
        raise ValueError(f"argument file {path!r}: {error}") from error
    with open(path, encoding="utf-8") as handle:
        given = set((json.load(handle) if path.endswith(".json") else yaml.safe_load(handle)) or {})
    for instance in parsed:  # HfArgumentParser takes a file's values as they are: `max_steps: many` would pass
        for item in dataclasses.fields(instance):
            if item.name not in given:
                continue
            value, expected = getattr(instance, item.name), _SCALAR_TYPES.get(_type_name(item.type))
            if value is None or expected is None or _is_a(value, expected):
                continue
            try:  # YAML reads 1e-4 (no dot) as a string: numbers written as text are taken as numbers
                setattr(instance, item.name, _from_text(value, expected))
            except ValueError:
                raise ValueError(f"argument file {path!r}: field {item.name!r} must be {expected.__name__}, "
                                 f"got {value!r}") from None
    return parsed


def _type_name(annotation) -> str:
    """'int', 'float|None', ... for an annotation given as a type or as a string (`from __future__ import
    annotations`)."""
    name = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return name.replace(" ", "").replace("Optional[", "").replace("]", "|None")


_SCALAR_TYPES = {name: kind for kind in (bool, int, float) for name in (kind.__name__, f"{kind.__name__}|None")}


def _is_a(value, expected: type) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    kinds = (int, float) if expected is float else (int,)
    return isinstance(value, kinds) and not isinstance(value, bool)


def _from_text(value, expected: type):
    if not isinstance(value, str) or expected is bool:
        raise ValueError(value)
    return expected(value)


__all__ = ["gives_flag", "parse_command_line"]
