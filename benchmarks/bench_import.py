#!/usr/bin/env python
"""Import time of hf_aux against torch + transformers, each in a fresh interpreter.

Three statements are timed, interleaved (A B C A B C ...), each in its own new ``python -c`` process, and the
medians over the rounds are compared, so drift from other processes on a shared machine largely cancels:

- ``import hf_aux``: the package namespace alone (lazy: the version check, nothing heavy);
- ``import torch; import transformers``: the floor any Hugging Face tool pays before doing anything;
- ``from hf_aux import MuppetTrainer``: the first real use, which imports Trainer, peft and the rest;
- ``hf-aux muppet --help``: the installed command's help (its entry point, ``hf_aux.__main__:main``, run in the
  same way), which imports the method's argument dataclasses (torch, transformers' TrainingArguments) but not
  Trainer, peft, datasets or matplotlib.

It also lists which heavy modules (torch, transformers.trainer, peft, datasets, matplotlib) ``import hf_aux``
leaves in ``sys.modules``: none should be there.

    python benchmarks/bench_import.py             # 7 rounds
    python benchmarks/bench_import.py --rounds 15

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

STATEMENTS = {
    "hf_aux": "import hf_aux",
    "torch_transformers": "import torch; import transformers",
    "hf_aux_trainer": "from hf_aux import MuppetTrainer",
    "hf_aux_muppet_help": "from hf_aux.__main__ import main; main(['muppet', '--help'])",
}
HEAVY_MODULES = ("torch", "transformers.trainer", "peft", "datasets", "matplotlib")


def time_statement(statement: str) -> float:
    """Wall seconds of a fresh interpreter that runs ``statement`` (the interpreter's own start-up included)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], check=True, env=_env(), stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_modules_after_import() -> list[str]:
    """The heavy modules a fresh ``import hf_aux`` leaves loaded."""
    probe = f"import sys, hf_aux; print(' '.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, env=_env(), capture_output=True, text=True)
    return out.stdout.split()


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    for statement in STATEMENTS.values():  # warm the file-system cache once, untimed
        time_statement(statement)
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(args.rounds):
        for name, statement in STATEMENTS.items():
            times[name].append(time_statement(statement))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, statement in STATEMENTS.items():
        print(f"{statement:40s} median {medians[name]:.3f} s  (min {min(times[name]):.3f}, max {max(times[name]):.3f})")
    result = {
        "rounds": args.rounds,
        "median_s": {name: round(value, 4) for name, value in medians.items()},
        "ratio_hf_aux_to_torch_transformers": round(medians["hf_aux"] / medians["torch_transformers"], 3),
        "ratio_hf_aux_trainer_to_torch_transformers": round(
            medians["hf_aux_trainer"] / medians["torch_transformers"], 3),
        "ratio_hf_aux_muppet_help_to_torch_transformers": round(
            medians["hf_aux_muppet_help"] / medians["torch_transformers"], 3),
        "heavy_modules_after_import_hf_aux": heavy_modules_after_import(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
