"""hf_aux's command-line layer: one implementation behind the installed `hf-aux` command and the
`run_scripts/run_*.py` files.

- `parser`: `--config file.yaml` (defaults any flag overrides), the method's shipped demo config
  (`configs/<method>.yaml`) when no data source is given, and the one-argument-file form.
- `arguments`: the argument dataclasses every command shares (model/tokenizer/Hub, LoRA).
- `run`: one logging set-up, the one resume rule (via `hf_aux.runtime.run_guard`), the train/metrics steps and the
  end-of-run step (model card, token-checked push).
- `muppet`, `amos`, `tartan`, `meta_lm`, `finetune`: each method's data arguments, `parse_args` and `main`.
- `command`: `hf-aux <method> [--config F] [flags]`.

Importing this package or a method's module imports no Trainer, datasets or matplotlib (the `main` functions do),
so `hf-aux <method> --help` stays fast.
"""

from .parser import ARGUMENT_FILE_SUFFIXES, demo_config_path, gives_flag, parse_command_line

__all__ = ["ARGUMENT_FILE_SUFFIXES", "demo_config_path", "gives_flag", "parse_command_line"]
