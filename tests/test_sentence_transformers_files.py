"""Outputs built from a sentence-transformers body stay SentenceTransformers: a MUPPET-style checkpoint, a TARTAN
classifier and a merged LoRA export load in `SentenceTransformer` (the real package, in a process that never imports
hf_aux) with the source's pooling and normalisation, and their embeddings are the mean-pooled, normalised outputs
of the trained body as `AutoModel` loads it."""

import json
import subprocess
import sys

import torch
from peft import LoraConfig
from sentence_transformers import SentenceTransformer, models
from transformers import BertModel

from hf_aux.modeling.multitask import MultiTaskModel
from hf_aux.tartan.model import TartanModel
from hf_aux.modeling.sentence_transformers_files import copy_sentence_transformers_files, sentence_transformers_source

from tiny import tiny_config, tiny_tokenizer

SENTENCES = ["the movie was good", "a terrible plot and a boring actor", "hello"]

# Runs in a fresh interpreter: sentence-transformers and transformers only.
CHECK = r"""
import json, sys
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer
assert "hf_aux" not in sys.modules
folders, sentences = sys.argv[1:-1], json.loads(sys.argv[-1])
result = {}
for folder in folders:
    st = SentenceTransformer(folder, device="cpu")
    embeddings = st.encode(sentences, convert_to_tensor=True)
    tokenizer, body = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = body(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    result[folder] = {"max_abs_diff": (embeddings - pooled).abs().max().item(),
                      "modules": [type(m).__name__ for m in st], "embeddings": embeddings.tolist()}
print(json.dumps(result))
"""


def _sentence_transformers_body(tmp_path):
    """A tiny BERT saved by the real sentence-transformers package (transformer at the root, mean pooling,
    normalisation), as all-MiniLM-L6-v2 is."""
    torch.manual_seed(0)
    plain = tmp_path / "plain"
    BertModel(tiny_config()).save_pretrained(plain)
    tiny_tokenizer().save_pretrained(plain)
    transformer = models.Transformer(str(plain))
    pooling = models.Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    source = tmp_path / "st-source"
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(source))
    return source


def _perturb(module):
    """Stand-in for training: every body weight moves, so the outputs cannot be the source's."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))


def test_outputs_of_a_sentence_transformers_body_load_in_sentence_transformers(tmp_path):
    source = _sentence_transformers_body(tmp_path)
    tokenizer = tiny_tokenizer()
    task = {"name": "sentiment", "kind": "classification", "num_labels": 2}

    muppet = MultiTaskModel.from_pretrained(str(source), tasks=[task])
    _perturb(muppet.body)
    muppet.save_pretrained(tmp_path / "muppet")

    tartan = TartanModel.from_pretrained(str(source), auxiliary_tasks=["tapt"])
    _perturb(tartan.classifier)
    tartan.save_pretrained(tmp_path / "tartan")

    lora = MultiTaskModel.from_pretrained(str(source), tasks=[task])
    lora.add_body_lora(LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], init_lora_weights=False))
    lora.save_merged(tmp_path / "merged")
    lora.save_pretrained(tmp_path / "adapter")  # an adapter folder holds no body: nothing to load it as

    outputs = [tmp_path / name for name in ("muppet", "tartan", "merged")]
    for folder in outputs:
        tokenizer.save_pretrained(folder)  # as Trainer and the run scripts do
        modules = json.loads((folder / "modules.json").read_text())
        assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Normalize"]
        assert (folder / "1_Pooling" / "config.json").read_text() == (source / "1_Pooling" / "config.json").read_text()
        assert (folder / "config.json").is_file()  # the body is still plain transformers at the root
    assert not (tmp_path / "adapter" / "modules.json").exists()

    out = subprocess.run([sys.executable, "-c", CHECK, *map(str, outputs + [source]), json.dumps(SENTENCES)],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    reference = torch.tensor(result[str(source)]["embeddings"])
    for folder in outputs:
        entry = result[str(folder)]
        assert entry["modules"] == ["Transformer", "Pooling", "Normalize"], folder
        assert entry["max_abs_diff"] < 1e-5, folder
        assert not torch.allclose(torch.tensor(entry["embeddings"]), reference, atol=1e-3), folder  # trained body


def test_nothing_is_written_for_other_sources(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    BertModel(tiny_config()).save_pretrained(plain)
    model = MultiTaskModel.from_pretrained(str(plain), tasks=[{"name": "t", "kind": "classification", "num_labels": 2}])
    model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out" / "modules.json").exists()
    assert sentence_transformers_source(None) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub id that cannot be reached: plain transformers output
    assert sentence_transformers_source("no-such-user/no-such-model") is None
    assert copy_sentence_transformers_files("no-such-user/no-such-model", tmp_path / "out") is False
