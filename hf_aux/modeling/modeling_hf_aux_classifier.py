"""hf_aux's sentence classifier for plain transformers: the body, hf_aux's pooling, hf_aux's head.

hf_aux copies this file, unchanged, into a fine-tuned classifier's folder when no transformers
`*ForSequenceClassification` class computes its head (hf_aux/modeling/export.py); config.json's `auto_map` names it:

    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    pipeline("text-classification", model=folder, trust_remote_code=True)

build `HfAuxSequenceClassifier`, with hf_aux's trained head and the same logits as `hf_aux.MultiTaskModel`:

    body states [N, length, hidden]    what AutoModel builds from config.json (an encoder-decoder: the decoder
                                       states, the decoder reading the input shifted right, as BART's head does)
    -> pool [N, hidden]                `config.hf_aux_pooling` (below; hf_aux.modeling.pooling imports `pool` from here)
    -> dropout -> dense -> activation [-> LayerNorm] -> dropout -> out_proj [N, num_labels]
                                       (`config.hf_aux_head`; by default tanh, no norm: RoBERTa's head)

`config.problem_type` says the loss: "regression" (MSE, one output) or "single_label_classification" (cross
entropy). Self-contained (torch and transformers only); AutoModel on the same folder still gives the body alone.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import SequenceClassifierOutput

POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len", "weightedmean", "lasttoken", "eos")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None, mode: str, input_ids: torch.Tensor | None = None,
         eos_token_id: int | None = None) -> torch.Tensor:
    """[N, length, hidden] -> [N, hidden] by `mode`; `attention_mask` [N, length] marks the real tokens (None: all
    are real); `eos` needs `input_ids` and `eos_token_id`.

    cls: the first token's state; eos: the state at each input's last EOS token; the others are
    sentence-transformers' Pooling modes over the real tokens: mean, max, mean_sqrt_len (sum / sqrt(length)),
    weightedmean (position i, from 1, weighs i), lasttoken (the last real token, padding on either side)."""
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "eos":
        eos = input_ids.eq(eos_token_id)
        if not bool(eos.any(dim=1).all()):
            raise ValueError("an encoder-decoder body needs an EOS token in every input for sentence-level heads")
        return hidden[rows, eos.shape[1] - 1 - eos.flip(dims=[1]).int().argmax(dim=1)]
    mask = (torch.ones(hidden.shape[:2], device=hidden.device) if attention_mask is None
            else attention_mask.to(hidden.dtype))
    if mode == "lasttoken":  # the last real token, with padding on either side
        return hidden[rows, mask.shape[1] - 1 - mask.flip(dims=[1]).argmax(dim=1)]
    if mode == "max":
        return hidden.masked_fill(mask.unsqueeze(-1) == 0, torch.finfo(hidden.dtype).min).amax(dim=1)
    weights = mask
    if mode == "weightedmean":  # position i (from 1) weighs i
        weights = mask * torch.arange(1, mask.shape[1] + 1, device=mask.device, dtype=mask.dtype)
    total = torch.einsum("nl,nlh->nh", weights, hidden)
    if mode == "mean_sqrt_len":
        return total / mask.sum(dim=1, keepdim=True).clamp(min=1e-9).sqrt()
    return total / weights.sum(dim=1, keepdim=True).clamp(min=1e-9)  # mean, weightedmean


# the head's function, `config.hf_aux_head` (hf_aux.modeling.heads.family_head gives each family's own): the
# activation after `dense` (an ACT2FN name), whether `dense` has a bias, and a LayerNorm after the activation
# (`norm_eps` None: none; ModernBERT's head has one). Heads saved before the field existed are this one.
TANH_HEAD = {"activation": "tanh", "dense_bias": True, "norm_eps": None, "norm_bias": True}


class HfAuxClassificationHead(nn.Module):
    """dropout -> dense -> activation [-> LayerNorm] -> dropout -> out_proj on the pooled vector; with the default
    `head` (tanh, no norm) hf_aux's and fairseq/RoBERTa's head."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float, head: dict | None = None):
        super().__init__()
        head = {**TANH_HEAD, **(head or {})}
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, hidden_size, bias=head["dense_bias"])
        self.activation = ACT2FN[head["activation"]]
        if head["norm_eps"] is not None:
            self.norm = nn.LayerNorm(hidden_size, eps=head["norm_eps"], bias=head["norm_bias"])
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, num_labels]
        x = self.activation(self.dense(self.dropout(features)))
        if hasattr(self, "norm"):
            x = self.norm(x)
        return self.out_proj(self.dropout(x))


def _hidden_size(config) -> int:
    for name in ("hidden_size", "d_model"):
        if getattr(config, name, None) is not None:
            return getattr(config, name)
    raise ValueError(f"cannot tell the hidden size of a {config.model_type} body")


def _body_attention(auto_class, config) -> str | None:
    """The attention implementation the body is built with: the one this wrapper was given (transformers resolves
    it for the wrapper, which accepts SDPA), or eager where the body's own class has no SDPA (DeBERTa, MPNet),
    as transformers itself falls back for a model loaded without a request."""
    wanted = getattr(config, "_attn_implementation", None)
    mapping = auto_class._model_mapping
    if wanted != "sdpa" or type(config) not in mapping:
        return wanted
    body_class = mapping[type(config)]
    if isinstance(body_class, (list, tuple)):  # Funnel: (FunnelModel, FunnelBaseModel), AutoModel takes the first
        body_class = body_class[0]
    return wanted if body_class._supports_sdpa else "eager"


class HfAuxSequenceClassifier(PreTrainedModel):
    """The body of config.json's own model type, pooled by `config.hf_aux_pooling`, under hf_aux's head
    (module docstring)."""

    config_class = PretrainedConfig  # the body's own config class (BertConfig, ...): config.json keeps its model_type
    base_model_prefix = "body"  # the body's weights sit at the root of model.safetensors, as AutoModel reads them
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def __init__(self, config):
        super().__init__(config)
        self.pooling = getattr(config, "hf_aux_pooling", None)
        if self.pooling not in POOLING_MODES:
            raise ValueError(f"HfAuxSequenceClassifier: config field 'hf_aux_pooling': {self.pooling!r} is not one "
                             f"of {POOLING_MODES}")
        # an encoder-decoder is its *ForConditionalGeneration model, as hf_aux saved it
        auto_class = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModel
        self.body = auto_class.from_config(config, attn_implementation=_body_attention(auto_class, config))
        dropout = getattr(config, "classifier_dropout", None)
        # `hf_aux_head`, not `classifier`: names no transformers class reads, so that the family's own class, loaded
        # without trust_remote_code, reports the head missing instead of reading it with its own pooling
        self.hf_aux_head = HfAuxClassificationHead(_hidden_size(config), config.num_labels,
                                                   0.1 if dropout is None else dropout,
                                                   getattr(config, "hf_aux_head", None))
        self._body_takes_token_types = "token_type_ids" in inspect.signature(self.body.forward).parameters
        self.post_init()

    def get_input_embeddings(self):
        return self.body.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.body.set_input_embeddings(value)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> SequenceClassifierOutput:
        hidden = self._body_states(input_ids, attention_mask, token_type_ids, inputs_embeds)  # [N, length, hidden]
        eos = getattr(self.config, "eos_token_id", None)  # Funnel's config has no such field
        logits = self.hf_aux_head(pool(hidden, attention_mask, self.pooling, input_ids, eos))
        loss = None
        if labels is not None and self.config.problem_type == "regression":
            loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).reshape(-1))
        elif labels is not None:
            loss = F.cross_entropy(logits, labels.reshape(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def _body_states(self, input_ids, attention_mask, token_type_ids, inputs_embeds) -> torch.Tensor:
        inputs = {"attention_mask": attention_mask}
        if inputs_embeds is not None:
            inputs["inputs_embeds"] = inputs_embeds
        else:
            inputs["input_ids"] = input_ids
        if token_type_ids is not None and self._body_takes_token_types:
            inputs["token_type_ids"] = token_type_ids
        if not self.config.is_encoder_decoder:
            return self.body(**inputs, return_dict=True).last_hidden_state
        if input_ids is None:
            raise ValueError("an encoder-decoder body needs input_ids to build the decoder inputs")
        # the decoder reads the input shifted right, with the input's padding mask
        config = self.config
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.eos_token_id
        decoder_input_ids = input_ids.new_full(input_ids.shape, config.pad_token_id)
        decoder_input_ids[:, 1:] = input_ids[:, :-1]
        decoder_input_ids[:, 0] = start
        encoded = self.body.get_encoder()(**inputs, return_dict=True).last_hidden_state
        return self.body.get_decoder()(input_ids=decoder_input_ids, attention_mask=attention_mask,
                                       encoder_hidden_states=encoded, encoder_attention_mask=attention_mask,
                                       return_dict=True).last_hidden_state
