"""Task-homogeneous micro-batches, arranged so that one optimizer update spans several tasks (MUPPET §3.2, §5.2).

A `TaskBatchSampler` samples batches over the concatenation of the tasks' train splits (`MultiTaskDataset`). Every
batch holds rows of ONE task; an update consumes `sub_batches_per_update` consecutive batches of its stream, with
Trainer `gradient_accumulation_steps * world_size` (accelerate hands batch k to rank k % world_size).

One epoch, a pure function of (seed, epoch):
1. counts: task i gets c_i = ceil(n_i / batch_size) batches (§3.4), or with `temperature` T != 1 c_i proportional
   to n_i ** (1 / T), same total. Rows are reshuffled every epoch; the last batch is completed from the task's next
   permutation, so no batch is short and equal sub-batch weights are equal row weights within a task.
2. order, by `strategy`: `heterogeneous` (§3.2) spreads each task's batches evenly (batch k of task i at
   (k + u) / c_i, u ~ U(0, 1)), and an update that still has a single task swaps a batch with a nearby update;
   `batch_homogeneous` (§5.2) makes updates of G = `sub_batches_per_update` batches of one task, shuffled, with the
   same counts: each task's c_i mod G left-over batches are pooled and cut into at most as many mixed updates as
   there are tasks (only the epoch's last update can be short); `dataset_homogeneous` (§5.2) goes one dataset after
   another, in mixture order.
Resuming mid-epoch needs no extra state: Trainer skips the batches already seen and the order is recomputed from
(seed, epoch); `state_dict()` records what the order depends on so a resume can check it did not change. The
meta-learned LM objective's support/query draw is its own (hf_aux.meta_lm.support_query).
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
    if temperature == 1.0:
        return natural
    weights = np.asarray(sizes, dtype=np.float64) ** (1.0 / temperature)
    shares = weights / weights.sum() * sum(natural)
    return [max(1, int(round(s))) for s in shares]


class TaskBatchSampler(torch.utils.data.Sampler):
    """Yields lists of row indices into a `MultiTaskDataset`, one task per list (see the module docstring)."""

    def __init__(self, task_sizes: list[int], batch_size: int, sub_batches_per_update: int,
                 strategy: str = "heterogeneous", temperature: float = 1.0, seed: int = 0):
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
        self.batch_size, self.group = batch_size, sub_batches_per_update
        self.strategy, self.temperature, self.seed = strategy, temperature, seed
        self.counts = batch_counts(self.task_sizes, batch_size, temperature)  # the same for every strategy
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return sum(self.counts)

    def state_dict(self) -> dict:
        return {"task_sizes": self.task_sizes, "batch_size": self.batch_size, "sub_batches_per_update": self.group,
                "strategy": self.strategy, "temperature": self.temperature, "seed": self.seed, "epoch": self.epoch}

    def __iter__(self):
        for task, rows in self.epoch_plan(self.epoch):
            yield (self.offsets[task] + rows).tolist()

    # ----------------------------------------------------------------------------------------------------------
    def epoch_plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        """[(task index, local row indices [batch_size])] for one epoch, in stream order."""
        rng = np.random.default_rng([self.seed, epoch])
        batches = []  # per task: [c_i, B] local rows
        for size, count in zip(self.task_sizes, self.counts):
            needed = count * self.batch_size
            stream = np.concatenate([rng.permutation(size) for _ in range(math.ceil(needed / size))])[:needed]
            batches.append(stream.reshape(count, self.batch_size))
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


def _nearest_first(g: int, count: int):
    """The indices of [0, count) other than g by distance from g, the lower first at equal distance (g-1, g+1, g-2,
    ...): what sorting them by (|h - g|, h) gives, without sorting all of them for every update that needs a donor
    (a 50 x 100k-row mixture has 300k updates)."""
    for distance in range(1, max(g, count - 1 - g) + 1):
        if g - distance >= 0:
            yield g - distance
        if g + distance < count:
            yield g + distance


class BatchStream:
    """Endless shuffled batches over `dataset` (TARTAN's auxiliary and meta streams, MUPPET's end-task-aware
    meta step). Everything is a function of (seed, position): epoch e's order is
    randperm(seed, e), the collate function gets a generator seeded by (seed, position). Under DDP the ranks share
    one stream, rank r taking positions r, r + world_size, ... (draw d is position d * world_size + r), as
    accelerate deals the end task's batches: so the ranks never draw the same batch, and N processes draw exactly
    what one process with N times the gradient accumulation draws. The whole state is the number of draws (the
    same on every rank), restored on resume. `collate(features, generator) -> dict of tensors`."""

    def __init__(self, dataset, batch_size: int, collate: Callable, seed: int, rank: int = 0, world_size: int = 1):
        if len(dataset) == 0:
            raise ValueError("a batch stream got an empty dataset")
        self.dataset, self.batch_size, self.collate, self.seed = dataset, batch_size, collate, seed
        self.rank, self.world_size = rank, world_size
        self.draws = 0
        self._order = (None, None)

    @property
    def batches_per_epoch(self) -> int:
        return max(1, len(self.dataset) // self.batch_size)  # drop the ragged last batch (all batches equal)

    def next(self) -> dict:
        position = self.draws * self.world_size + self.rank
        epoch, index = divmod(position, self.batches_per_epoch)
        if self._order[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(len(self.dataset), generator=generator).tolist())
        rows = self._order[1][index * self.batch_size: (index + 1) * self.batch_size]
        generator = torch.Generator().manual_seed(self.seed * 7_919 + position + 1)
        self.draws += 1
        return self.collate([self.dataset[i] for i in rows], generator)


def fixed_share(rows, fraction: float, seed: int):
    """The first `fraction` of one fixed shuffle (`seed`) of a `datasets.Dataset` (at least one row): smaller shares
    are subsets of larger ones. `hf-aux finetune --train_fraction` and the end task of `hf-aux muppet
    --task_weighting meta` select rows with it, so both read the same low-resource rows."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction {fraction} not in (0, 1]")
    if fraction == 1.0:
        return rows
    keep = max(1, round(fraction * len(rows)))
    return rows.shuffle(seed=seed).select(range(keep))
