"""What a task is: `TaskSpec`, its kind, its columns, its labels, where its data comes from.

A `TaskSpec` is pure description (it round-trips through `to_dict`/`from_dict` and a mixture file). Reading tasks
(mixture files, task files, data files, Hub datasets) and their data is `hf_aux.tasks`; the demo tasks are
`hf_aux.tasks.demo`. Both import this module and neither imports the other at module level, so there is no import cycle.
Every validation error is a `ValueError` of the form ``task '<name>': field '<field>': <what is wrong>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .preprocessing import check_steps
from .validation import LABELLED_FILE_BUILDERS
from ..errors import UserInputError

TASK_KINDS = ("classification", "regression", "multiple_choice", "extractive_qa", "seq2seq", "token_classification")
# kinds whose labels are classes named by `label_names` / counted by `num_labels`
LABELLED_KINDS = ("classification", "token_classification")
SPLITS = ("train", "validation", "test")


def task_error(task: str, field_name: str, message: str) -> UserInputError:
    return UserInputError(f"task '{task}': field '{field_name}': {message}")


@dataclass
class TaskSpec:
    """One supervised task of a multi-task mixture (docs/tasks.md tabulates the columns of each kind).

    Columns per kind: classification / regression `text_columns` (one sentence or a sentence pair), `label_column`;
    multiple_choice `choices_column` (a list of strings per example), an optional `question_column` (the context
    each choice is paired with), `label_column` (the right choice's index); extractive_qa `question_column`,
    `context_column`, `answers_column` (SQuAD format: {"text": [...], "answer_start": [...]}, empty lists for
    unanswerable questions); seq2seq `source_column`, `target_column`; token_classification `tokens_column` (a list
    of words), `tags_column` (one tag per word: an id, as conll2003's `Sequence(ClassLabel)` ner_tags, or a name of
    `label_names`), the tags named by `label_names` or counted by `num_labels`, as a classification task's classes.
    Data: exactly one of `dataset_name` (a Hub id, with `dataset_config`), `data_files` (local csv/json/jsonl/
    parquet: one path, or a dict split -> path) and `dataset` (an in-memory `datasets.Dataset` or `DatasetDict`,
    never serialised). `preprocessing`: steps applied to the loaded data before the columns are read (joins, choice
    lists, hidden labels dropped: hf_aux.tasks.preprocessing), as registry tasks (hf_aux.tasks.registry) use them.
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
    tokens_column: str = "tokens"
    tags_column: str = "ner_tags"
    dataset_name: str | None = None
    dataset_config: str | None = None
    data_files: str | dict[str, str] | None = None
    dataset: Any = field(default=None, repr=False, compare=False)
    preprocessing: list[dict] | None = None
    train_split: str = "train"
    validation_split: str | None = "validation"
    test_split: str | None = "test"
    validation_fraction: float | None = None
    max_train_samples: int | None = None
    max_eval_samples: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise UserInputError(f"task {self.name!r}: field 'name': must be a non-empty string")
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
        if self.kind in LABELLED_KINDS:
            self._check_labels()
        elif self.kind == "regression":
            if self.label_names is not None:
                raise task_error(self.name, "label_names", "a regression task has no label names")
            if self.num_labels not in (None, 1):
                raise task_error(self.name, "num_labels", f"a regression task predicts one value, got {self.num_labels}")
            self.num_labels = 1
        elif self.label_names is not None or self.num_labels is not None:
            offending = "label_names" if self.label_names is not None else "num_labels"
            raise task_error(self.name, offending, "only classification, token_classification and regression tasks "
                             f"take it, not {self.kind}")
        if self.kind == "extractive_qa" and not self.question_column:
            raise task_error(self.name, "question_column", "an extractive_qa task needs a question column")
        if self.kind == "token_classification":
            for name in ("tokens_column", "tags_column"):
                if not isinstance(getattr(self, name), str) or not getattr(self, name):
                    raise task_error(self.name, name, f"needs a column name, got {getattr(self, name)!r}")
            if self.tokens_column == self.tags_column:
                raise task_error(self.name, "tags_column", f"is the tokens column {self.tokens_column!r} too")
        self._check_source()
        check_steps(self.name, self.preprocessing)
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
            raise task_error(self.name, "num_labels", f"a {self.kind} task needs num_labels or label_names")
        if not isinstance(self.num_labels, int) or self.num_labels < 2:
            raise task_error(self.name, "num_labels",
                             f"a {self.kind} task needs at least 2 labels, got {self.num_labels!r}")

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
            if unread := [s for s in files if s not in read]:
                raise task_error(self.name, "data_files", f"split {unread[0]!r} is not read: the task reads the "
                                 f"splits {read}; rename the key to one of them, or map it (e.g. validation_split: "
                                 f"{unread[0]})")
            suffixes = set()
            for split, path in files.items():
                suffix = Path(str(path)).suffix.lower()
                if suffix not in LABELLED_FILE_BUILDERS:
                    raise task_error(self.name, "data_files",
                                     f"{path!r} ({split}): unsupported extension; use one of {sorted(LABELLED_FILE_BUILDERS)}")
                suffixes.add(LABELLED_FILE_BUILDERS[suffix])
            if len(suffixes) > 1:
                raise task_error(self.name, "data_files", f"mixes file formats {sorted(suffixes)}")

    # ----------------------------------------------------------------------------------------------------------
    @property
    def id2label(self) -> dict[int, str]:
        if self.kind not in LABELLED_KINDS:
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
        if self.kind == "token_classification":
            return [self.tokens_column, self.tags_column]
        return [self.source_column, self.target_column]

    def provenance(self) -> tuple[str | None, str | None]:
        """(the Hub dataset id the data came from, else None; where other data came from, for a model card):
        local files or a local dataset folder by name, in-memory data (a demo task, built from a pip package's
        files) as such."""
        from ..errors import hub_id_or_none

        if hub_id_or_none(self.dataset_name):
            return self.dataset_name, None
        if self.dataset_name:
            return None, f"local dataset: {Path(self.dataset_name).name}"
        if self.data_files:
            files = self.data_files.values() if isinstance(self.data_files, dict) else [self.data_files]
            return None, "local data: " + ", ".join(sorted({Path(str(f)).name for f in files}))
        return None, "in-memory data, not from the Hub (e.g. an hf_aux demo task, built from a pip package's files)"

    def to_dict(self) -> dict:
        """JSON-serialisable description (the in-memory `dataset` is left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "dataset"}

    def head_metadata(self) -> dict:
        """What a checkpoint needs to rebuild this task's head: name, kind, labels."""
        return {"name": self.name, "kind": self.kind, "num_labels": self.num_labels, "label_names": self.label_names}

    @classmethod
    def from_dict(cls, data: dict) -> TaskSpec:
        if not isinstance(data, dict):
            raise UserInputError(f"task {data!r}: field 'task': each task must be a mapping")
        name = data.get("name", "<unnamed>")
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(data) - known):
            raise task_error(str(name), unknown[0], f"unknown field; known fields are {sorted(known - {'dataset'})}")
        for required in ("name", "kind"):
            if required not in data:
                raise task_error(str(name), required, "is required")
        return cls(**data)
