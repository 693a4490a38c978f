#!/usr/bin/env python
"""MUPPET's token-budget sub-batches (`--max_tokens_per_batch`) against today's fixed-size sub-batches on the real
demo mixture (hf-aux muppet's 5 tasks, tokenised by the command's own code at `--max_seq_length`, default 256).

1. Padding (no training, instant): the share of computed tokens that are padding in one epoch of each sampler, and
   the budget that gives the same mean computed tokens per sub-batch as `--batch` fixed rows (found by bisection),
   so both samplers cost the same per update.
2. Speed (`--rounds N`): MuppetTrainer on all-MiniLM-L6-v2, `--warmup` then `--steps` updates of each sampler,
   every run a process of its own, interleaved (fixed, budget, budget, fixed, ...); per run the rows (examples) per
   second of wall time over the measured updates and the process's peak RSS. The ratio is of the medians.

3. Quality (`--quality_seeds 0 1 2`): the installed `hf-aux muppet` demo job at `--max_seq_length`, `--quality_steps`
   updates, once per sampler and seed (interleaved), each run's validation metrics (the command's own evaluation)
   cached in `--quality_json` as it finishes (a rerun continues); per task, budget minus fixed with Welch's 95%
   interval over the seeds, Benjamini-Hochberg q over the tasks.

    python benchmarks/bench_token_budget.py                       # padding only
    python benchmarks/bench_token_budget.py --rounds 3 --steps 6  # and the speed ratio (about 15 min on 2 cores)
    python benchmarks/bench_token_budget.py --quality_seeds 0 1 2 --runs_dir /tmp/tb   # about 80 min on 2 cores

The last line of output is one JSON object (the figures in docs/muppet_measurements.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from hf_aux.muppet.batches import TaskBatchSampler, padded_share, row_lengths

HERE = os.path.dirname(os.path.abspath(__file__))


def demo_train_data(max_seq_length: int, rows: int):
    """The demo mixture's tokenised train splits as `hf-aux muppet` builds them: its own argument parsing (the demo
    config's tasks and seed) and loading functions."""
    from transformers import AutoTokenizer

    from hf_aux.muppet.command import load_tasks, parse_args
    from hf_aux.tasks.data import tokenize_task
    from hf_aux.tasks.demo import minilm_path
    from hf_aux.tasks.loading import load_task_splits

    _, data_args, training_args, _ = parse_args(["--output_dir", tempfile.gettempdir(), "--max_seq_length",
                                                 str(max_seq_length), "--max_train_samples", str(rows)])
    tasks = load_tasks(data_args, training_args.seed)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    train = {t.name: tokenize_task(t, load_task_splits(t, seed=training_args.seed)["train"], tokenizer,
                                   max_length=max_seq_length) for t in tasks}
    return tasks, tokenizer, train


def mean_computed_tokens(plan, lengths) -> float:
    return float(np.mean([len(rows) * int(np.asarray(lengths[t][0])[rows].max()) * lengths[t][1] for t, rows in plan]))


def matching_budget(sizes, lengths, target: float, max_rows: int, group: int) -> int:
    """The budget whose sub-batches' mean computed tokens is closest to `target` (bisection: the smallest budget
    at or above it, or the one below)."""
    def mean(budget: int) -> float:
        plan = TaskBatchSampler(sizes, max_rows, group, max_tokens=budget, row_lengths=lengths).epoch_plan(0)
        return mean_computed_tokens(plan, lengths)

    low, high = int(max(int(lengths[t][0].max()) * lengths[t][1] for t in range(len(sizes)))), 1 << 20
    while low < high:
        middle = (low + high) // 2
        if mean(middle) >= target:
            high = middle
        else:
            low = middle + 1
    return min((low, low - 1), key=lambda budget: abs(mean(budget) - target))


def padding_figures(cli) -> dict:
    tasks, _, train = demo_train_data(cli.max_seq_length, cli.rows)
    names = list(train)
    sizes = [len(train[n]) for n in names]
    lengths = [row_lengths(train[n]) for n in names]
    fixed = TaskBatchSampler(sizes, cli.batch, cli.group).epoch_plan(0)
    target = mean_computed_tokens(fixed, lengths)
    budget = matching_budget(sizes, lengths, target, cli.max_rows, cli.group)
    plan = TaskBatchSampler(sizes, cli.max_rows, cli.group, max_tokens=budget, row_lengths=lengths).epoch_plan(0)
    rows = lambda p: sum(len(r) for _, r in p)  # noqa: E731
    return {"tasks": dict(zip(names, sizes)),
            "mean_tokens": {n: float(np.mean(l)) for n, (l, _) in zip(names, lengths)},
            "fixed": {"batch": cli.batch, "padded_share": padded_share(fixed, lengths), "sub_batches": len(fixed),
                      "mean_rows": rows(fixed) / len(fixed), "mean_computed_tokens": target},
            "budget": {"max_tokens_per_batch": budget, "max_rows": cli.max_rows,
                       "padded_share": padded_share(plan, lengths),
                       "sub_batches": len(plan), "mean_rows": rows(plan) / len(plan),
                       "mean_computed_tokens": mean_computed_tokens(plan, lengths)}}


def run_one(cli, budget: int | None) -> dict:
    """One process: warm-up + measured updates of one sampler; rows per second over the measured updates."""
    from transformers import TrainerCallback

    from hf_aux.modeling.multitask import MultiTaskModel
    from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer
    from hf_aux.tasks.demo import minilm_path

    torch.set_num_threads(cli.threads)
    tasks, tokenizer, train = demo_train_data(cli.max_seq_length, cli.rows)
    model = MultiTaskModel.from_pretrained(minilm_path(), tasks=tasks)
    marks = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append((time.perf_counter(), state.global_step))

    rows = []
    with tempfile.TemporaryDirectory() as out:
        args = MuppetConfig(output_dir=out, per_device_train_batch_size=cli.max_rows if budget else cli.batch,
                            max_tokens_per_batch=budget, gradient_accumulation_steps=cli.group,
                            max_steps=cli.warmup + cli.steps, learning_rate=1e-4, report_to=[], save_strategy="no",
                            logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=cli.seed,
                            dataloader_num_workers=0)
        trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                                callbacks=[Clock()], data_collator=None)
        collate = trainer.data_collator
        def counting(features):  # (rows, computed tokens) of each sub-batch, as it is padded
            batch = collate(features)
            rows.append((len(features), batch["input_ids"].numel()))
            return batch

        trainer.data_collator = counting
        trainer.train()
    # the measured updates' sub-batches: the loader collates one sub-batch ahead, so count by position
    measured = rows[cli.warmup * cli.group:(cli.warmup + cli.steps) * cli.group]
    seconds = marks[-1][0] - marks[cli.warmup - 1][0]
    return {"rows_per_s": sum(r for r, _ in measured) / seconds, "s_per_update": seconds / cli.steps,
            "computed_tokens_per_s": sum(t for _, t in measured) / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def speed_figures(cli, budget: int) -> dict:
    runs = {"fixed": [], "budget": []}
    order = ["fixed", "budget"]
    for round_index in range(cli.rounds):
        for kind in (order if round_index % 2 == 0 else order[::-1]):
            command = [sys.executable, __file__, "--one", kind, "--budget", str(budget)] + cli.forward
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{kind} run failed:\n{done.stderr[-3000:]}")
            runs[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(kind, runs[kind][-1], f"load {os.getloadavg()[0]:.2f}", flush=True)
    median = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    return {"runs": runs, "median": median,
            "rows_per_s_ratio": median["budget"]["rows_per_s"] / median["fixed"]["rows_per_s"],
            "s_per_update_ratio": median["budget"]["s_per_update"] / median["fixed"]["s_per_update"],
            "computed_tokens_per_s_ratio": (median["budget"]["computed_tokens_per_s"]
                                            / median["fixed"]["computed_tokens_per_s"]),
            "peak_rss_ratio": median["budget"]["peak_rss_mb"] / median["fixed"]["peak_rss_mb"]}


def quality_figures(cli, budget: int) -> dict:
    from hf_aux.compare.statistics import benjamini_hochberg, mean_sd, welch_interval

    cache = json.loads(open(cli.quality_json).read()) if os.path.exists(cli.quality_json) else {"runs": []}
    flags = ["--max_seq_length", str(cli.max_seq_length), "--max_steps", str(cli.quality_steps), "--save_strategy",
             "no", "--report_to", "none", "--disable_tqdm", "true"]
    kinds = {"fixed": ["--per_device_train_batch_size", str(cli.batch)],
             "budget": ["--per_device_train_batch_size", str(cli.max_rows), "--max_tokens_per_batch", str(budget)]}
    for seed in cli.quality_seeds:
        for kind, extra in kinds.items():
            command = ["hf-aux", "muppet", "--seed", str(seed), *flags, *extra]
            if any(r["command"] == command[2:] for r in cache["runs"]):
                continue  # finished before
            out = os.path.join(cli.runs_dir, f"{kind}-seed{seed}")
            started = time.time()
            done = subprocess.run([*command, "--output_dir", out, "--overwrite_output_dir", "true"],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
            results = json.load(open(os.path.join(out, "all_results.json")))
            cache["runs"].append({"kind": kind, "seed": seed, "command": command[2:], "wall_s": time.time() - started,
                                  "load_average": os.getloadavg()[0], "results": results})
            with open(cli.quality_json, "w") as f:
                json.dump(cache, f, indent=1)
            print(kind, seed, f"{time.time() - started:.0f} s", flush=True)
    runs = [r for r in cache["runs"] if r["seed"] in cli.quality_seeds]
    metric_keys = sorted(k for k in runs[0]["results"] if k.startswith("eval_") and k.endswith("_accuracy")
                         and "majority" not in k) + ["eval_average_primary"]
    rows = {}
    for key in metric_keys:
        values = {kind: [r["results"][key] for r in runs if r["kind"] == kind] for kind in kinds}
        interval = welch_interval(values["budget"], values["fixed"])
        rows[key] = {kind: mean_sd(v) for kind, v in values.items()} | {
            "difference": [interval.difference, interval.low, interval.high], "p": interval.p_value}
    for key, q in zip(rows, benjamini_hochberg([row["p"] for row in rows.values()])):
        rows[key]["q"] = q
    return {"steps": cli.quality_steps, "seeds": cli.quality_seeds, "metrics": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--rows", type=int, default=500, help="train rows per task (the demo job's 500)")
    parser.add_argument("--batch", type=int, default=16, help="today's rows per sub-batch (the demo job's 16)")
    parser.add_argument("--max_rows", type=int, default=512, help="the budget's cap on rows per sub-batch")
    parser.add_argument("--group", type=int, default=4, help="sub-batches per update (the demo job's 4)")
    parser.add_argument("--rounds", type=int, default=0, help="speed rounds (0: padding only)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quality_seeds", type=int, nargs="*", default=[], help="quality runs' seeds")
    parser.add_argument("--quality_steps", type=int, default=40, help="updates per quality run")
    parser.add_argument("--quality_json", default=os.path.join(HERE, "..", "docs", "token_budget_quality.json"))
    parser.add_argument("--runs_dir", default=os.path.join(tempfile.gettempdir(), "token_budget_runs"))
    parser.add_argument("--one", choices=["fixed", "budget"], help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    cli.forward = [a for flag in ("max_seq_length", "rows", "batch", "max_rows", "group", "steps", "warmup",
                                  "threads", "seed") for a in (f"--{flag}", str(getattr(cli, flag)))]
    if cli.one:
        print(json.dumps(run_one(cli, cli.budget if cli.one == "budget" else None)))
        return
    figures = {"settings": {k: v for k, v in vars(cli).items() if k not in ("one", "budget", "forward", "quality_json",
                                                                          "runs_dir")},
               "padding": padding_figures(cli)}
    print(json.dumps(figures["padding"], indent=1), flush=True)
    if cli.rounds:
        figures["speed"] = speed_figures(cli, figures["padding"]["budget"]["max_tokens_per_batch"])
        figures["speed"]["load_average"] = os.getloadavg()
    if cli.quality_seeds:
        figures["quality"] = quality_figures(cli, figures["padding"]["budget"]["max_tokens_per_batch"])
    print(json.dumps(figures))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
