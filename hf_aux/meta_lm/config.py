"""`MetaLMConfig`: the training arguments of `MetaLMTrainer` (the meta-learned LM objective).

Kept apart from the trainer, as trl pairs `xxx_config.py` with `xxx_trainer.py`, so that `hf-aux meta-lm --help`
lists these flags without importing Trainer."""

from __future__ import annotations

from dataclasses import dataclass, field


from ..runtime.config import AuxConfig
from ..errors import UserInputError

OBJECTIVES = ("mlm", "hard", "soft")


@dataclass
class MetaLMConfig(AuxConfig):
    """Settings of the meta-learned LM objective. Defaults follow the paper's Tables 5/8 where they are
    optimisation settings (AdamW betas (0.9, 0.98), eps 1e-6, weight decay 0.01, clipping 5.0, inverse
    square-root schedule with linear warmup); `learning_rate` is the PEAK rate (the paper's lr/sqrt(warmup))."""

    objective: str = field(default="soft", metadata={"help": "'soft' (soft labels, §3.3), 'hard' (hard labels, "
                                                              "§3.2) or 'mlm' (plain MLM baseline, teacher unused)."})
    lambda_meta: float | None = field(default=None, metadata={
        "help": "Weight of the meta loss in the teacher's loss (§3.4). Default: 1.0 for hard, 10.0 for soft."})
    inner_learning_rate: float = field(default=0.1, metadata={"help": "SGD learning rate of the finetuning step "
                                                                      "(eq. 2)."})
    first_order: bool = field(default=False, metadata={
        "help": "Soft labels, first order (eq. 7): the query gradient at theta_2 stands for dL/dtheta_1 (no "
                "differentiation through the finetuning step's gradient), and its effect on the soft labels through "
                "the pretraining step (eq. 1) is a directional derivative by a forward difference: one more forward "
                "and backward of the pseudo step instead of a double backward (losses.first_order_soft_label_grads)."})
    first_order_radius: float = field(default=1e-3, metadata={
        "help": "first_order: the norm of the parameter shift of the forward difference (e * ||w||)."})
    finetune_step: bool = field(default=True, metadata={
        "help": "False drops eq. 2: the query loss is taken at theta_1 (Meta Pseudo Labels form, App. B item 5)."})
    fixed_y: bool = field(default=False, metadata={
        "help": "Fix y-hat to the unlabelled text; the teacher only generates x-hat (App. B item 2)."})
    teacher_aux_losses: bool = field(default=True, metadata={
        "help": "Train the teacher on (x_m, x_u) given x_u and (x_m, y_m) given x_m as well (§3.4)."})
    mlm_task_probability: float | None = field(default=None, metadata={
        "help": "Probability that a support/query pair is an MLM task on unlabelled text instead of a labelled "
                "task (§4.1). Default: 0.5 for soft labels, 0.0 for hard labels (Table 5)."})
    samples_per_task: int | None = field(default=None, metadata={
        "help": "Labelled examples drawn in a row from one task before another task is drawn (§4.1); a multiple "
                "of per_device_train_batch_size. Default: the batch size (one task per meta step)."})
    teacher_gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "Meta steps (each with its own student step) whose teacher gradients are accumulated before the "
                "teacher's optimizer steps (§4.1). The student's own gradient_accumulation_steps must stay 1."})
    mlm_probability: float = field(default=0.15, metadata={"help": "MLM mask probability (Table 5)."})
    mask_replace_prob: float = field(default=0.8, metadata={"help": "Share of chosen tokens replaced by [MASK]."})
    random_replace_prob: float = field(default=0.1, metadata={"help": "Share of chosen tokens replaced by a "
                                                                      "random token."})
    h_cosine: bool | None = field(default=None, metadata={
        "help": "Hard labels: h as a cosine (eq. 8) or dot product (eq. 7). Default: cosine for AdamW, dot for SGD."})
    # optimisation defaults of the paper (Tables 5 and 8)
    lr_scheduler_type: str = field(default="inverse_sqrt", metadata={"help": "Learning-rate schedule (§4.1)."})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW beta2 (Table 5)."})
    adam_epsilon: float = field(default=1e-6, metadata={"help": "AdamW epsilon (Table 5)."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (Table 5)."})
    max_grad_norm: float = field(default=5.0, metadata={"help": "Gradient clipping, both networks (Table 5)."})

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise UserInputError(f"MetaLMConfig: field 'objective': {self.objective!r} is not one of {OBJECTIVES}")
        if self.lambda_meta is None:
            self.lambda_meta = 10.0 if self.objective == "soft" else 1.0
        if self.lambda_meta < 0:
            raise UserInputError(f"MetaLMConfig: field 'lambda_meta': {self.lambda_meta} < 0")
        if self.first_order_radius <= 0:
            raise UserInputError(f"MetaLMConfig: field 'first_order_radius': {self.first_order_radius} <= 0")
        if self.inner_learning_rate <= 0:
            raise UserInputError(f"MetaLMConfig: field 'inner_learning_rate': {self.inner_learning_rate} <= 0")
        if self.mlm_task_probability is None:
            self.mlm_task_probability = 0.5 if self.objective == "soft" else 0.0
        if not 0.0 <= self.mlm_task_probability <= 1.0:
            raise UserInputError(f"MetaLMConfig: field 'mlm_task_probability': {self.mlm_task_probability} not in [0, "
                                 "1]")
        if self.teacher_gradient_accumulation_steps < 1:
            raise UserInputError("MetaLMConfig: field 'teacher_gradient_accumulation_steps': must be >= 1")
        if not 0.0 < self.mlm_probability < 1.0:
            raise UserInputError(f"MetaLMConfig: field 'mlm_probability': {self.mlm_probability} not in (0, 1)")
        if not (0 <= self.mask_replace_prob and 0 <= self.random_replace_prob
                and self.mask_replace_prob + self.random_replace_prob <= 1):
            raise UserInputError("MetaLMConfig: fields 'mask_replace_prob', 'random_replace_prob': must be >= 0 and "
                                 "sum to at most 1")
        super().__post_init__()
        if self.samples_per_task is None:
            self.samples_per_task = self.per_device_train_batch_size
        if self.samples_per_task < 1 or self.samples_per_task % self.per_device_train_batch_size:
            raise UserInputError(f"MetaLMConfig: field 'samples_per_task': {self.samples_per_task} is not a positive "
                                 f"multiple of per_device_train_batch_size ({self.per_device_train_batch_size}); "
                                 "support and query batches must each come from one task")
        if self.objective != "mlm" and self.gradient_accumulation_steps != 1:
            raise UserInputError("MetaLMConfig: field 'gradient_accumulation_steps': must be 1 for the meta "
                                 "objectives, every meta step needs its own student step (theta_1); accumulate the "
                                 "teacher's gradients with 'teacher_gradient_accumulation_steps' (§4.1)")
        if self.objective != "mlm" and self.fp16:
            raise UserInputError("MetaLMConfig: field 'fp16': GradScaler cannot scale meta-gradients; use fp32 (or "
                                 "bf16 for hard labels)")
        if self.objective == "soft" and self.bf16:
            raise UserInputError("MetaLMConfig: field 'bf16': soft labels differentiate through the student's steps "
                                 "and need fp32")
        if self.objective == "soft" and not self.first_order and self.torch_compile:
            raise UserInputError("MetaLMConfig: field 'torch_compile': torch.compile has no double backward (second-"
                                 "order soft labels); first_order=True has none and compiles")
