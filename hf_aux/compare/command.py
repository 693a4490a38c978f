"""`hf-aux compare`: did this checkpoint fine-tune better than that one on my task, by more than noise?

Every model of every arm is fine-tuned on one task with each seed by `hf-aux finetune`'s steps and flags, alike for
every arm, and each arm is compared with the baseline (hf_aux.compare.statistics). Outputs in --output_dir:
compare.json (cached as each fine-tuning finishes: the same command continues), compare.md, compare.png, a summary.
Python entry points: `run_comparison` (a whole comparison) and `fine_tune` (one fine-tuning: the evidence studies).
docs/compare.md says how to read the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from ..finetune.command import DATA_SOURCE_FLAGS, DataTrainingArguments, ModelArguments
from ..runtime.config import AuxConfig
from ..errors import UserInputError
from . import engine

logger = logging.getLogger("hf_aux")


@dataclass
class CompareArguments:
    arm: list[str] = field(default_factory=list, metadata={
        "help": "NAME=MODEL[,MODEL...], given once per arm (at least two). Each MODEL is a local folder or a Hub "
                "id; several models are independent training runs of that arm (its units)."})
    baseline: str | None = field(default=None, metadata={"help": "The arm compared with (default: the first)."})
    seeds: int = field(default=3, metadata={"help": "Fine-tuning seeds per model: the seeds are --seed, --seed+1, ..."})
    learning_rates: list[float] | None = field(default=None, metadata={
        "help": "Learning rates to try: each arm picks the one with its best mean validation metric (the same rule "
                "for every arm) and is reported on test at that rate. Default: --learning_rate alone."})
    metric: str | None = field(default=None, metadata={
        "help": "The compared metric (default: the task's primary one: accuracy, pearson, f1, ...)."})

    def __post_init__(self):
        if self.seeds < 1:
            raise UserInputError(f"CompareArguments: field 'seeds': must be at least 1, got {self.seeds}")
        if self.learning_rates is not None and (not self.learning_rates or min(self.learning_rates) <= 0):
            raise UserInputError(f"CompareArguments: field 'learning_rates': give positive rates, got "
                                 f"{self.learning_rates}")


def make_parser():
    from ..cli.parser import command_parser

    return command_parser((CompareArguments, ModelArguments, DataTrainingArguments, AuxConfig),
                          "finetune", DATA_SOURCE_FLAGS)


def merge_arm_flags(argv: list[str]) -> list[str]:
    """`--arm a=X --arm b=Y` (one flag per arm, as users write it) as the one list argparse keeps: `--arm a=X b=Y`."""
    arms, rest, taking = [], [], False
    for argument in argv:
        if argument == "--arm" or argument.startswith("--arm="):
            taking = argument == "--arm"
            arms += [] if taking else [argument.split("=", 1)[1]]
        elif taking and not argument.startswith("--"):
            arms.append(argument)
        else:
            taking = False
            rest.append(argument)
    return (["--arm", *arms] if arms else []) + rest


def parse_args(argv: list[str] | None = None):
    """(compare_args, model_args, data_args, training_args): finetune's flags and demo config, and compare's own."""
    from ..cli.parser import demo_config_path, parse_command_line

    parsed = parse_command_line(make_parser(), merge_arm_flags(sys.argv[1:] if argv is None else argv),
                                demo_config=demo_config_path("finetune"),
                                data_source_flags=DATA_SOURCE_FLAGS)
    if parsed[3].push_to_hub:  # TrainingArguments
        raise UserInputError("TrainingArguments: field 'push_to_hub': hf-aux compare keeps no model, so there is "
                             "nothing to push; push the checkpoint you pick with the command that made it")
    if parsed[1].model_name_or_path is not None:  # ModelArguments
        raise UserInputError("ModelArguments: field 'model_name_or_path': hf-aux compare takes its models from "
                             "--arm NAME=MODEL[,MODEL...]")
    return parsed


def run_comparison(compare_args: CompareArguments, model_args: ModelArguments, data_args: DataTrainingArguments,
                   training_args: AuxConfig) -> dict:
    """Fine-tune what is missing, then report. Returns compare.json's content with its "comparisons"."""
    from pathlib import Path

    from ..cli.run import setup_logging
    from ..finetune.pipeline import load_data
    from ..runtime.disk import watch as watch_disk
    from ..tasks.metrics import METRIC_NAMES, PRIMARY_METRIC
    from . import report

    setup_logging(training_args)
    watch_disk(training_args.output_dir, kept=f"Every finished fine-tuning is in {engine.RESULTS_NAME}; make room and "
                                              "run the same command again: it continues with the others")
    arms = [engine.parse_arm(text) for text in compare_args.arm]
    seeds = [training_args.seed + i for i in range(compare_args.seeds)]
    baseline = engine.check_arms(arms, compare_args.baseline)
    rates = compare_args.learning_rates or [training_args.learning_rate]
    settings = engine.settings_record(model_args, data_args, training_args, compare_args.learning_rates)
    results = engine.ResultsFile(training_args.output_dir, settings)
    # compare evaluates whatever evaluation splits the task has; no action requires one
    task, raw = load_data(data_args, dataclasses.replace(training_args, do_train=True, do_eval=False, do_predict=False))
    metric = compare_args.metric or PRIMARY_METRIC[task.kind]
    known = (*METRIC_NAMES[task.kind], "loss")
    if metric not in known:
        raise UserInputError(f"CompareArguments: field 'metric': task '{task.name}' ({task.kind}) reports "
                             f"{list(known)}, not {metric!r}")
    if "train" not in raw or not ({"validation", "test"} & set(raw)):
        raise UserInputError(f"task '{task.name}': field 'train_split': compare needs a train split and a "
                             f"validation or test split; the data has {list(raw)}")
    if len(rates) > 1 and not {"validation", "test"} <= set(raw):
        raise UserInputError("CompareArguments: field 'learning_rates': picking a rate needs a validation split to "
                             f"pick on and a test split to report on; task '{task.name}' has {list(raw)}")
    results.write(task={"name": task.name, "kind": task.kind, "metric": metric,
                        "higher_is_better": metric not in engine.LOWER_IS_BETTER,
                        "compared_split": "test" if "test" in raw else "validation",
                        "splits": {split: len(rows) for split, rows in raw.items()}},
                  arms=[{"name": a.name, "models": list(a.models)} for a in arms], baseline=baseline, seeds=seeds)
    run_finetunings(arms, seeds, rates, model_args, data_args, training_args, results, task, raw)
    content = results.content
    found = report.comparisons(content)
    results.write(comparisons=found)
    out = Path(training_args.output_dir)
    (out / "compare.md").write_text(report.render_markdown(content, found))
    report.plot(content, found, out / "compare.png")
    print("\n".join(report.summary_lines(content, found)))
    print(f"compare: {out / 'compare.md'}, {out / 'compare.png'}, {out / engine.RESULTS_NAME}")
    return content


_LOADED: dict = {}  # fine_tune's tasks and tokenised splits, by their settings


def fine_tune(argv: list[str], keep_evaluations: bool = False) -> dict:
    """finetune_once's record from `hf-aux finetune`'s flags; `keep_evaluations` keeps --eval_strategy and what it
    logs (record["history"]). Each task is loaded and tokenised once per process (a study fine-tunes it often)."""
    from ..finetune.command import parse_args
    from ..finetune.pipeline import load_data

    model_args, data_args, training_args = parse_args(argv)
    key = repr(data_args)
    if key not in _LOADED:
        _LOADED[key] = load_data(data_args, dataclasses.replace(training_args, do_eval=False, do_predict=False))
    task, raw = _LOADED[key]
    features_for = tokenised(model_args, data_args, training_args, task, raw, _LOADED)
    step = {"arm": "model", "unit": 0, "model": model_args.model_name_or_path, "seed": training_args.seed,
            "learning_rate": training_args.learning_rate}
    return finetune_once(step, model_args, data_args, training_args, task, raw, features_for,
                         training_args.output_dir, keep_evaluations)


def finetune_once(step: dict, model_args, data_args, training_args, task, raw, features_for, output_dir: str,
                  keep_evaluations: bool = False) -> dict:
    """One fine-tuning as `hf-aux finetune` makes it (seed set before the model is built; the same trainer and
    evaluation), its metrics by split; a non-finite loss is a failed fine-tuning, not an error."""
    from transformers import PrinterCallback, set_seed

    from ..finetune.pipeline import evaluate_split, load_model, make_trainer
    from ..runtime.nonfinite import NonFiniteTrainingError

    folder = os.path.join(output_dir, "finetunings", f"{step['arm']}-{step['unit']}-seed{step['seed']}")
    # evaluation and checkpoints during training change nothing it computes, unless they pick the best model
    quiet = {} if training_args.load_best_model_at_end else {"save_strategy": "no"} if keep_evaluations else {
        "save_strategy": "no", "eval_strategy": "no"}
    args = dataclasses.replace(
        training_args, output_dir=folder, seed=step["seed"], learning_rate=step["learning_rate"], do_train=True,
        do_eval="validation" in raw, do_predict="test" in raw, disable_tqdm=True, **quiet)
    margs = dataclasses.replace(model_args, model_name_or_path=step["model"])
    tokenizer, features = features_for(step["model"])
    set_seed(step["seed"])
    start = time.perf_counter()
    model, reused_head = load_model(margs, task, tokenizer)
    trainer = make_trainer(model, args, task, data_args, raw, features, tokenizer)
    trainer.remove_callback(PrinterCallback)  # the comparison's progress bar stands for every fine-tuning's logs
    record = {**step, "model_key": engine.model_key(step["model"]), "reused_head": reused_head}
    try:
        train = trainer.train().metrics
        record.update(status="ok", train={k: v for k, v in train.items() if isinstance(v, (int, float))},
                      train_examples=len(raw["train"]))
        if keep_evaluations:
            record["history"] = [h for h in trainer.state.log_history if "eval_loss" in h]
        for split, prefix in (("validation", "eval"), ("test", "test")):
            if split in features:
                metrics = evaluate_split(trainer, task, data_args, raw, features, split, prefix)[0]
                record[split] = {k[len(prefix) + 1:]: v for k, v in metrics.items()}
    except NonFiniteTrainingError as error:
        record.update(status="failed", error=str(error).splitlines()[0])
    finally:
        del trainer, model
        gc.collect()
        shutil.rmtree(folder, ignore_errors=True)
    record["wall_s"] = round(time.perf_counter() - start, 2)
    return record


def run_finetunings(arms: list[engine.Arm], seeds: list[int], learning_rates: list[float], model_args, data_args,
                    training_args, results: engine.ResultsFile, task, raw) -> None:
    """Every planned fine-tuning not yet in `results`, with a progress bar over all of them."""
    from tqdm.auto import tqdm

    features_for = tokenised(model_args, data_args, training_args, task, raw, {})
    steps = engine.plan(arms, seeds, learning_rates)
    todo = [s for s in steps if results.done(engine.model_key(s["model"]), s["seed"], s["learning_rate"]) is None]
    if training_args.should_log:  # before the first fine-tuning: what the comparison will cost
        print(plan_line(arms, seeds, learning_rates, steps, todo, results, training_args, data_args, raw), flush=True)
    bar = tqdm(total=len(steps), initial=len(steps) - len(todo), desc="fine-tunings", unit="run",
               disable=not training_args.should_log)
    try:
        with quiet_loading():
            for index, step in enumerate(todo):
                bar.set_postfix_str(f"{step['arm']} unit {step['unit']} seed {step['seed']}")
                record = finetune_once(step, model_args, data_args, training_args, task, raw, features_for,
                                       training_args.output_dir)
                results.add(record)
                bar.update(1)
                if index == 0 and len(todo) > 1:
                    logger.warning("compare: the first fine-tuning took %.0f s; about %s for the %d left",
                                   record["wall_s"], engine.minutes(record["wall_s"] * (len(todo) - 1)),
                                   len(todo) - 1)
                if record["status"] == "failed":
                    logger.warning("compare: %s (%s, seed %d) failed: %s", step["arm"], step["model"],
                                   step["seed"], record["error"])
    except (KeyboardInterrupt, SystemExit) as stop:
        print(f"\nhf-aux compare: stopped; the {len(results.content['finetunings'])} finished fine-tunings are in "
              f"{results.path}: the same command continues with the others", file=sys.stderr, flush=True)
        raise SystemExit(getattr(stop, "code", None) or 130) from None
    finally:
        bar.close()


def plan_line(arms, seeds, learning_rates, steps, todo, results, training_args, data_args, raw) -> str:
    """"hf-aux compare: plan: 6 fine-tunings (...), 6 to run; about 4 min each, 25 min in all (...)": measured
    from the fine-tunings compare.json already holds, else estimated (engine.estimate_finetuning_seconds)."""
    import torch

    shape = (f"{len(arms)} arms x {sum(len(a.models) for a in arms)} models in all x {len(seeds)} seed"
             f"{'s' if len(seeds) > 1 else ''}" + (f" x {len(learning_rates)} learning rates" if len(learning_rates) > 1
                                                    else ""))
    head = f"hf-aux compare: plan: {len(steps)} fine-tunings ({shape}), {len(todo)} to run"
    if not todo:
        return head + ": every one is in compare.json already"
    done = [f["wall_s"] for f in results.content["finetunings"] if f.get("wall_s")]
    if done:
        each = sum(done) / len(done)
        how = f"the mean of the {len(done)} fine-tunings compare.json holds"
    else:
        parameters = max((engine.model_parameters(m) or 0 for a in arms for m in a.models), default=0)
        if not parameters:
            return head + "; their time is measured after the first (no local model to estimate it from)"
        batch = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * max(
            1, training_args.world_size)
        updates = training_args.max_steps if training_args.max_steps > 0 else math.ceil(
            len(raw["train"]) / batch) * training_args.num_train_epochs
        columns = [c for c, f in raw["train"].features.items() if getattr(f, "dtype", None) == "string"]
        tokens = engine.mean_tokens(raw["train"], columns, data_args.max_seq_length)
        evaluated = sum(len(raw[split]) for split in ("validation", "test") if split in raw)
        each = engine.estimate_finetuning_seconds(parameters, updates * batch * tokens, evaluated * tokens,
                                                  engine.matmul_flops_per_second())
        size = f"{parameters / 1e6:.1f}M" if parameters >= 1e5 else f"{parameters / 1e3:.0f}k"
        how = (f"estimated from the model's {size} parameters, {updates:.0f} updates of {batch} rows, "
               f"{evaluated} rows evaluated and this machine's speed with {torch.get_num_threads()} threads; the first "
               "fine-tuning's own time replaces it")
    return (f"{head}; about {engine.minutes(each)} each, {engine.minutes(each * len(todo))} in all ({how})")


def tokenised(model_args, data_args, training_args, task, raw, cache: dict):
    """features_for(model) -> (tokenizer, tokenised splits): the task tokenised once per tokenizer fingerprint."""
    from ..finetune.pipeline import load_tokenizer, tokenize_splits

    tokenizers: dict[str, object] = {}
    split_args = dataclasses.replace(training_args, do_train=True, do_predict="test" in raw)

    def features_for(model: str):
        if model not in tokenizers:
            tokenizers[model] = load_tokenizer(dataclasses.replace(model_args, model_name_or_path=model))
        key = (repr(data_args), engine.tokenizer_fingerprint(tokenizers[model]))
        if key not in cache:
            cache[key] = tokenize_splits(task, raw, tokenizers[model], data_args, split_args)
        return tokenizers[model], cache[key]
    return features_for


@contextlib.contextmanager
def quiet_loading():
    """transformers' loading bars and notices (and expected fresh heads) as errors only: the progress bar shows."""
    from transformers.utils import logging as hf_logging

    level, modeling = hf_logging.get_verbosity(), logging.getLogger("hf_aux.modeling")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    modeling.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        hf_logging.enable_progress_bar()
        modeling.setLevel(logging.NOTSET)


def main(compare_args: CompareArguments | None = None, model_args: ModelArguments | None = None,
         data_args: DataTrainingArguments | None = None,
         training_args: AuxConfig | None = None) -> dict:
    """`hf-aux compare`: `run_comparison` on the parsed arguments (without them, from sys.argv)."""
    if compare_args is None:
        compare_args, model_args, data_args, training_args = parse_args()
    return run_comparison(compare_args, model_args, data_args, training_args)
