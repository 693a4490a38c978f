"""Arguments read from a file: a `--config` file (its values are defaults that flags override) or the single
argument file of the older form (it holds every argument). YAML or JSON, argument names to values; every mistake
is a `UserInputError` naming the file and what is wrong in it."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

from transformers import HfArgumentParser

from ..errors import UserInputError


def _load(path: str) -> dict:
    """The mapping a YAML/JSON file holds ({} for an empty one), or the error naming the file: missing, not valid
    YAML/JSON (with the line), not a mapping."""
    import yaml

    if not os.path.isfile(path):
        raise UserInputError(f"argument file {path!r} does not exist; pass the path of a .json/.yaml file of arguments")
    is_json = path.endswith(".json")
    try:
        with open(path, encoding="utf-8") as handle:
            content = json.load(handle) if is_json else yaml.safe_load(handle)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UserInputError(f"argument file {path!r} is not valid {'JSON' if is_json else 'YAML'}: {error}") from error
    content = {} if content is None else content
    if not isinstance(content, dict):
        raise UserInputError(f"argument file {path!r} must hold a mapping of argument names to values, got "
                             f"{type(content).__name__}")
    return content


def read_argument_mapping(path: str | os.PathLike, parser: HfArgumentParser) -> dict:
    """The mapping of argument names to values in a YAML/JSON file, or a UserInputError naming the file and what is
    wrong (missing, not valid YAML/JSON with the line, not a mapping, keys no argument of `parser` knows)."""
    path = os.fspath(path)
    content = _load(path)
    unknown = sorted(set(content) - {action.dest for action in parser._actions})
    if unknown:
        raise UserInputError(f"argument file {path!r}: keys no argument of this command knows: {unknown}")
    return content


def parse_argument_file(parser: HfArgumentParser, path: str) -> tuple[tuple, dict]:
    """(the dataclasses from one JSON/YAML argument file, its mapping), or a UserInputError naming the file and what is
    wrong in it (a missing file, a syntax error with its line, keys no argument class knows, values of the wrong
    type)."""
    given = _load(path)  # (what HfArgumentParser.parse_json_file / parse_yaml_file read)
    try:
        parsed = parser.parse_dict(given)
    except (ValueError, TypeError) as error:  # unknown keys, a field's own check
        raise UserInputError(f"argument file {path!r}: {error}") from error
    check_scalar_types(parsed, given, f"argument file {path!r}")
    return parsed, given


def check_scalar_types(parsed, given: Mapping, where: str) -> None:
    """Values that came from a file, not typed by argparse: `max_steps: many` must not pass. Numbers written as
    text (YAML reads 1e-4, without a dot, as a string) are taken as numbers."""
    # (HfArgumentParser.parse_dict passes a file's values to the dataclass as they are: `dtype(**inputs)`)
    for instance in parsed:
        for item in dataclasses.fields(instance):
            if item.name not in given:
                continue
            value, expected = getattr(instance, item.name), _SCALAR_TYPES.get(_type_name(item.type))
            if value is None or expected is None or _is_a(value, expected):
                continue
            problem = UserInputError(f"{where}: field {item.name!r} must be {expected.__name__}, got {value!r}")
            if not isinstance(value, str) or expected is bool:
                raise problem
            try:
                setattr(instance, item.name, expected(value))
            except ValueError:
                raise problem from None


def _type_name(annotation) -> str:
    """'int', 'float|None', ... for an annotation given as a type or as a string (`from __future__ import
    annotations`)."""
    name = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return name.replace(" ", "").replace("Optional[", "").replace("]", "|None")


_SCALAR_TYPES = {name: kind for kind in (bool, int, float) for name in (kind.__name__, f"{kind.__name__}|None")}


def _is_a(value, expected: type) -> bool:
    """`value` is of the field's type: a bool for bool, an int (never a bool) for int, an int or float for float."""
    kinds = {bool: (bool,), int: (int,), float: (int, float)}[expected]
    return isinstance(value, kinds) and (expected is bool or not isinstance(value, bool))
