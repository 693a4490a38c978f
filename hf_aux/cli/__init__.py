"""hf_aux's command-line layer, behind the installed `hf-aux` command (hf_aux/__main__.py), each method's
`command.py` and the `run_scripts/run_*.py` files: `parser` (flags, `--config`, the demo config, the one-argument-file
form), `arguments` (the dataclasses every command shares), `run` (logging, resume, the train/metrics steps, the end of
the run). Importing it imports no Trainer, datasets or matplotlib, so `hf-aux <method> --help` stays fast.
"""

from .parser import ARGUMENT_FILE_SUFFIXES, demo_config_path, gives_flag, parse_command_line

__all__ = ["ARGUMENT_FILE_SUFFIXES", "demo_config_path", "gives_flag", "parse_command_line"]
