"""The one accumulator of the metrics every hf_aux trainer logs beside Trainer's `loss`.

A trainer adds device tensors during its steps (no `.item()`, so no host sync per step) and, in its `log()`,
reduces them across processes in ONE all-reduce and adds the results to the log entry:

    self._train_metrics.add(f"loss/{task}", loss)             # a mean over the steps since the last log
    self._train_metrics.add("rtd_accuracy_replaced", hits, count=replaced)   # a ratio of two sums
    self._train_metrics.add_total("teacher_skipped", skipped) # a count: logged as the sum

    def log(self, logs, start_time=None):
        if "loss" in logs:
            logs.update(self._train_metrics.reduce(self.accelerator))
        super().log(logs, start_time)

Keys are `/`-separated, family first: `loss/<task>`, `cos/<task>`, `alpha/<task>`, `mlm_loss/layer_<d>`,
`meta/<name>` (`hf_aux.cards.model_card` groups a family in a figure panel of its own).
"""

from __future__ import annotations

import torch


class MetricAccumulator:
    """Per key, a running sum (a device tensor) and a running count (a number, or a device tensor where a count
    was given as one) since the last `reduce`.

    `add(name, value, count)`: `value` is a sum over `count` items (default: one item, so the logged value is the
    mean over the calls); `add_total(name, value)` is logged as the plain sum. `reduce` sums every key over the
    processes (one collective for all keys, in the order they were first added: the same on every rank, which
    run the same code), divides, and starts afresh. `last[name]` is the tensor most recently added (no copy), for
    tests and callbacks that inspect one step.

    `keys`, `device`: names present from the start, at zero, and again after every `reduce`: for metrics a rank
    may not see between two logs (MUPPET's tasks), so that every rank reduces the same keys in the same order."""

    def __init__(self, keys: list[str] | tuple = (), device: torch.device | str | None = None):
        self._declared = (list(keys), device)
        self.clear()

    def __bool__(self) -> bool:
        """Whether anything was added since the last reduce (declared keys alone do not count)."""
        return bool(self.last)

    def __contains__(self, name: str) -> bool:
        return name in self._sums

    @torch.no_grad()
    def add(self, name: str, value: torch.Tensor, count: torch.Tensor | float = 1.0) -> None:
        value = value.detach().float().reshape(())
        # a count given as a number stays a number: making it a device tensor is a host-to-device copy, which
        # stops the host on CUDA (docs/scaling.md)
        count = count.detach().float().reshape(()) if isinstance(count, torch.Tensor) else float(count)
        self.last[name] = value
        if name in self._sums:
            self._sums[name] = self._sums[name] + value
            self._counts[name] = self._counts[name] + count
        else:
            self._sums[name], self._counts[name] = value, count

    def add_total(self, name: str, value: torch.Tensor) -> None:
        self._totals.add(name)
        self.add(name, value)

    def reduce(self, accelerator, digits: int | None = None, drop_empty: bool = False) -> dict[str, float]:
        """{name: sum / count, or the sum for `add_total` keys}, summed over every process; rounded to `digits`
        (None: as computed). A key whose count is 0 everywhere gives NaN, or is left out with `drop_empty`.
        Clears the sums."""
        if not self._sums:
            return {}
        names = list(self._sums)
        sums, counts = accelerator.reduce(self.stacked(), reduction="sum").tolist()
        values = {}
        for name, total, count in zip(names, sums, counts):
            if drop_empty and count == 0 and name not in self._totals:
                continue
            value = total if name in self._totals else (total / count if count > 0 else float("nan"))
            values[name] = round(value, digits) if digits is not None else value
        self.clear()
        return values

    def stacked(self) -> torch.Tensor:
        """[2, keys]: the sums and the counts, keys in the order first added (what `reduce` all-reduces)."""
        names = list(self._sums)
        device = self._sums[names[0]].device
        counts = [self._counts[n] for n in names]
        if not any(isinstance(c, torch.Tensor) for c in counts):  # numbers only: one copy to the device
            count_row = torch.tensor(counts, dtype=torch.float32).to(device)
        else:
            count_row = torch.stack([torch.as_tensor(c, dtype=torch.float32).to(device) for c in counts])
        return torch.stack([torch.stack([self._sums[n] for n in names]), count_row])

    def clear(self) -> None:
        keys, device = self._declared
        self._sums: dict[str, torch.Tensor] = {name: torch.zeros((), device=device) for name in keys}
        self._counts: dict[str, torch.Tensor | float] = dict.fromkeys(keys, 0.0)
        self._totals: set[str] = set()
        self.last: dict[str, torch.Tensor] = {}


__all__ = ["MetricAccumulator"]
