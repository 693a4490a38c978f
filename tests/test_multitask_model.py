import json
import logging
import os
import subprocess
import sys
import textwrap

import datasets
import pytest
import torch
from tiny import tiny_config, tiny_tokenizer
from transformers import AutoModel, AutoModelForSeq2SeqLM, Trainer, TrainingArguments

from hf_aux.tasks.data import MultiTaskCollator, tokenize_task
from hf_aux.modeling.multitask import HEADS_WEIGHTS_NAME, MULTITASK_CONFIG_NAME, MultiTaskModelConfig, MultiTaskModel
from hf_aux.tasks.loading import TaskSpec

ARCHITECTURES = ["bert", "roberta", "electra", "deberta-v2", "bart"]
TASKS = [
    {"name": "sentiment", "kind": "classification", "num_labels": 3, "label_names": ["neg", "neu", "pos"]},
    {"name": "score", "kind": "regression"},
    {"name": "answer_pick", "kind": "multiple_choice"},
    {"name": "next_turn", "kind": "multiple_choice"},
    {"name": "squad_like", "kind": "extractive_qa"},
]
SEQ2SEQ = {"name": "summary", "kind": "seq2seq"}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def build(tok, arch, **settings):
    torch.manual_seed(0)
    tasks = TASKS + ([SEQ2SEQ] if arch == "bart" else [])
    return MultiTaskModel(MultiTaskModelConfig(encoder=tiny_config(arch, tok), tasks=tasks, **settings)).eval()


def batches(tok):
    pair = tok(["the movie was great", "bad plot"], padding=True, return_tensors="pt")
    mc = tok(["what is red"] * 3 + ["who is there"] * 3, ["the sun", "a cat", "rain", "a dog", "the party", "hi"],
             padding=True, return_tensors="pt")
    mc = {k: v.view(2, 3, -1) for k, v in mc.items()}
    qa = tok(["what is blue"], ["the sky is blue today"], return_tensors="pt")
    target = tok(["a cat", "the plot"], padding=True, return_tensors="pt")["input_ids"]
    return {
        "sentiment": dict(pair, labels=torch.tensor([2, 0])),
        "score": dict(pair, labels=torch.tensor([0.5, -1.0])),
        "answer_pick": dict(mc, labels=torch.tensor([0, 1]), choice_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()),
        "next_turn": dict(mc, labels=torch.tensor([2, 0])),
        "squad_like": dict(qa, start_positions=torch.tensor([7]), end_positions=torch.tensor([7])),
        "summary": dict(pair, labels=target.masked_fill(target == tok.pad_token_id, -100)),
    }


def outputs(model, tok):
    results = {}
    for name, inputs in batches(tok).items():
        if name in model.task_names:
            if model.body.config.model_type == "bart":
                inputs = {k: v for k, v in inputs.items() if k != "token_type_ids"}
            results[name] = model(task=name, **inputs)
    return results


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_checkpoint_round_trip_restores_every_head(tok, arch, tmp_path):
    model = build(tok, arch)
    before = outputs(model, tok)
    assert set(before) == set(model.task_names)
    for name, out in before.items():
        assert out.loss is not None and torch.isfinite(out.loss), name
    assert before["answer_pick"].logits.shape == (2, 3)
    assert before["answer_pick"].logits[1, 2] == torch.finfo(torch.float32).min  # masked third choice
    assert before["squad_like"].start_logits.shape == before["squad_like"].end_logits.shape

    model.save_pretrained(tmp_path)
    generation = ["generation_config.json"] if arch == "bart" else []  # the *ForConditionalGeneration body's
    assert sorted(os.listdir(tmp_path)) == sorted(["config.json", "model.safetensors", MULTITASK_CONFIG_NAME,
                                                   HEADS_WEIGHTS_NAME, *generation])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == arch and "tasks" not in config  # a plain body config
    restored = MultiTaskModel.from_pretrained(tmp_path).eval()
    assert restored.task_names == model.task_names
    assert restored.config.task("sentiment")["label_names"] == ["neg", "neu", "pos"]
    after = outputs(restored, tok)
    for name in before:
        for field in ("loss", "logits", "start_logits", "end_logits"):
            if getattr(before[name], field) is not None:
                torch.testing.assert_close(getattr(after[name], field), getattr(before[name], field), rtol=0, atol=0, msg=name)
    # one shared multiple-choice head and one span head, whatever the number of such tasks
    assert set(model.classification_heads) == {"sentiment", "score"}
    assert model.multiple_choice_head is not None and model.span_head is not None


VANILLA_LOAD = textwrap.dedent("""
    import sys, json, torch, logging
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_warning()
    report = {}
    for path in sys.argv[1:]:  # an encoder-decoder body is its *ForConditionalGeneration model
        auto = AutoModelForSeq2SeqLM if AutoConfig.from_pretrained(path).is_encoder_decoder else AutoModel
        body, info = auto.from_pretrained(path, output_loading_info=True)
        report[path] = {k: sorted(v) if isinstance(v, (list, set)) else str(v) for k, v in info.items()}
        report[path]["class"] = type(body).__name__
    print("BODIES LOADED", file=sys.stderr, flush=True)
    for path in sys.argv[1:]:
        classifier = AutoModelForSequenceClassification.from_pretrained(path, num_labels=4)
        # fine-tune the vanilla classifier a few steps: the loss goes down
        torch.manual_seed(0)
        ids = torch.randint(5, 200, (8, 12)); ids[:, 0] = 2; ids[:, -1] = 3
        labels = torch.arange(8) % 4
        optimizer = torch.optim.AdamW(classifier.parameters(), lr=1e-2)
        losses = []
        for _ in range(15):
            loss = classifier(input_ids=ids, labels=labels).loss
            loss.backward(); optimizer.step(); optimizer.zero_grad(); losses.append(loss.item())
        report[path]["losses"] = [losses[0], losses[-1]]
    report["hf_aux_imported"] = any(m.startswith("hf_aux") for m in sys.modules)
    print("REPORT" + json.dumps(report))
""")


def test_vanilla_transformers_loads_the_body_without_hf_aux(tok, tmp_path):
    paths = []
    torch.manual_seed(0)  # the bodies' initialisation must not depend on which tests ran before (the loss check)
    for arch in ARCHITECTURES:
        path = tmp_path / arch
        build(tok, arch).save_pretrained(path)
        paths.append(str(path))
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    result = subprocess.run([sys.executable, "-c", VANILLA_LOAD, *paths], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.split("REPORT", 1)[1])
    assert report.pop("hf_aux_imported") is False
    for path, info in report.items():
        assert info["missing_keys"] == [] and info["unexpected_keys"] == [] and info["mismatched_keys"] == [], path
        assert info["losses"][1] < info["losses"][0], path
    # no load report at all for the bodies (the classifiers' fresh heads, loaded afterwards, are expected)
    body_stderr = result.stderr.split("BODIES LOADED", 1)[0]
    for word in ("UNEXPECTED", "MISSING", "MISMATCH", "newly initialized", "not used"):
        assert word not in body_stderr, body_stderr
    assert [info["class"] for info in report.values()] == ["BertModel", "RobertaModel", "ElectraModel",
                                                           "DebertaV2Model", "BartForConditionalGeneration"]


SEQ2SEQ_BODIES = {"t5-tied": ("t5", {}), "t5-untied": ("t5", {"tie_word_embeddings": False}),
                  "bart-tied": ("bart", {}), "bart-untied": ("bart", {"tie_word_embeddings": False})}


@pytest.mark.parametrize("body", SEQ2SEQ_BODIES)
def test_seq2seq_logits_are_the_architectures_own_and_load_in_auto_model_for_seq2seq_lm(tok, body, tmp_path):
    """Seq2seq logits come from the architecture's own *ForConditionalGeneration head and scaling (tied T5 rescales
    the decoder states by d_model ** -0.5 before its tied projection; projecting with the input embedding matrix
    alone was 15 off on a tiny T5), and the saved body is that model: AutoModelForSeq2SeqLM loads it, with no
    hf_aux, and gives the same logits."""
    arch, overrides = SEQ2SEQ_BODIES[body]
    torch.manual_seed(0)
    model = MultiTaskModel(MultiTaskModelConfig(encoder=tiny_config(arch, tok, **overrides), tasks=[SEQ2SEQ, TASKS[0]]))
    with torch.no_grad():  # non-zero biases and a spread-out embedding, so a missing bias or scale shows
        for name, value in model.body.named_parameters():
            value.normal_(0.0, 0.5 if "shared" in name or "embed" in name else 0.1)
        for name, buffer in model.body.named_buffers():
            if "logits_bias" in name:
                buffer.normal_(0.0, 1.0)
    model.eval()
    inputs = {k: v for k, v in batches(tok)["summary"].items() if k != "token_type_ids"}
    logits = model(task="summary", **inputs).logits
    model.save_pretrained(tmp_path)
    reference = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    expected = reference(**inputs).logits  # it shifts the labels into decoder inputs itself
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    restored = MultiTaskModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(restored(task="summary", **inputs).logits, logits, rtol=0, atol=0)
    sentence = {k: v for k, v in batches(tok)["sentiment"].items() if k != "token_type_ids"}
    torch.testing.assert_close(restored(task="sentiment", **sentence).logits, model(task="sentiment", **sentence).logits,
                               rtol=0, atol=0)


def test_plain_encoder_gets_fresh_heads_and_keeps_its_weights(tok, tmp_path, caplog):
    torch.manual_seed(1)
    encoder = AutoModel.from_config(tiny_config("bert", tok))
    encoder.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="plain encoder checkpoint"):
        MultiTaskModel.from_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hf_aux.modeling.multitask"):
        model = MultiTaskModel.from_pretrained(tmp_path, tasks=[TaskSpec(name="topic", kind="classification",
                                                                         num_labels=4, dataset_name="x/y")])
    assert "fresh" in caplog.text and "topic" in caplog.text
    for (name, saved), loaded in zip(encoder.state_dict().items(), model.body.state_dict().values()):
        torch.testing.assert_close(loaded, saved, rtol=0, atol=0, msg=name)  # wrapping did not re-initialise


def test_new_task_on_a_muppet_checkpoint(tok, tmp_path):
    model = build(tok, "bert")
    model.save_pretrained(tmp_path)
    extended = MultiTaskModel.from_pretrained(tmp_path, tasks=[{"name": "topic", "kind": "classification", "num_labels": 5}])
    assert extended.task_names == [t["name"] for t in TASKS] + ["topic"]
    torch.testing.assert_close(extended.classification_heads["sentiment"].dense.weight,
                               model.classification_heads["sentiment"].dense.weight)
    with pytest.raises(ValueError, match="task 'sentiment': field 'num_labels'"):
        MultiTaskModel.from_pretrained(tmp_path, tasks=[{"name": "sentiment", "kind": "classification", "num_labels": 2}])


def test_seq2seq_needs_an_encoder_decoder(tok):
    with pytest.raises(ValueError, match="task 'summary': field 'kind': a seq2seq task needs an encoder-decoder"):
        MultiTaskModelConfig(encoder=tiny_config("bert", tok), tasks=[SEQ2SEQ])
    model = build(tok, "bert")
    with pytest.raises(ValueError, match="task 'summary': field 'kind'"):
        model.add_tasks([SEQ2SEQ])


def test_forward_errors_name_the_field(tok):
    model = build(tok, "bert")
    ids = tok(["hi"], return_tensors="pt")
    with pytest.raises(ValueError, match="task 'nope': field 'name'"):
        model(task="nope", **ids)
    with pytest.raises(ValueError, match="field 'task_ids': a batch must belong to one task"):
        model(task_ids=torch.tensor([0, 1]), input_ids=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="field 'task_ids': 9 is not a task index"):
        model(task_ids=torch.tensor([9]), **ids)


def test_spectral_norm_heads_round_trip(tok, tmp_path):
    model = build(tok, "roberta", spectral_norm_heads=True)
    model.train()
    for _ in range(30):  # each training forward runs one power iteration of the spectral-norm estimate
        model(task="sentiment", **batches(tok)["sentiment"])
    model.eval()
    model.save_pretrained(tmp_path)
    restored = MultiTaskModel.from_pretrained(tmp_path).eval()
    assert restored.config.spectral_norm_heads
    inputs = batches(tok)["sentiment"]
    torch.testing.assert_close(restored(task="sentiment", **inputs).logits, model(task="sentiment", **inputs).logits)
    sigma = torch.linalg.matrix_norm(model.classification_heads["sentiment"].dense.weight, ord=2)
    assert sigma.item() == pytest.approx(1.0, abs=0.05)


def test_r4f_spectrally_normalises_every_head_kind_it_fits(tok, tmp_path):
    """R4F (§3.2) normalises the heads' projections: the classification/regression heads, the shared
    multiple-choice head and the span head alike (the seq2seq LM head is the pre-trained tied embedding: left)."""
    model = build(tok, "bert", spectral_norm_heads=True)
    heads = {"sentiment": model.classification_heads["sentiment"], "score": model.classification_heads["score"],
             "answer_pick": model.multiple_choice_head, "squad_like": model.span_head}
    linears = {name: [m for m in head.modules() if isinstance(m, torch.nn.Linear)] for name, head in heads.items()}
    for name, layers in linears.items():
        assert layers and all(torch.nn.utils.parametrize.is_parametrized(m, "weight") for m in layers), name
    model.train()
    inputs = batches(tok)
    for _ in range(30):  # power iterations run in training forwards
        for name in heads:
            model(task=name, **inputs[name])
    for name, layers in linears.items():
        for layer in layers:
            assert torch.linalg.matrix_norm(layer.weight, ord=2).item() == pytest.approx(1.0, abs=0.05), name
    model.eval()
    model.save_pretrained(tmp_path)
    restored = MultiTaskModel.from_pretrained(tmp_path).eval()
    for name in ("answer_pick", "squad_like"):
        for field in ("logits", "start_logits"):
            if getattr(model(task=name, **inputs[name]), field) is not None:
                torch.testing.assert_close(getattr(restored(task=name, **inputs[name]), field),
                                           getattr(model(task=name, **inputs[name]), field), msg=name)


def test_plain_trainer_trains_and_resumes_a_multitask_model(tok, tmp_path):
    """Trainer checkpoints are MUPPET-style; Trainer's own resume restores the body through load_state_dict, and
    load_checkpoint_heads the heads. Trained parameters move; the unused pooler stays frozen."""
    model = build(tok, "bert")
    model.train()
    rows = datasets.Dataset.from_dict({"text": ["good movie", "bad plot", "great fun", "boring film"] * 4,
                                       "label": [2, 0, 2, 1] * 4})
    task = TaskSpec(name="sentiment", kind="classification", num_labels=3, dataset=rows)
    train = tokenize_task(task, rows, tok)
    before = {k: v.clone() for k, v in model.named_parameters()}
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-2,
                             save_steps=4, report_to=[], remove_unused_columns=False, use_cpu=True, logging_steps=1)
    Trainer(model=model, args=args, train_dataset=train, data_collator=MultiTaskCollator(tok, model.task_names)).train()
    moved = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert any(k.startswith("body.encoder.") for k in moved)
    assert {k for k in moved if k.startswith("classification_heads.")} == {
        k for k in before if k.startswith("classification_heads.sentiment.")}
    assert not any(k.startswith(("body.pooler", "multiple_choice_head", "span_head")) for k in moved)

    checkpoint = tmp_path / "checkpoint-4"
    fresh = build(tok, "bert")
    from safetensors.torch import load_file

    fresh.load_state_dict(load_file(checkpoint / "model.safetensors"), strict=False)  # what Trainer's resume does
    fresh.load_checkpoint_heads(str(checkpoint))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], value, rtol=0, atol=0, msg=name)


def test_train_and_eval_switch_every_module_like_nn_module(tok):
    model = build(tok, "bert", spectral_norm_heads=True)
    model.add_tasks([{"name": "late", "kind": "classification", "num_labels": 2}])  # heads added after a train()
    for mode in (True, False, True):
        model.train(mode)
        assert {m.training for m in model.modules()} == {mode}
    model.eval()
    assert not any(m.training for m in model.modules())
    # dropout really follows the flag: eval outputs are deterministic, training outputs are not
    inputs = batches(tok)["sentiment"]
    torch.testing.assert_close(model(task="sentiment", **inputs).logits, model(task="sentiment", **inputs).logits)
    model.train()
    assert not torch.equal(model(task="sentiment", **inputs).logits, model(task="sentiment", **inputs).logits)


def test_old_config_name_is_a_deprecated_alias():
    """Model configurations are named after their model (MultiTaskModelConfig, AmosModelConfig); <Method>Config
    (MuppetConfig, AmosConfig, ...) are training arguments, as trl names them. The 0.1 name still works, warning."""
    import hf_aux
    from hf_aux.modeling import multitask

    with pytest.warns(FutureWarning, match="MultiTaskModelConfig"):
        assert multitask.MultiTaskConfig is multitask.MultiTaskModelConfig
    with pytest.warns(FutureWarning):
        assert hf_aux.__getattr__("MultiTaskConfig") is hf_aux.MultiTaskModelConfig


# ---- sentence pooling (issue #28): the body read the way it was trained ------------------------------------------
def test_auto_pooling_of_the_real_minilm_is_its_own_mean_pooling_as_sentence_transformers_computes_it():
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    from hf_aux.tasks.demo import minilm_path

    path = str(minilm_path())
    model = MultiTaskModel.from_pretrained(path, tasks=[{"name": "t", "kind": "classification", "num_labels": 2}])
    assert model.config.pooling == "mean"  # from its 1_Pooling/config.json
    texts = ["a short one", "a much longer sentence about a film whose plot was good", "ok"]
    encoder = SentenceTransformer(path, device="cpu")
    features = encoder.preprocess(texts) if hasattr(encoder, "preprocess") else encoder.tokenize(texts)
    pooled = dict(features)
    for module in list(encoder)[:2]:  # Transformer, Pooling: everything before Normalize
        pooled = module(pooled)
    encoded = encoder.encode(texts, convert_to_tensor=True)  # ... and through Normalize
    batch = AutoTokenizer.from_pretrained(path)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model.eval()._run_body(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], None,
                                        None, None)
        ours = model._sentence_representation(hidden, batch["attention_mask"], batch["input_ids"])
    assert (ours - pooled["sentence_embedding"]).abs().max() < 1e-5
    assert (torch.nn.functional.normalize(ours, dim=-1) - encoded).abs().max() < 1e-5


@pytest.mark.parametrize("mode", ["cls", "mean", "max", "mean_sqrt_len", "weightedmean", "lasttoken"])
def test_pooling_matches_a_hand_computation_and_padding_changes_no_row(tok, mode):
    from hf_aux.modeling.pooling import pool

    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    real = hidden[0, :3]  # the first row's real tokens
    expected = {"cls": real[0], "mean": real.mean(0), "max": real.max(0).values, "mean_sqrt_len": real.sum(0) / 3 ** 0.5,
                "weightedmean": (real * torch.tensor([[1.0], [2.0], [3.0]])).sum(0) / 6, "lasttoken": real[2]}[mode]
    torch.testing.assert_close(pool(hidden, mask, mode)[0], expected)
    # a whole model: one row alone and the same row in a padded batch with a longer one
    model = build(tok, "bert", pooling=mode)
    assert model.config.pooling == mode
    short = tok(["good movie"], return_tensors="pt")
    both = tok(["good movie", "a really very long and boring story about an actor"], padding=True,
               return_tensors="pt")
    assert both["attention_mask"][0].sum() < both["attention_mask"].shape[1]  # the short row is padded
    with torch.no_grad():
        alone = model(**short, task="sentiment").logits[0]
        padded = model(**both, task="sentiment").logits[0]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=0)


def test_pooling_is_saved_and_a_checkpoint_written_before_it_keeps_first_token_pooling(tok, tmp_path):
    model = build(tok, "bert", pooling="mean")
    model.save_pretrained(tmp_path / "new")
    assert json.loads((tmp_path / "new" / MULTITASK_CONFIG_NAME).read_text())["pooling"] == "mean"
    assert MultiTaskModel.from_pretrained(tmp_path / "new").config.pooling == "mean"
    # an older checkpoint: no pooling recorded, heads trained on the first token; even a sentence-transformers body
    # (modules.json + 1_Pooling saying mean) keeps it
    old = json.loads((tmp_path / "new" / MULTITASK_CONFIG_NAME).read_text())
    del old["pooling"]
    (tmp_path / "new" / MULTITASK_CONFIG_NAME).write_text(json.dumps(old))
    (tmp_path / "new" / "1_Pooling").mkdir()
    (tmp_path / "new" / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (tmp_path / "new" / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    loaded = MultiTaskModel.from_pretrained(tmp_path / "new")
    assert loaded.config.pooling == "cls"
    batch = tok(["good movie", "bad plot"], return_tensors="pt")
    with torch.no_grad():
        hidden = loaded._run_body(batch["input_ids"], batch["attention_mask"], None, None, None, None)
        torch.testing.assert_close(loaded._sentence_representation(hidden, batch["attention_mask"], None), hidden[:, 0])
    # asked for auto, the body's own files decide (mean); an explicit mode wins
    assert MultiTaskModel.from_pretrained(tmp_path / "new", tasks=[{"name": "x", "kind": "regression"}],
                                          pooling="auto").config.pooling == "mean"
    assert MultiTaskModel.from_pretrained(tmp_path / "new", pooling="max").config.pooling == "max"
    with pytest.raises(ValueError, match="field 'pooling'"):
        build(tok, "bert", pooling="average")


def test_auto_pooling_without_sentence_transformers_files_is_the_first_token_or_eos(tok):
    assert build(tok, "bert").config.pooling == "cls"
    assert build(tok, "bart").config.pooling == "eos"
