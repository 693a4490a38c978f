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
- Several processes agreeing (the commands under torchrun / accelerate launch): `use_cpu_under_launcher` and
  `check_launch` (a launch of N processes is one distributed run, also on a machine without a GPU),
  `gather_objects` (the output folder's guard: one process decides, every rank follows) and `StopAgreement` (a
  signal stops every rank at the same step), over a gloo group of their own with --ddp_timeout as its timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import os

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
        if device.type == "cpu":  # the CPU generator alone: torch.manual_seed also seeds (and would leave changed)
            torch.default_generator.manual_seed(seed)  # every accelerator's, a cost per micro-batch (docs/scaling.md)
        else:
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


# ---- several processes agreeing: one launch, one output-folder decision, one stop ---------------------------------
# Host-side agreements go through a gloo group of their own (CPU tensors whatever the training backend is, and the
# run's --ddp_timeout as its timeout), created collectively by every rank the first time one is needed.

def launched_processes() -> int:
    """How many processes the launcher started (torchrun and `accelerate launch` set WORLD_SIZE); 1 without one."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def use_cpu_under_launcher() -> bool:
    """Before the training arguments are built: under a multi-process launcher on a machine without a GPU, ask
    accelerate for its CPU (gloo) set-up, as `--use_cpu` does. Without it transformers sets every process up as a
    lone process 0 (each would train alone and claim the same output folder). Returns whether it did so. A GPU:
    any accelerator torch sees (`torch.accelerator`: CUDA/ROCm, XPU, MPS, HPU, ...), as Trainer would pick it."""
    if launched_processes() <= 1 or torch.accelerator.is_available() or os.environ.get("ACCELERATE_USE_CPU"):
        return False
    os.environ["ACCELERATE_USE_CPU"] = "true"
    return True


def check_launch(args) -> None:
    """A launcher that started several processes must get a distributed set-up: refuse, before any work, a run whose
    training arguments resolved to one process while the launcher started several."""
    launched = launched_processes()
    if launched > 1 and args.world_size != launched:
        raise RuntimeError(
            f"TrainingArguments: the launcher started {launched} processes (WORLD_SIZE) but the training arguments set "
            f"up {args.world_size} (rank {os.environ.get('RANK', '?')}): each process would train alone on the same "
            "output folder. On a machine without a GPU pass --use_cpu (hf_aux's commands do this for you); otherwise "
            "check the launcher's environment (RANK, LOCAL_RANK, MASTER_ADDR).")


_CONTROL_GROUPS: dict = {}


def control_group(timeout_s: float):
    """The gloo group for host-side agreements with a timeout of `timeout_s` seconds (--ddp_timeout); every rank must
    call this at the same point the first time."""
    import datetime

    import torch.distributed as dist

    key = int(timeout_s)
    if key not in _CONTROL_GROUPS:
        if not _CONTROL_GROUPS:
            atexit.register(_destroy_control_groups)
        _CONTROL_GROUPS[key] = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=key))
    return _CONTROL_GROUPS[key]


def _destroy_control_groups() -> None:
    """At exit, while Python still runs: a gloo group left to the interpreter's teardown can abort the process
    ("terminate called without an active exception") when its worker threads are destroyed unjoined."""
    import torch.distributed as dist

    for group in _CONTROL_GROUPS.values():
        with contextlib.suppress(RuntimeError, ValueError):  # already gone with the default group
            if dist.is_initialized():
                dist.destroy_process_group(group)
    _CONTROL_GROUPS.clear()


def several_processes(args) -> bool:
    import torch.distributed as dist

    return args.world_size > 1 and dist.is_available() and dist.is_initialized()


def gather_objects(value, args) -> list:
    """`value` from every rank (a list indexed by global rank), through the control group: no rank waits longer than
    --ddp_timeout. A rank that is gone or late raises RuntimeError (gloo's message)."""
    import torch.distributed as dist

    gathered = [None] * args.world_size
    dist.all_gather_object(gathered, value, group=control_group(args.ddp_timeout))
    return gathered


class StopAgreement:
    """Stop all ranks at the same step. A signal reaches the ranks at slightly different moments (one may already be
    past the step where another sees it), so no rank stops on its own flag: each step every rank posts its flag (the
    signal number, 0 for none) to an asynchronous MAX all-reduce and reads the previous step's result, which every
    rank reads at the same step. The stop comes one step after the signal; the exchange costs no wait."""

    def __init__(self, args):
        self.group = control_group(args.ddp_timeout)
        self.pending = None
        self.flag = torch.zeros(1, dtype=torch.int64)

    def exchange(self, signum: int | None) -> int:
        """The signal number every rank agrees on at this step (0: go on), posting this rank's `signum`."""
        import torch.distributed as dist

        agreed = 0
        if self.pending is not None:
            self.pending.wait()
            agreed = int(self.flag.item())
        self.flag = torch.tensor([signum or 0], dtype=torch.int64)
        self.pending = dist.all_reduce(self.flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        return agreed

    def close(self) -> None:
        if self.pending is not None:
            self.pending.wait()
            self.pending = None
