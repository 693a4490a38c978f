"""MuppetTrainer on a tiny BERT and a tiny 4-task mixture: parameters move, an update is exactly the mean of its
sub-batch gradients, resume is exact, evaluation scores every task, run_muppet.py's main() runs end to end."""

import json
import math
import os
import random
import shutil
import sys

import datasets
import pytest
import torch
from tiny import tiny_config, tiny_tokenizer
from transformers import AutoModel

from hf_aux.tasks.data import MultiTaskCollator, tokenize_task
from hf_aux.muppet.losses import classification_loss, multiple_choice_loss, scale_losses
from hf_aux.tasks.metrics import rouge_metrics
from hf_aux.modeling.multitask import MultiTaskModel, MultiTaskModelConfig
from hf_aux.tasks.loading import TaskSpec
from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer
from hf_aux.muppet import command as run_muppet

WORDS = "good bad movie film great terrible fun boring love hate".split()


def _rows(kind, n, seed, num_labels=2):
    rng = random.Random(seed)
    text = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    if kind == "classification":
        return [{"text": text(5), "label": rng.randrange(num_labels)} for _ in range(n)]
    if kind == "multiple_choice":
        return [{"question": "what is it", "choices": [text(2) for _ in range(3)], "label": rng.randrange(3)}
                for _ in range(n)]
    context = "paris is the capital city of france and the river is long"
    return [{"question": "what is the capital", "context": context, "answers": {"text": ["paris"], "answer_start": [0]}}
            for _ in range(n)]


def _tasks():
    return [TaskSpec(name="sent", kind="classification", num_labels=2, dataset=datasets.Dataset.from_list(_rows("classification", 24, 0))),
            TaskSpec(name="topic", kind="classification", num_labels=4, dataset=datasets.Dataset.from_list(_rows("classification", 16, 1, 4))),
            TaskSpec(name="choice", kind="multiple_choice", dataset=datasets.Dataset.from_list(_rows("multiple_choice", 12, 2))),
            TaskSpec(name="qa", kind="extractive_qa", dataset=datasets.Dataset.from_list(_rows("qa", 8, 3)))]


def _setup(tmp_path, dropout=0.1, spectral_norm=False, seed=0, init_seed=0, **config):
    tokenizer = tiny_tokenizer()
    tasks = _tasks()
    train = {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=24, doc_stride=8) for t in tasks}
    torch.manual_seed(init_seed)
    body = AutoModel.from_config(tiny_config("bert", tokenizer, hidden_dropout_prob=dropout,
                                             attention_probs_dropout_prob=dropout))
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=tasks, classifier_dropout=dropout,
                                           spectral_norm_heads=spectral_norm), body=body)
    defaults = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                    max_steps=4, learning_rate=1e-3, report_to=[], logging_steps=2, save_strategy="no", use_cpu=True,
                    disable_tqdm=True, seed=seed)
    defaults.update(config)
    return tokenizer, tasks, train, model, MuppetConfig(**defaults)


def test_training_moves_body_and_every_trained_head_and_logs_per_task_losses(tmp_path):
    tokenizer, tasks, train, model, args = _setup(tmp_path, max_steps=6)
    del train["topic"]  # no data for this head: it must not move
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    trainer.train()
    after = model.state_dict()
    moved = lambda prefix: any(not torch.equal(before[k], after[k]) for k in after if k.startswith(prefix))  # noqa: E731
    assert moved("body.encoder.")
    assert moved("classification_heads.sent.") and moved("multiple_choice_head.") and moved("span_head.")
    assert not moved("classification_heads.topic.")
    assert not moved("body.pooler.")  # frozen: the heads read the first token
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all(0 < h["scaled_loss/sent"] < 2 for h in logs if "scaled_loss/sent" in h)
    assert any("loss/qa" in h for h in logs) and not any("loss/topic" in h for h in logs)


def test_one_update_is_the_mean_of_its_scaled_sub_batch_gradients(tmp_path):
    tokenizer, tasks, train, model, args = _setup(tmp_path, dropout=0.0, max_steps=1, optim="sgd", learning_rate=1.0,
                                                  weight_decay=0.0, max_grad_norm=0.0, warmup_steps=0,
                                                  lr_scheduler_type="constant", gradient_accumulation_steps=3)
    train = {k: train[k] for k in ("sent", "topic", "choice")}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    sampler_batches = list(trainer.get_train_dataloader())[:3]
    assert len({int(b["task_ids"][0]) for b in sampler_batches}) >= 2
    # by hand: mean over the 3 sub-batches of each one's mean scaled loss (eq. 1)
    reference = MultiTaskModel(model.config, body=AutoModel.from_config(model.config.encoder))
    reference.load_state_dict(model.state_dict())
    total = 0.0
    for batch in sampler_batches:
        out = reference(**{k: v for k, v in batch.items() if k != "labels"})
        kind = reference.config.tasks[int(batch["task_ids"][0])]["kind"]
        raw, n = (multiple_choice_loss(out.logits, batch["labels"], batch["choice_mask"]) if kind == "multiple_choice"
                  else classification_loss(out.logits, batch["labels"]))
        total = total + scale_losses(raw, n).mean() / 3
    total.backward()
    expected = {name: p.detach() - p.grad for name, p in reference.named_parameters() if p.grad is not None}
    trainer.train()
    for name, param in model.named_parameters():
        if name in expected:
            torch.testing.assert_close(param.detach(), expected[name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("robust", ["r3f"])
def test_resume_mid_epoch_is_exact(tmp_path, robust):
    common = dict(max_steps=6, save_strategy="steps", save_steps=3, robust_finetuning=robust, r3f_eps=1e-2)
    tokenizer, _, train, straight, args = _setup(tmp_path / "a", **common)
    MuppetTrainer(model=straight, args=args, train_dataset=train, processing_class=tokenizer).train()

    tokenizer, _, train, model, args = _setup(tmp_path / "b", **common)
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    trainer.train()
    checkpoint = os.path.join(args.output_dir, "checkpoint-3")
    saved = json.load(open(os.path.join(checkpoint, "trainer_state.json")))["stateful_callbacks"]
    assert saved["TaskSamplerState"]["attributes"]["description"]["strategy"] == "heterogeneous"
    # a fresh model with different weights, restored from checkpoint-3 (heads included) and trained 3 more steps
    tokenizer, _, train, resumed, args = _setup(tmp_path / "b", init_seed=1, **common)
    MuppetTrainer(model=resumed, args=args, train_dataset=train, processing_class=tokenizer).train(
        resume_from_checkpoint=checkpoint)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    # a checkpoint that does not describe its sampler (written before the description was saved) still resumes,
    # and its next checkpoint describes it
    undescribed = str(tmp_path / "undescribed-checkpoint-3")
    shutil.copytree(checkpoint, undescribed)
    state_file = os.path.join(undescribed, "trainer_state.json")
    state = json.load(open(state_file))
    del state["stateful_callbacks"]["TaskSamplerState"]
    json.dump(state, open(state_file, "w"))
    tokenizer, _, train, old, args = _setup(tmp_path / "c", **common)
    MuppetTrainer(model=old, args=args, train_dataset=train, processing_class=tokenizer).train(
        resume_from_checkpoint=undescribed)
    resaved = json.load(open(os.path.join(args.output_dir, "checkpoint-6", "trainer_state.json")))
    assert resaved["stateful_callbacks"]["TaskSamplerState"]["attributes"]["description"]["strategy"] == \
        "heterogeneous"
    # resuming with another task sampling would skip the wrong batches: refused
    tokenizer, _, train, other, args = _setup(tmp_path / "b", batching="batch_homogeneous", **common)
    with pytest.raises(ValueError, match="different task sampling"):
        MuppetTrainer(model=other, args=args, train_dataset=train, processing_class=tokenizer).train(
            resume_from_checkpoint=checkpoint)


def test_r4f_trains_spectrally_normalised_heads_and_evaluation_scores_every_task(tmp_path):
    tokenizer, tasks, train, model, args = _setup(tmp_path, spectral_norm=True, robust_finetuning="r4f", max_steps=2)
    evaluation = {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=24, doc_stride=8, keep_qa_offsets=True)
                  for t in tasks}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                            processing_class=tokenizer, eval_examples={"qa": tasks[3].dataset})
    trainer.train()
    metrics = trainer.evaluate()
    for key in ("eval_sent_accuracy", "eval_topic_macro_f1", "eval_topic_matthews_correlation",
                "eval_choice_accuracy", "eval_qa_exact_match", "eval_qa_f1", "eval_average_primary"):
        assert 0.0 <= metrics[key] <= 1.0, key
    primaries = [metrics[k] for k in ("eval_sent_accuracy", "eval_topic_accuracy", "eval_choice_accuracy", "eval_qa_f1")]
    assert metrics["eval_average_primary"] == pytest.approx(sum(primaries) / 4)
    assert metrics["eval_sent_loss"] > 0


def test_bad_inputs_raise_clear_errors(tmp_path):
    tokenizer, tasks, train, model, args = _setup(tmp_path, gradient_accumulation_steps=1)
    with pytest.raises(ValueError, match="at least 2 sub-batches"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    tokenizer, tasks, train, model, args = _setup(tmp_path)
    with pytest.raises(ValueError, match="task 'nope'"):
        MuppetTrainer(model=model, args=args, train_dataset={"nope": train["sent"]}, processing_class=tokenizer)
    with pytest.raises(ValueError, match="spectral_norm_heads"):
        MuppetTrainer(model=model, args=_setup(tmp_path, robust_finetuning="r4f")[4], train_dataset=train,
                      processing_class=tokenizer)
    with pytest.raises(ValueError, match="keep_qa_offsets"):
        MuppetTrainer(model=model, args=args, eval_dataset={"qa": train["qa"]}, processing_class=tokenizer,
                      eval_examples={"qa": tasks[3].dataset})
    with pytest.raises(ValueError, match="batching"):
        MuppetConfig(output_dir=str(tmp_path), batching="mixed")
    with pytest.raises(ValueError, match="r3f_eps"):
        MuppetConfig(output_dir=str(tmp_path), r3f_eps=-1.0)
    # a non-finite loss stops training with the task named
    with torch.no_grad():
        model.classification_heads["sent"].out_proj.bias.fill_(float("nan"))
    batch = MultiTaskCollator(tokenizer, model.task_names)([dict(train["sent"][i]) for i in range(2)])
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    with pytest.raises(ValueError, match="task 'sent'.*non-finite"):
        trainer.compute_loss(model, batch)


def test_run_muppet_main_end_to_end(tmp_path, monkeypatch):
    tokenizer = tiny_tokenizer()
    model_dir = tmp_path / "tiny-bert"
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    for name, kind, seed in (("sent", "classification", 0), ("choice", "multiple_choice", 2)):
        rows = _rows(kind, 20, seed)
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "mixture.json").write_text(json.dumps({"tasks": [
        {"name": "sent", "kind": "classification", "num_labels": 2, "data_files": "sent.jsonl", "validation_fraction": 0.25},
        {"name": "choice", "kind": "multiple_choice", "data_files": "choice.jsonl", "validation_fraction": 0.25}]}))

    out = tmp_path / "run"
    argv = ["run_muppet.py", "--model_name_or_path", str(model_dir), "--mixture_file", str(tmp_path / "mixture.json"),
            "--output_dir", str(out), "--do_train", "--do_eval", "--max_steps", "2", "--per_device_train_batch_size",
            "4", "--gradient_accumulation_steps", "2", "--report_to", "none", "--max_seq_length", "24",
            "--use_cpu", "--save_steps", "1", "--disable_tqdm", "true"]
    monkeypatch.setattr(sys, "argv", argv)
    results = run_muppet.main()
    assert 0.0 <= results["eval_sent_accuracy"] <= 1.0 and "eval_sent_majority_baseline" in results
    for name in ("config.json", "model.safetensors", "multitask_heads.safetensors", "multitask_config.json",
                 "README.md", "eval_results.json", "train_results.json"):
        assert (out / name).is_file(), name
    assert "Muppet" in (out / "README.md").read_text()
    assert "`cls` pooling" in (out / "README.md").read_text()
    reloaded = MultiTaskModel.from_pretrained(str(out))
    assert reloaded.task_names == ["sent", "choice"]
    # a second run resumes from the last checkpoint (2 steps already done: nothing more to train)
    results = run_muppet.main()
    assert results["epoch"] > 0
    # a JSON file with every argument works too, and bad data args are refused
    config = tmp_path / "args.json"
    config.write_text(json.dumps({"model_name_or_path": str(model_dir), "mixture_file": str(tmp_path / "mixture.json"),
                                  "output_dir": str(tmp_path / "run2"), "do_eval": True, "report_to": "none",
                                  "max_seq_length": 24, "use_cpu": True}))
    monkeypatch.setattr(sys, "argv", ["run_muppet.py", str(config)])
    assert "eval_choice_accuracy" in run_muppet.main()
    monkeypatch.setattr(sys, "argv", argv[:-2] + ["--max_seq_length", "0"])
    with pytest.raises(ValueError, match="max_seq_length"):
        run_muppet.main()


# ----------------------------------------------------------------------------------------------------------------
# Issue #8 item 3: bf16 autocast on CPU, activation (gradient) checkpointing
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("robust", ["none", "r3f"])
def test_bf16_autocast_on_cpu_trains_with_finite_losses(tmp_path, robust):
    tokenizer, _, train, model, args = _setup(tmp_path, max_steps=3, logging_steps=1, bf16=True,
                                              robust_finetuning=robust, r3f_eps=1e-2)
    dtypes = []  # the body's matmuls run in bf16 under accelerate's autocast
    model.body.encoder.layer[0].attention.self.query.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    trainer.train()
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert len(dtypes) == 3 * 2 * (2 if robust == "r3f" else 1)  # steps x sub-batches x (clean + noisy forward)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) and x > 0 for x in losses)
    moved = {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}
    assert any(k.startswith("body.encoder.") for k in moved)
    assert any(k.startswith("classification_heads.") for k in moved)


def test_activation_checkpointing_gives_the_same_gradients_and_trains(tmp_path):
    tokenizer, _, train, model, args = _setup(tmp_path, dropout=0.0, max_steps=2, activation_checkpointing=True)
    batches = [MultiTaskCollator(tokenizer, model.task_names)([dict(train[name][i]) for i in range(3)])
               for name in ("sent", "choice", "qa")]
    calls = []
    # inside a layer (the layer's own hooks run outside its checkpointed forward): counts forwards + recomputes
    model.body.encoder.layer[1].attention.self.query.register_forward_hook(lambda m, i, o: calls.append(1))

    def gradients():
        model.zero_grad(set_to_none=True)
        calls.clear()
        for batch in batches:
            model(**batch).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.train()
    plain = gradients()
    assert len(calls) == 3
    model.activation_checkpointing_enable()  # transformers' default: non-reentrant
    checkpointed = gradients()
    assert len(calls) == 6  # each layer ran again in the backward pass
    assert plain.keys() == checkpointed.keys() and any(k.startswith("body.encoder.") for k in plain)
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5, msg=name)
    model.activation_checkpointing_disable()

    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    calls.clear()
    trainer.train()  # Trainer switches checkpointing on from `activation_checkpointing=True`
    assert model.is_activation_checkpointing and len(calls) == 2 * 2 * 2  # steps x sub-batches x (forward + recompute)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items() if k.startswith("body.encoder."))


# ----------------------------------------------------------------------------------------------------------------
# Issue #13 item 4: label smoothing is one setting, MuppetConfig.label_smoothing_factor, 0.1 by default
# ----------------------------------------------------------------------------------------------------------------


def test_seq2seq_training_loss_is_label_smoothed_at_0_1_by_default(tmp_path):
    from hf_aux.muppet.losses import seq2seq_loss

    tokenizer = tiny_tokenizer()
    rows = datasets.Dataset.from_list([{"source": "the movie was great fun", "target": "great movie"},
                                       {"source": "the plot was bad and boring", "target": "bad plot"}])
    task = TaskSpec(name="summary", kind="seq2seq", dataset=rows)
    train = {"summary": tokenize_task(task, rows, tokenizer, max_length=16, max_target_length=8)}
    torch.manual_seed(0)
    model = MultiTaskModel(MultiTaskModelConfig(encoder=tiny_config("bart", tokenizer, dropout=0.0), tasks=[task]))
    args = MuppetConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, per_device_train_batch_size=2)
    assert args.label_smoothing_factor == 0.1  # Table 2's label-smoothed CE; fairseq's BART summarisation value
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    batch = MultiTaskCollator(tokenizer, model.task_names)([dict(row) for row in train["summary"]])
    model.train()
    loss = trainer.compute_loss(model, batch)
    logits = model(**{k: v for k, v in batch.items() if k != "labels"},
                   decoder_input_ids=model._shift_right(batch["labels"])).logits
    vocab = logits.shape[-1]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    target = batch["labels"].clamp(min=0)
    per_token = -(0.9 * log_probs.gather(-1, target[..., None])[..., 0] + 0.1 * log_probs.mean(dim=-1))
    real = batch["labels"] != -100
    by_hand = ((per_token * real).sum(dim=1) / real.sum(dim=1) / math.log(vocab)).mean()  # eq. 1: / log V
    torch.testing.assert_close(loss, by_hand, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(loss, scale_losses(*seq2seq_loss(logits, batch["labels"])).mean())  # smoothing 0
    # the model config has no second setting
    with pytest.raises(ValueError, match="label_smoothing_factor"):
        MultiTaskModelConfig(encoder=tiny_config("bart", tokenizer), tasks=[task], label_smoothing=0.1)


def test_seq2seq_evaluation_scores_greedy_outputs_with_rouge(tmp_path):
    """evaluate() runs Trainer's evaluation_loop per task: a seq2seq task's ROUGE is that of its batches' greedy
    outputs (each token the argmax given the ones before it), gathered over batches of different output lengths."""
    from hf_aux.tasks.metrics import PRIMARY_METRIC

    tokenizer = tiny_tokenizer()
    rows = datasets.Dataset.from_list([{"source": "the movie was great fun", "target": "great movie"},
                                       {"source": "the plot was bad and boring", "target": "bad plot"},
                                       {"source": "a fine cast and a good story", "target": "good story"}])
    task = TaskSpec(name="summary", kind="seq2seq", dataset=rows)
    data = tokenize_task(task, rows, tokenizer, max_length=16, max_target_length=8)
    torch.manual_seed(0)
    model = MultiTaskModel(MultiTaskModelConfig(encoder=tiny_config("bart", tokenizer, dropout=0.0), tasks=[task]))
    args = MuppetConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, per_device_eval_batch_size=2,
                        generation_max_length=5)
    trainer = MuppetTrainer(model=model, args=args, eval_dataset={"summary": data}, processing_class=tokenizer)
    metrics = trainer.evaluate()
    collate = MultiTaskCollator(tokenizer, model.task_names)
    start_token = model.config.encoder.decoder_start_token_id
    predictions, references = [], []
    model.eval()
    for first in (0, 2):  # the evaluation batches, by hand
        batch = collate([dict(data[i]) for i in range(first, min(first + 2, len(data)))])
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "task")}  # tensors: sliced per example
        _, generated, _ = trainer.prediction_step(model, batch, prediction_loss_only=False)
        assert generated.shape[1] <= 5
        for i, (row, labels) in enumerate(zip(generated.tolist(), batch["labels"].tolist())):
            tokens = [t for t in row if t >= 0]
            with torch.no_grad():  # greedy: every token is the argmax given the tokens before it
                prefix = torch.tensor([[start_token, *tokens]])
                logits = model(**{k: v[i:i + 1] for k, v in inputs.items()}, decoder_input_ids=prefix).logits
            assert logits[0, :len(tokens)].argmax(-1).tolist() == tokens
            predictions.append(tokenizer.decode(tokens, skip_special_tokens=True))
            references.append(tokenizer.decode([t for t in labels if t >= 0], skip_special_tokens=True))
    expected = rouge_metrics(predictions, references)
    assert expected
    for key, value in expected.items():
        assert metrics[f"eval_summary_{key}"] == pytest.approx(value)
    assert metrics["eval_average_primary"] == pytest.approx(expected[PRIMARY_METRIC["seq2seq"]])
    assert metrics["eval_summary_loss"] > 0


def test_the_sub_batchs_task_is_read_on_the_host():
    """MuppetTrainer takes the task from the collator's `task` name, never reading `task_ids` (on the device by
    then: one host sync per sub-batch on CUDA); a batch without the name falls back to task_ids."""
    from types import SimpleNamespace

    from hf_aux.muppet.trainer import task_index

    body = SimpleNamespace(config=SimpleNamespace(task_names=["a", "b", "c"]))
    on_device = torch.full((4,), 1, dtype=torch.long, device="meta")  # reading it would raise
    assert task_index(body, {"task": "c", "task_ids": on_device}) == 2
    assert task_index(body, {"task_ids": torch.full((4,), 1)}) == 1
    with pytest.raises(RuntimeError):
        task_index(body, {"task_ids": on_device})


def test_deferred_loss_checks_stop_at_the_update_naming_the_step_and_task(tmp_path):
    """On an accelerator check_finite_loss leaves the sub-batches' loss checks to the guard, which checks them at
    once before the optimizer step (one host sync per update): forced here on CPU, a NaN head still stops the run
    at step 1 with the task named, no sub-batch raised on its own, and the parameters were never updated."""
    from hf_aux.runtime.nonfinite import NonFiniteTrainingError, find_nonfinite_guard

    tokenizer, tasks, train, model, args = _setup(tmp_path, max_steps=2)
    train = {"sent": train["sent"]}
    with torch.no_grad():
        model.classification_heads["sent"].out_proj.bias.fill_(float("nan"))
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    guard = find_nonfinite_guard(trainer)
    guard.defer_loss_checks = True
    computed = []
    trainer.compute_loss = lambda *a, _own=trainer.compute_loss, **k: computed.append(1) or _own(*a, **k)
    before = model.body.embeddings.word_embeddings.weight.detach().clone()
    with pytest.raises(NonFiniteTrainingError, match=r"task 'sent': field 'loss': non-finite loss at step 1 \(loss nan"):
        trainer.train()
    assert len(computed) == args.gradient_accumulation_steps  # every sub-batch of the update ran, none raised
    assert torch.equal(model.body.embeddings.word_embeddings.weight, before)  # no optimizer step
    assert guard._pending_losses == []
