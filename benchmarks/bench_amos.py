#!/usr/bin/env python
"""Cost of an AMOS training step against ELECTRA with the same generator depth and against the discriminator alone.

Three configurations, run interleaved (A B C A B C ...) after warm-up, median step time of each:
  amos      generator of depth d_K with MLM heads at D, adversarial mixture (straight-through into the embeddings)
  electra   the same generator with one head at its last layer, no mixture (the ELECTRA configuration)
  disc_only the discriminator's RTD step on the same batch with random replacements (no generator at all)
Every step is forward + backward + AdamW update. Peak memory: the process's max RSS growth while running one
configuration alone first (CPU), or torch's peak allocated memory on an accelerator.

    python benchmarks/bench_amos.py                       # small paper-shaped model (12-layer disc, 8-layer gen)
    python benchmarks/bench_amos.py --hidden 768 --steps 20 # BERT-base width (slow on CPU)

The last line is one JSON object: {"metric": "amos_vs_electra_step_ratio", "ratio": ..., "goal": 1.10,
"disc_only_ratio": ..., "disc_only_goal": 2.0, ...}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from transformers import AutoConfig

from hf_aux.losses.amos import rtd_labels, rtd_loss
from hf_aux.modeling.amos import AmosModel, AmosModelConfig


def encoder(hidden, layers, vocab, seq):
    return AutoConfig.for_model("electra", vocab_size=vocab, hidden_size=hidden, embedding_size=hidden,
                                num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                                intermediate_size=4 * hidden, max_position_embeddings=max(512, seq))


def build(args, mlm_layers):
    torch.manual_seed(0)
    config = AmosModelConfig.from_configs(encoder(args.hidden, args.generator_layers, args.vocab, args.seq),
                                          encoder(args.hidden, args.layers, args.vocab, args.seq),
                                          mlm_layers=mlm_layers)
    model = AmosModel(config).to(args.device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def make_batch(args, generator):
    original = torch.randint(5, args.vocab, (args.batch, args.seq), generator=generator)
    chosen = torch.rand(args.batch, args.seq, generator=generator) < 0.15
    labels = torch.where(chosen, original, torch.full_like(original, -100))
    masked = torch.where(chosen, torch.full_like(original, 4), original)
    batch = {"input_ids": masked, "attention_mask": torch.ones_like(original), "labels": labels,
             "original_input_ids": original}
    return {k: v.to(args.device) for k, v in batch.items()}


def amos_step(model, optimizer, batch, mixture="adversarial"):
    loss = model(**batch, mixture=mixture).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def disc_only_step(model, optimizer, batch):
    """ELECTRA's discriminator half alone: random replacements at the masked positions, RTD loss (eq. 1)."""
    masked = batch["labels"] != -100
    random_tokens = torch.randint_like(batch["original_input_ids"], 5, model.get_input_embeddings().num_embeddings)
    replaced = torch.where(masked, random_tokens, batch["original_input_ids"])
    logits = model.discriminator(input_ids=replaced, attention_mask=batch["attention_mask"]).logits
    loss = rtd_loss(logits, rtd_labels(replaced, batch["original_input_ids"]), batch["attention_mask"])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def synchronize(device):
    if device != "cpu":
        torch.accelerator.synchronize()


def timed(fn, device):
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def peak_memory_mb(fn, device, repeats=2):
    """Peak memory of `repeats` steps (MB): the accelerator's peak allocation, or on CPU how far the process's peak
    RSS rises above its peak after building. A process's peak RSS only grows, so on CPU each configuration is
    measured in a fresh process of its own (`memory_in_subprocess`)."""
    gc.collect()
    if device != "cpu":
        torch.accelerator.reset_peak_memory_stats()
        for _ in range(repeats):
            fn()
        return torch.accelerator.max_memory_allocated() / 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(repeats):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def memory_in_subprocess(name: str) -> float:
    """Run this script again with `--memory_of name`: it builds only that configuration and prints its peak."""
    argv = [a for a in sys.argv[1:]]
    result = subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--memory_of", name],
                            capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def configuration(args, name):
    """(model, optimizer, step function) of one configuration."""
    model, optimizer = build(args, args.mlm_layers if name == "amos" else [args.generator_layers])
    if name == "disc_only":
        return lambda b: disc_only_step(model, optimizer, b)
    return lambda b: amos_step(model, optimizer, b)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=12, help="discriminator depth")
    parser.add_argument("--generator_layers", type=int, default=8, help="generator depth d_K")
    parser.add_argument("--mlm_layers", type=int, nargs="+", default=[4, 6, 8])
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--memory_of", choices=["amos", "electra", "disc_only"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    generator = torch.Generator().manual_seed(0)
    batches = [make_batch(args, generator) for _ in range(4)]
    if args.memory_of:  # the child process of memory_in_subprocess
        run = configuration(args, args.memory_of)
        print(peak_memory_mb(lambda: run(batches[0]), args.device))
        return
    names = ("amos", "electra", "disc_only")
    # each configuration's memory on its own: a fresh process per configuration on CPU
    memory = {name: memory_in_subprocess(name) if args.device == "cpu" else None for name in names}
    runs = {name: configuration(args, name) for name in names}
    if args.device != "cpu":
        memory = {name: peak_memory_mb(lambda: runs[name](batches[0]), args.device) for name in names}
    for i in range(args.warmup):
        for run in runs.values():
            run(batches[i % len(batches)])
    times = {name: [] for name in runs}
    for i in range(args.steps):
        for name, run in runs.items():  # interleaved, so drifting load hits all three alike
            times[name].append(timed(lambda: run(batches[i % len(batches)]), args.device))
    median = {name: statistics.median(t) for name, t in times.items()}
    ratio, disc_ratio = median["amos"] / median["electra"], median["amos"] / median["disc_only"]
    per_pair = [a / e for a, e in zip(times["amos"], times["electra"])]
    print(f"device {args.device}, threads {torch.get_num_threads()}, hidden {args.hidden}, discriminator "
          f"{args.layers} layers, generator {args.generator_layers} layers, heads at {args.mlm_layers}, vocab "
          f"{args.vocab}, batch {args.batch}x{args.seq}, {args.steps} interleaved steps each")
    for name in runs:
        print(f"  {name:9s} median {median[name] * 1000:8.1f} ms/step  peak memory {memory[name]:8.1f} MB")
    print(f"  AMOS / ELECTRA (same generator depth): {ratio:.3f} (goal <= 1.10); per-pair ratios: median "
          f"{statistics.median(per_pair):.3f}, quartiles {statistics.quantiles(per_pair, n=4)[0]:.3f}.."
          f"{statistics.quantiles(per_pair, n=4)[2]:.3f}")
    print(f"  AMOS / discriminator only: {disc_ratio:.3f} (goal <= 2.0)")
    print(json.dumps({"metric": "amos_vs_electra_step_ratio", "ratio": round(ratio, 4), "goal": 1.10,
                      "disc_only_ratio": round(disc_ratio, 4), "disc_only_goal": 2.0,
                      "median_ms": {k: round(v * 1000, 1) for k, v in median.items()},
                      "peak_memory_mb": {k: round(v, 1) for k, v in memory.items()}, "device": args.device,
                      "hidden": args.hidden, "layers": args.layers, "generator_layers": args.generator_layers,
                      "mlm_layers": args.mlm_layers}))


if __name__ == "__main__":
    main()
