"""`AmosConfig`: the training arguments of `AmosTrainer` (AMOS, Meng et al., 2022).

Kept apart from the trainer, as trl pairs `xxx_config.py` with `xxx_trainer.py`, so that `hf-aux amos --help`
lists these flags without importing Trainer."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runtime.config import AuxConfig
from ..errors import UserInputError

MIXTURE_CHOICES = ("adversarial", "uniform", "random_layer", "layer_switch", "fixed_weights")


@dataclass
class AmosConfig(AuxConfig):
    """Method settings for AmosTrainer; optimiser defaults follow the paper's Table 5 (Adam beta2 0.98, eps 1e-6,
    clip norm 2.0, peak learning rate 5e-4)."""

    rtd_weight: float = field(default=50.0, metadata={
        "help": "lambda of eq. 4: weight of the discriminator (RTD) loss against the summed MLM losses "
                "(Appendix B: 50)."})
    gumbel_temperature: float = field(default=0.3, metadata={
        "help": "tau of the Gumbel-Softmax used to back-propagate the discriminator's gradient into the mixture "
                "(Appendix B: 0.3)."})
    mixture: str = field(default="adversarial", metadata={
        "help": "How the MLM heads are combined to sample replacements: 'adversarial' (AMOS, eq. 3 with reversed "
                "gradient), 'uniform' (Table 2 '- adv. train'), 'random_layer' (one head per masked position), "
                "'layer_switch' (shallow to deep head at equal fractions of training: 1/3 and 2/3 for 3 heads), "
                "'fixed_weights' (Table 8 'w. final mix weights': the heads mixed with --mixture_weights all the "
                "way, no adversarial training).",
        "choices": list(MIXTURE_CHOICES)})
    mixture_weights: list[float] | None = field(default=None, metadata={
        "help": "With --mixture fixed_weights: one weight per MLM head, shallowest first, >= 0 (normalised to sum "
                "to 1), e.g. the final mixture_weight/layer_<d> an AMOS run logged."})
    adv_mlm_multiplier: float = field(default=0.0, metadata={
        "help": "Table 2 '+ adv. MLM': when > 0, the reversed discriminator gradient also reaches the MLM "
                "embeddings h, multiplied by this (paper: 0.1). 0 keeps the paper's AMOS."})
    rtd_per_head_eval: bool = field(default=True, metadata={
        "help": "On evaluation, also replace the masked tokens with each MLM head's samples alone (same masks) and "
                "log the discriminator's AUC and replaced-token accuracy on them (eval_rtd_auc/layer_<d>); costs "
                "one more forward per head and evaluation batch."})
    mlm_probability: float = field(default=0.15, metadata={
        "help": "Share of tokens masked for the generator when batches arrive unmasked (§3.1: 0.15)."})
    learning_rate: float = field(default=5e-4, metadata={
        "help": "Peak learning rate (Table 5: 5e-4, pretraining from scratch). hf-aux amos continuing a pretrained "
                "encoder (--encoder_name_or_path) defaults to 2e-5 instead (docs/amos.md)."})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (Table 5: 0.98)."})
    adam_epsilon: float = field(default=1e-6, metadata={"help": "Adam epsilon (Table 5: 1e-6)."})
    max_grad_norm: float = field(default=2.0, metadata={"help": "Gradient clipping norm (Table 5: 2.0)."})

    def __post_init__(self):
        super().__post_init__()
        for name in ("rtd_weight", "gumbel_temperature"):
            if not getattr(self, name) > 0:
                raise UserInputError(f"AmosConfig: field '{name}': {getattr(self, name)} must be > 0")
        if self.mixture not in MIXTURE_CHOICES:
            raise UserInputError(f"AmosConfig: field 'mixture': {self.mixture!r} is not one of {MIXTURE_CHOICES}")
        if self.mixture == "fixed_weights":
            weights = self.mixture_weights or []
            if not weights or any(not w >= 0 for w in weights) or not sum(weights) > 0:
                raise UserInputError(f"AmosConfig: field 'mixture_weights': {self.mixture_weights} must be one weight "
                                     ">= 0 per MLM head, not all 0, with mixture='fixed_weights'")
            self.mixture_weights = [w / sum(weights) for w in weights]
        elif self.mixture_weights is not None:
            raise UserInputError(f"AmosConfig: field 'mixture_weights': given, but mixture is {self.mixture!r}; it is "
                                 "read only with mixture='fixed_weights'")
        if not 0.0 < self.mlm_probability < 1.0:
            raise UserInputError(f"AmosConfig: field 'mlm_probability': {self.mlm_probability} is not in (0, 1)")
        if self.adv_mlm_multiplier < 0:
            raise UserInputError(f"AmosConfig: field 'adv_mlm_multiplier': {self.adv_mlm_multiplier} must be >= 0")
