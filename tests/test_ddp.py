"""DDP on CPU (gloo, 2 processes via torch.distributed.run) against one process with the same global batches.

Why one process with twice the gradient accumulation (not twice the batch) is the reference: every trainer's
loss is a per-micro-batch mean (of rows, or of masked tokens), Trainer divides it by the accumulation steps and DDP
averages it over ranks, so an update is the mean of its micro-batch means either way; accelerate deals batch k of
the stream to rank k % 2, which is micro-step k % 2 of one process with accumulation 2. A doubled batch would
instead average over all masked tokens at once (a different loss whenever the halves mask different numbers of
tokens) and, for MUPPET, change the number of task-homogeneous sub-batches per update. Random draws (masks, Gumbel
and R3F noise, auxiliary batches, TARTAN's dropout in the '-dropout' jobs) are seeded by the micro-batch's place in
that stream (hf_aux.runtime.distributed).

META-TARTAN is compared across ranks only: it updates the task weights once per micro-batch, so one process with
accumulation 2 makes two weight updates per optimizer step where two processes make one (from gradients averaged
over ranks); and its meta head phi* is fitted on each rank's own features. The strongest true property, tested:
identical task weights on both ranks at every step (they moved), identical parameters.
MetaLM's meta objectives (hard, soft) refuse to start under DDP; its mlm baseline is compared like the others.

Every job of a launch runs in the same two processes (one start-up), so the whole file is two launches.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from tiny import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_worker.py")
EQUAL_JOBS = ["muppet", "muppet:r3f", "muppet:budget", "amos", "tartan:mt", "tartan:mt-dropout", "tartan:mt-warmup",
              "meta_lm:mlm", "meta_lm:mlm-dropout"]  # vs one process
DDP_ONLY_JOBS = ["tartan:meta", "tartan:meta-dropout", "tartan:meta-warmup", "meta_lm:soft", "muppet:meta"]

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def _launch(out, jobs, processes: int, grad_accum: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()), WORKER]
    else:
        command = [sys.executable, WORKER]
    result = subprocess.run(command + [str(out), *jobs, "--grad-accum", str(grad_accum)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    _launch(root / "two", EQUAL_JOBS + DDP_ONLY_JOBS, processes=2, grad_accum=1)
    _launch(root / "one", EQUAL_JOBS, processes=1, grad_accum=2)
    return root


def _params(root, job, rank=0):
    saved = torch.load(root / job.replace(":", "-") / f"params_rank{rank}.pt")
    return saved["world_size"], saved["params"]


@pytest.mark.parametrize("job", EQUAL_JOBS)
def test_two_processes_end_with_the_parameters_of_one_process_with_the_same_global_batches(runs, job):
    world, ddp = _params(runs / "two", job)
    world_1, ddp_1 = _params(runs / "two", job, rank=1)
    single_world, single = _params(runs / "one", job)
    assert (world, world_1, single_world) == (2, 2, 1)
    for name, value in single.items():
        torch.testing.assert_close(ddp[name], value, atol=1e-5, rtol=0, msg=f"{job}: {name}")
        torch.testing.assert_close(ddp_1[name], ddp[name], atol=0, rtol=0, msg=f"{job}: {name} differs across ranks")
    # the comparison means something: training moved the parameters by far more than the tolerance
    initial = torch.load(runs / "two" / job.replace(":", "-") / "params_rank0.pt")["initial"]
    assert max((ddp[name] - value).abs().max().item() for name, value in initial.items()) > 1e-3


def test_token_budget_sub_batches_are_dealt_to_the_ranks_disjointly(runs):
    """Under a token budget the sub-batches vary in size; accelerate deals sub-batch k to rank k % 2, so the ranks
    never see the same sub-batch and together see exactly the stream one process sees (the parameters match too:
    EQUAL_JOBS)."""
    loaded = lambda where, rank=0: torch.load(runs / where / "muppet-budget" / f"params_rank{rank}.pt")  # noqa: E731
    # the 3 updates' sub-batches (a loader collates one sub-batch ahead of the one it hands out)
    rank0, rank1, single = loaded("two")["batches"][:3], loaded("two", 1)["batches"][:3], loaded("one")["batches"][:6]
    assert len(rank0) == len(rank1) == 3 and len(single) == 6
    assert len({len(batch) for batch in single}) > 1  # sizes vary: the budget is what decides them
    assert not {str(b) for b in rank0} & {str(b) for b in rank1}
    assert [batch for pair in zip(rank0, rank1) for batch in pair] == single


@pytest.mark.parametrize("job", ["muppet", "amos", "tartan:mt"])
def test_logged_metrics_are_gathered_over_processes(runs, job):
    """The per-task / per-head metrics a trainer logs (hf_aux.runtime.training_metrics) cover every process: two
    processes log what one process with the same global batches logs, and both ranks log the same."""
    logs = {where: torch.load(runs / where / job.replace(":", "-") / "params_rank0.pt")["logged"]
            for where in ("one", "two")}
    rank1 = torch.load(runs / "two" / job.replace(":", "-") / "params_rank1.pt")["logged"]
    assert len(logs["one"]) == len(logs["two"]) == 3 and all(logs["two"]), logs
    assert rank1 == logs["two"]
    for single, ddp in zip(logs["one"], logs["two"]):
        assert set(single) == set(ddp)
        for key, value in single.items():
            assert ddp[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), (job, key)


@pytest.mark.parametrize("job", ["tartan:meta", "tartan:meta-dropout", "tartan:meta-warmup"])
def test_meta_tartan_task_weights_are_identical_on_every_rank_at_every_step(runs, job):
    folder = runs / "two" / job.replace(":", "-")
    histories = [json.load(open(folder / f"task_weights_rank{r}.json")) for r in (0, 1)]
    assert [row[0] for row in histories[0]["history"]] == [1, 2, 3]  # one row per optimizer step
    assert histories[0] == histories[1]  # exact: the cosines come from gradients all-reduced before use
    first = histories[0]["history"][0][1:]
    assert max(abs(a - 1 / 3) for a in first) > 1e-3  # the weights moved from uniform
    _, rank0 = _params(runs / "two", job)
    _, rank1 = _params(runs / "two", job, rank=1)
    trained = [name for name in rank0 if not name.startswith("meta_head.")]  # phi*: refitted per step and rank
    assert trained and len(trained) < len(rank0)
    # each rank fits its own phi* on its own features (docs/tartan.md, META-TARTAN under DDP): they differ
    assert any(not torch.equal(rank0[name], rank1[name]) for name in rank0 if name.startswith("meta_head."))
    for name in trained:
        torch.testing.assert_close(rank0[name], rank1[name], atol=0, rtol=0, msg=name)
    if job.endswith("-warmup"):  # the MLM head warm-up ran on both ranks, on the same batches, to the same heads
        warmups = [json.load(open(folder / f"task_weights_rank{r}.json"))["head_warmup"] for r in (0, 1)]
        assert warmups[0] == warmups[1] and set(warmups[0]) == {"tapt", "dapt"}


def test_muppet_meta_weights_and_parameters_are_identical_on_every_rank(runs):
    """End-task-aware MUPPET under DDP, as META-TARTAN: each rank takes g_k and g_meta on its own batches (and fits
    its own phi*, which is not kept), the gradients are averaged before the cosines, so w, alpha and every trained
    parameter are identical on both ranks."""
    folder = runs / "two" / "muppet-meta"
    histories = [json.load(open(folder / f"task_weights_rank{r}.json")) for r in (0, 1)]
    assert [row[0] for row in histories[0]["history"]] == [1, 2, 3]
    assert histories[0] == histories[1]
    assert max(abs(a - 1 / 2) for a in histories[0]["history"][-1][1:]) > 1e-4  # the weights moved
    _, rank0 = _params(runs / "two", "muppet:meta")
    _, rank1 = _params(runs / "two", "muppet:meta", rank=1)
    for name in rank0:
        torch.testing.assert_close(rank0[name], rank1[name], atol=0, rtol=0, msg=name)


def test_meta_lm_meta_objectives_refuse_ddp_with_a_clear_message(runs):
    folder = runs / "two" / "meta_lm-soft"
    assert not (folder / "params_rank0.pt").exists()
    for rank in (0, 1):
        message = (folder / f"refused_rank{rank}.txt").read_text()
        assert "MetaLMTrainer" in message and "one process" in message and "objective='mlm'" in message


def test_seeded_rng_draws_from_the_seed_and_leaves_the_global_stream_where_it_was():
    """Each micro-batch's dropout and noise come from its own seed (hf_aux.runtime.distributed.seeded_rng), and
    Trainer's own draws around it (samplers, checkpointed RNG state) are not moved by it."""
    from hf_aux.runtime.distributed import micro_batch_seed, seeded_rng

    cpu = torch.device("cpu")
    torch.manual_seed(3)
    expected_outside = torch.rand(4)
    seed = micro_batch_seed(0, 5)
    torch.manual_seed(3)
    with seeded_rng(seed, cpu):
        inside = torch.rand(4)
        mask = torch.nn.functional.dropout(torch.ones(64), 0.5)
    torch.testing.assert_close(torch.rand(4), expected_outside, rtol=0, atol=0)
    torch.testing.assert_close(inside, torch.rand(4, generator=torch.Generator().manual_seed(seed)), rtol=0, atol=0)
    with seeded_rng(seed, cpu):
        torch.rand(4)
        torch.testing.assert_close(torch.nn.functional.dropout(torch.ones(64), 0.5), mask, rtol=0, atol=0)
    assert micro_batch_seed(0, 6) != seed and micro_batch_seed(1, 5) != seed
