"""benchmarks/bench_muppet.py runs each configuration in a process of its own (a user's job is one process; in a
shared one, each configuration inherits the heap the earlier ones left) and its JSON says so; a run that fails stops
the benchmark naming the configuration, instead of a ratio of nothing."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY_JOB = ["--hidden", "32", "--layers", "1", "--length", "8", "--batch_size", "2", "--accumulation", "2",
            "--steps", "2", "--warmup", "1", "--rounds", "1", "--clock", "cpu"]


def test_every_configuration_runs_in_its_own_process_and_the_ratios_are_reported():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_muppet.py"), *TINY_JOB], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT / "benchmarks")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["processes"] == "one per run" and result["rounds"] == 1
    for key in ("ratio", "r3f_ratio", "tasks50_vs_5_ratio", "muppet_vs_minimal_ratio"):
        assert math.isfinite(result[key]) and result[key] > 0, key
    # the same matrix products per update, whatever the configuration's bookkeeping; R3F adds a second forward
    assert result["flop_ratio"] == 1.0 and abs(result["tasks50_vs_5_flop_ratio"] - 1.0) < 0.01
    assert abs(result["r3f_flop_ratio"] - 2.0) < 0.05
    # every run measured its updates: 2 per configuration (one round, the warm-up left out)
    for kind in ("plain", "muppet", "r3f", "muppet50", "minimal"):
        assert f"{kind}: median" in done.stdout and "over 2 updates" in done.stdout.split(f"{kind}: median")[1][:60]
    assert result["peak_rss_mb"] > 0  # the largest run's own process, not the parent's
    # the machine's own limit on CPU too: an fp32 matmul peak measured in the run, each update's share of it
    assert result["matmul_peak_tflops"] > 0.001 and "GFLOP/s fp32 matmul peak with 1 torch thread" in done.stdout
    assert all(0 < result["mfu"][kind] < 1 for kind in ("plain", "muppet", "r3f", "muppet50", "minimal"))


def test_a_failed_run_stops_the_benchmark_naming_it(monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_muppet
        from flops import HostSyncs
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", ["bench_muppet.py", *TINY_JOB, "--threads", "0"])  # torch refuses 0 threads
    with pytest.raises(SystemExit, match="the r3f run failed"):
        bench_muppet.measure_in_own_process("r3f", HostSyncs("cpu"))


def test_torch_compile_mode_reports_compiled_over_eager_and_the_compile_time():
    """`--torch_compile` (issue #53): plain Trainer and MuppetTrainer, eager and compiled, interleaved; the compile
    time is what the compiled runs' warm-up updates took beyond the eager runs'."""
    import shutil

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor on CPU needs a C++ compiler (g++ or c++)")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    job = [*TINY_JOB[:TINY_JOB.index("--warmup")], "--warmup", "3", "--rounds", "1", "--clock", "cpu"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_muppet.py"), *job, "--torch_compile"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT / "benchmarks")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["metric"] == "muppet_compile_ratio" and result["goal"] == 1.03
    assert math.isfinite(result["muppet_vs_plain_compiled"]) and result["muppet_vs_plain_compiled"] > 0
    assert set(result["compiled_vs_eager"]) == {"plain", "muppet"}
    assert all(seconds > 1 for seconds in result["compile_s_per_run"].values())  # inductor compiled something
    assert set(result["mfu"]) == {"plain", "muppet", "plain_compiled", "muppet_compiled"}
