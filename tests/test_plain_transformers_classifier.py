"""A fine-tuned sentence classifier that plain transformers serves (issue #52, item 1).

`hf-aux finetune` of ONE classification or regression task, and `hf-aux export` of one task of a MUPPET
checkpoint, write a folder that `AutoModelForSequenceClassification` and `pipeline("text-classification")` load
with the TRAINED head (no missing weights), the label names and problem_type, and the logits of hf_aux's own
`MultiTaskModel` (1e-5): a standard class for first-token pooling on BERT / RoBERTa, hf_aux's shipped modeling file
with `trust_remote_code=True` for every other pooling. The same folder stays a MUPPET-style checkpoint
(MultiTaskModel.from_pretrained, --reuse_head) whose body AutoModel loads. Real all-MiniLM-L6-v2 for the finetune
pipeline runs; tiny random models for the sweep over every pooling mode."""

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import save_tiny_bert, tiny_config, tiny_tokenizer
from transformers import (AutoModel, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer,
                          pipeline)

import hf_aux.__main__ as command
from hf_aux.tasks.demo import minilm_path
from hf_aux.modeling.export import REMOTE_CODE_FILE
from hf_aux.modeling.multitask import MultiTaskModel, MultiTaskModelConfig, single_task_model
from hf_aux.modeling.pooling import POOLING_MODES
from hf_aux.tasks.loading import TaskSpec

OLD_MUPPET = Path(__file__).parent / "data" / "old_layout" / "muppet"  # a MUPPET checkpoint of hf_aux 0.1 (cls)
TEXTS = ["the movie was really good", "a boring plot, the worst film", "fun"]
WORDS = "the movie film story actor plot was very really".split()
COMMON = ["--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--save_strategy", "no", "--seed", "0",
          "--do_train", "--max_steps", "2", "--per_device_train_batch_size", "4", "--max_seq_length", "32"]


def write_rows(folder: Path, regression: bool = False) -> dict:
    """train/validation jsonl of tiny sentiment rows: string labels neg/pos, or a score in [0, 5]."""
    rng = random.Random(0)
    rows = []
    for _ in range(16):
        good = rng.random() < 0.5
        text = " ".join(rng.choices(WORDS, k=3) + ["good" if good else "bad"])
        rows.append({"text": text, "label": round(rng.uniform(3, 5) if good else rng.uniform(0, 2), 2) if regression
                     else ("pos" if good else "neg")})
    files = {}
    for split, part in (("train", rows[:12]), ("validation", rows[12:])):
        files[split] = folder / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(row) + "\n" for row in part))
    return files


def finetune(model: str, folder: Path, *flags: str, regression: bool = False) -> Path:
    files = write_rows(folder, regression)
    out = folder / "out"
    command.main(["finetune", "--model_name_or_path", model, "--train_file", str(files["train"]),
                  "--validation_file", str(files["validation"]), "--task_name", "sentiment", "--output_dir",
                  str(out), *COMMON, *flags])
    return out


def hf_aux_logits(folder, inputs: dict, task: str) -> torch.Tensor:
    """The logits of hf_aux's own model, restored from the MUPPET-style files ([N, labels]; regression [N, 1])."""
    model = MultiTaskModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        logits = model(**inputs, task=task).logits
    return logits.unsqueeze(-1) if logits.dim() == 1 else logits


def load_classifier(folder, **kwargs):
    model, info = AutoModelForSequenceClassification.from_pretrained(folder, output_loading_info=True, **kwargs)
    assert not info["missing_keys"] and not info["mismatched_keys"], info  # the trained head, not a fresh one
    return model.eval()


# ----------------------------------------------------------------------------------------------------------------
# hf-aux finetune on the real MiniLM, through the pipeline
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pooling", "expected_class"), [("auto", "HfAuxSequenceClassifier"),
                                                         ("cls", "BertForSequenceClassification")])
def test_finetuned_minilm_serves_through_the_text_classification_pipeline(tmp_path, pooling, expected_class):
    """auto is MiniLM's own mean pooling: the shipped modeling file (trust_remote_code); cls: BERT's own class."""
    out = finetune(str(minilm_path()), tmp_path, "--pooling", pooling)
    remote = expected_class == "HfAuxSequenceClassifier"
    assert (out / REMOTE_CODE_FILE).is_file() == remote
    trust = {"trust_remote_code": True} if remote else {}
    classifier = load_classifier(out, **trust)
    assert type(classifier).__name__ == expected_class
    assert classifier.config.id2label == {0: "neg", 1: "pos"}
    assert classifier.config.label2id == {"neg": 0, "pos": 1}
    assert classifier.config.problem_type == "single_label_classification"

    tokenizer = AutoTokenizer.from_pretrained(out)
    inputs = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    expected = hf_aux_logits(out, inputs, "sentiment")
    with torch.no_grad():
        torch.testing.assert_close(classifier(**inputs).logits, expected, atol=1e-5, rtol=0)
    serve = pipeline("text-classification", model=str(out), top_k=None, **trust)
    for text, row, scores in zip(TEXTS, expected.softmax(-1), serve(TEXTS)):
        by_name = {score["label"]: score["score"] for score in scores}
        assert set(by_name) == {"neg", "pos"}, text
        torch.testing.assert_close(torch.tensor([by_name["neg"], by_name["pos"]]), row, atol=1e-5, rtol=0)

    # the same folder: AutoModel gives the encoder's token states, sentence-transformers keeps its files
    body = AutoModel.from_pretrained(out).eval()
    trained = MultiTaskModel.from_pretrained(str(out)).eval()
    with torch.no_grad():
        torch.testing.assert_close(body(**inputs).last_hidden_state, trained.body(**inputs).last_hidden_state)
    assert (out / "modules.json").is_file() and (out / "1_Pooling" / "config.json").is_file()
    card = (out / "README.md").read_text()
    assert "pipeline_tag: text-classification" in card
    call = f'"text-classification", model="{out}"{", trust_remote_code=True" if remote else ")"}'
    assert call in card and (f'AutoModelForSequenceClassification.from_pretrained("{out}", trust_remote_code=True)'
                             in card) == remote  # the output folder as it was given (here an absolute path)
    assert f'SentenceTransformer("{out}")' in card  # MiniLM's sentence-transformers files are beside it


# ----------------------------------------------------------------------------------------------------------------
# Every pooling mode (tiny random models)
# ----------------------------------------------------------------------------------------------------------------

SWEEP = [("bert", mode) for mode in ("auto", *POOLING_MODES) if mode != "eos"] + [("roberta", "cls"), ("bart", "eos"),
                                                                                   ("bart", "mean")]
SWEEP = [(model_type, pooling, False) for model_type, pooling in SWEEP] + [("bert", "cls", True), ("bert", "mean", True)]
STANDARD = {("bert", "auto"): "BertForSequenceClassification", ("bert", "cls"): "BertForSequenceClassification",
            ("roberta", "cls"): "RobertaForSequenceClassification"}


@pytest.mark.parametrize(("model_type", "pooling", "spectral_norm"), SWEEP,
                         ids=[f"{t}-{p}{'-spectral_norm' * s}" for t, p, s in SWEEP])
def test_every_pooling_mode_loads_as_a_sequence_classifier_with_the_trained_head(tmp_path, model_type, pooling,
                                                                                 spectral_norm):
    """spectral_norm: R4F's spectrally normalised head is exported with its effective weights."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = tiny_config(model_type, tokenizer)
    body = (AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModel).from_config(config)
    task = {"name": "topic", "kind": "classification", "label_names": ["red", "blue", "green"]}
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], pooling=pooling,
                                                spectral_norm_heads=spectral_norm), body=body).eval()
    with torch.no_grad():  # a head unlike any fresh one
        for parameter in model.classification_heads.parameters():
            parameter.normal_()
    model.save_pretrained(tmp_path)
    inputs = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    with torch.no_grad():
        expected = model(**inputs, task="topic").logits
    standard = STANDARD.get((model_type, pooling))
    classifier = load_classifier(tmp_path, **({} if standard else {"trust_remote_code": True}))
    assert type(classifier).__name__ == (standard or "HfAuxSequenceClassifier")
    assert (tmp_path / REMOTE_CODE_FILE).is_file() == (standard is None)
    assert classifier.config.id2label == {0: "red", 1: "blue", 2: "green"}
    with torch.no_grad():
        torch.testing.assert_close(classifier(**inputs).logits, expected, atol=1e-5, rtol=0)
    # the MUPPET-style files restore the same model; AutoModel loads the body
    torch.testing.assert_close(hf_aux_logits(tmp_path, inputs, "topic"), expected, atol=1e-6, rtol=0)
    assert type(AutoModel.from_pretrained(tmp_path)).__name__ == type(body.base_model).__name__


def test_a_finetuned_regression_model_gives_its_value_through_the_pipeline_and_reuses_its_head(tmp_path):
    out = finetune(save_tiny_bert(tmp_path / "tiny"), tmp_path, "--pooling", "mean", "--learning_rate", "1e-2",
                   regression=True)
    classifier = load_classifier(out, trust_remote_code=True)
    assert classifier.config.problem_type == "regression"
    assert classifier.config.id2label == {0: "sentiment"}
    tokenizer = AutoTokenizer.from_pretrained(out)
    inputs = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    expected = hf_aux_logits(out, inputs, "sentiment")  # [3, 1]
    with torch.no_grad():
        output = classifier(**inputs, labels=torch.tensor([4.0, 1.0, 2.5]))
    torch.testing.assert_close(output.logits, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(output.loss, ((expected.squeeze(-1) - torch.tensor([4.0, 1.0, 2.5])) ** 2).mean(),
                               atol=1e-5, rtol=0)
    serve = pipeline("text-classification", model=str(out), trust_remote_code=True, function_to_apply="none")
    results = serve(TEXTS)
    assert [r["label"] for r in results] == ["sentiment"] * 3
    torch.testing.assert_close(torch.tensor([r["score"] for r in results]), expected.squeeze(-1), atol=1e-5, rtol=0)
    card = (out / "README.md").read_text()
    assert "pipeline_tag: text-classification" in card and 'function_to_apply="none"' in card
    # --reuse_head on the same folder starts from the trained head
    task = TaskSpec(name="sentiment", kind="regression", data_files=str(tmp_path / "train.jsonl"))
    model, reused = single_task_model(str(out), task, reuse_head=True)
    assert reused
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**inputs, task="sentiment").logits, expected.squeeze(-1))


def test_a_later_model_of_several_tasks_leaves_no_classifier_of_the_export_behind(tmp_path):
    """A body loaded from an exported folder carries auto_map / hf_aux_pooling / problem_type in its config; a model
    of several tasks saved from it must not point AutoModelForSequenceClassification at a head it does not have."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config("bert", tokenizer))
    task = {"name": "score", "kind": "regression"}
    MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], pooling="max"), body=body).save_pretrained(
        tmp_path / "one")
    assert json.loads((tmp_path / "one" / "config.json").read_text())["hf_aux_pooling"] == "max"
    several = MultiTaskModel.from_pretrained(str(tmp_path / "one"), tasks=[
        {"name": "topic", "kind": "classification", "num_labels": 2}])
    several.save_pretrained(tmp_path / "several")
    config = json.loads((tmp_path / "several" / "config.json").read_text())
    assert "hf_aux_pooling" not in config and "auto_map" not in config and config.get("problem_type") is None
    assert not {k for k in load_file(tmp_path / "several" / "model.safetensors") if k.startswith("classifier.")}


# ----------------------------------------------------------------------------------------------------------------
# hf-aux export: one task of a MUPPET checkpoint
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mean_pooled_muppet(tmp_path_factory):
    """A MUPPET-style checkpoint of three tasks (classification, regression, multiple choice), mean pooling."""
    folder = tmp_path_factory.mktemp("muppet")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config("bert", tokenizer))
    tasks = [{"name": "topic", "kind": "classification", "label_names": ["red", "blue"]},
             {"name": "stars", "kind": "regression"}, {"name": "choice", "kind": "multiple_choice"}]
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=tasks, pooling="mean"), body=body)
    with torch.no_grad():
        for parameter in model.classification_heads.parameters():
            parameter.normal_()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("source", "task", "names", "remote"), [
    (OLD_MUPPET, "topic", {0: "red", 1: "blue", 2: "green"}, False),
    (OLD_MUPPET, "score", {0: "score"}, False),
    (None, "topic", {0: "red", 1: "blue"}, True),
    (None, "stars", {0: "stars"}, True)])
def test_export_writes_one_task_of_a_muppet_checkpoint_as_a_classifier(tmp_path, capsys, mean_pooled_muppet, source,
                                                                        task, names, remote):
    source = source or mean_pooled_muppet
    out = tmp_path / "exported"
    command.main(["export", "--model", str(source), "--task", task, "--output_dir", str(out)])
    assert str(out) in capsys.readouterr().out
    trust = {"trust_remote_code": True} if remote else {}
    classifier = load_classifier(out, **trust)
    assert classifier.config.id2label == names
    tokenizer = AutoTokenizer.from_pretrained(out)  # copied beside the model
    inputs = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    expected = hf_aux_logits(source, inputs, task)
    with torch.no_grad():
        torch.testing.assert_close(classifier(**inputs).logits, expected, atol=1e-5, rtol=0)
    serve = pipeline("text-classification", model=str(out), function_to_apply="none", **trust)
    torch.testing.assert_close(torch.tensor([r["score"] for r in serve(TEXTS)]), expected.max(-1).values,
                               atol=1e-5, rtol=0)
    assert MultiTaskModel.from_pretrained(str(out)).task_names == [task]  # and it stays a MUPPET-style checkpoint


def test_export_refuses_unknown_tasks_other_kinds_and_a_non_empty_output_folder(tmp_path, capsys,
                                                                                 mean_pooled_muppet):
    def refused(*argv) -> str:
        with pytest.raises(SystemExit) as exit_info:
            command.main(["export", "--model", str(mean_pooled_muppet), *argv])
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    error = refused("--task", "topics", "--output_dir", str(tmp_path / "a"))
    assert "'topics'" in error and "['topic', 'stars', 'choice']" in error
    error = refused("--task", "choice", "--output_dir", str(tmp_path / "b"))
    assert "'choice'" in error and "multiple_choice" in error and "['topic', 'stars']" in error
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    error = refused("--task", "topic", "--output_dir", str(tmp_path / "c"))
    assert "not empty" in error and str(tmp_path / "c") in error
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["notes.txt"]
    with pytest.raises(SystemExit):
        command.main(["export", "--model", save_tiny_bert(tmp_path / "plain"), "--task", "topic", "--output_dir",
                      str(tmp_path / "d")])
    assert "not a MUPPET-style checkpoint" in capsys.readouterr().err


def test_one_task_of_a_lora_checkpoint_exports_with_the_adapters_merged(tmp_path):
    from peft import LoraConfig

    base = save_tiny_bert(tmp_path / "base")
    model = MultiTaskModel.from_pretrained(base, tasks=[{"name": "topic", "kind": "classification", "num_labels": 2},
                                                        {"name": "stars", "kind": "regression"}], pooling="mean")
    model.add_body_lora(LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]))
    with torch.no_grad():  # peft starts B at zero (the adapted body is the base): an adapter that changes it
        for name, parameter in model.body.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    model.save_pretrained(tmp_path / "lora")  # adapter files + heads, no body weights
    tiny_tokenizer().save_pretrained(tmp_path / "lora")
    out = tmp_path / "stars"
    command.main(["export", "--model", str(tmp_path / "lora"), "--task", "stars", "--output_dir", str(out)])
    inputs = dict(tiny_tokenizer()(TEXTS, padding=True, return_tensors="pt"))
    with torch.no_grad():
        expected = model.eval()(**inputs, task="stars").logits
        plain = AutoModel.from_pretrained(base).eval()(**inputs).last_hidden_state
        torch.testing.assert_close(load_classifier(out, trust_remote_code=True)(**inputs).logits.squeeze(-1), expected,
                                   atol=1e-5, rtol=0)
        merged = AutoModel.from_pretrained(out).eval()(**inputs).last_hidden_state
    assert not torch.allclose(merged, plain, atol=1e-3)  # the adapters are in the exported body
