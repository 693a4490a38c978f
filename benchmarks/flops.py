"""The FLOP floor every benchmark reports beside its measured ratio (imported by the bench_*.py scripts)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from torch.utils.flop_counter import FlopCounterMode


class _GlobalOnly(contextlib.nullcontext):
    """Stands in for FlopCounterMode's module tracker: every count goes to the total only. The tracker's hooks on
    module inputs break `torch.autograd.grad` with respect to leaf tensors (TARTAN's per-task gradients)."""

    parents = ("Global",)


def gflop_of(fn: Callable[[], object]) -> float:
    """GFLOPs torch's FlopCounterMode counts in one call of `fn`: matrix products and attention, forward and
    backward (and double backward). Element-wise work (softmax, dropout, noise, the optimizer) is not counted, so a
    ratio of two such counts is what a purely matmul-bound step would give: the floor of the measured ratio."""
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _GlobalOnly()  # the total is all we need (see _GlobalOnly)
    with counter:
        fn()
    return counter.get_total_flops() / 1e9
