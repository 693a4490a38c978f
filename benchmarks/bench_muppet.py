#!/usr/bin/env python
"""Step time of MuppetTrainer against a plain Trainer stepping the same multi-head model over the same sub-batches
with the same gradient accumulation; against the bare minimum (a hand-written loop as tasknet's users would write
it: the same sampler's sub-batches, the model's own loss, backward, clipping, AdamW, a linear schedule, nothing
else); with R3F; and with 50 tasks in the mixture against 5.

Each configuration is a real Trainer: one `train()` of warm-up + measured optimizer updates, the time of every
update taken by a callback (on_step_begin -> on_step_end). Runs are interleaved (A B A B ...), several rounds, each
round starting one configuration later, and the ratio is of the medians of the per-update times, so drift from
other processes largely cancels. Every run is a process of its own, as a user's job is (in one process each
configuration would inherit the heap the runs before it left); `--same_process` runs them all in this one. Every
run's malloc keeps freed memory, as an hf_aux trainer sets it on CPU (`--cpu_malloc keep`, hf_aux.runtime.cpu_malloc),
the plain Trainer's and the minimal loop's too; with glibc's defaults (`--cpu_malloc system`) the 50-task process trims
and regrows its heap more often, a few percent per update (docs/muppet_measurements.md). On a GPU, whose memory CUDA's
caching allocator keeps (the heap effect is glibc's), `--same_process` spares every run starting CUDA anew.
`--clock cpu` times the run's process CPU time instead of wall time (one torch thread: the work done, steadier
under load).

Beside each measured ratio the last line carries its FLOP floor (`*flop_ratio`): the ratio of the FLOPs torch's
FlopCounterMode counts in one update's forward and backward passes (its sub-batches, the same ones for both
configurations; matrix products only, see flops.gflop_of), what the step would cost if it were matmul-bound.
MUPPET's loss adds no matrix product (floor 1.0); R3F adds one forward and backward of the noisy embeddings
(floor ~2.0); 50 tasks instead of 5 change only which head runs (floor ~1.0).

    python benchmarks/bench_muppet.py                       # BERT body hidden 256 x 4 layers (the figures in docs/muppet_measurements.md)
    python benchmarks/bench_muppet.py --hidden 64 --layers 2  # a tiny body: Trainer's fixed costs dominate
    python benchmarks/bench_muppet.py --torch_compile --warmup 3  # plain / MUPPET, eager and compiled

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import datasets
import torch
from flops import (HostSyncs, add_device_arguments, allocator, autocast, gflop_of, matmul_peak_tflops, mfu, peak_label,
                   set_up_malloc, synchronize)
from host_reads import count_training, describe, summary
from transformers import AutoModel, Trainer, TrainerCallback, TrainingArguments

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from tiny import tiny_config, tiny_tokenizer  # noqa: E402

from hf_aux.tasks.data import MultiTaskCollator, tokenize_task  # noqa: E402
from hf_aux.modeling.multitask import MultiTaskModelConfig, MultiTaskModel  # noqa: E402
from hf_aux.muppet.batches import MultiTaskDataset, TaskBatchSampler  # noqa: E402
from hf_aux.tasks.loading import TaskSpec  # noqa: E402
from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer  # noqa: E402

WORDS = "good bad movie film great terrible fun boring love hate the a story plot actor".split()


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # --clock: cpu counts this process's work only
CLOCK = CLOCKS["wall"]


class StepTimer(TrainerCallback):
    """The time of every update (on an accelerator, the device's queued work is waited for at both ends), and,
    given `syncs`, the host syncs made inside each update."""

    def __init__(self, syncs=None):
        self.times, self._start, self.syncs = [], None, syncs

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize(args.device)
        self._start = CLOCK()
        if self.syncs is not None:
            self.syncs.start()

    def on_step_end(self, args, state, control, **kwargs):
        if self.syncs is not None:
            self.syncs.stop()
        synchronize(args.device)
        self.times.append(CLOCK() - self._start)


class PlainTrainer(Trainer):
    """The baseline: Trainer's own loop and loss (the model's mean cross entropy), fed the same homogeneous
    sub-batches in the same order as MuppetTrainer's sampler."""

    def __init__(self, *args, sampler=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.sampler = sampler

    def get_train_dataloader(self):
        loader = torch.utils.data.DataLoader(self.train_dataset, batch_sampler=self.sampler,
                                             collate_fn=self.data_collator)
        return self.accelerator.prepare(loader)


def make_tasks(num_tasks: int, rows_per_task: int, length: int, seed: int = 0):
    rng = random.Random(seed)
    tasks = []
    for t in range(num_tasks):
        labels = 2 + t % 4
        rows = [{"text": " ".join(rng.choice(WORDS) for _ in range(length)), "label": rng.randrange(labels)}
                for _ in range(rows_per_task)]
        tasks.append(TaskSpec(name=f"task{t}", kind="classification", num_labels=labels,
                              dataset=datasets.Dataset.from_list(rows)))
    return tasks


def build(tasks, tokenizer, hidden, layers, length):
    config = tiny_config("bert", tokenizer, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=max(2, hidden // 64), intermediate_size=4 * hidden,
                         max_position_embeddings=max(128, length + 8))
    torch.manual_seed(0)
    body = AutoModel.from_config(config)
    return MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=tasks), body=body)


def make_trainer(kind, model, train, tokenizer, args_common, out, callbacks=()):
    if kind == "plain":
        args = TrainingArguments(output_dir=out, **{k: v for k, v in args_common.items() if k != "cpu_malloc"})
        data = MultiTaskDataset(train)
        sampler = TaskBatchSampler(data.sizes, args.per_device_train_batch_size, args.gradient_accumulation_steps,
                                   seed=args.seed)
        return PlainTrainer(model=model, args=args, train_dataset=data, callbacks=list(callbacks), sampler=sampler,
                            data_collator=MultiTaskCollator(tokenizer, model.task_names))
    args = MuppetConfig(output_dir=out, robust_finetuning="r3f" if kind == "r3f" else "none", **args_common)
    return MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                         callbacks=list(callbacks))


def run(kind, tasks, train, tokenizer, args_common, hidden, layers, length, syncs=None):
    """One train() of a fresh model; returns the time of every update (and counts its host syncs into `syncs`)."""
    model = build(tasks, tokenizer, hidden, layers, length)
    timer = StepTimer(syncs)
    with tempfile.TemporaryDirectory() as out:
        make_trainer(kind, model, train, tokenizer, args_common, out, [timer]).train()
    return timer.times


def run_minimal(tasks, train, tokenizer, args_common, hidden, layers, length):
    """The bare-minimum loop on a fresh model: per update, the task sampler's next `gradient_accumulation_steps`
    sub-batches (fetched before the clock starts, as Trainer fetches an update's batches before on_step_begin),
    each through the model's own loss scaled by 1/accumulation and backward; clipping at max_grad_norm 1.0 (Trainer's
    default); AdamW; a linear schedule; zero_grad. Returns the time of every update."""
    from transformers import get_linear_schedule_with_warmup

    device = "cpu" if args_common["use_cpu"] else torch.accelerator.current_accelerator()
    model = build(tasks, tokenizer, hidden, layers, length).to(device)
    model.train()
    data = MultiTaskDataset(train)
    accumulation, steps = args_common["gradient_accumulation_steps"], args_common["max_steps"]
    sampler = TaskBatchSampler(data.sizes, args_common["per_device_train_batch_size"], accumulation,
                               seed=args_common["seed"])
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler,
                                         collate_fn=MultiTaskCollator(tokenizer, model.task_names))

    def sub_batch_stream():  # epoch after epoch, reshuffled as Trainer's loop does
        for epoch in itertools.count():
            sampler.set_epoch(epoch)
            yield from loader

    stream = sub_batch_stream()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args_common["learning_rate"])
    schedule = get_linear_schedule_with_warmup(optimizer, 0, steps)
    times = []
    for _ in range(steps):
        sub_batches = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in next(stream).items()}
                       for _ in range(accumulation)]
        synchronize(device)
        start = CLOCK()
        for inputs in sub_batches:
            with autocast(device, args_common["bf16"]):
                loss = model(**inputs).loss
            (loss / accumulation).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(CLOCK() - start)
    return times


def update_gflop(kind, tasks, train, tokenizer, args_common, hidden, layers, length) -> float:
    """GFLOPs of one update's forward and backward passes: its first `gradient_accumulation_steps` sub-batches of
    the task sampler's stream (the same for every kind), each through the trainer's own compute_loss."""
    model = build(tasks, tokenizer, hidden, layers, length)
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(kind, model, train, tokenizer, args_common, out)
        loader = iter(trainer.get_train_dataloader())
        sub_batches = [trainer._prepare_inputs(next(loader)) for _ in range(args_common["gradient_accumulation_steps"])]
        model.train()

        def one_update():
            for inputs in sub_batches:
                trainer.compute_loss(model, inputs).backward()

        return gflop_of(one_update)


def muppet_host_reads(mixture, tokenizer, common, cli) -> dict:
    """Host reads per MuppetTrainer update (benchmarks/host_reads.py): 4 more updates of a fresh model, counted,
    not timed."""
    tasks, train = mixture
    model = build(tasks, tokenizer, cli.hidden, cli.layers, cli.length)
    with tempfile.TemporaryDirectory() as out:
        settings = {**common, "max_steps": 4, "logging_steps": 1000}
        return count_training(make_trainer("muppet", model, train, tokenizer, settings, out))


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def add_job_arguments(parser, steps: int, warmup: int) -> None:
    """The job every MUPPET step benchmark times (this one, bench_muppet_meta.py): body size, sub-batches, updates."""
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--steps", type=int, default=steps, help="measured updates per run (after warm-up)")
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps a shared machine's noise low)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds of every configuration")
    add_device_arguments(parser)


def trainer_settings(cli) -> dict:
    """The TrainingArguments fields of that job (warm-up + measured updates, nothing saved or reported)."""
    return dict(per_device_train_batch_size=cli.batch_size, gradient_accumulation_steps=cli.accumulation,
                max_steps=cli.warmup + cli.steps, learning_rate=1e-4, report_to=[], save_strategy="no",
                logging_steps=10, disable_tqdm=True, use_cpu=cli.device == "cpu", bf16=cli.bf16, seed=0,
                cpu_malloc=cli.cpu_malloc)  # hf_aux's; the plain Trainer's process gets it from set_up_malloc


KINDS = ("plain", "muppet", "r3f", "muppet50", "minimal")  # muppet50: MuppetTrainer on the 50-task mixture
COMPILED_KINDS = ("plain", "muppet", "plain_compiled", "muppet_compiled")  # --torch_compile: Trainer's flag on


def make_mixture(count: int, cli, tokenizer):
    """(tasks, tokenized train sets) of `count` tasks sharing the job's rows: the cost per update must not depend on
    how many tasks share them."""
    rows = cli.batch_size * cli.accumulation * (cli.warmup + cli.steps)
    tasks = make_tasks(count, max(cli.batch_size, rows // count), cli.length)
    return tasks, {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=cli.length + 2) for t in tasks}


def measure(kind, mixtures, tokenizer, common, cli, syncs) -> list[float]:
    """One run of configuration `kind` in this process: the times of its measured updates (after the warm-up); the
    host syncs of MuppetTrainer's updates (5 tasks) are counted into `syncs`."""
    tasks, train = mixtures[50 if kind == "muppet50" else 5]
    if kind == "minimal":
        measured = run_minimal(tasks, train, tokenizer, common, cli.hidden, cli.layers, cli.length)
    elif kind.endswith("_compiled"):  # the warm-up updates hold the compilations (one graph per task)
        measured = run(kind.removesuffix("_compiled"), tasks, train, tokenizer, {**common, "torch_compile": True},
                       cli.hidden, cli.layers, cli.length)
    else:
        measured = run("muppet" if kind == "muppet50" else kind, tasks, train, tokenizer, common, cli.hidden,
                       cli.layers, cli.length, syncs=syncs if kind == "muppet" else None)
    WARMUP_SECONDS[kind] = WARMUP_SECONDS.get(kind, 0.0) + sum(measured[:cli.warmup])
    return measured[cli.warmup:]


WARMUP_SECONDS = {}  # per kind, the warm-up updates' time summed over runs (compiled: the compile time in it)


def measure_in_own_process(kind, syncs) -> tuple[list[float], float]:
    """One run of `kind` in a fresh Python process (this script with the same arguments and `--run_one`): the
    times of its measured updates and that process's peak RSS in MB; its host-sync counts are added to `syncs`."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--run_one", kind],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_muppet: the {kind} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    WARMUP_SECONDS[kind] = WARMUP_SECONDS.get(kind, 0.0) + report["warmup_s"]
    syncs.by_line.update(report["syncs_by_line"])
    syncs.windows += report["sync_windows"]
    return report["times"], report["peak_rss_mb"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser, steps=20, warmup=3)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or the run's process CPU time (steadier on a shared, loaded machine)")
    parser.add_argument("--same_process", action="store_true",
                        help="run every configuration in this process instead of one process per run (each then "
                             "inherits the heap the runs before it left)")
    parser.add_argument("--torch_compile", action="store_true",
                        help="instead: plain Trainer and MuppetTrainer, eager and with --torch_compile (inductor); "
                             "compiled / eager, MUPPET / plain compiled, and the compile time (give --warmup >= 3)")
    # one run, for a process of its own
    parser.add_argument("--run_one", choices=KINDS + COMPILED_KINDS[2:], help=argparse.SUPPRESS)
    cli = parser.parse_args()
    global CLOCK
    CLOCK = CLOCKS[cli.clock]
    set_up_malloc(cli)

    torch.set_num_threads(cli.threads)
    tokenizer = tiny_tokenizer()
    common = trainer_settings(cli)
    kinds = COMPILED_KINDS if cli.torch_compile else KINDS
    needed = (50 if cli.run_one == "muppet50" else 5,) if cli.run_one else tuple(sorted(
        {50 if kind == "muppet50" else 5 for kind in kinds}))  # a run needs its own mixture
    mixtures = {count: make_mixture(count, cli, tokenizer) for count in needed}
    syncs = HostSyncs(cli.device)  # inside MuppetTrainer's updates (on CUDA: torch's sync debug mode)
    if cli.run_one:
        measured = measure(cli.run_one, mixtures, tokenizer, common, cli, syncs)
        print(json.dumps({"times": measured, "syncs_by_line": syncs.by_line, "sync_windows": syncs.windows,
                          "peak_rss_mb": peak_rss_mb(), "warmup_s": WARMUP_SECONDS[cli.run_one]}))
        return
    times = {kind: [] for kind in kinds}
    round_medians = {kind: [] for kind in times}  # per round: the median update of each configuration
    run_peaks = []  # the peak RSS of each run's own process
    for round_index in range(cli.rounds):
        # each round starts one configuration later, so none always follows the same one
        for kind in kinds[round_index % len(kinds):] + kinds[:round_index % len(kinds)]:
            if cli.same_process:
                measured = measure(kind, mixtures, tokenizer, common, cli, syncs)
            else:
                measured, peak = measure_in_own_process(kind, syncs)
                run_peaks.append(peak)
            times[kind].extend(measured)
            round_medians[kind].append(statistics.median(measured))
    medians = {k: statistics.median(v) for k, v in times.items()}
    base = {kind: "muppet" if kind == "muppet50" else kind.removesuffix("_compiled") for kind in times}
    gflop = {kind: update_gflop(base[kind], *mixtures[50 if kind == "muppet50" else 5], tokenizer, common,
                                cli.hidden, cli.layers, cli.length)
             for kind in times if kind != "minimal"}  # the minimal loop runs the plain model's matrix products
    for kind, value in medians.items():
        print(f"{kind:>9}: median {value * 1000:8.1f} ms/update over {len(times[kind])} updates")
    print("GFLOPs per update (forward + backward, matrix products): "
          + ", ".join(f"{kind} {value:.3f}" for kind, value in gflop.items()))
    rss = max(run_peaks) if run_peaks else peak_rss_mb()
    print(f"peak RSS of {'the whole benchmark process' if cli.same_process else 'the largest run'}: {rss:.0f} MB")
    peak = matmul_peak_tflops(cli.device)
    utilisation = {kind: mfu(gflop["plain" if kind == "minimal" else kind], medians[kind], peak) for kind in medians}
    print(f"MFU (counted FLOPs per update / its median time, of {peak_label(cli.device, peak)}): "
          + ", ".join(f"{kind} {value:.3f}" for kind, value in utilisation.items()))
    if syncs.enabled:
        print(f"host syncs per MuppetTrainer update: {syncs.report()}")
    reads = muppet_host_reads(mixtures[5], tokenizer, common, cli)
    print(describe(reads))
    def spread(a: str, b: str) -> list[float]:
        """[lowest, highest] of the per-round ratios a / b (rounds interleave every configuration)."""
        ratios = [x / y for x, y in zip(round_medians[a], round_medians[b])]
        return [round(min(ratios), 3), round(max(ratios), 3)]

    if cli.torch_compile:  # issue #53: MUPPET compiled within 3% of the plain Trainer compiled
        result = {"metric": "muppet_compile_ratio", "clock": cli.clock, "rounds": cli.rounds,
                  "muppet_vs_plain_compiled": round(medians["muppet_compiled"] / medians["plain_compiled"], 3),
                  "muppet_vs_plain_compiled_spread": spread("muppet_compiled", "plain_compiled"), "goal": 1.03,
                  "muppet_vs_plain_eager": round(medians["muppet"] / medians["plain"], 3),
                  "compiled_vs_eager": {k: round(medians[f"{k}_compiled"] / medians[k], 3)
                                        for k in ("plain", "muppet")},
                  "compile_s_per_run": {k: round((WARMUP_SECONDS[f"{k}_compiled"] - WARMUP_SECONDS[k]) / cli.rounds, 1)
                                        for k in ("plain", "muppet")},
                  "warmup_updates": cli.warmup, "mfu": utilisation, "matmul_peak_tflops": round(peak, 4),
                  "peak_rss_mb": round(rss, 1), "load_average": [round(x, 2) for x in os.getloadavg()],
                  "device": cli.device, "bf16": cli.bf16, "threads": cli.threads,
                  "host_reads_per_update": summary(reads)}
        print(json.dumps(result))
        return
    # goals (issue "cost at the floor"): MUPPET's bookkeeping within 2% of a plain Trainer, R3F within 3% of its FLOP
    # floor, 50 tasks within 3% of 5, and within 3% of a hand-written minimal loop
    r3f_floor = gflop["r3f"] / gflop["plain"]
    result = {"metric": "muppet_step_ratio", "clock": cli.clock, "rounds": cli.rounds,
              "ratio": round(medians["muppet"] / medians["plain"], 3), "ratio_spread": spread("muppet", "plain"),
              "goal": 1.02, "flop_ratio": round(gflop["muppet"] / gflop["plain"], 4),
              "r3f_ratio": round(medians["r3f"] / medians["plain"], 3), "r3f_spread": spread("r3f", "plain"),
              "r3f_goal": round(1.03 * r3f_floor, 3), "r3f_flop_ratio": round(r3f_floor, 4),
              "tasks50_vs_5_ratio": round(medians["muppet50"] / medians["muppet"], 3),
              "tasks50_vs_5_spread": spread("muppet50", "muppet"), "tasks_goal": 1.03,
              "tasks50_vs_5_flop_ratio": round(gflop["muppet50"] / gflop["muppet"], 4),
              "muppet_vs_minimal_ratio": round(medians["muppet"] / medians["minimal"], 3),
              "muppet_vs_minimal_spread": spread("muppet", "minimal"), "minimal_goal": 1.03,
              "muppet_vs_minimal_flop_ratio": round(gflop["muppet"] / gflop["plain"], 4),
              "gflop_per_update": {k: round(v, 4) for k, v in gflop.items()},
              "peak_rss_mb": round(rss, 1), "load_average": [round(x, 2) for x in os.getloadavg()],
              "allocator": allocator(), "processes": "one for all runs" if cli.same_process else "one per run",
              "device": cli.device, "bf16": cli.bf16,
              "matmul_peak_tflops": round(peak, 4), "mfu": utilisation,
              "host_syncs_per_update": syncs.report(), "host_reads_per_update": summary(reads)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
