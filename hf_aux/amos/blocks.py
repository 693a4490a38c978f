"""The blocks of an encoder body, for AMOS's generator and for continued pretraining (hf_aux/amos/model.py,
encoder.py): the list of Transformer blocks and its key prefix in any family, a config at another depth, the token
embeddings AMOS shares."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from ..errors import UserInputError


@dataclass
class _Blocks:
    """An encoder body's Transformer blocks: `modules` (a ModuleList whose key prefix in the body's state dict is
    `name`: `encoder.layer` for BERT/RoBERTa/DeBERTa/MPNet, `transformer.layer` for DistilBERT, `layers` for
    ModernBERT) called one after the other, `depth` calls in all. `shared`: ALBERT's layer groups, fewer modules than
    calls (one group called num_hidden_layers times), so layer d is the d-th call, not the d-th module."""

    name: str
    modules: nn.ModuleList
    shared: bool


def _find_blocks(body: nn.Module, depth: int) -> _Blocks:
    """The body's `depth` Transformer blocks: its one ModuleList of `depth` modules, or ALBERT's layer groups (a
    config with num_hidden_groups; the outermost ModuleList of that length)."""
    lists = [(name, module) for name, module in body.named_modules() if isinstance(module, nn.ModuleList)]
    groups = getattr(body.config, "num_hidden_groups", None)
    if groups:  # ALBERT: num_hidden_layers calls of num_hidden_groups shared groups (their inner lists follow them)
        found = [(name, module) for name, module in lists if len(module) == groups][:1]
    else:
        found = [(name, module) for name, module in lists if len(module) == depth]
    if len(found) != 1:
        raise UserInputError(
            f"AMOS: a '{body.config.model_type}' body ({type(body).__name__}): cannot find its single list of {depth} "
            f"Transformer blocks (found lists of {sorted(len(m) for _, m in lists)}); AMOS reads the generator's "
            "states between blocks. Encoder families that work: bert, roberta, xlm-roberta, deberta-v2, electra, "
            "albert, distilbert, mpnet, modernbert")
    name, modules = found[0]
    return _Blocks(name, modules, shared=len(modules) < depth)


def _with_depth(config: PretrainedConfig, depth: int) -> PretrainedConfig:
    """A copy of an encoder config with `depth` layers (a generator, or one separate generator); a per-layer list
    (ModernBERT's layer_types: local or global attention) keeps its first `depth` entries."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = depth
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:depth]
    return config


def _token_embeddings(body: PreTrainedModel) -> nn.Embedding:
    """The body's token-embedding table, which AMOS shares between generator and discriminator (and uses as the MLM
    output matrix); UserInputError when it has none."""
    try:
        embedding = body.get_input_embeddings()
    except NotImplementedError:
        embedding = None
    if not isinstance(embedding, nn.Embedding):
        raise UserInputError(f"AMOS: a '{body.config.model_type}' body ({type(body).__name__}) has no token-embedding "
                             "table (get_input_embeddings); AMOS shares one between the generator and the "
                             "discriminator: use a text encoder (bert, roberta, deberta-v2, ...)")
    return embedding


def default_mlm_layers(depth: int) -> list[int]:
    """The generator layers with an MLM head when none are given: d_K/2, 3d_K/4, d_K (4 6 8 for d_K = 8)."""
    return sorted({max(1, round(depth / 2)), max(1, round(3 * depth / 4)), depth})
