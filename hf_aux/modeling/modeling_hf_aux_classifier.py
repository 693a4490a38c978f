"""hf_aux's sentence classifier for plain transformers: the body, hf_aux's pooling, hf_aux's head.

hf_aux copies this file, unchanged, into a fine-tuned classifier's folder when the head reads the body in a way that
no transformers `*ForSequenceClassification` class does (mean, max, ... pooling; see hf_aux/modeling/export.py).
The folder's config.json names it in `auto_map`, so that

    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    pipeline("text-classification", model=folder, trust_remote_code=True)

build `HfAuxSequenceClassifier`, with hf_aux's trained head and the same logits as `hf_aux.MultiTaskModel`:

    body states [N, length, hidden]    what AutoModel builds from config.json (an encoder-decoder: the decoder
                                       states, the decoder reading the input shifted right, as BART's head does)
    -> pool [N, hidden]                `config.hf_aux_pooling` (below; hf_aux.modeling.pooling imports `pool` from here)
    -> dropout -> dense -> tanh -> dropout -> out_proj [N, num_labels]    (RoBERTa's head)

`config.problem_type` says the loss when labels are given: "regression" (MSE, one output) or
"single_label_classification" (cross entropy). Self-contained: torch and transformers only, so that the file works
without hf_aux installed. AutoModel on the same folder still gives the body alone.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel
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


class HfAuxClassificationHead(nn.Module):
    """dropout -> dense -> tanh -> dropout -> out_proj on the pooled vector (hf_aux's and fairseq/RoBERTa's head)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, num_labels]
        x = torch.tanh(self.dense(self.dropout(features)))
        return self.out_proj(self.dropout(x))


def _hidden_size(config) -> int:
    for name in ("hidden_size", "d_model"):
        if getattr(config, name, None) is not None:
            return getattr(config, name)
    raise ValueError(f"cannot tell the hidden size of a {config.model_type} body")


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
        self.body = (AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModel).from_config(config)
        dropout = getattr(config, "classifier_dropout", None)
        self.classifier = HfAuxClassificationHead(_hidden_size(config), config.num_labels,
                                                  0.1 if dropout is None else dropout)
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
        logits = self.classifier(pool(hidden, attention_mask, self.pooling, input_ids, self.config.eos_token_id))
        loss = None
        if labels is not None:
            if self.config.problem_type == "regression":
                loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).reshape(-1))
            else:
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
