"""The student's optimizer step as a function, for the meta-learned LM objective (Shen, §3; eq. 1).

The meta objective needs theta_1 = U(theta_0, g), the parameters Trainer's real step will produce from the pseudo
gradient g (clipping to `max_grad_norm`, then torch's AdamW or SGD update), before that step happens, and for soft
labels its derivative:
- `student_update`: theta_1 differentiable in g (second-order soft labels backpropagate through it, like
  `higher`'s differentiable optimizers): the values below forward, the closed-form product below backward;
- `student_update_values`: theta_1 as values only (hard labels, first-order soft labels), from torch's own
  functional AdamW/SGD (fused or foreach, as the optimizer is) on copies of the parameters and state;
- `student_update_vjp`: (dtheta_1/dg)^T v in closed form (first-order soft labels, and `student_update`'s
  backward), from `clip_by_total_norm_vjp` and `adamw_update_vjp_from_moments`.
Clipping is `clip_by_total_norm` in all three. `optimizer` is the torch optimizer itself (unwrapped from
accelerate), an AdamW without amsgrad/maximize or an SGD without momentum/maximize; `params` its parameters.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.optim.adamw import adamw as adamw_functional
from torch.optim.sgd import sgd as sgd_functional

from ..runtime.tensor_ops import on_accelerator


def optimizer_steps(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> list[int]:
    """The optimizer's step count of each of `params` (0 before its first update), read with at most one host
    transfer: a fused or capturable AdamW (Trainer's default on CUDA is fused) keeps each count as a tensor on the
    device, and reading them one by one stops the host once per parameter (docs/meta_lm_measurements.md)."""
    steps = [optimizer.state.get(p, {}).get("step", 0) for p in params]
    on_device = [i for i, s in enumerate(steps) if isinstance(s, torch.Tensor) and on_accelerator(s)]
    if on_device:
        steps = placed(steps, on_device, torch.stack([steps[i].reshape(()).float() for i in on_device]).tolist())
    return [int(s) for s in steps]


def placed(base: list, indices: list[int], values) -> list:
    """A copy of `base` with `values` at `indices` (a list over all parameters from the entries of some)."""
    out = list(base)
    for i, value in zip(indices, values):
        out[i] = value
    return out


def student_update(optimizer: torch.optim.Optimizer, max_grad_norm: float | None, params: list[torch.Tensor],
                   grads: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """theta_1 of eq. 1 as a function of `grads`, differentiable when they carry a graph; parameters without a
    gradient keep their value. The backward is the closed-form `student_update_vjp` on the clipped gradient and
    moments kept from the forward: a few in-place foreach passes per parameter instead of autograd's graph of the
    update written out per tensor, which passes over every parameter many times (docs/meta_lm_measurements.md).
    It is differentiated once (the meta step never differentiates it again; a second time is refused)."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if not any(grads[i].requires_grad for i in present):
        return student_update_values(optimizer, max_grad_norm, params, grads)
    updated = _StudentUpdate.apply(optimizer, max_grad_norm, params, present, *[grads[i] for i in present])
    return placed([p.detach() for p in params], present, updated)


class _StudentUpdate(torch.autograd.Function):
    """`student_update` for the parameters in `present`: values forward, (dtheta_1/dg)^T v backward."""

    @staticmethod
    def forward(ctx, optimizer, max_grad_norm, params, present, *present_grads):
        moments = {}
        theta_1 = student_update_values(optimizer, max_grad_norm, params,
                                        placed([None] * len(params), present, present_grads), moments)
        ctx.update = (optimizer, max_grad_norm, params, present)
        ctx.moments = moments  # fresh copies (clipped gradient, m, v) that the backward overwrites
        ctx.save_for_backward(*present_grads)
        return tuple(theta_1[i] for i in present)

    @staticmethod
    def backward(ctx, *cotangents):
        if torch.is_grad_enabled():
            raise RuntimeError("hf_aux.meta_lm.functional_optim.student_update: its backward cannot be "
                               "differentiated again (autograd.grad with create_graph=True)")
        if ctx.moments is None:
            raise RuntimeError("hf_aux.meta_lm.functional_optim.student_update: backward through it a second time "
                               "(retain_graph=True) is not supported: its backward reuses the forward's buffers")
        optimizer, max_grad_norm, params, present = ctx.update
        grads, full = (placed([None] * len(params), present, values) for values in (ctx.saved_tensors, cotangents))
        moments, ctx.moments = ctx.moments, None
        w = student_update_vjp(optimizer, max_grad_norm, params, grads, full, moments)
        return (None, None, None, None, *[w[i] for i in present])


@torch.no_grad()
def student_update_values(optimizer: torch.optim.Optimizer, max_grad_norm: float | None,
                          params: list[torch.Tensor], grads: list[torch.Tensor | None],
                          moments: dict | None = None) -> list[torch.Tensor]:
    """theta_1 as values only: clipping, then the optimizer's own functional update (torch.optim.adamw.adamw /
    sgd.sgd, fused or foreach as the optimizer) on copies of the parameters and of its state.
    `moments`: a dict to fill with the clipped gradients and the updated copies of the moments, for
    `student_update_vjp`: {parameter index: (clipped gradient, m, v)}."""
    present = [i for i, g in enumerate(grads) if g is not None]
    # under no_grad a clone carries no graph: no detach (a call per tensor counts on small models)
    clipped = clip_by_total_norm([grads[i].clone() for i in present], max_grad_norm, in_place=True)
    theta_1 = [p.detach() for p in params]
    slot = {id(params[i]): (i, g) for i, g in zip(present, clipped)}
    sgd = type(optimizer) is torch.optim.SGD
    for group in optimizer.param_groups:
        members = [slot[id(p)] for p in group["params"] if id(p) in slot]
        if not members:
            continue
        new = [params[i].clone() for i, _ in members]
        group_grads = [g for _, g in members]
        if sgd:
            sgd_functional(new, group_grads, [None] * len(new), foreach=group["foreach"],
                           fused=group["fused"], weight_decay=group["weight_decay"], momentum=0.0,
                           lr=group["lr"], dampening=0.0, nesterov=False, maximize=False)
        else:
            states = [optimizer.state.get(params[i], {}) for i, _ in members]
            exp_avgs, exp_avg_sqs = ([s[key].clone() if key in s else torch.zeros_like(p) for s, p in zip(states, new)]
                                     for key in ("exp_avg", "exp_avg_sq"))
            fused = bool(group["fused"])
            steps = [s["step"].clone() if "step" in s else
                     torch.zeros((), dtype=torch.float32, device=p.device if fused else "cpu")
                     for s, p in zip(states, new)]
            beta1, beta2 = group["betas"]
            adamw_functional(new, group_grads, exp_avgs, exp_avg_sqs, [], steps,
                             foreach=None if fused else group["foreach"], fused=group["fused"],
                             amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"],
                             weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
        for k, (i, grad) in enumerate(members):
            theta_1[i] = new[k]
            if moments is not None:
                moments[i] = (grad, None, None) if sgd else (grad, exp_avgs[k], exp_avg_sqs[k])
    return theta_1


@torch.no_grad()
def student_update_vjp(optimizer: torch.optim.Optimizer, max_grad_norm: float | None, params: list[torch.Tensor],
                       grads: list[torch.Tensor | None], cotangents: list[torch.Tensor],
                       moments: dict) -> list[torch.Tensor | None]:
    """w = (dtheta_1/dg)^T v for `student_update`'s map from the gradient g to theta_1 (clipping, then the
    optimizer's update), in closed form (`clip_by_total_norm_vjp`, `adamw_update_vjp_from_moments`; -lr v for
    SGD). It reuses, and overwrites, the clipped gradient and updated moments that `student_update_values(...,
    moments=...)` filled in `moments` (one fresh parameter-sized list instead of seven)."""
    present = [i for i, g in enumerate(grads) if g is not None]
    through_update = {}  # parameter index: its cotangent pulled back through the optimizer's update
    slot = {id(params[i]): i for i in present}
    groups = [[p for p in group["params"] if id(p) in slot] for group in optimizer.param_groups]
    steps = iter(optimizer_steps(optimizer, [p for trained in groups for p in trained]))  # one read for all groups
    for group, trained in zip(optimizer.param_groups, groups):  # one foreach call per group and step count
        buckets = defaultdict(list)
        for p in trained:
            buckets[next(steps)].append(slot[id(p)])
        for step, indices in buckets.items():
            cotangent = [cotangents[i] for i in indices]
            if type(optimizer) is torch.optim.SGD:
                values = torch._foreach_mul(cotangent, -float(group["lr"]))
            else:  # moments[i]: (clipped gradient, m, v)
                values = adamw_update_vjp_from_moments(
                    *([moments[i][k] for i in indices] for k in range(3)),
                    step, float(group["lr"]), *group["betas"], group["eps"], cotangent)
            through_update.update(zip(indices, values))
    raw = [grads[i].detach() for i in present]
    pulled = clip_by_total_norm_vjp(raw, max_grad_norm, [through_update[i] for i in present], in_place=True)
    return placed([None] * len(params), present, pulled)


def clip_by_total_norm(grads: list[torch.Tensor], max_norm: float | None,
                       in_place: bool = False) -> list[torch.Tensor]:
    """torch.nn.utils.clip_grad_norm_ as a function (Trainer clips before eq. 1's step): g * min(1, max_norm /
    (||g|| + 1e-6)), ||g|| the norm of all tensors together; differentiable in `grads` (twice: second-order soft
    labels). `in_place`: scales `grads` themselves (values only, no graph). max_norm None or <= 0: no clipping."""
    if max_norm is None or max_norm <= 0:
        return list(grads)
    total = torch.stack(torch._foreach_norm(grads)).norm()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    if in_place:
        torch._foreach_mul_(grads, coef)
        return list(grads)
    return [g * coef for g in grads]


def sgd_update(param: torch.Tensor, grad: torch.Tensor, lr: float, weight_decay: float = 0.0) -> torch.Tensor:
    """theta - lr * (grad + weight_decay * theta): eq. 1 with plain SGD, and eq. 2's inner step (weight_decay 0)."""
    if weight_decay:
        grad = grad + weight_decay * param
    return param - lr * grad


def adamw_update_vjp(grads: list[torch.Tensor], exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
                     step: int, lr: float, beta1: float, beta2: float, eps: float,
                     cotangents: list[torch.Tensor]) -> list[torch.Tensor]:
    """cotangent^T d theta_1 / d grad of torch.optim.AdamW's update theta_1 = theta (1 - lr wd) - (lr / bc1) m / D
    for a list of tensors sharing one step and lr (an optimizer's param group), in closed form (the update is
    elementwise in the gradient): with m = beta1 m_0 + (1 - beta1) g, v = beta2 v_0 + (1 - beta2) g^2,
    s = sqrt(v), D = s / sqrt(bc2) + eps, bc_k = 1 - beta_k^step,
        d theta_1 / d g = -(lr / bc1) ((1 - beta1) / D - m (1 - beta2) g / (D^2 sqrt(bc2) s)),
    the second term taken as 0 where s = 0 (sqrt's derivative at 0 taken as 0, not NaN). `exp_avgs`,
    `exp_avg_sqs` are the moments before the step; `adamw_update_vjp_from_moments` takes the updated ones."""
    if not grads:
        return []
    m = torch._foreach_mul(exp_avgs, beta1)
    torch._foreach_add_(m, grads, alpha=1 - beta1)
    v = torch._foreach_mul(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
    return adamw_update_vjp_from_moments(grads, m, v, step, lr, beta1, beta2, eps, cotangents)


def adamw_update_vjp_from_moments(grads: list[torch.Tensor], new_exp_avgs: list[torch.Tensor],
                                  new_exp_avg_sqs: list[torch.Tensor], step: int, lr: float, beta1: float,
                                  beta2: float, eps: float, cotangents: list[torch.Tensor]) -> list[torch.Tensor]:
    """`adamw_update_vjp` from the moments m, v AFTER the step (what the optimizer's own update leaves in copies
    of its state). Overwrites `new_exp_avgs` and `new_exp_avg_sqs` (used as work space) and allocates one
    parameter-sized list: on a large model a fresh buffer pays page faults that an elementwise pass in place does
    not, so `torch._foreach_*` ops run in place."""
    if not grads:
        return []
    step = step + 1
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    s = new_exp_avg_sqs
    torch._foreach_sqrt_(s)  # s = sqrt(v), v >= 0
    denom = torch._foreach_mul(s, 1 / bias_correction2_sqrt)
    torch._foreach_add_(denom, eps)
    # through_v = m (1 - beta2) g / (D^2 sqrt(bc2) s) where s > 0, else 0 (g^2 can underflow to v = 0 with g != 0):
    # the factor s makes it exactly 0 there, and a positive s is at least the square root of the smallest
    # subnormal, far above finfo.tiny, so clamping s there changes only s = 0; dividing one factor at a time
    # never forms 0 / 0
    through_v = new_exp_avgs
    torch._foreach_mul_(through_v, grads)
    torch._foreach_mul_(through_v, s)
    torch._foreach_div_(through_v, denom)
    torch._foreach_div_(through_v, denom)
    torch._foreach_clamp_min_(s, torch.finfo(s[0].dtype).tiny)
    torch._foreach_div_(through_v, s)
    torch._foreach_div_(through_v, s)
    torch._foreach_mul_(through_v, (1 - beta2) / bias_correction2_sqrt)
    out = denom
    torch._foreach_reciprocal_(out)
    torch._foreach_mul_(out, 1 - beta1)
    torch._foreach_sub_(out, through_v)
    torch._foreach_mul_(out, cotangents)
    torch._foreach_mul_(out, -(lr / bias_correction1))
    return out


def clip_by_total_norm_vjp(grads: list[torch.Tensor], max_norm: float, cotangents: list[torch.Tensor],
                           in_place: bool = False) -> list[torch.Tensor]:
    """The cotangents of `clip_by_total_norm`'s output pulled back to its input: with n = ||g||, c = min(1,
    max_norm / (n + 1e-6)), the output c g has the vector-Jacobian product c u - [c < 1] max_norm / (n + 1e-6)^2
    <u, g> / n g. `in_place`: written into `cotangents` (no new parameter-sized buffers). Whether c < 1 is decided
    on the device (c = 1 and no second term otherwise): reading it would stop the host once per update."""
    if max_norm is None or max_norm <= 0:
        return list(cotangents)
    total = torch.stack(torch._foreach_norm(grads)).norm()
    clipped = total + 1e-6 > max_norm                                    # c < 1
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    dot = torch.stack([torch.vdot(u.flatten(), g.flatten()) for u, g in zip(cotangents, grads)]).sum()
    along = torch.where(clipped, max_norm / (total + 1e-6) ** 2 * dot / total, 0.0)
    if in_place:
        return [u.mul_(coef).addcmul_(g, along, value=-1) for u, g in zip(cotangents, grads)]
    return [coef * u - along * g for u, g in zip(cotangents, grads)]


__all__ = ["adamw_update_vjp", "adamw_update_vjp_from_moments", "clip_by_total_norm", "clip_by_total_norm_vjp",
           "optimizer_steps", "placed", "sgd_update", "student_update", "student_update_values", "student_update_vjp"]
