"""MUPPET pre-finetuning as a `transformers.Trainer` (Aghajanyan et al., 2021, arXiv 2101.11038).

What one optimizer update does (§3):
- it averages the gradients of `gradient_accumulation_steps * world_size` task-homogeneous sub-batches (one per
  micro-step per rank), drawn so that an update spans several tasks (§3.2, "heterogeneous batches"), tasks in
  proportion to their size (§3.4); `hf_aux.muppet.batches.TaskBatchSampler` orders them, and §5.2's ablations
  (batch- and dataset-homogeneous) are `batching=...`.
- each sub-batch's loss is its task's Table-2 loss per data point divided by log n(i) (eq. 1,
  `hf_aux.muppet.losses`), averaged over the sub-batch; the update is exactly the mean over its sub-batches, each
  weighing the same whatever its task or token count (`loss_is_scaled_for_ga = False`; the token count
  `num_items_in_batch` is unused: it would let long seq2seq targets dominate).
- optionally R3F/R4F (§3.2): + lambda * symmetric KL between predictions on clean and noise-perturbed input
  embeddings (training only); R4F also spectrally normalises the heads (`MultiTaskModelConfig.spectral_norm_heads`).
LoRA (`peft_config=LoraConfig(...)`: the body's adapters and every head train, checkpoints hold those), the per-task
logs (`loss/<task>`, `scaled_loss/<task>`) and `evaluate()` (every task by its own metrics): docs/muppet.md.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..tasks import metrics as task_metrics
from ..runtime.adapters import merged_subfolder
from ..tasks.data import MultiTaskCollator
from ..runtime.distributed import MicroBatchCounter, micro_batch_seed, parameter_sharding, seeded_rng
from . import METHOD
from .config import MuppetConfig
from .losses import (classification_loss, multiple_choice_loss, r3f_divergence, regression_loss,
                     sample_embedding_noise, scale_losses, seq2seq_loss, span_loss, token_classification_loss)
from ..runtime.tensor_ops import to_device_nonblocking
from ..runtime.trainer import AuxTrainer
from ..cards.model_card import TaskSummary
from ..modeling.multitask import ClassificationHead, MultiTaskModel
from ..modeling.pooling import describe_pooling
from ..runtime.nonfinite import check_finite_loss
from ..tasks.spec import TaskSpec
from .batches import MultiTaskDataset, TaskBatchSampler, row_lengths
from ..tasks.batches import BatchStream, host_side
from ..tartan.weighting import (TaskWeightsCallback, all_reduce_mean, distributed, find_task_weights, fit_meta_head,
                                meta_update, plot_task_weights, restore_task_weights, task_mixture)
from ..runtime.training_metrics import MetricAccumulator

TASK_WEIGHTS_JSON = "task_weights.json"
TASK_WEIGHTS_PNG = "task_weights.png"
TARGET_KEYS = ("labels", "start_positions", "end_positions")


class TaskSamplerState(TrainerCallback, ExportableState):
    """The task sampler's description (task sizes, batch size, sub-batches per update, strategy, temperature, seed,
    epoch), saved in trainer_state.json (`stateful_callbacks`) with every checkpoint: a resume checks that it
    samples the same way, since Trainer skips the batches already trained on by count."""

    def __init__(self):
        self.sampler: TaskBatchSampler | None = None  # set by MuppetTrainer.get_train_dataloader
        self.description: dict | None = None

    def state(self) -> dict:
        description = self.sampler.state_dict() if self.sampler is not None else self.description
        return {"args": {}, "attributes": {"description": description}}


class MuppetTrainer(AuxTrainer):
    """Pre-finetunes a `MultiTaskModel` on several tasks at once.

    train_dataset / eval_dataset: {task name: tokenised split} (rows from `hf_aux.tasks.data.tokenize_task`), every name
    one of the model's tasks. eval_examples: {task name: raw split}, needed for extractive-QA tasks (their eval
    split must be tokenised with `keep_qa_offsets=True`) to map spans back to text.
    peft_config: a `peft.LoraConfig` to train LoRA adapters on the shared body instead of all its weights (as
    trl's trainers take it); the model is changed in place (`MultiTaskModel.add_body_lora`).
    end_task / end_task_dataset (`task_weighting="meta"` only): the task the mixture's weights are learned toward,
    a classification `TaskSpec` (or {name, kind, num_labels}) that is NOT one of the mixture's tasks, and its
    tokenised labelled rows (`tokenize_task` output); the meta head phi* is fitted on some of its batches and
    g_meta taken on others (module docstring, "End-task-aware weighting").
    """

    # explicit: compute_loss returns the sub-batch mean; Trainer divides by the accumulation steps (see module doc)
    loss_is_scaled_for_ga = False

    def __init__(self, model: MultiTaskModel | None = None, args: MuppetConfig | None = None, data_collator=None,
                 train_dataset: dict | None = None, eval_dataset: dict | None = None, processing_class=None,
                 eval_examples: dict | None = None, peft_config=None, end_task=None, end_task_dataset=None,
                 **kwargs):
        if not isinstance(args, MuppetConfig):
            raise ValueError(f"MuppetTrainer: field 'args': needs a MuppetConfig, got {type(args).__name__}")
        if not isinstance(model, MultiTaskModel):
            raise ValueError(f"MuppetTrainer: field 'model': needs a hf_aux MultiTaskModel, got {type(model).__name__}")
        if processing_class is None and data_collator is None:
            raise ValueError("MuppetTrainer: field 'processing_class': give the tokenizer (or a data_collator)")
        names = model.task_names
        for role, given in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            if given is not None and (not isinstance(given, dict) or not given):
                raise ValueError(f"MuppetTrainer: field '{role}': expected a non-empty dict task name -> dataset")
            for name in given or ():
                if name not in names:
                    raise ValueError(f"task '{name}': field '{role}': not one of the model's tasks {names}")
        if peft_config is not None:
            model.add_body_lora(peft_config)
        if args.robust_finetuning == "r4f" and not model.config.spectral_norm_heads:
            raise ValueError("MuppetConfig: field 'robust_finetuning': 'r4f' needs the model built with "
                             "spectral_norm_heads=True (MultiTaskModel.from_pretrained(..., spectral_norm_heads=True))")
        self.eval_examples = dict(eval_examples or {})
        for name, data in (eval_dataset or {}).items():
            if model.config.task(name)["kind"] == "extractive_qa":
                if name not in self.eval_examples:
                    raise ValueError(f"task '{name}': field 'eval_examples': extractive QA evaluation needs the raw "
                                     "eval split to map spans back to text")
                if "offset_mapping" not in data.column_names:
                    raise ValueError(f"task '{name}': field 'eval_dataset': tokenise the QA eval split with "
                                     "tokenize_task(..., keep_qa_offsets=True)")
        if data_collator is None:
            data_collator = MultiTaskCollator(processing_class, names)
        train = MultiTaskDataset({n: train_dataset[n] for n in names if n in train_dataset}) if train_dataset else None
        callbacks = [*(kwargs.pop("callbacks", None) or []), TaskSamplerState()]
        self._end_task = _check_end_task(args, model, train, end_task, end_task_dataset)
        if self._end_task is not None:
            _refuse_sharding_for_meta(parameter_sharding(args))
            callbacks.append(TaskWeightsCallback(train.task_names, [1.0 / len(train.task_names)] * len(train.task_names)))
        self._end_task_dataset = end_task_dataset
        super().__init__(model=model, args=args, data_collator=data_collator, train_dataset=train,
                         eval_dataset=eval_dataset, processing_class=processing_class, callbacks=callbacks, **kwargs)
        self.sub_batches_per_update = args.gradient_accumulation_steps * args.world_size
        if (train is not None and args.batching == "heterogeneous" and len(train.task_names) > 1
                and self.sub_batches_per_update < 2):
            raise ValueError("MuppetConfig: field 'gradient_accumulation_steps': heterogeneous batches need at least "
                             "2 sub-batches per update (gradient_accumulation_steps x processes); got 1")
        # per task, the raw and scaled sub-batch losses since the last log (every task declared: a rank may not
        # see each task between two logs, and every rank must reduce the same keys)
        self._train_metrics = MetricAccumulator([f"{family}/{name}" for name in names
                                                 for family in ("loss", "scaled_loss")], device=args.device)
        self._task_sampler = None
        self._micro_batches = MicroBatchCounter()
        if self._end_task is not None:
            _refuse_sharding_for_meta(parameter_sharding(args, self))  # again, as accelerate resolved it
            # the weights' position per model task index (-1: not trained), and the state of the meta step
            self._weight_index = [train.task_names.index(n) if n in train.task_names else -1 for n in names]
            self._multipliers = None  # K * alpha per mixture task, on the device; rebuilt from the state when None
            self._weights_step = None  # the global step whose weight update has run
            self._streams = None
            self._meta_metrics = MetricAccumulator([f"cos/{name}" for name in train.task_names] + ["meta_loss"],
                                                   device=args.device)

    # ---- Data: task-homogeneous sub-batches in update-sized groups ---------------------------------------------------
    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("MuppetTrainer: field 'train_dataset': training needs train data")
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        budget = self.args.max_tokens_per_batch
        lengths = [row_lengths(data) for data in self.train_dataset.datasets] if budget is not None else None
        sampler = TaskBatchSampler(self.train_dataset.sizes, self._train_batch_size, self.sub_batches_per_update,
                                   strategy=self.args.batching, temperature=self.args.task_sampling_temperature,
                                   seed=seed, max_tokens=budget, row_lengths=lengths,
                                   task_names=self.train_dataset.task_names)
        self._task_sampler = self._sampler_state.sampler = sampler
        loader = DataLoader(self.train_dataset, batch_sampler=sampler, collate_fn=self.data_collator,
                            num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory,
                            persistent_workers=self.args.dataloader_persistent_workers and
                            self.args.dataloader_num_workers > 0)
        return self.accelerator.prepare(loader)

    def _run_epoch(self, model, epoch, *args, **kwargs):
        # Private on purpose: no public hook knows the epoch index before the epoch's batches are drawn
        # (on_epoch_begin gets state.epoch, a float of progress), and the order is a pure function of (seed, epoch).
        # Trainer's own set_epoch does not reach a batch sampler behind accelerate's shard and skip wrappers on a
        # resumed multi-process run, so set it here, directly.
        if self._task_sampler is not None:
            if epoch == kwargs.get("epochs_trained"):  # the first epoch of this train() call, resumed or not
                self._check_same_sampling()
            self._sampler_state.sampler = self._task_sampler  # Trainer may have rebuilt the callback on resume
            self._task_sampler.set_epoch(epoch)
        return super()._run_epoch(model, epoch, *args, **kwargs)

    @property
    def _sampler_state(self) -> TaskSamplerState:
        """The callback that saves the sampler's description (looked up each time: resume may replace it)."""
        return next(c for c in self.callback_handler.callbacks if isinstance(c, TaskSamplerState))

    def _check_same_sampling(self) -> None:
        """Resuming: the checkpoint's sampler description (trainer_state.json) must match this run's sampler, since
        Trainer skips the batches already trained on by count."""
        name = TaskSamplerState.__name__
        saved = (self.state.stateful_callbacks.get(name) or {}).get("attributes", {})
        saved, now = saved.get("description"), self._task_sampler.state_dict()
        if saved is None:  # a fresh run, or a checkpoint that does not describe its sampler (an older hf_aux):
            # Trainer's checkpoint saving updates stateful_callbacks by key, so the key must exist
            self.state.stateful_callbacks.setdefault(name, self._sampler_state.state())
            return
        changed = [k for k in now if k != "epoch" and saved.get(k) != now[k]]
        if changed:
            raise ValueError(f"MuppetTrainer: resuming with a different task sampling than the checkpoint "
                             f"({', '.join(f'{k}: {saved.get(k)} -> {now[k]}' for k in changed)}); the skipped "
                             "batches would not be the ones already trained on")

    # ---- Loss --------------------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training:  # R3F noise and dropout seeded by the sub-batch's place in the update stream, so N DDP
            # processes train exactly like one with N times the accumulation, and resume is exact
            # (hf_aux.runtime.distributed)
            seed = micro_batch_seed(self.args.seed, self._micro_batches.index(self))
            with seeded_rng(seed, self.args.device):
                return self._compute_loss(model, inputs, return_outputs)
        return self._compute_loss(model, inputs, return_outputs)

    def _compute_loss(self, model, inputs, return_outputs=False, for_weights=False):
        """The sub-batch's loss. `for_weights`: the plain eq. 1-scaled loss whose gradient g_k the end-task-aware
        weight update takes (no R3F term, no task weight, nothing logged or checked)."""
        body = self.unwrapped(model)
        task = task_index(body, inputs)
        spec = body.config.tasks[task]
        kind = spec["kind"]
        model_inputs = {k: v for k, v in inputs.items() if k not in TARGET_KEYS}
        if kind == "seq2seq":  # teacher forcing; the loss is computed here, per data point
            model_inputs["decoder_input_ids"] = body._shift_right(inputs["labels"])
        robust = self.args.robust_finetuning != "none" and model.training and not for_weights
        if robust:  # R3F perturbs the token embeddings, so look them up here and feed them in
            embeddings = body.get_input_embeddings()(inputs["input_ids"])
            model_inputs["inputs_embeds"] = embeddings  # input_ids stay: encoder-decoders locate EOS with them
        outputs = model(**model_inputs)
        # Table 2 loss per data point and n(i), the number of predictions it ranges over
        raw, num_predictions = self._task_losses(kind, outputs, inputs)
        # eq. 1: L_i / log n(i); the sub-batch loss is the mean over its data points
        scaled = scale_losses(raw, num_predictions) if self.args.loss_scaling else raw
        loss = task_loss = scaled.mean()
        if for_weights:
            return loss
        if robust:
            # R3F (Aghajanyan et al., 2020, eq. 3): + lambda * KL_S(f(x) || f(x + z)), z on the input embeddings
            noise = sample_embedding_noise(embeddings, self.args.r3f_eps,
                                           "normal" if kind == "seq2seq" else "uniform")
            noisy = model(**{**model_inputs, "inputs_embeds": embeddings + noise})
            divergence = r3f_divergence(kind, outputs, noisy, choice_mask=inputs.get("choice_mask"),
                                        attention_mask=inputs.get("attention_mask"), labels=inputs.get("labels"))
            loss = loss + self.args.r3f_lambda * divergence.mean()
        if model.training:
            if self._end_task is not None:  # end-task-aware: the task's weight K * alpha_k
                loss = loss * self._task_multipliers()[self._weight_index[task]]
            if self.args.max_tokens_per_batch is not None:  # the update's mean over its rows
                loss = loss * self._row_weight(len(raw))
            parts = {"loss": loss, "task_loss": task_loss}  # check its labels, the learning rate, or fp16 overflow
            check_finite_loss(self, {**parts, "r3f_divergence": divergence.mean()} if robust else parts,
                              f"task '{spec['name']}': field 'loss'")
            self._train_metrics.add(f"loss/{spec['name']}", raw.mean())
            self._train_metrics.add(f"scaled_loss/{spec['name']}", task_loss)
        return (loss, outputs) if return_outputs else loss

    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device):
        """Trainer's prefetch of one update's sub-batches; under a token budget also the update's rows over every
        process (one all-reduce per update, no host sync; one process: a number), which `_row_weight` divides by."""
        samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.args.max_tokens_per_batch is not None:
            rows = sum(len(batch["task_ids"]) for batch in samples)
            self._update_rows = (self.accelerator.reduce(to_device_nonblocking(rows, device), "sum")
                                 if self.args.world_size > 1 else rows)
        return samples, num_items

    def _row_weight(self, rows: int) -> torch.Tensor | float:
        """The factor that makes an update under a token budget the mean over its rows: Trainer divides each
        sub-batch's mean loss by the update's micro-steps and DDP averages over processes, so a sub-batch of r rows
        in an update of R rows (all processes) weighs r x micro-steps x processes / R."""
        return rows * self.current_gradient_accumulation_steps * self.args.world_size / self._update_rows

    def _task_losses(self, kind: str, outputs, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        if kind == "multiple_choice":
            return multiple_choice_loss(outputs.logits, inputs["labels"], inputs.get("choice_mask"))
        if kind == "extractive_qa":
            return span_loss(outputs.start_logits, outputs.end_logits, inputs["start_positions"],
                             inputs["end_positions"], inputs.get("attention_mask"))
        if kind == "seq2seq":
            return seq2seq_loss(outputs.logits, inputs["labels"], label_smoothing=self.args.label_smoothing_factor)
        plain = {"classification": classification_loss, "token_classification": token_classification_loss}
        return plain.get(kind, regression_loss)(outputs.logits, inputs["labels"])

    def floating_point_ops(self, inputs) -> int:
        """6 x input tokens x non-embedding parameters, as PreTrainedModel.floating_point_ops, with the parameter
        count taken once: Trainer asks on every micro-batch, and recounting walks every task's head each time (a
        cost that would grow with the number of tasks)."""
        if getattr(self, "_flops_parameters", None) is None:
            self._flops_parameters = self.unwrapped(self.model).num_parameters(exclude_embeddings=True)
        return 6 * int(inputs["input_ids"].numel()) * self._flops_parameters

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:  # a training log: the per-task losses since the last one, over every process
            logs.update(self._train_metrics.reduce(self.accelerator, drop_empty=True))
            if self._end_task is not None:  # the cosines since the last log and the current weights
                logs.update(self._meta_metrics.reduce(self.accelerator, drop_empty=True))
                history = self.task_weights_state.history
                if history:
                    logs.update({f"alpha/{name}": a for name, a in zip(self.train_dataset.task_names, history[-1][1:])})
        super().log(logs, start_time)

    # ---- End-task-aware weighting (task_weighting="meta"): the META-TARTAN rule over the mixture's tasks -------------
    def training_step(self, model, inputs, num_items_in_batch=None):
        if self._end_task is not None:
            step = self.state.global_step
            if step != self._weights_step and step % self.args.task_weight_update_steps == 0:
                self._update_task_weights(model)  # before the update's first sub-batch, once per update
                self._weights_step = step
        return super().training_step(model, inputs, num_items_in_batch)

    @property
    def task_weights_state(self) -> TaskWeightsCallback:
        """The callback holding the mixture's w and its history (`task_weighting="meta"`)."""
        return find_task_weights(self)

    def _task_multipliers(self) -> torch.Tensor:
        """K * alpha per mixture task (mean 1: at uniform weights each sub-batch weighs what it does in MUPPET)."""
        if self._multipliers is None:
            weights = self.task_weights_state.weights_on(self.args.device)
            self._multipliers = task_mixture(weights) * len(weights)
        return self._multipliers

    def _get_streams(self) -> dict[str, BatchStream]:
        """Batches for the weight updates, positioned from the task-weight state (resume continues there): one
        stream per mixture task, and two over the end task's rows, one fitting phi*, one giving g_meta."""
        args = self.args
        if self._streams is None:
            place = {"rank": args.process_index, "world_size": args.world_size}
            size = args.per_device_train_batch_size
            budget = self._task_sampler.budget if self._task_sampler is not None else None
            # under a token budget, each task's g_k batch holds its mean rows per sub-batch (not the cap on rows)
            sizes = budget.mean_rows if budget is not None else [size] * len(self.train_dataset.datasets)
            size = round(sum(sizes) / len(sizes))
            collate = lambda features, generator: self.data_collator(features)  # noqa: E731
            streams = {f"task/{name}": BatchStream(data, sizes[k], collate, args.seed + 17 * (k + 1), **place)
                       for k, (name, data) in enumerate(zip(self.train_dataset.task_names, self.train_dataset.datasets))}
            end_collator = MultiTaskCollator(self.processing_class, [self._end_task["name"]])
            collate = lambda features, generator: end_collator(features)  # noqa: E731
            meta_size = args.meta_batch_size or size
            streams["_meta_head"] = BatchStream(self._end_task_dataset, meta_size, collate, args.seed + 11, **place)
            streams["_meta"] = BatchStream(self._end_task_dataset, meta_size, collate, args.seed + 7, **place)
            self._streams = streams
        return self._streams

    def _draw(self, name: str) -> dict:
        return self._prepare_inputs(self.task_weights_state.draw(self._get_streams(), name))

    def _update_task_weights(self, model) -> None:
        """One weight update (Algorithm 1 of TARTAN over the mixture's tasks, `hf_aux.tartan.weighting`): g_k for up
        to `meta_tasks_per_step` tasks drawn afresh (each on a sub-batch of its own, MUPPET's eq. 1-scaled loss),
        phi* re-initialised and fitted on frozen end-task features, g_meta of another end-task batch through phi*
        (eq. 7), then w_k += eta cos(g_meta, g_k) for the drawn tasks and alpha = softmax(w). Gradients are taken
        with autograd.grad (parameters' .grad untouched) and averaged over processes, so w is the same on every
        rank. No host read: w and alpha stay on the device, the finite check is the guard's (once per update)."""
        args, state = self.args, self.task_weights_state
        step = self.state.global_step
        body_model: MultiTaskModel = self.unwrapped(model)
        body = [p for p in body_model.body.parameters() if p.requires_grad]
        names = self.train_dataset.task_names
        draw = torch.Generator().manual_seed(args.seed * 1_000_003 + step)  # the same subset on every rank
        with host_side():  # a CPU generator's draw, on every device
            tasks = sorted(torch.randperm(len(names), generator=draw)[:args.meta_tasks_per_step].tolist())
        was_training = body_model.training
        body_model.train()
        seed = micro_batch_seed(args.seed + 1, step * args.world_size + args.process_index)
        try:
            with self.compute_loss_context_manager(), self.accelerator.autocast(), seeded_rng(seed, args.device):
                task_grads = []
                for k in tasks:  # g_k: the body gradient of task k's scaled sub-batch loss
                    batch = self._draw(f"task/{names[k]}")
                    loss = self._compute_loss(body_model, batch, for_weights=True)
                    task_grads.append(list(torch.autograd.grad(loss, body, allow_unused=True)))
                fit = self._draw("_meta_head")  # phi* on frozen features of end-task rows
                with torch.no_grad():
                    features = body_model.sentence_features(fit["input_ids"], fit.get("attention_mask"),
                                                            fit.get("token_type_ids"))
                head = self._meta_head(features.shape[-1], body_model, draw)
                fit_meta_head(list(head.parameters()), lambda: F.cross_entropy(head(features), fit["labels"]),
                              steps=args.meta_head_steps, lr=args.meta_head_lr, weight_decay=args.meta_head_weight_decay)
                meta = self._draw("_meta")  # g_meta: another end-task batch through phi* (eq. 7)
                meta_loss = F.cross_entropy(head(body_model.sentence_features(
                    meta["input_ids"], meta.get("attention_mask"), meta.get("token_type_ids"))), meta["labels"])
                meta_grads = list(torch.autograd.grad(meta_loss, body, allow_unused=True))
        finally:
            body_model.train(was_training)
        if distributed(args.world_size):
            for grad_list in [meta_grads, *task_grads]:
                all_reduce_mean(grad_list, args.world_size)
        weights, alphas, cosines = meta_update(state.weights_on(args.device), meta_grads, task_grads,
                                               args.task_weight_lr, tasks=tasks)
        if not check_finite_loss(self, {"meta_loss": meta_loss.detach(), **{
                f"task_weight/{n}": w for n, w in zip(names, weights)}}, "MuppetTrainer: task_weighting 'meta'"):
            return  # on_nonfinite 'skip': the weights stay as they were
        state.set_weights(weights)
        state.record(step + 1, alphas)
        self._multipliers = alphas.detach() * len(names)
        for k, cos in zip(tasks, cosines):
            self._meta_metrics.add(f"cos/{names[k]}", cos)
        self._meta_metrics.add("meta_loss", meta_loss.detach())

    def _meta_head(self, hidden: int, body_model: MultiTaskModel, generator: torch.Generator) -> ClassificationHead:
        """phi*: a fresh classification head of the end task's classes (the mixture heads' architecture), drawn from
        `generator` (a CPU generator: the same on every rank), frozen outside its fit."""
        head = ClassificationHead(hidden, self._end_task["num_labels"], body_model.config.classifier_dropout,
                                  head=body_model.config.classifier_head)
        std = getattr(body_model.body.config, "initializer_range", 0.02)
        with torch.no_grad():
            for linear in (head.dense, head.out_proj):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * std)
                if linear.bias is not None:  # ModernBERT's head dense has none
                    linear.bias.zero_()
        head.requires_grad_(False)
        return head.to(device=self.args.device)

    # ---- Checkpoints: MUPPET-style model folder (the sampler's description travels in trainer_state.json) ------------
    # Loading: MultiTaskModel.load_checkpoint restores the body (or its LoRA adapter) and the heads (AuxTrainer).
    # task_weighting="meta": the weights, their history and the stream positions travel in trainer_state.json
    # (TaskWeightsCallback); every save also writes task_weights.json and task_weights.png beside the model.
    def _save_model_extras(self, output_dir: str) -> None:
        if self._end_task is None:
            return
        state = self.task_weights_state
        data = {"task_weighting": "meta", "end_task": self._end_task["name"], "task_weight_lr": self.args.task_weight_lr,
                "meta_tasks_per_step": self.args.meta_tasks_per_step, "tasks": self.train_dataset.task_names,
                "weights": state.weights, "steps": [row[0] for row in state.history],
                "alpha": [row[1:] for row in state.history]}
        with open(os.path.join(output_dir, TASK_WEIGHTS_JSON), "w") as f:
            json.dump(data, f)
        if state.history:
            plot_task_weights(state.history, self.train_dataset.task_names, os.path.join(output_dir, TASK_WEIGHTS_PNG),
                              f"Mixture weights toward {self._end_task['name']}")

    def _load_checkpoint_extras(self, resume_from_checkpoint: str) -> None:
        if self._end_task is None:
            return
        restore_task_weights(self.task_weights_state, resume_from_checkpoint, self.train_dataset.task_names,
                             "MUPPET end-task-aware")
        self._streams, self._multipliers, self._weights_step = None, None, None  # rebuilt from the restored state

    # ---- Model card (ModelCardMixin.create_model_card; run_muppet.py writes it on every run, push_to_hub too) ------
    # per-task metrics of the last `evaluate()`, train sizes, a loss curve
    _method = METHOD
    _watch_model_loss = False  # _compute_loss checks each task's loss (check_finite_loss)
    _hf_aux_class = "hf_aux.MultiTaskModel"  # the card: `from hf_aux import MultiTaskModel`

    def _card_tasks(self, datasets: list[str], provenance: dict | None = None, dataset_configs: dict | None = None,
                    **kwargs) -> list[TaskSummary]:
        """`provenance`: task name -> (Hub dataset id or None, other source) (`TaskSpec.provenance`);
        `dataset_configs`: task name -> its Hub dataset's configuration (`TaskSpec.dataset_config`)."""
        body = self.unwrapped(self.model)
        provenance, dataset_configs = provenance or {}, dataset_configs or {}
        train_sizes = dict(zip(self.train_dataset.task_names, self.train_dataset.sizes)) if self.train_dataset else {}
        last_eval = next((h for h in reversed(self.state.log_history) if "eval_average_primary" in h), {})
        summaries = []
        for spec in body.config.tasks:
            prefix = f"eval_{spec['name']}_"
            scores = {k[len(prefix):]: v for k, v in last_eval.items() if k.startswith(prefix)
                      and isinstance(v, (int, float)) and math.isfinite(v)}
            eval_data = (self.eval_dataset or {}).get(spec["name"])
            dataset, source = provenance.get(spec["name"], (None, None))
            summaries.append(TaskSummary(name=spec["name"], kind=spec["kind"], train_size=train_sizes.get(spec["name"]),
                                         eval_size=None if eval_data is None else len(eval_data), metrics=scores,
                                         dataset=dataset, source=source,
                                         dataset_config=dataset_configs.get(spec["name"]) if dataset else None))
        return summaries

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        figures = self._loss_curve_figure(output_dir, "MUPPET losses", "The training objective as optimised (each "
                                          "task's loss scaled by its output space, eq. 1) and the evaluation loss (the "
                                          "tasks' raw losses, averaged) in panels of their own, not one axis; then "
                                          "each task's raw training and evaluation loss",
                                          exclude_prefixes=("scaled_loss/", "cos/", "alpha/"))
        if self._end_task is not None and self.task_weights_state.history:
            plot_task_weights(self.task_weights_state.history, self.train_dataset.task_names,
                              os.path.join(output_dir, TASK_WEIGHTS_PNG),
                              f"Mixture weights toward {self._end_task['name']}")
            figures[TASK_WEIGHTS_PNG] = (f"Task weights (alpha) of the mixture's tasks over training, meta-learned "
                                         f"toward the end task {self._end_task['name']}")
        return figures

    def _card_base_model(self, finetuned_from: str | None) -> str | None:
        encoder = self.unwrapped(self.model).config.encoder
        return finetuned_from or getattr(encoder, "_name_or_path", None)

    def _card_details(self) -> dict:
        model = self.unwrapped(self.model)
        notes = describe_pooling(model.config.pooling)
        history = self.task_weights_state.history if self._end_task is not None else None
        if history:
            final = ", ".join(f"{name} {alpha:.3f}" for name, alpha in zip(self.train_dataset.task_names, history[-1][1:]))
            notes += (f" End-task-aware pre-finetuning (task_weighting 'meta', the META-TARTAN rule) toward "
                      f"{self._end_task['name']}; final task weights: {final}.")
        return {"adapter": model.has_body_lora, "adapter_auto_class": "AutoModel",
                "merged_subfolder": merged_subfolder(self.args.output_dir), "notes": notes}

    # ---- Evaluation: every task with its own metrics, and their average ----------------------------------------------
    def evaluate(self, eval_dataset: dict | None = None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """{prefix}_{task}_{metric} for every task and metric, {prefix}_{task}_loss (raw, unscaled),
        {prefix}_average_primary (mean over tasks of each kind's primary metric, `hf_aux.tasks.metrics.PRIMARY_METRIC`)
        and {prefix}_loss (mean of the task losses), logged once. Each task runs through Trainer's own
        `evaluation_loop` (batching, gathering across processes) with `prediction_step` below; its metrics come from
        `hf_aux.tasks.metrics` by task kind. (Trainer.evaluate with a dict would log and call on_evaluate per task.)"""
        datasets_by_task = eval_dataset if eval_dataset is not None else self.eval_dataset
        if not isinstance(datasets_by_task, dict) or not datasets_by_task:
            raise ValueError("MuppetTrainer.evaluate: field 'eval_dataset': expected a dict task name -> dataset")
        self._memory_tracker.start()
        start = time.time()
        body = self.unwrapped(self.model)
        metrics, primaries, losses = {}, [], []
        for name, data in datasets_by_task.items():
            kind = body.config.task(name)["kind"]
            output = self.evaluation_loop(self.get_eval_dataloader(data), description=f"Evaluation of {name}",
                                          prediction_loss_only=False, ignore_keys=ignore_keys,
                                          metric_key_prefix=metric_key_prefix)
            task_scores = self._task_scores(name, kind, data, output.predictions, output.label_ids)
            task_loss = output.metrics[f"{metric_key_prefix}_loss"]
            metrics.update({f"{metric_key_prefix}_{name}_{key}": value
                            for key, value in {**task_scores, "loss": task_loss}.items()})
            primaries.append(task_scores[task_metrics.PRIMARY_METRIC[kind]])
            losses.append(task_loss)
        metrics[f"{metric_key_prefix}_average_primary"] = float(np.mean(primaries))
        metrics[f"{metric_key_prefix}_loss"] = float(np.mean(losses))
        metrics[f"{metric_key_prefix}_runtime"] = round(time.time() - start, 4)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """One evaluation batch of one task: (mean raw loss, predictions, labels). Predictions: the logits
        (classification, regression, multiple choice), (start, end) logits (extractive QA), or greedily decoded
        token ids, -100 after EOS (seq2seq; the labels are the reference ids)."""
        inputs = self._prepare_inputs(inputs)
        body = self.unwrapped(model)
        kind = body.config.tasks[task_index(body, inputs)]["kind"]
        with torch.no_grad(), self.compute_loss_context_manager():
            model_inputs = {k: v for k, v in inputs.items() if k not in TARGET_KEYS}
            if kind == "seq2seq":
                model_inputs["decoder_input_ids"] = body._shift_right(inputs["labels"])
            outputs = model(**model_inputs)
            raw, _ = self._task_losses(kind, outputs, inputs)
            loss = raw.mean().detach()
            if prediction_loss_only:
                return loss, None, None
            if kind == "seq2seq":
                return loss, self._greedy_generate(model, body, inputs), inputs["labels"]
        if kind == "extractive_qa":
            return loss, (outputs.start_logits.float(), outputs.end_logits.float()), None
        return loss, outputs.logits.float(), inputs["labels"]

    def _task_scores(self, name: str, kind: str, data, predictions, labels) -> dict:
        """One task's metrics from the gathered predictions (Trainer pads ragged batches with -100)."""
        if kind in ("classification", "regression", "multiple_choice"):
            return task_metrics.compute_task_metrics(kind, predictions, labels)
        if kind == "token_classification":  # entity-level F1 reads the tag names
            tags = self.unwrapped(self.model).config.task(name)["label_names"]
            return task_metrics.compute_task_metrics(kind, predictions, labels, label_names=tags)
        if kind == "extractive_qa":
            examples = self.eval_examples[name]
            texts = task_metrics.postprocess_qa_predictions(examples, data, predictions[0], predictions[1])
            return task_metrics.qa_metrics(texts, examples[_answers_column(examples)])
        tokenizer = self.processing_class
        predicted, references = ([tokenizer.decode([t for t in row if t >= 0], skip_special_tokens=True)
                                  for row in ids.tolist()] for ids in (predictions, labels))
        return task_metrics.rouge_metrics(predicted, references)

    def _greedy_generate(self, model, body, inputs) -> torch.Tensor:
        """Greedy decoding for seq2seq evaluation: [B, <= generation_max_length] token ids (-100 after EOS)."""
        config = body.config.encoder
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.eos_token_id
        batch = inputs["input_ids"].shape[0]
        decoded = inputs["input_ids"].new_full((batch, 1), start)
        finished = torch.zeros(batch, dtype=torch.bool, device=decoded.device)
        model_inputs = {k: v for k, v in inputs.items() if k not in TARGET_KEYS}
        for _ in range(self.args.generation_max_length):
            logits = model(**model_inputs, decoder_input_ids=decoded).logits[:, -1]  # [B, vocab]
            next_token = logits.argmax(dim=-1).masked_fill(finished, config.pad_token_id)
            decoded = torch.cat([decoded, next_token[:, None]], dim=1)
            finished |= next_token == config.eos_token_id
            if bool(finished.all()):
                break
        generated = decoded[:, 1:]
        after_eos = (generated == config.eos_token_id).int().cumsum(dim=1) > 0
        return generated.masked_fill(after_eos, -100)


def task_index(body: MultiTaskModel, inputs: dict) -> int:
    """The sub-batch's task, as the index of its head: from the `task` name MultiTaskCollator adds (read on the host:
    `task_ids` is on the device by now, and reading it stopped the host once per sub-batch), else from `task_ids`
    (a batch from another collator; one host read)."""
    name = inputs.get("task")
    if isinstance(name, str):
        return body.config.task_names.index(name)
    return int(inputs["task_ids"].reshape(-1)[0])


def _check_end_task(args: MuppetConfig, model: MultiTaskModel, train: MultiTaskDataset | None, end_task,
                    end_task_dataset) -> dict | None:
    """task_weighting="meta": the end task as {name, kind, num_labels}, checked; None for uniform weighting (where
    an end task is refused: it would be silently unused)."""
    if args.task_weighting != "meta":
        if end_task is not None or end_task_dataset is not None:
            raise ValueError("MuppetTrainer: field 'end_task': an end task is only read with task_weighting='meta' "
                             f"(task_weighting is {args.task_weighting!r})")
        return None
    if end_task is None or end_task_dataset is None:
        raise ValueError("MuppetConfig: field 'task_weighting': 'meta' learns the mixture's weights toward an end "
                         "task: give MuppetTrainer(end_task=<TaskSpec>, end_task_dataset=<its tokenised rows>)")
    spec = end_task.head_metadata() if isinstance(end_task, TaskSpec) else dict(end_task)
    name = spec.get("name")
    if spec.get("kind") != "classification":
        raise ValueError(f"task '{name}': field 'kind': the end task of task_weighting='meta' must be a "
                         f"classification task (got {spec.get('kind')!r}); other kinds are not supported yet")
    if not isinstance(spec.get("num_labels"), int) or spec["num_labels"] < 2:
        raise ValueError(f"task '{name}': field 'num_labels': the end task needs at least 2 classes")
    if name in model.task_names:
        raise ValueError(f"task '{name}': field 'end_task': the end task is also a task of the mixture; the end "
                         "task must be one the mixture does not train on")
    if train is None:
        raise ValueError("MuppetTrainer: field 'train_dataset': task_weighting='meta' needs the mixture's train data")
    if "labels" not in end_task_dataset.column_names or "input_ids" not in end_task_dataset.column_names:
        raise ValueError(f"task '{name}': field 'end_task_dataset': needs tokenised rows with input_ids and labels "
                         f"(hf_aux.tasks.data.tokenize_task); has {end_task_dataset.column_names}")
    if len(end_task_dataset) < 2:
        raise ValueError(f"task '{name}': field 'end_task_dataset': needs at least 2 rows (phi* is fitted on some "
                         "batches, g_meta taken on others)")
    return spec


def _refuse_sharding_for_meta(sharding) -> None:
    """FSDP and DeepSpeed shard the body's parameters; the META rule takes autograd.grad over full body parameters
    several times per update."""
    fsdp, deepspeed, zero3 = sharding
    if fsdp or deepspeed or zero3:
        raise ValueError("MuppetConfig: field 'task_weighting': 'meta' takes per-task gradients with "
                         "torch.autograd.grad over full body parameters; FSDP and DeepSpeed are not supported with "
                         "it: use DDP (torchrun / accelerate launch without FSDP or DeepSpeed)")


def _answers_column(examples) -> str:
    for column in examples.column_names:
        values = examples[0][column]
        if isinstance(values, dict) and "text" in values and "answer_start" in values:
            return column
    raise ValueError("MuppetTrainer: field 'eval_examples': the QA examples have no SQuAD-style answers column")


__all__ = ["MuppetConfig", "MuppetTrainer"]
