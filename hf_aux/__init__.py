"""hf_aux: Hugging Face Trainer subclasses for training language encoders with auxiliary objectives.

The public names below are imported lazily, on first use (as transformers and trl do): ``import hf_aux`` costs
only the version check, and ``from hf_aux import MuppetTrainer`` imports the trainer (and with it torch,
transformers' Trainer, peft, ...) only then. ``benchmarks/bench_import.py`` measures it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from ._versions import check_versions

check_versions()

# public name -> submodule that defines it
_LAZY_NAMES: dict[str, str] = {
    "LoraArguments": "cli.arguments",
    "TokenSafeTrainingArguments": "training_args",
    **dict.fromkeys(
        ["MLMCollator", "MultiTaskCollator", "TokenizedTask", "group_texts_for_mlm", "mask_tokens_for_mlm",
         "tokenize_task"],
        "data",
    ),
    **dict.fromkeys(
        ["HubDownloadError", "HubPushError", "HubTokenSafeArgsMixin",
         "create_hub_repo", "explain_hub_errors", "push_folder_to_hub", "push_trainer_output"],
        "hub",
    ),
    **dict.fromkeys(
        ["PRIMARY_METRIC", "classification_metrics", "compute_task_metrics", "majority_baseline",
         "multiple_choice_metrics", "postprocess_qa_predictions", "qa_metrics", "regression_metrics",
         "rouge_metrics"],
        "metrics",
    ),
    **dict.fromkeys(["TaskSummary", "render_model_card"], "model_card"),
    **dict.fromkeys(["AmosGenerator", "AmosGeneratorConfig", "AmosModel", "AmosModelConfig"], "modeling.amos"),
    **dict.fromkeys(["MultiTaskConfig", "MultiTaskModelConfig", "MultiTaskModel", "MultiTaskOutput"],
                    "modeling.multitask"),  # MultiTaskConfig: deprecated name of MultiTaskModelConfig
    "TartanModel": "modeling.tartan",
    **dict.fromkeys(["MetaLMTeacher", "MetaLMTeacherConfig", "MetaLMTokens", "add_meta_lm_tokens"],
                    "modeling.teacher"),
    **dict.fromkeys(["MultiTaskDataset", "TaskBatchSampler"], "sampling"),
    **dict.fromkeys(["TASK_KINDS", "TaskSpec", "load_mixture", "load_task_splits"], "tasks"),
    **dict.fromkeys(["AmosConfig", "AmosTrainer"], "trainers.amos"),
    **dict.fromkeys(["MetaLMCollator", "MetaLMConfig", "MetaLMTrainer"], "trainers.meta_lm"),
    **dict.fromkeys(["MuppetConfig", "MuppetTrainer"], "trainers.muppet"),
    **dict.fromkeys(["TartanConfig", "TartanTrainer"], "trainers.tartan"),
}

# The demo data (hf_aux.demo: demo_task, demo_mixture, demo_unlabelled_text, DEMO_TASK_NAMES) needs the `demo`
# extra at call time; import it from hf_aux.demo.

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


if TYPE_CHECKING:  # static analysers and IDEs see the real imports
    from .cli.arguments import LoraArguments
    from .training_args import TokenSafeTrainingArguments
    from .data import (MLMCollator, MultiTaskCollator, TokenizedTask, group_texts_for_mlm, mask_tokens_for_mlm,
                       tokenize_task)
    from .hub import (HubDownloadError, HubPushError, HubTokenSafeArgsMixin,
                      create_hub_repo, explain_hub_errors, push_folder_to_hub, push_trainer_output)
    from .metrics import (PRIMARY_METRIC, classification_metrics, compute_task_metrics, majority_baseline,
                          multiple_choice_metrics, postprocess_qa_predictions, qa_metrics, regression_metrics,
                          rouge_metrics)
    from .model_card import TaskSummary, render_model_card
    from .modeling.amos import AmosGenerator, AmosGeneratorConfig, AmosModel, AmosModelConfig
    from .modeling.multitask import MultiTaskConfig, MultiTaskModel, MultiTaskModelConfig, MultiTaskOutput
    from .modeling.tartan import TartanModel
    from .modeling.teacher import MetaLMTeacher, MetaLMTeacherConfig, MetaLMTokens, add_meta_lm_tokens
    from .sampling import MultiTaskDataset, TaskBatchSampler
    from .tasks import TASK_KINDS, TaskSpec, load_mixture, load_task_splits
    from .trainers.amos import AmosConfig, AmosTrainer
    from .trainers.meta_lm import MetaLMCollator, MetaLMConfig, MetaLMTrainer
    from .trainers.muppet import MuppetConfig, MuppetTrainer
    from .trainers.tartan import TartanConfig, TartanTrainer
