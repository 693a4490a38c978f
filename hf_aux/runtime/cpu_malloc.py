"""CPU training on glibc's malloc: keep freed memory for reuse, as CUDA's caching allocator does on a GPU
(docs/command_line.md, "Memory on a CPU run"; the figures are in docs/scaling.md).

`keep_freed_memory()` sets, through glibc's `mallopt`, what `MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=2147483647 MALLOC_TOP_PAD_=268435456` set at start-up: every buffer up to 32 MB (glibc's
largest threshold on 64-bit) comes from the heap, not from a fresh mapping whose page faults every step pays again;
the heap top is given back only when 2 GiB of it are free, and the heap grows in steps of 256 MiB (of address space:
a page counts in the resident set once touched). Larger buffers keep mappings of their own: taken from the heap,
they would fragment it (torch's 64-byte-aligned request never fits the chunk a freed one of the same size left).
Nothing changes under another allocator (tcmalloc, jemalloc, mimalloc: they keep freed memory already), a malloc
that is not glibc's, or the user's glibc malloc settings (`MALLOC_*_`, `GLIBC_TUNABLES` naming glibc.malloc).
Every hf_aux trainer calls it on a CPU run unless `cpu_malloc="system"` (`--cpu_malloc system`)."""

from __future__ import annotations

import ctypes
import logging
import os
import platform

logger = logging.getLogger(__name__)

CPU_MALLOC_CHOICES = ("keep", "system")
OTHER_ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc")

# glibc's <malloc.h>
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
KEEP_SETTINGS = {  # mallopt parameter -> (value, the environment variable that sets it at start-up); an int each
    _M_MMAP_THRESHOLD: (32 << 20, "MALLOC_MMAP_THRESHOLD_"),
    _M_TRIM_THRESHOLD: (2**31 - 1, "MALLOC_TRIM_THRESHOLD_"),
    _M_TOP_PAD: (256 << 20, "MALLOC_TOP_PAD_"),
}
_USER_VARIABLES = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                   "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST")

_state: str | None = None  # what keep_freed_memory found or did, once per process


def malloc_in_use() -> str:
    """The malloc this process runs on: 'tcmalloc', 'jemalloc' or 'mimalloc' when such a library is mapped into it
    (preloaded), else 'glibc' on a glibc system, else 'other'."""
    try:
        with open("/proc/self/maps") as maps:
            mapped = maps.read()
    except OSError:
        mapped = ""
    found = next((name for name in OTHER_ALLOCATORS if f"lib{name}" in mapped), None)
    return found or ("glibc" if platform.libc_ver()[0] == "glibc" else "other")


def keep_freed_memory() -> str:
    """Set glibc's malloc to keep freed buffers of up to 32 MB (module docstring), once per process; returns what
    it found or did: 'kept' (set now or before), or why it changed nothing ('tcmalloc', 'other', 'user settings:
    NAME', 'mallopt refused')."""
    global _state
    if _state is not None:
        return _state
    allocator = malloc_in_use()
    user = [name for name in _USER_VARIABLES if name in os.environ]
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        user.append("GLIBC_TUNABLES")
    if allocator != "glibc":
        _state = allocator
    elif user:
        _state = "user settings: " + ", ".join(user)
    else:
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        refused = [variable for parameter, (value, variable) in KEEP_SETTINGS.items()
                   if mallopt(parameter, value) != 1]
        _state = "mallopt refused " + ", ".join(refused) if refused else "kept"
    if _state.startswith("mallopt refused"):
        logger.warning("hf_aux.runtime.cpu_malloc: glibc's %s; malloc keeps its defaults for those", _state)
    elif _state == "kept":
        logger.info("glibc malloc keeps freed memory for reuse (hf_aux.runtime.cpu_malloc; --cpu_malloc system leaves "
                    "it as it is)")
    return _state


def apply_setting(setting: str, device_type: str) -> str | None:
    """A run's `cpu_malloc` setting applied: `keep_freed_memory()` on a CPU run with 'keep' (its result), nothing
    otherwise (None). What every hf_aux trainer does, and the step benchmarks for every configuration they time."""
    if setting == "keep" and device_type == "cpu":
        return keep_freed_memory()
    return None


def describe() -> str:
    """The allocator as a benchmark's header prints it: 'glibc malloc, keeping freed memory' after
    `keep_freed_memory`, else the allocator's name."""
    allocator = malloc_in_use()
    if allocator == "glibc":
        return "glibc malloc, keeping freed memory" if _state == "kept" else "glibc malloc"
    return allocator
