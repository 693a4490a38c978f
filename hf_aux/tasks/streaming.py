"""Unlabelled corpora read as a stream (datasets' `IterableDataset`, as run_mlm.py's --streaming), tokenised and
grouped into MLM blocks on the fly (`stream_mlm_blocks`: the blocks and batches of `group_texts_for_mlm`), in bounded
memory, with an exact resume.

`ResumableStream`, the torch `IterableDataset` a trainer reads, keeps the source's `state_dict()` at the last
positions it yielded, so that a checkpoint stores the position of exactly the blocks training consumed (not those
the data loader fetched ahead): `hf_aux.runtime.trainer.AuxTrainer` saves it in every checkpoint (`STATE_FILE`),
restores it on resume, and turns off Trainer's skipping of seen batches; this module names no Trainer internal.
`StreamBatches` is the streamed `hf_aux.tasks.batches.BatchStream`, for batches a trainer draws itself (TARTAN's
auxiliary MLM tasks, the meta-learned LM objective's support and query batches).

The stream is read in order: a shuffle buffer cannot be restored exactly, so there is none. Only the main process
reads a train dataset's stream (accelerate dispatches its batches); every process reads a `StreamBatches` and keeps
its own batches.
"""

from __future__ import annotations

import collections
import copy

import torch

from ..errors import UserInputError

STATE_FILE = "stream_state.json"
_EMPTY_PASS = "streaming: a whole pass over a streamed corpus gave no example (no text, or fewer tokens than one block)"


def stream_corpus(text_column: str, where: str, *, train_file: str | list[str] | None = None,
                  dataset_name: str | None = None, dataset_config: str | None = None, **load_kwargs):
    """The train text of local files (one path or a list, one format; each checked as
    `hf_aux.tasks.validation.check_data_file` checks it, line by line, without loading it) or of a Hub dataset, as a
    streamed `datasets.IterableDataset` holding only `text_column`. `where` names the owner in errors (e.g.
    "DataTrainingArguments: field 'train_file'")."""
    import datasets

    from .validation import check_data_file

    if train_file is not None:
        files = [train_file] if isinstance(train_file, str) else list(train_file)
        builders = {check_data_file(str(path), where) for path in files}
        if len(builders) != 1:
            raise UserInputError(f"{where}: the files mix formats {sorted(builders)} ({files}); use one format")
        stream = datasets.load_dataset(builders.pop(), data_files={"train": files}, split="train", streaming=True,
                                       **load_kwargs)
    else:
        stream = datasets.load_dataset(dataset_name, dataset_config, split="train", streaming=True, **load_kwargs)
    columns = stream.column_names
    if columns is not None and text_column not in columns:
        raise UserInputError(f"{where}: column {text_column!r} not in the train text; columns are {columns} (name the "
                             "column that holds the text)")
    return stream.select_columns([text_column])


def stream_mlm_blocks(stream, tokenizer, text_column: str = "text", block_size: int = 128):
    """`group_texts_for_mlm` over a streamed corpus: `input_ids` / `attention_mask` blocks of `block_size` tokens,
    made on the fly. A document that is not text (None, a number) is an error naming its row when it is read."""
    from .data import mlm_block_function

    make_blocks = mlm_block_function(tokenizer, text_column, block_size)

    def checked_blocks(batch, indices):
        for row, text in zip(indices, batch[text_column]):
            if not isinstance(text, str):
                raise UserInputError(f"MLM text: field 'text_column': train row {row + 1}: column {text_column!r} holds "
                                     f"{type(text).__name__} {text!r}, not text; fill the cell or drop the row")
        return make_blocks(batch)

    return stream.map(checked_blocks, batched=True, batch_size=1000, with_indices=True, remove_columns=[text_column])


def stream_train_text(owner: str, text_column: str, *, train_file=None, dataset_name: str | None = None,
                      dataset_config: str | None = None, **load_kwargs):
    """`stream_corpus` of a command's --train_file (one path or a list) or --dataset_name, its errors naming
    `owner`'s field (e.g. owner "DataTrainingArguments"), a Hub failure explained
    (`hf_aux.errors.explain_hub_errors`)."""
    import contextlib

    from ..errors import explain_hub_errors

    if train_file is not None:
        where, hub_errors = f"{owner}: field 'train_file'", contextlib.nullcontext()
    else:
        where, hub_errors = f"{owner}: field 'dataset_name'", explain_hub_errors(owner, "dataset_name", dataset_name)
    with hub_errors:
        return stream_corpus(text_column, where, train_file=train_file, dataset_name=dataset_name,
                             dataset_config=dataset_config, **load_kwargs)


def resumable_mlm_blocks(stream, tokenizer, text_column: str = "text", block_size: int = 128,
                         max_blocks: int | None = None) -> "ResumableStream":
    """The train blocks of a streamed corpus (`stream_mlm_blocks`, at most `max_blocks`), made as training reads
    them, resumable at a checkpoint's position: a trainer's train dataset."""
    blocks = stream_mlm_blocks(stream, tokenizer, text_column, block_size)
    return ResumableStream(blocks if max_blocks is None else blocks.take(max_blocks))


class ResumableStream(torch.utils.data.IterableDataset):
    """The examples of a `datasets.IterableDataset`, pass after pass without end, counted, with the source's
    position after each of the last `keep` examples yielded (`state_at`). `load_state_dict` (before iterating)
    starts the next pass there.

    Endless, so that every optimizer step reads whole batches and the examples a checkpoint's steps consumed are
    their count times the batch (`consumed_examples`): a pass that ended inside a batch would give a short batch
    (Trainer then starts the next epoch), after which that count no longer matches the stream's position. A batch
    may hold the end of one pass and the start of the next; `--max_steps` ends training (--streaming requires it)."""

    def __init__(self, source, keep: int = 8192):
        self.source, self.keep = source, keep
        self.yielded = 0  # examples yielded since the start of training (over passes and resumes)
        self._states = collections.deque(maxlen=keep)  # (yielded, source state after them)
        self._resume = None

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise ValueError("streaming: field 'dataloader_num_workers': a streamed corpus is read in the main process "
                             "(its position is saved with checkpoints); set dataloader_num_workers to 0")
        resume, self._resume = self._resume, None
        if resume is not None:
            self.source.load_state_dict(resume["source"])
            self.yielded = resume["yielded"]
        self._states.append((self.yielded, self.source.state_dict() if resume is None else resume["source"]))
        while True:  # pass after pass: the data loader never sees a pass end (training ends at max_steps)
            start = self.yielded
            for example in self.source:
                if resume is not None:
                    # datasets starts EVERY pass at a loaded state; this pass has started there, the next ones start
                    # at the corpus' start (as the uninterrupted run's passes do)
                    self.source.load_state_dict(None)
                    resume = None
                self.yielded += 1
                self._states.append((self.yielded, self.source.state_dict()))
                yield example
            if resume is not None:  # resumed at the very end of a pass: nothing was left of it
                self.source.load_state_dict(None)
                resume = None
            elif self.yielded == start:
                raise ValueError(_EMPTY_PASS)

    def state_at(self, consumed: int) -> dict:
        """The state after the first `consumed` examples: `{"yielded": consumed, "source": <source state>}`."""
        for count, state in reversed(self._states):
            if count == consumed:
                return {"yielded": consumed, "source": state}
        raise ValueError(f"streaming: the position after {consumed} examples is no longer kept (the last "
                         f"{len(self._states)} positions are, up to {self.yielded}); the data loader read further "
                         f"ahead than keep={self.keep} examples")

    def load_state_dict(self, state: dict) -> None:
        self._resume = state


class StreamBatches:
    """Endless batches of a streamed dataset (a `datasets.IterableDataset`), read in order, pass after pass: the
    streamed counterpart of `hf_aux.tasks.batches.BatchStream`, with its interface (`next()`, `draws`) and its
    arrangement over processes and collate seeds. Draw d of rank r is batch d * world_size + r of the stream (every
    rank reads the world_size batches of a draw and keeps its own, so N processes draw what one process with N times
    the accumulation draws), and `collate(rows, generator)` gets a generator seeded by (seed, that batch's position).
    Unlike BatchStream's, a batch may span the end of one pass and the start of the next (no ragged batch is
    dropped, nothing is shuffled).

    It reads through a copy of `source` of its own (a datasets stream tracks the position of one iteration only),
    so several readers of one corpus do not move each other. `state_dict()`: the draws and the source's position
    after them (JSON, for a checkpoint); `load_state_dict` continues there."""

    def __init__(self, source, batch_size: int, collate, seed: int, rank: int = 0, world_size: int = 1):
        self.source, self.batch_size, self.collate, self.seed = source, batch_size, collate, seed
        self.rank, self.world_size = rank, world_size
        self.load_state_dict({"draws": 0, "stream": None})  # the corpus' start

    def next(self) -> dict:
        batches = [[self._read() for _ in range(self.batch_size)] for _ in range(self.world_size)]
        position = self.draws * self.world_size + self.rank
        generator = torch.Generator().manual_seed(self.seed * 7_919 + position + 1)
        self.draws += 1
        self._position = self._reader.state_at(self._reader.yielded)
        return self.collate(batches[self.rank], generator)

    def state_dict(self) -> dict:
        return {"draws": self.draws, "stream": self._position}

    def load_state_dict(self, state: dict) -> None:
        self._reader = ResumableStream(copy.deepcopy(self.source), keep=1)
        if state["stream"] is not None:
            self._reader.load_state_dict(state["stream"])
        # _position: the reader's state after the last draw (None: the corpus' start); _examples: its current pass
        self.draws, self._position, self._examples = state["draws"], state["stream"], None

    def _read(self):
        for _ in range(2):  # a pass resumed at its very end holds nothing; the next one starts at the corpus' start
            if self._examples is None:
                self._examples = iter(self._reader)
            example = next(self._examples, None)
            if example is not None:
                return example
            self._examples = None
        raise ValueError(_EMPTY_PASS)


def is_stream(data) -> bool:
    """Whether `data` is read as a stream (a `datasets.IterableDataset` or a `ResumableStream`), not by index."""
    import datasets

    return isinstance(data, (datasets.IterableDataset, ResumableStream))


def __getattr__(name: str):
    from .._moved import moved_name  # names moved out of this module (issue #62)

    return moved_name(__name__, name)
