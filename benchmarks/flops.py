"""What every step benchmark reports beside its measured ratio (imported by the bench_*.py scripts): the FLOP floor,
and the memory allocator the process runs on.

The allocator matters on CPU: glibc's malloc maps every buffer above its mmap threshold (at most 32 MB on 64-bit)
fresh from the kernel and unmaps it when freed, so each such tensor pays its page faults again (a [512, 30522]
float32 logits buffer is 62 MB: an element-wise pass over it measured 2-3x slower than over a reused buffer).
Steps that make many vocabulary-sized temporaries (the meta-learned objectives) pay that more than the baselines
they are compared with. A caching allocator (tcmalloc, as CUDA's caching allocator on a GPU) keeps freed buffers:
`LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4` (Debian: libtcmalloc-minimal4). Every hf_aux trainer
sets glibc's malloc to keep freed memory on a CPU run (hf_aux.runtime.cpu_malloc); the benchmarks do the same for every
configuration they time, the baselines included (`--cpu_malloc keep`, the default; `system` leaves malloc alone)."""

from __future__ import annotations

import collections
import contextlib
import os
import time
import warnings
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from hf_aux.runtime.cpu_malloc import CPU_MALLOC_CHOICES, apply_setting
from hf_aux.runtime.cpu_malloc import (describe as allocator)


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


def set_up_malloc(cli) -> None:
    """What an hf_aux trainer does on a CPU run, for the whole benchmark process, before anything is timed, unless
    `--cpu_malloc system`: every configuration (the baselines too) then runs on the same malloc settings."""
    apply_setting(cli.cpu_malloc, torch.device(cli.device).type)


# --------------------------------------------------------------------------------------------------------------
# Timing, the measured matmul peak that MFU divides by (on CPU too), host syncs on an accelerator
# --------------------------------------------------------------------------------------------------------------


def add_device_arguments(parser, default: str = "cpu") -> None:
    """--device, --bf16 and --cpu_malloc, as every step benchmark takes them (`set_up_malloc` applies the last)."""
    parser.add_argument("--device", default=default, help="cpu, or cuda (Trainer's accelerator)")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 mixed precision (Trainer's --bf16; torch.autocast where a benchmark drives steps "
                             "itself), as a GPU run trains")
    add_cpu_malloc_argument(parser, "on CPU, glibc's malloc keeps freed memory for every configuration timed, as "
                                    "an hf_aux trainer sets it (hf_aux.runtime.cpu_malloc); 'system' leaves it as it "
                                    "is, for "
                                    "every one")


def add_cpu_malloc_argument(parser, help_text: str) -> None:
    """--cpu_malloc keep|system (hf_aux.runtime.cpu_malloc), default keep as the trainers'."""
    parser.add_argument("--cpu_malloc", choices=CPU_MALLOC_CHOICES, default="keep", help=help_text)


def synchronize(device) -> None:
    """Wait for the device's queued work, so a wall clock read after it covers that work (nothing on CPU)."""
    if str(device) != "cpu":
        torch.accelerator.synchronize()


def autocast(device, bf16: bool):
    """bf16 autocast on `device` when `bf16`, else nothing: what Trainer's `bf16=True` wraps each forward in."""
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def matmul_peak_tflops(device, size: int | None = None, repeats: int = 10) -> float:
    """The matrix-product rate this device reaches on one large product (TFLOP/s, measured here, mean of `repeats`
    after warm-up): what MFU divides by, so MFU reads as a share of what this machine delivers rather than of a
    datasheet figure. On an accelerator a bf16 8192^3 product; on a CPU an fp32 1024^3 one with the process's torch
    threads (the steps' own threads: a share of the machine as the benchmark runs it)."""
    cpu = str(device) == "cpu"
    size, dtype = size or (1024 if cpu else 8192), torch.float32 if cpu else torch.bfloat16
    repeats = max(repeats, 30) if cpu else repeats
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    seconds = (time.perf_counter() - start) / repeats
    del a, b
    return 2 * size**3 / seconds / 1e12


def peak_label(device, peak_tflops: float) -> str:
    """'a measured 771 TFLOP/s bf16 matmul peak' or, on a CPU, 'a measured 173 GFLOP/s fp32 matmul peak with 1
    torch thread'."""
    if str(device) != "cpu":
        return f"a measured {peak_tflops:.0f} TFLOP/s bf16 matmul peak"
    threads = torch.get_num_threads()
    return f"a measured {peak_tflops * 1e3:.0f} GFLOP/s fp32 matmul peak with {threads} torch thread" + \
        ("s" if threads > 1 else "")


def mfu(gflop: float, seconds: float, peak_tflops: float | None) -> float | None:
    """Model FLOP utilisation: the counted matrix-product FLOPs of one step over its time, as a share of the peak."""
    if peak_tflops is None or seconds <= 0:
        return None
    return round(gflop / seconds / 1e3 / peak_tflops, 4)


class HostSyncs:
    """Counts the synchronizing CUDA calls (a `.item()`, a data-dependent shape, a copy to the host) made between
    start() and stop(), by the Python line that made them (torch's sync debug mode, 'warn'). Nothing on CPU."""

    def __init__(self, device):
        self.enabled = str(device).startswith("cuda")
        self.by_line: collections.Counter = collections.Counter()
        self.windows = 0
        self._catcher = None

    def start(self) -> None:
        if not self.enabled:
            return
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> None:
        if not self.enabled or self._catcher is None:
            return
        torch.cuda.set_sync_debug_mode("default")
        self._catcher.__exit__(None, None, None)
        self._catcher = None
        self.windows += 1
        for caught in self._caught:
            if "synchronizing" in str(caught.message):
                self.by_line[f"{os.path.relpath(caught.filename)}:{caught.lineno}"] += 1

    def __enter__(self) -> "HostSyncs":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def report(self) -> dict | None:
        """{"per_window": syncs per start/stop window, "by_line": {file:line: count}} (None on CPU)."""
        if not self.enabled:
            return None
        total = sum(self.by_line.values())
        return {"per_window": round(total / max(1, self.windows), 2), "windows": self.windows,
                "by_line": dict(self.by_line.most_common(12))}


def counting(syncs: HostSyncs | None):
    """`syncs` as a context that counts the host syncs made inside it; nothing when None."""
    return contextlib.nullcontext() if syncs is None else syncs


def folder_label(path: str) -> str:
    """A checkpoint folder's last two path components, for a benchmark's JSON ("<package>/model" says more than
    "model", the name several packages give theirs)."""
    return os.path.join(*os.path.normpath(os.path.abspath(path)).split(os.sep)[-2:])
