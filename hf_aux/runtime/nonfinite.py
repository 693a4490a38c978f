"""Non-finite training stops before it is saved, by default in hf_aux's configs (`on_nonfinite`; other arguments
get 'continue', Trainer's own behaviour): one implementation for every hf_aux trainer.

- `check_finite_loss(trainer, parts, owner)`: called by a trainer's loss code with its named loss parts; a NaN/Inf
  part raises `NonFiniteTrainingError` naming the step, every part's value and the last checkpoint, before the
  optimizer step. On CPU at once; on an accelerator the guard checks the update's parts together right before
  its optimizer step: one host read per update, of every loss part of every sub-batch and the watched loss
  together (it stays so that a NaN stops the run before the optimizer writes it into the parameters).
- `NonFiniteGuard`, a `TrainerCallback` every hf_aux trainer installs. With `on_nonfinite` 'stop' (the default)
  a non-finite gradient the loss checks missed makes the parameters non-finite, so the guard checks the
  parameters (one pass, one host sync) where Trainer logs, evaluates, saves or ends, and `AuxTrainer` checks them
  again right before it writes any model: nothing non-finite reaches a checkpoint or the final model. The error
  names the step and, when the last check was earlier, the steps whose update may have caused it. The model's
  last loss (`watch_model_loss`) is checked every step; modules updated beside the model with an optimizer of
  their own (`NonFiniteGuard.watch`: the meta-learned objective's teacher) are checked with it. With 'skip',
  every step is checked before the update (gradients) and after it (parameters).
- `--on_nonfinite skip` (every hf_aux config, through `hf_aux.runtime.run_guard.RunArgsMixin`): a step whose loss
  or gradients are non-finite is skipped (its gradients dropped, the optimizer leaves parameters and moments as
  they were) and counted as `nonfinite_skipped_steps`. Parameters that became non-finite always stop the run.
  'continue' is `transformers.Trainer` exactly: no guard, no check; `logging_nan_inf_filter` filters the logs."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from .tensor_ops import on_accelerator

logger = logging.getLogger(__name__)

NONFINITE_POLICIES = ("stop", "skip", "continue")


class NonFiniteTrainingError(ValueError):
    """A loss, gradient or parameter became NaN/Inf; the message names the step and the values."""


@dataclass
class NonFiniteArgsMixin:
    """The `on_nonfinite` setting; every hf_aux `TrainingArguments` subclass gets it through
    `hf_aux.runtime.config.RunArgsMixin`, which checks it against its choices."""

    on_nonfinite: str = field(default="stop", metadata={
        "help": "What a non-finite (NaN/Inf) loss or gradient does: 'stop' the run with an error naming the step "
                "and the loss parts (nothing non-finite is saved; the last checkpoint stays intact), or 'skip' "
                "that optimizer step and go on (counted in the logs as nonfinite_skipped_steps), or 'continue' as "
                "transformers' Trainer does (no check; logging_nan_inf_filter keeps NaN/Inf out of the logged loss).",
        "choices": list(NONFINITE_POLICIES)})


def _policy(args) -> str:
    # arguments that are not hf_aux's (plain TrainingArguments, a user's own) have no on_nonfinite: Trainer's way
    return getattr(args, "on_nonfinite", "continue")


def _advice(args) -> str:
    try:
        last = get_last_checkpoint(args.output_dir) if args.output_dir else None
    except (OSError, ValueError):
        last = None
    where = ("no checkpoint had been saved" if last is None
             else f"the last checkpoint, {last}, is intact (resume from it with a lower learning rate)")
    return (f"Nothing holding NaN/Inf was saved; {where}. Lower --learning_rate, check the data and --max_grad_norm, "
            "or pass --on_nonfinite skip to skip such steps.")


def _format(value: float) -> str:
    return f"{value:.6g}"


def check_finite_loss(trainer, parts: dict, owner: str | None = None) -> bool:
    """True when every loss part (tensor or float) is finite. Otherwise, with `on_nonfinite` 'stop' (the default)
    raise `NonFiniteTrainingError` naming `owner`, the step in progress and every part; with 'skip' return False
    (the `NonFiniteGuard` then drops the step's gradients). One host sync for tensors; none with 'continue' (True).

    With 'stop', tensors on an accelerator and the trainer's `NonFiniteGuard` installed, the check is deferred to
    the guard, which checks every sub-batch's parts at once before the update's optimizer step (one host sync per
    update instead of one per sub-batch; the same error, naming the same step), and this returns True."""
    if _policy(trainer.args) == "continue":
        return True
    tensors = [v for v in parts.values() if isinstance(v, torch.Tensor)]
    if tensors and _policy(trainer.args) == "stop":
        guard = find_nonfinite_guard(trainer)
        if guard is not None and (guard.defer_loss_checks or on_accelerator(tensors[0])):
            guard.defer_loss_check(trainer, parts, owner)
            return True
    return _all_finite(parts.values()) or _refuse_loss(trainer, parts, owner)


def _all_finite(values) -> bool:
    """Whether every value (tensors of any shape and device, numbers) is finite: one host sync for the tensors."""
    values = list(values)
    tensors = [v.detach().float().reshape(-1) for v in values if isinstance(v, torch.Tensor)]
    if tensors and not bool(torch.isfinite(torch.cat([t.to(tensors[0].device) for t in tensors])).all()):
        return False
    return all(math.isfinite(v) for v in values if not isinstance(v, torch.Tensor))


def _refuse_loss(trainer, parts: dict, owner: str | None) -> bool:
    """A non-finite loss: False with 'skip'; with 'stop' the error naming `owner`, the step and every part."""
    if _policy(trainer.args) == "skip":
        return False
    values = {name: (v.detach().float().reshape(-1).tolist() if isinstance(v, torch.Tensor) else [float(v)])
              for name, v in parts.items()}
    described = ", ".join(f"{name} {_format(v[0]) if len(v) == 1 else [_format(x) for x in v]}"
                          for name, v in values.items())
    raise NonFiniteTrainingError(f"{owner or type(trainer).__name__}: non-finite loss at step "
                                 f"{trainer.state.global_step + 1} ({described}). " + _advice(trainer.args))


class NonFiniteGuard(TrainerCallback):
    """Checks gradients before and parameters after every optimizer step (module docstring). `watch_model_loss`:
    also check the `loss` of the model's last forward pass (for a plain `Trainer`, whose loss no hf_aux code
    sees); hf_aux trainers check their own named loss parts with `check_finite_loss` instead."""

    def __init__(self, watch_model_loss: bool = False):
        self.watch_model_loss = watch_model_loss
        self.watched: list[tuple[str, torch.nn.Module]] = []  # (owner, module): trained beside the model (`watch`)
        self.skipped = 0
        self._last_loss = None
        self._hook = None
        self._checked_step = 0  # 'stop': the parameters were last seen finite after this optimizer step
        # check_finite_loss's deferred checks ('stop'): (trainer, owner, parts) of this update's sub-batches, checked
        # at once before its optimizer step; deferred on an accelerator, and on CPU too when this is True
        self.defer_loss_checks = False
        self._pending_losses: list[tuple[object, str | None, dict]] = []

    # ---- the plain Trainer's loss: recorded (no host sync) by a forward hook while training ----
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._checked_step = state.global_step  # a resumed run starts from a checkpoint checked when it was saved
        if self.watch_model_loss and model is not None and self._hook is None:
            self._hook = model.register_forward_hook(self._record_loss)

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _record_loss(self, module, inputs, output):
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if module.training and isinstance(loss, torch.Tensor):
            self._last_loss = loss.detach()

    # ---- the loss parts check_finite_loss deferred: checked at once, before the update ----
    def defer_loss_check(self, trainer, parts: dict, owner: str | None) -> None:
        detached = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in parts.items()}
        self._pending_losses.append((trainer, owner, detached))

    def check_deferred_losses(self) -> None:
        """Check the loss parts deferred since the last call (one host sync); a non-finite one raises
        check_finite_loss's error for the first sub-batch that had one."""
        pending, self._pending_losses = self._pending_losses, []
        if _all_finite(v for _, _, parts in pending for v in parts.values()):
            return
        for trainer, owner, parts in pending:  # raises at the first non-finite sub-batch (policy 'stop')
            if not _all_finite(parts.values()):
                _refuse_loss(trainer, parts, owner)

    # ---- before the update: gradients (and the watched loss) ----
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if _policy(args) == "stop":
            # the update's one host read: every deferred loss part and the watched loss, together
            values = [v for _, _, parts in self._pending_losses for v in parts.values()]
            values += [] if self._last_loss is None else [self._last_loss]
            if not values or _all_finite(values):
                self._pending_losses, self._last_loss = [], None  # non-finite gradients show in the parameters
                return                                             # they update (check_parameters)
        if self._pending_losses:
            self.check_deferred_losses()  # raises, naming the sub-batch, if a loss part was non-finite
        if _policy(args) == "stop" and (self._last_loss is None or bool(torch.isfinite(self._last_loss).all())):
            self._last_loss = None
            return
        named = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
        checks = []
        if named:
            checks.append(_max_abs([g for _, g in named]))
        if self._last_loss is not None:
            checks.append(self._last_loss.float().reshape(1).to(checks[0].device if checks else "cpu"))
        if not checks or bool(torch.isfinite(torch.cat(checks)).all()):
            self._last_loss = None
            return
        step = state.global_step + 1
        bad = [name for name, g in named if not bool(torch.isfinite(g).all())]
        loss = None if self._last_loss is None else self._last_loss.item()
        self._last_loss = None
        what = (f"loss {_format(loss)}; " if loss is not None else "") + (
            f"non-finite gradients in {len(bad)} of {len(named)} parameter tensors (first: {bad[0]})" if bad
            else "the gradients are finite")
        if _policy(args) == "skip":
            for _, p in model.named_parameters():
                p.grad = None  # torch optimizers leave parameters without a gradient (and their moments) alone
            self.skipped += 1
            logger.warning("Skipping optimizer step %d (--on_nonfinite skip): %s; %d step(s) skipped so far", step,
                           what, self.skipped)
            return
        raise NonFiniteTrainingError(f"non-finite training at step {step}: {what}. " + _advice(args))

    # ---- after the update: parameters ('skip': every step; 'stop': where Trainer logs, evaluates, saves or ends) ----
    def watch(self, owner: str, module: torch.nn.Module) -> None:
        """Check `module`'s parameters with the model's, named `owner` in the error: a module its trainer updates
        with an optimizer of its own (the meta-learned objective's teacher)."""
        self.watched.append((owner, module))

    def _check(self, model, step: int, args, since: int | None = None) -> None:
        for owner, module in [("the model", model), *self.watched]:
            check_finite_parameters(module.named_parameters(), step, args, owner, since=since)

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        if _policy(args) == "skip":
            self._check(model, state.global_step + 1, args)
            self._checked_step = state.global_step + 1

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None and (control.should_log or control.should_evaluate or control.should_save
                                  or control.should_training_stop or state.global_step >= state.max_steps):
            self.check_parameters(model, state.global_step, args)

    def check_parameters(self, model, step: int, args) -> None:
        """Raise `NonFiniteTrainingError` if a parameter of `model` (or of a watched module) is NaN/Inf after
        optimizer step `step`, naming the steps since the last check whose update may have caused it; one pass and
        one host sync per module."""
        if step > self._checked_step:
            self._check(model, step, args, since=self._checked_step)
            self._checked_step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.skipped and logs is not None and "loss" in logs:
            logs["nonfinite_skipped_steps"] = self.skipped


def _max_abs(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[len(tensors)] max |x| per tensor (the inf-norm: unlike the 2-norm it cannot overflow from finite values;
    NaN propagates)."""
    return torch.stack(torch._foreach_norm(tensors, float("inf"))).float()


def check_finite_parameters(named_parameters, step: int, args, owner: str = "the model",
                            since: int | None = None) -> None:
    """Raise `NonFiniteTrainingError` when a parameter is NaN/Inf after optimizer step `step` (an update too large
    for the number format cannot be skipped back). `since`: the step after which they were last seen finite (the
    message then names the steps whose update may have caused it). One host sync."""
    named = list(named_parameters)
    if not named or bool(torch.isfinite(_max_abs([p.detach() for _, p in named])).all()):
        return
    bad = [name for name, p in named if not bool(torch.isfinite(p).all())]
    when = f"after optimizer step {step}"
    if since is not None and since < step - 1:
        when += f" (finite after step {since}: the update of one of steps {since + 1}-{step} made them so)"
    raise NonFiniteTrainingError(
        f"non-finite parameters of {owner} {when}: {len(bad)} of {len(named)} parameter "
        f"tensors hold NaN/Inf (first: {bad[0]}); the update was too large. " + _advice(args))


def find_nonfinite_guard(trainer) -> NonFiniteGuard | None:
    """The trainer's `NonFiniteGuard`, if one is installed."""
    handler = getattr(trainer, "callback_handler", None)
    return next((c for c in getattr(handler, "callbacks", ()) if isinstance(c, NonFiniteGuard)), None)


def install_nonfinite_guard(trainer, watch_model_loss: bool = False) -> NonFiniteGuard | None:
    """Add a `NonFiniteGuard` to `trainer` unless it has one; returns the guard (None with 'continue': no guard)."""
    if _policy(trainer.args) == "continue":
        return None
    guard = find_nonfinite_guard(trainer)
    if guard is None:
        guard = NonFiniteGuard(watch_model_loss=watch_model_loss)
        trainer.add_callback(guard)
    return guard
