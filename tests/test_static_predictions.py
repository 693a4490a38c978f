"""The MLM heads' static-size prediction slots (hf_aux.tasks.data.max_predictions / prediction_positions): K by
hand, BERT's per-row count in the masker, the slots by hand, and AMOS's and TARTAN's losses and gradients against the boolean-index
formulation they replaced (written out inline here as the reference)."""

import math

import pytest
import torch
import torch.nn.functional as F
from tiny import tiny_config, tiny_tokenizer

from hf_aux.amos.losses import mixture_straight_through, mlm_losses, reverse_gradient
from hf_aux.amos.model import AmosModel, AmosModelConfig
from hf_aux.tasks import data
from hf_aux.tasks.data import mask_tokens_for_mlm, max_predictions, prediction_positions, special_tokens_mask_for


def test_the_slots_are_bert_s_count_per_row_by_hand():
    """K = B x round(p T) (half up, at least 1): BERT's / ELECTRA's num_to_predict for a full row, so the slots cost
    what logits at the masked positions cost (18.9 expected per 128-token row at 0.15 with [CLS] and [SEP])."""
    assert max_predictions((8, 128), 0.15) == 8 * 19  # 19.2 -> 19
    assert max_predictions((4, 10), 0.15) == 4 * 2  # 1.5 rounds half up
    assert max_predictions((2, 4), 0.15) == 2 * 1  # 0.6 -> 1: at least one
    assert max_predictions(50, 0.15) == 8 and max_predictions((3, 50), None) == 150  # one row; no rate: every one
    counts = torch.tensor([0, 1, 6, 126, 128])
    assert data.predictions_per_row(counts, 0.15).tolist() == [0, 1, 1, 19, 19]
    assert [data.predictions_per_row(int(n), 0.15) for n in counts] == [0, 1, 1, 19, 19]


def test_slots_hold_the_chosen_positions_in_row_major_order_then_padding():
    chosen = torch.tensor([[False, True, False, True], [True, False, False, False]])
    positions, predicted = prediction_positions(chosen, 5)
    assert positions[:3].tolist() == [1, 3, 4]  # flat indices of the chosen, as chosen.reshape(-1).nonzero()
    assert predicted.tolist() == [True, True, True, False, False]
    assert len(set(positions.tolist())) == 5 and not chosen.reshape(-1)[positions[3:]].any()  # distinct padding
    everything, all_predicted = prediction_positions(chosen, 8)
    assert everything.tolist() == list(range(8)) and torch.equal(all_predicted, chosen.reshape(-1))


def test_masking_chooses_bert_s_count_of_each_row_uniformly_among_maskable_positions():
    tok = tiny_tokenizer()
    ids = torch.randint(5, len(tok), (6, 20), generator=torch.Generator().manual_seed(1))
    ids[:, 0], ids[:, -1] = tok.cls_token_id, tok.sep_token_id
    ids[2, 9:] = tok.pad_token_id  # a short row: 8 maskable tokens
    special = special_tokens_mask_for(ids, tok)
    masked, labels = mask_tokens_for_mlm(ids, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                         special_tokens_mask=special, generator=torch.Generator().manual_seed(0))
    chosen = labels != -100
    # 18 maskable -> round(2.7) = 3 per full row; the short row's 8 -> round(1.2) = 1; never a special token
    assert chosen.sum(-1).tolist() == [3, 3, 1, 3, 3, 3] and not (chosen & special).any()
    assert int(chosen.sum()) <= max_predictions(ids.shape, 0.15)
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(masked[~chosen], ids[~chosen])
    # uniform among the maskable positions: over many draws each is chosen at the row's rate (3 / 18), +- 5 sd
    draws = torch.stack([mask_tokens_for_mlm(ids, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                             special_tokens_mask=special,
                                             generator=torch.Generator().manual_seed(s))[1] != -100
                         for s in range(2000)]).float().mean(0)
    rate, sd = 3 / 18, math.sqrt(3 / 18 * 15 / 18 / 2000)
    full_rows = draws[[0, 1, 3, 4, 5]][:, 1:-1]
    assert (full_rows - rate).abs().max() < 5 * sd and draws[special].max() == 0.0


def test_mlm_losses_by_hand_ignore_the_padding_slots():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, -5.0, 9.0]]])  # one head, 3 slots, V = 3
    targets = torch.tensor([0, 1, -100])
    expected = (-math.log(math.exp(2) / (math.exp(2) + 2)) - math.log(math.e / (math.e + 2))) / 2
    assert mlm_losses(logits, targets).item() == pytest.approx(expected, rel=1e-6)
    assert mlm_losses(logits, torch.tensor([-100, -100, -100])).item() == 0.0  # nothing to predict: 0, not NaN


def _reference_amos_loss(model, batch, temperature=0.3, rtd_weight=50.0):
    """Eq. 4 the way AmosModel computed it before the static slots: every tensor at the M masked positions by
    boolean indexing (generator states[masked], labels[masked], masked_scatter, index_put at masked.nonzero())."""
    masked = batch["labels"] != -100
    targets = batch["labels"][masked]
    gen = model.generator(batch["input_ids"], batch["attention_mask"], masked_positions=masked)
    head_losses = torch.stack([F.cross_entropy(logits, targets) for logits in gen.logits])
    gamma = torch.einsum("kmh,h->mk", gen.features, model.generator.mixture).softmax(dim=-1)
    embedding = model.get_input_embeddings()
    sampled, carrier = mixture_straight_through(reverse_gradient(gamma), gen.logits.detach(), embedding.weight,
                                                temperature)
    replaced = batch["original_input_ids"].masked_scatter(masked, sampled)
    embeds = embedding(replaced).index_put(masked.nonzero(as_tuple=True), carrier, accumulate=True)
    logits = model.discriminator(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits
    keep = batch["attention_mask"].bool()
    rtd = F.binary_cross_entropy_with_logits(logits[keep], (replaced != batch["original_input_ids"]).float()[keep])
    return head_losses.sum() + rtd_weight * rtd


@pytest.mark.parametrize("family", ["electra", "albert", "modernbert"])
def test_amos_loss_and_gradients_equal_the_boolean_index_formulation(family):
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, embedding_dropout=0.0,
                      attention_dropout=0.0, mlp_dropout=0.0)
    config = AmosModelConfig.from_configs(tiny_config(family, tok, num_hidden_layers=3),
                                          tiny_config(family, tok, **no_dropout), mlm_layers=[1, 2, 3])
    model = AmosModel(config)
    with torch.no_grad():
        model.generator.mixture.normal_()  # a mixture away from uniform
    ids = torch.randint(5, len(tok), (4, 24), generator=torch.Generator().manual_seed(2))
    ids[:, 0], ids[:, -1] = tok.cls_token_id, tok.sep_token_id
    ids[1, 18:] = tok.pad_token_id
    attention = (ids != tok.pad_token_id).long()
    masked_ids, labels = mask_tokens_for_mlm(ids, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                             special_tokens_mask=special_tokens_mask_for(ids, tok),
                                             generator=torch.Generator().manual_seed(3))
    batch = dict(input_ids=masked_ids, attention_mask=attention, labels=labels, original_input_ids=ids)
    assert 0 < int((labels != -100).sum()) < max_predictions(ids.shape, 0.15)  # padding slots in play
    parameters = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(7)  # the same Gumbel noise for the M masked rows (the slots hold them first)
    out = model(**batch, mlm_probability=0.15)
    grads = torch.autograd.grad(out.loss, parameters, allow_unused=True)
    torch.manual_seed(7)
    reference = _reference_amos_loss(model, batch)
    reference_grads = torch.autograd.grad(reference, parameters, allow_unused=True)
    assert out.loss.item() == pytest.approx(reference.item(), rel=1e-6)
    assert int(out.dropped_predictions) == 0
    for got, want in zip(grads, reference_grads):
        if want is None:
            assert got is None or got.abs().sum() == 0
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("family", ["bert", "deberta-v2"])
@pytest.mark.parametrize("mlm_probability", [0.15, None])
def test_tartan_mlm_loss_and_gradients_equal_the_boolean_index_formulation(family, mlm_probability):
    from transformers import AutoModelForSequenceClassification

    from hf_aux.tartan.model import TartanModel

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    classifier = AutoModelForSequenceClassification.from_config(tiny_config(family, tok, num_labels=2))
    model = TartanModel(classifier, ["tapt"], mlm_probability=mlm_probability).eval()
    ids = torch.randint(5, len(tok), (3, 16), generator=torch.Generator().manual_seed(4))
    masked_ids, labels = mask_tokens_for_mlm(ids, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                             generator=torch.Generator().manual_seed(5))
    hidden = model.body(input_ids=masked_ids).last_hidden_state
    embedding = model.classifier.get_input_embeddings().weight
    head = model.mlm_heads["tapt"]
    parameters = list(head.parameters()) + [embedding]
    loss = model._head_mlm_loss("tapt", hidden, labels, embedding)
    grads = torch.autograd.grad(loss, parameters, retain_graph=True)  # the reference reads the same body states
    chosen = labels != -100  # the reference: logits at hidden[labels != -100], mean over them
    reference = F.cross_entropy(head(hidden[chosen], embedding), labels[chosen])
    reference_grads = torch.autograd.grad(reference, parameters)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    for got, want in zip(grads, reference_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
