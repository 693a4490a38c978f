"""hf_aux: Hugging Face Trainer subclasses for training language encoders with auxiliary objectives."""

__version__ = "0.1.0"

from ._versions import check_versions

check_versions()

from .data import (  # noqa: E402
    MLMCollator,
    MultiTaskCollator,
    TokenizedTask,
    group_texts_for_mlm,
    mask_tokens_for_mlm,
    tokenize_task,
)
from .modeling.multitask import MultiTaskConfig, MultiTaskModel, MultiTaskOutput  # noqa: E402
from .tasks import TASK_KINDS, TaskSpec, load_mixture, load_task_splits  # noqa: E402

__all__ = [
    "TASK_KINDS",
    "MLMCollator",
    "MultiTaskCollator",
    "MultiTaskConfig",
    "MultiTaskModel",
    "MultiTaskOutput",
    "TaskSpec",
    "TokenizedTask",
    "group_texts_for_mlm",
    "load_mixture",
    "load_task_splits",
    "mask_tokens_for_mlm",
    "tokenize_task",
    "__version__",
]
