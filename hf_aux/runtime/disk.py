"""A full disk, said in one line: where a run writes (a checkpoint, the final model, its card, figures, results)
the disk can fill, and what reaches the user is then a library's own report of it, deep in a traceback:
`OSError: [Errno 28] No space left on device`, safetensors' `IoError(Os { code: 28, kind: StorageFull ... })`, or,
from `torch.save` (optimizer.pt, training_args.bin, rng_state.pth), `RuntimeError: [enforce fail at
inline_container.cc:672] . unexpected pos 9664 vs 9556` (torch's zip writer finding fewer bytes on disk than it wrote).

`run_guard.run_command` (every command's entry point) turns any of these into one line, `<prog>: error: ...`
(`disk_full_message`): the folder, about how many bytes the write needs (the size of the last complete checkpoint,
which the next one will match) and how many are free (`shutil.disk_usage`), that the last complete checkpoint is
intact (a checkpoint is complete only once its trainer_state.json is written, last: `run_guard.checkpoint_problem`)
and that the same command resumes from it once there is room. The half-written checkpoint of the step that failed
is removed, giving its bytes back (a rerun would only move it aside). The guard records the run being written
(`watch`), so that the message names its folder when the library's error names no file.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from ..errors import _chain

logger = logging.getLogger(__name__)

# what the libraries say when a write found no room (torch's zip writer: its position check, or its write check)
DISK_FULL_TEXTS = ("No space left on device", "StorageFull", "Disk quota exceeded")
TORCH_WRITER_TEXTS = ("unexpected pos", "PytorchStreamWriter failed writing file")
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

_watched: dict = {}  # the run being written: {"output_dir": str, "trainer": Trainer or None}


def watch(output_dir: str | os.PathLike, trainer=None, kept: str | None = None) -> None:
    """Record the run this process writes (the guard calls it; `GuardedRun.attach` adds the trainer). `kept`: what
    is intact and how to go on, for a command whose outputs are not checkpoints (hf-aux compare's compare.json)."""
    _watched.update(output_dir=str(output_dir), kept=kept,
                    **({"trainer": trainer} if trainer is not None else {}))


def disk_full_error(error: BaseException) -> BaseException | None:
    """The error in `error`'s chain (itself, its cause or context) that reports a full disk, or None."""
    for link in _chain(error):
        text = str(link)
        if (isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS
                or any(part in text for part in DISK_FULL_TEXTS)
                or isinstance(link, RuntimeError) and "inline_container.cc" in text
                and any(part in text for part in TORCH_WRITER_TEXTS)):
            return link
    return None


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _bytes(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _model_bytes(trainer) -> int | None:
    """What a first checkpoint of `trainer` holds, about: the weights, and Adam's two moments unless only the model
    is saved."""
    model = getattr(trainer, "model", None)
    if model is None:
        return None
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weights + (0 if getattr(trainer.args, "save_only_model", False) else 2 * trained)


def _remove(folder: Path | None) -> Path | None:
    try:
        shutil.rmtree(folder)
    except (OSError, TypeError):
        return None
    return folder


def disk_full_message(error: BaseException, inspect) -> str:
    """The one line for a full disk (`error`: what `disk_full_error` found); see the module docstring.
    `inspect(output_dir, step)` says what the output folder holds: (its last complete checkpoint or None, whether
    it holds a finished run, the incomplete checkpoint of `step` or None) (`run_guard.inspect_output_dir`)."""
    output_dir = Path(_watched.get("output_dir") or ".")
    trainer = _watched.get("trainer")
    written = getattr(error, "filename", None)
    folder = Path(written).parent if written else output_dir
    what = f"writing {written}" if written else f"writing into {output_dir}"
    step = getattr(getattr(trainer, "state", None), "global_step", None)
    last, finished, half_written = inspect(output_dir, step) if output_dir.is_dir() else (None, False, None)
    last = Path(last) if last else None
    # the checkpoint the failed write was making (this process writes it): its bytes back
    removed = _remove(half_written) if half_written is not None and trainer.args.should_save else None
    free = shutil.disk_usage(_existing(folder)).free
    as_last = last and f"about {_bytes(_size(last))} needed (the size of the last checkpoint, {last.name})"
    again = (f" (the half-written {removed.name} was removed)" if removed else "") + (
        "; make room (or give --output_dir a disk with space) and run the same command again: it ")
    if _watched.get("kept"):
        needed, kept = "the space needed is that of the next result", _watched["kept"]
    elif finished:  # the final model and its state were saved: what failed came after them
        needed = as_last or "a few MB needed (the card, figures and results)"
        kept = (f"The trained model in {output_dir} is intact; make room and run the same command again: it "
                "finishes the run (results, card) without training")
    elif last is not None:
        needed = as_last
        kept = f"Nothing complete was lost: the last complete checkpoint, {last}, is intact{again}resumes from there"
    else:
        estimate = _model_bytes(trainer) if trainer is not None else None
        needed = (f"about {_bytes(estimate)} needed (the model's weights and optimizer state)" if estimate
                  else "the space needed is unknown")
        kept = f"No checkpoint was complete yet{again}starts the run over"
    reason = getattr(error, "strerror", None) or " ".join(str(error).split())[:160]
    return f"the disk holding {folder} is full ({what}: {reason}): {needed}, {_bytes(free)} free. {kept}."
