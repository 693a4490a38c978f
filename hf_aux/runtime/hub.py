"""Hub integration shared by every hf_aux trainer and run script: keep the Hub token out of saved files, push an
output folder and say clearly what failed, download from the Hub with errors that name the argument at fault.

What a run script does with it (run_amos.py, run_tartan.py, run_finetune.py)::

    if training_args.push_to_hub:
        hub_model_id = create_hub_repo(training_args)   # before anything is loaded: a dead server fails here
    ... with explain_hub_errors("ModelArguments", "model_name_or_path", name): model = X.from_pretrained(name)
    trainer.create_model_card(...)                      # always: README.md and its figures in output_dir
    if training_args.push_to_hub:
        push_trainer_output(trainer)                    # the output folder, checked for the token, in one commit

Why the token needs care: `Trainer._save` and `Trainer._push_from_checkpoint` call `torch.save(self.args,
"training_args.bin")`, which pickles every attribute of the arguments, `hub_token` included, and
`Trainer.push_to_hub` then uploads that file (seen with transformers 5.23; `to_dict`/`to_json_string` and
`str(args)` do redact fields ending in `_token`, pickling does not). `HubTokenSafeArgsMixin` makes pickling drop
those fields, so neither `training_args.bin` nor the checkpoints hold the token, while the live arguments keep it
for pushing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path

import huggingface_hub
from huggingface_hub import constants
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.utils import filter_repo_objects

from .config import HubTokenSafeArgsMixin  # noqa: F401  (defined with the base config; importable here)
from ..errors import HubDownloadError, UserInputError, explain_hub_errors, hub_id_or_none  # noqa: F401

logger = logging.getLogger(__name__)

# ---- every Hub call: a connect and a read timeout, and a bounded retry ------------------------------------------
# huggingface_hub's HTTP client waits forever by default (timeout=None): a server that accepts the connection and
# never answers hangs the run. hf_aux gives the shared client these timeouts when it is imported (downloads,
# from_pretrained, create_repo, uploads), and retries its own Hub operations HUB_ATTEMPTS times on timeouts,
# network errors, 429 and 5xx answers (not on 4xx): a silent, failing or refusing server ends the run within about
# HUB_ATTEMPTS * (HUB_CONNECT_TIMEOUT + HUB_READ_TIMEOUT) + the back-off (3 * 70 s + 6 s, under 4 minutes, by
# default), with a message naming the endpoint and the operation. Environment variables override the defaults.
HUB_CONNECT_TIMEOUT = float(os.environ.get("HF_AUX_HUB_CONNECT_TIMEOUT", "10"))
HUB_READ_TIMEOUT = float(os.environ.get("HF_AUX_HUB_READ_TIMEOUT", "60"))
HUB_ATTEMPTS = max(1, int(os.environ.get("HF_AUX_HUB_ATTEMPTS", "3")))
HUB_BACKOFF = float(os.environ.get("HF_AUX_HUB_BACKOFF", "2"))  # seconds before the 2nd attempt, doubled after
# Before any work (the repository of --push_to_hub, which also checks the token) nothing is at stake yet: a silent
# server fails within this bound (2 attempts of at most bound/5 to connect and bound/4 to answer, bound/30 apart)
HUB_START_BOUND = float(os.environ.get("HF_AUX_HUB_START_TIMEOUT", "30"))


def install_hub_timeouts(connect: float | None = None, read: float | None = None) -> None:
    """Give huggingface_hub's shared HTTP client connect/read timeouts (default: HUB_CONNECT_TIMEOUT /
    HUB_READ_TIMEOUT). Called when hf_aux.runtime.hub is imported; call it again to change them."""
    import httpx2
    from huggingface_hub.utils import _http

    global _installed
    _installed = (connect, read)
    timeout = httpx2.Timeout(read if read is not None else HUB_READ_TIMEOUT,
                             connect=connect if connect is not None else HUB_CONNECT_TIMEOUT)

    def client_with_timeouts():
        client = _http.default_client_factory()  # huggingface_hub's own hooks and redirects
        client.timeout = timeout
        return client

    huggingface_hub.set_client_factory(client_with_timeouts)


_installed: tuple = (None, None)  # the timeouts install_hub_timeouts last gave the client (None: the default)
install_hub_timeouts()


@contextmanager
def hub_timeouts(connect: float, read: float):
    """Other connect/read timeouts for the Hub calls inside the block (then the ones installed before)."""
    before = _installed
    install_hub_timeouts(connect, read)
    try:
        yield
    finally:
        install_hub_timeouts(*before)


def _is_transient(error: BaseException) -> bool:
    import httpx2

    if isinstance(error, HfHubHTTPError) and error.response is not None:
        return error.response.status_code == 429 or error.response.status_code >= 500
    return isinstance(error, (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError))


def call_hub(operation: str, function, *args, attempts: int | None = None, backoff: float | None = None, **kwargs):
    """`function(*args, **kwargs)`, retried up to `attempts` (HUB_ATTEMPTS) times (back-off `backoff`,
    HUB_BACKOFF, doubled) when the Hub times out, drops the connection or answers 429/5xx. `operation` names it in
    the logs."""
    attempts = attempts or HUB_ATTEMPTS
    delay = HUB_BACKOFF if backoff is None else backoff
    for attempt in range(1, attempts + 1):
        try:
            return function(*args, **kwargs)
        except Exception as error:  # re-raised unless transient and attempts are left
            if attempt == attempts or not _is_transient(error):
                if attempt > 1:  # a note (Python 3.11's add_note, written out for 3.10)
                    error.__notes__ = [*getattr(error, "__notes__", []), f"hf_aux: {operation} failed {attempt} times"]
                raise
            logger.warning("%s failed (%s: %s); attempt %d of %d in %.0f s", operation, type(error).__name__,
                           str(error).splitlines()[0][:200] if str(error) else "", attempt + 1, attempts, delay)
            time.sleep(delay)
            delay *= 2

# Never pushed: intermediate checkpoints (Trainer's `hub_strategy` pushes those itself), TensorBoard event files
# (unless the run reported to TensorBoard: `push_trainer_output` then pushes runs/, as Trainer's own push does, for
# the Hub's training-metrics tab), and private or hidden files. Everything else in the output folder (what
# `save_pretrained` wrote, the training_args.bin, the *_results.json, the model card and its figures) goes up.
PUSH_IGNORE_PATTERNS = ("checkpoint-*", "runs/*", "_*", ".*", "*/.*")
TENSORBOARD_PATTERN = "runs/*"  # transformers' default TensorBoard folder under output_dir


def push_ignore_patterns(report_to) -> tuple[str, ...]:
    """PUSH_IGNORE_PATTERNS, less runs/ when `report_to` (TrainingArguments.report_to) includes tensorboard."""
    reports = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "tensorboard" in reports or "all" in reports:
        return tuple(pattern for pattern in PUSH_IGNORE_PATTERNS if pattern != TENSORBOARD_PATTERN)
    return PUSH_IGNORE_PATTERNS


class HubPushError(RuntimeError):
    """A push to the Hub failed; the message says why, and the local folder was left as it was."""


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


def _describe_failure(error: Exception, repo_id: str, endpoint: str, read_timeout: float | None = None) -> str:
    attempts = next((note for note in getattr(error, "__notes__", []) if note.startswith("hf_aux: ")), None)
    reason = _describe_reason(error, repo_id, endpoint, read_timeout or HUB_READ_TIMEOUT)
    return f"{reason} ({attempts[len('hf_aux: '):]})" if attempts else reason


def _describe_reason(error: Exception, repo_id: str, endpoint: str, read_timeout: float) -> str:
    if isinstance(error, OfflineModeIsEnabled):
        return "offline mode is on (HF_HUB_OFFLINE=1); unset it to push"
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        status = error.response.status_code
        if status == 401:
            return f"{endpoint} rejected the token (401 Unauthorized): pass a valid write token (hub_token) " \
                   "or log in with `hf auth login`"
        if status == 403:
            return f"the token may not write to {repo_id} (403 Forbidden)"
        if status == 404:
            return f"{repo_id} was not found on {endpoint} (404)"
        return f"{endpoint} answered {status}: {error}"
    name, text = type(error).__name__, str(error).rstrip(".")
    if "timeout" in name.lower() and "connect" not in name.lower():
        return f"{endpoint} did not answer within {read_timeout:g} s ({name})"
    if "connect" in name.lower() or "timeout" in name.lower():
        return f"could not connect to {endpoint} ({name}: {text})"
    if name in ("RemoteProtocolError", "ReadError", "WriteError", "NetworkError", "ProtocolError"):
        return f"lost the connection to {endpoint} ({name}: {text})"
    return f"{name}: {text}"


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    commit_message: str = "End of training",
    private: bool | None = None,
    revision: str | None = None,
    ignore_patterns=PUSH_IGNORE_PATTERNS,
    path_in_repo: str | None = None,
) -> huggingface_hub.CommitInfo:
    """Push a saved output folder to the Hub repository `repo_id` (created if needed) in one commit.

    Every file under `folder` but `ignore_patterns` (`PUSH_IGNORE_PATTERNS`) goes up. A LoRA adapter's
    adapter_config.json goes up naming its base model by Hub id when the local base records one
    (`hub_adapter_config`), so that `AutoPeftModel.from_pretrained(<repo>)` finds the base anywhere; the local file
    keeps the local path. First every file to push is searched for the token (the given one, else huggingface_hub's):
    one holding it stops the push with a `ValueError` naming it. A failed push (server unreachable, token rejected,
    repository missing, offline mode) raises `HubPushError` saying what failed; nothing under `folder` changes.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"Cannot push {folder} to the Hub: it is not a folder.")
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    paths = list(filter_repo_objects(files, ignore_patterns=list(ignore_patterns)))
    if not paths:
        raise ValueError(f"Cannot push {folder} to the Hub: it holds no file to push.")
    effective_token = token or huggingface_hub.get_token()
    if effective_token:
        leaking = find_token_in_files(folder, effective_token, paths)
        if leaking:
            raise ValueError(f"Refusing to push {folder} to {repo_id}: these files contain the Hub token: "
                             f"{', '.join(leaking)}. Remove the token from them (TrainingArguments subclasses should "
                             "inherit hf_aux.runtime.hub.HubTokenSafeArgsMixin).")
    endpoint = constants.ENDPOINT
    api = huggingface_hub.HfApi(endpoint=endpoint, library_name="hf_aux")
    operation = "create_repo"
    try:
        repo_url = call_hub(operation, api.create_repo, repo_id, token=token, private=private, exist_ok=True)
        operation = "upload_folder (commit)"
        prefix = f"{path_in_repo.strip('/')}/" if path_in_repo else ""
        # not upload_folder: no per-file content override; with hf_xet it splits commits and retries them itself
        hub_copies = {p: hub_adapter_config(folder / p) for p in paths if Path(p).name == "adapter_config.json"}
        operations = [huggingface_hub.CommitOperationAdd(prefix + path, hub_copies.get(path) or folder / path)
                      for path in paths]
        commit = call_hub(operation, api.create_commit, repo_id=repo_url.repo_id, operations=operations,
                          commit_message=commit_message, token=token, revision=revision)
    except Exception as error:  # re-raised below with what failed; the local folder is untouched
        message = (f"Pushing {folder} to {endpoint}/{repo_id} failed in {operation}: "
                   f"{_describe_failure(error, repo_id, endpoint)}. The local files in {folder} are intact; push "
                   f"them later with `hf upload {repo_id} {folder}`.")
        logger.error(message)
        raise HubPushError(message) from error
    logger.info("Pushed %d files from %s to %s (commit %s)", len(paths), folder, repo_url, commit.oid)
    return commit


def hub_adapter_config(path: str | os.PathLike) -> bytes | None:
    """adapter_config.json at `path` with its base model named by Hub id (what the model card's base_model says),
    or None when it already names one or the local base records none."""
    from ..cards.model_card import card_base_model

    config = json.loads(Path(path).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base or not Path(base).is_absolute() and not Path(base).exists():
        return None  # a Hub id already (or nothing to say)
    hub_id = card_base_model(base)
    if hub_id is None:
        logger.warning("%s names the local base model %s, which records no Hub id: the pushed adapter loads only "
                       "where that folder exists (pass base_model= when loading it elsewhere)", path, base)
        return None
    return (json.dumps({**config, "base_model_name_or_path": hub_id}, indent=2, sort_keys=True) + "\n").encode()


# ---- before training: the repository ---------------------------------------------------------------------------
def hub_repo_id(args) -> str:
    """The repository a run pushes to: `args.hub_model_id`, else the output folder's name (as Trainer does)."""
    return args.hub_model_id or Path(args.output_dir).absolute().name


def create_hub_repo(args) -> str:
    """Create (or find) the repository of `--push_to_hub` before anything is loaded or trained; returns its id.

    Trainer creates it in `__init__` (`init_hf_repo`), where a server that is down or a rejected token ends the
    run with a raw HTTP error after the data and model were loaded. Called first, this fails in seconds with a
    `HubPushError` saying what failed; nothing in `args.output_dir` (earlier checkpoints included) is touched.
    """
    repo_id = hub_repo_id(args)
    if not args.should_save:  # Trainer creates it on the main process only
        return repo_id
    endpoint = constants.ENDPOINT
    connect, read = HUB_START_BOUND / 5, HUB_START_BOUND / 4
    try:
        with hub_timeouts(connect, read):  # nothing is at stake yet: fail within HUB_START_BOUND seconds
            url = call_hub("create_repo", huggingface_hub.HfApi(endpoint=endpoint, library_name="hf_aux").create_repo,
                           repo_id, token=args.hub_token, private=args.hub_private_repo, exist_ok=True, attempts=2,
                           backoff=HUB_START_BOUND / 30)
    except Exception as error:  # re-raised below with what failed
        message = (f"push_to_hub: could not create or reach the repository {endpoint}/{repo_id} (create_repo): "
                   f"{_describe_failure(error, repo_id, endpoint, read)}. Nothing was trained or changed; the files in "
                   f"{args.output_dir} are intact. Fix the Hub access, or run without push_to_hub and push later "
                   f"with `hf upload {repo_id} {args.output_dir}`.")
        logger.error(message)
        raise HubPushError(message) from error
    return url.repo_id


# ---- after training: the output folder -------------------------------------------------------------------------
def push_trainer_output(trainer, commit_message: str = "End of training") -> huggingface_hub.CommitInfo | None:
    """Push `trainer.args.output_dir` (`push_folder_to_hub`: model, tokenizer, card, figures, results, TensorBoard
    logs when reported to; no checkpoint-* folders) to `hub_model_id` with the arguments' token, privacy and
    revision. Checkpoint pushes made during training (`hub_strategy`) that failed are logged first. Main process
    only; returns the commit."""
    args = trainer.args
    if not trainer.is_world_process_zero():
        return None
    progress = getattr(trainer, "push_in_progress", None)
    if progress is not None:
        progress.wait_until_done()
        for job in progress.jobs:
            if job.done() and not job.cancelled() and job.exception() is not None:
                logger.warning("A checkpoint push during training failed (%s: %s); the final push follows.",
                               type(job.exception()).__name__, job.exception())
    repo_id = trainer.hub_model_id or hub_repo_id(args)
    commit = push_folder_to_hub(args.output_dir, repo_id, token=args.hub_token, commit_message=commit_message,
                                private=args.hub_private_repo, revision=args.hub_revision,
                                ignore_patterns=push_ignore_patterns(args.report_to))
    record_push(args.output_dir, hub_repo_id(args), args.hub_revision, getattr(commit, "oid", None))
    return commit


PUSH_RECORD_NAME = ".hf_aux_push.json"  # the last completed push of an output folder (hidden: never pushed itself)


def record_push(output_dir: str | os.PathLike, repo_id: str, revision: str | None, commit: str | None) -> None:
    """Remember that the output folder, as it is now, was pushed to `repo_id` (read by the run guard's
    `finishing_steps`: a finished run already pushed there has no push left to do)."""
    Path(output_dir, PUSH_RECORD_NAME).write_text(json.dumps({"repo_id": repo_id, "revision": revision,
                                                              "commit": commit}, indent=1))


def last_push(output_dir: str | os.PathLike) -> dict | None:
    """The record `record_push` left in `output_dir`, or None."""
    try:
        return json.loads(Path(output_dir, PUSH_RECORD_NAME).read_text())
    except (OSError, ValueError):
        return None


def forget_push(output_dir: str | os.PathLike) -> None:
    """A new training run in `output_dir`: what it will hold was never pushed."""
    Path(output_dir, PUSH_RECORD_NAME).unlink(missing_ok=True)


# ---- during training: exactly one push path ----------------------------------------------------------------------
# With `defer_hub_pushes` (hf_aux.runtime.trainer.AuxTrainer; the hf-aux commands pass it), Trainer's own upload in
# `save_model` waits for the end of the run (`push_trainer_output`, after evaluation, metrics and the card are
# written), and its checkpoint uploads (`hub_strategy`) go through `push_checkpoint`.
def push_checkpoint(trainer, checkpoint_folder: str) -> None:
    """Push a checkpoint per `hub_strategy` ('checkpoint': to last-checkpoint/, 'all_checkpoints': to checkpoint-N/,
    'every_save': its files at the top), token-checked like the final push. A failure is logged and stops the
    checkpoint pushes of this run (each one would wait for the same dead server); training goes on and the final
    push tries again."""
    args = trainer.args
    strategy = getattr(args.hub_strategy, "value", args.hub_strategy)
    if not trainer.is_world_process_zero() or strategy == "end" or getattr(trainer, "_hf_aux_push_failed", False):
        return
    path_in_repo = {"checkpoint": "last-checkpoint", "all_checkpoints": Path(checkpoint_folder).name}.get(strategy)
    try:
        push_folder_to_hub(checkpoint_folder, trainer.hub_model_id or hub_repo_id(args), token=args.hub_token,
                           commit_message=f"Training in progress, step {trainer.state.global_step}",
                           private=args.hub_private_repo, revision=args.hub_revision, ignore_patterns=(".*", "*/.*"),
                           path_in_repo=path_in_repo)
    except HubPushError as error:
        trainer._hf_aux_push_failed = True
        logger.warning("Checkpoint push failed; no more checkpoint pushes in this run (the final push tries again). "
                       "%s", error)


# ---- downloads (a failed one is named by hf_aux.errors.explain_hub_errors) ------------------------------------------
def resolve_checkpoint(name_or_path: str, *, owner: str, field_name: str, revision: str | None = None,
                       cache_dir: str | None = None, token: str | None = None) -> str:
    """A local folder for a checkpoint given as a folder or a Hub id (`snapshot_download`, honouring
    HF_HUB_OFFLINE and the cache), for loaders that read files from a folder (AmosModel, TartanModel). Weights
    of other frameworks (TensorFlow, Flax, ONNX, ...) are not downloaded."""
    if os.path.isdir(name_or_path):
        return name_or_path
    with explain_hub_errors(owner, field_name, name_or_path):
        return huggingface_hub.snapshot_download(
            name_or_path, revision=revision, cache_dir=cache_dir, token=token,
            ignore_patterns=["*.h5", "*.msgpack", "*.ot", "*.onnx", "onnx/*", "coreml/*", "openvino/*", "*.tflite"])
