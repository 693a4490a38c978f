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
- **The model card** (`ModelCardMixin` below; `hf_aux.cards` renders it), **CPU memory reuse** (`cpu_malloc`)
  and **the non-finite guard** (`hf_aux.runtime.nonfinite`; `_watch_model_loss`: the model's own loss is checked
  where no method trainer checks named loss parts).

The private Trainer methods overridden (`_save`, `_save_checkpoint`, `_load_from_checkpoint`, `_load_best_model`,
`_push_from_checkpoint`) have no public hook: none saves or loads a model's weights, writes into a checkpoint
before it is complete, or pushes a checkpoint (nor restores the random state: the stream calls `_load_rng_state`)."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os

import torch
from transformers import PreTrainedModel, Trainer
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .cpu_malloc import apply_setting as apply_cpu_malloc
from .hub import push_checkpoint
from ..cards.model_card import (LOSS_CURVE_PNG, TaskSummary, base_model_license, body_pipeline_tag, card_base_model,
                                card_model_id, has_sentence_transformers_files, render_declared_card, trainer_hub_id)
from ..cards.plots import plot_loss_curves
from .config import hyperparameters_from_args
from ..registry import Method
from .nonfinite import install_nonfinite_guard
from ..tasks.streaming import STATE_FILE, ResumableStream

logger = logging.getLogger(__name__)


def _as_list(value) -> list:
    """A card argument given as one string or a list of them (Trainer.push_to_hub passes either)."""
    return [value] if isinstance(value, str) else list(value or [])


def _with_configs(tasks: list[TaskSummary], datasets: list[str], configs) -> list[TaskSummary]:
    """`tasks` with the configuration `configs` gives their Hub dataset (one per dataset of `datasets`, in order,
    None for one without), where the task does not name one itself."""
    by_dataset = {name: config for name, config in zip(datasets, _as_list(configs)) if config}
    return [dataclasses.replace(task, dataset_config=by_dataset[task.dataset])
            if task.dataset_config is None and task.dataset in by_dataset else task for task in tasks]


class ModelCardMixin:
    """The one `create_model_card` of hf_aux's trainers (`AuxTrainer` has it: trl's place for the card).

    A trainer names its method's record as the class attribute `_method` (`hf_aux.registry.Method`: the method's
    name in the card's prose, its paper, its template in model_cards/, its Hub tags), and declares what loads its
    checkpoint: `_auto_class` / `_hf_aux_class`. It supplies only what a run adds: `_card_tasks` (the
    `TaskSummary` list, from the log history or `create_model_card`'s extra keyword arguments), `_card_figures`
    (PNGs it draws into the output folder, file -> caption), and `_card_details` for anything else the card says
    (notes, adapter, another auto class, extra tags). Writes README.md in `args.output_dir` on the main process;
    Trainer.push_to_hub calls it too."""

    _method: Method | None = None
    _auto_class: str = "AutoModel"
    _hf_aux_class: str | None = None
    _pipeline_tag: str | None = "feature-extraction"  # an encoder body at the top level (body_pipeline_tag)

    def create_model_card(self, language=None, license=None, tags=None, model_name=None,  # noqa: A002
                          finetuned_from=None, tasks=None, dataset_tags=None, dataset=None, dataset_args=None,
                          license_name=None, **kwargs):
        """`finetuned_from`: the checkpoint the run started from (its Hub id becomes `base_model`);
        `dataset_tags`: Hub dataset ids of the training data; `tags`: extra Hub tags; `model_name`: the card's
        name (default: the output folder's); `dataset_args`: the configuration of each of `dataset_tags` (as for
        Trainer's card), named in the model-index; `license`: default, the one the base model states;
        `license_name`: the name of an `other` licence. Other keyword arguments go to the trainer's `_card_tasks`."""
        if getattr(self, "_method", None) is None:  # the base trainer used as it is: Trainer's own card
            return super().create_model_card(language=language, license=license, tags=tags, model_name=model_name,
                                             finetuned_from=finetuned_from, tasks=tasks, dataset_tags=dataset_tags,
                                             dataset=dataset, dataset_args=dataset_args, **kwargs)
        if not self.is_world_process_zero():
            return
        output_dir = self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        datasets = _as_list(dataset_tags)
        pipeline_tag = (body_pipeline_tag(output_dir) if self._pipeline_tag == "feature-extraction"
                        else self._pipeline_tag)
        details = {"auto_class": self._auto_class, "hf_aux_class": self._hf_aux_class, "extra_tags": [],
                   "pipeline_tag": pipeline_tag, **self._card_details()}
        started_from = self._card_base_model(finetuned_from)
        model_id, model_id_note = card_model_id(output_dir, trainer_hub_id(self))
        card = render_declared_card(
            template_file=self._method.card_template, name=self._method.card_name, tag_names=self._method.tags,
            paper=self._method.paper,
            model_name=model_name or os.path.basename(os.path.abspath(output_dir)),
            model_id=model_id, model_id_note=model_id_note, base_model=card_base_model(started_from),
            sentence_transformers=has_sentence_transformers_files(output_dir),
            datasets=datasets, tasks=_with_configs(self._card_tasks(datasets, **kwargs), datasets, dataset_args),
            hyperparameters=hyperparameters_from_args(self.args), figures=self._card_figures(output_dir),
            license=license or base_model_license(started_from), license_name=license_name if license else None,
            language=language or "en",
            tags=[*_as_list(tags), *details.pop("extra_tags")],
            **details)
        card.save(os.path.join(output_dir, "README.md"))

    def _card_tasks(self, datasets: list[str], **kwargs) -> list[TaskSummary]:
        raise NotImplementedError(f"{type(self).__name__} must say which tasks its card lists (_card_tasks)")

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        return {}

    def _card_details(self) -> dict:
        """Keyword arguments of `render_declared_card` this run adds (notes, adapter, ...); `extra_tags` come
        after the user's tags."""
        return {}

    def _card_base_model(self, finetuned_from: str | None) -> str | None:
        """What the run started from (None: from scratch); `card_base_model` turns it into a Hub id."""
        return finetuned_from

    def _loss_curve_figure(self, output_dir: str, title: str, caption: str,
                           exclude_prefixes: tuple = (), same_scale: bool = False) -> dict[str, str]:
        """loss_curve.png from the log history, as {file: caption}; {} while nothing loss-like was logged. The
        training objective and the evaluation loss share an axis only when `same_scale` (`plot_loss_curves`)."""
        try:
            plot_loss_curves(self.state.log_history, os.path.join(output_dir, LOSS_CURVE_PNG), title=title,
                             exclude_prefixes=exclude_prefixes, same_scale=same_scale)
        except ValueError:  # nothing logged yet
            return {}
        return {LOSS_CURVE_PNG: caption}


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
        if self._nonfinite_guard is not None:  # None: on_nonfinite 'continue' (Trainer's own way, no guard)
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


# ---- a streamed corpus's position in each checkpoint (hf_aux.tasks.streaming.ResumableStream) ----------------------
def consumed_examples(trainer) -> int:
    """Examples of the stream that the trainer's completed optimizer steps consumed: per step, the accumulated
    micro-batches of every process (the main process reads them all and dispatches them)."""
    args = trainer.args
    return trainer.state.global_step * args.gradient_accumulation_steps * trainer._train_batch_size * args.world_size


def save_stream_state(trainer, checkpoint_folder: str) -> None:
    """Into a checkpoint: the stream's position after the blocks its optimizer steps consumed (nothing for data
    that is not a `ResumableStream`)."""
    if isinstance(trainer.train_dataset, ResumableStream):
        state = trainer.train_dataset.state_at(consumed_examples(trainer))
        with open(os.path.join(checkpoint_folder, STATE_FILE), "w", encoding="utf-8") as handle:
            json.dump(state, handle)


def load_stream_state(trainer, checkpoint_folder: str) -> None:
    """On resume: the stream continues after the blocks the checkpoint's steps consumed. A checkpoint without the
    position (written without --streaming) is an error naming the flag."""
    if not isinstance(trainer.train_dataset, ResumableStream):
        return
    path = os.path.join(checkpoint_folder, STATE_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"resume_from_checkpoint: {checkpoint_folder!r} holds no {STATE_FILE} (it was not written "
                         "by a --streaming run), so the stream's position is unknown; resume without --streaming")
    with open(path, encoding="utf-8") as handle:
        trainer.train_dataset.load_state_dict(json.load(handle))
