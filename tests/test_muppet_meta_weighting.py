"""MUPPET with task_weighting="meta" (end-task-aware pre-finetuning, issue #34): the META-TARTAN rule over the
mixture's tasks, shared with TartanTrainer (hf_aux.tartan.weighting). The rule on constructed gradients, the wiring
(w moves by exactly eta * cos for the drawn tasks, only for them; the sub-batch weights K * alpha), exact resume,
the files beside checkpoints, and the refusals."""

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
from tiny import COMMAND_WORDS, StopAfter, tiny_config, tiny_tokenizer, write_command_data
from transformers import AutoModel

from hf_aux.tasks.data import tokenize_task
from hf_aux.modeling.multitask import MultiTaskModel, MultiTaskModelConfig
from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer
from hf_aux.tasks.spec import TaskSpec
from hf_aux.tartan.weighting import meta_update

WORDS = "good bad movie film great terrible fun boring love hate".split()


def _rows(n, seed, rule):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(5)]
        rows.append({"text": " ".join(words), "label": rule(words, rng)})
    return rows


def _task(name, n, seed, rule, num_labels=2):
    return TaskSpec(name=name, kind="classification", num_labels=num_labels,
                    dataset=datasets.Dataset.from_list(_rows(n, seed, rule)))


def _setup(tmp_path, init_seed=0, end=True, **config):
    tokenizer = tiny_tokenizer()
    tasks = [_task("sent", 32, 0, lambda w, r: int("good" in w)),
             _task("noise", 32, 1, lambda w, r: r.randrange(3), num_labels=3),
             _task("movie", 32, 2, lambda w, r: int("movie" in w))]
    end_task = _task("end", 24, 3, lambda w, r: int("good" in w))
    train = {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=16) for t in tasks}
    end_rows = tokenize_task(end_task, end_task.dataset, tokenizer, max_length=16)
    torch.manual_seed(init_seed)
    body = AutoModel.from_config(tiny_config("bert", tokenizer))
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=tasks), body=body)
    defaults = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=4, learning_rate=1e-3,
                    report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
                    task_weighting="meta", meta_tasks_per_step=2, task_weight_lr=0.5, meta_head_steps=3)
    defaults.update(config)
    args = MuppetConfig(**defaults)
    extra = dict(end_task=end_task, end_task_dataset=end_rows) if end else {}
    return tokenizer, model, args, train, extra


def test_the_rule_moves_weight_toward_tasks_whose_gradient_agrees_with_the_end_task():
    """Constructed gradients: task 0 points along g_meta, task 1 against it, task 2 orthogonal. w_k += eta cos_k,
    alpha = softmax(w); a sampled subset moves only its own weights."""
    g_meta = [torch.tensor([1.0, 0.0]), torch.tensor([[2.0]])]
    along = [torch.tensor([2.0, 0.0]), torch.tensor([[4.0]])]
    against = [torch.tensor([-1.0, 0.0]), torch.tensor([[-2.0]])]
    orthogonal = [torch.tensor([0.0, 3.0]), None]  # a parameter the task does not reach counts as zero
    weights = torch.zeros(3)
    for _ in range(3):
        weights, alphas, cosines = meta_update(weights, g_meta, [along, against, orthogonal], lr=0.5)
    torch.testing.assert_close(cosines, torch.tensor([1.0, -1.0, 0.0]))
    torch.testing.assert_close(weights, torch.tensor([1.5, -1.5, 0.0]))
    expected = torch.exp(torch.tensor([1.5, -1.5, 0.0]))
    torch.testing.assert_close(alphas, expected / expected.sum())
    assert alphas[0] > alphas[2] > alphas[1]
    # a subset (tasks 2 and 0, in that order): task 1 keeps its weight
    weights, _, cosines = meta_update(torch.zeros(3), g_meta, [orthogonal, along], lr=0.5, tasks=[2, 0])
    torch.testing.assert_close(weights, torch.tensor([0.5, 0.0, 0.0]))
    with pytest.raises(ValueError, match="2 task gradients for 1 task indices"):
        meta_update(torch.zeros(3), g_meta, [orthogonal, along], lr=0.5, tasks=[2])


def test_weights_move_by_eta_times_the_logged_cosines_for_the_drawn_tasks_only(tmp_path):
    tokenizer, model, args, train, extra = _setup(tmp_path, max_steps=3)
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, **extra)
    trainer.train()
    history = trainer.task_weights_state.history
    assert [row[0] for row in history] == [1, 2, 3]
    logs = [h for h in trainer.state.log_history if "loss" in h]
    weights = torch.full((3,), 1 / 3)
    names = ["sent", "noise", "movie"]
    for row, log in zip(history, logs):
        drawn = [k for k, name in enumerate(names) if f"cos/{name}" in log]
        assert len(drawn) == 2  # meta_tasks_per_step
        cos = torch.zeros(3)
        for k in drawn:
            cos[k] = log[f"cos/{names[k]}"]
        weights = weights + 0.5 * cos
        torch.testing.assert_close(torch.tensor(row[1:]), torch.softmax(weights, 0), atol=1e-5, rtol=0)
        assert log["alpha/sent"] == pytest.approx(row[1], abs=1e-6) and "meta_loss" in log
    torch.testing.assert_close(torch.tensor(trainer.task_weights_state.weights), weights, atol=1e-5, rtol=0)
    assert max(abs(a - 1 / 3) for a in history[-1][1:]) > 1e-3  # the weights moved


def test_at_uniform_weights_an_update_is_uniform_muppets_and_moved_weights_change_it(tmp_path):
    """Each sub-batch's loss is multiplied by K * alpha_k: 1 at uniform weights, so with a vanishing eta the meta
    mode trains exactly as uniform MUPPET (its weight updates draw from streams of their own and leave Trainer's
    batches and dropout alone); with a real eta the parameters differ."""
    common = dict(max_steps=3, gradient_accumulation_steps=2)
    tokenizer, uniform, args, train, _ = _setup(tmp_path / "u", task_weighting="uniform", **common)
    MuppetTrainer(model=uniform, args=args, train_dataset=train, processing_class=tokenizer).train()
    tokenizer, tiny_eta, args, train, extra = _setup(tmp_path / "t", task_weight_lr=1e-9, **common)
    MuppetTrainer(model=tiny_eta, args=args, train_dataset=train, processing_class=tokenizer, **extra).train()
    tokenizer, moved, args, train, extra = _setup(tmp_path / "m", task_weight_lr=5.0, **common)
    MuppetTrainer(model=moved, args=args, train_dataset=train, processing_class=tokenizer, **extra).train()
    reference = uniform.state_dict()
    for name, value in tiny_eta.state_dict().items():
        torch.testing.assert_close(value, reference[name], atol=1e-6, rtol=0, msg=name)
    assert max((value - reference[name]).abs().max().item() for name, value in moved.state_dict().items()) > 1e-5


def test_resume_is_exact_and_checkpoints_carry_the_weights(tmp_path):
    common = dict(max_steps=4, save_strategy="steps", save_steps=2, gradient_accumulation_steps=2,
                  task_weight_update_steps=1)
    tokenizer, straight, args, train, extra = _setup(tmp_path / "a", **common)
    whole = MuppetTrainer(model=straight, args=args, train_dataset=train, processing_class=tokenizer, **extra)
    whole.train()

    tokenizer, first, args, train, extra = _setup(tmp_path / "b", **common)
    MuppetTrainer(model=first, args=args, train_dataset=train, processing_class=tokenizer,
                  callbacks=[StopAfter(2)], **extra).train()
    checkpoint = os.path.join(args.output_dir, "checkpoint-2")
    saved = json.load(open(os.path.join(checkpoint, "task_weights.json")))
    assert saved["end_task"] == "end" and saved["tasks"] == ["sent", "noise", "movie"] and saved["steps"] == [1, 2]
    assert os.path.getsize(os.path.join(checkpoint, "task_weights.png")) > 1000
    tokenizer, resumed, args, train, extra = _setup(tmp_path / "b", init_seed=1, **common)
    again = MuppetTrainer(model=resumed, args=args, train_dataset=train, processing_class=tokenizer, **extra)
    again.train(resume_from_checkpoint=checkpoint)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    for row_a, row_b in zip(whole.task_weights_state.history, again.task_weights_state.history, strict=True):
        assert row_a[0] == row_b[0] and row_a[1:] == pytest.approx(row_b[1:], abs=1e-6)
    assert again.task_weights_state.stream_draws == whole.task_weights_state.stream_draws
    # another mixture cannot resume these weights
    tokenizer, other, args, train, extra = _setup(tmp_path / "b", **common)
    del train["movie"]
    with pytest.raises(ValueError, match="the checkpoint's tasks"):
        MuppetTrainer(model=other, args=args, train_dataset=train, processing_class=tokenizer, **extra).train(
            resume_from_checkpoint=checkpoint)


def test_card_notes_and_figure_name_the_end_task(tmp_path):
    tokenizer, model, args, train, extra = _setup(tmp_path, max_steps=2)
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, **extra)
    trainer.train()
    trainer.save_model()
    trainer.create_model_card(model_name="meta-muppet")
    card = open(os.path.join(args.output_dir, "README.md")).read()
    assert "toward end" in card and "task_weights.png" in card
    assert os.path.isfile(os.path.join(args.output_dir, "task_weights.json"))


def test_refusals_name_the_setting(tmp_path):
    tokenizer, model, args, train, extra = _setup(tmp_path, end=False)
    with pytest.raises(ValueError, match="field 'task_weighting': 'meta' learns the mixture's weights toward an end"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    tokenizer, model, args, train, extra = _setup(tmp_path)
    in_mixture = _task("sent", 8, 5, lambda w, r: 0)
    with pytest.raises(ValueError, match="task 'sent': field 'end_task': the end task is also a task of the mixture"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, end_task=in_mixture,
                      end_task_dataset=extra["end_task_dataset"])
    regression = {"name": "score", "kind": "regression", "num_labels": 1}
    with pytest.raises(ValueError, match="task 'score': field 'kind': the end task .* must be a classification"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, end_task=regression,
                      end_task_dataset=extra["end_task_dataset"])
    with pytest.raises(ValueError, match="field 'end_task_dataset': needs tokenised rows"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                      end_task=extra["end_task"], end_task_dataset=datasets.Dataset.from_dict({"text": ["a", "b"]}))
    tokenizer, model, args, train, extra = _setup(tmp_path, task_weighting="uniform")
    with pytest.raises(ValueError, match="field 'end_task': an end task is only read with task_weighting='meta'"):
        MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, **extra)
    with pytest.raises(ValueError, match="MuppetConfig: field 'task_weighting': 'softmax' is not one of"):
        MuppetConfig(output_dir=str(tmp_path), task_weighting="softmax")
    with pytest.raises(ValueError, match="MuppetConfig: field 'meta_tasks_per_step': needs a positive integer"):
        MuppetConfig(output_dir=str(tmp_path), task_weighting="meta", meta_tasks_per_step=0)
    with pytest.raises(ValueError, match="MuppetConfig: field 'fp16': the META rule"):
        MuppetConfig(output_dir=str(tmp_path), task_weighting="meta", fp16=True)
    with pytest.raises(ValueError, match="MuppetConfig: field 'gradient_checkpointing_kwargs': the META rule"):
        MuppetConfig(output_dir=str(tmp_path), task_weighting="meta", gradient_checkpointing=True,
                     gradient_checkpointing_kwargs={"use_reentrant": True})


def test_lora_weights_by_the_adapters_gradients(tmp_path):
    """With LoRA the cosines are over the body's trainable parameters (the adapters), as META-TARTAN's."""
    from peft import LoraConfig

    tokenizer, model, args, train, extra = _setup(tmp_path, max_steps=2)
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                            peft_config=LoraConfig(r=2, target_modules=["query", "value"]), **extra)
    trainer.train()
    history = trainer.task_weights_state.history
    assert len(history) == 2 and max(abs(a - 1 / 3) for a in history[-1][1:]) > 1e-4


# ---- the installed command ----------------------------------------------------------------------------------------
HF_AUX = str(Path(sys.executable).parent / "hf-aux")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def command_data(tmp_path_factory):
    """write_command_data's mixture (sent: train.jsonl, choice) and model, plus end.yaml: a task on rows of its own,
    and in_mixture.yaml: the mixture's sent rows under another name."""
    folder = write_command_data(tmp_path_factory.mktemp("meta_cmd"), "hf-aux-tests/tiny-bert")
    rng = random.Random(7)
    rows = [{"text": " ".join(rng.choices(COMMAND_WORDS, k=6)), "label": rng.choice(["neg", "pos"])} for _ in range(40)]
    (folder / "end.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "end.yaml").write_text(f"tasks:\n  - name: reviews\n    data_files: {folder / 'end.jsonl'}\n")
    (folder / "in_mixture.yaml").write_text(f"tasks:\n  - name: other_name\n    kind: classification\n"
                                            f"    num_labels: 2\n    data_files: {folder / 'train.jsonl'}\n")
    return folder


def _hf_aux(*args, cwd):
    return subprocess.run([HF_AUX, "muppet", *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=600)


def test_the_command_learns_the_mixture_weights_toward_the_end_task(command_data, tmp_path):
    out = tmp_path / "out"
    done = _hf_aux("--mixture_file", command_data / "mixture.json", "--model_name_or_path",
                   command_data / "tiny_bert", "--task_weighting", "meta", "--end_task", command_data / "end.yaml",
                   "--end_task_train_fraction", "0.5", "--max_steps", "2", "--logging_steps", "1",
                   "--output_dir", out, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    weights = json.loads((out / "task_weights.json").read_text())
    assert weights["end_task"] == "reviews" and weights["tasks"] == ["sent", "choice"] and weights["steps"] == [1, 2]
    assert (out / "task_weights.png").is_file() and "toward reviews" in (out / "README.md").read_text()
    AutoModel.from_pretrained(out)  # plain transformers loads the pre-finetuned encoder


@pytest.mark.parametrize("args, message", [
    (["--task_weighting", "meta"], "field 'task_weighting': 'meta' needs --end_task"),
    (["--end_task", "END"], "field 'end_task': only read with --task_weighting meta"),
    (["--task_weighting", "meta", "--end_task", "IN_MIXTURE"], "is in the mixture as task 'sent' \\(same rows\\)"),
])
def test_the_command_refuses_before_any_model_is_loaded(command_data, tmp_path, args, message):
    args = [str(command_data / "end.yaml") if a == "END" else str(command_data / "in_mixture.yaml")
            if a == "IN_MIXTURE" else a for a in args]
    out = tmp_path / "out"
    done = _hf_aux("--mixture_file", command_data / "mixture.json", "--model_name_or_path",
                   command_data / "tiny_bert", *args, "--max_steps", "2", "--output_dir", out, cwd=tmp_path)
    assert done.returncode != 0
    assert re.search(message, done.stderr), done.stderr[-3000:]
    assert not (out / "checkpoint-1").exists() and not (out / "model.safetensors").exists()


def test_an_unknown_end_task_name_gets_the_closest_registry_names(command_data, tmp_path):
    done = _hf_aux("--mixture_file", command_data / "mixture.json", "--model_name_or_path",
                   command_data / "tiny_bert", "--task_weighting", "meta", "--end_task", "rotten_tomatoe",
                   "--max_steps", "2", "--output_dir", tmp_path / "out", cwd=tmp_path)
    assert done.returncode != 0
    assert "field 'end_task'" in done.stderr and "demo/rotten_tomatoes" in done.stderr, done.stderr[-3000:]
