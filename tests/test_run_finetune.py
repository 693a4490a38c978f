"""run_scripts/run_finetune.py end to end on a tiny BERT saved to tmp and tiny jsonl tasks (main() with sys.argv)."""

import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from tiny import tiny_config, tiny_tokenizer
from transformers import AutoModel

from hf_aux.tasks.data import MultiTaskCollator, tokenize_task
from hf_aux.tasks.metrics import classification_metrics, majority_baseline
from hf_aux.modeling.multitask import HEADS_WEIGHTS_NAME, MultiTaskModel
from hf_aux.tasks.loading import TaskSpec
from hf_aux.finetune import command as run_finetune
from hf_aux.tasks.metrics import baseline_metrics
from hf_aux.modeling.multitask import single_task_model


COMMON = ["--report_to", "none", "--disable_tqdm", "true", "--per_device_train_batch_size", "8",
          "--per_device_eval_batch_size", "8", "--save_strategy", "no", "--logging_steps", "1", "--seed", "0"]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # tiny models on a shared 2-core machine: a second intra-op thread made these runs ~10x slower (measured)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


WORDS = "the movie film story actor plot was very really".split()


def sentiment_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["neg", "pos"])
        word = "good" if label == "pos" else "bad"
        sentence = " ".join(rng.choices(WORDS, k=4) + [word] + rng.choices(WORDS, k=3))
        rows.append({"sentence": sentence, "sentiment": label})
    return rows


@pytest.fixture(scope="module")
def sentiment_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sentiment")
    return {split: write_jsonl(folder / f"{split}.jsonl", sentiment_rows(n, seed))
            for split, n, seed in (("train", 40, 0), ("validation", 16, 1), ("test", 12, 2))}


def run_main(monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *argv])
    return run_finetune.main()


def classification_args(tiny_dir, files, out, *extra):
    return ["--model_name_or_path", tiny_dir, "--train_file", files["train"], "--validation_file", files["validation"],
            "--test_file", files["test"], "--task_kind", "classification", "--text_columns", "sentence",
            "--label_column", "sentiment", "--task_name", "sentiment", "--output_dir", str(out), *COMMON, *extra]


def test_classification_end_to_end(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    out = tmp_path / "out"
    results = run_main(monkeypatch, classification_args(tiny_dir, sentiment_files, out, "--do_train", "--do_eval",
                                                        "--do_predict", "--max_steps", "6", "--learning_rate", "1e-3"))
    # labels were read from the data as sorted strings; the baseline is the train majority scored on validation
    train_labels = [json.loads(line)["sentiment"] for line in open(sentiment_files["train"])]
    eval_labels = [json.loads(line)["sentiment"] for line in open(sentiment_files["validation"])]
    assert results["eval_majority_baseline"] == pytest.approx(majority_baseline(eval_labels, train_labels))
    assert results["train_examples"] == 40 and results["eval_samples"] == 16 and results["test_samples"] == 12

    # the output is a MUPPET-style checkpoint: plain AutoModel loads the body, MultiTaskModel the head too
    assert (out / HEADS_WEIGHTS_NAME).is_file() and (out / "config.json").is_file()
    model = MultiTaskModel.from_pretrained(str(out)).eval()
    assert model.task_names == ["sentiment"]
    assert model.config.task("sentiment")["label_names"] == ["neg", "pos"]
    assert model.config.pooling == "cls"  # a plain BERT body: the first token, and the card says so
    assert "`cls` pooling: the first token's state" in (out / "README.md").read_text()
    body = AutoModel.from_pretrained(str(out))
    for name, tensor in body.state_dict().items():
        torch.testing.assert_close(tensor, model.body.state_dict()[name], rtol=0, atol=0)

    # the reported accuracy is what the saved model scores on the validation split
    task = TaskSpec(name="sentiment", kind="classification", text_columns=["sentence"], label_column="sentiment",
                    label_names=["neg", "pos"], data_files=sentiment_files["validation"])
    features = tokenize_task(task, Dataset.from_json(sentiment_files["validation"]), tiny_tokenizer(), max_length=128)
    batch = MultiTaskCollator(tiny_tokenizer(), ["sentiment"])([features[i] for i in range(len(features))])
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    expected = classification_metrics(logits.numpy(), batch["labels"].numpy())
    assert results["eval_accuracy"] == pytest.approx(expected["accuracy"])
    assert results["eval_macro_f1"] == pytest.approx(expected["macro_f1"])

    predictions = [json.loads(line) for line in open(out / "predict_results.jsonl")]
    assert len(predictions) == 12 and {p["prediction"] for p in predictions} <= {"neg", "pos"}
    assert json.loads((out / "eval_results.json").read_text())["eval_accuracy"] == results["eval_accuracy"]


def test_training_learns_the_toy_task(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    # "good" vs "bad" decides the label: a few epochs take the tiny model well past the majority baseline
    results = run_main(monkeypatch, classification_args(
        tiny_dir, sentiment_files, tmp_path / "out", "--do_train", "--do_eval", "--num_train_epochs", "5",
        "--learning_rate", "1e-2", "--warmup_steps", "0"))
    assert results["eval_accuracy"] >= 0.9 > results["eval_majority_baseline"]


def test_train_fraction_takes_nested_subsets(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    results = run_main(monkeypatch, classification_args(tiny_dir, sentiment_files, tmp_path / "out", "--do_train",
                                                        "--max_steps", "1", "--train_fraction", "0.25"))
    assert results["train_examples"] == 10 and results["train_fraction"] == 0.25
    data = Dataset.from_dict({"i": list(range(100))})
    parse = lambda f: run_finetune.parse_args(["--model_name_or_path", "x", "--train_file", "t.jsonl",  # noqa: E731
                                               "--task_kind", "regression", "--output_dir", "o",
                                               "--train_fraction", str(f)])[1]
    small = run_finetune.select_train_rows(data, parse(0.1))["i"]
    large = run_finetune.select_train_rows(data, parse(0.5))["i"]
    assert len(small) == 10 and len(large) == 50 and set(small) < set(large)
    assert small != list(range(10))  # a shuffle, not the head of the file


def test_multiple_choice_and_json_config(monkeypatch, tmp_path, tiny_dir):
    rng = random.Random(0)
    colours = ["red", "blue", "green"]

    def rows(n):
        out = []
        for _ in range(n):
            colour = rng.choice(colours)
            choices = [colour, *[c for c in colours if c != colour]]
            rng.shuffle(choices)
            out.append({"question": f"the cat is {colour}", "options": choices, "answer": choices.index(colour)})
        return out

    files = {s: write_jsonl(tmp_path / f"{s}.jsonl", rows(n)) for s, n in (("train", 24), ("validation", 12))}
    config = {"model_name_or_path": tiny_dir, "train_file": files["train"], "validation_file": files["validation"],
              "task_kind": "multiple_choice", "choices_column": "options", "label_column": "answer",
              "task_name": "colour_choice", "output_dir": str(tmp_path / "out"), "do_train": True, "do_eval": True,
              "max_steps": 3, "report_to": "none", "disable_tqdm": True, "save_strategy": "no",
              "per_device_train_batch_size": 4}
    config_file = tmp_path / "finetune.json"
    config_file.write_text(json.dumps(config))
    results = run_main(monkeypatch, [str(config_file)])
    answers = [json.loads(line)["answer"] for line in open(files["validation"])]
    train_answers = [json.loads(line)["answer"] for line in open(files["train"])]
    assert results["eval_majority_baseline"] == pytest.approx(majority_baseline(answers, train_answers))
    assert 0.0 <= results["eval_accuracy"] <= 1.0 and np.isfinite(results["eval_loss"])
    saved = MultiTaskModel.from_pretrained(str(tmp_path / "out"))
    assert saved.multiple_choice_head is not None and saved.config.task("colour_choice")["kind"] == "multiple_choice"


QA_CONTEXT = ("the cat is red and the dog is blue . the news is good today . the river is long . paris is the "
              "capital city of france . what a great movie that was")


def qa_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        if rng.random() < 0.25:
            rows.append({"question": "who is the best actor", "context": QA_CONTEXT,
                         "answers": {"text": [], "answer_start": []}})
        else:
            word = rng.choice(["red", "blue", "paris", "long"])
            rows.append({"question": f"what is {word}", "context": QA_CONTEXT,
                         "answers": {"text": [word], "answer_start": [QA_CONTEXT.index(word)]}})
    return rows


def test_extractive_qa_with_strided_windows(monkeypatch, tmp_path, tiny_dir):
    files = {s: write_jsonl(tmp_path / f"{s}.jsonl", qa_rows(n, seed))
             for s, n, seed in (("train", 16, 0), ("validation", 8, 1), ("test", 6, 2))}
    out = tmp_path / "out"
    results = run_main(monkeypatch, [
        "--model_name_or_path", tiny_dir, "--train_file", files["train"], "--validation_file", files["validation"],
        "--test_file", files["test"], "--task_kind", "extractive_qa", "--max_seq_length", "24", "--doc_stride", "6",
        "--output_dir", str(out), "--do_train", "--do_eval", "--do_predict", "--max_steps", "2", *COMMON])
    validation = [json.loads(line) for line in open(files["validation"])]
    unanswerable = np.mean([not row["answers"]["text"] for row in validation])
    assert results["eval_null_answer_baseline"] == pytest.approx(unanswerable)  # always "" scores the unanswerable
    assert 0.0 <= results["eval_exact_match"] <= results["eval_f1"] <= 1.0
    assert np.isfinite(results["eval_loss"])  # the span loss is computed: label_names are the positions
    predictions = [json.loads(line)["prediction"] for line in open(out / "predict_results.jsonl")]
    assert len(predictions) == 6 and all(p == "" or p in QA_CONTEXT for p in predictions)


def muppet_checkpoint(tiny_dir, folder, tasks):
    """A MUPPET-style checkpoint with recognisable (non-initial) head weights."""
    model = MultiTaskModel.from_pretrained(tiny_dir, tasks=tasks)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith("body."):
                parameter.copy_(torch.randn_like(parameter))
    model.save_pretrained(folder)
    return load_file(str(Path(folder) / HEADS_WEIGHTS_NAME)), model


def test_reuse_head_starts_from_the_saved_head(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    heads, source = muppet_checkpoint(tiny_dir, tmp_path / "muppet", [
        {"name": "sentiment", "kind": "classification", "num_labels": 2, "label_names": ["neg", "pos"]},
        {"name": "other", "kind": "classification", "num_labels": 3},
        {"name": "some_choice_task", "kind": "multiple_choice"}])
    muppet = str(tmp_path / "muppet")
    # a learning rate of 0: the saved output holds exactly the starting head
    out = tmp_path / "reused"
    results = run_main(monkeypatch, classification_args(muppet, sentiment_files, out, "--do_train", "--max_steps", "1",
                                                        "--learning_rate", "0", "--reuse_head"))
    assert results["train_reused_head"] == 1.0
    saved = load_file(str(out / HEADS_WEIGHTS_NAME))
    assert set(saved) == {k for k in heads if k.startswith("classification_heads.sentiment.")}
    for key, tensor in saved.items():
        torch.testing.assert_close(tensor, heads[key], rtol=0, atol=0)
    body = AutoModel.from_pretrained(str(out))  # the body is the checkpoint's, untouched by the rebuild
    for name, tensor in body.state_dict().items():
        if not name.startswith("pooler."):
            torch.testing.assert_close(tensor, source.body.state_dict()[name], rtol=0, atol=0)
    # but for its pooler: a BERT classifier read at the first token is exported as BertForSequenceClassification,
    # whose pooler is the head's dense layer (hf_aux.modeling.export); hf_aux's heads never read the pooler
    torch.testing.assert_close(body.pooler.dense.weight, heads["classification_heads.sentiment.dense.weight"],
                               rtol=0, atol=0)

    # without --reuse_head the head is fresh
    fresh_out = tmp_path / "fresh"
    run_main(monkeypatch, classification_args(muppet, sentiment_files, fresh_out, "--do_train", "--max_steps", "1",
                                              "--learning_rate", "0"))
    fresh = load_file(str(fresh_out / HEADS_WEIGHTS_NAME))
    assert not torch.equal(fresh["classification_heads.sentiment.dense.weight"],
                           heads["classification_heads.sentiment.dense.weight"])

    # multiple choice re-uses the unified head whatever the task's name (MUPPET §3.5: one head per task type)
    model, reused = single_task_model(muppet, TaskSpec(name="colours", kind="multiple_choice",
                                                       data_files="unused.jsonl"), reuse_head=True)
    assert reused
    for key, tensor in model.multiple_choice_head.state_dict().items():
        torch.testing.assert_close(tensor, heads[f"multiple_choice_head.{key}"], rtol=0, atol=0)
    # a QA task finds no span head in this checkpoint: fresh head, not re-used
    _, reused = single_task_model(muppet, TaskSpec(name="qa", kind="extractive_qa", data_files="unused.jsonl"),
                                  reuse_head=True)
    assert not reused
    # a same-named head with other labels is refused for re-use, ignored otherwise (the new head is fresh)
    other = TaskSpec(name="other", kind="classification", num_labels=2, data_files="unused.jsonl")
    with pytest.raises(ValueError, match="num_labels"):
        single_task_model(muppet, other, reuse_head=True)
    model, reused = single_task_model(muppet, other)
    assert not reused and model.classification_heads["other"].out_proj.out_features == 2


def test_resume_restores_the_head(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    schedule = ["--lr_scheduler_type", "constant", "--learning_rate", "1e-2", "--do_train", "--save_strategy", "steps",
                "--save_steps", "2"]
    straight = tmp_path / "straight"
    run_main(monkeypatch, classification_args(tiny_dir, sentiment_files, straight, *schedule, "--max_steps", "4"))
    resumed = tmp_path / "resumed"
    run_main(monkeypatch, classification_args(tiny_dir, sentiment_files, resumed, *schedule, "--max_steps", "2"))
    # the second run finds checkpoint-2 in its output_dir and continues to step 4
    run_main(monkeypatch, classification_args(tiny_dir, sentiment_files, resumed, *schedule, "--max_steps", "4"))
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == 4
    for name in ("model.safetensors", HEADS_WEIGHTS_NAME):
        a, b = load_file(str(straight / name)), load_file(str(resumed / name))
        assert set(a) == set(b)
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    start = load_file(str(resumed / "checkpoint-2" / HEADS_WEIGHTS_NAME))
    moved = load_file(str(resumed / HEADS_WEIGHTS_NAME))
    assert not torch.allclose(start["classification_heads.sentiment.dense.weight"],
                              moved["classification_heads.sentiment.dense.weight"])


def test_task_file_with_relative_data_files(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    folder = tmp_path / "task"
    folder.mkdir()
    for split in ("train", "validation"):
        shutil.copy(sentiment_files[split], folder / f"{split}.jsonl")
    (folder / "task.yaml").write_text(
        "name: reviews\nkind: classification\ntext_columns: [sentence]\nlabel_column: sentiment\n"
        "label_names: [neg, pos]\ndata_files: {train: train.jsonl, validation: validation.jsonl}\n")
    results = run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--task_file", str(folder / "task.yaml"),
                                     "--output_dir", str(tmp_path / "out"), "--do_eval", *COMMON])
    assert "eval_accuracy" in results and results["eval_samples"] == 16
    # no training, yet the baseline is still the train split's majority scored on validation
    labels = {s: [json.loads(line)["sentiment"] for line in open(sentiment_files[s])] for s in ("train", "validation")}
    assert results["eval_majority_baseline"] == pytest.approx(majority_baseline(labels["validation"], labels["train"]))
    with pytest.raises(ValueError, match="does not exist"):
        run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--task_file", str(folder / "nope.yaml"),
                               "--output_dir", str(tmp_path / "out"), "--do_eval", *COMMON])


@pytest.mark.parametrize("extra,message", [
    (["--text_columns", "nope"], "text_columns"),
    (["--label_column", "nope"], "label_column"),
    (["--task_label_names", "neg", "positive"], "label_names"),
])
def test_bad_columns_name_the_field(monkeypatch, tmp_path, tiny_dir, sentiment_files, extra, message):
    args = classification_args(tiny_dir, sentiment_files, tmp_path / "out", "--do_eval")
    for flag in ("--text_columns", "--label_column"):  # drop the defaults the extra flags replace
        if flag in extra:
            index = args.index(flag)
            del args[index : index + 2]
    with pytest.raises(ValueError, match=message):
        run_main(monkeypatch, args + extra)


def test_bad_arguments(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match="does not exist"):
        run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--train_file", str(tmp_path / "missing.jsonl"),
                               "--task_kind", "classification", "--num_labels", "2", "--output_dir", out,
                               "--do_train", *COMMON])
    with pytest.raises(ValueError, match="exactly one"):  # (no source at all runs the embedded default: test_cli)
        run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--demo_task", "rotten_tomatoes", "--train_file",
                               sentiment_files["train"], "--output_dir", out, "--do_train", *COMMON])
    with pytest.raises(ValueError, match="--label_column"):  # the data has no 'label' column: name the flag
        run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--train_file", sentiment_files["train"],
                               "--output_dir", out, "--do_train", *COMMON])
    with pytest.raises(ValueError, match="train_fraction"):
        run_main(monkeypatch, classification_args(tiny_dir, sentiment_files, out, "--train_fraction", "0"))
    with pytest.raises(ValueError, match="seq2seq"):
        run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--train_file", sentiment_files["train"],
                               "--task_kind", "seq2seq", "--output_dir", out, "--do_train", *COMMON])
    with pytest.raises(ValueError, match="do_predict"):  # no test split
        run_main(monkeypatch, ["--model_name_or_path", tiny_dir, "--train_file", sentiment_files["train"],
                               "--task_kind", "classification", "--text_columns", "sentence", "--label_column",
                               "sentiment", "--output_dir", out, "--do_predict", *COMMON])


def test_demo_task(monkeypatch, tmp_path, tiny_dir):
    pytest.importorskip("gensim")  # the demo extra ships the newsgroups posts
    results = run_main(monkeypatch, [
        "--model_name_or_path", tiny_dir, "--demo_task", "newsgroups", "--task_name", "space_or_atheism",
        "--max_train_samples", "16", "--max_eval_samples", "8", "--max_seq_length", "32", "--output_dir",
        str(tmp_path / "out"), "--do_train", "--do_eval", "--max_steps", "1", *COMMON])
    assert results["train_examples"] == 16 and results["eval_samples"] == 8
    saved = MultiTaskModel.from_pretrained(str(tmp_path / "out"))
    assert saved.task_names == ["space_or_atheism"]
    assert saved.config.task("space_or_atheism")["label_names"] == ["alt.atheism", "sci.space"]


def test_baselines_are_fitted_on_train():
    task = TaskSpec(name="t", kind="classification", label_names=["neg", "pos"], data_files="unused.jsonl")
    train = Dataset.from_dict({"text": ["a"] * 3, "label": ["pos", "pos", "neg"]})
    evaluation = Dataset.from_dict({"text": ["a"] * 4, "label": ["neg", "neg", "neg", "pos"]})
    # the train majority (pos) is right on 1 of 4 evaluation rows; the evaluation's own majority would score 3/4
    assert baseline_metrics(task, train, evaluation) == {"majority_baseline": 0.25}
    assert baseline_metrics(task, None, evaluation) == {"majority_baseline": 0.75}
    regression = TaskSpec(name="r", kind="regression", data_files="unused.jsonl")
    train = Dataset.from_dict({"text": ["a"] * 2, "label": [1.0, 3.0]})
    evaluation = Dataset.from_dict({"text": ["a"] * 2, "label": [0.0, 2.0]})
    assert baseline_metrics(regression, train, evaluation) == {"mean_baseline_mse": pytest.approx(2.0)}
    qa = TaskSpec(name="q", kind="extractive_qa", data_files="unused.jsonl")
    evaluation = Dataset.from_dict({"question": ["q"] * 3, "context": ["ab"] * 3, "answers": [
        {"text": [], "answer_start": []}, {"text": ["b"], "answer_start": [1]}, {"text": [], "answer_start": []}]})
    assert baseline_metrics(qa, None, evaluation) == {"null_answer_baseline": pytest.approx(2 / 3)}


def test_load_best_model_at_end_restores_the_best_head(monkeypatch, tmp_path, tiny_dir, sentiment_files):
    out = tmp_path / "out"
    run_main(monkeypatch, classification_args(
        tiny_dir, sentiment_files, out, "--do_train", "--max_steps", "4", "--learning_rate", "1e-2",
        "--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "steps", "--save_steps", "2",
        "--load_best_model_at_end", "--metric_for_best_model", "accuracy", "--save_total_limit", "2"))
    best = json.loads((out / "trainer_state.json").read_text())["best_model_checkpoint"]
    # the accuracy ties (majority class) at steps 2 and 4, and a tie keeps the earlier checkpoint: the final weights
    # differ from the best ones, so Trainer's reload (body) and the script's (head) are both visible
    assert best.endswith("checkpoint-2")
    for name in ("model.safetensors", HEADS_WEIGHTS_NAME):
        final, expected = load_file(str(out / name)), load_file(str(Path(best) / name))
        for key in expected:
            torch.testing.assert_close(final[key], expected[key], rtol=0, atol=0)
