"""A fast tokenizer's encodings straight into Arrow, without a Python list per row and field (why, and what it
saves on a large mixture: docs/tasks.md, "Large mixtures").

`encode_rows` and `encode_choices` give what `tokenizer(first, second, truncation=True, max_length=n)` gives once
datasets has converted its lists (the same keys, values and Arrow types: list<int32> ids, list<int8> masks and
type ids). The call itself runs on the batch's first row, which sets the backend's truncation, padding and
special-token handling as for the whole batch; `encode_batch_fast` (no character offsets) then encodes the batch,
read from the Rust encodings into numpy in one pass per field; the attention mask is all ones (nothing is padded,
which is checked). Multiple choice encodes a question once, not once per choice: the pairs that need truncating go
through `Tokenizer.post_process` one by one (it truncates a pair and adds the special tokens as `encode` does), the
others are assembled in numpy from the layout `post_process` gives one untruncated pair; each batch checks its
first pairs against whole pairs and encodes whole pairs where they differ. `tests/test_startup.py` compares every
path with the transformers call, truncation included.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pyarrow as pa
from transformers import PreTrainedTokenizerBase

__all__ = ["can_encode_to_arrow", "encode_choices", "encode_rows"]

CHECKED_ROWS = 4  # rows of each multiple-choice batch encoded both ways
LAYOUT_TRIES = 8  # pairs tried for one whose special tokens sit unambiguously around its two sequences


def can_encode_to_arrow(tokenizer: PreTrainedTokenizerBase) -> bool:
    """A fast tokenizer (a Rust backend) whose call returns no other fields than these."""
    return tokenizer.is_fast and set(tokenizer.model_input_names) <= {"input_ids", "token_type_ids", "attention_mask"}


def encode_rows(tokenizer: PreTrainedTokenizerBase, first: list[str], second: list[str] | None,
                max_length: int) -> dict[str, pa.Array]:
    """`tokenizer(first, second, truncation=True, max_length=max_length)` as Arrow list arrays, by field."""
    backend = _prepare(tokenizer, first[:1], None if second is None else second[:1], max_length)
    encodings = backend.encode_batch_fast(first if second is None else list(zip(first, second)))
    return _columns(tokenizer, *_arrays(encodings))


def encode_choices(tokenizer: PreTrainedTokenizerBase, questions: list[str] | None, choices: list[list[str]],
                   max_length: int) -> dict[str, pa.Array]:
    """Multiple choice: row i's (question, choice) pairs, or its choices alone without questions, encoded as
    `tokenizer(questions_repeated, flat_choices, truncation=True, max_length=max_length)` would, grouped by row
    (list<list<...>> arrays)."""
    sizes = np.fromiter(map(len, choices), dtype=np.int32, count=len(choices))
    flat = list(itertools.chain.from_iterable(choices))
    if questions is None:
        backend = _prepare(tokenizer, flat[:1], None, max_length)
        arrays = _arrays(backend.encode_batch_fast(flat))
    else:
        rows = np.repeat(np.arange(len(questions)), sizes)  # the row of each choice
        backend = _prepare(tokenizer, [questions[0]], flat[:1], max_length)
        arrays = _pairs_in_parts(backend, questions, flat, rows)
        checked = min(CHECKED_ROWS, len(flat))
        whole = _arrays(backend.encode_batch_fast([(questions[r], c) for r, c in zip(rows[:checked], flat[:checked])]))
        if not _same_first(arrays, whole):
            arrays = _arrays(backend.encode_batch_fast([(questions[r], c) for r, c in zip(rows.tolist(), flat)]))
    columns = _columns(tokenizer, *arrays)
    row_offsets = pa.array(_offsets(sizes))
    return {key: pa.ListArray.from_arrays(row_offsets, values) for key, values in columns.items()}


def _prepare(tokenizer, first, second, max_length):
    """The transformers call on one row, which sets the backend as the batch's call would; the backend."""
    tokenizer(first, second, truncation=True, max_length=max_length)
    backend = tokenizer.backend_tokenizer
    if backend.padding is not None:  # the attention mask below is all ones
        raise RuntimeError("the tokenizer pads although the call asked for no padding")
    return backend


def _pairs_in_parts(backend, questions, flat_choices, rows: np.ndarray):
    """Each question and each choice encoded once, without special tokens or truncation; then the pairs as `encode`
    makes them: (ids, type ids, lengths) as `_arrays` gives them."""
    truncation = backend.truncation
    backend.no_truncation()
    try:
        question_encodings = backend.encode_batch_fast(questions, add_special_tokens=False)
        choice_encodings = backend.encode_batch_fast(flat_choices, add_special_tokens=False)
    finally:
        if truncation is not None:
            backend.enable_truncation(**truncation)
    first_ids, _, question_lengths = _arrays(question_encodings, type_ids=False)  # the layout gives the type ids
    second_ids, _, second_lengths = _arrays(choice_encodings, type_ids=False)
    first_lengths = question_lengths[rows]  # the question's length for each pair
    layout = _pair_layout(backend, question_encodings, choice_encodings, rows, first_lengths, second_lengths,
                          None if truncation is None else truncation["max_length"])
    if layout is None:  # no untruncated pair with two non-empty sequences to read the layout from
        return _arrays(list(map(backend.post_process, map(question_encodings.__getitem__, rows.tolist()),
                                choice_encodings, itertools.repeat(True))))
    special_ids, special_types, (before, between, after), (first_type, second_type), limit = layout
    # the pairs longer than max_length with their special tokens: truncated and post-processed one by one
    over = np.flatnonzero(first_lengths + second_lengths + (before + between + after) > limit) if limit else []
    over_ids, over_types, over_lengths = _arrays([backend.post_process(question_encodings[rows[i]],
                                                                       choice_encodings[i], True) for i in over])
    # every pair is five pieces of one source array: specials before, the question, specials between, the choice,
    # specials after (a post-processed pair is one piece: its own encoding)
    first_offsets, second_offsets = _offsets(question_lengths), _offsets(second_lengths)
    base_first = len(special_ids)
    base_second = base_first + len(first_ids)
    base_over = base_second + len(second_ids)
    count = len(rows)
    starts = np.empty((count, 5), dtype=np.int64)
    lengths = np.empty((count, 5), dtype=np.int64)
    starts[:, 0], lengths[:, 0] = 0, before
    starts[:, 1], lengths[:, 1] = base_first + first_offsets[rows], first_lengths
    starts[:, 2], lengths[:, 2] = before, between
    starts[:, 3], lengths[:, 3] = base_second + second_offsets[:-1], second_lengths
    starts[:, 4], lengths[:, 4] = before + between, after
    if len(over):
        starts[over] = 0
        lengths[over] = 0
        starts[over, 0] = base_over + _offsets(over_lengths)[:-1]
        lengths[over, 0] = over_lengths
    lengths, starts = lengths.reshape(-1), starts.reshape(-1)
    piece_offsets = _offsets(lengths)
    gather = np.repeat(starts - piece_offsets[:-1], lengths) + np.arange(piece_offsets[-1])
    ids = np.concatenate([special_ids, first_ids, second_ids, over_ids])[gather]
    type_ids = np.concatenate([special_types, np.full(len(first_ids), first_type, dtype=np.int64),
                               np.full(len(second_ids), second_type, dtype=np.int64), over_types])[gather]
    return ids, type_ids, lengths.reshape(count, 5).sum(axis=1)


def _pair_layout(backend, question_encodings, choice_encodings, rows, first_lengths, second_lengths, limit):
    """Where `post_process` puts its special tokens around an untruncated pair, and the type id of each part:
    (special ids, their type ids, (how many before, between, after), (first's type, second's type), max_length),
    read from the first untruncated pair with two non-empty sequences whose layout is unambiguous (the only way to
    find the question's and the choice's ids in it, in order, with the special tokens around them); None if there is
    no such pair among the first few or a sequence's tokens do not share one type id."""
    specials = backend.num_special_tokens_to_add(True)
    fits = (first_lengths > 0) & (second_lengths > 0)
    if limit:
        fits &= first_lengths + second_lengths + specials <= limit
    for i in np.flatnonzero(fits)[:LAYOUT_TRIES].tolist():
        first_ids, second_ids = question_encodings[rows[i]].ids, choice_encodings[i].ids
        pair = backend.post_process(question_encodings[rows[i]], choice_encodings[i], True)
        ids, types = pair.ids, pair.type_ids
        first, second = len(first_ids), len(second_ids)
        if len(ids) != first + second + specials:
            return None
        layouts = [(before, between) for before in range(specials + 1) for between in range(specials - before + 1)
                   if ids[before:before + first] == first_ids
                   and ids[before + first + between:before + first + between + second] == second_ids]
        if len(layouts) != 1:
            continue
        before, between = layouts[0]
        after = specials - before - between
        first_types = set(types[before:before + first])
        second_types = set(types[before + first + between:before + first + between + second])
        if len(first_types) != 1 or len(second_types) != 1:
            return None
        special = [*range(before), *range(before + first, before + first + between),
                   *range(len(ids) - after, len(ids))]
        return (np.array([ids[k] for k in special], dtype=np.int64),
                np.array([types[k] for k in special], dtype=np.int64),
                (before, between, after), (first_types.pop(), second_types.pop()), limit)
    return None


def _arrays(encodings, type_ids: bool = True):
    """The encodings' ids and type ids (None without `type_ids`), each concatenated into one int64 array, and their
    lengths."""
    lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    total = int(lengths.sum())
    return (np.fromiter(_chained(encodings, "ids"), dtype=np.int64, count=total),
            np.fromiter(_chained(encodings, "type_ids"), dtype=np.int64, count=total) if type_ids else None,
            lengths)


def _same_first(arrays, whole) -> bool:
    """Whether the first pairs of `arrays` are `whole` (ids and type ids)."""
    count, total = len(whole[2]), int(whole[2].sum())
    return (np.array_equal(arrays[2][:count], whole[2]) and np.array_equal(arrays[0][:total], whole[0])
            and np.array_equal(arrays[1][:total], whole[1]))


def _columns(tokenizer, ids, type_ids, lengths) -> dict[str, pa.Array]:
    """list<int32> input_ids, list<int8> token_type_ids (int64 if one exceeds int8, as datasets would store them)
    and list<int8> attention_mask, in the order the tokenizer's call returns them, for the fields it returns."""
    offsets = pa.array(_offsets(lengths))
    names = tokenizer.model_input_names
    columns = {"input_ids": ids.astype(np.int32)}
    if "token_type_ids" in names:
        fits = len(type_ids) == 0 or (type_ids.min() >= -128 and type_ids.max() <= 127)
        columns["token_type_ids"] = type_ids.astype(np.int8) if fits else type_ids
    if "attention_mask" in names:
        columns["attention_mask"] = np.ones(len(ids), dtype=np.int8)
    return {key: pa.ListArray.from_arrays(offsets, pa.array(values)) for key, values in columns.items()}


def _chained(encodings, field: str):
    return itertools.chain.from_iterable(map(operator.attrgetter(field), encodings))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
