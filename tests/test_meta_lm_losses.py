"""The closed-form pieces of the soft-label meta signal (hf_aux.meta_lm.functional_optim, hf_aux.meta_lm.losses)
against autograd and a hand-derived mixed derivative: the optimizer-update and clipping vector-Jacobian products,
the student update they make differentiable, and the forward difference of the soft-label gradient."""

import pytest
import torch

from hf_aux.meta_lm.functional_optim import (adamw_update_vjp, clip_by_total_norm, clip_by_total_norm_vjp,
                                             optimizer_steps, student_update, student_update_values)
from hf_aux.meta_lm.losses import first_order_soft_label_grads

HYPER = dict(lr=3e-3, beta1=0.9, beta2=0.98, eps=1e-6)  # noqa: C408


def _safe_sqrt(x):
    """sqrt with a zero (not NaN) derivative where x == 0."""
    positive = x > 0
    return torch.where(positive, torch.where(positive, x, torch.ones_like(x)).sqrt(), torch.zeros_like(x))


def adamw_update(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.AdamW's update of one tensor written out elementwise, for autograd to differentiate: the
    reference the closed forms are checked against (`exp_avg`, `exp_avg_sq`, `step`: the state before the step)."""
    step = step + 1
    decayed = param * (1 - lr * weight_decay)
    m = exp_avg * beta1 + grad * (1 - beta1)
    v = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    denom = _safe_sqrt(v) / (1 - beta2**step) ** 0.5 + eps
    return decayed - (lr / (1 - beta1**step)) * m / denom


@pytest.mark.parametrize("step", [0, 4])
def test_adamw_update_vjp_matches_autograd(step):
    gen = torch.Generator().manual_seed(0)
    grad = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    grad[0, :3] = 0.0  # with a zero second moment: sqrt's derivative is taken as 0 there, as _safe_sqrt
    exp_avg = 0.1 * torch.randn(5, 7, generator=gen, dtype=torch.float64) if step else torch.zeros(5, 7).double()
    exp_avg_sq = torch.rand(5, 7, generator=gen, dtype=torch.float64) * 0.01 if step else torch.zeros(5, 7).double()
    exp_avg_sq[0, :3] = 0.0
    param = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    cotangent = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    leaf = grad.clone().requires_grad_()
    out = adamw_update(param, leaf, exp_avg, exp_avg_sq, step, weight_decay=0.01, **HYPER)
    (expected,) = torch.autograd.grad(out, leaf, grad_outputs=cotangent)
    # a list (one param group): the same tensor twice, and a second, scaled one, through the foreach ops
    got, again, scaled = adamw_update_vjp([grad, grad, 3 * grad], [exp_avg, exp_avg, 3 * exp_avg],
                                          [exp_avg_sq, exp_avg_sq, 9 * exp_avg_sq], step,
                                          cotangents=[cotangent, cotangent, cotangent], **HYPER)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(again, got, rtol=0, atol=0)
    leaf3 = (3 * grad).requires_grad_()
    out3 = adamw_update(param, leaf3, 3 * exp_avg, 9 * exp_avg_sq, step, weight_decay=0.01, **HYPER)
    torch.testing.assert_close(scaled, torch.autograd.grad(out3, leaf3, grad_outputs=cotangent)[0], rtol=1e-10,
                               atol=1e-12)
    assert got[0, :3].abs().max() > 0  # the zero-moment entries still pass the (1 - beta1) / D part
    assert adamw_update_vjp([], [], [], step, cotangents=[], **HYPER) == []


def test_adamw_update_vjp_where_the_gradient_squared_underflows():
    """s = 0 with a nonzero gradient (g^2 underflows in float32): the v term is 0 there, as `_safe_sqrt` takes it,
    not m g / 0."""
    grad = torch.tensor([1e-30, 0.0, 1e-3])
    zeros = torch.zeros(3)
    (got,) = adamw_update_vjp([grad], [zeros], [zeros], 0, cotangents=[torch.ones(3)], **HYPER)
    assert torch.isfinite(got).all()
    expected_first = -(HYPER["lr"] / (1 - HYPER["beta1"])) * (1 - HYPER["beta1"]) / HYPER["eps"]
    assert got[0].item() == pytest.approx(expected_first, rel=1e-6)
    assert got[1].item() == pytest.approx(expected_first, rel=1e-6)


@pytest.mark.parametrize("max_norm", [0.5, 100.0, 0.0])  # clipping active, inactive, off
def test_clip_by_total_norm_vjp_matches_autograd(max_norm):
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(3, 4, generator=gen, dtype=torch.float64), torch.randn(6, generator=gen, dtype=torch.float64)]
    cotangents = [torch.randn_like(g) for g in grads]
    leaves = [g.clone().requires_grad_() for g in grads]
    expected = torch.autograd.grad(clip_by_total_norm(leaves, max_norm), leaves, grad_outputs=cotangents)
    got = clip_by_total_norm_vjp(grads, max_norm, cotangents)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    buffers = [u.clone() for u in cotangents]  # in place: the same values, written into the cotangents
    in_place = clip_by_total_norm_vjp(grads, max_norm, buffers, in_place=True)
    for a, b, buffer in zip(in_place, got, buffers):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
        assert a.data_ptr() == buffer.data_ptr()


def test_first_order_soft_label_grads_is_the_mixed_derivative_along_w():
    # f(theta; p) = sum_k p_k sin(<a_k, theta>) + 0.5 ||theta||^2: grad_p f = sin(A theta), and the exact
    # d/de grad_p f(theta + e w; p) = cos(A theta) * (A w), by hand
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    theta = [torch.randn(4, generator=gen, dtype=torch.float64)]
    w = [torch.randn(4, generator=gen, dtype=torch.float64)]
    p = torch.rand(6, generator=gen, dtype=torch.float64)

    def label_grads_at(params):
        leaf = p.clone().requires_grad_()
        f = (leaf * torch.sin(a @ params[0])).sum() + 0.5 * params[0].pow(2).sum()
        return list(torch.autograd.grad(f, leaf))

    base = label_grads_at(theta)
    exact = torch.cos(a @ theta[0]) * (a @ w[0])
    errors = []
    for radius in (1e-2, 1e-3, 1e-6):
        (got,) = first_order_soft_label_grads(label_grads_at, theta, w, base, radius)
        errors.append((got - exact).norm().item() / exact.norm().item())
    assert errors[2] < 1e-6
    (scaled,) = first_order_soft_label_grads(label_grads_at, theta, w, base, 1e-6, scale=10.0)  # lambda_meta
    torch.testing.assert_close(scaled, 10 * first_order_soft_label_grads(label_grads_at, theta, w, base, 1e-6)[0],
                               rtol=1e-12, atol=0)
    assert 5 < errors[0] / errors[1] < 20  # a forward difference: the error shrinks linearly with the radius
    zeros = first_order_soft_label_grads(label_grads_at, theta, [torch.zeros(4, dtype=torch.float64)], base, 1e-3)
    assert torch.equal(zeros[0], torch.zeros(6, dtype=torch.float64))
    (unused,) = first_order_soft_label_grads(label_grads_at, theta, [None], base, 1e-3)
    assert torch.equal(unused, torch.zeros(6, dtype=torch.float64))


@pytest.mark.parametrize("implementation", ["for_loop", "foreach", "fused"])
def test_optimizer_steps_reads_every_parameters_step_count(implementation):
    """optimizer_steps: 0 before a parameter's first update, then its own count (a parameter without a gradient in
    a step is not counted), as int whatever tensor the optimizer keeps it in."""
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    kwargs = {"foreach": False} if implementation == "for_loop" else {implementation: True}
    optimizer = torch.optim.AdamW([a, b], lr=0.1, **kwargs)
    assert optimizer_steps(optimizer, [a, b]) == [0, 0]
    for step in range(3):
        loss = a.sum() + (b.sum() if step == 0 else 0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert optimizer_steps(optimizer, [a, b]) == [3, 1]
    assert all(type(n) is int for n in optimizer_steps(optimizer, [b, a]))


def _reference_update(optimizer, max_norm, params, grads):
    """theta_1 written out for autograd: clipping, then AdamW elementwise (`adamw_update`) or SGD, per tensor."""
    clipped = iter(clip_by_total_norm([g for g in grads if g is not None], max_norm))
    out = []
    for p, g in zip(params, grads):
        if g is None:
            out.append(p.detach())
            continue
        g, group, state = next(clipped), optimizer.param_groups[0], optimizer.state.get(p, {})
        if isinstance(optimizer, torch.optim.SGD):
            out.append(p.detach() - group["lr"] * (g + group["weight_decay"] * p.detach()))
            continue
        beta1, beta2 = group["betas"]
        out.append(adamw_update(p.detach(), g, state.get("exp_avg", torch.zeros_like(p)),
                                state.get("exp_avg_sq", torch.zeros_like(p)), int(state.get("step", 0)),
                                group["lr"], beta1, beta2, group["eps"], group["weight_decay"]))
    return out


@pytest.mark.parametrize("optim,max_norm", [("foreach", 0.05), ("fused", 0.05), ("for_loop", 100.0), ("sgd", 0.05)])
def test_student_update_values_and_gradient_equal_autograd_through_the_written_out_update(optim, max_norm):
    """student_update (values forward, closed-form product backward) against autograd through clipping and the
    update written out per tensor: the same theta_1, the same gradient with respect to what made the pseudo
    gradient; a parameter without a gradient keeps its value and passes nothing back."""
    gen = torch.Generator().manual_seed(5)
    params = [torch.nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64))
              for shape in [(4, 3), (3,), (2, 2)]]
    if optim == "sgd":
        optimizer = torch.optim.SGD(params, lr=0.1, weight_decay=0.01)
    else:
        kwargs = {"foreach": False} if optim == "for_loop" else {optim: True}
        optimizer = torch.optim.AdamW(params, lr=0.1, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01, **kwargs)
        for _ in range(2):  # non-trivial moments and step counts
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            optimizer.step()
    source = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    mixing = [torch.randn(*p.shape, 5, generator=gen, dtype=torch.float64) for p in params]

    def pseudo_grads(x):  # a pseudo gradient with a graph back to x; the last parameter gets none
        return [torch.tanh(mixing[0] @ x), (mixing[1] @ x) ** 2, None]

    cotangents = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
    ours = student_update(optimizer, max_norm, params, pseudo_grads(source))
    theirs = _reference_update(optimizer, max_norm, params, pseudo_grads(source))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.equal(ours[2], params[2].detach()) and not ours[2].requires_grad
    loss_ours = sum((t * c).sum() for t, c in zip(ours[:2], cotangents))
    loss_theirs = sum((t * c).sum() for t, c in zip(theirs[:2], cotangents))
    (got,), (expected,) = torch.autograd.grad(loss_ours, source), torch.autograd.grad(loss_theirs, source)
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    values = student_update_values(optimizer, max_norm, params, [g.detach() if g is not None else None
                                                                  for g in pseudo_grads(source)])
    assert all(torch.equal(a.detach(), b) for a, b in zip(ours, values))


def test_student_update_refuses_a_second_derivative_and_a_second_backward():
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    optimizer = torch.optim.AdamW([param], lr=0.1)
    source = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (theta_1,) = student_update(optimizer, 1.0, [param], [source * 2])
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        torch.autograd.grad(theta_1.sum(), source, create_graph=True)
    (theta_1,) = student_update(optimizer, 1.0, [param], [source * 2])
    torch.autograd.grad(theta_1.sum(), source, retain_graph=True)
    with pytest.raises(RuntimeError, match="a second time"):
        torch.autograd.grad(theta_1.sum(), source)
