"""The `hf-aux` console command (setup.cfg's entry point; `python -m hf_aux` is the same), at the top of the
package: it dispatches to every command, which import the shared command-line layer (hf_aux/cli/) below it.

    hf-aux <method> [--config file.yaml] [flags]       a registered method's command (hf-aux --help lists them)
    hf-aux <method> --help          data flags and --output_dir, the method's, the model's and the main Trainer flags
    hf-aux <method> --help-all      every flag, with its whole help text
    hf-aux tasks [name]             the task registry (hf_aux/cli/tasks.py)
    hf-aux export --model M --task T --output_dir D
                                    one task of a MUPPET checkpoint as a transformers classifier (hf_aux/cli/export.py)
    hf-aux --help                   the methods

The commands are the registered methods' (hf_aux.registry): each method's `hf_aux/<method>/command.py` parses
the flags and runs; `run_scripts/run_<method>.py` calls the same `main`. A mistake in what the user gave (a
`hf_aux.errors.UserInputError`) ends the command with one line, `hf-aux <command>: error: ...`, and exit status 2
(`hf_aux.runtime.run_guard.run_command`); HF_AUX_TRACEBACK=1 adds its traceback.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import sys
from collections.abc import Sequence

from .registry import by_command, methods

# commands that are not methods: name -> (module with `main(argv)`, the line of `hf-aux --help`)
OTHER_COMMANDS = {
    "compare": ("hf_aux.compare.command", "did one checkpoint fine-tune better than another on a task? (seeds, "
                "intervals, q values)"),
    "tasks": ("hf_aux.cli.tasks", "list the task registry (glue/rte, ...), show a task, pre-download a mixture"),
    "export": ("hf_aux.cli.export", "one task of a MUPPET checkpoint as a classifier pipeline('text-classification') "
                                    "loads"),
}


def usage() -> str:
    lines = ["usage: hf-aux <command> [--config file.yaml] [flags]", "",
             "Train language encoders with auxiliary objectives (Hugging Face Trainer). Without a data source each",
             "command runs its demo, whose defaults any --config file or flag overrides (e.g. --max_steps 2).", "",
             "commands:"]
    lines += [f"  {record.command:<10} {record.summary}" for record in methods()]
    lines += [f"  {command:<10} {summary}" for command, (_, summary) in OTHER_COMMANDS.items()]
    lines += ["", "hf-aux <command> --help shows a command's main flags; --help-all shows every flag.",
              "A mistake in the flags, files or data is one line, 'hf-aux <command>: error: ...', with exit status 2",
              "(HF_AUX_TRACEBACK=1 adds the traceback)."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        dispatch(argv)
    except BrokenPipeError:  # `hf-aux tasks | head`: the reader stopped, as `seq 1000 | head` does to seq
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        raise SystemExit(141) from None  # 128 + SIGPIPE, what a shell reports for a Unix tool in that place


def dispatch(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        raise SystemExit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name in OTHER_COMMANDS:
        module = importlib.import_module(OTHER_COMMANDS[name][0])
        if not hasattr(module, "parse_args"):  # tasks, export: a parser and errors of their own
            module.main(rest)
            return
        module_name = OTHER_COMMANDS[name][0]  # compare: finetune's flags on the shared parser, as a method's
    else:
        record = by_command(name)
        if record is None:
            commands = [record.command for record in methods()] + list(OTHER_COMMANDS)
            close = difflib.get_close_matches(name, commands, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            print(f"hf-aux: error: unknown command {name!r}{hint} (the commands: {', '.join(commands)})",
                  file=sys.stderr)
            raise SystemExit(2)
        module_name = record.command_module
    wants = [flag for flag in ("--help-all", "-h", "--help") if flag in rest]
    if wants:  # before any other flag is checked: the help of the method alone
        with _peft_unseen_by_transformers():
            parser = importlib.import_module(module_name).make_parser()
        parser.prog = f"hf-aux {name}"
        print(parser.format_full_help() if wants[0] == "--help-all" else parser.format_help(), end="")
        raise SystemExit(0)
    from .runtime.run_guard import run_command

    module = importlib.import_module(module_name)

    run_command(lambda: module.main(*module.parse_args(rest)), prog=f"hf-aux {name}")


@contextlib.contextmanager
def _peft_unseen_by_transformers():
    """For --help only, whose process ends after printing: transformers.trainer_utils (imported with
    TrainingArguments) imports peft whenever peft is installed, to recognise peft models during training, and
    that is most of the help's time (docs/command_line.md); listing the flags needs none of it. Inside this
    block, a first import of trainer_utils sees no peft. Nothing changes when trainer_utils is already imported."""
    import transformers.utils

    if "transformers.trainer_utils" in sys.modules:
        yield
        return
    original = transformers.utils.is_peft_available
    transformers.utils.is_peft_available = lambda: False
    try:
        yield
    finally:
        transformers.utils.is_peft_available = original


if __name__ == "__main__":
    main()
