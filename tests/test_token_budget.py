"""MUPPET's token-budget sub-batches (`max_tokens_per_batch`, hf_aux.muppet.batches.TokenBudget): the sampler's
plan by hand (every row once, within budget, fixed counts, little padding), an update under a budget is the mean
over its rows (checked against a hand computation of the gradient), resume is exact, and a checkpoint of the
fixed-size sampler is refused with the budget on. DDP disjointness: tests/test_ddp.py (job muppet:budget)."""

import collections
import json
import os

import numpy as np
import pytest
import torch
from test_muppet_trainer import _setup
from transformers import AutoModel

from hf_aux.errors import UserInputError
from hf_aux.modeling.multitask import MultiTaskModel
from hf_aux.muppet.losses import classification_loss, multiple_choice_loss, scale_losses
from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer
from hf_aux.muppet.batches import TaskBatchSampler, bucket_edges, padded_share, row_lengths


def _lengths(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(5, 200, 500), 1), (rng.integers(5, 40, 120), 1), (rng.integers(10, 30, 60), 4)]


def test_bucket_edges_pad_by_at_most_an_eighth():
    lengths = np.arange(1, 2000)
    edges = bucket_edges(lengths)
    assert (edges >= lengths).all() and ((edges - lengths) / lengths <= 1 / 8).all()
    assert bucket_edges(np.array([7, 15, 16, 17, 33, 65, 129])).tolist() == [7, 15, 16, 18, 36, 72, 144]


def test_budget_plan_uses_every_row_once_within_the_budget_with_fixed_counts():
    lengths = _lengths()
    sampler = TaskBatchSampler([500, 120, 60], 32, 4, max_tokens=1024, row_lengths=lengths, task_names=list("abc"))
    assert sampler.batch_size is None and len(sampler) == sum(sampler.counts)
    plans = [sampler.epoch_plan(epoch) for epoch in range(3)]
    for plan in plans:
        assert len(plan) == len(sampler)  # the same number of sub-batches every epoch
        for task, (task_lengths, choices) in enumerate(lengths):
            rows = np.concatenate([r for t, r in plan if t == task])
            assert sorted(rows.tolist()) == list(range(len(task_lengths)))  # every row once (T = 1)
        for task, rows in plan:
            task_lengths, choices = lengths[task]
            assert 1 <= len(rows) <= 32
            assert len(rows) * int(task_lengths[rows].max()) * choices <= 1024  # padded as the collator pads
        assert padded_share(plan, lengths) < 0.10
    as_lists = [[(t, r.tolist()) for t, r in plan] for plan in plans]
    assert as_lists[0] != as_lists[1] != as_lists[2]  # rows reshuffled every epoch
    # short rows fill big sub-batches, long rows small ones
    sizes = {task: [len(r) for t, r in plans[0] if t == task] for task in range(3)}
    assert max(sizes[1]) == 32 and min(sizes[0]) <= 6
    # today's sampler on the same rows pads far more (the measurement's baseline)
    assert padded_share(TaskBatchSampler([500, 120, 60], 16, 4).epoch_plan(0), lengths) > 0.3


def test_budget_keeps_task_shares_strategies_and_determinism():
    lengths = _lengths(1)
    make = lambda **kw: TaskBatchSampler([500, 120, 60], 16, 4, max_tokens=512, row_lengths=lengths,  # noqa: E731
                                         seed=3, **kw)
    assert list(make()) == list(make())
    # heterogeneous updates span several tasks wherever the other tasks have a sub-batch to give: the long-row task
    # takes 129 small sub-batches of 147, so 37 updates can have at most 18 with another task
    sampler = make()
    plan = sampler.epoch_plan(0)
    updates = [plan[i:i + 4] for i in range(0, len(plan), 4)]
    single = sum(len({t for t, _ in u}) < 2 for u in updates)
    assert sampler.counts == [129, 8, 10] and single == len(updates) - (len(plan) - max(sampler.counts)) == 19
    # temperature: rows per epoch proportional to n ** (1 / T), the same total up to rounding (680 / 3 each)
    hot = make(temperature=1e6).epoch_plan(0)
    rows = collections.Counter()
    for task, r in hot:
        rows[task] += len(r)
    assert [rows[t] for t in range(3)] == [227, 227, 227]
    home = make(strategy="dataset_homogeneous").epoch_plan(0)
    assert [t for t, _ in home] == sorted(t for t, _ in home)


def test_budget_errors_name_the_task_and_the_field():
    too_small = r"task 'c': field 'max_tokens_per_batch': 199 tokens .*60 tokens x 4 choices.*at least 240"
    with pytest.raises(UserInputError, match=too_small):
        TaskBatchSampler([2, 2], 16, 4, max_tokens=199, row_lengths=[(np.array([9, 199]), 1), (np.array([9, 60]), 4)],
                         task_names=["a", "c"])
    with pytest.raises(ValueError, match="row_lengths"):
        TaskBatchSampler([4, 4], 2, 2, max_tokens=100)
    with pytest.raises(UserInputError, match="max_tokens_per_batch"):
        MuppetConfig(output_dir="unused", max_tokens_per_batch=0, use_cpu=True)


def test_row_lengths_read_from_arrow_match_python(tmp_path):
    tokenizer, tasks, train, model, args = _setup(tmp_path)
    for name in ("sent", "choice"):
        data = train[name].select([3, 1, 2])  # through an indices mapping
        lengths, choices = row_lengths(data)
        rows = data["input_ids"]
        if name == "choice":
            assert choices == 3 and lengths.tolist() == [max(len(c) for c in r) for r in rows]
        else:
            assert choices == 1 and lengths.tolist() == [len(r) for r in rows]
        assert row_lengths(list(data))[0].tolist() == lengths.tolist()  # a plain list of rows


def test_an_update_under_a_budget_is_the_mean_over_its_rows(tmp_path):
    tokenizer, tasks, train, model, args = _setup(tmp_path, dropout=0.0, max_steps=1, optim="sgd", learning_rate=1.0,
                                                  weight_decay=0.0, max_grad_norm=0.0, warmup_steps=0,
                                                  lr_scheduler_type="constant", gradient_accumulation_steps=3,
                                                  per_device_train_batch_size=16, max_tokens_per_batch=60)
    train = {k: train[k] for k in ("sent", "topic", "choice")}
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    batches = list(trainer.get_train_dataloader())[:3]
    assert len({len(b["task_ids"]) for b in batches}) >= 2, "the test needs sub-batches of different sizes"
    reference = MultiTaskModel(model.config, body=AutoModel.from_config(model.config.encoder))
    reference.load_state_dict(model.state_dict())
    rows = sum(len(b["task_ids"]) for b in batches)
    total = 0.0
    for batch in batches:  # by hand: the sum of every row's eq. 1-scaled loss over the update's rows
        out = reference(**{k: v for k, v in batch.items() if k != "labels"})
        kind = reference.config.tasks[int(batch["task_ids"][0])]["kind"]
        raw, n = (multiple_choice_loss(out.logits, batch["labels"], batch["choice_mask"]) if kind == "multiple_choice"
                  else classification_loss(out.logits, batch["labels"]))
        total = total + scale_losses(raw, n).sum() / rows
    total.backward()
    expected = {name: p.detach() - p.grad for name, p in reference.named_parameters() if p.grad is not None}
    result = trainer.train()
    for name, param in model.named_parameters():
        if name in expected:
            torch.testing.assert_close(param.detach(), expected[name], atol=1e-6, rtol=1e-5)
    assert result.training_loss == pytest.approx(total.item(), rel=1e-5)  # the logged loss: the rows' mean too


def test_resume_under_a_budget_is_exact_and_a_fixed_size_checkpoint_is_refused(tmp_path):
    common = dict(max_steps=6, save_strategy="steps", save_steps=3, per_device_train_batch_size=16)
    budget = dict(common, max_tokens_per_batch=80)
    tokenizer, _, train, straight, args = _setup(tmp_path / "a", **budget)
    MuppetTrainer(model=straight, args=args, train_dataset=train, processing_class=tokenizer).train()
    tokenizer, _, train, model, args = _setup(tmp_path / "b", **budget)
    MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer).train()
    checkpoint = os.path.join(args.output_dir, "checkpoint-3")
    saved = json.load(open(os.path.join(checkpoint, "trainer_state.json")))["stateful_callbacks"]
    description = saved["TaskSamplerState"]["attributes"]["description"]
    assert description["max_tokens_per_batch"] == 80 and len(description["row_lengths_sha1"]) == 40
    tokenizer, _, train, resumed, args = _setup(tmp_path / "b", init_seed=1, **budget)
    MuppetTrainer(model=resumed, args=args, train_dataset=train, processing_class=tokenizer).train(
        resume_from_checkpoint=checkpoint)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    # a checkpoint of the fixed-size sampler, resumed with a budget, would skip the wrong rows: refused
    tokenizer, _, train, fixed, args = _setup(tmp_path / "c", **common)
    MuppetTrainer(model=fixed, args=args, train_dataset=train, processing_class=tokenizer).train()
    tokenizer, _, train, other, args = _setup(tmp_path / "c", **budget)
    with pytest.raises(ValueError, match=r"different task sampling.*max_tokens_per_batch: None -> 80"):
        MuppetTrainer(model=other, args=args, train_dataset=train, processing_class=tokenizer).train(
            resume_from_checkpoint=os.path.join(args.output_dir, "checkpoint-3"))


def test_the_benchmark_measures_padding_on_the_real_demo_mixture_at_a_matching_budget():
    """benchmarks/bench_token_budget.py as documented (padding only; its speed and quality parts train MiniLM)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_token_budget.py"), "--rows", "120"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    padding = json.loads(done.stdout.strip().splitlines()[-1])["padding"]
    fixed, budget = padding["fixed"], padding["budget"]
    assert len(padding["tasks"]) >= 2 and fixed["mean_rows"] == 16
    # the budget costs what 16 fixed rows cost per sub-batch, pads far less, and so holds more rows
    assert abs(budget["mean_computed_tokens"] / fixed["mean_computed_tokens"] - 1) < 0.1
    assert budget["padded_share"] < 0.10 < fixed["padded_share"]
    assert budget["mean_rows"] > fixed["mean_rows"]


def test_end_task_aware_weighting_under_a_budget_draws_each_tasks_mean_rows(tmp_path):
    """The meta step's g_k batches hold each task's mean rows per budget sub-batch, not the cap on rows."""
    from test_muppet_meta_weighting import _setup as meta_setup

    tokenizer, model, args, train, extra = meta_setup(tmp_path, per_device_train_batch_size=64,
                                                      max_tokens_per_batch=48, max_steps=2)
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, **extra)
    trainer.train()
    mean_rows = trainer._task_sampler.budget.mean_rows
    assert all(1 < rows < 64 for rows in mean_rows)
    streams = trainer._get_streams()
    assert [streams[f"task/{name}"].batch_size for name in train] == mean_rows
    assert streams["_meta"].batch_size == round(sum(mean_rows) / len(mean_rows))
    history = trainer.task_weights_state.history
    assert len(history) == 2 and max(abs(a - 1 / 3) for a in history[-1][1:]) > 1e-4  # the weights moved


def test_the_installed_command_trains_under_a_budget_and_names_a_budget_too_small(tmp_path):
    """`hf-aux muppet --max_tokens_per_batch` as a user starts it: it trains and reports the budget's sub-batches in
    the checkpoint's sampler description; a budget below the longest row stops before training, in one line."""
    import shutil
    import subprocess
    import sys

    from test_muppet_trainer import _rows
    from tiny import tiny_config, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    model_dir = tmp_path / "tiny-bert"
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    for name, kind, seed in (("sent", "classification", 0), ("choice", "multiple_choice", 2)):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in _rows(kind, 20, seed))
    (tmp_path / "mixture.json").write_text(json.dumps({"tasks": [
        {"name": "sent", "kind": "classification", "num_labels": 2, "data_files": "sent.jsonl"},
        {"name": "choice", "kind": "multiple_choice", "data_files": "choice.jsonl"}]}))
    command = shutil.which("hf-aux", path=os.path.dirname(sys.executable)) or shutil.which("hf-aux")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    common = [command, "muppet", "--model_name_or_path", str(model_dir),
              "--mixture_file", str(tmp_path / "mixture.json"),
              "--do_train", "--max_steps", "2", "--per_device_train_batch_size", "64", "--report_to", "none",
              "--max_seq_length", "24", "--use_cpu", "--save_steps", "2", "--disable_tqdm", "true"]
    out = tmp_path / "run"
    done = subprocess.run([*common, "--output_dir", str(out), "--max_tokens_per_batch", "60"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.load(open(out / "checkpoint-2" / "trainer_state.json"))
    assert state["stateful_callbacks"]["TaskSamplerState"]["attributes"]["description"]["max_tokens_per_batch"] == 60
    small = tmp_path / "small"
    done = subprocess.run([*common, "--output_dir", str(small), "--max_tokens_per_batch", "20"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "field 'max_tokens_per_batch': 20 tokens do not hold its longest row" in done.stderr
    assert not (small / "checkpoint-1").exists()
