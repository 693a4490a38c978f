import json

import datasets
import pytest
import yaml

from hf_aux.tasks.loading import TaskSpec, load_mixture, load_task_splits


def sentiment_data(labels=(0, 1, 1, 0)):
    return datasets.Dataset.from_dict({"text": ["good", "bad", "great", "awful"][: len(labels)], "label": list(labels)})


# Each malformed description must raise a ValueError naming the task and the offending field.
MALFORMED = [
    (dict(name="t1", kind="ranking", dataset=sentiment_data()), "t1", "kind"),
    (dict(name="t2", kind="classification", dataset=sentiment_data()), "t2", "num_labels"),
    (dict(name="t3", kind="classification", num_labels=1, dataset=sentiment_data()), "t3", "num_labels"),
    (dict(name="t4", kind="classification", num_labels=3, label_names=["a", "b"], dataset=sentiment_data()), "t4", "num_labels"),
    (dict(name="t5", kind="classification", label_names=["a", "a"], dataset=sentiment_data()), "t5", "label_names"),
    (dict(name="t6", kind="classification", num_labels=2), "t6", "dataset_name"),
    (dict(name="t7", kind="classification", num_labels=2, dataset_name="x/y", data_files="a.csv"), "t7", "dataset_name"),
    (dict(name="t8", kind="classification", num_labels=2, data_files="data.txt"), "t8", "data_files"),
    (dict(name="t9", kind="classification", num_labels=2, text_columns=["a", "b", "c"], dataset=sentiment_data()), "t9", "text_columns"),
    (dict(name="t10", kind="regression", label_names=["x"], dataset=sentiment_data()), "t10", "label_names"),
    (dict(name="t11", kind="multiple_choice", num_labels=4, dataset=sentiment_data()), "t11", "num_labels"),
    (dict(name="t12", kind="extractive_qa", question_column=None, dataset=sentiment_data()), "t12", "question_column"),
    (dict(name="t13", kind="classification", num_labels=2, validation_fraction=1.5, dataset=sentiment_data()), "t13", "validation_fraction"),
    (dict(name="t14", kind="classification", num_labels=2, max_train_samples=0, dataset=sentiment_data()), "t14", "max_train_samples"),
    (dict(name="a/b", kind="classification", num_labels=2, dataset=sentiment_data()), "a/b", "name"),
    (dict(name="t16", kind="classification", num_labels=2, data_files={"train": "a.csv", "validation": "b.json"}), "t16", "data_files"),
]


@pytest.mark.parametrize("spec,task,field", MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_task_descriptions_name_task_and_field(spec, task, field):
    with pytest.raises(ValueError) as error:
        TaskSpec(**spec)
    assert f"task '{task}'" in str(error.value)
    assert f"field '{field}'" in str(error.value)


def test_unknown_and_missing_fields_in_a_dict():
    with pytest.raises(ValueError, match=r"task 'x': field 'lable_column'"):
        TaskSpec.from_dict({"name": "x", "kind": "classification", "num_labels": 2, "lable_column": "y"})
    with pytest.raises(ValueError, match=r"task 'x': field 'kind': is required"):
        TaskSpec.from_dict({"name": "x"})


BAD_DATA = [
    (dict(kind="classification", num_labels=2), {"text": ["a", "b"], "label": [0, 2]}, "label_column", "out of range"),
    (dict(kind="classification", label_names=["neg", "pos"]), {"text": ["a"], "label": ["neutral"]}, "label_column", "not one of"),
    (dict(kind="classification", num_labels=2), {"sentence": ["a"], "label": [0]}, "text_columns", "column 'text'"),
    (dict(kind="classification", num_labels=2), {"text": [], "label": []}, "train_split", "empty"),
    (dict(kind="regression"), {"text": ["a"], "label": [float("nan")]}, "label_column", "finite"),
    (dict(kind="multiple_choice", question_column=None), {"choices": [["a", "b"]], "label": [2]}, "label_column", "out of range"),
    (dict(kind="multiple_choice", question_column=None), {"choices": [["a"]], "label": [0]}, "choices_column", "at least 2"),
    (dict(kind="extractive_qa"), {"question": ["q"], "context": ["abc"], "answers": [{"text": ["zz"], "answer_start": [0]}]},
     "answers_column", "not at character"),
    (dict(kind="seq2seq"), {"source": ["a"]}, "target_column", "column 'target'"),
]


@pytest.mark.parametrize("spec,rows,field,message", BAD_DATA, ids=[b[2] + "-" + b[3] for b in BAD_DATA])
def test_bad_data_names_task_and_field(spec, rows, field, message):
    task = TaskSpec(name="bad", dataset=datasets.Dataset.from_dict(rows), **spec)
    with pytest.raises(ValueError) as error:
        load_task_splits(task)
    assert "task 'bad'" in str(error.value) and f"field '{field}'" in str(error.value)
    assert message in str(error.value)


def test_local_files_and_deterministic_validation_split(tmp_path):
    rows = [{"text": f"review {i}", "label": i % 2} for i in range(50)]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    task = TaskSpec(name="local", kind="classification", num_labels=2, data_files=str(tmp_path / "train.jsonl"),
                    validation_fraction=0.2)
    first, second = load_task_splits(task, seed=3), load_task_splits(task, seed=3)
    assert set(first) == {"train", "validation"}
    assert len(first["validation"]) == 10 and len(first["train"]) == 40
    assert first["validation"]["text"] == second["validation"]["text"]
    assert load_task_splits(task, seed=4)["validation"]["text"] != first["validation"]["text"]
    assert not set(first["validation"]["text"]) & set(first["train"]["text"])


def test_missing_local_file_is_named(tmp_path):
    task = TaskSpec(name="gone", kind="classification", num_labels=2, data_files=str(tmp_path / "nope.csv"))
    with pytest.raises(ValueError, match=r"task 'gone': field 'data_files'.*does not exist"):
        load_task_splits(task)


def test_mixture_file_yaml_and_json(tmp_path):
    (tmp_path / "a.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    mixture = {"tasks": [
        {"name": "sentiment", "kind": "classification", "label_names": ["neg", "pos"], "data_files": "a.csv"},
        {"name": "summaries", "kind": "seq2seq", "dataset_name": "some/hub-dataset"},
    ]}
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(mixture))
    (tmp_path / "mix.json").write_text(json.dumps(mixture))
    for name in ("mix.yaml", "mix.json"):
        tasks = load_mixture(tmp_path / name)
        assert [t.name for t in tasks] == ["sentiment", "summaries"]
        assert tasks[0].data_files == str(tmp_path / "a.csv")  # resolved against the mixture file's folder
        splits = load_task_splits(tasks[0])
        assert splits["train"]["label"] == ["pos", "neg"]
    assert TaskSpec.from_dict(tasks[0].to_dict()) == tasks[0]


def test_mixture_rejects_duplicates_and_empty(tmp_path):
    task = {"name": "same", "kind": "regression", "dataset_name": "x/y"}
    (tmp_path / "dup.json").write_text(json.dumps({"tasks": [task, task]}))
    with pytest.raises(ValueError, match=r"task 'same': field 'name': appears twice"):
        load_mixture(tmp_path / "dup.json")
    (tmp_path / "empty.json").write_text(json.dumps({"tasks": []}))
    with pytest.raises(ValueError, match="non-empty list under 'tasks'"):
        load_mixture(tmp_path / "empty.json")


def test_unreachable_hub_dataset_names_task_and_field(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = TaskSpec(name="remote", kind="classification", num_labels=2, dataset_name="no-such-user/no-such-dataset")
    with pytest.raises(ValueError, match=r"task 'remote': field 'dataset_name': could not load 'no-such-user/"):
        load_task_splits(task)


def test_one_reader_builds_a_task_from_a_task_file_a_mixture_of_one_or_data_files(tmp_path):
    """hf_aux.tasks is the one reader of task sources (the fine-tuning and TARTAN commands call it): a TaskSpec
    mapping with data_files relative to the file, a mixture holding exactly one task, or data files whose classes
    are read from the splits asked for."""
    from hf_aux.tasks.loading import task_from_data_files, task_from_file

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "a", "label": "pos"}\n{"text": "b", "label": "neg"}\n')
    (data / "dev.jsonl").write_text('{"text": "c", "label": "meh"}\n')
    (tmp_path / "task.yaml").write_text("name: s\nkind: classification\nlabel_names: [neg, pos]\n"
                                        "data_files: {train: data/train.jsonl}\n")
    task = task_from_file(tmp_path / "task.yaml", name="renamed")
    assert (task.name, task.data_files) == ("renamed", {"train": str(data / "train.jsonl")})
    (tmp_path / "one.yaml").write_text("tasks:\n  - {name: s, kind: regression, data_files: data/train.jsonl}\n")
    assert task_from_file(tmp_path / "one.yaml").kind == "regression"
    (tmp_path / "two.yaml").write_text("tasks:\n  - {name: a, kind: regression, data_files: data/train.jsonl}\n"
                                       "  - {name: b, kind: regression, data_files: data/train.jsonl}\n")
    with pytest.raises(ValueError, match="holds 2 tasks"):
        task_from_file(tmp_path / "two.yaml")
    files = {"train": str(data / "train.jsonl"), "validation": str(data / "dev.jsonl")}
    assert task_from_data_files("t", "classification", files).label_names == ["meh", "neg", "pos"]
    assert task_from_data_files("t", "classification", files, label_splits=("train",)).label_names == ["neg", "pos"]
    with pytest.raises(ValueError, match=r"--train_file: validation file .*nope.jsonl' does not exist"):
        task_from_data_files("t", "classification", {"validation": str(data / "nope.jsonl")}, where="--train_file")


def test_provenance_names_a_hub_dataset_only_when_the_data_came_from_the_hub(tmp_path):
    """What a model card may link as a Hub dataset: a Hub id; a local dataset folder, local files and in-memory
    data are named by their source instead."""
    import datasets

    from hf_aux.tasks.spec import TaskSpec

    assert TaskSpec("a", "classification", num_labels=2, dataset_name="user/reviews").provenance() == \
        ("user/reviews", None)
    (tmp_path / "reviews").mkdir()
    assert TaskSpec("b", "classification", num_labels=2, dataset_name=str(tmp_path / "reviews")).provenance() == \
        (None, "local dataset: reviews")
    files = {"train": str(tmp_path / "t.jsonl"), "validation": str(tmp_path / "v.jsonl")}
    assert TaskSpec("c", "classification", num_labels=2, data_files=files).provenance() == \
        (None, "local data: t.jsonl, v.jsonl")
    memory = TaskSpec("d", "classification", num_labels=2, dataset=datasets.Dataset.from_list([{"text": "x", "label": 0}]))
    assert memory.provenance()[0] is None and memory.provenance()[1].startswith("in-memory data")
