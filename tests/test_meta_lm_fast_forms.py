"""The faster forms of MetaLMTrainer's step against the forms they replaced (same mathematics, fp tolerance): the
soft cross entropy without log-probabilities (value, gradients and the second derivative that second-order soft
labels take), the inverse-CDF token sampler (an exact categorical draw), and the teacher's heads run per row on
its hidden states, the x_m row's output head only at masked positions (the auxiliary losses and their gradients
against the full [3B, L, V] logits)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_meta_lm_trainer import data, first_batch, make_trainer, prime_adam  # noqa: F401  (module-scoped fixture)

from hf_aux.meta_lm.losses import (
    sample_tokens,
    soft_pseudo_cross_entropy,
    token_cross_entropy,
)


def old_soft_pseudo_cross_entropy(logits, target_probs, attention_mask, pad_token_id):
    """The form used before: log-probabilities, minus the PAD column by indexing."""
    per_token = -(target_probs * logits.log_softmax(-1))
    per_position = per_token.sum(-1) - per_token[..., pad_token_id]
    mask = attention_mask.to(logits.dtype)
    return (per_position * mask).sum() / mask.sum().clamp_min(1)


def test_soft_cross_entropy_equals_the_log_softmax_form_to_second_order():
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 5, 11, generator=gen, dtype=torch.float64)).requires_grad_()
    probs = torch.randn(2, 5, 11, generator=gen, dtype=torch.float64).softmax(-1).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    direction = torch.randn(2, 5, 11, generator=gen, dtype=torch.float64)
    results = []
    for loss_fn in (soft_pseudo_cross_entropy, old_soft_pseudo_cross_entropy):
        loss = loss_fn(logits, probs, mask, 3)
        g_logits, g_probs = torch.autograd.grad(loss, (logits, probs), create_graph=True)
        # second order: the derivative of a directional first derivative (what the double backward takes)
        second = torch.autograd.grad((g_logits * direction).sum() + (g_probs * direction).sum(), (logits, probs))
        results.append([loss, g_logits, g_probs, *second])
    assert results[0][0].item() > 0
    for new, old in zip(*results):
        torch.testing.assert_close(new, old, rtol=1e-10, atol=1e-12)
    # PAD's probability is left out: moving probability mass onto PAD changes nothing but the excluded part
    assert results[0][2][..., 3].abs().max().item() == 0.0


def test_sample_tokens_is_an_exact_categorical_draw():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, float("-inf")],
                           [5.0, 5.0, float("-inf"), 5.0, 4.0],
                           [-3.0, 0.5, 0.0, 0.2, -0.2]])
    draws = 40_000
    gen = torch.Generator().manual_seed(0)
    samples = sample_tokens(logits[None].expand(draws, -1, -1), gen)  # [draws, 3]
    assert samples.shape == (draws, 3) and samples.dtype == torch.long
    probs = logits.softmax(-1)
    for row in range(3):
        counts = torch.bincount(samples[:, row], minlength=5).double()
        expected = draws * probs[row].double()
        sigma = (expected * (1 - probs[row].double())).sqrt()
        assert torch.all((counts - expected).abs() <= 5 * sigma + 1e-9), (row, counts, expected)
    assert not (samples[:, 0] == 4).any() and not (samples[:, 1] == 2).any()  # probability 0 is never drawn
    again = sample_tokens(logits[None].expand(draws, -1, -1), torch.Generator().manual_seed(0))
    assert torch.equal(samples, again)  # the trainer's generator makes it reproducible (exact resume)


def test_one_hot_peaked_logits_draw_their_token():
    logits = torch.full((4, 7, 300), -50.0)
    target = torch.randint(300, (4, 7), generator=torch.Generator().manual_seed(1))
    logits.scatter_(-1, target[..., None], 50.0)
    assert torch.equal(sample_tokens(logits, torch.Generator().manual_seed(2)), target)


@pytest.mark.parametrize("objective", ["hard", "soft"])
def test_teacher_heads_per_row_give_the_full_logits_aux_losses_and_gradients(data, tmp_path, objective):  # noqa: F811
    """lambda_meta 0: the teacher's gradient is its auxiliary losses' alone; it must equal the gradient of the
    old form, one teacher forward over [x_u; x_u as MLM; x_m] whose [3B, L, V] logits were sliced per row."""
    trainer = make_trainer(data, tmp_path, dtype=torch.float64, objective=objective, lambda_meta=0.0,
                           teacher_aux_losses=True, teacher_gradient_accumulation_steps=2, mlm_task_probability=0.0)
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    prime_adam(trainer)
    batch = first_batch(trainer)
    x_u, mask = batch["input_ids"], batch["attention_mask"]
    teacher0 = copy.deepcopy(trainer.teacher)
    gen_state = trainer._generator.get_state()
    trainer.training_step(trainer.model, batch)
    aux_trainer = trainer._train_metrics.last["meta/teacher_aux_loss"].item()

    trainer._generator.set_state(gen_state)
    x_m, y_m = trainer._mlm_example(x_u, mask, trainer._generator)
    assert (y_m != -100).any() and (y_m == -100).any()  # the gather really drops positions
    x_u_as_mlm = x_u.clone()
    x_u_as_mlm[:, 0] = trainer.meta_tokens.mlm_task
    b = x_u.shape[0]
    out = teacher0(input_ids=torch.cat([x_u, x_u_as_mlm, x_m]), attention_mask=mask.repeat(3, 1))

    def targets(ids):
        return ids.masked_fill(mask == 0, -100)

    aux = ((token_cross_entropy(out.input_logits[b:2 * b], targets(x_m))
            + token_cross_entropy(out.output_logits[b:2 * b], targets(x_u_as_mlm))) / 2
           + (token_cross_entropy(out.input_logits[2 * b:], targets(x_m))
              + F.cross_entropy(out.output_logits[2 * b:].flatten(0, 1), y_m.flatten(), ignore_index=-100)) / 2)
    assert aux_trainer == pytest.approx(aux.item(), rel=1e-6)  # the log keeps float32
    expected = torch.autograd.grad(aux, list(teacher0.parameters()), allow_unused=True)
    for (name, p), g in zip(trainer.teacher.named_parameters(), expected):
        assert g is not None, name
        torch.testing.assert_close(2 * p.grad, g, rtol=1e-8, atol=1e-12)  # accumulation 2 halves it
