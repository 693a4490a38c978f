"""The closed-form pieces of first-order soft labels (hf_aux.meta_lm.functional_optim, hf_aux.meta_lm.losses) against autograd and a hand-derived
mixed derivative: the optimizer-update and clipping vector-Jacobian products, and the forward difference of the
soft-label gradient."""

import pytest
import torch

from hf_aux.meta_lm.functional_optim import (adamw_update, adamw_update_vjp, clip_by_total_norm, clip_by_total_norm_vjp,
                                             optimizer_steps)
from hf_aux.meta_lm.losses import first_order_soft_label_grads

HYPER = dict(lr=3e-3, beta1=0.9, beta2=0.98, eps=1e-6)  # noqa: C408


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
