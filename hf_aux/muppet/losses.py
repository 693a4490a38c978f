"""MUPPET's losses as pure tensor functions (Aghajanyan et al., 2021, "Muppet: Massive Multi-task Representations
with Pre-Finetuning", arXiv 2101.11038) and the R3F regulariser they use (Aghajanyan et al., 2020, "Better
Fine-Tuning by Reducing Representational Collapse", arXiv 2008.03156).

Every task loss returns one value PER DATA POINT ([batch]) with n(i), the number of predictions that point's loss
ranges over, so that eq. 1 scales each point on its own: L_i^scaled = L_i / log n(i) (MUPPET eq. 1).

Table 2's losses and n(i) per kind (with uniform predictions every scaled loss is exactly 1):
    classification   cross entropy over the C classes                       n = C
    multiple choice  cross entropy over the choices (sentence ranking)      n = that example's number of choices
    extractive QA    (CE(start) + CE(end)) / 2, softmaxes over positions    n = that window's real (non-padding)
                                                                                tokens, [CLS] included
    seq2seq          label-smoothed CE averaged over the target tokens      n = vocabulary size
    token            CE over the tags averaged over the tagged tokens       n = number of tags
    classification   (first sub-token of each word; not a paper task)
    regression       mean squared error                                     not scaled (n is undefined)
For extractive QA, "the number of predictions L operates over" read as every non-padding position ([CLS] is where
an unanswerable window points): the reading under which uniform predictions give 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..runtime.tensor_ops import on_accelerator


# ---- Per-data-point task losses (Table 2), each returning (loss [B], n [B]) ----------------------------------------
def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross entropy. logits [B, C], labels [B] -> (loss [B], n [B] = C)."""
    loss = F.cross_entropy(logits.float(), labels, reduction="none")
    return loss, torch.full_like(loss, logits.shape[-1])


def multiple_choice_loss(logits: torch.Tensor, labels: torch.Tensor,
                         choice_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentence ranking loss: cross entropy over the choices. logits [B, C] (masked choices already very negative,
    as MultiTaskModel returns them), choice_mask [B, C] bool -> (loss [B], n [B] = valid choices per example)."""
    logits = logits.float()
    if choice_mask is not None:
        logits = logits.masked_fill(~choice_mask.bool(), float("-inf"))  # exactly zero probability
        n = choice_mask.sum(dim=-1).to(logits.dtype)
    else:
        n = logits.new_full(logits.shape[:1], logits.shape[-1])
    return F.cross_entropy(logits, labels, reduction="none"), n


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor,
              end_positions: torch.Tensor, attention_mask: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Span prediction: mean of the start and end cross entropies over the input positions. start/end_logits
    [B, L], positions [B], attention_mask [B, L] -> (loss [B], n [B] = real tokens per example)."""
    start_logits, end_logits = start_logits.float(), end_logits.float()
    if attention_mask is not None:
        padding = attention_mask == 0
        start_logits, end_logits = (x.masked_fill(padding, float("-inf")) for x in (start_logits, end_logits))
        n = attention_mask.sum(dim=-1).to(start_logits.dtype)
    else:
        n = start_logits.new_full(start_logits.shape[:1], start_logits.shape[-1])
    loss = (F.cross_entropy(start_logits, start_positions, reduction="none")
            + F.cross_entropy(end_logits, end_positions, reduction="none")) / 2
    return loss, n


def seq2seq_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0,
                 ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross entropy (Szegedy et al., 2015) averaged over each example's target tokens (Table 2).
    logits [B, T, V], labels [B, T] (ignore_index where padded) -> (loss [B], n [B] = V)."""
    per_token = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=ignore_index,
                                label_smoothing=label_smoothing, reduction="none").view(labels.shape)  # [B, T]
    tokens = (labels != ignore_index).sum(dim=-1)
    if not on_accelerator(tokens) and bool((tokens == 0).any()):  # on an accelerator: 0 / 0, named as non-finite
        raise ValueError("seq2seq_loss: field 'labels': an example has no target token (all ignore_index)")
    loss = per_token.sum(dim=-1) / tokens
    return loss, torch.full_like(loss, logits.shape[-1])


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor,
                              ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross entropy over the T tags, averaged over each example's tagged tokens (labels != ignore_index: the
    first sub-token of every word). logits [B, L, T], labels [B, L] -> (loss [B], n [B] = T)."""
    per_token = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=ignore_index,
                                reduction="none").view(labels.shape)  # [B, L], 0 where ignored
    tagged = (labels != ignore_index).sum(dim=-1)
    if not on_accelerator(tagged) and bool((tagged == 0).any()):  # on an accelerator: 0 / 0, named as non-finite
        raise ValueError("token_classification_loss: field 'labels': an example has no tagged token (all "
                         "ignore_index)")
    loss = per_token.sum(dim=-1) / tagged
    return loss, torch.full_like(loss, logits.shape[-1])


def regression_loss(predictions: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared error per example. predictions, labels [B] -> (loss [B], n [B] = e, i.e. log n = 1: unscaled)."""
    loss = (predictions.float() - labels.float()) ** 2
    return loss, torch.full_like(loss, math.e)


# ---- Eq. 1 ---------------------------------------------------------------------------------------------------------
def scale_losses(losses: torch.Tensor, num_predictions: torch.Tensor) -> torch.Tensor:
    """MUPPET eq. 1: L_i / log n(i), per data point. losses, num_predictions [B] -> [B].

    n(i) >= 2 is required (log 1 = 0): a data point with one prediction (e.g. a multiple-choice example with a
    single valid choice) has nothing to learn and would divide by zero. Checked here for CPU tensors; on an
    accelerator reading the answer would stop the host once per sub-batch, so there the check is MultiTaskCollator's
    (it refuses a multiple-choice example with fewer than 2 choices as it pads; classification's n is its label
    count), and a batch from elsewhere that breaks it gives an infinite loss, which the non-finite check names."""
    if not on_accelerator(num_predictions) and bool((num_predictions < 2).any()):
        raise ValueError("scale_losses: field 'num_predictions': every data point needs n(i) >= 2 predictions "
                         f"(got min {float(num_predictions.min())}); log 1 = 0 cannot scale a loss")
    return losses / torch.log(num_predictions.to(losses.dtype))


# ---- R3F (Aghajanyan et al., 2020, eq. 3-4): L + lambda * KL_S(f(x) || f(x + z)) -----------------------------------
def sample_embedding_noise(embeddings: torch.Tensor, eps: float, distribution: str) -> torch.Tensor:
    """z for R3F: "uniform" U(-eps, eps) (classification-style heads) or "normal" N(0, eps^2) (generation), the
    shape of `embeddings`, from torch's global RNG (Trainer seeds it and restores it on resume)."""
    if distribution == "uniform":
        return (torch.rand_like(embeddings) * 2 - 1) * eps
    if distribution == "normal":
        return torch.randn_like(embeddings) * eps
    raise ValueError(f"sample_embedding_noise: field 'distribution': {distribution!r} is not 'uniform' or 'normal'")


def symmetric_kl(logits_p: torch.Tensor, logits_q: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """KL(p || q) + KL(q || p) of the softmaxes over the last axis, per row. logits [..., K] -> [...].
    mask [..., K] bool marks the valid outcomes (both distributions put zero mass elsewhere)."""
    logits_p, logits_q = logits_p.float(), logits_q.float()
    if mask is not None:
        logits_p, logits_q = (x.masked_fill(~mask, float("-inf")) for x in (logits_p, logits_q))
    log_p, log_q = F.log_softmax(logits_p, dim=-1), F.log_softmax(logits_q, dim=-1)
    if mask is not None:  # zero-mass outcomes: log 0 = -inf would give 0 * inf = nan (and nan gradients)
        log_p, log_q = log_p.masked_fill(~mask, 0.0), log_q.masked_fill(~mask, 0.0)
    p = log_p.exp() if mask is None else log_p.exp().masked_fill(~mask, 0.0)
    q = log_q.exp() if mask is None else log_q.exp().masked_fill(~mask, 0.0)
    # KL(p||q) + KL(q||p) = sum_k (p_k - q_k)(log p_k - log q_k)
    terms = (p - q) * (log_p - log_q)
    return terms.sum(dim=-1)


def r3f_divergence(kind: str, clean: dict, noisy: dict, *, choice_mask: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> torch.Tensor:
    """Per-data-point symmetric divergence [B] between predictions on clean and perturbed embeddings.

    `clean` / `noisy`: {"logits": ...} or {"start_logits", "end_logits"} as MultiTaskModel returns them.
    classification: symmetric KL over the classes; multiple choice: over the valid choices; extractive QA: mean of
    the start and end KLs over the real tokens; seq2seq: per-token KL over the vocabulary averaged over the
    target tokens (labels != -100); token classification: per-token KL over the tags averaged over the tagged
    tokens (labels != -100); regression: (f(x) - f(x+z))^2, the symmetric KL of two unit-variance
    Gaussians (the R3F paper defines no regression variant)."""
    if kind == "classification":
        return symmetric_kl(clean["logits"], noisy["logits"])
    if kind == "multiple_choice":
        return symmetric_kl(clean["logits"], noisy["logits"], None if choice_mask is None else choice_mask.bool())
    if kind == "extractive_qa":
        mask = None if attention_mask is None else attention_mask.bool()
        return (symmetric_kl(clean["start_logits"], noisy["start_logits"], mask)
                + symmetric_kl(clean["end_logits"], noisy["end_logits"], mask)) / 2
    if kind in ("seq2seq", "token_classification"):
        if labels is None:
            raise ValueError(f"r3f_divergence: field 'labels': {kind} needs labels to know the predicted tokens")
        per_token = symmetric_kl(clean["logits"], noisy["logits"])  # [B, T]
        valid = labels != -100
        return (per_token * valid).sum(dim=-1) / valid.sum(dim=-1).clamp(min=1)
    if kind == "regression":
        return (clean["logits"].float() - noisy["logits"].float()) ** 2
    raise ValueError(f"r3f_divergence: field 'kind': unknown kind {kind!r}")
