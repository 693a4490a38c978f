"""The task heads of `MultiTaskModel` (hf_aux.modeling.multitask), on the body's sentence or token states."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig

from .modeling_hf_aux_classifier import TANH_HEAD, HfAuxClassificationHead


# how each family's own *ForSequenceClassification reads the body: the first token (ModernBERT's also by mean)
FAMILY_POOLINGS = {"modernbert": ("cls", "mean")}
# the activation of each family's own head after `dense`: a fixed one, or the config field that names it
_FAMILY_ACTIVATIONS = {"electra": "gelu", "distilbert": "relu"}
_ACTIVATION_FIELDS = {"convbert": "hidden_act", "deberta": "pooler_hidden_act", "deberta-v2": "pooler_hidden_act"}


def family_reads(body_config: PretrainedConfig, pooling: str) -> bool:
    """Whether the family's own *ForSequenceClassification pools the body as `pooling` does."""
    return pooling in FAMILY_POOLINGS.get(body_config.model_type, ("cls",))


def family_head(body_config: PretrainedConfig, pooling: str = "cls") -> dict:
    """The sentence head's function: where the family's own `*ForSequenceClassification` (transformers 5.24) pools
    as `pooling` does, that class's head, so that plain transformers serves the fine-tuned head
    (hf_aux.modeling.export): ELECTRA's is GELU, ConvBERT's the body's `hidden_act`, DeBERTa's its
    `pooler_hidden_act`, DistilBERT's ReLU, ModernBERT's `classifier_activation` then a LayerNorm; BERT, ALBERT,
    RoBERTa, XLM-R, MPNet and every other family take fairseq/RoBERTa's tanh head (MUPPET's). Any other pooling
    (mean, max, ...) goes through the shipped class whatever the head: the tanh head, for every family, as before
    heads followed the family."""
    model_type = body_config.model_type
    if not family_reads(body_config, pooling):
        return dict(TANH_HEAD)
    if model_type == "modernbert":
        return {"activation": body_config.classifier_activation, "dense_bias": body_config.classifier_bias,
                "norm_eps": body_config.norm_eps, "norm_bias": body_config.norm_bias}
    if model_type in _ACTIVATION_FIELDS:
        return {**TANH_HEAD, "activation": getattr(body_config, _ACTIVATION_FIELDS[model_type])}
    return {**TANH_HEAD, "activation": _FAMILY_ACTIVATIONS.get(model_type, TANH_HEAD["activation"])}


def check_head(head: dict, owner: str) -> None:
    """A `classifier_head` has exactly TANH_HEAD's fields and an activation transformers knows."""
    from transformers.activations import ACT2CLS

    if not isinstance(head, dict) or set(head) != set(TANH_HEAD) or head["activation"] not in ACT2CLS:
        raise ValueError(f"{owner}: field 'classifier_head': {head!r} must have the fields {sorted(TANH_HEAD)} and "
                         f"an activation of transformers' ACT2FN ({', '.join(sorted(ACT2CLS))})")


class ClassificationHead(HfAuxClassificationHead):
    """dropout -> dense -> activation [-> LayerNorm] -> dropout -> projection, on the sentence representation;
    `head` (`family_head`; default tanh, no norm: the fairseq/RoBERTa head MUPPET uses). With `spectral_norm`,
    both linear maps are spectrally normalised (R4F)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float, spectral_norm: bool = False,
                 head: dict | None = None):
        super().__init__(hidden_size, num_outputs, dropout, head)
        if spectral_norm:
            self.dense = nn.utils.parametrizations.spectral_norm(self.dense)
            self.out_proj = nn.utils.parametrizations.spectral_norm(self.out_proj)


class TokenClassificationHead(nn.Module):
    """dropout -> projection on every token's state, as transformers' *ForTokenClassification (so a one-task model
    exports it as their `classifier`). With `spectral_norm`, the projection is spectrally normalised (R4F)."""

    def __init__(self, hidden_size: int, num_tags: int, dropout: float, spectral_norm: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_tags)
        if spectral_norm:
            self.classifier = nn.utils.parametrizations.spectral_norm(self.classifier)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, length, hidden] -> [N, length, num_tags]
        return self.classifier(self.dropout(hidden))
