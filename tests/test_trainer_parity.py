"""AuxTrainer given arguments that are not hf_aux's behaves as transformers' Trainer (issue #62): on NaN/Inf losses
it trains on and `logging_nan_inf_filter` keeps them out of the logged loss, as Trainer's own logging test checks,
and its callbacks are Trainer's. hf_aux's own configs keep the non-finite guard on by default, and
`on_nonfinite="continue"` selects Trainer's behaviour there too."""

import math

import pytest
import torch
from datasets import Dataset
from torch import nn
from transformers import Seq2SeqTrainingArguments, Trainer, TrainingArguments

from hf_aux import AuxConfig, AuxTrainer
from hf_aux.runtime.nonfinite import NonFiniteGuard, NonFiniteTrainingError

POISON = {3: float("nan"), 6: float("inf")}  # row -> what its loss becomes (batch size 1: row k is step k + 1)


class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, x, labels, poison):
        loss = ((self.linear(x).squeeze(-1) - labels) ** 2).mean()
        return {"loss": loss + poison.sum()}  # + 0, or NaN / Inf on the poisoned rows


class UsersArguments(TrainingArguments):
    """A user's own subclass: not one of hf_aux's configs."""


def rows():
    return Dataset.from_list([{"x": [float(i), 1.0 - i], "labels": float(i % 2), "poison": POISON.get(i, 0.0)}
                              for i in range(10)]).with_format("torch")


def train(trainer_class, args_class, tmp_path, **overrides):
    torch.manual_seed(0)
    args = args_class(output_dir=str(tmp_path / trainer_class.__name__), per_device_train_batch_size=1, max_steps=10,
                      learning_rate=0.05, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
                      use_cpu=True, seed=0, **overrides)
    trainer = trainer_class(model=Regression(), args=args, train_dataset=rows())
    trainer.train()
    return trainer


def logged(trainer) -> list[dict]:
    keys = ("step", "loss", "grad_norm", "learning_rate")
    return [{k: repr(entry[k]) for k in keys if k in entry} for entry in trainer.state.log_history if "loss" in entry]


def losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def callbacks(trainer) -> list[str]:
    return [type(callback).__name__ for callback in trainer.callback_handler.callbacks]


@pytest.mark.parametrize("args_class", [TrainingArguments, Seq2SeqTrainingArguments, UsersArguments])
@pytest.mark.parametrize("nan_inf_filter", [True, False])
def test_arguments_not_hf_aux_s_train_through_nan_and_inf_as_trainer_does(tmp_path, args_class, nan_inf_filter):
    theirs = train(Trainer, args_class, tmp_path, logging_nan_inf_filter=nan_inf_filter)
    ours = train(AuxTrainer, args_class, tmp_path, logging_nan_inf_filter=nan_inf_filter)
    assert ours.state.global_step == theirs.state.global_step == 10  # no stop at the NaN of step 4
    assert logged(ours) == logged(theirs)  # every logged loss, gradient norm and learning rate, NaN/Inf alike
    assert callbacks(ours) == callbacks(theirs) and "NonFiniteGuard" not in callbacks(ours)
    for mine, trainers in zip(ours.model.parameters(), theirs.model.parameters()):
        torch.testing.assert_close(mine, trainers, rtol=0, atol=0, equal_nan=True)
    found = [x for x in losses(ours) if not math.isfinite(x)]
    if nan_inf_filter:  # Trainer's logging test: the filter keeps NaN/Inf out of the logged loss
        assert found == []
    else:
        assert found  # unfiltered, the poisoned steps' NaN/Inf is what Trainer logs


def test_hf_aux_s_configs_stop_by_default_and_continue_is_trainer_s_behaviour(tmp_path):
    with pytest.raises(NonFiniteTrainingError, match="non-finite"):
        train(AuxTrainer, AuxConfig, tmp_path)  # the guard, on by default (docs/command_line.md)
    guarded = AuxTrainer(model=Regression(), args=AuxConfig(output_dir=str(tmp_path / "g"), report_to="none"))
    assert any(isinstance(callback, NonFiniteGuard) for callback in guarded.callback_handler.callbacks)

    theirs = train(Trainer, TrainingArguments, tmp_path)
    ours = train(AuxTrainer, AuxConfig, tmp_path, on_nonfinite="continue")
    assert logged(ours) == logged(theirs) and "NonFiniteGuard" not in callbacks(ours)
    assert ours._nonfinite_guard is None
    ours.save_model(str(tmp_path / "saved"))  # Trainer's way: no check before the model is written either
    assert (tmp_path / "saved" / "model.safetensors").is_file()
