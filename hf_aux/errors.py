"""The one error type for a mistake in what the user gave: a flag, a value, a file, a task, a column, an output
folder in use. Its message says what is wrong and what to do; the command line (`hf_aux.runtime.run_guard.run_command`)
prints it as one line, `<command>: error: <message>`, and exits with status 2, as argparse does for a bad flag,
instead of printing a traceback. Any other exception is a fault of hf_aux or of a library, and keeps its traceback.

It subclasses ValueError, so that code catching ValueError (and tests expecting one) see no difference.

HF_AUX_TRACEBACK=1 prints the traceback of a user's mistake too. Under torchrun each rank's error file (the
launcher's summary) holds the one line (`call_recorded`)."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from typing import NoReturn

__all__ = ["HubDownloadError", "UserInputError", "explain_hub_errors"]


class UserInputError(ValueError):
    """What the user gave cannot be used as it is; the message names it and says what to do."""


# ---- how the command line reports one --------------------------------------------------------------------------
TRACEBACK_VARIABLE = "HF_AUX_TRACEBACK"  # =1: a user's mistake is printed with its traceback too
EXIT_STATUS = 2  # argparse's, for a bad command line


def show_traceback() -> bool:
    return os.environ.get(TRACEBACK_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def error_line(prog: str, error: BaseException) -> str:
    """`<prog>: error: <message>`, on one line (a message's own line breaks become spaces)."""
    return f"{prog}: error: {' '.join(str(error).split())}"


def exit_for_user_error(prog: str, error: UserInputError, status: int = EXIT_STATUS) -> NoReturn:
    """End the process for `error` with its one line on stderr and `status` (EXIT_STATUS, as argparse ends it for a
    bad flag; 1 for what is no mistake of the user's, such as a full disk).
    Under a launcher only each node's first process (LOCAL_RANK 0) prints it: every rank meets the same mistake, and
    the launcher's summary names it from each rank's error file (`call_recorded`)."""
    if int(os.environ.get("LOCAL_RANK", "0") or 0) == 0:
        if show_traceback():
            traceback.print_exception(error)
        print(error_line(prog, error), file=sys.stderr, flush=True)
    raise SystemExit(status)


def call_recorded(main: Callable, *args, prog: str):
    """`main(*args)`, and under torchrun (which sets TORCHELASTIC_ERROR_FILE for each rank) its exception recorded in
    the rank's error file by torch's `record`, so that the launcher's summary names the root cause instead of only
    "exitcode: 1": a UserInputError as its one line, any other exception with its traceback."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:
        return main(*args)
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

    class OneLineForUserErrors(ErrorHandler):
        def record_exception(self, error: BaseException) -> None:
            path = self._get_error_file_path()
            if not isinstance(error, UserInputError) or show_traceback() or not path:
                super().record_exception(error)
                return
            line = error_line(prog, error)  # the summary prints py_callstack as the failure's "traceback"
            data = {"message": {"message": line, "extraInfo": {"py_callstack": line,
                                                                "timestamp": str(int(time.time()))}}}
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(data, handle)

    return record(main, error_handler=OneLineForUserErrors())(*args)


def refuse_unless_encoder_with(config, auto_mapping, auto_class: str, kind: str, field: str, name: str,
                               works: str) -> None:
    """UserInputError `ModelArguments: field '<field>': <works>; <name> ...` when `config` is an encoder-decoder, or
    has no class in `auto_mapping` (transformers' mapping behind `auto_class`, e.g. AutoModelForMaskedLM, whose
    models are `kind`, e.g. "masked-LM"): a command's check of the body before any work."""
    if getattr(config, "is_encoder_decoder", False):
        raise UserInputError(f"ModelArguments: field '{field}': {works}; {name} is an encoder-decoder "
                             f"({type(config).__name__}: is_encoder_decoder=True)")
    if type(config) not in auto_mapping:
        raise UserInputError(f"ModelArguments: field '{field}': {works}; {name} has no {kind} class ({auto_class} "
                             f"does not take {type(config).__name__})")


# ---- a failed Hub download, named by the argument that gave it ------------------------------------------------------
def hub_id_or_none(name: str | None) -> str | None:
    """`name` when it names a Hub repository rather than a local path (for a card's base_model/datasets)."""
    return name if name and not os.path.exists(name) and not os.path.isabs(name) else None


class HubDownloadError(UserInputError):
    """A model, tokenizer or dataset named by a Hub id could not be loaded; the message names the argument."""


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _download_failure(error: BaseException, name: str) -> str | None:
    """Why `name` could not be loaded, or None when the error is not about reaching the Hub."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError)

    endpoint = constants.ENDPOINT
    chain = list(_chain(error))
    kinds = {type(e).__name__ for e in chain}
    offline = (constants.HF_HUB_OFFLINE
               or os.environ.get("HF_DATASETS_OFFLINE", "0").upper() in ("1", "ON", "YES", "TRUE"))
    if offline and not os.path.exists(name) and isinstance(error, (OSError, ConnectionError)):
        # offline, the Hub cannot say whether the repository exists: what is known is that no copy is cached
        return (f"offline mode is on (HF_HUB_OFFLINE=1) and {name!r} is not in the local cache "
                f"({constants.HF_HUB_CACHE}): download it once online, or pass a local folder")
    if any(isinstance(e, (GatedRepoError,)) for e in chain):
        return f"{name!r} on {endpoint} is gated: accept its conditions on the Hub and pass a token"
    if any(isinstance(e, RepositoryNotFoundError) for e in chain) or "DatasetNotFoundError" in kinds:
        return (f"there is no repository {name!r} on {endpoint} (check the spelling; for a private repository "
                "pass a token or log in with `hf auth login`), and no local folder of that name")
    if any(isinstance(e, RevisionNotFoundError) for e in chain):
        return f"{name!r} on {endpoint} has no such revision (branch, tag or commit)"
    if any(isinstance(e, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for e in chain):
        return f"could not connect to {endpoint} to download {name!r}, and it is not in the local cache"
    if any(isinstance(e, EntryNotFoundError) for e in chain):  # after LocalEntryNotFoundError, its subclass
        missing = next(e for e in chain if isinstance(e, EntryNotFoundError))
        return f"{name!r} on {endpoint} lacks a file it needs ({missing})"
    return None


@contextmanager
def explain_hub_errors(owner: str, field_name: str, name: str | None):
    """Turn a failed Hub download of `name` (the value of `owner`'s field `field_name`, e.g. ModelArguments'
    model_name_or_path) into a `HubDownloadError` saying which argument and why: no such repository, missing
    file or revision, offline mode without a cached copy, server unreachable. Other errors pass unchanged."""
    try:
        yield
    except HubDownloadError:
        raise
    except Exception as error:
        reason = _download_failure(error, str(name))
        if reason is None:
            raise
        raise HubDownloadError(f"{owner}: field '{field_name}': cannot load {name!r}: {reason}.") from error
