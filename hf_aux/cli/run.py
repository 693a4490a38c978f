"""The steps every hf_aux command takes around its method, written once: `start_run` (logging, the output folder's
guard with the ONE resume rule of `hf_aux.runtime.run_guard.guard_output_dir`: `--resume_from_checkpoint` when
given, else the newest complete `checkpoint-*` in `--output_dir`, else afresh; under a launcher one process decides
and every rank follows), `train_and_save`, `record_metrics` and `finish_run` (the model card; the command then
pushes, token-checked: `hf_aux.runtime.hub.push_trainer_output`).
"""

from __future__ import annotations

import logging
import sys

from ..errors import UserInputError

logger = logging.getLogger("hf_aux")


def setup_logging(training_args) -> None:
    """Log lines on stdout with time and source; hf_aux's, transformers' and datasets' level from --log_level
    (per process: --log_level_replica on the other DDP ranks)."""
    import datasets
    import transformers

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)])
    level = training_args.get_process_log_level()
    logger.setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)


def start_run(training_args, *arguments):
    """Set up logging, guard and lock the output folder (see the module docstring), create the Hub repository
    when pushing (a server that is down or a rejected token stops the run here, not after training) and seed.
    `arguments` are every other parsed dataclass (recorded to recognise the same run). Returns the
    `GuardedRun`; when `run.nothing_to_do`, the command returns `run.results` without doing anything (a finished
    run with `run.finishing` steps goes on: `run.attach(trainer)` loads it, and `train_and_save` trains nothing)."""
    from transformers import set_seed

    from ..runtime.hub import create_hub_repo
    from ..runtime.run_guard import guard_output_dir

    setup_logging(training_args)
    run = guard_output_dir(training_args, *arguments, prepare=create_hub_repo if training_args.push_to_hub else None)
    if not run.nothing_to_do:
        set_seed(training_args.seed)
    return run


def require_max_steps(training_args) -> None:
    """--streaming: the train data is a stream, which has no length, so the run's length is --max_steps."""
    if training_args.max_steps is None or training_args.max_steps <= 0:
        raise UserInputError(f"{type(training_args).__name__}: field 'max_steps': --streaming needs --max_steps (a "
                             "stream has no length, so epochs cannot be counted)")


def train_and_save(trainer, run, **extra_metrics) -> dict:
    """Train (resuming from `run.checkpoint`), save the model and the trainer state, and log and save the train
    metrics with `extra_metrics` (e.g. train_samples) added. Returns the metrics. A finished run that is being
    finished (`run.finishing`) was loaded from its folder by `run.attach`: nothing is trained or written, and its
    recorded results are returned."""
    if run.finished:
        return dict(run.results)
    train_result = trainer.train(resume_from_checkpoint=run.checkpoint)
    trainer.save_model()
    metrics = {**train_result.metrics, **extra_metrics}
    record_metrics(trainer, "train", metrics)
    trainer.save_state()
    return metrics


def record_metrics(trainer, split: str, metrics: dict) -> dict:
    """Log `metrics` and write them to <output_dir>/<split>_results.json (and all_results.json)."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)
    return metrics


def finish_run(trainer, write_card=None, **card_kwargs) -> bool:
    """The end of every run that saved a model (a card describes a saved model, so a run that only evaluated writes
    none and pushes nothing): the model card (README.md and its figures) in the output folder, by
    `trainer.create_model_card(**card_kwargs)` or by `write_card()` for a plain Trainer. Returns whether there is a
    model to push: the command then pushes it (`hf_aux.runtime.hub.push_trainer_output`, token-checked)."""
    from ..runtime.run_guard import has_final_model

    output_dir = trainer.args.output_dir
    if not has_final_model(output_dir):
        logger.info("No model saved in %s (nothing was trained): no model card, nothing pushed", output_dir)
        return False
    if write_card is not None:
        write_card()
    else:
        trainer.create_model_card(**card_kwargs)
    return True
