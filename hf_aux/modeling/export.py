"""A one-task model's head in the body's checkpoint, so that plain transformers loads the fine-tuned model whole.

`MultiTaskModel.save_pretrained` writes the body as its own class saves it (config.json + model.safetensors), which
`AutoModel` loads. When the model has ONE task, this module adds that task's head to the same files, under the
names a transformers class reads, and its labels to config.json; the MUPPET-style files beside them
(multitask_config.json, multitask_heads.safetensors) are written as before and stay what hf_aux reads.

- token classification: `AutoModelForTokenClassification`'s `classifier` (dropout -> linear on every token, the
  same head): see `MultiTaskModel._exported_token_head`.
- classification / regression (one head on one pooled vector, `ClassificationHead`: dropout -> dense ->
  activation [-> LayerNorm] -> dropout -> out_proj, trained with the body family's own function,
  `hf_aux.modeling.heads.family_head`). Which class loads it depends on the family and on how the head reads the
  body (`--pooling`), STANDARD_CLASSIFIERS below:
    * the first token (`cls`; ModernBERT: also `mean`) on a family with a `*ForSequenceClassification` that computes
      that head at inference: its keys are written under the class's names (BERT's and ALBERT's pooler, which
      `AutoModel` then gives fine-tuned as a fine-tuned checkpoint does; DeBERTa's `pooler.dense`, DistilBERT's
      `pre_classifier`, ModernBERT's `head.dense` / `head.norm`, the others' `classifier.dense`) and `classifier`,
      and config.json names the class: plain transformers serves it, no remote code.
    * every other pooling (mean, max, mean_sqrt_len, weightedmean, lasttoken, eos), family, or a head whose function
      is not the family class's (one re-used from a checkpoint saved before heads followed the family): no
      transformers class computes it. The folder ships `modeling_hf_aux_classifier.py` (self-contained: the body,
      hf_aux's pooling, the head) and config.json maps `AutoModelForSequenceClassification` to it (`auto_map`):
      load with `trust_remote_code=True`. The head is stored as `hf_aux_head.*`, names no transformers class reads,
      so that transformers without `trust_remote_code` (config.json keeps the body's model_type) builds the
      family's class with its classifier reported missing, never reads the head with another function.
  config.json gets `id2label` / `label2id` (a regression's one output is named after the task), `problem_type`
  ("single_label_classification" or "regression", which tells the pipeline and the loss which it is) and
  `classifier_dropout` (the head's). A spectrally normalised head (R4F) is written with its effective weights.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PretrainedConfig

from .heads import family_head, family_reads
from .modeling_hf_aux_classifier import TANH_HEAD, HfAuxSequenceClassifier

AUTO_CLASS = "AutoModelForSequenceClassification"
REMOTE_CODE_FILE = "modeling_hf_aux_classifier.py"
REMOTE_CLASS = f"{Path(REMOTE_CODE_FILE).stem}.{HfAuxSequenceClassifier.__name__}"
POOLING_FIELD = "hf_aux_pooling"  # config.json: how the remote class pools
HEAD_FIELD = "hf_aux_head"  # config.json: the remote class's head function (TANH_HEAD's fields)

# model type -> (its *ForSequenceClassification, where that class keeps the parts of hf_aux's head: `dense` (and
# ModernBERT's `norm`) then `out_proj`); the poolings it reads: heads.family_reads. At inference the class computes
# exactly hf_aux's head of the family's function (heads.family_head): BERT's and ALBERT's tanh pooler (a body
# module: the fine-tuned pooler), DeBERTa's ContextPooler (pooler_hidden_act), DistilBERT's pre_classifier (ReLU),
# ModernBERT's head (activation, LayerNorm; cls or mean pooling), the others' `classifier` head.
_CLASSIFIER_HEAD = {"dense": "classifier.dense", "out_proj": "classifier.out_proj"}
_POOLER_HEAD = {"dense": "pooler.dense", "out_proj": "classifier"}
STANDARD_CLASSIFIERS = {
    "bert": ("BertForSequenceClassification", _POOLER_HEAD),
    "albert": ("AlbertForSequenceClassification", {"dense": "pooler", "out_proj": "classifier"}),
    "roberta": ("RobertaForSequenceClassification", _CLASSIFIER_HEAD),
    "xlm-roberta": ("XLMRobertaForSequenceClassification", _CLASSIFIER_HEAD),
    "camembert": ("CamembertForSequenceClassification", _CLASSIFIER_HEAD),
    "mpnet": ("MPNetForSequenceClassification", _CLASSIFIER_HEAD),
    "electra": ("ElectraForSequenceClassification", _CLASSIFIER_HEAD),
    "convbert": ("ConvBertForSequenceClassification", _CLASSIFIER_HEAD),
    "deberta": ("DebertaForSequenceClassification", _POOLER_HEAD),
    "deberta-v2": ("DebertaV2ForSequenceClassification", _POOLER_HEAD),
    "distilbert": ("DistilBertForSequenceClassification", {"dense": "pre_classifier", "out_proj": "classifier"}),
    "modernbert": ("ModernBertForSequenceClassification",
                   {"dense": "head.dense", "norm": "head.norm", "out_proj": "classifier"}),
}
REMOTE_HEAD = "hf_aux_head"  # HfAuxSequenceClassifier's head: names that no transformers class reads
# the names a one-task head is exported under in model.safetensors, beside the body's own weights: the standard
# classes', the remote class's, and `classifier.*`, where its exports before this change kept it
EXPORTED_HEAD_KEYS = frozenset(f"{prefix}.{part}" for _, names in STANDARD_CLASSIFIERS.values()
                               for prefix in (*names.values(), *(f"{REMOTE_HEAD}.{n}" for n in ("dense", "norm",
                                                                                            "out_proj")))
                               for part in ("weight", "bias"))
PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression"}


@dataclass
class PlainExport:
    """What a one-task model adds to the body's files: `weights` (name -> tensor, written into model.safetensors
    over the body's own), `config` (config.json fields), `remote_code` (ship modeling_hf_aux_classifier.py)."""

    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    remote_code: bool = False


def sequence_classifier_class(body_config: PretrainedConfig, pooling: str, head: dict | None = None) -> str | None:
    """The transformers class that loads a classification/regression head pooled by `pooling` on this body
    (e.g. "BertForSequenceClassification"), or None when it needs the shipped modeling file (trust_remote_code):
    the family has no such class, the class pools otherwise, or the head's function (`head`, default the family's
    own) is not the class's."""
    standard = STANDARD_CLASSIFIERS.get(body_config.model_type)
    if standard is None or not family_reads(body_config, pooling) or body_config.is_encoder_decoder:
        return None
    if head is not None and head != family_head(body_config, pooling):
        return None  # never written under names whose class computes another function
    return standard[0]


def needs_remote_code(body_config: PretrainedConfig, pooling: str, head: dict | None = None) -> bool:
    return sequence_classifier_class(body_config, pooling, head) is None


def label_fields(task: dict) -> dict:
    """config.json's id2label / label2id for a task's outputs (a regression's one output is named after the task)."""
    names = ([task["name"]] if task["kind"] == "regression"
             else task["label_names"] or [f"LABEL_{i}" for i in range(task["num_labels"])])
    return {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}


def sequence_classifier_export(head: torch.nn.Module, task: dict, body_config: PretrainedConfig, pooling: str,
                               dropout: float, head_spec: dict | None = None) -> PlainExport:
    """The export of a classification/regression `ClassificationHead` of function `head_spec` (module docstring)."""
    # `.weight` is the effective weight of a spectrally normalised layer too
    parts = {name: getattr(head, name) for name in ("dense", "norm", "out_proj") if hasattr(head, name)}
    tensors = {(name, part): getattr(layer, part).detach().contiguous().cpu()
               for name, layer in parts.items() for part in ("weight", "bias") if getattr(layer, part) is not None}
    config = {**label_fields(task), "problem_type": PROBLEM_TYPES[task["kind"]], "classifier_dropout": dropout}
    standard = sequence_classifier_class(body_config, pooling, head_spec)
    if standard is None:
        weights = {f"{REMOTE_HEAD}.{name}.{part}": tensor for (name, part), tensor in tensors.items()}
        config.update({"architectures": [HfAuxSequenceClassifier.__name__], POOLING_FIELD: pooling,
                       HEAD_FIELD: head_spec or dict(TANH_HEAD),
                       "auto_map": {**_own_auto_map(body_config), AUTO_CLASS: REMOTE_CLASS}})
        return PlainExport(weights, config, remote_code=True)
    names = STANDARD_CLASSIFIERS[body_config.model_type][1]
    weights = {f"{names[name]}.{part}": tensor for (name, part), tensor in tensors.items()}
    config["architectures"] = [standard]
    if body_config.model_type == "modernbert":
        config["classifier_pooling"] = pooling
    return PlainExport(weights, config)


def _own_auto_map(body_config: PretrainedConfig) -> dict:
    """The body's own auto_map (a body with remote code of its own), without an earlier export's entry."""
    return {k: v for k, v in (getattr(body_config, "auto_map", None) or {}).items() if v != REMOTE_CLASS}


def write_plain_config(save_directory: str | os.PathLike, body_config: PretrainedConfig, export: PlainExport) -> None:
    """config.json: the body's config with the export's fields, and without what an earlier export wrote into it
    (a body loaded from an exported folder carries them: a model of several tasks, or of another task, must not
    point transformers at a head it does not have). Ships the modeling file when the export needs it."""
    data = body_config.to_dict()
    stale = POOLING_FIELD in data or REMOTE_CLASS in (data.get("auto_map") or {}).values()
    if not export.config and not stale:
        return  # config.json as the body's save_pretrained wrote it
    data.pop(POOLING_FIELD, None)
    data.pop(HEAD_FIELD, None)
    if stale:
        data["problem_type"] = None
    data["auto_map"] = _own_auto_map(body_config)
    data.update(export.config)
    if not data["auto_map"]:
        del data["auto_map"]
    body_config.__class__.from_dict(data).save_pretrained(save_directory)
    if export.remote_code:
        shutil.copyfile(Path(__file__).with_name(REMOTE_CODE_FILE), Path(save_directory, REMOTE_CODE_FILE))

