"""Tensor helpers the methods share: their loss functions (hf_aux/<method>/losses.py) and the meta-learned
objective teacher's vocabulary projection."""

from __future__ import annotations

import contextlib

import torch


ROW_DOTS_LOOP_FROM = 8192  # row length from which row_dots loops over the rows on CPU


def row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_v a_nv b_nv for each row n of two [N, V] tensors -> [N].

    On CPU, for rows of `ROW_DOTS_LOOP_FROM` entries or more, one `torch.dot` per row: one pass over both and no
    [N, V] product buffer, whose fresh pages a CPU allocator pays for (`torch.bmm` and `torch.linalg.vecdot` are
    slower over vocabulary-sized rows). Shorter rows, and elsewhere (CUDA): `torch.linalg.vecdot`, a few kernels
    however many rows, since there a call per row costs more than the arithmetic. Timings: docs/scaling.md."""
    if a.device.type != "cpu" or a.shape[-1] < ROW_DOTS_LOOP_FROM:
        return torch.linalg.vecdot(a, b)
    return torch.stack([torch.dot(x, y) for x, y in zip(a, b)]) if len(a) else a.new_zeros(0)


class _VocabularyProjection(torch.autograd.Function):
    """(weight [V, H], bias, hidden_1 [N_1, H], ..., hidden_k) -> (hidden_i weight^T + bias [N_i, V] for each i),
    with the weight's gradient made as (sum_i hidden_i^T G_i)^T: the groups' products accumulate in one [H, V]
    buffer, transposed into the weight's layout once."""

    @staticmethod
    def forward(ctx, weight, bias, *hiddens):
        ctx.save_for_backward(weight, *hiddens)
        ctx.has_bias = bias is not None
        ctx.set_materialize_grads(False)  # a group whose logits no loss used sends None: skipped
        return tuple(torch.addmm(bias, hidden, weight.t()) if bias is not None else hidden @ weight.t()
                     for hidden in hiddens)

    @staticmethod
    def backward(ctx, *grads):  # differentiable ops: a second derivative (create_graph) goes through them
        weight, *hiddens = ctx.saved_tensors
        used = [(hidden, grad) for hidden, grad in zip(hiddens, grads) if grad is not None]
        grad_hiddens = [grad @ weight if grad is not None and ctx.needs_input_grad[2 + i] else None
                        for i, grad in enumerate(grads)]
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[0] and used:
            (hidden, grad), rest = used[0], used[1:]
            transposed = hidden.t() @ grad  # [H, V]
            for hidden, grad in rest:  # in place where no graph is being built (the usual, single backward);
                # out= rather than addmm_, which torch's FlopCounterMode does not count (the benchmarks' floors)
                transposed = torch.addmm(transposed, hidden.t(), grad,
                                         **({} if torch.is_grad_enabled() else {"out": transposed}))
            grad_weight = transposed.t().contiguous()
        if ctx.has_bias and ctx.needs_input_grad[1] and used:
            grad_bias = torch.stack([grad.sum(0) for _, grad in used]).sum(0)
        return grad_weight, grad_bias, *grad_hiddens


def vocabulary_projection(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(hidden, weight, bias)` ([..., H] -> [..., V], weight [V, H] as nn.Linear keeps it), for a
    projection onto the vocabulary whose gradient G arrives long after it was made.

    torch's linear backward makes the weight gradient in the weight's layout, G^T hidden, which reads the
    [N, V] gradient down its columns, slow on CPU once G has left the cache; hidden^T G reads G along its rows,
    then is transposed into the weight's layout (timings: docs/scaling.md). The meta-learned objective's teacher
    heads are such a case: their gradients come at the end of a step whose vocabulary-sized buffers do not fit in
    the cache. Under autocast it computes in the autocast dtype, as F.linear does (the casts are outside the
    product, so the parameters' gradients come back in their own dtype). Its backward is made of differentiable
    operations, so second derivatives are exact too."""
    return vocabulary_projections([hidden], weight, bias)[0]


def vocabulary_projections(hiddens: list[torch.Tensor], weight: torch.Tensor,
                           bias: torch.Tensor | None = None) -> list[torch.Tensor]:
    """`vocabulary_projection` of several hidden states (each [..., H]) by one weight, in one call whose backward
    accumulates sum_i hidden_i^T G_i in one [H, V] buffer and transposes it into the weight's layout once, instead
    of a [V, H] gradient, its transpose and an addition per call (timings: docs/scaling.md): the teacher's heads
    project its x-hat rows and its auxiliary losses' rows."""
    device_type = weight.device.type
    autocast = torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)
    if autocast:  # cast as autocast would, then compute with it off (the Function's products are in that dtype)
        dtype = torch.get_autocast_dtype(device_type)
        hiddens, weight = [h.to(dtype) for h in hiddens], weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    with torch.autocast(device_type, enabled=False) if autocast else contextlib.nullcontext():
        logits = _VocabularyProjection.apply(weight, bias, *(h.reshape(-1, h.shape[-1]) for h in hiddens))
    return [out.view(*h.shape[:-1], weight.shape[0]) for out, h in zip(logits, hiddens)]


class _SoftEmbedding(torch.autograd.Function):
    """probs [N, V] x weight [V, H], with the weight's gradient made as (G^T probs)^T."""

    @staticmethod
    def forward(ctx, probs, weight):
        ctx.save_for_backward(probs, weight)
        return probs @ weight

    @staticmethod
    def backward(ctx, grad):  # differentiable ops: a second derivative (create_graph) goes through them
        probs, weight = ctx.saved_tensors
        grad_probs = grad @ weight.t() if ctx.needs_input_grad[0] else None
        grad_weight = (grad.t() @ probs).t().contiguous() if ctx.needs_input_grad[1] else None
        return grad_probs, grad_weight


def soft_embedding(probs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`probs @ weight`: the expected input embedding of a distribution over the vocabulary (probs [..., V],
    weight [V, H] the embedding matrix), for probabilities made long before the embedding's gradient is.

    torch's matmul backward makes the embedding's gradient as probs^T G, [V, N] x [N, H], which reads the [N, V]
    probabilities down their columns, slow on CPU once they have left the cache (the first-order meta step's pseudo
    input, made at its start); G^T probs reads them along their rows, then is transposed into the weight's layout
    (timings: docs/scaling.md). Outside autocast only (under autocast:
    `probs @ weight`, as autocast casts it)."""
    device_type = weight.device.type
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        return probs @ weight
    return _SoftEmbedding.apply(probs.reshape(-1, probs.shape[-1]), weight).view(*probs.shape[:-1], weight.shape[1])


# --------------------------------------------------------------------------------------------------------------
# The accelerator's path, selectable on CPU (what benchmarks/host_reads.py counts)
# --------------------------------------------------------------------------------------------------------------

_ACCELERATOR_PATHS = [False]  # accelerator_paths() sets it while host reads are counted on a CPU run


def on_accelerator(tensor: torch.Tensor) -> bool:
    """Whether code holding `tensor` takes the path written for an accelerator, where it must not read a value back
    to the host (a CUDA stream would stall): True on an accelerator, and on CPU inside `accelerator_paths()`."""
    return tensor.device.type != "cpu" or _ACCELERATOR_PATHS[0]


@contextlib.contextmanager
def accelerator_paths(enabled: bool = True):
    """Inside it, `on_accelerator` answers True on CPU too: benchmarks/host_reads.py counts, on a CPU run, the reads
    the accelerator's path makes (the CPU-only checks it skips are what the count guards)."""
    before, _ACCELERATOR_PATHS[0] = _ACCELERATOR_PATHS[0], enabled
    try:
        yield
    finally:
        _ACCELERATOR_PATHS[0] = before


def to_device_nonblocking(values, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`torch.tensor(values, dtype=dtype)` (or the host tensor `values`) on `device` without stopping the host:
    through pinned memory, copied asynchronously (a copy from ordinary host memory waits for the device's queue on
    CUDA; torch's pinned-memory cache keeps the buffer until the copy is done). On CPU the host tensor itself."""
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if torch.device(device).type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def __getattr__(name: str):
    from .._moved import moved_name  # names moved out of this module (issue #62)

    return moved_name(__name__, name)
