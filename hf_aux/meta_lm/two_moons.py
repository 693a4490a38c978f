"""The Two Moons setting of the meta-learned LM objective paper (§4.2, Appendix A.1), built exactly as described:

- points from `sklearn.datasets.make_moons` (noise 0.1), each coordinate scaled and floored to an integer in
  [0, 64) and written as text ("x y");
- unlabelled sequences: 16 points sorted by (x, y) coordinates, "x1 y1 x2 y2 ...", 32 tokens + [CLS] + [SEP] = 34
  positions (Table 4's "Max Positions 34");
- one labelled task, `moon` (which moon a point "x y" lies on), with finetune sets of 10, 20, 40, 80, 160 points,
  validation sets of the same size (truncated to 128) and a test set of 1,000 points;
- a word-level tokenizer of exactly 512 tokens, so every coordinate is a single token;
- the model of Table 4: 2 layers, hidden 8, feed-forward 32, 2 heads, GELU, dropout 0.1, 34 positions;
- fine-tuning as Table 6 (`finetune_moons`): "[TASK_moon] x y [SEP]" in, the label token `[LABEL_k]` as the target
  at every position of the LM head, the prediction the label token with the larger logit averaged over positions.

The fine-tuning loss is the cross-entropy over the label tokens' logits only (`loss="labels"`). A softmax over the
whole vocabulary (`loss="vocab"`) breaks this model: the LM decoder is tied to the input embeddings, so every step
pushes all 64 coordinate embeddings along one shared direction until the inputs are nearly indistinguishable and
the loss stalls (docs/meta_lm_measurements.md has the run).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import get_inverse_sqrt_schedule

from hf_aux.meta_lm.teacher import MLM_TASK_TOKEN, MetaLMTokens, label_token, task_token

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
    low, high = np.array((X_RANGE, Y_RANGE)).T
    points = np.clip(np.floor((xy - low) / (high - low) * GRID), 0, GRID - 1).astype(np.int64)
    return points, labels.astype(np.int64)


def point_text(point) -> str:
    return f"{int(point[0])} {int(point[1])}"


def unlabelled_texts(num_sequences: int, seed: int = 0) -> list[str]:
    """`num_sequences` texts of 16 points each, points sorted by (x, y)."""
    points, _ = moon_points(num_sequences * POINTS_PER_SEQUENCE, seed=seed)
    chunks = points.reshape(num_sequences, POINTS_PER_SEQUENCE, 2).tolist()
    return [" ".join(point_text(p) for p in sorted(chunk)) for chunk in chunks]


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


def two_moons_model_config(tokenizer, pre_ln: bool = False, **overrides):
    """Table 4. BERT (post-LN) by default; `pre_ln=True` gives the paper's pre-LN layout as a
    `roberta-prelayernorm` config (RoBERTa numbers positions from pad_token_id + 1, hence 2 more position
    embeddings for the same 34 positions). The layout is not what made fine-tuning fail: both fit 160 points."""
    from transformers import BertConfig, RobertaPreLayerNormConfig

    positions = 2 * POINTS_PER_SEQUENCE + 2
    kwargs = dict(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                  max_position_embeddings=positions + (tokenizer.pad_token_id + 1 if pre_ln else 0),
                  pad_token_id=tokenizer.pad_token_id, type_vocab_size=1)
    kwargs.update(overrides)
    return RobertaPreLayerNormConfig(**kwargs) if pre_ln else BertConfig(**kwargs)


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


def encode_points(split, tokenizer, task_id: int):
    """(input_ids [N, 4] = "[TASK_moon] x y [SEP]", labels [N]) for a split with columns text ("x y") and label."""
    ids = torch.tensor([tokenizer(text)["input_ids"] for text in split["text"]])
    if ids.ndim != 2 or ids.shape[1] != 4:
        raise ValueError(f"two moons: field 'text': expected 'x y' with 2 coordinate tokens, got input_ids of "
                         f"shape {tuple(ids.shape)}")
    if (ids == tokenizer.unk_token_id).any():
        raise ValueError("two moons: field 'text': a coordinate outside the tokenizer's 0..63 vocabulary")
    ids[:, 0] = task_id
    return ids, torch.tensor(split["label"])


def label_token_scores(model, input_ids, label_ids, attention_mask=None):
    """[N, num_labels]: each label token's LM-head logit, averaged over the (attended) positions."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[..., label_ids]  # [N, L, num_labels]
    if attention_mask is None:
        return logits.mean(1)
    weights = attention_mask[..., None].to(logits.dtype)
    return (logits * weights).sum(1) / weights.sum(1)


def label_token_loss(logits, labels, label_ids, loss: str = "labels", attention_mask=None):
    """Cross-entropy of the label token at every (attended) position. `loss="labels"`: normalised over the label
    tokens (the fix, see the module docstring); `loss="vocab"`: over the whole vocabulary (collapses at hidden 8)."""
    targets = labels[:, None].expand(logits.shape[:2])
    if attention_mask is not None:
        targets = targets.masked_fill(attention_mask == 0, -100)
    if loss == "labels":
        return torch.nn.functional.cross_entropy(logits[..., label_ids].flatten(0, 1), targets.flatten())
    if loss == "vocab":
        vocab_targets = label_ids[targets.clamp_min(0)].masked_fill(targets < 0, -100)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), vocab_targets.flatten())
    raise ValueError(f"two moons: field 'loss': {loss!r} is not 'labels' or 'vocab'")


def finetune_moons(model, tokenizer, train, validation, test, *, epochs: int = 100, learning_rate: float = 1.2e-2,
                   batch_size: int = 16, warmup_steps: int = 10, weight_decay: float = 0.01, eval_every: int = 5,
                   loss: str = "labels", seed: int = 0) -> dict:
    """Table 6 on the Two Moons splits: `finetune_label_tokens` (the optimizer, schedule and model selection) on
    the `AutoModelForMaskedLM` `model`, trained in place. Returns accuracies in [0, 1]: best_validation, test, train."""
    if len(train) == 0:
        raise ValueError("two moons: field 'train': empty")
    tokens = MetaLMTokens.from_tokenizer(tokenizer, [TASK_NAME], 2)
    encoded = {name: encode_points(split, tokenizer, tokens.tasks[TASK_NAME])
               for name, split in (("train", train), ("validation", validation), ("test", test))}
    splits = {name: (ids, None, labels) for name, (ids, labels) in encoded.items()}
    return finetune_label_tokens(model, splits, torch.tensor(tokens.labels), epochs=epochs,
                                 learning_rate=learning_rate, batch_size=batch_size, warmup_steps=warmup_steps,
                                 weight_decay=weight_decay, eval_every=eval_every, loss=loss, seed=seed,
                                 owner="two moons")


def finetune_label_tokens(model, splits: dict, label_ids, *, epochs: int, learning_rate: float, batch_size: int,
                          warmup_steps: int = 10, weight_decay: float = 0.01, eval_every: int = 1,
                          loss: str = "labels", seed: int = 0, owner: str = "fine-tuning") -> dict:
    """Fine-tune an `AutoModelForMaskedLM` (in place) to output its label token at every position (the paper's
    conversion of a classification task, §4.3), as Tables 6/9: AdamW (betas 0.9/0.98, eps 1e-6, clip 5), inverse
    square-root schedule after `warmup_steps`. `splits` maps train / validation / test to (input_ids [N, L],
    attention_mask [N, L] or None, labels [N]). Returns the accuracies (in [0, 1]) at the epoch with the best
    validation accuracy (ties: the later epoch): best_validation, test, train, and that epoch."""
    train_ids, train_mask, train_labels = splits["train"]

    def accuracy(name, chunk: int = 256):  # in chunks: the logits are [N, L, V] before the label columns are taken
        ids, mask, labels = splits[name]
        model.eval()
        hits = 0
        with torch.no_grad():
            for start in range(0, len(ids), chunk):
                rows = slice(start, start + chunk)
                scores = label_token_scores(model, ids[rows], label_ids, None if mask is None else mask[rows])
                hits += (scores.argmax(-1) == labels[rows]).sum().item()
        model.train()
        return hits / len(ids)

    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n or "layer_norm" in n]
    decay = [p for p in model.parameters() if all(p is not q for q in no_decay)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=learning_rate, betas=(0.9, 0.98), eps=1e-6)
    scheduler = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup_steps)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    best = {"best_validation": -1.0, "test": 0.0, "train": 0.0, "epoch": 0}
    for epoch in range(epochs):
        order = torch.randperm(len(train_ids), generator=generator)
        for start in range(0, len(order), batch_size):
            index = order[start:start + batch_size]
            mask = None if train_mask is None else train_mask[index]
            logits = model(input_ids=train_ids[index], attention_mask=mask).logits
            step_loss = label_token_loss(logits, train_labels[index], label_ids, loss, mask)
            if not torch.isfinite(step_loss):
                raise ValueError(f"{owner}: non-finite fine-tuning loss at epoch {epoch}")
            step_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        if (epoch + 1) % eval_every == 0 or epoch + 1 == epochs:
            validation_accuracy = accuracy("validation")
            if validation_accuracy >= best["best_validation"]:
                best = {"best_validation": validation_accuracy, "test": accuracy("test"), "train": accuracy("train"),
                        "epoch": epoch + 1}
    return best
