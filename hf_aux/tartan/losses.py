"""TARTAN's task-weight math as pure tensor functions (Dery et al., 2022, "Should We Be Pre-training? An Argument
for End-task Aware Training as an Alternative", ICLR; arXiv:2109.07437).

MT-TARTAN's fixed-weight loss (eq. 3) is here; META-TARTAN's rule (Algorithm 1, eq. 7) is `hf_aux.tartan.weighting`.
"""

from __future__ import annotations

import torch

# The META rule (cosines, the weight update, the softmax mixture, the combined gradient) is shared with MUPPET's
# end-task-aware mode, so it lives once in hf_aux.tartan.weighting; its names stay importable from here.
from .weighting import combine_gradients, gradient_cosines, meta_update, task_mixture, update_task_weights  # noqa: F401


def mt_tartan_loss(losses: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """L_total = w* L_T* + sum_i w_i L_Ti with fixed weights (eq. 3). losses, weights: [num_tasks]."""
    if losses.shape != weights.shape:
        raise ValueError(f"{tuple(losses.shape)} losses for {tuple(weights.shape)} task weights")
    return (weights.to(losses.dtype) * losses).sum()
