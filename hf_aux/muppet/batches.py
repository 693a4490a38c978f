"""Task-homogeneous micro-batches, arranged so that one optimizer update spans several tasks (MUPPET §3.2, §5.2).

A `TaskBatchSampler` yields batches of ONE task each over the concatenated train splits (`MultiTaskDataset`); an
update consumes `sub_batches_per_update` = Trainer's `gradient_accumulation_steps * world_size` consecutive ones
(accelerate hands batch k to rank k % world_size). One epoch is a pure function of (seed, epoch):
1. batches per task: c_i = ceil(n_i / batch_size) (§3.4), or with temperature T != 1 proportional to n_i ** (1/T),
   same total; rows reshuffled every epoch, a last batch completed from the next permutation (no short batch).
   With a token budget (`max_tokens`, fairseq's --max-tokens) a task's rows per epoch follow the same rule (every
   row once at T = 1), spread over length buckets (`bucket_edges`) in proportion to their sizes, laid out shortest
   first and cut into sub-batches of consecutive rows, as many as fit in `max_tokens` padded tokens (rows x longest
   edge x choices), at most `batch_size`; the cut points are fixed, the rows in them reshuffled every epoch, and
   the sub-batches vary in size (`batch_size` is None, so accelerate deals them to ranks as they come).
2. order, by `strategy`: `heterogeneous` (§3.2) spreads each task's batches evenly (batch k of task i at
   (k + u) / c_i) and an update still of a single task swaps a batch with a nearby update; `batch_homogeneous`
   (§5.2) makes updates of G batches of one task, the c_i mod G left-overs pooled into mixed updates;
   `dataset_homogeneous` (§5.2) goes one dataset after another.
Resuming mid-epoch needs no extra state: Trainer skips the batches already seen and the order is recomputed;
`state_dict()` records what the order depends on, so a resume can check it did not change (the meta-LM's draw:
hf_aux.meta_lm.support_query; the endless streams of TARTAN and MUPPET's meta step: hf_aux.tasks.batches).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from ..errors import UserInputError

STRATEGIES = ("heterogeneous", "batch_homogeneous", "dataset_homogeneous")


class MultiTaskDataset(torch.utils.data.Dataset):
    """The concatenation of several tasks' tokenised splits (rows keep their `task_name`). Row `offsets[i] + j` is
    row j of task i. Unlike `datasets.concatenate_datasets`, the tasks may have different columns."""

    def __init__(self, datasets_by_task: dict):
        if not datasets_by_task:
            raise ValueError("MultiTaskDataset: field 'datasets_by_task': no tasks given")
        self.task_names = list(datasets_by_task)
        self.datasets = [datasets_by_task[name] for name in self.task_names]
        for name, data in zip(self.task_names, self.datasets):
            if len(data) == 0:
                raise UserInputError(f"task '{name}': field 'train_split': the tokenised train split is empty")
        self.sizes = [len(d) for d in self.datasets]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int):
        task = int(np.searchsorted(self.offsets, index, side="right") - 1)
        return self.datasets[task][int(index - self.offsets[task])]

    def __getitems__(self, indices: list[int]):  # one task per batch: one Arrow read instead of B
        task = int(np.searchsorted(self.offsets, indices[0], side="right") - 1)
        local = [int(i - self.offsets[task]) for i in indices]
        data = self.datasets[task]
        if not hasattr(data, "column_names") or min(local) < 0 or max(local) >= self.sizes[task]:
            return [self[i] for i in indices]  # not a datasets.Dataset, or rows of several tasks
        columns = data[local]  # a datasets.Dataset returns {column: values}
        return [dict(zip(columns, values)) for values in zip(*columns.values())]


def batch_counts(sizes: list[int], batch_size: int, temperature: float = 1.0) -> list[int]:
    """Batches per task per epoch: ceil(n_i / B) at T = 1 (natural size); else proportional to n_i ** (1/T) with
    the same total, at least one each."""
    natural = [math.ceil(n / batch_size) for n in sizes]
    return natural if temperature == 1.0 else _tempered_shares(sizes, temperature, sum(natural))


def _tempered_shares(sizes: list[int], temperature: float, total: int) -> list[int]:
    """`total` split in proportion to n_i ** (1/T), rounded, at least one each."""
    weights = np.asarray(sizes, dtype=np.float64) ** (1.0 / temperature)
    return [max(1, int(round(s))) for s in weights / weights.sum() * total]


class TaskBatchSampler(torch.utils.data.Sampler):
    """Yields lists of row indices into a `MultiTaskDataset`, one task per list (see the module docstring)."""

    def __init__(self, task_sizes: list[int], batch_size: int, sub_batches_per_update: int,
                 strategy: str = "heterogeneous", temperature: float = 1.0, seed: int = 0,
                 max_tokens: int | None = None, row_lengths: list | None = None, task_names: list[str] | None = None):
        if not task_sizes or any(int(n) < 1 for n in task_sizes):
            raise ValueError(f"TaskBatchSampler: field 'task_sizes': every task needs at least one row, got {task_sizes}")
        if batch_size < 1:
            raise ValueError(f"TaskBatchSampler: field 'batch_size': must be >= 1, got {batch_size}")
        if sub_batches_per_update < 1:
            raise ValueError(f"TaskBatchSampler: field 'sub_batches_per_update': must be >= 1, got {sub_batches_per_update}")
        if strategy not in STRATEGIES:
            raise ValueError(f"TaskBatchSampler: field 'strategy': {strategy!r} is not one of {list(STRATEGIES)}")
        if not temperature > 0:
            raise ValueError(f"TaskBatchSampler: field 'temperature': must be > 0, got {temperature}")
        self.task_sizes = [int(n) for n in task_sizes]
        self.offsets = np.concatenate([[0], np.cumsum(self.task_sizes)]).astype(np.int64)
        self.max_rows, self.group = batch_size, sub_batches_per_update
        self.strategy, self.temperature, self.seed = strategy, temperature, seed
        self.max_tokens, self.budget = max_tokens, None
        if max_tokens is None:
            self.batch_size = batch_size
            self.counts = batch_counts(self.task_sizes, batch_size, temperature)  # the same for every strategy
        else:
            self.batch_size = None  # sub-batches of varying size
            self.budget = TokenBudget(row_lengths, self.task_sizes, max_tokens, batch_size, temperature, task_names)
            self.counts = self.budget.counts
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return sum(self.counts)

    def state_dict(self) -> dict:
        state = {"task_sizes": self.task_sizes, "batch_size": self.max_rows, "sub_batches_per_update": self.group,
                 "strategy": self.strategy, "temperature": self.temperature, "seed": self.seed,
                 "max_tokens_per_batch": self.max_tokens, "epoch": self.epoch}
        if self.budget is not None:  # the plan depends on every row's length too
            state["row_lengths_sha1"] = self.budget.digest
        return state

    def __iter__(self):
        for task, rows in self.epoch_plan(self.epoch):
            yield (self.offsets[task] + rows).tolist()

    # ----------------------------------------------------------------------------------------------------------
    def epoch_plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        """[(task index, local row indices)] for one epoch, in stream order."""
        rng = np.random.default_rng([self.seed, epoch])
        if self.budget is not None:
            batches = [self.budget.task_batches(task, rng) for task in range(len(self.counts))]
        else:  # per task: [c_i, B] local rows
            batches = [_repeated_permutations(rng, size, count * self.batch_size).reshape(count, self.batch_size)
                       for size, count in zip(self.task_sizes, self.counts)]
        if self.strategy == "dataset_homogeneous":
            order = [(t, k) for t, count in enumerate(self.counts) for k in range(count)]
        elif self.strategy == "batch_homogeneous":
            order = self._batch_homogeneous_order(rng)
        else:
            order = self._heterogeneous_order(rng)
        return [(t, batches[t][k]) for t, k in order]

    def _batch_homogeneous_order(self, rng: np.random.Generator) -> list[tuple[int, int]]:
        group = self.group
        updates = [[(t, k + j) for j in range(group)]  # each task's whole updates of G of its batches
                   for t, count in enumerate(self.counts) for k in range(0, count - count % group, group)]
        leftover = [(t, k) for t, count in enumerate(self.counts) for k in range(count - count % group, count)]
        leftover = [leftover[i] for i in rng.permutation(len(leftover))]
        pooled = [leftover[i:i + group] for i in range(0, len(leftover), group)]
        short = [pooled.pop()] if pooled and len(pooled[-1]) < group else []
        updates += pooled
        return [batch for i in rng.permutation(len(updates)) for batch in updates[i]] + [b for u in short for b in u]

    def _heterogeneous_order(self, rng: np.random.Generator) -> list[tuple[int, int]]:
        tasks = np.concatenate([np.full(c, t) for t, c in enumerate(self.counts)])
        index = np.concatenate([np.arange(c) for c in self.counts])
        positions = np.concatenate([(np.arange(c) + rng.random(c)) / c for c in self.counts])
        order = np.argsort(positions, kind="stable")
        tasks, index = tasks[order], index[order]
        if len(self.counts) > 1 and self.group > 1:
            self._spread_single_task_updates(tasks, index)
        return list(zip(tasks.tolist(), index.tolist()))

    def _spread_single_task_updates(self, tasks: np.ndarray, index: np.ndarray) -> None:
        """In place: every update (a window of `group` batches) that holds one task only trades its last batch with
        the nearest update that can give a batch of another task and still span two tasks afterwards."""
        group, total = self.group, len(tasks)
        starts = list(range(0, total, group))
        for g, start in enumerate(starts):
            window = slice(start, min(start + group, total))
            if window.stop - window.start < 2 or len(set(tasks[window].tolist())) > 1:
                continue
            own = int(tasks[window.start])
            mine = window.stop - 1
            for other in _nearest_first(g, len(starts)):
                lo, hi = starts[other], min(starts[other] + group, total)
                # the donor batch must be of another task, and what stays in its update must not all be `own`
                donor = next((j for j in range(lo, hi) if tasks[j] != own
                              and any(tasks[i] != own for i in range(lo, hi) if i != j)), None)
                if donor is not None:
                    tasks[[mine, donor]] = tasks[[donor, mine]]
                    index[[mine, donor]] = index[[donor, mine]]
                    break


def _repeated_permutations(rng: np.random.Generator, rows, needed: int) -> np.ndarray:
    """`needed` items of fresh permutations of `rows` (an int n: range(n)), one after another."""
    size = rows if isinstance(rows, int) else len(rows)
    return np.concatenate([rng.permutation(rows) for _ in range(math.ceil(needed / size))])[:needed]


def row_lengths(dataset) -> tuple[np.ndarray, int]:
    """Each row's token count (its longest choice for multiple choice) and the most sequences a row holds (its
    choices; 1 otherwise), read from the `input_ids` column (Arrow, without decoding rows where possible)."""
    if hasattr(dataset, "with_format"):
        import pyarrow.compute as pc

        column = dataset.with_format("arrow")["input_ids"].combine_chunks()
        outer = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(column)
        if not str(flat.type).startswith(("list", "large_list")):
            return outer.astype(np.int64), 1
        inner = pc.list_value_length(flat).to_numpy(zero_copy_only=False)
        starts = np.concatenate([[0], np.cumsum(outer)[:-1]]).astype(np.int64)
        return np.maximum.reduceat(inner, starts).astype(np.int64), int(outer.max())
    rows = [row["input_ids"] for row in dataset]
    if rows and isinstance(rows[0][0], list):
        return np.array([max(len(c) for c in r) for r in rows], dtype=np.int64), max(len(r) for r in rows)
    return np.array([len(r) for r in rows], dtype=np.int64), 1


def bucket_edges(lengths: np.ndarray) -> np.ndarray:
    """The padded length of each row's bucket: lengths rounded up to a step of 1/8 of their power of two (1 below
    16: 8, 9, ..., 16, 18, ..., 32, 36, ..., 64, 72, ...), so a row pads by at most 1/8 of its length (about
    1/16 on average) whatever the scale."""
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    step = 2 ** np.maximum(np.floor(np.log2(lengths)).astype(np.int64) - 3, 0)
    return -(-lengths // step) * step


class TokenBudget:
    """The fixed part of a token-budget plan (module docstring): per task, its buckets' local rows and rows per
    epoch, and where its sub-batches start; `task_batches` draws one epoch's sub-batches of a task."""

    def __init__(self, lengths_by_task: list, sizes: list[int], max_tokens: int, max_rows: int,
                 temperature: float = 1.0, task_names: list[str] | None = None):
        if lengths_by_task is None or len(lengths_by_task) != len(sizes):
            raise ValueError("TaskBatchSampler: field 'row_lengths': a token budget needs (lengths, choices) per task")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"TaskBatchSampler: field 'max_tokens': must be a positive integer, got {max_tokens!r}")
        names = task_names or [f"#{i}" for i in range(len(sizes))]
        digest = hashlib.sha1()
        epoch_rows = list(sizes) if temperature == 1.0 else _tempered_shares(sizes, temperature, sum(sizes))
        self.buckets, self.bounds, self.counts = [], [], []
        for name, (lengths, choices), size, rows in zip(names, lengths_by_task, sizes, epoch_rows):
            lengths = np.asarray(lengths, dtype=np.int64)
            if len(lengths) != size:
                raise ValueError(f"task '{name}': field 'row_lengths': {len(lengths)} lengths for {size} rows")
            digest.update(lengths.tobytes() + int(choices).to_bytes(4, "little"))
            edges = np.minimum(bucket_edges(lengths), lengths.max())  # no edge past the longest row
            widest = int(edges.max()) * int(choices)
            if widest > max_tokens:
                raise UserInputError(
                    f"task '{name}': field 'max_tokens_per_batch': {max_tokens} tokens do not hold its longest row "
                    f"({int(lengths.max())} tokens{f' x {choices} choices' if choices > 1 else ''}); give at least "
                    f"{widest} or a smaller --max_seq_length")
            values, inverse = np.unique(edges, return_inverse=True)
            members = [np.flatnonzero(inverse == b) for b in range(len(values))]
            takes = _apportion(rows, [len(m) for m in members])
            self.buckets.append([(m, take) for m, take in zip(members, takes) if take > 0])
            sequence = np.repeat(values, takes)  # the epoch's rows' padded lengths, ascending: fixed per epoch
            self.bounds.append(_pack(sequence * int(choices), max_tokens, max_rows))
            self.counts.append(len(self.bounds[-1]) - 1)
        self.digest = digest.hexdigest()
        self.mean_rows = [max(1, round(rows / count)) for rows, count in zip(epoch_rows, self.counts)]

    def task_batches(self, task: int, rng: np.random.Generator) -> list[np.ndarray]:
        """One epoch's sub-batches of `task` (local row indices): each bucket's rows drawn afresh, the buckets
        laid out shortest first and cut at the fixed bounds, the sub-batches shuffled."""
        stream = np.concatenate([_repeated_permutations(rng, members, take) for members, take in self.buckets[task]])
        bounds = self.bounds[task]
        batches = [stream[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
        return [batches[i] for i in rng.permutation(len(batches))]


def _pack(costs: np.ndarray, max_tokens: int, max_rows: int) -> list[int]:
    """Bounds of consecutive sub-batches over rows of ascending padded cost (tokens per row), each as long as
    rows x its last row's cost <= max_tokens and rows <= max_rows allow: [0, b1, ..., len(costs)]."""
    bounds, start = [0], 0
    for i, cost in enumerate(costs.tolist()):
        if i > start and ((i - start + 1) * cost > max_tokens or i - start == max_rows):
            bounds.append(i)
            start = i
    return bounds + [len(costs)]


def _apportion(total: int, sizes: list[int]) -> list[int]:
    """`total` split in proportion to `sizes` by largest remainders (ties to the earlier), summing to `total`."""
    exact = np.asarray(sizes, dtype=np.float64) * total / sum(sizes)
    shares = np.floor(exact).astype(np.int64)
    for i in np.argsort(-(exact - shares), kind="stable")[: total - int(shares.sum())]:
        shares[i] += 1
    return shares.tolist()


def padded_share(batches, lengths_by_task) -> float:
    """The share of padded tokens in `[(task, local rows)]` batches padded to their longest row (as the collator
    pads): 1 - real tokens / computed tokens. `lengths_by_task`: (lengths, choices) per task; for multiple
    choice, a row's shorter choices count as real tokens (an upper bound on the real share)."""
    real = computed = 0
    for task, rows in batches:
        lengths, choices = lengths_by_task[task]
        chosen = np.asarray(lengths)[np.asarray(rows)]
        real += int(chosen.sum()) * choices
        computed += int(chosen.max()) * len(chosen) * choices
    return 1.0 - real / computed if computed else 0.0


def _nearest_first(g: int, count: int):
    """The indices of [0, count) other than g by distance from g, the lower first at equal distance (g-1, g+1, g-2,
    ...): what sorting them by (|h - g|, h) gives, without sorting all of them for every update that needs a donor
    (a 50 x 100k-row mixture has 300k updates)."""
    for distance in range(1, max(g, count - 1 - g) + 1):
        if g - distance >= 0:
            yield g - distance
        if g + distance < count:
            yield g + distance
