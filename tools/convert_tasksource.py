"""Convert tasksource's English task annotations into hf_aux's task registry file (hf_aux/task_registry_data/).

    pip install tasksource==0.1.1        # only here, to read its annotations; hf_aux never imports it
    python tools/convert_tasksource.py --output hf_aux/task_registry_data/tasksource.json

tasksource (https://github.com/sileod/tasksource, Damien Sileo) annotates Hub datasets as Python objects:
`Classification("premise", "hypothesis", "label", dataset_name=..., config_name=...)`, `MultipleChoice(...)`,
`TokenClassification(...)`. Its annotations (mappings, label names) are under CC BY 4.0, its code under BSD-3-Clause;
the file written here carries both notices and says what was changed.

An annotation becomes a ready hf_aux task when every part of it is data that hf_aux's preprocessing steps
(hf_aux/tasks/preprocessing.py) can apply: a column name, a join of columns (`cat`), a list of choice columns, a
nested field path (`get.a.b`), a label index into named classes (`name(column, classes)`), numeric label values
with names (`label_values`), the splits to read. An annotation with Python code (a lambda, a `pre_process`
function), extra `load_dataset` options, soft labels other than a mean rating, or a label that is always the same
choice, is written under "not_ready" with the reason, so `hf-aux tasks --all` can show it.

The conversion is deterministic: running it again on the same tasksource version writes the same file.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import inspect
import json
import re
from pathlib import Path

# tasksource's own default splits (train, validation, test)
DEFAULT_SPLITS = ("train", "validation", "test")
# when a source has no validation split, hf_aux carves one from train (tasksource's own share is 10%)
VALIDATION_FRACTION = 0.1
ANNOTATION_CLASSES = ("Classification", "MultipleChoice", "TokenClassification", "SoftLabeling")


class NotReady(Exception):
    """The annotation holds something hf_aux's preprocessing steps cannot apply; the message says what."""


def explicit_arguments(tasks_path: Path) -> dict[str, set[str]]:
    """Variable name -> the fields its annotation call names explicitly (positionally or by keyword). tasksource's
    field defaults are column names too ('sentence2', 'labels'), so an omitted field must not be read as a column."""
    positional = {"Classification": ("sentence1", "sentence2", "labels"),
                  "MultipleChoice": ("inputs", "choices", "labels"),
                  "TokenClassification": ("tokens", "labels"),
                  "SoftLabeling": ("sentence1", "sentence2", "labels")}
    given = {}
    for node in ast.parse(tasks_path.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        kind = func.id if isinstance(func, ast.Name) else None
        if kind not in positional:
            continue
        names = set(positional[kind][:len(node.value.args)]) | {k.arg for k in node.value.keywords if k.arg}
        for target in node.targets:
            if isinstance(target, ast.Name):
                given[target.id] = names
    return given


def _column_or_step(value, into: str, steps: list, what: str) -> str:
    """A field's column: a column name as it is, a `cat` join or a `get` path as a preprocessing step writing
    column `into`; anything else (a lambda, a function) raises NotReady."""
    kind = type(value).__name__
    if isinstance(value, str):
        return value
    if kind == "cat":
        steps.append({"join": list(value.fields), "into": into, "separator": value.separator})
        return into
    if kind == "dotgetter" and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", value.path or ""):
        steps.append({"field": value.path, "into": into})
        return into
    raise NotReady(f"{what} is Python code ({_describe(value)})")


def _describe(value) -> str:
    name = getattr(value, "__qualname__", None) or type(value).__name__
    return "a lambda" if name.endswith("<lambda>") else name


def _named_classes(value):
    """(column, classes) when `value` is tasksource's `name(column, classes)` lambda, else None."""
    if not callable(value) or not getattr(value, "__qualname__", "").startswith("name.<locals>"):
        return None
    found = inspect.getclosurevars(value).nonlocals
    return found["label_name"], list(found["classes"])


def _labels(mapping, explicit, spec: dict, steps: list, label_field: str) -> None:
    """The label column of `spec` (`label_field`: label_column or tags_column) and its class names where the
    annotation knows them; hidden labels (negative or null, e.g. GLUE's test splits) are dropped."""
    labels = mapping.labels if "labels" in explicit else "labels"
    named = _named_classes(labels)
    if named:
        spec[label_field], spec["label_names"] = named
    elif isinstance(labels, str):
        spec[label_field] = labels
    else:
        raise NotReady(f"the label is Python code ({_describe(labels)})")
    if label_field == "label_column" and spec["kind"] != "regression":  # before any mapping of the values
        steps.append({"drop_unlabelled": spec[label_field]})
    values = dict(mapping.label_values or {})
    if values:
        if list(values) == list(range(len(values))):
            spec["label_names"] = [str(v) for v in values.values()]
        else:
            steps.append({"map_labels": {str(k): i for i, k in enumerate(values)}, "column": spec[label_field]})
            spec["label_names"] = [str(v) for v in values.values()]
    if spec.get("label_names") is not None and len(spec["label_names"]) < 2:
        raise NotReady(f"one class only: {spec['label_names']}")


def convert(mapping, task_type: str, explicit: set[str]) -> dict:
    """TaskSpec fields (name aside) for one annotation; NotReady when a part of it is not data."""
    for hook in ("pre_process", "post_process"):
        function = getattr(mapping, hook)
        # remove_neg_1 drops rows labelled -1: the drop_unlabelled step every classification task gets
        known = ("identity", "remove_neg_1") if task_type != "TokenClassification" else ("identity",)
        if getattr(function, "__name__", "") not in known:
            raise NotReady(f"{hook} is Python code ({getattr(function, '__name__', function)})")
    extra = dict(mapping.load_dataset_kwargs or {})
    if extra:
        raise NotReady(f"loads with load_dataset options {sorted(extra)}")
    steps: list = []
    spec: dict = {}
    if type(mapping).__name__ == "SoftLabeling":  # listed by its hard view's type
        if not (mapping.regression and mapping.aggregation == "mean" and isinstance(mapping.labels, str)):
            raise NotReady("soft labels (a distribution over annotators' answers)")
        spec["kind"] = "regression"
        task_type = "Classification"
        explicit = explicit | {"labels"}
    if task_type == "Classification":
        spec.setdefault("kind", "classification")
        texts = [_column_or_step(mapping.sentence1, "text_a", steps, "sentence1")]
        if "sentence2" in explicit and mapping.sentence2 is not None:
            texts.append(_column_or_step(mapping.sentence2, "text_b", steps, "sentence2"))
        spec["text_columns"] = texts
        _labels(mapping, explicit, spec, steps, "label_column")
    elif task_type == "MultipleChoice":
        spec["kind"] = "multiple_choice"
        inputs = mapping.inputs if "inputs" in explicit else None
        spec["question_column"] = None if inputs is None else _column_or_step(inputs, "question", steps, "inputs")
        choice_fields = sorted((k for k in mapping.to_dict() if re.fullmatch(r"choice\d+", k)),
                               key=lambda k: int(k[6:]))
        if getattr(mapping, "choices_list", None):
            spec["choices_column"] = _column_or_step(mapping.choices_list, "choices", steps, "choices_list")
        elif len(choice_fields) >= 2:
            columns = [getattr(mapping, k) for k in choice_fields]
            if not all(isinstance(c, str) for c in columns):
                raise NotReady("a choice is Python code")
            steps.append({"gather": columns, "into": "choices"})
            spec["choices_column"] = "choices"
        else:
            raise NotReady("no choices")
        labels = mapping.labels if "labels" in explicit else "labels"
        if type(labels).__name__ == "pretty_f":
            raise NotReady("the right choice is always the same position (tasksource shuffles the options in Python)")
        _labels(mapping, explicit, spec, steps, "label_column")
        steps.append({"index_labels": spec["label_column"]})  # answer keys (A-D) as indices, as tasksource orders them
        spec.pop("label_names", None)  # a choice index, not a class
    elif task_type == "TokenClassification":
        spec["kind"] = "token_classification"
        tokens = mapping.tokens if "tokens" in explicit else "tokens"
        if not isinstance(tokens, str):
            raise NotReady(f"tokens is Python code ({_describe(tokens)})")
        spec["tokens_column"] = tokens
        _labels(mapping, explicit, spec, steps, "tags_column")
    else:
        raise NotReady(f"task type {task_type} has no hf_aux kind")
    splits = list(mapping.splits or DEFAULT_SPLITS)
    for field, split, default in zip(("train_split", "validation_split", "test_split"), splits, DEFAULT_SPLITS):
        if split != default:
            spec[field] = split
    if not splits[0]:
        raise NotReady("no training split")
    spec["validation_fraction"] = VALIDATION_FRACTION
    if mapping.max_examples:
        spec["max_train_samples"] = int(mapping.max_examples)
    if steps:
        spec["preprocessing"] = steps
    return spec


def build_registry() -> dict:
    import tasksource
    from tasksource import citation

    tasks_path = Path(tasksource.__file__).parent / "tasks.py"
    explicit = explicit_arguments(tasks_path)
    catalog = tasksource.list_tasks()
    licences = dict(zip(*(lambda df: (df.id, df.license))(tasksource.task_licenses(list(catalog.id)))))
    ready, not_ready = {}, {}
    for row in catalog.itertuples():
        about = {"dataset_name": row.dataset_name, "dataset_config": row.config_name}
        provenance = {"tasksource_id": row.id, "licence": _licence_text(licences.get(row.id))}
        if row.mapping.question:
            provenance["question"] = row.mapping.question
        try:
            spec = convert(row.mapping, row.task_type, explicit.get(row.preprocessing_name, set()))
        except NotReady as reason:
            not_ready[row.id] = {"kind": row.task_type, **about, "reason": str(reason)}
            continue
        ready[row.id] = {**spec, **about, "provenance": provenance}
    version = importlib.metadata.version("tasksource")
    return {
        "source": {
            "name": "tasksource", "version": version, "url": "https://github.com/sileod/tasksource",
            "authors": "Damien Sileo",
            "licence": "task annotations (mappings, label names): CC BY 4.0 "
                       "(https://creativecommons.org/licenses/by/4.0/); code: BSD-3-Clause (see TASKSOURCE_LICENSE)",
            "changes": "converted by tools/convert_tasksource.py into hf_aux TaskSpec fields and preprocessing steps; "
                       "annotations with Python code are listed under not_ready with the reason",
            "citation": citation.BIBTEX,
        },
        "tasks": ready,
        "not_ready": not_ready,
    }


def _licence_text(value) -> str | None:
    if value is None:
        return None
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="the registry file to write (JSON)")
    args = parser.parse_args(argv)
    registry = build_registry()
    Path(args.output).write_text(json.dumps(registry, indent=1, sort_keys=False, ensure_ascii=False) + "\n",
                                 encoding="utf-8")
    print(f"{args.output}: {len(registry['tasks'])} ready tasks, {len(registry['not_ready'])} not ready "
          f"(tasksource {registry['source']['version']})")


if __name__ == "__main__":
    main()
