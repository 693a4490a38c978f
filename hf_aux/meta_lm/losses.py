"""Pure tensor functions of the teacher-student meta-learned LM objective (Shen, *Meta-learning a Language
Modeling Objective*). Each cites the paper's equation. Shapes: B batch, L length, V vocabulary.

Convention for pseudo outputs y-hat: the PAD token as a target means "nothing to predict here" (the MLM targets
the teacher learns from carry PAD at unmasked positions), so the student's pseudo loss skips it. Hard and soft
labels share one normaliser, the number of attended positions, so soft labels with one-hot probabilities give
exactly the hard-label loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hf_aux.runtime.tensor_ops import row_dots


# ---------------------------------------------------------------------------------------------- fused forms
# The vocabulary dimension V makes every [B, L, V] pass count (docs/meta_lm_measurements.md, "Fused vocabulary
# losses"): the cross entropies below keep ONE [N, V] buffer per loss (log softmax, or softmax for the sampled
# tokens) and their backward turns it into the gradient in place (no zero-filled one-hot gradient, no second buffer).
# Where a double backward goes through them (second-order soft labels' pseudo and support steps), the loss is
# built with `double_backward=True` and its backward is itself a function autograd differentiates once more
# (`_TokenNLLGrad`, `_SoftTokenNLLGrad`), with the second derivatives written out instead of autograd's composite
# ops and their [N, V] temporaries. Per row, with q = softmax(z), the gradient r g (s q - w) (s = sum w) and U its
# cotangent: d/dz = r g s q (U - q.U) (the softmax Jacobian is symmetric), d/dw_v = r g (q.U - U_v), d/dg =
# r (s q - w).U. Built without the flag, a backward with create_graph=True is refused, not silently treated as a
# constant. Gradients come back in float32 for half-precision logits; autograd casts them to the logits' dtype.


def _softmax_dtype(logits: torch.Tensor) -> torch.dtype | None:
    """float32 for half-precision logits (as autocast runs log-softmax), else None: the logits' own dtype."""
    return torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else None


def _weight_dtype(logits: torch.Tensor) -> torch.dtype:
    """The dtype of the per-position weights and the loss: float32 for half-precision logits."""
    return _softmax_dtype(logits) or logits.dtype


def _refuse_double_backward(name: str) -> None:
    if torch.is_grad_enabled():
        raise RuntimeError(f"hf_aux.meta_lm.losses.{name}: its fused backward cannot be differentiated again "
                           "(autograd.grad with create_graph=True); build the loss with double_backward=True")


class _WeightedTokenNLL(torch.autograd.Function):
    """sum_n r_n (-log softmax(z_n)[t_n]) over the rows of logits z [N, V], targets t [N], row weights r [N]."""

    @staticmethod
    def forward(ctx, logits, targets, row_weights, double_backward):
        log_probs = torch.log_softmax(logits, -1, dtype=_softmax_dtype(logits))
        ctx.double_backward = double_backward
        ctx.save_for_backward(log_probs, targets, row_weights, *([logits] if double_backward else []))
        picked = log_probs.gather(1, targets[:, None]).squeeze(1)  # rows of weight 0 (ignored) add exactly 0
        return -(picked.masked_fill(row_weights == 0, 0) * row_weights).sum()

    @staticmethod
    def backward(ctx, grad):
        log_probs, targets, row_weights, *logits = ctx.saved_tensors
        if ctx.double_backward and torch.is_grad_enabled():
            return _TokenNLLGrad.apply(logits[0], row_weights, grad, targets, [log_probs]), None, None, None
        _refuse_double_backward("token cross entropy")
        scale = (grad * row_weights).to(log_probs.dtype)[:, None]  # [N, 1]
        grad_logits = log_probs.exp_().mul_(scale)  # r g softmax(z), in log softmax(z)'s buffer
        return grad_logits.scatter_add_(1, targets[:, None], -scale), None, None, None


class _TokenNLLGrad(torch.autograd.Function):
    """`_WeightedTokenNLL`'s gradient r g (softmax(z) - e_t) as a function of the logits z and the incoming g that
    autograd differentiates (once). `cache`: [the forward's log softmax(z)], made softmax(z) in place."""

    @staticmethod
    def forward(ctx, logits, row_weights, grad, targets, cache):
        probs = cache.pop().exp_()
        scale = (grad * row_weights).to(probs.dtype)[:, None]  # [N, 1]
        ctx.save_for_backward(probs, row_weights, grad, targets)
        ctx.set_materialize_grads(False)
        return (probs * scale).scatter_add_(1, targets[:, None], -scale)

    @staticmethod
    def backward(ctx, cotangent):
        _refuse_double_backward("token cross entropy's gradient")
        probs, row_weights, grad, targets = ctx.saved_tensors
        grad_logits = grad_grad = None
        if cotangent is not None:
            cotangent = cotangent.to(probs.dtype)
            q_dot_u = row_dots(probs, cotangent)[:, None]  # [N, 1]
            if ctx.needs_input_grad[0]:  # r g q (U - q.U)
                scale = (grad * row_weights).to(probs.dtype)[:, None]
                grad_logits = (cotangent - q_dot_u).mul_(probs).mul_(scale)
            if ctx.needs_input_grad[2]:  # sum_n r_n (q.U - U_t)
                picked = cotangent.gather(1, targets[:, None])
                grad_grad = ((q_dot_u - picked).squeeze(1) * row_weights).sum()
        return grad_logits, None, grad_grad, None, None


class _SoftTokenNLL(torch.autograd.Function):
    """sum_n r_n (-sum_{v != pad} p_nv log softmax(z_n)_v) over logits z [N, V], label probabilities p [N, V]."""

    @staticmethod
    def forward(ctx, logits, probs, row_weights, pad, double_backward):
        log_probs = torch.log_softmax(logits, -1, dtype=_softmax_dtype(logits))
        weights = probs.to(log_probs.dtype)
        per_row = log_probs[:, pad] * weights[:, pad] - row_dots(weights, log_probs)  # sum_v p_v log q_v
        ctx.pad, ctx.double_backward = pad, double_backward
        ctx.save_for_backward(log_probs, probs, row_weights, *([logits] if double_backward else []))
        return (per_row * row_weights).sum()

    @staticmethod
    def backward(ctx, grad):
        log_probs, probs, row_weights, *logits = ctx.saved_tensors
        pad, wanted = ctx.pad, ctx.needs_input_grad[:2]
        if ctx.double_backward and torch.is_grad_enabled():
            grads = _SoftTokenNLLGrad.apply(logits[0], probs, row_weights, grad, pad, *wanted, [log_probs])
            return grads[0], grads[1], None, None, None
        _refuse_double_backward("soft cross entropy")
        grad_logits, grad_probs, _, _ = _soft_token_nll_grads(log_probs, probs.to(log_probs.dtype), row_weights,
                                                              grad, pad, *wanted, keep_softmax=False)
        return grad_logits, grad_probs, None, None, None


def _soft_token_nll_grads(log_probs, weights, row_weights, grad, pad, want_logits, want_probs, keep_softmax):
    """`_SoftTokenNLL`'s gradients, d/dz made in `log_probs`' buffer unless `keep_softmax` (then that buffer ends as
    softmax(z)):
    d/dp_v = -r g log q_v (0 for PAD, left out of the sum); d/dz = r g (s softmax(z) - w), w = p with PAD zeroed,
    s = sum w. Returns (d/dz, d/dp, softmax(z), s [N, 1]), None for a gradient not wanted."""
    scale = (grad * row_weights).to(log_probs.dtype)[:, None]  # [N, 1]
    grad_logits = grad_probs = None
    if want_probs:
        grad_probs = log_probs * -scale
        grad_probs[:, pad] = 0
    kept = weights.sum(-1, keepdim=True) - weights[:, pad:pad + 1]
    probs = log_probs.exp_()
    if want_logits:
        grad_logits = (torch.mul(probs, scale * kept) if keep_softmax else probs.mul_(scale * kept))
        grad_logits.addcmul_(weights, scale, value=-1)
        grad_logits[:, pad] += (scale * weights[:, pad:pad + 1]).squeeze(1)
    return grad_logits, grad_probs, probs, kept


class _SoftTokenNLLGrad(torch.autograd.Function):
    """`_SoftTokenNLL`'s gradients (d/dz, d/dp) as a function of z, p and the incoming g that autograd
    differentiates (once). `cache`: [the forward's log softmax(z)], made softmax(z) in place."""

    @staticmethod
    def forward(ctx, logits, probs, row_weights, grad, pad, want_logits, want_probs, cache):
        weights = probs.to(cache[0].dtype)
        grad_logits, grad_probs, softmax, kept = _soft_token_nll_grads(cache.pop(), weights, row_weights, grad, pad,
                                                                       want_logits, want_probs, keep_softmax=True)
        ctx.pad = pad
        ctx.save_for_backward(softmax, weights, row_weights, grad, kept)
        ctx.set_materialize_grads(False)
        return grad_logits, grad_probs

    @staticmethod
    def backward(ctx, u, y):
        """u, y: the cotangents of d/dz and d/dp (None where unused)."""
        _refuse_double_backward("soft cross entropy's gradient")
        softmax, weights, row_weights, grad, kept = ctx.saved_tensors
        pad = ctx.pad
        scale = (grad * row_weights).to(softmax.dtype)[:, None]  # [N, 1]
        grad_logits = grad_probs = None
        grad_grad = torch.zeros((), dtype=softmax.dtype, device=softmax.device) if ctx.needs_input_grad[3] else None
        if u is not None:
            u = u.to(softmax.dtype)
            q_dot_u = row_dots(softmax, u)[:, None]  # [N, 1]
            if ctx.needs_input_grad[0]:  # r g s q (U - q.U)
                grad_logits = (u - q_dot_u).mul_(softmax).mul_(scale * kept)
            if ctx.needs_input_grad[1]:  # r g (q.U - U_v), 0 for PAD
                grad_probs = (q_dot_u - u).mul_(scale)
                grad_probs[:, pad] = 0
            if grad_grad is not None:  # sum_n r_n (s q - w).U
                w_dot_u = row_dots(weights, u) - weights[:, pad] * u[:, pad]
                grad_grad = grad_grad + (row_weights * (kept.squeeze(1) * q_dot_u.squeeze(1) - w_dot_u)).sum()
        if y is not None:  # d/dp = -r g log q (PAD column 0): its cotangent y, PAD's entry left out
            y = y.to(softmax.dtype).clone()
            y[:, pad] = 0
            if ctx.needs_input_grad[0]:  # -r g (y - q sum y): the log-softmax Jacobian, transposed
                term = (y - softmax * y.sum(-1, keepdim=True)).mul_(-scale)
                grad_logits = term if grad_logits is None else grad_logits.add_(term)
            if grad_grad is not None:
                grad_grad = grad_grad - (row_weights * row_dots(softmax.log(), y)).sum()
        return grad_logits, grad_probs, None, grad_grad, None, None, None, None


class _SampledTokenNLL(torch.autograd.Function):
    """Tokens t_n ~ softmax(z_n) and their -log softmax(z_n)[t_n], from one softmax buffer that the backward
    turns into the gradient (softmax(z_n) - e_{t_n}) g_n in place."""

    @staticmethod
    def forward(ctx, logits, generator):
        probs = torch.softmax(logits, -1, dtype=_softmax_dtype(logits))
        tokens = inverse_cdf_sample(probs, generator)
        nll = -probs.gather(1, tokens[:, None]).squeeze(1).log()
        ctx.mark_non_differentiable(tokens)
        ctx.save_for_backward(probs, tokens)
        return tokens, nll

    @staticmethod
    def backward(ctx, grad_tokens, grad_nll):
        _refuse_double_backward("sampled-token cross entropy")
        probs, tokens = ctx.saved_tensors
        scale = grad_nll.to(probs.dtype)[:, None]
        return probs.mul_(scale).scatter_add_(1, tokens[:, None], -scale), None


def inverse_cdf_sample(weights: torch.Tensor, generator: torch.Generator | None = None,
                       block: int = 256) -> torch.Tensor:
    """One index per row of non-negative `weights` [N, V], index k with probability w_k / sum w (the sampling step
    of §3.2), by inverse CDF in two levels: one uniform number u per row against the cumulative sums of blocks of
    `block` entries (one read of the weights, no [N, V] buffer), then against the cumulative sums inside the chosen
    block. The cumulative sums are float64. torch.multinomial draws an exponential number for every vocabulary
    entry instead, and one cumulative sum over all V entries writes an [N, V] float64 buffer."""
    n, v = weights.shape
    full = v // block
    parts = [weights[:, :full * block].view(n, full, block).sum(-1)] if full else []
    if v > full * block:
        parts.append(weights[:, full * block:].sum(-1, keepdim=True))
    block_sums = torch.cat(parts, 1).double()  # [N, blocks]
    cumulative = block_sums.cumsum(-1)
    u = torch.rand((n, 1), generator=generator, dtype=torch.float64, device=weights.device) * cumulative[:, -1:]
    chosen = torch.searchsorted(cumulative, u, right=True).clamp_(max=block_sums.shape[1] - 1)  # [N, 1]
    inside = u - (cumulative.gather(1, chosen) - block_sums.gather(1, chosen))  # u past the blocks before
    index = chosen * block + torch.arange(block, device=weights.device)  # [N, block]
    values = weights.gather(1, index.clamp(max=v - 1)).double().masked_fill_(index >= v, 0)
    drawn = torch.searchsorted(values.cumsum(-1), inside, right=True)
    # rounding can put u at or past the block's last cumulative sum: the block's last entry with weight > 0
    last = ((values > 0) * torch.arange(block, device=weights.device)).amax(-1, keepdim=True)
    return (chosen * block + torch.minimum(drawn, last)).squeeze(1)


def pseudo_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, attention_mask: torch.Tensor,
                         pad_token_id: int) -> torch.Tensor:
    """CE(y-hat, S(x-hat)) of eq. 1 for hard labels, logits [B, L, V], targets (token ids) [B, L]: -log p(target)
    summed over attended positions whose target is not PAD, divided by the attended positions."""
    weight = attention_mask.to(_weight_dtype(logits)) * (targets != pad_token_id).to(_weight_dtype(logits))
    row_weights = (weight / attention_mask.sum().clamp_min(1)).flatten()
    return _WeightedTokenNLL.apply(logits.flatten(0, 1), targets.flatten(), row_weights, False)


def soft_pseudo_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor, attention_mask: torch.Tensor,
                              pad_token_id: int, double_backward: bool = False) -> torch.Tensor:
    """CE(E[y-hat], S(E[x-hat])) of eq. 1 with soft labels (§3.3), logits and target_probs [B, L, V]: per position
    -sum_v w_v log softmax(z)_v, w the teacher's probabilities with PAD's zeroed (the chance "nothing to predict
    here"), normalised by the attended positions like `pseudo_cross_entropy`. `double_backward=True`: the gradient
    is a function autograd differentiates again (second-order soft labels differentiate it with respect to the
    student's parameters and, through it, the labels).
    """
    mask = attention_mask.to(_weight_dtype(logits))
    row_weights = (mask / mask.sum().clamp_min(1)).flatten()
    return _SoftTokenNLL.apply(logits.flatten(0, 1), target_probs.flatten(0, 1), row_weights, pad_token_id,
                               double_backward)


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, double_backward: bool = False) -> torch.Tensor:
    """Mean CE over positions whose label is not -100 (support/query batches of eqs. 2-3, MLM targets), as
    F.cross_entropy(ignore_index=-100) (NaN where every label is -100). `double_backward=True`: the gradient is a
    function autograd differentiates again (second-order soft labels' support step)."""
    labels = labels.flatten()
    counted = (labels != -100).to(_weight_dtype(logits))
    return _WeightedTokenNLL.apply(logits.flatten(0, 1), labels.clamp_min(0), counted / counted.sum(),
                                   double_backward)


def sample_tokens_with_nll(logits: torch.Tensor, generator: torch.Generator | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's samples (§3.2): one token per position from softmax(logits) [B, L, V] -> tokens [B, L], and
    their -log p [B, L], differentiable in the logits (the terms of eq. 6). One uniform number per position from
    `generator` (`inverse_cdf_sample`)."""
    tokens, nll = _SampledTokenNLL.apply(logits.flatten(0, -2), generator)
    return tokens.view(logits.shape[:-1]), nll.view(logits.shape[:-1])


def teacher_sample_cross_entropy(x_nll: torch.Tensor, y_nll: torch.Tensor | None,
                                 attention_mask: torch.Tensor) -> torch.Tensor:
    """CE((x-hat, y-hat), T(x_u)) of eq. 6: the teacher's average CE of its own samples over attended positions
    of both heads (the factor N of eq. 5 dropped, as the paper does), from the per-position -log p of
    `sample_tokens_with_nll` [B, L]. `y_nll` None: x-hat only (the fixed-y variant)."""
    mask = attention_mask.to(x_nll.dtype)
    nll, count = x_nll * mask, mask.sum()
    if y_nll is not None:
        nll, count = nll + y_nll * mask, 2 * count
    return nll.sum() / count.clamp_min(1)


def meta_signal_h(query_grads: list[torch.Tensor], theta_0: list[torch.Tensor], theta_1: list[torch.Tensor],
                  cosine: bool) -> torch.Tensor:
    """The scalar h that scales the teacher's gradient (eq. 6).

    cosine=True: eq. 8, h = S_C(grad_{theta_2} CE_query, theta_0 - theta_1) (adaptive optimizers).
    cosine=False: eq. 7, h = grad_{theta_2} CE_query . (theta_0 - theta_1); for plain SGD theta_0 - theta_1 is
    eta * grad_{theta_0} CE_pseudo, i.e. exactly eq. 7's eta times the dot product of the two gradients.
    Per-tensor dots and norms: the lists are never flattened into one vector.
    """
    delta = torch._foreach_sub(theta_0, theta_1)
    dot = torch.stack([torch.vdot(q.flatten(), d.flatten()) for q, d in zip(query_grads, delta)]).sum()
    norm_q, norm_d = (torch.stack(torch._foreach_norm(tensors)).norm() for tensors in (query_grads, delta))
    return dot / (norm_q * norm_d) if cosine else dot


def first_order_soft_label_grads(label_grads_at: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                                 theta_0: list[torch.Tensor], w: list[torch.Tensor | None],
                                 base: list[torch.Tensor], radius: float, scale: float = 1.0) -> list[torch.Tensor]:
    """First-order soft-label meta-gradient dL/dp with respect to the teacher's soft labels p = (E[x-hat], E[y-hat])
    (§3.3), from ONE extra forward and backward of the pseudo step instead of a double backward through it.

    Derivation. L = CE(y_l1, S(x_l1; theta_2)) (eq. 3), theta_2 = theta_1 - alpha grad CE_support(theta_1) (eq. 2),
    theta_1 = U(theta_0, g) the student optimizer's update (eq. 1) with g = grad_theta f(theta_0; p) and
    f = CE(E[y-hat], S(E[x-hat])). First order as eq. 7: dL/dtheta_1 ~ v = grad_{theta_2} L (theta_2's dependence
    on the teacher through the support gradient dropped). Then dL/dp ~ (dg/dp)^T w with w = (dU/dg)^T v (a
    vector-Jacobian product of the update; -eta v for SGD), and since <w, grad_theta f(theta_0; p)> is the
    directional derivative of f along w,
        dL/dp ~ d/de grad_p f(theta_0 + e w; p) |_{e=0}
              ~ (grad_p f(theta_0 + e w; p) - grad_p f(theta_0; p)) / e,   e = radius / ||w||.
    grad_p f(theta_0; p) (`base`) comes from the pseudo step's own backward (together with g, which the student's
    real step needs anyway); `label_grads_at(params)` returns grad_p f(params; p) with the same dropout masks,
    as tensors of its own (autograd.grad's results): the difference is made in them, in place.
    The forward difference is first-order accurate in e (the test compares it with the exact double backward).

    `w` None entries (parameters the pseudo loss does not reach) are zero. Returns `scale` dL/dp, one tensor per
    entry of `base` (the scale, e.g. lambda_meta, taken in the same pass as the division by e). A zero w (e.g. a
    zero student step) gives zeros.
    """
    present = [d for d in w if d is not None]
    norm = torch.stack(torch._foreach_norm(present)).norm() if present else torch.zeros(())
    # a zero w is decided on the device (reading norm > 0 would stop the host once per update): the shift is then 0
    # and the factor 0, so the result is zeros
    eps = radius / norm.clamp_min(torch.finfo(norm.dtype).tiny)
    shifted = [t.detach() if d is None else torch.addcmul(t.detach(), d, eps) for t, d in zip(theta_0, w)]
    at_shift = label_grads_at(shifted)  # fresh tensors: the difference is made in them
    factor = torch.where(norm > 0, scale / eps, 0.0)
    return [s.sub_(b).mul_(factor) for s, b in zip(at_shift, base)]
