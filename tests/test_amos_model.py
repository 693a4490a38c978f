"""AMOS model and loss math on tiny configs: stop-gradient, gradient reversal (finite differences), where the
discriminator's gradient may go, RTD labels, shared embeddings, masked-only logits."""

import pytest
import torch
import torch.nn.functional as F
from tiny import tiny_config, tiny_tokenizer

from hf_aux.tasks.data import MLMCollator, max_predictions
from hf_aux.amos.losses import (
                                gumbel_softmax_sample,
                                layer_switch_index,
                                mix_head_logits,
                                mixture_straight_through,
                                mixture_weights,
                                mlm_losses,
                                reverse_gradient,
                                rtd_labels,
                                rtd_loss,
                                )
from hf_aux.amos.model import AmosGeneratorConfig, AmosModel, AmosModelConfig

TEXTS = [
    "the movie was really good and the plot was great fun to watch",
    "a terrible film with a boring story and the worst actor i have seen",
    "she said hello to the cat and the dog in the rain today",
]


def make_model(discriminator="electra", mlm_layers=(1, 2), seed=0, **kwargs):
    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    config = AmosModelConfig.from_configs(tiny_config("electra", tok), tiny_config(discriminator, tok),
                                          mlm_layers=list(mlm_layers), **kwargs)
    return AmosModel(config), tok


def make_batch(tok, seed=0, mlm_probability=0.3):
    torch.manual_seed(seed)
    ids = tok(TEXTS)["input_ids"]
    return MLMCollator(tok, mlm_probability=mlm_probability, return_original=True)([{"input_ids": i} for i in ids])


# ---- pure functions against hand computations ------------------------------------------------------------------


def test_mlm_losses_and_mixture_match_hand_computation():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 7), torch.randint(7, (5,))
    expected = torch.stack([F.cross_entropy(logits[k], targets) for k in range(2)])
    torch.testing.assert_close(mlm_losses(logits, targets), expected)

    # a micro-batch with no masked position: nothing to predict, losses 0 (not the NaN of a mean over nothing)
    empty = torch.randn(2, 0, 7, requires_grad=True)
    losses = mlm_losses(empty, torch.zeros(0, dtype=torch.long))
    assert torch.equal(losses, torch.zeros(2))
    losses.sum().backward()
    assert empty.grad is not None and torch.isfinite(empty.grad).all()

    features, v = torch.randn(3, 5, 4), torch.randn(4)
    gamma = mixture_weights(features, v)
    manual = torch.stack([torch.softmax(torch.stack([features[k, m] @ v for k in range(3)]), 0) for m in range(5)])
    torch.testing.assert_close(gamma, manual)
    # mixing logits equals projecting the mixed embedding h_bar (eq. 3), with a shared bias
    h, weight, bias = torch.randn(3, 5, 4), torch.randn(7, 4), torch.randn(7)
    head_logits = h @ weight.t() + bias
    h_bar = torch.einsum("mk,kme->me", gamma, h)
    torch.testing.assert_close(mix_head_logits(gamma, head_logits), h_bar @ weight.t() + bias)


def test_rtd_labels_count_a_sample_equal_to_the_original_as_original():
    original = torch.tensor([[2, 10, 11, 12, 3, 0]])
    replaced = torch.tensor([[2, 10, 40, 12, 3, 0]])  # position 1 sampled its original, position 2 did not
    assert rtd_labels(replaced, original).tolist() == [[0, 0, 1, 0, 0, 0]]
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, 0.5, 9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])  # the pad position's logit must not count
    labels = rtd_labels(replaced, original)
    by_hand = -(torch.log(torch.sigmoid(-torch.tensor([0.0, 1.0, -1.0, 0.5]))).sum()
                + torch.log(torch.sigmoid(torch.tensor(2.0)))) / 5
    torch.testing.assert_close(rtd_loss(logits, labels, mask), by_hand)


def test_reverse_gradient_multiplies_by_minus_multiplier():
    x = torch.randn(4, requires_grad=True)
    (reverse_gradient(x, 0.1) * torch.arange(4.0)).sum().backward()
    torch.testing.assert_close(x.grad, -0.1 * torch.arange(4.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_mixture_straight_through_matches_the_composed_one_hot_form(dtype):
    """The fused sample + carrier equals the textbook composition: mix the heads (eq. 3), Gumbel-Softmax sample,
    y = one_hot - y_soft.detach() + y_soft, embeddings y @ W; same ids, same values, same gradients into gamma and
    the head logits (and none into W through the carrier)."""
    torch.manual_seed(0)
    gamma = torch.softmax(torch.randn(6, 3, dtype=dtype), dim=-1).requires_grad_()
    head_logits = torch.randn(3, 6, 11, dtype=dtype, requires_grad=True)
    weight = torch.randn(11, 4, dtype=dtype, requires_grad=True)
    upstream = torch.randn(6, 4, dtype=dtype)

    torch.manual_seed(1)
    ids_ref, soft = gumbel_softmax_sample(mix_head_logits(gamma, head_logits), 0.3)
    reference = (F.one_hot(ids_ref, 11).to(dtype) - soft.detach() + soft) @ weight.detach()
    grads_ref = torch.autograd.grad((reference * upstream).sum(), [gamma, head_logits])

    torch.manual_seed(1)
    ids, carrier = mixture_straight_through(gamma, head_logits, weight, 0.3)
    assert torch.equal(ids, ids_ref)
    embeds = weight.detach()[ids] + carrier
    torch.testing.assert_close(embeds, reference)  # the exact embedding rows in the forward
    grads = torch.autograd.grad((embeds * upstream).sum(), [gamma, head_logits, weight], allow_unused=True)
    torch.testing.assert_close(grads[0], grads_ref[0])
    torch.testing.assert_close(grads[1], grads_ref[1])
    assert grads[2] is None or grads[2].abs().sum() == 0
    assert grads[0].abs().sum() > 0  # the case under test is not trivially zero


def test_gumbel_sample_is_an_exact_draw_from_the_distribution():
    """argmax(logits + Gumbel noise) draws token v with probability softmax(logits)_v (chi-square-sized check)."""
    torch.manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0])
    ids, _ = gumbel_softmax_sample(logits.expand(40000, 5), soft=False)
    frequencies = torch.bincount(ids, minlength=5).double() / ids.numel()
    expected = torch.softmax(logits.double(), dim=0)
    assert frequencies[4] == 0
    assert torch.all((frequencies - expected).abs() <= 4 * (expected * (1 - expected) / ids.numel()).sqrt() + 1e-9)


def test_layer_switch_at_thirds():
    assert [layer_switch_index(p, 3) for p in (0.0, 0.32, 0.34, 0.66, 0.67, 1.0)] == [0, 0, 1, 1, 2, 2]


# ---- the model ---------------------------------------------------------------------------------------------------


def test_masked_only_logits_and_shared_embeddings():
    model, tok = make_model(mlm_layers=(1, 2))
    batch = make_batch(tok)
    masked = batch["labels"] != -100
    gen = model.generator(batch["input_ids"], batch["attention_mask"], masked_positions=masked)
    assert gen.logits.shape == (2, int(masked.sum()), len(tok))
    assert gen.features.shape == (2, int(masked.sum()), 32)
    shared = model.discriminator.get_input_embeddings().weight
    assert model.generator.get_input_embeddings().weight is shared
    assert sum(p is shared for p in model.parameters()) == 1  # one tensor, one optimiser entry
    # the MLM output matrix is that tensor: changing it changes the generator's logits
    with torch.no_grad():
        shared[batch["labels"][masked][0]] += 1.0
    again = model.generator(batch["input_ids"], batch["attention_mask"], masked_positions=masked)
    assert not torch.allclose(again.logits, gen.logits)


@pytest.mark.parametrize("stop_gradient", [True, False])
def test_stop_gradient_partitions_the_generator(stop_gradient):
    model, tok = make_model(mlm_layers=(1, 2), stop_gradient=stop_gradient)
    batch = make_batch(tok)
    masked = batch["labels"] != -100
    gen = model.generator(batch["input_ids"], batch["attention_mask"], masked_positions=masked)
    upper_loss = mlm_losses(gen.logits, batch["labels"][masked])[1]  # the head at layer 2
    lower_block = list(model.generator.body.encoder.layer[0].parameters())
    upper_block = list(model.generator.body.encoder.layer[1].parameters())
    positions = [model.generator.body.embeddings.position_embeddings.weight]
    grads = torch.autograd.grad(upper_loss, lower_block + upper_block + positions, allow_unused=True)
    below = [g for g in grads[: len(lower_block)]] + [grads[-1]]
    above = grads[len(lower_block): len(lower_block) + len(upper_block)]
    assert all(g is not None and g.abs().sum() > 0 for g in above)
    if stop_gradient:
        assert all(g is None or g.abs().sum() == 0 for g in below)
    else:
        assert all(g is not None and g.abs().sum() > 0 for g in below)


def _head_and_mixture_grads(model, output):
    head = list(model.generator.mlm_head.parameters())
    grads = torch.autograd.grad(output.rtd_loss, head + [model.generator.mixture], allow_unused=True)
    return grads[:-1], grads[-1]


def test_discriminator_gradient_reaches_the_mixture_but_not_h_unless_adv_mlm():
    model, tok = make_model(mlm_layers=(1, 2))
    with torch.no_grad():
        model.generator.mixture.normal_()
    batch = make_batch(tok)
    head_grads, v_grad = _head_and_mixture_grads(model, model(**batch))
    assert v_grad is not None and v_grad.abs().sum() > 0
    assert all(g is None or g.abs().sum() == 0 for g in head_grads)

    head_grads, _ = _head_and_mixture_grads(model, model(**batch, adv_mlm_multiplier=0.1))
    assert any(g is not None and g.abs().sum() > 0 for g in head_grads)

    # no adversarial training: uniform average, nothing from the discriminator reaches the generator side
    head_grads, v_grad = _head_and_mixture_grads(model, model(**batch, mixture="uniform"))
    assert v_grad is None and all(g is None for g in head_grads)


def test_reversed_gradient_reaches_the_tied_matrix_only_through_the_generator_lookup():
    """docs/amos.md's statement, exactly: the RTD loss's gradient on the shared token-embedding / MLM output matrix is
    the discriminator's own (through its lookup of x_rep) plus, only with the adversarial mixture, a part through
    the generator's input lookup (from gamma, reversed, through f and the generator's encoder); nothing through
    the output projection."""
    model, tok = make_model(mlm_layers=(1, 2))
    with torch.no_grad():
        model.generator.mixture.normal_()
    batch = make_batch(tok)
    embedding = model.get_input_embeddings()
    for mixture in ("adversarial", "uniform"):
        lookups = []  # (ids, output) of every call of the shared embedding: the generator's, then x_rep's
        handle = embedding.register_forward_hook(lambda module, args, output: lookups.append((args[0], output)))
        try:
            out = model(**batch, mixture=mixture)
        finally:
            handle.remove()
        assert len(lookups) == 2
        (generator_ids, generator_out), (replaced_ids, replaced_out) = lookups
        assert torch.equal(replaced_ids, out.replaced_input_ids)
        through_generator, through_discriminator, total = torch.autograd.grad(
            out.rtd_loss, [generator_out, replaced_out, embedding.weight], allow_unused=True)
        assert through_discriminator.abs().sum() > 0
        if mixture == "adversarial":
            assert through_generator is not None and through_generator.abs().sum() > 0
        else:
            assert through_generator is None or through_generator.abs().sum() == 0
            through_generator = torch.zeros_like(generator_out)
        by_lookups = torch.zeros_like(embedding.weight)
        by_lookups.index_add_(0, generator_ids.flatten(), through_generator.flatten(0, 1))
        by_lookups.index_add_(0, replaced_ids.flatten(), through_discriminator.flatten(0, 1))
        if embedding.padding_idx is not None:  # nn.Embedding gives its padding row no gradient (a sampled [PAD])
            by_lookups[embedding.padding_idx] = 0
        torch.testing.assert_close(total, by_lookups, rtol=1e-5, atol=1e-7)


def test_reversal_makes_the_mixture_update_increase_the_discriminator_loss():
    """Finite differences on the straight-through surrogate F(v): its value is the RTD loss of the hard sample
    and its derivative is the straight-through gradient; a gradient step on eq. 4 must increase it."""
    model, tok = make_model(mlm_layers=(1, 2), discriminator="bert")
    model = model.double().eval()  # no dropout: the only randomness is the Gumbel noise, re-seeded below
    with torch.no_grad():
        model.generator.mixture.normal_(std=0.3)
    batch = make_batch(tok)
    masked = batch["labels"] != -100
    rtd_weight, temperature = 50.0, 0.3

    torch.manual_seed(123)  # mlm_probability: the slots hold the masked rows first, in the order drawn below
    out = model(**batch, rtd_weight=rtd_weight, gumbel_temperature=temperature, mlm_probability=0.3)
    (v_grad,) = torch.autograd.grad(out.loss, [model.generator.mixture])

    with torch.no_grad():
        gen = model.generator(batch["input_ids"], batch["attention_mask"], masked_positions=masked)
    weight = model.get_input_embeddings().weight.detach()

    def soft_sample(v):
        torch.manual_seed(123)  # the same Gumbel noise as the model's forward
        return gumbel_softmax_sample(mix_head_logits(mixture_weights(gen.features, v), gen.logits), temperature)

    ids0, soft0 = soft_sample(model.generator.mixture.detach())
    replaced = batch["original_input_ids"].masked_scatter(masked, ids0)
    assert torch.equal(replaced, out.replaced_input_ids)

    def surrogate(v):
        with torch.no_grad():
            _, soft = soft_sample(v)
            embeds = weight[replaced].clone()
            embeds[masked] += (soft - soft0).to(weight.dtype) @ weight  # explicit one-hot straight-through
            logits = model.discriminator(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits
            return rtd_loss(logits, rtd_labels(replaced, batch["original_input_ids"]), batch["attention_mask"])

    v0 = model.generator.mixture.detach().clone()
    torch.testing.assert_close(surrogate(v0), out.rtd_loss.detach())
    direction = -v_grad / v_grad.norm()  # what a gradient step on eq. 4 does to v
    eps = 1e-3  # the surrogate is smooth; float64 rounding of a loss near 0.69 limits smaller steps

    def slope(d):
        return (surrogate(v0 + eps * d) - surrogate(v0 - eps * d)) / (2 * eps)

    assert slope(direction) > 0  # the update increases the discriminator loss
    # and the whole gradient is -lambda * dF: reversed, neither rescaled nor flipped twice
    generator = torch.Generator().manual_seed(5)
    for d in [direction] + [torch.randn(v0.shape, generator=generator, dtype=v0.dtype) for _ in range(2)]:
        d = d / d.norm()
        assert abs(slope(d) * rtd_weight + v_grad @ d) <= 2e-3 * v_grad.norm()


def test_a_sample_equal_to_the_original_is_labelled_original():
    model, tok = make_model(mlm_layers=(1, 2))
    target = tok.convert_tokens_to_ids("the")
    with torch.no_grad():
        model.generator.mlm_head.bias[target] = 1e4  # every sample is "the"
    batch = make_batch(tok, mlm_probability=0.5)
    out = model(**batch)
    masked = batch["labels"] != -100
    original = batch["original_input_ids"]
    assert bool((out.replaced_input_ids[masked] == target).all())
    expected = (masked & (original != target)).float()
    assert bool((masked & (original == target)).any())  # the case under test occurs
    assert torch.equal(out.rtd_labels, expected)


def test_electra_configuration_is_one_head_without_mixture_gradient():
    model, tok = make_model(mlm_layers=(2,))
    batch = make_batch(tok)
    out = model(**batch)
    assert out.mlm_losses.shape == (1,) and torch.equal(out.mixture_weights, torch.ones_like(out.mixture_weights))
    out.loss.backward()
    assert model.generator.mixture.grad is None or model.generator.mixture.grad.abs().sum() == 0
    assert model.generator.mlm_head.dense.weight.grad.abs().sum() > 0


def test_config_validation():
    tok = tiny_tokenizer()
    with pytest.raises(ValueError, match="mlm_layers"):
        AmosGeneratorConfig(body=tiny_config("electra", tok), mlm_layers=[1])  # must end at the last layer
    with pytest.raises(ValueError, match="mlm_layers"):
        AmosGeneratorConfig(body=tiny_config("electra", tok), mlm_layers=[2, 1])
    config = AmosModelConfig.from_configs(tiny_config("electra", tok, embedding_size=16),
                                          tiny_config("electra", tok), mlm_layers=[1, 2])
    with pytest.raises(ValueError, match="token embeddings differ"):
        AmosModel(config)
    generator = AmosModelConfig.from_configs(tiny_config("bert", tok), tiny_config("electra", tok)).generator
    assert generator.body.hidden_dropout_prob == 0.0 and generator.body.attention_probs_dropout_prob == 0.0


@pytest.mark.parametrize("source_type", ["bert", "electra"])
def test_from_pretrained_encoder_copies_the_body_into_both_models(tmp_path, source_type):
    """Continued pretraining: the discriminator is the whole pretrained encoder (BERT mapped onto ELECTRA's body,
    pooler dropped), the generator its first d_K layers; embeddings shared, fresh heads, v = 0; the discriminator
    computes exactly the pretrained encoder's hidden states."""
    from transformers import AutoModel

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    encoder = AutoModel.from_config(tiny_config(source_type, tok, num_hidden_layers=3))
    encoder.save_pretrained(tmp_path / "encoder")
    model = AmosModel.from_pretrained_encoder(str(tmp_path / "encoder"), 2, mlm_layers=[1, 2])
    assert model.config.discriminator.model_type == "electra" and model.mlm_layers == [1, 2]
    source = encoder.state_dict()
    for key, value in model.discriminator.electra.state_dict().items():
        torch.testing.assert_close(value, source[key], rtol=0, atol=0, msg=key)
    generator = model.generator.body.state_dict()
    assert not any(key.startswith("encoder.layer.2.") for key in generator)
    for key, value in generator.items():
        torch.testing.assert_close(value, source[key], rtol=0, atol=0, msg=key)
    assert model.generator.get_input_embeddings() is model.discriminator.get_input_embeddings()
    assert torch.count_nonzero(model.generator.mixture) == 0
    ids = torch.tensor([tok.encode("the movie was good")])
    encoder.eval(), model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.discriminator.electra(input_ids=ids)[0], encoder(input_ids=ids)[0])
    with pytest.raises(ValueError, match="generator_num_hidden_layers"):
        AmosModel.from_pretrained_encoder(str(tmp_path / "encoder"), 4)
    bart = AutoModel.from_config(tiny_config("bart", tok))  # an encoder-decoder: no masked-LM body to continue
    bart.save_pretrained(tmp_path / "bart")
    with pytest.raises(ValueError, match="encoder_name_or_path"):
        AmosModel.from_pretrained_encoder(str(tmp_path / "bart"), 1)


def test_continued_pretraining_keeps_the_bodys_sentence_transformers_pooling(tmp_path):
    """An AMOS output continued from a sentence-transformers body carries its pooling files, so `--pooling auto`
    reads the discriminator as the body was trained to be read (mean here, not the first token); a reload keeps
    them, a plain encoder gets none, and a non-main process writes none."""
    import json

    from transformers import AutoConfig, AutoModel

    from hf_aux.modeling.pooling import resolve_pooling

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tok, num_hidden_layers=2)).save_pretrained(tmp_path / "plain")
    AutoModel.from_config(tiny_config("bert", tok, num_hidden_layers=2)).save_pretrained(tmp_path / "st")
    (tmp_path / "st" / "1_Pooling").mkdir()
    (tmp_path / "st" / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (tmp_path / "st" / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    model = AmosModel.from_pretrained_encoder(str(tmp_path / "st"), 1, mlm_layers=[1])
    model.save_pretrained(str(tmp_path / "side"), is_main_process=False)
    assert not (tmp_path / "side" / "modules.json").exists()
    model.save_pretrained(str(tmp_path / "out"))
    assert resolve_pooling("auto", AutoConfig.from_pretrained(tmp_path / "out")) == "mean"
    AmosModel.from_pretrained(str(tmp_path / "out")).save_pretrained(str(tmp_path / "again"))
    assert resolve_pooling("auto", AutoConfig.from_pretrained(tmp_path / "again")) == "mean"
    AmosModel.from_pretrained_encoder(str(tmp_path / "plain"), 1, mlm_layers=[1]).save_pretrained(
        str(tmp_path / "plain_out"))
    assert not (tmp_path / "plain_out" / "modules.json").exists()
    assert resolve_pooling("auto", AutoConfig.from_pretrained(tmp_path / "plain_out")) == "cls"


def test_fixed_weights_mixture_equals_its_special_cases_and_sends_nothing_back():
    """Table 8's 'w. final mix weights': gamma is the given weights at every masked position. One-hot weights give
    the 'fixed' head's draws, equal weights the uniform mixture's (same noise); no gradient reaches v or h."""
    model, tok = make_model(mlm_layers=(1, 2))
    model.eval()  # no dropout: the same Gumbel noise under the same seed is the only randomness
    with torch.no_grad():
        model.generator.mixture.normal_()
        for parameter in model.generator.body.encoder.layer[1].parameters():  # the two heads now disagree
            parameter.normal_(std=1.0)
        # logits of a random tiny model are ~0.1 against Gumbel noise of sd 1.3: larger token embeddings make each
        # head's distribution, not the shared noise, decide its samples
        model.get_input_embeddings().weight.mul_(50.0)
    batch = make_batch(tok)

    def run(**kwargs):
        torch.manual_seed(7)
        return model(**batch, **kwargs)

    assert not torch.equal(run(mixture="fixed", head_index=0).replaced_input_ids,
                           run(mixture="fixed", head_index=1).replaced_input_ids)

    for weights, same in (([1.0, 0.0], dict(mixture="fixed", head_index=0)),
                          ([0.0, 1.0], dict(mixture="fixed", head_index=1)),
                          ([0.5, 0.5], dict(mixture="uniform"))):
        out, reference = run(mixture="weights", fixed_weights=weights), run(**same)
        assert torch.equal(out.replaced_input_ids, reference.replaced_input_ids), weights
        torch.testing.assert_close(out.loss, reference.loss)
        assert torch.equal(out.mixture_weights, torch.tensor(weights).expand_as(out.mixture_weights))
    mixed = run(mixture="weights", fixed_weights=[0.8, 0.2])
    head_grads, v_grad = _head_and_mixture_grads(model, mixed)
    assert v_grad is None and all(g is None for g in head_grads)
    for bad in ([1.0], [0.7, 0.7], [1.5, -0.5], None):
        with pytest.raises(ValueError, match="field 'fixed_weights'"):
            model(**batch, mixture="weights", fixed_weights=bad)


def test_separate_generators_each_read_their_own_body():
    """Table 2 'w. separate MLM gen.': generator k is a body of depth mlm_layers[k] read at its last layer through
    its own MLM head; head k's MLM loss trains body k (and the shared embeddings) only; the checkpoint stores the
    shared token embeddings once and reloads exactly, tied again."""
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    config = AmosModelConfig.from_configs(tiny_config("electra", tok, num_hidden_layers=3), tiny_config("electra", tok),
                                          mlm_layers=[1, 3, 3], separate_generators=True)
    model = AmosModel(config)
    generator = model.generator
    assert [body.config.num_hidden_layers for body in generator.bodies] == [1, 3, 3]
    assert model.head_names == ["generator_1_depth_1", "generator_2_depth_3", "generator_3_depth_3"]
    shared = model.get_input_embeddings().weight
    assert all(body.get_input_embeddings().weight is shared for body in generator.bodies)
    assert sum(p is shared for p in model.parameters()) == 1

    batch = make_batch(tok)
    masked = batch["labels"] != -100
    model.eval()
    gen = generator(batch["input_ids"], batch["attention_mask"], masked_positions=masked)
    for k, (body, head) in enumerate(zip(generator.bodies, generator.mlm_heads)):  # by hand, one generator alone
        states = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        expected = head(states[masked]) @ shared.t() + head.bias
        torch.testing.assert_close(gen.logits[k], expected)
    losses = mlm_losses(gen.logits, batch["labels"][masked])
    blocks = [list(body.encoder.parameters()) + list(head.parameters())
              for body, head in zip(generator.bodies, generator.mlm_heads)]
    grads = torch.autograd.grad(losses[1], [p for block in blocks for p in block] + [shared], allow_unused=True)
    sizes = [len(block) for block in blocks]
    per_block = [grads[sum(sizes[:k]):sum(sizes[:k + 1])] for k in range(3)]
    assert all(g is not None and g.abs().sum() > 0 for g in per_block[1])
    assert all(g is None or g.abs().sum() == 0 for g in per_block[0] + per_block[2])
    assert grads[-1].abs().sum() > 0

    out = model(**batch, mlm_probability=0.3)  # the rate make_batch masks at
    # gamma at the static prediction slots, of which the masked positions are the predicted ones
    assert out.mlm_losses.shape == (3,) and out.mixture_weights.shape == (max_predictions(masked.shape, 0.3), 3)
    assert int(out.predicted.sum()) == int(masked.sum())
    with pytest.raises(ValueError, match="strictly increasing"):
        AmosGeneratorConfig(body=tiny_config("electra", tok), mlm_layers=[2, 2])  # repeats: separate only
    with pytest.raises(ValueError, match="non-decreasing"):
        AmosGeneratorConfig(body=tiny_config("electra", tok), mlm_layers=[2, 1, 2], separate_generators=True)


def test_separate_generators_checkpoint_stores_the_shared_embeddings_once(tmp_path):
    from safetensors.torch import load_file

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    config = AmosModelConfig.from_configs(tiny_config("electra", tok), tiny_config("electra", tok),
                                          mlm_layers=[1, 2], separate_generators=True)
    model = AmosModel(config)
    with torch.no_grad():
        model.generator.mixture.normal_()
    model.save_pretrained(str(tmp_path))
    stored = load_file(str(tmp_path / "generator" / "model.safetensors"))
    assert "bodies.0.embeddings.word_embeddings.weight" in stored
    assert "bodies.1.embeddings.word_embeddings.weight" not in stored and "bodies.1.encoder.layer.1.output.dense.weight" in stored
    reloaded = AmosModel.from_pretrained(str(tmp_path))
    assert reloaded.config.generator.separate_generators and reloaded.mlm_layers == [1, 2]
    for (key, value), (key_again, value_again) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert key == key_again and torch.equal(value, value_again), key
    shared = reloaded.get_input_embeddings().weight
    assert all(body.get_input_embeddings().weight is shared for body in reloaded.generator.bodies)


def test_from_pretrained_encoder_gives_each_separate_generator_its_depth(tmp_path):
    """Continued pretraining with separate generators: generator k = the encoder's first mlm_layers[k] layers. Equal
    depths start as identical copies and, without generator dropout, stay identical after a training step (same
    inputs, same gradients): 'w. three 4-layer gen.' from one pretrained encoder is one generator."""
    from transformers import AutoModel

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    encoder = AutoModel.from_config(tiny_config("bert", tok, num_hidden_layers=3))
    encoder.save_pretrained(tmp_path / "encoder")
    source = encoder.state_dict()
    model = AmosModel.from_pretrained_encoder(str(tmp_path / "encoder"), 2, mlm_layers=[1, 2, 2],
                                              separate_generators=True)
    for body, depth in zip(model.generator.bodies, [1, 2, 2]):
        state = body.state_dict()
        assert not any(key.startswith(f"encoder.layer.{depth}.") for key in state)
        for key, value in state.items():
            torch.testing.assert_close(value, source[key], rtol=0, atol=0, msg=key)
    with torch.no_grad():  # the two depth-2 generators' heads start alike too
        model.generator.mlm_heads[2].load_state_dict(model.generator.mlm_heads[1].state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model(**make_batch(tok)).loss.backward()
    optimizer.step()
    twin, other = model.generator.bodies[1].state_dict(), model.generator.bodies[2].state_dict()
    assert any(not torch.equal(twin[key], source[key]) for key in twin if key.startswith("encoder."))
    for key in twin:
        assert torch.equal(twin[key], other[key]), key
