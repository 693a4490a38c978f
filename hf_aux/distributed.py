"""What the trainers share to behave the same on one process and on several (DDP).

- `micro_batch_seed`: a seed for the random draws of one micro-batch (MLM masks, Gumbel noise, auxiliary-batch
  shuffles), a function of the micro-batch's place in the global stream only. Accelerate hands batch k of the
  dataloader's stream to rank k % world_size, so on rank r, at optimizer step s and accumulation micro-step m, the
  batch is number g = (s * gradient_accumulation_steps + m) * world_size + r. Seeding by g gives a batch the same
  draws whether it is trained on rank 0 of two processes or as the second micro-step of one process with twice the
  accumulation, gives different ranks different draws (not the same masks from identically seeded RNGs), and
  makes resume exact without saving any generator: (s, m) is all it needs.
- `seeded_rng`: torch's RNG seeded for one block and restored afterwards.
- `parameter_sharding`: whether FSDP / DeepSpeed (ZeRO-3) will shard the model, for trainers that must refuse it.
"""

from __future__ import annotations

import contextlib

from typing import NamedTuple

import numpy as np
import torch
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled


def global_micro_batch_index(step: int, micro_step: int, accumulation: int, rank: int, world_size: int) -> int:
    """g = (step * accumulation + micro_step) * world_size + rank (see the module docstring)."""
    return (int(step) * int(accumulation) + int(micro_step)) * int(world_size) + int(rank)


def micro_batch_seed(seed: int, index: int) -> int:
    """A 63-bit seed for micro-batch `index` of a run seeded with `seed` (SeedSequence mixing, so neighbouring
    indices or seeds give unrelated streams)."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint64)[0] >> 1)


class MicroBatchCounter:
    """Counts the micro-steps of the current optimizer step, from `Trainer.state.global_step` alone, so it needs no
    checkpointing: call `index(trainer)` once per training micro-batch."""

    def __init__(self):
        self._step, self._micro = None, 0

    def index(self, trainer) -> int:
        step = trainer.state.global_step
        if step != self._step:
            self._step, self._micro = step, 0
        args = trainer.args
        g = global_micro_batch_index(step, self._micro, args.gradient_accumulation_steps, args.process_index,
                                     args.world_size)
        self._micro += 1
        return g


@contextlib.contextmanager
def seeded_rng(seed: int, device: torch.device):
    """Within the block torch's global RNG (CPU and `device`) is seeded with `seed`; afterwards both are back where
    they were, so Trainer's own draws (samplers, checkpointed RNG states) are untouched."""
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(seed)
        yield


__all__ = ["MicroBatchCounter", "global_micro_batch_index", "micro_batch_seed", "seeded_rng"]


class Sharding(NamedTuple):
    fsdp: bool
    deepspeed: bool
    zero3: bool


def parameter_sharding(args, trainer=None) -> Sharding:
    """FSDP / DeepSpeed / ZeRO-3 as `args` ask for them (before `Trainer.__init__`, to refuse before any set-up), or,
    given the `trainer`, as accelerate resolved them (an `accelerate launch` config that args do not show)."""
    if trainer is None:
        return Sharding(bool(args.fsdp), bool(args.deepspeed), is_deepspeed_zero3_enabled())
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return Sharding(bool(trainer.is_fsdp_enabled), bool(trainer.is_deepspeed_enabled),
                    is_deepspeed_zero3_enabled() or getattr(plugin, "zero_stage", 0) == 3)
