"""Tokenisation per task kind, per-task padding, and MLM masking shared by the MLM-based methods."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

# --------------------------------------------------------------------------------------------------------------
# Unlabelled text -> fixed-size blocks -> dynamically masked MLM batches (AMOS, TARTAN's TAPT/DAPT, the student)
# --------------------------------------------------------------------------------------------------------------


def group_texts_for_mlm(dataset, tokenizer: PreTrainedTokenizerBase, text_column: str = "text", block_size: int = 128,
                        num_proc: int | None = None):
    """Tokenise `dataset[text_column]`, concatenate everything and cut it into blocks of `block_size` tokens,
    each wrapped in the tokenizer's [CLS] ... [SEP] (as run_mlm.py's group_texts, but every block is a valid
    single-sentence input). Returns a `datasets.Dataset` with `input_ids` and `attention_mask` (all ones).
    """
    if text_column not in dataset.column_names:
        raise ValueError(f"MLM text: field 'text_column': column '{text_column}' not in {dataset.column_names}")
    if len(dataset) == 0:
        raise ValueError("MLM text: the dataset is empty")
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if start is None or end is None:
        raise ValueError("MLM text: field 'tokenizer': it has neither cls/sep nor bos/eos tokens to wrap blocks")
    inner = block_size - 2
    if inner < 1:
        raise ValueError(f"MLM text: field 'block_size': {block_size} leaves no room next to the special tokens")

    def tokenize_and_group(batch):
        ids = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
        flat = [token for seq in ids for token in seq]
        blocks = [[start, *flat[i : i + inner], end] for i in range(0, len(flat), inner)]
        blocks = [b for b in blocks if len(b) == block_size]  # drop the ragged tail, as run_mlm.py does
        return {"input_ids": blocks, "attention_mask": [[1] * len(b) for b in blocks]}

    grouped = dataset.map(tokenize_and_group, batched=True, batch_size=1000, remove_columns=dataset.column_names,
                          num_proc=num_proc, desc="Grouping texts into MLM blocks")
    if len(grouped) == 0:
        raise ValueError(f"MLM text: field 'block_size': the text holds fewer than {block_size} tokens in all")
    return grouped


def mask_tokens_for_mlm(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: choose `mlm_probability` of the non-special positions; of those, 80% become [MASK], 10% a
    random token, 10% stay. Returns `(masked_input_ids, labels)` with labels -100 where nothing is predicted.

    input_ids: [batch, length]; special_tokens_mask: bool [batch, length], True where masking is forbidden
    (CLS, SEP, PAD). Uses `generator` (or torch's global RNG, which Trainer seeds and restores on resume).
    """
    labels = input_ids.clone()
    probability = torch.full(input_ids.shape, mlm_probability, device=input_ids.device)
    if special_tokens_mask is not None:
        probability.masked_fill_(special_tokens_mask.bool(), 0.0)
    chosen = torch.bernoulli(probability, generator=generator).bool()
    labels[~chosen] = -100
    masked = input_ids.clone()
    to_mask = torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob, device=input_ids.device),
                              generator=generator).bool() & chosen
    masked[to_mask] = mask_token_id
    # of the remaining chosen positions, random_replace_prob / (1 - mask_replace_prob) get a random token
    remaining = 1.0 - mask_replace_prob
    random_share = random_replace_prob / remaining if remaining > 0 else 0.0
    to_random = torch.bernoulli(torch.full(input_ids.shape, random_share, device=input_ids.device),
                                generator=generator).bool() & chosen & ~to_mask
    random_tokens = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    masked[to_random] = random_tokens[to_random]
    return masked, labels


def special_tokens_mask_for(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """bool [batch, length]: True at the tokenizer's special tokens (never masked)."""
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), device=input_ids.device)
    return torch.isin(input_ids, special)


@dataclass
class MLMCollator:
    """Stacks fixed-length blocks from `group_texts_for_mlm` and masks them afresh for every batch.

    Returns `input_ids` (masked), `attention_mask`, `labels` (-100 where not predicted), and `original_input_ids`
    when `return_original=True` (ELECTRA-style discriminators need the unmasked text).
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    return_original: bool = False

    def __post_init__(self):
        if self.tokenizer.mask_token_id is None:
            raise ValueError("MLM: field 'tokenizer': the tokenizer has no mask token")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"MLM: field 'mlm_probability': {self.mlm_probability} is not in (0, 1)")

    def __call__(self, features):
        padded = self.tokenizer.pad([{"input_ids": f["input_ids"]} for f in features], return_tensors="pt")
        input_ids = padded["input_ids"]
        masked, labels = mask_tokens_for_mlm(
            input_ids,
            mask_token_id=self.tokenizer.mask_token_id,
            vocab_size=len(self.tokenizer),
            special_tokens_mask=special_tokens_mask_for(input_ids, self.tokenizer),
            mlm_probability=self.mlm_probability,
        )
        batch = {"input_ids": masked, "attention_mask": padded["attention_mask"], "labels": labels}
        if self.return_original:
            batch["original_input_ids"] = input_ids
        return batch
