"""MultiTaskModel: one shared encoder, MUPPET's task heads (Aghajanyan et al., 2021, §3.1 and §3.5).

- one classification head per classification or regression task ("Every Sentence Prediction dataset gets a
  separate classification head"),
- ONE multiple-choice ranking head shared by all multiple-choice tasks and ONE span head shared by all
  extractive-QA tasks ("for Commonsense and MRC we utilize a separate unified head for each task [type]":
  per-dataset heads over-fitted),
- one token classification head per token classification task (dropout -> linear map over EVERY token's state,
  as transformers' *ForTokenClassification; no pooling), per dataset like the classification heads,
- seq2seq through the body's own LM head: an encoder-decoder body is its `*ForConditionalGeneration` model (what
  `AutoModelForSeq2SeqLM` builds), so the logits are exactly that class's, with its projection, bias and scaling
  (T5 rescales by d_model ** -0.5 before a tied projection, BART adds `final_logits_bias`). Sentence-level heads
  on an encoder-decoder read the decoder states (without the LM head).
- with `spectral_norm_heads` (R4F, §3.2), every head's linear maps are spectrally normalised (not the seq2seq LM
  head: the body's pre-trained projection).

MUPPET-style checkpoints. `save_pretrained(dir)` writes
  config.json + model.safetensors       the body alone, exactly as its own class saves it: plain transformers
                                        loads it with AutoModel / AutoModelForSequenceClassification (and an
                                        encoder-decoder body with AutoModelForSeq2SeqLM, same logits);
  multitask_config.json                 task metadata and head settings (no encoder part: config.json is that);
  multitask_heads.safetensors           every head's weights.
A model of ONE task (what `hf-aux finetune` trains, what `hf-aux export` writes) also writes its head into
model.safetensors and its labels into config.json, so that plain transformers loads it whole: a tagger with
`AutoModelForTokenClassification`, a classifier with `AutoModelForSequenceClassification` (hf_aux.modeling.export).
`MultiTaskModel.from_pretrained(dir or hub id)` restores all of it; on a plain encoder checkpoint it starts fresh
heads for the tasks it is given and says which.

LoRA (`add_body_lora(LoraConfig)`, what `MuppetTrainer(peft_config=...)` calls): the body becomes a
`peft.PeftModel`, base weights frozen, heads fully trainable. `save_pretrained` then writes the adapter as peft
does (adapter_config.json + adapter_model.safetensors) instead of config.json + model.safetensors, and the heads
as above; `from_pretrained(dir, base_model=...)` (default: the base recorded in adapter_config.json) restores both.
`save_merged(dir)` writes the plain MUPPET-style checkpoint of the adapted model (adapters folded into the base
weights), which `AutoModel` loads without hf_aux or peft.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import (AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoModelForTokenClassification,
                          PretrainedConfig, PreTrainedModel)
from transformers.models.auto.modeling_auto import (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING,
                                                    MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING)
from transformers.utils import ModelOutput, cached_file

from ..runtime.adapters import (ADAPTER_CONFIG_NAME, adapter_base_model, base_of, is_lora_body, load_lora_body,
                                load_lora_weights, lora_body, merged_body, save_lora_body)
from .sentence_transformers_files import copy_sentence_transformers_files
from .export import EXPORTED_HEAD_KEYS, PlainExport, label_fields, sequence_classifier_export, write_plain_config
from .heads import ClassificationHead, TokenClassificationHead, check_head, family_head
from .modeling_hf_aux_classifier import TANH_HEAD, _hidden_size
from .pooling import check_pooling, pool, resolve_pooling
from ..tasks.spec import LABELLED_KINDS, TASK_KINDS, TaskSpec, task_error

logger = logging.getLogger(__name__)

MULTITASK_CONFIG_NAME = "multitask_config.json"
HEADS_WEIGHTS_NAME = "multitask_heads.safetensors"
BODY_PREFIX = "body."
# a single token classification task's head, as AutoModelForTokenClassification names it, in model.safetensors
EXPORTED_TOKEN_HEAD = {"classifier.weight": "weight", "classifier.bias": "bias"}
# the head settings of MultiTaskModelConfig, beside its encoder and tasks
HEAD_SETTINGS = ("classifier_dropout", "spectral_norm_heads", "pooling", "classifier_head")


class MultiTaskModelConfig(PretrainedConfig):
    """`encoder`: the body's config (any model `AutoModel` builds). `tasks`: a list of
    {name, kind, num_labels, label_names} (see `TaskSpec.head_metadata`). Head settings: `classifier_dropout`,
    `spectral_norm_heads` (R4F: spectral normalisation of the heads' linear maps), `pooling` (how sentence-level
    heads read the body, `hf_aux.modeling.pooling`; `auto` is resolved when the model is built and the resolved
    mode is saved), `classifier_head` (the sentence heads' function, `hf_aux.modeling.heads.family_head`; None: the
    body family's own, resolved and saved like `pooling`). Label smoothing is a training setting,
    `MuppetConfig.label_smoothing_factor`, not part of the model."""

    model_type = "hf_aux_multitask"
    # Trainer's evaluation gathers every output tensor; the hidden states are large and no metric needs them
    keys_to_ignore_at_inference = ["last_hidden_state"]

    encoder: PretrainedConfig | dict | None = None
    tasks: list | None = None
    classifier_dropout: float = 0.1
    spectral_norm_heads: bool = False
    pooling: str = "auto"
    classifier_head: dict | None = None

    def __post_init__(self, **kwargs):
        if "label_smoothing" in kwargs:
            raise ValueError("MultiTaskModelConfig: field 'label_smoothing': not a model setting; the seq2seq loss's "
                             "smoothing is MuppetConfig.label_smoothing_factor (--label_smoothing_factor)")
        if isinstance(self.encoder, dict):
            encoder = dict(self.encoder)
            self.encoder = AutoConfig.for_model(encoder.pop("model_type"), **encoder)
        self.tasks = [normalize_task_metadata(t) for t in (self.tasks or [])]
        names = [t["name"] for t in self.tasks]
        for name in names:
            if names.count(name) > 1:
                raise task_error(name, "name", "appears twice in the model's tasks")
        if self.encoder is not None:
            for task in self.tasks:
                _check_kind_fits_body(task, self.encoder)
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"MultiTaskModelConfig: field 'classifier_dropout': {self.classifier_dropout} not in [0, 1)")
        check_pooling(self.pooling, "MultiTaskModelConfig")
        if self.classifier_head is not None:
            check_head(self.classifier_head, "MultiTaskModelConfig")
        super().__post_init__(**kwargs)

    def to_dict(self):
        output = super().to_dict()
        if isinstance(self.encoder, PretrainedConfig):
            output["encoder"] = self.encoder.to_dict()
        return output

    def task(self, name: str) -> dict:
        for task in self.tasks:
            if task["name"] == name:
                return task
        raise ValueError(f"task '{name}': field 'name': the model has no such task (it has {self.task_names})")

    @property
    def task_names(self) -> list[str]:
        return [t["name"] for t in self.tasks]


def _check_kind_fits_body(task: dict, encoder: PretrainedConfig) -> None:
    """seq2seq needs an encoder-decoder body; token classification an encoder-only one (its head reads the token
    states of the input, which an encoder-decoder's decoder sees shifted)."""
    if task["kind"] == "seq2seq" and not encoder.is_encoder_decoder:
        raise task_error(task["name"], "kind", f"a seq2seq task needs an encoder-decoder body (e.g. BART); "
                         f"{encoder.model_type} is encoder-only")
    if task["kind"] == "token_classification" and encoder.is_encoder_decoder:
        raise task_error(task["name"], "kind", f"a token_classification task needs an encoder-only body (e.g. "
                         f"BERT, RoBERTa); {encoder.model_type} is an encoder-decoder")


def normalize_task_metadata(task) -> dict:
    """A TaskSpec or a metadata dict -> {name, kind, num_labels, label_names}, checked."""
    if isinstance(task, TaskSpec):
        return task.head_metadata()
    if not isinstance(task, dict) or "name" not in task or "kind" not in task:
        raise ValueError(f"task {task!r}: field 'tasks': each task needs at least a name and a kind")
    name, kind = task["name"], task["kind"]
    if kind not in TASK_KINDS:
        raise task_error(name, "kind", f"unknown kind {kind!r}; expected one of {list(TASK_KINDS)}")
    num_labels, label_names = task.get("num_labels"), task.get("label_names")
    if kind in LABELLED_KINDS:
        num_labels = num_labels if num_labels is not None else (len(label_names) if label_names else None)
        if not isinstance(num_labels, int) or num_labels < 2:
            raise task_error(name, "num_labels", f"a {kind} head needs at least 2 labels, got {num_labels!r}")
        if label_names is not None and len(label_names) != num_labels:
            raise task_error(name, "label_names", f"{len(label_names)} names for {num_labels} labels")
    elif kind == "regression":
        num_labels = 1
    return {"name": name, "kind": kind, "num_labels": num_labels, "label_names": label_names}


@dataclass
class MultiTaskOutput(ModelOutput):
    """loss: the task's standard (unscaled) loss when labels are given. logits: [batch, num_labels] (classification),
    [batch] (regression), [batch, choices] (multiple choice), [batch, target_length, vocab] (seq2seq), [batch, length,
    num_tags] (token classification); start_logits / end_logits: [batch, length] (extractive QA).
    last_hidden_state: the body's last hidden states ([batch(*choices), length, hidden])."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None


class MultiTaskModel(PreTrainedModel):
    config_class = MultiTaskModelConfig
    base_model_prefix = "body"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def __init__(self, config: MultiTaskModelConfig, body: PreTrainedModel | None = None):
        if config.encoder is None:
            raise ValueError("MultiTaskModelConfig: field 'encoder': the body's config is required")
        super().__init__(config)
        self.body = body if body is not None else body_auto_class(config.encoder).from_config(config.encoder)
        self.config.encoder = self.body.config  # one config object: the body's own
        self.config.pooling = resolve_pooling(config.pooling, self.body.config)
        if self.config.classifier_head is None:  # the family's own head, so that plain transformers serves it
            self.config.classifier_head = family_head(self.body.config, self.config.pooling)
        hidden = _hidden_size(self.body.config)
        self.classification_heads = nn.ModuleDict()
        self.token_heads = nn.ModuleDict()
        self.multiple_choice_head = None
        self.span_head = None
        for task in config.tasks:
            self._check_body_fits(task)
            self._build_head(task, hidden)
        self._body_takes_token_types = "token_type_ids" in inspect.signature(base_of(self.body).forward).parameters
        self._freeze_unused_pooler()
        self.post_init()

    def _check_body_fits(self, task: dict) -> None:
        if task["kind"] == "seq2seq" and base_of(self.body).get_output_embeddings() is None:
            raise task_error(task["name"], "kind", f"a seq2seq task needs the body's LM head: build the body with "
                             f"AutoModelForSeq2SeqLM, not {type(base_of(self.body)).__name__}")

    def _build_head(self, task: dict, hidden: int) -> None:
        self.__dict__["_head_module_cache"] = None  # train()'s flat list of head modules is rebuilt on next use
        kind, dropout, norm = task["kind"], self.config.classifier_dropout, self.config.spectral_norm_heads
        if kind in ("classification", "regression"):
            self.classification_heads[task["name"]] = ClassificationHead(
                hidden, task["num_labels"], dropout, spectral_norm=norm, head=self.config.classifier_head)
        elif kind == "token_classification":
            self.token_heads[task["name"]] = TokenClassificationHead(hidden, task["num_labels"], dropout, norm)
        elif kind == "multiple_choice" and self.multiple_choice_head is None:
            self.multiple_choice_head = ClassificationHead(hidden, 1, dropout, spectral_norm=norm,
                                                           head=self.config.classifier_head)
        elif kind == "extractive_qa" and self.span_head is None:
            self.span_head = nn.Linear(hidden, 2)
            if norm:
                self.span_head = nn.utils.parametrizations.spectral_norm(self.span_head)

    def _freeze_unused_pooler(self) -> None:
        # BERT/RoBERTa bodies carry a pooler that the heads here do not use (they pool the token states themselves).
        # It stays in the body so the checkpoint matches AutoModel exactly, frozen so that DDP sees no unused
        # parameter that requires a gradient.
        pooler = getattr(base_of(self.body), "pooler", None)
        if isinstance(pooler, nn.Module):
            pooler.requires_grad_(False)  # with LoRA, the pooler's adapters too

    @property
    def has_body_lora(self) -> bool:
        return is_lora_body(self.body)

    def add_body_lora(self, peft_config) -> None:
        """Put LoRA adapters (a `peft.LoraConfig`; `target_modules` name the body's modules) on the shared body:
        the body becomes a PeftModel with frozen base weights; the heads keep training fully."""
        self._set_body(lora_body(self.body, peft_config))

    def _set_body(self, body: nn.Module) -> None:
        self.body = body
        self.config.encoder = base_of(body).config
        self.__dict__["_head_module_cache"] = None
        self._freeze_unused_pooler()

    def _init_weights(self, module):
        # only the heads reach here: the body's modules are marked initialised by their own post_init/loading
        std = getattr(self.body.config, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            weight = module.parametrizations.weight.original if hasattr(module, "parametrizations") else module.weight
            nn.init.normal_(weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def get_input_embeddings(self):
        return self.body.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.body.set_input_embeddings(value)

    @property
    def task_names(self) -> list[str]:
        return self.config.task_names

    def add_tasks(self, tasks) -> list[str]:
        """Add heads for new tasks (TaskSpecs or metadata dicts), freshly initialised. Returns the new names; a
        task already present must agree on kind and labels."""
        added = []
        for task in (normalize_task_metadata(t) for t in tasks):
            if task["name"] in self.config.task_names:
                existing = self.config.task(task["name"])
                for key in ("kind", "num_labels"):
                    if existing[key] != task[key]:
                        raise task_error(task["name"], key, f"the checkpoint's head has {key}={existing[key]!r}, "
                                         f"the task asks for {task[key]!r}")
                continue
            _check_kind_fits_body(task, self.body.config)
            self._check_body_fits(task)
            self.config.tasks.append(task)
            self._build_head(task, _hidden_size(self.body.config))
            added.append(task["name"])
        if added:
            for module in self._head_modules():
                if not getattr(module, "_is_hf_initialized", False):
                    module.apply(self._init_weights)
                    module._is_hf_initialized = True
        return added

    def one_task_model(self, name: str) -> MultiTaskModel:
        """A model of task `name` alone, with the same head settings: this model's body (shared; a LoRA body is
        merged into a plain copy) and a copy of the task's head. Its `save_pretrained` adds what plain transformers
        needs to load a classification, regression or token classification model (`plain_export`)."""
        task = self.config.task(name)
        body = merged_body(self.body) if self.has_body_lora else self.body
        settings = {key: getattr(self.config, key) for key in HEAD_SETTINGS}
        model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], **settings), body=body)
        heads = {k for k in model.state_dict() if not k.startswith(BODY_PREFIX)}  # named as in this model
        model._load_heads({k: v for k, v in self.state_dict().items() if k in heads}, source=f"task '{name}'")
        return model

    def train(self, mode: bool = True):
        """`nn.Module.train`, but the heads' modules are switched from a cached flat list instead of nn.Module's
        recursive walk: Trainer calls train() before every micro-batch, and with many tasks that walk made the
        step's cost grow with the number of heads. Same result: every module's `training` flag is `mode`."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.__dict__["training"] = mode
        self.body.train(mode)  # the body's own train() (transformers' override included)
        if self.__dict__.get("_head_module_cache") is None:
            self.__dict__["_head_module_cache"] = [m for name, child in self.named_children() if child is not self.body
                                                  for m in child.modules()]
        for module in self.__dict__["_head_module_cache"]:
            if type(module).train is nn.Module.train:
                module.__dict__["training"] = mode
            else:  # a module with its own train(): let it run
                module.train(mode)
        return self

    def _head_modules(self):
        return [*self.classification_heads.values(), *self.token_heads.values(),
                *(head for head in (self.multiple_choice_head, self.span_head) if head is not None)]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        task_ids: torch.Tensor | None = None,
        task: str | None = None,
        labels: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        choice_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> MultiTaskOutput:
        """One batch of ONE task, named by `task` or by `task_ids` (all equal; the collator makes them).

        `inputs_embeds` (e.g. noise-perturbed embeddings for R3F) replaces the embedding lookup; `input_ids` may
        be passed alongside (an encoder-decoder body needs them to locate EOS and build decoder inputs).
        Multiple choice: input_ids [batch, choices, length] (+ `choice_mask` [batch, choices])."""
        spec = self.config.task(self._resolve_task(task, task_ids))
        kind = spec["kind"]
        if input_ids is None and inputs_embeds is None:
            raise ValueError(f"task '{spec['name']}': field 'input_ids': give input_ids or inputs_embeds")
        batch_size, num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
        if kind == "multiple_choice":  # rank C (question, choice) encodings with one shared head
            flatten = lambda x: None if x is None else x.reshape(-1, *x.shape[2:])  # noqa: E731
            input_ids, attention_mask, token_type_ids, inputs_embeds = map(
                flatten, (input_ids, attention_mask, token_type_ids, inputs_embeds))

        if kind == "seq2seq" and decoder_input_ids is None:
            if labels is None:
                raise ValueError(f"task '{spec['name']}': field 'labels': seq2seq needs labels or decoder_input_ids")
            decoder_input_ids = self._shift_right(labels)
        hidden = self._run_body(input_ids, attention_mask, token_type_ids, inputs_embeds, decoder_input_ids,
                                decoder_attention_mask, lm_logits=kind == "seq2seq")  # [N, length, hidden or vocab]

        loss = logits = start_logits = end_logits = None
        if kind in ("classification", "regression"):
            logits = self.classification_heads[spec["name"]](self._sentence_representation(hidden, attention_mask,
                                                                                            input_ids))
            if kind == "regression":
                logits = logits.squeeze(-1)  # [batch]
            if labels is not None:
                loss = (F.mse_loss(logits, labels.to(logits.dtype)) if kind == "regression"
                        else F.cross_entropy(logits, labels))
        elif kind == "multiple_choice":
            scores = self.multiple_choice_head(self._sentence_representation(hidden, attention_mask, input_ids))
            logits = scores.view(batch_size, num_choices)
            if choice_mask is not None:
                logits = logits.masked_fill(~choice_mask.bool(), torch.finfo(logits.dtype).min)
            if labels is not None:
                loss = F.cross_entropy(logits, labels)  # sentence ranking loss over the choices
        elif kind == "token_classification":  # every token's state, no pooling
            logits = self.token_heads[spec["name"]](hidden)  # [B, length, num_tags]
            if labels is not None:  # -100 on later sub-tokens of a word, special tokens and padding
                loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        elif kind == "extractive_qa":
            spans = self.span_head(hidden)  # [B, length, 2]
            if attention_mask is not None:  # candidate positions: the real tokens
                spans = spans.masked_fill((attention_mask == 0).unsqueeze(-1), torch.finfo(spans.dtype).min)
            start_logits, end_logits = spans.unbind(dim=-1)  # [B, length] each
            if start_positions is not None and end_positions is not None:
                loss = (F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)) / 2
        else:  # seq2seq: the *ForConditionalGeneration body's own logits (its head, bias and scaling)
            logits = hidden  # [B, T, vocab]
            hidden = None
            if labels is not None:  # the plain token-level cross entropy; MuppetTrainer's training loss is its own
                loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return MultiTaskOutput(loss=loss, logits=logits, start_logits=start_logits, end_logits=end_logits,
                               last_hidden_state=hidden)

    def _resolve_task(self, task: str | None, task_ids: torch.Tensor | None) -> str:
        if task is not None:
            return task
        if task_ids is None:
            raise ValueError("MultiTaskModel.forward: give `task` (a name) or `task_ids`")
        first = int(task_ids.reshape(-1)[0])
        if task_ids.numel() > 1 and not bool((task_ids == first).all()):
            raise ValueError("MultiTaskModel.forward: field 'task_ids': a batch must belong to one task")
        if not 0 <= first < len(self.config.tasks):
            raise ValueError(f"MultiTaskModel.forward: field 'task_ids': {first} is not a task index "
                             f"(the model has {len(self.config.tasks)} tasks)")
        return self.config.tasks[first]["name"]

    def _run_body(self, input_ids, attention_mask, token_type_ids, inputs_embeds, decoder_input_ids,
                  decoder_attention_mask, lm_logits: bool = False) -> torch.Tensor:
        """The body's last hidden states [N, length, hidden] (an encoder-decoder's: the decoder's), or with
        `lm_logits` the encoder-decoder's own LM logits [N, target length, vocab]."""
        kwargs = {"attention_mask": attention_mask}
        if inputs_embeds is not None:
            kwargs["inputs_embeds"] = inputs_embeds
        else:
            kwargs["input_ids"] = input_ids
        if token_type_ids is not None and self._body_takes_token_types:
            kwargs["token_type_ids"] = token_type_ids
        if self.body.config.is_encoder_decoder:
            if decoder_input_ids is None:  # sentence-level tasks: the decoder reads the shifted input (BART)
                if input_ids is None:
                    raise ValueError("an encoder-decoder body needs input_ids (with inputs_embeds) to build "
                                     "decoder inputs")
                decoder_input_ids = self._shift_right(input_ids)
                decoder_attention_mask = attention_mask
            if lm_logits:  # the *ForConditionalGeneration forward: its own head and scaling
                return self.body(**kwargs, decoder_input_ids=decoder_input_ids,
                                 decoder_attention_mask=decoder_attention_mask, return_dict=True).logits
            # the decoder states alone, as the base model's forward computes them (no vocabulary projection)
            model = base_of(self.body)
            encoded = model.get_encoder()(**kwargs, return_dict=True).last_hidden_state
            return model.get_decoder()(input_ids=decoder_input_ids, attention_mask=decoder_attention_mask,
                                       encoder_hidden_states=encoded, encoder_attention_mask=attention_mask,
                                       return_dict=True).last_hidden_state
        return self.body(**kwargs, return_dict=True).last_hidden_state

    def _sentence_representation(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None,
                                 input_ids: torch.Tensor | None) -> torch.Tensor:
        """[N, length, hidden] -> [N, hidden] by `config.pooling` (hf_aux.modeling.pooling): for an encoder-decoder
        the decoder states, whose mask is the input's (the decoder reads the shifted input)."""
        return pool(hidden, attention_mask, self.config.pooling, input_ids,
                    getattr(self.body.config, "eos_token_id", None))  # Funnel's config has no EOS field

    def sentence_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                          token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The pooled sentence representation [N, hidden] that the classification heads read, for a head kept
        outside the model (MUPPET's end-task-aware mode fits its meta head phi* on it)."""
        hidden = self._run_body(input_ids, attention_mask, token_type_ids, None, None, None)
        return self._sentence_representation(hidden, attention_mask, input_ids)

    def _shift_right(self, ids: torch.Tensor) -> torch.Tensor:
        config = self.body.config
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.eos_token_id
        shifted = ids.new_full(ids.shape, config.pad_token_id)
        shifted[:, 1:] = ids[:, :-1]
        shifted[:, 0] = start
        return shifted.masked_fill(shifted == -100, config.pad_token_id)  # -100 (an ignored label) read as padding

    # ---- MUPPET-style checkpoints ----
    def save_pretrained(self, save_directory, state_dict=None, is_main_process: bool = True, push_to_hub=False,
                        **kwargs):
        """Body as a standard checkpoint of its own class + heads and task metadata beside it (module docstring).
        Keyword arguments (e.g. `max_shard_size`) go to the body's `save_pretrained`."""
        if os.path.isfile(save_directory):
            raise ValueError(f"save_pretrained: {save_directory!r} is a file, not a directory")
        os.makedirs(save_directory, exist_ok=True)
        state = state_dict if state_dict is not None else self.state_dict()
        body_state = {k[len(BODY_PREFIX):]: v for k, v in state.items() if k.startswith(BODY_PREFIX)}
        kwargs.pop("safe_serialization", None)  # always safetensors
        repo_id, token, commit_message = (kwargs.pop(key, None) for key in ("repo_id", "token", "commit_message"))
        if is_main_process:
            if self.has_body_lora:  # the adapter alone, as peft writes it; the frozen base weights are not saved
                save_lora_body(self.body, save_directory, state_dict=body_state)
            else:
                self._save_body(self.body, save_directory, body_state, **kwargs)
            self._save_heads_and_metadata(save_directory, state, adapter="lora" if self.has_body_lora else None)
        if push_to_hub and is_main_process:  # token scan and clear errors, as every hf_aux push
            from ..runtime.hub import push_folder_to_hub

            push_folder_to_hub(save_directory, repo_id or os.path.basename(os.path.abspath(save_directory)),
                               token=token, commit_message=commit_message or "Upload MUPPET-style multi-task checkpoint")

    def _save_body(self, body: PreTrainedModel, save_directory: str, body_state: dict, **kwargs) -> None:
        """config.json + model.safetensors of the plain `body` (the one-task export's head and labels added), and
        the sentence-transformers files of the checkpoint it came from."""
        export = self.plain_export()
        body.save_pretrained(save_directory, state_dict={**body_state, **export.weights}, **kwargs)
        write_plain_config(save_directory, body.config, export)
        copy_sentence_transformers_files(body.config._name_or_path, save_directory)

    def plain_export(self) -> PlainExport:
        """What plain transformers needs, beside the body, to load this model whole (hf_aux.modeling.export): for a
        model of ONE classification, regression or token classification task, its head under a transformers
        class's names and its labels; nothing for any other model."""
        if len(self.config.tasks) != 1:
            return PlainExport()
        task = self.config.tasks[0]
        if task["kind"] in ("classification", "regression"):
            return sequence_classifier_export(self.classification_heads[task["name"]], task, self.body.config,
                                              self.config.pooling, self.config.classifier_dropout,
                                              self.config.classifier_head)
        head = self._exported_token_head() if task["kind"] == "token_classification" else {}
        return PlainExport(head, label_fields(task)) if head else PlainExport()

    def _exported_token_head(self) -> dict:
        """{"classifier.weight", "classifier.bias"}: the head of a model whose ONE task is token classification,
        under the names AutoModelForTokenClassification gives it for this body (checked on a meta-device copy);
        {} for a body transformers has no token classification model for."""
        if type(self.body.config) not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING:
            return {}
        head = self.token_heads[self.config.tasks[0]["name"]].classifier
        config = self.body.config.__class__.from_dict({**self.body.config.to_dict(),
                                                       "num_labels": self.config.tasks[0]["num_labels"]})
        with torch.device("meta"):
            probe = AutoModelForTokenClassification.from_config(config)
        if not isinstance(getattr(probe, "classifier", None), nn.Linear) or \
                probe.classifier.weight.shape != head.weight.shape:
            return {}
        # the effective weights (a spectrally normalised head's too)
        return {key: getattr(head, name).detach().contiguous().cpu() for key, name in EXPORTED_TOKEN_HEAD.items()}

    def _save_heads_and_metadata(self, save_directory: str, state: dict, adapter: str | None) -> None:
        head_state = {k: v.detach().contiguous().cpu() for k, v in state.items() if not k.startswith(BODY_PREFIX)}
        save_file(head_state, os.path.join(save_directory, HEADS_WEIGHTS_NAME), metadata={"format": "pt"})
        with open(os.path.join(save_directory, MULTITASK_CONFIG_NAME), "w") as f:
            json.dump(self._multitask_metadata(adapter), f, indent=2, sort_keys=True)

    def save_merged(self, save_directory, is_main_process: bool = True, **kwargs) -> None:
        """The LoRA model as a plain MUPPET-style checkpoint: the body with its adapters folded into the base
        weights (config.json + model.safetensors, loadable by `AutoModel` alone) and the heads beside it. The
        model itself keeps its adapters. Keyword arguments go to the merged body's `save_pretrained`."""
        if not self.has_body_lora:
            raise ValueError("MultiTaskModel.save_merged: the body has no LoRA adapter (save_pretrained already "
                             "writes a plain checkpoint)")
        if os.path.isfile(save_directory):
            raise ValueError(f"save_merged: {save_directory!r} is a file, not a directory")
        if not is_main_process:
            return
        os.makedirs(save_directory, exist_ok=True)
        merged = merged_body(self.body)
        self._save_body(merged, save_directory, merged.state_dict(), **kwargs)
        self._save_heads_and_metadata(save_directory, self.state_dict(), adapter=None)

    def _multitask_metadata(self, adapter: str | None = None) -> dict:
        from .._versions import __version__

        data = {k: v for k, v in self.config.to_dict().items() if k in ("tasks", *HEAD_SETTINGS)}
        data["hf_aux_version"] = __version__
        if adapter is None:
            data["format"] = "muppet-style: body in config.json/model.safetensors, heads in " + HEADS_WEIGHTS_NAME
        else:
            data["adapter"] = adapter
            data["format"] = (f"muppet-style with a {adapter} body: peft adapter in {ADAPTER_CONFIG_NAME}/"
                              f"adapter_model.safetensors over the base model it names, heads in {HEADS_WEIGHTS_NAME}")
        return data

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, tasks=None, config=None,
                        spectral_norm_heads: bool | None = None, classifier_dropout: float | None = None,
                        pooling: str | None = None, base_model: str | None = None, is_trainable: bool = False,
                        **kwargs):
        """Load a MUPPET-style checkpoint (local folder or Hub id) with all its heads, or a plain encoder
        checkpoint with fresh heads for `tasks` (TaskSpecs or {name, kind, num_labels} dicts). Given `tasks` are
        added to a MUPPET-style checkpoint's own (fresh heads for the new ones, logged). Other keyword arguments
        (revision, token, cache_dir, attn_implementation, dtype, ...) go to `AutoModel.from_pretrained`.

        A LoRA checkpoint (adapter_config.json beside the heads): the body is `base_model` (default: the base model
        recorded in adapter_config.json) with the saved adapter; `is_trainable=True` to train the adapter further
        (peft's default, False, freezes it).

        `pooling` (None: the checkpoint's own) sets how sentence-level heads read the body: a MUPPET-style
        checkpoint keeps the mode it was trained with (`cls` when written before hf_aux recorded it, `eos` for an
        encoder-decoder), a plain encoder gets `auto` (its own sentence-transformers pooling, else the first
        token)."""
        if model_args:
            raise TypeError("MultiTaskModel.from_pretrained takes no positional arguments besides the path")
        if config is not None:
            raise TypeError("MultiTaskModel.from_pretrained builds its config from the checkpoint; pass tasks=...")
        hub_kwargs = {k: kwargs[k] for k in ("revision", "token", "cache_dir", "local_files_only", "subfolder")
                      if k in kwargs}
        metadata_file = cached_file(pretrained_model_name_or_path, MULTITASK_CONFIG_NAME,
                                    _raise_exceptions_for_missing_entries=False, **hub_kwargs)
        metadata = {} if metadata_file is None else json.loads(Path(metadata_file).read_text())
        adapter_file = None
        if metadata.get("adapter") == "lora":  # the body is a base model + the adapter saved here
            adapter_file = cached_file(pretrained_model_name_or_path, ADAPTER_CONFIG_NAME, **hub_kwargs)
            base = adapter_base_model(adapter_file, base_model, "MultiTaskModel.from_pretrained")
            base_kwargs = {k: v for k, v in kwargs.items() if k not in ("revision", "subfolder")}
            base_config = AutoConfig.from_pretrained(base, **{k: v for k, v in base_kwargs.items() if k in hub_kwargs})
            body = body_auto_class(base_config).from_pretrained(base, **base_kwargs)
        else:
            if base_model is not None:
                raise ValueError("MultiTaskModel.from_pretrained: field 'base_model': only for a LoRA checkpoint; "
                                 f"{pretrained_model_name_or_path!r} has no adapter")
            body_config = AutoConfig.from_pretrained(pretrained_model_name_or_path, **hub_kwargs)
            body = body_auto_class(body_config).from_pretrained(pretrained_model_name_or_path, **kwargs)
        if metadata_file is not None:
            saved_tasks = metadata["tasks"]
            settings = {k: metadata[k] for k in ("classifier_dropout", "spectral_norm_heads") if k in metadata}
            # heads trained before the pooling was recorded read the first token (the EOS state for encoder-decoders)
            settings["pooling"] = metadata.get("pooling", "eos" if body.config.is_encoder_decoder else "cls")
            # and, before their function was recorded, were fairseq/RoBERTa's tanh head
            settings["classifier_head"] = metadata.get("classifier_head", TANH_HEAD)
        else:
            saved_tasks, settings = [], {}
            if not tasks:
                raise ValueError(f"{pretrained_model_name_or_path!r} is a plain encoder checkpoint (no "
                                 f"{MULTITASK_CONFIG_NAME}): pass tasks=[...] to start heads for them")
        if spectral_norm_heads is not None:
            if metadata_file is not None and settings.get("spectral_norm_heads", False) != spectral_norm_heads:
                raise ValueError("field 'spectral_norm_heads': cannot change it for heads saved in the checkpoint")
            settings["spectral_norm_heads"] = spectral_norm_heads
        if classifier_dropout is not None:
            settings["classifier_dropout"] = classifier_dropout
        if pooling is not None:
            if metadata_file is not None and pooling not in ("auto", settings["pooling"]) and saved_tasks:
                logger.warning("%s: its heads were trained with %s pooling; reading the body with %s instead",
                               pretrained_model_name_or_path, settings["pooling"], pooling)
            settings["pooling"] = pooling
        model = cls(MultiTaskModelConfig(encoder=body.config, tasks=saved_tasks, **settings), body=body)
        if adapter_file is not None:
            model._set_body(load_lora_body(body, pretrained_model_name_or_path, is_trainable=is_trainable,
                                           **hub_kwargs))
        if metadata_file is not None:
            heads_file = cached_file(pretrained_model_name_or_path, HEADS_WEIGHTS_NAME, **hub_kwargs)
            model._load_heads(load_file(heads_file), source=pretrained_model_name_or_path)
        fresh = model.add_tasks(tasks or [])
        if fresh:
            logger.warning("MultiTaskModel: fresh (randomly initialised) heads for tasks %s; not in %s", fresh,
                           pretrained_model_name_or_path)
        return model.eval()  # as every transformers from_pretrained: dropout off; Trainer.train() turns it on

    def _load_heads(self, head_state: dict, source) -> None:
        expected = {k for k in self.state_dict() if not k.startswith(BODY_PREFIX)}
        missing, unexpected = expected - set(head_state), set(head_state) - expected
        if missing or unexpected:
            raise ValueError(f"{source}: {HEADS_WEIGHTS_NAME} does not match the tasks in {MULTITASK_CONFIG_NAME}: "
                             f"missing {sorted(missing)}, unexpected {sorted(unexpected)}")
        super().load_state_dict(head_state, strict=False)

    def load_checkpoint(self, checkpoint_dir: str, load_standard=None) -> None:
        """Restore this model in place from a checkpoint folder (hf_aux's base trainer calls it on resume and for
        `load_best_model_at_end`): a LoRA body's adapter, strictly, or else the body through `load_standard`
        (Trainer's loading of model.safetensors; without it, the file is read here), then the heads."""
        if self.has_body_lora:
            load_lora_weights(self.body, checkpoint_dir)
        elif load_standard is not None:
            load_standard(checkpoint_dir)
        else:
            self.body.load_state_dict(_without_exported_head(
                load_file(os.path.join(checkpoint_dir, "model.safetensors")), self.body))
        self.load_checkpoint_heads(checkpoint_dir)

    def load_checkpoint_heads(self, checkpoint_dir: str) -> None:
        """Restore the heads from a MUPPET-style folder into this model (Trainer's resume restores only
        model.safetensors, i.e. the body: see `load_state_dict`)."""
        self._load_heads(load_file(os.path.join(checkpoint_dir, HEADS_WEIGHTS_NAME)), source=checkpoint_dir)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Also accepts a body-only state dict (a MUPPET-style model.safetensors, which is what Trainer's resume
        passes): it is loaded into the body, strictly; the heads must then come from `load_checkpoint_heads`."""
        if state_dict and not any(k.startswith(BODY_PREFIX) for k in state_dict):
            state_dict = _without_exported_head(state_dict, self.body)  # the head's copy: the heads file has it
            if set(state_dict) <= set(self.body.state_dict()):
                return self.body.load_state_dict(state_dict, strict=False, assign=assign)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


def _without_exported_head(state_dict: dict, body: nn.Module) -> dict:
    """A body state dict without the head a one-task model exports beside it (hf_aux.modeling.export). A BERT
    classifier's exported `pooler.dense` is the body's own pooler, which the heads do not read: it stays."""
    if not any(key in state_dict for key in EXPORTED_HEAD_KEYS):
        return state_dict
    body_keys = set(body.state_dict())
    return {k: v for k, v in state_dict.items() if k not in EXPORTED_HEAD_KEYS or k in body_keys}


def body_auto_class(config: PretrainedConfig):
    """The auto class that builds a body for `config`: `AutoModelForSeq2SeqLM` for an encoder-decoder it knows
    (its *ForConditionalGeneration model, whose LM head seq2seq tasks use), else `AutoModel`."""
    if config.is_encoder_decoder and type(config) in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING:
        return AutoModelForSeq2SeqLM
    return AutoModel


# ---- One task from a checkpoint: the downstream fine-tuning model, its head fresh or re-used (MUPPET §4) ----


def checkpoint_head_for(source: MultiTaskModel, task: TaskSpec):
    """The head of `source` that `task` can start from, or None: a same-named classification/regression/token
    classification head (kind and labels must agree), the unified multiple-choice or span head."""
    if task.kind in ("classification", "regression", "token_classification"):
        if task.name not in source.task_names:
            return None
        saved = source.config.task(task.name)
        if saved["kind"] != task.kind or saved["num_labels"] != task.num_labels:
            raise ValueError(f"task '{task.name}': field 'num_labels': the checkpoint's head is {saved['kind']} with "
                             f"{saved['num_labels']} outputs, the task is {task.kind} with {task.num_labels}")
        if saved.get("label_names") and task.label_names and saved["label_names"] != task.label_names:
            raise ValueError(f"task '{task.name}': field 'label_names': the checkpoint's head predicts "
                             f"{saved['label_names']}, the task has {task.label_names}")
        heads = source.token_heads if task.kind == "token_classification" else source.classification_heads
        return heads[task.name]
    if task.kind == "multiple_choice":
        return source.multiple_choice_head
    return source.span_head


def single_task_model(model_name_or_path: str, task: TaskSpec, reuse_head: bool = False,
                      classifier_dropout: float | None = None, pooling: str | None = None,
                      **hub_kwargs) -> tuple[MultiTaskModel, bool]:
    """(a one-task `MultiTaskModel` on the body of `model_name_or_path`, whether its head was re-used).

    A MUPPET-style checkpoint loads with all its saved heads; with `reuse_head` the task's head starts from the
    checkpoint's (`checkpoint_head_for`), else (and for a plain checkpoint) it starts fresh. `classifier_dropout`
    and `pooling` None keep the checkpoint's (a plain encoder's: `auto`, see `MultiTaskModel.from_pretrained`)."""
    metadata = cached_file(model_name_or_path, MULTITASK_CONFIG_NAME, _raise_exceptions_for_missing_entries=False,
                           **hub_kwargs)
    source = MultiTaskModel.from_pretrained(model_name_or_path, tasks=None if metadata is not None else [task],
                                            pooling=pooling, **hub_kwargs)
    saved_head = checkpoint_head_for(source, task) if metadata is not None and reuse_head else None
    config = MultiTaskModelConfig(
        encoder=source.body.config, tasks=[task.head_metadata()],
        classifier_dropout=source.config.classifier_dropout if classifier_dropout is None else classifier_dropout,
        spectral_norm_heads=source.config.spectral_norm_heads, pooling=source.config.pooling,
        # a re-used head keeps its function; a fresh one is the family's own (plain transformers serves it)
        classifier_head=source.config.classifier_head if saved_head is not None else None)
    model = MultiTaskModel(config, body=source.body)
    if saved_head is not None:
        checkpoint_head_for(model, task).load_state_dict(saved_head.state_dict())
        logger.info("task '%s': head re-used from %s", task.name, model_name_or_path)
        return model, True
    if reuse_head:
        logger.warning("task '%s': --reuse_head, but %s has no %s head for it: starting a fresh head", task.name,
                       model_name_or_path, task.kind)
    return model, False


def __getattr__(name: str):
    """`MultiTaskConfig`, its name in hf_aux 0.1: a deprecated alias of `MultiTaskModelConfig` (model configurations
    are named after their model class; `<Method>Config` names a trainer's training arguments, as in trl)."""
    if name == "MultiTaskConfig":
        warnings.warn("hf_aux: MultiTaskConfig is deprecated, use MultiTaskModelConfig (the configuration of "
                      "MultiTaskModel; MuppetConfig holds the training arguments)", FutureWarning, stacklevel=2)
        return MultiTaskModelConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
