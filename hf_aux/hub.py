"""Hub integration shared by every hf_aux trainer and run script: keep the Hub token out of saved files, push an
output folder and say clearly what failed.

Why the token needs care: `Trainer._save` and `Trainer._push_from_checkpoint` call `torch.save(self.args,
"training_args.bin")`, which pickles every attribute of the arguments, `hub_token` included, and
`Trainer.push_to_hub` then uploads that file (seen with transformers 5.23; `to_dict`/`to_json_string` and
`str(args)` do redact fields ending in `_token`, pickling does not). `HubTokenSafeArgsMixin` makes pickling drop
those fields, so neither `training_args.bin` nor the checkpoints hold the token, while the live arguments keep it
for pushing.
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import os
from pathlib import Path

import huggingface_hub
from huggingface_hub import constants
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

logger = logging.getLogger(__name__)

# Never pushed: intermediate checkpoints (Trainer's `hub_strategy` pushes those itself), TensorBoard event files,
# and private or hidden files. Everything else in the output folder (what `save_pretrained` wrote, the
# training_args.bin, the *_results.json, the model card and its figures) goes up.
PUSH_IGNORE_PATTERNS = ("checkpoint-*", "runs/*", "_*", ".*", "*/.*")


def _is_token_field(name: str) -> bool:
    return name.endswith("_token")


class HubTokenSafeArgsMixin:
    """Mixin for `TrainingArguments` subclasses: fields ending in `_token` (`hub_token`) are never pickled.

    Put it first among the bases::

        @dataclass
        class MuppetConfig(HubTokenSafeArgsMixin, TrainingArguments):
            ...

    `torch.save(args)` (Trainer's `training_args.bin`, in the final folder and in every checkpoint) then stores
    `hub_token=None`; the live object keeps its token, and so do `copy.copy`/`copy.deepcopy` of it (Trainer's
    hyper-parameter search copies the arguments and pushes with the copy). An unpickled copy has no token: it pushes
    with the stored login (`hf auth login`) or `HF_TOKEN`, like arguments given no `--hub_token`.
    """

    def __getstate__(self) -> dict:
        return {name: (None if _is_token_field(name) else value) for name, value in self.__dict__.items()}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __copy__(self):
        clone = self.__class__.__new__(self.__class__)
        clone.__dict__.update(self.__dict__)
        return clone

    def __deepcopy__(self, memo: dict):
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone


class HubPushError(RuntimeError):
    """A push to the Hub failed; the message says why, and the local folder was left as it was."""


def _files_to_push(folder: Path, ignore_patterns) -> list[str]:
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return [p for p in paths if not any(fnmatch.fnmatch(p, pattern) for pattern in ignore_patterns)]


def find_token_in_files(folder: str | os.PathLike, token: str, paths=None) -> list[str]:
    """The files under `folder` (or the given relative `paths`) whose bytes contain `token`."""
    folder = Path(folder)
    paths = paths if paths is not None else [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    needle = token.encode()
    found = []
    for path in paths:
        with open(folder / path, "rb") as handle:
            tail = b""
            while chunk := handle.read(1 << 22):  # 4 MiB at a time, overlapping by len(token) - 1 bytes
                if needle in tail + chunk:
                    found.append(path)
                    break
                tail = chunk[-(len(needle) - 1):] if len(needle) > 1 else b""
    return sorted(found)


def _describe_failure(error: Exception, repo_id: str, endpoint: str) -> str:
    if isinstance(error, OfflineModeIsEnabled):
        return "offline mode is on (HF_HUB_OFFLINE=1); unset it to push"
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        status = error.response.status_code
        if status == 401:
            return f"{endpoint} rejected the token (401 Unauthorized): pass a valid write token with --hub_token " \
                   "or log in with `hf auth login`"
        if status == 403:
            return f"the token may not write to {repo_id} (403 Forbidden)"
        if status == 404:
            return f"{repo_id} was not found on {endpoint} (404)"
        return f"{endpoint} answered {status}: {error}"
    if "connect" in type(error).__name__.lower() or "timeout" in type(error).__name__.lower():
        return f"could not connect to {endpoint} ({type(error).__name__}: {error})"
    return f"{type(error).__name__}: {error}"


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    commit_message: str = "End of training",
    private: bool | None = None,
    revision: str | None = None,
    ignore_patterns=PUSH_IGNORE_PATTERNS,
) -> huggingface_hub.CommitInfo:
    """Push a saved output folder to the Hub repository `repo_id` (created if needed) in one commit.

    The files pushed are those under `folder` except `ignore_patterns` (see `PUSH_IGNORE_PATTERNS`): what
    `save_pretrained`/`Trainer.save_model` wrote, the model card and its figures. Before anything is sent, every
    file to push is searched for the token (the given one, else the one huggingface_hub would use); a file holding
    it stops the push with a `ValueError` naming the file. A failed push (server unreachable, token rejected,
    repository missing, offline mode) raises `HubPushError` saying what failed; nothing under `folder` is changed
    either way.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"Cannot push {folder} to the Hub: it is not a folder.")
    paths = _files_to_push(folder, ignore_patterns)
    if not paths:
        raise ValueError(f"Cannot push {folder} to the Hub: it holds no file to push.")
    effective_token = token or huggingface_hub.get_token()
    if effective_token:
        leaking = find_token_in_files(folder, effective_token, paths)
        if leaking:
            raise ValueError(f"Refusing to push {folder} to {repo_id}: these files contain the Hub token: "
                             f"{', '.join(leaking)}. Remove the token from them (TrainingArguments subclasses should "
                             "inherit hf_aux.hub.HubTokenSafeArgsMixin).")
    endpoint = constants.ENDPOINT
    api = huggingface_hub.HfApi(endpoint=endpoint, library_name="hf_aux")
    try:
        repo_url = api.create_repo(repo_id, token=token, private=private, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_url.repo_id, folder_path=folder, allow_patterns=paths,
                                   commit_message=commit_message, token=token, revision=revision)
    except Exception as error:  # re-raised below with what failed; the local folder is untouched
        message = (f"Pushing {folder} to {endpoint}/{repo_id} failed: {_describe_failure(error, repo_id, endpoint)}. "
                   f"The local files in {folder} are intact; push them later with `hf upload {repo_id} {folder}`.")
        logger.error(message)
        raise HubPushError(message) from error
    logger.info("Pushed %d files from %s to %s (commit %s)", len(paths), folder, repo_url, commit.oid)
    return commit
