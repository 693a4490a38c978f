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
import torch.nn.functional as F


def pseudo_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, attention_mask: torch.Tensor,
                         pad_token_id: int) -> torch.Tensor:
    """CE(y-hat, S(x-hat)) of eq. 1 for hard labels. logits [B, L, V]; targets (token ids) [B, L].

    Sum of -log p(target) over attended positions whose target is not PAD, divided by the attended positions.
    """
    weight = attention_mask.to(logits.dtype) * (targets != pad_token_id).to(logits.dtype)
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(weight)
    return (nll * weight).sum() / attention_mask.sum().clamp_min(1)


def soft_pseudo_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor, attention_mask: torch.Tensor,
                              pad_token_id: int) -> torch.Tensor:
    """CE(E[y-hat], S(E[x-hat])) of eq. 1 with soft labels (§3.3): the teacher's probabilities as the label.

    logits [B, L, V]; target_probs [B, L, V]. The PAD probability is the chance "nothing to predict here", so it
    is left out of the sum; normalised by the attended positions like `pseudo_cross_entropy`.

    Per position, with w the target probabilities with PAD's zeroed and z the logits,
    -sum_v w_v log softmax(z)_v = logsumexp(z) sum_v w_v - sum_v w_v z_v: no [B, L, V] log-probabilities, and no
    indexing of the PAD column, whose backward (and double backward, for second-order soft labels) would fill a
    zero [B, L, V] buffer.
    """
    keep = torch.ones(logits.shape[-1], dtype=target_probs.dtype, device=target_probs.device)
    keep[pad_token_id] = 0
    weights = target_probs * keep
    per_position = logits.logsumexp(-1) * weights.sum(-1) - (weights * logits).sum(-1)
    mask = attention_mask.to(logits.dtype)
    return (per_position * mask).sum() / mask.sum().clamp_min(1)


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean CE over positions whose label is not -100 (support/query batches of eqs. 2-3, MLM targets)."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def teacher_sample_cross_entropy(x_logits: torch.Tensor, y_logits: torch.Tensor | None, x_hat: torch.Tensor,
                                 y_hat: torch.Tensor | None, attention_mask: torch.Tensor) -> torch.Tensor:
    """CE((x-hat, y-hat), T(x_u)) of eq. 6: the teacher's average CE of its own samples over attended positions
    of both heads (the factor N of eq. 5 dropped, as the paper does). `y_logits`/`y_hat` None: x-hat only
    (the fixed-y variant)."""
    mask = attention_mask.to(x_logits.dtype)
    nll = F.cross_entropy(x_logits.flatten(0, 1), x_hat.flatten(), reduction="none").view_as(mask) * mask
    count = mask.sum()
    if y_logits is not None:
        nll = nll + F.cross_entropy(y_logits.flatten(0, 1), y_hat.flatten(), reduction="none").view_as(mask) * mask
        count = 2 * count
    return nll.sum() / count.clamp_min(1)


def sample_tokens(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per position from softmax(logits) [B, L, V] -> [B, L] (the sampling step of §3.2).

    Inverse-CDF sampling: one uniform number per position against the cumulative unnormalised probabilities
    (summed in float64), so token k is drawn when c_{k-1} <= u c_V < c_k, with probability exactly softmax(z)_k.
    torch.multinomial draws an exponential number for every vocabulary entry instead (V random numbers per
    position; about 0.2 s per [256, 30k] draw on one CPU thread, against ~0.03 s here)."""
    flat = logits.detach().flatten(0, -2).float()  # [N, V]
    cumulative = torch.cumsum((flat - flat.amax(-1, keepdim=True)).exp_(), -1, dtype=torch.float64)
    total = cumulative[:, -1:]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=flat.device) * total
    drawn = torch.searchsorted(cumulative, u, right=True).clamp_(max=flat.shape[-1] - 1)
    return drawn.view(logits.shape[:-1])


def per_tensor_dot_and_norms(a: list[torch.Tensor], b: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor,
                                                                                      torch.Tensor]:
    """(sum_i <a_i, b_i>, ||a||, ||b||) over lists of tensors, without flattening them into one vector."""
    dot = torch.stack([torch.vdot(x.flatten(), y.flatten()) for x, y in zip(a, b)]).sum()
    norm_a = torch.stack(torch._foreach_norm(a)).norm()
    norm_b = torch.stack(torch._foreach_norm(b)).norm()
    return dot, norm_a, norm_b


def meta_signal_h(query_grads: list[torch.Tensor], theta_0: list[torch.Tensor], theta_1: list[torch.Tensor],
                  cosine: bool) -> torch.Tensor:
    """The scalar h that scales the teacher's gradient (eq. 6).

    cosine=True: eq. 8, h = S_C(grad_{theta_2} CE_query, theta_0 - theta_1) (adaptive optimizers).
    cosine=False: eq. 7, h = grad_{theta_2} CE_query . (theta_0 - theta_1); for plain SGD theta_0 - theta_1 is
    eta * grad_{theta_0} CE_pseudo, i.e. exactly eq. 7's eta times the dot product of the two gradients.
    """
    delta = torch._foreach_sub(theta_0, theta_1)
    dot, norm_q, norm_d = per_tensor_dot_and_norms(query_grads, delta)
    return dot / (norm_q * norm_d) if cosine else dot


def first_order_soft_label_grads(label_grads_at: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                                 theta_0: list[torch.Tensor], w: list[torch.Tensor | None],
                                 base: list[torch.Tensor], radius: float) -> list[torch.Tensor]:
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
    real step needs anyway); `label_grads_at(params)` returns grad_p f(params; p) with the same dropout masks.
    The forward difference is first-order accurate in e (the test compares it with the exact double backward).

    `w` None entries (parameters the pseudo loss does not reach) are zero. Returns one tensor per entry of `base`.
    A zero w (e.g. a zero student step) gives zeros.
    """
    present = [d for d in w if d is not None]
    norm = torch.stack(torch._foreach_norm(present)).norm() if present else torch.zeros(())
    if not bool(norm > 0):
        return [torch.zeros_like(b) for b in base]
    eps = radius / norm
    shifted = [t.detach() if d is None else torch.addcmul(t.detach(), d, eps) for t, d in zip(theta_0, w)]
    at_shift = label_grads_at(shifted)
    return [(s - b) / eps for s, b in zip(at_shift, base)]
