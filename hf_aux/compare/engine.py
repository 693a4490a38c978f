"""What `hf-aux compare` plans and keeps: its arms (checked before any fine-tuning), the fine-tunings each needs,
and compare.json, where each result is cached as it finishes (command.py runs them with finetune's steps).

compare.json (`--output_dir`):
    {"settings": {every fine-tuning setting, as given; a later run with other settings is refused},
     "task": {"name", "kind", "metric", "higher_is_better", "splits": {split: rows}},
     "arms": [{"name", "models"}], "baseline": name,
     "finetunings": [{"arm", "unit", "model", "seed", "learning_rate", "status": "ok" | "failed", "error",
                      "validation": {metric: value}, "test": {...}, "train": {...}, "wall_s"}, ...],
     "comparisons": [...]}     (written by the report, hf_aux.compare.report)
A fine-tuning is known by (model, seed, learning rate): the same command after an interruption skips every one in
the file, and adding a seed or an arm runs only what is new.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError

RESULTS_NAME = "compare.json"
LOWER_IS_BETTER = ("mse", "loss")
# TrainingArguments fields that do not change what a fine-tuning computes (where and how it is logged or saved)
UNCOMPARED_FIELDS = {
    "output_dir", "logging_dir", "report_to", "run_name", "disable_tqdm", "log_level", "log_level_replica",
    "logging_strategy", "logging_steps", "logging_first_step", "logging_nan_inf_filter", "save_strategy",
    "save_steps", "save_total_limit", "save_only_model", "overwrite_output_dir", "push_to_hub", "hub_model_id",
    "hub_strategy", "hub_token", "hub_private_repo", "hub_always_push", "hub_revision", "do_train", "do_eval",
    "do_predict", "seed", "cpu_malloc", "dataloader_num_workers", "resume_from_checkpoint", "skip_memory_metrics",
    "include_num_input_tokens_seen", "trackio_space_id", "project",
}


@dataclass(frozen=True)
class Arm:
    """A way of making a starting checkpoint; `models` are its independent training runs (units)."""
    name: str
    models: tuple[str, ...]


def parse_arm(text: str) -> Arm:
    """`NAME=MODEL[,MODEL...]` -> Arm, or an error naming --arm and what is wrong."""
    name, sep, models = text.partition("=")
    name, models = name.strip(), [m.strip() for m in models.split(",")]
    if not sep or not name:
        raise UserInputError(f"--arm {text!r}: expected NAME=MODEL[,MODEL...], e.g. --arm muppet=runs/m1,runs/m2")
    if not all(models):
        raise UserInputError(f"--arm {text!r}: arm {name!r} names no model (or an empty one between commas)")
    return Arm(name, tuple(models))


def check_arms(arms: list[Arm], baseline: str | None) -> str:
    """The baseline's name, once arms and baseline pass their checks (each model a model folder or a Hub id)."""
    from transformers import AutoConfig

    if len(arms) < 2:
        raise UserInputError(f"--arm: compare needs at least two arms, got {len(arms)} (e.g. --arm base=MODEL "
                             "--arm new=MODEL)")
    names = [arm.name for arm in arms]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserInputError(f"--arm: arm names must differ; {duplicates} given more than once")
    if baseline is not None and baseline not in names:
        raise UserInputError(f"--baseline {baseline!r}: no such arm; the arms are {names}")
    keys = [model_key(model) for arm in arms for model in arm.models]  # a fine-tuning is known by its model
    if len(set(keys)) < len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise UserInputError(f"--arm: model {twice!r} is given twice; each training run belongs to one arm, once")
    for arm in arms:
        for model in arm.models:
            if os.path.isdir(model):
                if not any(Path(model, name).is_file() for name in ("config.json", "adapter_config.json")):
                    raise UserInputError(f"--arm {arm.name}: folder {model!r} holds no model (no config.json)")
                continue
            if os.path.exists(model) or model.startswith((".", "/", "~")) or model.count("/") > 1:
                raise UserInputError(f"--arm {arm.name}: model {model!r} does not exist (not a folder, not a Hub id)")
            try:
                AutoConfig.from_pretrained(model)
            except (OSError, ValueError) as error:
                raise UserInputError(f"--arm {arm.name}: model {model!r} is not a local folder and the Hub does not "
                                 f"serve it here ({str(error).splitlines()[0]})") from None
    return baseline or names[0]


def settings_record(model_args, data_args, training_args, learning_rates) -> dict:
    """Every setting that changes what a fine-tuning computes (JSON values), to refuse mixing two settings."""
    def plain(value):
        value = getattr(value, "value", value)
        return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)

    record = {f"model.{k}": plain(v) for k, v in dataclasses.asdict(model_args).items()
              if k not in ("model_name_or_path", "token", "hub_token")}
    record.update({f"data.{k}": plain(v) for k, v in dataclasses.asdict(data_args).items()})
    record.update({k: plain(getattr(training_args, k)) for k in (f.name for f in dataclasses.fields(training_args))
                   if f"{k}" not in UNCOMPARED_FIELDS and not k.startswith("_")})
    if learning_rates:
        record["learning_rate"] = list(learning_rates)
    return {k: v for k, v in record.items() if k.rpartition(".")[2] not in UNCOMPARED_FIELDS}


class ResultsFile:
    """compare.json: read once, rewritten atomically (temp file + rename) after every fine-tuning."""

    def __init__(self, output_dir: str, settings: dict):
        self.path = Path(output_dir) / RESULTS_NAME
        self.content = json.loads(self.path.read_text()) if self.path.is_file() else {"finetunings": []}
        old = self.content.get("settings")
        if old is not None and old != settings:
            changed = sorted(set(old) | set(settings), key=str)
            changed = [f"{k}: {old.get(k)!r} -> {settings.get(k)!r}" for k in changed if old.get(k) != settings.get(k)]
            raise UserInputError(f"--output_dir {str(self.path.parent)!r} holds a comparison made with other settings "
                             f"({'; '.join(changed[:6])}); give another --output_dir, or the same settings to "
                             "continue it")
        self.content["settings"] = settings

    def done(self, model_key: str, seed: int, learning_rate: float) -> dict | None:
        return next((f for f in self.content["finetunings"] if f["model_key"] == model_key and f["seed"] == seed
                     and math.isclose(f["learning_rate"], learning_rate, rel_tol=1e-9)), None)

    def write(self, **fields) -> None:
        self.content.update(fields)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".compare.", suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(self.content, out, indent=1)
            out.write("\n")
        os.replace(temp, self.path)

    def add(self, record: dict) -> None:
        self.content["finetunings"].append(record)
        self.write()


def model_key(model: str) -> str:
    """A local folder by its resolved path, a Hub id as given."""
    return str(Path(model).resolve()) if os.path.isdir(model) else model


def tokenizer_fingerprint(tokenizer) -> str:
    """Equal for tokenizers that encode every text the same way (their serialised state and class)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    state = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    extra = f"{type(tokenizer).__name__}|{tokenizer.model_max_length}|{tokenizer.padding_side}"
    return hashlib.sha256((state + extra).encode()).hexdigest()


def plan(arms: list[Arm], seeds: list[int], learning_rates: list[float]) -> list[dict]:
    """Every fine-tuning, seed by seed (an interrupted comparison has every arm at the same seeds)."""
    return [{"arm": arm.name, "unit": unit, "model": model, "seed": seed, "learning_rate": rate}
            for seed in seeds for rate in learning_rates for arm in arms for unit, model in enumerate(arm.models)]


# ---- what a comparison will cost ------------------------------------------------------------------------------
# A rough time per fine-tuning before any has run: 6 N FLOPs per trained token and 2 N per evaluated one (N: the
# model's parameters), at a share of this machine's measured float32 matmul rate (1024 x 1024), plus loading. The
# share is MiniLM's on 2 CPU threads: docs/scaling.md measured an MFU of 0.76, and the README's comparison (Rotten
# Tomatoes at 1%, 50 steps of 16, 1706 rows evaluated) took 247 s against 249 s estimated so, on a loaded machine
# (issue #60). The first finished fine-tuning's own time replaces the estimate.
TRAINING_EFFICIENCY = 0.75
LOADING_SECONDS = 5.0
CHARACTERS_PER_TOKEN = 4.0


def matmul_flops_per_second(seconds: float = 0.5) -> float:
    """This process's float32 matmul rate (torch's threads as set), measured for about `seconds`."""
    import time

    import torch

    size = 1024
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * size ** 3 * count / (time.perf_counter() - start)


def model_parameters(model: str) -> int | None:
    """The parameter count of a local checkpoint, from its safetensors headers (no weights read); None elsewhere."""
    from safetensors import safe_open

    folder, total = Path(model), 0
    for file in folder.glob("*.safetensors") if folder.is_dir() else ():
        with safe_open(file, "np") as handle:
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    return total or None


def estimate_finetuning_seconds(parameters: int, train_tokens: float, eval_tokens: float,
                                flops_per_second: float) -> float:
    """About how long one fine-tuning takes (see the constants above)."""
    work = 6 * parameters * train_tokens + 2 * parameters * eval_tokens
    return LOADING_SECONDS + work / (TRAINING_EFFICIENCY * flops_per_second)


def mean_tokens(rows, columns, max_length: int, sample: int = 256) -> float:
    """The mean tokens of a row, from its characters (about 4 a token), at most `max_length`."""
    picked = rows.select(range(min(sample, len(rows))))
    lengths = [sum(len(str(row[c] or "")) for c in columns if c in row) / CHARACTERS_PER_TOKEN + 2 for row in picked]
    return min(max_length, sum(lengths) / max(1, len(lengths)))


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"
