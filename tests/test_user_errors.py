"""A user's mistake is one line, not a traceback, and `--help` fits a screen (issue #52, items 3 and 4).

- The five common mistakes (a misspelt flag, a task that does not exist, a missing file, a column that is not in
  the data, an output folder another run is using) end the real entry points (`python -m hf_aux`, as
  the installed `hf-aux`, and a run script) before any work with exactly one stderr line `<command>: error: ...`
  and exit status 2; HF_AUX_TRACEBACK=1 adds the traceback; any other exception keeps its traceback.
- Flags are taken only as written in full (no prefixes), and an unknown flag gets the closest known ones.
- Under torchrun one rank prints the line, and the launcher's summary names it as the root cause.
- A misspelt --lora_target_modules is refused with the body's layer names before any data is tokenised.
- `--help` is at most 150 lines at 80 columns for every command: the data flags and --output_dir first, then the
  method's own flags, the model's, and the common Trainer flags last, then how many more `--help-all` shows;
  `--help-all` lists every flag, in the same order.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import free_port, hold_lock, write_command_data

from hf_aux.__main__ import main as hf_aux_main
from hf_aux.errors import UserInputError
from hf_aux.registry import methods
from hf_aux.runtime.run_guard import run_command

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
ENV.pop("HF_AUX_TRACEBACK", None)
# datasets' progress bars ("Generating train split: 24 examples ...") while the files are first read: what the data
# loading prints, not the error
PROGRESS = re.compile(r"(it|examples)/s\]")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("user_errors"), "hf-aux-tests/tiny-bert")


def finetune_args(data, out, *extra) -> list[str]:
    return ["--model_name_or_path", str(data / "tiny_bert"), "--train_file", str(data / "train.jsonl"),
            "--validation_file", str(data / "validation.jsonl"), "--per_device_train_batch_size", "4",
            "--max_steps", "2", "--report_to", "none", "--output_dir", str(out), *extra]


def run(argv, env=ENV, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip() and not PROGRESS.search(line)]


MISTAKES = {  # name -> (extra arguments, a path to replace the data files, what the one line says)
    "flag typo": (["--max_stesp", "3"], None, "unrecognized argument --max_stesp; did you mean --max_steps?"),
    "wrong task": (["--demo_task", "rotten_tomatos"], "no files",
                   "unknown demo task 'rotten_tomatos'; known demo tasks are ['imdb', 'rotten_tomatoes', "),
    "missing file": ([], "missing", "field 'train_file' (train): file '{missing}' does not exist"),
    "wrong column": (["--label_column", "lable"], None,
                     "field 'label_column': no 'lable' column in the data; did you mean 'label'?"),
    "output folder in use": ([], None, "is in use by process {holder}"),
}


@pytest.mark.parametrize("entry", ["hf-aux", "run script"])
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_mistake_is_one_line_and_exit_status_2(mistake, entry, data, tmp_path):
    if entry == "run script" and mistake not in ("flag typo", "missing file", "output folder in use"):
        pytest.skip("the run scripts call the same main: three mistakes show it")
    extra, files, expected = MISTAKES[mistake]
    out = tmp_path / "out"
    args = finetune_args(data, out, *extra)
    if files == "missing":
        args[args.index("--train_file") + 1] = str(tmp_path / "missing.jsonl")
    if files == "no files":
        for flag in ("--train_file", "--validation_file"):
            del args[args.index(flag):args.index(flag) + 2]
    holder = hold_lock(out) if mistake == "output folder in use" else None
    try:
        if entry == "hf-aux":
            done, prog = run(["-m", "hf_aux", "finetune", *args]), "hf-aux finetune"
        else:
            done, prog = run([str(ROOT / "run_scripts" / "run_finetune.py"), *args]), "run_finetune.py"
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    lines = error_lines(done)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"{prog}: error: "), lines
    assert expected.format(missing=tmp_path / "missing.jsonl", holder=holder and holder.pid) in lines[0]
    if mistake == "wrong task":
        assert lines[0].endswith("; did you mean 'rotten_tomatoes'?")
    assert not (out / "trainer_state.json").exists() and not list(out.glob("checkpoint-*"))  # no work was done


def test_hf_aux_traceback_shows_the_traceback_of_a_mistake(data, tmp_path):
    done = run(["-m", "hf_aux", "finetune", *finetune_args(data, tmp_path / "out", "--max_stesp", "3")],
               env={**ENV, "HF_AUX_TRACEBACK": "1"})
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr and "hf_aux.errors.UserInputError" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("hf-aux finetune: error: unrecognized argument")


def test_a_mistake_in_process_is_one_line_on_stderr(data, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_AUX_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as ended:
        hf_aux_main(["finetune", *finetune_args(data, tmp_path / "out", "--learning_rat", "1e-4")])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err == ("hf-aux finetune: error: unrecognized argument --learning_rat; did you mean --learning_rate?\n")


def test_an_internal_error_keeps_its_traceback(data, tmp_path, monkeypatch):
    """Not the user's mistake: the exception goes on (Python prints its traceback), whatever its type."""
    import hf_aux.finetune.command as command

    def broken(*args):
        raise RuntimeError("an internal fault")

    monkeypatch.setattr(command, "main", broken)
    with pytest.raises(RuntimeError, match="an internal fault"):
        hf_aux_main(["finetune", *finetune_args(data, tmp_path / "out")])
    with pytest.raises(ValueError, match="a library's own ValueError"):  # a ValueError that names no user input
        run_command(lambda: (_ for _ in ()).throw(ValueError("a library's own ValueError")), prog="x")
    with pytest.raises(SystemExit):
        run_command(lambda: (_ for _ in ()).throw(UserInputError("yours")), prog="x")


@pytest.mark.parametrize("method", [record.command for record in methods()])
def test_flags_are_taken_only_as_written_in_full(method):
    """argparse would take --max_step for --max_steps and --learning_rat for --learning_rate."""
    import importlib

    from hf_aux.registry import by_command

    module = importlib.import_module(by_command(method).command_module)
    for typed, meant in (("--max_step", "--max_steps"), ("--learning_rat", "--learning_rate")):
        with pytest.raises(UserInputError, match=f"unrecognized argument {typed}; did you mean {meant}\\?$"):
            module.parse_args(["--output_dir", "x", typed, "3"])
    with pytest.raises(UserInputError, match=r"^argument --max_steps: invalid int value: 'three'$"):
        module.parse_args(["--output_dir", "x", "--max_steps", "three"])
    args = module.parse_args(["--output_dir", "x", "--max_steps", "3", "--learning_rate=1e-4"])
    training_args = next(item for item in args if hasattr(item, "max_steps"))
    assert training_args.max_steps == 3 and training_args.learning_rate == 1e-4


def test_an_unknown_command_is_one_line_with_the_closest(capsys):
    with pytest.raises(SystemExit) as ended:
        hf_aux_main(["mupet", "--max_steps", "2"])
    assert ended.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("hf-aux: error: unknown command 'mupet'; did you mean muppet?")


def test_a_misspelt_lora_target_is_refused_before_tokenising(data, tmp_path, capsys, monkeypatch):
    import hf_aux.tasks.data

    def tokenised(*args, **kwargs):
        raise AssertionError("tokenised before the LoRA targets were checked")

    monkeypatch.setattr(hf_aux.tasks.data, "tokenize_task", tokenised)
    with pytest.raises(SystemExit) as ended:
        hf_aux_main(["muppet", "--model_name_or_path", str(data / "tiny_bert"), "--mixture_file",
                     str(data / "mixture.json"), "--output_dir", str(tmp_path / "out"), "--max_steps", "2",
                     "--report_to", "none", "--use_lora", "--lora_target_modules", "query", "valeu"])
    assert ended.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not PROGRESS.search(line)]
    assert len(err) == 1 and err[0].startswith("hf-aux muppet: error: LoraArguments: field 'lora_target_modules': "
                                               "['valeu'] name no module of the model; pass --lora_target_modules")
    assert "'value'" in err[0] and "'query'" in err[0]  # the body's linear layers


# ---- torchrun ------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is needed")
def test_under_torchrun_one_rank_prints_the_line_and_the_summary_names_it(data, tmp_path):
    missing = tmp_path / "missing.jsonl"
    args = finetune_args(data, tmp_path / "out")
    args[args.index("--train_file") + 1] = str(missing)
    done = subprocess.run([str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                           "--master_port", str(free_port()), str(ROOT / "run_scripts" / "run_finetune.py"), *args],
                          env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    line = f"run_finetune.py: error: DataTrainingArguments: field 'train_file' (train): file '{missing}' does not exist"
    assert done.returncode != 0
    assert [text for text in log.splitlines() if text.startswith("run_finetune.py: error:")] == [line]  # one rank
    assert "Root Cause" in log and f"traceback : {line}" in log, log[-4000:]  # the launcher's summary
    # no rank's traceback: no frame of hf_aux or a run script (torchrun prints its own, of itself; CI's .venv lies
    # inside the checkout, so its frames are under ROOT too)
    assert not any(f'File "{ROOT / part}' in log for part in ("hf_aux", "run_scripts", "tests")), log[-4000:]


# ---- help ----------------------------------------------------------------------------------------------------------
def help_pages(command: str, monkeypatch) -> tuple[str, str]:
    import importlib

    from hf_aux.registry import by_command

    monkeypatch.setenv("COLUMNS", "80")
    parser = importlib.import_module(by_command(command).command_module).make_parser()
    parser.prog = f"hf-aux {command}"
    return parser.format_help(), parser.format_full_help()


@pytest.mark.parametrize("command", [record.command for record in methods()])
def test_help_fits_a_screen_with_the_data_and_output_flags_first(command, monkeypatch):
    """In --help and --help-all: every data source flag and --output_dir before the first flag of the model, of the
    method's own and of TrainingArguments alone; the Trainer's flags last."""
    import dataclasses
    import importlib

    from transformers import TrainingArguments

    from hf_aux.registry import by_command
    from hf_aux.runtime.config import AuxConfig

    short, full = help_pages(command, monkeypatch)
    lines = short.splitlines()
    assert len(lines) <= 150, (command, len(lines))
    assert re.fullmatch(rf"\d+ more Trainer flags: hf-aux {command} --help-all", lines[-1]), lines[-1]
    titles = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert titles[0] == "DataTrainingArguments: the data, and where the run writes:"
    assert titles[-1].startswith("training: the most used of")
    assert [title.split(":")[0] for title in titles[1:-1]] == [
        title for title in ("MuppetConfig", "AmosConfig", "TartanConfig", "MetaLMConfig", "ModelArguments",
                            "LoraArguments") if f"\n{title}: " in short]
    module = importlib.import_module(by_command(command).command_module)
    kinds = {kind.__name__: kind for kind in module.make_parser().dataclass_types}
    flags_of = lambda kind: {f"--{item.name}" for item in dataclasses.fields(kind)}  # noqa: E731
    trainer, run = flags_of(TrainingArguments) - {"--output_dir"}, flags_of(AuxConfig)
    model = flags_of(kinds["ModelArguments"])
    own = set().union(*(flags_of(kind) for kind in kinds.values() if issubclass(kind, TrainingArguments))) - run
    first_flags = [*module.DATA_SOURCE_FLAGS, "--output_dir"]
    for page in (short, full):
        flags = [line.split()[0] for line in page.splitlines() if line.startswith("  --")]
        assert flags[0] in flags_of(kinds["DataTrainingArguments"]), (command, flags[0])
        later = min(index for index, flag in enumerate(flags) if flag in model | own | trainer)
        assert max(flags.index(flag) for flag in first_flags) < later, (command, flags[:later + 1])
        first_trainer = min(index for index, flag in enumerate(flags) if flag in trainer)
        assert all(flag in run or flag.replace("--no_", "--") in run for flag in flags[first_trainer:])  # Trainer last
    flags = [line.split()[0] for line in lines if line.startswith("  --")]
    assert {"--output_dir", "--max_steps", "--learning_rate", "--per_device_train_batch_size", "--seed", "--bf16",
            "--push_to_hub", "--report_to", "--save_steps", "--eval_strategy"} <= set(flags)
    assert "--adam_beta1" not in short and "--adam_beta1" in full and "--max-steps" not in short


def test_the_help_shown_in_docs_command_line_is_the_real_one(monkeypatch):
    """docs/command_line.md's excerpt of `hf-aux muppet --help`: its lines, in order, in the real help."""
    text = (ROOT / "docs" / "command_line.md").read_text(encoding="utf-8")
    excerpt = text.split("```text\n$ hf-aux muppet --help\n", 1)[1].split("```", 1)[0].splitlines()
    short, _ = help_pages("muppet", monkeypatch)
    lines, at = short.splitlines(), 0
    for line in (line for line in excerpt if line.strip() != "..."):
        assert line in lines[at:], line
        at = lines.index(line, at) + 1


def test_a_run_scripts_help_is_the_same_screen(tmp_path):
    done = run([str(ROOT / "run_scripts" / "run_muppet.py"), "--help"])
    assert done.returncode == 0 and done.stdout.startswith("usage: run_muppet.py [--config FILE.yaml]")
    assert len(done.stdout.splitlines()) <= 150
    assert done.stdout.rstrip().endswith("more Trainer flags: run_muppet.py --help-all")
    done = run([str(ROOT / "run_scripts" / "run_muppet.py"), "--help-all"])
    assert done.returncode == 0 and "--adam_beta1" in done.stdout and "--batching" in done.stdout
