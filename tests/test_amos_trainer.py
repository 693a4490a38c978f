"""AmosTrainer on tiny configs: training moves what it should and logs the paper's curves, resume is exact, and
the discriminator checkpoint loads in a process that never imports hf_aux."""

import json
import subprocess
import sys

import pytest
import torch
from datasets import Dataset
from tiny import tiny_config, tiny_tokenizer

from hf_aux.tasks.data import group_texts_for_mlm
from hf_aux.amos.model import AmosModel, AmosModelConfig
from hf_aux.amos.trainer import AmosConfig, AmosTrainer

SENTENCES = [
    "the movie was really good and the plot was great fun",
    "a terrible film with a boring story and the worst actor",
    "she said hello to the cat and the dog in the rain today",
    "what a great story about paris france and its river",
]


def tiny_setup(discriminator="electra", seed=0):
    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    config = AmosModelConfig.from_configs(tiny_config("electra", tok), tiny_config(discriminator, tok),
                                          mlm_layers=[1, 2])
    text = Dataset.from_dict({"text": [" ".join(SENTENCES[i % 4] for i in range(j, j + 3)) for j in range(16)]})
    return AmosModel(config), tok, group_texts_for_mlm(text, tok, block_size=24)


def make_args(output_dir, **overrides):
    kwargs = dict(output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=4, learning_rate=1e-2,
                  logging_steps=2, save_strategy="no", report_to=[], seed=0, disable_tqdm=True, use_cpu=True,
                  dataloader_num_workers=0)
    kwargs.update(overrides)
    return AmosConfig(**kwargs)


def test_training_moves_generator_discriminator_and_mixture_and_logs_curves(tmp_path):
    model, tok, data = tiny_setup()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = AmosTrainer(model=model, args=make_args(tmp_path), train_dataset=data, processing_class=tok)
    trainer.train()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    for name in ["generator.mixture", "generator.mlm_head.dense.weight", "generator.mlm_head.bias",
                 "generator.body.encoder.layer.0.attention.self.query.weight",
                 "generator.body.encoder.layer.1.output.dense.weight",
                 "discriminator.electra.encoder.layer.1.output.dense.weight",
                 "discriminator.discriminator_predictions.dense_prediction.weight",
                 "discriminator.electra.embeddings.word_embeddings.weight"]:
        assert name in moved, name
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    for entry in logs:
        for key in ["mlm_loss/layer_1", "mlm_loss/layer_2", "rtd_loss", "rtd_accuracy_replaced",
                    "rtd_accuracy_original", "replaced_fraction", "mixture_weight/layer_1", "mixture_weight/layer_2"]:
            assert key in entry, key
        assert abs(entry["mixture_weight/layer_1"] + entry["mixture_weight/layer_2"] - 1) < 1e-5
        assert 0 <= entry["rtd_accuracy_replaced"] <= 1 and 0 <= entry["rtd_accuracy_original"] <= 1
        assert 0 <= entry["rtd_auc"] <= 1
    # the logged loss is eq. 4 of the logged parts, averaged over the same steps
    last = logs[-1]
    assert last["loss"] == pytest.approx(last["mlm_loss/layer_1"] + last["mlm_loss/layer_2"]
                                         + 50.0 * last["rtd_loss"], rel=1e-4)
    metrics = trainer.evaluate(data)
    assert "eval_loss" in metrics and "eval_rtd_accuracy_replaced" in metrics and "eval_mixture_weight/layer_2" in metrics
    for d in (1, 2):  # each head's samples alone, on the evaluation masks
        assert 0 <= metrics[f"eval_rtd_auc/layer_{d}"] <= 1
        assert 0 <= metrics[f"eval_rtd_accuracy_replaced/layer_{d}"] <= 1
    card = (tmp_path / "README.md")
    trainer.create_model_card()
    text = card.read_text()
    assert "rtd_on_layer_2_samples" in text and (tmp_path / "rtd_auc.png").is_file()


def test_rtd_histogram_and_logged_auc_match_sklearn(tmp_path):
    """The logged AUC (histograms summed over steps, reduced in log()) equals roc_auc_score over the same tokens
    up to the bin width, and the histogram counts only non-pad tokens, split by label."""
    from sklearn.metrics import roc_auc_score

    from hf_aux.amos.losses import RTD_HISTOGRAM_BINS, rtd_logit_histogram
    from hf_aux.tasks.metrics import binned_auc

    logits = torch.tensor([[-3.0, 0.0, 0.01, 40.0], [-0.5, 1.0, 2.0, -50.0]])
    labels = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    histogram = rtd_logit_histogram(logits, labels, mask)
    assert histogram.shape == (2, RTD_HISTOGRAM_BINS)
    assert histogram[0].sum() == 3 and histogram[1].sum() == 4  # the padded token is not counted
    assert histogram[1, RTD_HISTOGRAM_BINS // 2:].sum() == 3  # logits > 0 (0.01, 40, 2.0): called replaced
    assert histogram[0, :RTD_HISTOGRAM_BINS // 2].sum() == 2  # logit 0.0 is an edge: called original
    keep = mask.bool()
    assert binned_auc(histogram.numpy()) == pytest.approx(roc_auc_score(labels[keep], logits[keep]))

    model, tok, data = tiny_setup()
    trainer = AmosTrainer(model=model, args=make_args(tmp_path, max_steps=4, rtd_per_head_eval=False),
                          train_dataset=data, processing_class=tok)
    trainer.train()  # spreads the logits out of the narrow band of the initialisation
    seen = []
    original = trainer._accumulate_metrics

    def spy(outputs, attention_mask, mode):
        seen.append((outputs.rtd_logits.detach().flatten(), outputs.rtd_labels.flatten(),
                     attention_mask.flatten().bool()))
        original(outputs, attention_mask, mode)

    trainer._accumulate_metrics = spy
    metrics = trainer.evaluate(data)
    scores, labels, keep = (torch.cat(parts) for parts in zip(*seen))
    # exactly the binned AUC of every evaluation token, and within the bins' resolution of the exact AUC
    histogram = rtd_logit_histogram(scores, labels, keep).double().numpy()
    assert metrics["eval_rtd_auc"] == pytest.approx(binned_auc(histogram), abs=1e-12)
    same_bin = 0.5 * (histogram[0] * histogram[1]).sum() / (histogram[0].sum() * histogram[1].sum())
    assert abs(metrics["eval_rtd_auc"] - roc_auc_score(labels[keep], scores[keep])) <= same_bin + 1e-12
    assert not any(key.startswith("eval_rtd_auc/") for key in metrics)  # per-head evaluation switched off


def test_layer_switch_and_uniform_mixtures_log_their_weights(tmp_path):
    model, tok, data = tiny_setup()
    v_before = model.generator.mixture.detach().clone()
    trainer = AmosTrainer(model=model, args=make_args(tmp_path, mixture="layer_switch", max_steps=4, logging_steps=1),
                          train_dataset=data, processing_class=tok)
    trainer.train()
    weights = [entry["mixture_weight/layer_2"] for entry in trainer.state.log_history if "loss" in entry]
    assert weights == [0.0, 0.0, 1.0, 1.0]  # shallow head for the first half of training, then the deep one
    assert torch.equal(model.generator.mixture, v_before)  # no adversarial gradient reaches v


def test_fixed_weights_mixture_logs_its_weights_and_checks_them(tmp_path):
    model, tok, data = tiny_setup()
    v_before = model.generator.mixture.detach().clone()
    args = make_args(tmp_path, mixture="fixed_weights", mixture_weights=[3.0, 1.0], max_steps=2, logging_steps=1)
    assert args.mixture_weights == [0.75, 0.25]  # normalised
    trainer = AmosTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    logged = [(entry["mixture_weight/layer_1"], entry["mixture_weight/layer_2"])
              for entry in trainer.state.log_history if "loss" in entry]
    assert logged == [pytest.approx((0.75, 0.25))] * 2
    assert torch.equal(model.generator.mixture, v_before)  # no adversarial gradient reaches v

    with pytest.raises(ValueError, match="field 'mixture_weights': 3 weights for 2 MLM heads"):
        AmosTrainer(model=model, args=make_args(tmp_path, mixture="fixed_weights", mixture_weights=[1, 1, 1]),
                    train_dataset=data, processing_class=tok)
    for bad in (None, [], [0.0, 0.0], [1.0, -0.5]):
        with pytest.raises(ValueError, match="AmosConfig: field 'mixture_weights'"):
            make_args(tmp_path, mixture="fixed_weights", mixture_weights=bad)
    with pytest.raises(ValueError, match="read only with mixture='fixed_weights'"):
        make_args(tmp_path, mixture_weights=[0.5, 0.5])


def test_separate_generators_train_log_by_name_and_resume_from_their_checkpoint(tmp_path):
    """Table 2 'w. separate MLM gen.' through the trainer: every generator body, its head and v move; metrics are
    keyed by generator; a checkpoint (shared embeddings stored once) resumes to the same weights."""
    def setup():
        tok = tiny_tokenizer()
        torch.manual_seed(0)
        config = AmosModelConfig.from_configs(tiny_config("electra", tok), tiny_config("electra", tok),
                                              mlm_layers=[1, 2], separate_generators=True)
        text = Dataset.from_dict({"text": [" ".join(SENTENCES[i % 4] for i in range(j, j + 3)) for j in range(16)]})
        return AmosModel(config), tok, group_texts_for_mlm(text, tok, block_size=24)

    model, tok, data = setup()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = make_args(tmp_path / "straight", learning_rate=5e-3, activation_checkpointing=True)
    trainer = AmosTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    for name in ["generator.mixture", "generator.bodies.0.encoder.layer.0.output.dense.weight",
                 "generator.bodies.1.encoder.layer.1.output.dense.weight", "generator.mlm_heads.0.dense.weight",
                 "generator.mlm_heads.1.bias", "discriminator.electra.encoder.layer.1.output.dense.weight"]:
        assert name in moved, name
    names = ["generator_1_depth_1", "generator_2_depth_2"]
    for entry in [entry for entry in trainer.state.log_history if "loss" in entry]:
        assert all(f"mlm_loss/{n}" in entry and f"mixture_weight/{n}" in entry for n in names)
    metrics = trainer.evaluate(data)
    assert all(0 <= metrics[f"eval_rtd_auc/{n}"] <= 1 for n in names)
    trainer.create_model_card()
    assert "Separate generators of depths 1, 2" in (tmp_path / "straight" / "README.md").read_text()

    model, tok, data = setup()
    args = make_args(tmp_path / "resumed", learning_rate=5e-3, activation_checkpointing=True, save_strategy="steps",
                     save_steps=2)
    AmosTrainer(model=model, args=args, train_dataset=data, processing_class=tok).train()
    model, tok, data = setup()
    resumed = AmosTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    resumed.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-2"))
    for (name, p), q in zip(trainer.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(p, q), name


def _train(output_dir, max_steps, resume=None, save_steps=None):
    model, tok, data = tiny_setup()
    args = make_args(output_dir, max_steps=max_steps, save_strategy="steps" if save_steps else "no",
                     save_steps=save_steps or 500, learning_rate=5e-3)
    trainer = AmosTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_resume_is_exact(tmp_path):
    straight = _train(tmp_path / "straight", max_steps=4)
    _train(tmp_path / "resumed", max_steps=4, save_steps=2)  # writes checkpoint-2 (and checkpoint-4)
    resumed = _train(tmp_path / "resumed", max_steps=4, resume=str(tmp_path / "resumed" / "checkpoint-2"))
    a = dict(straight.model.named_parameters())
    b = dict(resumed.model.named_parameters())
    assert set(a) == set(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    # resuming from a fresh model actually changed it (the test can fail)
    fresh, _, _ = tiny_setup()
    assert not torch.equal(fresh.generator.mixture, resumed.model.generator.mixture)


VANILLA = r"""
import json, sys, torch
from transformers import AutoModel, AutoModelForSequenceClassification, ElectraForPreTraining
path, kind = sys.argv[1], sys.argv[2]
ids = torch.tensor(json.loads(sys.argv[3]))
out = {}
if kind == "electra":
    model = ElectraForPreTraining.from_pretrained(path).eval()
    out["rtd_logits"] = model(input_ids=ids).logits.tolist()
body = AutoModel.from_pretrained(path).eval()
out["hidden"] = body(input_ids=ids).last_hidden_state[0, :3, :4].tolist()
clf = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
loss = clf(input_ids=ids, labels=torch.tensor([1])).loss
loss.backward()
out["clf_loss_finite"] = bool(torch.isfinite(loss))
out["imported_hf_aux"] = any(name.startswith("hf_aux") for name in sys.modules)
print("RESULT" + json.dumps(out))
"""


@pytest.mark.parametrize("discriminator", ["electra", "bert"])
def test_vanilla_transformers_loads_the_discriminator(tmp_path, discriminator):
    model, tok, data = tiny_setup(discriminator)
    trainer = AmosTrainer(model=model, args=make_args(tmp_path, max_steps=1), train_dataset=data,
                          processing_class=tok)
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "generator" / "model.safetensors").is_file()
    ids = tok(SENTENCES[0], return_tensors="pt")["input_ids"]
    model.eval()
    with torch.no_grad():
        disc = model.discriminator
        expected_hidden = (disc.electra if discriminator == "electra" else disc.bert)(input_ids=ids)[0][0, :3, :4]
        expected_logits = disc(input_ids=ids).logits
    run = subprocess.run([sys.executable, "-c", VANILLA, str(tmp_path / "final"), discriminator,
                          json.dumps(ids.tolist())], capture_output=True, text=True, cwd=str(tmp_path),
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.split("RESULT", 1)[1])
    assert result["imported_hf_aux"] is False and result["clf_loss_finite"]
    torch.testing.assert_close(torch.tensor(result["hidden"]), expected_hidden, rtol=1e-5, atol=1e-5)
    if discriminator == "electra":
        torch.testing.assert_close(torch.tensor(result["rtd_logits"]), expected_logits, rtol=1e-5, atol=1e-5)
    # and the whole AMOS state comes back, embeddings shared again
    reloaded = AmosModel.from_pretrained(str(tmp_path / "final"))
    for (name, p), q in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(p, q), name
    assert reloaded.generator.get_input_embeddings() is reloaded.discriminator.get_input_embeddings()


def test_config_and_trainer_reject_bad_input(tmp_path):
    with pytest.raises(ValueError, match="mixture"):
        make_args(tmp_path, mixture="sometimes")
    with pytest.raises(ValueError, match="gumbel_temperature"):
        make_args(tmp_path, gumbel_temperature=0.0)
    model, tok, data = tiny_setup()
    with pytest.raises(ValueError, match="AmosModel"):
        AmosTrainer(model=model.discriminator, args=make_args(tmp_path), processing_class=tok)
    small = AmosModelConfig.from_configs(tiny_config("electra", tok, vocab_size=50),
                                         tiny_config("electra", tok, vocab_size=50))
    with pytest.raises(ValueError, match="vocabulary"):
        AmosTrainer(model=AmosModel(small), args=make_args(tmp_path), processing_class=tok)
