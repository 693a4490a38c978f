"""AMOS models: a multi-layer MLM generator, an RTD discriminator, and the wrapper that trains them together.

Meng et al., 2022, "Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators"
(arXiv:2204.03243), §3.3. The loss math lives in `hf_aux.amos.losses`; this file wires modules.

Checkpoint layout written by `AmosModel.save_pretrained(dir)`:

    dir/config.json, dir/model.safetensors        the discriminator, a plain transformers checkpoint:
                                                  ElectraForPreTraining for ELECTRA configs, otherwise the
                                                  family's own AutoModel body (keys under its base_model_prefix)
                                                  plus the RTD head; AutoModel / AutoModelForSequenceClassification
                                                  load it
    dir/generator/config.json, model.safetensors  AmosGenerator: body, shared MLM head, mixture vector v
                                                  (separate generators: bodies.<k>, mlm_heads.<k>, v; their
                                                  shared token embeddings once, under bodies.0)

`AmosModel.from_pretrained(dir)` rebuilds both and re-ties the shared token embeddings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoConfig, AutoModel, ElectraForPreTraining, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.activations import get_activation
from transformers.configuration_utils import SubConfigSpec
from transformers.modeling_outputs import ModelOutput
from transformers.models.electra.modeling_electra import ElectraForPreTrainingOutput

from .losses import (amos_loss, mixture_straight_through, mixture_weights, mlm_losses, perturbed_mixture,
                     reverse_gradient, rtd_labels, rtd_loss)
from .blocks import _find_blocks, _token_embeddings, _with_depth
from .encoder import from_pretrained_encoder
from ..tasks.data import max_predictions, prediction_positions
from ..modeling.multitask import _hidden_size
from ..modeling.sentence_transformers_files import copy_sentence_transformers_files

GENERATOR_FOLDER = "generator"
MIXTURES = ("adversarial", "uniform", "random_layer", "fixed", "weights")
# The dropout fields of an encoder body, switched off in the generator: BERT-likes hidden_dropout_prob /
# attention_probs_dropout_prob, DistilBERT dropout / attention_dropout, ModernBERT embedding_/attention_/mlp_dropout,
# Funnel-style hidden_dropout / activation_dropout. Heads' dropouts (classifier_dropout, ...) are left as given.
GENERATOR_DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout",
                            "embedding_dropout", "mlp_dropout", "hidden_dropout", "activation_dropout")


def mlm_head_names(mlm_layers: Sequence[int], separate_generators: bool = False) -> list[str]:
    """One name per MLM head, used in logged metric keys (`mlm_loss/<name>`): `layer_<d>` for the heads of one
    generator, `generator_<k>_depth_<d>` (k = 1..K) for separate generators, whose depths may repeat."""
    if separate_generators:
        return [f"generator_{k}_depth_{d}" for k, d in enumerate(mlm_layers, start=1)]
    return [f"layer_{d}" for d in mlm_layers]


# ---- Configs: architecture only (MLM-head layers, stop-gradient); method settings live in AmosConfig ----
class AmosGeneratorConfig(PretrainedConfig):
    """The multi-layer MLM generator: any AutoModel encoder config (`body`) of depth d_K = max(mlm_layers).

    mlm_layers: 1-based layers carrying the shared MLM head (paper: 4, 6, 8 of an 8-layer generator; ELECTRA: the
    last layer only). stop_gradient: block the gradient at the input of each block after a head (§3.3; False is
    Table 2's "- stop grad." ablation).

    separate_generators: instead of one body with heads at several layers, one separate generator per entry of
    `mlm_layers`, each a `body` of that depth with its own MLM head (Table 2 "w. separate MLM gen.": 4, 6, 8;
    Table 8 "w. three 4-layer gen.": 4, 4, 4, so depths may repeat). Only the token embeddings are shared;
    stop_gradient has no blocks to cut there.
    """

    model_type = "amos_generator"
    sub_configs_defaults = {"body": SubConfigSpec(config_class=AutoConfig, model_type="electra")}

    body: PretrainedConfig | dict | None = None
    mlm_layers: list[int] | None = None
    stop_gradient: bool = True
    separate_generators: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        depth = self.body.num_hidden_layers
        self.mlm_layers = [int(d) for d in ([depth] if self.mlm_layers is None else self.mlm_layers)]
        order = sorted(self.mlm_layers) if self.separate_generators else sorted(set(self.mlm_layers))
        if not self.mlm_layers or order != self.mlm_layers:
            raise ValueError(f"AMOS generator: field 'mlm_layers': {self.mlm_layers} must be "
                             + ("non-decreasing (separate generators' depths)" if self.separate_generators
                                else "strictly increasing"))
        if self.mlm_layers[0] < 1 or self.mlm_layers[-1] != depth:
            raise ValueError(f"AMOS generator: field 'mlm_layers': {self.mlm_layers} must lie in 1..{depth} and end "
                             f"at the generator's last layer ({depth}), the paper's depth d_K")

    @property
    def head_names(self) -> list[str]:
        return mlm_head_names(self.mlm_layers, self.separate_generators)


class AmosModelConfig(PretrainedConfig):
    """Generator (AmosGeneratorConfig) + discriminator (any AutoModel encoder config; ELECTRA gives an
    ElectraForPreTraining checkpoint). Build one with `AmosModelConfig.from_configs`."""

    model_type = "amos"
    sub_configs_defaults = {
        "generator": SubConfigSpec(config_class=AmosGeneratorConfig),
        "discriminator": SubConfigSpec(config_class=AutoConfig, model_type="electra"),
    }

    generator: PretrainedConfig | dict | None = None
    discriminator: PretrainedConfig | dict | None = None

    @classmethod
    def from_configs(cls, generator_body: PretrainedConfig, discriminator: PretrainedConfig,
                     mlm_layers: list[int] | None = None, stop_gradient: bool = True,
                     generator_dropout: bool = False, separate_generators: bool = False) -> AmosModelConfig:
        """generator_body: encoder config of depth d_K; mlm_layers default to [d_K] (ELECTRA); with
        `separate_generators` they are the separate generators' depths. Generator dropout is switched off unless
        `generator_dropout` (COCO-LM / AMOS §4)."""
        body = generator_body.to_dict()
        if not generator_dropout:
            body.update({key: 0.0 for key in GENERATOR_DROPOUT_FIELDS if key in body})
        generator = AmosGeneratorConfig(body=body, mlm_layers=mlm_layers, stop_gradient=stop_gradient,
                                        separate_generators=separate_generators)
        return cls(generator=generator, discriminator=discriminator.to_dict())


def _read_safetensors(folder: str) -> dict[str, torch.Tensor]:
    """One `model.safetensors`, or the shards listed in `model.safetensors.index.json`."""
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(single):
        return load_file(single)
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.isfile(index):
        raise ValueError(f"AMOS checkpoint: no model.safetensors (or index) in {folder}")
    with open(index) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    return {key: value for shard in shards for key, value in load_file(os.path.join(folder, shard)).items()}


# ---- Generator ----
@dataclass
class AmosGeneratorOutput(ModelOutput):
    """features: [K, S, H] states f^(d) at the S gathered positions (the masked ones and padding, before the MLM
    head, eq. 3); mlm_embeddings: [K, S, E] h^(d) (after the head); logits: [K, S, V] x_t^T h^(d) + b."""

    features: torch.Tensor | None = None
    mlm_embeddings: torch.Tensor | None = None
    logits: torch.Tensor | None = None


class AmosMLMHead(nn.Module):
    """The MLM projection head shared by all layers in D (dense -> gelu -> LayerNorm, as ELECTRA's generator) and
    the output bias; the output matrix is the (shared) token-embedding matrix."""

    def __init__(self, hidden_size: int, embedding_size: int, vocab_size: int, layer_norm_eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.activation = get_activation("gelu")
        self.LayerNorm = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(features)))


class AmosGenerator(PreTrainedModel):
    """One encoder of depth d_K with the shared MLM head at the layers in `config.mlm_layers` (§3.3, eq. 2) and the
    mixture vector v of eq. 3. One forward serves every head; head logits only at the masked positions.

    With `config.separate_generators`, `bodies[k]` / `mlm_heads[k]` are K separate generators of depths
    `mlm_layers[k]`, each read at its last layer (Table 2 "w. separate MLM gen.", Table 8 "w. three 4-layer
    gen."); otherwise `body` / `mlm_head` (the checkpoint keys of the paper's AMOS). Eq. 3 then mixes the
    generators' last-layer states f^(k) and their logits x_t^T h^(k) + b_k: with one bias per generator, the sampling
    distribution is the gamma-weighted mixture of the generators' logits."""

    config_class = AmosGeneratorConfig
    base_model_prefix = "amos_generator"

    def __init__(self, config: AmosGeneratorConfig):
        super().__init__(config)
        if config.separate_generators:
            self.bodies = nn.ModuleList(AutoModel.from_config(_with_depth(config.body, depth))
                                        for depth in config.mlm_layers)
            self.mlm_heads = nn.ModuleList(self._new_head(body) for body in self.bodies)
        else:
            self.body = AutoModel.from_config(config.body)
            self.mlm_head = self._new_head(self.body)
            # hooks on the blocks, registered once (hooks added inside forward would break torch.compile's graph):
            # they act only while `_shared_body_features` runs, which sets `_block_calls` and `_layer_states`
            for block in _find_blocks(self.body, config.body.num_hidden_layers).modules:  # fails on unknown encoders
                block.register_forward_pre_hook(self._before_block, with_kwargs=True)
                block.register_forward_hook(self._after_block)
        self._block_calls: int | None = None  # the block calls of the running forward (None: not capturing)
        self._layer_states: dict[int, torch.Tensor] = {}
        # v of eq. 3; zeros: the mixture starts as the uniform average of the heads
        self.mixture = nn.Parameter(torch.zeros(_hidden_size(config.body)))
        self.post_init()

    def _new_head(self, body: PreTrainedModel) -> AmosMLMHead:
        embedding = _token_embeddings(body)
        eps = getattr(self.config.body, "layer_norm_eps", None) or getattr(self.config.body, "norm_eps", 1e-12)
        return AmosMLMHead(_hidden_size(self.config.body), embedding.embedding_dim, embedding.num_embeddings, eps)

    def _init_weights(self, module):
        std = getattr(self.config.body, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, AmosMLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, AmosGenerator):
            init.zeros_(module.mixture)

    @property
    def generator_bodies(self) -> list[PreTrainedModel]:
        """The encoder bodies: one, or one per separate generator."""
        return list(self.bodies) if self.config.separate_generators else [self.body]

    def head_logits(self, mlm_embeddings: torch.Tensor, weight: torch.Tensor, detach_bias: bool = False):
        """[K, M, V] logits x_t^T h^(d) + b of the K heads' embeddings [K, M, E] against the output matrix
        `weight` [V, E] (the shared token embeddings), with each head's bias (one shared bias, or each separate
        generator's own)."""
        if not self.config.separate_generators:
            bias = self.mlm_head.bias
            return nn.functional.linear(mlm_embeddings, weight, bias.detach() if detach_bias else bias)
        return torch.stack([nn.functional.linear(h, weight, head.bias.detach() if detach_bias else head.bias)
                            for h, head in zip(mlm_embeddings, self.mlm_heads)])

    def separate_embedding_keys(self) -> list[str]:
        """State-dict keys of the separate generators' token embeddings, one per body, all aliasing one tensor (the
        shared embeddings); [] for the single body. The checkpoint stores the first only (safetensors refuses
        aliases) and `AmosModel.load_amos_weights` copies it back to the others."""
        if not self.config.separate_generators:
            return []
        weight = self.bodies[0].get_input_embeddings().weight  # every body is of one family: one name in each
        name = next(name for name, parameter in self.bodies[0].named_parameters(remove_duplicate=False)
                    if parameter is weight)
        return [f"bodies.{k}.{name}" for k in range(len(self.bodies))]

    def get_input_embeddings(self) -> nn.Embedding:
        return self.generator_bodies[0].get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        for body in self.generator_bodies:
            body.set_input_embeddings(value)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                masked_positions: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> AmosGeneratorOutput:
        """input_ids: [B, T] masked text; positions: [S] flat indices into the B x T positions (default: all of
        them, in order), e.g. `prediction_positions`' static-size slots (what AmosModel passes). Returns the K
        heads' features, MLM embeddings and logits at those S positions: logits cost S x E x V per head, never
        B x T x E x V. masked_positions: bool [B, T], instead of `positions`, for a direct call: its True
        positions in row-major order (a data-dependent size, so a device sync and a graph break)."""
        if masked_positions is not None:
            positions = masked_positions.reshape(-1).nonzero()[:, 0]
        if positions is None:
            positions = torch.arange(input_ids.numel(), device=input_ids.device)
        if self.config.separate_generators:
            features = torch.stack([_gather(body(input_ids=input_ids, attention_mask=attention_mask)[0], positions)
                                    for body in self.bodies])  # [K, S, H]: each generator's last layer
            mlm_embeddings = torch.stack([head(f) for head, f in zip(self.mlm_heads, features)])  # [K, S, E]
        else:
            features = self._shared_body_features(input_ids, attention_mask, positions)
            mlm_embeddings = self.mlm_head(features)  # [K, S, E], h^(d)
        logits = self.head_logits(mlm_embeddings, self.get_input_embeddings().weight)
        return AmosGeneratorOutput(features=features, mlm_embeddings=mlm_embeddings, logits=logits)

    def _shared_body_features(self, input_ids, attention_mask, positions) -> torch.Tensor:
        """[K, S, H] states f^(d) of the one body at the head layers, with the §3.3 stop-gradient. Layer d is the d-th
        block call (the d-th block, or ALBERT's shared group called the d-th time); the deepest head reads the body's
        output (the last block's, or after a final norm where the family has one: ModernBERT)."""
        self._block_calls, self._layer_states = 0, {}
        try:
            deepest = self.body(input_ids=input_ids, attention_mask=attention_mask)[0]
            states = {**self._layer_states, self.config.mlm_layers[-1]: deepest}
        finally:
            self._block_calls, self._layer_states = None, {}
        return torch.stack([_gather(states[d], positions) for d in self.config.mlm_layers])

    def _before_block(self, module, args, kwargs):
        """Pre-hook of every block: counts the call (layer d); a block after a head gets a detached input."""
        if self._block_calls is None:  # the body called outside this generator's forward: a plain call
            return None
        self._block_calls += 1
        if not (self.config.stop_gradient and self._block_calls - 1 in self.config.mlm_layers[:-1]):
            return None
        if args:  # §3.3 stop-gradient: the block's input hidden states without their history
            return (args[0].detach(), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"].detach()}

    def _after_block(self, module, args, output):
        """Hook of every block: keeps the output of the layers carrying an inner head."""
        if self._block_calls is not None and self._block_calls in self.config.mlm_layers[:-1]:
            self._layer_states[self._block_calls] = output[0] if isinstance(output, tuple) else output


def _gather(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[S, H] rows `positions` of [B, T, H] states read as B x T rows (a static-size gather)."""
    return states.reshape(-1, states.shape[-1]).index_select(0, positions)


# ---- Discriminator for non-ELECTRA encoders ----
class RTDHead(nn.Module):
    """ELECTRA's replaced-token-detection head, dense -> gelu -> dense to one logit per token, with the state-dict
    keys of its `discriminator_predictions` (`dense`, `dense_prediction`), sized by the hidden width alone: ELECTRA's
    own reads `config.hidden_act`, which ModernBERT calls `hidden_activation` and DistilBERT `activation`."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = get_activation("gelu")
        self.dense_prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[B, T, H] -> [B, T] logits (> 0: replaced)."""
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)


class RTDDiscriminator(nn.Module):
    """Any AutoModel encoder with an RTD head (`RTDHead`: ELECTRA's, dense -> gelu -> dense to one logit per token).

    The body sits under its own `base_model_prefix` (e.g. `roberta.`, `deberta.`, `model.` for ModernBERT), so the
    saved checkpoint loads with plain AutoModel and AutoModelForSequenceClassification as the family's own classes;
    the head's keys are reported as unused there.
    """

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        body = AutoModel.from_config(config)
        _token_embeddings(body)  # AMOS feeds it inputs_embeds from the shared table
        self.base_model_prefix = body.base_model_prefix
        self.add_module(self.base_model_prefix, body)
        self.discriminator_predictions = RTDHead(_hidden_size(config))
        std = getattr(config, "initializer_range", 0.02)
        for linear in (self.discriminator_predictions.dense, self.discriminator_predictions.dense_prediction):
            nn.init.normal_(linear.weight, std=std)
            nn.init.zeros_(linear.bias)

    @property
    def body(self) -> PreTrainedModel:
        return getattr(self, self.base_model_prefix)

    @property
    def config(self) -> PretrainedConfig:
        return self.body.config

    def get_input_embeddings(self) -> nn.Embedding:
        return self.body.get_input_embeddings()

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None) -> ElectraForPreTrainingOutput:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds)[0]
        return ElectraForPreTrainingOutput(logits=self.discriminator_predictions(hidden))

    def save_pretrained(self, save_directory: str, state_dict: dict | None = None, **kwargs):
        self.body.save_pretrained(save_directory, state_dict=self.state_dict() if state_dict is None else state_dict,
                                  **kwargs)


# ---- The AMOS wrapper ----
@dataclass
class AmosOutput(ModelOutput):
    """loss: eq. 4 as one scalar; mlm_losses: [K] per-head eq. 2 terms; rtd_loss: eq. 1; rtd_logits and rtd_labels:
    [B, T] (> 0 / 1 = replaced); mixture_weights: [S, K] gamma used for sampling at the S prediction slots, of which
    `predicted` (bool [S]) marks the masked positions (the others are padding); replaced_input_ids: [B, T];
    dropped_predictions: masked positions beyond the S slots (0 unless the batch was masked with more than
    `max_predictions`, e.g. by a collator at a larger mlm_probability than the forward's)."""

    loss: torch.Tensor | None = None
    mlm_losses: torch.Tensor | None = None
    rtd_loss: torch.Tensor | None = None
    rtd_logits: torch.Tensor | None = None
    rtd_labels: torch.Tensor | None = None
    mixture_weights: torch.Tensor | None = None
    replaced_input_ids: torch.Tensor | None = None
    predicted: torch.Tensor | None = None
    dropped_predictions: torch.Tensor | None = None


class AmosModel(PreTrainedModel):
    """Generator + mixture + discriminator as one module, so Trainer optimises, checkpoints and resumes all of it.
    The token embeddings are one nn.Embedding shared by both encoders and used as the MLM output matrix."""

    config_class = AmosModelConfig
    base_model_prefix = "amos"
    # non-reentrant activation checkpointing of both encoders' layers: transformers checkpoints each layer's
    # forward, so the generator's stop-gradient pre-hooks and head-capture hooks run outside the recomputed region
    supports_gradient_checkpointing = True
    accepts_loss_kwargs = False  # each loss is a per-micro-batch mean: Trainer divides by the accumulation steps

    def __init__(self, config: AmosModelConfig):
        super().__init__(config)
        electra = config.discriminator.model_type == "electra"
        self.discriminator = (ElectraForPreTraining if electra else RTDDiscriminator)(config.discriminator)
        self.generator = AmosGenerator(config.generator)
        shared = self.discriminator.get_input_embeddings()
        own = self.generator.get_input_embeddings()
        if shared.weight.shape != own.weight.shape:
            raise ValueError(f"AMOS: fields 'generator'/'discriminator': token embeddings differ in shape "
                             f"({tuple(own.weight.shape)} vs {tuple(shared.weight.shape)}); AMOS shares them, so "
                             "vocab_size and embedding width (embedding_size for ELECTRA) must match")
        self.generator.set_input_embeddings(shared)  # one tensor, trained by both models (Appendix B)
        # where the discriminator's body came from (`from_pretrained_encoder` / `from_pretrained`), for its
        # sentence-transformers files; None for a model built from a config
        self.body_source: str | None = None
        self.post_init()

    def _init_weights(self, module):
        pass  # both sub-models initialise themselves

    @property
    def mlm_layers(self) -> list[int]:
        """The generator layers with an MLM head (separate generators: their depths), shallowest first."""
        return list(self.config.generator.mlm_layers)

    @property
    def head_names(self) -> list[str]:
        """One name per MLM head for metric keys (`mlm_loss/<name>`): `layer_<d>`, or `generator_<k>_depth_<d>`."""
        return self.config.generator.head_names

    def get_input_embeddings(self) -> nn.Embedding:
        return self.discriminator.get_input_embeddings()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        original_input_ids: torch.Tensor | None = None,
        *,
        mixture: str = "adversarial",
        head_index: int | None = None,
        fixed_weights: Sequence[float] | None = None,
        gumbel_temperature: float = 0.3,
        adv_mlm_multiplier: float = 0.0,
        rtd_weight: float = 50.0,
        mlm_probability: float | None = None,
    ) -> AmosOutput:
        """input_ids: [B, T] masked text; labels: [B, T] original ids at masked positions, -100 elsewhere;
        original_input_ids: [B, T] the unmasked text (MLMCollator(return_original=True) gives all three).

        mixture: "adversarial" (eq. 3 weights, reversed discriminator gradient), "uniform" (Table 2 "- adv.
        train"), "random_layer" (one head drawn per masked position), "fixed" (head `head_index`, used by the
        "layer switch" schedule), "weights" (the heads mixed with the fixed `fixed_weights`, one per head,
        summing to 1: Table 8's "w. final mix weights"). adv_mlm_multiplier > 0: Table 2's "+ adv. MLM", the
        reversed gradient also reaches h, scaled by it.

        mlm_probability: the rate `mask_tokens_for_mlm` masked the batch at (AmosTrainer passes its config's): the
        heads then read S = `max_predictions((B, T), mlm_probability)` static slots, the most that masker chooses
        (the masked positions, then padding), so logits cost what they cost at the masked positions alone. A batch
        masked with more positions than S (another masker) reports the excess in `dropped_predictions`, which
        AmosTrainer logs. None (the default for a direct call): S = B x T, every position, exact for any masking at
        the cost of logits everywhere.
        """
        if labels is None or original_input_ids is None:
            raise ValueError("AMOS: fields 'labels' and 'original_input_ids' are required (use "
                             "MLMCollator(tokenizer, return_original=True))")
        if mixture not in MIXTURES:
            raise ValueError(f"AMOS: field 'mixture': {mixture!r} is not one of {MIXTURES}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        num_heads = len(self.mlm_layers)
        masked = labels != -100  # [B, T], the set M
        # the S static slots: M's flat positions first, then padding (predicted False, target -100)
        positions, predicted = prediction_positions(masked, max_predictions(labels.shape, mlm_probability))
        targets = labels.reshape(-1).gather(0, positions)  # [S], -100 at the padding slots
        num_slots = positions.shape[0]

        # eq. 2: every head's MLM loss from one generator forward, logits only at the S slots
        gen = self.generator(input_ids, attention_mask=attention_mask, positions=positions)
        head_losses = mlm_losses(gen.logits, targets)  # [K], means over the masked slots only

        # eq. 3: mixture weights gamma [S, K]
        adversarial = mixture == "adversarial" and num_heads > 1 and torch.is_grad_enabled()
        gamma = self._mixture_gamma(gen, mixture, head_index, fixed_weights, num_slots)
        # the discriminator's gradient reaches gamma reversed (eq. 4); h only under "+ adv. MLM", never E
        adv_mlm = adv_mlm_multiplier > 0 and torch.is_grad_enabled()
        gamma_in = reverse_gradient(gamma) if adversarial else gamma.detach()
        if adv_mlm:
            weight = self.get_input_embeddings().weight.detach()
            h_in = reverse_gradient(gen.mlm_embeddings, adv_mlm_multiplier)
            sampling_logits = self.generator.head_logits(h_in, weight, detach_bias=True)
        else:
            sampling_logits = gen.logits.detach()

        # Gumbel-Softmax sample of p_MLM(x | h_bar); the discriminator reads the straight-through one-hot through
        # the embeddings: W[x_rep] plus a zero carrier whose gradient is that of (one_hot - y.detach() + y) @ W
        embedding = self.get_input_embeddings()
        if adversarial or adv_mlm:
            sampled, carrier = mixture_straight_through(gamma_in, sampling_logits, embedding.weight,
                                                        gumbel_temperature)
        else:  # nothing needs the soft sample's gradient: the hard draw only
            sampled, carrier = perturbed_mixture(gamma_in, sampling_logits).argmax(dim=-1), None
        # x_rep: samples at M, originals elsewhere (padding slots write their original token back)
        flat_original = original_input_ids.reshape(-1)
        written = torch.where(predicted, sampled, flat_original.gather(0, positions))
        replaced_ids = flat_original.scatter(0, positions, written).view_as(original_input_ids)
        inputs_embeds = embedding(replaced_ids)  # [B, T, E], the one-hot's value (W[x_rep]) and its W-gradient
        if carrier is not None:  # padding slots carry nothing, so no gradient reaches their gamma
            carrier = carrier.to(inputs_embeds.dtype) * predicted.unsqueeze(1).to(inputs_embeds.dtype)
            inputs_embeds = inputs_embeds.reshape(-1, inputs_embeds.shape[-1]).index_add(0, positions, carrier)
            inputs_embeds = inputs_embeds.view(*original_input_ids.shape, -1)

        # eq. 1: replaced-token detection over non-pad positions
        rtd_logits = self.discriminator(inputs_embeds=inputs_embeds, attention_mask=attention_mask).logits
        labels_rtd = rtd_labels(replaced_ids, original_input_ids)
        discriminator_loss = rtd_loss(rtd_logits, labels_rtd, attention_mask)

        return AmosOutput(
            loss=amos_loss(head_losses, discriminator_loss, rtd_weight),  # eq. 4
            mlm_losses=head_losses,
            rtd_loss=discriminator_loss,
            rtd_logits=rtd_logits,
            rtd_labels=labels_rtd,
            mixture_weights=gamma.detach(),
            replaced_input_ids=replaced_ids,
            predicted=predicted,
            dropped_predictions=masked.sum() - predicted.sum(),
        )

    def _mixture_gamma(self, gen: AmosGeneratorOutput, mixture: str, head_index: int | None,
                       fixed_weights: Sequence[float] | None, num_slots: int) -> torch.Tensor:
        """gamma [S, K], the heads' weights at each prediction slot for `mixture` (forward's docstring): eq. 3's
        softmax(v^T f^(d)), uniform, fixed weights, one head drawn per slot, or head `head_index`."""
        num_heads = len(self.mlm_layers)
        device = gen.logits.device
        if mixture == "adversarial":
            return mixture_weights(gen.features, self.generator.mixture)
        if mixture == "uniform":
            return gen.logits.new_full((num_slots, num_heads), 1.0 / num_heads, dtype=torch.float32)
        if mixture == "weights":
            weights = [float(w) for w in (fixed_weights if fixed_weights is not None else [])]
            if len(weights) != num_heads or min(weights) < 0 or abs(sum(weights) - 1.0) > 1e-4:
                raise ValueError(f"AMOS: field 'fixed_weights': {fixed_weights} must be {num_heads} weights "
                                 ">= 0 summing to 1, one per MLM head")
            return torch.tensor(weights, device=device).expand(num_slots, num_heads)
        if mixture == "random_layer":
            chosen = torch.randint(num_heads, (num_slots,), device=device)
        else:
            if head_index is None or not 0 <= head_index < num_heads:
                raise ValueError(f"AMOS: field 'head_index': {head_index} is not in 0..{num_heads - 1}")
            chosen = torch.full((num_slots,), head_index, device=device, dtype=torch.long)
        return nn.functional.one_hot(chosen, num_heads).float()

    # ---- checkpoints: discriminator at the top level, generator in generator/ -----------------------------------

    def save_pretrained(self, save_directory: str, state_dict: dict | None = None, **kwargs):
        """Write the discriminator as a plain checkpoint in `save_directory` and the generator (body, MLM head,
        mixture v) in `save_directory/generator`. Trainer calls this for every checkpoint."""
        state_dict = self.state_dict() if state_dict is None else state_dict
        parts = {prefix: {key[len(prefix):]: value for key, value in state_dict.items() if key.startswith(prefix)}
                 for prefix in ("discriminator.", "generator.")}
        for key in self.generator.separate_embedding_keys()[1:]:  # stored once, under the first generator
            parts["generator."].pop(key, None)
        self.discriminator.save_pretrained(save_directory, state_dict=parts["discriminator."], **kwargs)
        self.generator.save_pretrained(os.path.join(save_directory, GENERATOR_FOLDER),
                                       state_dict=parts["generator."], **kwargs)
        if kwargs.get("is_main_process", True):
            # continued pretraining of a sentence-transformers body keeps its sentence reading (pooling), so a
            # fine-tuning of the discriminator (`--pooling auto`) reads it as the body was trained to be read
            copy_sentence_transformers_files(self.body_source, save_directory)

    def load_checkpoint(self, directory: str, load_standard=None) -> None:
        """Restore the discriminator and generator/ in place from a checkpoint folder (hf_aux's base trainer calls
        it on resume and for load_best_model_at_end; `load_standard`, Trainer's loading of one plain checkpoint, is
        not needed: both models are read here, strictly)."""
        self.load_amos_weights(directory)

    def load_amos_weights(self, directory: str) -> None:
        """Load a folder written by `save_pretrained` into this model (strict: every tensor must be there)."""
        state = {f"discriminator.{k}": v for k, v in _read_safetensors(directory).items()}
        state.update({f"generator.{k}": v for k, v in
                      _read_safetensors(os.path.join(directory, GENERATOR_FOLDER)).items()})
        first, *copies = [f"generator.{key}" for key in self.generator.separate_embedding_keys()] or [None]
        if first in state:  # the separate generators' shared token embeddings, stored once
            state.update({key: state[first] for key in copies})
        expected = set(self.state_dict())
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        if missing or unexpected:
            raise ValueError(f"AMOS checkpoint {directory}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.load_state_dict(state, strict=True)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str, **kwargs) -> AmosModel:
        """Rebuild generator + discriminator from a folder (or Hub repo) written by `save_pretrained`."""
        if kwargs:
            raise ValueError(f"AmosModel.from_pretrained: unsupported arguments {sorted(kwargs)}")
        path = str(pretrained_model_name_or_path)
        if not os.path.isdir(path):
            from huggingface_hub import snapshot_download

            path = snapshot_download(path)
        config = AmosModelConfig(
            generator=AmosGeneratorConfig.from_pretrained(os.path.join(path, GENERATOR_FOLDER)),
            discriminator=AutoConfig.from_pretrained(path),
        )
        model = cls(config)
        model.load_amos_weights(path)
        model.body_source = path
        return model

    @classmethod
    def from_pretrained_encoder(cls, encoder_name_or_path: str, generator_num_hidden_layers: int,
                                **settings) -> AmosModel:
        """Continued ELECTRA/AMOS-style pretraining of a pretrained encoder: `hf_aux.amos.encoder`'s
        `from_pretrained_encoder` (mlm_layers, stop_gradient, generator_dropout, separate_generators, load kwargs)."""
        return from_pretrained_encoder(cls, encoder_name_or_path, generator_num_hidden_layers, **settings)


AutoConfig.register(AmosGeneratorConfig.model_type, AmosGeneratorConfig, exist_ok=True)
AutoConfig.register(AmosModelConfig.model_type, AmosModelConfig, exist_ok=True)
AutoModel.register(AmosGeneratorConfig, AmosGenerator, exist_ok=True)
