"""The base of every hf_aux trainer (the idea of trl's `_BaseTrainer`): what all methods share, written once.

`AuxTrainer` is a `transformers.Trainer` with:

- **Models of several parts** (a body plus heads, a discriminator plus its generator): a model writes every part
  with `save_pretrained(folder)` and, if it defines `load_checkpoint(folder, load_standard)`, restores them on
  resume and for `load_best_model_at_end` (`load_standard(folder)` is Trainer's own loading of model.safetensors).
  A trainer with state of its own adds `_save_model_extras(folder)`, `_save_checkpoint_extras(folder)` (before
  trainer_state.json, which marks a checkpoint complete) and `_load_checkpoint_extras(folder)`. A streamed corpus
  (`hf_aux.tasks.streaming.ResumableStream`) has its position saved in every checkpoint and restored on resume.
- **Hub pushes**: with `defer_hub_pushes` (the `hf-aux` commands push once, at the end, through
  `hf_aux.runtime.hub.push_trainer_output`), `push_to_hub` only logs and checkpoint pushes go through the
  token-checked `hf_aux.runtime.hub.push_checkpoint`; unset, Trainer's own pushes run.
- **The model card** (`hf_aux.cards.model_card.ModelCardMixin`), **CPU memory reuse** (`hf_aux.runtime.cpu_malloc`,
  `cpu_malloc` 'keep' or 'system') and **the non-finite guard** (`hf_aux.runtime.nonfinite`; `_watch_model_loss`
  checks the model's own loss where no method trainer checks named loss parts).

The private Trainer methods overridden (`_save`, `_save_checkpoint`, `_load_from_checkpoint`, `_load_best_model`,
`_push_from_checkpoint`) have no public hook: none saves or loads a model's weights, writes into a checkpoint
before it is complete, or pushes a checkpoint (nor restores the random state: the stream calls `_load_rng_state`)."""

from __future__ import annotations

import copy
import logging
import os

import torch
from transformers import PreTrainedModel, Trainer
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .cpu_malloc import apply_setting as apply_cpu_malloc
from .hub import push_checkpoint
from ..cards.model_card import ModelCardMixin
from .nonfinite import install_nonfinite_guard
from ..tasks.streaming import ResumableStream, load_stream_state, save_stream_state

logger = logging.getLogger(__name__)


class AuxTrainer(ModelCardMixin, Trainer):
    """`Trainer` with hf_aux's shared behaviour (module docstring); every method's trainer subclasses it, and
    `hf-aux finetune` trains with it as it is."""

    _watch_model_loss = True

    def __init__(self, *args, defer_hub_pushes: bool = False, **kwargs):
        """`defer_hub_pushes`: Trainer's own pushes become hf_aux's token-checked ones; the hf-aux commands pass
        `--push_to_hub` here and push the output folder once, at the end (module docstring, "Hub pushes")."""
        self.defer_hub_pushes = defer_hub_pushes
        super().__init__(*args, **kwargs)
        self._nonfinite_guard = install_nonfinite_guard(self, watch_model_loss=self._watch_model_loss)
        # on CPU, glibc's malloc keeps what a step frees for the next step (hf_aux.runtime.cpu_malloc)
        apply_cpu_malloc(getattr(self.args, "cpu_malloc", "keep"), self.args.device.type)
        self._rng_checkpoint = None  # a streamed run's checkpoint whose random state waits for the first batches
        if isinstance(self.train_dataset, ResumableStream):
            # a streamed corpus resumes at its saved position (hf_aux.tasks.streaming); Trainer's skipping of the seen
            # batches would read the stream again from its start and mask them with the restored random state
            self.args.ignore_data_skip = True

    def unwrapped(self, model=None):
        """`self.accelerator.unwrap_model(model)` (default: the trainer's model), remembered per wrapper object: the
        trainers need the plain module every sub-batch, and accelerate's unwrap looks up installed packages on each
        call, a cost per sub-batch (docs/scaling.md)."""
        model = self.model if model is None else model
        cache = self.__dict__.setdefault("_unwrapped_by_id", {})
        found = cache.get(id(model))
        if found is None or found[0] is not model:
            found = cache[id(model)] = (model, self.accelerator.unwrap_model(model))
        return found[1]

    # ---- saving ------------------------------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        model = self.unwrapped(self.model)
        # every model written (checkpoints and the final one) is seen finite first: the guard's check of the
        # parameters since its last one (a pass and a host sync only when steps were trained since)
        self._nonfinite_guard.check_parameters(model, self.state.global_step, self.args)
        if _saves_itself(model):  # not a model Trainer saves with save_pretrained (e.g. TartanModel)
            if self.args.should_save:
                os.makedirs(output_dir, exist_ok=True)
                model.save_pretrained(output_dir)
                if self.processing_class is not None:
                    self.processing_class.save_pretrained(output_dir)
                safe_args = copy.copy(self.args)
                safe_args.hub_token = None  # never pickle a token into training_args.bin
                torch.save(safe_args, os.path.join(output_dir, TRAINING_ARGS_NAME))
        else:
            super()._save(output_dir, state_dict)
        if self.args.should_save:
            self._save_model_extras(output_dir)

    def _save_checkpoint(self, model, trial) -> None:
        if self.args.should_save and not self.args.save_only_model:
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            self._save_checkpoint_extras(folder)
            save_stream_state(self, folder)
        super()._save_checkpoint(model, trial)

    def _save_model_extras(self, output_dir: str) -> None:
        """Beside every saved model (checkpoints and the final folder), main process only: what else the trainer
        keeps with it."""

    def _save_checkpoint_extras(self, checkpoint_folder: str) -> None:
        """Into a checkpoint folder before trainer_state.json is written, main process only, unless
        `save_only_model`: trainer state that is tensors rather than JSON (a second optimizer, say)."""

    # ---- loading -------------------------------------------------------------------------------------------------
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        self._load_model_parts(resume_from_checkpoint, model)
        self._load_checkpoint_extras(resume_from_checkpoint)
        load_stream_state(self, resume_from_checkpoint)
        if isinstance(self.train_dataset, ResumableStream):
            self._rng_checkpoint = resume_from_checkpoint

    def get_batch_samples(self, epoch_iterator, num_batches: int, device):
        """A resumed stream (no skipping): Trainer restored the checkpoint's random state before it created the data
        loader's iterator, which drew from it (torch's base seed), so the resumed steps' dropout would differ from
        the uninterrupted run's. The state is restored again once the first batches are fetched, where Trainer
        itself restores it when it skips seen batches."""
        batches = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self._rng_checkpoint is not None:
            checkpoint, self._rng_checkpoint = self._rng_checkpoint, None
            self._load_rng_state(checkpoint)
        return batches

    def _load_best_model(self) -> None:
        if getattr(self.unwrapped(self.model), "load_checkpoint", None) is None:
            super()._load_best_model()
        else:
            self._load_model_parts(self.state.best_model_checkpoint)

    def _load_model_parts(self, folder: str, model=None) -> None:
        """Every part of the model from `folder`: its `load_checkpoint` when it has one, else Trainer's loading."""
        unwrapped = self.unwrapped(model if model is not None else self.model)
        load_checkpoint = getattr(unwrapped, "load_checkpoint", None)
        if load_checkpoint is None:
            super()._load_from_checkpoint(folder, model)
            return
        load_checkpoint(folder, lambda path: super(AuxTrainer, self)._load_from_checkpoint(path, model))

    def _load_checkpoint_extras(self, checkpoint_folder: str) -> None:
        """On resume, after the model: what `_save_model_extras` / `_save_checkpoint_extras` wrote."""

    # ---- Hub -----------------------------------------------------------------------------------------------------
    def push_to_hub(self, *args, **kwargs):
        if self.defer_hub_pushes:
            logger.info("Trainer.push_to_hub deferred: hf_aux pushes the output folder at the end of the run")
            return None
        return super().push_to_hub(*args, **kwargs)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        if self.defer_hub_pushes:
            push_checkpoint(self, checkpoint_folder)
        else:
            super()._push_from_checkpoint(checkpoint_folder)


def _saves_itself(model) -> bool:
    """A model with its own `save_pretrained` that Trainer would save as a bare state dict (not a
    `PreTrainedModel`, not a peft model)."""
    return (hasattr(model, "save_pretrained") and not isinstance(model, PreTrainedModel)
            and getattr(model, "peft_config", None) is None)
