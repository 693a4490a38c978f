"""MetaLMTrainer: a teacher network meta-learns the student's pretraining objective (Shen, *Meta-learning a
Language Modeling Objective*, §3-§4), as a `transformers.Trainer` subclass.

One meta step on an unlabelled batch x_u (eqs. 1-3):
  1. the teacher turns x_u into pseudo data (x-hat, y-hat): sampled tokens (hard labels, §3.2) or probabilities
     (soft labels, §3.3: x-hat enters the student as probabilities times its input embedding matrix);
  2. eq. 1: the student's real optimizer step on them is Trainer's own (`training_step` leaves the pseudo-loss
     gradient in `.grad`; Trainer clips and steps), so the persisted parameters are theta_1;
  3. `training_step` computes theta_1 exactly, before Trainer's step, as a function of the optimizer's state
     (Trainer's clipping then torch's AdamW or SGD, `hf_aux.meta_lm.functional_optim`), differentiated for soft
     labels (the paper's "whole step differentiated"), its value only for hard labels;
  4. eq. 2: a finetuning step on a support batch, SGD with `inner_learning_rate` (0.1): theta_2, temporary;
  5. eq. 3: the query loss at theta_2 trains the teacher: hard labels scale its CE of its own samples by h (eq. 8
     cosine for adaptive optimizers, eq. 7 dot product for SGD); soft labels backpropagate through steps 4, 3, 1
     (second order, or first order through the support step with `first_order=True`);
  6. the teacher's auxiliary losses (§3.4) join its loss; its AdamW steps every
     `teacher_gradient_accumulation_steps` meta steps (§4.1).
Stepping the student inside `training_step` would make Trainer's step a second update, and deferring the meta part
would evaluate the query at the wrong parameters. `objective="mlm"`: the plain MLM baseline; `fixed_y=True`:
Appendix B item 2; `finetune_step=False` drops eq. 2 (Meta Pseudo Labels, Appendix B item 5)."""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field

import torch
from accelerate.optimizer import AcceleratedOptimizer
from torch.func import functional_call
from transformers import PreTrainedTokenizerBase
from transformers.optimization import get_scheduler
from transformers.utils import is_peft_available

from hf_aux.tasks.data import mask_tokens_for_mlm, max_predictions, prediction_positions, special_tokens_mask_for
from hf_aux.runtime.distributed import MicroBatchCounter, micro_batch_seed, seeded_rng
from hf_aux.meta_lm.functional_optim import (placed, sgd_update, student_update, student_update_values,
                                             student_update_vjp)
from hf_aux.meta_lm import METHOD
from hf_aux.meta_lm.config import MetaLMConfig
from hf_aux.meta_lm.losses import (first_order_soft_label_grads, meta_signal_h, pseudo_cross_entropy,
                                   sample_tokens_with_nll, soft_pseudo_cross_entropy, teacher_sample_cross_entropy,
                                   token_cross_entropy)
from hf_aux.runtime.trainer import AuxTrainer
from hf_aux.cards.model_card import TaskSummary, task_metrics
from hf_aux.meta_lm.teacher import MetaLMTeacher, MetaLMTokens, check_same_vocabulary
from hf_aux.runtime.nonfinite import check_finite_loss
from hf_aux.meta_lm.support_query import SupportQuerySampler
from hf_aux.tasks.streaming import is_stream
from hf_aux.runtime.tensor_ops import soft_embedding
from hf_aux.runtime.training_metrics import MetricAccumulator

TEACHER_DIR = "teacher"
OBJECTIVE_TAGS = {"soft": "soft-labels", "hard": "hard-labels", "mlm": "mlm-baseline"}
META_STATE_NAME = "meta_lm_state.pt"


@contextlib.contextmanager
def _without_checkpointing(module: torch.nn.Module):
    """Activation checkpointing off inside the block. A checkpointed layer recomputes its forward during backward
    with the module's stored parameters; under `functional_call` those are theta_0, not the theta_1/theta_2 the
    forward used (the support and query gradients came out wrong: tested), so the functional steps run without it."""
    layers = [m for m in module.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for layer in layers:
        layer.gradient_checkpointing = False
    try:
        yield
    finally:
        for layer in layers:
            layer.gradient_checkpointing = True


def _has_adapters(model) -> bool:
    """A peft model, or a transformers model with adapters injected by `add_adapter`."""
    if is_peft_available():
        from peft import PeftModel

        if isinstance(model, PeftModel):
            return True
    return bool(getattr(model, "_hf_peft_config_loaded", False))


@dataclass
class _MetaStep:
    """What one meta step's named steps (MetaLMTrainer.training_step) hand on to the next."""

    x_u: torch.Tensor                     # [B, L] unlabelled batch
    mask: torch.Tensor                    # [B, L] its attention mask
    x_logits: torch.Tensor | None = None  # [B, L, V] the teacher's input head on x_u
    y_logits: torch.Tensor | None = None  # [B, L, V] its output head (None with fixed_y)
    aux_loss: torch.Tensor | None = None  # the teacher's auxiliary losses (§3.4), 0 when off
    x_probs: torch.Tensor | None = None   # soft labels E[x-hat], E[y-hat] (§3.3)
    y_probs: torch.Tensor | None = None
    x_hat: torch.Tensor | None = None     # hard labels: the teacher's samples (§3.2) and its CE of them (eq. 6)
    y_hat: torch.Tensor | None = None
    sample_ce: torch.Tensor | None = None
    label_leaves: list = field(default_factory=list)  # first-order soft labels: p as autograd leaves
    seed: int | None = None               # the pseudo forward's dropout seed (soft labels)
    pseudo_loss: torch.Tensor | None = None
    pseudo_grads: list | None = None      # g (eq. 1), with a graph for second order
    base_label_grads: list | None = None  # first order: grad_p f(theta_0; p)
    theta_1: list | None = None
    moments: dict | None = None           # first order: the clipped g and updated moments for the VJP


@dataclass
class MetaLMCollator:
    """Pads unlabelled blocks (`input_ids` from `group_texts_for_mlm`, starting with [CLS]) into x_u. The
    masking happens in the trainer, with its own checkpointed random generator (exact resume)."""

    tokenizer: PreTrainedTokenizerBase

    def __call__(self, features):
        padded = self.tokenizer.pad([{"input_ids": f["input_ids"]} for f in features], return_tensors="pt")
        return {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"]}


class MetaLMTrainer(AuxTrainer):
    """Trainer for the meta-learned LM objective. `model` is the student (any `AutoModelForMaskedLM`-style model
    predicting a token at each position); `teacher` a `MetaLMTeacher` (built from the student's config when
    None); `train_dataset` unlabelled blocks; `labelled_tasks` maps a task name to a dataset with `input_ids`
    (tokenised with the tokenizer's special tokens: position 0 becomes the task token) and an integer `label`
    (the output is the label token `[LABEL_k]` at every position). The tokenizer must carry the task and label
    tokens (`hf_aux.meta_lm.teacher.add_meta_lm_tokens`)."""

    # compute_loss returns a per-micro-batch mean; Trainer divides by gradient_accumulation_steps (MLM baseline)
    loss_is_scaled_for_ga = False

    def __init__(self, model=None, args: MetaLMConfig = None, teacher: MetaLMTeacher | None = None,
                 labelled_tasks: dict | None = None, data_collator=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, **kwargs):
        if not isinstance(args, MetaLMConfig):
            raise ValueError("MetaLMTrainer: field 'args': pass a MetaLMConfig")
        if processing_class is None:
            raise ValueError("MetaLMTrainer: field 'processing_class': the tokenizer is required (task tokens)")
        labelled_tasks = dict(labelled_tasks or {})
        if args.objective != "mlm" and not labelled_tasks and args.mlm_task_probability < 1.0:
            raise ValueError("MetaLMTrainer: field 'labelled_tasks': the meta objectives need labelled tasks "
                             "(support and query batches), or mlm_task_probability=1")
        if args.objective != "mlm":
            for role, network in (("model", model), ("teacher", teacher)):
                if _has_adapters(network):
                    raise ValueError(f"MetaLMTrainer: field '{role}': PEFT/LoRA adapters are not supported by the meta "
                                     f"objectives ({args.objective!r}): theta_1 and the functional support/query steps "
                                     "(eqs. 1-3) are computed over the student's full parameters, and the teacher's "
                                     "soft labels are differentiated through them; pass a plain model (merge "
                                     "adapters with merge_and_unload()), or use objective='mlm' with a PeftModel")
        super().__init__(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                         data_collator=data_collator if data_collator is not None else MetaLMCollator(processing_class),
                         processing_class=processing_class, **kwargs)
        self._check_supported_setup()
        num_labels = self._check_labelled_tasks(labelled_tasks)
        self.meta_tokens = MetaLMTokens.from_tokenizer(processing_class, list(labelled_tasks), num_labels)
        self.teacher = None
        if args.objective != "mlm":
            self.teacher = teacher if teacher is not None else MetaLMTeacher.from_student_config(self.model.config)
            check_same_vocabulary(self.model, self.teacher, processing_class)
            self.teacher.to(args.device)
            # its own optimizer's updates are checked where the student's are (hf_aux.runtime.nonfinite): where Trainer
            # logs, evaluates, saves or ends, and before any model is written; every step with on_nonfinite 'skip'
            if self._nonfinite_guard is not None:  # None: on_nonfinite 'continue'
                self._nonfinite_guard.watch("the teacher", self.teacher)
        self.teacher_optimizer = self.teacher_scheduler = None
        self._resumed_teacher_state = None  # a checkpoint's teacher optimizer state, until that optimizer exists
        self._labelled = {name: self._labelled_examples(name, data) for name, data in labelled_tasks.items()}
        # the trainer's own randomness (masking, teacher samples, task and example draws): checkpointed
        self._generator = torch.Generator(device=args.device).manual_seed(args.seed)
        self._eval_generator = torch.Generator(device=args.device)
        self._micro_batches = MicroBatchCounter()  # the mlm baseline's masks (compute_loss)
        self._support_query = SupportQuerySampler(
            self._labelled, train_dataset, args.per_device_train_batch_size, args.samples_per_task,
            args.mlm_task_probability, self.meta_tokens.labels, self.meta_tokens.pad, self._mlm_example,
            self._generator, args.device)
        self._meta_steps = 0
        self._train_metrics = MetricAccumulator()  # meta/<name>, logged beside Trainer's loss

    # ---------------------------------------------------------------------------------------------- set-up
    def _check_supported_setup(self):
        if self.args.objective == "mlm":
            return
        if self.accelerator.num_processes > 1:
            raise ValueError("MetaLMTrainer: the meta objectives run on one process only: the student's functional "
                             "inner steps and theta_1 are not synchronised across DDP ranks (use objective='mlm' "
                             "for multi-process runs)")
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            raise ValueError("MetaLMTrainer: DeepSpeed and FSDP are not supported by the meta objectives (several "
                             "backward passes and functional calls over full parameters per step)")
        attn = getattr(self.model.config, "_attn_implementation", None)
        if self.args.objective == "soft" and not self.args.first_order and attn not in (None, "eager"):
            raise ValueError(f"MetaLMTrainer: second-order soft labels need a double backward through the student, "
                             f"which SDPA/flash attention lack (also on CPU); build or load the student with "
                             f"attn_implementation='eager', or use first_order=True (got {attn!r})")

    def _check_labelled_tasks(self, labelled_tasks: dict) -> int:
        num_labels = 0
        for name, data in labelled_tasks.items():
            for column in ("input_ids", "label"):
                if column not in data.column_names:
                    raise ValueError(f"task '{name}': field '{column}': column missing (has {data.column_names})")
            if len(data) == 0:
                raise ValueError(f"task '{name}': field 'dataset': it is empty")
            labels = data["label"]
            if min(labels) < 0:
                raise ValueError(f"task '{name}': field 'label': negative label {min(labels)}")
            num_labels = max(num_labels, max(labels) + 1)
        return num_labels

    def _labelled_examples(self, name: str, data) -> tuple[list[torch.Tensor], torch.Tensor]:
        ids = [torch.tensor(row, dtype=torch.long) for row in data["input_ids"]]
        for row in ids:
            row[0] = self.meta_tokens.tasks[name]  # the task token (position 0 held the tokenizer's [CLS])
        return ids, torch.tensor(data["label"], dtype=torch.long)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if self.teacher is not None and self.teacher_optimizer is None:
            self._check_student_optimizer()
            self._create_teacher_optimizer(num_training_steps)
            self._restore_teacher_optimizer()  # resuming: the state _load_from_checkpoint read
        return scheduler

    def _student_optimizer(self) -> torch.optim.Optimizer:
        opt = self.optimizer
        return opt.optimizer if isinstance(opt, AcceleratedOptimizer) else opt

    def _check_student_optimizer(self):
        opt = self._student_optimizer()
        # the optimizers functional_optim replays, and the setting each cannot have besides `maximize`
        unsupported = {torch.optim.AdamW: ("amsgrad", "AdamW"), torch.optim.SGD: ("momentum", "SGD")}
        if type(opt) not in unsupported:
            raise ValueError(f"MetaLMTrainer: field 'optim': the meta step needs theta_1 of the student's real "
                             f"optimizer step; supported: adamw_torch, adamw_torch_fused, sgd (got {type(opt)})")
        setting, name = unsupported[type(opt)]
        if any(g[setting] or g["maximize"] for g in opt.param_groups):
            raise ValueError(f"MetaLMTrainer: field 'optim': {name} with {setting}/maximize is not supported")
        if self.args.h_cosine is None:
            self.args.h_cosine = type(opt) is torch.optim.AdamW

    def _create_teacher_optimizer(self, num_training_steps: int):
        """The teacher's AdamW with the student's hyperparameters (§4.1); its schedule counts teacher steps."""
        args = self.args
        decay = set(self.get_decay_parameter_names(self.teacher))
        named = [(n, p) for n, p in self.teacher.named_parameters() if p.requires_grad]
        groups = [{"params": [p for n, p in named if n in decay], "weight_decay": args.weight_decay},
                  {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
        # the student's implementation (fused/foreach): torch's default on CPU is the per-tensor loop
        student = self._student_optimizer()
        fused = bool(student.param_groups[0].get("fused")) and type(student) is torch.optim.AdamW
        self.teacher_optimizer = torch.optim.AdamW(groups, lr=args.learning_rate,
                                                   betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
                                                   fused=fused or None, foreach=None if fused else True)
        accumulation = args.teacher_gradient_accumulation_steps
        self.teacher_scheduler = get_scheduler(
            args.lr_scheduler_type, self.teacher_optimizer,
            num_warmup_steps=math.ceil(args.get_warmup_steps(num_training_steps) / accumulation),
            num_training_steps=math.ceil(num_training_steps / accumulation),
            scheduler_specific_kwargs=args.lr_scheduler_kwargs or {})

    # ---------------------------------------------------------------------------------------------- data
    def _mlm_example(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_m, y_m) from x_u: BERT masking (Table 5), position 0 becomes the MLM task token; y_m -100 where
        nothing is predicted."""
        x_m, y_m = mask_tokens_for_mlm(
            input_ids, mask_token_id=self.meta_tokens.mask, vocab_size=self.meta_tokens.vocab_size,
            special_tokens_mask=special_tokens_mask_for(input_ids, self.processing_class) | (attention_mask == 0),
            mlm_probability=self.args.mlm_probability, mask_replace_prob=self.args.mask_replace_prob,
            random_replace_prob=self.args.random_replace_prob, generator=generator)
        x_m[:, 0] = self.meta_tokens.mlm_task
        return x_m, y_m

    # ---------------------------------------------------------------------------------------------- losses
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The student's MLM loss on (x_m, y_m) from the batch: the `mlm` baseline's training loss and every
        objective's evaluation loss (a fixed-seed mask per evaluation)."""
        rng = contextlib.nullcontext()
        if model.training:  # masks and dropout seeded by the micro-batch's place in the global stream: exact resume,
            # and N DDP processes train like one process with N times the gradient accumulation
            # (hf_aux.runtime.distributed)
            seed = micro_batch_seed(self.args.seed, self._micro_batches.index(self))
            generator = torch.Generator(device=self.args.device).manual_seed(seed)
            rng = seeded_rng(seed, self.args.device)
        else:
            generator = self._eval_generator
        x_m, y_m = self._mlm_example(inputs["input_ids"], inputs["attention_mask"], generator)
        with rng:
            outputs = model(input_ids=x_m, attention_mask=inputs["attention_mask"])
        loss = token_cross_entropy(outputs.logits, y_m)
        if model.training:
            check_finite_loss(self, {"mlm_loss": loss}, "MetaLMTrainer")
        return (loss, outputs) if return_outputs else loss

    def evaluate(self, *args, **kwargs):
        self._eval_generator.manual_seed(self.args.seed)
        return super().evaluate(*args, **kwargs)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def _teacher_aux_loss(self, input_logits: list[torch.Tensor], output_logits: list[torch.Tensor],
                          x_u_as_mlm: torch.Tensor, x_m: torch.Tensor, y_m_targets: torch.Tensor,
                          mask: torch.Tensor) -> torch.Tensor:
        """The teacher's auxiliary losses (§3.4): output (x_m, x_u) given x_u (as an MLM task) and (x_m, y_m) given
        x_m, each the mean of its two heads' token cross entropies. `input_logits`: the input head's [B, L, V] on
        the x_u-as-MLM and x_m rows; `output_logits`: the output head's on the x_u-as-MLM rows, and on the x_m
        rows only at the K prediction slots of y_m's targets ([K, V], `y_m_targets` [K], -100 at padding slots), as
        ELECTRA's generator does: the same mean over the same positions, without the [B, L, V] logits."""
        def targets(ids):
            return ids.masked_fill(mask == 0, -100)

        (input_u, input_m), (output_u, output_m) = input_logits, output_logits
        aux_input = (token_cross_entropy(input_u, targets(x_m))
                     + token_cross_entropy(output_u, targets(x_u_as_mlm))) / 2
        aux_mlm = (token_cross_entropy(input_m, targets(x_m))
                   + token_cross_entropy(output_m[None], y_m_targets[None])) / 2
        return aux_input + aux_mlm

    def _student_loss(self, student, names, params, batch, double_backward: bool = False) -> torch.Tensor:
        """CE of the student with parameters `params` on a support/query batch (eqs. 2-3); `double_backward`: its
        gradient will be differentiated (the second-order support step)."""
        with _without_checkpointing(student):
            logits = functional_call(student, dict(zip(names, params)), args=(),
                                     kwargs={key: batch[key] for key in ("input_ids", "attention_mask")})
        return token_cross_entropy(logits.logits, batch["labels"], double_backward=double_backward)

    # theta_1 of eq. 1 from the student optimizer's state (hf_aux.meta_lm.functional_optim), clipped to
    # max_grad_norm as Trainer clips: differentiable in the gradient, and as values
    def _theta_1(self, params: list[torch.Tensor], grads: list[torch.Tensor | None]) -> list[torch.Tensor]:
        return student_update(self._student_optimizer(), self.args.max_grad_norm, params, grads)

    def _theta_1_values(self, params: list[torch.Tensor], grads: list[torch.Tensor | None],
                        moments: dict | None = None) -> list[torch.Tensor]:
        return student_update_values(self._student_optimizer(), self.args.max_grad_norm, params, grads, moments)

    # ---------------------------------------------------------------------------------------------- the meta step
    def training_step(self, model, inputs, num_items_in_batch=None):
        """One meta step on the unlabelled batch x_u (module docstring), as named steps in the order they run.
        Returns the student's pseudo loss; its gradient is left in `.grad` for Trainer's optimizer step."""
        if self.args.objective == "mlm":
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        self.teacher.train()
        inputs = self._prepare_inputs(inputs)
        step = _MetaStep(x_u=inputs["input_ids"], mask=inputs["attention_mask"])  # [B, L]
        student = self.unwrapped(model)
        named = [(n, p) for n, p in student.named_parameters() if p.requires_grad]
        names, theta_0 = [n for n, _ in named], [p for _, p in named]

        with self.accelerator.autocast():  # --bf16: accelerate autocasts only the wrapped student's forward
            self._write_pseudo_data(step)                           # the teacher's x-hat, y-hat; §3.4 aux losses
        self._pseudo_step(model, student, theta_0, step)            # eq. 1: g in the student's .grad
        self._predict_theta_1(theta_0, step)                        # theta_1 as Trainer's step will make it
        support, query = self._support_query.support_and_query()   # eqs. 2-3: two batches of one task
        if self.args.objective == "soft" and not self.args.first_order:
            outputs, cotangents, ok = self._second_order_signal(student, names, step, support, query)
        else:
            outputs, cotangents, ok = self._first_order_signal(student, names, theta_0, step, support, query)
        self._accumulate_teacher_gradient(outputs, cotangents, ok, step.x_u.device)
        self._meta_steps += 1
        if self._meta_steps % self.args.teacher_gradient_accumulation_steps == 0:
            self._teacher_step()
        return step.pseudo_loss.detach()

    def _write_pseudo_data(self, step: "_MetaStep") -> None:
        """The teacher's logits over x-hat and y-hat (§3.2-3.3): one encoder forward over x_u, and for the
        auxiliary losses (§3.4) x_u as an MLM task and x_m; each head runs on its own rows' hidden states (slicing
        [3B, L, V] logits would make the backward fill a zero [3B, L, V] buffer per slice), and on the x_m row the
        output head only where y_m has a target. Hard labels: the sampled x-hat, y-hat and the teacher's CE of
        them (eq. 6); soft labels: the probabilities."""
        args, tokens, x_u, mask = self.args, self.meta_tokens, step.x_u, step.mask
        batch = x_u.shape[0]
        x_m, y_m = self._mlm_example(x_u, mask, self._generator)
        x_u_as_mlm = x_u.clone()
        x_u_as_mlm[:, 0] = tokens.mlm_task
        teacher_inputs = torch.cat([x_u, x_u_as_mlm, x_m]) if args.teacher_aux_losses else x_u
        hidden = self.teacher.encode(teacher_inputs, mask.repeat(len(teacher_inputs) // batch, 1))  # [R B, L, H]
        hidden_u, hidden_m = hidden[batch:2 * batch], hidden[2 * batch:]
        # x_m's targets in K static slots (the masker's cap, no boolean indexing: nothing waits for the device),
        # padding slots ignored: the same mean over the same positions
        slots, real = prediction_positions(y_m != -100, max_predictions(y_m.shape, args.mlm_probability))
        y_m_targets = torch.where(real, y_m.reshape(-1)[slots], -100)                      # [K]
        aux_rows = (([hidden_u, hidden_m], [hidden_u, hidden_m.flatten(0, 1)[slots]]) if args.teacher_aux_losses
                    else ([], []))
        step.x_logits, *input_aux = self.teacher.input_head.forward_each([hidden[:batch]] + aux_rows[0])  # [B, L, V]
        output = self.teacher.output_head.forward_each(([] if args.fixed_y else [hidden[:batch]]) + aux_rows[1])
        step.y_logits = None if args.fixed_y else output[0]
        step.aux_loss = step.x_logits.new_zeros(())
        if args.teacher_aux_losses:
            step.aux_loss = self._teacher_aux_loss(input_aux, output[-2:], x_u_as_mlm, x_m, y_m_targets, mask)
            self._train_metrics.add("meta/teacher_aux_loss", step.aux_loss)
        if args.objective == "soft":
            step.x_probs = step.x_logits.softmax(-1)
            step.y_probs = (torch.nn.functional.one_hot(x_u, step.x_logits.shape[-1]).to(step.x_probs.dtype)
                            if args.fixed_y else step.y_logits.softmax(-1))
        else:
            def sample(logits):  # a token per attended position (PAD elsewhere), and its -log p
                hat, nll = sample_tokens_with_nll(logits, self._generator)
                return hat.masked_fill(mask == 0, tokens.pad), nll

            step.x_hat, x_nll = sample(step.x_logits)
            step.y_hat, y_nll = (x_u, None) if args.fixed_y else sample(step.y_logits)
            step.sample_ce = teacher_sample_cross_entropy(x_nll, y_nll, mask)

    def _pseudo_step(self, model, student, theta_0: list[torch.Tensor], step: "_MetaStep") -> None:
        """eq. 1: the student's pretraining loss on the pseudo data and its gradient g, left in `.grad` for
        Trainer's step (meta objectives refuse GradScaler/DeepSpeed/DDP, so this is what
        accelerator.backward(pseudo_loss) would leave). Second-order soft labels keep g's graph; first-order ones
        take the soft labels as leaves, so the same backward gives grad_p f(theta_0; p) too."""
        args, mask, pad = self.args, step.mask, self.meta_tokens.pad
        soft = args.objective == "soft"
        if soft:
            p_x, p_y = step.x_probs, step.y_probs
            if args.first_order:
                p_x = step.x_probs.detach().requires_grad_()
                p_y = step.y_probs.detach().requires_grad_(not args.fixed_y)
                step.label_leaves = [p_x] + ([] if args.fixed_y else [p_y])
            # first order: the pseudo forward and its shifted copy share their dropout masks (one seed per meta step)
            step.seed = micro_batch_seed(args.seed, self._meta_steps)
            embedding = student.get_input_embeddings().weight
            with seeded_rng(step.seed, args.device) if args.first_order else contextlib.nullcontext():
                # [B, L, V] x [V, H]; second order differentiates this product's backward again, where
                # soft_embedding's transposes cost more than its order saves (docs/meta_lm_measurements.md)
                embeds = soft_embedding(p_x, embedding) if args.first_order else p_x @ embedding
                pseudo_logits = model(inputs_embeds=embeds, attention_mask=mask).logits
            pseudo_loss = soft_pseudo_cross_entropy(pseudo_logits, p_y, mask, pad,
                                                    double_backward=not args.first_order)
        else:
            pseudo_logits = model(input_ids=step.x_hat, attention_mask=mask).logits
            pseudo_loss = pseudo_cross_entropy(pseudo_logits, step.y_hat, mask, pad)
        check_finite_loss(self, {"pseudo_loss": pseudo_loss}, "MetaLMTrainer")  # the student's loss (eq. 1)
        if self._logs_after_this_step():  # a diagnostic over the vocabulary: measured where it is logged
            self._record_pseudo_input_statistics(step.x_u, step.x_logits, step.x_hat, mask)
        grads = torch.autograd.grad(pseudo_loss, theta_0 + step.label_leaves,
                                    create_graph=soft and not args.first_order, allow_unused=True)
        step.pseudo_grads, step.base_label_grads = list(grads[:len(theta_0)]), list(grads[len(theta_0):])
        for param, grad in zip(theta_0, step.pseudo_grads):
            if grad is not None:
                param.grad = grad.detach() if param.grad is None else param.grad + grad.detach()
        step.pseudo_loss = pseudo_loss
        self._train_metrics.add("meta/pseudo_loss", pseudo_loss)

    def _predict_theta_1(self, theta_0: list[torch.Tensor], step: "_MetaStep") -> None:
        """theta_1 exactly as Trainer's step will produce it: a function of the teacher for second-order soft
        labels, values for hard labels, values plus the optimizer moments for first order (w needs them)."""
        if self.args.objective == "soft" and not self.args.first_order:
            step.theta_1 = self._theta_1(theta_0, step.pseudo_grads)
            return
        step.moments = {} if self.args.objective == "soft" else None
        step.theta_1 = self._theta_1_values(theta_0, step.pseudo_grads, moments=step.moments)

    def _second_order_signal(self, student, names, step: "_MetaStep", support, query):
        """Soft labels, second order: the query loss at theta_2 (eq. 3) backpropagates through the support step
        (eq. 2), theta_1 and the pseudo step into the teacher. Returns (outputs, cotangents, finite?)."""
        theta_2 = step.theta_1
        if self.args.finetune_step:
            theta_2 = self._inner_step(student, names, step.theta_1, support, create_graph=True)
        query_loss = self._student_loss(student, names, theta_2, query)
        self._train_metrics.add("meta/query_loss", query_loss)
        output = self.args.lambda_meta * query_loss + step.aux_loss
        return [output], [None], torch.isfinite(output)

    def _first_order_signal(self, student, names, theta_0, step: "_MetaStep", support, query):
        """Hard labels and first-order soft labels: the query gradient at theta_2 (eq. 7), theta_2 a value; then
        hard labels scale the teacher's CE of its samples by h (eqs. 7-8), soft ones pull the query gradient back
        to the soft labels (`_first_order_soft_signal`). Returns (outputs, cotangents, finite?)."""
        args = self.args
        theta_2 = [t.detach().requires_grad_() for t in step.theta_1]
        if args.finetune_step:
            theta_2 = [t.detach().requires_grad_() for t in
                       self._inner_step(student, names, theta_2, support, create_graph=False)]
        query_loss = self._student_loss(student, names, theta_2, query)
        query_grads = torch.autograd.grad(query_loss, theta_2, allow_unused=True)
        query_grads = [torch.zeros_like(t) if g is None else g for g, t in zip(query_grads, theta_2)]
        if args.objective == "soft":
            ok, outputs, cotangents = self._first_order_soft_signal(student, names, theta_0, query_grads, step)
            outputs.append(step.aux_loss)
            cotangents.append(None)
            ok = ok & torch.isfinite(query_loss)
        else:
            with torch.no_grad():  # values (no detach per tensor)
                h = meta_signal_h(query_grads, theta_0, step.theta_1, cosine=args.h_cosine)
            outputs, cotangents = [args.lambda_meta * h.detach() * step.sample_ce + step.aux_loss], [None]
            ok = torch.isfinite(h)
            self._train_metrics.add("meta/h", h)
            self._train_metrics.add("meta/teacher_sample_ce", step.sample_ce)
        self._train_metrics.add("meta/query_loss", query_loss)
        return outputs, cotangents, ok

    def _accumulate_teacher_gradient(self, outputs, cotangents, ok, device) -> None:
        """The teacher's gradient (the meta signal plus its auxiliary losses), scaled for its accumulation and
        added to its `.grad`; a non-finite signal skips it (counted as meta/teacher_skipped)."""
        if not bool(ok):
            self._train_metrics.add_total("meta/teacher_skipped", torch.ones((), device=device))
            return
        teacher_params = [p for p in self.teacher.parameters() if p.requires_grad]
        scale = 1.0 / self.args.teacher_gradient_accumulation_steps
        kept = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
        grads = torch.autograd.grad([o for o, _ in kept], teacher_params, allow_unused=True,
                                    grad_outputs=[torch.full_like(o, scale) if c is None else c if scale == 1
                                                  else c * scale for o, c in kept])
        for param, grad in zip(teacher_params, grads):
            if grad is not None:
                param.grad = grad if param.grad is None else param.grad + grad
        self._train_metrics.add_total("meta/teacher_skipped", torch.zeros((), device=device))

    def _inner_step(self, student, names, theta_1, support, create_graph: bool) -> list[torch.Tensor]:
        """eq. 2: theta_2 = theta_1 - inner_lr * grad CE(support) (SGD, §4.1)."""
        support_loss = self._student_loss(student, names, theta_1, support, double_backward=create_graph)
        self._train_metrics.add("meta/support_loss", support_loss)
        grads = torch.autograd.grad(support_loss, theta_1, create_graph=create_graph, allow_unused=True)
        lr = self.args.inner_learning_rate
        if create_graph:
            return [t if g is None else sgd_update(t, g, lr) for t, g in zip(theta_1, grads)]
        present = [i for i, g in enumerate(grads) if g is not None]
        with torch.no_grad():  # values: one foreach call for every tensor (a call per tensor shows on small models)
            stepped = torch._foreach_add([theta_1[i] for i in present], [grads[i] for i in present], alpha=-lr)
        return placed(theta_1, present, stepped)

    def _first_order_soft_signal(self, student, names, theta_0, query_grads, step: _MetaStep):
        """First-order soft labels: the teacher's meta signal as cotangents of its soft labels
        (`first_order_soft_label_grads`): w = (dtheta_1/dg)^T v in closed form (`student_update_vjp`), then one
        forward and backward of the pseudo step at theta_0 + e w with the same dropout masks.
        Returns (finite?, [soft-label tensors of the teacher's graph], [lambda_meta * dL/dp])."""
        args, tokens, mask = self.args, self.meta_tokens, step.mask
        w = student_update_vjp(self._student_optimizer(), args.max_grad_norm, theta_0, step.pseudo_grads,
                               query_grads, step.moments)
        embedding = student.get_input_embeddings().weight
        embedding_index = next((i for i, p in enumerate(theta_0) if p is embedding), None)

        def label_grads_at(params):
            leaves = [leaf.detach().requires_grad_() for leaf in step.label_leaves]
            p_y = step.y_probs.detach() if args.fixed_y else leaves[1]
            weight = embedding.detach() if embedding_index is None else params[embedding_index]
            with seeded_rng(step.seed, args.device), _without_checkpointing(student):
                embeds = leaves[0] @ weight  # p_x
                logits = functional_call(student, dict(zip(names, params)), args=(),
                                         kwargs={"inputs_embeds": embeds, "attention_mask": mask}).logits
            loss = soft_pseudo_cross_entropy(logits, p_y, mask, tokens.pad)
            return list(torch.autograd.grad(loss, leaves))

        label_grads = first_order_soft_label_grads(label_grads_at, theta_0, w, step.base_label_grads,
                                                   args.first_order_radius, scale=args.lambda_meta)
        # finite iff their sum is (a NaN or inf entry makes it NaN or inf; a finite sum that overflows would be a
        # signal far outside float range anyway): one read pass instead of isfinite's three [B, L, V] passes
        ok = torch.isfinite(torch.stack([g.sum() for g in label_grads]).sum())
        return ok, [step.x_probs, step.y_probs][:len(label_grads)], label_grads

    def _teacher_step(self):
        if self.args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.teacher.parameters(), self.args.max_grad_norm)
        self.teacher_optimizer.step()  # its parameters are checked with the student's (__init__: the guard)
        self.teacher_scheduler.step()
        self.teacher_optimizer.zero_grad(set_to_none=True)

    # ---------------------------------------------------------------------------------------------- logging
    def _logs_after_this_step(self) -> bool:
        """Whether Trainer logs after the optimizer step in progress (logging_strategy 'steps': every
        logging_steps-th step, and the first with logging_first_step; 'epoch': every step counts, 'no': none)."""
        args = self.args
        strategy = getattr(args.logging_strategy, "value", args.logging_strategy)
        if strategy != "steps":
            return strategy == "epoch"
        step = self.state.global_step + 1
        interval = args.logging_steps if args.logging_steps >= 1 else max(1, round(args.logging_steps
                                                                                    * self.state.max_steps))
        return step % interval == 0 or (args.logging_first_step and step == 1)

    @torch.no_grad()
    def _record_pseudo_input_statistics(self, x_u, x_logits, x_hat, mask):
        """Whether the teacher's pseudo inputs collapse to a few tokens: distinct tokens of x-hat in the batch
        (sampled for hard labels, the most likely token for soft labels) against x_u's, the entropy (nats) of
        x-hat's token distribution pooled over the batch, and the mean per-position entropy of the teacher.
        Measured on the steps after which Trainer logs (`_logs_after_this_step`): a softmax over the vocabulary
        and two host syncs, which every step would pay for numbers only a log shows."""
        attended = mask.bool()
        logits = x_logits.detach()[attended]  # [N, V]
        log_probs = logits.float().log_softmax(-1)
        probs = log_probs.exp()
        tokens = logits.argmax(-1) if x_hat is None else x_hat[attended]
        pooled = probs.mean(0)
        for name, values in (("meta/x_hat_distinct", tokens), ("meta/x_u_distinct", x_u[attended])):
            self._train_metrics.add(name, torch.tensor(float(values.unique().numel()), device=x_u.device))
        self._train_metrics.add("meta/x_hat_pooled_entropy", -(pooled * pooled.clamp_min(1e-30).log()).sum())
        self._train_metrics.add("meta/x_hat_position_entropy", -(probs * log_probs).sum(-1).mean())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._train_metrics:  # means over the steps since the last log; teacher_skipped a count
            logs.update(self._train_metrics.reduce(self.accelerator))
            if self.teacher_scheduler is not None:
                logs["meta/teacher_lr"] = self.teacher_scheduler.get_last_lr()[0]
        super().log(logs, start_time)

    # ---------------------------------------------------------------------------------------------- model card
    # ModelCardMixin.create_model_card's hooks, for the student checkpoint (the notes say where the teacher is)
    _method = METHOD
    _watch_model_loss = False  # the meta step checks its own losses
    _auto_class = "AutoModelForMaskedLM"
    _pipeline_tag = "fill-mask"

    def _card_tasks(self, datasets: list[str], metrics: dict | None = None, unlabelled_name: str | None = None,
                    **kwargs) -> list[TaskSummary]:
        """`metrics`: e.g. {"eval_loss": ..., "perplexity": ...} of a final evaluation (default: the last evaluation
        in the log history); `unlabelled_name`: the unlabelled text's name in the card (default: the first dataset
        tag, else "unlabelled_text"); `datasets`: Hub dataset ids of the unlabelled text."""
        if metrics is None:
            metrics = next((entry for entry in reversed(self.state.log_history) if "eval_loss" in entry), {})
        split, scores = task_metrics(metrics)
        if isinstance(metrics.get("perplexity"), (int, float)) and math.isfinite(metrics["perplexity"]):
            scores["perplexity"] = float(metrics["perplexity"])  # run_mlm.py's key, without the eval_ prefix
        summaries = [TaskSummary(
            unlabelled_name or (datasets[0] if datasets else "unlabelled_text"), "mlm",
            train_size=len(self.train_dataset) if self.train_dataset is not None and not is_stream(
                self.train_dataset) else None,  # a streamed corpus (--streaming) has no length
            eval_size=len(self.eval_dataset) if self.eval_dataset is not None and scores else None,
            metrics=scores, dataset=datasets[0] if datasets else None, split=split)]
        if self.args.objective != "mlm":  # support and query batches of the meta objective (eqs. 2-3)
            summaries += [TaskSummary(name, "classification", train_size=len(labels))
                          for name, (_, labels) in self._labelled.items()]
        return summaries

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        return self._loss_curve_figure(output_dir, f"Meta-learned LM objective ({self.args.objective}) losses",
                                       "Student losses (pseudo data, support, query; evaluation MLM loss) and the "
                                       "teacher's auxiliary loss")

    def _card_details(self) -> dict:
        args = self.args
        objective = {"soft": "soft labels (§3.3)", "hard": "hard labels (§3.2)",
                     "mlm": "the plain MLM baseline (no teacher)"}[args.objective]
        notes = f"Objective: {objective}."
        if self.teacher is not None:
            repo = args.hub_model_id or os.path.basename(os.path.abspath(args.output_dir))
            notes += (f" The teacher that wrote the student's training examples is saved in the `{TEACHER_DIR}/` "
                      f"subfolder: `from hf_aux import MetaLMTeacher` then `MetaLMTeacher.from_pretrained(\"{repo}\", "
                      f"subfolder=\"{TEACHER_DIR}\")`.")
        return {"notes": notes, "extra_tags": [OBJECTIVE_TAGS[args.objective], "fill-mask"]}

    # ---------------------------------------------------------------------------------------------- checkpoints
    def _save_model_extras(self, output_dir: str) -> None:
        """Beside the student (a plain masked-LM checkpoint): the teacher in `teacher/`."""
        if self.teacher is not None:
            self.teacher.save_pretrained(os.path.join(output_dir, TEACHER_DIR))

    def _save_checkpoint_extras(self, checkpoint_folder: str) -> None:
        """The meta state (the teacher's optimizer: tensors, not JSON for a stateful callback), written before
        trainer_state.json, which marks a complete checkpoint (hf_aux.runtime.run_guard)."""
        os.makedirs(checkpoint_folder, exist_ok=True)
        state = {"generator": self._generator.get_state(), **self._support_query.state_dict(),
                 "meta_steps": self._meta_steps}
        if self.teacher_optimizer is not None:
            state["teacher_optimizer"] = self.teacher_optimizer.state_dict()
            state["teacher_scheduler"] = self.teacher_scheduler.state_dict()
            # teacher gradients accumulated so far (teacher_gradient_accumulation_steps > 1)
            state["teacher_grads"] = {n: p.grad for n, p in self.teacher.named_parameters() if p.grad is not None}
        torch.save(state, os.path.join(checkpoint_folder, META_STATE_NAME))

    def _load_checkpoint_extras(self, resume_from_checkpoint: str) -> None:
        """After the student: the teacher, and the meta state (the random generator, the support/query task, the
        meta step count); the teacher's optimizer state is applied once that optimizer exists (create_scheduler)."""
        teacher_dir = os.path.join(resume_from_checkpoint, TEACHER_DIR)
        if self.teacher is not None:
            if not os.path.isdir(teacher_dir):
                raise ValueError(f"MetaLMTrainer: field 'resume_from_checkpoint': {resume_from_checkpoint} has no "
                                 f"'{TEACHER_DIR}/' folder")
            self.teacher.load_state_dict(MetaLMTeacher.from_pretrained(teacher_dir).state_dict())
        path = os.path.join(resume_from_checkpoint, META_STATE_NAME)
        if not os.path.isfile(path):  # save_only_model checkpoints, or the mlm baseline's before it had one
            return
        state = torch.load(path, weights_only=True)
        self._generator.set_state(state["generator"])
        self._support_query.load_state_dict(state)
        self._meta_steps = state["meta_steps"]
        self._resumed_teacher_state = state if "teacher_optimizer" in state else None
        if self.teacher_optimizer is not None:
            self._restore_teacher_optimizer()

    def _restore_teacher_optimizer(self) -> None:
        """The teacher's optimizer, schedule and accumulated gradients from the checkpoint being resumed."""
        state, self._resumed_teacher_state = self._resumed_teacher_state, None
        if state is None:
            return
        self.teacher_optimizer.load_state_dict(state["teacher_optimizer"])
        self.teacher_scheduler.load_state_dict(state["teacher_scheduler"])
        for name, param in self.teacher.named_parameters():
            grad = state["teacher_grads"].get(name)
            param.grad = None if grad is None else grad.to(param.device)
