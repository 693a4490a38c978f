"""`TokenSafeTrainingArguments`: plain `TrainingArguments` with hf_aux's Hub-token safety and run settings, for
commands that train with a plain `Trainer` (hf-aux finetune). Its own module, so that hf_aux.hub and
hf_aux.run_guard do not import each other."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import TrainingArguments

from .hub import HubTokenSafeArgsMixin
from .run_guard import RunArgsMixin


@dataclass
class TokenSafeTrainingArguments(HubTokenSafeArgsMixin, RunArgsMixin, TrainingArguments):
    """Plain `TrainingArguments` whose pickles (training_args.bin) never hold `hub_token`, with hf_aux's run
    settings (`RunArgsMixin`: overwrite_output_dir, on_nonfinite): for commands that train with a plain `Trainer`
    (hf-aux finetune)."""
