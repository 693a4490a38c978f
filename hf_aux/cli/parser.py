"""One parser for every hf_aux command (`CommandParser`), and the layers of its defaults, lowest first, each
overriding the one before: (1) the dataclasses' own defaults; (2) the method's demo config
(`hf_aux/<method>/demo.yaml`), only when neither the command line nor `--config` names a data source
(`data_source_flags`), so `hf-aux tartan --output_dir X --max_steps 4` is the demo, four steps long; (3) the
`--config` file (YAML or JSON, argument names to values, read by cli/argument_files.py); (4) the command line.
A single `.json`/`.yaml`/`.yml` argument is the older form: the file holds every argument, no demo.

Then two rules about what the user asked for (`given`: command-line flags and the keys of a --config or argument
file, never the demo config's):

- Actions (`apply_action_rule`): a training source with no action asked for turns `do_train` on, as in trl; any
  data source turns `do_eval` on unless given or `--do_predict` alone was asked, where there is a validation split
  (run_guard's `evaluation_implied`). Asking for no training, evaluation, prediction or push is an error first.
- Intervals (`_interval_strategies`): an explicit `--save_steps`, `--eval_steps` or `--logging_steps` implies the
  steps strategy of its kind when that strategy was not given; given both, a steps value under another strategy
  is a warning."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import functools
import logging
import os
import re
import sys
import textwrap
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from transformers import HfArgumentParser

from .argument_files import check_scalar_types, parse_argument_file, read_argument_mapping
from ..registry import METHOD_PACKAGES
from ..errors import UserInputError

logger = logging.getLogger("hf_aux")

ARGUMENT_FILE_SUFFIXES = (".json", ".yaml", ".yml")
CONFIG_FLAG = "--config"
DEMO_CONFIG_NAME = "demo.yaml"  # in each method's folder, hf_aux/<method>/


def demo_config_path(method: str) -> Path:
    """The shipped demo config of `method` (its folder: muppet, amos, tartan, meta_lm, finetune)."""
    if method not in METHOD_PACKAGES:
        raise ValueError(f"no hf_aux method {method!r}; the methods are {', '.join(METHOD_PACKAGES)}")
    return Path(__file__).resolve().parent.parent / method / DEMO_CONFIG_NAME


def command_parser(dataclass_types, method: str, data_source_flags: Sequence[str]) -> CommandParser:
    """The `CommandParser` of a method's command, its help saying how --config and the demo config work."""
    sources = ", ".join(data_source_flags)
    epilog = (f"{CONFIG_FLAG} FILE     a YAML/JSON mapping of the arguments above, as defaults that any flag on the "
              f"command line overrides. Without a data source ({sources}), on the command line or in the file, the "
              f"demo config {demo_config_path(method)} supplies the defaults first. A single .json/.yaml argument "
              "instead holds every argument (no demo config).")
    return CommandParser(dataclass_types, epilog=epilog)


# ---- the parser: whole flags only, mistakes as UserInputError, a help of one screen -------------------------------
HELP_ALL_FLAG = "--help-all"
# the Trainer flags `--help` shows (the rest are behind --help-all), in this order, with a help text of one line
# (the Trainer's own run to several sentences; a method that words a flag its own way keeps its wording)
COMMON_TRAINER_FLAGS = {
    "output_dir": "Where checkpoints, the model, its metrics and card go; a run resumes from its last checkpoint.",
    "overwrite_output_dir": "Replace a run of another configuration in --output_dir.",
    "do_train": "Train (on when a training source is given).",
    "do_eval": "Evaluate on the validation split.",
    "do_predict": "Predict on the test split.",
    "num_train_epochs": "Epochs to train (unless --max_steps > 0).",
    "max_steps": "Optimizer steps to train; > 0 overrides --num_train_epochs.",
    "per_device_train_batch_size": "Training batch size per process.",
    "gradient_accumulation_steps": "Batches accumulated into each optimizer step.",
    "learning_rate": "Peak learning rate.",
    "warmup_steps": "Linear warm-up: steps, or a share of all steps when < 1.",
    "seed": "Random seed, set before the model is built.",
    "bf16": "bfloat16 mixed precision.",
    "eval_strategy": "When to evaluate.",
    "eval_steps": "Steps between evaluations (implies --eval_strategy steps).",
    "save_strategy": "When to checkpoint.",
    "save_steps": "Steps between checkpoints (implies --save_strategy steps).",
    "logging_steps": "Steps between log lines (implies --logging_strategy steps).",
    "report_to": "Where metrics go: none, all, tensorboard, wandb, trackio, ...",
    "push_to_hub": "Push the output folder to the Hub at the end (to --hub_model_id <user>/<name>).",
}
OUTPUT_FLAGS = ("output_dir", "overwrite_output_dir")  # the Trainer flags of the data's section, after the data's
_SECTION_TITLES = {"ModelArguments": "the model", "DataTrainingArguments": "the data, and where the run writes",
                   "LoraArguments": "LoRA on the shared body", "CompareArguments": "the arms and the comparison"}
HELP_LINES = {"own": 3, "others": 2}  # lines of help text a flag gets in the short --help: the method's own, others'


class CommandParser(HfArgumentParser):
    """`HfArgumentParser` as every hf_aux command uses it:

    - flags only as written in full (`allow_abbrev=False`: argparse would take `--max_step 3` for `--max_steps`);
    - every mistake in the command line raised as a `UserInputError` (printed as one line): a bad value in argparse's
      words, an unknown flag with the closest known ones, a dataclass's own check (TrainingArguments' too);
    - a help of argument groups (`sections`): the data's flags with --output_dir and --overwrite_output_dir; the
      method's own (its config's fields that are not TrainingArguments'); the other dataclasses'; the Trainer's and
      hf_aux's run flags, the most used first (COMMON_TRAINER_FLAGS). `--help` keeps to one screen: of the Trainer's
      flags only the most used, each help text cut to HELP_LINES lines; `--help-all` lists every flag in full."""

    def __init__(self, dataclass_types, **kwargs):
        from transformers import TrainingArguments

        kwargs.setdefault("usage", f"%(prog)s [{CONFIG_FLAG} FILE.yaml] [--flag VALUE ...]")
        super().__init__((), allow_abbrev=False, add_help=False, formatter_class=_HelpFormatter, **kwargs)
        self.config_help, self.dataclass_types = self.epilog, list(dataclass_types)
        self.screen: dict[str, tuple[int, str]] = {}  # dest -> (lines, help text) of each flag the short help shows
        self.trainer_flags: set[str] = set()  # the dests of the Trainer's and hf_aux's run flags
        data = [kind for kind in self.dataclass_types if kind.__name__ == "DataTrainingArguments"]
        config = [kind for kind in self.dataclass_types if issubclass(kind, TrainingArguments)]
        titles = {kind: f"{kind.__name__}: " + ("the method's own flags" if kind in config else
                                                _SECTION_TITLES.get(kind.__name__, "more flags"))
                  for kind in self.dataclass_types}  # (the training section's: _format_help's)
        order = [*data, *config, *(kind for kind in self.dataclass_types if kind not in data + config), "training"]
        self.sections = {key: self.add_argument_group(titles.get(key)) for key in order}
        # the output flags end the data's section: a section of their own would take --help past one screen
        self.sections["output"] = self.sections[data[0] if data else "training"]
        for kind in self.dataclass_types:
            self._add_dataclass_arguments(kind)
        # no line of their own in the help, whose last line says where every flag is
        self.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)
        self.add_argument(HELP_ALL_FLAG, action=_HelpAllAction, help=argparse.SUPPRESS)

    def _add_dataclass_arguments(self, dtype):
        """Each field's flags into its section: a field of TrainingArguments or of hf_aux's run flags into the
        output or the training section, the most used first; any other into its dataclass's."""
        from transformers import TrainingArguments

        from ..runtime.config import AuxConfig

        hints, order = typing.get_type_hints(dtype), list(COMMON_TRAINER_FLAGS)
        wording = {item.name: item.metadata.get("help") for item in dataclasses.fields(TrainingArguments)}
        run_fields = {item.name for item in dataclasses.fields(AuxConfig)} \
            if issubclass(dtype, TrainingArguments) else set()
        for item in sorted(dataclasses.fields(dtype), key=lambda item: order.index(item.name)
                           if item.name in order and item.name in run_fields else len(order)):
            if not item.init:
                continue
            item.type, text, key = hints[item.name], item.metadata.get("help"), dtype
            if item.name not in run_fields:
                self.screen[item.name] = (HELP_LINES["own" if run_fields else "others"], text)
            else:
                key = "output" if item.name in OUTPUT_FLAGS else "training"
                self.trainer_flags.add(item.name)
                if item.name in COMMON_TRAINER_FLAGS:  # in one line, unless the method words it its own way
                    self.screen[item.name] = (HELP_LINES["others"], COMMON_TRAINER_FLAGS[item.name]
                                              if text == wording.get(item.name) else text)
            self._parse_dataclass_field(self.sections[key], item)

    def error(self, message: str):
        # argparse names a flag by all its spellings (--max_steps/--max-steps): the one the help shows is enough
        raise UserInputError(re.sub(r"(--\w+)/--[\w-]+", r"\1", message))

    def parse_args_into_dataclasses(self, args=None, return_remaining_strings=False, **kwargs):
        if not return_remaining_strings:  # unknown flags first: a typo is the likelier cause of a failing check
            _, remaining = self.parse_known_args(args=args)
            if remaining:
                raise UserInputError(self.unrecognized(remaining))
        try:
            return super().parse_args_into_dataclasses(args, return_remaining_strings, **kwargs)
        except UserInputError:
            raise
        except ValueError as error:  # a dataclass's own check of the values given (e.g. TrainingArguments')
            raise UserInputError(str(error)) from error

    def unrecognized(self, remaining: Sequence[str]) -> str:
        """'unrecognized argument --max_stesp; did you mean --max_steps?' (the closest known flags, if any)."""
        flags = [item.split("=", 1)[0] for item in remaining if item.startswith("-")]
        if not flags:
            return (f"unrecognized argument{'s' if len(remaining) > 1 else ''} {' '.join(remaining)} (a value with no "
                    "flag before it, or a flag that takes one value given several)")
        # argparse's suggest_on_error (3.14) suggests a choice or a subcommand name, never a flag: difflib here
        known = {CONFIG_FLAG} | {option for option in self._option_string_actions  # (not the hyphenated aliases)
                                 if option.startswith("--") and "-" not in option[2:] and option != HELP_ALL_FLAG}

        def closest(flag):  # the best match, and any other as close
            flag = "--" + flag.lstrip("-").replace("-", "_")
            scores = sorted(((difflib.SequenceMatcher(None, flag, name).ratio(), name) for name in known), reverse=True)
            return [name for score, name in scores[:3] if score >= max(0.6, scores[0][0] - 0.03)]

        if len(flags) == 1:
            close = closest(flags[0])
            return f"unrecognized argument {flags[0]}" + (f"; did you mean {' or '.join(close)}?" if close else "")
        parts = [flag + (f" (did you mean {' or '.join(close)}?)" if (close := closest(flag)) else "")
                 for flag in flags]
        return f"unrecognized arguments {', '.join(parts)}"

    # ---- help: argparse's, of the sections ----
    def format_help(self) -> str:
        """The one-screen help (`--help`)."""
        more = f"{len(self.trainer_flags - set(self.screen))} more Trainer flags: {self.prog} {HELP_ALL_FLAG}"
        return self._format_help(f"training: the most used of {len(self.trainer_flags)} Trainer flags", self.screen,
                                 self.config_help.split(". ")[0] + ".", more)

    def format_full_help(self) -> str:
        return self._format_help("training: hf_aux's run flags and the Trainer's (TrainingArguments)", None,
                                 self.config_help, f"{HELP_ALL_FLAG}: every flag with its whole help text.")

    def _format_help(self, training_title: str, screen: dict | None, epilog: str, last_line: str) -> str:
        self.sections["training"].title, self.epilog = training_title, epilog
        self.formatter_class = functools.partial(_HelpFormatter, screen=screen)
        return f"{super().format_help()}\n{last_line}\n"


class _HelpAllAction(argparse._HelpAction):  # argparse's -h, printing every flag
    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(parser.format_full_help(), sys.stdout)
        parser.exit()


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """A flag on one line with its help text: its underscore spelling only (not HfArgumentParser's hyphenated
    alias), the kind of value it takes (INT, FLOAT, STR, its choices; nothing for a switch) instead of its name in
    capitals, and its default where it says something (not None, False or empty). With `screen` (the short help's
    dest -> (lines, help text)): only those flags, one per field, each help text cut to its lines."""

    def __init__(self, prog, screen: dict | None = None):
        super().__init__(prog, max_help_position=32)
        self.screen = screen

    def add_arguments(self, actions):  # (argparse has one help, in full: the one-screen cut is hf_aux's)
        if self.screen is None:
            return super().add_arguments(actions)
        width = max(24, self._width - self._max_help_position)
        last = {action.dest: action for action in actions}  # of --x and --no_x, the one that changes something
        super().add_arguments([_shortened(action, *self.screen[dest], width) for dest, action in last.items()
                               if dest in self.screen])

    def _format_action_invocation(self, action) -> str:
        """The flag and what it takes: its choices, INT, FLOAT, STR, several of them (STR...), or nothing for a switch
        (a bool field's flag, which also takes true/false)."""
        flag = action.option_strings[0]  # (HfArgumentParser makes no positional argument)
        if action.nargs == 0 or getattr(action.type, "__name__", "") == "string_to_bool":
            return flag
        choices = "{" + ",".join(str(choice) for choice in action.choices or ()) + "}"
        kind = (choices if len(choices) <= 28 else "CHOICE") if action.choices else \
            {int: "INT", float: "FLOAT", str: "STR"}.get(action.type, "VALUE")
        return f"{flag} {kind}..." if action.nargs in ("+", "*") else f"{flag} {kind}"

    def _get_help_string(self, action) -> str:  # a default of None, False or nothing goes without saying
        return action.help or "" if action.default in (None, False, "", []) else super()._get_help_string(action)


def _shortened(action, lines: int, text: str | None, width: int):
    """A copy of `action` whose help `text` fits `lines` lines of `width` characters with its default: the whole text,
    or its first sentence, or the words that fit and an ellipsis (--help-all shows the whole text)."""
    short = copy.copy(action)
    text = " ".join((text or "").split())
    default = "" if action.default in (None, False, "", [], argparse.SUPPRESS) else f" (default: {action.default})"
    limit = lines * (width - 4) - len(default)  # (wrapping at words leaves a few characters of each line empty)
    if len(text) > limit:
        first = re.split(r"(?<=[a-z0-9)'\"`]\.)\s+(?=[A-Z`'])", text, maxsplit=1)[0]
        text = first if len(first) <= limit else textwrap.shorten(text, max(limit, 12), placeholder=" ...")
    short.help = text
    return short


def gives_flag(argv: Sequence[str], flag: str) -> bool:
    """Whether the command line `argv` sets `flag` (as `--flag value` or `--flag=value`)."""
    return any(argument == flag or argument.startswith(flag + "=") for argument in argv)


def parse_command_line(parser: HfArgumentParser, argv: Sequence[str] | None = None, *,
                       demo_config: str | os.PathLike | Mapping | None = None,
                       data_source_flags: Sequence[str] = ()) -> tuple:
    """The command's argument dataclasses from `argv` (default: `sys.argv[1:]`), layered as the module says.

    `demo_config` is a YAML/JSON file (or a mapping) of the method's demo defaults; `data_source_flags` are the
    flags (`--train_file`, ...) any one of which, on the command line or as a key of the `--config` file, switches
    the demo defaults off."""
    from ..runtime.distributed import use_cpu_under_launcher

    use_cpu_under_launcher()  # torchrun on a machine without a GPU: one gloo run, not N lone processes
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(ARGUMENT_FILE_SUFFIXES):
        parsed, given = parse_argument_file(parser, os.path.abspath(argv[0]))
        _warn_steps_without_strategy(parsed, given)
        apply_action_rule(parsed, given, _sources_named(data_source_flags, [], given))
        return tuple(parsed)
    argv, config_path = _take_config_flag(argv)
    config = read_argument_mapping(config_path, parser) if config_path else {}
    sources = _sources_named(data_source_flags, argv, config)
    given = set(config) | {parser._option_string_actions[flag].dest for flag in _flags(argv)
                           if flag in parser._option_string_actions}
    demo = {}
    if demo_config is not None and not sources:
        demo = demo_config if isinstance(demo_config, Mapping) else read_argument_mapping(demo_config, parser)
    defaults = {**demo, **config, **_interval_strategies(given)}
    original = {action.dest: action.default for action in parser._actions if action.dest in defaults}
    parser.set_defaults(**defaults)  # argparse converts string defaults with the flag's type, as if typed
    try:
        parsed = parser.parse_args_into_dataclasses(args=argv)
    finally:  # the parser can be used again
        parser.set_defaults(**original)
    where = f"--config {config_path!r}" if config_path else "the demo config"
    check_scalar_types(parsed, defaults, where)
    _warn_steps_without_strategy(parsed, given)
    apply_action_rule(parsed, given, sources)
    return tuple(parsed)


def _sources_named(data_source_flags, argv: Sequence[str], mapping: Mapping) -> set[str]:
    """The data source flags set on the command line `argv` or (with a value) as keys of a --config / argument
    file's `mapping`."""
    return {flag for flag in data_source_flags if gives_flag(argv, flag)
            or mapping.get(flag.lstrip("-")) not in (None, False, [], "")}


# ---- what the user asked for: actions and intervals ---------------------------------------------------------------
ACTIONS = ("do_train", "do_eval", "do_predict")
EVALUATION_SOURCES = ("--validation_file", "--test_file")  # data to evaluate on, not to train on
# steps flag -> the strategy it belongs to
INTERVALS = {"save_steps": "save_strategy", "eval_steps": "eval_strategy", "logging_steps": "logging_strategy"}


def _flags(argv: Sequence[str]) -> list[str]:
    return [argument.split("=", 1)[0] for argument in argv if argument.startswith("--")]


def apply_action_rule(parsed, given, sources) -> None:
    """The actions rule of the module docstring, on the parsed training arguments (the dataclass with do_train,
    do_eval and do_predict); `given` holds the argument names the user gave, `sources` the data source flags among
    them (only validation or test files: data to evaluate, not to train on)."""
    from ..runtime.run_guard import (IMPLIED_ACTIONS)

    args = next((item for item in parsed if all(hasattr(item, name) for name in ACTIONS)), None)
    if args is None:
        return
    asked = {name for name in ACTIONS if name in given and getattr(args, name)}  # e.g. --do_eval alone: only that
    implied = set()
    if set(sources) - set(EVALUATION_SOURCES) and "do_train" not in given and not asked and not args.do_train:
        implied.add("do_train")
    if sources and "do_eval" not in given and "do_predict" not in asked and not args.do_eval:  # (an evaluation
        implied.add("do_eval")  # strategy already turned it on: then it was asked for, and is not dropped)
    for name in implied:
        setattr(args, name, True)
    setattr(args, IMPLIED_ACTIONS, frozenset(implied))
    setattr(args, _GIVEN, frozenset(given))
    if not (args.do_train or args.do_eval or args.do_predict or getattr(args, "push_to_hub", False)):
        raise UserInputError("TrainingArguments: fields 'do_train', 'do_eval', 'do_predict': nothing to do; pass "
                             "--do_train, --do_eval and/or --do_predict (with a data source, training is on unless "
                             "--do_train false)")


_GIVEN = "_hf_aux_given"  # the argument names the user gave (command line, --config or argument file)


def given_by_user(args, name: str) -> bool:
    """Whether the user gave the training argument `name` (on the command line, in a --config or argument file),
    rather than leaving it at its default or the demo config's value."""
    return name in getattr(args, _GIVEN, ())


def _interval_strategies(given) -> dict:
    """Strategies implied by explicit steps flags whose strategy was not given (they override the demo config)."""
    return {strategy: "steps" for steps, strategy in INTERVALS.items() if steps in given and strategy not in given}


def _warn_steps_without_strategy(parsed, given) -> None:
    for instance in parsed:
        for steps, strategy in INTERVALS.items():
            value = getattr(instance, strategy, None)
            value = None if value is None else str(getattr(value, "value", value))
            if steps in given and strategy in given and value not in (None, "steps", "best"):
                every = f"{getattr(instance, steps):g}"
                logger.warning("--%s %s has no effect: --%s is %r (pass --%s steps to act every %s steps)", steps,
                               every, strategy, value, strategy, every)


def _take_config_flag(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` without `--config F` / `--config=F`, and F (the last one given)."""
    config = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    config.add_argument(CONFIG_FLAG)
    try:
        given, rest = config.parse_known_args(argv)
    except argparse.ArgumentError:  # no value after it
        raise UserInputError(f"{CONFIG_FLAG}: give the path of a .yaml/.json file of arguments") from None
    return rest, given.config


def __getattr__(name: str):
    from .._moved import moved_name  # names moved out of this module (issue #62)

    return moved_name(__name__, name)
