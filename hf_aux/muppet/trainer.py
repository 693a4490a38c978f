"""MUPPET pre-finetuning as a `transformers.Trainer` (Aghajanyan et al., 2021, arXiv 2101.11038).

What one optimizer update does (§3):
- it averages the gradients of `gradient_accumulation_steps * world_size` task-homogeneous sub-batches (one per
  micro-step per rank), drawn so that an update spans several tasks (§3.2, "heterogeneous batches"), with tasks
  in proportion to their natural size (§3.4). `hf_aux.sampling.TaskBatchSampler` orders them; §5.2's two
  ablations (batch- and dataset-homogeneous) are `batching=...`.
- each sub-batch's loss is its task's Table-2 loss per data point, divided by log n(i) (eq. 1,
  `hf_aux.muppet.losses`), averaged over the sub-batch. Trainer divides every micro-batch loss by the
  accumulation steps and DDP averages over ranks, so the update is exactly the mean over its sub-batches, each
  sub-batch weighing the same whatever its task or token count (`loss_is_scaled_for_ga = False`;
  `num_items_in_batch`, a token count, is deliberately unused: it would let long seq2seq targets dominate).
- optionally R3F/R4F (§3.2): + lambda * symmetric KL between predictions on clean and noise-perturbed input
  embeddings (training only); R4F also needs the model's heads (classification,
  regression, multiple choice, span) spectrally normalised (`MultiTaskModelConfig.spectral_norm_heads`).
LoRA (`peft_config=LoraConfig(...)`, issue #8): the shared body becomes a peft model with frozen base weights;
its adapters and every task head train. Checkpoints (intermediate ones too) hold the adapter (peft's
adapter_config.json + adapter_model.safetensors) and the heads, not the frozen base; resume restores both
exactly. `model.save_merged(dir)` writes a plain checkpoint that `AutoModel` loads without hf_aux or peft.
Logged every `logging_steps`: per task, the mean raw (`loss/<task>`) and scaled (`scaled_loss/<task>`) sub-batch
loss, summed across processes. `evaluate()` scores every task with its own metrics and reports their average.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from .. import metrics as task_metrics
from ..adapters import merged_subfolder
from ..data import MultiTaskCollator
from ..distributed import MicroBatchCounter, micro_batch_seed, seeded_rng
from . import METHOD
from .config import MuppetConfig
from .losses import (classification_loss, multiple_choice_loss, r3f_divergence, regression_loss,
                             sample_embedding_noise, scale_losses, seq2seq_loss, span_loss)
from ..base_trainer import AuxTrainer
from ..model_card import TaskSummary
from ..modeling.multitask import MultiTaskModel
from ..modeling.pooling import describe_pooling
from ..nonfinite import check_finite_loss
from ..sampling import MultiTaskDataset, TaskBatchSampler
from ..training_metrics import MetricAccumulator

SAMPLER_STATE_NAME = "muppet_sampler.json"
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

    train_dataset / eval_dataset: {task name: tokenised split} (rows from `hf_aux.data.tokenize_task`), every name
    one of the model's tasks. eval_examples: {task name: raw split}, needed for extractive-QA tasks (their eval
    split must be tokenised with `keep_qa_offsets=True`) to map spans back to text.
    peft_config: a `peft.LoraConfig` to train LoRA adapters on the shared body instead of all its weights (as
    trl's trainers take it); the model is changed in place (`MultiTaskModel.add_body_lora`).
    """

    # explicit: compute_loss returns the sub-batch mean; Trainer divides by the accumulation steps (see module doc)
    loss_is_scaled_for_ga = False

    def __init__(self, model: MultiTaskModel | None = None, args: MuppetConfig | None = None, data_collator=None,
                 train_dataset: dict | None = None, eval_dataset: dict | None = None, processing_class=None,
                 eval_examples: dict | None = None, peft_config=None, **kwargs):
        if not isinstance(args, MuppetConfig):
            raise ValueError(f"MuppetTrainer: field 'args': needs a MuppetConfig, got {type(args).__name__}")
        if not isinstance(model, MultiTaskModel):
            raise ValueError(f"MuppetTrainer: field 'model': needs a hf_aux MultiTaskModel, got {type(model).__name__}")
        if processing_class is None and data_collator is None:
            raise ValueError("MuppetTrainer: field 'processing_class': give the tokenizer (or a data_collator)")
        names = model.task_names
        for role, given in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            if given is None:
                continue
            if not isinstance(given, dict) or not given:
                raise ValueError(f"MuppetTrainer: field '{role}': expected a non-empty dict task name -> dataset")
            for name in given:
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

    # ------------------------------------------------------------------------------------------------------------
    # Data: task-homogeneous sub-batches in update-sized groups
    # ------------------------------------------------------------------------------------------------------------
    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("MuppetTrainer: field 'train_dataset': training needs train data")
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        sampler = TaskBatchSampler(self.train_dataset.sizes, self._train_batch_size, self.sub_batches_per_update,
                                   strategy=self.args.batching, temperature=self.args.task_sampling_temperature,
                                   seed=seed)
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

    # ------------------------------------------------------------------------------------------------------------
    # Loss
    # ------------------------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training:  # R3F noise and dropout seeded by the sub-batch's place in the update stream, so N DDP
            # processes train exactly like one with N times the accumulation, and resume is exact (hf_aux.distributed)
            seed = micro_batch_seed(self.args.seed, self._micro_batches.index(self))
            with seeded_rng(seed, self.args.device):
                return self._compute_loss(model, inputs, return_outputs)
        return self._compute_loss(model, inputs, return_outputs)

    def _compute_loss(self, model, inputs, return_outputs=False):
        body = self.accelerator.unwrap_model(model)
        task = int(inputs["task_ids"][0])  # the model resolves the head from it too (one host read per sub-batch)
        spec = body.config.tasks[task]
        kind = spec["kind"]
        model_inputs = {k: v for k, v in inputs.items() if k not in TARGET_KEYS}
        if kind == "seq2seq":  # teacher forcing; the loss is computed here, per data point
            model_inputs["decoder_input_ids"] = body._shift_right(inputs["labels"])
        robust = self.args.robust_finetuning != "none" and model.training
        if robust:  # R3F perturbs the token embeddings, so look them up here and feed them in
            embeddings = body.get_input_embeddings()(inputs["input_ids"])
            model_inputs["inputs_embeds"] = embeddings  # input_ids stay: encoder-decoders locate EOS with them
        outputs = model(**model_inputs)
        # Table 2 loss per data point and n(i), the number of predictions it ranges over
        raw, num_predictions = self._task_losses(kind, outputs, inputs)
        # eq. 1: L_i / log n(i); the sub-batch loss is the mean over its data points
        scaled = scale_losses(raw, num_predictions) if self.args.loss_scaling else raw
        loss = scaled.mean()
        if robust:
            # R3F (Aghajanyan et al., 2020, eq. 3): + lambda * KL_S(f(x) || f(x + z)), z on the input embeddings
            noise = sample_embedding_noise(embeddings, self.args.r3f_eps,
                                           "normal" if kind == "seq2seq" else "uniform")
            noisy = model(**{**model_inputs, "inputs_embeds": embeddings + noise})
            divergence = r3f_divergence(kind, outputs, noisy, choice_mask=inputs.get("choice_mask"),
                                        attention_mask=inputs.get("attention_mask"), labels=inputs.get("labels"))
            loss = loss + self.args.r3f_lambda * divergence.mean()
        if model.training:  # check its labels, the learning rate, or fp16 overflow
            parts = {"loss": loss, "task_loss": scaled.mean()}
            check_finite_loss(self, {**parts, "r3f_divergence": divergence.mean()} if robust else parts,
                              f"task '{spec['name']}': field 'loss'")
        if model.training:
            self._train_metrics.add(f"loss/{spec['name']}", raw.mean())
            self._train_metrics.add(f"scaled_loss/{spec['name']}", scaled.mean())
        return (loss, outputs) if return_outputs else loss

    def _task_losses(self, kind: str, outputs, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        if kind == "classification":
            return classification_loss(outputs.logits, inputs["labels"])
        if kind == "multiple_choice":
            return multiple_choice_loss(outputs.logits, inputs["labels"], inputs.get("choice_mask"))
        if kind == "extractive_qa":
            return span_loss(outputs.start_logits, outputs.end_logits, inputs["start_positions"],
                             inputs["end_positions"], inputs.get("attention_mask"))
        if kind == "seq2seq":
            return seq2seq_loss(outputs.logits, inputs["labels"], label_smoothing=self.args.label_smoothing_factor)
        return regression_loss(outputs.logits, inputs["labels"])

    def floating_point_ops(self, inputs) -> int:
        """6 x input tokens x non-embedding parameters, as PreTrainedModel.floating_point_ops, with the parameter
        count taken once: Trainer asks on every micro-batch, and recounting walks every task's head each time (a
        cost that would grow with the number of tasks)."""
        if getattr(self, "_flops_parameters", None) is None:
            self._flops_parameters = self.accelerator.unwrap_model(self.model).num_parameters(exclude_embeddings=True)
        return 6 * int(inputs["input_ids"].numel()) * self._flops_parameters

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:  # a training log: the per-task losses since the last one, over every process
            logs.update(self._train_metrics.reduce(self.accelerator, drop_empty=True))
        super().log(logs, start_time)

    # ------------------------------------------------------------------------------------------------------------
    # Checkpoints: MUPPET-style model folder (the sampler's description travels in trainer_state.json)
    # ------------------------------------------------------------------------------------------------------------
    # Loading: MultiTaskModel.load_checkpoint restores the body (or its LoRA adapter) and the heads (AuxTrainer).

    # ------------------------------------------------------------------------------------------------------------
    # Model card (ModelCardMixin.create_model_card; run_muppet.py writes it on every run, push_to_hub too):
    # per-task metrics of the last `evaluate()`, train sizes, a loss curve
    # ------------------------------------------------------------------------------------------------------------
    _method = METHOD
    _watch_model_loss = False  # _compute_loss checks each task's loss (check_finite_loss)
    _hf_aux_class = "hf_aux.MultiTaskModel"  # the card: `from hf_aux import MultiTaskModel`

    def _card_tasks(self, datasets: list[str], provenance: dict | None = None, **kwargs) -> list[TaskSummary]:
        """`provenance`: task name -> (Hub dataset id or None, other source) (`TaskSpec.provenance`)."""
        body = self.accelerator.unwrap_model(self.model)
        provenance = provenance or {}
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
                                         dataset=dataset, source=source))
        return summaries

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        return self._loss_curve_figure(output_dir, "MUPPET losses", "Training and evaluation loss: overall, and per "
                                       "task in panels of their own (raw losses; the scaled ones are these divided by "
                                       "log n)", exclude_prefixes=("scaled_loss/",))

    def _card_base_model(self, finetuned_from: str | None) -> str | None:
        encoder = self.accelerator.unwrap_model(self.model).config.encoder
        return finetuned_from or getattr(encoder, "_name_or_path", None)

    def _card_details(self) -> dict:
        model = self.accelerator.unwrap_model(self.model)
        return {"adapter": model.has_body_lora, "adapter_auto_class": "AutoModel",
                "merged_subfolder": merged_subfolder(self.args.output_dir),
                "notes": describe_pooling(model.config.pooling)}

    # ------------------------------------------------------------------------------------------------------------
    # Evaluation: every task with its own metrics, and their average
    # ------------------------------------------------------------------------------------------------------------
    def evaluate(self, eval_dataset: dict | None = None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """{prefix}_{task}_{metric} for every task and metric, {prefix}_{task}_loss (raw, unscaled),
        {prefix}_average_primary (mean over tasks of each kind's primary metric, `hf_aux.metrics.PRIMARY_METRIC`)
        and {prefix}_loss (mean of the task losses), logged once. Each task runs through Trainer's own
        `evaluation_loop` (batching, gathering across processes) with `prediction_step` below; its metrics come from
        `hf_aux.metrics` by task kind. (Trainer.evaluate with a dict would log and call on_evaluate per task.)"""
        datasets_by_task = eval_dataset if eval_dataset is not None else self.eval_dataset
        if not isinstance(datasets_by_task, dict) or not datasets_by_task:
            raise ValueError("MuppetTrainer.evaluate: field 'eval_dataset': expected a dict task name -> dataset")
        self._memory_tracker.start()
        start = time.time()
        body = self.accelerator.unwrap_model(self.model)
        metrics, primaries, losses = {}, [], []
        for name, data in datasets_by_task.items():
            kind = body.config.task(name)["kind"]
            output = self.evaluation_loop(self.get_eval_dataloader(data), description=f"Evaluation of {name}",
                                          prediction_loss_only=False, ignore_keys=ignore_keys,
                                          metric_key_prefix=metric_key_prefix)
            task_scores = self._task_scores(name, kind, data, output.predictions, output.label_ids)
            task_loss = output.metrics[f"{metric_key_prefix}_loss"]
            for key, value in task_scores.items():
                metrics[f"{metric_key_prefix}_{name}_{key}"] = value
            metrics[f"{metric_key_prefix}_{name}_loss"] = task_loss
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
        body = self.accelerator.unwrap_model(model)
        kind = body.config.tasks[int(inputs["task_ids"][0])]["kind"]
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


def _answers_column(examples) -> str:
    for column in examples.column_names:
        values = examples[0][column]
        if isinstance(values, dict) and "text" in values and "answer_start" in values:
            return column
    raise ValueError("MuppetTrainer: field 'eval_examples': the QA examples have no SQuAD-style answers column")


__all__ = ["MuppetConfig", "MuppetTrainer"]
