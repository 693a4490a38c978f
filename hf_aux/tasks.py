"""What a task is: its kind, its columns, its labels, where its data comes from.

A `TaskSpec` is pure description (it round-trips through `to_dict`/`from_dict` and a mixture file); data is
loaded by `load_task_splits`. Every validation error is a `ValueError` of the form
``task '<name>': field '<field>': <what is wrong>``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .validation import check_text_cells, load_data_files, read_structured_file

TASK_KINDS = ("classification", "regression", "multiple_choice", "extractive_qa", "seq2seq")
DATA_FILE_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
SPLITS = ("train", "validation", "test")


def task_error(task: str, field_name: str, message: str) -> ValueError:
    return ValueError(f"task '{task}': field '{field_name}': {message}")


@dataclass
class TaskSpec:
    """One supervised task of a multi-task mixture.

    Columns used per kind:
      classification / regression: `text_columns` (one sentence or a sentence pair), `label_column`
      multiple_choice: `choices_column` (a list of strings per example), optional `question_column` (the shared
          context each choice is paired with), `label_column` (index of the right choice)
      extractive_qa: `question_column`, `context_column`, `answers_column` (SQuAD format:
          {"text": [...], "answer_start": [...]}, empty lists for unanswerable questions)
      seq2seq: `source_column`, `target_column`
    Data: exactly one of `dataset_name` (a Hub id, with `dataset_config`), `data_files` (local csv/json/jsonl/
    parquet: one path, or a dict split -> path) and `dataset` (an in-memory `datasets.Dataset` or `DatasetDict`,
    never serialised).
    """

    name: str
    kind: str
    text_columns: list[str] = field(default_factory=lambda: ["text"])
    label_column: str = "label"
    label_names: list[str] | None = None
    num_labels: int | None = None
    choices_column: str = "choices"
    question_column: str | None = "question"
    context_column: str = "context"
    answers_column: str = "answers"
    source_column: str = "source"
    target_column: str = "target"
    dataset_name: str | None = None
    dataset_config: str | None = None
    data_files: str | dict[str, str] | None = None
    dataset: Any = field(default=None, repr=False, compare=False)
    train_split: str = "train"
    validation_split: str | None = "validation"
    test_split: str | None = "test"
    validation_fraction: float | None = None
    max_train_samples: int | None = None
    max_eval_samples: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"task {self.name!r}: field 'name': must be a non-empty string")
        if any(c in self.name for c in "/\\. ") or self.name.startswith("_"):
            raise task_error(self.name, "name", "may not contain '/', '\\', '.', spaces or start with '_' "
                             "(it names a head in checkpoints)")
        if self.kind not in TASK_KINDS:
            raise task_error(self.name, "kind", f"unknown kind {self.kind!r}; expected one of {list(TASK_KINDS)}")
        if isinstance(self.text_columns, str):
            self.text_columns = [self.text_columns]
        if self.kind in ("classification", "regression"):
            if not 1 <= len(self.text_columns) <= 2 or not all(isinstance(c, str) and c for c in self.text_columns):
                raise task_error(self.name, "text_columns", f"needs one or two column names, got {self.text_columns!r}")
        if self.kind == "classification":
            self._check_labels()
        elif self.kind == "regression":
            if self.label_names is not None:
                raise task_error(self.name, "label_names", "a regression task has no label names")
            if self.num_labels not in (None, 1):
                raise task_error(self.name, "num_labels", f"a regression task predicts one value, got {self.num_labels}")
            self.num_labels = 1
        elif self.label_names is not None or self.num_labels is not None:
            offending = "label_names" if self.label_names is not None else "num_labels"
            raise task_error(self.name, offending, f"only classification and regression tasks take it, not {self.kind}")
        if self.kind == "extractive_qa" and not self.question_column:
            raise task_error(self.name, "question_column", "an extractive_qa task needs a question column")
        self._check_source()
        if self.validation_fraction is not None and not 0.0 < self.validation_fraction < 1.0:
            raise task_error(self.name, "validation_fraction", f"must be in (0, 1), got {self.validation_fraction}")
        for name in ("max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise task_error(self.name, name, f"must be a positive integer, got {value!r}")

    def _check_labels(self):
        if self.label_names is not None:
            if not isinstance(self.label_names, (list, tuple)) or not all(isinstance(n, str) for n in self.label_names):
                raise task_error(self.name, "label_names", f"must be a list of strings, got {self.label_names!r}")
            self.label_names = list(self.label_names)
            if len(set(self.label_names)) != len(self.label_names):
                raise task_error(self.name, "label_names", f"has duplicates: {self.label_names}")
            if self.num_labels is None:
                self.num_labels = len(self.label_names)
            elif self.num_labels != len(self.label_names):
                raise task_error(self.name, "num_labels",
                                 f"{self.num_labels} disagrees with the {len(self.label_names)} label_names")
        if self.num_labels is None:
            raise task_error(self.name, "num_labels", "a classification task needs num_labels or label_names")
        if not isinstance(self.num_labels, int) or self.num_labels < 2:
            raise task_error(self.name, "num_labels", f"a classification task needs at least 2 labels, got {self.num_labels!r}")

    def _check_source(self):
        given = [n for n in ("dataset_name", "data_files", "dataset") if getattr(self, n) is not None]
        if len(given) != 1:
            raise task_error(self.name, "dataset_name",
                             f"give exactly one data source (dataset_name, data_files or dataset), got {given or 'none'}")
        if self.data_files is not None:
            files = self.data_files if isinstance(self.data_files, dict) else {self.train_split: self.data_files}
            if not files:
                raise task_error(self.name, "data_files", "is empty")
            read = [s for s in (self.train_split, self.validation_split, self.test_split) if s]
            unread = [s for s in files if s not in read]
            if unread:
                raise task_error(self.name, "data_files", f"split {unread[0]!r} is not read: the task reads the "
                                 f"splits {read}; rename the key to one of them, or map it (e.g. validation_split: "
                                 f"{unread[0]})")
            suffixes = set()
            for split, path in files.items():
                suffix = Path(str(path)).suffix.lower()
                if suffix not in DATA_FILE_BUILDERS:
                    raise task_error(self.name, "data_files",
                                     f"{path!r} ({split}): unsupported extension; use one of {sorted(DATA_FILE_BUILDERS)}")
                suffixes.add(DATA_FILE_BUILDERS[suffix])
            if len(suffixes) > 1:
                raise task_error(self.name, "data_files", f"mixes file formats {sorted(suffixes)}")

    # ----------------------------------------------------------------------------------------------------------
    @property
    def id2label(self) -> dict[int, str]:
        if self.kind != "classification":
            return {}
        names = self.label_names or [str(i) for i in range(self.num_labels)]
        return dict(enumerate(names))

    def required_columns(self) -> list[str]:
        if self.kind in ("classification", "regression"):
            return [*self.text_columns, self.label_column]
        if self.kind == "multiple_choice":
            return [c for c in (self.question_column, self.choices_column, self.label_column) if c]
        if self.kind == "extractive_qa":
            return [self.question_column, self.context_column, self.answers_column]
        return [self.source_column, self.target_column]

    def to_dict(self) -> dict:
        """JSON-serialisable description (the in-memory `dataset` is left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "dataset"}

    def head_metadata(self) -> dict:
        """What a checkpoint needs to rebuild this task's head: name, kind, labels."""
        return {"name": self.name, "kind": self.kind, "num_labels": self.num_labels, "label_names": self.label_names}

    @classmethod
    def from_dict(cls, data: dict) -> TaskSpec:
        if not isinstance(data, dict):
            raise ValueError(f"task {data!r}: field 'task': each task must be a mapping")
        name = data.get("name", "<unnamed>")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise task_error(str(name), unknown[0], f"unknown field; known fields are {sorted(known - {'dataset'})}")
        for required in ("name", "kind"):
            if required not in data:
                raise task_error(str(name), required, "is required")
        return cls(**data)


# --------------------------------------------------------------------------------------------------------------
# Mixtures: one YAML or JSON file describing several tasks
# --------------------------------------------------------------------------------------------------------------


def load_mixture(path: str | os.PathLike) -> list[TaskSpec]:
    """Read a mixture file: ``tasks:`` is a list whose entries are TaskSpec fields, or ``{demo: <name>}`` for a
    built-in demo task (hf_aux.demo, needs the `demo` extra). Relative `data_files` resolve against the file's
    folder."""
    path = Path(path)
    content = read_structured_file(path, "mixture file")
    entries = content.get("tasks") if isinstance(content, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"mixture file {str(path)!r}: needs a non-empty list under 'tasks'")
    tasks = []
    for entry in entries:
        if isinstance(entry, dict) and "demo" in entry:
            from .demo import demo_task

            options = {k: v for k, v in entry.items() if k != "demo"}
            tasks.append(demo_task(entry["demo"], **options))
            continue
        if isinstance(entry, dict) and entry.get("data_files") is not None:
            entry = dict(entry)
            files = entry["data_files"]
            resolve = lambda p: str(p if os.path.isabs(p) else path.parent / p)  # noqa: E731
            entry["data_files"] = {k: resolve(v) for k, v in files.items()} if isinstance(files, dict) else resolve(files)
        tasks.append(TaskSpec.from_dict(entry))
    check_unique_names(tasks)
    return tasks


def check_unique_names(tasks: list[TaskSpec]) -> None:
    seen = set()
    for task in tasks:
        if task.name in seen:
            raise task_error(task.name, "name", "appears twice in the mixture")
        seen.add(task.name)


# --------------------------------------------------------------------------------------------------------------
# Loading and checking a task's data
# --------------------------------------------------------------------------------------------------------------


def load_task_splits(task: TaskSpec, seed: int = 42):
    """The task's data as a `datasets.DatasetDict` with keys among train / validation / test, checked against
    the spec (columns present, labels in range, nothing empty). Splits missing from the source: a validation split
    is carved from train when `validation_fraction` is set (deterministic for `seed`)."""
    import datasets

    if task.dataset is not None:
        raw = task.dataset
        if isinstance(raw, datasets.Dataset):
            raw = datasets.DatasetDict({task.train_split: raw})
        elif not isinstance(raw, datasets.DatasetDict):
            raise task_error(task.name, "dataset", f"expected a datasets.Dataset or DatasetDict, got {type(raw).__name__}")
    elif task.data_files is not None:
        files = task.data_files if isinstance(task.data_files, dict) else {task.train_split: task.data_files}
        raw = load_data_files(files, f"task '{task.name}': field 'data_files'")
    else:
        try:
            raw = datasets.load_dataset(task.dataset_name, task.dataset_config)
        except Exception as error:  # datasets raises many types (offline, missing repo, bad config)
            raise task_error(task.name, "dataset_name",
                             f"could not load {task.dataset_name!r} (config {task.dataset_config!r}): {error}") from error

    wanted = {"train": task.train_split, "validation": task.validation_split, "test": task.test_split}
    splits = {}
    for role, source in wanted.items():
        if source is not None and source in raw:
            splits[role] = raw[source]
    if "train" not in splits and "validation" not in splits and "test" not in splits:
        raise task_error(task.name, "train_split", f"none of the splits {[s for s in wanted.values() if s]} "
                         f"exist; available: {list(raw)}")
    if "validation" not in splits and task.validation_fraction is not None and "train" in splits:
        parts = splits["train"].train_test_split(test_size=task.validation_fraction, seed=seed)
        splits["train"], splits["validation"] = parts["train"], parts["test"]
    if task.max_train_samples is not None and "train" in splits:
        splits["train"] = splits["train"].select(range(min(task.max_train_samples, len(splits["train"]))))
    for role in ("validation", "test"):
        if task.max_eval_samples is not None and role in splits:
            splits[role] = splits[role].select(range(min(task.max_eval_samples, len(splits[role]))))
    result = datasets.DatasetDict(splits)
    for role, split in result.items():
        check_task_data(task, split, role)
    return result


def check_task_data(task: TaskSpec, data, split: str = "train") -> None:
    """Raise a ValueError naming the task and field when `data` does not fit the spec."""
    if len(data) == 0:
        raise task_error(task.name, f"{split}_split" if split != "validation" else "validation_split",
                         f"the {split} split is empty")
    for column in task.required_columns():
        if column not in data.column_names:
            field_name = _column_field(task, column)
            raise task_error(task.name, field_name, f"column {column!r} not in the {split} data; "
                             f"columns are {data.column_names}")
    # one bulk read of the checked columns (datasets 5 reads `data[column]` lazily, row by row)
    texts = _text_columns(task)
    checked = list(dict.fromkeys([c for c in (task.label_column, task.choices_column, task.context_column,
                                              task.answers_column) if c in task.required_columns()] + list(texts)))
    columns = data.select_columns(checked)[:] if checked else {}
    for column, field_name in texts.items():
        check_text_cells(columns[column], f"task '{task.name}': field '{field_name}'", column, split,
                         nested=column == task.choices_column and task.kind == "multiple_choice")
    if task.kind == "classification":
        labels = columns[task.label_column]
        names = task.label_names
        for index, label in enumerate(labels):
            if label is None:
                raise task_error(task.name, "label_column", f"{split} row {index}: the label is empty (None/null); "
                                 "fill it or drop the row")
            if isinstance(label, str):
                if names is None or label not in names:
                    raise task_error(task.name, "label_column", f"{split} row {index}: label {label!r} is not one of "
                                     f"label_names {names}")
            elif isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < task.num_labels:
                raise task_error(task.name, "label_column", f"{split} row {index}: label {label!r} out of range "
                                 f"[0, {task.num_labels})")
    elif task.kind == "regression":
        for index, label in enumerate(columns[task.label_column]):
            if isinstance(label, bool) or not isinstance(label, (int, float)) or not math.isfinite(label):
                raise task_error(task.name, "label_column", f"{split} row {index}: label {label!r} is not a finite number")
    elif task.kind == "multiple_choice":
        for index, (choices, label) in enumerate(zip(columns[task.choices_column], columns[task.label_column])):
            if not isinstance(choices, list) or len(choices) < 2:
                raise task_error(task.name, "choices_column", f"{split} row {index}: needs a list of at least 2 choices")
            if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
                raise task_error(task.name, "label_column", f"{split} row {index}: label {label!r} out of range "
                                 f"[0, {len(choices)})")
    elif task.kind == "extractive_qa":
        for index, (context, answers) in enumerate(zip(columns[task.context_column], columns[task.answers_column])):
            if not isinstance(answers, dict) or not {"text", "answer_start"} <= set(answers):
                keys = sorted(answers) if isinstance(answers, dict) else type(answers).__name__
                raise task_error(task.name, "answers_column", f"{split} row {index}: expected SQuAD answers "
                                 "{'text': [...], 'answer_start': [...]} (character offsets into the context), got "
                                 f"{keys}; add answer_start to every answer")
            if not isinstance(answers["text"], list) or not isinstance(answers["answer_start"], list) or \
                    len(answers["text"]) != len(answers["answer_start"]):
                raise task_error(task.name, "answers_column", f"{split} row {index}: 'text' and 'answer_start' must "
                                 "be lists of equal length")
            if not isinstance(context, str):
                raise task_error(task.name, "context_column", f"{split} row {index}: the context is "
                                 f"{context!r}, not text; fill the cell or drop the row")
            for text, start in zip(answers["text"], answers["answer_start"]):
                if not isinstance(start, int) or isinstance(start, bool) or not isinstance(text, str):
                    raise task_error(task.name, "answers_column", f"{split} row {index}: answer {text!r} at "
                                     f"{start!r}: text must be a string and answer_start an integer")
                if context[start : start + len(text)] != text:
                    raise task_error(task.name, "answers_column", f"{split} row {index}: answer {text!r} is not at "
                                     f"character {start} of the context")


def _text_columns(task: TaskSpec) -> dict[str, str]:
    """The task's text columns -> the TaskSpec field naming each (labels and QA answers are checked apart)."""
    if task.kind in ("classification", "regression"):
        return {c: "text_columns" for c in task.text_columns}
    if task.kind == "multiple_choice":
        return {c: f for c, f in ((task.question_column, "question_column"), (task.choices_column, "choices_column"))
                if c}
    if task.kind == "extractive_qa":
        return {task.question_column: "question_column"}  # an empty context is legal for unanswerable questions
    return {task.source_column: "source_column", task.target_column: "target_column"}


def _column_field(task: TaskSpec, column: str) -> str:
    for f in ("label_column", "choices_column", "question_column", "context_column", "answers_column",
              "source_column", "target_column"):
        if getattr(task, f) == column:
            return f
    return "text_columns"
