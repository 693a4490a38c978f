"""hf_aux.cli, the command-line rules every run script shares (issue #13 items 6, 7, 8), checked on all five
scripts: the embedded demo defaults apply whenever no data source is given and any flag overrides them; training
resumes from --resume_from_checkpoint (another run's checkpoint, into a new output_dir) or else from output_dir's
last checkpoint; every card names the model it started from (base_model)."""

import ast
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import transformers
import yaml
from huggingface_hub import ModelCard
from tiny import command_args, write_command_data
from transformers import HfArgumentParser, TrainingArguments

from hf_aux.cli import parse_command_line
from hf_aux.registry import by_command, methods
from hf_aux.tasks.demo import minilm_path
from hf_aux.cards.model_card import PACKAGED_MINILM_HUB_ID, card_base_model
from hf_aux.runtime.run_guard import RUN_CONFIG_NAME, guard_output_dir, run_configuration
import importlib

SCRIPTS = ("run_muppet", "run_amos", "run_tartan", "run_meta_lm", "run_finetune")
BASE_ID = "hf-aux-tests/tiny-bert"  # what the tiny checkpoint's config.json records as its origin
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--logging_steps", "1"]


@functools.cache
def script_module(script):
    """What run_scripts/<script>.py calls: hf_aux.<method>.command."""
    return importlib.import_module(f"hf_aux.{script[4:]}.command")


def parse(script, argv):
    return script_module(script).parse_args(argv)


@dataclass
class DataArguments:
    train_file: str | None = None


# ---- the rules themselves ----------------------------------------------------------------------------------------
def test_parse_command_line_puts_embedded_defaults_first_unless_a_data_source_is_given(tmp_path):
    parser = HfArgumentParser((DataArguments, TrainingArguments))
    defaults = {"max_steps": 40, "learning_rate": "1e-4", "do_train": True}  # as a demo config holds them (YAML
    #                                                                           reads 1e-4 as text)
    rule = dict(demo_config=defaults, data_source_flags=("--train_file",))
    _, args = parse_command_line(parser, ["--output_dir", str(tmp_path), "--max_steps", "4"], **rule)
    assert (args.max_steps, args.learning_rate) == (4, 1e-4)  # the flag overrides, the other default applies
    for given in (["--train_file=x"], ["--train_file", "x"]):  # a data source switches the defaults off
        data, args = parse_command_line(parser, ["--output_dir", str(tmp_path), *given], **rule)
        assert data.train_file == "x" and (args.max_steps, args.learning_rate) == (-1, 5e-5)
    (tmp_path / "args.json").write_text(json.dumps({"output_dir": str(tmp_path), "max_steps": 7, "do_train": True}))
    _, args = parse_command_line(parser, [str(tmp_path / "args.json")], **rule)
    assert (args.max_steps, args.learning_rate) == (7, 5e-5)  # a file holds every argument


@pytest.mark.parametrize("name, text, message", [
    ("broken.yaml", "output_dir: x\n  bad: [1,\n", r"(?s)broken.yaml' is not valid YAML: .*line 2"),
    ("broken.json", '{"output_dir": }', r"broken.json' is not valid JSON: .*line 1 column 16"),
    ("unknown.yaml", "output_dir: x\nno_such_key: 1\n", r"unknown.yaml': .*\['no_such_key'\]"),
    ("type.yaml", "output_dir: x\nmax_steps: many\n", r"type.yaml': field 'max_steps' must be int, got 'many'"),
    ("type.json", '{"output_dir": "x", "fp16": "yes"}', r"type.json': field 'fp16' must be bool, got 'yes'"),
    ("missing.yaml", None, r"missing.yaml' does not exist"),
])
def test_a_bad_argument_file_is_one_error_naming_the_file_and_field(tmp_path, name, text, message):
    parser = HfArgumentParser((DataArguments, TrainingArguments))
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        parse_command_line(parser, [str(tmp_path / name)])


def test_numbers_written_as_text_in_an_argument_file_are_numbers(tmp_path):
    (tmp_path / "args.yaml").write_text("output_dir: x\nlearning_rate: 1e-4\nmax_steps: '7'\ndo_train: true\n")  # 1e-4: text
    _, args = parse_command_line(HfArgumentParser((DataArguments, TrainingArguments)), [str(tmp_path / "args.yaml")])
    assert (args.learning_rate, args.max_steps) == (1e-4, 7)


def test_resume_rule_prefers_the_given_checkpoint(tmp_path):
    """One resume rule (hf_aux.runtime.run_guard): --resume_from_checkpoint when given, even into a new output_dir, else
    output_dir's newest complete checkpoint of the same configuration, else nothing; not training, nothing."""
    out, other = tmp_path / "out", tmp_path / "other" / "checkpoint-2"
    for folder in (out / "checkpoint-3", other):
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text("{}")  # a complete checkpoint, as far as the rule looks
    args = lambda output_dir=out, **kw: TrainingArguments(output_dir=str(output_dir), do_train=True,  # noqa: E731
                                                          report_to=[], **kw)
    first = guard_output_dir(args(tmp_path / "new"))  # nothing there: starts afresh, and records its configuration
    assert first.checkpoint is None
    first.release()
    (out / RUN_CONFIG_NAME).write_text(json.dumps({"configuration": run_configuration(args())}))
    for given, expected in ((args(), out / "checkpoint-3"),
                            (args(resume_from_checkpoint=str(other)), other),
                            (args(tmp_path / "new", resume_from_checkpoint=str(other)), other)):
        run = guard_output_dir(given)
        assert run.checkpoint == str(expected)
        run.release()
    run = guard_output_dir(TrainingArguments(output_dir=str(out), report_to=[]))  # not training
    assert run.checkpoint is None
    run.release()
    with pytest.raises(ValueError, match="field 'resume_from_checkpoint'"):
        guard_output_dir(args(resume_from_checkpoint=str(tmp_path / "nope")))


def test_a_record_holding_fields_that_became_run_control_still_resumes(tmp_path):
    """local_rank (-1 alone, 0 on rank 0 of a launcher) and ddp_timeout change nothing trained: a record written
    when they were still part of the configuration resumes, and so does one written before an argument existed
    while that argument keeps its default; a launch of another number of processes would not."""
    out = tmp_path / "out"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text("{}")
    args = TrainingArguments(output_dir=str(out), do_train=True, report_to=[])
    older = {**run_configuration(args), "local_rank": 0, "ddp_timeout": 60}
    (out / RUN_CONFIG_NAME).write_text(json.dumps({"configuration": older}))
    run = guard_output_dir(args)
    assert run.checkpoint == str(out / "checkpoint-2")
    run.release()
    missing_new_flag = {k: v for k, v in older.items() if k not in ("weight_decay", "learning_rate")}
    (out / RUN_CONFIG_NAME).write_text(json.dumps({"configuration": missing_new_flag}))
    run = guard_output_dir(args)  # flags the record predates, left at their defaults: the same run
    run.release()
    with pytest.raises(ValueError, match=r"learning_rate: '<unset>' -> 0.0001"):  # ... unless one is set
        guard_output_dir(TrainingArguments(output_dir=str(out), do_train=True, report_to=[], learning_rate=1e-4))
    (out / RUN_CONFIG_NAME).write_text(json.dumps({"configuration": {**older, "processes": 2}}))
    with pytest.raises(ValueError, match=r"processes: 2 -> '<unset>'"):
        guard_output_dir(args)


def test_card_base_model_names_the_real_base():
    assert card_base_model(minilm_path()) == PACKAGED_MINILM_HUB_ID == "sentence-transformers/all-MiniLM-L6-v2"
    assert card_base_model("roberta-base") == "roberta-base"
    assert card_base_model(None) is None and card_base_model("") is None


# ---- item 8: `--output_dir X --max_steps 4` runs the embedded default, for every script ---------------------------
@pytest.mark.parametrize("script", SCRIPTS)
def test_embedded_default_applies_when_no_data_source_is_given_and_flags_override_it(script, tmp_path):
    plain = parse(script, ["--output_dir", str(tmp_path)])
    shorter = parse(script, ["--output_dir", str(tmp_path), "--max_steps", "4"])
    assert shorter[2].max_steps == 4 and plain[2].max_steps != 4 and plain[2].do_train
    assert shorter[1] == plain[1]  # the same embedded data source
    plain_settings = plain[2].to_dict()
    changed = {k for k, v in shorter[2].to_dict().items() if v != plain_settings[k]}
    assert changed <= {"max_steps"}


# ---- items 6 and 7: resume into a new output_dir from another run's checkpoint; the card's base_model ------------
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("cli_data"), BASE_ID)


def script_args(script, data, out):
    return command_args(script, data, out, QUIET)


@pytest.mark.parametrize("script", SCRIPTS)
def test_resume_into_a_new_output_dir_from_another_runs_checkpoint_and_card_base_model(script, data, tmp_path,
                                                                                      monkeypatch):
    module = script_module(script)
    resumed_from = []
    original_train = transformers.Trainer.train

    def spy(self, resume_from_checkpoint=None, **kwargs):
        resumed_from.append(resume_from_checkpoint)
        return original_train(self, resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "train", spy)

    def run(out, *extra):
        monkeypatch.setattr(sys, "argv", [f"{script}.py", *script_args(script, data, out), *extra])
        module.main()

    first, second = tmp_path / "first", tmp_path / "second"
    run(first, "--max_steps", "2")
    assert (first / "checkpoint-2").is_dir() and resumed_from == [None]
    run(second, "--max_steps", "3", "--resume_from_checkpoint", str(first / "checkpoint-2"))
    assert resumed_from[-1] == str(first / "checkpoint-2")
    state = json.loads((second / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert [h["step"] for h in state["log_history"] if "loss" in h][:2] == [1, 2]  # the first run's history
    card = ModelCard.load(second / "README.md")
    assert card.data.base_model == (None if script == "run_amos" else BASE_ID)


# ---- issue #19: --config YAML under the flags, the demo config under both, per method -----------------------------
# a data source each method accepts, to check that one in the --config file switches the demo config off
CONFIG_DATA_SOURCE = {"run_muppet": {"mixture_file": "m.yaml"}, "run_amos": {"train_file": "t.txt"},
                      "run_tartan": {"train_file": "t.jsonl", "validation_file": "v.jsonl"},
                      "run_meta_lm": {"train_file": ["t.txt"]},
                      "run_finetune": {"train_file": "t.jsonl", "task_kind": "classification"}}


@pytest.mark.parametrize("script", SCRIPTS)
def test_config_yaml_sets_defaults_that_flags_override_over_the_demo_config(script, tmp_path):
    demo = parse(script, ["--output_dir", str(tmp_path)])
    config = tmp_path / "my.yaml"
    config.write_text("max_steps: 7\nlearning_rate: 3.0e-4\nseed: 5\nlogging_steps: 3\n")
    parsed = parse(script, ["--config", str(config), "--output_dir", str(tmp_path), "--seed", "9"])
    args = parsed[2]
    assert (args.max_steps, args.learning_rate, args.logging_steps) == (7, 3e-4, 3)  # the file over the demo config
    assert args.seed == 9  # the flag over the file
    assert args.do_train and parsed[1] == demo[1]  # what neither sets stays the demo config's
    settings = demo[2].to_dict()
    changed = {k for k, v in args.to_dict().items() if v != settings[k]}
    assert changed <= {"max_steps", "learning_rate", "seed", "logging_steps"}
    # a data source in the file switches the demo config off: transformers' defaults apply under the file, and
    # data to train on means training (hf_aux.cli.parser's actions rule)
    config.write_text(yaml.safe_dump({**CONFIG_DATA_SOURCE[script], "max_steps": 7}))
    plain = parse(script, ["--config", str(config), "--output_dir", str(tmp_path)])[2]
    assert plain.max_steps == 7 and plain.do_train and plain.learning_rate == type(plain)(
        output_dir=str(tmp_path)).learning_rate


def test_a_bad_config_file_names_the_file(tmp_path):
    config = tmp_path / "my.yaml"
    config.write_text("max_steps: 7\nno_such_flag: 1\n")
    with pytest.raises(ValueError, match=r"my.yaml': keys no argument of this command knows: \['no_such_flag'\]"):
        parse("run_amos", ["--config", str(config), "--output_dir", str(tmp_path)])
    config.write_text("- a list\n")
    with pytest.raises(ValueError, match="must hold a mapping"):
        parse("run_amos", ["--config", str(config), "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="--config: give the path"):
        parse("run_amos", ["--output_dir", str(tmp_path), "--config"])
    config.write_text("- output_dir: x\n")  # the older single-file form, holding a list: the same clear error
    with pytest.raises(ValueError, match=r"my.yaml' must hold a mapping of argument names to values, got list"):
        parse("run_amos", [str(config)])


def test_every_method_ships_its_demo_config():
    for record in methods():
        assert (Path(script_module(f"run_{record.package}").__file__).parent / "demo.yaml").is_file()


HELP_PROBE = """import sys, contextlib, io
from hf_aux.__main__ import main
pages = []
for argv in ([], ["--help"], *([name, flag] for name in {names!r} for flag in ("--help", "--help-all"))):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit:
            pass
    pages.append(out.getvalue())
print("\\x00".join(pages))
print("\\x00" + " ".join(m for m in ("transformers.trainer", "peft", "datasets", "matplotlib",
                                    "hf_aux.muppet.trainer")
                         if m in sys.modules))
"""


def test_hf_aux_help_all_lists_every_flag_of_every_method_without_importing_trainer_peft_or_datasets():
    """`hf-aux <method> --help` shows one screen (tests/test_user_errors.py checks what it holds); `--help-all` every
    flag with its help text. Neither imports the Trainer, peft or datasets."""
    names = [record.command for record in methods()]
    out = subprocess.run([sys.executable, "-c", HELP_PROBE.format(names=names)], check=True, capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "80"}).stdout
    *pages, heavy = out.split("\x00")
    assert heavy.split() == []
    assert "usage: hf-aux <command>" in pages[0] and pages[0] == pages[1]
    for name, short, full in zip(names, pages[2::2], pages[3::2]):
        module = script_module(f"run_{by_command(name).package}")
        assert short.startswith(f"usage: hf-aux {name}") and "--config FILE" in short
        assert full.startswith(f"usage: hf-aux {name}") and "--config FILE" in full
        assert len(short.splitlines()) <= 150 < len(full.splitlines()), name
        for action in module.make_parser()._actions:
            assert action.option_strings[0] in full, (name, action.option_strings)
            assert action.help, (name, action.dest)  # every flag has help text


def test_the_run_scripts_are_thin_and_call_the_library():
    for script in SCRIPTS:
        path = Path(__file__).resolve().parents[1] / "run_scripts" / f"{script}.py"
        code = ast.parse(path.read_text())
        assert ast.get_docstring(code).count(f"python run_scripts/{script}.py") >= 2  # copy-pasteable commands
        body = [node for node in code.body[1:] if not isinstance(node, (ast.Import, ast.ImportFrom))]
        assert len(body) == 1 and isinstance(body[0], ast.If)  # only `if __name__ == "__main__": run_command(main)`
        imported = {alias.name for node in code.body if isinstance(node, ast.ImportFrom)
                    and node.module == f"hf_aux.{script[4:]}.command" for alias in node.names}
        assert imported == {"main", "parse_args"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_method_takes_hub_token_revision_and_cache_dir_and_never_records_the_token(script, tmp_path):
    model_args, *rest = parse(script, ["--output_dir", str(tmp_path), "--token", "hf_secret", "--model_revision",
                                       "v1", "--cache_dir", str(tmp_path / "cache")])
    assert model_args.hub_kwargs() == {"token": "hf_secret", "revision": "v1", "cache_dir": str(tmp_path / "cache")}
    assert "hf_secret" not in json.dumps(run_configuration(rest[1], model_args, *rest[:1], *rest[2:]))
