"""Step time and peak memory of MetaLMTrainer's meta steps against a plain MLM step of the same student.

Configurations (teacher the student's size, auxiliary teacher losses on, same batch): hard labels, soft labels
second order, soft labels first order; each against `objective="mlm"`. A "step" is what Trainer's loop does per
optimizer step: training_step, gradient clipping, optimizer.step(), scheduler.step(), zero_grad (the meta steps
also run the teacher's optimizer inside training_step). Runs are interleaved (MLM, X, MLM, Y, ...) after a
warm-up; ratios are medians of each step over its neighbouring MLM steps, in wall time and in process CPU time
(1 torch thread by default, so CPU time is the work done and robust to other jobs on a shared machine). Memory:
the bytes of all tensors saved for backward during one step (what the autograd graphs hold beyond parameters and
optimizer state).

Real data (`--data text`, default): unlabelled blocks from the demo's Wikipedia and IMDB text
(`hf_aux.demo.demo_unlabelled_text`), the labelled side the demo's rotten_tomatoes task, MiniLM's tokenizer
(vocabulary 30,522), as run_meta_lm.py does for real text; `--data moons`: the paper's Two Moons data (vocabulary
512). The student is a BERT of `--hidden`/`--layers` built from scratch; the teacher has its architecture.

Passes per step. U = one forward + backward of the student on the batch; the teacher is the student's encoder with
TWO vocabulary heads, so one teacher row costs r U with r ~ 1 when the vocabulary projection is small next to the
encoder (Two Moons) and r ~ 2 when it dominates (30k vocabulary, hidden 64):
  mlm                1 U.
  hard               teacher forward + backward over 3 rows per example (x_u for the samples, x_u as an MLM task
                     and x_m for the two auxiliary losses: one shared forward) 3r U, the pseudo step 1 U, the
                     support step 1 U, the query gradient 1 U: ~(3r + 3) U, ~6 U on Two Moons (goal 6.0).
  soft, 2nd order    teacher 3r U, pseudo step with create_graph 1 U, support step with create_graph 1 U, query
                     1 U, the backward through both backward graphs ~2 x 2 U: ~(3r + 7) U (goal 9.0), plus the
                     [B, L, V] soft-label products (probabilities x embedding matrix, soft cross entropy).
  soft, 1st order    teacher 3r U, pseudo step 1 U (its ONE backward gives the student's gradient and the gradient
                     w.r.t. the soft labels together), support 1 U, query 1 U, then the forward difference of
                     `losses.first_order_soft_label_grads`: one more pseudo forward at theta_0 + e w and a backward
                     to the soft labels only (~0.7 U), no double backward: ~(3r + 3.7) U. The issue's 5.0 goal is
                     below this count whenever the teacher's auxiliary losses are on (3r >= 3 U by themselves); it
                     was met by neither form (the double-backward form measured 5.4-7.2 before).

    python benchmarks/bench_meta_lm.py                   # real text, BERT hidden 64, 2 layers, 8 x 32 tokens
    python benchmarks/bench_meta_lm.py --data moons --rounds 8
    python benchmarks/bench_meta_lm.py --hidden 256 --layers 4 --length 64 --rounds 6
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

GOALS = {"hard": 6.0, "soft": 9.0, "soft_first_order": 5.0}


def real_data(opts):
    """-> tokenizer (with the meta-LM tokens), unlabelled blocks, labelled task {name: dataset}.

    text: unlabelled blocks of `--length` tokens from the demo's Wikipedia and IMDB text
    (hf_aux.demo.demo_unlabelled_text), the labelled side the demo's rotten_tomatoes task, MiniLM's tokenizer
    (vocabulary 30,522), as run_meta_lm.py does for real text. moons: the paper's Two Moons data (§4.2,
    hf_aux.two_moons: 16 sorted points per sequence, vocabulary 512, the 160-point finetune set)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from hf_aux.data import group_texts_for_mlm
    from hf_aux.modeling.teacher import add_meta_lm_tokens

    if opts.data == "moons":
        from hf_aux.two_moons import TASK_NAME, two_moons_data, two_moons_tokenizer

        tok = two_moons_tokenizer()
        moons = two_moons_data(num_unlabelled=256, finetune_size=160, seed=0)
        blocks = moons["unlabelled"].map(lambda b: tok(b["text"]), batched=True, remove_columns=["text"])
        labelled = moons["train"].map(lambda b: {"input_ids": tok(b["text"])["input_ids"]}, batched=True,
                                      remove_columns=["text"])
        return tok, blocks.select_columns(["input_ids", "attention_mask"]), {TASK_NAME: labelled}
    from hf_aux.demo import demo_task, demo_unlabelled_text, minilm_path

    tok = AutoTokenizer.from_pretrained(minilm_path())
    text = demo_unlabelled_text(max_documents=60, seed=0)
    blocks = group_texts_for_mlm(text, tok, block_size=opts.length)
    blocks = blocks.select(range(min(256, len(blocks))))
    train = demo_task("rotten_tomatoes", seed=0, max_train_samples=256).dataset["train"]
    encoded = tok(list(train["text"]), truncation=True, max_length=opts.length)
    labelled = Dataset.from_dict({"input_ids": encoded["input_ids"], "label": list(train["label"])})
    add_meta_lm_tokens(tok, ["rotten_tomatoes"], 2)
    return tok, blocks, {"rotten_tomatoes": labelled}


def build(kind: str, opts, data):
    from transformers import AutoModelForMaskedLM, BertConfig

    from hf_aux.modeling.teacher import MetaLMTeacher
    from hf_aux.trainers.meta_lm import MetaLMConfig, MetaLMTrainer

    tok, unlabelled, labelled = data
    config = BertConfig(vocab_size=len(tok), hidden_size=opts.hidden, num_hidden_layers=opts.layers,
                        num_attention_heads=max(1, opts.hidden // 32), intermediate_size=4 * opts.hidden,
                        max_position_embeddings=max(64, opts.length), pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    student = AutoModelForMaskedLM.from_config(config, attn_implementation="eager")
    objective = {"mlm": "mlm", "hard": "hard", "soft": "soft", "soft_first_order": "soft"}[kind]
    args = MetaLMConfig(output_dir=tempfile.mkdtemp(), objective=objective, first_order=kind == "soft_first_order",
                        per_device_train_batch_size=opts.batch, max_steps=10_000, learning_rate=1e-3,
                        warmup_steps=0, teacher_aux_losses=True, mlm_task_probability=0.0, report_to=[],
                        use_cpu=True, save_strategy="no", disable_tqdm=True)
    teacher = None if objective == "mlm" else MetaLMTeacher.from_student_config(student.config)
    trainer = MetaLMTrainer(model=student, teacher=teacher, args=args, labelled_tasks=labelled,
                            train_dataset=unlabelled, processing_class=tok)
    trainer.create_optimizer_and_scheduler(num_training_steps=10_000)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; the benchmark drives steps itself
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    return trainer, batch


def full_step(trainer, batch) -> tuple[float, float]:
    """One Trainer-loop step; returns (wall seconds, process CPU seconds)."""
    start, cpu = time.perf_counter(), time.process_time()
    trainer.training_step(trainer.model, batch)
    torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.args.max_grad_norm)
    trainer.optimizer.step()
    trainer.lr_scheduler.step()
    trainer.model.zero_grad(set_to_none=True)
    trainer._metrics.clear()
    return time.perf_counter() - start, time.process_time() - cpu


def saved_tensor_mb(trainer, batch) -> float:
    """Memory the autograd graphs of one step hold: the bytes of every tensor saved for backward (activations,
    and for the second-order steps the first backward's graph). A CPU-portable stand-in for peak memory minus
    parameters and optimizer state; no CUDA calls."""
    total = [0]

    def pack(tensor):
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        full_step(trainer, batch)
    return total[0] / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--data", choices=["text", "moons"], default="text",
                        help="text: demo Wikipedia/IMDB text + rotten_tomatoes, MiniLM tokenizer; moons: Two Moons")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: process CPU time is then a load-robust measure of the work)")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)

    kinds = ["hard", "soft", "soft_first_order"]
    data = real_data(opts)
    built = {k: build(k, opts, data) for k in ["mlm"] + kinds}
    for _ in range(opts.warmup):
        for trainer, batch in built.values():
            full_step(trainer, batch)
    times = {k: [] for k in built}
    ratios = {k: [] for k in kinds}
    cpu_ratios = {k: [] for k in kinds}
    for _ in range(opts.rounds):
        for k in kinds:  # MLM, X, MLM: each X against the mean of its two neighbouring MLM steps
            before = full_step(*built["mlm"])
            t = full_step(*built[k])
            after = full_step(*built["mlm"])
            times["mlm"] += [before[0], after[0]]
            times[k].append(t[0])
            ratios[k].append(t[0] / ((before[0] + after[0]) / 2))
            cpu_ratios[k].append(t[1] / ((before[1] + after[1]) / 2))
    memory = {k: saved_tensor_mb(*built[k]) for k in built}
    length = built["mlm"][1]["input_ids"].shape[1]
    print(f"data {opts.data}; student/teacher: BERT hidden {opts.hidden}, {opts.layers} layers, vocab "
          f"{len(data[0])}, batch {opts.batch} x {length} tokens, {opts.rounds} interleaved rounds, torch threads "
          f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'step':<22}{'median ms':>10}{'ratio vs MLM':>14}{'CPU-time ratio':>16}{'goal':>6}{'saved MB':>9}")
    print(f"{'mlm':<22}{1000 * statistics.median(times['mlm']):>10.1f}{1.0:>14.2f}{1.0:>16.2f}{'':>6}"
          f"{memory['mlm']:>9.1f}")
    summary, cpu_summary = {}, {}
    for k in kinds:
        summary[k], cpu_summary[k] = statistics.median(ratios[k]), statistics.median(cpu_ratios[k])
        print(f"{k:<22}{1000 * statistics.median(times[k]):>10.1f}{summary[k]:>14.2f}{cpu_summary[k]:>16.2f}"
              f"{GOALS[k]:>6.1f}{memory[k]:>9.1f}")
    print(json.dumps({"metric": "meta_lm_soft_vs_mlm_step_ratio", "data": opts.data, "ratio": round(summary["soft"], 2),
                      "goal": GOALS["soft"], "hard_ratio": round(summary["hard"], 2), "hard_goal": GOALS["hard"],
                      "first_order_ratio": round(summary["soft_first_order"], 2),
                      "first_order_goal": GOALS["soft_first_order"],
                      "cpu_time_ratios": {k: round(v, 2) for k, v in cpu_summary.items()},
                      "saved_for_backward_mb": {k: round(v, 1) for k, v in memory.items()}}))


if __name__ == "__main__":
    main()
