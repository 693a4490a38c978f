"""MetaLMTrainer on tiny models (2 layers, hidden 8, as the paper's Table 4): meta-gradients against finite
differences, h against a hand computation, persisted student parameters = theta_1, what moves the teacher,
skipped non-finite h, exact resume of both networks and both optimizers, checkpoints and input errors."""

import copy
import math
import os

import pytest
import torch
from datasets import Dataset
from tiny import tiny_tokenizer
from transformers import AutoModelForMaskedLM, BertConfig, TrainerCallback

from hf_aux.tasks.data import group_texts_for_mlm
from hf_aux.meta_lm.losses import (
                                   pseudo_cross_entropy,
                                   sample_tokens_with_nll,
                                   soft_pseudo_cross_entropy,
                                   token_cross_entropy,
                                   )
from hf_aux.meta_lm.teacher import MetaLMTeacher, add_meta_lm_tokens
from hf_aux.meta_lm.trainer import MetaLMConfig, MetaLMTrainer

TEXTS = ["the movie was good and the plot was great", "i hate this film it is boring and bad",
         "the actor was very good but the story was too long", "what a terrible plot and a bad actor"] * 6


@pytest.fixture(scope="module")
def data():
    tok = tiny_tokenizer()
    add_meta_lm_tokens(tok, ["sent"], 2)
    unlabelled = group_texts_for_mlm(Dataset.from_dict({"text": TEXTS}), tok, block_size=12)
    labelled = Dataset.from_dict({"text": ["good movie", "bad film", "great plot", "boring story", "the best",
                                           "the worst"], "label": [1, 0, 1, 0, 1, 0]})
    labelled = labelled.map(lambda b: tok(b["text"]), batched=True)
    return tok, unlabelled, labelled


def student_config(tok, dropout=0.0):
    return BertConfig(vocab_size=len(tok), hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32, pad_token_id=tok.pad_token_id,
                      hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def make_trainer(data, tmp_path, dropout=0.0, dtype=torch.float32, seed=0, **overrides):
    tok, unlabelled, labelled = data
    torch.manual_seed(seed)
    student = AutoModelForMaskedLM.from_config(student_config(tok, dropout), attn_implementation="eager").to(dtype)
    teacher = MetaLMTeacher.from_student_config(student.config).to(dtype)
    kwargs = dict(output_dir=str(tmp_path), objective="soft", max_steps=4, per_device_train_batch_size=2,
                  learning_rate=1e-2, warmup_steps=0, report_to=[], save_strategy="no", use_cpu=True,
                  logging_steps=1, seed=seed, disable_tqdm=True)
    kwargs.update(overrides)
    args = MetaLMConfig(**kwargs)
    return MetaLMTrainer(model=student, teacher=teacher, args=args, labelled_tasks={"sent": labelled},
                         train_dataset=unlabelled, processing_class=tok)


def first_batch(trainer):
    return trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))


def prime_adam(trainer):
    """One real optimizer step with random gradients, so AdamW's state (step 1, moments) is not trivial."""
    gen = torch.Generator().manual_seed(1)
    for p in trainer.model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.1
    trainer.optimizer.step()
    trainer.model.zero_grad(set_to_none=True)


def replay_batches(trainer, state, x_u, mask):
    """The trainer's random draws of one meta step, replayed from its generator state."""
    trainer._generator.set_state(state)
    trainer._support_query.task_steps_left = 0
    trainer._mlm_example(x_u, mask, trainer._generator)
    task = trainer._support_query.next_task()
    return trainer._support_query.batch(task), trainer._support_query.batch(task)


def student_step_reference(trainer, student0, opt_state, pseudo_loss_fn, support, query, finetune=True,
                           fixed_support_grads=None):
    """Query loss after a REAL optimizer step (clip + torch AdamW/SGD) and a hand-written SGD support step."""
    student = copy.deepcopy(student0)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    params = dict(student.named_parameters())
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [params[names[id(p)]] for p in g["params"]]}
              for g in trainer.optimizer.param_groups]
    optimizer = type(trainer.optimizer)(groups)
    optimizer.load_state_dict(copy.deepcopy(opt_state))  # load_state_dict aliases the tensors
    pseudo_loss_fn(student).backward()
    if trainer.args.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(student.parameters(), trainer.args.max_grad_norm)
    optimizer.step()
    theta_1 = {n: p.detach().clone() for n, p in student.named_parameters()}
    if finetune:
        loss = token_cross_entropy(student(input_ids=support["input_ids"],
                                           attention_mask=support["attention_mask"]).logits, support["labels"])
        grads = torch.autograd.grad(loss, list(student.parameters()), allow_unused=True)
        if fixed_support_grads is not None:  # first order: the support gradient is a constant
            grads = fixed_support_grads
        student.support_grads = grads
        with torch.no_grad():
            for p, g in zip(student.parameters(), grads):
                if g is not None:
                    p -= trainer.args.inner_learning_rate * g
    return student, theta_1


@pytest.mark.parametrize("first_order", [False, True])
def test_soft_meta_gradient_matches_finite_differences(data, tmp_path, first_order):
    trainer = make_trainer(data, tmp_path, dtype=torch.float64, teacher_aux_losses=False, lambda_meta=2.0,
                           mlm_task_probability=0.0, teacher_gradient_accumulation_steps=2, first_order=first_order,
                           first_order_radius=1e-6)  # forward difference -> derivative (float64)
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    prime_adam(trainer)
    batch = first_batch(trainer)
    x_u, mask = batch["input_ids"], batch["attention_mask"]
    student0 = copy.deepcopy(trainer.model)
    opt_state = copy.deepcopy(trainer.optimizer.state_dict())
    gen_state = trainer._generator.get_state()
    trainer.training_step(trainer.model, batch)
    teacher = trainer.teacher
    meta_grad = {n: p.grad.clone() for n, p in teacher.named_parameters()}  # accumulation 2 halves lambda_meta 2
    support, query = replay_batches(trainer, gen_state, x_u, mask)
    pad = trainer.meta_tokens.pad

    fixed = {}

    def query_loss(t):
        out = t(input_ids=x_u, attention_mask=mask)
        x_probs, y_probs = out.input_logits.softmax(-1), out.output_logits.softmax(-1)

        def pseudo(s):
            embeds = x_probs @ s.get_input_embeddings().weight
            return soft_pseudo_cross_entropy(s(inputs_embeds=embeds, attention_mask=mask).logits, y_probs, mask, pad)

        student, _ = student_step_reference(trainer, student0, opt_state, pseudo, support, query,
                                            fixed_support_grads=fixed.get("grads"))
        fixed.setdefault("grads", student.support_grads if first_order else None)
        return token_cross_entropy(student(input_ids=query["input_ids"],
                                           attention_mask=query["attention_mask"]).logits, query["labels"])

    query_loss(teacher)  # first order: fixes the support gradient at the unperturbed teacher
    gen = torch.Generator().manual_seed(3)
    direction = {n: torch.randn(p.shape, generator=gen, dtype=p.dtype) for n, p in teacher.named_parameters()}
    eps = 1e-5
    shifted = []
    for sign in (1, -1):
        t = copy.deepcopy(teacher)
        with torch.no_grad():
            for n, p in t.named_parameters():
                p += sign * eps * direction[n]
        shifted.append(query_loss(t).item())
    numeric = (shifted[0] - shifted[1]) / (2 * eps)
    analytic = sum((meta_grad[n] * direction[n]).sum() for n in direction).item()
    assert abs(analytic) > 1e-7  # the meta signal is not trivially zero
    assert analytic == pytest.approx(numeric, rel=1e-4, abs=1e-9)


@pytest.mark.parametrize("optim", ["sgd", "adamw_torch"])
def test_h_and_teacher_gradient_match_hand_computation(data, tmp_path, optim):
    trainer = make_trainer(data, tmp_path, dtype=torch.float64, objective="hard", teacher_aux_losses=False,
                           lambda_meta=1.0, teacher_gradient_accumulation_steps=2, optim=optim,
                           weight_decay=0.0, max_grad_norm=0.0)
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    if optim == "adamw_torch":
        prime_adam(trainer)
    batch = first_batch(trainer)
    x_u, mask = batch["input_ids"], batch["attention_mask"]
    student0 = copy.deepcopy(trainer.model)
    teacher0 = copy.deepcopy(trainer.teacher)
    opt_state = copy.deepcopy(trainer.optimizer.state_dict())
    gen_state = trainer._generator.get_state()
    trainer.training_step(trainer.model, batch)
    h_trainer = trainer._train_metrics.last["meta/h"].item()

    # by hand: the same draws, the teacher's samples, the student's real step, support step, query gradient
    trainer._generator.set_state(gen_state)
    trainer._mlm_example(x_u, mask, trainer._generator)
    out = teacher0(input_ids=x_u, attention_mask=mask)
    pad = trainer.meta_tokens.pad
    x_hat = sample_tokens_with_nll(out.input_logits, trainer._generator)[0].masked_fill(mask == 0, pad)
    y_hat = sample_tokens_with_nll(out.output_logits, trainer._generator)[0].masked_fill(mask == 0, pad)
    task = trainer._support_query.next_task()
    support, query = trainer._support_query.batch(task), trainer._support_query.batch(task)

    def pseudo(s):
        return pseudo_cross_entropy(s(input_ids=x_hat, attention_mask=mask).logits, y_hat, mask, pad)

    g_pseudo = torch.autograd.grad(pseudo(student0), list(student0.parameters()))
    student2, theta_1 = student_step_reference(trainer, student0, opt_state, pseudo, support, query)
    q_loss = token_cross_entropy(student2(input_ids=query["input_ids"], attention_mask=query["attention_mask"]).logits,
                                 query["labels"])
    g_query = torch.autograd.grad(q_loss, list(student2.parameters()))
    lr = trainer.args.learning_rate
    if optim == "sgd":  # eq. 7: h = eta * grad_query(theta_2) . grad_pseudo(theta_0)
        h = lr * sum((a * b).sum() for a, b in zip(g_query, g_pseudo)).item()
    else:  # eq. 8: cosine of grad_query(theta_2) with theta_0 - theta_1
        delta = [p0 - theta_1[n] for n, p0 in student0.named_parameters()]
        dot = sum((a * b).sum() for a, b in zip(g_query, delta))
        h = (dot / (torch.cat([g.flatten() for g in g_query]).norm()
                    * torch.cat([d.flatten() for d in delta]).norm())).item()
    assert h_trainer == pytest.approx(h, rel=1e-6, abs=1e-12)

    # the student's .grad is the pseudo gradient only; the teacher's is h * grad CE(own samples), nothing else
    for p, g in zip(trainer.model.parameters(), g_pseudo):
        torch.testing.assert_close(p.grad, g, rtol=1e-8, atol=1e-12)
    # eq. 6 by F.cross_entropy (the trainer's fused form makes the same gradient in its softmax buffer)
    weight = mask.to(out.input_logits.dtype)
    sample_ce = sum((torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none")
                     * weight.flatten()).sum() for logits, tokens in ((out.input_logits, x_hat),
                                                                       (out.output_logits, y_hat))) / (2 * weight.sum())
    expected = torch.autograd.grad(h * sample_ce, list(teacher0.parameters()), allow_unused=True)
    for p, g in zip(trainer.teacher.parameters(), expected):
        torch.testing.assert_close(2 * p.grad, g, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("objective,optim", [("soft", "adamw_torch"), ("hard", "sgd"), ("hard", "adamw_torch_fused")])
def test_persisted_student_parameters_are_theta_1(data, tmp_path, objective, optim):
    trainer = make_trainer(data, tmp_path, objective=objective, optim=optim, max_steps=3, max_grad_norm=0.05)
    predicted = {}
    method = "_theta_1" if objective == "soft" else "_theta_1_values"  # hard labels need only its value
    original = getattr(trainer, method)

    def recording(params, grads, **kwargs):
        theta_1 = original(params, grads, **kwargs)
        predicted["theta_1"] = [t.detach().clone() for t in theta_1]
        predicted["theta_0"] = [p.detach().clone() for p in params]
        return theta_1

    setattr(trainer, method, recording)
    gaps = []

    class Compare(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            params = [p for p in trainer.model.parameters() if p.requires_grad]
            gaps.append(max((p - t).abs().max().item() for p, t in zip(params, predicted["theta_1"])))
            gaps.append(-max((p - t).abs().max().item() for p, t in zip(params, predicted["theta_0"])))

    trainer.add_callback(Compare())
    trainer.train()
    assert len(gaps) == 6
    assert max(gaps[0::2]) < 1e-6  # persisted = theta_1
    assert max(gaps[1::2]) < -1e-5  # ... and the student really moved away from theta_0


def test_teacher_moves_only_through_meta_signal_and_aux_losses(data, tmp_path):
    def teacher_change(**overrides):
        trainer = make_trainer(data, tmp_path, objective="hard", weight_decay=0.0, max_steps=3, **overrides)
        before = copy.deepcopy(trainer.teacher.state_dict())
        trainer.train()
        return {n: (p - before[n]).abs().max().item() for n, p in trainer.teacher.state_dict().items()}

    frozen = teacher_change(lambda_meta=0.0, teacher_aux_losses=False)
    assert max(frozen.values()) == 0.0  # the student's steps never reach the teacher
    meta_only = teacher_change(lambda_meta=1.0, teacher_aux_losses=False)
    assert max(meta_only.values()) > 0.0
    aux = teacher_change(lambda_meta=0.0, teacher_aux_losses=True)
    moved = [n for n, d in aux.items() if d > 0]
    assert len(moved) == len(aux)  # every teacher parameter gets a gradient from its auxiliary losses


def test_non_finite_h_skips_the_teacher_update(data, tmp_path):
    # linear warmup from 0: the first student step is zero, theta_0 - theta_1 = 0 and eq. 8's cosine is 0/0
    trainer = make_trainer(data, tmp_path, objective="hard", warmup_steps=2, teacher_aux_losses=True, max_steps=2)
    before = copy.deepcopy(trainer.teacher.state_dict())
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    trainer.training_step(trainer.model, first_batch(trainer))
    assert not torch.isfinite(trainer._train_metrics.last["meta/h"])
    assert trainer._train_metrics.last["meta/teacher_skipped"].item() == 1.0
    assert all(p.grad is None for p in trainer.teacher.parameters())
    assert all(torch.equal(p, before[n]) for n, p in trainer.teacher.state_dict().items())
    logs = {"loss": 1.0}
    trainer.log(logs)
    assert logs["meta/teacher_skipped"] == 1.0


def _state(trainer):
    flat = {f"student.{n}": p.detach().clone() for n, p in trainer.model.named_parameters()}
    flat.update({f"teacher.{n}": p.detach().clone() for n, p in trainer.teacher.named_parameters()})
    for prefix, opt in (("opt", trainer._student_optimizer()), ("topt", trainer.teacher_optimizer)):
        for i, s in opt.state_dict()["state"].items():
            for k, v in s.items():
                flat[f"{prefix}.{i}.{k}"] = torch.as_tensor(v).clone()
    return flat


@pytest.mark.parametrize("objective", ["hard", "soft"])
def test_resume_is_exact_for_both_networks_and_optimizers(data, tmp_path, objective):
    common = dict(objective=objective, max_steps=4, save_strategy="steps", save_steps=2, dropout=0.1,
                  teacher_gradient_accumulation_steps=2 if objective == "hard" else 1, warmup_steps=1)
    straight = make_trainer(data, tmp_path / "a", **common)
    straight.train()
    resumed = make_trainer(data, tmp_path / "b", **{**common, "max_steps": 4})
    resumed.args.max_steps = 2
    resumed.train()
    assert os.path.isfile(tmp_path / "b" / "checkpoint-2" / "meta_lm_state.pt")
    resumed = make_trainer(data, tmp_path / "b", **common)
    with torch.no_grad():  # scramble what the checkpoint must restore (args.seed, which orders the data, stays)
        for p in list(resumed.model.parameters()) + list(resumed.teacher.parameters()):
            p.normal_()
    resumed._generator.manual_seed(123)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-2"))
    a, b = _state(straight), _state(resumed)
    assert a.keys() == b.keys() and any(k.startswith("topt.") for k in a)
    gaps = {key: (a[key].float() - b[key].float()).abs().max().item() for key in a}
    assert max(gaps.values()) < 1e-6, sorted(k for k, v in gaps.items() if v >= 1e-6 and not k.startswith("teacher"))


def test_checkpoint_layout_student_plain_mlm_teacher_subfolder(data, tmp_path):
    trainer = make_trainer(data, tmp_path, objective="hard", max_steps=1)
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    student = AutoModelForMaskedLM.from_pretrained(tmp_path / "final")
    teacher = MetaLMTeacher.from_pretrained(tmp_path / "final" / "teacher")
    for (n, p), q in zip(trainer.model.state_dict().items(), student.state_dict().values()):
        assert torch.equal(p, q), n
    for p, q in zip(trainer.teacher.state_dict().values(), teacher.state_dict().values()):
        assert torch.equal(p, q)


def test_mlm_baseline_and_fixed_y_and_no_finetune_step_train(data, tmp_path):
    mlm = make_trainer(data, tmp_path, objective="mlm", max_steps=2, gradient_accumulation_steps=2)
    assert mlm.teacher is None
    mlm.train()
    assert mlm.state.log_history[0]["loss"] > 0
    for overrides in (dict(objective="hard", fixed_y=True), dict(objective="soft", fixed_y=True),
                      dict(objective="soft", finetune_step=False)):
        trainer = make_trainer(data, tmp_path, max_steps=2, **overrides)
        trainer.train()
        assert "meta/query_loss" in trainer.state.log_history[0]
        assert ("meta/support_loss" in trainer.state.log_history[0]) == trainer.args.finetune_step


def test_input_errors(data, tmp_path):
    tok, unlabelled, labelled = data
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        MetaLMConfig(output_dir=str(tmp_path), objective="hard", gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="samples_per_task"):
        MetaLMConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, samples_per_task=6)
    with pytest.raises(ValueError, match="objective"):
        MetaLMConfig(output_dir=str(tmp_path), objective="electra")
    student = AutoModelForMaskedLM.from_config(student_config(tok), attn_implementation="eager")
    other = AutoModelForMaskedLM.from_config(student_config(tok, 0.0).__class__(
        **{**student_config(tok).to_dict(), "vocab_size": len(tok) + 3}))
    args = MetaLMConfig(output_dir=str(tmp_path), objective="hard", report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="vocabulary sizes differ"):
        MetaLMTrainer(model=student, teacher=MetaLMTeacher.from_student_config(other.config), args=args,
                      labelled_tasks={"sent": labelled}, train_dataset=unlabelled, processing_class=tok)
    with pytest.raises(ValueError, match=r"no label token"):
        MetaLMTrainer(model=student, args=args, labelled_tasks={"sent": labelled.map(lambda e: {"label": 5})},
                      train_dataset=unlabelled, processing_class=tok)
    sdpa = AutoModelForMaskedLM.from_config(student_config(tok), attn_implementation="sdpa")
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        MetaLMTrainer(model=sdpa, args=MetaLMConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True),
                      labelled_tasks={"sent": labelled}, train_dataset=unlabelled, processing_class=tok)




def test_pseudo_input_statistics_by_hand(data, tmp_path):
    """meta/x_hat_distinct, x_u_distinct, x_hat_pooled_entropy, x_hat_position_entropy (vocabulary collapse)."""
    trainer = make_trainer(data, tmp_path, objective="soft")
    vocab = trainer.meta_tokens.vocab_size
    x_u = torch.tensor([[2, 7, 7, 9], [2, 8, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    collapsed = torch.full((2, 4, vocab), -30.0)
    collapsed[..., 5] = 30.0  # every position certain of token 5
    trainer._record_pseudo_input_statistics(x_u, collapsed, None, mask)
    m = {k[len("meta/"):]: [v.item()] for k, v in trainer._train_metrics.last.items()}
    halves = torch.full((2, 4, vocab), -1e4)
    halves[0, :, 5] = halves[0, :, 6] = 0.0  # row 0: 50/50 between tokens 5 and 6; row 1: uniform
    halves[1] = 0.0
    x_hat = torch.tensor([[5, 6, 6, 5], [3, 4, 0, 0]])
    trainer._record_pseudo_input_statistics(x_u, halves, x_hat, mask)
    for k, v in trainer._train_metrics.last.items():
        m[k[len("meta/"):]].append(v.item())
    assert m["x_u_distinct"] == [4.0, 4.0]  # 2, 7, 9, 8 (padding left out)
    assert m["x_hat_distinct"] == [1.0, 4.0]  # argmax 5 everywhere; then the samples 5, 6, 3, 4
    assert m["x_hat_pooled_entropy"][0] == pytest.approx(0.0, abs=1e-5)
    assert m["x_hat_position_entropy"][0] == pytest.approx(0.0, abs=1e-5)
    # by hand: 6 attended positions, 4 with p(5) = p(6) = 1/2, 2 uniform over the vocabulary
    assert m["x_hat_position_entropy"][1] == pytest.approx((4 * math.log(2) + 2 * math.log(vocab)) / 6, rel=1e-5)
    pooled = torch.full((vocab,), 2 / (6 * vocab))
    pooled[5] += 4 / 12
    pooled[6] += 4 / 12
    assert m["x_hat_pooled_entropy"][1] == pytest.approx(-(pooled * pooled.log()).sum().item(), rel=1e-5)
