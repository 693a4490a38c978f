"""TartanTrainer beyond plain fp32 on one process (issue #8): bf16 autocast on CPU, non-reentrant gradient
checkpointing (MT and META, against the same run without it), FSDP / DeepSpeed ZeRO-3 refused for both modes, and
dropout seeded by the micro-batch's place in the global stream (the DDP equivalence itself: tests/test_ddp.py)."""

import datasets
import pytest
import torch
from test_tartan_trainer import LABELS, TEXTS, StopAfter
from tiny import tiny_config, tiny_tokenizer
from transformers import AutoModelForSequenceClassification

import hf_aux.runtime.distributed
import hf_aux.tartan.trainer as tartan_trainer
from hf_aux.tasks.data import group_texts_for_mlm
from hf_aux.tartan.model import TartanModel
from hf_aux.tartan.trainer import TartanConfig, TartanTrainer


@pytest.fixture(scope="module")
def data():
    tok = tiny_tokenizer()

    def encode(texts, labels):
        return datasets.Dataset.from_dict({**tok(texts, truncation=True, max_length=16), "labels": labels})

    aux = {"tapt": group_texts_for_mlm(datasets.Dataset.from_dict({"text": TEXTS * 3}), tok, block_size=12),
           "dapt": group_texts_for_mlm(datasets.Dataset.from_dict({"text": ["the cat and the dog love a long river in the sun"] * 8}),
                                       tok, block_size=12)}
    return tok, encode(TEXTS * 3, LABELS * 3), encode(TEXTS[::-1], LABELS[::-1]), aux


def make_trainer(data, tmp_path, dropout=0.0, **overrides):
    tok, train, val, aux = data
    torch.manual_seed(0)
    config = tiny_config("bert", tok, num_labels=2, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = TartanModel(AutoModelForSequenceClassification.from_config(config), ["tapt", "dapt"])
    settings = {"output_dir": str(tmp_path / "out"), "max_steps": 2, "per_device_train_batch_size": 4,
                "learning_rate": 1e-3, "report_to": [], "use_cpu": True, "seed": 3, "logging_steps": 1,
                "save_strategy": "no", "disable_tqdm": True, "meta_head_steps": 3, "task_weight_lr": 0.5}
    settings.update(overrides)
    return TartanTrainer(model=model, args=TartanConfig(**settings), train_dataset=train, eval_dataset=val,
                         auxiliary_datasets=aux, processing_class=tok)


def parameters(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not n.startswith("meta_head.")}


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_bf16_autocast_on_cpu_runs_every_forward_in_bf16_and_trains(data, tmp_path, mode):
    trainer = make_trainer(data, tmp_path, mode=mode, bf16=True, max_steps=3)
    dtypes = []  # output dtype of the body's first query projection, at every forward of the step
    layer = trainer.model.body.encoder.layer[0].attention.self.query
    handle = layer.register_forward_hook(lambda module, args, output: dtypes.append(output.dtype))
    before = parameters(trainer)
    trainer.train()
    handle.remove()
    # every body forward ran under autocast: MT one call (end task + 2 MLM tasks = 3 body passes), META the same
    # 3 plus the meta-validation batch, per step
    assert len(dtypes) == 3 * (3 if mode == "mt" else 4)
    assert set(dtypes) == {torch.bfloat16}
    logged = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logged) == 3
    for log in logged:
        for key in ("loss", "loss/end_task", "loss/tapt", "loss/dapt"):
            assert torch.isfinite(torch.tensor(log[key])), (key, log)
    after = parameters(trainer)
    assert all(p.dtype == torch.float32 for p in after.values())  # autocast, not a bf16 model
    for name in ("classifier.bert.encoder.layer.0.attention.self.query.weight", "classifier.classifier.weight",
                 "mlm_heads.tapt.dense.weight", "mlm_heads.dapt.bias"):
        assert not torch.equal(before[name], after[name]), f"{name} did not move"
    if mode == "meta":
        assert trainer.task_weights_state.weights != [1 / 3] * 3


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_gradient_checkpointing_gives_the_same_training_as_without(data, tmp_path, mode):
    runs = {}
    for checkpointing in (False, True):
        trainer = make_trainer(data, tmp_path / str(checkpointing), mode=mode, gradient_checkpointing=checkpointing,
                               gradient_checkpointing_kwargs={"use_reentrant": False})
        calls: list[int] = []
        # inside the layer: transformers checkpoints the layer's forward, so the layer's own hooks run once
        layer = trainer.model.body.encoder.layer[0].attention.self.query
        handle = layer.register_forward_hook(lambda module, args, output, calls=calls: calls.append(1))
        trainer.train()
        handle.remove()
        runs[checkpointing] = trainer, len(calls)
    plain, checkpointed = runs[False][0], runs[True][0]
    assert checkpointed.model.is_activation_checkpointing and not plain.model.is_activation_checkpointing
    # checkpointing recomputed the layer in the backward passes: each backward re-runs the forwards it goes through
    forwards = 2 * (3 if mode == "mt" else 4)  # 2 steps; META: every task and the meta batch, one backward each
    assert runs[False][1] == forwards and runs[True][1] == 2 * forwards
    after_plain, after_checkpointed = parameters(plain), parameters(checkpointed)
    for name, value in after_plain.items():
        torch.testing.assert_close(after_checkpointed[name], value, atol=1e-6, rtol=0, msg=name)
    torch.testing.assert_close(torch.tensor(checkpointed.task_weights_state.history),
                               torch.tensor(plain.task_weights_state.history), atol=1e-6, rtol=0)
    assert max((after_plain[n] - p).abs().max().item() for n, p in parameters(make_trainer(data, tmp_path)).items()) \
        > 1e-4  # the runs trained


def test_meta_refuses_reentrant_checkpointing(tmp_path):
    with pytest.raises(ValueError, match="gradient_checkpointing_kwargs.*use_reentrant"):
        TartanConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], mode="meta", gradient_checkpointing=True,
                     gradient_checkpointing_kwargs={"use_reentrant": True})


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_fsdp_is_refused_at_start_naming_the_method_and_ddp(data, tmp_path, mode):
    with pytest.raises(ValueError, match=f"TartanTrainer: {mode.upper()}-TARTAN.*FSDP.*use DDP"):
        make_trainer(data, tmp_path, mode=mode, fsdp=True)


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_deepspeed_zero3_is_refused_at_start_naming_the_method_and_ddp(data, tmp_path, mode, monkeypatch):
    # deepspeed is not installed here: stand in for an active ZeRO-3 config as transformers reports it
    monkeypatch.setattr(hf_aux.runtime.distributed, "is_deepspeed_zero3_enabled", lambda: True)
    with pytest.raises(ValueError, match=f"TartanTrainer: {mode.upper()}-TARTAN.*(ZeRO-3|DeepSpeed).*use DDP"):
        make_trainer(data, tmp_path, mode=mode)


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_dropout_is_a_function_of_the_micro_batch_place_not_of_the_global_rng(data, tmp_path, mode):
    """The same micro-batch at the same place in the stream gets the same dropout whatever torch's RNG holds; the
    next place gets other masks; the trainer leaves torch's RNG where it was."""
    trainer = make_trainer(data, tmp_path, dropout=0.3, mode=mode)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2  # two micro-batches of optimizer step 0

    def micro_step(place, rng_seed):
        trainer._micro_batches._step, trainer._micro_batches._micro = 0, place
        trainer.task_weights_state.stream_draws.clear()  # the same auxiliary / meta batches each time
        trainer.task_weights_state.weights = [1 / 3] * 3
        trainer.model.zero_grad(set_to_none=True)
        torch.manual_seed(rng_seed)
        loss = trainer.training_step(trainer.model, batch)
        state_after = torch.get_rng_state()
        torch.manual_seed(rng_seed)
        assert torch.equal(state_after, torch.get_rng_state())  # torch's RNG untouched by the step
        return loss.detach(), torch.cat([p.grad.reshape(-1) for p in trainer.model.body_parameters()
                                         if p.grad is not None])

    loss_a, grad_a = micro_step(0, rng_seed=1)
    loss_b, grad_b = micro_step(0, rng_seed=2)
    _, grad_c = micro_step(1, rng_seed=1)
    assert torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b)
    assert not torch.equal(grad_a, grad_c)


def test_meta_with_accumulation_and_dropout_resumes_exactly(data, tmp_path, monkeypatch):
    """META-TARTAN moves w once per micro-batch (2 per optimizer step here) and draws dropout from the micro-batch's
    place: 4 straight steps equal 2 steps + resume + 2 steps (parameters, w and its history within 1e-6)."""
    common = {"mode": "meta", "max_steps": 4, "gradient_accumulation_steps": 2, "save_strategy": "steps",
              "save_steps": 2}
    updates = []
    update = tartan_trainer.meta_update
    monkeypatch.setattr(tartan_trainer, "meta_update", lambda *a: updates.append(1) or update(*a))
    straight = make_trainer(data, tmp_path / "a", dropout=0.2, **common)
    straight.train()
    assert len(updates) == 8  # 4 optimizer steps x 2 micro-batches: one weight update per micro-batch
    first = make_trainer(data, tmp_path / "b", dropout=0.2, **common)
    first.add_callback(StopAfter(2))
    first.train()
    resumed = make_trainer(data, tmp_path / "b", dropout=0.2, **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-2"))
    a, b = parameters(straight), parameters(resumed)
    for name, value in a.items():
        torch.testing.assert_close(b[name], value, atol=1e-6, rtol=0, msg=name)
    history_a, history_b = straight.task_weights_state.history, resumed.task_weights_state.history
    assert [row[0] for row in history_a] == [1, 2, 3, 4]  # one row per optimizer step: its last micro-batch's alpha
    torch.testing.assert_close(torch.tensor(history_b), torch.tensor(history_a), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.tensor(resumed.task_weights_state.weights),
                               torch.tensor(straight.task_weights_state.weights), atol=1e-6, rtol=0)
    assert straight.task_weights_state.weights != [1 / 3] * 3
