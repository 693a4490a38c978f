"""A fast tokenizer's encodings straight into Arrow, without a Python list per row and field.

`tokenizer(first, second, truncation=True, max_length=n)` turns every row's encoding into three Python lists
(input_ids, token_type_ids, attention_mask) that datasets then converts back into Arrow; on a mixture of 50 tasks x
100k rows that conversion was a large share of a cold start's CPU time. `encode_rows` and `encode_choices` give the
same input_ids, token_type_ids and attention_mask as that call (the same keys, values and Arrow types datasets
writes for them: list<int32> ids, list<int8> masks and type ids), read from the Rust encodings into numpy in one
pass each:

- the call itself runs on the batch's first row, which sets the backend's truncation, padding and special-token
  handling exactly as it sets them for the whole batch; the batch is then encoded by the backend's
  `encode_batch_fast` (the same encodings as `encode_batch`, without the character offsets nobody reads here);
- the attention mask is all ones (nothing is padded: the call pads nothing, which is checked);
- multiple choice: a question is encoded once, not once per choice. Each sequence of a pair is encoded on its own
  in the backend anyway; `Tokenizer.post_process` then truncates the pair and adds the special tokens exactly as
  `encode` does (inside `encode` a pair's second sequence starts with type id 1, on its own with 0; the
  post-processing sets the type ids again, with or without a post-processor). Every batch checks its first pairs
  against the pairs encoded whole and encodes whole pairs where they differ.

`tests/test_data.py` compares every path with the transformers call, truncation included.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pyarrow as pa
from transformers import PreTrainedTokenizerBase

__all__ = ["can_encode_to_arrow", "encode_choices", "encode_rows"]

CHECKED_ROWS = 4  # rows of each multiple-choice batch encoded both ways


def can_encode_to_arrow(tokenizer: PreTrainedTokenizerBase) -> bool:
    """A fast tokenizer (a Rust backend) whose call returns no other fields than these."""
    return tokenizer.is_fast and set(tokenizer.model_input_names) <= {"input_ids", "token_type_ids", "attention_mask"}


def encode_rows(tokenizer: PreTrainedTokenizerBase, first: list[str], second: list[str] | None,
                max_length: int) -> dict[str, pa.Array]:
    """`tokenizer(first, second, truncation=True, max_length=max_length)` as Arrow list arrays, by field."""
    backend = _prepare(tokenizer, first[:1], None if second is None else second[:1], max_length)
    encodings = backend.encode_batch_fast(first if second is None else list(zip(first, second)))
    return _to_arrow(tokenizer, encodings)


def encode_choices(tokenizer: PreTrainedTokenizerBase, questions: list[str] | None, choices: list[list[str]],
                   max_length: int) -> dict[str, pa.Array]:
    """Multiple choice: row i's (question, choice) pairs, or its choices alone without questions, encoded as
    `tokenizer(questions_repeated, flat_choices, truncation=True, max_length=max_length)` would, grouped by row
    (list<list<...>> arrays)."""
    sizes = np.fromiter(map(len, choices), dtype=np.int32, count=len(choices))
    flat = list(itertools.chain.from_iterable(choices))
    if questions is None:
        backend = _prepare(tokenizer, flat[:1], None, max_length)
        encodings = backend.encode_batch_fast(flat)
    else:
        rows = np.repeat(np.arange(len(questions)), sizes).tolist()  # the row of each choice
        backend = _prepare(tokenizer, [questions[0]], flat[:1], max_length)
        encodings = _encode_pairs_once(backend, questions, flat, rows)
        checked = min(CHECKED_ROWS, len(flat))
        whole = backend.encode_batch_fast([(questions[r], c) for r, c in zip(rows[:checked], flat[:checked])])
        if any(a.ids != b.ids or a.type_ids != b.type_ids for a, b in zip(encodings, whole)):
            encodings = backend.encode_batch_fast([(questions[r], c) for r, c in zip(rows, flat)])
    columns = _to_arrow(tokenizer, encodings)
    row_offsets = pa.array(_offsets(sizes))
    return {key: pa.ListArray.from_arrays(row_offsets, values) for key, values in columns.items()}


def _prepare(tokenizer, first, second, max_length):
    """The transformers call on one row, which sets the backend as the batch's call would; the backend."""
    tokenizer(first, second, truncation=True, max_length=max_length)
    backend = tokenizer.backend_tokenizer
    if backend.padding is not None:  # the attention mask below is all ones
        raise RuntimeError("the tokenizer pads although the call asked for no padding")
    return backend


def _encode_pairs_once(backend, questions, flat_choices, rows):
    """Each question and each choice encoded once, without special tokens or truncation; then each pair truncated
    and given its special tokens by the backend's post-processing, as `encode` does after encoding both sides."""
    truncation = backend.truncation
    backend.no_truncation()
    try:
        question_encodings = backend.encode_batch_fast(questions, add_special_tokens=False)
        choice_encodings = backend.encode_batch_fast(flat_choices, add_special_tokens=False)
    finally:
        if truncation is not None:
            backend.enable_truncation(**truncation)
    questions_by_choice = map(question_encodings.__getitem__, rows)
    return list(map(backend.post_process, questions_by_choice, choice_encodings, itertools.repeat(True)))


def _to_arrow(tokenizer, encodings) -> dict[str, pa.Array]:
    """list<int32> input_ids, list<int8> token_type_ids (int64 if one exceeds int8, as datasets would store them)
    and list<int8> attention_mask, in the order the tokenizer's call returns them, for the fields it returns."""
    lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    offsets = pa.array(_offsets(lengths))
    total = int(lengths.sum())
    names = tokenizer.model_input_names
    columns = {"input_ids": np.fromiter(_chained(encodings, "ids"), dtype=np.int32, count=total)}
    if "token_type_ids" in names:
        type_ids = np.fromiter(_chained(encodings, "type_ids"), dtype=np.int64, count=total)
        fits = total == 0 or (type_ids.min() >= -128 and type_ids.max() <= 127)
        columns["token_type_ids"] = type_ids.astype(np.int8) if fits else type_ids
    if "attention_mask" in names:
        columns["attention_mask"] = np.ones(total, dtype=np.int8)
    return {key: pa.ListArray.from_arrays(offsets, pa.array(values)) for key, values in columns.items()}


def _chained(encodings, field: str):
    return itertools.chain.from_iterable(map(operator.attrgetter(field), encodings))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
