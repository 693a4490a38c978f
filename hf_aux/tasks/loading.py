"""Reading tasks and their data: mixture files, one-task files, data files with their columns, Hub datasets
(`load_mixture`, `task_from_file`, `task_from_data_files`, `task_from_hub`: the one reader every command uses), and
`load_task_splits` for a task's data.

What a task is (`TaskSpec`, `TASK_KINDS`) lives in `hf_aux.tasks.spec` and is importable from here too. Every
validation error is a `ValueError` of the form ``task '<name>': field '<field>': <what is wrong>``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path

from .spec import LABELLED_KINDS, SPLITS, TASK_KINDS, TaskSpec, task_error
from ..errors import UserInputError

__all__ = ["SPLITS", "TASK_KINDS", "TaskSpec", "check_task_data", "check_unique_names", "hub_task_name",
           "load_mixture", "load_task_source", "load_task_splits", "task_error", "task_from_data_files",
           "task_from_entry", "task_from_file", "task_from_hub"]
from .validation import (check_text_cells, did_you_mean, infer_class_labels, infer_tag_labels, infer_task_kind,
                         load_data_files, read_structured_file, remember_source, resolve_data_files, row_namer)

# ---- Mixtures: one YAML or JSON file describing several tasks -------------------------------------------------------


def load_mixture(path: str | os.PathLike, max_train_samples: int | None = None,
                 max_eval_samples: int | None = None) -> list[TaskSpec]:
    """Read a mixture file: ``tasks:`` is a list whose entries are TaskSpec fields, ``{demo: <name>}`` for a
    built-in demo task (hf_aux.tasks.demo, needs the `demo` extra), or ``{task: <name>}`` for a registry task
    (hf_aux.tasks.registry). Relative `data_files` resolve against the file's folder. `max_train_samples` /
    `max_eval_samples`: caps for the tasks whose entry sets none."""
    path = Path(path)
    content = read_structured_file(path, "mixture file")
    entries = content.get("tasks") if isinstance(content, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UserInputError(f"mixture file {str(path)!r}: needs a non-empty list under 'tasks'")
    tasks = [task_from_entry(entry, path.parent) for entry in entries]
    check_unique_names(tasks)
    for task in tasks:
        task.max_train_samples = task.max_train_samples or max_train_samples
        task.max_eval_samples = task.max_eval_samples or max_eval_samples
    return tasks


def task_from_entry(entry, folder: str | os.PathLike) -> TaskSpec:
    """One task of a mixture or task file: TaskSpec fields (relative `data_files` resolve against `folder`),
    ``{demo: <name>, ...options}`` for a demo task, or ``{task: <name>, ...overrides}`` for a registry task
    (hf_aux.tasks.registry; `hf-aux tasks` lists them)."""
    if isinstance(entry, dict) and "task" in entry:
        from .registry import registry_entry

        entry = registry_entry(entry, folder)
        if "demo" not in entry:
            return TaskSpec.from_dict(_classes_from_source(entry))
    if isinstance(entry, dict) and "demo" in entry:
        from .demo import demo_task

        return demo_task(entry["demo"], **{k: v for k, v in entry.items() if k != "demo"})
    if isinstance(entry, dict) and entry.get("data_files") is not None:
        entry = _described_by_data({**entry, "data_files": resolve_data_files(entry["data_files"], folder)})
    return TaskSpec.from_dict(entry)


def _classes_from_source(entry: dict) -> dict:
    """A registry task's fields with its classes, when its definition leaves them to the data (a classification or
    token classification task without label_names / num_labels): read from its source after its preprocessing, as
    a ClassLabel label feature names them (Hub datasets mostly), else from the labels themselves."""
    if not _classes_unnamed(entry):
        return entry
    name = entry["name"]
    raw = load_task_source(name, data_files=entry.get("data_files"), dataset_name=entry.get("dataset_name"),
                           dataset_config=entry.get("dataset_config"), train_split=entry.get("train_split", "train"),
                           preprocessing=entry.get("preprocessing"))
    return {**entry, **_classes_from_features(name, entry["kind"], raw, entry,
                                              "label_names or num_labels in the entry")}


def _classes_unnamed(entry: dict) -> bool:
    return entry.get("kind") in LABELLED_KINDS and entry.get("label_names") is None and entry.get("num_labels") is None


def _described_by_data(entry: dict) -> dict:
    """A file task's kind and classes read from its data where the entry leaves them out (as `hf-aux finetune` does
    for --train_file): the kind from the label / choices / answers / tokens and tags columns, a classification
    task's classes from its labels, a token classification task's from its tags."""
    if entry.get("kind") and not _classes_unnamed(entry):
        return entry
    name = entry.get("name", "?")
    files = entry["data_files"] if isinstance(entry["data_files"], dict) else {"train": entry["data_files"]}
    splits = load_data_files(files, f"task '{name}': field 'data_files'")
    entry = dict(entry)
    if not entry.get("kind"):
        entry["kind"] = infer_task_kind(splits, entry, f"task '{name}': field 'kind'", "kind: <kind> for the task",
                                        f"task '{name}': field 'label_column'", "label_column: <column> for the task")
    if _classes_unnamed(entry):
        entry.update(_classes_from_data(name, entry["kind"], splits, entry, "label_names or num_labels for the task"))
    return entry


def task_from_file(path: str | os.PathLike, name: str | None = None, where: str = "task file") -> TaskSpec:
    """The one task of a task file: a TaskSpec mapping, ``{demo: <name>, ...}``, or a mixture file (``tasks:``)
    holding exactly one task; renamed to `name` when given. `where` names the file's owner in errors (a command
    names its flag)."""
    file = Path(path)
    content = read_structured_file(file, where)
    if isinstance(content, dict) and "tasks" in content:
        tasks = load_mixture(file)
        if len(tasks) != 1:
            raise UserInputError(f"{where}: {str(path)!r} holds {len(tasks)} tasks "
                                 f"({[t.name for t in tasks]}); fine-tuning takes exactly one")
        task = tasks[0]
    elif isinstance(content, dict):
        task = task_from_entry(content, file.parent)
    else:
        raise UserInputError(f"{where}: {str(path)!r} must hold a mapping")
    return dataclasses.replace(task, name=name) if name and name != task.name else task


def task_from_data_files(name: str, kind: str, files: dict[str, str], columns: dict | None = None,
                         label_splits: tuple[str, ...] | None = None, labels_hint: str = "label_names or num_labels",
                         where: str | None = None, **options) -> TaskSpec:
    """A task from local data files (split -> path) with its columns (TaskSpec fields such as text_columns,
    label_column, label_names, num_labels). A classification task without label_names/num_labels reads its
    classes from the data: from the splits `label_splits` (default: every split). `where` names the files' owner
    in errors (default: the task's data_files; a command names its flag). `options` are further TaskSpec fields
    (validation_fraction, max_train_samples, ...)."""
    where = where or f"task '{name}': field 'data_files'"
    for split, path in files.items():
        if not os.path.isfile(path):
            raise UserInputError(f"{where}: {split} file {path!r} does not exist")
    spec = {"name": name, "kind": kind, "data_files": files, **(columns or {}), **options}
    if _classes_unnamed(spec):
        chosen = {split: path for split, path in files.items() if label_splits is None or split in label_splits}
        spec.update(_classes_from_data(name, kind, load_data_files(chosen, where), spec, labels_hint))
    return TaskSpec.from_dict(spec)


def task_from_hub(dataset_name: str, kind: str, dataset_config: str | None = None, name: str | None = None,
                  columns: dict | None = None, label_splits: tuple[str, ...] | None = None,
                  labels_hint: str = "label_names or num_labels", owner: str = "task_from_hub",
                  **options) -> TaskSpec:
    """A task from a Hub dataset id (or dataset folder); its name defaults to the dataset's. A classification task
    without label_names/num_labels takes its classes from a ClassLabel feature, else from the data (the splits
    `label_splits`, default: every split); a token classification task its tags alike, from a Sequence(ClassLabel)
    tags feature (conll2003's ner_tags) or the data. `owner` names the caller in errors (`owner: field 'dataset_name'`; a
    command names its argument dataclass), `labels_hint` what gives the classes (a command names its flags)."""
    import datasets

    from ..errors import explain_hub_errors

    name = name or hub_task_name(dataset_name)
    spec = {"name": name, "kind": kind, "dataset_name": dataset_name, "dataset_config": dataset_config,
            **(columns or {}), **options}
    if _classes_unnamed(spec):
        with explain_hub_errors(owner, "dataset_name", dataset_name):
            raw = datasets.load_dataset(dataset_name, dataset_config)
        if label_splits is not None:
            raw = datasets.DatasetDict({split: raw[split] for split in label_splits if split in raw})
        label_column = spec.get("label_column", "label")
        if kind == "classification" and label_column not in (found := next(iter(raw.values())).column_names):
            raise UserInputError(f"{owner}: field 'label_column': {label_column!r} is not a column of "
                                 f"{dataset_name} ({found})")
        spec.update(_classes_from_features(name, kind, raw, spec, labels_hint))
    return TaskSpec.from_dict(spec)


def hub_task_name(dataset_name: str) -> str:
    """A task name from a Hub dataset id: its last part, with characters other than letters, digits, - and _
    replaced."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", dataset_name.rstrip("/").split("/")[-1])


def _classes_from_features(name: str, kind: str, raw, spec: dict, hint: str) -> dict:
    """`_classes_from_data` of a task's source, a classification task's classes named by its ClassLabel label
    feature where it has one (Hub datasets mostly)."""
    import datasets

    if kind == "classification":
        feature = next(iter(raw.values())).features.get(spec.get("label_column") or "label")
        if isinstance(feature, datasets.ClassLabel):
            return {"label_names": list(feature.names)}
    return _classes_from_data(name, kind, raw, spec, hint)


def _classes_from_data(name: str, kind: str, splits, spec: dict, hint: str) -> dict:
    """{"label_names": names} or {"num_labels": max + 1} read from the loaded splits: a classification task's
    labels (`label_column`), a token classification task's tags (`tags_column`; a Sequence(ClassLabel) feature's
    names first); `hint` names the flags that set the classes instead."""
    if kind == "token_classification":
        column = spec.get("tags_column") or "ner_tags"
        return infer_tag_labels(splits, column, f"task '{name}': field 'tags_column'", hint)
    return infer_class_labels(splits, spec.get("label_column") or "label", f"task '{name}': field 'label_column'",
                              hint)


def check_unique_names(tasks: list[TaskSpec]) -> None:
    seen = set()
    for task in tasks:
        if task.name in seen:
            raise task_error(task.name, "name", "appears twice in the mixture")
        seen.add(task.name)


# ---- Loading and checking a task's data -----------------------------------------------------------------------------


def load_task_source(name: str, *, dataset=None, data_files=None, dataset_name: str | None = None,
                     dataset_config: str | None = None, train_split: str = "train", preprocessing=None):
    """A task's data as its source holds it (a `datasets.DatasetDict` keyed by the source's split names), after the
    task's `preprocessing` steps (hf_aux.tasks.preprocessing): from `dataset` (in memory), `data_files` (local files)
    or `dataset_name` (a Hub id, read from the datasets cache when offline, or a local dataset folder; the path a Hub
    dataset takes). `name` names the task in errors."""
    import datasets

    from .preprocessing import apply_steps

    if dataset is not None:
        raw = dataset
        if isinstance(raw, datasets.Dataset):
            raw = datasets.DatasetDict({train_split: raw})
        elif not isinstance(raw, datasets.DatasetDict):
            raise task_error(name, "dataset", f"expected a datasets.Dataset or DatasetDict, got {type(raw).__name__}")
    elif data_files is not None:
        files = data_files if isinstance(data_files, dict) else {train_split: data_files}
        raw = load_data_files(files, f"task '{name}': field 'data_files'")
    else:
        try:
            raw = datasets.load_dataset(dataset_name, dataset_config)
        except Exception as error:  # datasets raises many types (offline, missing repo, bad config)
            raise task_error(name, "dataset_name", f"could not load {dataset_name!r} (config {dataset_config!r}): "
                             f"{error}{_offline_hint(dataset_name)}") from error
        for split, data in raw.items():  # messages name its rows as the dataset numbers them (1-based)
            remember_source(data, f"the {dataset_name}{f' ({dataset_config})' if dataset_config else ''} {split} split")
    return apply_steps(name, preprocessing, raw)


def _offline_hint(dataset_name) -> str:
    """What to do when a Hub dataset cannot be read offline: it is not in the datasets cache, and `hf-aux tasks
    --download` puts every task of a mixture there, where the Hub can be reached."""
    import datasets

    if not datasets.config.HF_HUB_OFFLINE or Path(str(dataset_name)).is_dir():
        return ""
    return (f". Offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE), a Hub dataset is read from the datasets cache "
            f"({datasets.config.HF_DATASETS_CACHE}), which lacks this one: where the Hub can be reached, run "
            "`hf-aux tasks --download <mixture file>` (a mixture naming this task) to put its data there, then run "
            "again offline")


def load_task_splits(task: TaskSpec, seed: int = 42):
    """The task's data as a `datasets.DatasetDict` with keys among train / validation / test, checked against
    the spec (columns present, labels in range, nothing empty). Splits missing from the source: a validation split
    is carved from train when `validation_fraction` is set (deterministic for `seed`)."""
    import datasets

    raw = load_task_source(task.name, dataset=task.dataset, data_files=task.data_files, dataset_name=task.dataset_name,
                           dataset_config=task.dataset_config, train_split=task.train_split,
                           preprocessing=task.preprocessing)
    wanted = {"train": task.train_split, "validation": task.validation_split, "test": task.test_split}
    splits = {role: raw[source] for role, source in wanted.items() if source is not None and source in raw}
    if not splits:
        raise task_error(task.name, "train_split", f"none of the splits {[s for s in wanted.values() if s]} "
                         f"exist; available: {list(raw)}")
    if "validation" not in splits and task.validation_fraction is not None and "train" in splits:
        parts = splits["train"].train_test_split(test_size=task.validation_fraction, seed=seed)
        splits["train"], splits["validation"] = parts["train"], parts["test"]
    caps = {"train": task.max_train_samples, "validation": task.max_eval_samples, "test": task.max_eval_samples}
    for role, cap in caps.items():
        if cap is not None and role in splits:
            splits[role] = splits[role].select(range(min(cap, len(splits[role]))))
    result = datasets.DatasetDict(splits)
    for role, split in result.items():
        check_task_data(task, split, role)
    return result


def check_task_data(task: TaskSpec, data, split: str = "train") -> None:
    """Raise a UserInputError naming the task and field when `data` does not fit the spec."""
    if len(data) == 0:
        raise task_error(task.name, f"{split}_split", f"the {split} split is empty")
    for column in task.required_columns():
        if column not in data.column_names:
            raise task_error(task.name, _column_field(task, column), f"column {column!r} not in the {split} data"
                             f"{did_you_mean(column, data.column_names)}; columns are {data.column_names}")
    from .column_checks import task_rows_are_clean  # pyarrow, imported when data is checked

    if task_rows_are_clean(task, data):  # whole columns in Arrow; the row checks below find and word any problem
        return
    # one bulk read of the checked columns (datasets 5 reads `data[column]` lazily, row by row)
    columns = data.select_columns(list(dict.fromkeys(task.required_columns())))[:]
    rows = row_namer(data, split)  # the data file's own 1-based row, whatever shuffling or carving came between
    for column, field_name in _text_columns(task).items():
        check_text_cells(columns[column], f"task '{task.name}': field '{field_name}'", column, split,
                         nested=column == task.choices_column and task.kind == "multiple_choice", rows=rows)
    if task.kind == "classification":
        labels = columns[task.label_column]
        for index, label in enumerate(labels):
            if label is None:
                raise task_error(task.name, "label_column", f"{rows(index)}: the label is empty (None/null); "
                                 "fill it or drop the row")
            if problem := _class_problem(label, task, "label", labels, rows, index):
                raise task_error(task.name, "label_column", problem)
    elif task.kind == "regression":
        for index, label in enumerate(columns[task.label_column]):
            if isinstance(label, bool) or not isinstance(label, (int, float)) or not math.isfinite(label):
                raise task_error(task.name, "label_column", f"{rows(index)}: label {label!r} is not a finite number")
    elif task.kind == "multiple_choice":
        for index, (choices, label) in enumerate(zip(columns[task.choices_column], columns[task.label_column])):
            if not isinstance(choices, list) or len(choices) < 2:
                raise task_error(task.name, "choices_column", f"{rows(index)}: needs a list of at least 2 choices")
            if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
                raise task_error(task.name, "label_column", f"{rows(index)}: label {label!r} out of range "
                                 f"[0, {len(choices)})")
    elif task.kind == "extractive_qa":
        for index, (context, answers) in enumerate(zip(columns[task.context_column], columns[task.answers_column])):
            if not isinstance(answers, dict) or not {"text", "answer_start"} <= set(answers):
                keys = sorted(answers) if isinstance(answers, dict) else type(answers).__name__
                raise task_error(task.name, "answers_column", f"{rows(index)}: expected SQuAD answers "
                                 "{'text': [...], 'answer_start': [...]} (character offsets into the context), got "
                                 f"{keys}; add answer_start to every answer")
            if not isinstance(answers["text"], list) or not isinstance(answers["answer_start"], list) or \
                    len(answers["text"]) != len(answers["answer_start"]):
                raise task_error(task.name, "answers_column", f"{rows(index)}: 'text' and 'answer_start' must "
                                 "be lists of equal length")
            if not isinstance(context, str):
                raise task_error(task.name, "context_column", f"{rows(index)}: the context is "
                                 f"{context!r}, not text; fill the cell or drop the row")
            for text, start in zip(answers["text"], answers["answer_start"]):
                if not isinstance(start, int) or isinstance(start, bool) or not isinstance(text, str):
                    raise task_error(task.name, "answers_column", f"{rows(index)}: answer {text!r} at "
                                     f"{start!r}: text must be a string and answer_start an integer")
                if context[start : start + len(text)] != text:
                    raise task_error(task.name, "answers_column", f"{rows(index)}: answer {text!r} is not at "
                                     f"character {start} of the context")
    elif task.kind == "token_classification":
        _check_tagged_words(task, columns[task.tokens_column], columns[task.tags_column], rows)


def _check_tagged_words(task: TaskSpec, token_rows: list, tag_rows: list, rows) -> None:
    """Each row: a non-empty list of words and as many tags, each an id in [0, num_labels) or a name of
    label_names."""
    for index, (words, tags) in enumerate(zip(token_rows, tag_rows)):
        if not isinstance(words, list) or not words:
            raise task_error(task.name, "tokens_column", f"{rows(index)}: column {task.tokens_column!r} must "
                             f"hold a non-empty list of words, got {words!r}")
        for position, word in enumerate(words):
            if not isinstance(word, str) or not word.strip():
                raise task_error(task.name, "tokens_column", f"{rows(index)}: word {position} is {word!r}, "
                                 "not a non-empty string")
        if not isinstance(tags, list):
            raise task_error(task.name, "tags_column", f"{rows(index)}: column {task.tags_column!r} must hold "
                             f"a list of tags (one per word), got {tags!r}")
        if len(tags) != len(words):
            raise task_error(task.name, "tags_column", f"{rows(index)}: {len(words)} tokens "
                             f"({task.tokens_column!r}) but {len(tags)} tags ({task.tags_column!r}); give one tag "
                             "per word")
        for position, tag in enumerate(tags):
            if problem := _class_problem(tag, task, "tag", tag_rows, rows, index, position):
                raise task_error(task.name, "tags_column", problem)


def _class_problem(value, task: TaskSpec, what: str, values: list, rows, index: int,
                   position: int | None = None) -> str | None:
    """What is wrong with one class label or tag (`what`, in row `index`, word `position` for a tag), or None: a
    name not in label_names, a float column (read as floats: `_not_an_integer`), an int out of [0, num_labels).
    `values`: the column's labels (or each row's tags); `rows` names a row (`row_namer`)."""
    if isinstance(value, str):
        if task.label_names and value in task.label_names:
            return None
        problem = f"is not one of label_names {task.label_names}"
    elif isinstance(value, float):
        return _not_an_integer(what, values, rows)
    elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < task.num_labels:
        problem = f"out of range [0, {task.num_labels})"
    else:
        return None
    word = f" (word {position})" if position is not None else ""
    return f"{rows(index)}: {what} {value!r}{word} {problem}"


def _not_an_integer(what: str, values: list, rows) -> str:
    """The problem of a label or tag column read as floats: one non-integer value anywhere makes Arrow read the
    whole column (every row's 1 as 1.0) as floats, so the row to name is the first holding a non-integer value,
    not the first row checked. `values`: the labels, or (tags) each row's list of tags; `rows` names a row."""
    for index, row in enumerate(values):
        for position, value in enumerate(row if isinstance(row, list) else [row]):
            if isinstance(value, float) and not value.is_integer():
                word = f" (word {position})" if isinstance(row, list) else ""
                return (f"{rows(index)}: {what} {value!r}{word} is not an integer; {what}s are integer class "
                        f"ids (or class names), and this one makes the whole column read as decimals")
    first = next((index for index, row in enumerate(values)
                  if any(isinstance(v, float) for v in (row if isinstance(row, list) else [row]))), 0)
    return (f"{rows(first)}: the {what}s are decimals (e.g. 1.0), not integer class ids; write them as integers "
            "(1) or class names")


def _text_columns(task: TaskSpec) -> dict[str, str]:
    """The task's text columns -> the TaskSpec field naming each (labels and QA answers are checked apart)."""
    if task.kind in ("classification", "regression"):
        return {c: "text_columns" for c in task.text_columns}
    if task.kind == "multiple_choice":
        return {c: f for c, f in ((task.question_column, "question_column"), (task.choices_column, "choices_column"))
                if c}
    if task.kind == "extractive_qa":
        return {task.question_column: "question_column"}  # an empty context is legal for unanswerable questions
    if task.kind == "token_classification":
        return {}  # lists of words, checked with their tags (_check_tagged_words)
    return {task.source_column: "source_column", task.target_column: "target_column"}


def _column_field(task: TaskSpec, column: str) -> str:
    return next((f for f in ("label_column", "choices_column", "question_column", "context_column", "answers_column",
                             "source_column", "target_column", "tokens_column", "tags_column")
                 if getattr(task, f) == column), "text_columns")
