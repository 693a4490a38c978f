"""Whole-column checks in Arrow, without turning a column into Python objects (a 100k-row task's checks read its
columns once, memory-mapped, instead of 100k Python values per column).

These functions only ever answer "clean" or "look closer": when `task_rows_are_clean` is False the caller runs the
per-row Python checks of `hf_aux.tasks.loading.check_task_data`, which find the row and word the error. A check that
passed (a split's columns here, a data file's lines in `hf_aux.tasks.validation`) leaves a marker in datasets' cache
by which it is skipped at the next start.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["arrow_column", "cache_marker", "distinct_values", "rows_are_clean", "task_rows_are_clean", "touch_marker"]


def arrow_column(data, column: str) -> pa.ChunkedArray:
    """One column of a `datasets.Dataset` as Arrow, in the dataset's row order (an indices mapping, as `select` or
    `train_test_split` leave, is applied); zero-copy for a memory-mapped dataset without one."""
    return data.select_columns([column]).with_format("arrow")[:].column(column)


def distinct_values(data, column: str) -> tuple[list, int | None] | None:
    """(the column's distinct non-null values as Python objects, the first row holding a null or None), or None when
    Arrow cannot tell distinct values of the column's type (lists, structs: the caller reads the rows instead)."""
    values = arrow_column(data, column)
    if not _is_scalar(values.type):
        return None
    first_null = pc.index(pc.is_null(values), True).as_py() if values.null_count else None
    return pc.unique(values.drop_null()).to_pylist(), first_null


# Bump when the checks below change, so that splits passed by older checks are checked again.
COLUMN_CHECKS_VERSION = 1


def task_rows_are_clean(task, data) -> bool:
    """`rows_are_clean`, remembered: a split read from disk that passed leaves a marker in datasets' cache named by
    its fingerprint (which datasets derives from the files and their modification times, and from every
    transformation since) and the task's fields, so that the next start does not read its columns again (reading
    them maps every page of a large task's text into the process)."""
    if not getattr(data, "cache_files", None):
        return rows_are_clean(task, data)
    key = json.dumps([COLUMN_CHECKS_VERSION, data._fingerprint, task.to_dict()], sort_keys=True, default=str)
    marker = cache_marker("hf_aux_checked_splits", key)
    if marker.exists():
        return True
    clean = rows_are_clean(task, data)
    if clean:
        touch_marker(marker)
    return clean


def rows_are_clean(task, data) -> bool:
    """True when every row of `data` (one split of `task`, a `hf_aux.TaskSpec`; its columns checked present) passes
    the per-row checks of `check_task_data` with nothing to report (no error, no warning about empty cells). False
    means "not shown here", not "wrong": kinds and column types this does not cover return False.

    The columns read are those of the table under `data`, without its indices mapping: a split made by `select` or
    `train_test_split` is checked with the rows around it (no gather, no copy), which can only make the answer
    False where the split's own rows are clean, never True where they are not."""
    column = data.data.column  # of the Arrow table under the dataset, memory-mapped when read from disk
    if task.kind in ("classification", "regression"):
        if not all(_text_is_clean(column(c)) for c in task.text_columns):
            return False
        labels = column(task.label_column)
        if labels.null_count:
            return False
        if task.kind == "regression":
            return pa.types.is_integer(labels.type) or (pa.types.is_floating(labels.type)
                                                        and pc.all(pc.is_finite(labels)).as_py() is not False)
        if pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type):
            return task.label_names is not None and bool(pc.all(pc.is_in(labels, pa.array(task.label_names))).as_py())
        if not pa.types.is_integer(labels.type):
            return False  # bools and floats: the row checks word the error
        low_high = pc.min_max(labels).as_py()
        return low_high["min"] is None or (low_high["min"] >= 0 and low_high["max"] < task.num_labels)
    if task.kind == "multiple_choice":
        if task.question_column and not _text_is_clean(column(task.question_column)):
            return False
        choices, labels = column(task.choices_column), column(task.label_column)
        if choices.null_count or labels.null_count or not pa.types.is_integer(labels.type):
            return False
        if not (pa.types.is_list(choices.type) or pa.types.is_large_list(choices.type)):
            return False
        if not _text_is_clean(pc.list_flatten(choices)):
            return False
        sizes = pc.list_value_length(choices)
        return bool(pc.all(pc.and_(pc.greater_equal(sizes, 2),
                                   pc.and_(pc.greater_equal(labels, 0), pc.less(labels, sizes)))).as_py())
    return False  # extractive QA, seq2seq, token classification: the row checks run


def _text_is_clean(values) -> bool:
    """Every cell a non-null string holding a character that is not whitespace as Python's str.strip() sees it."""
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)) or values.null_count:
        return False
    return not bool(pc.any(pc.match_substring_regex(values, _blank_pattern())).as_py() or False)


@functools.cache
def _blank_pattern() -> str:
    """An RE2 pattern matching cells that are empty or whitespace only, with exactly the characters str.isspace()
    calls whitespace (more than RE2's \\s: e.g. U+001C..U+001F, U+0085, U+00A0, U+3000)."""
    spaces = [c for c in range(0x3001) if chr(c).isspace()]  # none lies above U+3000
    return "^[" + "".join(f"\\x{{{c:x}}}" for c in spaces) + "]*$"


def _is_scalar(kind: pa.DataType) -> bool:
    """A type Arrow's kernels (unique, is_null, ...) take: not nested, not dictionary-encoded, and not an extension
    type (datasets stores a JSON column of mixed types, e.g. labels 1 and "pos", as `arrow.json`, which no kernel
    takes; the row-by-row path reads and words those)."""
    return not (pa.types.is_nested(kind) or pa.types.is_dictionary(kind) or isinstance(kind, pa.BaseExtensionType))


def cache_marker(folder: str, key: str) -> Path:
    """The path of an empty marker file in datasets' cache folder (HF_DATASETS_CACHE/<folder>), named by a hash of
    `key`: a check that passed for what `key` describes leaves it, so that the next start can skip the check."""
    import hashlib

    import datasets.config

    return Path(datasets.config.HF_DATASETS_CACHE) / folder / hashlib.sha256(key.encode()).hexdigest()


def touch_marker(marker: Path) -> None:
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # a read-only cache only means the next start checks again
        pass
