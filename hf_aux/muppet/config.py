"""`MuppetConfig`: the training arguments of `MuppetTrainer` (MUPPET, Aghajanyan et al., 2021).

Kept apart from the trainer, as trl pairs `xxx_config.py` with `xxx_trainer.py`, so that `hf-aux muppet --help`
lists these flags without importing Trainer."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runtime.config import AuxConfig
from .batches import STRATEGIES
from ..errors import UserInputError
from ..tartan.config import MetaWeightingArguments

ROBUST_MODES = ("none", "r3f", "r4f")
TASK_WEIGHTINGS = ("uniform", "meta")


@dataclass
class MuppetConfig(MetaWeightingArguments, AuxConfig):
    """Training arguments of `MuppetTrainer`; every `TrainingArguments` field applies. Sub-batches per update =
    `gradient_accumulation_steps` x number of processes, each of `per_device_train_batch_size` rows of one task; its
    default accumulation is 2 (not Trainer's 1), so that heterogeneous batches (at least 2 sub-batches per update)
    hold on one process as they are. With `task_weighting="meta"`, the META rule's settings (`task_weight_lr`,
    `meta_head_*`, `meta_batch_size`: `hf_aux.tartan.config.MetaWeightingArguments`) apply too."""

    gradient_accumulation_steps: int = field(default=2, metadata={
        "help": "Task-homogeneous sub-batches per update on each process (heterogeneous batches need at least 2 in "
                "all, over the processes). Default 2, so MUPPET's own batching holds on one process."})

    batching: str = field(default="heterogeneous", metadata={
        "help": "How sub-batches form updates: 'heterogeneous' (several tasks per update, MUPPET §3.2), "
                "'batch_homogeneous' (one task per update; the few left-over batches pooled) or 'dataset_homogeneous' (one task after another); §5.2."})
    task_sampling_temperature: float = field(default=1.0, metadata={
        "help": "Batches per task proportional to size ** (1 / T). 1 = natural sizes (the paper's choice, §3.4); "
                "larger values move towards uniform."})
    max_tokens_per_batch: int | None = field(default=None, metadata={
        "help": "Token-budget sub-batches (fairseq's --max-tokens): each task's rows sorted into length buckets and "
                "cut into sub-batches of at most this many padded tokens (rows x longest row x choices); "
                "per_device_train_batch_size is then the most rows a sub-batch holds, and an update is the mean "
                "over its rows. Default: fixed per_device_train_batch_size rows."})
    loss_scaling: bool = field(default=True, metadata={
        "help": "Divide each data point's loss by log n(i), n = number of predictions it ranges over (eq. 1). "
                "Switch off for the ablation."})
    robust_finetuning: str = field(default="none", metadata={
        "help": "'none', 'r3f' (symmetric-KL noise regulariser) or 'r4f' (R3F + spectrally normalised "
                "task heads; build the model with spectral_norm_heads=True)."})
    r3f_eps: float = field(default=1e-5, metadata={
        "help": "R3F noise scale: U(-eps, eps) on the input embeddings for classification, choice and span heads; "
                "N(0, eps^2) for seq2seq."})
    r3f_lambda: float = field(default=1.0, metadata={"help": "Weight of the R3F symmetric KL term."})
    label_smoothing_factor: float = field(default=0.1, metadata={
        "help": "Label smoothing of the seq2seq tasks' cross entropy (Table 2: label-smoothed CE; 0.1 is the value "
                "of fairseq's BART summarisation recipe). The only smoothing setting; other task kinds use plain CE."})
    generation_max_length: int = field(default=64, metadata={
        "help": "Longest greedy output when evaluating seq2seq tasks with ROUGE."})
    task_weighting: str = field(default="uniform", metadata={
        "help": "'uniform': every sub-batch weighs the same (MUPPET, eq. 1). 'meta': end-task-aware pre-finetuning: "
                "each task's sub-batches are weighted by K x alpha_k (K tasks), alpha = softmax(w) meta-learned with "
                "the META-TARTAN rule toward an end task given to the trainer (the command's --end_task)."})
    meta_tasks_per_step: int = field(default=8, metadata={
        "help": "task_weighting=meta: at most this many mixture tasks (drawn afresh at each weight update) get their "
                "gradient taken and their weight moved per update; one extra forward+backward per task, so this "
                "bounds the cost whatever the mixture's size."})
    task_weight_update_steps: int = field(default=1, metadata={
        "help": "task_weighting=meta: update the task weights every this many optimizer steps (1: every step)."})
    remove_unused_columns: bool = field(default=False, metadata={
        "help": "Kept False: the multi-task collator needs each row's task_name."})

    def __post_init__(self):
        super().__post_init__()
        for name, allowed in (("batching", STRATEGIES), ("robust_finetuning", ROBUST_MODES),
                              ("task_weighting", TASK_WEIGHTINGS)):
            if getattr(self, name) not in allowed:
                raise UserInputError(f"MuppetConfig: field '{name}': {getattr(self, name)!r} is not one of "
                                     f"{list(allowed)}")
        if not self.task_sampling_temperature > 0:
            raise UserInputError(f"MuppetConfig: field 'task_sampling_temperature': must be > 0, got "
                                 f"{self.task_sampling_temperature}")
        budget = self.max_tokens_per_batch
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise UserInputError(f"MuppetConfig: field 'max_tokens_per_batch': needs a positive integer, got "
                                 f"{budget!r}")
        for name in ("r3f_eps", "r3f_lambda"):
            if not getattr(self, name) >= 0:
                raise UserInputError(f"MuppetConfig: field '{name}': must be >= 0, got {getattr(self, name)}")
        if self.generation_max_length < 1:
            raise UserInputError(f"MuppetConfig: field 'generation_max_length': must be >= 1, got "
                                 f"{self.generation_max_length}")
        for name in ("meta_tasks_per_step", "task_weight_update_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserInputError(f"MuppetConfig: field '{name}': needs a positive integer, got {value!r}")
        self.check_meta_weighting("MuppetConfig", active=self.task_weighting == "meta")
        if self.remove_unused_columns:
            raise UserInputError("MuppetConfig: field 'remove_unused_columns': must stay False (rows carry task_name)")
