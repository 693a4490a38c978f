"""AMOS loss math as pure tensor functions.

Meng et al., 2022, "Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators" (ICLR 2022,
arXiv:2204.03243). Equation numbers below are the paper's. Shapes: M = masked positions in the batch, S = the
static prediction slots that hold them (M <= S, the rest padding; the functions below take either), K = MLM heads,
V = vocabulary, E = token-embedding width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_aux.runtime.tensor_ops import row_dots


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """Softmaxes over the vocabulary in float32 (or float64 when given), never in half precision."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


# ---- Gradient plumbing ----
class _ScaleGradient(torch.autograd.Function):
    """Identity forward; the backward multiplies the incoming gradient by `scale` (negative: a reversal layer)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


def reverse_gradient(x: torch.Tensor, multiplier: float = 1.0) -> torch.Tensor:
    """Gradient-reversal layer (Ganin et al., 2016; AMOS §3.3 below eq. 3): the value of `x`, with the gradient
    multiplied by `-multiplier` on the way back. With multiplier 1 a minimiser of `L_GEN + lambda * L_DISC` moves
    whatever feeds `x` to *maximise* `L_DISC` (eq. 4)."""
    return _ScaleGradient.apply(x, -float(multiplier))


# ---- Eq. 2: the multi-layer MLM losses ----
def mlm_losses(head_logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Eq. 2, one term per MLM layer d: mean over masked positions of -log p_MLM(x_orig | h^(d)).

    head_logits: [K, S, V] at S prediction slots; targets: [S] original token ids, -100 at padding slots (the
    static-size gather of `hf_aux.tasks.data.prediction_positions`), which add nothing and are not counted.
    Returns [K]. The paper's L_GEN is the sum over d of these (each averaged over M, as ELECTRA averages its MLM
    loss). A micro-batch with no masked position (M = 0: short blocks, a small batch) has nothing to predict: its
    losses are 0 (a mean over no token would be NaN and stop the run).
    """
    num_heads, num_slots, vocab = head_logits.shape
    per_token = F.cross_entropy(_at_least_float32(head_logits.reshape(num_heads * num_slots, vocab)),
                                targets.repeat(num_heads), reduction="none")  # 0 at the -100 slots
    num_masked = (targets != -100).sum().clamp_min(1)
    return per_token.view(num_heads, num_slots).sum(dim=1) / num_masked


# ---- Eq. 3: adversarial mixture over the heads, and its Gumbel-Softmax sample ----
def mixture_weights(features: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Eq. 3, gamma_i^(d) = softmax_d(v^T f_i^(d)).

    features: [K, M, H] pre-projection states f of the K MLM layers at the masked positions; v: [H].
    Returns [M, K], rows summing to 1.
    """
    scores = torch.einsum("kmh,h->mk", features, v.to(features.dtype))
    return _at_least_float32(scores).softmax(dim=-1)


def mix_head_logits(gamma: torch.Tensor, head_logits: torch.Tensor) -> torch.Tensor:
    """Eq. 3, the logits of p_MLM(x | h_bar) with h_bar = sum_d gamma^(d) h^(d).

    The output projection is linear (x_t^T h + b) and the gammas sum to 1, so x_t^T h_bar + b equals
    sum_d gamma^(d) (x_t^T h^(d) + b): the K heads' logits, already computed for eq. 2, are mixed directly.
    gamma: [M, K]; head_logits: [K, M, V]. Returns [M, V] in float32 (or float64 when given).
    One multiply-add pass over [M, V] per head (an einsum would first copy [K, M, V] into [M, K, V]).
    """
    gamma = _at_least_float32(gamma)
    mixed = head_logits[0] * gamma[:, :1]  # float32 at least, since gamma is
    for k in range(1, head_logits.shape[0]):
        mixed.addcmul_(head_logits[k], gamma[:, k:k + 1])  # in place is autograd-safe: addcmul saves its factors
    return mixed


def gumbel_noise(shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise -log(-log U), U ~ Uniform[0, 1), from torch's global RNG, in `like`'s dtype/device.

    U = 0 gives -inf (that token is never drawn); U < 1 always, so the noise is never +inf. Built in place from one
    uniform draw, cheaper on CPU than `exponential_()` for the same distribution (docs/amos_measurements.md).
    """
    return torch.rand(shape, dtype=like.dtype, device=like.device).log_().neg_().log_().neg_()


def gumbel_softmax_sample(logits: torch.Tensor, temperature: float = 0.3,
                          soft: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gumbel-Softmax (Jang et al., 2017; AMOS §3.3): y_soft = softmax((log pi + g) / tau), g ~ Gumbel(0, 1), and
    the hard sample argmax(log pi + g), an exact draw from pi whatever tau is.

    log pi and the unnormalised logits differ by one constant per row, which changes neither the argmax nor the
    softmax, so no log-softmax pass is needed. logits: [M, V]; uses torch's global RNG (Trainer seeds it and
    restores it on resume). Returns (sampled ids [M], y_soft [M, V], or None when `soft` is False).
    """
    logits = _at_least_float32(logits)
    perturbed = logits + gumbel_noise(logits.shape, logits)
    sampled = perturbed.detach().argmax(dim=-1)
    return sampled, (perturbed / temperature).softmax(dim=-1) if soft else None


@torch.no_grad()
def perturbed_mixture(gamma: torch.Tensor, head_logits: torch.Tensor) -> torch.Tensor:
    """mix_head_logits(gamma, head_logits) + Gumbel noise in one fresh [M, V] buffer, without autograd: its argmax
    is the hard sample of `gumbel_softmax_sample(mix_head_logits(gamma, head_logits))` (the same noise draw)."""
    perturbed = mix_head_logits(gamma, head_logits)
    return perturbed.add_(gumbel_noise(perturbed.shape, perturbed))


class _MixtureGumbelStraightThrough(torch.autograd.Function):
    """Eq. 3's mixture, a Gumbel-Softmax sample of it and the straight-through embedding, fused (see
    `mixture_straight_through`). Forward: the sampled ids and an [M, E] zero "carrier"; backward: the gradient
    that `(one_hot - y_soft.detach() + y_soft) @ weight` gives gamma (and the head logits, for "+ adv. MLM"),
    computed with one [M, V] buffer worked on in place instead of the ~8 [M, V] tensors of the composed ops."""

    @staticmethod
    def forward(ctx, gamma: torch.Tensor, head_logits: torch.Tensor, weight: torch.Tensor, temperature: float):
        with torch.no_grad():
            perturbed = perturbed_mixture(gamma, head_logits)  # [M, V]
            sampled = perturbed.argmax(dim=-1)
            soft = perturbed.div_(temperature).softmax(dim=-1)  # y_soft [M, V]
        ctx.save_for_backward(gamma, head_logits, weight, soft)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(sampled)
        return sampled, soft.new_zeros(soft.shape[0], weight.shape[1])

    @staticmethod
    def backward(ctx, _grad_sampled, grad_carrier: torch.Tensor):
        gamma, head_logits, weight, soft = ctx.saved_tensors
        # d/dy_soft of carrier = y @ W: grad_y = grad @ W^T  [M, V]
        grad = torch.mm(grad_carrier.to(soft.dtype), weight.to(soft.dtype).t())
        # softmax((z + g) / tau) backward, in place: grad_z = y * (grad_y - <grad_y, y>) / tau
        dot = row_dots(grad, soft)[:, None]  # [M, 1]
        grad.sub_(dot).mul_(soft).div_(ctx.temperature)
        grad_gamma = grad_logits = None
        if ctx.needs_input_grad[0]:  # z = sum_k gamma_k logits_k: d/dgamma_k = <grad_z, logits_k>, per row
            grad_gamma = torch.stack([row_dots(head_logits[k].to(grad.dtype), grad)
                                      for k in range(head_logits.shape[0])], dim=1).to(gamma.dtype)
        if ctx.needs_input_grad[1]:
            grad_logits = (gamma.t().unsqueeze(2).to(grad.dtype) * grad).to(head_logits.dtype)
        return grad_gamma, grad_logits, None, None


def mixture_straight_through(gamma: torch.Tensor, head_logits: torch.Tensor, weight: torch.Tensor,
                             temperature: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample the replaced tokens from the mixture of eq. 3 and carry the straight-through gradient (§3.3).

    gamma: [M, K] mixture weights; head_logits: [K, M, V]; weight: [V, E] the token-embedding matrix.
    Returns (sampled ids [M], carrier [M, E] of zeros). The ids are `gumbel_softmax_sample(mix_head_logits(gamma,
    head_logits))`'s (same noise draw); add the carrier to the looked-up embeddings W[ids]: the sum's value is the
    exact embedding rows and its gradient reaches gamma (and head_logits) as if the discriminator had consumed
    `(one_hot - y_soft.detach() + y_soft) @ W`. The embedding matrix gets no gradient through the carrier (the
    ordinary lookup of the sampled ids already gives it the one-hot's).
    """
    return _MixtureGumbelStraightThrough.apply(gamma, head_logits, weight, float(temperature))


def layer_switch_index(progress: float, num_heads: int) -> int:
    """Table 2's "w. layer switch": the shallowest head for the first 1/K of training, the next one after that...
    (1/3 and 2/3 for three heads). progress in [0, 1]."""
    return min(num_heads - 1, max(0, int(progress * num_heads)))


# ---- Eq. 1: replaced-token detection ----
def rtd_labels(replaced_ids: torch.Tensor, original_ids: torch.Tensor) -> torch.Tensor:
    """1.0 where the discriminator's input differs from the original, 0.0 elsewhere: a sampled token equal to the
    original counts as original (eq. 1 splits on x_rep = x_orig). Same convention as ElectraForPreTraining
    (logit > 0 means replaced)."""
    return (replaced_ids != original_ids).float()


def rtd_loss(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Eq. 1, binary cross-entropy of replaced-token detection averaged over non-pad positions.

    logits: [B, T] (> 0: replaced); labels: [B, T] floats in {0, 1}; attention_mask: [B, T] (1 = real token).
    """
    logits = _at_least_float32(logits)
    keep = attention_mask.to(logits.dtype)  # a weighted mean, not logits[mask]: no shape depends on the data
    per_token = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="none")
    return (per_token * keep).sum() / keep.sum()


# RTD metrics: a threshold-free separation measure (AUC of the RTD logit, replaced vs original), accumulated as
# fixed-size histograms on the device so that a training step needs no host synchronisation.
# 2^15 bins over [-16, 16] (width 1/1024, logit 0 an edge): fine enough for the narrow logit spread of a discriminator
# that still predicts its prior (all logits near log(0.15 / 0.85)); 256 kB per histogram pair
RTD_HISTOGRAM_BINS = 32768
RTD_HISTOGRAM_RANGE = 16.0


def rtd_logit_histogram(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor,
                        num_bins: int = RTD_HISTOGRAM_BINS, logit_range: float = RTD_HISTOGRAM_RANGE) -> torch.Tensor:
    """[2, num_bins] weighted counts of the RTD logits of original (row 0) and replaced (row 1) tokens, in equal
    bins over [-logit_range, logit_range] (outside values fall into the end bins); `hf_aux.tasks.metrics.binned_auc`
    turns it (summed over steps and processes) into the AUC. With an even `num_bins`, logit 0 is an edge: bins
    num_bins // 2 and up hold the tokens called replaced at p = 0.5.

    logits, labels (1.0 = replaced), weights (attention mask: 1 = real token): [B, T]. bucketize + scatter_add
    into a tensor of fixed size: no boolean indexing, so no device-to-host copy.
    """
    edges = torch.linspace(-logit_range, logit_range, num_bins + 1, device=logits.device)[1:-1]
    bins = torch.bucketize(logits.detach().float().clamp(-logit_range, logit_range), edges)
    index = labels.long() * num_bins + bins
    counts = torch.zeros(2 * num_bins, device=logits.device)
    counts.scatter_add_(0, index.reshape(-1), weights.reshape(-1).float())
    return counts.view(2, num_bins)


def amos_loss(head_mlm_losses: torch.Tensor, discriminator_loss: torch.Tensor, rtd_weight: float) -> torch.Tensor:
    """Eq. 4 as one scalar: sum_d L_GEN^(d) + lambda * L_DISC.

    The generator minimises its MLM losses; the discriminator minimises L_DISC; the mixture (v, and the generator
    through gamma) sees -lambda * dL_DISC because of the reversal layer in front of gamma, so minimising this one
    scalar solves both arg-mins of eq. 4.
    """
    return head_mlm_losses.sum() + rtd_weight * discriminator_loss
