"""LoRA on the shared body (issue #8 item 2) for MuppetTrainer and TartanTrainer: which parameters train and which
stay bit-identical, adapter + heads checkpoints, exact resume, reload, merged export loaded by plain transformers
in a clean process; META-TARTAN's cosines over the adapters; MUPPET with bf16 autocast on CPU and activation
checkpointing (issue #8 item 3)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from peft import LoraConfig, PeftModel
from safetensors.torch import load_file
from test_muppet_trainer import _setup
from transformers import AutoModel

from hf_aux.adapters import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, LoraArguments, base_of
from hf_aux.data import MultiTaskCollator
from hf_aux.modeling.multitask import HEADS_WEIGHTS_NAME, MultiTaskModel
from hf_aux.trainers.muppet import MuppetTrainer

LORA = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": ["query", "value", "dense"]}


def lora():
    return LoraConfig(**LORA)


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def changed(before, model):
    return {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}


def clean_process(script: str, cwd) -> str:
    """Run `script` with neither hf_aux nor peft importable-by-accident checks: it must not import them."""
    script += ("\nassert not any(m.split('.')[0] in ('hf_aux', 'peft') for m in sys.modules), "
               "[m for m in sys.modules if m.split('.')[0] in ('hf_aux', 'peft')]\nprint('CLEAN_OK')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", "import sys\n" + script], check=False, capture_output=True, text=True,
                            env=env, cwd=cwd, timeout=300)
    assert "CLEAN_OK" in result.stdout, result.stderr[-3000:]
    return result.stdout


# ----------------------------------------------------------------------------------------------------------------
# MUPPET
# ----------------------------------------------------------------------------------------------------------------


def test_muppet_lora_trains_only_adapters_and_heads(tmp_path):
    tokenizer, _, train, model, args = _setup(tmp_path, max_steps=4)
    del train["topic"]  # no data for this head: it must not move
    base_before = {k: v.clone() for k, v in model.body.state_dict().items()}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                            peft_config=lora())
    assert isinstance(model.body, PeftModel)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    lora_names = {n for n in trainable if ".lora_" in n}
    assert lora_names and all(n.startswith("body.") for n in lora_names)
    assert not any(".lora_" in n for n in trainable if ".pooler." in n)  # the unused pooler's adapters: frozen
    assert {n for n in trainable if not n.startswith("body.")} == {n for n, _ in model.named_parameters()
                                                                   if not n.startswith("body.")}
    assert trainable - lora_names == {n for n in trainable if not n.startswith("body.")}  # no base weight trains
    before = snapshot(model)
    trainer.train()
    assert sum(p.numel() for g in trainer.optimizer.param_groups for p in g["params"]) == sum(
        p.numel() for p in model.parameters() if p.requires_grad)
    moved = changed(before, model)
    # base weights bit-identical, the adapters of the used layers moved, every head with data moved
    for key, value in base_of(model.body).state_dict().items():
        if ".lora_" not in key:
            assert torch.equal(value, base_before[key.replace(".base_layer", "")]), key
    assert {k for k in moved if k.startswith("body.")} == {k for k in before if ".lora_" in k and ".pooler." not in k}
    assert {k.split(".")[0] for k in moved if not k.startswith("body.")} == {"classification_heads",
                                                                            "multiple_choice_head", "span_head"}
    assert not any(k.startswith("classification_heads.topic.") for k in moved)


def test_muppet_lora_checkpoint_holds_adapter_and_heads_and_resume_is_exact(tmp_path):
    common = {"max_steps": 6, "save_strategy": "steps", "save_steps": 3, "robust_finetuning": "r3f", "r3f_eps": 1e-2}
    tokenizer, _, train, straight, args = _setup(tmp_path / "a", **common)
    MuppetTrainer(model=straight, args=args, train_dataset=train, processing_class=tokenizer,
                  peft_config=lora()).train()

    tokenizer, _, train, model, args = _setup(tmp_path / "b", **common)
    MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, peft_config=lora()).train()
    checkpoint = os.path.join(args.output_dir, "checkpoint-3")
    files = set(os.listdir(checkpoint))
    assert {ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HEADS_WEIGHTS_NAME} <= files
    assert "model.safetensors" not in files and "config.json" not in files  # no frozen base weights
    adapter = load_file(os.path.join(checkpoint, ADAPTER_WEIGHTS_NAME))
    assert adapter and all(".lora_A." in k or ".lora_B." in k for k in adapter)
    assert len(adapter) == sum(".lora_" in n for n, _ in model.body.named_parameters())

    # same base weights (they are not in the checkpoint), other adapters and heads: all restored from checkpoint-3
    tokenizer, _, train, resumed, args = _setup(tmp_path / "b", **common)
    with torch.no_grad():
        for name, param in resumed.named_parameters():
            if not name.startswith("body."):
                param.add_(1.0)
    trainer = MuppetTrainer(model=resumed, args=args, train_dataset=train, processing_class=tokenizer,
                            peft_config=LoraConfig(**{**LORA, "init_lora_weights": "gaussian"}))
    trainer.train(resume_from_checkpoint=checkpoint)
    assert list(straight.state_dict()) == list(resumed.state_dict())
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)


def test_muppet_lora_reload_and_merged_export_load_in_plain_transformers(tmp_path):
    tokenizer, _, train, model, args = _setup(tmp_path, max_steps=3, dropout=0.0)
    base_dir = tmp_path / "base"
    model.body.save_pretrained(base_dir)  # the base encoder, before any adapter
    MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, peft_config=lora()).train()
    model.eval()
    batch = MultiTaskCollator(tokenizer, model.task_names)([dict(train["sent"][i]) for i in range(3)])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        expected = model(**inputs)

    saved = tmp_path / "lora"
    model.save_pretrained(saved)
    assert json.loads((saved / "multitask_config.json").read_text())["adapter"] == "lora"
    with pytest.raises(ValueError, match="base_model"):  # built from a config: no base recorded in the adapter
        MultiTaskModel.from_pretrained(str(saved))
    reloaded = MultiTaskModel.from_pretrained(str(saved), base_model=str(base_dir)).eval()
    assert reloaded.has_body_lora and not any(p.requires_grad for n, p in reloaded.named_parameters()
                                              if ".lora_" in n)  # peft's default: loaded for inference
    with torch.no_grad():
        again = reloaded(**inputs)
    assert torch.equal(again.logits, expected.logits)
    assert torch.equal(again.last_hidden_state, expected.last_hidden_state)
    # plain peft restores the adapted body from the same files
    body = PeftModel.from_pretrained(AutoModel.from_pretrained(base_dir), str(saved)).eval()
    with torch.no_grad():
        hidden = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      token_type_ids=batch["token_type_ids"]).last_hidden_state
    torch.testing.assert_close(hidden, expected.last_hidden_state, atol=1e-6, rtol=0)
    # a second save of the reloaded model writes the same adapter
    reloaded.save_pretrained(tmp_path / "lora2")
    first, second = load_file(saved / ADAPTER_WEIGHTS_NAME), load_file(tmp_path / "lora2" / ADAPTER_WEIGHTS_NAME)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)

    merged = tmp_path / "merged"
    model.save_merged(merged)
    assert model.has_body_lora  # the model keeps its adapters
    assert not (merged / ADAPTER_CONFIG_NAME).exists()
    torch.save({k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")} |
               {"hidden": expected.last_hidden_state}, tmp_path / "expected.pt")
    clean_process(
        "import torch\nfrom transformers import AutoModel\n"
        f"model, info = AutoModel.from_pretrained({str(merged)!r}, output_loading_info=True)\n"
        "assert not info['missing_keys'] and not info['unexpected_keys'] and not info['mismatched_keys'], info\n"
        f"ref = torch.load({str(tmp_path / 'expected.pt')!r})\n"
        "hidden = model.eval()(**{k: ref[k] for k in ('input_ids', 'attention_mask', 'token_type_ids')})"
        ".last_hidden_state\n"
        "assert (hidden - ref['hidden']).abs().max() < 1e-5, (hidden - ref['hidden']).abs().max()\n", tmp_path)
    full = MultiTaskModel.from_pretrained(str(merged)).eval()  # heads beside the merged body, no adapter
    assert not full.has_body_lora
    with torch.no_grad():
        torch.testing.assert_close(full(**inputs).logits, expected.logits, atol=1e-5, rtol=0)


def test_muppet_lora_arguments_and_errors(tmp_path):
    config = LoraArguments(use_lora=True, lora_r=2, lora_alpha=4, lora_target_modules=["query"]).lora_config()
    assert (config.r, config.lora_alpha, set(config.target_modules)) == (2, 4, {"query"})
    assert LoraArguments().lora_config() is None
    assert LoraArguments(use_lora=True, lora_target_modules=["all-linear"]).lora_config().target_modules == "all-linear"
    for bad, field in (({"lora_r": 0}, "lora_r"), ({"lora_dropout": 1.0}, "lora_dropout"),
                       ({"merge_lora": True}, "merge_lora"), ({"lora_alpha": 0}, "lora_alpha")):
        with pytest.raises(ValueError, match=field):
            LoraArguments(**bad)
    tokenizer, _, train, model, args = _setup(tmp_path)
    with pytest.raises(ValueError, match="LoraConfig"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                      peft_config={"r": 4})
    model.add_body_lora(lora())
    with pytest.raises(ValueError, match="already has LoRA"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, peft_config=lora())
    with pytest.raises(ValueError, match="no LoRA adapter"):
        _setup(tmp_path)[3].save_merged(tmp_path / "m")
