"""`TartanConfig`: the training arguments of `TartanTrainer` (TARTAN, Dery et al., 2022).

Kept apart from the trainer, as trl pairs `xxx_config.py` with `xxx_trainer.py`, so that `hf-aux tartan --help`
lists these flags without importing Trainer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..runtime.config import AuxConfig
from ..errors import UserInputError


@dataclass
class MetaWeightingArguments:
    """The META rule's settings (hf_aux.tartan.weighting), mixed into `TartanConfig` and into `MuppetConfig` for
    its --task_weighting meta (before TrainingArguments)."""

    task_weight_lr: float = field(default=0.1, metadata={"help": "eta, the task-weight step size of Algorithm 1 "
                                                                   "(the paper searches 1e-1, 5e-2, 3e-2, 1e-2)."})
    meta_head_steps: int = field(default=10, metadata={"help": "Adam steps fitting phi* on frozen body features "
                                                                 "per meta step (§4: 10)."})
    meta_head_lr: float = field(default=1e-3, metadata={"help": "Learning rate of the phi* fit (§4: 1e-3)."})
    meta_head_weight_decay: float = field(default=0.1, metadata={"help": "L2 weight decay of the phi* fit (§4: 0.1)."})
    meta_batch_size: int | None = field(default=None, metadata={
        "help": "Batch size of the end-task batches giving g_meta (default: per_device_train_batch_size; with "
                "MUPPET's --max_tokens_per_batch, the mixture's mean rows per sub-batch)."})

    def check_meta_weighting(self, owner: str, active: bool) -> None:
        """Range checks of the fields above; with `active` (the META rule runs), the precision and checkpointing
        settings it cannot use are refused."""
        if not 0.0 < self.task_weight_lr <= 10.0:
            raise UserInputError(f"{owner}: field 'task_weight_lr': {self.task_weight_lr} not in (0, 10]")
        if not isinstance(self.meta_head_steps, int) or self.meta_head_steps < 1:
            raise UserInputError(f"{owner}: field 'meta_head_steps': needs a positive integer, got "
                                 f"{self.meta_head_steps!r}")
        if not self.meta_head_lr > 0:
            raise UserInputError(f"{owner}: field 'meta_head_lr': must be positive, got {self.meta_head_lr}")
        if self.meta_head_weight_decay < 0:
            raise UserInputError(f"{owner}: field 'meta_head_weight_decay': must be >= 0, got "
                                 f"{self.meta_head_weight_decay}")
        if self.meta_batch_size is not None and (not isinstance(self.meta_batch_size, int) or self.meta_batch_size < 1):
            raise UserInputError(f"{owner}: field 'meta_batch_size': needs a positive integer, got "
                                 f"{self.meta_batch_size!r}")
        if not active:
            return
        if self.fp16:
            raise UserInputError(f"{owner}: field 'fp16': the META rule takes per-task gradients with autograd.grad, "
                                 "which a GradScaler cannot scale; use bf16 or fp32")
        checkpointing = self.activation_checkpointing_kwargs
        if self.activation_checkpointing and isinstance(checkpointing, dict) \
                and checkpointing.get("use_reentrant", False):
            raise UserInputError(f"{owner}: field 'gradient_checkpointing_kwargs': the META rule takes per-task "
                                 "gradients with torch.autograd.grad, which reentrant checkpointing does not support; "
                                 "use {'use_reentrant': False}")


@dataclass
class TartanConfig(MetaWeightingArguments, AuxConfig):
    """Training arguments of `TartanTrainer`: every `TrainingArguments` field, the META rule's
    (`MetaWeightingArguments`) and the method's own."""

    mode: str = field(default="meta", metadata={"help": "'mt': MT-TARTAN, fixed task weights (eq. 3). 'meta': "
                                                         "META-TARTAN, meta-learned task weights (Algorithm 1)."})
    task_weights: list[float] | None = field(
        default=None,
        metadata={"help": "Initial task weights w, end task first, then the auxiliary tasks in the model's order. "
                          "mt: the fixed mixing weights (normalised to sum to 1). meta: the initial w before the "
                          "softmax. Default: uniform 1/(number of auxiliary tasks + 1) (§4)."})
    meta_head: str = field(default="separate", metadata={
        "help": "'separate': cosines through a freshly fitted meta head phi* (§3.3, eq. 7). 'same': through the "
                "end-task head phi' itself (eq. 6; reproduces §5.4/Fig. 3, where w* rails towards 1)."})
    meta_head_fresh_batch: bool = field(default=False, metadata={
        "help": "Fit phi* on a separately drawn end-task train batch (one extra body forward without gradient) "
                "instead of the features of the step's own end-task batch."})
    auxiliary_batch_size: int | None = field(default=None, metadata={
        "help": "Batch size of each auxiliary MLM task (default: per_device_train_batch_size)."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked in auxiliary MLM batches."})
    end_task_head_learning_rate: float | None = field(default=None, metadata={
        "help": "Peak learning rate of the end-task head phi' (its own optimizer group, same schedule). §4 searches "
                "{1e-3, 1e-4, 1e-5} for it; the authors' scripts train it at 1e-3 with the body at 1e-4. Default: "
                "learning_rate."})
    mlm_head_warmup_steps: int = field(default=0, metadata={
        "help": "Steps fitting the auxiliary MLM heads on the frozen body before joint training (0: off). For a body "
                "that ships no MLM head (e.g. a sentence encoder), whose fresh heads start at ~ln(vocabulary) with "
                "body gradients that swamp the end task's. Runs once, before the first step (not again on resume)."})
    mlm_head_warmup_lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate of the MLM head warm-up."})

    def __post_init__(self):
        super().__post_init__()
        if self.mode not in ("mt", "meta"):
            raise UserInputError(f"TartanConfig: field 'mode': expected 'mt' or 'meta', got {self.mode!r}")
        if self.meta_head not in ("separate", "same"):
            raise UserInputError("TartanConfig: field 'meta_head': expected 'separate' or 'same', got "
                                 f"{self.meta_head!r}")
        self.check_meta_weighting("TartanConfig", active=self.mode == "meta")
        size = self.auxiliary_batch_size
        if size is not None and (not isinstance(size, int) or size < 1):
            raise UserInputError(f"TartanConfig: field 'auxiliary_batch_size': needs a positive integer, got {size!r}")
        if not isinstance(self.mlm_head_warmup_steps, int) or self.mlm_head_warmup_steps < 0:
            raise UserInputError("TartanConfig: field 'mlm_head_warmup_steps': needs an integer >= 0, got "
                                 f"{self.mlm_head_warmup_steps!r}")
        if self.end_task_head_learning_rate is not None and not self.end_task_head_learning_rate > 0:
            raise UserInputError("TartanConfig: field 'end_task_head_learning_rate': must be positive, got "
                                 f"{self.end_task_head_learning_rate}")
        if not self.mlm_head_warmup_lr > 0:
            raise UserInputError(f"TartanConfig: field 'mlm_head_warmup_lr': must be positive, got "
                                 f"{self.mlm_head_warmup_lr}")
        if not 0.0 < self.mlm_probability < 1.0:
            raise UserInputError(f"TartanConfig: field 'mlm_probability': {self.mlm_probability} not in (0, 1)")
        if self.task_weights is not None:
            weights = [float(w) for w in self.task_weights]
            if not weights or not all(math.isfinite(w) for w in weights):
                raise UserInputError("TartanConfig: field 'task_weights': needs finite numbers, got "
                                     f"{self.task_weights!r}")
            if self.mode == "mt" and (min(weights) < 0 or sum(weights) <= 0):
                raise UserInputError("TartanConfig: field 'task_weights': MT-TARTAN weights must be >= 0 with a "
                                     f"positive sum, got {weights}")
            self.task_weights = weights
