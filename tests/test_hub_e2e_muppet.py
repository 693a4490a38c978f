"""run_muppet.py against the local Hub server: the MUPPET-style output is pushed with its card, comes back byte for
byte, and loads through the server with plain `AutoModel` and with `MultiTaskModel` (heads included); the card's
model-index carries the per-task metrics; the token is in no pushed file."""

import hashlib
import json
import random
import sys
from pathlib import Path

import torch
from huggingface_hub import ModelCard, snapshot_download
from tiny import WORDS, tiny_config, tiny_tokenizer
from transformers import AutoModel

from hf_aux.runtime.hub import find_token_in_files
from hf_aux.modeling.multitask import MultiTaskModel
from hub_server import DEFAULT_USER, local_hub  # noqa: F401 - `local_hub` is a fixture
from hf_aux.muppet import command as run_muppet

TOKEN = "hf_MuppetE2eTokenNeverSaved0123456789"


def write_mixture(folder: Path) -> Path:
    rng = random.Random(0)
    sentiment = [{"text": " ".join(rng.choices(WORDS[:40], k=5) + [w]), "label": int(w == "good")}
                 for w in rng.choices(["good", "bad"], k=24)]
    choices = [{"question": " ".join(rng.choices(WORDS, k=4)), "choices": rng.sample(WORDS, 3), "label": rng.randrange(3)}
               for _ in range(24)]
    for name, rows in (("sent", sentiment), ("pick", choices)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    mixture = {"tasks": [
        {"name": "sent", "kind": "classification", "label_names": ["neg", "pos"], "data_files": "sent.jsonl",
         "validation_fraction": 0.25},
        {"name": "pick", "kind": "multiple_choice", "data_files": "pick.jsonl", "validation_fraction": 0.25}]}
    (folder / "mixture.json").write_text(json.dumps(mixture))
    return folder / "mixture.json"


def test_run_muppet_pushes_a_muppet_style_checkpoint_that_loads_back(local_hub, tmp_path, monkeypatch):
    local_hub.accept_only(TOKEN)
    tokenizer = tiny_tokenizer()
    base = tmp_path / "tiny-bert"
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(base)
    tokenizer.save_pretrained(base)
    repo, out = f"{DEFAULT_USER}/muppet-tiny", tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [
        "run_muppet.py", "--model_name_or_path", str(base), "--mixture_file", str(write_mixture(tmp_path)),
        "--output_dir", str(out), "--do_train", "--do_eval", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "2", "--max_seq_length", "24", "--report_to", "none", "--use_cpu",
        "--save_strategy", "no", "--disable_tqdm", "true", "--push_to_hub", "--hub_model_id", repo,
        "--hub_token", TOKEN])
    results = run_muppet.main()

    # what was pushed is what was saved, byte for byte, and holds no token
    pushed = {p: hashlib.sha256(c).hexdigest() for p, c in local_hub.files(repo).items()}
    for name in ("config.json", "model.safetensors", "multitask_heads.safetensors", "multitask_config.json",
                 "README.md", "loss_curve.png"):
        assert pushed[name] == hashlib.sha256((out / name).read_bytes()).hexdigest(), name
    assert [p for p, c in local_hub.files(repo).items() if TOKEN.encode() in c] == []
    assert find_token_in_files(out, TOKEN) == []

    # it comes back through the server and loads with plain transformers and with hf_aux, heads included
    local = snapshot_download(repo, token=TOKEN, cache_dir=tmp_path / "cache")
    assert {p.name for p in Path(local).iterdir()} >= {"config.json", "model.safetensors", "multitask_heads.safetensors"}
    body = AutoModel.from_pretrained(repo, token=TOKEN, cache_dir=tmp_path / "cache")
    restored = MultiTaskModel.from_pretrained(repo, token=TOKEN, cache_dir=tmp_path / "cache").eval()
    trained = MultiTaskModel.from_pretrained(str(out)).eval()
    assert restored.task_names == ["sent", "pick"]
    inputs = tokenizer(["the movie was good"], return_tensors="pt")
    torch.testing.assert_close(restored(task="sent", **inputs).logits, trained(task="sent", **inputs).logits)
    torch.testing.assert_close(body(**inputs).last_hidden_state, trained.body(**inputs).last_hidden_state)

    # the card's metadata parses and carries every task's metrics
    card = ModelCard.load(Path(local) / "README.md")
    assert "hf_aux" in card.data.tags and "muppet" in card.data.tags
    assert card.data.pipeline_tag == "feature-extraction"
    # local files: no model-index (its dataset ids are Hub ids); each task's metrics in the table, with its files
    assert card.data.eval_results is None
    for task in ("sent", "pick"):
        row = next(line for line in card.text.splitlines() if line.startswith(f"| {task} (local data: {task}.jsonl) |"))
        assert f"| {results[f'eval_{task}_accuracy']:.6g} |" in row


def test_save_pretrained_with_push_to_hub_round_trips(local_hub, tmp_path):
    local_hub.accept_only(TOKEN)
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    from hf_aux.modeling.multitask import MultiTaskModelConfig

    model = MultiTaskModel(MultiTaskModelConfig(encoder=tiny_config("bert", tokenizer),
                                           tasks=[{"name": "sent", "kind": "classification", "num_labels": 3}])).eval()
    repo = f"{DEFAULT_USER}/muppet-direct"
    model.save_pretrained(tmp_path / "saved", push_to_hub=True, repo_id=repo, token=TOKEN)
    pushed = set(local_hub.files(repo)) - {".gitattributes"}  # the server creates it with the repository
    assert pushed == {"config.json", "model.safetensors", "multitask_config.json", "multitask_heads.safetensors"}
    restored = MultiTaskModel.from_pretrained(repo, token=TOKEN, cache_dir=tmp_path / "cache").eval()
    inputs = tokenizer(["a good movie"], return_tensors="pt")
    torch.testing.assert_close(restored(task="sent", **inputs).logits, model(task="sent", **inputs).logits)


def test_a_pushed_lora_adapter_names_its_base_by_hub_id_and_loads_by_repo_id_elsewhere(local_hub, tmp_path,
                                                                                      monkeypatch):
    """The adapter a LoRA run writes names the local folder its base came from (so it reloads offline); the pushed
    copy names the base's Hub id (what the card's base_model says), so AutoPeftModel loads the repository where
    that folder does not exist."""
    from peft import AutoPeftModel

    local_hub.accept_only(TOKEN)
    tokenizer = tiny_tokenizer()
    base_id = f"{DEFAULT_USER}/tiny-bert-base"
    base = tmp_path / "tiny-bert"
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(base)
    tokenizer.save_pretrained(base)
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "_name_or_path": base_id}))  # where it came from
    from huggingface_hub import HfApi

    HfApi(token=TOKEN).create_repo(base_id)
    HfApi(token=TOKEN).upload_folder(repo_id=base_id, folder_path=base)
    repo, out = f"{DEFAULT_USER}/muppet-lora", tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [
        "run_muppet.py", "--model_name_or_path", str(base), "--mixture_file", str(write_mixture(tmp_path)),
        "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "4", "--max_seq_length", "24",
        "--report_to", "none", "--use_cpu", "--save_strategy", "no", "--disable_tqdm", "true", "--use_lora",
        "--lora_r", "4", "--lora_target_modules", "query", "value", "--push_to_hub", "--hub_model_id", repo,
        "--hub_token", TOKEN])
    run_muppet.main()

    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    pushed = json.loads(local_hub.files(repo)["adapter_config.json"])
    assert pushed["base_model_name_or_path"] == base_id
    assert {k: v for k, v in pushed.items() if k != "base_model_name_or_path"} == \
        {k: v for k, v in json.loads((out / "adapter_config.json").read_text()).items()
         if k != "base_model_name_or_path"}
    base.rename(tmp_path / "moved-away")  # elsewhere: the local base folder is gone
    adapted = AutoPeftModel.from_pretrained(repo, token=TOKEN, cache_dir=tmp_path / "cache").eval()
    trained = MultiTaskModel.from_pretrained(str(out), base_model=str(tmp_path / "moved-away")).eval()
    inputs = tokenizer(["the movie was good"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(adapted(**inputs).last_hidden_state,
                                   trained.body(**inputs).last_hidden_state, atol=1e-5, rtol=0)
