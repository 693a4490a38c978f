#!/usr/bin/env python
"""Step time of end-task-aware MUPPET (`task_weighting="meta"`) against uniform MUPPET on the same mixture, beside
its FLOP floor.

A weight update adds, per optimizer update: one forward + backward for each of the `meta_tasks_per_step` tasks drawn
(g_k), one forward without gradient of an end-task batch (phi*'s features), phi*'s fit (a head on fixed features),
and one forward + backward of another end-task batch (g_meta). The floor is the ratio of the FLOPs torch's
FlopCounterMode counts in one meta update (its sub-batches + the weight update) to one uniform update (matrix
products only, flops.gflop_of): what the step would cost if it were matmul-bound. `task_weight_update_steps` N
spreads the extra work over N updates.

Each configuration is a real Trainer: one `train()` of warm-up + measured updates, timed per update by a callback
(process CPU time, so other processes on a shared machine count less; wall time too). Runs are interleaved, several
rounds; per round the ratio of the mean update times (the mean, since with `--update_every` N only every Nth
update carries a weight update), and the median over rounds.

    python benchmarks/bench_muppet_meta.py                          # 5 tasks, 4 sub-batches per update
    python benchmarks/bench_muppet_meta.py --update_every 4         # weights updated every 4th update

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from bench_muppet import add_job_arguments, build, make_tasks, trainer_settings
from flops import allocator, gflop_of, set_up_malloc
from host_reads import count_training, describe, summary
from transformers import TrainerCallback

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from tiny import tiny_tokenizer  # noqa: E402

from hf_aux.tasks.data import tokenize_task  # noqa: E402
from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer  # noqa: E402


class CpuStepTimer(TrainerCallback):
    def __init__(self):
        self.cpu, self.wall, self._start = [], [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.process_time(), time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        self.cpu.append(time.process_time() - self._start[0])
        self.wall.append(time.perf_counter() - self._start[1])


def make_trainer(kind, tasks, train, end, tokenizer, common, cli, out, callbacks=()):
    model = build(tasks, tokenizer, cli.hidden, cli.layers, cli.length)
    extra = {}
    settings = {}
    if kind == "meta":
        settings = dict(task_weighting="meta", meta_tasks_per_step=cli.meta_tasks,
                        task_weight_update_steps=cli.update_every)
        extra = dict(end_task=end[0], end_task_dataset=end[1])
    args = MuppetConfig(output_dir=out, **common, **settings)
    return MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                         callbacks=list(callbacks), **extra), model


def update_gflop(kind, tasks, train, end, tokenizer, common, cli) -> float:
    """GFLOPs of one update: its sub-batches through compute_loss and backward, plus (meta) one weight update."""
    with tempfile.TemporaryDirectory() as out:
        trainer, model = make_trainer(kind, tasks, train, end, tokenizer, common, cli, out)
        loader = iter(trainer.get_train_dataloader())
        sub_batches = [trainer._prepare_inputs(next(loader)) for _ in range(common["gradient_accumulation_steps"])]
        model.train()

        def one_update():
            if kind == "meta":
                trainer._update_task_weights(model)
            for inputs in sub_batches:
                trainer.compute_loss(model, inputs).backward()

        return gflop_of(one_update)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser, steps=12, warmup=2)
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--meta_tasks", type=int, default=8, help="meta_tasks_per_step")
    parser.add_argument("--update_every", type=int, default=1, help="task_weight_update_steps")
    cli = parser.parse_args()
    set_up_malloc(cli)
    torch.set_num_threads(cli.threads)
    tokenizer = tiny_tokenizer()
    common = trainer_settings(cli)
    rows = cli.batch_size * cli.accumulation * (cli.warmup + cli.steps)
    tasks = make_tasks(cli.tasks, max(cli.batch_size, rows // cli.tasks), cli.length)
    train = {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=cli.length + 2) for t in tasks}
    end_task = make_tasks(1, 64, cli.length, seed=99)[0]
    end_task.name = "end"
    end = (end_task, tokenize_task(end_task, end_task.dataset, tokenizer, max_length=cli.length + 2))

    cpu = {"uniform": [], "meta": []}
    wall = {"uniform": [], "meta": []}
    rounds = {"uniform": [], "meta": []}
    for _ in range(cli.rounds):
        for kind in ("uniform", "meta"):
            timer = CpuStepTimer()
            with tempfile.TemporaryDirectory() as out:
                trainer, _ = make_trainer(kind, tasks, train, end, tokenizer, common, cli, out, [timer])
                trainer.train()
            cpu[kind].extend(timer.cpu[cli.warmup:])
            wall[kind].extend(timer.wall[cli.warmup:])
            rounds[kind].append(statistics.fmean(timer.cpu[cli.warmup:]))  # the mean: weight updates may be periodic
    gflop = {kind: update_gflop(kind, tasks, train, end, tokenizer, common, cli) for kind in ("uniform", "meta")}
    # with weight updates every N steps, the extra FLOPs are spread over N updates
    floor = 1 + (gflop["meta"] / gflop["uniform"] - 1) / cli.update_every
    per_round = [m / u for m, u in zip(rounds["meta"], rounds["uniform"])]
    ratio = statistics.median(per_round)
    for kind in cpu:
        print(f"{kind:>8}: mean {statistics.fmean(cpu[kind]) * 1000:8.1f} ms CPU / "
              f"{statistics.fmean(wall[kind]) * 1000:8.1f} ms wall per update over {len(cpu[kind])} updates")
    print(f"GFLOPs per update: uniform {gflop['uniform']:.3f}, meta (with one weight update) {gflop['meta']:.3f}")
    with tempfile.TemporaryDirectory() as out:  # host reads: a few more updates, counted, not timed
        trainer, _ = make_trainer("meta", tasks, train, end, tokenizer, {**common, "max_steps": 4,
                                                                          "logging_steps": 1000}, cli, out)
        reads = count_training(trainer)
    print(describe(reads))
    result = {"metric": "muppet_meta_step_ratio", "tasks": cli.tasks, "meta_tasks_per_step": cli.meta_tasks,
              "task_weight_update_steps": cli.update_every, "sub_batches_per_update": cli.accumulation,
              "rounds": cli.rounds, "cpu_ratio": round(ratio, 3),
              "cpu_ratio_spread": [round(min(per_round), 3), round(max(per_round), 3)],
              "wall_ratio": round(statistics.fmean(wall["meta"]) / statistics.fmean(wall["uniform"]), 3),
              "flop_floor": round(floor, 3), "ratio_to_floor": round(ratio / floor, 3), "floor_goal": 1.05,
              "gflop_per_update": {k: round(v, 4) for k, v in gflop.items()},
              "load_average": [round(x, 2) for x in os.getloadavg()], "allocator": allocator(),
              "host_reads_per_update": summary(reads)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
