"""Keep a sentence-transformers body a SentenceTransformer.

A sentence-transformers checkpoint (all-MiniLM-L6-v2, the demo's body) is a plain transformers checkpoint plus a few
small files that say how to turn token states into one sentence vector: ``modules.json`` (the module list: the
transformer at the folder's root, then e.g. ``1_Pooling`` and ``2_Normalize``), ``sentence_bert_config.json``
(max_seq_length, lower-casing), ``config_sentence_transformers.json`` and each module's own folder (``1_Pooling/
config.json``: mean pooling). hf_aux's outputs that keep the body at their root (a MUPPET-style checkpoint, the TARTAN
classifier, a merged LoRA export, a fine-tuned checkpoint) copy these files from the checkpoint the body was loaded
from, so ``SentenceTransformer(output_dir)`` loads the trained body with the same pooling and normalisation, while
``AutoModel`` loads it as before. Nothing is written when the source is not a sentence-transformers model.

The tokenizer is not copied here: Trainer and the run scripts save it beside the model.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)

MODULES_NAME = "modules.json"
TOP_LEVEL_FILES = ("sentence_bert_config.json", "config_sentence_transformers.json")


def _is_transformer(module: dict) -> bool:
    """The module that holds the body: `sentence_transformers.models.Transformer` (v2-v5) or
    `sentence_transformers.base.modules.transformer.Transformer` (v6)."""
    return str(module.get("type", "")).rsplit(".", 1)[-1] == "Transformer"


def sentence_transformers_source(name_or_path: str | os.PathLike | None) -> Path | None:
    """The local folder of the sentence-transformers checkpoint `name_or_path` (a folder, or a Hub id whose files
    are fetched into the cache; offline, only what is cached), or None when it is not one or cannot be reached."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    if path.is_dir():
        return path if (path / MODULES_NAME).is_file() else None
    try:  # a Hub id: modules.json, then the files of the modules it names, into the local cache
        from huggingface_hub import hf_hub_download, snapshot_download

        modules = json.loads(Path(hf_hub_download(str(name_or_path), MODULES_NAME)).read_text(encoding="utf-8"))
        patterns = [MODULES_NAME, *TOP_LEVEL_FILES] + [f"{m['path']}/*" for m in modules if m.get("path")]
        return Path(snapshot_download(str(name_or_path), allow_patterns=patterns))
    except Exception as error:  # not on the Hub, offline and not cached, no access: the output is plain transformers
        logger.info("No sentence-transformers files for %s (%s: %s)", name_or_path, type(error).__name__, error)
        return None


def copy_sentence_transformers_files(name_or_path: str | os.PathLike | None, save_directory: str | os.PathLike) -> bool:
    """Copy the sentence-transformers files of the checkpoint `name_or_path` into `save_directory`, where the body
    has just been saved at the root (config.json + model.safetensors). The transformer module's path is set to
    the root. Returns whether anything was written."""
    source = sentence_transformers_source(name_or_path)
    save_directory = Path(save_directory)
    if source is None or source.resolve() == save_directory.resolve():
        return False
    modules = json.loads((source / MODULES_NAME).read_text(encoding="utf-8"))
    if not any(_is_transformer(module) for module in modules):
        logger.info("%s: modules.json has no transformer module; nothing copied", source)
        return False
    for module in modules:
        if _is_transformer(module):
            if module.get("path"):  # older layouts keep the body and its sentence_bert_config.json in 0_Transformer/
                nested = source / module["path"] / TOP_LEVEL_FILES[0]
                if nested.is_file():
                    shutil.copyfile(nested, save_directory / TOP_LEVEL_FILES[0])
            module["path"] = ""  # the body is saved at the folder's root
        elif module.get("path"):
            folder = source / module["path"]
            if folder.is_dir():  # e.g. 1_Pooling/config.json; Normalize has no files
                shutil.copytree(folder, save_directory / module["path"], dirs_exist_ok=True)
    (save_directory / MODULES_NAME).write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
    for name in TOP_LEVEL_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, save_directory / name)
    return True
