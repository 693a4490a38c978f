"""Tensor helpers the methods' loss functions share (hf_aux/<method>/losses.py)."""

from __future__ import annotations

import torch


def row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_v a_nv b_nv for each row n of two [N, V] tensors -> [N].

    On CPU one `torch.dot` per row: one pass over both and no [N, V] product buffer (a batched [1, V] x [V, 1]
    product, `torch.bmm`, measured 5-7x slower over vocabulary-sized rows: 20.8 against 3.9 ms on [256, 30526],
    12.2 against 1.7 ms on [154, 30522]; `torch.linalg.vecdot` writes the product buffer, whose fresh pages a CPU
    allocator pays for). Elsewhere (CUDA) `torch.linalg.vecdot`: a few kernels however many rows, its buffer
    from the caching allocator, where a launch per row would cost more than the arithmetic."""
    if a.device.type != "cpu":
        return torch.linalg.vecdot(a, b)
    return torch.stack([torch.dot(x, y) for x, y in zip(a, b)]) if len(a) else a.new_zeros(0)
