"""Tensor helpers the methods share: their loss functions (hf_aux/<method>/losses.py) and the meta-learned
objective teacher's vocabulary projection."""

from __future__ import annotations

import contextlib

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


class _VocabularyProjection(torch.autograd.Function):
    """hidden [N, H] -> hidden weight^T + bias [N, V], with the weight's gradient made as (hidden^T G)^T."""

    @staticmethod
    def forward(ctx, hidden, weight, bias):
        ctx.save_for_backward(hidden, weight)
        ctx.has_bias = bias is not None
        return torch.addmm(bias, hidden, weight.t()) if bias is not None else hidden @ weight.t()

    @staticmethod
    def backward(ctx, grad):  # differentiable ops: a second derivative (create_graph) goes through them
        hidden, weight = ctx.saved_tensors
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = (hidden.t() @ grad).t().contiguous() if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias


def vocabulary_projection(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(hidden, weight, bias)` ([..., H] -> [..., V], weight [V, H] as nn.Linear keeps it), for a
    projection onto the vocabulary whose gradient G arrives long after it was made.

    torch's linear backward makes the weight gradient in the weight's layout, G^T hidden, which reads the
    [N, V] gradient down its columns: on CPU (MKL) 26 ms for [256, 30526] x [256, 64] when G is not in the cache,
    against 7-9 ms when it is (an MLM step: G was just made) and 8-9 ms for hidden^T G, which reads G along its
    rows, then 1-2 ms more to transpose into the weight's layout (docs/meta_lm_measurements.md). The meta-learned
    objective's teacher heads are such a case: their gradients come at the end of a step whose vocabulary-sized
    buffers do not fit in the cache. Under autocast it computes in the autocast dtype, as F.linear does (the
    casts are outside the product, so the parameters' gradients come back in their own dtype). Its backward is
    made of differentiable operations, so second derivatives are exact too."""
    device_type = hidden.device.type
    autocast = torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)
    if autocast:  # cast as autocast would, then compute with it off (the Function's products are in that dtype)
        dtype = torch.get_autocast_dtype(device_type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    with torch.autocast(device_type, enabled=False) if autocast else contextlib.nullcontext():
        logits = _VocabularyProjection.apply(hidden.reshape(-1, hidden.shape[-1]), weight, bias)
    return logits.view(*hidden.shape[:-1], weight.shape[0])
