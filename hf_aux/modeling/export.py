"""A one-task model's head in the body's checkpoint, so that plain transformers loads the fine-tuned model whole.

`MultiTaskModel.save_pretrained` writes the body as its own class saves it (config.json + model.safetensors), which
`AutoModel` loads. When the model has ONE task, this module adds that task's head to the same files, under the
names a transformers class reads, and its labels to config.json; the MUPPET-style files beside them
(multitask_config.json, multitask_heads.safetensors) are written as before and stay what hf_aux reads.

- token classification: `AutoModelForTokenClassification`'s `classifier` (dropout -> linear on every token, the
  same head): see `MultiTaskModel._exported_token_head`.
- classification / regression (one head on one pooled vector, `ClassificationHead`: dropout -> dense -> tanh ->
  dropout -> out_proj). Which class can load it depends on how the head reads the body (`--pooling`):
    * `cls` on a BERT body: `BertForSequenceClassification` computes classifier(dropout(tanh(pooler.dense(h_0)))),
      which at inference is hf_aux's head with `dense` as the pooler's and `out_proj` as `classifier` (in training
      hf_aux also drops out h_0 before `dense`; BERT does not). The head's `dense` is written as the body's
      `pooler.dense`: `AutoModel` then gives the same token states and the fine-tuned pooler, as a fine-tuned
      BertForSequenceClassification checkpoint does.
    * `cls` on a RoBERTa / XLM-R body: `RobertaClassificationHead` is hf_aux's head exactly (`classifier.dense`,
      `classifier.out_proj`).
    * every other pooling (mean, max, mean_sqrt_len, weightedmean, lasttoken, eos) and every other architecture:
      no transformers class pools that way. The folder ships `modeling_hf_aux_classifier.py` (self-contained:
      the body, hf_aux's pooling, the head) and config.json maps `AutoModelForSequenceClassification` to it
      (`auto_map`): load with `trust_remote_code=True`. config.json keeps the body's model_type, so `AutoModel`
      still gives the body (and transformers without `trust_remote_code` builds the standard class with a fresh,
      reported-missing classifier: always pass it).
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

from .modeling_hf_aux_classifier import HfAuxSequenceClassifier

AUTO_CLASS = "AutoModelForSequenceClassification"
REMOTE_CODE_FILE = "modeling_hf_aux_classifier.py"
REMOTE_CLASS = f"{Path(REMOTE_CODE_FILE).stem}.{HfAuxSequenceClassifier.__name__}"
POOLING_FIELD = "hf_aux_pooling"  # config.json: how the remote class pools

# model types whose *ForSequenceClassification reads the first token exactly as hf_aux's head (module docstring):
# "pooler": pooler.dense + tanh, then `classifier`; "head": `classifier.dense` + tanh, then `classifier.out_proj`
STANDARD_CLASSIFIERS = {"bert": ("pooler", "BertForSequenceClassification"),
                        "roberta": ("head", "RobertaForSequenceClassification"),
                        "xlm-roberta": ("head", "XLMRobertaForSequenceClassification")}
# the names a one-task head is exported under in model.safetensors, beside the body's own weights
EXPORTED_HEAD_KEYS = frozenset({"classifier.weight", "classifier.bias", "classifier.dense.weight",
                                "classifier.dense.bias", "classifier.out_proj.weight", "classifier.out_proj.bias"})
PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression"}


@dataclass
class PlainExport:
    """What a one-task model adds to the body's files: `weights` (name -> tensor, written into model.safetensors
    over the body's own), `config` (config.json fields), `remote_code` (ship modeling_hf_aux_classifier.py)."""

    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    remote_code: bool = False


def sequence_classifier_class(body_config: PretrainedConfig, pooling: str) -> str | None:
    """The transformers class that loads a classification/regression head pooled by `pooling` on this body
    (e.g. "BertForSequenceClassification"), or None when it needs the shipped modeling file (trust_remote_code)."""
    standard = STANDARD_CLASSIFIERS.get(body_config.model_type)
    if pooling != "cls" or standard is None or body_config.is_encoder_decoder:
        return None
    return standard[1]


def needs_remote_code(body_config: PretrainedConfig, pooling: str) -> bool:
    return sequence_classifier_class(body_config, pooling) is None


def label_fields(task: dict) -> dict:
    """config.json's id2label / label2id for a task's outputs (a regression's one output is named after the task)."""
    if task["kind"] == "regression":
        names = [task["name"]]
    else:
        names = task["label_names"] or [f"LABEL_{i}" for i in range(task["num_labels"])]
    return {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}


def sequence_classifier_export(head: torch.nn.Module, task: dict, body_config: PretrainedConfig, pooling: str,
                               dropout: float) -> PlainExport:
    """The export of a classification/regression `ClassificationHead` (module docstring)."""
    # `.weight` is the effective weight of a spectrally normalised layer too
    tensors = {f"{name}.{part}": getattr(layer, part).detach().contiguous().cpu()
               for name, layer in (("dense", head.dense), ("out_proj", head.out_proj)) for part in ("weight", "bias")}
    config = {**label_fields(task), "problem_type": PROBLEM_TYPES[task["kind"]], "classifier_dropout": dropout}
    standard = sequence_classifier_class(body_config, pooling)
    if standard is None:
        weights = {f"classifier.{name}": tensor for name, tensor in tensors.items()}
        config.update({"architectures": [HfAuxSequenceClassifier.__name__], POOLING_FIELD: pooling,
                       "auto_map": {**_own_auto_map(body_config), AUTO_CLASS: REMOTE_CLASS}})
        return PlainExport(weights, config, remote_code=True)
    if STANDARD_CLASSIFIERS[body_config.model_type][0] == "pooler":
        weights = {"pooler.dense.weight": tensors["dense.weight"], "pooler.dense.bias": tensors["dense.bias"],
                   "classifier.weight": tensors["out_proj.weight"], "classifier.bias": tensors["out_proj.bias"]}
    else:
        weights = {f"classifier.{name}": tensor for name, tensor in tensors.items()}
    config["architectures"] = [standard]
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
    if stale:
        data["problem_type"] = None
    data["auto_map"] = _own_auto_map(body_config)
    data.update(export.config)
    if not data["auto_map"]:
        del data["auto_map"]
    body_config.__class__.from_dict(data).save_pretrained(save_directory)
    if export.remote_code:
        shutil.copyfile(Path(__file__).with_name(REMOTE_CODE_FILE), Path(save_directory, REMOTE_CODE_FILE))

