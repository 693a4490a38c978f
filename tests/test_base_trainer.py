"""hf_aux.runtime.trainer.AuxTrainer's protocol, on a toy model of two parts: what a new method's model and trainer
rely on (saving and loading every part, trainer state in checkpoints, deferred Hub pushes, the non-finite check
before any model is written)."""

import json
import os

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Trainer

from hf_aux import AuxTrainer, TokenSafeTrainingArguments
from hf_aux.runtime.nonfinite import NonFiniteGuard, NonFiniteTrainingError


class TwoParts(nn.Module):
    """A model of two parts saved as two files (not a PreTrainedModel Trainer could save)."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(2, 2), nn.Linear(2, 1)

    def forward(self, x, labels):
        return {"loss": ((self.second(torch.tanh(self.first(x))).squeeze(-1) - labels) ** 2).mean()}

    def save_pretrained(self, folder):
        os.makedirs(folder, exist_ok=True)
        save_file(self.first.state_dict(), os.path.join(folder, "first.safetensors"))
        save_file(self.second.state_dict(), os.path.join(folder, "second.safetensors"))

    def load_checkpoint(self, folder, load_standard=None):
        self.first.load_state_dict(load_file(os.path.join(folder, "first.safetensors")))
        self.second.load_state_dict(load_file(os.path.join(folder, "second.safetensors")))


class CountingTrainer(AuxTrainer):
    """Keeps a counter of its own in every checkpoint and restores it on resume."""

    _watch_model_loss = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.counter, self.restored_from = 0, None

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.counter += 1
        return super().training_step(model, inputs, num_items_in_batch)

    def _save_checkpoint_extras(self, checkpoint_folder):
        with open(os.path.join(checkpoint_folder, "counter.json"), "w") as handle:
            json.dump({"counter": self.counter}, handle)

    def _save_model_extras(self, output_dir):
        with open(os.path.join(output_dir, "extra.txt"), "w") as handle:
            handle.write("beside every saved model")

    def _load_checkpoint_extras(self, checkpoint_folder):
        with open(os.path.join(checkpoint_folder, "counter.json")) as handle:
            self.counter = json.load(handle)["counter"]
        self.restored_from = checkpoint_folder


def make(tmp_path, steps=4, trainer_class=CountingTrainer, defer_hub_pushes=False, **overrides):
    torch.manual_seed(0)
    rows = [{"x": [float(i), 1.0 - i], "labels": float(i % 2)} for i in range(8)]
    args = TokenSafeTrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=steps, learning_rate=0.05,
        report_to="none", save_strategy="steps", save_steps=2, disable_tqdm=True, seed=0, use_cpu=True,
        logging_steps=100, **overrides)
    return trainer_class(model=TwoParts(), args=args, train_dataset=Dataset.from_list(rows).with_format("torch"),
                         defer_hub_pushes=defer_hub_pushes)


def test_every_part_and_the_trainer_state_are_saved_and_restored_on_resume(tmp_path):
    trainer = make(tmp_path)
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert {"first.safetensors", "second.safetensors", "counter.json", "extra.txt", "training_args.bin"} <= {
        p.name for p in checkpoint.iterdir()}
    assert json.loads((checkpoint / "counter.json").read_text()) == {"counter": 2}
    final = {k: v.clone() for k, v in trainer.model.state_dict().items()}

    resumed = make(tmp_path)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.restored_from == str(checkpoint) and resumed.counter == 4  # 2 restored + 2 trained
    for name, value in resumed.model.state_dict().items():  # both parts restored: the same run as uninterrupted
        torch.testing.assert_close(value, final[name], rtol=0, atol=1e-6)
    assert torch.load(checkpoint / "training_args.bin", weights_only=False).hub_token is None


def test_hub_pushes_wait_while_deferred_and_are_trainer_s_own_otherwise(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(Trainer, "push_to_hub", lambda self, *a, **k: calls.append("push_to_hub"))
    monkeypatch.setattr(Trainer, "_push_from_checkpoint", lambda self, folder: calls.append("checkpoint"))
    import hf_aux.runtime.trainer

    monkeypatch.setattr(hf_aux.runtime.trainer, "push_checkpoint", lambda trainer, folder: calls.append("hf_aux"))
    trainer = make(tmp_path)
    trainer.push_to_hub()
    trainer._push_from_checkpoint(str(tmp_path))
    assert calls == ["push_to_hub", "checkpoint"]  # library use: Trainer's own pushes
    trainer = make(tmp_path, defer_hub_pushes=True)  # what the hf-aux commands build
    assert trainer.push_to_hub() is None
    trainer._push_from_checkpoint(str(tmp_path))
    assert calls == ["push_to_hub", "checkpoint", "hf_aux"]  # deferred; checkpoints through hf_aux's checked push
    assert "push_to_hub" not in vars(trainer) and "_push_from_checkpoint" not in vars(trainer)  # no patching


def test_the_run_guard_refuses_a_pushing_run_whose_trainer_would_push_itself(tmp_path):
    from hf_aux.runtime.run_guard import guard_output_dir

    trainer = make(tmp_path)
    run = guard_output_dir(trainer.args)
    trainer.args.push_to_hub = True  # (set after construction: Trainer would create the repository, offline here)
    with pytest.raises(TypeError, match="defer_hub_pushes=True"):
        run.attach(trainer)
    run.release()


def test_no_model_holding_nan_is_written(tmp_path):
    trainer = make(tmp_path)
    guard = next(c for c in trainer.callback_handler.callbacks if isinstance(c, NonFiniteGuard))
    assert not guard.watch_model_loss  # the subclass said it checks its own losses
    assert make(tmp_path, trainer_class=AuxTrainer)._nonfinite_guard.watch_model_loss  # the base alone watches
    trainer.state.global_step = 3  # as after three updates, the last check at step 0
    with torch.no_grad():
        trainer.model.second.bias.fill_(float("nan"))
    with pytest.raises(NonFiniteTrainingError, match=r"after optimizer step 3 \(finite after step 0: the update of "
                                                     r"one of steps 1-3 made them so\)"):
        trainer.save_model(str(tmp_path / "final"))
    assert not (tmp_path / "final" / "second.safetensors").exists()


def test_unwrapped_asks_accelerate_once_per_wrapper(tmp_path):
    """AuxTrainer.unwrapped: accelerate's unwrap_model's answer, asked once per wrapper object (it looks up
    installed packages on every call; the trainers need the plain module every sub-batch)."""
    trainer = make(tmp_path)
    calls = []
    real = trainer.accelerator.unwrap_model
    trainer.accelerator.unwrap_model = lambda model, **kw: calls.append(model) or real(model, **kw)
    wrapper = torch.nn.parallel.DistributedDataParallel.__new__(torch.nn.parallel.DistributedDataParallel)
    torch.nn.Module.__init__(wrapper)
    wrapper.module = trainer.model
    for _ in range(3):
        assert trainer.unwrapped() is trainer.model
        assert trainer.unwrapped(wrapper) is trainer.model
    assert calls == [trainer.model, wrapper]
