"""AmosTrainer beyond plain fp32 on one process (issue #8): bf16 autocast on CPU, non-reentrant gradient
checkpointing against the same run without it, reentrant checkpointing refused under the stop-gradient, FSDP /
DeepSpeed ZeRO-3 refused at start, PEFT refused (the DDP equivalence itself: tests/test_ddp.py)."""

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from tiny import tiny_config, tiny_tokenizer

import hf_aux.runtime.distributed
from hf_aux.tasks.data import MLMCollator, group_texts_for_mlm
from hf_aux.amos.model import AmosModel, AmosModelConfig
from hf_aux.amos.trainer import AmosConfig, AmosTrainer

SENTENCES = ["the movie was really good and the plot was great fun", "a terrible film with a boring story",
             "she said hello to the cat and the dog in the rain today", "what a great story about paris"]


@pytest.fixture(scope="module")
def data():
    tok = tiny_tokenizer()
    text = Dataset.from_dict({"text": [" ".join(SENTENCES[i % 4] for i in range(j, j + 3)) for j in range(16)]})
    return tok, group_texts_for_mlm(text, tok, block_size=24)


def make_trainer(data, tmp_path, dropout=0.0, mlm_layers=(1, 2), **overrides):
    tok, blocks = data
    torch.manual_seed(0)
    off = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = AmosModelConfig.from_configs(tiny_config("electra", tok), tiny_config("electra", tok, **off),
                                          mlm_layers=list(mlm_layers))
    settings = {"output_dir": str(tmp_path / "out"), "max_steps": 2, "per_device_train_batch_size": 4,
                "learning_rate": 1e-2, "report_to": [], "use_cpu": True, "seed": 0, "logging_steps": 1,
                "save_strategy": "no", "disable_tqdm": True, "dataloader_num_workers": 0}
    settings.update(overrides)
    return AmosTrainer(model=AmosModel(config), args=AmosConfig(**settings), train_dataset=blocks,
                       processing_class=tok)


def parameters(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_bf16_autocast_on_cpu_trains_in_bf16(data, tmp_path):
    trainer = make_trainer(data, tmp_path, bf16=True, max_steps=3)
    dtypes = []  # output dtype of a generator and a discriminator projection at every forward
    model = trainer.model
    hooks = [module.register_forward_hook(lambda m, a, output: dtypes.append(output.dtype))
             for module in (model.generator.body.encoder.layer[0].attention.self.query,
                            model.discriminator.electra.encoder.layer[1].output.dense)]
    before = parameters(model)
    trainer.train()
    for hook in hooks:
        hook.remove()
    assert dtypes == [torch.bfloat16] * 6  # 3 steps, both encoders under autocast
    logged = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logged) == 3
    for log in logged:
        for key in ("loss", "rtd_loss", "mlm_loss/layer_1", "mlm_loss/layer_2", "mixture_weight/layer_1"):
            assert torch.isfinite(torch.tensor(log[key])), (key, log)
    after = parameters(model)
    assert all(p.dtype == torch.float32 for p in after.values())  # autocast, not a bf16 model
    for name in ("generator.mixture", "generator.mlm_head.dense.weight",
                 "generator.body.encoder.layer.1.output.dense.weight",
                 "discriminator.electra.encoder.layer.0.attention.self.query.weight",
                 "discriminator.discriminator_predictions.dense_prediction.weight",
                 "discriminator.electra.embeddings.word_embeddings.weight"):
        assert not torch.equal(before[name], after[name]), f"{name} did not move"


def counter(calls: dict, name: str):
    def hook(module, args, output):
        calls[name] += 1
    return hook


def test_gradient_checkpointing_gives_the_same_training_as_without(data, tmp_path):
    runs = {}
    for checkpointing in (False, True):
        trainer = make_trainer(data, tmp_path / str(checkpointing), gradient_checkpointing=checkpointing,
                               gradient_checkpointing_kwargs={"use_reentrant": False})
        calls = {"generator": 0, "discriminator": 0}
        model = trainer.model

        # inside the layers: transformers checkpoints each layer's forward, so a submodule's hooks run again in the
        # backward's recomputation (the generator's upper block sits above the stop-gradient)
        generator_query = model.generator.body.encoder.layer[1].attention.self.query
        discriminator_output = model.discriminator.electra.encoder.layer[0].output.dense
        hooks = [generator_query.register_forward_hook(counter(calls, "generator")),
                 discriminator_output.register_forward_hook(counter(calls, "discriminator"))]
        trainer.train()
        for hook in hooks:
            hook.remove()
        runs[checkpointing] = trainer, calls
    plain, checkpointed = runs[False][0], runs[True][0]
    assert checkpointed.model.is_activation_checkpointing and not plain.model.is_activation_checkpointing
    assert runs[False][1] == {"generator": 2, "discriminator": 2}
    assert runs[True][1] == {"generator": 4, "discriminator": 4}  # recomputed once in each of the 2 backwards
    after_plain, after_checkpointed = parameters(plain.model), parameters(checkpointed.model)
    for name, value in after_plain.items():
        torch.testing.assert_close(after_checkpointed[name], value, atol=1e-6, rtol=0, msg=name)
    fresh = parameters(make_trainer(data, tmp_path / "fresh").model)
    moved = {n for n, p in after_plain.items() if (p - fresh[n]).abs().max() > 1e-4}
    assert {"generator.mixture", "generator.body.encoder.layer.0.attention.self.query.weight",
            "generator.body.encoder.layer.1.attention.self.query.weight",
            "discriminator.electra.encoder.layer.0.output.dense.weight"} <= moved  # the runs trained


def test_gradient_checkpointing_keeps_the_stop_gradient(data, tmp_path):
    """With checkpointing on, the upper head's MLM loss still gives no gradient to the block below it."""
    model = make_trainer(data, tmp_path).model
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert model.is_activation_checkpointing
    model.train()
    tok, blocks = data
    torch.manual_seed(0)
    batch = MLMCollator(tok, mlm_probability=0.3, return_original=True)([blocks[i] for i in range(4)])
    masked = batch["labels"] != -100
    gen = model.generator(batch["input_ids"], masked_positions=masked)
    upper = torch.nn.functional.cross_entropy(gen.logits[1], batch["labels"][masked])
    lower = list(model.generator.body.encoder.layer[0].parameters())
    above = list(model.generator.body.encoder.layer[1].parameters())
    grads = torch.autograd.grad(upper, lower + above, allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in grads[: len(lower)])
    assert all(g is not None and g.abs().sum() > 0 for g in grads[len(lower):])


def test_reentrant_checkpointing_is_refused_under_the_stop_gradient(data, tmp_path):
    with pytest.raises(ValueError, match="AmosTrainer.*use_reentrant.*stop-gradient"):
        make_trainer(data, tmp_path, gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})
    # ELECTRA (one head, nothing detached) has no stop-gradient to lose
    make_trainer(data, tmp_path, mlm_layers=(2,), gradient_checkpointing=True,
                 gradient_checkpointing_kwargs={"use_reentrant": True})


def test_fsdp_is_refused_at_start_naming_amos_and_ddp(data, tmp_path):
    with pytest.raises(ValueError, match="AmosTrainer: AMOS.*embedding matrix.*FSDP.*use DDP"):
        make_trainer(data, tmp_path, fsdp=True)


def test_sharding_resolved_by_accelerate_is_refused_too(data, tmp_path, monkeypatch):
    """A FSDP config given to `accelerate launch` shows in the trainer's flags, not in the args."""
    from transformers import Trainer

    original = Trainer.create_accelerator_and_postprocess

    def with_fsdp(self):
        original(self)
        self.is_fsdp_enabled = True
    monkeypatch.setattr(Trainer, "create_accelerator_and_postprocess", with_fsdp)
    with pytest.raises(ValueError, match="AmosTrainer: AMOS.*FSDP.*use DDP"):
        make_trainer(data, tmp_path)


def test_deepspeed_zero3_is_refused_at_start_naming_amos_and_ddp(data, tmp_path, monkeypatch):
    # deepspeed is not installed here: stand in for an active ZeRO-3 config as transformers reports it
    monkeypatch.setattr(hf_aux.runtime.distributed, "is_deepspeed_zero3_enabled", lambda: True)
    with pytest.raises(ValueError, match="AmosTrainer: AMOS.*DeepSpeed ZeRO-3.*use DDP"):
        make_trainer(data, tmp_path)


def test_peft_is_refused(data, tmp_path):
    tok, blocks = data
    args = AmosConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1)
    config = AmosModelConfig.from_configs(tiny_config("electra", tok), tiny_config("electra", tok), mlm_layers=[1, 2])
    lora = LoraConfig(r=2, target_modules=["query", "value"])
    with pytest.raises(ValueError, match="peft_config.*does not support PEFT"):
        AmosTrainer(model=AmosModel(config), args=args, train_dataset=blocks, processing_class=tok,
                    peft_config=lora)
    with pytest.raises(ValueError, match="AmosTrainer: field 'model'.*does not support PEFT"):
        AmosTrainer(model=get_peft_model(AmosModel(config), lora), args=args, train_dataset=blocks,
                    processing_class=tok)
    model = AmosModel(config)
    model.discriminator = get_peft_model(model.discriminator, lora).base_model.model  # adapters injected inside
    with pytest.raises(ValueError, match="AmosTrainer: field 'model'.*does not support PEFT"):
        AmosTrainer(model=model, args=args, train_dataset=blocks, processing_class=tok)
