"""The layout by method (issue #29): one folder per method with one record, one base trainer and config, a library
that never imports the command-line layer, few private Trainer overrides, and the old module paths still working."""

import ast
import importlib
import inspect
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from test_import_graph import ROOT, imported_modules, module_names

import hf_aux
from hf_aux import registry

OLD_PATHS = {  # the documented old module paths (CHANGELOG.md) -> their new homes
    "hf_aux.trainers.muppet": "hf_aux.muppet.trainer", "hf_aux.trainers.muppet_config": "hf_aux.muppet.config",
    "hf_aux.trainers.amos": "hf_aux.amos.trainer", "hf_aux.trainers.amos_config": "hf_aux.amos.config",
    "hf_aux.trainers.tartan": "hf_aux.tartan.trainer", "hf_aux.trainers.tartan_config": "hf_aux.tartan.config",
    "hf_aux.trainers.meta_lm": "hf_aux.meta_lm.trainer", "hf_aux.trainers.meta_lm_config": "hf_aux.meta_lm.config",
    "hf_aux.losses.muppet": "hf_aux.muppet.losses", "hf_aux.losses.amos": "hf_aux.amos.losses",
    "hf_aux.losses.tartan": "hf_aux.tartan.losses", "hf_aux.losses.meta_lm": "hf_aux.meta_lm.losses",
    "hf_aux.modeling.amos": "hf_aux.amos.model", "hf_aux.modeling.tartan": "hf_aux.tartan.model",
    "hf_aux.modeling.teacher": "hf_aux.meta_lm.teacher",
    "hf_aux.cli.muppet": "hf_aux.muppet.command", "hf_aux.cli.amos": "hf_aux.amos.command",
    "hf_aux.cli.tartan": "hf_aux.tartan.command", "hf_aux.cli.meta_lm": "hf_aux.meta_lm.command",
    "hf_aux.cli.finetune": "hf_aux.finetune.command", "hf_aux.cli.command": "hf_aux.__main__",
    "hf_aux.two_moons": "hf_aux.meta_lm.two_moons", "hf_aux.functional_optim": "hf_aux.meta_lm.functional_optim",
    "hf_aux.training_args": "hf_aux.runtime.config",
    # the shared core grouped into tasks/, runtime/ and cards/; method-only code in its method's folder
    "hf_aux.adapters": "hf_aux.runtime.adapters",
    "hf_aux.arrow_encoding": "hf_aux.tasks.arrow_encoding",
    "hf_aux.base_config": "hf_aux.runtime.config",
    "hf_aux.base_trainer": "hf_aux.runtime.trainer",
    "hf_aux.column_checks": "hf_aux.tasks.column_checks",
    "hf_aux.cpu_malloc": "hf_aux.runtime.cpu_malloc",
    "hf_aux.data": "hf_aux.tasks.data",
    "hf_aux.demo": "hf_aux.tasks.demo",
    "hf_aux.distributed": "hf_aux.runtime.distributed",
    "hf_aux.hub": "hf_aux.runtime.hub",
    "hf_aux.hub_licenses": "hf_aux.cards.licenses",
    "hf_aux.lora_settings": "hf_aux.runtime.lora_settings",
    "hf_aux.meta_lm.sampling": "hf_aux.meta_lm.support_query",
    "hf_aux.metrics": "hf_aux.tasks.metrics",
    "hf_aux.model_card": "hf_aux.cards.model_card",
    "hf_aux.nonfinite": "hf_aux.runtime.nonfinite",
    "hf_aux.plots": "hf_aux.cards.plots",
    "hf_aux.probe": "hf_aux.amos.probe",
    "hf_aux.run_guard": "hf_aux.runtime.run_guard",
    "hf_aux.sampling": "hf_aux.tasks.batches",
    "hf_aux.sentence_transformers_files": "hf_aux.modeling.sentence_transformers_files",
    "hf_aux.streaming": "hf_aux.tasks.streaming",
    "hf_aux.task_preprocessing": "hf_aux.tasks.preprocessing",
    "hf_aux.task_registry": "hf_aux.tasks.registry",
    "hf_aux.task_spec": "hf_aux.tasks.spec",
    "hf_aux.task_weighting": "hf_aux.tartan.weighting",
    "hf_aux.tensor_ops": "hf_aux.runtime.tensor_ops",
    "hf_aux.training_metrics": "hf_aux.runtime.training_metrics",
    "hf_aux.validation": "hf_aux.tasks.validation",
}
METHODS = tuple(record.package for record in registry.methods() if record.trainer_class)  # from METHOD_PACKAGES


def is_command_line(name: str) -> bool:
    return name in ("hf_aux.cli", "hf_aux.__main__") or name.startswith("hf_aux.cli.") or name.endswith(".command")


def library_graph() -> dict[str, set[str]]:
    known = module_names()
    return {name: imported_modules(name, path, known) for name, path in known.items()
            if not is_command_line(name) and name not in OLD_PATHS}


def test_no_library_module_imports_the_command_line_layer():
    graph = library_graph()
    assert "hf_aux.runtime.adapters" in graph and "hf_aux.muppet.trainer" in graph  # the check reads the library
    offenders = {name: sorted(t for t in targets if is_command_line(t)) for name, targets in graph.items()}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_each_method_lives_in_one_folder_with_one_record():
    for package in METHODS:
        folder = ROOT / package
        assert {"__init__.py", "config.py", "trainer.py", "losses.py", "command.py", "demo.yaml"} <= {
            p.name for p in folder.iterdir()}, package
        record = registry.method(package)
        assert importlib.import_module(f"hf_aux.{package}").METHOD is record
        config_class, trainer_class = record.load(record.config_class), record.load(record.trainer_class)
        assert issubclass(config_class, hf_aux.TokenSafeTrainingArguments)
        assert issubclass(trainer_class, hf_aux.AuxTrainer) and trainer_class._method is record
        assert (ROOT.parent / "model_cards" / record.card_template).is_file()
        assert record.paper.bibtex.startswith("@") and record.paper.title in record.paper.bibtex
        for name, module in record.exports.items():  # the lazy names come from the record
            assert hf_aux._LAZY_NAMES[name] == f"{package}.{module}" and getattr(hf_aux, name) is record.load(name)
    assert [record.package for record in registry.methods()] == [*METHODS, "finetune"]


def test_the_command_table_is_the_records():
    from hf_aux.__main__ import usage

    for record in registry.methods():
        assert f"  {record.command:<10} {record.summary}" in usage()
        assert registry.by_command(record.command) is record
        module = importlib.import_module(record.command_module)
        assert callable(module.main) and callable(module.parse_args) and callable(module.make_parser)
    for script in (ROOT.parent / "run_scripts").glob("run_*.py"):  # a launcher script, where a method has one
        record = registry.method(script.stem[len("run_"):]) if script.stem != "run_compare" else None
        if record is not None:
            assert f"from {record.command_module} import main" in script.read_text()
    launchers = {"muppet", "amos", "tartan", "meta_lm", "finetune", "compare"}  # today's (a new method's is optional)
    assert {f"run_{name}.py" for name in launchers} <= {p.name for p in (ROOT.parent / "run_scripts").glob("*.py")}


def private_overrides() -> dict[str, list[str]]:
    """Class -> the private Trainer methods it defines itself, over every hf_aux module (old paths aside)."""
    from transformers import Trainer

    private = {name for name in dir(Trainer) if name.startswith("_") and not name.startswith("__")}
    found = {}
    for name in sorted(module_names()):
        if name in OLD_PATHS:
            continue
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == name and issubclass(cls, Trainer):
                mine = sorted(attr for attr in vars(cls) if attr in private)
                if mine:
                    found[f"{name}.{cls.__name__}"] = mine
    return found


def test_at_most_six_private_trainer_overrides_and_saving_and_loading_in_the_base():
    found = private_overrides()
    assert sum(map(len, found.values())) <= 6, found
    assert found == {
        "hf_aux.runtime.trainer.AuxTrainer": ["_load_best_model", "_load_from_checkpoint",
                                              "_push_from_checkpoint", "_save", "_save_checkpoint"],
        "hf_aux.muppet.trainer.MuppetTrainer": ["_run_epoch"],  # its task sampler's epoch (see its comment)
    }


def test_no_push_method_is_assigned_on_an_instance():
    assigned = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in ("push_to_hub", "_push_from_checkpoint"):
                    assigned.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert assigned == []


OLD_PATH_PROBE = """import importlib, json, sys, warnings
found = {{}}
for old, new in {paths!r}.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    found[old] = [module is importlib.import_module(new),
                  any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)]
print(json.dumps(found))
"""


def test_every_old_module_path_is_its_new_module_with_a_deprecation_warning():
    import json

    out = subprocess.run([sys.executable, "-c", OLD_PATH_PROBE.format(paths=OLD_PATHS)], check=True,
                         capture_output=True, text=True)
    assert json.loads(out.stdout) == {old: [True, True] for old in OLD_PATHS}
    from hf_aux._moved import MOVED

    for old in OLD_PATHS:  # served by the one table, not by a file (CHANGELOG.md names each move)
        assert not (ROOT.parent / (old.replace(".", "/") + ".py")).exists()
        assert f"hf_aux.{MOVED[old[len('hf_aux.'):]]}" == OLD_PATHS[old]
    changelog = (ROOT.parent / "CHANGELOG.md").read_text()
    assert all(f"`{old}`" in changelog or f"`{old}," in changelog for old in OLD_PATHS)


@pytest.mark.parametrize("old_import", [
    "from hf_aux.trainers.muppet import MuppetConfig, MuppetTrainer",
    "from hf_aux.modeling.amos import AmosModel",
    "from hf_aux.sampling import TaskBatchSampler",
    "from hf_aux.base_config import TokenSafeTrainingArguments",
    "from hf_aux.tasks import load_mixture, load_task_splits, TaskSpec",
])
def test_documented_imports_still_work(old_import):
    subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", old_import], check=True)


def type_checking_imports(path) -> dict[str, str]:
    """name -> module (relative, as written) of the `if TYPE_CHECKING:` block of `path`."""
    tree = ast.parse(path.read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") ==
                 "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body for alias in node.names}


def test_the_type_checking_imports_name_every_public_name():
    """The shared names in hf_aux/__init__.py, each method's in its own __init__.py (no edit of the root)."""
    shared = type_checking_imports(ROOT / "__init__.py")
    by_record = {name: record for record in registry.methods() for name in record.exports}
    assert set(shared) | set(by_record) == set(hf_aux.__all__) - {"__version__"} and not set(shared) & set(by_record)
    assert {name: hf_aux._LAZY_NAMES[name] for name in shared} == shared
    for record in registry.methods():
        if record.exports:
            assert type_checking_imports(ROOT / record.package / "__init__.py") == record.exports, record.package


def test_the_shared_core_is_three_rooms_and_method_only_code_is_home():
    """hf_aux's top level holds packages and four small modules; the META rule and its settings live in tartan/,
    the probe in amos/ (a newcomer changing TARTAN's weighting opens one folder)."""
    top = sorted(path.name for path in ROOT.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "_moved.py", "_versions.py", "errors.py", "registry.py"]
    assert {"tasks", "runtime", "cards", "modeling", "cli", "compare", "finetune", *METHODS} <= {
        path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()}
    assert (ROOT / "tartan" / "weighting.py").is_file() and (ROOT / "amos" / "probe.py").is_file()
    defined = {path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*.py")
               if "class MetaWeightingArguments" in path.read_text() or "def meta_update(" in path.read_text()}
    assert defined and all(name.startswith("tartan/") for name in defined), defined


def test_no_module_over_800_lines_and_no_function_over_100():
    assert [path.name for path in ROOT.rglob("*.py") if len(path.read_text().splitlines()) > 800] == []
    long = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100:
                long.append(f"{path.relative_to(ROOT)}:{node.name} {node.end_lineno - node.lineno + 1}")
    assert long == []


FILE_FORMAT_DOCSTRINGS = {"modeling/multitask.py", "modeling/export.py", "runtime/run_guard.py"}  # they own a layout


def test_no_docstring_or_comment_block_over_20_lines():
    """Measurements live in docs/; code keeps why. Three module docstrings describe a file layout they own."""
    long = []
    for path in ROOT.rglob("*.py"):
        name, source = path.relative_to(ROOT).as_posix(), path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                docstring = ast.get_docstring(node, clean=False) or ""
                if docstring.count("\n") >= 20 and not (isinstance(node, ast.Module) and
                                                        name in FILE_FORMAT_DOCSTRINGS):
                    long.append(f"{name}:{getattr(node, 'name', 'module')}")
        run = 0
        for number, line in enumerate(source.splitlines() + [""], 1):
            run = run + 1 if line.lstrip().startswith("#") else 0
            if run == 21:
                long.append(f"{name}:{number} comments")
    assert long == []


FIFTH = {  # a new method's folder, as small as the layout allows
    "__init__.py": """from typing import TYPE_CHECKING

from ..registry import Method, Paper

METHOD = Method(package="fifth", command="fifth", summary="a fifth method (tests/test_layout.py)",
                card_name="the fifth method", card_template="fifth.md",
                paper=Paper(title="Fifth", authors="A. Author", venue="nowhere", year=2026, arxiv_id=None,
                            bibtex="@misc{fifth, title = {Fifth}}", url="https://example.org/fifth"),
                exports={"FifthConfig": "config", "FifthTrainer": "trainer"},
                config_class="FifthConfig", trainer_class="FifthTrainer")

if TYPE_CHECKING:
    from .config import FifthConfig
    from .trainer import FifthTrainer
""",
    "config.py": "from dataclasses import dataclass\n\nfrom ..runtime.config import AuxConfig\n\n\n"
                 "@dataclass\nclass FifthConfig(AuxConfig):\n    weight: float = 1.0\n",
    "trainer.py": "from ..runtime.trainer import AuxTrainer\nfrom . import METHOD\n\n\n"
                  "class FifthTrainer(AuxTrainer):\n    _method = METHOD\n",
    "losses.py": "def fifth_loss(loss, weight):\n    return weight * loss\n",
    "command.py": "from transformers import HfArgumentParser\n\nfrom .config import FifthConfig\n\n\n"
                  "def make_parser():\n    return HfArgumentParser((FifthConfig,))\n\n\n"
                  "def parse_args(argv=None):\n    return make_parser().parse_args_into_dataclasses(argv)\n\n\n"
                  "def main(argv=None):\n    print('fifth', parse_args(argv)[0].weight)\n",
    "demo.yaml": "weight: 2.0\n",
}
NEW_METHOD_PROBE = """import hf_aux
from hf_aux import FifthConfig, FifthTrainer, registry
from hf_aux.cards.model_card import render_model_card
from hf_aux.__main__ import usage
assert hf_aux.__file__.startswith({root!r}), hf_aux.__file__
assert registry.method("fifth").load("FifthTrainer") is FifthTrainer and FifthTrainer._method.command == "fifth"
assert "  fifth      a fifth method" in usage()
card = render_model_card("fifth", model_name="m", tasks=[])
assert "the fifth method" in card.content and "hf_aux" in card.data.tags and "fifth" in card.data.tags
print("ok")
"""


def test_a_new_method_is_its_folder_plus_two_edits(tmp_path):
    """Issue #62: in a copy of the repository, a fifth method made of its folder and exactly two edits outside it
    (its name in METHOD_PACKAGES, its card template) is a command, public names, a card and a shipped package, and
    this file's layout checks and the card tests (which derive their method lists from the registry) pass on it."""
    repo = tmp_path / "repo"
    for name in ("hf_aux", "model_cards", "tests", "run_scripts"):
        shutil.copytree(ROOT.parent / name, repo / name, ignore=shutil.ignore_patterns("__pycache__", "data"))
    for name in ("setup.cfg", "setup.py", "README.md", "CHANGELOG.md", "pyproject.toml"):
        shutil.copy(ROOT.parent / name, repo / name)
    (repo / "hf_aux" / "fifth").mkdir()
    for name, text in FIFTH.items():
        (repo / "hf_aux" / "fifth" / name).write_text(text)
    registry_file = repo / "hf_aux" / "registry.py"  # edit 1: the record's name
    old = '"meta_lm", "finetune")'
    assert old in registry_file.read_text()
    registry_file.write_text(registry_file.read_text().replace(old, '"meta_lm", "fifth", "finetune")'))
    shutil.copy(repo / "model_cards" / "finetune.md", repo / "model_cards" / "fifth.md")  # edit 2: its card
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(repo),
                            "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("hf_aux-*.whl")
    assert {"hf_aux/fifth/__init__.py", "hf_aux/fifth/demo.yaml", "hf_aux/model_cards/fifth.md"} <= set(
        zipfile.ZipFile(wheel).namelist())  # setup.py finds the folder, setup.cfg ships every demo.yaml
    # the templates as the wheel ships them, hf_aux.model_cards (setup.cfg's package_dir): not an editable install's
    (repo / "hf_aux" / "model_cards").symlink_to(repo / "model_cards", target_is_directory=True)
    changed = subprocess.run(["diff", "-rq", str(ROOT.parent / "hf_aux"), str(repo / "hf_aux"), "-x", "__pycache__",
                              "-x", "model_cards"],
                             capture_output=True, text=True).stdout.splitlines()
    assert sorted(changed) == sorted([f"Only in {repo / 'hf_aux'}: fifth", f"Files {ROOT / 'registry.py'} and "
                                      f"{registry_file} differ"])
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run([sys.executable, "-c", NEW_METHOD_PROBE.format(root=str(repo))], env=env, cwd=repo,
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "ok", probe.stderr[-3000:]
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_layout.py",
                            "tests/test_model_card.py", "-k", "one_folder or command_table or type_checking or "
                            "card_metadata or declares_its_card", "--deselect",
                            "tests/test_layout.py::test_a_new_method_is_its_folder_plus_two_edits"],
                           env=env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert suite.returncode == 0 and "fifth" not in suite.stdout.split("passed")[0][-200:], suite.stdout[-3000:]
    assert "passed" in suite.stdout and "failed" not in suite.stdout, suite.stdout[-3000:]


def dynamic_imports(path, known: dict) -> set[str]:
    """The hf_aux modules a file imports through importlib or __import__ by name: a literal argument, or a literal
    module path in a file that calls importlib (a table of commands, say). Names computed from the records (the
    registry's discovery, `hf_aux`'s lazy names, the old-path table) are checked on their own below."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) in (
            "import_module", "__import__"))]
    if not calls:
        return set()
    literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return {name for name in literals if name in known and name != "hf_aux"}


def room(module: str) -> str:
    """A module's room: its folder under hf_aux/ (hf_aux.tasks.data: tasks), or the top-level module itself; a
    method's record (its package's __init__, which imports only the registry) is a room of its own."""
    parts = module.split(".")
    if len(parts) == 1:
        return "hf_aux"
    if len(parts) == 2 and parts[1] in registry.METHOD_PACKAGES:
        return f"{parts[1]}.record"
    return parts[1]


def test_the_rooms_import_only_downward():
    """Issue #62: no folder (or top-level module) imports, directly or through others, one that imports it back:
    imports anywhere in a file count (module level, in a function, through importlib by a literal name), so
    every import points down a fixed order of floors and none climbs back up."""
    known = {name: path for name, path in module_names().items() if name not in OLD_PATHS}
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = imported_modules(name, path, known) | dynamic_imports(path, known)
        graph.setdefault(room(name), set()).update(room(t) for t in targets if room(t) != room(name))
    from test_import_graph import find_cycle

    assert {"tasks", "runtime", "cards", "muppet", "muppet.record", "registry"} <= set(graph)
    assert "runtime" in graph["muppet"] and "tasks" in graph["runtime"]  # reads imports both ways
    assert find_cycle(graph) is None
    for record in registry.methods():  # the registry imports only the records, and they nothing but the registry
        init = ROOT / record.package / "__init__.py"
        assert imported_modules(record.module, init, known) <= {"hf_aux.registry", *(
            f"hf_aux.{other}" for other in registry.METHOD_PACKAGES)}, record.package
