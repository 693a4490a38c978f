"""hf_aux: Hugging Face Trainer subclasses for training language encoders with auxiliary objectives.

The public names below are imported lazily, on first use (as transformers and trl do): ``import hf_aux`` costs
only the version check, and ``from hf_aux import MuppetTrainer`` imports the trainer (and with it torch,
transformers' Trainer, peft, ...) only then. ``benchmarks/bench_import.py`` measures it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._versions import __version__, check_versions

check_versions()

from ._moved import install_old_paths
from .registry import methods

install_old_paths()

# public name -> submodule that defines it: the shared names here, each method's from its record
# (hf_aux/<method>/__init__.py, `hf_aux.registry`)
_LAZY_NAMES: dict[str, str] = {
    "LoraArguments": "runtime.lora_settings",
    **dict.fromkeys(["AuxConfig", "HubTokenSafeArgsMixin", "TokenSafeTrainingArguments"], "runtime.config"),
    "AuxTrainer": "runtime.trainer",
    **dict.fromkeys(
        ["MLMCollator", "MultiTaskCollator", "TokenizedTask", "group_texts_for_mlm", "mask_tokens_for_mlm",
         "tokenize_task"],
        "tasks.data",
    ),
    **dict.fromkeys(["HubDownloadError", "explain_hub_errors"], "errors"),
    **dict.fromkeys(["HubPushError", "create_hub_repo", "push_folder_to_hub", "push_trainer_output"], "runtime.hub"),
    **dict.fromkeys(
        ["PRIMARY_METRIC", "classification_metrics", "compute_task_metrics", "majority_baseline",
         "multiple_choice_metrics", "postprocess_qa_predictions", "qa_metrics", "regression_metrics",
         "rouge_metrics"],
        "tasks.metrics",
    ),
    **dict.fromkeys(["TaskSummary", "render_model_card"], "cards.model_card"),
    **dict.fromkeys(["MultiTaskConfig", "MultiTaskModelConfig", "MultiTaskModel", "MultiTaskOutput"],
                    "modeling.multitask"),  # MultiTaskConfig: deprecated name of MultiTaskModelConfig
    **dict.fromkeys(["TASK_KINDS", "TaskSpec", "load_mixture", "load_task_splits"], "tasks.loading"),
    **{name: f"{record.package}.{module}" for record in methods() for name, module in record.exports.items()},
}

# The demo data (hf_aux.tasks.demo: demo_task, demo_mixture, demo_unlabelled_text, DEMO_TASK_NAMES) needs the `demo`
# extra at call time; import it from hf_aux.tasks.demo.

__all__ = sorted(_LAZY_NAMES) + ["__version__"]


def __getattr__(name: str) -> Any:
    module_name = _LAZY_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_aux' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module_name}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))


if TYPE_CHECKING:  # the shared names' real imports, for static analysers (each method's: its __init__.py)
    from .runtime.config import AuxConfig, HubTokenSafeArgsMixin, TokenSafeTrainingArguments
    from .runtime.trainer import AuxTrainer
    from .tasks.data import (MLMCollator, MultiTaskCollator, TokenizedTask, group_texts_for_mlm, mask_tokens_for_mlm,
                             tokenize_task)
    from .errors import HubDownloadError, explain_hub_errors
    from .runtime.hub import HubPushError, create_hub_repo, push_folder_to_hub, push_trainer_output
    from .runtime.lora_settings import LoraArguments
    from .tasks.metrics import (PRIMARY_METRIC, classification_metrics, compute_task_metrics, majority_baseline,
                                multiple_choice_metrics, postprocess_qa_predictions, qa_metrics, regression_metrics,
                                rouge_metrics)
    from .cards.model_card import TaskSummary, render_model_card
    from .modeling.multitask import MultiTaskConfig, MultiTaskModel, MultiTaskModelConfig, MultiTaskOutput
    from .tasks.loading import TASK_KINDS, TaskSpec, load_mixture, load_task_splits
