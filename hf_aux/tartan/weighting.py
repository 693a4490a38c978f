"""Meta-learned task weights: the META-TARTAN rule (Dery et al., 2022, "Should We Be Pre-training? An Argument for
End-task Aware Training as an Alternative", ICLR; arXiv:2109.07437; Algorithm 1 and eq. 7), shared by
`TartanTrainer(mode="meta")` (the end task and its auxiliary MLM tasks) and `MuppetTrainer(task_weighting="meta")`
(a pre-finetuning mixture's tasks, weighted toward an end task outside the mixture).

One update: the body gradient g_k of each task's training loss, the meta gradient g_meta of the end task's loss
through a separately fitted meta head phi* (eq. 7), w_k <- w_k + eta cos(g_meta, g_k), alpha = softmax(w). Also here:
the state that travels with checkpoints (`TaskWeightsCallback`) and its figure; the settings both configs share are
`MetaWeightingArguments` (hf_aux/tartan/config.py, so that `--help` stays light).

Gradients are lists of tensors, one entry per body parameter (`None` where a task does not reach that parameter,
e.g. BERT's pooler for an MLM task): dots and norms are taken per tensor and summed, never by concatenating
everything into one vector (no copy of the body's size, which costs time on large bodies).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState

from .config import MetaWeightingArguments
from ..runtime.tensor_ops import to_device_nonblocking
from ..tasks.streaming import StreamBatches

GradList = Sequence[torch.Tensor | None]


# ----------------------------------------------------------------------------------------------------------------
# The rule, as pure tensor functions
# ----------------------------------------------------------------------------------------------------------------


def gradient_cosines(reference: GradList, task_grads: Sequence[GradList], eps: float = 1e-12) -> torch.Tensor:
    """cos(g_meta, g_k) for every task k (Algorithm 1, "Update task weightings"; the inner product of eq. 7,
    normalised). Returns a float32 tensor [num_tasks], on the device (no host sync).

    reference: g_meta, the body gradient of the end-task validation loss through the meta head phi*.
    task_grads: g_k, the body gradient of each task's training loss; lists aligned with `reference`, a `None` entry
    counting as zeros.

    Tensor by tensor: each reference tensor's dot products with every task's tensor, and each task tensor's squared
    norm, are taken while those tensors are in cache, so the reference is read once and each task gradient once,
    not once per task and once more for the norms (timings: docs/tartan_measurements.md).
    """
    for grads in task_grads:
        if len(grads) != len(reference):
            raise ValueError(f"gradient lists of different lengths: {len(reference)} vs {len(grads)}")
    ref_terms: list[torch.Tensor] = []
    dot_terms: list[list[torch.Tensor]] = [[] for _ in task_grads]
    sq_terms: list[list[torch.Tensor]] = [[] for _ in task_grads]
    for t, ref in enumerate(reference):
        ref = None if ref is None else ref.reshape(-1).float()
        if ref is not None:
            ref_terms.append(torch.dot(ref, ref))
        for k, grads in enumerate(task_grads):
            if grads[t] is None:
                continue
            grad = grads[t].reshape(-1).float()
            sq_terms[k].append(torch.dot(grad, grad))
            if ref is not None:
                dot_terms[k].append(torch.dot(ref, grad))
    if not ref_terms or not all(sq_terms):
        raise ValueError("a task produced no gradient on any body parameter")
    ref_norm = torch.stack(ref_terms).sum().sqrt()
    cosines = []
    for dots, squares in zip(dot_terms, sq_terms):
        dot = torch.stack(dots).sum() if dots else squares[0].new_zeros(())
        cosines.append(dot / (ref_norm * torch.stack(squares).sum().sqrt()).clamp_min(eps))
    return torch.stack(cosines)


def update_task_weights(weights: torch.Tensor, cosines: torch.Tensor, lr: float) -> torch.Tensor:
    """w_k <- w_k + eta * cos(g_meta, g_k) for every task (Algorithm 1)."""
    return weights + lr * cosines.to(weights.dtype)


def task_mixture(weights: torch.Tensor) -> torch.Tensor:
    """alpha = softmax(w) (Algorithm 1, "Update task parameters"): sums to 1."""
    return torch.softmax(weights, dim=0)


def meta_update(weights: torch.Tensor, meta_grads: GradList, task_grads: Sequence[GradList], lr: float,
                tasks: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One task-weight update of Algorithm 1: cos(g_meta, g_k) for the tasks whose gradients are given, w_k <- w_k +
    eta cos for those tasks, alpha = softmax(w) over all of them.

    weights: w [num_tasks]. task_grads: g_k for every task (`tasks` None) or for the tasks at indices `tasks` (a
    sampled subset; the others keep their w this update). Returns (w [num_tasks], alpha [num_tasks], cosines
    [len(task_grads)]), all on the device, no host sync.
    """
    cosines = gradient_cosines(meta_grads, task_grads)
    if tasks is None:
        if len(task_grads) != len(weights):
            raise ValueError(f"{len(task_grads)} task gradients for {len(weights)} task weights")
        step = cosines
    else:
        if len(tasks) != len(task_grads):
            raise ValueError(f"{len(task_grads)} task gradients for {len(tasks)} task indices")
        index = to_device_nonblocking(list(tasks), weights.device, torch.long)  # chosen on the host
        step = weights.new_zeros(weights.shape).index_copy(0, index, cosines.to(weights.dtype))
    weights = update_task_weights(weights, step, lr)
    return weights, task_mixture(weights), cosines


def combine_gradients(alphas: torch.Tensor, task_grads: Sequence[GradList],
                      in_place: bool = False) -> list[torch.Tensor | None]:
    """sum_k alpha_k g_k per body tensor (Algorithm 1: theta_body <- theta_body - beta (alpha* g* + sum_i alpha_i
    g_i)). `alphas`: [num_tasks] (a tensor: no host sync); entries where every task is `None` stay `None`.
    `in_place`: scale the first task's gradients in their own storage and add the others into them (no new tensor
    of the body's size; the caller must not read `task_grads` afterwards). Each later task is added as
    alpha_k * g_k in one pass (addcmul: reads the sum and g_k, writes the sum), not scaled first and then added."""
    if len(alphas) != len(task_grads):
        raise ValueError(f"{len(alphas)} task weights for {len(task_grads)} gradient lists")
    combined: list[torch.Tensor | None] = [None] * len(task_grads[0])
    for k, grads in enumerate(task_grads):
        index = [t for t, g in enumerate(grads) if g is not None]
        if not index:
            continue
        fresh = [t for t in index if combined[t] is None]
        summed = [t for t in index if combined[t] is not None]
        if fresh:
            present = [grads[t] for t in fresh]
            if in_place:
                torch._foreach_mul_(present, alphas[k])
            else:
                present = torch._foreach_mul(present, alphas[k])
            for t, scaled in zip(fresh, present):
                combined[t] = scaled
        if summed:  # the sums are the first task's own tensors (in place) or new ones: safe to add into
            torch._foreach_addcmul_([combined[t] for t in summed], [grads[t] for t in summed],
                                    [alphas[k]] * len(summed))
    return combined


def fit_meta_head(params: list[torch.nn.Parameter], loss: Callable[[], torch.Tensor], *, steps: int, lr: float,
                  weight_decay: float) -> list[torch.Tensor]:
    """estimate_meta_head of Algorithm 1: `steps` Adam steps (L2 weight decay `weight_decay`, as in §4) on the meta
    head phi*'s `params` (already re-initialised by the caller), minimising `loss()` (the head on fixed, detached
    body features: the body gets no gradient). Returns the losses (tensors: no host sync)."""
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    losses = []
    for p in params:
        p.requires_grad_(True)
    try:
        with torch.enable_grad():
            for _ in range(steps):
                value = loss()
                optimizer.zero_grad(set_to_none=True)
                value.backward()
                optimizer.step()
                losses.append(value.detach())
    finally:
        for p in params:
            p.requires_grad_(False)
            p.grad = None
    return losses


def all_reduce_mean(grads: list[torch.Tensor | None], world_size: int) -> None:
    """Average a gradient list over processes in place (one collective per list; None entries stay None on every
    rank, since every rank runs the same tasks on the same parameters), so the task weights are identical on every
    rank."""
    present = [g for g in grads if g is not None]
    if not present:
        return
    flat = torch._utils._flatten_dense_tensors(present)  # a communication buffer, not for the cosines
    dist.all_reduce(flat)
    flat.div_(world_size)
    for g, synced in zip(present, torch._utils._unflatten_dense_tensors(flat, present)):
        g.copy_(synced)


def distributed(world_size: int) -> bool:
    return world_size > 1 and dist.is_available() and dist.is_initialized()


# ----------------------------------------------------------------------------------------------------------------
# State saved with every checkpoint, and its figure
# ----------------------------------------------------------------------------------------------------------------


class TaskWeightsCallback(TrainerCallback, ExportableState):
    """Holds the task weights w, the history of alpha (one [step, alpha_1, alpha_2, ...] row per optimizer step
    whose weights changed), the batch-stream positions (draws per stream; for a streamed corpus also the source's
    position, `stream_positions`) and TARTAN's MLM head warm-up losses ({task: [first, last]}, empty until it
    ran); saved in trainer_state.json (`stateful_callbacks`) with every checkpoint and restored on resume
    (`restore_task_weights`).

    During training w lives on the device (`weights_on`, `set_weights`) and the history's new rows may be device
    tensors (`record`): reading them to the host every update would stop it once per update, so `weights` and
    `history` read them, in one transfer, only when asked (a log, a checkpoint, the card)."""

    def __init__(self, task_names: list[str] | None = None, weights: list[float] | None = None,
                 history: list[list[float]] | None = None, stream_draws: dict[str, int] | None = None,
                 head_warmup: dict[str, list[float]] | None = None, stream_positions: dict[str, dict] | None = None):
        self._on_device, self._device, self._stale, self._pending = None, None, False, []
        self.task_names = list(task_names or [])
        self.weights = list(weights or [])
        self.history = history or []
        self.stream_draws = dict(stream_draws or {})
        self.head_warmup = dict(head_warmup or {})
        self.stream_positions = dict(stream_positions or {})

    def state(self) -> dict:
        return {"args": {"task_names": self.task_names},
                "attributes": {"weights": self.weights, "history": self.history, "stream_draws": self.stream_draws,
                               "head_warmup": self.head_warmup, "stream_positions": self.stream_positions}}

    def draw(self, streams: dict, name: str) -> dict:
        """The next batch of `streams[name]` (a `hf_aux.tasks.batches.BatchStream`, or a
        `hf_aux.tasks.streaming.StreamBatches` over a streamed corpus), from the position this state holds (so a stream
        rebuilt after a resume continues where the checkpoint was), and the new position recorded."""
        stream = streams[name]
        if isinstance(stream, StreamBatches):  # read in order: its position is the source's, not a count alone
            if stream.draws != self.stream_draws.get(name, 0):  # rebuilt after a resume
                if name not in self.stream_positions:
                    raise ValueError(f"resume_from_checkpoint: the checkpoint holds no position of the streamed task "
                                     f"{name!r} (it was not written with --streaming), so where its stream stopped "
                                     "is unknown; resume without --streaming")
                stream.load_state_dict(self.stream_positions[name])
            batch = stream.next()
            self.stream_positions[name] = stream.state_dict()
        else:
            stream.draws = self.stream_draws.get(name, 0)
            batch = stream.next()
        self.stream_draws[name] = stream.draws
        return batch

    @property
    def weights(self) -> list[float]:
        """w as numbers (read from the device with the pending history rows, if an update set it there)."""
        self._read_back()
        return self._weights

    @weights.setter
    def weights(self, values: list[float]) -> None:
        self._weights, self._on_device, self._stale = list(values), None, False

    @property
    def history(self) -> list[list[float]]:
        """[step, alpha_1, alpha_2, ...] rows (the pending ones read from the device first)."""
        self._read_back()
        return self._history

    @history.setter
    def history(self, rows: list[list[float]]) -> None:
        self._history, self._pending = [list(row) for row in rows], []

    def weights_on(self, device) -> torch.Tensor:
        """w [num_tasks] float32 on `device`: copied there once (at the start, after a resume), then kept there."""
        if self._on_device is None or self._device != str(device):
            self._read_back()
            self._on_device, self._device = torch.tensor(self._weights, device=device), str(device)
        return self._on_device

    def set_weights(self, weights: torch.Tensor) -> None:
        """An update's new w, left on its device (`weights` reads it when asked)."""
        self._on_device, self._device, self._stale = weights.detach(), str(weights.device), True

    def record(self, step: int, alphas: list[float] | torch.Tensor) -> None:
        """The step's alpha (numbers, or a device tensor read when the history is asked for)."""
        self._pending.append((step, alphas.detach() if isinstance(alphas, torch.Tensor) else list(alphas)))

    def _read_back(self) -> None:
        """The device's w and the pending rows' tensors, to numbers in one transfer."""
        if not self._stale and not self._pending:
            return
        parts = ([self._on_device] if self._stale else []) + [a for _, a in self._pending
                                                               if isinstance(a, torch.Tensor)]
        values = torch.cat([p.reshape(-1).float().to(parts[0].device) for p in parts]).tolist() if parts else []
        if self._stale:
            self._weights, values, self._stale = values[:len(self._on_device)], values[len(self._on_device):], False
        pending, self._pending = self._pending, []
        for step, alphas in pending:
            if isinstance(alphas, torch.Tensor):
                alphas, values = values[:len(alphas)], values[len(alphas):]
            row = [step, *alphas]
            if self._history and self._history[-1][0] == step:
                self._history[-1] = row  # gradient accumulation: keep the step's latest weights
            else:
                self._history.append(row)


def find_task_weights(trainer) -> TaskWeightsCallback:
    """The trainer's TaskWeightsCallback (looked up each time: resume may replace the instance)."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TaskWeightsCallback):
            return callback
    raise RuntimeError("TaskWeightsCallback was removed from the trainer")


def restore_task_weights(callback: TaskWeightsCallback, checkpoint: str, task_names: list[str], owner: str) -> None:
    """Resume: w, its history and the stream positions from the checkpoint's trainer_state.json, checked against
    this run's tasks. (Trainer restores stateful callbacks only with restore_callback_states_from_checkpoint, a
    user-wide switch, so the trainers restore the task weights themselves.)"""
    state_file = os.path.join(checkpoint, TRAINER_STATE_NAME)
    if not os.path.isfile(state_file):
        raise ValueError(f"{checkpoint!r}: {TRAINER_STATE_NAME} is missing: cannot restore the task weights")
    with open(state_file) as f:
        stored = json.load(f).get("stateful_callbacks", {}).get(TaskWeightsCallback.__name__)
    if stored is None:
        raise ValueError(f"{checkpoint!r}: no {owner} task-weight state in {TRAINER_STATE_NAME}")
    if stored["args"]["task_names"] != task_names:
        raise ValueError(f"{checkpoint!r}: the checkpoint's tasks {stored['args']['task_names']} differ from this "
                         f"run's {task_names}")
    for key, value in stored["attributes"].items():
        setattr(callback, key, value)


def plot_task_weights(history: list[list[float]], task_names: list[str], path: str, title: str = "") -> None:
    """Draw alpha per task against the optimizer step into a PNG: the whole mixture on a shared 0-1 axis first,
    then one panel per task on its own scale (META's weights often move by less than 0.01, invisible on 0-1),
    legends outside the axes (`hf_aux.cards.plots.plot_panels`)."""
    from ..cards.plots import MAX_SERIES_PER_PANEL, plot_panels

    title = title or "Task weights"
    series = {name: [(row[0], row[k + 1]) for row in history] for k, name in enumerate(task_names)}
    names = list(series)
    panels = [(f"{title}: {'all tasks' if len(names) <= MAX_SERIES_PER_PANEL else 'first tasks'} (0-1)",
               {name: series[name] for name in names[:MAX_SERIES_PER_PANEL]})]
    panels += [(f"{title}: {name}", {name: points}) for name, points in series.items()]
    plot_panels(panels, path, ylabel="task weight alpha (share, sums to 1)", ylim={panels[0][0]: (0.0, 1.0)})
