"""Old module paths, kept working for one release after each move (CHANGELOG.md lists them): importing one warns
(DeprecationWarning) and hands over the module at its new path, the very same module object, so every name, and
every pickle that names the old path (a checkpoint's training_args.bin), resolves as before. One table, read by an
import hook that `hf_aux/__init__.py` installs, instead of a file per old path."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

REMOVED_IN = "0.3"

# old path -> new path, both under hf_aux
MOVED = {
    "adapters": "runtime.adapters",
    "arrow_encoding": "tasks.arrow_encoding",
    "base_config": "runtime.config",
    "base_trainer": "runtime.trainer",
    "cli.amos": "amos.command",
    "cli.command": "__main__",
    "cli.finetune": "finetune.command",
    "cli.meta_lm": "meta_lm.command",
    "cli.muppet": "muppet.command",
    "cli.tartan": "tartan.command",
    "column_checks": "tasks.column_checks",
    "cpu_malloc": "runtime.cpu_malloc",
    "data": "tasks.data",
    "demo": "tasks.demo",
    "distributed": "runtime.distributed",
    "functional_optim": "meta_lm.functional_optim",
    "hub": "runtime.hub",
    "hub_licenses": "cards.licenses",
    "lora_settings": "runtime.lora_settings",
    "losses.amos": "amos.losses",
    "losses.meta_lm": "meta_lm.losses",
    "losses.muppet": "muppet.losses",
    "losses.tartan": "tartan.losses",
    "meta_lm.sampling": "meta_lm.support_query",
    "metrics": "tasks.metrics",
    "model_card": "cards.model_card",
    "modeling.amos": "amos.model",
    "modeling.tartan": "tartan.model",
    "modeling.teacher": "meta_lm.teacher",
    "nonfinite": "runtime.nonfinite",
    "plots": "cards.plots",
    "probe": "amos.probe",
    "run_guard": "runtime.run_guard",
    "sampling": "tasks.batches",
    "sentence_transformers_files": "modeling.sentence_transformers_files",
    "streaming": "tasks.streaming",
    "task_preprocessing": "tasks.preprocessing",
    "task_registry": "tasks.registry",
    "task_spec": "tasks.spec",
    "task_weighting": "tartan.weighting",
    "tensor_ops": "runtime.tensor_ops",
    "trainers.amos": "amos.trainer",
    "trainers.amos_config": "amos.config",
    "trainers.meta_lm": "meta_lm.trainer",
    "trainers.meta_lm_config": "meta_lm.config",
    "trainers.muppet": "muppet.trainer",
    "trainers.muppet_config": "muppet.config",
    "trainers.tartan": "tartan.trainer",
    "trainers.tartan_config": "tartan.config",
    "training_args": "runtime.config",
    "training_metrics": "runtime.training_metrics",
    "two_moons": "meta_lm.two_moons",
    "validation": "tasks.validation",
}
OLD_PACKAGES = {"trainers", "losses"}  # folders that only held moved modules

# names that left a module that stays (issue #62): module -> {name: its new module}; the module's `__getattr__`
# hands each over through `moved_name`, with the same warning
MOVED_NAMES = {
    "tasks.batches": dict.fromkeys(
        ["STRATEGIES", "MultiTaskDataset", "TaskBatchSampler", "TokenBudget", "batch_counts", "bucket_edges",
         "padded_share", "row_lengths"], "muppet.batches"),
    "tasks.streaming": dict.fromkeys(["consumed_examples", "load_stream_state", "save_stream_state"],
                                     "runtime.trainer"),
    "cards.model_card": {"ModelCardMixin": "runtime.trainer", "KEY_TRAINING_FIELDS": "runtime.config",
                         "hyperparameters_from_args": "runtime.config"},
    "runtime.tensor_ops": dict.fromkeys(["host_side", "in_host_side"], "tasks.batches"),
    "cli.parser": dict.fromkeys(["drop_implied_evaluation", "evaluation_implied"], "runtime.run_guard"),
}


def moved_name(module: str, name: str):
    """`module`'s attribute `name` where it moved (MOVED_NAMES), with a DeprecationWarning; AttributeError else."""
    new = MOVED_NAMES.get(module[len("hf_aux."):], {}).get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} moved to hf_aux.{new}; the old path works until hf_aux {REMOVED_IN}",
                  DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(f"hf_aux.{new}"), name)


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        name = fullname[len("hf_aux."):] if fullname.startswith("hf_aux.") else None
        if name in MOVED or name in OLD_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=name in OLD_PACKAGES)
        return None

    def create_module(self, spec):
        return None  # a blank module; exec_module puts the moved one in its place

    def exec_module(self, module):
        name = module.__name__[len("hf_aux."):]
        if name in OLD_PACKAGES:
            module.__path__ = []
            return
        new = f"hf_aux.{MOVED[name]}"
        warnings.warn(f"{module.__name__} moved to {new}; the old path works until hf_aux {REMOVED_IN}",
                      DeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = importlib.import_module(new)


def install_old_paths() -> None:
    """Let the old paths import (once per process)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())  # before an editable install's finder of another checkout
