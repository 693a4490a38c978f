"""LoRA on the shared body, for MUPPET (`MultiTaskModel`) and TARTAN (`TartanModel`): one place for both.

The body every task shares becomes a `peft.PeftModel` (LoRA on the modules `LoraConfig.target_modules` names;
peft's per-architecture default when that is None). Its base weights are frozen (requires_grad False), the LoRA
matrices train; the task heads stay outside the adapter and train fully.

Checkpoint files of a LoRA body are peft's own: adapter_config.json + adapter_model.safetensors (keys as
`PeftModel.save_pretrained` writes them), so `peft.PeftModel.from_pretrained(AutoModel.from_pretrained(base),
folder)` restores the adapted body without hf_aux. The frozen base weights are not written: loading needs the
base model (`base_model_name_or_path` in adapter_config.json, or given explicitly).

`LoraArguments` (defined in hf_aux.runtime.lora_settings, importable here) holds the settings (the commands' flags
`--use_lora --lora_r --lora_alpha --lora_dropout --lora_target_modules --merge_lora`).
"""

from __future__ import annotations

import copy
import json
import os

from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from peft.utils import CONFIG_NAME as ADAPTER_CONFIG_NAME
from peft.utils import SAFETENSORS_WEIGHTS_NAME as ADAPTER_WEIGHTS_NAME
from peft.utils import load_peft_weights
from safetensors.torch import save_file
from torch import nn

from .lora_settings import MERGED_SUBFOLDER, LoraArguments  # noqa: F401  (the settings; importable here too)


def merged_subfolder(output_dir: str) -> str | None:
    """MERGED_SUBFOLDER if a merged copy was written in `output_dir`, else None (for the model card)."""
    return MERGED_SUBFOLDER if os.path.isdir(os.path.join(output_dir, MERGED_SUBFOLDER)) else None


def is_lora_body(module: nn.Module) -> bool:
    return isinstance(module, PeftModel)


def base_of(body: nn.Module) -> nn.Module:
    """The transformers model inside a LoRA body (the body itself when it has no adapter)."""
    return body.get_base_model() if isinstance(body, PeftModel) else body


def lora_body(body: nn.Module, peft_config: LoraConfig) -> PeftModel:
    """`body` with LoRA adapters: a PeftModel whose base weights are frozen. The config is copied; its task_type is
    dropped (the heads are hf_aux's, outside the adapter), so peft adds no head of its own to `modules_to_save`."""
    if not isinstance(peft_config, LoraConfig):
        raise ValueError(f"field 'peft_config': expected a peft.LoraConfig, got {type(peft_config).__name__}")
    if isinstance(body, PeftModel):
        raise ValueError("field 'peft_config': the body already has LoRA adapters")
    config = copy.deepcopy(peft_config)
    config.task_type = None
    config.inference_mode = False
    return get_peft_model(body, config)


def _adapter_name(body: PeftModel) -> str:
    names = list(body.peft_config)
    if len(names) != 1:
        raise ValueError(f"a LoRA body with one adapter is supported, this one has {names}")
    return names[0]


def save_lora_body(body: PeftModel, directory: str, state_dict: dict | None = None) -> None:
    """adapter_config.json + adapter_model.safetensors, as `PeftModel.save_pretrained` writes them (same keys, same
    config, with the base class for `AutoPeftModel`), but no README.md: the folder's model card is hf_aux's.
    `state_dict`: the body's full state dict (e.g. what Trainer hands over); default `body.state_dict()`."""
    name = _adapter_name(body)
    weights = get_peft_model_state_dict(body, state_dict=state_dict, adapter_name=name, save_embedding_layers=False)
    weights = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
    os.makedirs(directory, exist_ok=True)
    save_file(weights, os.path.join(directory, ADAPTER_WEIGHTS_NAME), metadata={"format": "pt"})
    config = copy.deepcopy(body.peft_config[name])
    config.inference_mode = True
    if config.base_model_name_or_path is None:
        config.base_model_name_or_path = base_of(body).__dict__.get("name_or_path") or None
    base_class = type(base_of(body))
    config.save_pretrained(directory, auto_mapping_dict={"base_model_class": base_class.__name__,
                                                         "parent_library": base_class.__module__})


def load_lora_weights(body: PeftModel, directory: str) -> None:
    """Restore the adapter weights saved in `directory` into `body` (resume, best model), strictly: every LoRA
    tensor of the adapter must be in the file and nothing else."""
    name = _adapter_name(body)
    weights = load_peft_weights(directory, device="cpu")
    result = set_peft_model_state_dict(body, weights, adapter_name=name)
    missing = [k for k in result.missing_keys if "lora_" in k and f".{name}" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"{directory!r}: {ADAPTER_WEIGHTS_NAME} does not match the model's LoRA adapter (missing "
                         f"{missing[:5]}, unexpected {list(result.unexpected_keys)[:5]})")


def load_lora_body(base: nn.Module, directory: str, is_trainable: bool = False, **hub_kwargs) -> PeftModel:
    """The base body with the adapter saved in `directory` (a folder or a Hub id)."""
    return PeftModel.from_pretrained(base, directory, is_trainable=is_trainable, **hub_kwargs)


def adapter_base_model(adapter_config_file: str, given: str | None, owner: str) -> str:
    """The base model to load under an adapter: `given`, else adapter_config.json's base_model_name_or_path."""
    if given is not None:
        return given
    with open(adapter_config_file) as f:
        recorded = json.load(f).get("base_model_name_or_path")
    if not recorded:
        raise ValueError(f"{owner}: field 'base_model': the adapter records no base model "
                         "(base_model_name_or_path); pass base_model=<path or Hub id of the base encoder>")
    return recorded


def merged_body(body: PeftModel) -> nn.Module:
    """A copy of the body with the adapter folded into the base weights (W + B A alpha / r): a plain transformers
    model. The adapted body itself is untouched (the copy costs one body's memory while it exists)."""
    return copy.deepcopy(body).merge_and_unload()


__all__ = ["ADAPTER_CONFIG_NAME", "ADAPTER_WEIGHTS_NAME", "MERGED_SUBFOLDER", "LoraArguments", "adapter_base_model",
           "base_of", "is_lora_body", "load_lora_body", "load_lora_weights", "lora_body", "merged_body",
           "merged_subfolder", "save_lora_body"]
