"""The base of every hf_aux training configuration (the idea of trl's `_BaseConfig`).

`AuxConfig` (earlier `TokenSafeTrainingArguments`) is `TrainingArguments` plus what every hf_aux run shares: a Hub
token that is never pickled (`HubTokenSafeArgsMixin`), run_glue's `overwrite_output_dir` and the `on_nonfinite` policy
(`RunArgsMixin`). Each method's config (`MuppetConfig`, `AmosConfig`, ...) subclasses it and adds its method's
settings; `hf-aux finetune` uses it as it is.

`RUN_CONTROL_FIELDS` is the one declared set of arguments that control a run without changing what it trains
(where it writes, how it logs and saves, whether it pushes): the run guard leaves them out of the configuration it
records (a run resumed with other values of these is the same run), and the model card leaves them out of the
training hyper-parameters it lists.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field, fields

from transformers import TrainingArguments

from .cpu_malloc import CPU_MALLOC_CHOICES
from .nonfinite import NonFiniteArgsMixin
from ..errors import UserInputError

# arguments that do not change what a run trains (and may differ between a run and its resumption); none of them
# is a training hyper-parameter
RUN_CONTROL_FIELDS = {
    "output_dir", "logging_dir", "overwrite_output_dir", "resume_from_checkpoint", "do_eval", "do_predict",
    "push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo", "hub_always_push",
    "hub_revision", "report_to", "disable_tqdm", "log_level", "log_level_replica", "logging_strategy",
    "logging_steps", "logging_first_step", "logging_nan_inf_filter", "per_device_eval_batch_size",
    "eval_strategy", "eval_steps", "eval_delay", "eval_accumulation_steps", "eval_on_start", "save_total_limit",
    "save_steps", "save_strategy", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
    "dataloader_prefetch_factor", "token", "cache_dir", "max_eval_samples", "max_predict_samples", "run_name",
    "project", "trackio_space_id", "preprocessing_num_workers", "on_nonfinite", "merge_lora", "cpu_malloc",
    "local_rank", "ddp_timeout", "log_on_each_node",  # the number of processes is recorded as "processes" instead
    "license", "license_name",  # the model card's
    "do_train", "use_cpu", "accelerator_config",  # the actions and the machine, not the training
}


class HubTokenSafeArgsMixin:
    """Mixin for `TrainingArguments` subclasses: fields ending in `_token` (`hub_token`) are never pickled.

    Put it first among the bases::

        @dataclass
        class MuppetConfig(HubTokenSafeArgsMixin, TrainingArguments):
            ...

    `torch.save(args)` (Trainer's `training_args.bin`, in the final folder and in every checkpoint) then stores
    `hub_token=None`; the live object keeps its token, and so do `copy.copy`/`copy.deepcopy` of it (Trainer's
    hyper-parameter search copies the arguments and pushes with the copy). An unpickled copy has no token: it pushes
    with the stored login (`hf auth login`) or `HF_TOKEN`, like arguments given no `--hub_token`.
    """

    def __getstate__(self) -> dict:
        return {name: (None if name.endswith("_token") else value) for name, value in self.__dict__.items()}

    def __copy__(self):
        clone = self.__class__.__new__(self.__class__)
        clone.__dict__.update(self.__dict__)
        return clone

    def __deepcopy__(self, memo: dict):
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone


# torch.compile's modes (Trainer passes `torch_compile_mode` to torch.compile with `torch_compile_backend`, inductor
# by default); reduce-overhead and max-autotune capture CUDA graphs on a GPU (on a CPU they compile as default does)
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass
class RunArgsMixin(NonFiniteArgsMixin):
    """hf_aux's run settings, mixed into every hf_aux `TrainingArguments` subclass (before TrainingArguments
    among the bases): `overwrite_output_dir` (run_glue's flag, which transformers 5 dropped), `on_nonfinite` and
    `cpu_malloc`."""

    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Replace a finished or interrupted run of another configuration in output_dir (its checkpoints "
                "are removed). Without it such a folder is refused, and the same configuration resumes."})
    cpu_malloc: str = field(default="keep", metadata={
        "help": "On a CPU run with glibc's malloc: 'keep' freed memory for reuse (buffers up to 32 MB from the "
                "heap, no heap trimming below 2 GiB free; the process keeps its peak memory, as a GPU's caching "
                "allocator does), or leave malloc as the 'system' set it. Nothing changes under tcmalloc/jemalloc "
                "or the user's own MALLOC_* settings (hf_aux.runtime.cpu_malloc).",
        "choices": list(CPU_MALLOC_CHOICES)})

    def __post_init__(self):
        super().__post_init__()
        for setting in fields(RunArgsMixin):  # each run setting that declares its choices (on_nonfinite, cpu_malloc)
            choices, value = setting.metadata.get("choices"), getattr(self, setting.name)
            if choices is not None and value not in choices:
                raise UserInputError(f"{type(self).__name__}: field '{setting.name}': {value!r} is not one of "
                                     f"{list(choices)}")
        check_report_to(self)
        self._check_torch_compile_mode()

    def cuda_graph_refusal(self) -> str | None:
        """Why this configuration's step cannot be captured as CUDA graphs (`torch_compile_mode` reduce-overhead or
        max-autotune), or None: a method's config overrides it where its step allows no capture."""
        return None

    def _check_torch_compile_mode(self) -> None:
        """`--torch_compile_mode` (which also turns `torch_compile` on) with the inductor backend, the only one that
        takes a mode; a CUDA-graph mode only where the step allows it (`cuda_graph_refusal`)."""
        mode = self.torch_compile_mode
        if mode is None:
            return
        field_is = f"{type(self).__name__}: field 'torch_compile_mode' (--torch_compile_mode): {mode!r}"
        if mode not in TORCH_COMPILE_MODES:
            raise UserInputError(f"{field_is} is not one of torch.compile's modes {list(TORCH_COMPILE_MODES)}")
        if self.torch_compile_backend not in (None, "inductor"):
            raise UserInputError(f"{field_is} needs the inductor backend; --torch_compile_backend "
                                 f"{self.torch_compile_backend} takes no mode")
        reason = self.cuda_graph_refusal() if mode in CUDA_GRAPH_MODES else None
        if reason:
            raise UserInputError(f"{field_is} captures CUDA graphs, which {reason}; use --torch_compile_mode default "
                                 "or max-autotune-no-cudagraphs")


# What each --report_to integration of Trainer needs installed (every one of the modules; a tuple inside: any of
# them), and how to install it (hf_aux's extra where it has one). transformers' own checks
# (`transformers.integrations.is_*_available`) are the same find_spec look-ups, made only once Trainer builds its
# callbacks, after the data and model are loaded; kubeflow needs an environment variable, not a package.
REPORT_TO_PACKAGES = {
    "tensorboard": ((("tensorboard", "tensorboardX"),), "pip install 'hf_aux[tensorboard]' (in a clone of hf_aux: "
                                                        "pip install '.[tensorboard]')"),
    "wandb": (("wandb",), "pip install wandb"),
    "comet_ml": (("comet_ml",), "pip install comet_ml"),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "neptune": (("neptune",), "pip install neptune"),
    "clearml": (("clearml",), "pip install clearml"),
    "codecarbon": (("codecarbon",), "pip install codecarbon"),
    "dagshub": (("dagshub", "mlflow"), "pip install dagshub mlflow"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "trackio": (("trackio",), "pip install trackio"),
    "azure_ml": (("azureml.core",), "pip install azureml-core"),
    "flyte": (("flytekit", "flytekitplugins.deck"), "pip install flytekit flytekitplugins-deck-standard"),
}


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing (azureml for azureml.core)
        return False


def check_report_to(args) -> None:
    """Refuse, before anything is loaded, a `report_to` integration Trainer does not know or whose package is
    missing, in one line with the install command (Trainer would fail only once the data and model are built, with
    a traceback). `all` reports to the installed ones, as in Trainer."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    reports = args.report_to if isinstance(args.report_to, (list, tuple)) else [args.report_to]
    for report in reports:
        if report in ("none", "all", None):
            continue
        if report not in INTEGRATION_TO_CALLBACK:
            from ..tasks.validation import did_you_mean

            raise UserInputError(f"{type(args).__name__}: field 'report_to': {report!r} is not an integration "
                                 f"Trainer knows{did_you_mean(report, INTEGRATION_TO_CALLBACK)} (none, all, "
                                 f"{', '.join(INTEGRATION_TO_CALLBACK)})")
        modules, install = REPORT_TO_PACKAGES.get(report, ((), None))
        missing = [m if isinstance(m, str) else m[0] for m in modules
                   if not any(_installed(name) for name in ((m,) if isinstance(m, str) else m))]
        if missing:
            several = len(missing) > 1
            raise UserInputError(f"{type(args).__name__}: field 'report_to': {report} needs the "
                                 f"{' and '.join(missing)} package{'s' if several else ''}, which "
                                 f"{'are' if several else 'is'} not installed: {install}, or pass --report_to none")


@dataclass
class AuxConfig(HubTokenSafeArgsMixin, RunArgsMixin, TrainingArguments):
    """The config that pairs with `AuxTrainer`: `TrainingArguments` whose pickles (training_args.bin) never hold
    `hub_token`, with hf_aux's run settings (`RunArgsMixin`: overwrite_output_dir, on_nonfinite, cpu_malloc); the
    base of every method's config, and the config of `hf-aux finetune` and `hf-aux compare`."""


TokenSafeTrainingArguments = AuxConfig  # its earlier name, still exported and documented (docs/hub.md)


def field_default(spec: dataclasses.Field):
    """A dataclass field's default value (its `default_factory`'s product), or `dataclasses.MISSING`."""
    if spec.default is dataclasses.MISSING and spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


# Base TrainingArguments fields always shown in a card; every field a method's config adds is shown too, and any
# other base field only when it differs from its default; never the run-control fields (RUN_CONTROL_FIELDS above), which
# describe the machine, paths, logging or the Hub rather than the training.
KEY_TRAINING_FIELDS = (
    "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "warmup_steps", "weight_decay", "optim", "max_grad_norm", "seed", "bf16", "fp16",
)


def hyperparameters_from_args(args) -> dict:
    """The training hyper-parameters of a `TrainingArguments` (sub)class instance, for a card, without any token.

    Every field the subclass adds (the method's settings), the usual optimisation fields, and any other base field
    set away from its default. Values come from `args.to_dict()`, which already masks `*_token` fields; those are
    dropped here altogether.
    """
    # Compared with the dataclass defaults. Never build a TrainingArguments here: its __post_init__ resets
    # accelerate's global state, which breaks a Trainer that is running (Trainer.save_model writes the card
    # mid-run when pushing). __post_init__ turns some empty defaults into other empties (debug "" -> []).
    values = args.to_dict()
    base_fields = {f.name: f for f in dataclasses.fields(TrainingArguments) if f.init}
    chosen = {}
    for name, value in values.items():
        if name.endswith("_token") or name in RUN_CONTROL_FIELDS:
            continue
        if name not in base_fields or name in KEY_TRAINING_FIELDS:
            chosen[name] = value
            continue
        default = field_default(base_fields[name])
        default = getattr(default, "value", default)  # enums compare by value, as to_dict() gives them
        empty = (None, "", [], {})
        if value != default and not (value in empty and default in empty):
            chosen[name] = value
    return chosen
