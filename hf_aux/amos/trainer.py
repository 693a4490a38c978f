"""AmosTrainer: ELECTRA-style pretraining with an adversarial mixture of MLM generators.

Meng et al., 2022, "Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators"
(arXiv:2204.03243). The model is an `hf_aux.amos.model.AmosModel`; the data are unmasked MLM blocks (e.g. from
`hf_aux.tasks.data.group_texts_for_mlm`), which the trainer pads and masks inside the step, or batches already
masked by `hf_aux.tasks.data.MLMCollator(tokenizer, return_original=True)` (resume then exact only at epoch ends).
Every training micro-batch draws its masks and Gumbel noise from torch's RNG seeded by its place in the global
batch stream (`hf_aux.runtime.distributed.micro_batch_seed`): resume is exact, DDP ranks draw different masks, and N
processes train exactly like one process with N times the gradient accumulation.

Logged every `logging_steps` (`eval_` prefixed on evaluation; docs/amos.md, "Logs"; <head>: `AmosModel.head_names`):
`mlm_loss/<head>`, `rtd_loss`, `rtd_accuracy_replaced` / `_original` (at p = 0.5), `rtd_auc`, `replaced_fraction`,
`mixture_weight/<head>` (Fig. 3a), `dropped_predictions` (masked tokens past the heads' static slots: 0 unless a
collator masked at a larger rate than `mlm_probability`); evaluation adds `eval_rtd_auc/<head>` and
`eval_rtd_accuracy_replaced/<head>` (Fig. 1a, 3b).
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
from peft import PeftModel
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import DataCollatorWithPadding

from ..tasks.data import mask_tokens_for_mlm, special_tokens_mask_for
from ..runtime.distributed import MicroBatchCounter, Sharding, micro_batch_seed, parameter_sharding, seeded_rng
from . import METHOD
from .config import AmosConfig
from .losses import RTD_HISTOGRAM_BINS, layer_switch_index, rtd_logit_histogram
from ..tasks.metrics import binned_auc
from ..runtime.trainer import AuxTrainer
from ..cards.model_card import TaskSummary
from ..cards.plots import logged_series, plot_weights_over_time
from .model import AmosModel
from ..runtime.nonfinite import check_finite_loss
from ..runtime.training_metrics import MetricAccumulator

MIXTURE_WEIGHTS_PNG = "mixture_weights.png"
RTD_AUC_PNG = "rtd_auc.png"


class AmosTrainer(AuxTrainer):
    """Trains an `AmosModel` (generator, mixture vector and discriminator together) with eq. 4.

    `model` must be an AmosModel; `processing_class` the tokenizer (checked against the vocabulary; it masks
    unmasked batches). Without a `data_collator`, batches are only padded and get masked in `compute_loss`.
    """

    def __init__(self, model: AmosModel, args: AmosConfig, data_collator=None, processing_class=None,
                 peft_config=None, **kwargs):
        _refuse_adapters(model, peft_config)
        if not isinstance(model, AmosModel):
            raise ValueError(f"AmosTrainer: field 'model': expected an AmosModel, got {type(model).__name__}")
        if not isinstance(args, AmosConfig):
            raise ValueError(f"AmosTrainer: field 'args': expected an AmosConfig, got {type(args).__name__}")
        vocab_size = model.get_input_embeddings().num_embeddings
        if processing_class is not None and len(processing_class) > vocab_size:
            raise ValueError(f"AmosTrainer: field 'processing_class': the tokenizer has {len(processing_class)} "
                             f"tokens but the model's vocabulary has {vocab_size}")
        if processing_class is not None and processing_class.mask_token_id is None:
            raise ValueError("AmosTrainer: field 'processing_class': the tokenizer has no mask token")
        if data_collator is None:
            if processing_class is None:
                raise ValueError("AmosTrainer: field 'processing_class': give the tokenizer, or a data_collator "
                                 "such as MLMCollator(tokenizer, return_original=True)")
            data_collator = DataCollatorWithPadding(processing_class)
        if args.mixture_weights is not None and len(args.mixture_weights) != len(model.mlm_layers):
            raise ValueError(f"AmosTrainer: field 'mixture_weights': {len(args.mixture_weights)} weights for "
                             f"{len(model.mlm_layers)} MLM heads (layers {model.mlm_layers})")
        _refuse_sharding(parameter_sharding(args))
        checkpointing_kwargs = args.activation_checkpointing_kwargs or {}
        if (args.activation_checkpointing and checkpointing_kwargs.get("use_reentrant", False)
                and model.config.generator.stop_gradient and len(model.mlm_layers) > 1
                and not model.config.generator.separate_generators):
            # the stop-gradient detaches the input of each block after a head before transformers' checkpoint
            # wrapper sees it; reentrant checkpointing then gives that block's parameters no gradient at all
            raise ValueError("AmosTrainer: field 'gradient_checkpointing_kwargs': use_reentrant=True cannot carry "
                             "the generator's stop-gradient (the block after each MLM head would get no gradient); "
                             "use {'use_reentrant': False} (the default)")
        super().__init__(model=model, args=args, data_collator=data_collator, processing_class=processing_class,
                         **kwargs)
        _refuse_sharding(parameter_sharding(args, self))  # again, as accelerate resolved it
        self._metrics = {"train": MetricAccumulator(), "eval": MetricAccumulator()}  # device sums per mode
        # running RTD-logit histograms per mode, [1 + K, 2, bins]: slot 0 the run's own samples, 1 + k head k's alone
        self._rtd_histograms = {"train": None, "eval": None}
        self._micro_batches = MicroBatchCounter()

    # ---- the loss -----------------------------------------------------------------------------------------------

    def _forward_kwargs(self) -> dict:
        """Method settings passed to AmosModel.forward (read from self.args only)."""
        mixture, head_index = self.args.mixture, None
        if mixture == "layer_switch":
            progress = self.state.global_step / max(1, self.state.max_steps)
            head_index = layer_switch_index(progress, len(self.unwrapped(self.model).mlm_layers))
            mixture = "fixed"
        fixed_weights = self.args.mixture_weights if mixture == "fixed_weights" else None
        mixture = "weights" if mixture == "fixed_weights" else mixture
        return {"mixture": mixture, "head_index": head_index, "fixed_weights": fixed_weights,
                "gumbel_temperature": self.args.gumbel_temperature,
                "adv_mlm_multiplier": self.args.adv_mlm_multiplier, "rtd_weight": self.args.rtd_weight,
                # the heads' static prediction slots: the most `_masked_batch` (mask_tokens_for_mlm) chooses
                "mlm_probability": self.args.mlm_probability}

    def _masked_batch(self, inputs: dict) -> dict:
        """The batch with an attention mask (all ones when it has none) and, when it has no labels (a collator did
        not mask it), BERT masking of its blocks at mlm_probability (§3.1: 15%; labels -100 where nothing is
        predicted), on the batch's device."""
        if inputs.get("attention_mask") is None:
            inputs = {**inputs, "attention_mask": torch.ones_like(inputs["input_ids"])}
        if "labels" in inputs:
            return inputs
        if self.processing_class is None:
            raise ValueError("AmosTrainer: the batch has no 'labels' and no tokenizer was given to mask it")
        original = inputs["input_ids"]
        masked, labels = mask_tokens_for_mlm(
            original, mask_token_id=self.processing_class.mask_token_id, vocab_size=len(self.processing_class),
            special_tokens_mask=special_tokens_mask_for(original, self.processing_class),
            mlm_probability=self.args.mlm_probability)
        return {**inputs, "input_ids": masked, "labels": labels, "original_input_ids": original}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # training: masks, Gumbel noise and dropout from the micro-batch's own seed (module docstring)
        rng = (seeded_rng(micro_batch_seed(self.args.seed, self._micro_batches.index(self)), self.args.device)
               if model.training else contextlib.nullcontext())
        with rng:
            inputs = self._masked_batch(inputs)
            # one forward: generator (eq. 2) -> mixture (eq. 3) -> Gumbel sample -> discriminator (eq. 1)
            outputs = model(**inputs, **self._forward_kwargs())
            # eq. 4: sum of the heads' MLM losses + lambda * RTD loss; the reversal in front of gamma turns the
            # mixture's share of this minimisation into maximising the RTD loss
            loss = outputs.loss
            if model.training:  # stops (or, with on_nonfinite='skip', flags the step) before the backward pass
                check_finite_loss(self, {"loss": loss, "mlm_losses": outputs.mlm_losses,
                                         "rtd_loss": outputs.rtd_loss}, "AmosTrainer")
            self._accumulate_metrics(outputs, inputs["attention_mask"], "train" if model.training else "eval")
            return (loss, outputs) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Evaluation: the AMOS loss and metrics only (per-batch masked logits have no fixed shape to gather); with
        `rtd_per_head_eval`, the discriminator's separation of each head's samples alone on the same masks."""
        inputs = self._masked_batch(self._prepare_inputs(inputs))
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
            num_heads = len(self.unwrapped(model).mlm_layers)
            if self.args.rtd_per_head_eval and num_heads > 1:
                settings = self._forward_kwargs()
                for head in range(num_heads):
                    outputs = model(**inputs, **{**settings, "mixture": "fixed", "head_index": head})
                    self._accumulate_histogram(outputs, inputs["attention_mask"], "eval", 1 + head, 1 + num_heads)
        return loss.detach(), None, None

    # ---- metrics: accumulated as tensors without host syncs, reduced across processes when logged -----------------

    @torch.no_grad()
    def _accumulate_metrics(self, outputs, attention_mask, mode: str) -> None:
        real = attention_mask.bool()
        replaced = outputs.rtd_labels.bool() & real
        original = ~outputs.rtd_labels.bool() & real
        says_replaced = outputs.rtd_logits > 0
        gamma = outputs.mixture_weights  # [S, K] at the S prediction slots, of which `predicted` are masked
        predicted = outputs.predicted.unsqueeze(1).to(gamma.dtype)
        num_masked = outputs.predicted.sum()
        metrics = self._metrics[mode]
        heads = self.unwrapped(self.model).head_names
        for head, mlm_loss in zip(heads, outputs.mlm_losses):
            metrics.add(f"mlm_loss/{head}", mlm_loss)
        metrics.add("rtd_loss", outputs.rtd_loss)
        metrics.add("rtd_accuracy_replaced", (says_replaced & replaced).sum(), count=replaced.sum())
        metrics.add("rtd_accuracy_original", (~says_replaced & original).sum(), count=original.sum())
        # replaced tokens sit at masked positions only: the share of the M masked positions that were replaced
        metrics.add("replaced_fraction", replaced.sum(), count=num_masked)
        for head, weight in zip(heads, (gamma * predicted).sum(dim=0)):
            metrics.add(f"mixture_weight/{head}", weight, count=num_masked)
        # masked positions the heads did not see (a batch masked past `max_predictions`: 0 with hf_aux's maskers)
        metrics.add_total("dropped_predictions", outputs.dropped_predictions)
        self._accumulate_histogram(outputs, attention_mask, mode, slot=0, slots=1 + gamma.shape[1])

    @torch.no_grad()
    def _accumulate_histogram(self, outputs, attention_mask, mode: str, slot: int, slots: int) -> None:
        """Add this batch's RTD-logit histogram (replaced vs original, non-pad tokens) to `slot`."""
        if self._rtd_histograms[mode] is None:
            self._rtd_histograms[mode] = torch.zeros(slots, 2, RTD_HISTOGRAM_BINS, device=outputs.rtd_logits.device)
        self._rtd_histograms[mode][slot] += rtd_logit_histogram(outputs.rtd_logits, outputs.rtd_labels,
                                                                attention_mask)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "eval" if any(key.startswith("eval_") for key in logs) else "train"
        if self._metrics[mode]:
            prefix = "eval_" if mode == "eval" else ""
            logs.update({prefix + name: value for name, value in
                         self._metrics[mode].reduce(self.accelerator).items()})
            logs.update(self._separation_logs(prefix, mode))
        super().log(logs, start_time)

    def _separation_logs(self, prefix: str, mode: str) -> dict[str, float]:
        """rtd_auc from the accumulated histograms (reduced across processes), and per head (slots that saw
        batches) the AUC and the replaced-token accuracy at p = 0.5 on that head's samples."""
        histograms = self._rtd_histograms[mode]
        if histograms is None:
            return {}
        histograms = self.accelerator.reduce(histograms, reduction="sum").cpu().numpy()
        self._rtd_histograms[mode] = None
        logs = {prefix + "rtd_auc": binned_auc(histograms[0])}
        for head, histogram in zip(self.unwrapped(self.model).head_names, histograms[1:]):
            replaced = histogram[1]
            if replaced.sum() > 0:
                logs[f"{prefix}rtd_auc/{head}"] = binned_auc(histogram)
                logs[f"{prefix}rtd_accuracy_replaced/{head}"] = float(
                    replaced[RTD_HISTOGRAM_BINS // 2:].sum() / replaced.sum())
        return logs

    # ---- model card (ModelCardMixin.create_model_card; Trainer.push_to_hub calls it too) ---------------------------
    # the RTD and per-head MLM metrics of the last evaluation (model-index), training sizes, loss_curve.png,
    # mixture_weights.png (the mean mixture weight of each MLM head over training, Fig. 3a) and rtd_auc.png.
    # `finetuned_from`: the checkpoint the run started from (None: from scratch).
    _method = METHOD
    _watch_model_loss = False  # compute_loss checks the generator's and discriminator's losses
    _hf_aux_class = "hf_aux.AmosModel"  # the card: `from hf_aux import AmosModel`

    def _card_tasks(self, datasets: list[str], source: str | None = None, **kwargs) -> list[TaskSummary]:
        """`datasets`: the Hub dataset the text came from (then in the model-index); `source`: where other text
        came from, for the card's task table."""
        heads = self.unwrapped(self.model).head_names
        origin = {"dataset": datasets[0] if datasets else None, "source": None if datasets else source}
        last_eval = next((entry for entry in reversed(self.state.log_history) if "eval_rtd_loss" in entry), {})

        def finite(names):  # card metric name -> logged key, kept when it was logged as a finite number
            return {card: last_eval[key] for card, key in names.items()
                    if isinstance(last_eval.get(key), (int, float)) and math.isfinite(last_eval[key])}

        # a streamed corpus (hf_aux.tasks.streaming) has no length
        train_size = len(self.train_dataset) if hasattr(self.train_dataset, "__len__") else None
        eval_size = len(self.eval_dataset) if self.eval_dataset is not None and last_eval else None

        def summary(name, kind, metrics):
            return TaskSummary(name, kind, train_size=train_size, eval_size=eval_size, **origin,
                               metrics=finite(metrics))

        return ([summary("replaced_token_detection", "rtd", {
                    "loss": "eval_rtd_loss", "accuracy_replaced": "eval_rtd_accuracy_replaced",
                    "accuracy_original": "eval_rtd_accuracy_original", "auc": "eval_rtd_auc"})]
                + [summary(f"rtd_on_{h}_samples", "rtd", {"accuracy_replaced": f"eval_rtd_accuracy_replaced/{h}",
                                                          "auc": f"eval_rtd_auc/{h}"})
                   for h in heads if f"eval_rtd_auc/{h}" in last_eval]
                + [summary(f"mlm_{h}", "mlm", {"loss": f"eval_mlm_loss/{h}"}) for h in heads])

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        history = self.state.log_history
        figures = self._loss_curve_figure(output_dir, "AMOS losses",
                                          "Training losses (total, RTD, per MLM head) and evaluation loss")
        weights = logged_series(history, "mixture_weight/")
        if weights:
            plot_weights_over_time(weights, os.path.join(output_dir, MIXTURE_WEIGHTS_PNG),
                                   title=f"AMOS mixture weights ({self.args.mixture})",
                                   ylabel="mean mixture weight")
            figures[MIXTURE_WEIGHTS_PNG] = "Mean mixture weight of each generator MLM head over training"
        # one point per step (the last): an evaluation at the final step and the run's closing evaluate() share it
        separation = {("train" if name == "rtd_auc" else "eval" + name[len("eval_rtd_auc"):].replace("/", " ")):
                      list(dict(points).items()) for name, points in logged_series(history, "").items()
                      if name in ("rtd_auc", "eval_rtd_auc") or name.startswith("eval_rtd_auc/")}
        if separation:
            plot_weights_over_time(separation, os.path.join(output_dir, RTD_AUC_PNG),
                                   title="Discriminator separation (AUC, replaced vs original tokens)",
                                   ylabel="RTD AUC (0.5 = chance)")
            figures[RTD_AUC_PNG] = ("AUC of the discriminator's P(replaced) over replaced vs original tokens: on "
                                    "training batches, on evaluation, and on each head's samples alone")
        return figures

    def _card_details(self) -> dict:
        amos = self.unwrapped(self.model)
        pretraining_head = "ElectraForPreTraining" in (amos.discriminator.config.architectures or [])
        return {"auto_class": "AutoModelForPreTraining" if pretraining_head else "AutoModel",
                "notes": (f"Separate generators of depths {', '.join(map(str, amos.mlm_layers))}"
                          if amos.config.generator.separate_generators else
                          f"Generator MLM heads at layers {', '.join(map(str, amos.mlm_layers))}")
                         + f"; mixture '{self.args.mixture}'."}


def _refuse_adapters(model, peft_config) -> None:
    """AMOS pretrains both encoders from scratch (eq. 4 trains every generator, mixture and discriminator
    parameter), so LoRA adapters have nothing to adapt: refuse a `peft_config`, a PeftModel, or adapters already
    injected into the AmosModel."""
    if peft_config is not None:
        raise ValueError("AmosTrainer: field 'peft_config': AMOS pretrains its generator and discriminator from "
                         "scratch and does not support PEFT / LoRA; train the full AmosModel, then fine-tune the "
                         "saved discriminator with LoRA (e.g. MuppetTrainer or TartanTrainer with peft_config)")
    if isinstance(model, PeftModel) or any(isinstance(m, BaseTunerLayer) for m in model.modules()):
        raise ValueError(f"AmosTrainer: field 'model': got {type(model).__name__} with PEFT / LoRA adapters; AMOS "
                         "pretrains from scratch and does not support PEFT: pass a plain AmosModel")


def _refuse_sharding(sharding: Sharding) -> None:
    """FSDP and DeepSpeed ZeRO-3 shard parameters and gather each only inside its own module's forward. AMOS reads
    the shared token-embedding matrix outside the embeddings' forward (the generator's tied MLM output projection
    and the straight-through one-hot times the embeddings, whose backward multiplies by the full matrix), so it
    refuses them at start. DDP works (tests/test_ddp.py); ZeRO-1/2 (optimizer / gradient sharding only) is not
    refused, and not tested."""
    if sharding.fsdp or sharding.zero3:
        sharder = "FSDP" if sharding.fsdp else "DeepSpeed ZeRO-3"
        raise ValueError(f"AmosTrainer: AMOS reads the shared token-embedding matrix outside its module's forward "
                         f"(tied MLM output projection, straight-through one-hot x embeddings), which {sharder} "
                         "shards: not supported; use DDP (torchrun / accelerate launch without FSDP or ZeRO-3)")
