"""What hf_aux knows of each method, in one record per method (peft's idea of one registration per tuner).

Each method's folder, `hf_aux/<method>/`, declares in its `__init__.py` one `Method` record (fields below); the
lazy names of `hf_aux`, the table of `hf-aux` commands and each trainer's card are derived from these records, and
commands that are not methods (`finetune`) register the same way. A new method is its folder, its name in
`METHOD_PACKAGES` and its card template, model_cards/<method>.md (README, "A new method").

This module and the records import nothing heavy: `import hf_aux` reads them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache

METHOD_PACKAGES = ("muppet", "amos", "tartan", "meta_lm", "finetune")  # folders under hf_aux/, in `hf-aux --help` order


@dataclass(frozen=True)
class Paper:
    title: str
    authors: str
    venue: str
    year: int | None
    arxiv_id: str | None
    bibtex: str
    url: str


@dataclass(frozen=True)
class Method:
    """One method (or command) of hf_aux.

    package: its folder under hf_aux/ (muppet, amos, ...); command: its `hf-aux` command; summary: its line in
    `hf-aux --help`; card_name: the method in the model card's prose; card_template: its template in model_cards/
    (rendered by `hf_aux.cards.model_card`); paper: what its card cites; exports: public name -> module of the folder
    that defines it (re-exported lazily by `hf_aux`); config_class / trainer_class: the names among `exports` of its
    TrainingArguments subclass and its Trainer (None for a command that trains with the shared base)."""

    package: str
    command: str
    summary: str
    card_name: str
    card_template: str
    paper: Paper
    exports: dict[str, str] = field(default_factory=dict)
    config_class: str | None = None
    trainer_class: str | None = None

    @property
    def module(self) -> str:
        return f"hf_aux.{self.package}"

    @property
    def command_module(self) -> str:
        """The module with the command's `make_parser`, `parse_args` and `main` (run_scripts/run_<method>.py's too)."""
        return f"{self.module}.command"

    @property
    def tags(self) -> tuple[str, ...]:
        """The Hub tags of its cards (before the arXiv tag and the run's own)."""
        return ("hf_aux", self.package)

    def load(self, name: str):
        """The public name `name` of this method (imports its module: torch, transformers, ...)."""
        return getattr(importlib.import_module(f"{self.module}.{self.exports[name]}"), name)


@cache
def methods() -> tuple[Method, ...]:
    """Every registered method's record, in `METHOD_PACKAGES` order (imports only the folders' `__init__`)."""
    return tuple(importlib.import_module(f"hf_aux.{package}").METHOD for package in METHOD_PACKAGES)


def method(package: str) -> Method:
    """The record of the method in folder `package` (muppet, amos, tartan, meta_lm, finetune)."""
    for record in methods():
        if record.package == package:
            return record
    raise ValueError(f"no hf_aux method {package!r}; the methods are {', '.join(METHOD_PACKAGES)}")


def by_command(command: str) -> Method | None:
    """The record whose `hf-aux` command is `command`, or None."""
    return next((record for record in methods() if record.command == command), None)
