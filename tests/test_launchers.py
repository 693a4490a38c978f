"""The commands as users start them on several processes (issue #35): `torchrun --nproc_per_node 2` and
`accelerate launch --multi_gpu --num_processes 2` on CPU (gloo), each rank a real process running the installed
`hf-aux` command or a run script, with the tiny checkpoint and small data files of tests/tiny.py.

What must hold: every command that supports DDP trains with both ranks (each rank's RNG state in the checkpoint);
one process per output folder guards it and the others follow its decision (resume point, "nothing to do", error);
a signal to the launcher stops every rank at the same step with one checkpoint, and rerunning the command resumes
exactly (the same parameters as a run never interrupted), also after one rank is killed; a live lock stops every
rank at once with the guarding rank's message; the meta-learned objectives refuse several processes clearly.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import command_args, free_port, hold_lock, write_command_data

from hf_aux.runtime.run_guard import lock_path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "1"]  # no --use_cpu: as users type it
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def torchrun(command: str, args: list[str], processes: int = 2) -> list[str]:
    """`torchrun --nproc_per_node N` of the installed `hf-aux <command>` (hf-aux's own console script, as
    `torchrun --no-python hf-aux ...` runs it) or of `run_scripts/<command>.py`."""
    launcher = [str(BIN / "torchrun"), "--nproc_per_node", str(processes), "--master_addr", "127.0.0.1",
                "--master_port", str(free_port())]
    if command.startswith("run_"):
        return [*launcher, str(ROOT / "run_scripts" / f"{command}.py"), *args]
    return [*launcher, "--no-python", str(BIN / "hf-aux"), command, *args]


def run(argv: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=timeout)


def output(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def said(log: str, start: str) -> list[str]:
    """The lines a process printed that begin with `start` (not the logger's copies, which carry a prefix)."""
    return [line for line in log.splitlines() if line.startswith(start)]


def weights(folder: Path) -> dict:
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        tensors.update({f"{path.name}:{k}": v for k, v in load_file(path).items()})
    assert tensors, f"no weights in {folder}"
    return tensors


# The multiple-choice head scores each choice with out_proj and takes a softmax over the choices, which a bias shared
# by every choice cannot change: the bias's gradient is zero in exact arithmetic, so what it gets is rounding noise
# that Adam scales up to learning-rate-sized steps, and its sign follows the order of the additions (how the batch is
# split over processes). It is compared only where the additions run in the same order (same process layout).
NO_GRADIENT = ("multitask_heads.safetensors:multiple_choice_head.out_proj.bias",)


def assert_same_weights(a: Path, b: Path, atol: float, same_layout: bool = True) -> None:
    left, right = weights(a), weights(b)
    assert left.keys() == right.keys()
    for name in left:
        if same_layout or name not in NO_GRADIENT:
            torch.testing.assert_close(left[name], right[name], atol=atol, rtol=0, msg=name)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("launch_data"), "hf-aux-tests/tiny-bert")


@pytest.mark.parametrize("accelerator", [False, True])
def test_a_launch_without_an_accelerator_asks_for_the_cpu_set_up(accelerator, monkeypatch):
    """Under a launcher of 2 processes, `use_cpu_under_launcher` asks accelerate for CPU exactly when
    `torch.accelerator` sees no device (CUDA, XPU, MPS, HPU, ...)."""
    from hf_aux.runtime.distributed import use_cpu_under_launcher

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: accelerator)
    assert use_cpu_under_launcher() is not accelerator
    assert os.environ.get("ACCELERATE_USE_CPU") == (None if accelerator else "true")


# ---- every command, under torchrun ------------------------------------------------------------------------------
# (command as launched, run script whose tiny job it runs, meta-LM objective)
COMMANDS = [("run_muppet", "run_muppet", None), ("amos", "run_amos", None), ("tartan", "run_tartan", None),
            ("finetune", "run_finetune", None), ("meta-lm", "run_meta_lm", "mlm")]


@pytest.mark.parametrize("command, script, objective", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_command_trains_with_two_processes_under_torchrun(command, script, objective, data, tmp_path):
    out = tmp_path / "out"
    done = run(torchrun(command, [*command_args(script, data, out, QUIET, objective or "hard"), "--max_steps", "4"]))
    assert done.returncode == 0, output(done)[-6000:]
    checkpoint = out / "checkpoint-4"
    assert (checkpoint / "rng_state_0.pth").is_file() and (checkpoint / "rng_state_1.pth").is_file(), \
        f"not one run of two processes: {sorted(p.name for p in checkpoint.iterdir())}"
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()
    assert not lock_path(out).exists(), "the lock outlived the run"
    if command == "amos":  # the end-of-run summary: the main process's duty
        assert output(done).count("AMOS training curve") == 1


# ---- streamed corpora under torchrun -----------------------------------------------------------------------------
def streaming_args(command: str, data, out) -> list[str]:
    """The command's tiny job reading its unlabelled corpus (text.txt) as a stream: AMOS's train text (read by the
    main process, its batches dispatched to both ranks), TARTAN's auxiliary DAPT corpus and the meta-learned MLM
    objective's (each rank reads its own StreamBatches)."""
    script = {"amos": "run_amos", "tartan": "run_tartan", "meta-lm": "run_meta_lm"}[command]
    args = command_args(script, data, out, QUIET, "mlm")
    if command == "tartan":
        args[args.index("tapt=tapt") + 1:args.index("tapt=tapt") + 1] = [f"dapt={data / 'text.txt'}"]
    if "--validation_split_percentage" in args:  # a stream has no held-out split
        del args[args.index("--validation_split_percentage"):args.index("--validation_split_percentage") + 2]
    return [*args, "--streaming", "--max_steps", "4"]


@pytest.mark.parametrize("command", ["amos", "tartan", "meta-lm"])
def test_a_streamed_corpus_under_torchrun_resumes_exactly(command, data, tmp_path):
    """Two processes read a streamed corpus (`--streaming`): every checkpoint holds both ranks' RNG states and the
    stream's position, and a run resumed from its step-2 checkpoint under torchrun ends with the weights of the run
    that was never interrupted."""
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    done = run(torchrun(command, streaming_args(command, data, whole)))
    assert done.returncode == 0, output(done)[-6000:]
    checkpoint = whole / "checkpoint-2"
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    if command == "amos":  # the blocks of 2 updates of 8 per rank, read once by the main process for both ranks
        assert json.loads((checkpoint / "stream_state.json").read_text())["yielded"] == 2 * 8 * 2
    done = run(torchrun(command, [*streaming_args(command, data, resumed), "--resume_from_checkpoint",
                                  str(checkpoint)]))
    assert done.returncode == 0, output(done)[-6000:]
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == 4
    assert_same_weights(whole, resumed, atol=0)


@pytest.mark.parametrize("objective", ["hard", "soft"])
def test_the_meta_objectives_refuse_torchrun_with_a_clear_message(objective, data, tmp_path):
    out = tmp_path / "out"
    done = run(torchrun("meta-lm", [*command_args("run_meta_lm", data, out, QUIET, objective), "--max_steps", "2"]))
    assert done.returncode != 0
    assert "the meta objectives run on one process only" in output(done)
    assert not (out / "model.safetensors").exists() and not (out / "README.md").exists()


def test_accelerate_launch_with_two_processes_runs_a_command(data, tmp_path):
    out = tmp_path / "out"
    argv = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
            str(ROOT / "run_scripts" / "run_finetune.py"),
            *command_args("run_finetune", data, out, QUIET), "--max_steps", "4"]
    done = run(argv)
    assert done.returncode == 0, output(done)[-6000:]
    assert (out / "checkpoint-4" / "rng_state_1.pth").is_file()
    assert (out / "model.safetensors").is_file()


# ---- one run across kills: equal to a run never interrupted, and to one process with twice the accumulation ---
STEPS = 40


def muppet_args(data, out, accumulation: int) -> list[str]:
    args = command_args("run_muppet", data, out, QUIET)
    args[args.index("--gradient_accumulation_steps") + 1] = str(accumulation)
    return [*args, "--max_steps", str(STEPS)]


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    """The MUPPET command, 2 processes with accumulation 2, never interrupted."""
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    done = run(torchrun("run_muppet", muppet_args(data, out, 2)))
    assert done.returncode == 0, output(done)[-6000:]
    return out


def test_two_processes_equal_one_process_with_twice_the_accumulation(uninterrupted, data, tmp_path):
    out = tmp_path / "one"
    done = run([sys.executable, str(ROOT / "run_scripts" / "run_muppet.py"), *muppet_args(data, out, 4)])
    assert done.returncode == 0, output(done)[-6000:]
    assert_same_weights(uninterrupted, out, atol=1e-5, same_layout=False)


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 240) -> None:
    start = time.monotonic()
    while not path.is_file():
        assert process.poll() is None, f"the run ended before {path} appeared: {process.communicate()}"
        assert time.monotonic() - start < timeout, f"{path} never appeared"
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_sigterm_to_the_launcher_and_a_killed_rank_then_resume_exactly(uninterrupted, data, tmp_path):
    out = tmp_path / "out"
    argv = torchrun("run_muppet", muppet_args(data, out, 2))
    # 1. SIGTERM to torchrun (as a scheduler ends a job): every rank stops at the same step with one checkpoint
    launcher = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(out / "checkpoint-4" / "trainer_state.json", launcher)
    launcher.send_signal(signal.SIGTERM)
    log = launcher.communicate(timeout=120)[0]
    assert launcher.returncode != 0
    assert len(said(log, "hf_aux: interrupted by SIGTERM at step")) == 1, log[-6000:]  # one line, not one a rank
    step = int(log.split("hf_aux: interrupted by SIGTERM at step ")[1].split()[0])
    assert 4 <= step < STEPS and (out / f"checkpoint-{step}" / "rng_state_1.pth").is_file(), log[-3000:]
    assert not lock_path(out).exists()

    # 2. the same command resumes there; rank 1 is killed (SIGKILL: a crash) after a later checkpoint
    later = (step // 2 + 2) * 2
    launcher = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(out / f"checkpoint-{later}" / "trainer_state.json", launcher)
    lock = json.loads(lock_path(out).read_text())  # rank 0 holds it: the other worker is rank 1
    rank1 = [pid for pid in _children(launcher.pid) if pid != lock["pid"]]
    assert len(rank1) == 1, (rank1, lock)
    os.kill(rank1[0], signal.SIGKILL)
    log = launcher.communicate(timeout=120)[0]
    assert launcher.returncode != 0
    assert f"Resuming from {out / f'checkpoint-{step}'}" in log
    assert "rank      : 1" in log, log[-4000:]  # the launcher names the rank that failed

    # 3. the same command again: from the newest complete checkpoint to the end, exactly the uninterrupted run
    done = run(argv)
    assert done.returncode == 0, output(done)[-6000:]
    assert "Resuming from" in output(done)
    assert_same_weights(uninterrupted, out, atol=1e-6)


# ---- the output folder's guard: one process decides ----------------------------------------------------------------
def test_a_live_lock_stops_every_rank_at_once_with_the_guarding_ranks_message(data, tmp_path):
    out = tmp_path / "out"
    holder = hold_lock(out)
    try:
        start = time.monotonic()
        done = run(torchrun("finetune", [*command_args("run_finetune", data, out, QUIET), "--max_steps", "2",
                                         "--ddp_timeout", "120"]))
        elapsed = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    log = output(done)
    assert done.returncode != 0
    assert f"is in use by process {holder.pid}" in log
    assert "(decided by rank 0, which guards the output folder)" in log  # rank 1 names who decided
    assert elapsed < 100, f"a rank waited {elapsed:.0f} s"
    assert not out.exists() or not any(out.iterdir())


def test_a_stale_lock_is_replaced_and_a_finished_run_is_nothing_to_do_on_every_rank(data, tmp_path):
    out = tmp_path / "out"
    lock = lock_path(out)
    lock.parent.mkdir(parents=True, exist_ok=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(),
                                "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}))
    argv = torchrun("finetune", [*command_args("run_finetune", data, out, QUIET), "--max_steps", "2"])
    first = run(argv)
    assert first.returncode == 0, output(first)[-6000:]
    assert "Replacing the stale lock" in output(first)
    model = (out / "model.safetensors").read_bytes()
    again = run(argv)
    assert again.returncode == 0, output(again)[-6000:]
    assert len(said(output(again), "hf_aux: ")) == 1  # "already holds this finished run", by the guarding rank
    assert "already holds this finished run" in said(output(again), "hf_aux: ")[0]
    assert (out / "model.safetensors").read_bytes() == model
