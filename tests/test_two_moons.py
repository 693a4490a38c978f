"""Two Moons (hf_aux.meta_lm.two_moons): the text encoding of a labelled point, the label-token loss against a hand
computation, and the regression that every Table-10 run hit: a from-scratch fine-tune of the paper's hidden-8
model on 160 points must be far above chance (it was at 50% with the full-vocabulary softmax)."""

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForMaskedLM

from hf_aux.meta_lm.teacher import MetaLMTokens
from hf_aux.meta_lm.two_moons import (GRID, TASK_NAME, VOCAB_SIZE, encode_points, finetune_moons, label_token_loss,
                                      label_token_scores, moon_points, two_moons_data, two_moons_model_config,
                                      two_moons_tokenizer)


@pytest.fixture(scope="module")
def tokenizer():
    return two_moons_tokenizer()


@pytest.fixture(scope="module")
def moons():
    return two_moons_data(num_unlabelled=4, finetune_size=160, test_size=400, seed=0)


def test_points_are_integer_grid_coordinates_on_both_moons():
    points, labels = moon_points(2000, seed=0)
    assert points.dtype == np.int64 and points.min() >= 0 and points.max() < GRID
    assert set(labels.tolist()) == {0, 1} and abs(labels.mean() - 0.5) < 0.01
    # the grid is used: the two moons spread over most of both axes
    assert np.ptp(points[:, 0]) > 40 and np.ptp(points[:, 1]) > 25


def test_a_point_becomes_task_token_x_y_sep(tokenizer):
    assert len(tokenizer) == VOCAB_SIZE
    tokens = MetaLMTokens.from_tokenizer(tokenizer, [TASK_NAME], 2)
    split = {"text": ["30 45", "45 30", "0 63"], "label": [1, 0, 1]}
    ids, labels = encode_points(split, tokenizer, tokens.tasks[TASK_NAME])
    coordinate = tokenizer.convert_tokens_to_ids
    assert ids.tolist() == [[tokens.tasks[TASK_NAME], coordinate("30"), coordinate("45"), tokens.separator],
                            [tokens.tasks[TASK_NAME], coordinate("45"), coordinate("30"), tokens.separator],
                            [tokens.tasks[TASK_NAME], coordinate("0"), coordinate("63"), tokens.separator]]
    assert labels.tolist() == [1, 0, 1]
    # 64 distinct single tokens, none of them special or a label token
    ids_of_coordinates = {coordinate(str(i)) for i in range(GRID)}
    assert len(ids_of_coordinates) == GRID and tokenizer.unk_token_id not in ids_of_coordinates
    assert not ids_of_coordinates & set(tokens.labels + [tokens.pad, tokens.mask, tokens.separator])
    with pytest.raises(ValueError, match="text"):
        encode_points({"text": ["64 3"], "label": [0]}, tokenizer, tokens.tasks[TASK_NAME])


def test_swapped_coordinates_give_different_outputs(tokenizer):
    """x and y share one vocabulary: only the position embeddings tell "3 5" from "5 3"."""
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(two_moons_model_config(tokenizer)).eval()
    tokens = MetaLMTokens.from_tokenizer(tokenizer, [TASK_NAME], 2)
    ids, _ = encode_points({"text": ["3 5", "5 3"], "label": [0, 0]}, tokenizer, tokens.tasks[TASK_NAME])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert (logits[0] - logits[1]).abs().max() > 1e-3


def test_label_token_loss_matches_hand_computation():
    logits = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [1.0, 0.0, -1.0, 0.5]]])  # [1 example, 2 positions, vocab 4]
    label_ids = torch.tensor([3, 1])  # label 0 is token 3, label 1 is token 1
    labels = torch.tensor([1])

    def nll(scores, target):
        return -(scores[target] - math.log(sum(math.exp(s) for s in scores)))

    over_labels = (nll([3.0, 1.0], 1) + nll([0.5, 0.0], 1)) / 2
    over_vocab = (nll([0.0, 1.0, 2.0, 3.0], 1) + nll([1.0, 0.0, -1.0, 0.5], 1)) / 2
    assert label_token_loss(logits, labels, label_ids, "labels").item() == pytest.approx(over_labels, abs=1e-6)
    assert label_token_loss(logits, labels, label_ids, "vocab").item() == pytest.approx(over_vocab, abs=1e-6)
    with pytest.raises(ValueError, match="loss"):
        label_token_loss(logits, labels, label_ids, "tokens")


def test_padded_positions_do_not_count_in_loss_or_scores():
    """Text tasks are padded: the loss and the scores over the attended positions only equal those of the unpadded
    example (hand check: position 2 is padding and carries a huge wrong logit)."""
    logits = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [1.0, 0.0, -1.0, 0.5], [0.0, 50.0, 0.0, -50.0]]])
    mask = torch.tensor([[1, 1, 0]])
    label_ids = torch.tensor([3, 1])
    labels = torch.tensor([0])
    for loss in ("labels", "vocab"):
        assert label_token_loss(logits, labels, label_ids, loss, mask).item() == pytest.approx(
            label_token_loss(logits[:, :2], labels, label_ids, loss).item(), abs=1e-6)

    class Fixed(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": logits})()

    scores = label_token_scores(Fixed(), None, label_ids, mask)
    assert scores[0].tolist() == pytest.approx([(3.0 + 0.5) / 2, (1.0 + 0.0) / 2])
    assert label_token_scores(Fixed(), None, label_ids)[0].tolist() == pytest.approx([(3.0 + 0.5 - 50) / 3, 51 / 3])


def coordinate_embedding_shift(model, tokenizer):
    """Norm of the coordinate embeddings' common mean over their mean distance from it."""
    coordinates = [tokenizer.convert_tokens_to_ids(str(i)) for i in range(GRID)]
    weight = model.get_input_embeddings().weight.detach()[coordinates]
    mean = weight.mean(0)
    return (mean.norm() / (weight - mean).norm(dim=1).mean()).item()


def test_finetune_from_scratch_fits_160_points(tokenizer, moons):
    """Table 4's model, Table 6's optimiser, 12 epochs of 160 points: far above chance on held-out points, and the
    coordinate embeddings keep their differences. The full-vocabulary loss, for contrast, collapses them (their
    shared shift grows several times larger than their spread) and stays at chance: the bug this guards."""
    results, shifts = {}, {}
    for loss in ("labels", "vocab"):
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_config(two_moons_model_config(tokenizer))
        results[loss] = finetune_moons(model, tokenizer, moons["train"], moons["validation"], moons["test"],
                                       epochs=12, batch_size=16, eval_every=4, loss=loss)
        shifts[loss] = coordinate_embedding_shift(model, tokenizer)
    assert results["labels"]["train"] > 0.9
    assert results["labels"]["test"] > 0.75
    assert shifts["labels"] < 0.5
    assert shifts["vocab"] > 2.0
    assert results["vocab"]["test"] < 0.6


def test_pre_ln_layout_fits_too(tokenizer, moons):
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(two_moons_model_config(tokenizer, pre_ln=True))
    assert model.config.model_type == "roberta-prelayernorm" and model.config.hidden_size == 8
    result = finetune_moons(model, tokenizer, moons["train"], moons["validation"], moons["test"], epochs=12,
                            batch_size=16, eval_every=4)
    assert result["train"] > 0.9 and result["test"] > 0.75
