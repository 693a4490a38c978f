"""AMOS from a user's pretrained encoder: continued ELECTRA/AMOS-style pretraining (AmosModel.from_pretrained_encoder)

Meng et al., 2022 (arXiv:2204.03243) pretrain from scratch; continued pretraining starts both models from the
user's encoder, sharing its token embeddings (the paper's unified auxiliary model, §3.3): the discriminator is the
whole encoder under a fresh RTD head, the generator a shallower copy holding its first blocks. hf_aux/amos/model.py
holds the models (`cls`: AmosModel); this file maps an encoder's weights onto them, per family.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from ..errors import UserInputError
from .blocks import _Blocks, _find_blocks, _token_embeddings, _with_depth, default_mlm_layers

# Continued pretraining maps these bodies onto an ElectraForPreTraining (the same layers; BERT's pooler dropped).
# Every other encoder family keeps its own classes (`_continue_in_its_family`). BERT stays on the ELECTRA
# conversion until the evidence control running on that path has ended; routing it through its own family then is
# removing "bert" here.
CONVERTED_TO_ELECTRA = ("bert", "electra")


def check_encoder_config(config: PretrainedConfig, field_name: str, value: str | None = None) -> None:
    """Refuse a config AMOS cannot train as an encoder body, named as field `field_name` (and its `value`, a path,
    when it is not the model type itself): an encoder-decoder (BART, T5), a decoder, or a family without a masked-LM
    class (GPT-2, vision models)."""
    kind = f"{value} is a '{config.model_type}'" if value else f"'{config.model_type}' is"
    works = ("an encoder with a masked-LM class: bert, roberta, xlm-roberta, deberta-v2, electra, albert, "
             "distilbert, mpnet, modernbert, ...")
    if getattr(config, "is_encoder_decoder", False):
        raise UserInputError(f"AMOS: field '{field_name}': {kind}{'' if value else ' an'} encoder-decoder; AMOS trains "
                             f"one encoder body as generator and discriminator: give {works}")
    if getattr(config, "is_decoder", False) or config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise UserInputError(f"AMOS: field '{field_name}': {kind}{'' if value else ' a'} model without a masked-LM "
                             f"class; give {works}")
    try:  # the generator is the body's config at another depth
        copy.deepcopy(config).num_hidden_layers = 1
    except NotImplementedError:  # Funnel: its depth is block_sizes, pooled between blocks
        raise UserInputError(f"AMOS: field '{field_name}': {kind}{'' if value else ' a'} model whose depth is not "
                             "one num_hidden_layers (Funnel's block_sizes), so AMOS cannot build its shallower "
                             f"generator; give {works}") from None


def _load_exactly(module: nn.Module, weights: dict[str, torch.Tensor], source: str, part: str) -> None:
    """Load `weights` into `module`, every key landing: a clear UserInputError listing what is missing or
    unexpected otherwise (`source`: the encoder, `part`: where its weights go)."""
    expected = set(module.state_dict())
    missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or unexpected:
        raise UserInputError(f"AMOS: field 'encoder_name_or_path': {source} does not map onto the {part}: "
                             f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, unexpected "
                             f"{unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
    module.load_state_dict(weights, strict=True)


def _first_blocks(weights: dict[str, torch.Tensor], blocks: _Blocks, depth: int) -> dict[str, torch.Tensor]:
    """The encoder's weights for a generator of `depth` blocks: everything but the blocks from `depth` on (keys
    `<blocks.name>.<i>.` with i >= depth). Shared groups (ALBERT) are all kept: the generator calls them too."""
    prefix = f"{blocks.name}."
    return {key: value for key, value in weights.items()
            if blocks.shared or not key.startswith(prefix) or int(key[len(prefix):].split(".", 1)[0]) < depth}


def from_pretrained_encoder(cls: type[PreTrainedModel], encoder_name_or_path: str, generator_num_hidden_layers: int,
                            mlm_layers: list[int] | None = None, stop_gradient: bool = True,
                            generator_dropout: bool = False, separate_generators: bool = False,
                            **load_kwargs) -> PreTrainedModel:
    """Continued ELECTRA/AMOS-style pretraining of a pretrained encoder (e.g. MiniLM on domain text): the
    discriminator starts as the whole encoder with a fresh RTD head, the generator as a copy of the encoder's
    first `generator_num_hidden_layers` layers with a fresh MLM head (output matrix: the shared, pretrained token
    embeddings) and v = 0 (uniform mixture at the start). With `separate_generators`, generator k is a copy of
    the encoder's first `mlm_layers[k]` layers with its own fresh head; generators of equal depth therefore
    start identical, and without `generator_dropout` they stay identical (same inputs, same gradients).

    BERT and ELECTRA bodies become an `ElectraForPreTraining` (`CONVERTED_TO_ELECTRA`); every other family with a
    masked-LM class (RoBERTa, XLM-R, DeBERTa-v2/v3, ALBERT, DistilBERT, MPNet, ModernBERT, ...) keeps its own
    classes (`_continue_in_its_family`). `load_kwargs` go to `AutoConfig` / `AutoModel.from_pretrained`."""
    source = AutoConfig.from_pretrained(encoder_name_or_path, **load_kwargs)
    check_encoder_config(source, "encoder_name_or_path", encoder_name_or_path)
    depth = generator_num_hidden_layers
    if not 1 <= depth <= source.num_hidden_layers:
        raise UserInputError(f"AMOS: field 'generator_num_hidden_layers': {depth} is not "
                             f"in 1..{source.num_hidden_layers} (the encoder's depth)")
    build = _convert_to_electra if source.model_type in CONVERTED_TO_ELECTRA else _continue_in_its_family
    settings = {"mlm_layers": mlm_layers or default_mlm_layers(depth), "stop_gradient": stop_gradient,
                "generator_dropout": generator_dropout, "separate_generators": separate_generators}
    model = build(cls, AutoModel.from_pretrained(encoder_name_or_path, **load_kwargs), encoder_name_or_path, depth,
                  settings)
    model.body_source = encoder_name_or_path
    return model


def _continue_in_its_family(cls: type[PreTrainedModel], body: PreTrainedModel, encoder_name_or_path: str,
                            generator_num_hidden_layers: int, settings: dict) -> PreTrainedModel:
    """The encoder in its own family: the discriminator is its AutoModel `body` (every pretrained weight, the pooler
    too) under a fresh `RTDHead`, so the saved discriminator loads with the family's AutoModel and
    AutoModelForSequenceClassification; each generator a shallower copy holding the weights outside the blocks
    (DeBERTa's encoder.rel_embeddings, MPNet's encoder.relative_attention_bias, ModernBERT's final_norm, ...) and
    its first blocks (`_find_blocks`). Every copied key must land, strictly. `settings`: `from_configs` keywords."""
    _token_embeddings(body)
    if getattr(body.config, "num_hidden_groups", 1) != 1:
        raise UserInputError(f"AMOS: field 'encoder_name_or_path': {encoder_name_or_path} is an ALBERT with "
                             f"num_hidden_groups={body.config.num_hidden_groups}; a shallower generator would map "
                             "its layers onto other groups. Continued pretraining takes ALBERTs with one shared "
                             "layer group (every released ALBERT); from scratch any grouping works")
    discriminator = copy.deepcopy(body.config)
    discriminator.dtype = torch.float32  # trained in float32 whatever the checkpoint's dtype (as from scratch)
    model = cls(cls.config_class.from_configs(_with_depth(discriminator, generator_num_hidden_layers), discriminator,
                                              **settings))
    weights = body.state_dict()
    _load_exactly(model.discriminator.body, weights, encoder_name_or_path,
                  f"discriminator ({type(model.discriminator.body).__name__})")
    # each generator body: the encoder's weights but its blocks from the body's depth on (the token embeddings
    # are the discriminator's, shared, and get the same values again)
    for generator_body in model.generator.generator_bodies:
        layers = generator_body.config.num_hidden_layers
        _load_exactly(generator_body, _first_blocks(weights, _find_blocks(generator_body, layers), layers),
                      encoder_name_or_path, f"generator ({layers} of {body.config.num_hidden_layers} layers)")
    return model


def _convert_to_electra(cls: type[PreTrainedModel], body: PreTrainedModel, encoder_name_or_path: str,
                        generator_num_hidden_layers: int, settings: dict) -> PreTrainedModel:
    """A BERT or ELECTRA encoder mapped onto an ElectraForPreTraining (same layers; BERT's pooler dropped), the
    generator an ELECTRA body of the encoder's sizes holding its first layers. Kept as it was while the
    evidence control on this path runs (CONVERTED_TO_ELECTRA)."""
    source = body.config  # type and depth checked by from_pretrained_encoder
    names = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
             "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")
    sizes = {name: getattr(source, name) for name in names}
    sizes["embedding_size"] = getattr(source, "embedding_size", None) or source.hidden_size
    discriminator = AutoConfig.for_model("electra", **sizes)
    generator = AutoConfig.for_model("electra", **{**sizes, "num_hidden_layers": generator_num_hidden_layers})
    model = cls(cls.config_class.from_configs(generator, discriminator, **settings))
    weights = {key: value for key, value in body.state_dict().items() if not key.startswith("pooler.")}
    missing, unexpected = model.discriminator.electra.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise UserInputError(f"AMOS: field 'encoder_name_or_path': {encoder_name_or_path} does not map onto "
                             f"an ELECTRA body (missing {missing[:5]}, unexpected {unexpected[:5]})")
    # each generator body: the same embeddings (already shared) and the encoder's first layers, as many as it has
    for generator_body in model.generator.generator_bodies:
        layers = generator_body.config.num_hidden_layers
        kept = {key: value for key, value in weights.items() if not key.startswith("embeddings.word_embeddings.")
                and (not key.startswith("encoder.layer.") or int(key.split(".")[2]) < layers)}
        missing, unexpected = generator_body.load_state_dict(kept, strict=False)
        if unexpected or [key for key in missing if not key.startswith("embeddings.word_embeddings.")]:
            raise UserInputError(f"AMOS: field 'encoder_name_or_path': a generator body does not take the "
                                 f"encoder's first {layers} layers (missing {missing[:5]}, unexpected "
                                 f"{unexpected[:5]})")
    return model
