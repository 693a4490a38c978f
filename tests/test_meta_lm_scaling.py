"""MetaLMTrainer and issue #8: bf16 autocast on CPU (mlm, hard; soft refuses), non-reentrant gradient
checkpointing (every objective: the same parameters as without it), PEFT/LoRA (refused by the meta objectives,
with the reason), and x-hat's vocabulary statistics in the logs."""

import copy

import pytest
import torch
from test_meta_lm_trainer import data, make_trainer  # noqa: F401  (the module-scoped data fixture)
from transformers import AutoModelForMaskedLM

from hf_aux.meta_lm.teacher import LMHead
from hf_aux.meta_lm.trainer import MetaLMConfig, MetaLMTrainer


def _moved(before: dict, module) -> list[str]:
    return [n for n, p in module.named_parameters() if not torch.equal(p.detach(), before[n])]


@pytest.mark.parametrize("objective", ["mlm", "hard"])
def test_bf16_autocast_steps_are_finite_and_train_both_networks(data, tmp_path, objective):  # noqa: F811
    trainer = make_trainer(data, tmp_path, objective=objective, bf16=True, max_steps=2)
    student0 = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    teacher0 = None if trainer.teacher is None else {n: p.detach().clone() for n, p in trainer.teacher.named_parameters()}
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert len(_moved(student0, trainer.model)) > 0.9 * len(student0)  # (a few rows: tokens never seen)
    if teacher0 is not None:
        assert trainer.state.log_history[0]["meta/teacher_skipped"] == 0.0
        assert _moved(teacher0, trainer.teacher) == list(teacher0)  # aux losses reach every teacher parameter


def test_soft_labels_refuse_bf16_with_a_reason(tmp_path):
    with pytest.raises(ValueError, match="'bf16'.*fp32"):
        MetaLMConfig(output_dir=str(tmp_path), objective="soft", bf16=True, use_cpu=True)


@pytest.mark.parametrize("objective,first_order", [("mlm", False), ("hard", False), ("soft", False), ("soft", True)])
def test_gradient_checkpointing_gives_the_parameters_of_a_run_without_it(data, tmp_path, objective,  # noqa: F811
                                                                      first_order):
    runs = []
    for checkpointing in (False, True):
        trainer = make_trainer(data, tmp_path / str(checkpointing), objective=objective, first_order=first_order,
                               max_steps=2, activation_checkpointing=checkpointing,
                               activation_checkpointing_kwargs={"use_reentrant": False})
        trainer.train()
        assert trainer.model.is_activation_checkpointing == checkpointing
        runs.append(trainer)
    plain, checkpointed = runs
    moved = 0.0
    for (name, p), q in zip(plain.model.named_parameters(), checkpointed.model.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=name)
    if plain.teacher is not None:
        for (name, p), q in zip(plain.teacher.named_parameters(), checkpointed.teacher.parameters()):
            torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=name)
    start = make_trainer(data, tmp_path / "start", objective=objective)
    moved = max((p - q).abs().max().item() for p, q in zip(plain.model.parameters(), start.model.parameters()))
    assert moved > 1e-4  # the comparison is not between two untrained students


@pytest.mark.parametrize("role", ["model", "teacher"])
def test_meta_objectives_refuse_a_peft_student_or_teacher(data, tmp_path, role):  # noqa: F811
    from peft import LoraConfig, get_peft_model

    tok, unlabelled, labelled = data
    base = make_trainer(data, tmp_path, objective="hard")
    student, teacher = base.model, base.teacher
    lora = LoraConfig(r=2, target_modules=["query", "value"])
    if role == "model":
        student = get_peft_model(copy.deepcopy(student), lora)
    else:
        teacher = get_peft_model(copy.deepcopy(teacher), lora)
    args = MetaLMConfig(output_dir=str(tmp_path), objective="hard", report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match=rf"field '{role}': PEFT/LoRA adapters are not supported"):
        MetaLMTrainer(model=student, teacher=teacher, args=args, labelled_tasks={"sent": labelled},
                      train_dataset=unlabelled, processing_class=tok)


def test_first_order_soft_labels_run_with_sdpa_attention(data, tmp_path):  # noqa: F811
    # no double backward in the first-order form, so SDPA (refused for second order) is accepted and trains
    tok, unlabelled, labelled = data
    base = make_trainer(data, tmp_path, objective="soft")
    sdpa = AutoModelForMaskedLM.from_config(base.model.config, attn_implementation="sdpa")
    args = MetaLMConfig(output_dir=str(tmp_path), objective="soft", first_order=True, max_steps=1, report_to=[],
                        use_cpu=True, save_strategy="no", warmup_steps=0, learning_rate=1e-2)
    trainer = MetaLMTrainer(model=sdpa, args=args, labelled_tasks={"sent": labelled}, train_dataset=unlabelled,
                            processing_class=tok)
    teacher0 = {n: p.detach().clone() for n, p in trainer.teacher.named_parameters()}
    trainer.train()
    assert len(_moved(teacher0, trainer.teacher)) == len(teacher0)
    with pytest.raises(ValueError, match="first_order=True"):
        MetaLMTrainer(model=sdpa, args=MetaLMConfig(output_dir=str(tmp_path), objective="soft", report_to=[],
                                                    use_cpu=True), labelled_tasks={"sent": labelled},
                      train_dataset=unlabelled, processing_class=tok)


def test_bf16_runs_the_teacher_in_bf16_too(data, tmp_path):  # noqa: F811
    """--bf16: accelerate autocasts the wrapped student's forward only; the trainer runs the teacher's forward in
    the same autocast (it ran in fp32, a full second encoder at full precision on a GPU)."""
    trainer = make_trainer(data, tmp_path, objective="hard", bf16=True, max_steps=1)
    seen = set()
    for owner, network in (("student", trainer.model), ("teacher", trainer.teacher)):
        for module in network.modules():
            if isinstance(module, (torch.nn.Linear, LMHead)):  # LMHead: its projection is not a Linear call
                module.register_forward_hook(lambda m, i, out, owner=owner: seen.add((owner, out.dtype)))
    trainer.train()
    assert seen == {("student", torch.bfloat16), ("teacher", torch.bfloat16)}
