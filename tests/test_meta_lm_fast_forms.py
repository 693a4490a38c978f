"""The faster forms of MetaLMTrainer's step against the forms they replaced (same mathematics, fp tolerance): the
fused cross entropies (one log-softmax or softmax buffer that the backward turns into the gradient) against
F.cross_entropy and the composite soft form, to second order where the trainer differentiates twice; the two-level
inverse-CDF sampler (an exact categorical draw, the same draw as one cumulative sum over the vocabulary); and the
teacher's heads run per row on its hidden states, the x_m row's output head only at masked positions (the
auxiliary losses and their gradients against the full [3B, L, V] logits); the heads' vocabulary projection against
F.linear (values, first and second derivatives, autocast, the order of its weight-gradient product)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_meta_lm_trainer import data, first_batch, make_trainer, prime_adam  # noqa: F401  (module-scoped fixture)
from torch.utils._python_dispatch import TorchDispatchMode

from hf_aux.meta_lm.losses import (
                                   inverse_cdf_sample,
                                   pseudo_cross_entropy,
                                   sample_tokens_with_nll,
                                   soft_pseudo_cross_entropy,
                                   teacher_sample_cross_entropy,
                                   token_cross_entropy,
                                   )
from hf_aux.meta_lm.teacher import LMHead
from hf_aux.runtime.tensor_ops import soft_embedding, vocabulary_projection, vocabulary_projections


def old_soft_pseudo_cross_entropy(logits, target_probs, attention_mask, pad_token_id):
    """The form used before: log-probabilities, minus the PAD column by indexing."""
    per_token = -(target_probs * logits.log_softmax(-1))
    per_position = per_token.sum(-1) - per_token[..., pad_token_id]
    mask = attention_mask.to(logits.dtype)
    return (per_position * mask).sum() / mask.sum().clamp_min(1)


def old_sample_tokens(logits, generator):
    """The sampler used before: one float64 cumulative sum over the whole vocabulary per position."""
    flat = logits.detach().flatten(0, -2).float()
    cumulative = torch.cumsum((flat - flat.amax(-1, keepdim=True)).exp_(), -1, dtype=torch.float64)
    total = cumulative[:, -1:]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64) * total
    drawn = torch.searchsorted(cumulative, u, right=True).clamp_(max=flat.shape[-1] - 1)
    return drawn.view(logits.shape[:-1])


def soft_inputs(seed=0, shape=(2, 5, 11)):
    gen = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_()
    probs = torch.randn(*shape, generator=gen, dtype=torch.float64).softmax(-1).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    return logits, probs, mask, torch.randn(*shape, generator=gen, dtype=torch.float64)


def test_soft_cross_entropy_equals_the_log_softmax_form_to_second_order():
    logits, probs, mask, direction = soft_inputs()
    results = []
    for loss_fn in (lambda *a: soft_pseudo_cross_entropy(*a, double_backward=True), old_soft_pseudo_cross_entropy):
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


def _second_order(loss_fn, inputs, direction_of):
    """The loss scaled by c, its gradients with create_graph, then the gradient of <gradients, directions> with
    respect to the inputs and c (what the second-order meta step's double backward takes)."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    c = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    loss = loss_fn(*inputs) * c
    grads = torch.autograd.grad(loss, inputs, create_graph=True)
    inner = sum((g * direction_of[i]).sum() for i, g in enumerate(grads) if i in direction_of)
    second = torch.autograd.grad(inner, [*inputs, c], allow_unused=True)  # d/dp of -log q: none
    return [loss, *grads, *(torch.zeros_like(t) if g is None else g for g, t in zip(second, [*inputs, c]))]



def test_row_dots_are_the_rows_sum_of_products_on_every_path(monkeypatch):
    """hf_aux.runtime.tensor_ops.row_dots: a dot per row on CPU for rows of ROW_DOTS_LOOP_FROM entries or more,
    torch.linalg.vecdot otherwise and off the CPU (one call for all rows); all are sum_v a_nv b_nv."""
    from hf_aux.runtime import tensor_ops
    from hf_aux.runtime.tensor_ops import row_dots

    monkeypatch.setattr(tensor_ops, "ROW_DOTS_LOOP_FROM", 300)
    gen = torch.Generator().manual_seed(8)
    a, b = (torch.randn(5, 300, generator=gen, dtype=torch.float64) for _ in range(2))
    short_a, short_b = a[:, :299].contiguous(), b[:, :299].contiguous()
    torch.testing.assert_close(row_dots(a, b), (a * b).sum(-1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(row_dots(short_a, short_b), (short_a * short_b).sum(-1), rtol=1e-12, atol=1e-12)
    assert row_dots(a[:0], b[:0]).shape == (0,)

    def no_per_row_dots(*args):
        raise AssertionError("a call per row")

    monkeypatch.setattr(torch, "dot", no_per_row_dots)
    on_meta = row_dots(a.to("meta"), b.to("meta"))  # the non-CPU path: one call for all rows
    assert on_meta.shape == (5,) and on_meta.device.type == "meta"
    torch.testing.assert_close(row_dots(short_a, short_b), (short_a * short_b).sum(-1), rtol=1e-12, atol=1e-12)
    with pytest.raises(AssertionError, match="per row"):  # and long rows on CPU take the per-row path
        row_dots(a, b)


@pytest.mark.parametrize("pad", [0, 3, 10])
@pytest.mark.parametrize("cotangents", ["logits", "labels", "both"])
def test_double_backward_forms_equal_autograds_composites(pad, cotangents):
    """The fused forms' gradient functions (`double_backward=True`) against autograd differentiating the composite
    forms twice: the cotangent of the logits' gradient, of the labels' gradient, or both, and the derivative with
    respect to a scale on the loss (the incoming gradient)."""
    logits, probs, mask, direction = soft_inputs(seed=pad)
    unnormalised = probs.detach() * 1.3  # s = sum w != 1
    directions = {"logits": {0: direction}, "labels": {1: direction.flip(-1)},
                  "both": {0: direction, 1: direction.flip(-1)}}[cotangents]
    new = _second_order(lambda z, p: soft_pseudo_cross_entropy(z, p, mask, pad, double_backward=True),
                        (logits, unnormalised), directions)
    old = _second_order(lambda z, p: old_soft_pseudo_cross_entropy(z, p, mask, pad), (logits, unnormalised),
                        directions)
    for fused, composite in zip(new, old):
        torch.testing.assert_close(fused, composite, rtol=1e-10, atol=1e-12)
    assert new[-1].abs().item() > 1e-3 and new[-3].abs().max().item() > 1e-3  # d/dc and d/dz are not trivially 0
    labels = torch.randint(11, (2, 5), generator=torch.Generator().manual_seed(pad))
    labels[0, :2] = -100
    new = _second_order(lambda z: token_cross_entropy(z, labels, double_backward=True), (logits,), {0: direction})
    old = _second_order(lambda z: F.cross_entropy(z.flatten(0, 1), labels.flatten(), ignore_index=-100), (logits,),
                        {0: direction})
    for fused, composite in zip(new, old):
        torch.testing.assert_close(fused, composite, rtol=1e-10, atol=1e-12)


def test_double_backward_forms_match_finite_differences_of_their_gradient():
    """d/de <grad L(z + e d), U> at e = 0 (central difference) against the double backward's <d, d/dz <grad L, U>>,
    for the soft form (logits and labels moved together) and the token form."""
    logits, probs, mask, u = soft_inputs(seed=5)
    gen = torch.Generator().manual_seed(7)
    d_z, d_p = torch.randn(logits.shape, generator=gen, dtype=torch.float64), torch.randn(
        probs.shape, generator=gen, dtype=torch.float64) * 0.1
    labels = torch.randint(11, (2, 5), generator=gen)

    def soft(z, p):
        return soft_pseudo_cross_entropy(z, p, mask, 3, double_backward=True)

    def token(z, p):
        return token_cross_entropy(z, labels, double_backward=True)

    for loss_fn in (soft, token):
        def inner(z, p, create_graph=False):
            z, p = z.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
            g_z = torch.autograd.grad(loss_fn(z, p), z, create_graph=create_graph)[0]
            return (g_z * u).sum(), (z, p)

        value, (z, p) = inner(logits, probs, create_graph=True)
        h_z, h_p = torch.autograd.grad(value, (z, p), allow_unused=True)
        analytic = (h_z * d_z).sum() + (0 if h_p is None else (h_p * d_p).sum())
        eps = 1e-5
        numeric = (inner(logits + eps * d_z, probs + eps * d_p)[0]
                   - inner(logits - eps * d_z, probs - eps * d_p)[0]) / (2 * eps)
        assert abs(analytic.item()) > 1e-3
        torch.testing.assert_close(analytic, numeric, rtol=1e-6, atol=1e-8)
        # their gradients are differentiated once; a third order is refused by name
        value, (z, p) = inner(logits, probs, create_graph=True)
        with pytest.raises(RuntimeError, match="cross entropy.s gradient"):
            torch.autograd.grad(value, z, create_graph=True)


@pytest.mark.parametrize("pad", [0, 3, 10])
def test_fused_soft_cross_entropy_equals_the_log_softmax_form(pad):
    logits, probs, mask, _ = soft_inputs(seed=pad)
    unnormalised = (probs * 1.7).detach().requires_grad_()  # sum w != 1 exercises the s softmax(z) term
    for target in (probs, unnormalised):
        results = []
        for loss_fn in (soft_pseudo_cross_entropy, old_soft_pseudo_cross_entropy):
            loss = loss_fn(logits, target, mask, pad)
            results.append([loss, *torch.autograd.grad(loss, (logits, target))])
        for new, old in zip(*results):
            torch.testing.assert_close(new, old, rtol=1e-10, atol=1e-12)
        assert results[0][2][..., pad].abs().max().item() == 0.0
    # the labels alone, or the logits alone
    only_probs = torch.autograd.grad(soft_pseudo_cross_entropy(logits.detach(), probs, mask, pad), probs)[0]
    expected = torch.autograd.grad(old_soft_pseudo_cross_entropy(logits.detach(), probs, mask, pad), probs)[0]
    torch.testing.assert_close(only_probs, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss_fn", ["soft", "token", "pseudo", "sampled"])
def test_fused_forms_refuse_a_double_backward(loss_fn):
    logits, probs, mask, _ = soft_inputs()
    labels = torch.randint(11, (2, 5), generator=torch.Generator().manual_seed(0))

    def loss():
        return {"soft": lambda: soft_pseudo_cross_entropy(logits, probs, mask, 3),
                "token": lambda: token_cross_entropy(logits, labels),
                "pseudo": lambda: pseudo_cross_entropy(logits, labels, mask, 3),
                "sampled": lambda: sample_tokens_with_nll(logits, torch.Generator().manual_seed(0))[1].sum()}[loss_fn]()

    with pytest.raises(RuntimeError, match="double_backward=True"):
        torch.autograd.grad(loss(), logits, create_graph=True)
    # and a plain backward works, once: the buffer the gradient is made in is not reused behind autograd's back
    once = loss()
    torch.autograd.grad(once, logits, retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(once, logits)


def test_fused_token_cross_entropy_equals_f_cross_entropy():
    gen = torch.Generator().manual_seed(1)
    logits = (4 * torch.randn(3, 6, 13, generator=gen, dtype=torch.float64)).requires_grad_()
    labels = torch.randint(13, (3, 6), generator=gen)
    labels[0, :4] = -100
    labels[2, 5] = -100
    for double in (False, True):
        loss = token_cross_entropy(logits, labels, double_backward=double)
        expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(torch.autograd.grad(loss, logits)[0], torch.autograd.grad(expected, logits)[0],
                                   rtol=1e-10, atol=1e-12)
    assert torch.isnan(token_cross_entropy(logits, torch.full_like(labels, -100)))  # as F.cross_entropy's mean
    # an ignored position whose logits rule out token 0 (where its -100 is gathered) adds nothing, as it does there
    masked = logits.detach().clone()
    masked[0, 0, 0] = float("-inf")
    torch.testing.assert_close(token_cross_entropy(masked, labels),
                               F.cross_entropy(masked.flatten(0, 1), labels.flatten(), ignore_index=-100))


def test_fused_pseudo_cross_entropy_equals_the_per_position_form():
    gen = torch.Generator().manual_seed(2)
    logits = (2 * torch.randn(2, 5, 9, generator=gen, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(9, (2, 5), generator=gen)
    targets[0, 1] = 4  # PAD as a target: nothing to predict there
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    loss = pseudo_cross_entropy(logits, targets, mask, 4)
    weight = mask.double() * (targets != 4).double()
    expected = (F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
                * weight.flatten()).sum() / mask.sum()
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(loss, logits)[0], torch.autograd.grad(expected, logits)[0],
                               rtol=1e-10, atol=1e-12)


def test_sampled_token_nll_and_its_gradient_equal_f_cross_entropy_of_the_samples():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 7, 300, generator=gen, dtype=torch.float64).requires_grad_()
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    tokens, nll = sample_tokens_with_nll(logits, torch.Generator().manual_seed(4))
    assert tokens.shape == (2, 7) and tokens.dtype == torch.long and not tokens.requires_grad
    expected_nll = F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none").view(2, 7)
    torch.testing.assert_close(nll, expected_nll, rtol=1e-10, atol=1e-12)
    weights = torch.randn(2, 7, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(torch.autograd.grad((nll * weights).sum(), logits)[0],
                               torch.autograd.grad((expected_nll * weights).sum(), logits)[0], rtol=1e-10, atol=1e-12)
    # eq. 6 over both heads' samples, attended positions only
    y_nll = nll.detach() * 2
    ce = teacher_sample_cross_entropy(nll.detach(), y_nll, mask)
    assert ce.item() == pytest.approx(((nll.detach() + y_nll) * mask).sum().item() / (2 * mask.sum().item()))
    assert teacher_sample_cross_entropy(nll.detach(), None, mask).item() == pytest.approx(
        (nll.detach() * mask).sum().item() / mask.sum().item())


def test_sample_tokens_is_an_exact_categorical_draw():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, float("-inf")],
                           [5.0, 5.0, float("-inf"), 5.0, 4.0],
                           [-3.0, 0.5, 0.0, 0.2, -0.2]])
    draws = 40_000
    gen = torch.Generator().manual_seed(0)
    samples = sample_tokens_with_nll(logits[None].expand(draws, -1, -1), gen)[0]  # [draws, 3]
    assert samples.shape == (draws, 3) and samples.dtype == torch.long
    probs = logits.softmax(-1)
    for row in range(3):
        counts = torch.bincount(samples[:, row], minlength=5).double()
        expected = draws * probs[row].double()
        sigma = (expected * (1 - probs[row].double())).sqrt()
        assert torch.all((counts - expected).abs() <= 5 * sigma + 1e-9), (row, counts, expected)
    assert not (samples[:, 0] == 4).any() and not (samples[:, 1] == 2).any()  # probability 0 is never drawn
    again = sample_tokens_with_nll(logits[None].expand(draws, -1, -1), torch.Generator().manual_seed(0))[0]
    assert torch.equal(samples, again)  # the trainer's generator makes it reproducible (exact resume)


@pytest.mark.parametrize("vocab,block", [(30_522, 256), (512, 256), (300, 256), (100, 256), (1000, 7)])
def test_two_level_sampler_draws_what_one_cumulative_sum_draws(vocab, block):
    """The same uniform number per row picks the same token as the old single cumulative sum over V (they differ
    only where u falls within float rounding of a boundary), over vocabularies that are and are not a multiple of
    the block, smaller than one block, and with zero-probability entries at and around block boundaries."""
    gen = torch.Generator().manual_seed(vocab)
    logits = 3 * torch.randn(64, vocab, generator=gen)
    logits[:, ::block] = float("-inf")  # a block's first entry impossible
    if vocab > block:
        logits[:8, :block] = float("-inf")  # a whole first block impossible
    new = inverse_cdf_sample(logits.softmax(-1), torch.Generator().manual_seed(7), block=block)
    old = old_sample_tokens(logits, torch.Generator().manual_seed(7))
    assert (new == old).float().mean().item() >= 0.98, (new != old).sum()
    assert torch.isfinite(logits.gather(1, new[:, None])).all()  # never a zero-probability entry


def test_two_level_sampler_distribution_across_blocks():
    """Mass in several blocks and the tail block: frequencies match the probabilities (block 4, vocabulary 10)."""
    probs = torch.tensor([0.0, 0.1, 0.0, 0.05, 0.2, 0.0, 0.0, 0.15, 0.3, 0.2])
    draws = 60_000
    tokens = inverse_cdf_sample(probs.expand(draws, -1), torch.Generator().manual_seed(5), block=4)
    counts = torch.bincount(tokens, minlength=10).double()
    expected = draws * probs.double()
    sigma = (expected * (1 - probs.double())).sqrt()
    assert torch.all((counts - expected).abs() <= 5 * sigma + 1e-9), (counts, expected)


def test_one_hot_peaked_logits_draw_their_token():
    logits = torch.full((4, 7, 300), -50.0)
    target = torch.randint(300, (4, 7), generator=torch.Generator().manual_seed(1))
    logits.scatter_(-1, target[..., None], 50.0)
    assert torch.equal(sample_tokens_with_nll(logits, torch.Generator().manual_seed(2))[0], target)


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


def test_fused_forms_in_bfloat16_compute_in_float32_as_autocast_does():
    """bf16 logits (a bf16 model, or autocast): log-softmax, weights and loss in float32, as F.cross_entropy of the
    upcast logits; the gradient comes back in the logits' dtype."""
    gen = torch.Generator().manual_seed(6)
    logits = (3 * torch.randn(2, 5, 40, generator=gen)).bfloat16().requires_grad_()
    labels = torch.randint(40, (2, 5), generator=gen)
    labels[0, :3] = -100
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    probs = torch.randn(2, 5, 40, generator=gen).softmax(-1)
    upcast = logits.detach().float().requires_grad_()
    pairs = [(token_cross_entropy(logits, labels), token_cross_entropy(upcast, labels)),
             (pseudo_cross_entropy(logits, labels.clamp_min(0), mask, 4),
              pseudo_cross_entropy(upcast, labels.clamp_min(0), mask, 4)),
             (soft_pseudo_cross_entropy(logits, probs, mask, 4), soft_pseudo_cross_entropy(upcast, probs, mask, 4))]
    for low, full in pairs:
        assert low.dtype == torch.float32
        torch.testing.assert_close(low, full, rtol=1e-6, atol=1e-6)
        grad_low, grad_full = torch.autograd.grad(low, logits)[0], torch.autograd.grad(full, upcast)[0]
        assert grad_low.dtype == torch.bfloat16
        torch.testing.assert_close(grad_low.float(), grad_full, rtol=1e-2, atol=1e-3)


class MatrixProducts(TorchDispatchMode):
    """`with MatrixProducts() as products:` the (left, right) operand shapes of every aten mm run inside."""

    def __enter__(self):
        super().__enter__()
        self.shapes = []
        return self.shapes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "mm":
            self.shapes.append((tuple(args[0].shape), tuple(args[1].shape)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", [(3, 5), (7,)])
def test_vocabulary_projection_equals_f_linear(shape, with_bias):
    gen = torch.Generator().manual_seed(7)
    hidden = torch.randn(*shape, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(40, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(40, generator=gen, dtype=torch.float64, requires_grad=True) if with_bias else None
    inputs = [hidden, weight] + ([bias] if with_bias else [])
    ours, theirs = vocabulary_projection(hidden, weight, bias), F.linear(hidden, weight, bias)
    assert ours.shape == (*shape, 40)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    cotangent = torch.randn(ours.shape, generator=gen, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(ours, inputs, cotangent), torch.autograd.grad(theirs, inputs, cotangent)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        assert a.is_contiguous()
    assert torch.autograd.gradcheck(vocabulary_projection, (hidden, weight, bias))


def test_vocabulary_projection_weight_gradient_reads_the_gradient_along_its_rows():
    """The point of it: the weight gradient is hidden^T G ([H, N] x [N, V]), never G^T hidden ([V, N] x [N, H],
    what F.linear's backward runs, slow on CPU when G is out of the cache)."""
    hidden = torch.randn(6, 8, requires_grad=True)
    weight = torch.randn(50, 8, requires_grad=True)
    gradient = torch.randn(6, 50)
    for project, expected, refused in [(vocabulary_projection, ((8, 6), (6, 50)), ((50, 6), (6, 8))),
                                       (F.linear, ((50, 6), (6, 8)), ((8, 6), (6, 50)))]:  # the check can fail
        logits = project(hidden, weight)
        with MatrixProducts() as products:
            torch.autograd.grad(logits, [hidden, weight], gradient)
        assert expected in products and refused not in products, (project, products)


def test_vocabulary_projection_under_autocast_computes_as_f_linear_does():
    gen = torch.Generator().manual_seed(8)
    hidden = torch.randn(4, 6, 16, generator=gen, requires_grad=True)
    weight = torch.randn(64, 16, generator=gen, requires_grad=True)
    bias = torch.randn(64, generator=gen, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, theirs = vocabulary_projection(hidden, weight, bias), F.linear(hidden, weight, bias)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    cotangent = torch.randn(ours.shape, generator=gen).bfloat16()
    for a, b, leaf in zip(torch.autograd.grad(ours, [hidden, weight, bias], cotangent),
                          torch.autograd.grad(theirs, [hidden, weight, bias], cotangent), [hidden, weight, bias]):
        assert a.dtype == b.dtype == leaf.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_vocabulary_projection_second_derivatives_equal_f_linears():
    gen = torch.Generator().manual_seed(9)
    hidden = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(9, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(9, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(vocabulary_projection, (hidden, weight, bias))
    second = []
    for project in (vocabulary_projection, F.linear):
        grads = torch.autograd.grad(project(hidden, weight, bias).tanh().sum(), [hidden, weight], create_graph=True)
        second.append(torch.autograd.grad(grads[0].square().sum() + grads[1].sin().sum(), [hidden, weight, bias]))
    for ours, theirs in zip(*second):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("with_bias", [True, False])
def test_vocabulary_projections_of_several_row_groups_equal_f_linear_on_each(with_bias):
    """One call for several groups (the teacher's heads): each output F.linear's, the weight and bias gradients
    the sums over the groups, each group's hidden gradient its own; a group whose output no loss uses adds
    nothing; first and second derivatives exact."""
    gen = torch.Generator().manual_seed(10)
    hiddens = [torch.randn(*shape, 6, generator=gen, dtype=torch.float64, requires_grad=True)
               for shape in [(2, 3), (4,), (1, 5)]]
    weight = torch.randn(30, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(30, generator=gen, dtype=torch.float64, requires_grad=True) if with_bias else None
    leaves = hiddens + [weight] + ([bias] if with_bias else [])
    ours = vocabulary_projections(hiddens, weight, bias)
    theirs = [F.linear(h, weight, bias) for h in hiddens]
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for used in ([0, 1, 2], [0, 2]):  # group 1 unused: its hidden gets no gradient
        ours = vocabulary_projections(hiddens, weight, bias)
        theirs = [F.linear(h, weight, bias) for h in hiddens]
        cotangents = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in ours]

        def loss(outputs):
            return sum((outputs[i] * cotangents[i]).sum() for i in used)

        got = torch.autograd.grad(loss(ours), leaves, allow_unused=True)
        expected = torch.autograd.grad(loss(theirs), leaves, allow_unused=True)
        for a, b in zip(got, expected):
            if b is None:
                assert a is None or not a.abs().max() > 0
                continue
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
            assert a.is_contiguous()
    inputs = (hiddens[0], hiddens[1], weight, bias)
    assert torch.autograd.gradcheck(lambda h0, h1, w, b: vocabulary_projections([h0, h1], w, b), inputs)
    assert torch.autograd.gradgradcheck(lambda h0, h1, w, b: vocabulary_projections([h0, h1], w, b), inputs)


def test_vocabulary_projections_transpose_the_weight_gradient_once():
    """The point of grouping: the groups' hidden^T G products accumulate into one [H, V] buffer, transposed into
    the weight's [V, H] layout once, however many groups (a copy of [V, H] per group before)."""
    copies = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in ("clone", "copy_", "add", "add_") and out.shape == (50, 8):
                copies.append(func.overloadpacket.__name__)
            return out

    weight = torch.randn(50, 8, requires_grad=True)
    hiddens = [torch.randn(n, 8) for n in (3, 4, 5)]
    outputs = vocabulary_projections(hiddens, weight)
    with Record():
        (grad,) = torch.autograd.grad(sum(o.sum() for o in outputs), weight)
    assert copies == ["clone"]
    torch.testing.assert_close(grad, sum(torch.ones(n, 50).t() @ h for n, h in zip((3, 4, 5), hiddens)))


def test_soft_embedding_equals_the_product_and_reads_the_probabilities_along_their_rows():
    """First-order soft labels' expected input embedding: probs @ weight, its first and second derivatives exact,
    and the weight gradient made as G^T probs ([H, N] x [N, V]), never probs^T G (torch's order); under autocast
    the plain product."""
    gen = torch.Generator().manual_seed(11)
    probs = torch.rand(2, 3, 20, generator=gen, dtype=torch.float64).softmax(-1).requires_grad_()
    weight = torch.randn(20, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    ours, theirs = soft_embedding(probs, weight), probs @ weight
    assert ours.shape == (2, 3, 5)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    cotangent = torch.randn(ours.shape, generator=gen, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(ours, [probs, weight], cotangent),
                    torch.autograd.grad(theirs, [probs, weight], cotangent)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        assert a.is_contiguous()
    assert torch.autograd.gradcheck(soft_embedding, (probs, weight))
    assert torch.autograd.gradgradcheck(soft_embedding, (probs, weight))

    flat, table, grad = torch.rand(6, 40), torch.randn(40, 8, requires_grad=True), torch.randn(6, 8)
    for embed, expected, refused in [(soft_embedding, ((8, 6), (6, 40)), ((40, 6), (6, 8))),
                                     (torch.matmul, ((40, 6), (6, 8)), ((8, 6), (6, 40)))]:  # the check can fail
        out = embed(flat, table)
        with MatrixProducts() as products:
            torch.autograd.grad(out, table, grad)
        assert expected in products and refused not in products, (embed, products)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = soft_embedding(flat, table)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), flat @ table.detach(), rtol=2e-2, atol=2e-2)


def test_vocabulary_projection_on_the_meta_device_has_the_right_shape():
    """No autocast there (torch has none for 'meta'): shapes only, as when a model is traced without weights."""
    hidden, weight, bias = (torch.empty(*shape, device="meta") for shape in [(2, 3, 4), (9, 4), (9,)])
    assert vocabulary_projection(hidden, weight, bias).shape == (2, 3, 9)


def test_teacher_head_is_saved_as_nn_linear_and_projects_through_it():
    """The heads keep nn.Linear's layout in checkpoints ([V, H] `decoder.weight`, teachers saved before load as
    they are) and their output is the Linear's."""
    head = LMHead(8, 30).double()
    assert isinstance(head.decoder, torch.nn.Linear) and head.state_dict()["decoder.weight"].shape == (30, 8)
    hidden = torch.randn(2, 3, 8, dtype=torch.float64)
    expected = head.decoder(head.norm(F.gelu(head.dense(hidden))))
    torch.testing.assert_close(head(hidden), expected, rtol=1e-12, atol=1e-12)
