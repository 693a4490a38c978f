"""TARTAN's task-weight math as pure tensor functions (Dery et al., 2022, "Should We Be Pre-training? An Argument
for End-task Aware Training as an Alternative", ICLR; arXiv:2109.07437).

Gradients are lists of tensors, one entry per body parameter (`None` where a task does not reach that parameter,
e.g. BERT's pooler for an MLM task): dots and norms are taken per tensor and summed, never by concatenating
everything into one vector (no copy of the body's size; several times faster on large bodies).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

GradList = Sequence[torch.Tensor | None]


def gradient_dot_and_sq_norm(a: GradList, b: GradList) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum over tensors of <a_t, b_t>, sum over tensors of ||b_t||^2), as 0-dim tensors (no host sync).

    `a` and `b` are aligned lists over the same parameters; a `None` entry counts as zeros.
    """
    if len(a) != len(b):
        raise ValueError(f"gradient lists of different lengths: {len(a)} vs {len(b)}")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    present = [y for y in b if y is not None]
    if not present:
        raise ValueError("a task produced no gradient on any body parameter")
    zero = present[0].new_zeros((), dtype=torch.float32)
    dot = torch.stack([torch.vdot(x.reshape(-1).float(), y.reshape(-1).float()) for x, y in pairs]).sum() if pairs \
        else zero
    norms = torch._foreach_norm([y.float() for y in present])
    sq_norm = torch.stack(norms).square().sum()
    return dot, sq_norm


def gradient_cosines(reference: GradList, task_grads: Sequence[GradList], eps: float = 1e-12) -> torch.Tensor:
    """cos(g_meta, g_k) for every task k (Algorithm 1, "Update task weightings"; the inner product of eq. 7,
    normalised). Returns a float32 tensor [num_tasks].

    reference: g_meta, the body gradient of the end-task validation loss through the meta head phi*.
    task_grads: g_k, the body gradient of each task's training loss (end task first, then auxiliary tasks).
    """
    _, ref_sq = gradient_dot_and_sq_norm(reference, reference)
    ref_norm = ref_sq.sqrt()
    cosines = []
    for grads in task_grads:
        dot, sq = gradient_dot_and_sq_norm(reference, grads)
        cosines.append(dot / (ref_norm * sq.sqrt()).clamp_min(eps))
    return torch.stack(cosines)


def update_task_weights(weights: torch.Tensor, cosines: torch.Tensor, lr: float) -> torch.Tensor:
    """w_k <- w_k + eta * cos(g_meta, g_k) for every task, the end task included (Algorithm 1)."""
    return weights + lr * cosines.to(weights.dtype)


def task_mixture(weights: torch.Tensor) -> torch.Tensor:
    """alpha = softmax(w*, w_1, ..., w_n) (Algorithm 1, "Update task parameters"): sums to 1."""
    return torch.softmax(weights, dim=0)


def combine_gradients(alphas: torch.Tensor, task_grads: Sequence[GradList],
                      in_place: bool = False) -> list[torch.Tensor | None]:
    """sum_k alpha_k g_k per body tensor (Algorithm 1: theta_body <- theta_body - beta (alpha* g* + sum_i alpha_i
    g_i)). `alphas`: [num_tasks] (a tensor: no host sync); entries where every task is `None` stay `None`.
    `in_place`: scale the task gradients in their own storage and sum into the first task's (no new tensor of the
    body's size per task; the caller must not read `task_grads` afterwards). One fused (foreach) kernel per task."""
    if len(alphas) != len(task_grads):
        raise ValueError(f"{len(alphas)} task weights for {len(task_grads)} gradient lists")
    combined: list[torch.Tensor | None] = [None] * len(task_grads[0])
    for k, grads in enumerate(task_grads):
        index = [t for t, g in enumerate(grads) if g is not None]
        if not index:
            continue
        present = [grads[t] for t in index]
        if in_place:
            torch._foreach_mul_(present, alphas[k])
            scaled = present
        else:
            scaled = torch._foreach_mul(present, alphas[k])
        fresh = [(t, s) for t, s in zip(index, scaled) if combined[t] is None]
        summed = [(t, s) for t, s in zip(index, scaled) if combined[t] is not None]
        for t, s in fresh:
            combined[t] = s
        if summed:
            torch._foreach_add_([combined[t] for t, _ in summed], [s for _, s in summed])
    return combined


def mt_tartan_loss(losses: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """L_total = w* L_T* + sum_i w_i L_Ti with fixed weights (eq. 3). losses, weights: [num_tasks]."""
    if losses.shape != weights.shape:
        raise ValueError(f"{tuple(losses.shape)} losses for {tuple(weights.shape)} task weights")
    return (weights.to(losses.dtype) * losses).sum()
