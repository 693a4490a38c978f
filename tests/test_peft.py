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
from hf_aux.muppet import command as run_muppet
from hf_aux.tartan import command as run_tartan
from test_tartan_trainer import LABELS, TEXTS, StopAfter, first_batch, make_model, record_draws
from test_tartan_trainer import data as tartan_data  # noqa: F401 (a module fixture, under this name here)
from tiny import tiny_config, tiny_tokenizer
from transformers import AutoModel, AutoModelForSequenceClassification

from hf_aux.runtime.adapters import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, LoraArguments, base_of
from hf_aux.tasks.data import MultiTaskCollator
from hf_aux.modeling.multitask import HEADS_WEIGHTS_NAME, MultiTaskModel
from hf_aux.tartan.model import END_TASK_HEAD_NAME, TARTAN_HEADS_NAME, TartanModel
from hf_aux.muppet.trainer import MuppetTrainer
from hf_aux.tartan.trainer import TartanConfig, TartanTrainer

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
    result = subprocess.run([sys.executable, "-c", "import sys\n" + script], check=False, capture_output=True,
                            text=True, env=env, cwd=cwd, timeout=300)
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


def test_muppet_lora_load_best_model_at_end_restores_adapter_and_heads(tmp_path):
    tokenizer, _, train, model, args = _setup(
        tmp_path, max_steps=3, eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1,
        load_best_model_at_end=True, metric_for_best_model="loss", greater_is_better=True, learning_rate=5e-2)
    # "best" = the highest eval loss, i.e. an early checkpoint: the end state must really be replaced
    evaluation = {"sent": train["sent"].select(range(8)), "topic": train["topic"].select(range(8))}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                            processing_class=tokenizer, peft_config=lora())
    trainer.train()
    best = trainer.state.best_model_checkpoint
    last = os.path.join(args.output_dir, "checkpoint-3")
    adapter = load_file(os.path.join(best, ADAPTER_WEIGHTS_NAME))
    heads = load_file(os.path.join(best, HEADS_WEIGHTS_NAME))
    state = model.state_dict()
    for key, value in adapter.items():  # peft's file keys lack the adapter name: lora_A.weight -> lora_A.default.weight
        own = "body." + key.replace(".lora_A.", ".lora_A.default.").replace(".lora_B.", ".lora_B.default.")
        assert torch.equal(state[own], value), key
    assert all(torch.equal(state[k], v) for k, v in heads.items())
    losses = [h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h]
    assert best.endswith(f"checkpoint-{losses.index(max(losses)) + 1}") and best != last
    final = load_file(os.path.join(last, HEADS_WEIGHTS_NAME))
    assert any(not torch.equal(state[k], v) for k, v in final.items())


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


def test_muppet_lora_with_non_reentrant_checkpointing_needs_no_input_grads(tmp_path):
    """The classic pitfall: frozen embeddings + reentrant checkpointing give the adapters no gradient unless the
    embeddings' output is made to require grad (`enable_input_require_grads`). Non-reentrant needs no such hook."""
    tokenizer, _, train, model, args = _setup(tmp_path, dropout=0.0, max_steps=2, activation_checkpointing=True)
    model.add_body_lora(lora())
    with torch.no_grad():  # lora_B starts at 0, which would leave lora_A without gradient
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.05)
    batch = MultiTaskCollator(tokenizer, model.task_names)([dict(train["sent"][i]) for i in range(3)])
    embedded = []
    model.get_input_embeddings().register_forward_hook(lambda m, i, o: embedded.append(o.requires_grad))
    adapters = {n: p for n, p in model.named_parameters() if ".lora_" in n and p.requires_grad}

    def adapter_grads():
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        return {n: p.grad for n, p in adapters.items()}

    model.train()
    plain = adapter_grads()
    assert all(g is not None for g in plain.values())
    model.activation_checkpointing_enable()  # non-reentrant; transformers also hooks the embeddings: remove that
    model.disable_input_require_grads()
    embedded.clear()
    checkpointed = adapter_grads()
    assert embedded == [False]  # the checkpointed layers' input does not require grad ...
    for name, grad in plain.items():  # ... and the adapters still get exactly their gradient
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)
    model.activation_checkpointing_disable()
    model.activation_checkpointing_enable({"use_reentrant": True})
    model.disable_input_require_grads()
    with pytest.warns(UserWarning, match="requires_grad"):
        reentrant = adapter_grads()
    assert all(reentrant[n] is None for n in adapters if ".encoder.layer." in n)  # the pitfall, for contrast
    model.activation_checkpointing_disable()

    base = {k: v.clone() for k, v in base_of(model.body).state_dict().items() if ".lora_" not in k}
    before = snapshot(model)
    MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer).train()
    assert model.is_activation_checkpointing
    assert all(torch.equal(v, base[k]) for k, v in base_of(model.body).state_dict().items() if ".lora_" not in k)
    assert {k for k in changed(before, model) if k.startswith("body.")} == {
        k for k in before if ".lora_" in k and ".pooler." not in k}


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


# ----------------------------------------------------------------------------------------------------------------
# TARTAN
# ----------------------------------------------------------------------------------------------------------------


def make_trainer(data, tmp_path, model=None, peft_config=None, **overrides):
    """test_tartan_trainer.make_trainer's settings, with a LoRA config for the trainer."""
    tok, train, val, aux = data
    settings = {"output_dir": str(tmp_path / "out"), "max_steps": 2, "per_device_train_batch_size": 4,
                "learning_rate": 1e-3, "report_to": [], "use_cpu": True, "seed": 3, "logging_steps": 1,
                "save_strategy": "no", "disable_tqdm": True, "meta_head_steps": 3, **overrides}
    return TartanTrainer(model=model or make_model(tok), args=TartanConfig(**settings), train_dataset=train,
                         eval_dataset=val, auxiliary_datasets=aux, processing_class=tok, peft_config=peft_config)


def test_tartan_lora_mt_trains_adapters_and_heads_never_phi_star(tartan_data, tmp_path):  # noqa: F811
    trainer = make_trainer(tartan_data, tmp_path, mode="mt", max_steps=3, peft_config=lora())
    tartan = trainer.model
    assert tartan.has_body_lora
    body_names = {n for n, _ in tartan.named_parameters() if n.startswith("classifier.bert.")}
    trainable = {n for n, p in tartan.named_parameters() if p.requires_grad}
    assert trainable & body_names == {n for n in body_names if ".lora_" in n}
    assert not any(n.startswith("meta_head.") for n in trainable)
    before = snapshot(tartan)
    trainer.train()
    moved = changed(before, tartan)
    assert {k for k in before if k.startswith("classifier.bert.")} & moved == {
        k for k in before if ".lora_" in k}  # every adapter moved, every base weight bit-identical
    assert {"classifier.classifier.weight", "classifier.classifier.bias"} <= moved  # phi'
    for name in ("tapt", "dapt"):
        assert {k for k in before if k.startswith(f"mlm_heads.{name}.")} <= moved
    assert not any(k.startswith("meta_head.") for k in moved)


def test_tartan_lora_meta_step_takes_cosines_over_exactly_the_adapters(tartan_data, tmp_path):  # noqa: F811
    trainer = make_trainer(tartan_data, tmp_path, model=make_model(tartan_data[0], dropout=0.0), mode="meta",
                           task_weight_lr=0.05, task_weights=[0.2, 0.5, 0.3], peft_config=lora())
    tartan = trainer.model
    adapters = [p for n, p in tartan.named_parameters() if ".lora_" in n]
    assert [id(p) for p in tartan.body_parameters()] == [id(p) for p in adapters]
    with torch.no_grad():  # lora_B starts at 0 (so would lora_A's gradient): give both a gradient to compare
        for n, p in tartan.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.05)
    drawn = record_draws(trainer)
    batch = first_batch(trainer)
    before = snapshot(tartan)
    trainer.training_step(tartan, batch)
    assert not {k for k in changed(before, tartan) if not k.startswith("meta_head.")}
    frozen = [p for n, p in tartan.named_parameters() if n.startswith("classifier.bert.") and ".lora_" not in n]
    assert frozen and all(p.grad is None for p in frozen)  # the base gets no gradient at all

    def grad(loss):  # the MLM losses do not reach the pooler's adapters: zeros there
        grads = torch.autograd.grad(loss, adapters, allow_unused=True)
        return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, adapters)])

    grads = [grad(tartan(**batch).loss)] + [grad(tartan.mlm_loss(n, drawn[n])) for n in ("tapt", "dapt")]
    g_meta = grad(tartan.meta_head(tartan.body_outputs(drawn["_meta"]), labels=drawn["_meta"]["labels"]).loss)
    cosines = torch.stack([g_meta @ g / (g_meta.norm() * g.norm()) for g in grads])
    expected_w = torch.tensor([0.2, 0.5, 0.3]) + 0.05 * cosines
    weights = torch.tensor(trainer.task_weights_state.weights)
    assert torch.isfinite(weights).all() and not torch.equal(weights, torch.tensor([0.2, 0.5, 0.3]))
    torch.testing.assert_close(weights, expected_w, atol=1e-6, rtol=1e-5)
    alpha = torch.softmax(expected_w, 0)
    combined = sum(a * g for a, g in zip(alpha, grads))
    torch.testing.assert_close(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                                          for p in adapters]), combined, atol=1e-6, rtol=1e-4)


def test_tartan_lora_resume_is_exact_reload_and_merged_export_loads_vanilla(tartan_data, tmp_path):  # noqa: F811
    common = {"mode": "meta", "max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    base_dir = tmp_path / "base"
    model = make_model(tartan_data[0])
    model.classifier.save_pretrained(base_dir)  # the base classifier, before any adapter
    straight = make_trainer(tartan_data, tmp_path / "a", model=model, peft_config=lora(), **common)
    straight.train()
    first = make_trainer(tartan_data, tmp_path / "b", peft_config=lora(), **common)
    first.add_callback(StopAfter(2))
    first.train()
    checkpoint = tmp_path / "b" / "out" / "checkpoint-2"
    files = set(os.listdir(checkpoint))
    assert {ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, END_TASK_HEAD_NAME, TARTAN_HEADS_NAME} <= files
    assert "model.safetensors" not in files and "config.json" not in files
    assert set(load_file(checkpoint / END_TASK_HEAD_NAME)) == {"classifier.weight", "classifier.bias"}

    resumed_model = make_model(tartan_data[0])  # the same base; other adapters and heads, restored from checkpoint-2
    with torch.no_grad():
        for name, param in resumed_model.named_parameters():
            if not name.startswith("classifier.bert."):
                param.add_(0.5)
    resumed = make_trainer(tartan_data, tmp_path / "b", model=resumed_model,
                           peft_config=LoraConfig(**{**LORA, "init_lora_weights": "gaussian"}), **common)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        if not name.startswith("meta_head."):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    torch.testing.assert_close(torch.tensor(straight.task_weights_state.history),
                               torch.tensor(resumed.task_weights_state.history), atol=1e-6, rtol=0)

    final = tmp_path / "a" / "out" / "checkpoint-4"
    with pytest.raises(ValueError, match="base_model"):
        TartanModel.from_pretrained(str(final))
    reloaded = TartanModel.from_pretrained(str(final), base_model=str(base_dir)).eval()
    ids = torch.tensor([[2, 10, 20, 30, 3], [2, 40, 50, 3, 0]])
    mask = (ids != 0).long()
    straight.model.eval()
    with torch.no_grad():
        expected = straight.model(input_ids=ids, attention_mask=mask).logits
        assert torch.equal(reloaded(input_ids=ids, attention_mask=mask).logits, expected)
        assert torch.equal(reloaded.mlm_heads["tapt"].bias, straight.model.mlm_heads["tapt"].bias)

    merged = tmp_path / "merged"
    straight.model.save_merged(str(merged))
    assert straight.model.has_body_lora and not (merged / ADAPTER_CONFIG_NAME).exists()
    torch.save({"ids": ids, "mask": mask, "logits": expected}, tmp_path / "expected.pt")
    clean_process(
        "import torch\nfrom transformers import AutoModelForSequenceClassification\n"
        f"model, info = AutoModelForSequenceClassification.from_pretrained({str(merged)!r}, output_loading_info=True)\n"
        "assert not info['missing_keys'] and not info['unexpected_keys'] and not info['mismatched_keys'], info\n"
        f"ref = torch.load({str(tmp_path / 'expected.pt')!r})\n"
        "logits = model.eval()(input_ids=ref['ids'], attention_mask=ref['mask']).logits\n"
        "assert (logits - ref['logits']).abs().max() < 1e-5, (logits, ref['logits'])\n", tmp_path)
    plain = TartanModel.from_pretrained(str(merged)).eval()  # the merged folder is an ordinary TARTAN checkpoint
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids, attention_mask=mask).logits, expected, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------------------------
# Run scripts: --use_lora ... --merge_lora
# ----------------------------------------------------------------------------------------------------------------


def test_run_scripts_train_lora_and_write_a_merged_export(tmp_path, monkeypatch):
    tokenizer = tiny_tokenizer()
    model_dir = tmp_path / "tiny-bert"
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = [{"text": t, "label": y} for t, y in zip(TEXTS * 3, LABELS * 3)]
    for name, part in (("train", rows), ("validation", rows[:8])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    lora_flags = ["--use_lora", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0.0",
                  "--lora_target_modules", "query", "value", "--merge_lora"]
    common = ["--model_name_or_path", str(model_dir), "--do_train", "--max_steps", "2", "--report_to", "none",
              "--use_cpu", "--save_strategy", "no", "--disable_tqdm", "true", "--max_seq_length", "16",
              "--per_device_train_batch_size", "4", *lora_flags]

    # MUPPET
    (tmp_path / "mixture.json").write_text(json.dumps({"tasks": [
        {"name": "sent", "kind": "classification", "num_labels": 2, "data_files": str(tmp_path / "train.jsonl")},
        {"name": "sent2", "kind": "classification", "num_labels": 2, "data_files": str(tmp_path / "train.jsonl")}]}))
    out = tmp_path / "muppet"
    monkeypatch.setattr(sys, "argv", ["run_muppet.py", "--mixture_file", str(tmp_path / "mixture.json"),
                                      "--output_dir", str(out), "--gradient_accumulation_steps", "2", *common])
    run_muppet.main()
    assert {ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HEADS_WEIGHTS_NAME} <= set(os.listdir(out))
    assert not (out / "model.safetensors").exists() and (out / "merged" / "model.safetensors").is_file()
    adapter = json.loads((out / ADAPTER_CONFIG_NAME).read_text())
    assert adapter["r"] == 4 and set(adapter["target_modules"]) == {"query", "value"}
    assert adapter["base_model_name_or_path"] == str(model_dir)  # from_pretrained finds the base by itself
    card = (out / "README.md").read_text()  # the card says what the folder holds and where the merged copy is
    assert "library_name: peft" in card and "LoRA adapters" in card and 'subfolder="merged"' in card
    lora_model = MultiTaskModel.from_pretrained(str(out)).eval()
    merged = AutoModel.from_pretrained(out / "merged").eval()
    ids = torch.tensor([[2, 10, 20, 30, 3]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).last_hidden_state,
                                   lora_model.body(input_ids=ids).last_hidden_state, atol=1e-5, rtol=0)
        assert not torch.equal(AutoModel.from_pretrained(model_dir)(input_ids=ids).last_hidden_state,
                               merged(input_ids=ids).last_hidden_state)  # the adapters trained

    # TARTAN
    out = tmp_path / "tartan"
    args = ["--train_file", str(tmp_path / "train.jsonl"), "--validation_file", str(tmp_path / "validation.jsonl"),
            "--auxiliary", "tapt=tapt", "--mode", "meta", "--meta_head_steps", "2", "--output_dir", str(out), *common]
    run_tartan.main(*run_tartan.parse_args(args))
    assert {ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, END_TASK_HEAD_NAME, TARTAN_HEADS_NAME} <= set(os.listdir(out))
    card = (out / "README.md").read_text()
    assert "library_name: peft" in card and "LoRA adapters" in card and 'subfolder="merged"' in card
    tartan = TartanModel.from_pretrained(str(out)).eval()
    merged = AutoModelForSequenceClassification.from_pretrained(out / "merged").eval()
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, tartan(input_ids=ids).logits, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="final_finetune_epochs"):
        run_tartan.main(*run_tartan.parse_args([*args, "--final_finetune_epochs", "1"]))
