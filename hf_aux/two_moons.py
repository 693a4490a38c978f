"""The Two Moons setting of the meta-learned LM objective paper (§4.2, Appendix A.1), built exactly as described:

- points from `sklearn.datasets.make_moons` (noise 0.1), each coordinate scaled and floored to an integer in
  [0, 64) and written as text ("x y");
- unlabelled sequences: 16 points sorted by (x, y) coordinates, "x1 y1 x2 y2 ...", 32 tokens + [CLS] + [SEP] = 34
  positions (Table 4's "Max Positions 34");
- one labelled task, `moon` (which moon a point "x y" lies on), with finetune sets of 10, 20, 40, 80, 160 points,
  validation sets of the same size (truncated to 128) and a test set of 1,000 points;
- a word-level tokenizer of exactly 512 tokens, so every coordinate is a single token;
- the model of Table 4: 2 layers, hidden 8, feed-forward 32, 2 heads, GELU, dropout 0.1, 34 positions.
"""

from __future__ import annotations

import numpy as np

from hf_aux.modeling.teacher import MLM_TASK_TOKEN, label_token, task_token

GRID = 64
POINTS_PER_SEQUENCE = 16
VOCAB_SIZE = 512
FINETUNE_SIZES = (10, 20, 40, 80, 160)
TASK_NAME = "moon"
# make_moons with noise 0.1 stays well inside these bounds; they are mapped onto [0, 64)
X_RANGE = (-1.5, 2.5)
Y_RANGE = (-1.0, 1.5)


def moon_points(n: int, seed: int, noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """n points of the two moons as integer coordinates in [0, 64): (points int64 [n, 2], labels int64 [n])."""
    from sklearn.datasets import make_moons

    xy, labels = make_moons(n_samples=n, shuffle=True, noise=noise, random_state=seed)
    scaled = np.empty_like(xy)
    for axis, (low, high) in enumerate((X_RANGE, Y_RANGE)):
        scaled[:, axis] = (xy[:, axis] - low) / (high - low) * GRID
    points = np.clip(np.floor(scaled), 0, GRID - 1).astype(np.int64)
    return points, labels.astype(np.int64)


def point_text(point) -> str:
    return f"{int(point[0])} {int(point[1])}"


def unlabelled_texts(num_sequences: int, seed: int = 0) -> list[str]:
    """`num_sequences` texts of 16 points each, points sorted by (x, y)."""
    points, _ = moon_points(num_sequences * POINTS_PER_SEQUENCE, seed=seed)
    texts = []
    for chunk in points.reshape(num_sequences, POINTS_PER_SEQUENCE, 2):
        ordered = sorted(map(tuple, chunk.tolist()))
        texts.append(" ".join(point_text(p) for p in ordered))
    return texts


def labelled_split(n: int, seed: int) -> dict[str, list]:
    points, labels = moon_points(n, seed=seed)
    return {"text": [point_text(p) for p in points], "label": labels.tolist()}


def two_moons_tokenizer():
    """A word-level tokenizer of exactly 512 tokens: specials, the 64 coordinates, the meta-LM task and label
    tokens for the `moon` task, and unused tokens up to 512. Same conventions as `add_meta_lm_tokens`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    meta = [MLM_TASK_TOKEN, task_token(TASK_NAME), label_token(0), label_token(1)]
    words = [str(i) for i in range(GRID)]
    unused = [f"[unused{i}]" for i in range(VOCAB_SIZE - len(specials) - len(meta) - len(words))]
    vocab = {token: i for i, token in enumerate(specials + meta + words + unused)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        additional_special_tokens=meta, model_max_length=2 * POINTS_PER_SEQUENCE + 2)
    if len(tokenizer) != VOCAB_SIZE:
        raise ValueError(f"two moons tokenizer: built {len(tokenizer)} tokens, expected {VOCAB_SIZE}")
    return tokenizer


def two_moons_model_config(tokenizer, **overrides):
    """Table 4 (the paper's encoder is pre-LN; BERT's is post-LN, the one difference)."""
    from transformers import BertConfig

    kwargs = dict(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                  max_position_embeddings=2 * POINTS_PER_SEQUENCE + 2, pad_token_id=tokenizer.pad_token_id,
                  type_vocab_size=1)
    kwargs.update(overrides)
    return BertConfig(**kwargs)


def two_moons_data(num_unlabelled: int = 32_000, finetune_size: int = 160, test_size: int = 1000,
                   seed: int = 0) -> dict:
    """Everything one run needs, as `datasets.Dataset`s: `unlabelled` (text), and the `moon` task's `train`
    (`finetune_size` points), `validation` (same size, at most 128) and `test` (`test_size`) splits
    (columns text, label). Different seeds for each part, so no split shares points by construction."""
    from datasets import Dataset

    if finetune_size < 2:
        raise ValueError(f"two moons: field 'finetune_size': {finetune_size} < 2")
    return {
        "unlabelled": Dataset.from_dict({"text": unlabelled_texts(num_unlabelled, seed=seed)}),
        "train": Dataset.from_dict(labelled_split(finetune_size, seed=seed + 1)),
        "validation": Dataset.from_dict(labelled_split(min(finetune_size, 128), seed=seed + 2)),
        "test": Dataset.from_dict(labelled_split(test_size, seed=seed + 3)),
    }
