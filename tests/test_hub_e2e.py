"""The run scripts against the local Hub server (tests/hub_server.py), end to end and in-process: a run pushes its
output folder, `snapshot_download` brings it back byte for byte, plain transformers and the method's own class load
it from the server, the card's metadata carries the metrics; a pre-seeded repository and a Hub dataset feed a run;
the token is in no pushed file, log or request body; a Hub that is down or refuses the token gives a clear error
and leaves the local files as they were; offline mode and missing repositories give errors naming the argument.

Tiny models (hidden 32, 2 layers) saved to tmp dirs, a few steps each (conftest sets one torch thread).
"""

import hashlib
import json
import logging
import random
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, snapshot_download
from tiny import WORDS, tiny_config, tiny_tokenizer
from transformers import (AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification,
                          BertForSequenceClassification)

import hf_aux.runtime.hub as hub_module
from hf_aux.runtime.hub import HubDownloadError, HubPushError, find_token_in_files
from hf_aux.amos.model import AmosModel
from hf_aux.tartan.model import TartanModel
from hub_server import DEFAULT_USER, local_hub  # noqa: F401 - `local_hub` is a fixture
from hf_aux.amos import command as run_amos
from hf_aux.finetune import command as run_finetune
from hf_aux.tartan import command as run_tartan

TOKEN = "hf_E2eTokenThatMustNeverBeSaved9876543210"
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--seed", "0"]




def table_row(text: str, task: str) -> dict:
    """The card's task-table row of `task` (its cell as the card writes it), as {column: value}."""
    lines = [line for line in text.splitlines() if line.startswith("| task |")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    row = next(line for line in text.splitlines() if line.startswith(f"| {task} |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    return {name: float(cell) if cell not in ("-", "") and name not in ("task", "kind") else cell
            for name, cell in zip(header, cells)}


def digest(folder: Path, skip=("checkpoint-", "runs/", ".hf_aux_push.json")) -> dict:  # the push record: local
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.relative_to(folder).as_posix().startswith(skip)}


def pushed_digest(hub, repo_id) -> dict:
    return {path: hashlib.sha256(content).hexdigest() for path, content in hub.files(repo_id).items()}


def assert_token_nowhere(hub, repo_id, output_dir, logs: str):
    assert [path for path, content in hub.files(repo_id).items() if TOKEN.encode() in content] == []
    assert find_token_in_files(output_dir, TOKEN) == []  # checkpoints, trainer_state, training_args.bin, card
    assert not any(TOKEN.encode() in r.body for r in hub.requests)
    assert TOKEN not in logs


def sentiment_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["neg", "pos"])
        words = rng.choices(WORDS[:40], k=5) + ["good" if label == "pos" else "bad"]
        rows.append({"text": " ".join(words), "label": label})
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ---- AMOS: push, download, load with AutoModel and AmosModel, card metrics ----------------------------------------
def amos_args(tmp_path, out, *extra):
    tokenizer_dir = tmp_path / "tokenizer"
    if not tokenizer_dir.exists():
        tiny_tokenizer().save_pretrained(tokenizer_dir)
        rng = random.Random(0)
        (tmp_path / "text.txt").write_text("".join(" ".join(rng.choices(WORDS, k=12)) + "\n" for _ in range(60)))
    return ["--train_file", str(tmp_path / "text.txt"), "--tokenizer_name", str(tokenizer_dir),
            "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2",
            "--intermediate_size", "64", "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2",
            "--max_seq_length", "16", "--validation_split_percentage", "20", "--per_device_train_batch_size", "8",
            "--per_device_eval_batch_size", "8", "--max_steps", "4", "--logging_steps", "1",
            "--output_dir", str(out), *QUIET, *extra]


def test_run_amos_pushes_its_output_folder_and_it_loads_back_from_the_hub(local_hub, tmp_path, monkeypatch, caplog,
                                                                         capsys):
    caplog.set_level(logging.INFO)
    local_hub.accept_only(TOKEN)
    repo = f"{DEFAULT_USER}/amos-tiny"
    out = tmp_path / "amos"
    monkeypatch.setattr(sys, "argv", ["run_amos.py", *amos_args(
        tmp_path, out, "--do_train", "--do_eval", "--save_steps", "2", "--push_to_hub", "--hub_model_id", repo,
        "--hub_token", TOKEN, "--hub_strategy", "checkpoint")])
    results = run_amos.main()

    # What was pushed is the output folder (save_pretrained's files, tokenizer, card, figures, results), byte for byte,
    # plus the last checkpoint that hub_strategy=checkpoint pushed during training.
    local, pushed = digest(out), pushed_digest(local_hub, repo)
    assert {"config.json", "model.safetensors", "generator/model.safetensors", "README.md", "loss_curve.png",
            "mixture_weights.png", "tokenizer_config.json", "eval_results.json"} <= set(local)
    assert {path: pushed[path] for path in local} == local
    assert set(pushed) - set(local) - {".gitattributes"} == {p for p in pushed if p.startswith("last-checkpoint/")}
    assert "last-checkpoint/trainer_state.json" in pushed
    assert_token_nowhere(local_hub, repo, out, caplog.text + capsys.readouterr().out)

    # snapshot_download brings the same bytes back; plain transformers and AmosModel load them through the server.
    downloaded = Path(snapshot_download(repo))
    assert digest(downloaded, skip=("last-checkpoint/", ".gitattributes")) == local
    local_model = AmosModel.from_pretrained(str(out)).eval()
    hub_model = AmosModel.from_pretrained(repo).eval()
    ids = torch.tensor([[2, 10, 20, 30, 40, 3]])
    assert all(torch.equal(a, b) for a, b in zip(local_model.state_dict().values(), hub_model.state_dict().values()))
    discriminator = AutoModelForPreTraining.from_pretrained(repo).eval()  # ElectraForPreTraining, RTD head included
    with torch.no_grad():
        logits = discriminator(input_ids=ids).logits
        assert torch.equal(logits, AutoModelForPreTraining.from_pretrained(out).eval()(input_ids=ids).logits)
        assert torch.allclose(logits, local_model.discriminator(input_ids=ids).logits, atol=1e-6)
        assert torch.equal(AutoModel.from_pretrained(repo)(input_ids=ids).last_hidden_state,
                           AutoModel.from_pretrained(out)(input_ids=ids).last_hidden_state)

    # The card: metadata parses, carries the evaluation metrics and the hf_aux tags; the figures are shown.
    card = ModelCard.load(downloaded / "README.md")
    assert card.data.tags[:2] == ["hf_aux", "amos"] and card.data.library_name == "transformers"
    # local text: no model-index (its dataset ids are Hub ids), the metrics in the task table with their source
    assert card.data.eval_results is None and card.data.pipeline_tag == "feature-extraction"
    eval_results = json.loads((out / "eval_results.json").read_text())
    assert table_row(card.text, "replaced_token_detection (local data: text.txt)")[
        "accuracy_replaced"] == pytest.approx(eval_results["eval_rtd_accuracy_replaced"], rel=1e-5)
    assert table_row(card.text, "mlm_layer_2 (local data: text.txt)")["loss"] == pytest.approx(
        eval_results["eval_mlm_loss/layer_2"], rel=1e-5)
    assert "![Mean mixture weight of each generator MLM head over training](mixture_weights.png)" in card.text
    assert f'AmosModel.from_pretrained("{repo}")' in card.text
    assert results["eval_rtd_loss"] == eval_results["eval_rtd_loss"]


# ---- TARTAN: a pre-seeded model repository and a Hub dataset feed the run; it pushes; plain classes load it -------
def test_run_tartan_from_hub_model_and_dataset_pushes_a_loadable_classifier(local_hub, tmp_path, tiny_bert_dir,
                                                                         caplog, capsys):
    caplog.set_level(logging.INFO)
    base, data, repo = f"{DEFAULT_USER}/tiny-bert", f"{DEFAULT_USER}/tiny-sentiment", f"{DEFAULT_USER}/tartan-tiny"
    local_hub.seed(base, tiny_bert_dir)
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "train.jsonl", sentiment_rows(48, seed=1))
    write_jsonl(tmp_path / "data" / "validation.jsonl", sentiment_rows(16, seed=2))
    local_hub.seed(data, tmp_path / "data", repo_type="dataset")
    local_hub.accept_only(TOKEN)
    out = tmp_path / "tartan"
    results = run_tartan.main(*run_tartan.parse_args([
        "--model_name_or_path", base, "--dataset_name", data, "--auxiliary", "tapt=tapt", "--mode", "meta",
        "--meta_head_steps", "2", "--max_seq_length", "16", "--do_train", "--do_eval", "--max_steps", "3",
        "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16", "--logging_steps", "1",
        "--save_strategy", "no", "--output_dir", str(out), "--push_to_hub", "--hub_model_id", repo,
        "--hub_token", TOKEN, *QUIET]))

    local, pushed = digest(out), pushed_digest(local_hub, repo)
    assert {"config.json", "model.safetensors", "tartan_heads.safetensors", "tartan_config.json", "README.md",
            "loss_curve.png", "task_weights.png", "task_weights.json", "training_args.bin"} <= set(local)
    assert set(pushed) == set(local) | {".gitattributes"} and {p: pushed[p] for p in local} == local
    assert_token_nowhere(local_hub, repo, out, caplog.text + capsys.readouterr().out)

    # The starting weights came from the seeded repository: the body before training was the seeded model's.
    assert any(r.method == "GET" and r.path.startswith(f"/{base}/resolve/") and r.path.endswith("/model.safetensors")
               for r in local_hub.requests)
    assert any(r.path.startswith(f"/api/datasets/{data}") for r in local_hub.requests)

    classifier = AutoModelForSequenceClassification.from_pretrained(repo).eval()
    assert type(classifier) is BertForSequenceClassification
    assert classifier.config.id2label == {0: "neg", 1: "pos"}
    tartan = TartanModel.from_pretrained(snapshot_download(repo))
    local_tartan = TartanModel.from_pretrained(str(out))
    assert tartan.auxiliary_tasks == ["tapt"]
    for (name, a), b in zip(tartan.state_dict().items(), local_tartan.state_dict().values()):
        assert torch.equal(a, b), name
    seeded = AutoModel.from_pretrained(base)
    assert not torch.equal(seeded.embeddings.word_embeddings.weight,
                           classifier.bert.embeddings.word_embeddings.weight)  # training moved it

    card = ModelCard(local_hub.files(repo)["README.md"].decode())
    assert card.data.base_model == base and card.data.datasets == [data]
    metrics = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert metrics[("tiny-sentiment", "accuracy")] == results["eval_accuracy"]
    assert metrics[("tiny-sentiment", "macro_f1")] == results["eval_macro_f1"]
    assert "](task_weights.png)" in card.text and "final task weights: end_task" in card.text


# ---- run_finetune: token safety with a plain Trainer; failures; offline mode; missing repositories -----------------
def finetune_args(model, out, files, *extra):
    return ["--model_name_or_path", str(model), "--train_file", str(files["train"]),
            "--validation_file", str(files["validation"]), "--task_kind", "classification",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8", "--logging_steps", "1",
            "--output_dir", str(out), *QUIET, *extra]


@pytest.fixture
def sentiment_files(tmp_path):
    return {"train": write_jsonl(tmp_path / "train.jsonl", sentiment_rows(24, seed=3)),
            "validation": write_jsonl(tmp_path / "validation.jsonl", sentiment_rows(8, seed=4))}


def test_run_finetune_pushes_checkpoints_and_the_final_folder_without_the_token(local_hub, tmp_path, tiny_bert_dir,
                                                                                sentiment_files, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    local_hub.accept_only(TOKEN)
    repo, out = f"{DEFAULT_USER}/ft-tiny", tmp_path / "ft"
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *finetune_args(
        tiny_bert_dir, out, sentiment_files, "--do_train", "--do_eval", "--max_steps", "2", "--save_steps", "1",
        "--push_to_hub", "--hub_model_id", repo, "--hub_token", TOKEN, "--hub_strategy", "checkpoint")])
    results = run_finetune.main()
    pushed = pushed_digest(local_hub, repo)
    assert "last-checkpoint/training_args.bin" in pushed and "training_args.bin" in pushed
    assert {p: pushed[p] for p in digest(out)} == digest(out)
    assert_token_nowhere(local_hub, repo, out, caplog.text)
    saved = torch.load(out / "training_args.bin", weights_only=False)
    assert saved.hub_token is None and saved.hub_model_id == repo and saved.max_steps == 2
    card = ModelCard.load(out / "README.md")
    # a classification task: the folder is a whole sequence classifier (hf_aux.modeling.export)
    assert card.data.tags[:2] == ["hf_aux", "finetune"] and card.data.pipeline_tag == "text-classification"
    assert card.data.eval_results is None  # local files: the metrics are in the task table, named with the files
    row = table_row(card.text, "task (local data: train.jsonl, validation.jsonl)")
    assert row["accuracy"] == pytest.approx(results["eval_accuracy"], rel=1e-5) and "](loss_curve.png)" in card.text


def test_run_finetune_writes_the_card_without_pushing(local_hub, tmp_path, tiny_bert_dir, sentiment_files,
                                                      monkeypatch):
    out = tmp_path / "ft"
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *finetune_args(
        tiny_bert_dir, out, sentiment_files, "--do_train", "--do_eval", "--max_steps", "1", "--save_strategy", "no")])
    run_finetune.main()
    assert (out / "README.md").is_file() and (out / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert local_hub.requests == []  # no --push_to_hub: nothing was sent


def test_a_finished_run_is_pushed_later_without_training(local_hub, tmp_path, tiny_bert_dir, sentiment_files,
                                                          monkeypatch, capsys):
    """"I forgot --push_to_hub": the same command again with it pushes the finished run (model, card, results)
    without a training step; the weights stay as they were; a third run with nothing new does nothing."""
    local_hub.accept_only(TOKEN)
    repo, out = f"{DEFAULT_USER}/pushed-later", tmp_path / "ft"
    argv = finetune_args(tiny_bert_dir, out, sentiment_files, "--do_train", "--do_eval", "--max_steps", "2",
                         "--save_strategy", "no")
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *argv])
    run_finetune.main()
    trained = digest(out)
    assert local_hub.requests == []
    push = [*argv, "--push_to_hub", "--hub_model_id", repo, "--hub_token", TOKEN]
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *push])
    capsys.readouterr()
    run_finetune.main()
    assert "finishing it without training: push" in capsys.readouterr().out
    pushed = pushed_digest(local_hub, repo)
    for name in ("model.safetensors", "multitask_heads.safetensors", "train_results.json", "trainer_state.json"):
        assert pushed[name] == trained[name] == digest(out)[name], name
    assert {"README.md", "eval_results.json", "config.json"} <= set(pushed)
    assert pushed["README.md"] == digest(out)["README.md"]  # the card written while finishing went up with it
    commits = len(local_hub.requests)
    run_finetune.main()  # pushed already, to the same repository: nothing to do
    assert "nothing to do" in capsys.readouterr().out and len(local_hub.requests) == commits


@pytest.mark.parametrize("report_to", [["tensorboard"], ["none"]])
def test_tensorboard_logs_go_up_when_the_run_reported_to_tensorboard(local_hub, tmp_path, report_to):
    """The Hub's training-metrics tab reads runs/ (transformers' default TensorBoard folder): pushed when
    report_to includes tensorboard, as Trainer's own push does; left out otherwise. (The event file is written by
    hand: tensorboard is not among the test dependencies.)"""
    from hf_aux.runtime.hub import push_folder_to_hub, push_ignore_patterns

    local_hub.accept_only(TOKEN)
    folder = tmp_path / "out"
    (folder / "runs" / "Nov25_host").mkdir(parents=True)
    (folder / "runs" / "Nov25_host" / "events.out.tfevents.1.host").write_bytes(b"\x00event")
    (folder / "config.json").write_text("{}")
    repo = f"{DEFAULT_USER}/tb-{report_to[0]}"
    push_folder_to_hub(folder, repo, token=TOKEN, ignore_patterns=push_ignore_patterns(report_to))
    pushed = set(local_hub.files(repo))
    assert ("runs/Nov25_host/events.out.tfevents.1.host" in pushed) == (report_to == ["tensorboard"])
    assert "config.json" in pushed and push_ignore_patterns("all") == push_ignore_patterns(["tensorboard"])


@pytest.mark.parametrize("failure", ["server_down", "rejected_token"])
def test_hub_failure_at_the_start_is_clear_and_keeps_the_checkpoints(local_hub, tmp_path, tiny_bert_dir,
                                                                     sentiment_files, monkeypatch, failure):
    out = tmp_path / "ft"
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *finetune_args(
        tiny_bert_dir, out, sentiment_files, "--do_train", "--max_steps", "2", "--save_steps", "1")])
    run_finetune.main()  # an earlier run left checkpoints behind
    before = digest(out, skip=())
    assert any(path.startswith("checkpoint-2/") for path in before)
    if failure == "server_down":
        local_hub.stop()
        expected = "could not connect to http://127.0.0.1"
    else:
        local_hub.accept_only("hf_some_other_token")
        expected = "rejected the token \\(401"
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *finetune_args(
        tiny_bert_dir, out, sentiment_files, "--do_train", "--max_steps", "4", "--save_steps", "1", "--push_to_hub",
        "--hub_model_id", f"{DEFAULT_USER}/never", "--hub_token", TOKEN)])
    with pytest.raises(HubPushError, match=expected) as error:
        run_finetune.main()
    assert "Nothing was trained" in str(error.value) and str(out) in str(error.value)
    assert TOKEN not in str(error.value)
    assert digest(out, skip=()) == before


def test_failed_final_push_keeps_the_saved_model_and_says_what_failed(local_hub, tmp_path, tiny_bert_dir,
                                                                      sentiment_files, monkeypatch):
    out = tmp_path / "ft"
    real_push = hub_module.push_trainer_output

    def push_after_the_server_went_down(trainer):
        local_hub.stop()
        return real_push(trainer)

    # the end-of-run step (hf_aux.cli.run.finish_run) looks the push up in hf_aux.runtime.hub when it runs
    monkeypatch.setattr(hub_module, "push_trainer_output", push_after_the_server_went_down)
    monkeypatch.setattr(sys, "argv", ["run_finetune.py", *finetune_args(
        tiny_bert_dir, out, sentiment_files, "--do_train", "--do_eval", "--max_steps", "2", "--save_strategy", "no",
        "--push_to_hub", "--hub_model_id", f"{DEFAULT_USER}/late-failure", "--hub_token", TOKEN)])
    # the clients' open keep-alive connection breaks, or a new one is refused
    with pytest.raises(HubPushError, match="lost the connection to|could not connect to") as error:
        run_finetune.main()
    assert "intact" in str(error.value) and f"hf upload {DEFAULT_USER}/late-failure" in str(error.value)
    assert {"model.safetensors", "README.md", "eval_results.json"} <= set(digest(out))
    assert AutoModel.from_pretrained(out).config.hidden_size == 32


def test_offline_mode_and_missing_repositories_name_the_argument(local_hub, tmp_path, tiny_bert_dir, sentiment_files,
                                                                monkeypatch):
    from huggingface_hub import constants

    repo = f"{DEFAULT_USER}/cached-bert"
    local_hub.seed(repo, tiny_bert_dir)
    args = ["--max_steps", "1", "--do_train", "--save_strategy", "no"]
    with pytest.raises(HubDownloadError, match=f"field 'model_name_or_path': cannot load '{DEFAULT_USER}/nope': "
                                               "there is no repository"):
        run_finetune.main(*run_finetune.parse_args(finetune_args(f"{DEFAULT_USER}/nope", tmp_path / "a",
                                                                 sentiment_files, *args)))
    with pytest.raises(HubDownloadError, match="field 'dataset_name': cannot load .*there is no repository"):
        run_finetune.main(*run_finetune.parse_args(
            ["--model_name_or_path", str(tiny_bert_dir), "--dataset_name", f"{DEFAULT_USER}/no-data",
             "--task_kind", "classification", "--output_dir", str(tmp_path / "b"), *QUIET, *args]))
    # An AMOS checkpoint id is resolved by snapshot_download: the same clear error.
    with pytest.raises(HubDownloadError, match="field 'model_name_or_path'.*there is no repository"):
        run_amos.main(*run_amos.parse_args(amos_args(tmp_path, tmp_path / "c", "--do_train", "--model_name_or_path",
                                                     f"{DEFAULT_USER}/no-amos")))

    # Online once: the repository lands in the cache. Offline (HF_HUB_OFFLINE=1): the cached copy is used without a
    # single request; an uncached id fails saying offline mode is on.
    run_finetune.main(*run_finetune.parse_args(finetune_args(repo, tmp_path / "online", sentiment_files, *args)))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sent = len(local_hub.requests)
    run_finetune.main(*run_finetune.parse_args(finetune_args(repo, tmp_path / "offline", sentiment_files, *args)))
    assert len(local_hub.requests) == sent
    with pytest.raises(HubDownloadError, match="offline mode is on \\(HF_HUB_OFFLINE=1\\)"):
        run_finetune.main(*run_finetune.parse_args(finetune_args(f"{DEFAULT_USER}/never-downloaded",
                                                                 tmp_path / "d", sentiment_files, *args)))


# ---- the card helpers the scripts use ------------------------------------------------------------------------------
def test_task_metrics_and_logged_series_pick_what_a_card_shows():
    from hf_aux.cards.model_card import task_metrics
    from hf_aux.cards.plots import _is_loss_key, logged_series

    results = {"train_loss": 0.9, "eval_accuracy": 0.75, "eval_loss": 0.5, "eval_runtime": 1.2, "eval_samples": 8,
               "eval_f1": float("nan"), "test_accuracy": 0.5}
    assert task_metrics(results) == ("validation", {"accuracy": 0.75, "loss": 0.5})
    assert task_metrics({"test_accuracy": 0.5, "test_epoch": 1.0}) == ("test", {"accuracy": 0.5})
    keys = ["loss", "eval_loss", "rtd_loss", "loss_tapt", "mlm_loss/layer_2", "train_loss", "lossy", "alpha_tapt"]
    assert [k for k in keys if _is_loss_key(k)] == ["loss", "eval_loss", "rtd_loss", "loss_tapt", "mlm_loss/layer_2"]
    history = [{"mixture_weight/layer_1": 0.25, "mixture_weight/layer_2": 0.75, "step": 1},
               {"mixture_weight/layer_1": 0.5, "step": 2}, {"mixture_weight/layer_1": 0.1}]  # no step: skipped
    assert logged_series(history, "mixture_weight/") == {"layer_1": [(1, 0.25), (2, 0.5)], "layer_2": [(1, 0.75)]}
