"""Checks of user input made before any tokenisation or model loading, each failing with ONE `UserInputError`
(hf_aux.errors) that names the task, flag or file, the field, the row where it applies, and what to do.

Local data files are checked (exists, not empty, UTF-8, CSV rows as wide as the header, one JSON object per line)
before `datasets` loads them, and its own errors are re-raised naming the file; every message names a row as the
data file counts it (`row_name`), whatever shuffling, carving or capping came between.
"""

from __future__ import annotations

import codecs
import collections
import csv
import itertools
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Callable

from ..errors import UserInputError

logger = logging.getLogger(__name__)

# Above this share of empty ('' or whitespace) text cells a split is refused; below it the rows are kept (the
# model sees [CLS] [SEP]) and their count is logged.
MAX_EMPTY_SHARE = 0.1
# The one map from file suffix to the `datasets.load_dataset` builder, used by every reader of data files
# (txt: one document per line, for unlabelled text only)
DATA_FILE_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text"}
# labelled tasks name their columns: every format above but plain text
LABELLED_FILE_BUILDERS = {suffix: builder for suffix, builder in DATA_FILE_BUILDERS.items() if builder != "text"}
_CHUNK = 1 << 20


def read_structured_file(path: str | os.PathLike, what: str) -> Any:
    """The content of a .json/.yaml/.yml file. `what` names it in errors (e.g. "mixture file 'mix.yaml'")."""
    path = Path(path)
    named = f"{what}: {str(path)!r}"
    if not path.is_file():
        raise UserInputError(f"{named} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserInputError(f"{named} is not UTF-8 text (byte {error.start}); save it as UTF-8") from error
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise UserInputError(f"{named} is not valid JSON: {error.msg} at line {error.lineno}, column "
                                 f"{error.colno}; fix the file's syntax") from error
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise UserInputError(f"{named} is not valid YAML: {problem}{where}; fix the file's syntax") from error
    raise UserInputError(f"{named}: use a .json, .yaml or .yml file")


# ---- local data files -------------------------------------------------------------------------------------------


# datasets' readers raise UnicodeDecodeError at a place in their buffer ('é' at byte 35018 of a csv: position 3)
def _check_utf8(path: str, where: str) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line = _line_of(path, offset + error.start)
                raise UserInputError(f"{where}: {path!r} is not UTF-8 text (byte {offset + error.start}, line {line}); "
                                     "re-save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from error
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as error:
            raise UserInputError(f"{where}: {path!r} ends inside a UTF-8 character; re-save it as UTF-8") from error


def _line_of(path: str, byte: int) -> int:
    with open(path, "rb") as handle:
        return handle.read(byte).count(b"\n") + 1


# datasets' csv reader (pandas.read_csv) loads a short row padded with None ('bad,neg' under 'a,b,c': c=None)
def _check_csv(path: str, where: str) -> None:
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or not any(cell.strip() for cell in header):
            raise UserInputError(f"{where}: {path!r} has no CSV header row; the first line must name the columns")
        rows = 0
        for row in filter(None, reader):  # a blank line is []
            rows += 1
            if len(row) != len(header):
                raise UserInputError(f"{where}: {path!r} line {reader.line_num}: {len(row)} fields, the header has "
                                     f"{len(header)} ({header}); quote fields that contain commas, or fix the row")
    if rows == 0:
        raise UserInputError(f"{where}: {path!r} has a header but no data rows")


# datasets' json reader loads a line `null` as a row of None; text files of blank lines as rows of ''
def _check_lines(path: str, where: str, json_lines: bool, parse_every_line: bool = False) -> None:
    """Rows exist; JSON Lines (the first row a complete object) hold one object per line. Each line is only looked
    at (it must begin with `{` and end with `}`; one that does not is parsed, for the error to say what it is):
    parsing every line cost a cold start more than datasets' own reading of the file, and a line that is
    malformed inside its braces makes datasets' reader fail, which then parses every line (`parse_every_line`) to
    name it."""
    rows, lines_mode = 0, None
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            stripped = line.strip()
            if not stripped:
                continue
            rows += 1
            if not json_lines:
                continue
            if lines_mode is None:  # a pretty-printed or array JSON file is left to datasets' reader
                lines_mode = _is_json_object(line)
            if lines_mode and (parse_every_line or stripped[0] != "{" or stripped[-1] != "}"):
                _check_json_line(path, where, number, line)
    if rows == 0:
        raise UserInputError(f"{where}: {path!r} holds no rows (only blank lines)")


def _check_json_line(path: str, where: str, number: int, line: str) -> None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise UserInputError(f"{where}: {path!r} line {number} is not valid JSON ({error.msg}); write one "
                             "JSON object per line") from error
    if not isinstance(value, dict):
        raise UserInputError(f"{where}: {path!r} line {number} is a {type(value).__name__}, not a JSON "
                             "object of column -> value")


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def check_data_file(path: str, where: str) -> str:
    """Check one local data file before `datasets` reads it; returns its builder name. `where` names the owner
    in errors, e.g. "task 'sst2': field 'data_files' (validation)"."""
    suffix = Path(path).suffix.lower()
    if suffix not in DATA_FILE_BUILDERS:
        raise UserInputError(f"{where}: {path!r}: unsupported extension {suffix!r}; use one of "
                             f"{sorted(DATA_FILE_BUILDERS)}")
    if not os.path.isfile(path):
        raise UserInputError(f"{where}: file {path!r} does not exist")
    if os.path.getsize(path) == 0:
        raise UserInputError(f"{where}: file {path!r} is empty (0 bytes); give a file with data")
    builder = DATA_FILE_BUILDERS[suffix]
    # also the only check of a streamed file (tasks/streaming.py), whose rows datasets reads as training runs
    if builder == "parquet":
        return builder  # binary; datasets' own reader reports a damaged file (re-raised by load_data_files)
    marker = _passed_marker(path)
    if marker.exists():  # this version of the file (path, size, modification time) passed before
        return builder
    _check_utf8(path, where)
    if builder == "csv":
        _check_csv(path, where)
    else:
        _check_lines(path, where, json_lines=builder == "json")
    from .column_checks import touch_marker

    touch_marker(marker)
    return builder


# Bump when the line checks above change, so that files passed by older checks are checked again.
LINE_CHECKS_VERSION = 1


def _passed_marker(path: str) -> Path:
    """An empty file in datasets' cache folder (HF_DATASETS_CACHE) whose name stands for this version of `path`
    (its real path, size and modification time, as datasets itself keys the Arrow files it makes of local files)
    having passed the line checks: a second start skips reading a large file line by line again."""
    from .column_checks import cache_marker

    stat = os.stat(path)
    return cache_marker("hf_aux_checked_files",
                        f"{LINE_CHECKS_VERSION}|{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}")


def resolve_data_files(files, folder: str | os.PathLike):
    """`data_files` (one path, or split -> path) with its relative paths resolved against `folder`."""
    def resolve(path) -> str:
        return str(path if os.path.isabs(str(path)) else Path(folder) / str(path))

    return {split: resolve(path) for split, path in files.items()} if isinstance(files, dict) else resolve(files)


def _each_file(files: dict):
    """(split, path) for every file of a `data_files` mapping (a split names one path or a list of them)."""
    for split, paths in files.items():
        for path in (paths if isinstance(paths, (list, tuple)) else [paths]):
            yield split, str(path)


def load_data_files(files: dict[str, str], where: str, **load_kwargs):
    """`datasets.load_dataset(builder, data_files=files)` after `check_data_file` on every file; a failure inside
    `datasets` is re-raised as a UserInputError naming `where` and the files. Returns a `DatasetDict`."""
    import datasets

    builders = {check_data_file(path, f"{where} ({split})") for split, path in _each_file(files)}
    if len(builders) > 1:
        raise UserInputError(f"{where}: the files mix formats {sorted(builders)} ({files}); use one format")
    builder = builders.pop()
    try:
        loaded = datasets.load_dataset(builder, data_files=files, **load_kwargs)
    except Exception as error:  # datasets wraps parser errors in DatasetGenerationError and friends
        # datasets names a bad JSON line by its row in a 10 MB chunk (line 122165: 'Invalid value. in row 20360')
        if builder == "json":  # name the line if one is not a JSON object (the checks above only looked at it)
            for split, path in _each_file(files):
                _check_lines(path, f"{where} ({split})", json_lines=True, parse_every_line=True)
        cause = error.__cause__ or error.__context__ or error
        raise UserInputError(f"{where}: could not read {files}: {type(cause).__name__}: {cause}; check that every "
                             "row has the same columns and types") from error
    for split, paths in files.items():  # several files: one table, no one file's rows (named by split and position)
        paths = paths if isinstance(paths, (list, tuple)) else [paths]
        if isinstance(loaded, datasets.DatasetDict) and split in loaded and len(paths) == 1:
            remember_source(loaded[split], str(paths[0]), file=True)
    return loaded


# ---- rows as the user finds them ------------------------------------------------------------------------------
# Which source holds the rows of a loaded table: a data file (its rows are the table's, in order) or a split of a
# Hub dataset. Keyed by the Arrow cache files under a `datasets.Dataset`, which `select`, `shuffle`, `filter` and
# `train_test_split` keep, mapping their rows to the table's through an indices table (`Dataset._indices`; no
# public datasets API gives the original positions). A table made anew (`map`, preprocessing steps) has files of
# its own, not here unless `keep_source` put them: its rows are named by split and position.
_SOURCES: dict[tuple[str, ...], tuple[str, bool]] = {}


def _table_files(data) -> tuple[str, ...]:
    """The Arrow cache files of the rows of `data` (not of its indices mapping); () for a table in memory."""
    from datasets.table import list_table_cache_files

    table = getattr(data, "_data", None)
    return tuple(list_table_cache_files(table)) if table is not None else ()


def remember_source(data, source: str, file: bool = False) -> None:
    """Record that the rows of the loaded split `data` are, in order, those of `source` (a data file's path when
    `file`, else a description such as "the glue/rte train split")."""
    files = _table_files(data)
    if files:
        _SOURCES[files] = (source, file)


def _source_of(data) -> tuple[str, bool] | None:
    files = _table_files(data)
    return _SOURCES.get(files) if files else None


def keep_source(before, after) -> None:
    """`after` holds the rows of `before` one for one, in order (a `map` that keeps every row): its rows are named
    as those of `before` were, when `before` read its source's rows directly (no indices mapping)."""
    source = _source_of(before)
    if source is not None and getattr(before, "_indices", None) is None and len(before) == len(after):
        remember_source(after, *source)


def _table_row(data, index: int) -> int:
    indices = getattr(data, "_indices", None)
    return int(indices.column(0)[index].as_py()) if indices is not None else index


def row_name(data, index: int, split: str | None) -> str:
    """How a message names row `index` of the split `data` (a `datasets.Dataset`; `split` its role): the data
    file's own 1-based row, "data/train.csv row 37 (line 38)" (its line where a header or blank lines make them
    differ), or "the glue/rte train split row 37", whatever shuffling, carving of a validation share or capping
    came between; "train row 37" (1-based; "row 37" without a `split`) for rows of no known source."""
    source = _source_of(data)
    if source is None:
        return f"{split} row {index + 1}" if split else f"row {index + 1}"
    name, is_file = source
    number = _table_row(data, index) + 1
    line = _file_line(name, number) if is_file else None
    return f"{name} row {number}" + (f" (line {line})" if line is not None and line != number else "")


def row_namer(data, split: str) -> Callable[[int], str]:
    """`row_name` for the rows of one split."""
    return lambda index: row_name(data, index, split)


def _file_line(path: str, number: int) -> int | None:
    """The line on which data row `number` (1-based, blank lines skipped, under the header of a CSV) starts in
    the file, or None when the file cannot be read that way (parquet, a JSON array)."""
    suffix = Path(path).suffix.lower()
    try:
        with open(path, encoding="utf-8", newline="" if suffix == ".csv" else None) as handle:
            return next(itertools.islice(_row_lines(handle, suffix), number - 1, None), None)
    except (OSError, UnicodeDecodeError):
        return None


def _row_lines(handle, suffix: str):
    """The line on which each data row of an open data file starts (none for a file not read by lines)."""
    if suffix == ".csv":
        reader = csv.reader(handle)
        next(reader, None)  # the header
        start = reader.line_num
        for row in reader:
            if row:
                yield start + 1
            start = reader.line_num
    elif suffix in (".jsonl", ".txt") or (suffix == ".json" and _is_json_object(handle.readline())):
        handle.seek(0)
        yield from (line_number for line_number, line in enumerate(handle, 1) if line.strip())


# ---- cells ------------------------------------------------------------------------------------------------------


def check_text_cells(values: list, where: str, column: str, split: str, *, nested: bool = False,
                     max_empty_share: float = MAX_EMPTY_SHARE, rows: Callable[[int], str] | None = None) -> None:
    """`values`: one split's cells of a text column (`nested`: each cell a list of strings, as multiple-choice
    options). None or a non-string is an error naming the row (`rows`: how, `row_namer`; default the split's
    1-based position); so is an all-empty column or more than `max_empty_share` empty cells; fewer empty cells are
    logged. (Unlabelled MLM text passes 1.0: blank lines add no tokens, only an all-empty corpus is an error.)"""
    rows = rows or (lambda index: f"{split} row {index + 1}")
    empty, first_empty = 0, None
    for row, cell in enumerate(values):
        for item in (cell if nested and isinstance(cell, list) else [cell]):
            if item is None:
                raise UserInputError(f"{where}: {rows(row)}: column {column!r} is empty (None/null); fill the "
                                     "cell or drop the row")
            if not isinstance(item, str):
                raise UserInputError(f"{where}: {rows(row)}: column {column!r} holds {type(item).__name__} "
                                     f"{item!r}, not text; convert the column to strings")
            if not item.strip():
                empty += 1
                first_empty = row if first_empty is None else first_empty
                break
    if not values or empty == 0:
        return
    if empty == len(values):
        raise UserInputError(f"{where}: column {column!r} is empty ('') in every one of the {len(values)} {split} "
                             "rows; point the column flag at the column that holds the text")
    if empty / len(values) > max_empty_share:
        raise UserInputError(f"{where}: column {column!r} is empty ('') in {empty} of {len(values)} {split} rows "
                             f"(first: {rows(first_empty)}), more than {max_empty_share:.0%}; fill or drop those rows")
    if max_empty_share < 1.0:
        logger.warning("%s: column %r is empty in %d of %d %s rows (first: %s); they are kept", where, column,
                       empty, len(values), split, rows(first_empty))


def _require_column(data, column: str, split: str, where: str) -> None:
    if column not in data.column_names:
        raise UserInputError(f"{where}: column {column!r} not in the {split} data"
                             f"{did_you_mean(column, data.column_names)}; columns are {data.column_names}")


def did_you_mean(name: str, names) -> str:
    """'; did you mean 'label'?' when one of `names` is close to `name` (a misspelt column), else ''."""
    import difflib

    close = difflib.get_close_matches(name, [str(item) for item in names], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def infer_class_labels(splits: dict, label_column: str, where: str, hint: str) -> dict:
    """The classes of a classification task read from its loaded splits (name -> Dataset): {"label_names": sorted
    names} for string labels, {"num_labels": max + 1} for non-negative integers. A missing column, an empty label
    or mixed types is an error naming `where` (e.g. "task 'x': field 'label_column'"), the row, and `hint` (the
    flags that set the labels instead)."""
    values = set()
    for split, data in splits.items():
        _require_column(data, label_column, split, where)
        distinct, first_null = _distinct_labels(data, label_column)
        if first_null is not None:
            raise UserInputError(f"{where}: {row_name(data, first_null, split)}: the label is empty (None/null); "
                                 "fill it or drop the row")
        values.update(distinct)
    classes = _classes_of(values, "labels", where, hint)
    check_rare_classes(splits, label_column, where, hint)
    return classes


# A class this rare beside every other one is likely a typo ('sprots' among sports, politics, tech), which would
# otherwise train a class of its own without a word: at most RARE_ROWS rows, or under RARE_SHARE of all rows, while
# every other class has at least RARE_RATIO times as many.
RARE_ROWS, RARE_SHARE, RARE_RATIO = 2, 0.01, 10


def check_rare_classes(splits: dict, label_column: str, where: str, hint: str) -> None:
    """Stop on a class label read from the data (no label_names given) that is this rare beside the others, naming
    the row it is in (`row_name`) and how to keep it: `hint` names what gives the classes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .column_checks import arrow_column

    counts = collections.Counter()
    for data in splits.values():
        if not hasattr(data, "select_columns"):
            continue
        column = arrow_column(data, label_column)
        if pa.types.is_floating(column.type) or pa.types.is_nested(column.type):
            return  # decimals or lists: not class labels (their own checks word it)
        for entry in pc.value_counts(column).to_pylist():
            if entry["values"] is not None:
                counts[entry["values"]] += entry["counts"]
    total = sum(counts.values())
    for value, count in sorted(counts.items(), key=lambda item: item[1]):
        others = [n for v, n in counts.items() if v != value]
        if not others or (count > RARE_ROWS and count >= RARE_SHARE * total) or min(others) < RARE_RATIO * count:
            continue
        for split, data in splits.items():  # the first row holding it
            index = pc.index(arrow_column(data, label_column), value).as_py() if hasattr(data, "select_columns") \
                else -1
            if index >= 0:
                break
        largest = ", ".join(f"{v!r} {n}" for v, n in counts.most_common(3) if v != value)
        raise UserInputError(
            f"{where}: label {value!r} is in {count} of {total} rows, first {row_name(data, index, split)}, while "
            f"every other class has at least {min(others)} ({largest}{', ...' if len(counts) > 4 else ''}): a typo? "
            f"Fix that row, or, to train {value!r} as a class of its own, name the classes ({hint}): "
            f"{' '.join(map(str, sorted(counts, key=str)))}")


def _distinct_labels(data, column: str) -> tuple[list, int | None]:
    """(the distinct non-null values of a label column, the first row whose label is None or None): from Arrow for
    a column of scalars (no Python object per row), else read row by row."""
    from .column_checks import distinct_values

    found = distinct_values(data, column) if hasattr(data, "select_columns") else None
    if found is not None:
        return found
    labels = list(data[column])
    return [v for v in labels if v is not None], labels.index(None) if None in labels else None


def _classes_of(values: set, what: str, where: str, hint: str) -> dict:
    """{"label_names": sorted names} for strings, {"num_labels": max + 1} for non-negative integers."""
    if values and all(isinstance(v, str) for v in values):
        return {"label_names": sorted(values)}
    if values and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return {"num_labels": max(2, max(values) + 1)}
    raise UserInputError(f"{where}: {what} must be all strings or all non-negative integers; pass {hint} (found "
                         f"{sorted(map(repr, values))[:5]})")


def infer_tag_labels(splits: dict, tags_column: str, where: str, hint: str) -> dict:
    """The tags of a token classification task read from its loaded splits (name -> Dataset): {"label_names":
    the names} of a `Sequence(ClassLabel)` column (conll2003's ner_tags), else {"label_names": sorted names} for
    string tags or {"num_labels": max + 1} for integer ids. A missing column, a cell that is not a list, an empty
    tag or mixed types is an error naming `where` (e.g. "task 'x': field 'tags_column'"), the row, and `hint`."""
    values = set()
    for split, data in splits.items():
        _require_column(data, tags_column, split, where)
        names = getattr(data.features[tags_column], "feature", None)
        if hasattr(names, "names"):  # a Sequence(ClassLabel) feature names the ids
            return {"label_names": list(names.names)}
        for row, tags in enumerate(data[tags_column]):
            if not isinstance(tags, list):
                raise UserInputError(f"{where}: {row_name(data, row, split)}: column {tags_column!r} holds "
                                     f"{type(tags).__name__} {tags!r}, not a list of tags (one per word)")
            if None in tags:
                raise UserInputError(f"{where}: {row_name(data, row, split)}: a tag is empty (None/null); fill it or "
                                     "drop the row")
            values.update(tags)
    return _classes_of(values, "tags", where, hint)


def infer_task_kind(splits: dict, columns: dict, where: str, hint: str, label_where: str | None = None,
                    label_hint: str = "label_column") -> str:
    """The kind of a single task read from its loaded splits (name -> Dataset) and the column names it would use
    (`columns`: label_column, choices_column, answers_column, tokens_column, tags_column; None for the defaults):
    SQuAD-style answers -> extractive_qa; word lists (tokens) beside a tags column -> token_classification; a list
    column of choices with an integer label -> multiple_choice; string or integer labels -> classification; floats
    with a fraction -> regression. Whole-number floats (classes or scores?) and list labels are errors naming
    `where` and `hint` (the flag that sets the kind); no label column, one naming `label_where` (default `where`)
    and `label_hint` (what names the label column)."""
    first = next(iter(splits.values()))
    label = columns.get("label_column") or "label"
    if (columns.get("answers_column") or "answers") in first.column_names:
        return "extractive_qa"
    tokens, tags = columns.get("tokens_column") or "tokens", columns.get("tags_column") or "ner_tags"
    if tokens in first.column_names and tags in first.column_names and len(first) \
            and isinstance(first[0][tokens], list):
        return "token_classification"
    if label not in first.column_names:
        raise UserInputError(f"{label_where or where}: no {label!r} column in the data"
                             f"{did_you_mean(label, first.column_names)} (columns: {first.column_names}); pass "
                             f"{label_hint} with the column that holds the labels")
    if (columns.get("choices_column") or "choices") in first.column_names:
        return "multiple_choice"
    values = [v for data in splits.values() for v in _distinct_labels(data, label)[0]]
    if any(isinstance(v, (list, tuple, dict)) for v in values):
        raise UserInputError(f"{where}: the {label!r} column holds lists (one label per token?), which is not a "
                             f"single-label task; pass {hint} with one label per row, or, for one tag per word, the "
                             "kind token_classification with its tokens_column and tags_column (defaults: tokens, "
                             "ner_tags)")
    if values and all(isinstance(v, (str, bool, int)) for v in values):
        return "classification"
    if values and all(isinstance(v, (int, float)) for v in values):
        if any(not float(v).is_integer() for v in values):
            return "regression"
        raise UserInputError(f"{where}: the {label!r} column holds whole numbers written as floats (e.g. "
                             f"{sorted(set(values))[:5]}): classes or scores? pass {hint} classification or regression")
    raise UserInputError(f"{where}: cannot tell the task's kind from the {label!r} column (found "
                         f"{sorted({type(v).__name__ for v in values})}); pass {hint}")


def check_corpus(dataset, text_column: str, where: str, split: str = "train") -> None:
    """Unlabelled MLM text: the column exists and holds text (None is an error naming the row; blank lines are
    fine unless every line is blank)."""
    if text_column not in dataset.column_names:
        raise UserInputError(f"{where}: column {text_column!r} not in the {split} text; columns are "
                             f"{dataset.column_names} (name the column that holds the text)")
    check_text_cells(dataset[text_column], where, text_column, split, max_empty_share=1.0,
                     rows=row_namer(dataset, split) if hasattr(dataset, "select_columns") else None)


def check_holdout_split(size: int, percentage: float, where: str, what: str = "documents") -> None:
    """A `train_test_split(test_size=percentage / 100)` of `size` rows must leave at least one row on each side."""
    if percentage <= 0:
        return
    held_out = math.ceil(size * percentage / 100)
    if size < 2 or size - held_out < 1:
        raise UserInputError(f"{where}: the text has {size} {what}, too few to hold out validation_split_percentage="
                             f"{percentage}% of them and train on the rest; give more text, a validation file, or "
                             "a validation_split_percentage of 0")
