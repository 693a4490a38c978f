#!/usr/bin/env python
"""Pilots behind run_amos.py's embedded default: does the discriminator separate replaced from original tokens within
N steps? One configuration per invocation, measured every `--every` steps on 32 held-out blocks with fixed masks (exact
AUC of the RTD logit on the run's own mixture and on each head's samples alone, accuracies at p = 0.5, the heads' MLM
losses); its entry in docs/evidence/amos_pilots.json is rewritten after every measurement. amos.py --report renders it.
E.g. `OMP_NUM_THREADS=1 nice -n 10 python benchmarks/evidence/amos_pilot.py --name minilm_imdb_b8 --mode minilm
--sources imdb --steps 120 --every 20 --batch 8`."""

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
from hf_aux import AmosConfig, AmosModel, AmosTrainer  # noqa: E402
from hf_aux.amos import command  # noqa: E402  (what run_scripts/run_amos.py runs)
from hf_aux.tasks.data import group_texts_for_mlm, mask_tokens_for_mlm, special_tokens_mask_for  # noqa: E402
from hf_aux.tasks.demo import demo_unlabelled_text, minilm_path  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--mode", choices=("scratch", "minilm"), default="scratch", help="scratch: run_amos.py's model")
    # --mlm_layers: comma-separated generator layers of the heads (default d_K/2, 3d_K/4, d_K)
    for flag, kind, default in (("steps", int, 150), ("lr", float, 5e-4), ("batch", int, 16), ("seq", int, 128),
                                ("sources", str, "wikipedia,imdb"), ("gen_layers", int, 4), ("mlm_layers", str, None),
                                ("every", int, 50), ("mlm_probability", float, 0.15), ("mixture", str, "adversarial"),
                                ("output", str, str(ROOT / "docs" / "evidence" / "amos_pilots.json"))):
        parser.add_argument(f"--{flag}", type=kind, default=default)
    return parser.parse_args(argv)


class Pilot(TrainerCallback):
    """Measures the model on fixed masked held-out blocks every `--every` steps and keeps the record on disk."""

    def __init__(self, args: argparse.Namespace, tokenizer, held_out):
        self.args, self.start, self.ids = args, time.time(), torch.tensor(held_out["input_ids"])
        self.masked, self.labels = mask_tokens_for_mlm(
            self.ids, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
            special_tokens_mask=special_tokens_mask_for(self.ids, tokenizer),
            mlm_probability=args.mlm_probability, generator=torch.Generator().manual_seed(0))
        self.record = {"config": {k: v for k, v in vars(args).items() if k != "output"}, "curve": [],
                       "load_start": round(os.getloadavg()[0], 2)}

    @torch.no_grad()
    def measure(self, model, step: int) -> None:
        row = {"step": step, "wall": round(time.time() - self.start, 1)}
        model.eval()  # the trainer sets train mode again before its next step
        passes = [("mix", {"mixture": "adversarial" if self.args.mixture == "adversarial" else "uniform"})] + [
            (f"head{k}", {"mixture": "fixed", "head_index": k}) for k in range(len(model.mlm_layers))]
        with torch.random.fork_rng():
            for name, settings in passes:
                torch.manual_seed(1)  # the same Gumbel noise for every measurement
                outs = [model(self.masked[i:i + 16], labels=self.labels[i:i + 16],
                              original_input_ids=self.ids[i:i + 16], **settings) for i in range(0, len(self.ids), 16)]
                score = torch.cat([out.rtd_logits.flatten() for out in outs]).numpy()
                label = torch.cat([out.rtd_labels.flatten() for out in outs]).numpy()
                row[f"auc_{name}"] = round(float(roc_auc_score(label, score)), 4)
                if name == "mix":
                    row["acc_rep"] = round(float(((score > 0) & (label == 1)).sum() / label.sum()), 3)
                    row["acc_orig"] = round(float(((score <= 0) & (label == 0)).sum() / (label == 0).sum()), 3)
                    row["mlm"] = [round(x, 3) for x in torch.stack([o.mlm_losses for o in outs]).mean(0).tolist()]
        self.record["curve"].append(row)
        self.save()
        print(json.dumps(row), flush=True)

    def save(self) -> None:  # this pilot's entry replaced (temporary file + rename): a reader never sees half a file
        path, temporary = Path(self.args.output), Path(self.args.output + ".tmp")
        runs = [run for run in load_runs(path) if run.get("name") != self.args.name]
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps({"runs": runs + [{"name": self.args.name, **self.record,
                                                           "cpu_s": round(time.process_time(), 1)}]}, indent=1) + "\n")
        os.replace(temporary, path)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.args.every == 0:
            self.measure(model, state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if weights := {k: round(v, 3) for k, v in (logs or {}).items() if k.startswith("mixture_weight")}:
            self.record["weights_last"] = [state.global_step, weights]


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    split = demo_unlabelled_text(tuple(args.sources.split(",")), max_documents=2000, seed=42).train_test_split(
        test_size=0.05, seed=42)
    blocks = {name: group_texts_for_mlm(text, tokenizer, block_size=args.seq) for name, text in split.items()}
    torch.manual_seed(42)  # minilm: MiniLM's continued pretraining; scratch: run_amos.py's model from scratch
    mlm_layers = [int(x) for x in args.mlm_layers.split(",")] if args.mlm_layers else None
    model = AmosModel.from_pretrained_encoder(minilm_path(), args.gen_layers, mlm_layers=mlm_layers) \
        if args.mode == "minilm" else command.build_model(command.ModelArguments(
            generator_num_hidden_layers=args.gen_layers, mlm_layers=mlm_layers), tokenizer, args.seq)
    pilot = Pilot(args, tokenizer, blocks["test"].select(range(32)))  # 32 held-out blocks
    pilot.measure(model, 0)
    config = AmosConfig(
        output_dir=os.path.join(os.environ.get("AMOS_EVIDENCE_WORK", "/tmp/amos_evidence"), f"pilot_{args.name}"),
        max_steps=args.steps, per_device_train_batch_size=args.batch, learning_rate=args.lr, warmup_steps=0.1,
        weight_decay=0.01, logging_steps=10, save_strategy="no", report_to="none", disable_tqdm=True,
        mlm_probability=args.mlm_probability, mixture=args.mixture, seed=42, use_cpu=True)
    AmosTrainer(model, config, train_dataset=blocks["train"], processing_class=tokenizer, callbacks=[pilot]).train()
    pilot.record["wall_s"] = round(time.time() - pilot.start, 1)
    pilot.save()


if __name__ == "__main__":
    main()
