"""Trains one hf_aux trainer for a few steps on tiny local data and writes what tests/test_ddp.py compares.

    python -m torch.distributed.run --nproc_per_node 2 tests/ddp_worker.py OUT muppet amos tartan:mt tartan:meta
    python tests/ddp_worker.py OUT muppet amos tartan:mt --grad-accum 2     # the same global batches, one process

Every process builds the same data and the same model (fixed seeds, dropout 0 but in the TARTAN '-dropout'
variants), so the runs differ only in how the global batch is split. Several jobs run one after another in the same processes (one start-up for all).
For each job, each rank writes OUT/<trainer>-<variant>/params_rank<r>.pt ({"world_size", "params"}: its final
parameters, those it started from, and its training logs' `<family>/<name>` metrics) and, for TARTAN, task_weights_rank<r>.json (its task-weight history, one row per optimizer step). A
trainer that refuses the setting writes refused_rank<r>.txt with its message instead.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # tests/tiny.py and the hf_aux checkout

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import datasets  # noqa: E402
import torch  # noqa: E402
from tiny import tiny_config, tiny_tokenizer  # noqa: E402
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification  # noqa: E402

from hf_aux import registry  # noqa: E402
from hf_aux.tasks.data import MultiTaskCollator, group_texts_for_mlm, tokenize_task  # noqa: E402
from hf_aux.tasks.loading import TaskSpec  # noqa: E402

torch.set_num_threads(1)

WORDS = "good bad movie film great terrible fun boring love hate the plot story actor".split()
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def sentences(n: int, seed: int, length=(3, 9)) -> list[str]:
    """n sentences of varying length (so batches need padding) from a fixed generator."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(length[0], length[1], (1,), generator=g))
        out.append(" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (k,), generator=g)))
    return out


def common_args(out: str, options) -> dict:
    return dict(output_dir=os.path.join(out, "run"), per_device_train_batch_size=options.batch,
                gradient_accumulation_steps=options.grad_accum, max_steps=options.steps, learning_rate=1e-2,
                warmup_steps=0, lr_scheduler_type="constant", report_to=[], save_strategy="no", logging_steps=1,
                use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0,
                ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None)


def make_muppet(out, options):
    from hf_aux.modeling.multitask import MultiTaskModelConfig, MultiTaskModel
    from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer

    tokenizer = tiny_tokenizer()
    labels = lambda n, k, s: torch.randint(k, (n,), generator=torch.Generator().manual_seed(s)).tolist()  # noqa: E731
    tasks = [TaskSpec(name="sent", kind="classification", num_labels=2,
                      dataset=datasets.Dataset.from_dict({"text": sentences(24, 1), "label": labels(24, 2, 1)})),
             TaskSpec(name="topic", kind="classification", num_labels=3,
                      dataset=datasets.Dataset.from_dict({"text": sentences(16, 2), "label": labels(16, 3, 2)}))]
    train = {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=16) for t in tasks}
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config("bert", tokenizer, **NO_DROPOUT))
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=tasks, classifier_dropout=0.0), body=body)
    if options.robust == "meta":  # end-task-aware weighting toward a third task (muppet:meta)
        end = TaskSpec(name="end", kind="classification", num_labels=2,
                       dataset=datasets.Dataset.from_dict({"text": sentences(16, 3), "label": labels(16, 2, 3)}))
        args = MuppetConfig(**common_args(out, options), task_weighting="meta", meta_head_steps=3, task_weight_lr=0.5)
        return MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, end_task=end,
                             end_task_dataset=tokenize_task(end, end.dataset, tokenizer, max_length=16))
    if options.robust == "budget":  # token-budget sub-batches of 2-8 rows (muppet:budget), each sub-batch recorded
        args = MuppetConfig(**{**common_args(out, options), "per_device_train_batch_size": 16}, max_tokens_per_batch=40)
        collate = MultiTaskCollator(tokenizer, model.task_names)
        seen = []
        trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                                data_collator=lambda rows: seen.append([list(r["input_ids"]) for r in rows]) or
                                collate(rows))
        trainer.recorded_batches = seen
        return trainer
    args = MuppetConfig(**common_args(out, options), robust_finetuning=options.robust, r3f_eps=1e-2)
    return MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)


def make_amos(out, options):
    from hf_aux.amos.model import AmosModel, AmosModelConfig
    from hf_aux.amos.trainer import AmosConfig, AmosTrainer

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = AmosModelConfig.from_configs(tiny_config("electra", tokenizer, **NO_DROPOUT),
                                          tiny_config("electra", tokenizer, **NO_DROPOUT), mlm_layers=[1, 2])
    model = AmosModel(config)
    text = datasets.Dataset.from_dict({"text": sentences(40, 3, length=(6, 14))})
    data = group_texts_for_mlm(text, tokenizer, text_column="text", block_size=16)
    args = AmosConfig(**common_args(out, options))
    return AmosTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)


def make_tartan(out, options):
    from hf_aux.tartan.model import TartanModel
    from hf_aux.tartan.trainer import TartanConfig, TartanTrainer

    tokenizer = tiny_tokenizer()

    def encode(texts, seed):
        labels = torch.randint(2, (len(texts),), generator=torch.Generator().manual_seed(seed)).tolist()
        return datasets.Dataset.from_dict({**tokenizer(texts, truncation=True, max_length=16), "labels": labels})

    train, val = encode(sentences(32, 4), 4), encode(sentences(16, 5), 5)
    aux = {name: group_texts_for_mlm(datasets.Dataset.from_dict({"text": sentences(30, seed, length=(5, 12))}),
                                     tokenizer, text_column="text", block_size=12)
           for name, seed in (("tapt", 6), ("dapt", 7))}
    torch.manual_seed(0)
    # "mt-dropout": dropout 0.1, seeded per micro-batch by the trainer; "mt-warmup": 3 MLM head warm-up steps first
    mode, _, extra = options.mode.partition("-")
    dropout = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1} if extra == "dropout" else NO_DROPOUT
    warmup = {"mlm_head_warmup_steps": 3, "mlm_head_warmup_lr": 1e-2} if extra == "warmup" else {}
    classifier = AutoModelForSequenceClassification.from_config(tiny_config("bert", tokenizer, num_labels=2,
                                                                            **dropout))
    model = TartanModel(classifier, list(aux))
    args = TartanConfig(**common_args(out, options), mode=mode, meta_head=options.meta_head,
                        meta_head_steps=3, task_weight_lr=0.5, **warmup)
    return TartanTrainer(model=model, args=args, train_dataset=train, eval_dataset=val, auxiliary_datasets=aux,
                         processing_class=tokenizer)


def make_meta_lm(out, options):
    from hf_aux.meta_lm.teacher import add_meta_lm_tokens
    from hf_aux.meta_lm.trainer import MetaLMConfig, MetaLMTrainer

    tokenizer = tiny_tokenizer()
    add_meta_lm_tokens(tokenizer, ["sent"], num_labels=2)
    torch.manual_seed(0)
    objective, _, extra = options.objective.partition("-")  # "mlm-dropout": dropout 0.1, seeded per micro-batch
    dropout = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1} if extra == "dropout" else NO_DROPOUT
    student = AutoModelForMaskedLM.from_config(tiny_config("bert", tokenizer, vocab_size=len(tokenizer),
                                                           attn_implementation="eager", **dropout))
    blocks = group_texts_for_mlm(datasets.Dataset.from_dict({"text": sentences(30, 8, length=(5, 12))}), tokenizer,
                                 text_column="text", block_size=12)
    texts = sentences(16, 9)
    labelled = datasets.Dataset.from_dict({**tokenizer(texts, truncation=True, max_length=16),
                                           "label": [i % 2 for i in range(16)]})
    args = MetaLMConfig(**common_args(out, options), objective=objective)
    return MetaLMTrainer(model=student, args=args, labelled_tasks={"sent": labelled}, train_dataset=blocks,
                         processing_class=tokenizer)


# every registered method that has a `make_<package>` factory here (a new method adds one to be tested under DDP)
TRAINERS = {record.package: globals()[f"make_{record.package}"] for record in registry.methods()
            if f"make_{record.package}" in globals()}
VARIANT_OPTION = {"muppet": "robust", "tartan": "mode", "meta_lm": "objective"}  # what "trainer:variant" sets


def run_job(job: str, out: str, options) -> None:
    """Train one job ("trainer" or "trainer:variant") and write its results under out/<trainer>-<variant>/."""
    name, _, variant = job.partition(":")
    if name not in TRAINERS:
        raise SystemExit(f"unknown trainer {name!r}; one of {list(TRAINERS)}")
    job_options = argparse.Namespace(**vars(options))
    if variant:
        setattr(job_options, VARIANT_OPTION[name], variant)
    folder = os.path.join(out, job.replace(":", "-"))
    os.makedirs(folder, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    try:
        trainer = TRAINERS[name](folder, job_options)
    except ValueError as error:  # a setting the trainer refuses: every rank raises the same, before training
        with open(os.path.join(folder, f"refused_rank{rank}.txt"), "w") as f:
            f.write(str(error))
        return

    def parameters():
        model = trainer.accelerator.unwrap_model(trainer.model)
        return {k: p.detach().cpu().clone() for k, p in model.named_parameters()}

    initial = parameters()
    trainer.train()
    logged = [{k: v for k, v in entry.items() if "/" in k} for entry in trainer.state.log_history if "loss" in entry]
    torch.save({"world_size": trainer.args.world_size, "initial": initial, "params": parameters(), "logged": logged,
                "batches": getattr(trainer, "recorded_batches", None)}, os.path.join(folder, f"params_rank{rank}.pt"))
    if name == "tartan" or variant == "meta":
        state = trainer.task_weights_state
        with open(os.path.join(folder, f"task_weights_rank{rank}.json"), "w") as f:
            json.dump({"history": state.history, "weights": state.weights, "head_warmup": state.head_warmup}, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("jobs", nargs="+", help="trainer or trainer:variant, e.g. muppet:r3f tartan:meta meta_lm:soft")
    parser.add_argument("--batch", type=int, default=4, help="per-device train batch size")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--robust", default="none", help="MUPPET: none | r3f | meta (task_weighting meta) | budget "
                        "(max_tokens_per_batch)")
    parser.add_argument("--mode", default="mt", help="TARTAN: mt | meta, '-dropout' for dropout 0.1 (mt-dropout)")
    parser.add_argument("--meta-head", default="separate", help="TARTAN: separate | same")
    parser.add_argument("--objective", default="mlm", help="MetaLM: mlm | hard | soft, 'mlm-dropout' for dropout 0.1")
    options = parser.parse_args()
    for job in options.jobs:
        run_job(job, options.out, options)


if __name__ == "__main__":
    main()
