"""Tokenisation per task kind, per-task padding, and MLM masking shared by the MLM-based methods."""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
import math
import sys
import weakref
from dataclasses import dataclass

import pyarrow as pa
import torch
from transformers import PreTrainedTokenizerBase

from . import arrow_encoding
from .arrow_encoding import can_encode_to_arrow, encode_choices, encode_rows
from .loading import task_error
from .validation import row_name
from ..errors import UserInputError

# --------------------------------------------------------------------------------------------------------------
# Unlabelled text -> fixed-size blocks -> dynamically masked MLM batches (AMOS, TARTAN's TAPT/DAPT, the student)
# --------------------------------------------------------------------------------------------------------------


def group_texts_for_mlm(dataset, tokenizer: PreTrainedTokenizerBase, text_column: str = "text", block_size: int = 128,
                        num_proc: int | None = None):
    """Tokenise `dataset[text_column]`, concatenate everything and cut it into blocks of `block_size` tokens,
    each wrapped in the tokenizer's [CLS] ... [SEP] (as run_mlm.py's group_texts, but every block is a valid
    single-sentence input). Returns a `datasets.Dataset` with `input_ids` and `attention_mask` (all ones).
    """
    if text_column not in dataset.column_names:
        raise UserInputError(f"MLM text: field 'text_column': column '{text_column}' not in {dataset.column_names}")
    if len(dataset) == 0:
        raise UserInputError("MLM text: the dataset is empty")
    tokenize_and_group = mlm_block_function(tokenizer, text_column, block_size)
    grouped = dataset.map(tokenize_and_group, batched=True, batch_size=1000, remove_columns=dataset.column_names,
                          num_proc=num_proc, desc="Grouping texts into MLM blocks")
    if len(grouped) == 0:
        raise UserInputError(f"MLM text: field 'block_size': the text holds fewer than {block_size} tokens in all, not "
                             "one block; give more text or a smaller block_size")
    return grouped


def mlm_block_function(tokenizer: PreTrainedTokenizerBase, text_column: str, block_size: int):
    """The batched function of `group_texts_for_mlm` (a batch of documents -> its blocks), shared with the streamed
    corpora of `hf_aux.tasks.streaming`, so that both make the same blocks of the same text."""
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if start is None or end is None:
        raise UserInputError("MLM text: field 'tokenizer': it has neither cls/sep nor bos/eos tokens to wrap blocks")
    inner = block_size - 2
    if inner < 1:
        raise UserInputError(f"MLM text: field 'block_size': {block_size} leaves no room next to the special tokens")

    def tokenize_and_group(batch):
        ids = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
        flat = [token for seq in ids for token in seq]
        blocks = [[start, *flat[i : i + inner], end] for i in range(0, len(flat), inner)]
        blocks = [b for b in blocks if len(b) == block_size]  # drop the ragged tail, as run_mlm.py does
        return {"input_ids": blocks, "attention_mask": [[1] * len(b) for b in blocks]}

    return tokenize_and_group


def predictions_per_row(num_candidates, mlm_probability: float):
    """How many positions BERT's masking chooses in a sequence of `num_candidates` maskable tokens (an int or an
    integer tensor, one per row): round(n p) (half up, so it never exceeds the same count for a longer sequence),
    at least 1 where there is a candidate, at most n. BERT's and ELECTRA's pretraining data (`num_to_predict`)
    choose exactly this many; transformers' DataCollatorForLanguageModeling draws each token independently, with the
    same expected rate and a binomial count."""
    if isinstance(num_candidates, torch.Tensor):
        count = torch.floor(num_candidates.to(torch.float64) * mlm_probability + 0.5).to(num_candidates.dtype)
        return torch.minimum(count.clamp_min(1), num_candidates)
    n = int(num_candidates)
    return min(n, max(1, math.floor(n * mlm_probability + 0.5))) if n else 0


def max_predictions(shape, mlm_probability: float | None) -> int:
    """K, the static number of prediction slots of a masked batch of `shape` (B, T) (an int n: one row of n): the
    most positions `mask_tokens_for_mlm` chooses, B x `predictions_per_row(T, p)` (ELECTRA's
    max_predictions_per_seq). A head that reads K slots (`prediction_positions`) sees every chosen token, at the
    cost of computing logits only there: K is the expected count up to the special tokens' share (B x 19 slots
    for 8 x 128 tokens at p = 0.15, with 18.9 expected per row). `mlm_probability` None: every position."""
    rows, length = (1, int(shape)) if isinstance(shape, int) else (int(shape[0]), int(math.prod(shape[1:])))
    if mlm_probability is None:
        return rows * length
    return rows * predictions_per_row(length, float(mlm_probability))


def prediction_positions(chosen: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The static-size form of `chosen.nonzero()`: `num_slots` flat indices into `chosen.reshape(-1)` (bool [B, T]),
    the chosen positions first in row-major order (as boolean indexing orders them), then unchosen positions as
    padding; and a bool [num_slots] that is True at the chosen slots. No output shape depends on the data (a
    top-k over position scores instead of nonzero), so nothing waits for the device and torch.compile sees one
    graph. Chosen positions beyond `num_slots` are left out: `mask_tokens_for_mlm` never chooses more than
    `max_predictions` of a batch. `num_slots` >= B x T: every position, in order."""
    flat = chosen.reshape(-1)
    count = flat.shape[0]
    if num_slots >= count:  # every position: no gather to compute
        return torch.arange(count, device=flat.device), flat
    # score n - i at chosen position i, 0 elsewhere: the top scores are the chosen positions in ascending order
    scores = torch.where(flat, count - torch.arange(count, device=flat.device), 0)
    positions = scores.topk(num_slots, sorted=True).indices
    return positions, flat.gather(0, positions)


def mask_tokens_for_mlm(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: choose `predictions_per_row(n, mlm_probability)` of each row's n non-special positions,
    uniformly at random (BERT's and ELECTRA's `num_to_predict`, so every batch fits `max_predictions(shape, p)`
    static slots); of those, 80% become [MASK], 10% a random token, 10% stay. Returns `(masked_input_ids, labels)`
    with labels -100 where nothing is predicted.

    input_ids: [batch, length]; special_tokens_mask: bool [batch, length], True where masking is forbidden
    (CLS, SEP, PAD). Uses `generator` (or torch's global RNG, which Trainer seeds and restores on resume).
    """
    labels = input_ids.clone()
    maskable = torch.ones_like(input_ids, dtype=torch.bool) if special_tokens_mask is None else \
        ~special_tokens_mask.bool()
    # a uniform random subset of k_r maskable positions per row: the k_r highest of uniform scores (special
    # positions score -1); top-k has a static size, so nothing here waits for the device
    scores = torch.rand(input_ids.shape, generator=generator, device=input_ids.device).masked_fill(~maskable, -1.0)
    slots = predictions_per_row(input_ids.shape[-1], mlm_probability)
    ranked = scores.topk(slots, dim=-1).indices  # [B, slots], best first
    wanted = predictions_per_row(maskable.sum(-1), mlm_probability)  # [B] k_r
    keep = torch.arange(slots, device=input_ids.device) < wanted.unsqueeze(-1)
    chosen = torch.zeros_like(maskable).scatter(-1, ranked, keep)
    labels[~chosen] = -100
    masked = input_ids.clone()
    to_mask = torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob, device=input_ids.device),
                              generator=generator).bool() & chosen
    masked[to_mask] = mask_token_id
    # of the remaining chosen positions, random_replace_prob / (1 - mask_replace_prob) get a random token
    remaining = 1.0 - mask_replace_prob
    random_share = random_replace_prob / remaining if remaining > 0 else 0.0
    to_random = torch.bernoulli(torch.full(input_ids.shape, random_share, device=input_ids.device),
                                generator=generator).bool() & chosen & ~to_mask
    random_tokens = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    # where, not masked[to_random] = random_tokens[to_random]: the same tokens without boolean indexing, whose
    # nonzero stops the host on CUDA
    return torch.where(to_random, random_tokens, masked), labels


def special_tokens_mask_for(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """bool [batch, length]: True at the tokenizer's special tokens (never masked). The ids' tensor is built once per
    device and id set (`_special_ids`): a batch masked on an accelerator then copies nothing from the host."""
    return torch.isin(input_ids, _special_ids(tuple(sorted(set(tokenizer.all_special_ids))), input_ids.device))


@functools.lru_cache(maxsize=64)
def _special_ids(ids: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(ids, device=device)


@dataclass
class MLMCollator:
    """Stacks fixed-length blocks from `group_texts_for_mlm` and masks them afresh for every batch: `input_ids`
    (masked), `attention_mask`, `labels` (-100 where not predicted), and `original_input_ids` when
    `return_original=True` (ELECTRA-style discriminators need the unmasked text)."""

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    return_original: bool = False

    def __post_init__(self):
        if self.tokenizer.mask_token_id is None:
            raise ValueError("MLM: field 'tokenizer': the tokenizer has no mask token")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"MLM: field 'mlm_probability': {self.mlm_probability} is not in (0, 1)")

    def __call__(self, features):
        padded = self.tokenizer.pad([{"input_ids": f["input_ids"]} for f in features], return_tensors="pt")
        input_ids = padded["input_ids"]
        masked, labels = mask_tokens_for_mlm(
            input_ids,
            mask_token_id=self.tokenizer.mask_token_id,
            vocab_size=len(self.tokenizer),
            special_tokens_mask=special_tokens_mask_for(input_ids, self.tokenizer),
            mlm_probability=self.mlm_probability,
        )
        batch = {"input_ids": masked, "attention_mask": padded["attention_mask"], "labels": labels}
        if self.return_original:
            batch["original_input_ids"] = input_ids
        return batch


# --------------------------------------------------------------------------------------------------------------
# Supervised tasks: tokenisation per kind
# --------------------------------------------------------------------------------------------------------------

MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def tokenize_task(task, dataset, tokenizer: PreTrainedTokenizerBase, *, max_length: int = 256, doc_stride: int = 64,
                  max_target_length: int = 128, keep_qa_offsets: bool = False):
    """Tokenise one split of `task` (a `hf_aux.TaskSpec`). Every row gets `task_name`.

    classification / regression: one sentence or a pair -> input_ids, attention_mask[, token_type_ids], labels
        (string labels become their index in `label_names`; regression labels are floats).
    multiple_choice: each (question, choice) pair is encoded, so input_ids is a list of C sequences; labels is
        the index of the right choice (the choices are ranked by one shared head).
    extractive_qa: question + context with `doc_stride` overlap; each window becomes a feature with
        start_positions / end_positions (token indices; both 0, the first token, when the answer is not inside the
        window or there is none). With `keep_qa_offsets`, also `example_index` and `offset_mapping` (character
        spans of context tokens, [-1, -1] elsewhere) to map predictions back to text.
    seq2seq: source -> input_ids; target -> labels (token ids).
    token_classification: the words (`is_split_into_words`) -> input_ids; labels one per sub-token: the word's tag
        id on its FIRST sub-token, -100 on its later sub-tokens and on special tokens (the fast tokenizer's
        `word_ids()`; a slow tokenizer is refused). Truncation drops the last words' sub-tokens and keeps the
        alignment of the others.
    Rows that would crash training are refused here, naming the task, field and row: a multiple-choice row with
    fewer than 2 choices (eq. 1 divides by log n = 0), a seq2seq row with no target token besides special tokens
    once truncated to `max_target_length` (nothing to predict; with no token at all the token-mean loss divides by 0),
    a token classification row with no tagged word left (its words gave no sub-token).
    """
    if task.kind not in _ENCODERS:  # TaskSpec validates kinds; this guards against a spec mutated after construction
        raise ValueError(f"task '{task.name}': field 'kind': unknown kind {task.kind!r}")
    settings = {"max_length": max_length, "doc_stride": doc_stride, "max_target_length": max_target_length,
                "keep_qa_offsets": keep_qa_offsets}
    encode = _ENCODERS[task.kind](task, dataset, tokenizer, **settings)

    def encode_and_name(batch, *indices):
        out = encode(batch, *indices)
        out["task_name"] = [task.name] * len(out["input_ids"])
        if isinstance(out["input_ids"], pa.Array):  # written as it is (labels: int64 or float64, as datasets infers)
            return pa.table({key: v if isinstance(v, pa.Array) else pa.array(v) for key, v in out.items()})
        return out

    # a fingerprint of what the rows depend on, so a dataset read from disk is tokenised once into datasets' cache
    # (memory-mapped Arrow) and the next start with the same data, task, tokenizer and lengths reads it back
    tokenized = dataset.map(encode_and_name, batched=True, with_indices=task.kind == "extractive_qa",
                            remove_columns=dataset.column_names, desc=f"Tokenizing {task.name}",
                            new_fingerprint=tokenized_fingerprint(dataset, task, tokenizer, settings))
    _check_tokenized(task, tokenized, tokenizer, max_length, max_target_length, dataset)
    return tokenized


def _label_encoder(task, dataset, tokenizer, *, max_length: int, **_):
    """classification and regression; with a fast tokenizer encoded straight into Arrow columns
    (hf_aux.tasks.arrow_encoding: the tokenizer's values and types, without a Python list per row)."""
    to_arrow = can_encode_to_arrow(tokenizer)
    label_index = {name: i for i, name in enumerate(task.label_names or [])}

    def encode(batch):
        texts = [batch[c] for c in task.text_columns]
        if to_arrow and len(texts) <= 2 and texts[0] and _all_strings(*texts):
            out = encode_rows(tokenizer, texts[0], texts[1] if len(texts) == 2 else None, max_length)
        else:
            out = tokenizer(*texts, truncation=True, max_length=max_length)
        labels = batch[task.label_column]
        if task.kind == "classification":
            out["labels"] = [label_index[x] if isinstance(x, str) else int(x) for x in labels]
        else:
            out["labels"] = [float(x) for x in labels]
        return out
    return encode


def _choice_encoder(task, dataset, tokenizer, *, max_length: int, **_):
    """multiple_choice: each (question, choice) pair encoded; a row with fewer than 2 choices refused up front."""
    short = _first_short_choice_row(dataset, task.choices_column)
    if short is not None:
        row, count = short
        raise task_error(task.name, task.choices_column, f"{row_name(dataset, row, None)} has {count} choice"
                         f"{'' if count == 1 else 's'}; ranking needs at least 2 (eq. 1 divides the loss by log n)")
    to_arrow = can_encode_to_arrow(tokenizer)

    def encode(batch):
        choices = batch[task.choices_column]
        questions = batch[task.question_column] if task.question_column else None
        if to_arrow and choices and _all_strings(questions or [], *choices):
            out = encode_choices(tokenizer, questions, choices, max_length)
        else:
            # a None question: the choice alone; the flat encodings are then cut back into one list per row
            pairs = [(option, None) if question is None else (question, option)
                     for question, options in zip(questions or [None] * len(choices), choices) for option in options]
            first, second = [a for a, _ in pairs], [b for _, b in pairs]
            enc = tokenizer(first, second if task.question_column else None, truncation=True, max_length=max_length)
            bounds = list(itertools.accumulate(map(len, choices), initial=0))
            out = {key: [values[a:b] for a, b in zip(bounds, bounds[1:])] for key, values in enc.items()}
        out["labels"] = [int(x) for x in batch[task.label_column]]
        return out
    return encode


def _answer_tokens(context_offsets: list, answers: dict) -> tuple[int, int]:
    """(start, end) token of the first answer inside one window; (0, 0) when it is not wholly inside or absent."""
    if not answers["text"]:
        return 0, 0
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    inside = [i for i, (a, b) in enumerate(context_offsets) if 0 <= a < end_char and b > start_char]
    if inside and context_offsets[inside[0]][0] <= start_char and context_offsets[inside[-1]][1] >= end_char:
        return inside[0], inside[-1]
    return 0, 0


def _qa_encoder(task, dataset, tokenizer, *, max_length: int, doc_stride: int, keep_qa_offsets: bool, **_):
    """extractive_qa: question + context windows with `doc_stride` overlap, answer positions per window."""
    if tokenizer.padding_side != "right":
        raise UserInputError(f"task '{task.name}': field 'tokenizer': extractive QA needs right padding")

    def encode(batch, indices):
        questions = [q.lstrip() for q in batch[task.question_column]]
        enc = tokenizer(questions, batch[task.context_column], truncation="only_second", max_length=max_length,
                        stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
        sample_map = enc.pop("overflow_to_sample_mapping")
        offsets_all = enc.pop("offset_mapping")
        enc["start_positions"], enc["end_positions"] = [], []
        enc["example_index"], enc["offset_mapping"] = [], []
        for feature, offsets in enumerate(offsets_all):
            sample = sample_map[feature]
            context_offsets = [tuple(o) if s == 1 else (-1, -1) for o, s in zip(offsets, enc.sequence_ids(feature))]
            start_token, end_token = _answer_tokens(context_offsets, batch[task.answers_column][sample])
            enc["start_positions"].append(start_token)
            enc["end_positions"].append(end_token)
            enc["example_index"].append(indices[sample])
            enc["offset_mapping"].append([list(o) for o in context_offsets])
        if not keep_qa_offsets:
            del enc["example_index"], enc["offset_mapping"]
        return enc
    return encode


def _tag_encoder(task, dataset, tokenizer, *, max_length: int, **_):
    """token_classification: tags aligned to first sub-tokens through a fast tokenizer's word_ids()."""
    if not tokenizer.is_fast:
        raise UserInputError(f"task '{task.name}': field 'tokenizer': token classification aligns tags to "
                             f"sub-tokens with a fast tokenizer's word_ids(); {type(tokenizer).__name__} is not "
                             "fast (load it with AutoTokenizer.from_pretrained(..., use_fast=True))")
    tag_index = {name: i for i, name in enumerate(task.label_names or [])}

    def encode(batch):
        out = tokenizer(batch[task.tokens_column], is_split_into_words=True, truncation=True, max_length=max_length)
        out["labels"] = [first_subtoken_labels(out.word_ids(row), [tag_index[t] if isinstance(t, str) else int(t)
                                                                   for t in tags])
                         for row, tags in enumerate(batch[task.tags_column])]
        return out
    return encode


def _seq2seq_encoder(task, dataset, tokenizer, *, max_length: int, max_target_length: int, **_):
    """seq2seq: source -> input_ids, target -> labels (token ids)."""
    def encode(batch):
        out = tokenizer(batch[task.source_column], truncation=True, max_length=max_length)
        targets = tokenizer(text_target=batch[task.target_column], truncation=True, max_length=max_target_length)
        out["labels"] = targets["input_ids"]
        return out
    return encode


_ENCODERS = {"classification": _label_encoder, "regression": _label_encoder, "multiple_choice": _choice_encoder,
             "extractive_qa": _qa_encoder, "token_classification": _tag_encoder, "seq2seq": _seq2seq_encoder}


def _check_tokenized(task, tokenized, tokenizer, max_length: int, max_target_length: int, dataset=None) -> None:
    """Refuse, naming the task, field and row (as `row_name` names the row of `dataset` it came from: a seq2seq
    or token classification row gives one tokenized row), what tokenisation left untrainable."""
    if len(tokenized) == 0:
        raise UserInputError(f"task '{task.name}': field 'dataset': tokenisation produced no rows")
    if task.kind == "seq2seq":
        special = set(tokenizer.all_special_ids)
        for row, labels in enumerate(tokenized["labels"]):
            if all(token in special for token in labels):
                raise task_error(task.name, task.target_column, f"{row_name(dataset, row, None)} has no target token "
                                 f"(besides special tokens) after tokenisation and truncation to max_target_length="
                                 f"{max_target_length}: nothing to predict")
    if task.kind == "token_classification":
        for row, labels in enumerate(tokenized["labels"]):
            if all(label == -100 for label in labels):
                raise task_error(task.name, "tokens_column", f"{row_name(dataset, row, None)}: no word gave a "
                                 f"sub-token (after truncation to max_length={max_length}): nothing to predict")


def tokenized_fingerprint(dataset, task, tokenizer: PreTrainedTokenizerBase, settings: dict) -> str:
    """The datasets fingerprint of `tokenize_task(task, dataset, tokenizer, **settings)`: a hash of the input rows'
    fingerprint, the task's fields, the tokenizer, the settings and the source of this module and of
    `hf_aux.tasks.arrow_encoding` (a code change makes new files). Deterministic across processes, unlike datasets'
    default hash of the mapped function, which pickles the tokenizer whose state changes as it is used (and is slow
    for a large vocabulary: docs/tasks.md)."""
    from datasets.fingerprint import Hasher

    spec = json.dumps(task.to_dict(), sort_keys=True, default=str)
    return Hasher.hash([dataset._fingerprint, spec, tokenizer_fingerprint(tokenizer), sorted(settings.items()),
                        _tokenize_source_hash()])


_TOKENIZER_HASHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of what the tokenizer does to text: its full definition (vocabulary, normaliser, pre-tokeniser,
    post-processor; not the truncation and padding it was last called with, which each call sets again), class,
    special tokens and sides. Kept per tokenizer object while its size, special tokens and sides stay the same."""
    signature = (len(tokenizer), tokenizer.padding_side, tokenizer.truncation_side, tuple(tokenizer.all_special_ids))
    known = _TOKENIZER_HASHES.get(tokenizer)
    if known is not None and known[0] == signature:
        return known[1]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("truncation", None), state.pop("padding", None)
        definition = json.dumps(state, sort_keys=True)
    else:
        definition = json.dumps(sorted(tokenizer.get_vocab().items()))
    described = [type(tokenizer).__name__, definition, signature, str(tokenizer.special_tokens_map)]
    digest = hashlib.sha256(json.dumps(described, default=str).encode()).hexdigest()
    _TOKENIZER_HASHES[tokenizer] = (signature, digest)
    return digest


@functools.cache
def _tokenize_source_hash() -> str:
    try:
        source = inspect.getsource(sys.modules[__name__]) + inspect.getsource(arrow_encoding)
        return hashlib.sha256(source.encode()).hexdigest()
    except OSError:  # installed without its sources: the package version stands for the code
        from importlib.metadata import version

        return f"hf_aux {version('hf_aux')}"


def _first_short_choice_row(dataset, column: str) -> tuple[int, int] | None:
    """(row, number of choices) of the first row of a multiple-choice split with fewer than 2 choices, else None;
    counted in Arrow, without reading the choices into Python."""
    import pyarrow.compute as pc

    from .column_checks import arrow_column

    sizes = pc.list_value_length(arrow_column(dataset, column)).fill_null(0)
    short = pc.less(sizes, 2)
    if not pc.any(short).as_py():
        return None
    row = pc.index(short, True).as_py()
    return row, sizes[row].as_py()


def _all_strings(*columns) -> bool:
    """Every cell of every column a str (anything else goes to the tokenizer's call, which words the error)."""
    return all(isinstance(cell, str) for column in columns for cell in column)


def first_subtoken_labels(word_ids: list[int | None], tags: list[int]) -> list[int]:
    """One label per sub-token from one tag per word: the word's tag on its first sub-token, -100 on its later
    sub-tokens and on special tokens (word id None). `word_ids`: a fast tokenizer's `word_ids()` of one row."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(-100 if word is None or word == previous else tags[word])
        previous = word
    return labels


class TokenizedTask:
    """A task's splits, each tokenised once, on first use: `tokenized["train"]` is the tokenised train split;
    `raw` holds the untokenised `DatasetDict` (QA and seq2seq evaluation map predictions back to it)."""

    def __init__(self, task, raw, tokenizer: PreTrainedTokenizerBase, **tokenize_kwargs):
        self.task, self.raw, self.tokenizer = task, raw, tokenizer
        self.tokenize_kwargs = tokenize_kwargs
        self._cache = {}

    def __contains__(self, split: str) -> bool:
        return split in self.raw

    def __getitem__(self, split: str):
        if split not in self._cache:
            if split not in self.raw:
                raise KeyError(f"task '{self.task.name}' has no {split!r} split (has {list(self.raw)})")
            self._cache[split] = tokenize_task(self.task, self.raw[split], self.tokenizer, **self.tokenize_kwargs)
        return self._cache[split]


# --------------------------------------------------------------------------------------------------------------
# Collation: a batch belongs to one task and is padded for that task's kind
# --------------------------------------------------------------------------------------------------------------


@dataclass
class MultiTaskCollator:
    """Pads a list of tokenised features of ONE task (rows from `tokenize_task`) into model inputs.

    Adds `task_ids` (LongTensor [batch], the task's index in `task_names`, the order of the model's heads) and
    `task`, its name (a string: Trainer moves tensors to the device, so a trainer or the model reads the task from
    it without a host sync; MultiTaskModel.forward takes either).
    multiple_choice: input_ids [batch, choices, length] with `choice_mask` [batch, choices] (False where an
    example has fewer choices than the widest one). seq2seq and token_classification: labels padded with -100.
    Columns that are not model inputs (QA offsets, example indices) are dropped.
    """

    tokenizer: PreTrainedTokenizerBase
    task_names: list[str]
    pad_to_multiple_of: int | None = None

    def __post_init__(self):
        self.task_index = {name: i for i, name in enumerate(self.task_names)}

    def __call__(self, features):
        names = {f["task_name"] for f in features}
        if len(names) != 1:
            raise ValueError(f"a batch must belong to one task; got rows of {sorted(names)}")
        name = names.pop()
        if name not in self.task_index:
            raise ValueError(f"task '{name}': field 'task_name': not one of the model's tasks {self.task_names}")
        first = features[0]
        if isinstance(first["input_ids"][0], list):
            few = next((f for f in features if len(f["input_ids"]) < 2), None)
            if few is not None:  # MUPPET eq. 1 divides its loss by log n (scale_losses)
                raise ValueError(f"task '{name}': field 'choices': an example has {len(few['input_ids'])} choice(s); "
                                 "multiple choice needs at least 2")
            batch = self._pad_choices(features)
        else:
            inputs = [{k: f[k] for k in MODEL_INPUT_KEYS if k in f} for f in features]
            batch = dict(self.tokenizer.pad(inputs, pad_to_multiple_of=self.pad_to_multiple_of, return_tensors="pt"))
            if "labels" in first and isinstance(first["labels"], list):  # seq2seq targets, per-token tags
                # per-token tags (one label per input token) stay aligned with the padded inputs
                aligned = all(len(f["labels"]) == len(f["input_ids"]) for f in features)
                batch["labels"] = _pad_sequences([f["labels"] for f in features], -100,
                                                 batch["input_ids"].shape[1] if aligned else 0)
            elif "labels" in first:
                dtype = torch.float32 if isinstance(first["labels"], float) else torch.long
                batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=dtype)
            for key in ("start_positions", "end_positions"):
                if key in first:
                    batch[key] = torch.tensor([f[key] for f in features], dtype=torch.long)
        batch["task_ids"] = torch.full((len(features),), self.task_index[name], dtype=torch.long)
        batch["task"] = name
        return batch

    def _pad_choices(self, features):
        num_choices = max(len(f["input_ids"]) for f in features)
        flat, choice_mask = [], []
        for f in features:
            count = len(f["input_ids"])
            rows = [{k: f[k][c] for k in MODEL_INPUT_KEYS if k in f} for c in range(count)]
            # missing choices repeat the first one; choice_mask removes them from the ranking
            flat += rows + [rows[0]] * (num_choices - count)
            choice_mask.append([True] * count + [False] * (num_choices - count))
        padded = self.tokenizer.pad(flat, pad_to_multiple_of=self.pad_to_multiple_of, return_tensors="pt")
        batch = {k: v.view(len(features), num_choices, -1) for k, v in padded.items()}
        batch["choice_mask"] = torch.tensor(choice_mask, dtype=torch.bool)
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
        return batch


def _pad_sequences(sequences, value: int, width: int = 0) -> torch.Tensor:
    longest = max(width, *(len(s) for s in sequences))
    return torch.tensor([list(s) + [value] * (longest - len(s)) for s in sequences], dtype=torch.long)
