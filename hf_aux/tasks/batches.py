"""Batches several methods draw: `BatchStream` (endless shuffled batches of one dataset, TARTAN's auxiliary and
meta streams, MUPPET's end-task-aware meta step), `fixed_share` (the low-resource rows `hf-aux finetune` and
MUPPET's end task read) and the `host_side()` marker of draws that read host tensors. MUPPET's task sampler is
its own (hf_aux.muppet.batches).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

_HOST_SIDE = [0]  # depth of host_side() blocks


@contextlib.contextmanager
def host_side():
    """Marks code that reads tensors which live on the host on every device (a CPU `torch.Generator`'s draws, a
    data sampler's order): no read there waits for an accelerator, and benchmarks/host_reads.py does not count it.
    Only for CPU tensors: the marker is a statement about the code inside it, checked by review."""
    _HOST_SIDE[0] += 1
    try:
        yield
    finally:
        _HOST_SIDE[0] -= 1


def in_host_side() -> bool:
    """Whether a `host_side()` block is running."""
    return _HOST_SIDE[0] > 0


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
            with host_side():  # a CPU generator's order, on every device
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


def __getattr__(name: str):
    from .._moved import moved_name  # MUPPET's sampler moved to hf_aux.muppet.batches (issue #62)

    return moved_name(__name__, name)
