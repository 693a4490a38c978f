"""Host reads per optimizer update, counted on any device, CPU included: every op that would make the host wait for
a CUDA stream, by the source line that made it and by origin (hf_aux's own lines, Trainer's, everyone else's).

torch's sync debug mode (`flops.HostSyncs`) only exists on CUDA. `HostReads` sees the same reads on a CPU run:

- "value": `aten._local_scalar_dense`, what `.item()`, `bool()`, `int()`, `float()` of a tensor run; `aten.equal`;
- "shape": ops whose output shape depends on the data (`nonzero`, boolean-mask indexing `x[mask]` and its
  backward's `index_put`, `masked_select`, `unique`, `repeat_interleave` without `output_size`, ...);
- "to host": `.tolist()`, `.numpy()`, `.cpu()` / `.to("cpu")` called by code (on an accelerator, copies to the host
  that the dispatcher sees are counted too);
- "to device": `torch.tensor(data, device=...)`, a host-to-device copy the host waits for (pageable memory).

A read is filed under the first Python frame outside torch (and accelerate, whose `backward` only forwards the call);
a read made by a backward op is filed under the line whose forward op recorded it (`x[mask]`'s backward syncs again).
Not counted, since they read host tensors on every device: a DataLoader's fetch (sampler, collator), a torch
optimizer's step (its step counts live on the host unless it is fused or capturable) and code inside
`hf_aux.tasks.batches.host_side()` (a CPU generator's draws, a sampler's order). Not counted either: the
inputs' `.to(device)` (Trainer's own, once per sub-batch; on CPU it cannot be told from a no-op).

While counting, `hf_aux.runtime.tensor_ops.accelerator_paths()` is on: code that reads a value only on CPU and
takes another path on an accelerator (`on_accelerator`) takes the accelerator's path, so the count is the
accelerator's. Per update: `HostReads.callback()` marks each `on_pre_optimizer_step`; the reads between two marks
are one update's, callbacks, logging and data loading included; the window before the first mark and after the
last are left out. Use a logging/saving interval longer than the run to count the steps between them.

    reads = HostReads()
    trainer.add_callback(reads.callback())
    with reads:
        trainer.train()
    reads.per_update()        # {"hf_aux": 1.0, "trainer": 12.25, "other": 0.0}
    reads.lines("hf_aux")     # {"hf_aux/runtime/nonfinite.py:173 (value, on_pre_optimizer_step)": 1.0, ...}
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback

from hf_aux.runtime.tensor_ops import accelerator_paths
from hf_aux.tasks.batches import in_host_side

aten = torch.ops.aten
VALUE_OPS = {aten._local_scalar_dense.default, aten.equal.default}
SHAPE_OPS = {aten.nonzero.default, aten.masked_select.default, aten._unique.default, aten._unique2.default,
             aten.unique_dim.default, aten.unique_consecutive.default, aten.argwhere.default,
             aten.bincount.default, aten.histc.default}
REPEAT_OPS = {aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor}  # read unless output_size is given
INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
COPY_OPS = {aten._to_copy.default, aten.copy_.default}
TO_HOST_METHODS = {"tolist", "numpy", "cpu"}

_SKIPPED = (os.path.dirname(torch.__file__) + os.sep, __file__)
try:
    import accelerate

    _SKIPPED += (os.path.dirname(accelerate.__file__) + os.sep,)
except ImportError:  # pragma: no cover - accelerate comes with transformers' Trainer
    pass
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_ORIGIN_KEY = "hf_aux_host_read_origin"  # a backward node's metadata: where its forward op ran


def origin_of(path: str) -> str:
    """'hf_aux' (this repository's package), 'trainer' (transformers/trainer*.py) or 'other'."""
    if f"{os.sep}hf_aux{os.sep}" in path:
        return "hf_aux"
    name = os.path.basename(path)
    return "trainer" if f"{os.sep}transformers{os.sep}" in path and name.startswith("trainer") else "other"


def _short(path: str) -> str:
    if path.startswith(_REPO):
        return path[len(_REPO):]
    parts = path.split(os.sep)
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    return path


def caller() -> tuple[str, str, int, str]:
    """(origin, short path, line, function) of the first frame outside torch, accelerate and this module."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
        frame = frame.f_back
    if frame is None:
        return "other", "?", 0, "?"
    path = frame.f_code.co_filename
    return origin_of(path), _short(path), frame.f_lineno, frame.f_code.co_name


_HOST_CODE = (os.path.join(os.path.dirname(torch.__file__), "utils", "data") + os.sep,
              os.path.join(os.path.dirname(torch.__file__), "optim") + os.sep)


def _host_code() -> bool:
    """Whether a DataLoader is fetching (its sampler and collator work on host tensors, on every device) or a torch
    optimizer is stepping (a for-loop or foreach optimizer reads its step counts, CPU tensors on every device; a
    fused or capturable one keeps them on the device and reads nothing)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_HOST_CODE):
            return True
        frame = frame.f_back
    return False


def _has_bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _masked_fill_path(func, args) -> bool:
    """`x[mask] = scalar`: index_put with one boolean index and a one-element value, which ATen runs as `masked_fill_`
    (canDispatchToMaskedFill in TensorAdvancedIndexing.cpp), no read."""
    if func is aten.index.Tensor:
        return False
    indices = [i for i in args[1] if i is not None]
    value, accumulate = args[2], args[3] if len(args) > 3 else False
    return len(indices) == 1 and not accumulate and isinstance(value, torch.Tensor) and value.dim() == 0


def read_kind(func, args, kwargs) -> str | None:
    """Which kind of host read the aten op `func` makes (module docstring), or None."""
    if func in VALUE_OPS:
        return "value"
    if func in SHAPE_OPS or (func in REPEAT_OPS and kwargs.get("output_size") is None):
        return "shape"
    if func in INDEX_OPS and _has_bool_index(args) and not _masked_fill_path(func, args):
        return "shape"
    if func in COPY_OPS:
        source = args[1] if func is aten.copy_.default else args[0]
        target = args[0].device if func is aten.copy_.default else kwargs.get("device")
        if target is not None and torch.device(target).type == "cpu" and source.device.type != "cpu":
            return "to host"
    return None


class _Dispatch(TorchDispatchMode):
    def __init__(self, counter: HostReads):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = read_kind(func, args, kwargs)
        if kind is not None:
            self.counter.record_op(kind, func)
        return func(*args, **kwargs)


class _Functions(TorchFunctionMode):
    """Tags the backward node of a forward op that read (its backward reads again: `x[mask]`'s index_put)."""

    def __init__(self, counter: HostReads):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        counter = self.counter
        before = counter.forward_reads
        out = func(*args, **(kwargs or {}))
        if counter.forward_reads != before and isinstance(out, torch.Tensor) and out.grad_fn is not None:
            out.grad_fn.metadata[_ORIGIN_KEY] = counter.last_site
        return out


class _Patches:
    """Reads the dispatcher does not see on CPU, wherever they are called (a function mode is off inside the calls
    it handles, `backward()` and custom autograd functions' backward included): `.tolist()`, `.numpy()`, `.cpu()`,
    `.to("cpu")`, and `torch.tensor(..., device=)` / `torch.as_tensor(..., device=)`."""

    def __init__(self, counter: HostReads):
        self.counter, self.saved = counter, {}

    def _wrap(self, owner, name, kind, applies):
        original, counter = getattr(owner, name), self.counter

        def wrapper(*args, **kwargs):
            if counter._skip_dispatch or not applies(args, kwargs):  # (the function mode calls it again inside)
                return original(*args, **kwargs)
            counter.record(kind, f"torch.{name}(device=)" if owner is torch else f".{name}()")
            with counter.inside_counted():
                return original(*args, **kwargs)

        self.saved[(owner, name)] = original
        setattr(owner, name, wrapper)

    def __enter__(self):
        for name in TO_HOST_METHODS:
            self._wrap(torch.Tensor, name, "to host", lambda args, kwargs: True)
        self._wrap(torch.Tensor, "to", "to host", _to_cpu)
        for name in ("tensor", "as_tensor"):
            self._wrap(torch, name, "to device", lambda args, kwargs: kwargs.get("device") is not None)
        return self

    def __exit__(self, *exc):
        for (owner, name), original in self.saved.items():
            setattr(owner, name, original)
        self.saved = {}


def _to_cpu(args, kwargs) -> bool:
    """`.to(...)` to the host: from an accelerator, or asked for by name (`.to("cpu")`, not Trainer's `args.device`,
    which is the CPU on a CPU run and the accelerator elsewhere)."""
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    if isinstance(target, str):
        return torch.device(target).type == "cpu"
    return (isinstance(target, torch.device) and target.type == "cpu" and isinstance(args[0], torch.Tensor)
            and args[0].device.type != "cpu")


class HostReads:
    """Counts host reads (module docstring) while entered, into per-update windows marked by `callback()`."""

    def __init__(self, accelerator_path: bool = True):
        self.accelerator_path = accelerator_path
        self.windows: list[collections.Counter] = [collections.Counter()]  # one per span between two marks
        self.forward_reads = 0
        self.last_site = None
        self._skip_dispatch = 0
        self._thread = threading.get_ident()
        self._modes = []

    # ---- counting ----
    def record(self, kind: str, what: str, site=None) -> None:
        if threading.get_ident() != self._thread or in_host_side() or _host_code():
            return
        origin, path, line, function = site or caller()
        self.last_site = (origin, path, line, function)
        self.windows[-1][(origin, f"{path}:{line}", function, kind, what)] += 1

    def record_op(self, kind: str, func) -> None:
        if self._skip_dispatch:
            return
        node = torch._C._current_autograd_node()
        site = node.metadata.get(_ORIGIN_KEY) if node is not None else None
        self.record(kind, f"backward of {func.__name__}" if site else func.__name__, site)
        if node is None:
            self.forward_reads += 1

    @contextlib.contextmanager
    def inside_counted(self):
        """A read already counted: the copies the dispatcher sees inside it are not counted again."""
        self._skip_dispatch += 1
        try:
            yield
        finally:
            self._skip_dispatch -= 1

    def __enter__(self) -> HostReads:
        self._thread = threading.get_ident()
        self._modes = [accelerator_paths(self.accelerator_path), _Patches(self), _Functions(self), _Dispatch(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = []

    # ---- windows ----
    def mark(self) -> None:
        """The end of one update's window and the start of the next."""
        self.windows.append(collections.Counter())

    def callback(self) -> TrainerCallback:
        """A callback marking every optimizer update (at on_pre_optimizer_step) for this counter."""
        counter = self

        class MarkUpdates(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                counter.mark()

        return MarkUpdates()

    def full_windows(self) -> list[collections.Counter]:
        """The windows between two marks: whole updates (the first window and the one after the last mark are not)."""
        return self.windows[1:-1]

    def per_update(self) -> dict[str, float]:
        """Reads per update by origin: {"hf_aux": ..., "trainer": ..., "other": ...}."""
        totals = {"hf_aux": 0, "trainer": 0, "other": 0}
        for window in self.full_windows():
            for (origin, *_), count in window.items():
                totals[origin] += count
        return {k: round(v / max(1, len(self.full_windows())), 3) for k, v in totals.items()}

    def lines(self, origin: str | None = None, by: str = "line") -> dict[str, float]:
        """Reads per update by source, of one origin or all: by 'line' ("path:line function (kind: what)") or by
        'function' ("path:function", what a test pins: line numbers move with every edit)."""
        counts = collections.Counter()
        for window in self.full_windows():
            for (where, line, function, kind, what), count in window.items():
                if origin is None or where == origin:
                    path = line.rsplit(":", 1)[0]
                    key = f"{line} {function} ({kind}: {what})" if by == "line" else f"{path}:{function}"
                    counts[key] += count
        return {k: round(v / max(1, len(self.full_windows())), 3) for k, v in counts.most_common()}

    def report(self) -> dict:
        """{"updates": whole updates counted, "per_update": by origin, "hf_aux_lines": ..., "trainer_lines": ...,
        "other_lines": ...} (the lines' counts are per update)."""
        return {"updates": len(self.full_windows()), "per_update": self.per_update(),
                **{f"{origin}_lines": self.lines(origin) for origin in ("hf_aux", "trainer", "other")}}


def describe(report: dict, unit: str = "update") -> str:
    """One line for a benchmark's output: reads per update (or per `unit`) by origin and hf_aux's lines."""
    per = report["per_update"]
    lines = "; ".join(f"{k} x{v:g}" for k, v in report["hf_aux_lines"].items()) or "none"
    return (f"host reads per {unit} (counted on this device, accelerator paths, {report['updates']} {unit}s): "
            f"hf_aux {per['hf_aux']:g}, Trainer {per['trainer']:g}, other {per['other']:g}; hf_aux's: {lines}")


def count_per_call(step, calls: int = 3) -> dict:
    """`report()` of the host reads per call of `step()`, a benchmark's update, run `calls` times after one
    warm-up call (outside the timed runs: counting slows every op)."""
    step()
    reads = HostReads()
    with reads:
        for _ in range(calls):
            reads.mark()
            step()
        reads.mark()
    return reads.report()


def count_training(trainer) -> dict:
    """`report()` of the host reads per update of `trainer.train()` (give it a few updates, no logging inside)."""
    reads = HostReads()
    trainer.add_callback(reads.callback())
    with reads:
        trainer.train()
    return reads.report()


def summary(report: dict) -> dict:
    """What a benchmark's JSON carries: updates counted, reads per update by origin, hf_aux's lines."""
    return {key: report[key] for key in ("updates", "per_update", "hf_aux_lines")}
