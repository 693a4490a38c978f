"""What every run script does around training, written once: guard the output folder, lock it, pick a complete
checkpoint to resume from, and turn Ctrl-C / SIGTERM into a checkpoint and a one-line exit.

    run = guard_output_dir(training_args, model_args, data_args)   # before any data or model is loaded
    if run.nothing_to_do:
        return run.results                                          # finished, every finishing step done
    ... build data, model, trainer ...
    run.attach(trainer)                                             # SIGINT/SIGTERM -> checkpoint, exit 128+signal
    if not run.finished:                                            # (a finished run: attach loaded its model)
        trainer.train(resume_from_checkpoint=run.checkpoint)

Rules (run_glue's contract, made exact):
- The folder's configuration is recorded in `hf_aux_run.json` (the parsed arguments, less those that do not
  change what is trained: output/logging/Hub/evaluation settings; a path to an existing file or folder as its
  resolved absolute path, so that the same data given by another relative path is the same configuration). A
  folder holding a final model or checkpoints of ANOTHER configuration is refused unless `--overwrite_output_dir`
  (which then removes its checkpoints) or an explicit `--resume_from_checkpoint` is given; the same configuration
  resumes from its last complete checkpoint, and so does one that differs only in max_steps / num_train_epochs
  (training it for longer) when a checkpoint exists.
- A finished run (final model, trainer_state.json, the same configuration) is never trained again. With nothing
  new asked, the call says "nothing to do" and returns its saved results (`all_results.json`). When a finishing
  step is missing or newly asked (`finishing_steps`: the model card, evaluation or prediction results, the Hub push),
  the command finishes it without training: the final model is loaded from the folder (`load_finished_run`) and
  the steps after training run as usual (evaluation as asked, the card, the push); the weights, the train metrics
  and the trainer state stay as they are. The same holds for a command that asks for no training (`--do_eval`
  alone): in a folder holding this configuration's finished run it finishes that run. In a folder holding any
  other run (another configuration, an unfinished run, a model without trainer state) such a command is refused:
  it would evaluate the model its arguments name (the base model, fresh heads) and write that into the run's
  results and card.
- `<parent>/.<output folder>.hf_aux.lock` is an OS file lock (`filelock.FileLock`), held until the process writing
  the folder releases it or ends, and names that process (PID, host, command); a second process is refused while it
  is held. The file is removed on release: one left by a crash locks nothing and is taken over, with a warning.
- A checkpoint is complete when its trainer_state.json parses (Trainer writes it after the model, optimizer,
  scheduler and RNG files; hf_aux's own files are written before it), every *.safetensors file is as long as its
  header says, and every torch pickle is an intact zip. Incomplete ones are moved to `_incomplete_checkpoints/`
  with a warning naming them; the newest complete one is resumed.
- Several processes (torchrun, accelerate launch): one process guards the folder (rank 0, or each node's local
  rank 0 with save_on_each_node) and the others follow its decision or its error (`guard_output_dir`); the number
  of processes is part of the configuration; a signal stops every rank at the same step (`InterruptCallback`).
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import json
import logging
import os
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .config import RUN_CONTROL_FIELDS, RunArgsMixin, field_default  # noqa: F401  (RunArgsMixin: importable here)
from .disk import watch as watch_disk
from ..errors import UserInputError

logger = logging.getLogger(__name__)

RUN_CONFIG_NAME = "hf_aux_run.json"
LOCK_NAME = ".hf_aux.lock"  # beside the output folder: lock_path
INCOMPLETE_DIR = "_incomplete_checkpoints"
FINAL_MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                     "adapter_model.safetensors")
TORCH_PICKLE_SUFFIXES = (".pt", ".pth", ".bin")  # optimizer, scheduler, rng_state, training_args, scaler
# changing only these continues a run from its last checkpoint (train it for longer); anything else is another run
EXTENSION_FIELDS = ("max_steps", "num_train_epochs")


def _only_longer(old: dict, new: dict) -> bool:
    return all(old.get(k) == new.get(k) for k in set(old) | set(new) if k not in EXTENSION_FIELDS)


class OutputDirError(UserInputError):
    """The output folder cannot be used as asked; the message says why and what to do."""


class DiskFullError(UserInputError):
    """The disk of the output folder filled while the run wrote to it (hf_aux.runtime.disk): not a mistake in what
    the user gave, but said the same way, in one line (exit status 1)."""


# ---- the configuration record -----------------------------------------------------------------------------------


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def run_configuration(*arguments) -> dict:
    """The parsed argument dataclasses as one JSON-able dict, less RUN_CONTROL_FIELDS; values naming an existing
    file or folder as their absolute, resolved path (`resolve_paths`)."""
    config = {}
    for item in arguments:
        if item is None:
            continue
        # TrainingArguments' to_dict redacts tokens and turns enums into strings
        values = item.to_dict() if hasattr(item, "to_dict") else dataclasses.asdict(item)
        config.update({key: _jsonable(value) for key, value in values.items() if key not in RUN_CONTROL_FIELDS})
    return resolve_paths(config)


def _resolved(value):
    if isinstance(value, str) and value and os.path.exists(value):
        return os.path.realpath(value)
    if isinstance(value, list):
        return [_resolved(item) for item in value]
    return value


def resolve_paths(config: dict) -> dict:
    """`config` with every string value (or list item) that names an existing file or folder replaced by its
    absolute, resolved path: the same data file given as `data/train.jsonl`, `./data/train.jsonl` or through a
    link is the same configuration. A relative path in a record written before paths were resolved is read from
    the current folder (where the same command is normally run again)."""
    return {key: _resolved(value) for key, value in config.items()}


def _defaults(arguments) -> dict:
    """Every field's default value of the argument dataclasses, as run_configuration writes values."""
    found = [(spec.name, field_default(spec)) for item in arguments if item is not None
             for spec in dataclasses.fields(item)]
    return {name: _jsonable(value) for name, value in found if value is not dataclasses.MISSING}


def _differences(old: dict, new: dict, limit: int = 6) -> list[str]:
    keys = sorted(set(old) | set(new))
    changed = [f"{k}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}" for k in keys
               if old.get(k, "<unset>") != new.get(k, "<unset>")]
    return changed[:limit] + ([f"... {len(changed) - limit} more"] if len(changed) > limit else [])


# ---- checkpoints ------------------------------------------------------------------------------------------------


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if size < 8:
        return f"{path.name} is truncated ({size} bytes)"
    with open(path, "rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
        if 8 + header_size > size:
            return f"{path.name} is truncated (header of {header_size} bytes, file of {size})"
        try:
            header = json.loads(handle.read(header_size))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path.name} has a damaged header"
    ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    if 8 + header_size + max(ends, default=0) > size:
        return f"{path.name} is truncated ({size} bytes, its header needs {8 + header_size + max(ends)})"
    return None


def checkpoint_problem(folder: str | os.PathLike) -> str | None:
    """Why a checkpoint folder cannot be resumed from, or None when it is complete (module docstring)."""
    folder = Path(folder)
    state = folder / "trainer_state.json"
    if not state.is_file():
        return "trainer_state.json is missing (the checkpoint was not finished)"
    try:
        json.loads(state.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "trainer_state.json is damaged"
    for path in sorted(folder.rglob("*.safetensors")):
        problem = _safetensors_problem(path)
        if problem:
            return problem
    for path in sorted(folder.rglob("*")):
        if path.suffix in TORCH_PICKLE_SUFFIXES and path.is_file() and not zipfile.is_zipfile(path):
            return f"{path.relative_to(folder)} is truncated or damaged"
    return None


def inspect_output_dir(output_dir: Path, step: int | None) -> tuple[str | None, bool, Path | None]:
    """(the last complete checkpoint, whether the folder holds a finished run, the incomplete checkpoint-`step`
    newer than that one, or None), for hf_aux.runtime.disk's message about a full disk."""
    last = last_complete_checkpoint(output_dir, move_incomplete=False)
    half = next((folder for folder in _checkpoints(Path(output_dir)) if step is not None and folder.name ==
                 f"{PREFIX_CHECKPOINT_DIR}-{step}" and str(folder) != last and checkpoint_problem(folder)), None)
    return last, _is_finished(Path(output_dir)), half


def _checkpoints(output_dir: Path) -> list[Path]:
    found = []
    for path in output_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
        suffix = path.name[len(PREFIX_CHECKPOINT_DIR) + 1:]
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]


def last_complete_checkpoint(output_dir: str | os.PathLike, move_incomplete: bool = True) -> str | None:
    """The newest complete checkpoint-N under `output_dir`; newer incomplete ones are moved to
    `_incomplete_checkpoints/` (so they neither block this run nor are taken for the newest later) with a warning."""
    output_dir = Path(output_dir)
    for path in reversed(_checkpoints(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path)
        if move_incomplete:
            target = output_dir / INCOMPLETE_DIR / f"{path.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            target.parent.mkdir(exist_ok=True)
            shutil.move(str(path), str(target))
            logger.warning("Skipping %s: %s. Moved it to %s; resuming from the previous complete checkpoint.", path,
                           problem, target)
            print(f"hf_aux: skipping incomplete checkpoint {path} ({problem}); moved to {target}", file=sys.stderr)
    return None


# ---- the lock -------------------------------------------------------------------------------------------------


def _holder(lock: Path) -> dict | None:
    """The record in `lock`: the process holding it, or (a file left in place) one that ended without releasing."""
    try:
        return json.loads(lock.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


_HELD_LOCKS: dict[str, FileLock] = {}
os.register_at_fork(after_in_child=_HELD_LOCKS.clear)  # a forked child (a data loader worker) holds none of them


def lock_path(output_dir: str | os.PathLike) -> Path:
    """The lock of `output_dir`: a hidden file beside it (never inside it: nothing in the run folder changes, and
    nothing of it is pushed), `<parent>/.<name>.hf_aux.lock`."""
    folder = Path(output_dir).absolute()
    return folder.parent / f".{folder.name}{LOCK_NAME}"


def acquire_lock(output_dir: str | os.PathLike) -> Path:
    """Lock `output_dir` (`lock_path`, an OS file lock) for this process and record the process in the lock file,
    refusing a folder locked by another process; a lock this process already holds is kept as it is."""
    lock = lock_path(output_dir)
    if str(lock) in _HELD_LOCKS:
        return lock
    lock.parent.mkdir(parents=True, exist_ok=True)
    left = _holder(lock)  # release removes the file: a record still there is a crashed (or killed) process's
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                         "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}).encode()

    def write_record(fd: int) -> None:  # under the lock, before acquire() returns
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)

    held = FileLock(lock, timeout=1, thread_local=False, on_acquired=write_record)  # 1 s: a holder releasing now
    try:
        held.acquire()
    except Timeout:
        holder = _holder(lock) or {}
        raise OutputDirError(
            f"output_dir {str(output_dir)!r} is in use by process {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')} (since {holder.get('started')}: {holder.get('command', '')[:200]}). "
            f"Wait for it to finish or use another --output_dir.") from None
    except OSError as error:  # a filesystem without file locks (Lustre mounted without flock, NFS without lockd)
        if error.errno not in (errno.ENOSYS, errno.ENOLCK):
            raise
        # the run goes on, as it did before hf_aux locked with the OS: only the check of a second writer is lost
        logger.warning("output_dir %r: cannot lock %s (%s): its filesystem offers no file locks, so a second run "
                       "writing this folder at the same time is not detected", str(output_dir), lock, error.strerror)
        return lock
    if left is not None:
        logger.warning("Replacing the stale lock %s (its process is gone)", lock)
    _HELD_LOCKS[str(lock)] = held
    return lock


def release_lock(lock: str | os.PathLike) -> None:
    """Release `lock` if this process holds it (acquire_lock), removing its file first: a process that opened the
    file just before takes a lock on a removed file, which filelock drops (st_nlink 0) and retries."""
    held = _HELD_LOCKS.pop(str(lock), None)
    if held is None:
        return
    # filelock leaves the file ("The file stays in place on release", filelock/_native/_unix.py); removed while held
    if (_holder(Path(lock)) or {}).get("pid") == os.getpid():
        Path(lock).unlink(missing_ok=True)
    held.release()


def _release_all_locks() -> None:
    for lock in list(_HELD_LOCKS):
        release_lock(lock)


atexit.register(_release_all_locks)


# ---- signals --------------------------------------------------------------------------------------------------


class InterruptCallback(TrainerCallback):
    """While training, SIGINT/SIGTERM ask Trainer to save a checkpoint at the end of the current step and stop;
    `on_train_end` then exits with 128 + the signal number and one line saying where the checkpoint is. A second
    signal acts at once (the default handler is restored by the first). With several processes (a launcher passes
    its SIGTERM to every rank) the ranks agree on the step to stop at (`hf_aux.runtime.distributed.StopAgreement`, one
    step after the signal), so all of them save the same checkpoint and none waits for the others in a collective."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received: int | None = None
        self.stopped_by: int | None = None
        self._previous = {}
        self._agreement = None

    def _handle(self, signum, frame):
        self.received = signum
        for number, handler in self._previous.items():  # a second Ctrl-C is not swallowed
            signal.signal(number, handler)
        logger.warning("%s received: saving a checkpoint at the end of this step, then stopping (send it again to "
                       "stop at once)", signal.Signals(signum).name)

    def on_train_begin(self, args, state, control, **kwargs):
        from .distributed import StopAgreement, several_processes

        self.received = self.stopped_by = None
        self._agreement = StopAgreement(args) if several_processes(args) else None
        if threading_main():
            self._previous = {number: signal.getsignal(number) for number in self.SIGNALS}
            for number in self.SIGNALS:
                signal.signal(number, self._handle)

    def on_step_end(self, args, state, control, **kwargs):
        stop = self.received if self._agreement is None else self._agreement.exchange(self.received)
        if stop:
            self.stopped_by = stop
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}
        if self._agreement is not None:
            self._agreement.close()
            self._agreement = None
        if self.stopped_by is None:
            return
        name = signal.Signals(self.stopped_by).name
        checkpoint = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        where = (f"saved {checkpoint}" if os.path.isdir(checkpoint)
                 else f"the last checkpoint is {last_complete_checkpoint(args.output_dir, move_incomplete=False)}")
        message = (f"hf_aux: interrupted by {name} at step {state.global_step} of {state.max_steps}: {where}; run "
                   "the same command again to resume from it.")
        if args.should_log:  # one line per run, not one per rank
            logger.error(message)
            print(message, file=sys.stderr, flush=True)
        raise SystemExit(128 + self.stopped_by)


def threading_main() -> bool:
    return threading.current_thread() is threading.main_thread()


class _Terminated(BaseException):
    """SIGTERM outside the training steps, raised like KeyboardInterrupt (no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def run_command(main, *args, prog: str | None = None):
    """A command's entry point (`hf-aux <command>` and the run scripts): `main(*args)`, with SIGTERM acting as
    Ctrl-C does. Inside the training steps `InterruptCallback` checkpoints and exits with its own line; anywhere else
    (loading, evaluating, saving) a Ctrl-C or SIGTERM ends the process with one line and exit code 128 + the signal
    number instead of a traceback. A `hf_aux.errors.UserInputError` ends it with one line, `<prog>: error: ...`
    (`prog`: default the script's name), and exit code 2 (a full disk: 1); HF_AUX_TRACEBACK=1 adds its traceback,
    and any other exception keeps its own. Under torchrun the rank's error file names the cause for the launcher's
    summary (`hf_aux.errors.call_recorded`). The SIGTERM handler is restored when `main` returns."""
    from ..errors import call_recorded, exit_for_user_error

    prog = prog or os.path.basename(sys.argv[0])

    def on_sigterm(signum, frame):
        raise _Terminated(signum)

    previous = signal.getsignal(signal.SIGTERM) if threading_main() else None
    if previous is not None:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return call_recorded(main, *args, prog=prog)
    except UserInputError as error:
        exit_for_user_error(prog, error)
    except Exception as error:  # a full disk, as torch, safetensors or the OS word it: one line (runtime/disk.py)
        from .disk import disk_full_error, disk_full_message

        full = disk_full_error(error)
        if full is None:
            raise
        exit_for_user_error(prog, DiskFullError(disk_full_message(full, inspect_output_dir)), status=1)
    except KeyboardInterrupt:
        signum = signal.SIGINT
    except _Terminated as interrupted:
        signum = interrupted.signum
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    message = (f"hf_aux: interrupted by {signal.Signals(signum).name} outside the training steps; nothing "
               "half-written is ever resumed from: run the same command again to resume from the last complete "
               "checkpoint in --output_dir (or to start, if there is none).")
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


# ---- the guard ----------------------------------------------------------------------------------------------------


@dataclass
class GuardedRun:
    """What `guard_output_dir` decided: the checkpoint to resume from, whether the run is already finished (and
    its saved results), and the lock it holds."""

    output_dir: str
    checkpoint: str | None = None
    finished: bool = False
    results: dict = field(default_factory=dict)
    lock: Path | None = None
    configuration: dict | None = None
    replaced_checkpoints: list[str] = field(default_factory=list)
    finishing: list[str] = field(default_factory=list)  # a finished run's steps still to do (finishing_steps)

    @property
    def nothing_to_do(self) -> bool:
        """A finished run with every finishing step done: the command returns `results` and does nothing else."""
        return self.finished and not self.finishing

    def attach(self, trainer) -> None:
        """Just before training: record the run's configuration in the output folder (nothing is written there
        when the run fails earlier), install the SIGINT/SIGTERM handling (InterruptCallback), and make hf_aux's
        token-checked push the only one (the commands build the trainer with `defer_hub_pushes` and push once, at
        the end; a trainer built without it is refused here). A finished run being finished (`finishing`) is loaded
        into `trainer` instead (`load_finished_run`), training asked or not, so what it then evaluates, predicts,
        describes or pushes is that run's final model, never the one the arguments build."""
        from .trainer import AuxTrainer
        from .hub import forget_push

        if not isinstance(trainer, AuxTrainer):
            raise TypeError(f"hf_aux's run guard needs an hf_aux trainer (hf_aux.AuxTrainer or a method's trainer), "
                            f"got {type(trainer).__name__}")

        for path in self.replaced_checkpoints:  # --overwrite_output_dir: the earlier run's, once nothing failed
            shutil.rmtree(path, ignore_errors=True)
        if self.replaced_checkpoints:
            logger.warning("--overwrite_output_dir: removed %d checkpoint(s) of the earlier run in %s",
                           len(self.replaced_checkpoints), self.output_dir)
            self.replaced_checkpoints = []
        if self.configuration is not None and trainer.args.should_save and trainer.args.do_train:
            os.makedirs(self.output_dir, exist_ok=True)
            forget_push(self.output_dir)  # what is trained now was never pushed
            Path(self.output_dir, RUN_CONFIG_NAME).write_text(
                json.dumps({"configuration": self.configuration}, indent=1, sort_keys=True))
        watch_disk(self.output_dir, trainer)  # a full disk: its half-written checkpoint is removed, its size told
        if not any(isinstance(c, InterruptCallback) for c in trainer.callback_handler.callbacks):
            trainer.add_callback(InterruptCallback())
        if trainer.args.push_to_hub and not trainer.defer_hub_pushes:
            raise TypeError("hf_aux's run guard: a run that pushes needs its trainer built with "
                            "defer_hub_pushes=True (the command pushes the output folder once, at the end)")
        if self.finished:  # finishing it: every later step (evaluation, prediction, card, push) is of its model
            load_finished_run(trainer, self)

    def release(self) -> None:
        if self.lock is not None:
            release_lock(self.lock)
            self.lock = None


# the attribute on the training arguments naming the actions the command line turned on because data was given
# (hf_aux.cli.parser's actions rule), not because they were asked for: an implied evaluation is no finishing step
IMPLIED_ACTIONS = "_hf_aux_implied"


def finishing_steps(args, output_dir: str | os.PathLike) -> list[str]:
    """What a finished run in `output_dir` still lacks of what `args` asks for: "model card" (README.md, written on
    every run that saved a model), "evaluation" (--do_eval asked for, not implied by the data, and no
    eval_results.json), "prediction" (--do_predict and no test_results.json), "push" (--push_to_hub, unless this
    folder was already pushed to the same repository and revision)."""
    from .hub import hub_repo_id, last_push

    output_dir = Path(output_dir)
    steps = []
    if not (output_dir / "README.md").is_file():
        steps.append("model card")
    if args.do_eval and not evaluation_implied(args) and not (output_dir / "eval_results.json").is_file():
        steps.append("evaluation")
    if args.do_predict and not (output_dir / "test_results.json").is_file():
        steps.append("prediction")
    if args.push_to_hub:
        pushed = last_push(output_dir)
        if not pushed or (pushed.get("repo_id"), pushed.get("revision")) != (hub_repo_id(args), args.hub_revision):
            steps.append("push")
    return steps


def load_finished_run(trainer, run: GuardedRun) -> dict:
    """For a finished run with finishing steps: load its final model from the output folder into `trainer`
    (Trainer's own resume path, so a model saved as several files loads as it does when resuming) and its trainer
    state; nothing is trained or saved. `GuardedRun.attach` calls it. Returns the results it recorded
    (all_results.json), for the card."""
    from transformers import TrainerState
    from transformers.trainer import TRAINER_STATE_NAME

    # Private on purpose: Trainer's resume path is the one place that loads every hf_aux model (several files,
    # LoRA adapters) into the trainer's model; train(resume_from_checkpoint=) would also run the training loop
    trainer._load_from_checkpoint(run.output_dir)
    trainer.state = TrainerState.load_from_json(os.path.join(run.output_dir, TRAINER_STATE_NAME))
    return dict(run.results)


def has_final_model(output_dir: str | os.PathLike) -> bool:
    """Whether `output_dir` holds a saved final model (FINAL_MODEL_FILES), not just checkpoints or metrics."""
    return any((Path(output_dir) / name).is_file() for name in FINAL_MODEL_FILES)


_DECISION = ("checkpoint", "finished", "results", "finishing")  # what the other ranks follow (guard_output_dir)


def guard_output_dir(training_args, *arguments, prepare=None) -> GuardedRun:
    """Check and lock `training_args.output_dir` for a run of `arguments` (every parsed argument dataclass, the
    training arguments included) before anything is loaded; see the module docstring. `prepare(training_args)`, if
    given, runs next on the deciding process, for a run that will train (e.g. creating the Hub repository), so that
    its failure stops every rank too. Returns a `GuardedRun`.

    With several processes (torchrun, accelerate launch) exactly one process per output folder guards it: global
    rank 0, or each node's local rank 0 when `save_on_each_node` gives every node its own folder. The others wait
    (at most --ddp_timeout) and follow its decision: the same checkpoint to resume from, the same "nothing to do",
    or the same error, which names the rank that decided."""
    from .distributed import check_launch, gather_objects, several_processes

    check_launch(training_args)
    if not several_processes(training_args):
        return _guard_here(training_args, arguments, prepare)
    rank = training_args.process_index
    decider = rank - training_args.local_process_index if training_args.save_on_each_node else 0
    run, failure, outcome = None, None, None
    if training_args.should_save:
        try:
            run = _guard_here(training_args, arguments, prepare)
            outcome = {name: getattr(run, name) for name in _DECISION}
        except BaseException as error:  # shared with the other ranks, then raised here as it is
            failure, outcome = error, {"error": str(error) or type(error).__name__}
    try:
        outcomes = gather_objects(outcome, training_args)
    except RuntimeError as error:
        if run is not None:
            run.release()
        raise OutputDirError(
            f"rank {rank}: no decision about output_dir {str(training_args.output_dir)!r} from the process that guards "
            f"it (rank {decider}) within --ddp_timeout {training_args.ddp_timeout} s, or that process is gone: "
            f"{error}") from failure
    errors = [(index, item["error"]) for index, item in enumerate(outcomes) if item and "error" in item]
    decisions = {(item["checkpoint"] and os.path.basename(item["checkpoint"]), item["finished"])
                 for item in outcomes if item and "error" not in item}
    if failure is not None:
        raise failure
    if errors or len(decisions) > 1:
        if run is not None:
            run.release()
        if errors:
            index, message = errors[0]
            raise OutputDirError(f"{message} (decided by rank {index}, which guards the output folder)")
        raise OutputDirError(
            f"output_dir {str(training_args.output_dir)!r}: the nodes' folders (--save_on_each_node) hold different "
            f"runs: {[item and (item['checkpoint'], item['finished']) for item in outcomes]}; make them the same "
            "(copy the newest complete checkpoint to every node) or pass --resume_from_checkpoint.")
    return run if run is not None else GuardedRun(output_dir=str(training_args.output_dir), **outcomes[decider])


def _guard_here(training_args, arguments, prepare) -> GuardedRun:
    """The guard as the one process that decides for the output folder runs it (guard_output_dir)."""
    output_dir = Path(training_args.output_dir)
    run = GuardedRun(output_dir=str(output_dir))
    watch_disk(output_dir)  # a full disk is then reported naming this folder (hf_aux.runtime.disk)
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirError(f"TrainingArguments: field 'output_dir': {str(output_dir)!r} is a file, not a folder; "
                             "pass a folder path")
    try:
        run.lock = acquire_lock(output_dir)
    except PermissionError as error:
        raise OutputDirError(f"TrainingArguments: field 'output_dir': cannot write beside or into {str(output_dir)!r} "
                             f"({error.strerror}: {error.filename}); pass a folder you can write to") from error
    try:
        config = run_configuration(training_args, *arguments)
        if training_args.world_size > 1:  # the global batch depends on it; absent for one process (older records)
            config["processes"] = training_args.world_size
        _decide(run, training_args, output_dir, config, _defaults((training_args, *arguments)))
        if prepare is not None and not run.nothing_to_do:
            prepare(training_args)
    except BaseException:
        run.release()
        raise
    return run


def _is_finished(output_dir: Path) -> bool:
    """A final model and its trainer state: what a run saves last (train_and_save)."""
    return has_final_model(output_dir) and (output_dir / "trainer_state.json").is_file()


def _finish(run: GuardedRun, args, output_dir: Path) -> None:
    """The same configuration's finished run: nothing to do, or its finishing steps (the module docstring)."""
    run.finished = True
    results = output_dir / "all_results.json"
    run.results = json.loads(results.read_text()) if results.is_file() else {}
    run.finishing = finishing_steps(args, output_dir)
    state = json.loads((output_dir / "trainer_state.json").read_text())
    todo = f"finishing it without training: {', '.join(run.finishing)}." if run.finishing else "nothing to do."
    message = (f"hf_aux: {output_dir} already holds this finished run (step {state.get('global_step')} of "
               f"{state.get('max_steps')}); {todo} Pass --overwrite_output_dir{'' if args.do_train else ' --do_train'}"
               " to train it again.")
    logger.warning(message)
    print(message, flush=True)
    if not run.finishing:
        run.release()


def _refuse_other_model(output_dir: Path, recorded: dict | None, config: dict, checkpoints: list[Path]) -> None:
    """A command that trains nothing, in a folder holding a run it cannot finish: its evaluation would be of the
    model the arguments name (the base model, fresh heads), written into that run's results and card."""
    if not _is_finished(output_dir) and not checkpoints:
        why = "holds a saved model but no trainer_state.json (not a finished hf_aux run)"
        remedy = "To evaluate that model, pass its folder as the model to evaluate"
    elif not _is_finished(output_dir):
        why = f"holds an unfinished run (last checkpoint: {checkpoints[-1].name})"
        remedy = ("To evaluate that run, finish it first: its training command (the arguments recorded in "
                  f"{RUN_CONFIG_NAME}) with --do_train resumes it, and with --do_eval / --do_predict evaluates it")
    else:
        why = ("holds a finished run whose configuration was not recorded (not written by this version of hf_aux)"
               if recorded is None else "holds a finished run of another configuration ("
               + "; ".join(_differences(recorded, config)) + ")")
        remedy = ("To evaluate that run's model, repeat the command that trained it (the arguments recorded in "
                  f"{RUN_CONFIG_NAME}) with --do_eval / --do_predict: its final model is loaded from the folder and "
                  "nothing is trained")
    raise OutputDirError(
        f"TrainingArguments: field 'output_dir': {str(output_dir)!r} {why}, and this command trains nothing: what it "
        "evaluates, predicts or describes would be the model its arguments name (with freshly initialised heads), "
        f"written into that run's results and card. {remedy}; to evaluate the model these arguments name, choose "
        "another --output_dir.")


def _decide(run: GuardedRun, args, output_dir: Path, config: dict, defaults: dict) -> None:
    record_path = output_dir / RUN_CONFIG_NAME
    recorded = None
    if record_path.is_file():
        try:
            recorded = json.loads(record_path.read_text()).get("configuration")
            # a record written before a field became run control (e.g. local_rank) still matches, and one written
            # before paths were resolved too
            recorded = resolve_paths({k: v for k, v in recorded.items() if k not in RUN_CONTROL_FIELDS})
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            recorded = None
    if recorded is not None:  # an argument added after the record was written, left at its default, is no change
        config = {k: v for k, v in config.items() if k in recorded or k not in defaults or defaults[k] != v}
    checkpoints = _checkpoints(output_dir)
    has_run = has_final_model(output_dir) or bool(checkpoints)
    explicit = args.resume_from_checkpoint
    if explicit is not None:
        problem = checkpoint_problem(explicit) if os.path.isdir(explicit) else "it is not a folder"
        if problem:
            raise OutputDirError(f"TrainingArguments: field 'resume_from_checkpoint': cannot resume from "
                                 f"{explicit!r}: {problem}. Pass an earlier checkpoint, or leave the flag out to "
                                 "resume from the newest complete one (or start over with --overwrite_output_dir).")
    if args.do_train and has_run and explicit is None:
        if getattr(args, "overwrite_output_dir", False):  # plain TrainingArguments (transformers 5) lack it
            run.replaced_checkpoints = [str(path) for path in checkpoints]  # removed by attach()
            checkpoints = []
        elif recorded is not None and recorded != config and _only_longer(recorded, config) and checkpoints:
            logger.warning("%s: continuing the run to %s (it was %s), from its last complete checkpoint", output_dir,
                           {k: config.get(k) for k in EXTENSION_FIELDS}, {k: recorded.get(k) for k in EXTENSION_FIELDS})
        elif recorded != config:
            why = ("holds a run whose configuration was not recorded (not written by this version of hf_aux)"
                   if recorded is None else "holds a run of another configuration ("
                   + "; ".join(_differences(recorded, config)) + ")")
            raise OutputDirError(
                f"TrainingArguments: field 'output_dir': {str(output_dir)!r} {why}. Pass --overwrite_output_dir to "
                "replace it (its checkpoints are removed), choose another --output_dir, or pass "
                "--resume_from_checkpoint <checkpoint> to continue it on purpose.")
        elif _is_finished(output_dir):
            _finish(run, args, output_dir)
            return
    if not args.do_train and has_run and (args.do_eval or args.do_predict or args.push_to_hub):
        # evaluation, prediction, a card or a push into a folder holding a run: only ever of that run's own model
        if _is_finished(output_dir) and recorded == config:
            _finish(run, args, output_dir)
            return
        _refuse_other_model(output_dir, recorded, config, checkpoints)
    if args.do_train:
        run.checkpoint = explicit or (last_complete_checkpoint(output_dir) if checkpoints else None)
        if run.checkpoint is not None:
            logger.warning("Resuming from %s (the same configuration; --overwrite_output_dir starts over)",
                           run.checkpoint)
        run.configuration = config  # recorded by attach(), just before training


def evaluation_implied(args) -> bool:
    """Whether do_eval is on only because the command was given data (the actions rule), not because it was asked:
    then a command whose data has no validation split evaluates nothing instead of failing."""
    return "do_eval" in getattr(args, IMPLIED_ACTIONS, ())


def drop_implied_evaluation(args, available: bool, missing: str) -> None:
    """Turn off an implied evaluation when the data has nothing to evaluate (`missing` says what), with a note."""
    if args.do_eval and not available and evaluation_implied(args):
        args.do_eval = False
        logger.info("No evaluation: %s (pass --do_eval with validation data to evaluate)", missing)
