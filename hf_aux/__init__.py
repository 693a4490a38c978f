"""hf_aux: Hugging Face Trainer subclasses for training language encoders with auxiliary objectives."""

__version__ = "0.1.0"

from ._versions import check_versions

check_versions()

from .adapters import LoraArguments  # noqa: E402
from .data import (  # noqa: E402
    MLMCollator,
    MultiTaskCollator,
    TokenizedTask,
    group_texts_for_mlm,
    mask_tokens_for_mlm,
    tokenize_task,
)
from .hub import (  # noqa: E402
    HubDownloadError,
    HubPushError,
    HubTokenSafeArgsMixin,
    TokenSafeTrainingArguments,
    create_hub_repo,
    explain_hub_errors,
    push_folder_to_hub,
    push_trainer_output,
)
from .metrics import (  # noqa: E402
    PRIMARY_METRIC,
    classification_metrics,
    compute_task_metrics,
    majority_baseline,
    multiple_choice_metrics,
    postprocess_qa_predictions,
    qa_metrics,
    regression_metrics,
    rouge_metrics,
)
from .model_card import TaskSummary, render_model_card  # noqa: E402
from .modeling.amos import AmosGenerator, AmosGeneratorConfig, AmosModel, AmosModelConfig  # noqa: E402
from .modeling.multitask import MultiTaskConfig, MultiTaskModel, MultiTaskOutput  # noqa: E402
from .modeling.tartan import TartanModel  # noqa: E402
from .modeling.teacher import MetaLMTeacher, MetaLMTeacherConfig, MetaLMTokens, add_meta_lm_tokens  # noqa: E402
from .sampling import MultiTaskDataset, TaskBatchSampler  # noqa: E402
from .tasks import TASK_KINDS, TaskSpec, load_mixture, load_task_splits  # noqa: E402
from .trainers.amos import AmosConfig, AmosTrainer  # noqa: E402
from .trainers.meta_lm import MetaLMCollator, MetaLMConfig, MetaLMTrainer  # noqa: E402
from .trainers.muppet import MuppetConfig, MuppetTrainer  # noqa: E402
from .trainers.tartan import TartanConfig, TartanTrainer  # noqa: E402

# The demo data (hf_aux.demo: demo_task, demo_mixture, demo_unlabelled_text, DEMO_TASK_NAMES) needs the `demo`
# extra at call time; import it from hf_aux.demo.

__all__ = [
    "AmosConfig",
    "AmosGenerator",
    "AmosGeneratorConfig",
    "AmosModel",
    "AmosModelConfig",
    "AmosTrainer",
    "HubDownloadError",
    "HubPushError",
    "HubTokenSafeArgsMixin",
    "LoraArguments",
    "MLMCollator",
    "MetaLMCollator",
    "MetaLMConfig",
    "MetaLMTeacher",
    "MetaLMTeacherConfig",
    "MetaLMTokens",
    "MetaLMTrainer",
    "MultiTaskCollator",
    "MultiTaskConfig",
    "MultiTaskDataset",
    "MultiTaskModel",
    "MultiTaskOutput",
    "MuppetConfig",
    "MuppetTrainer",
    "PRIMARY_METRIC",
    "TASK_KINDS",
    "TartanConfig",
    "TartanModel",
    "TartanTrainer",
    "TaskBatchSampler",
    "TaskSpec",
    "TaskSummary",
    "TokenSafeTrainingArguments",
    "TokenizedTask",
    "add_meta_lm_tokens",
    "classification_metrics",
    "compute_task_metrics",
    "create_hub_repo",
    "explain_hub_errors",
    "group_texts_for_mlm",
    "load_mixture",
    "load_task_splits",
    "majority_baseline",
    "mask_tokens_for_mlm",
    "multiple_choice_metrics",
    "postprocess_qa_predictions",
    "push_folder_to_hub",
    "push_trainer_output",
    "qa_metrics",
    "regression_metrics",
    "render_model_card",
    "rouge_metrics",
    "tokenize_task",
    "__version__",
]
