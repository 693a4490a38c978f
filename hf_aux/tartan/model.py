"""TartanModel: a shared body, the end-task head phi', one MLM head per auxiliary task, a meta head phi*
(Dery et al., 2022, "Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative", §3).

- the end task and phi' are an ordinary `AutoModelForSequenceClassification` (`model.classifier`) whose body
  (`classifier.base_model`) every task shares, so the trained end-task model is a vanilla checkpoint;
- auxiliary tasks (TAPT, DAPT, any corpus): an MLM head each on the body's last hidden states, the decoder tied to
  the input embeddings, its own transform and output bias; logits only at masked positions;
- phi* (§3.3): a copy of the classifier's own head, re-initialised and fitted on frozen body features for every
  meta step (`fit_meta_head`), never trained by the main optimizer and never saved.

Checkpoint (`save_pretrained`): config.json + model.safetensors, the end-task classifier as its own class saves it
(plain `AutoModelForSequenceClassification.from_pretrained` loads it with no missing or unexpected keys);
tartan_config.json (auxiliary task names, MLM head settings); tartan_heads.safetensors (the MLM heads).

LoRA (`add_body_lora(LoraConfig)`, what `TartanTrainer(peft_config=...)` calls): the body becomes a `peft.PeftModel`
inside the classifier, base weights frozen, and `body_parameters()` are exactly the adapters. Checkpoints then hold
peft's adapter files, end_task_head.safetensors (phi'), the MLM heads and the end-task config, not the frozen base;
`from_pretrained(dir, base_model=...)` restores them, `save_merged(dir)` writes the plain layout with them merged.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING
from transformers.utils import ModelOutput

from ..runtime.adapters import (ADAPTER_CONFIG_NAME, adapter_base_model, is_lora_body, load_lora_body,
                                load_lora_weights, lora_body, merged_body, save_lora_body)
from ..modeling.sentence_transformers_files import copy_sentence_transformers_files
from ..tasks.data import max_predictions, prediction_positions
from .weighting import fit_meta_head

TARTAN_CONFIG_NAME = "tartan_config.json"
TARTAN_HEADS_NAME = "tartan_heads.safetensors"
END_TASK_HEAD_NAME = "end_task_head.safetensors"  # phi', in LoRA checkpoints only
BODY_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")
HUB_KWARGS = ("cache_dir", "revision", "token", "local_files_only", "trust_remote_code")


@dataclass
class TartanOutput(ModelOutput):
    """loss: the end-task loss (scalar); logits: [batch, num_labels]; auxiliary_losses: [num_auxiliary_tasks],
    one MLM loss per auxiliary task in `TartanModel.auxiliary_tasks` order (only when auxiliary batches were given).
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    auxiliary_losses: torch.Tensor | None = None


class MaskedLMHead(nn.Module):
    """dense -> activation -> LayerNorm -> decoder tied to the body's input embeddings (+ own bias).

    hidden [M, hidden_size] (hidden states at the masked positions only) -> logits [M, vocab_size].
    """

    def __init__(self, hidden_size: int, embedding_size: int, vocab_size: int, hidden_act: str = "gelu",
                 layer_norm_eps: float = 1e-12):
        super().__init__()
        if hidden_act not in ACT2FN:
            raise ValueError(f"TartanModel: field 'mlm_hidden_act': unknown activation {hidden_act!r}")
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.activation = ACT2FN[hidden_act]
        self.layer_norm = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        return F.linear(self.layer_norm(self.activation(self.dense(hidden))), embedding_weight, self.bias)


class _GivenBodyOutputs(nn.Module):
    """Stands in for a classifier's body: returns the body outputs it was handed (see `ClassifierHead`)."""

    def __init__(self):
        super().__init__()
        self.outputs = None

    def forward(self, *args, **kwargs):
        if self.outputs is None:
            raise RuntimeError("the meta head was called without body outputs")
        return self.outputs


class ClassifierHead(nn.Module):
    """A copy of a sequence classifier's head alone: the classifier class's own forward runs with its body
    replaced by the outputs given, so the head is whatever that architecture puts after its body (no
    per-architecture code). `forward(body_outputs, labels, attention_mask)` returns the classifier's own output
    (loss, logits); the attention mask reaches heads that pool with it (ModernBERT's classifier_pooling="mean")."""

    def __init__(self, classifier: PreTrainedModel):
        super().__init__()
        prefix = classifier.base_model_prefix
        body = getattr(classifier, prefix)
        setattr(classifier, prefix, _GivenBodyOutputs())
        try:
            self.model = copy.deepcopy(classifier)  # copies the head only: the body slot holds the stand-in
        finally:
            setattr(classifier, prefix, body)
        self.prefix = prefix

    def forward(self, body_outputs, labels: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None):
        stand_in = getattr(self.model, self.prefix)
        stand_in.outputs = body_outputs
        mask = {} if attention_mask is None else {"attention_mask": attention_mask}
        try:
            return self.model(labels=labels, **mask)
        finally:
            stand_in.outputs = None

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator, std: float) -> None:
        """Fresh initialisation from `generator` (a CPU generator, so the draw is the same on every device):
        linear weights ~ N(0, std), biases 0, LayerNorm 1 / 0."""
        for name, module in self.model.named_modules():
            if not list(module.parameters(recurse=False)):
                continue
            if isinstance(module, nn.Linear):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()  # weight 1, bias 0
            else:
                raise ValueError(  # noqa: TRY004
                    f"TartanModel: the classifier head has parameters in a {type(module).__name__} ({name!r}) that "
                    "the meta head cannot re-initialise; only Linear and LayerNorm layers are supported")


def layer_norm_eps(config) -> float:
    """The config's LayerNorm epsilon: `layer_norm_eps` (BERT and most encoders), `norm_eps` (ModernBERT), else
    BERT's 1e-12 (DistilBERT hard-codes it)."""
    for name in ("layer_norm_eps", "norm_eps"):
        value = getattr(config, name, None)
        if isinstance(value, float):
            return value
    return 1e-12


def _copy_or_reset(target: torch.Tensor, source: torch.Tensor | None, missing: float) -> None:
    """target <- source, or `missing` where the source has no such tensor (a layer without bias or affine
    weights computes as one whose bias is 0 / weight is 1)."""
    if source is None:
        target.fill_(missing)
    else:
        target.copy_(source)


def _detached(outputs):
    """A copy of a body's ModelOutput with every tensor detached (the frozen-body features phi* is fitted on)."""
    def detach(value):
        return value.detach() if isinstance(value, torch.Tensor) else value

    return type(outputs)(**{key: tuple(map(detach, value)) if isinstance(value, tuple) else detach(value)
                            for key, value in outputs.items()})


def _saved_metadata(path: str, auxiliary_tasks: Sequence[str] | None) -> dict:
    """A checkpoint's tartan_config.json, its auxiliary tasks checked against those asked for (None: any)."""
    with open(os.path.join(path, TARTAN_CONFIG_NAME)) as f:
        metadata = json.load(f)
    if auxiliary_tasks is not None and list(auxiliary_tasks) != metadata["auxiliary_tasks"]:
        raise ValueError(f"field 'auxiliary_tasks': {list(auxiliary_tasks)} differs from the checkpoint's "
                         f"{metadata['auxiliary_tasks']}")
    return metadata


class TartanModel(nn.Module):
    """The TARTAN multi-task model (module docstring). `classifier`: any `XForSequenceClassification`; its body
    is shared. `auxiliary_tasks`: names of the MLM auxiliary tasks (e.g. ["tapt", "dapt"]).

    `forward(input_ids, attention_mask, token_type_ids, labels)` is the end task alone (what evaluation and
    prediction call); with `auxiliary_batches={name: {input_ids, attention_mask, labels}}` it also returns each
    auxiliary task's MLM loss from the same call (MT-TARTAN's single forward, one DDP forward per step).
    """

    def __init__(self, classifier: PreTrainedModel, auxiliary_tasks: Sequence[str] = (), mlm_hidden_act: str = "gelu",
                 mlm_probability: float | None = None):
        super().__init__()
        if not isinstance(classifier, PreTrainedModel) or classifier.base_model is classifier:
            raise ValueError("TartanModel: field 'classifier': expected a transformers XForSequenceClassification "
                             f"(a body plus a head), got {type(classifier).__name__}")
        if getattr(classifier.config, "is_encoder_decoder", False):
            raise ValueError("TartanModel: field 'classifier': encoder-decoder classifiers are not supported; use "
                             "an encoder (BERT, RoBERTa, ELECTRA, DeBERTa, MiniLM, ...)")
        names = list(auxiliary_tasks)
        for name in names:
            if not isinstance(name, str) or not name or any(c in name for c in "/\\. ") or name.startswith("_"):
                raise ValueError(f"task {name!r}: field 'name': an auxiliary task name must be a non-empty string "
                                 "without '/', '\\', '.', spaces or a leading '_'")
            if names.count(name) > 1:
                raise ValueError(f"task '{name}': field 'name': appears twice in auxiliary_tasks")
        self.classifier = classifier
        self.auxiliary_tasks = names
        self.mlm_hidden_act = mlm_hidden_act
        config = classifier.config
        vocab_size, embedding_size = classifier.get_input_embeddings().weight.shape
        self.mlm_heads = nn.ModuleDict({name: MaskedLMHead(config.hidden_size, embedding_size, vocab_size,
                                                           mlm_hidden_act, layer_norm_eps(config)) for name in names})
        std = getattr(config, "initializer_range", 0.02)
        for head in self.mlm_heads.values():
            nn.init.normal_(head.dense.weight, std=std)
            nn.init.zeros_(head.dense.bias)
        self.meta_head = ClassifierHead(classifier)
        self.meta_head.requires_grad_(False)
        # the auxiliary batches' masking rate (TartanConfig.mlm_probability): the MLM heads read `max_predictions`
        # static slots per batch, the most the masker chooses; None: every position (exact for any masking)
        self.mlm_probability = mlm_probability

    # ------------------------------------------------------------------------------------------------------------
    @property
    def config(self):
        """The end-task classifier's config (what Trainer and model cards read)."""
        return self.classifier.config

    @property
    def body(self) -> nn.Module:
        return self.classifier.base_model

    def body_parameters(self) -> list[nn.Parameter]:
        """theta_body: the shared body's trainable parameters (the cosines of Algorithm 1 are taken over these)."""
        return [p for p in self.body.parameters() if p.requires_grad]

    def end_task_head_parameters(self) -> list[nn.Parameter]:
        """phi': the classifier's parameters outside its body."""
        body = {id(p) for p in self.body.parameters()}
        return [p for p in self.classifier.parameters() if p.requires_grad and id(p) not in body]

    def auxiliary_head_parameters(self, name: str) -> list[nn.Parameter]:
        return [p for p in self.mlm_heads[name].parameters() if p.requires_grad]

    @property
    def has_body_lora(self) -> bool:
        return is_lora_body(self.body)

    def add_body_lora(self, peft_config) -> None:
        """LoRA adapters (a `peft.LoraConfig`) on the shared body, inside the classifier: base weights frozen, the
        heads untouched (phi' and the MLM heads train, phi* stays frozen)."""
        setattr(self.classifier, self.classifier.base_model_prefix, lora_body(self.body, peft_config))

    def end_task_head_state_dict(self) -> dict[str, torch.Tensor]:
        """phi': the classifier's weights outside its body, under the classifier's own keys."""
        prefix = self.classifier.base_model_prefix + "."
        return {k: v.detach().contiguous().cpu() for k, v in self.classifier.state_dict().items()
                if not k.startswith(prefix)}

    def _load_end_task_head(self, path: str) -> None:
        state = load_file(os.path.join(path, END_TASK_HEAD_NAME))
        expected = set(self.end_task_head_state_dict())
        if set(state) != expected:
            raise ValueError(f"{path!r}: {END_TASK_HEAD_NAME} does not match the classifier's head (missing "
                             f"{sorted(expected - set(state))[:5]}, unexpected {sorted(set(state) - expected)[:5]})")
        self.classifier.load_state_dict(state, strict=False)

    # Activation (gradient) checkpointing of the shared body: Trainer calls these for `activation_checkpointing`
    # / `gradient_checkpointing`. Every task's forward goes through the same body layers, so all are recomputed.
    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, every_n_layers: int = 1,
                                        offload: bool = False) -> None:
        kwargs = activation_checkpointing_kwargs or {"use_reentrant": False}  # autograd.grad needs non-reentrant
        self.classifier.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs,
                                                        every_n_layers=every_n_layers, offload=offload)

    def activation_checkpointing_disable(self) -> None:
        self.classifier.activation_checkpointing_disable()

    @property
    def is_activation_checkpointing(self) -> bool:
        return self.classifier.is_activation_checkpointing

    # ------------------------------------------------------------------------------------------------------------
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, auxiliary_batches=None):
        inputs = {k: v for k, v in (("input_ids", input_ids), ("attention_mask", attention_mask),
                                    ("token_type_ids", token_type_ids)) if v is not None}
        outputs = self.classifier(**inputs, labels=labels)
        if auxiliary_batches is None:
            return outputs
        missing = [name for name in self.auxiliary_tasks if name not in auxiliary_batches]
        if missing:
            raise ValueError(f"task '{missing[0]}': field 'auxiliary_batches': no batch given for it")
        losses = [self.mlm_loss(name, auxiliary_batches[name]) for name in self.auxiliary_tasks]
        auxiliary = torch.stack(losses) if losses else outputs.logits.new_zeros(0)
        return TartanOutput(loss=outputs.loss, logits=outputs.logits, auxiliary_losses=auxiliary)

    def mlm_loss(self, name: str, batch: dict) -> torch.Tensor:
        """Masked-LM cross-entropy of auxiliary task `name` on `batch` (labels -100 where nothing is predicted),
        mean over predicted tokens; 0 when the batch predicts no token (no host sync to find out)."""
        if name not in self.mlm_heads:
            raise ValueError(f"task '{name}': field 'name': the model has no MLM head for it "
                             f"(it has {self.auxiliary_tasks})")
        hidden = self.body_outputs(batch).last_hidden_state  # [B, L, H]
        return self._head_mlm_loss(name, hidden, batch["labels"], self.classifier.get_input_embeddings().weight)

    def _head_mlm_loss(self, name: str, hidden: torch.Tensor, labels: torch.Tensor,
                       embedding: torch.Tensor) -> torch.Tensor:
        """Head `name`'s MLM cross-entropy on body states `hidden` [B, L, H], mean over the M labelled positions
        (labels != -100), logits only at S >= M static slots (`prediction_positions`: the labelled positions, then
        padding whose -100 target adds nothing), S = `max_predictions((B, L), self.mlm_probability)`."""
        if hidden.shape[:2] != labels.shape:
            raise ValueError(self._pooled_states_message(hidden.shape[1], labels.shape[1]))
        chosen = labels != -100
        positions, predicted = prediction_positions(chosen, max_predictions(labels.shape, self.mlm_probability))
        states = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)  # [S, H]
        logits = self.mlm_heads[name](states, embedding)  # [S, V]
        total = F.cross_entropy(logits.float(), labels.reshape(-1).gather(0, positions), reduction="sum")
        return total / predicted.sum().clamp_min(1)

    def check_token_states(self) -> None:
        """The MLM heads predict each masked token from its own body state: refuse a body whose last_hidden_state
        has fewer positions than its input (one that pools the sequence, as Funnel's FunnelBaseModel does between
        its blocks), found on an 8-token probe in eval mode, before any training."""
        embedding = self.classifier.get_input_embeddings().weight
        probe = torch.arange(8, device=embedding.device).remainder(embedding.shape[0]).unsqueeze(0)  # [1, 8]
        was_training = self.body.training
        self.body.eval()
        try:
            with torch.no_grad():
                positions = self.body(input_ids=probe, attention_mask=torch.ones_like(probe)).last_hidden_state.shape[1]
        finally:
            self.body.train(was_training)
        if positions != probe.shape[1]:
            raise ValueError(self._pooled_states_message(positions, probe.shape[1]))

    def _pooled_states_message(self, positions: int, tokens: int) -> str:
        pooling = " (block_sizes: it pools between blocks)" if hasattr(self.config, "block_sizes") else ""
        return (f"TartanModel: field 'classifier': {type(self.body).__name__} gives {positions} states for {tokens} "
                f"tokens{pooling}; the auxiliary MLM heads need one state per token: use an encoder that keeps the "
                "sequence length (BERT, RoBERTa, DeBERTa-v2, ELECTRA, ModernBERT, ...)")

    @contextmanager
    def capture_body_outputs(self):
        """Within the block, the body's most recent outputs (detached) are in the yielded list's last entry: the
        end-task forward's features, reused to fit phi* without a second body forward."""
        captured = []
        handle = self.body.register_forward_hook(lambda module, args, output: captured.append(_detached(output)))
        try:
            yield captured
        finally:
            handle.remove()

    def body_outputs(self, batch: dict):
        return self.body(**{k: batch[k] for k in BODY_INPUT_KEYS if k in batch})

    def fit_meta_head(self, features, labels: torch.Tensor, *, steps: int, lr: float, weight_decay: float,
                      generator: torch.Generator, attention_mask: torch.Tensor | None = None) -> list[float]:
        """estimate_meta_head of Algorithm 1: re-initialise phi* and fit it for `steps` Adam steps (L2 weight
        decay `weight_decay`, as in §4) on fixed body `features` (detached body outputs of end-task train
        examples, with their `attention_mask` for heads that pool with it) with `labels`; the body gets no
        gradient. Returns the losses (tensors: no host sync), for diagnostics."""
        head = self.meta_head
        head.reset_parameters(generator, getattr(self.config, "initializer_range", 0.02))
        return fit_meta_head(list(head.parameters()), lambda: head(features, labels, attention_mask).loss, steps=steps,
                             lr=lr, weight_decay=weight_decay)

    def copy_mlm_head(self, masked_lm: PreTrainedModel) -> None:
        """Start every auxiliary MLM head from a pretrained masked-LM head (`masked_lm`, an
        `AutoModelForMaskedLM` of the same checkpoint as the body), as TAPT/DAPT continued pretraining does (the
        paper starts from RoBERTa's). Architecture-generic: the head's one [embedding, hidden] Linear is the
        transform, its LayerNorm the norm, the output embeddings' bias the output bias (a bias or LayerNorm weight
        the head lacks, as ModernBERT's, is copied as its neutral value: 0 / 1); the decoder weight must be the
        body's input embedding matrix (tied, as every head here is). The activation (the config's `hidden_act`,
        `classifier_activation` or `activation`, or gelu / gelu_new) is the one with which the copy reproduces the
        masked LM's own logits on a probe sequence; a copy that reproduces them with none is refused."""
        body_params = {id(p) for p in masked_lm.base_model.parameters()}
        output = masked_lm.get_output_embeddings()
        embedding = self.classifier.get_input_embeddings().weight
        name = type(masked_lm).__name__
        if output is None or not isinstance(getattr(output, "weight", None), torch.Tensor):
            raise ValueError(f"TartanModel: field 'masked_lm': {name} has no output embeddings "
                             "(get_output_embeddings() is None): no MLM head to copy")
        if output.weight.shape != embedding.shape or not torch.equal(output.weight.detach().cpu(),
                                                                      embedding.detach().cpu()):
            raise ValueError(f"TartanModel: field 'masked_lm': {name}'s decoder is not the body's input embedding "
                             "matrix (another checkpoint, or an untied decoder): its head cannot be copied")
        target = next(iter(self.mlm_heads.values()), None)
        if target is None:
            return
        head_modules = [m for m in masked_lm.modules() if m is not output
                        and any(id(p) not in body_params for p in m.parameters(recurse=False))]
        dense = [m for m in head_modules if isinstance(m, nn.Linear) and m.weight.shape == target.dense.weight.shape]
        norms = [m for m in head_modules if isinstance(m, nn.LayerNorm)
                 and tuple(m.normalized_shape) == tuple(target.layer_norm.normalized_shape)]
        if len(dense) != 1 or len(norms) != 1:
            raise ValueError(f"TartanModel: field 'masked_lm': cannot map {name}'s MLM head (found {len(dense)} "
                             f"transform Linear and {len(norms)} LayerNorm layers of the expected shapes; expected "
                             "one each: dense -> activation -> LayerNorm -> tied decoder)")
        with torch.no_grad():
            for head in self.mlm_heads.values():
                head.dense.weight.copy_(dense[0].weight)
                _copy_or_reset(head.dense.bias, dense[0].bias, 0.0)
                _copy_or_reset(head.layer_norm.weight, norms[0].weight, 1.0)
                _copy_or_reset(head.layer_norm.bias, norms[0].bias, 0.0)
                _copy_or_reset(head.bias, getattr(output, "bias", None), 0.0)
        activation = self._reproducing_activation(masked_lm, target)
        for head in self.mlm_heads.values():
            head.activation = ACT2FN[activation]
        self.mlm_hidden_act = activation  # saved in tartan_config.json: a reloaded head computes the same

    def _reproducing_activation(self, masked_lm: PreTrainedModel, head: MaskedLMHead) -> str:
        """The activation with which `head` (already holding the copied weights) gives `masked_lm`'s own logits
        on a fixed probe sequence (eval mode): the closest of the candidates, within 1e-3 (relative)."""
        config = masked_lm.config
        candidates = [self.mlm_hidden_act, *(getattr(config, key, None) for key in
                                             ("hidden_act", "classifier_activation", "activation")), "gelu", "gelu_new"]
        candidates = [c for c in dict.fromkeys(candidates) if isinstance(c, str) and c in ACT2FN]
        vocab_size, device, dtype = head.bias.shape[0], head.bias.device, head.bias.dtype
        probe = torch.randint(vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
        probe = probe.to(masked_lm.get_input_embeddings().weight.device)
        was_training, kept = masked_lm.training, head.activation
        masked_lm.eval()
        errors = {}
        try:
            with torch.no_grad():
                inputs = {"input_ids": probe, "attention_mask": torch.ones_like(probe)}
                hidden = masked_lm.base_model(**inputs).last_hidden_state.to(device, dtype)  # [1, 8, H]
                expected = masked_lm(**inputs).logits.to(device).float()                   # [1, 8, V]
                embedding = masked_lm.get_output_embeddings().weight.to(device, dtype)
                for candidate in candidates:
                    head.activation = ACT2FN[candidate]
                    errors[candidate] = float((head(hidden, embedding).float() - expected).abs().max())
        finally:
            masked_lm.train(was_training)
            head.activation = kept
        best = min(errors, key=errors.get)
        tolerance = 1e-3 * (1.0 + float(expected.abs().max()))
        if errors[best] > tolerance:
            raise ValueError(f"TartanModel: field 'masked_lm': the copy of {type(masked_lm).__name__}'s MLM head "
                             f"does not reproduce its logits (max error {errors[best]:.3g} with activation "
                             f"{best!r}): its head is not dense -> activation -> LayerNorm -> tied decoder")
        return best

    def load_pretrained_mlm_heads(self, path: str, **kwargs) -> bool:
        """Copy the masked-LM head of checkpoint `path` (a folder or Hub id; keyword arguments go to
        `AutoModelForMaskedLM.from_pretrained`) into every auxiliary MLM head when the checkpoint has one.
        Returns False and changes nothing when it ships none (e.g. a sentence encoder such as all-MiniLM-L6-v2:
        its heads stay fresh, see `TartanConfig.mlm_head_warmup_steps`)."""
        if type(self.classifier.config) not in MODEL_FOR_MASKED_LM_MAPPING:
            return False  # the architecture has no masked-LM class (AutoModelForMaskedLM would refuse it)
        masked_lm, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True, **kwargs)
        prefix = masked_lm.base_model_prefix + "."
        if any(not key.startswith(prefix) for key in info["missing_keys"]):
            return False  # the head was freshly initialised: nothing pretrained to copy
        self.copy_mlm_head(masked_lm)
        return True

    def fit_mlm_heads(self, draw, *, steps: int, lr: float) -> dict[str, list[float]]:
        """Warm up every auxiliary MLM head on the frozen body before joint training: `steps` AdamW steps (no
        weight decay) on the sum of the heads' MLM losses, each head on its own batch `draw(name)` (input_ids,
        attention_mask, labels with -100 where nothing is predicted). The body runs in eval mode without gradient
        and the tied decoder (the body's embedding matrix) stays fixed: only each head's transform and output bias
        move. Returns {name: [loss at the first step, loss at the last step]}.

        Why: a body that ships no MLM head (a sentence encoder such as all-MiniLM-L6-v2) starts its auxiliary tasks
        at ~ln(vocabulary) with body gradients far above the end task's (docs/tartan_measurements.md); fitting the
        heads first brings both down."""
        names = self.auxiliary_tasks
        params = [p for name in names for p in self.mlm_heads[name].parameters()]
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        embedding = self.classifier.get_input_embeddings().weight.detach()
        first, last = {}, {}
        was_training = self.body.training
        self.body.eval()
        try:
            for _ in range(steps):
                total = 0.0
                for name in names:
                    batch = draw(name)
                    with torch.no_grad():
                        hidden = self.body_outputs(batch).last_hidden_state
                    with torch.enable_grad():
                        loss = self._head_mlm_loss(name, hidden, batch["labels"], embedding)
                    total = total + loss
                    last[name] = loss.detach()
                    first.setdefault(name, last[name])
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                optimizer.step()
        finally:
            self.body.train(was_training)
            for p in params:
                p.grad = None
        return {name: [float(first[name]), float(last[name])] for name in first}

    def meta_loss(self, batch: dict) -> torch.Tensor:
        """End-task loss on `batch` (validation) through the real body and phi*: its body gradient is g_meta."""
        return self.meta_head(self.body_outputs(batch), batch["labels"], batch.get("attention_mask")).loss

    # ------------------------------------------------------------------------------------------------------------
    def heads_state_dict(self) -> dict[str, torch.Tensor]:
        return {f"{name}.{k}": v.detach().contiguous().cpu() for name, head in self.mlm_heads.items()
                for k, v in head.state_dict().items()}

    def tartan_metadata(self) -> dict:
        from .._versions import __version__

        metadata = {"auxiliary_tasks": self.auxiliary_tasks, "mlm_hidden_act": self.mlm_hidden_act,
                    "hf_aux_version": __version__, "end_task_class": type(self.classifier).__name__}
        if self.has_body_lora:  # no config.json in the folder: the end task's config is kept here
            metadata.update(adapter="lora", end_task_config=self.config.to_dict())
        return metadata

    def save_pretrained(self, save_directory: str, is_main_process: bool = True, **kwargs) -> None:
        """The classifier as its own class saves it, plus tartan_config.json and tartan_heads.safetensors."""
        if os.path.isfile(save_directory):
            raise ValueError(f"save_pretrained: {save_directory!r} is a file, not a directory")
        if not is_main_process:
            return
        os.makedirs(save_directory, exist_ok=True)
        if self.has_body_lora:  # the adapter as peft writes it and phi'; the frozen base weights are not saved
            save_lora_body(self.body, save_directory)
            save_file(self.end_task_head_state_dict(), os.path.join(save_directory, END_TASK_HEAD_NAME),
                      metadata={"format": "pt"})
        else:
            self.classifier.save_pretrained(save_directory, **kwargs)
            copy_sentence_transformers_files(self.classifier.config._name_or_path, save_directory)
        save_file(self.heads_state_dict(), os.path.join(save_directory, TARTAN_HEADS_NAME), metadata={"format": "pt"})
        with open(os.path.join(save_directory, TARTAN_CONFIG_NAME), "w") as f:
            json.dump(self.tartan_metadata(), f, indent=2, sort_keys=True)

    def save_merged(self, save_directory: str, is_main_process: bool = True, **kwargs) -> None:
        """A LoRA model as a plain TARTAN checkpoint (module docstring): the classifier with the adapters folded
        into its body, which `AutoModelForSequenceClassification` loads alone, and the MLM heads. The model keeps
        its adapters."""
        if not self.has_body_lora:
            raise ValueError("TartanModel.save_merged: the body has no LoRA adapter (save_pretrained already writes "
                             "a plain checkpoint)")
        prefix = self.classifier.base_model_prefix
        adapted = getattr(self.classifier, prefix)
        setattr(self.classifier, prefix, merged_body(adapted))
        try:
            self.save_pretrained(save_directory, is_main_process=is_main_process, **kwargs)
        finally:
            setattr(self.classifier, prefix, adapted)

    @classmethod
    def from_pretrained(cls, path: str, auxiliary_tasks: Sequence[str] | None = None, mlm_hidden_act: str = "gelu",
                        base_model: str | None = None, is_trainable: bool = False, pretrained_mlm_heads: bool = True,
                        **kwargs) -> TartanModel:
        """A TARTAN checkpoint (folder with tartan_config.json): classifier and MLM heads. A plain checkpoint (a
        pretrained encoder or a classifier): MLM heads for `auxiliary_tasks`, each a copy of the checkpoint's own
        masked-LM head when it ships one and `pretrained_mlm_heads` (`load_pretrained_mlm_heads`), else fresh.
        Keyword arguments (num_labels, id2label, label2id, attn_implementation, ...) go to
        `AutoModelForSequenceClassification.from_pretrained`.
        A LoRA checkpoint: the body of `base_model` (default: the base recorded in adapter_config.json) with the
        saved adapter (`is_trainable=True` to train it further), phi' and the MLM heads."""
        if os.path.isfile(os.path.join(path, ADAPTER_CONFIG_NAME)):
            return cls._from_lora_checkpoint(path, auxiliary_tasks, base_model, is_trainable, **kwargs)
        classifier = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
        if not os.path.isfile(os.path.join(path, TARTAN_CONFIG_NAME)):
            if auxiliary_tasks is None:
                raise ValueError(f"{path!r} is not a TARTAN checkpoint (no {TARTAN_CONFIG_NAME}): pass "
                                 "auxiliary_tasks=[...] to start MLM heads for them")
            model = cls(classifier, auxiliary_tasks, mlm_hidden_act)
            if pretrained_mlm_heads:
                model.load_pretrained_mlm_heads(path, **{k: v for k, v in kwargs.items() if k in HUB_KWARGS})
            return model
        metadata = _saved_metadata(path, auxiliary_tasks)
        model = cls(classifier, metadata["auxiliary_tasks"], metadata.get("mlm_hidden_act", "gelu"))
        model.load_heads(path)
        return model

    @classmethod
    def _from_lora_checkpoint(cls, path, auxiliary_tasks, base_model, is_trainable, **kwargs) -> TartanModel:
        metadata = _saved_metadata(path, auxiliary_tasks)
        saved = dict(metadata["end_task_config"])
        config = CONFIG_MAPPING[saved["model_type"]].from_dict(saved)
        base = adapter_base_model(os.path.join(path, ADAPTER_CONFIG_NAME), base_model, "TartanModel.from_pretrained")
        classifier = AutoModelForSequenceClassification.from_pretrained(base, config=config, **kwargs)
        model = cls(classifier, metadata["auxiliary_tasks"], metadata.get("mlm_hidden_act", "gelu"))
        body = load_lora_body(model.body, path, is_trainable=is_trainable)
        setattr(classifier, classifier.base_model_prefix, body)
        model._load_end_task_head(path)
        model.load_heads(path)
        return model

    def load_heads(self, path: str) -> None:
        file = os.path.join(path, TARTAN_HEADS_NAME)
        if not os.path.isfile(file):
            raise ValueError(f"{path!r}: {TARTAN_HEADS_NAME} is missing: cannot restore the MLM heads")
        state = load_file(file)
        for name, head in self.mlm_heads.items():
            own = {k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")}
            head.load_state_dict(own, strict=True)

    def load_checkpoint(self, path: str, load_standard=None) -> None:
        """Restore every trained parameter from a folder written by `save_pretrained` (hf_aux's base trainer calls
        it on resume and for load_best_model_at_end): the classifier strictly, then the MLM heads. `load_standard`
        (Trainer's loading of a plain checkpoint) is not needed: the folder is read here."""
        if self.has_body_lora:  # the adapter (strictly), phi', the MLM heads
            load_lora_weights(self.body, path)
            self._load_end_task_head(path)
            self.load_heads(path)
            return
        # the classifier's own loader reads the folder: transformers saves some checkpoints under the key names of
        # the checkpoint they came from (e.g. LayerNorm gamma / beta), which a raw load_state_dict would not match
        classifier = self.classifier
        try:
            saved, info = type(classifier).from_pretrained(path, config=classifier.config, output_loading_info=True)
        except OSError as error:
            raise ValueError(f"{path!r}: no classifier weights to restore ({error})") from error
        tied = set(getattr(classifier, "_tied_weights_keys", None) or [])
        missing = [k for k in info["missing_keys"] if k not in tied]
        if missing or info["unexpected_keys"] or info["mismatched_keys"]:
            raise ValueError(f"{path!r}: the classifier weights do not match the model (missing {missing[:5]}, "
                             f"unexpected {list(info['unexpected_keys'])[:5]}, mismatched "
                             f"{list(info['mismatched_keys'])[:5]})")
        classifier.load_state_dict(saved.state_dict())
        self.load_heads(path)
