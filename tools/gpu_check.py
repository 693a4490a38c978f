#!/usr/bin/env python
"""What no CPU can show, as a user starts it on a GPU machine: every command and run script trains on CUDA with bf16,
under a real launcher (the soft-label meta objectives in fp32: MetaLMConfig refuses them in bf16), and what it
saves loads in plain transformers with finite weights; MUPPET (R3F included) under FSDP through `accelerate launch`.

    python tools/gpu_check.py --out gpu_check.json                       # tests/tiny.py's checkpoint
    python tools/gpu_check.py --model path/to/bert --out gpu_check.json  # a real BERT-style checkpoint
    python tools/gpu_check.py --jobs 4 --timeout 60 --out gpu_check.json  # 4 checks at once on the one card

Each check is a subprocess (the installed `hf-aux` where it is on PATH, else `python -m hf_aux`;
`torchrun --nproc_per_node 1` for the run scripts; `accelerate launch --use_fsdp` for FSDP; `hf-aux compare` of
the checkpoint against a copy of it, 2 seeds each) on small files written
to a temporary folder: the data a user brings (CSV, JSONL, a text corpus, a mixture file). A check passes when the
command exits 0, its trainer_state.json counts the steps asked for and logs finite losses, and
AutoModel / AutoModelForMaskedLM.from_pretrained loads the output with every weight finite. `--cpu` runs the same
checks (FSDP's excepted) with --use_cpu instead of --bf16: the script's own test on a machine without a GPU.
The last line printed is one JSON object (also written to --out): per check, passed, seconds, the first and last
logged loss, and the tail of its output when it failed. `--jobs N` runs N checks at once (each launcher on a port of
its own, each check with a datasets cache of its own): the 17 checks take 14-22 s each on an H200, mostly process
start and imports, so one after another they fill five minutes of a lent machine's time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
STEPS = 6


def hf_aux_command() -> list[str]:
    installed = shutil.which("hf-aux")
    return [installed] if installed else [sys.executable, "-m", "hf_aux"]


def write_user_data(folder: Path, model: str | None) -> Path:
    """tests/tiny.py's command files (a tiny BERT, JSONL tasks, a text file) and the files a user brings first
    (write_own_files: CSVs with string labels, a corpus, mixture and end-task files); `model` replaces the BERT."""
    from tiny import write_command_data, write_own_files

    write_command_data(folder, "hf-aux-tests/tiny-bert")
    if model:  # a real checkpoint in place of the tiny one
        shutil.rmtree(folder / "tiny_bert")
        shutil.copytree(model, folder / "tiny_bert")
    shutil.copytree(folder / "tiny_bert", folder / "tiny_bert_copy")  # hf-aux compare's second arm
    return write_own_files(folder)


def checks(d: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv without --output_dir, the class that loads the output)."""
    from tiny import command_args, free_port

    model = ["--model_name_or_path", str(d / "tiny_bert")]
    common = ["--max_steps", str(STEPS), "--report_to", "none", "--logging_steps", "1", "--disable_tqdm", "true"]
    hf_aux = hf_aux_command()
    first = {  # the installed command given a user's own files, as the README shows it, on CUDA with bf16
        "muppet": [*model, "--mixture_file", d / "mix.yaml"],
        "muppet-r3f": [*model, "--mixture_file", d / "mix.yaml", "--robust_finetuning", "r3f"],
        "muppet-meta": [*model, "--mixture_file", d / "mix.yaml", "--task_weighting", "meta", "--end_task",
                        d / "end.yaml"],
        "amos": ["--train_file", d / "corpus.txt", "--tokenizer_name", d / "tiny_bert", "--hidden_size", "64",
                 "--num_hidden_layers", "2", "--num_attention_heads", "2", "--intermediate_size", "128",
                 "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2"],
        "tartan-meta": [*model, "--train_file", d / "train.csv", "--validation_file", d / "dev.csv", "--auxiliary",
                        f"tapt={d / 'corpus.txt'}"],
        "tartan-mt": [*model, "--train_file", d / "train.csv", "--validation_file", d / "dev.csv", "--auxiliary",
                      f"tapt={d / 'corpus.txt'}", "--mode", "mt"],
        "finetune": [*model, "--train_file", d / "train.csv", "--validation_file", d / "dev.csv"],
        "meta-lm-hard": [*model, "--train_file", d / "corpus.txt", "--mixture", d / "labelled.yaml", "--objective",
                         "hard"],  # the command's default objective is soft, which MetaLMConfig refuses in bf16
        "meta-lm-soft": [*model, "--train_file", d / "corpus.txt", "--mixture", d / "labelled.yaml", "--objective",
                         "soft"],
        "meta-lm-soft-first-order": [*model, "--train_file", d / "corpus.txt", "--mixture", d / "labelled.yaml",
                                     "--objective", "soft", "--first_order", "true"],
    }
    found = {}
    for name, args in first.items():
        method = name.split("-")[0] if not name.startswith("meta-lm") else "meta-lm"
        loader = "AutoModelForMaskedLM" if method == "meta-lm" else "AutoModel"
        precision = [] if "soft" in name else ["--bf16", "true"]
        found[f"hf-aux {name}"] = ([*hf_aux, method, *map(str, args), *common, *precision], loader)
    found["hf-aux compare"] = ([*hf_aux, "compare", "--arm", f"base={d / 'tiny_bert'}", "--arm",
                                f"copy={d / 'tiny_bert_copy'}", "--train_file", str(d / "train.csv"),
                                "--validation_file", str(d / "dev.csv"), "--seeds", "2", *common, "--bf16", "true"],
                               "compare")
    ports = distinct_ports(free_port)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port"]
    quiet = ["--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "1", "--bf16", "true"]
    for script in ("run_muppet", "run_amos", "run_tartan", "run_finetune", "run_meta_lm"):
        args = command_args(script, d, "OUT", quiet, "mlm" if script == "run_meta_lm" else "hard")
        args = [a for a in args if a != "OUT"]
        del args[args.index("--output_dir")]
        loader = "AutoModelForMaskedLM" if script == "run_meta_lm" else "AutoModel"
        found[f"torchrun {script}"] = ([*torchrun, str(next(ports)), str(ROOT / "run_scripts" / f"{script}.py"),
                                        *args, "--max_steps", str(STEPS)], loader)
    fsdp = [sys.executable, "-m", "accelerate.commands.launch", "--use_fsdp", "--num_processes", "1",
            "--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no",
            "--fsdp_sharding_strategy", "FULL_SHARD", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
            "--fsdp_transformer_layer_cls_to_wrap", "BertLayer", "--fsdp_state_dict_type", "FULL_STATE_DICT"]
    for r3f in (False, True):
        args = command_args("run_muppet", d, "OUT", ["--report_to", "none", "--disable_tqdm", "true",
                                                     "--logging_steps", "1"])
        args = [a for a in args if a != "OUT"]
        del args[args.index("--output_dir")]
        found[f"accelerate FSDP run_muppet{' r3f' if r3f else ''}"] = (
            [*fsdp, "--main_process_port", str(next(ports)), str(ROOT / "run_scripts" / "run_muppet.py"), *args,
             "--max_steps", str(STEPS),
             *(["--robust_finetuning", "r3f"] if r3f else [])], "AutoModel")
    return found


def distinct_ports(free_port):
    """Free local ports, each one different from those given before (one per launcher: with --jobs, several
    launchers listen at once, and the OS may hand a just-released port out again)."""
    given = set()
    while True:
        port = free_port()
        if port not in given:
            given.add(port)
            yield port


def verify(out: Path, loader: str) -> str | None:
    """None when the output holds STEPS steps and loads with finite weights (hf-aux compare: every fine-tuning
    finished with finite metrics); else what is wrong."""
    import torch
    import transformers

    if loader == "compare":
        runs = json.loads((out / "compare.json").read_text())["finetunings"]
        values = [v for f in runs for split in ("train", "validation") for v in f.get(split, {}).values()]
        if len(runs) != 4 or any(f["status"] != "ok" for f in runs) or not all(math.isfinite(v) for v in values):
            return f"compare.json: {[(f['arm'], f['seed'], f['status']) for f in runs]}, not 4 finite fine-tunings"
        return None

    state_file = out / "trainer_state.json"
    if not state_file.is_file():
        return "no trainer_state.json in the output"
    state = json.loads(state_file.read_text())
    if state["global_step"] != STEPS:
        return f"global_step {state['global_step']}, asked for {STEPS}"
    losses = [row["loss"] for row in state["log_history"] if "loss" in row]
    if not losses or not all(math.isfinite(x) for x in losses):
        return f"logged losses {losses}: none, or not all finite"
    model = getattr(transformers, loader).from_pretrained(out)
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    return f"non-finite weights: {bad[:3]}" if bad else None


def _text(output) -> str:
    """A timed-out subprocess's captured output as text (TimeoutExpired may hold bytes even with text=True)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a BERT-style checkpoint folder to train instead of tests/tiny.py's")
    parser.add_argument("--out", help="write the JSON result here too")
    parser.add_argument("--only", nargs="*", help="run only checks whose name contains one of these")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per check")
    parser.add_argument("--jobs", type=int, default=1,
                        help="checks run at once (each is its own process; on a GPU machine several share the card)")
    parser.add_argument("--cpu", action="store_true", help="--use_cpu instead of --bf16, no FSDP (checks the script)")
    cli = parser.parse_args()
    import torch

    if not cli.cpu and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device visible (torch.cuda.is_available() is False)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "TORCH_CPP_LOG_LEVEL": "ERROR"}
    results = {"device": "cpu" if cli.cpu else torch.cuda.get_device_name(0), "torch": torch.__version__,
               "model": Path(cli.model).name if cli.model else "tests/tiny.py tiny_bert", "checks": {}}
    lock = threading.Lock()

    def run_check(name: str, argv: list[str], loader: str, tmp: str) -> None:
        if cli.cpu:
            argv = ["--use_cpu" if a == "--bf16" else a for a in argv]
        out = Path(tmp) / name.replace(" ", "_")
        # several checks at once: a datasets cache of each check's own, so no two processes build one cache entry
        check_env = env if cli.jobs == 1 else {**env, "HF_DATASETS_CACHE": str(out) + "_datasets_cache"}
        start = time.perf_counter()
        try:
            done = subprocess.run([*argv, "--output_dir", str(out)], env=check_env, cwd=tmp, capture_output=True,
                                  text=True, timeout=cli.timeout)
            log, code = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as error:
            log, code = _text(error.stdout) + _text(error.stderr), "timeout"
        seconds = round(time.perf_counter() - start, 1)
        try:
            problem = f"exit {code}" if code != 0 else verify(out, loader)
        except Exception as error:  # what was saved does not load: this check fails, the others go on
            problem = f"loading the output failed: {error!r}"[:500]
        record = {"passed": problem is None, "seconds": seconds}
        if problem is not None:
            record.update(problem=problem, tail=log[-2500:])
        elif loader == "compare":
            record["losses"] = [round(f["train"]["train_loss"], 4)
                                for f in json.loads((out / "compare.json").read_text())["finetunings"]]
        else:
            history = json.loads((out / "trainer_state.json").read_text())["log_history"]
            losses = [row["loss"] for row in history if "loss" in row]
            record["losses"] = [round(x, 4) for x in losses[:1] + losses[-1:]]
        with lock:
            results["checks"][name] = record
            verdict = "PASS" if problem is None else "FAIL"
            print(f"{verdict} {name} ({seconds} s){'' if problem is None else ': ' + problem}", flush=True)
            if problem is not None:
                print(log[-1500:], flush=True)
            if cli.out:  # after every check: a run stopped part-way keeps what it found
                Path(cli.out).write_text(json.dumps(results, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        data = write_user_data(Path(tmp) / "data", cli.model)
        chosen = [(name, argv, loader) for name, (argv, loader) in checks(data).items()
                  if not (cli.only and not any(part in name for part in cli.only) or cli.cpu and "FSDP" in name)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=cli.jobs) as pool:
            for running in [pool.submit(run_check, *check, tmp) for check in chosen]:
                running.result()  # a check's own error (not a failed command) stops the script, as before
        # in the order the checks are listed, whichever finished first
        results["checks"] = {name: results["checks"][name] for name, _, _ in chosen}
    results["passed"] = sum(r["passed"] for r in results["checks"].values())
    results["failed"] = [name for name, r in results["checks"].items() if not r["passed"]]
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in results.items() if k != "checks"}))


if __name__ == "__main__":
    main()
