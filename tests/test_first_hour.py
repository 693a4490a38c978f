"""The first hour on your own data and machine (issue #60), each through the installed `hf-aux` command as a user
runs it:

- cards: the loading code of a card runs as written from the folder the user trained in, naming the output folder
  as they gave it (a relative one with "./", so transformers never looks it up on the Hub), with a
  `SentenceTransformer` block for a sentence-transformers body; `MultiTaskModel.from_pretrained` returns eval mode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import tiny_tokenizer, write_command_data, write_own_files

HF_AUX = str(Path(sys.executable).parent / "hf-aux")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


def hf_aux(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([HF_AUX, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("hf-aux ")]


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """The user's files (tiny.write_own_files) and st_body/: a tiny BERT saved by sentence-transformers itself
    (the transformer at the root, mean pooling, normalisation), as all-MiniLM-L6-v2 is."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    from tiny import tiny_config

    folder = write_own_files(write_command_data(tmp_path_factory.mktemp("own"), "hf-aux-tests/tiny-bert"))
    torch.manual_seed(0)
    plain = folder / "plain_body"
    BertModel(tiny_config()).save_pretrained(plain)
    tiny_tokenizer().save_pretrained(plain)
    transformer = models.Transformer(str(plain))
    pooling = models.Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(folder / "st_body"))
    return folder


# ---- (3) cards whose code runs as written --------------------------------------------------------------------
def card_blocks(out: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (out / "README.md").read_text(), flags=re.S)


def run_blocks(blocks: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The blocks as a user pastes them, one after another into one fresh interpreter started in `cwd`."""
    script = "".join(f"exec(compile({block!r}, 'card block {k}', 'exec'), {{}})\n" for k, block in enumerate(blocks))
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("command, given", [("finetune", "runs/ft-topics"), ("muppet", "ft-mix")])
def test_the_cards_code_runs_as_written_from_where_you_trained(command, given, own, tmp_path):
    """The output folder as the user typed it (runs/ft-topics reads as a Hub id `user/name`, a bare ft-mix as a
    Hub repository): the card names "./runs/ft-topics", and every python block of it runs from that folder; the
    body from sentence-transformers also loads as a SentenceTransformer, as the card shows."""
    data = (["--train_file", own / "train.csv", "--validation_file", own / "dev.csv"] if command == "finetune"
            else ["--mixture_file", own / "mix.yaml"])
    done = hf_aux(command, "--model_name_or_path", own / "st_body", *data, "--max_steps", "2", "--output_dir", given,
                  cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    out = tmp_path / given
    blocks = card_blocks(out)
    code = "\n".join(blocks)
    assert f'from_pretrained("./{given}")  # the output folder, relative to where you trained' in code
    assert f'"{Path(given).name}"' not in code  # the bare name, which transformers looks up on the Hub
    assert f'SentenceTransformer("./{given}")' in code
    ran = run_blocks(blocks, tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    elsewhere = run_blocks(blocks[:1], own)  # from another folder: a path error, never "couldn't connect"
    assert elsewhere.returncode != 0 and "huggingface.co" not in elsewhere.stderr, elsewhere.stderr[-2000:]


def test_a_card_for_the_hub_names_the_repository_and_an_absolute_folder_as_given(own, tmp_path):
    from hf_aux.cards.model_card import card_model_id

    assert card_model_id("runs/x", "someone/x") == ("someone/x", None)
    assert card_model_id(tmp_path / "out")[0] == str(tmp_path / "out")
    assert card_model_id("out")[0] == "./out" and card_model_id("../out")[0] == "../out"


def test_multitask_model_from_pretrained_is_in_eval_mode_as_transformers_models_are(own, tmp_path):
    """Dropout off after from_pretrained: two forward passes agree without .eval() (logits were off by ~0.1)."""
    from transformers import AutoTokenizer

    from hf_aux import MultiTaskModel

    task = {"name": "topic", "kind": "classification", "num_labels": 3}
    model = MultiTaskModel.from_pretrained(str(own / "tiny_bert"), tasks=[task], classifier_dropout=0.5)
    assert not any(module.training for module in model.modules())
    model.save_pretrained(tmp_path / "saved")
    loaded = MultiTaskModel.from_pretrained(tmp_path / "saved")
    assert not any(module.training for module in loaded.modules())
    batch = AutoTokenizer.from_pretrained(own / "tiny_bert")(["the movie was good"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch, task="topic").logits, loaded(**batch, task="topic").logits)
