"""Tasks by name (issue #33 items 1-2): the registry (hf_aux.tasks.registry), its preprocessing steps
(hf_aux.tasks.preprocessing), `hf-aux tasks`, and a mixture of registry names, local files and a token classification
task trained and evaluated offline. The Hub is unreachable here, so registry tasks are backed by local stand-ins with
the real datasets' column layouts and features (nyu-mll/glue's rte config, allenai/openbookqa, tomaarsen/conll2003),
loaded by `datasets.load_dataset` from a local folder: the path a Hub id takes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import yaml
from tiny import COMMAND_WORDS, write_command_data

from hf_aux.tasks import registry as task_registry
from hf_aux.tasks.preprocessing import apply_steps, check_steps
from hf_aux.tasks.spec import TaskSpec
from hf_aux.tasks.loading import load_mixture, load_task_splits, task_from_entry

HF_AUX = str(Path(sys.executable).parent / "hf-aux")
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
CONVERTER = Path(__file__).resolve().parents[1] / "tools" / "convert_tasksource.py"


def hf_aux_command(*args, env=None, cwd=None):
    return subprocess.run([HF_AUX, *args], capture_output=True, text=True, env=env or OFFLINE, cwd=cwd, timeout=600)


# ---- local stand-ins with the Hub datasets' layouts -----------------------------------------------------------
def _sentence(rng, k=5):
    return " ".join(rng.choices(COMMAND_WORDS, k=k))


def write_parquet_dataset(folder: Path, splits: dict, features, config: str | None = None) -> None:
    """A dataset folder as the Hub stores a converted dataset: <config>/<split>-00000-of-00001.parquet with a README
    whose `configs:` names the config (nyu-mll/glue), or data/<split>-... for a dataset without configs."""
    part = config or "data"
    (folder / part).mkdir(parents=True, exist_ok=True)
    for split, columns in splits.items():
        datasets.Dataset.from_dict(columns, features=features).to_parquet(
            str(folder / part / f"{split}-00000-of-00001.parquet"))
    if config:
        files = "".join(f"  - split: {split}\n    path: {config}/{split}-*\n" for split in splits)
        (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: {config}\n  data_files:\n{files}---\n")


def write_glue_rte(folder: Path, rng) -> None:
    """nyu-mll/glue, config rte: sentence1, sentence2, label (ClassLabel entailment / not_entailment), idx; the test
    split's labels are hidden (-1), as on the Hub."""
    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["entailment", "not_entailment"]),
                                  "idx": datasets.Value("int32")})
    sizes = {"train": 24, "validation": 8, "test": 6}
    write_parquet_dataset(folder, {split: {
        "sentence1": [_sentence(rng, 8) for _ in range(n)], "sentence2": [_sentence(rng) for _ in range(n)],
        "label": [-1] * n if split == "test" else [i % 2 for i in range(n)], "idx": list(range(n))}
        for split, n in sizes.items()}, features, config="rte")


def write_openbookqa(folder: Path, rng) -> None:
    """allenai/openbookqa: id, question_stem, choices {text, label}, answerKey (a letter)."""
    features = datasets.Features({"id": datasets.Value("string"), "question_stem": datasets.Value("string"),
                                  "choices": {"text": datasets.Sequence(datasets.Value("string")),
                                              "label": datasets.Sequence(datasets.Value("string"))},
                                  "answerKey": datasets.Value("string")})
    splits = {}
    for split, n in (("train", 16), ("validation", 8), ("test", 4)):
        splits[split] = {"id": [f"{split}-{i}" for i in range(n)],
                         "question_stem": [_sentence(rng) for _ in range(n)],
                         "choices": [{"text": [_sentence(rng, 3) for _ in range(4)], "label": list("ABCD")}
                                     for _ in range(n)],
                         "answerKey": [rng.choice("ABCD") for _ in range(n)]}
    write_parquet_dataset(folder, splits, features)


CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def write_conll2003(folder: Path, rng) -> None:
    """tomaarsen/conll2003: id, tokens, pos_tags, chunk_tags, ner_tags (Sequence(ClassLabel))."""
    features = datasets.Features({
        "id": datasets.Value("string"), "tokens": datasets.Sequence(datasets.Value("string")),
        "pos_tags": datasets.Sequence(datasets.ClassLabel(names=["NN", "VB", "DT"])),
        "chunk_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-NP", "I-NP"])),
        "ner_tags": datasets.Sequence(datasets.ClassLabel(names=CONLL_TAGS))})
    splits = {}
    for split, n in (("train", 16), ("validation", 8), ("test", 4)):
        tokens = [rng.choices(COMMAND_WORDS, k=rng.randint(3, 7)) for _ in range(n)]
        splits[split] = {"id": [str(i) for i in range(n)], "tokens": tokens,
                         "pos_tags": [[rng.randrange(3) for _ in t] for t in tokens],
                         "chunk_tags": [[rng.randrange(3) for _ in t] for t in tokens],
                         "ner_tags": [[rng.randrange(len(CONLL_TAGS)) for _ in t] for t in tokens]}
    write_parquet_dataset(folder, splits, features)


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("standins")
    rng = random.Random(0)
    write_glue_rte(folder / "glue", rng)
    write_openbookqa(folder / "openbookqa", rng)
    write_conll2003(folder / "conll2003", rng)
    write_command_data(folder, "hf-aux-tests/tiny-bert")  # tiny_bert/ and train/validation.jsonl (text, label)
    return folder


def write_mixture(folder: Path, with_tokens: bool = True) -> Path:
    """Registry names backed by the stand-ins (dataset_name: a local folder, relative to the mixture file), a local
    file task and (with_tokens) a token classification task from the registry."""
    tasks = [{"task": "glue/rte", "dataset_name": "glue"},
             {"task": "openbookqa", "name": "obqa", "dataset_name": "openbookqa"},
             {"name": "reviews", "kind": "classification", "num_labels": 2,
              "data_files": {"train": "train.jsonl", "validation": "validation.jsonl"}}]
    if with_tokens:
        tasks.append({"task": "conll2003/ner_tags", "name": "ner", "dataset_name": "conll2003"})
    path = folder / ("mixture.yaml" if with_tokens else "mixture_no_tokens.yaml")
    path.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    return path


# ---- the registry ---------------------------------------------------------------------------------------------
def test_hf_aux_tasks_lists_at_least_100_ready_tasks_whose_definitions_parse_offline():
    done = hf_aux_command("tasks")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) >= 100
    names = [line.split()[0] for line in lines]
    assert all(len(line.split()) == 3 for line in lines)  # name, kind, dataset[/config]
    assert {"glue/rte", "glue/mnli", "conll2003/ner_tags", "openbookqa", "demo/imdb"} <= set(names)
    assert names == list(task_registry.ready_tasks())
    complete, classes_from_data = 0, 0
    for name in names:
        task = task_registry.find_task(name)
        assert line_kind(lines, name) == task.kind
        if task.demo_name:
            continue
        entry = task_registry.registry_entry({"task": name}, ".")
        if task.classes_from_data:  # the classes come with the data; every other field is checked here
            TaskSpec.from_dict({**entry, "num_labels": 2})
            classes_from_data += 1
        else:
            assert TaskSpec.from_dict(entry).kind == task.kind
            complete += 1
    assert complete >= 100 and classes_from_data >= 100, (complete, classes_from_data)
    everything = hf_aux_command("tasks", "--all").stdout.splitlines()
    not_ready = [line for line in everything if "NOT READY: " in line]
    assert len(everything) == len(task_registry.registry_tasks()) and len(not_ready) == len(everything) - len(lines)
    assert any("NOT READY: sentence1 is Python code" in line for line in not_ready)


def test_a_listing_piped_into_head_ends_quietly():
    """`hf-aux tasks | head -1`: the reader has closed the pipe; the command stops as a Unix tool does (the shell's
    141), without a traceback. The read end is closed before the command writes, so the test has no race."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([HF_AUX, "tasks"], stdout=write, stderr=subprocess.PIPE, text=True, env=OFFLINE,
                              timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_listing_and_showing_tasks_import_neither_torch_nor_datasets():
    probe = ("import contextlib, io, sys\nfrom hf_aux.__main__ import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    main(['tasks']); main(['tasks', 'glue/rte'])\n"
             "print(' '.join(m for m in ('torch', 'datasets', 'transformers.trainer') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=OFFLINE, check=True)
    assert done.stdout.split() == []


def line_kind(lines, name):
    return next(line.split()[1] for line in lines if line.split()[0] == name)


def test_hf_aux_tasks_name_prints_a_mixture_entry_that_loads(standins, tmp_path):
    done = hf_aux_command("tasks", "glue/rte")
    assert done.returncode == 0, done.stderr
    assert "tasksource 0.1.1" in done.stdout and "CC BY 4.0" in done.stdout and "licence of the data" in done.stdout
    (entry,) = yaml.safe_load(done.stdout)["tasks"]
    assert entry == {"task": "glue/rte", "name": "glue_rte", "kind": "classification", "dataset_name": "nyu-mll/glue",
                     "dataset_config": "rte", "text_columns": ["sentence1", "sentence2"], "label_column": "label",
                     "validation_fraction": 0.1, "preprocessing": [{"drop_unlabelled": "label"}]}
    entry["dataset_name"] = str(standins / "glue")  # the stand-in for the Hub dataset, the same load_dataset call
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump({"tasks": [entry]}))
    (task,) = load_mixture(tmp_path / "mix.yaml")
    assert task.label_names == ["entailment", "not_entailment"]  # from the ClassLabel feature
    splits = load_task_splits(task)
    # the test split's labels are all hidden (-1): drop_unlabelled leaves it out
    assert {name: len(rows) for name, rows in splits.items()} == {"train": 24, "validation": 8}
    demo = hf_aux_command("tasks", "demo/newsgroups")
    assert yaml.safe_load(demo.stdout) == {"tasks": [{"task": "demo/newsgroups"}]}


def test_an_unknown_name_gets_the_closest_names_and_a_task_not_ready_its_reason(tmp_path):
    done = hf_aux_command("tasks", "glue/rtee")
    assert done.returncode == 2 and "closest: glue/rte" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(ValueError, match=r"task 'super_glue/boolk': field 'task': unknown registry task \(closest: "
                                         r"super_glue/boolq"):
        task_from_entry({"task": "super_glue/boolk"}, tmp_path)
    with pytest.raises(ValueError, match=r"task 'super_glue/wic'.*not ready in hf_aux: sentence1 is Python code"):
        task_from_entry({"task": "super_glue/wic"}, tmp_path)
    with pytest.raises(ValueError, match=r"field 'max_train_sample': unknown field of registry task 'glue/rte'"):
        task_from_entry({"task": "glue/rte", "max_train_sample": 3}, tmp_path)


def test_a_task_file_may_name_a_registry_task(standins):
    from hf_aux.tasks.loading import task_from_file

    (standins / "rte.yaml").write_text("task: glue/rte\ndataset_name: glue\nmax_train_samples: 5\n")
    task = task_from_file(standins / "rte.yaml", name="rte")  # as hf-aux finetune --task_file reads it
    assert (task.name, task.dataset_name, task.dataset_config, task.max_train_samples) == (
        "rte", str(standins / "glue"), "rte", 5)


def test_registry_names_clash_with_the_existing_unique_name_error(standins):
    path = standins / "twice.yaml"
    clash = {"name": "glue_rte", "kind": "regression", "data_files": "train.jsonl"}
    path.write_text(yaml.safe_dump({"tasks": [{"task": "glue/rte", "dataset_name": "glue"}, clash]}))
    with pytest.raises(ValueError, match="task 'glue_rte': field 'name': appears twice in the mixture"):
        load_mixture(path)


def test_demo_tasks_are_registry_entries():
    from hf_aux.tasks.demo import DEMO_TASK_NAMES, DEMO_TASK_SOURCES, demo_task

    assert list(DEMO_TASK_SOURCES) == list(DEMO_TASK_NAMES)
    by_name = task_from_entry({"task": "demo/newsgroups", "name": "ng", "max_train_samples": 10}, ".")
    by_demo = task_from_entry({"demo": "newsgroups", "name": "ng", "max_train_samples": 10}, ".")
    assert by_name == by_demo and by_name.dataset["train"]["text"] == by_demo.dataset["train"]["text"]
    for name in ("newsgroups", "chatterbot_answer_selection"):  # the table's kind is the built task's
        assert demo_task(name, max_train_samples=2).kind == task_registry.find_task(f"demo/{name}").kind


def test_registry_token_classification_task_reads_its_tags_from_the_sequence_classlabel(standins):
    task = task_from_entry({"task": "conll2003/ner_tags", "dataset_name": "conll2003"}, standins)
    assert (task.name, task.kind, task.tokens_column, task.tags_column) == (
        "conll2003_ner_tags", "token_classification", "tokens", "ner_tags")
    assert task.label_names == CONLL_TAGS
    assert len(load_task_splits(task)["train"]) == 16


def test_openbookqa_choices_from_a_nested_field_and_answer_keys_as_indices(standins):
    task = task_from_entry({"task": "openbookqa", "dataset_name": "openbookqa"}, standins)
    splits = load_task_splits(task)
    raw = datasets.load_dataset(str(standins / "openbookqa"))
    assert splits["train"]["choices"] == [row["text"] for row in raw["train"]["choices"]]
    assert splits["train"]["answerKey"] == ["ABCD".index(key) for key in raw["train"]["answerKey"]]


# ---- preprocessing steps, against hand-computed results ---------------------------------------------------------
def test_preprocessing_steps_against_hand_computed_rows():
    data = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"a": ["x", "y", None], "b": ["1", " 2", "3"], "c": ["p", "q", "r"],
                                             "s": [{"t": ["u", "v"]}, {"t": ["w", "z"]}, {"t": ["k", "l"]}],
                                             "y": ["B", "A", "C"], "n": [1, -1, 3]}),
        "test": datasets.Dataset.from_dict({"a": ["m"], "b": ["n"], "c": ["o"], "s": [{"t": ["e", "f"]}],
                                            "y": ["C"], "n": [-1]})})
    steps = [{"join": ["a", "b"], "into": "ab", "separator": " | "}, {"gather": ["b", "c"], "into": "bc"},
             {"field": "s.t", "into": "st"}, {"index_labels": "y"}, {"map_labels": {"1": 0, "3": 1, "-1": 2},
                                                                  "column": "n"}]
    check_steps("t", steps)
    out = apply_steps("t", steps, data)
    assert out["train"]["ab"] == ["x | 1", "y |  2", "3"]  # null values are left out, the result stripped
    assert out["train"]["bc"] == [["1", "p"], [" 2", "q"], ["3", "r"]]
    assert out["train"]["st"] == [["u", "v"], ["w", "z"], ["k", "l"]]
    assert out["train"]["y"] == [1, 0, 2] and out["test"]["y"] == [2]  # A, B, C over every split
    assert out["train"]["n"] == [0, 2, 1]
    dropped = apply_steps("t", [{"drop_unlabelled": "n"}], data)
    assert list(dropped) == ["train"] and dropped["train"]["n"] == [1, 3]  # the emptied test split is left out


@pytest.mark.parametrize("steps, message", [
    ({"join": ["a"]}, "must be a list of steps"),
    ([{"join": ["a"], "gather": ["b", "c"], "into": "x"}], r"step 0 needs exactly one operation"),
    ([{"join": ["a", "b"]}], r"step 0 \(join\): needs 'into'"),
    ([{"gather": ["a"], "into": "x"}], r"step 0 \(gather\): needs a list of column names"),
    ([{"drop_unlabelled": "y"}, {"field": "s", "into": "x"}], r"step 1 \(field\): needs a dotted path"),
    ([{"map_labels": {"a": -1}, "column": "y"}], r"step 0 \(map_labels\): needs a mapping"),
    ([{"index_labels": "y", "into": "z"}], r"step 0 \(index_labels\): unknown key 'into'"),
])
def test_a_bad_step_is_an_error_naming_the_task_field_and_step(steps, message):
    with pytest.raises(ValueError, match=rf"task 't': field 'preprocessing': {message}"):
        TaskSpec(name="t", kind="regression", data_files="x.csv", preprocessing=steps)


def test_a_step_on_a_missing_column_names_it_and_the_split():
    data = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"a": ["x"]})})
    with pytest.raises(ValueError, match=r"task 't': field 'preprocessing': step 0 \(join\): column 'b' not in the "
                                         r"train data"):
        apply_steps("t", [{"join": ["a", "b"], "into": "c"}], data)
    with pytest.raises(ValueError, match=r"step 0 \(map_labels\): train row 1: label 'x' is not one of \['y'\]"):
        apply_steps("t", [{"map_labels": {"y": 0}, "column": "a"}], data)


# ---- training and pre-downloading a mixture -------------------------------------------------------------------
def test_a_mixture_of_registry_names_local_files_and_token_classification_trains_and_evaluates(standins, tmp_path):
    mixture = write_mixture(standins)
    out = tmp_path / "run"
    done = hf_aux_command("muppet", "--mixture_file", str(mixture), "--model_name_or_path",
                          str(standins / "tiny_bert"), "--output_dir", str(out), "--do_train", "--do_eval",
                          "--max_steps", "4", "--max_seq_length", "16", "--per_device_train_batch_size", "4",
                          "--per_device_eval_batch_size", "4", "--report_to", "none", "--disable_tqdm", "true",
                          "--use_cpu", "--logging_steps", "1", "--save_strategy", "no")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    results = json.loads((out / "all_results.json").read_text())
    for name in ("glue_rte", "obqa", "reviews", "ner"):
        assert any(key.startswith(f"eval_{name}_") for key in results), (name, sorted(results))
    config = json.loads((out / "multitask_config.json").read_text())
    heads = {task["name"]: task for task in config["tasks"]}
    assert heads["glue_rte"]["label_names"] == ["entailment", "not_entailment"]
    assert heads["ner"]["label_names"] == CONLL_TAGS


def test_download_loads_every_task_of_a_mixture_into_the_datasets_cache(standins, tmp_path):
    mixture = write_mixture(standins, with_tokens=False)
    cache = tmp_path / "cache"
    done = hf_aux_command("tasks", "--download", str(mixture), env={**OFFLINE, "HF_DATASETS_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("glue_rte: train 24, validation 8 rows") and lines[1].startswith("obqa: train 16")
    assert lines[2].startswith("reviews: train 24, validation 8 rows")
    assert lines[-1] == f"3 tasks of {mixture} are in the datasets cache {cache}"
    cached = {path.name for path in cache.iterdir()}
    assert any("glue" in name for name in cached) and any("openbookqa" in name for name in cached)
    assert any(path.suffix == ".arrow" for path in cache.rglob("*"))


# ---- the converter --------------------------------------------------------------------------------------------
def test_the_shipped_registry_is_what_the_converter_writes(tmp_path):
    """Where tasksource is installed (not in CI: hf_aux never needs it), converting again gives the shipped file."""
    pytest.importorskip("tasksource")
    done = subprocess.run([sys.executable, str(CONVERTER), "--output", str(tmp_path / "t.json")],
                          capture_output=True, text=True, env=OFFLINE, timeout=600)
    assert done.returncode == 0, done.stderr
    shipped = task_registry.DATA_FOLDER / "tasksource.json"
    assert json.loads((tmp_path / "t.json").read_text()) == json.loads(shipped.read_text())


def test_hf_aux_tasks_search_finds_tasks_by_name_kind_dataset_or_description(capsys):
    """`hf-aux tasks --search WORD` lists the tasks whose name, kind, dataset or description holds every word;
    `hf-aux tasks nli` (not a task name) points at it; no match is exit 1 with a line saying what was searched."""
    from hf_aux.cli import tasks as tasks_command

    tasks_command.main(["--search", "nli"])
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"glue/mnli", "snli", "anli/a1"} <= set(names) and all(task_registry.find_task(n).ready for n in names)
    tasks_command.main(["--search", "Sentiment TWEET"])  # every word, case ignored
    assert "tweet_eval/sentiment" in capsys.readouterr().out
    tasks_command.main(["--search", "token_classification"])
    assert {line.split()[1] for line in capsys.readouterr().out.splitlines()} == {"token_classification"}
    described = next(task for task in task_registry.ready_tasks().values() if task.provenance.get("question"))
    word = max(described.provenance["question"].split(), key=len)
    tasks_command.main(["--search", word])
    assert described.name in capsys.readouterr().out.split()
    with pytest.raises(SystemExit) as stopped:
        tasks_command.main(["--search", "no-such-word-anywhere"])
    assert stopped.value.code == 1 and "no ready task matches 'no-such-word-anywhere'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tasks_command.main(["nli"])
    assert "hf-aux tasks --search <word>" in capsys.readouterr().err


def test_a_hub_task_missing_from_the_cache_offline_points_at_tasks_download(tmp_path, monkeypatch):
    """Offline, a mixture naming a registry task whose data is not in the datasets cache says so and how to put it
    there (`hf-aux tasks --download <mixture file>`)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty_cache")
    assert datasets.config.HF_HUB_OFFLINE  # tests run offline (conftest)
    (tmp_path / "mix.yaml").write_text("tasks:\n  - task: glue/rte\n")
    with pytest.raises(ValueError, match=r"task 'glue_rte': field 'dataset_name': could not load 'nyu-mll/glue' "
                                         r"\(config 'rte'\).*Offline.*datasets cache.*empty_cache.*"
                                         r"`hf-aux tasks --download <mixture file>`"):
        load_mixture(tmp_path / "mix.yaml")
