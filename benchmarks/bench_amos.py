#!/usr/bin/env python
"""Cost of an AMOS training step against ELECTRA with the same generator depth and against the discriminator alone.

Three configurations, run interleaved (A B C A B C ...) after warm-up, median step time of each:
  amos      generator of depth d_K with MLM heads at D, adversarial mixture (straight-through into the embeddings)
  electra   the same generator with one head at its last layer, no mixture (the ELECTRA configuration)
  disc_only the discriminator's RTD step on the same batch with random replacements (no generator at all)
Every step is forward + backward + AdamW update. Batches are real text: the demo's unlabelled Wikipedia + IMDB
documents, MiniLM tokenizer (vocabulary 30,522), `group_texts_for_mlm` blocks masked as AmosTrainer masks them
(15%, BERT 80/10/10). Peak memory: the process's max RSS growth while running one configuration alone first
(CPU), or torch's peak allocated memory on an accelerator.

    python benchmarks/bench_amos.py                  # small paper-shaped model (hidden 256, 12-layer disc, 8-layer gen)
    python benchmarks/bench_amos.py --base --steps 6 # BERT-base proportions: hidden 768, 12 heads, FFN 3072 (slow on CPU)

On a GPU, `--device cuda --bf16` runs every configuration's forward under bf16 autocast (the backward outside it)
and adds MFU (counted FLOPs over the median step time, as a share of the card's measured bf16 matmul peak) and the
host syncs of an AMOS step; `--sources` picks the demo text (imdb alone needs no gensim), `--tokenizer` another BERT
tokenizer folder where the MiniLM package is missing:

    python benchmarks/bench_amos.py --device cuda --bf16 --base --sources imdb

The last line is one JSON object: {"metric": "amos_vs_electra_step_ratio", "ratio": ..., "goal": 1.10,
"disc_only_ratio": ..., "disc_only_goal": 2.0, ..., "mfu": {...}, "host_syncs_per_step": ...}.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from host_reads import count_per_call, describe, summary
from flops import (HostSyncs, add_device_arguments, allocator, autocast, counting, folder_label, matmul_peak_tflops,
                   mfu, peak_label, set_up_malloc, synchronize)
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoTokenizer

from hf_aux.tasks.data import (
                               group_texts_for_mlm,
                               mask_tokens_for_mlm,
                               special_tokens_mask_for,
                               )
from hf_aux.tasks.demo import demo_unlabelled_text, minilm_path
from hf_aux.amos.losses import rtd_labels, rtd_loss
from hf_aux.amos.model import AmosModel, AmosModelConfig


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


def real_batches(args, count: int) -> list[dict]:
    """`count` batches of `args.batch` blocks of `args.seq` tokens of the demo's unlabelled text (the run script's
    embedded default data), masked with a fixed seed as AmosTrainer masks unmasked blocks."""
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or minilm_path("bench_amos", "tokenizer"))
    text = demo_unlabelled_text(args.sources, max_documents=args.documents, seed=0)
    blocks = group_texts_for_mlm(text, tokenizer, block_size=args.seq)
    if len(blocks) < count * args.batch:
        raise ValueError(f"bench_amos: field 'documents': {args.documents} documents give {len(blocks)} blocks of "
                         f"{args.seq} tokens, fewer than {count} batches of {args.batch}")
    ids = torch.tensor(blocks[: count * args.batch]["input_ids"]).view(count, args.batch, args.seq)
    generator = torch.Generator().manual_seed(0)
    batches = []
    for original in ids:
        masked, labels = mask_tokens_for_mlm(original, mask_token_id=tokenizer.mask_token_id,
                                             vocab_size=len(tokenizer),
                                             special_tokens_mask=special_tokens_mask_for(original, tokenizer),
                                             generator=generator)
        batch = {"input_ids": masked, "attention_mask": torch.ones_like(original), "labels": labels,
                 "original_input_ids": original}
        batches.append({k: v.to(args.device) for k, v in batch.items()})
    args.vocab = len(tokenizer)
    return batches


def amos_step(model, optimizer, batch, mixture="adversarial", device="cpu", bf16=False):
    # bf16: the forward (loss included) under autocast, the backward outside it, as Trainer's bf16 runs (and torch's
    # guidance): autocast in backward would run the fused mixture's own backward matmul in bf16 against its float32
    # saved softmax (hf_aux.amos.losses), a dtype mismatch
    with autocast(device, bf16):
        loss = model(**batch, mixture=mixture, mlm_probability=0.15).loss  # the rate it masks at, as AmosTrainer
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def disc_only_step(model, optimizer, batch, device="cpu", bf16=False):
    """ELECTRA's discriminator half alone: random replacements at the masked positions, RTD loss (eq. 1)."""
    masked = batch["labels"] != -100
    random_tokens = torch.randint_like(batch["original_input_ids"], 5, model.get_input_embeddings().num_embeddings)
    replaced = torch.where(masked, random_tokens, batch["original_input_ids"])
    with autocast(device, bf16):  # the forward under autocast, the backward outside, as amos_step
        logits = model.discriminator(input_ids=replaced, attention_mask=batch["attention_mask"]).logits
        loss = rtd_loss(logits, rtd_labels(replaced, batch["original_input_ids"]), batch["attention_mask"])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def timed(fn, device, syncs: HostSyncs | None = None):
    """Wall seconds of `fn`, the device's queued work included; `syncs` (if given) counts the host syncs of `fn`
    alone, not of the synchronizations around it."""
    synchronize(device)
    start = time.perf_counter()
    with counting(syncs):
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


def step_gflop(fn) -> float:
    """GFLOPs torch's FlopCounterMode counts in one call of `fn` (matrix products and attention, forward and
    backward; element-wise work such as softmax, Gumbel noise, dropout and the optimizer is not counted)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9


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
        return lambda b: disc_only_step(model, optimizer, b, device=args.device, bf16=args.bf16)
    return lambda b: amos_step(model, optimizer, b, device=args.device, bf16=args.bf16)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=12, help="discriminator depth")
    parser.add_argument("--generator_layers", type=int, default=8, help="generator depth d_K")
    parser.add_argument("--mlm_layers", type=int, nargs="+", default=[4, 6, 8])
    parser.add_argument("--base", action="store_true",
                        help="BERT-base proportions (the paper's setting): hidden 768, 12 attention heads, FFN 3072; "
                             "depths and heads as given (12-layer discriminator, generator 8 with heads at 4/6/8)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--documents", type=int, default=300, help="demo documents per source to cut blocks from")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3)
    add_device_arguments(parser, default="cuda" if torch.cuda.is_available() else "cpu")  # --device, --bf16
    parser.add_argument("--sources", nargs="+", default=["wikipedia", "imdb"],
                        help="demo unlabelled-text sources the batches are cut from (imdb alone needs no gensim)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer folder (default: the MiniLM package's; its vocabulary sizes the models)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--memory_of", choices=["amos", "electra", "disc_only"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_up_malloc(args)  # the memory child too (it gets the same arguments)
    if args.base:
        args.hidden = 768
    if args.threads:
        torch.set_num_threads(args.threads)

    batches = real_batches(args, 4)
    if args.memory_of:  # the child process of memory_in_subprocess
        run = configuration(args, args.memory_of)
        print(peak_memory_mb(lambda: run(batches[0]), args.device))
        return
    names = ("amos", "electra", "disc_only")
    # each configuration's memory on its own: a fresh process per configuration on CPU
    memory = {name: memory_in_subprocess(name) if args.device == "cpu" else None for name in names}
    runs = {name: configuration(args, name) for name in names}
    if args.device != "cpu":
        memory = {name: peak_memory_mb(functools.partial(runs[name], batches[0]), args.device) for name in names}
    # FLOPs of one step (matmuls and attention, forward + backward, counted by torch): the ratios a perfectly
    # compute-bound step would give, i.e. the part of the cost that is inherent to the extra heads
    gflop = {name: step_gflop(functools.partial(run, batches[0])) for name, run in runs.items()}
    for i in range(args.warmup):
        for run in runs.values():
            run(batches[i % len(batches)])
    times = {name: [] for name in runs}
    syncs = HostSyncs(args.device)  # the AMOS steps' synchronizing calls (None on CPU)
    for i in range(args.steps):
        for name, run in runs.items():  # interleaved, so drifting load hits all three alike
            times[name].append(timed(functools.partial(run, batches[i % len(batches)]), args.device,
                                     syncs if name == "amos" else None))
    median = {name: statistics.median(t) for name, t in times.items()}
    reads = count_per_call(functools.partial(runs["amos"], batches[0]))  # host reads of an AMOS step, not timed
    peak = matmul_peak_tflops(args.device)  # after the timed steps, so its large buffers are not in their way
    utilisation = {name: mfu(gflop[name], median[name], peak) for name in runs}
    ratio, disc_ratio = median["amos"] / median["electra"], median["amos"] / median["disc_only"]
    per_pair = [a / e for a, e in zip(times["amos"], times["electra"])]
    print(f"device {args.device}, threads {torch.get_num_threads()}, hidden {args.hidden}, discriminator "
          f"{args.layers} layers, generator {args.generator_layers} layers, heads at {args.mlm_layers}, vocab "
          f"{args.vocab}, batch {args.batch}x{args.seq}, {args.steps} interleaved steps each"
          f"{', bf16 autocast' if args.bf16 else ''}")
    for name in runs:
        print(f"  {name:9s} median {median[name] * 1000:8.1f} ms/step  peak memory {memory[name]:8.1f} MB")
    print(f"  AMOS / ELECTRA (same generator depth): {ratio:.3f} (goal <= 1.10); per-pair ratios: median "
          f"{statistics.median(per_pair):.3f}, quartiles {statistics.quantiles(per_pair, n=4)[0]:.3f}.."
          f"{statistics.quantiles(per_pair, n=4)[2]:.3f}")
    print(f"  AMOS / discriminator only: {disc_ratio:.3f} (goal <= 2.0)")
    print("  FLOPs per step (matmul + attention, fwd + bwd): " + ", ".join(f"{k} {v:.1f} G" for k, v in gflop.items())
          + f"; FLOP ratios AMOS / ELECTRA {gflop['amos'] / gflop['electra']:.3f}, AMOS / discriminator "
          f"{gflop['amos'] / gflop['disc_only']:.3f}")
    print(f"  MFU (of {peak_label(args.device, peak)}): " + ", ".join(f"{k} {v:.1%}" for k, v in utilisation.items()))
    report = syncs.report()
    if report is not None:
        print(f"  host syncs per AMOS step: {report['per_window']} ({report['by_line']})")
    print(f"  AMOS: {describe(reads, 'step')}")
    print(json.dumps({"metric": "amos_vs_electra_step_ratio", "ratio": round(ratio, 4), "goal": 1.10,
                      "disc_only_ratio": round(disc_ratio, 4), "disc_only_goal": 2.0,
                      "median_ms": {k: round(v * 1000, 1) for k, v in median.items()},
                      "gflop_per_step": {k: round(v, 2) for k, v in gflop.items()},
                      "flop_ratio": round(gflop["amos"] / gflop["electra"], 4),
                      "disc_only_flop_ratio": round(gflop["amos"] / gflop["disc_only"], 4),
                      "peak_memory_mb": {k: round(v, 1) for k, v in memory.items()}, "device": args.device,
                      "hidden": args.hidden, "layers": args.layers, "generator_layers": args.generator_layers,
                      "mlm_layers": args.mlm_layers, "allocator": allocator(), "bf16": args.bf16,
                      "sources": args.sources, "tokenizer": args.tokenizer and folder_label(args.tokenizer),
                      "matmul_peak_tflops": round(peak, 4), "mfu": utilisation,
                      "host_syncs_per_step": report, "host_reads_per_step": summary(reads)}))


if __name__ == "__main__":
    main()
