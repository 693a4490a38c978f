"""What every step benchmark reports beside its measured ratio (imported by the bench_*.py scripts): the FLOP floor,
and the memory allocator the process runs on.

The allocator matters on CPU: glibc's malloc maps every buffer above its mmap threshold (at most 32 MB on 64-bit)
fresh from the kernel and unmaps it when freed, so each such tensor pays its page faults again (a [512, 30522]
float32 logits buffer is 62 MB: an element-wise pass over it measured 2-3x slower than over a reused buffer).
Steps that make many vocabulary-sized temporaries (the meta-learned objectives) pay that more than the baselines
they are compared with. A caching allocator (tcmalloc, as CUDA's caching allocator on a GPU) keeps freed buffers:
`LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4` (Debian: libtcmalloc-minimal4)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from torch.utils.flop_counter import FlopCounterMode

ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc")


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


def allocator() -> str:
    """The malloc this process runs on: a preloaded tcmalloc/jemalloc/mimalloc library mapped into it, else glibc's
    malloc (Linux; "unknown" where /proc is not there)."""
    try:
        with open("/proc/self/maps") as maps:
            mapped = maps.read()
    except OSError:
        return "unknown"
    return next((name for name in ALLOCATORS if f"lib{name}" in mapped), "glibc malloc")
