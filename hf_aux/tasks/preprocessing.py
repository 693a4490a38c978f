"""A task's preprocessing as data: the steps a `TaskSpec.preprocessing` list names, applied to its loaded splits
before anything else reads them (`hf_aux.tasks.loading.load_task_splits`), bringing a dataset's own columns to a
task's (registry tasks, mixture entries). Each step is a mapping with one operation key (the table for users:
docs/tasks.md, "Preprocessing as data"), applied to each split:

- ``{join: [a, b], into: c, separator: " "}``: c = the non-null values of a and b as text, joined, stripped
- ``{gather: [a, b, c], into: choices}``: choices = [row[a], row[b], row[c]] (multiple-choice options)
- ``{field: choices.text, into: choices}``: choices = row["choices"]["text"] (a dotted path into a struct)
- ``{map_labels: {"1": 0, "2": 1}, column: y}``: y = the index its value (as text) maps to; another value is an error
- ``{index_labels: y}``: text labels become their index among the sorted distinct labels of every split (answer
  keys A-D -> 0-3); integers stay
- ``{drop_unlabelled: y}``: rows whose label is null or negative (hidden labels) are dropped; a split left empty
  is dropped

Every error is a ``ValueError`` of the form ``task '<name>': field 'preprocessing': step <i> (<op>): <what>``.
"""

from __future__ import annotations

import re

from ..errors import UserInputError
from .validation import keep_source, row_name

# operation -> the keys its step takes besides the operation's own (required, optional)
STEPS = {
    "join": ({"into"}, {"separator"}),
    "gather": ({"into"}, set()),
    "field": ({"into"}, set()),
    "map_labels": ({"column"}, set()),
    "index_labels": (set(), set()),
    "drop_unlabelled": (set(), set()),
}
_COLUMN = re.compile(r"[^\s].*")
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _step_error(task: str, index: int, op: str, message: str) -> UserInputError:
    return UserInputError(f"task '{task}': field 'preprocessing': step {index} ({op}): {message}")


def _operation(task: str, index: int, step) -> str:
    if not isinstance(step, dict):
        raise UserInputError(f"task '{task}': field 'preprocessing': step {index} must be a mapping, got {step!r}")
    ops = [key for key in step if key in STEPS]
    if len(ops) != 1:
        raise UserInputError(f"task '{task}': field 'preprocessing': step {index} needs exactly one operation among "
                             f"{sorted(STEPS)}, got {sorted(step)}")
    return ops[0]


def check_steps(task: str, steps) -> None:
    """Raise a UserInputError naming the task, the step and what is wrong with a `preprocessing` list."""
    if steps is None:
        return
    if not isinstance(steps, list):
        raise UserInputError(f"task '{task}': field 'preprocessing': must be a list of steps, got {steps!r}")
    for index, step in enumerate(steps):
        op = _operation(task, index, step)
        required, optional = STEPS[op]
        unknown = sorted(set(step) - {op} - required - optional)
        if unknown:
            raise _step_error(task, index, op, f"unknown key {unknown[0]!r}; it takes {sorted(required | optional)}")
        missing = sorted(required - set(step))
        if missing:
            raise _step_error(task, index, op, f"needs {missing[0]!r}")
        value = step[op]
        if op in ("join", "gather"):
            if not isinstance(value, list) or len(value) < (1 if op == "join" else 2) or \
                    not all(isinstance(c, str) and c for c in value):
                raise _step_error(task, index, op, f"needs a list of column names, got {value!r}")
        elif op == "field":
            if not isinstance(value, str) or not _PATH.fullmatch(value) or "." not in value:
                raise _step_error(task, index, op, f"needs a dotted path such as 'choices.text', got {value!r}")
        elif op == "map_labels":
            if not isinstance(value, dict) or not value or \
                    not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value.values()):
                raise _step_error(task, index, op, f"needs a mapping of label values to indices, got {value!r}")
        elif not isinstance(value, str) or not value:
            raise _step_error(task, index, op, f"needs a column name, got {value!r}")
        for key in ("into", "column"):
            if key in step and (not isinstance(step[key], str) or not _COLUMN.fullmatch(step[key])):
                raise _step_error(task, index, op, f"{key!r} needs a column name, got {step[key]!r}")
        if "separator" in step and not isinstance(step["separator"], str):
            raise _step_error(task, index, op, f"'separator' must be text, got {step['separator']!r}")


def apply_steps(task: str, steps, data):
    """The `datasets.DatasetDict` `data` after the steps, in order (`steps` checked by `check_steps`)."""
    import datasets

    for index, step in enumerate(steps or ()):
        op = _operation(task, index, step)
        value = step[op]
        needed = {"join": value, "gather": value, "field": [value.split(".")[0]] if op == "field" else [],
                  "map_labels": [step.get("column")], "index_labels": [value], "drop_unlabelled": [value]}[op]
        for split, rows in data.items():
            absent = [c for c in needed if c not in rows.column_names]
            if absent:
                raise _step_error(task, index, op, f"column {absent[0]!r} not in the {split} data; columns are "
                                  f"{rows.column_names}")
        if op == "drop_unlabelled":
            kept = {split: rows.filter(_is_labelled, input_columns=[value]) for split, rows in data.items()}
            data = datasets.DatasetDict({split: rows for split, rows in kept.items() if len(rows)})
        elif op == "index_labels":
            data = _index_labels(value, data)
        else:
            function = {"join": _join, "gather": _gather, "field": _field, "map_labels": _map_labels}[op]
            mapped = {}
            for split, rows in data.items():
                try:
                    mapped[split] = rows.map(function, batched=True, with_indices=True, fn_kwargs={"step": step})
                except _RowProblem as problem:  # named as its source numbers the row (a file's 1-based row)
                    raise _step_error(task, index, op, f"{row_name(rows, problem.row, split)}: {problem}") from None
                keep_source(rows, mapped[split])  # the same rows in the same order: still the file's
            data = datasets.DatasetDict(mapped)
    return data


def _is_labelled(label) -> bool:
    return label is not None and not (isinstance(label, (int, float)) and not isinstance(label, bool) and label < 0)


class _RowProblem(Exception):
    """A step's problem with one row (`row`: its position in the split), worded by `apply_steps`."""

    def __init__(self, row: int, message: str):
        super().__init__(message)
        self.row = row


def _join(batch, indices, step):
    separator = step.get("separator", " ")
    columns = [batch[c] for c in step["join"]]
    return {step["into"]: [separator.join(str(v) for v in values if v is not None).strip() for values in zip(*columns)]}


def _gather(batch, indices, step):
    return {step["into"]: [list(values) for values in zip(*(batch[c] for c in step["gather"]))]}


def _field(batch, indices, step):
    first, *rest = step["field"].split(".")
    out = []
    for row, value in zip(indices, batch[first]):
        for key in rest:
            if not isinstance(value, dict) or key not in value:
                raise _RowProblem(row, f"no {key!r} in {value!r}")
            value = value[key]
        out.append(value)
    return {step["into"]: out}


def _map_labels(batch, indices, step):
    mapping, column = step["map_labels"], step["column"]
    out = []
    for row, value in zip(indices, batch[column]):
        if str(value) not in mapping:
            raise _RowProblem(row, f"label {value!r} is not one of {sorted(mapping)}")
        out.append(mapping[str(value)])
    return {column: out}


def _index_labels(column, data):
    """Text labels -> their index among the sorted distinct labels of every split; other labels stay."""
    import datasets

    values = {v for rows in data.values() for v in rows.unique(column) if v is not None}
    if not values or not all(isinstance(v, str) for v in values):
        return data
    order = {name: i for i, name in enumerate(sorted(values))}
    return datasets.DatasetDict({
        split: rows.cast_column(column, datasets.Value("string")).map(
            lambda batch: {column: [None if v is None else order[v] for v in batch[column]]}, batched=True,
            features=datasets.Features({**rows.features, column: datasets.Value("int64")}))
        for split, rows in data.items()})
