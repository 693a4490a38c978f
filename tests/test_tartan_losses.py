"""TARTAN's task-weight math against flatten-everything reference computations."""

import pytest
import torch

from hf_aux.tartan.losses import (
                                  combine_gradients,
                                  gradient_cosines,
                                  mt_tartan_loss,
                                  task_mixture,
                                  update_task_weights,
                                  )


def reference_flat(grads, shapes):
    return torch.cat([(g if g is not None else torch.zeros(s)).reshape(-1) for g, s in zip(grads, shapes)])


def test_cosines_per_tensor_equal_flattened_cosines_with_missing_tensors():
    torch.manual_seed(0)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    reference = [torch.randn(s) for s in shapes]
    tasks = [[torch.randn(s) for s in shapes], [torch.randn(shapes[0]), None, torch.randn(shapes[2])],
             [-2.5 * g for g in reference]]
    cosines = gradient_cosines(reference, tasks)
    ref = reference_flat(reference, shapes)
    for k, grads in enumerate(tasks):
        g = reference_flat(grads, shapes)
        assert cosines[k].item() == pytest.approx((ref @ g / (ref.norm() * g.norm())).item(), abs=1e-6)
    assert cosines[2].item() == pytest.approx(-1.0, abs=1e-6)  # anti-parallel
    partial = [reference[0], None, reference[2]]  # a body tensor the end task does not reach
    for k, cosine in enumerate(gradient_cosines(partial, tasks)):
        ref, g = reference_flat(partial, shapes), reference_flat(tasks[k], shapes)
        assert cosine.item() == pytest.approx((ref @ g / (ref.norm() * g.norm())).item(), abs=1e-6)
    with pytest.raises(ValueError, match="different lengths: 3 vs 2"):
        gradient_cosines(reference, [reference[:2]])
    with pytest.raises(ValueError, match="no gradient on any body parameter"):
        gradient_cosines(reference, [[None, None, None]])


def test_weight_update_softmax_and_combination():
    weights = torch.tensor([0.2, 0.3, 0.5])
    cosines = torch.tensor([0.5, -1.0, 0.0])
    updated = update_task_weights(weights, cosines, lr=0.1)
    torch.testing.assert_close(updated, torch.tensor([0.25, 0.2, 0.5]))
    alphas = task_mixture(updated)
    assert alphas.sum().item() == pytest.approx(1.0, abs=1e-7)
    e = torch.exp(torch.tensor([0.25, 0.2, 0.5]))
    torch.testing.assert_close(alphas, e / e.sum())
    grads = [[torch.ones(2), None], [2 * torch.ones(2), torch.ones(3)], [None, None]]
    combined = combine_gradients(alphas, grads)
    torch.testing.assert_close(combined[0], (alphas[0] + 2 * alphas[1]) * torch.ones(2))
    torch.testing.assert_close(combined[1], alphas[1] * torch.ones(3))
    assert grads[0][0].equal(torch.ones(2))  # inputs untouched


def test_mt_loss_is_weighted_sum():
    losses = torch.tensor([1.0, 2.0, 4.0])
    assert mt_tartan_loss(losses, torch.tensor([0.5, 0.25, 0.25])).item() == pytest.approx(2.0)
    with pytest.raises(ValueError):
        mt_tartan_loss(losses, torch.tensor([1.0]))


def test_combine_gradients_in_place_gives_the_same_sum_without_new_storage():
    alphas = torch.tensor([0.2, 0.5, 0.3])
    make = lambda: [[torch.ones(2), None, torch.full((2, 2), 3.0)],  # noqa: E731
                    [2 * torch.ones(2), torch.ones(3), None],
                    [torch.ones(2, dtype=torch.float32), 4 * torch.ones(3), torch.ones(2, 2)]]
    expected = combine_gradients(alphas, make())
    grads = make()
    storage = {id(g): g.data_ptr() for task in grads for g in task if g is not None}
    combined = combine_gradients(alphas, grads, in_place=True)
    for got, want in zip(combined, expected):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(combined[0], (0.2 + 2 * 0.5 + 0.3) * torch.ones(2))
    torch.testing.assert_close(combined[1], (0.5 + 4 * 0.3) * torch.ones(3))
    assert all(g.data_ptr() in storage.values() for g in combined)  # sums live in the tasks' own tensors
    bf16 = [[torch.ones(4, dtype=torch.bfloat16)], [torch.ones(4, dtype=torch.bfloat16)]]
    out = combine_gradients(torch.tensor([0.25, 0.75]), bf16, in_place=True)[0]
    assert out.dtype == torch.bfloat16 and torch.equal(out, torch.ones(4, dtype=torch.bfloat16))
