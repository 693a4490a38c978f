#!/usr/bin/env python
"""Pilots behind run_amos.py's embedded default: does the discriminator separate replaced from original tokens
within N steps? One configuration per invocation, measured every `--every` steps on 32 held-out blocks with fixed
masks: the exact AUC (sklearn's roc_auc_score) of the RTD logit over replaced vs original tokens, on the run's own
mixture and on each head's samples alone, the accuracies at p = 0.5 and the heads' MLM losses. The pilot's entry
in docs/evidence/amos_pilots.json is rewritten after every measurement, so a pilot cut short keeps what it
measured; `benchmarks/evidence/amos.py --report` renders them.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/evidence/amos_pilot.py --name minilm_imdb_b8 --mode minilm \\
        --sources imdb --steps 120 --every 20 --batch 8
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/evidence/amos_pilot.py --name scratch_default_b16 \\
        --mode scratch --sources wikipedia,imdb --steps 150 --every 50 --batch 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback  # noqa: E402

from benchmarks.evidence.common import load_runs  # noqa: E402
from hf_aux.data import group_texts_for_mlm, mask_tokens_for_mlm, special_tokens_mask_for  # noqa: E402
from hf_aux.demo import demo_unlabelled_text, minilm_path  # noqa: E402
from hf_aux.amos.model import AmosModel  # noqa: E402
from hf_aux.amos.trainer import AmosConfig, AmosTrainer  # noqa: E402

EVAL_BLOCKS = 32


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--mode", choices=("scratch", "minilm"), default="scratch",
                        help="scratch: run_amos.py's size flags from scratch; minilm: continued pretraining")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--sources", default="wikipedia,imdb")
    parser.add_argument("--gen_layers", type=int, default=4)
    parser.add_argument("--mlm_layers", default=None, help="comma-separated; default d_K/2, 3d_K/4, d_K")
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--mlm_probability", type=float, default=0.15)
    parser.add_argument("--mixture", default="adversarial")
    parser.add_argument("--output", default=str(ROOT / "docs" / "evidence" / "amos_pilots.json"))
    return parser.parse_args(argv)


def build_model(args: argparse.Namespace, tokenizer) -> AmosModel:
    mlm_layers = [int(x) for x in args.mlm_layers.split(",")] if args.mlm_layers else None
    if args.mode == "minilm":
        return AmosModel.from_pretrained_encoder(minilm_path(), args.gen_layers, mlm_layers=mlm_layers)
    from hf_aux.amos import command as amos_command  # what run_scripts/run_amos.py runs

    sizes = amos_command.ModelArguments(generator_num_hidden_layers=args.gen_layers, mlm_layers=mlm_layers)
    return amos_command.build_model(sizes, tokenizer, args.seq)


class Pilot:
    """Measures the model on fixed masked held-out blocks and keeps the pilot's record on disk."""

    def __init__(self, args: argparse.Namespace, tokenizer, held_out, num_heads: int):
        self.args = args
        self.ids = torch.tensor(held_out["input_ids"])
        self.masked, self.labels = mask_tokens_for_mlm(
            self.ids, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
            special_tokens_mask=special_tokens_mask_for(self.ids, tokenizer),
            mlm_probability=args.mlm_probability, generator=torch.Generator().manual_seed(0))
        self.num_heads = num_heads
        self.start = time.time()
        self.record = {"config": {k: v for k, v in vars(args).items() if k != "output"}, "curve": [],
                       "load_start": round(os.getloadavg()[0], 2)}

    @torch.no_grad()
    def measure(self, model, step: int) -> None:
        was_training = model.training
        model.eval()
        row = {"step": step, "wall": round(time.time() - self.start, 1)}
        own = "adversarial" if self.args.mixture == "adversarial" else "uniform"
        passes = [("mix", {"mixture": own})] + [(f"head{k}", {"mixture": "fixed", "head_index": k})
                                                 for k in range(self.num_heads)]
        with torch.random.fork_rng():
            for name, settings in passes:
                torch.manual_seed(1)  # the same Gumbel noise for every measurement
                scores, labels, losses = [], [], []
                for i in range(0, len(self.ids), 16):
                    out = model(self.masked[i:i + 16], labels=self.labels[i:i + 16],
                                original_input_ids=self.ids[i:i + 16], **settings)
                    scores.append(out.rtd_logits.flatten())
                    labels.append(out.rtd_labels.flatten())
                    losses.append(out.mlm_losses)
                score, label = torch.cat(scores).numpy(), torch.cat(labels).numpy()
                row[f"auc_{name}"] = round(float(roc_auc_score(label, score)), 4)
                if name == "mix":
                    row["acc_rep"] = round(float(((score > 0) & (label == 1)).sum() / label.sum()), 3)
                    row["acc_orig"] = round(float(((score <= 0) & (label == 0)).sum() / (label == 0).sum()), 3)
                    row["mlm"] = [round(x, 3) for x in torch.stack(losses).mean(0).tolist()]
        model.train(was_training)
        self.record["curve"].append(row)
        print(json.dumps(row), flush=True)
        self.save()

    def save(self) -> None:
        """Replace this pilot's entry in the pilots file (temporary file + rename)."""
        path = Path(self.args.output)
        runs = [run for run in load_runs(path) if run.get("name") != self.args.name]
        runs.append({"name": self.args.name, **self.record, "cpu_s": round(time.process_time(), 1)})
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
        os.replace(temporary, path)


class MeasureCallback(TrainerCallback):
    def __init__(self, pilot: Pilot):
        self.pilot = pilot

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.pilot.args.every == 0:
            self.pilot.measure(model, state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        weights = {k: round(v, 3) for k, v in (logs or {}).items() if k.startswith("mixture_weight")}
        if weights:
            self.pilot.record["weights_last"] = [state.global_step, weights]


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    text = demo_unlabelled_text(tuple(args.sources.split(",")), max_documents=2000, seed=42)
    split = text.train_test_split(test_size=0.05, seed=42)
    train = group_texts_for_mlm(split["train"], tokenizer, block_size=args.seq)
    held_out = group_texts_for_mlm(split["test"], tokenizer, block_size=args.seq).select(range(EVAL_BLOCKS))
    torch.manual_seed(42)
    model = build_model(args, tokenizer)
    pilot = Pilot(args, tokenizer, held_out, len(model.mlm_layers))
    pilot.measure(model, 0)
    config = AmosConfig(
        output_dir=os.path.join(os.environ.get("AMOS_EVIDENCE_WORK", "/tmp/amos_evidence"), f"pilot_{args.name}"),
        max_steps=args.steps, per_device_train_batch_size=args.batch, learning_rate=args.lr, warmup_steps=0.1,
        weight_decay=0.01, logging_steps=10, save_strategy="no", report_to="none", disable_tqdm=True,
        mlm_probability=args.mlm_probability, mixture=args.mixture, seed=42, use_cpu=True)
    AmosTrainer(model=model, args=config, train_dataset=train, processing_class=tokenizer,
                callbacks=[MeasureCallback(pilot)]).train()
    pilot.record["wall_s"] = round(time.time() - pilot.start, 1)
    pilot.save()


if __name__ == "__main__":
    main()
