"""TartanTrainer: end-task aware training, MT-TARTAN and META-TARTAN (Dery et al., 2022, "Should We Be
Pre-training? An Argument for End-task Aware Training as an Alternative", ICLR; arXiv:2109.07437).

The end task T* is the Trainer's own `train_dataset` (its dataloader, sampler and resume are Trainer's); each
auxiliary MLM task T_i (TAPT, DAPT, any corpus) is an endless stream of masked blocks drawn alongside every
end-task batch; META-TARTAN also draws end-task validation batches (`meta_dataset`, by default `eval_dataset`).

- `mode="mt"` (§3.1, eq. 3): loss = w* L_T* + sum_i w_i L_Ti with fixed weights (uniform 1/(n+1) by default).
  One forward of the (DDP-wrapped) model carries every task; Trainer's own backward.
- `mode="meta"` (§3.2-3.3, Algorithm 1, eq. 7): per step, the body gradient g_k of every task (end task first),
  the meta head phi* refitted on frozen body features, the meta gradient g_meta of an end-task validation batch
  through phi*, w_k <- w_k + eta cos(g_meta, g_k), alpha = softmax(w), body gradient sum_k alpha_k g_k, each
  head its own gradient. Gradients are all-reduced over processes before the cosines, so w is identical on
  every rank.

The task weights (w), their per-step history (alpha) and the auxiliary/validation stream positions live in
`TaskWeightsCallback`, an `ExportableState` saved in trainer_state.json with every checkpoint and restored on
resume. Every save writes task_weights.json and task_weights.png beside the checkpoint.
"""

from __future__ import annotations

import json
import logging
import os

import torch
from torch import nn
from transformers import PreTrainedModel

from ..runtime.adapters import merged_subfolder
from ..tasks.data import mask_tokens_for_mlm, special_tokens_mask_for
from ..runtime.distributed import MicroBatchCounter, Sharding, micro_batch_seed, parameter_sharding, seeded_rng
from . import METHOD
from .config import TartanConfig
from .losses import mt_tartan_loss
from ..tasks.batches import BatchStream
from ..tasks.streaming import StreamBatches, is_stream
from .weighting import (TaskWeightsCallback, all_reduce_mean, combine_gradients, distributed, find_task_weights,
                        meta_update, plot_task_weights, restore_task_weights)
from ..runtime.trainer import AuxTrainer
from ..cards.model_card import TaskSummary, task_metrics
from .model import TartanModel
from ..runtime.nonfinite import check_finite_loss
from ..runtime.training_metrics import MetricAccumulator

logger = logging.getLogger(__name__)

TASK_WEIGHTS_JSON = "task_weights.json"
TASK_WEIGHTS_PNG = "task_weights.png"
END_TASK = "end_task"


class TartanTrainer(AuxTrainer):
    """MT-TARTAN / META-TARTAN (module docstring).

    model: a `TartanModel`, or an `XForSequenceClassification` (wrapped with fresh MLM heads named after
        `auxiliary_datasets`).
    train_dataset / eval_dataset: the end task, tokenised (input_ids, attention_mask[, token_type_ids], labels).
    auxiliary_datasets: {name: dataset of input_ids blocks} (e.g. `hf_aux.tasks.data.group_texts_for_mlm` output), in
        the model's auxiliary task order; masked afresh for every batch. A `datasets.IterableDataset` (e.g.
        `hf_aux.tasks.streaming.stream_mlm_blocks` of a streamed corpus) is read in order as a stream
        (`hf_aux.tasks.streaming.StreamBatches`), its position saved with every checkpoint.
    meta_dataset: end-task validation data for g_meta (META-TARTAN; default `eval_dataset`).
    processing_class: the tokenizer (needed to pad and mask the auxiliary batches).
    peft_config: a `peft.LoraConfig`: LoRA adapters on the shared body, base weights frozen (as trl's trainers take
        it); phi' and the MLM heads train fully; META-TARTAN's cosines are over the adapters
        (`TartanModel.add_body_lora`, which changes the model in place).
    """

    # compute_loss returns per-batch means: Trainer divides them by the accumulation steps (MT-TARTAN)
    loss_is_scaled_for_ga = False

    def __init__(self, model=None, args: TartanConfig | None = None, train_dataset=None, eval_dataset=None,
                 auxiliary_datasets: dict | None = None, meta_dataset=None, processing_class=None, peft_config=None,
                 **kwargs):
        if not isinstance(args, TartanConfig):
            raise ValueError("TartanTrainer: field 'args': expected a TartanConfig")  # noqa: TRY004
        auxiliary_datasets = dict(auxiliary_datasets or {})
        if isinstance(model, PreTrainedModel):
            model = TartanModel(model, list(auxiliary_datasets))
        if not isinstance(model, TartanModel):
            raise ValueError(f"TartanTrainer: field 'model': expected a TartanModel or a sequence classifier, got "  # noqa: TRY004
                             f"{type(model).__name__}")
        if peft_config is not None:
            model.add_body_lora(peft_config)
        if list(auxiliary_datasets) != model.auxiliary_tasks:
            raise ValueError(f"TartanTrainer: field 'auxiliary_datasets': tasks {list(auxiliary_datasets)} do not "
                             f"match the model's MLM heads {model.auxiliary_tasks} (same names, same order)")
        # this trainer masks the auxiliary batches (`_mlm_collate`) at args.mlm_probability: the heads read the static
        # slots that rate fills (max_predictions), not every position
        model.mlm_probability = args.mlm_probability
        if processing_class is None or getattr(processing_class, "mask_token_id", None) is None:
            raise ValueError("TartanTrainer: field 'processing_class': a tokenizer with a mask token is needed to "
                             "mask the auxiliary MLM batches")
        vocab_rows = model.classifier.get_input_embeddings().weight.shape[0]
        if len(processing_class) > vocab_rows:
            raise ValueError(f"TartanTrainer: field 'processing_class': the tokenizer has {len(processing_class)} "
                             f"tokens but the model's embeddings only {vocab_rows}: mismatched tokenizer")
        for name, data in auxiliary_datasets.items():
            if data.column_names is not None and "input_ids" not in data.column_names:  # None: a stream's, unknown
                raise ValueError(f"task '{name}': field 'auxiliary_datasets': needs an input_ids column "
                                 f"(see hf_aux.tasks.data.group_texts_for_mlm); has {data.column_names}")
            if not is_stream(data) and len(data) == 0:  # a stream's emptiness shows when it is read
                raise ValueError(f"task '{name}': field 'auxiliary_datasets': the dataset is empty")
        if train_dataset is None:
            raise ValueError("TartanTrainer: field 'train_dataset': the end task's training data is required")
        meta_dataset = meta_dataset if meta_dataset is not None else eval_dataset
        if args.mode == "meta":
            if meta_dataset is None or isinstance(meta_dataset, dict):
                raise ValueError("TartanTrainer: field 'meta_dataset': META-TARTAN needs one end-task validation "
                                 "dataset (meta_dataset, or eval_dataset as a single dataset)")
            if "labels" not in meta_dataset.column_names:
                raise ValueError(f"TartanTrainer: field 'meta_dataset': needs a labels column; has "
                                 f"{meta_dataset.column_names}")
        task_names = [END_TASK, *model.auxiliary_tasks]
        weights = args.task_weights or [1.0 / len(task_names)] * len(task_names)
        if len(weights) != len(task_names):
            raise ValueError(f"TartanConfig: field 'task_weights': {len(weights)} weights for {len(task_names)} "
                             f"tasks {task_names} (end task first)")
        if args.mode == "mt":
            weights = [w / sum(weights) for w in weights]
        _refuse_sharding(args.mode, parameter_sharding(args))
        callbacks = list(kwargs.pop("callbacks", None) or [])
        callbacks.append(TaskWeightsCallback(task_names, weights))
        super().__init__(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                         processing_class=processing_class, callbacks=callbacks, **kwargs)
        _refuse_sharding(args.mode, parameter_sharding(args, self))  # again, as accelerate resolved it
        self._micro_batches = MicroBatchCounter()  # dropout seeded by the micro-batch's place in the global stream
        self.task_names = task_names
        self._auxiliary_datasets = auxiliary_datasets
        self._meta_dataset = meta_dataset
        self._streams: dict[str, BatchStream] | None = None
        self._resumed = False  # set by _load_from_checkpoint: the heads come from the checkpoint, no warm-up
        self._train_metrics = MetricAccumulator()

    # ------------------------------------------------------------------------------------------------------------
    @property
    def task_weights_state(self) -> TaskWeightsCallback:
        """The callback holding w and its history (looked up each time: resume may replace the instance)."""
        return find_task_weights(self)

    def _mlm_collate(self, features, generator):
        tokenizer = self.processing_class
        padded = tokenizer.pad([{"input_ids": f["input_ids"]} for f in features], return_tensors="pt")
        masked, labels = mask_tokens_for_mlm(
            padded["input_ids"], mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
            special_tokens_mask=special_tokens_mask_for(padded["input_ids"], tokenizer),
            mlm_probability=self.args.mlm_probability, generator=generator)
        return {"input_ids": masked, "attention_mask": padded["attention_mask"], "labels": labels}

    def _supervised_collate(self, features, generator):
        return self.data_collator(features)

    def _get_streams(self) -> dict[str, BatchStream]:
        """The auxiliary, meta-validation and (optionally) meta-head streams, built on first use, positioned from
        the task-weight state (so resume continues where the checkpoint was)."""
        if self._streams is None:
            args = self.args
            seed, place = args.seed, {"rank": args.process_index, "world_size": args.world_size}  # one shared stream
            aux_size = args.auxiliary_batch_size or args.per_device_train_batch_size
            streams = {name: _batch_stream(data, aux_size, self._mlm_collate, seed + 17 * (k + 1), **place)
                       for k, (name, data) in enumerate(self._auxiliary_datasets.items())}
            if args.mode == "meta":
                meta = self._remove_unused_columns(self._meta_dataset, description="meta")
                streams["_meta"] = BatchStream(meta, args.meta_batch_size or args.per_device_train_batch_size,
                                               self._supervised_collate, seed + 7, **place)
                if args.meta_head_fresh_batch and args.meta_head == "separate":
                    train = self._remove_unused_columns(self.train_dataset, description="meta head")
                    streams["_meta_head"] = BatchStream(train, args.per_device_train_batch_size,
                                                        self._supervised_collate, seed + 11, **place)
            self._streams = streams
        return self._streams

    def _draw(self, name: str) -> dict:
        return self._prepare_inputs(self.task_weights_state.draw(self._get_streams(), name))

    def create_optimizer(self, model=None):
        """Trainer's optimizer; with `end_task_head_learning_rate`, phi' moves to groups of its own at that rate
        (keeping its weight-decay split), so the schedule scales it like the rest."""
        ours = self.optimizer is None
        optimizer = super().create_optimizer(model)
        lr = self.args.end_task_head_learning_rate
        if not ours or lr is None:
            return optimizer
        head = {id(p) for p in self.unwrapped(model or self.model).end_task_head_parameters()}
        for group in list(optimizer.param_groups):
            moved = [p for p in group["params"] if id(p) in head]
            if moved:
                group["params"] = [p for p in group["params"] if id(p) not in head]
                optimizer.add_param_group({**group, "params": moved, "lr": lr})
        return optimizer

    def _warm_up_mlm_heads(self, model) -> None:
        """`mlm_head_warmup_steps` > 0: before the first step of a run (never after a resume, whose heads come from
        the checkpoint), fit the MLM heads on the frozen body (`TartanModel.fit_mlm_heads`). Every process draws
        the same batches (a stream of its own, seeded by the run's seed alone, leaving the training streams where
        they are) and runs the same deterministic steps, so the heads stay identical across ranks."""
        args, state = self.args, self.task_weights_state
        if args.mlm_head_warmup_steps == 0 or state.head_warmup or self._resumed or not self.task_names[1:]:
            return
        streams = {name: _batch_stream(data, args.auxiliary_batch_size or args.per_device_train_batch_size,
                                       self._mlm_collate, args.seed + 23 * (k + 1))
                   for k, (name, data) in enumerate(self._auxiliary_datasets.items())}
        tartan: TartanModel = self.unwrapped(model)
        state.head_warmup = tartan.fit_mlm_heads(lambda name: self._prepare_inputs(streams[name].next()),
                                                 steps=args.mlm_head_warmup_steps, lr=args.mlm_head_warmup_lr)
        logger.info("MLM head warm-up (%d steps on the frozen body): %s", args.mlm_head_warmup_steps,
                    ", ".join(f"{k} {a:.3f} -> {b:.3f}" for k, (a, b) in state.head_warmup.items()))

    # ------------------------------------------------------------------------------------------------------------
    # MT-TARTAN (eq. 3): one forward carrying every task, Trainer's backward
    # ------------------------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs or not model.training:  # evaluation / prediction: the end task alone
            outputs = model(**inputs)
            return (outputs.loss, outputs) if return_outputs else outputs.loss
        if self.args.mode != "mt":
            raise RuntimeError("compute_loss is only used by MT-TARTAN; META-TARTAN runs in training_step")
        self._warm_up_mlm_heads(model)
        state = self.task_weights_state
        auxiliary = {name: self._draw(name) for name in self.task_names[1:]}
        # dropout drawn from the micro-batch's own seed: N processes = one with N x accumulation
        # (hf_aux.runtime.distributed)
        with seeded_rng(micro_batch_seed(self.args.seed, self._micro_batches.index(self)), self.args.device):
            outputs = model(**inputs, auxiliary_batches=auxiliary)                       # one (DDP) forward
        losses = torch.cat([outputs.loss.reshape(1), outputs.auxiliary_losses])         # [n + 1]: L_T*, L_T1..
        weights = state.weights_on(losses.device)                                       # fixed w (eq. 3)
        loss = mt_tartan_loss(losses, weights)                                          # sum_k w_k L_k
        for name, value in zip(self.task_names, losses):
            self._train_metrics.add(f"loss/{name}", value)
        state.record(self.state.global_step + 1, list(state.weights))
        return loss

    # ------------------------------------------------------------------------------------------------------------
    # META-TARTAN (Algorithm 1)
    # ------------------------------------------------------------------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):
        if self.args.mode == "mt":
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        self._warm_up_mlm_heads(model)
        tartan: TartanModel = self.unwrapped(model)  # functional parts: the unwrapped model
        args = self.args
        inputs = self._prepare_inputs(inputs)
        body = tartan.body_parameters()
        scale = 1.0 / getattr(self, "current_gradient_accumulation_steps", args.gradient_accumulation_steps)
        losses, body_grads, head_grads = [], [], []

        def task_gradients(loss: torch.Tensor, head: list[nn.Parameter]) -> None:
            grads = torch.autograd.grad(loss, body + head, allow_unused=True)
            losses.append(loss.detach())
            body_grads.append(list(grads[:len(body)]))
            head_grads.append((head, list(grads[len(body):])))

        # bf16: accelerate's autocast covers the wrapped forward only, so the whole step runs in it here; dropout
        # (and phi*'s) from the micro-batch's own seed, as in MT-TARTAN
        seed = micro_batch_seed(args.seed, self._micro_batches.index(self))
        with self.compute_loss_context_manager(), self.accelerator.autocast(), seeded_rng(seed, args.device):
            # g*_theta, g*_phi': end-task gradients on B*_tr; the body's outputs are kept for fitting phi*
            with tartan.capture_body_outputs() as captured:
                end_loss = tartan(**inputs).loss
            task_gradients(end_loss, tartan.end_task_head_parameters())
            # g^i_theta, g^i_phi: each auxiliary task's gradients on its own batch B_i
            for name in tartan.auxiliary_tasks:
                task_gradients(tartan.mlm_loss(name, self._draw(name)), tartan.auxiliary_head_parameters(name))
            # g_meta: end-task validation gradient of the body, through phi* (eq. 7) or phi' (eq. 6)
            meta_batch = self._draw("_meta")
            if args.meta_head == "separate":
                if args.meta_head_fresh_batch:
                    head_batch = self._draw("_meta_head")
                    with torch.no_grad():
                        features = tartan.body_outputs(head_batch)
                    head_labels, head_mask = head_batch["labels"], head_batch.get("attention_mask")
                else:
                    features, head_labels, head_mask = captured[-1], inputs["labels"], inputs.get("attention_mask")
                draw = self.task_weights_state.stream_draws["_meta"]
                generator = torch.Generator().manual_seed(args.seed * 31 + draw * 1_009 + args.process_index)
                tartan.fit_meta_head(features, head_labels, steps=args.meta_head_steps, lr=args.meta_head_lr,
                                     weight_decay=args.meta_head_weight_decay, generator=generator,
                                     attention_mask=head_mask)
                meta_loss = tartan.meta_loss(meta_batch)
            else:
                meta_loss = tartan(**meta_batch).loss
            meta_grads = list(torch.autograd.grad(meta_loss, body, allow_unused=True))
        # identical task weights on every rank: average every gradient over processes first
        if distributed(args.world_size):
            for grad_list in [meta_grads, *body_grads, *(g for _, g in head_grads)]:
                all_reduce_mean(grad_list, args.world_size)
        state = self.task_weights_state
        weights = state.weights_on(end_loss.device)                      # w stays on the device between updates
        # cos(g_meta, g_k) for k = end task, aux...; w_k <- w_k + eta cos; alpha = softmax(w)
        weights, alphas, cosines = meta_update(weights, meta_grads, body_grads, args.task_weight_lr)
        combined = combine_gradients(alphas * scale, body_grads, in_place=True)  # scale * sum_k alpha_k g_k
        _accumulate_grads(body, combined, 1.0)
        for params, grads in head_grads:                                 # each head: its own gradient
            _accumulate_grads(params, grads, scale)
        losses = torch.stack(losses)
        total = (alphas * losses).sum()
        # no host read: the losses' finite check is the guard's, once per update (hf_aux.runtime.nonfinite); w and
        # alpha stay on the device until a log or a checkpoint asks for them
        check_finite_loss(self, {f"loss/{name}": loss_k for name, loss_k in zip(self.task_names, losses)},
                          "TartanTrainer")
        state.set_weights(weights)
        state.record(self.state.global_step + 1, alphas)
        for name, loss_k, cos_k in zip(self.task_names, losses, cosines):
            self._train_metrics.add(f"loss/{name}", loss_k)
            self._train_metrics.add(f"cos/{name}", cos_k)
        self._train_metrics.add("meta_loss", meta_loss)
        return total.detach() * scale

    # ------------------------------------------------------------------------------------------------------------
    # Logging, saving, resuming
    # ------------------------------------------------------------------------------------------------------------
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._train_metrics:  # a training log: per-task losses and cosines, the weights
            logs.update(self._train_metrics.reduce(self.accelerator))
            history = self.task_weights_state.history
            if history:  # alpha of the last step (identical on every rank)
                logs.update({f"alpha/{name}": a for name, a in zip(self.task_names, history[-1][1:])})
        super().log(logs, start_time)

    def _save_model_extras(self, output_dir: str) -> None:
        """Beside the model (TartanModel.save_pretrained): the task-weight history, task_weights.json and .png."""
        self.save_task_weights(output_dir)

    def save_task_weights(self, output_dir: str) -> None:
        state = self.task_weights_state
        data = {"mode": self.args.mode, "meta_head": self.args.meta_head, "task_weight_lr": self.args.task_weight_lr,
                "tasks": self.task_names, "weights": state.weights, "mlm_head_warmup": state.head_warmup,
                "steps": [row[0] for row in state.history], "alpha": [row[1:] for row in state.history]}
        with open(os.path.join(output_dir, TASK_WEIGHTS_JSON), "w") as f:
            json.dump(data, f)
        if state.history:
            plot_task_weights(state.history, self.task_names, os.path.join(output_dir, TASK_WEIGHTS_PNG),
                              self._mode_name + " task weights")

    # ---- model card (ModelCardMixin.create_model_card): the end task's metrics in the model-index, the auxiliary
    # tasks, hyper-parameters, loss_curve.png and task_weights.png (the task weights over training) -------------
    _method = METHOD
    _watch_model_loss = False  # compute_loss checks each task's loss
    _auto_class = "AutoModelForSequenceClassification"
    _hf_aux_class = "hf_aux.TartanModel"  # the card: `from hf_aux import TartanModel`

    _pipeline_tag = "text-classification"  # the top level loads as a plain classifier

    def _card_tasks(self, datasets: list[str], end_task_name: str | None = None, metrics: dict | None = None,
                    source: str | None = None, **kwargs) -> list[TaskSummary]:
        """`metrics`: the end task's, e.g. {"eval_accuracy": ...} from a final evaluation (default: the last
        evaluation in the log history); `end_task_name`: the end task's name in the card; `datasets`: Hub
        dataset ids of the end task; `source`: where its data came from otherwise."""
        if metrics is None:
            metrics = next((entry for entry in reversed(self.state.log_history) if "eval_loss" in entry), {})
        split, scores = task_metrics(metrics)
        end_task = TaskSummary(end_task_name or END_TASK, "classification", train_size=len(self.train_dataset),
                               eval_size=len(self.eval_dataset) if self.eval_dataset is not None else None,
                               metrics=scores, dataset=datasets[0] if datasets else None, split=split,
                               source=None if datasets else source)
        return [end_task] + [TaskSummary(name, "mlm", train_size=None if is_stream(data) else len(data))
                             for name, data in self._auxiliary_datasets.items()]  # a stream: no length

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        figures = self._loss_curve_figure(output_dir, "TARTAN losses",
                                          "Training loss (overall and per task) and evaluation loss")
        state = self.task_weights_state
        if state.history:  # _save draws it with every checkpoint; drawn again here with the whole history
            plot_task_weights(state.history, self.task_names, os.path.join(output_dir, TASK_WEIGHTS_PNG),
                              self._mode_name + " task weights")
            figures[TASK_WEIGHTS_PNG] = "Task weights (alpha) of the end task and each auxiliary task over training"
        return figures

    def _card_details(self) -> dict:
        history = self.task_weights_state.history
        notes = f"{self._mode_name}."
        if history:
            final = ", ".join(f"{name} {alpha:.3f}" for name, alpha in zip(self.task_names, history[-1][1:]))
            notes = f"{self._mode_name}; final task weights: {final}."
        return {"notes": notes, "adapter": self.unwrapped(self.model).has_body_lora,
                "merged_subfolder": merged_subfolder(self.args.output_dir)}

    @property
    def _mode_name(self) -> str:
        return "META-TARTAN" if self.args.mode == "meta" else "MT-TARTAN"

    def _load_checkpoint_extras(self, resume_from_checkpoint: str) -> None:
        """Resume (after TartanModel.load_checkpoint restored the model): the task weights, their history and the
        stream positions from the checkpoint's trainer_state.json (`restore_task_weights`)."""
        restore_task_weights(self.task_weights_state, resume_from_checkpoint, self.task_names, "TARTAN")
        self._streams = None  # rebuilt at the restored positions
        self._resumed = True


def _batch_stream(data, batch_size: int, collate, seed: int, rank: int = 0, world_size: int = 1):
    """An auxiliary task's endless batches: shuffled per epoch over a dataset (`BatchStream`), or read in order
    over a streamed corpus (`StreamBatches`)."""
    kind = StreamBatches if is_stream(data) else BatchStream
    return kind(data, batch_size, collate, seed, rank=rank, world_size=world_size)


def _refuse_sharding(mode: str, sharding: Sharding) -> None:
    """FSDP and DeepSpeed ZeRO-3 shard the body's parameters, gathering each only inside its own module's forward.
    MT-TARTAN's MLM heads read the embedding matrix outside the embeddings' forward (the decoder tied through
    F.linear) and run the body once per task in one forward; META-TARTAN also takes torch.autograd.grad over full
    body parameters several times per step. Both refuse at start (META any DeepSpeed stage); DDP works. MT-TARTAN
    under ZeRO-1/2 (optimizer / gradient sharding only) is not refused, and not tested."""
    fsdp, deepspeed, zero3 = sharding
    if mode == "meta" and (fsdp or deepspeed or zero3):
        raise ValueError("TartanTrainer: META-TARTAN takes per-task gradients with torch.autograd.grad over full "
                         "body parameters (several backward passes per step); FSDP and DeepSpeed are not supported: "
                         "use DDP (torchrun / accelerate launch without FSDP or DeepSpeed)")
    if fsdp or zero3:
        raise ValueError(f"TartanTrainer: MT-TARTAN's MLM heads read the body's embedding matrix outside its "
                         f"module's forward (tied decoder), which {'FSDP' if fsdp else 'DeepSpeed ZeRO-3'} shards: "
                         "not supported; use DDP (torchrun / accelerate launch without FSDP or ZeRO-3)")


def _accumulate_grads(params: list[nn.Parameter], grads: list[torch.Tensor | None], scale: float) -> None:
    """p.grad += scale * g (p.grad = the gradient itself where there is none yet and nothing to scale or cast)."""
    for p, g in zip(params, grads):
        if g is None:
            continue
        if scale != 1.0 or g.dtype != p.dtype:
            g = g.to(p.dtype) * scale
        p.grad = g if p.grad is None else p.grad.add_(g)
