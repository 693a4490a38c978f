"""No host reads inside an optimizer update (issue #61): every trainer's update, counted on CPU by
benchmarks/host_reads.py on the accelerator's paths, makes exactly the hf_aux reads listed here, by "path:function".

A new `.item()`, `bool(tensor)`, `.tolist()`, boolean-mask gather or `torch.tensor(..., device=)` inside a step fails
here, naming its file:line. A read that must stay is listed with its reason, at most once per update."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from host_reads import HostReads  # noqa: E402

# the non-finite guard ('stop'): ONE read per update, of every loss part of every sub-batch (and, for a plain model, its
# loss) together, right before the optimizer step, so that a NaN stops the run before the parameters see it, with the
# step and the loss parts named (hf_aux.runtime.nonfinite)
GUARD = {"hf_aux/runtime/nonfinite.py:_all_finite": 1}
# TARTAN MT checks no loss part of its own (the guard's parameter check at logging steps is outside an update)
NO_READS = {}
# the meta-learned objective's teacher update is skipped when its meta signal is non-finite: the teacher's gradient
# must not be written then (reading the flag decides it), once per update
TEACHER_SKIP = {"hf_aux/meta_lm/trainer.py:_accumulate_teacher_gradient": 1}
# the closed-form VJP of the student's AdamW step reads its step counts (bias correction), all parameters in one
# transfer, once per update; a fused AdamW (Trainer's default on CUDA) keeps them on the device
STEP_COUNTS = {"hf_aux/meta_lm/functional_optim.py:optimizer_steps": 1}

EXPECTED = {  # per trainer: {"path:function": host reads per update}
    "finetune": GUARD,
    "muppet": GUARD,
    "muppet_r3f": GUARD,
    "muppet_budget": GUARD,
    "muppet_meta": GUARD,
    "amos": GUARD,
    "tartan_mt": NO_READS,
    "tartan_meta": GUARD,
    "meta_lm_hard": {**GUARD, **TEACHER_SKIP},
    "meta_lm_soft": {**GUARD, **TEACHER_SKIP, **STEP_COUNTS},
    "meta_lm_soft_first_order": {**GUARD, **TEACHER_SKIP, **STEP_COUNTS},
}
UPDATES = 3  # updates per run: the two spans between their three optimizer steps are counted


def _no_logging(**extra):
    """Log, save and evaluate after the run only: the spans counted are plain updates."""
    return dict(max_steps=UPDATES, logging_steps=1000, save_strategy="no", report_to=[], **extra)


def _finetune(tmp_path):
    from test_muppet_trainer import _setup

    from hf_aux.modeling.multitask import MultiTaskModel, MultiTaskModelConfig
    from hf_aux.runtime.config import AuxConfig
    from hf_aux.runtime.trainer import AuxTrainer
    from hf_aux.tasks.data import MultiTaskCollator

    tokenizer, tasks, train, model, _ = _setup(tmp_path)
    sent = [t for t in tasks if t.name == "sent"]
    model = MultiTaskModel(MultiTaskModelConfig(encoder=model.config.encoder, tasks=sent), body=model.body)
    args = AuxConfig(output_dir=str(tmp_path / "ft"), per_device_train_batch_size=4, use_cpu=True,
                     disable_tqdm=True, remove_unused_columns=False, **_no_logging())
    return AuxTrainer(model=model, args=args, train_dataset=train["sent"], processing_class=tokenizer,
                      data_collator=MultiTaskCollator(tokenizer, ["sent"]))


def _muppet(tmp_path, **config):
    from test_muppet_trainer import _setup

    from hf_aux.muppet.trainer import MuppetTrainer

    tokenizer, _, train, model, args = _setup(tmp_path, **_no_logging(**config))
    train = {k: train[k] for k in ("sent", "topic", "choice")}
    return MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)


def _muppet_meta(tmp_path):
    from test_muppet_meta_weighting import _setup

    from hf_aux.muppet.trainer import MuppetTrainer

    tokenizer, model, args, train, extra = _setup(tmp_path, **_no_logging())
    return MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer, **extra)


def _amos(tmp_path):
    from test_amos_trainer import make_args, tiny_setup

    from hf_aux.amos.trainer import AmosTrainer

    model, tokenizer, data = tiny_setup()
    return AmosTrainer(model=model, args=make_args(tmp_path, **_no_logging()), train_dataset=data,
                       processing_class=tokenizer)


def _tartan(tmp_path, weighting):
    import test_tartan_trainer

    data = test_tartan_trainer.data.__wrapped__()
    return test_tartan_trainer.make_trainer(data, tmp_path, mode=weighting, **_no_logging())


def _meta_lm(tmp_path, objective, first_order=False):
    import test_meta_lm_trainer

    data = test_meta_lm_trainer.data.__wrapped__()
    return test_meta_lm_trainer.make_trainer(data, tmp_path, objective=objective, first_order=first_order,
                                             **_no_logging())


BUILDERS = {
    "finetune": _finetune,
    "muppet": _muppet,
    "muppet_r3f": lambda p: _muppet(p, robust_finetuning="r3f", r3f_eps=1e-2),
    "muppet_budget": lambda p: _muppet(p, max_tokens_per_batch=60, per_device_train_batch_size=16),
    "muppet_meta": _muppet_meta,
    "amos": _amos,
    "tartan_mt": lambda p: _tartan(p, "mt"),
    "tartan_meta": lambda p: _tartan(p, "meta"),
    "meta_lm_hard": lambda p: _meta_lm(p, "hard"),
    "meta_lm_soft": lambda p: _meta_lm(p, "soft"),
    "meta_lm_soft_first_order": lambda p: _meta_lm(p, "soft", first_order=True),
}


def count_reads(trainer) -> HostReads:
    reads = HostReads()
    trainer.add_callback(reads.callback())
    with reads:
        trainer.train()
    assert len(reads.full_windows()) == UPDATES - 1
    return reads


@pytest.mark.parametrize("name", list(EXPECTED))
def test_an_update_makes_only_the_listed_hf_aux_host_reads(name, tmp_path):
    reads = count_reads(BUILDERS[name](tmp_path))
    found = reads.lines("hf_aux", by="function")
    assert found == EXPECTED[name], (
        f"{name}: hf_aux's host reads per update changed; by line: {reads.lines('hf_aux')} "
        f"(all origins per update: {reads.per_update()})")


def test_the_counter_files_each_kind_of_read_under_its_line_and_sees_the_accelerator_path():
    """The counter itself: a value read, a boolean-mask gather (forward, and its backward filed under the same
    line), `.tolist()`, `torch.tensor(..., device=)`, each under the line that made it; a sampler's host-side draws
    are not counted; and `scale_losses`'s n(i) >= 2 check, a CPU-only read, is skipped on the accelerator path."""
    from hf_aux.muppet.losses import scale_losses
    from hf_aux.tasks.batches import host_side

    x = torch.randn(6, requires_grad=True)
    reads = HostReads()
    with reads:
        reads.mark()
        here = sys._getframe().f_lineno
        value = x.sum().item()                                      # here + 1
        picked = x[x > 0]                                           # here + 2
        picked.sum().backward()
        listed = x.detach().tolist()                                # here + 4
        placed = torch.tensor([1.0], device=x.device)               # here + 5
        with host_side():
            torch.randperm(4, generator=torch.Generator().manual_seed(0)).tolist()
        scale_losses(torch.ones(2), torch.tensor([2.0, 3.0]))
        reads.mark()
    assert value is not None and listed and placed is not None
    path = "tests/test_host_reads.py"
    found = {}
    for key, count in reads.lines("other").items():  # the gather's forward and backward are two kinds of one line
        found[key.split(" ")[0]] = found.get(key.split(" ")[0], 0) + count
    assert found == {f"{path}:{here + 1}": 1, f"{path}:{here + 2}": 2, f"{path}:{here + 4}": 1,
                     f"{path}:{here + 5}": 1}, reads.lines()
    assert reads.per_update() == {"hf_aux": 0, "trainer": 0, "other": 5}
    on_cpu_path = HostReads(accelerator_path=False)
    with on_cpu_path:
        on_cpu_path.mark()
        scale_losses(torch.ones(2), torch.tensor([2.0, 3.0]))
        on_cpu_path.mark()
    assert list(on_cpu_path.lines("hf_aux", by="function")) == ["hf_aux/muppet/losses.py:scale_losses"]
