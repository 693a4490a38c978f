"""The paper's Two Moons experiment (§4.2, Appendix A.1, Table 10) at a reduced, documented scale.

Data and model exactly as the paper (hf_aux.two_moons): make_moons coordinates scaled and floored to integers in
[0, 64), 16 sorted points per unlabelled sequence, a 512-token vocabulary, Table 4's model (2 layers, hidden 8).
Pretraining follows Table 5 (batch 4, 4 samples per task, accumulation 4, peak lr 2.5e-3 with an inverse
square-root schedule, lambda_meta 1 for hard and 100 for soft labels, MLM as a labelled task for soft labels);
fine-tuning follows Table 6 (100 epochs, peak lr 1.2e-2, 10 warmup steps, batch 1/2/4/8/16 for 10..160 points,
the LM head predicting the label token, best epoch by validation accuracy) and the test set has 1,000 points.

Reduced (the paper pretrains on 640k sequences, 20 epochs of 32k): by default 4,000 unlabelled sequences and
`--meta_steps 1500` student steps of 4 sequences (6,000 sequences, about 1% of the paper) for every objective; the
MLM baseline sees the same sequences in 4x fewer optimizer steps (accumulation 4, as Table 5). During pretraining
the meta objectives use the 10-point labelled set (the smallest finetune set; the finetune sets are nested, the
first n of 160 points). One seed (the paper averages five runs), so differences of a few points are noise.
Fine-tuning uses the cross-entropy over the two label tokens' logits (`--finetune_loss labels`). The softmax over
the whole vocabulary (`--finetune_loss vocab`) put every objective at 50.00: through the tied LM head it pushes all
coordinate embeddings along one shared direction until the hidden-8 model cannot tell inputs apart (hf_aux.two_moons).

Measured with the defaults (`python benchmarks/two_moons.py`, seed 0, BERT post-LN; `--pre_ln` switches to the
paper's pre-LN layout, not measured here); test accuracy %, 1,000 points. Runtime: it uses 1 torch thread
(`--threads 1`); at commit 68c7e48 `/usr/bin/time -v` measured 672.6 s user + 2.5 s system = 11.3 minutes of
process CPU time (peak RSS 654 MiB), so on 2 idle cores it finishes in about 11.5 minutes, well within the issue's
30; the wall time of that run was 22:00 because the machine was shared (load average 2.7 at the start, 3.5-4
during the run). Per objective, pretraining and fine-tuning: MLM 133 s, hard 297 s, soft 455 s, soft fixed y 422 s
of wall time.

| Model | 10 examples | 20 examples | 40 examples | 80 examples | 160 examples |
|---|---|---|---|---|---|
| MLM (latest) | 60.80 | 69.90 | 80.20 | 80.30 | 88.30 |
| Hard | 55.10 | 61.30 | 73.60 | 80.40 | 88.10 |
| Soft | 52.10 | 50.00 | 71.90 | 74.20 | 85.70 |
| Soft (fixed y) | 65.10 | 69.10 | 84.40 | 95.00 | 91.40 |

Training accuracy is 100% at every size except soft labels with 20 points (55%: that fine-tuning did not fit, hence
its 50.00), so fine-tuning works; with one seed and ~1% of the paper's pretraining the differences between
objectives are mostly noise. An earlier timing (11.4 minutes, on code from before the MLM baseline's dropout was
seeded by the micro-batch's place in the stream, dcd16c8, and before hard labels drew their samples by inverse CDF)
printed the same soft-fixed-y row (95.10 at 80) and other numbers elsewhere (one seed: 1,500 steps amplify a
changed random draw or rounding order): MLM 59.50 / 57.40 / 78.90 / 74.50 / 89.60, hard 53.70
/ 52.20 / 77.30 / 85.10 / 86.10, soft 55.00 / 52.60 / 62.90 / 78.10 / 86.50. Paper (Table 10, five seeds): MLM 61.4
/ 76.6 / 82.4 / 85.3 / 92.3, hard 60.6 / 62.9 / 74.8 / 86.0 / 90.5, soft 56.3 / 74.6 / 71.0 / 86.2 / 93.2, soft
fixed y 75.1 at 10 and 94.0 at 160; as there, fixed y is the best at this scale.

    python benchmarks/two_moons.py                    # ~11.5 minutes of CPU time (1 thread)
    python benchmarks/two_moons.py --meta_steps 300 --finetune_epochs 20    # a quick look (~4 minutes)
Prints a table shaped like the paper's Table 10 (test accuracy %, per finetune set size).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch


def pretrain(objective: str, opts, data, tokenizer, out_dir: str, fixed_y: bool = False) -> str:
    from transformers import AutoModelForMaskedLM

    from hf_aux.modeling.teacher import MetaLMTeacher
    from hf_aux.trainers.meta_lm import MetaLMConfig, MetaLMTrainer
    from hf_aux.two_moons import TASK_NAME, two_moons_model_config

    torch.manual_seed(opts.seed)
    student = AutoModelForMaskedLM.from_config(two_moons_model_config(tokenizer, pre_ln=opts.pre_ln),
                                                   attn_implementation="eager")
    steps = opts.meta_steps if objective != "mlm" else max(1, opts.meta_steps // 4)
    kwargs = dict(output_dir=out_dir, objective=objective, per_device_train_batch_size=4, samples_per_task=4,
                  max_steps=steps, learning_rate=2.5e-3, warmup_steps=max(1, steps // 10), report_to=[],
                  use_cpu=True, save_strategy="no", logging_steps=max(1, steps // 5), disable_tqdm=True,
                  seed=opts.seed, fixed_y=fixed_y)
    if objective == "mlm":
        kwargs["gradient_accumulation_steps"] = 4
    else:
        kwargs.update(teacher_gradient_accumulation_steps=4, lambda_meta=100.0 if objective == "soft" else 1.0)
    teacher = None if objective == "mlm" else MetaLMTeacher.from_student_config(student.config)
    trainer = MetaLMTrainer(model=student, teacher=teacher, args=MetaLMConfig(**kwargs),
                            labelled_tasks={TASK_NAME: data["pretrain_labelled"]}, train_dataset=data["unlabelled"],
                            processing_class=tokenizer)
    trainer.train()
    trainer.save_model(out_dir)
    last = [log for log in trainer.state.log_history if "loss" in log][-1]
    print(f"  pretrained {objective}{' (fixed y)' if fixed_y else ''}: {steps} steps, last log "
          + json.dumps({k: round(v, 4) for k, v in last.items() if isinstance(v, float)}), flush=True)
    return out_dir


def finetune(checkpoint: str, size: int, opts, data, tokenizer) -> tuple[float, float]:
    """Table 6 on the first `size` finetune points (hf_aux.two_moons.finetune_moons): (test %, train %)."""
    from transformers import AutoModelForMaskedLM

    from hf_aux.two_moons import finetune_moons

    torch.manual_seed(opts.seed)
    model = AutoModelForMaskedLM.from_pretrained(checkpoint)
    batch = {10: 1, 20: 2, 40: 4, 80: 8, 160: 16}.get(size, max(1, size // 10))
    result = finetune_moons(model, tokenizer, data["finetune"].select(range(size)),
                            data["validation"].select(range(min(size, 128))), data["test"],
                            epochs=opts.finetune_epochs, learning_rate=opts.finetune_lr, batch_size=batch,
                            eval_every=opts.eval_every, loss=opts.finetune_loss, seed=opts.seed)
    return 100 * result["test"], 100 * result["train"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--meta_steps", type=int, default=1500)
    parser.add_argument("--num_unlabelled", type=int, default=4000)
    parser.add_argument("--finetune_epochs", type=int, default=100)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--finetune_lr", type=float, default=1.2e-2, help="peak fine-tuning lr (Table 6: 1.2e-2)")
    parser.add_argument("--finetune_loss", choices=["labels", "vocab"], default="labels",
                        help="cross-entropy over the label tokens (default) or the whole vocabulary (collapses)")
    parser.add_argument("--pre_ln", action="store_true", help="the paper's pre-LN encoder (roberta-prelayernorm)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    parser.add_argument("--objectives", nargs="+", default=["mlm", "hard", "soft", "soft_fixed_y"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for hidden 8)")
    parser.add_argument("--output_dir", default=None)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)

    from hf_aux.two_moons import FINETUNE_SIZES, two_moons_data, two_moons_tokenizer

    tokenizer = two_moons_tokenizer()
    moons = two_moons_data(num_unlabelled=opts.num_unlabelled, finetune_size=max(FINETUNE_SIZES), seed=opts.seed)
    blocks = moons["unlabelled"].map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
    blocks = blocks.remove_columns([c for c in blocks.column_names if c not in ("input_ids", "attention_mask")])
    smallest = moons["train"].select(range(min(opts.sizes)))
    data = {"unlabelled": blocks, "finetune": moons["train"], "validation": moons["validation"], "test": moons["test"],
            "pretrain_labelled": smallest.map(lambda b: {"input_ids": tokenizer(b["text"])["input_ids"]},
                                              batched=True, remove_columns=["text"])}
    root = opts.output_dir or tempfile.mkdtemp(prefix="two_moons_")
    names = {"mlm": "MLM (latest)", "hard": "Hard", "soft": "Soft", "soft_fixed_y": "Soft (fixed y)"}
    results = {}
    for objective in opts.objectives:
        start = time.time()
        base = objective.replace("_fixed_y", "")
        checkpoint = pretrain(base, opts, data, tokenizer, os.path.join(root, objective),
                              fixed_y=objective.endswith("fixed_y"))
        runs = [finetune(checkpoint, size, opts, data, tokenizer) for size in opts.sizes]
        results[objective] = [test for test, _ in runs]
        print(f"  {names[objective]}: test {['%.1f' % test for test, _ in runs]}, "
              f"train {['%.1f' % train for _, train in runs]} ({time.time() - start:.0f} s)", flush=True)

    header = "| Model | " + " | ".join(f"{s} examples" for s in opts.sizes) + " |"
    print(f"\nTwo Moons test accuracy (%), {opts.meta_steps} meta steps x 4 sequences, "
          f"{opts.finetune_epochs} finetune epochs (loss over {opts.finetune_loss}), seed {opts.seed}")
    print(header)
    print("|" + "---|" * (len(opts.sizes) + 1))
    for objective, accs in results.items():
        print(f"| {names[objective]} | " + " | ".join(f"{a:.2f}" for a in accs) + " |")
    print(json.dumps({"metric": "two_moons_test_accuracy", "sizes": opts.sizes,
                      **{k: [round(a, 2) for a in v] for k, v in results.items()}}))


if __name__ == "__main__":
    main()
