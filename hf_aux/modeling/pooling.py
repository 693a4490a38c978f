"""Sentence pooling: token states [N, length, hidden] -> one vector per input [N, hidden], the way the body was
trained to be read.

- `cls`: the first token's state (BERT, RoBERTa, ELECTRA, DeBERTa and the papers' heads read it).
- `mean`, `max`, `mean_sqrt_len`, `weightedmean`, `lasttoken`: sentence-transformers' Pooling modes, over the
  tokens the attention mask keeps (padding never changes a row's vector). all-MiniLM-L6-v2 was trained with
  `mean`: its first token was never trained to carry the sentence.
- `eos`: the state at each input's last EOS token (BART's classification head; encoder-decoder bodies).
- `auto` (resolved once, when the model is built): the body's own sentence-transformers Pooling module when its
  checkpoint ships one (`modules.json` + `1_Pooling/config.json`), else `eos` for encoder-decoders and `cls` for
  every other encoder.
"""

from __future__ import annotations

import json
import os

from ..errors import UserInputError

POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len", "weightedmean", "lasttoken", "eos")
# sentence-transformers' Pooling config.json keys (one per mode; several true would concatenate the vectors)
_ST_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
             "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_weightedmean_tokens": "weightedmean",
             "pooling_mode_lasttoken": "lasttoken"}
_ST_NAMES = {"mean_sqrt_len_tokens": "mean_sqrt_len"}  # its `pooling_mode` names; the others are hf_aux's


def check_pooling(value: str, where: str) -> str:
    if value != "auto" and value not in POOLING_MODES:
        raise UserInputError(f"{where}: field 'pooling': {value!r} is not one of {('auto', *POOLING_MODES)}")
    return value


def sentence_transformers_pooling(name_or_path) -> str | None:
    """The pooling mode of the sentence-transformers checkpoint `name_or_path` (its Pooling module's config), or None
    when it is not one (or ships no Pooling module). A ValueError names the file when it concatenates several modes,
    which one head over `hidden` features cannot read."""
    from .sentence_transformers_files import MODULES_NAME, sentence_transformers_source

    source = sentence_transformers_source(name_or_path)
    if source is None:
        return None
    modules = json.loads((source / MODULES_NAME).read_text(encoding="utf-8"))
    pooling = next((m for m in modules if str(m.get("type", "")).rsplit(".", 1)[-1] == "Pooling"), None)
    if pooling is None or not (source / pooling.get("path", "") / "config.json").is_file():
        return None
    path = source / pooling.get("path", "") / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get("pooling_mode"), str):  # newer sentence-transformers: one named mode
        modes = [_ST_NAMES.get(config["pooling_mode"], config["pooling_mode"])]
    else:
        modes = [mode for key, mode in _ST_FLAGS.items() if config.get(key)]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise ValueError(f"{os.fspath(path)}: pooling modes {modes or 'none'}: hf_aux's heads read one vector of the "
                         f"hidden size; pass pooling= (--pooling) one of {POOLING_MODES}")
    return modes[0]


def resolve_pooling(pooling: str, body_config) -> str:
    """`pooling`, with `auto` replaced by the body's own mode (module docstring)."""
    if pooling != "auto":
        return pooling
    own = sentence_transformers_pooling(getattr(body_config, "_name_or_path", None))
    return own or ("eos" if body_config.is_encoder_decoder else "cls")


_DESCRIPTIONS = {"cls": "the first token's state", "mean": "the mean of the token states (mask-aware)",
                 "max": "the element-wise maximum over the token states (mask-aware)",
                 "mean_sqrt_len": "the sum of the token states divided by the square root of the length",
                 "weightedmean": "a position-weighted mean of the token states",
                 "lasttoken": "the last real token's state", "eos": "the decoder state at the last EOS token"}


def describe_pooling(mode: str) -> str:
    """One sentence for a model card: how the sentence-level heads read the body."""
    return f"Sentence-level heads read the body through `{mode}` pooling: {_DESCRIPTIONS[mode]}."


def __getattr__(name: str):
    """`pool` ([N, length, hidden] -> [N, hidden] by a mode) lives in the self-contained modeling file that hf_aux ships
    beside an exported classifier (hf_aux.modeling.export), so that hf_aux and plain transformers read the body by
    one piece of code. Imported on first use: that file imports transformers' model classes, which the commands'
    --help, reading POOLING_MODES here, does not need."""
    if name == "pool":
        from .modeling_hf_aux_classifier import pool

        return pool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
