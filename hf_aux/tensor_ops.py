"""Tensor helpers the methods' loss functions share (hf_aux/<method>/losses.py)."""

from __future__ import annotations

import torch


def row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_v a_nv b_nv for each row n of two [N, V] tensors -> [N]: one `torch.dot` per row, one pass over both and
    no [N, V] product buffer. On CPU a batched [1, V] x [V, 1] product (`torch.bmm`) measured 5-7x slower over
    vocabulary-sized rows (20.8 against 3.9 ms on [256, 30526]; 12.2 against 1.7 ms on [154, 30522]), and
    `torch.linalg.vecdot` writes the product buffer."""
    return torch.stack([torch.dot(x, y) for x, y in zip(a, b)]) if len(a) else a.new_zeros(0)
