import datasets
import pytest
import torch
from tiny import tiny_tokenizer

from hf_aux.tasks import data as data_module
from hf_aux.tasks.data import (MLMCollator, MultiTaskCollator, TokenizedTask, group_texts_for_mlm, mask_tokens_for_mlm,
                               special_tokens_mask_for, tokenize_task)
from hf_aux.tasks.loading import TaskSpec


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_sentence_pairs_and_string_labels(tok):
    rows = datasets.Dataset.from_dict({"premise": ["the cat", "a dog"], "hypothesis": ["a cat", "the sun"],
                                       "label": ["yes", "no"]})
    task = TaskSpec(name="nli", kind="classification", label_names=["no", "yes"], text_columns=["premise", "hypothesis"],
                    dataset=rows)
    out = tokenize_task(task, rows, tok)
    assert out["labels"] == [1, 0]
    assert tok.decode(out[0]["input_ids"]) == "[CLS] the cat [SEP] a cat [SEP]"
    assert out[0]["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    batch = MultiTaskCollator(tok, ["other", "nli"])([out[0], out[1]])
    assert batch["input_ids"].shape == (2, 7)
    assert batch["task_ids"].tolist() == [1, 1]
    assert batch["labels"].dtype == torch.long


def test_regression_labels_are_floats(tok):
    rows = datasets.Dataset.from_dict({"text": ["good", "bad"], "label": [4, 1.5]})
    task = TaskSpec(name="score", kind="regression", dataset=rows)
    batch = MultiTaskCollator(tok, ["score"])(list(tokenize_task(task, rows, tok)))
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [4.0, 1.5]


def test_multiple_choice_is_flattened_and_ranked(tok):
    rows = datasets.Dataset.from_dict({
        "question": ["what is red", "who is there"],
        "choices": [["the sun", "a cat", "rain"], ["a dog", "the party"]],
        "label": [0, 1],
    })
    task = TaskSpec(name="mc", kind="multiple_choice", dataset=rows)
    out = tokenize_task(task, rows, tok)
    assert len(out[0]["input_ids"]) == 3 and len(out[1]["input_ids"]) == 2
    assert tok.decode(out[0]["input_ids"][1]) == "[CLS] what is red [SEP] a cat [SEP]"
    batch = MultiTaskCollator(tok, ["mc"])(list(out))
    assert batch["input_ids"].shape[:2] == (2, 3)
    assert batch["choice_mask"].tolist() == [[True, True, True], [True, True, False]]
    assert batch["labels"].tolist() == [0, 1]
    assert tok.decode(batch["input_ids"][1, 1][batch["attention_mask"][1, 1].bool()]) == "[CLS] who is there [SEP] the party [SEP]"


def qa_rows():
    context = ("the river runs through the city . " * 6) + "paris is the capital of france . " + ("the sun is red . " * 6)
    return datasets.Dataset.from_dict({
        "question": ["what is the capital of france", "what is blue", "where is the cat"],
        "context": [context, "the sky is blue today", "the dog is red"],
        "answers": [{"text": ["paris"], "answer_start": [context.index("paris")]},
                    {"text": ["blue"], "answer_start": [11]},
                    {"text": [], "answer_start": []}],  # unanswerable
    })


def test_extractive_qa_positions_map_back_to_the_answer(tok):
    rows = qa_rows()
    task = TaskSpec(name="qa", kind="extractive_qa", dataset=rows)
    out = tokenize_task(task, rows, tok, max_length=32, doc_stride=8, keep_qa_offsets=True)
    first_example = [f for f in out if f["example_index"] == 0]
    assert len(first_example) > 2  # the long context is split into overlapping windows
    found = 0
    for feature in out:
        start, end = feature["start_positions"], feature["end_positions"]
        context = rows[feature["example_index"]]["context"]
        if start == 0:
            assert end == 0
            continue
        found += 1
        begin, finish = feature["offset_mapping"][start][0], feature["offset_mapping"][end][1]
        answer = rows[feature["example_index"]]["answers"]["text"][0]
        assert context[begin:finish] == answer
        assert tok.decode(feature["input_ids"][start : end + 1]) == answer
    windows_with_paris = [f for f in first_example if "paris" in tok.decode(f["input_ids"])]
    assert found == len(windows_with_paris) + 1  # every window holding the answer points at it, plus "blue"
    unanswerable = [f for f in out if f["example_index"] == 2]
    assert [(f["start_positions"], f["end_positions"]) for f in unanswerable] == [(0, 0)]
    question_offsets = first_example[0]["offset_mapping"][1]
    assert question_offsets == [-1, -1]  # question tokens are not candidate answers
    batch = MultiTaskCollator(tok, ["qa"])(list(out.select(range(3))))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions", "task_ids",
                          "task"}


def test_seq2seq_targets_are_padded_with_ignore_index(tok):
    rows = datasets.Dataset.from_dict({"source": ["the long story of a cat", "hi"], "target": ["cat", "hello there friend"]})
    task = TaskSpec(name="summ", kind="seq2seq", dataset=rows)
    out = tokenize_task(task, rows, tok)
    assert tok.decode(out[1]["labels"]) == "[CLS] hello there friend [SEP]"
    batch = MultiTaskCollator(tok, ["summ"])(list(out))
    padding = len(out[1]["labels"]) - len(out[0]["labels"])
    assert padding > 0 and batch["labels"].tolist()[0] == out[0]["labels"] + [-100] * padding
    assert batch["labels"].tolist()[1] == out[1]["labels"]


def test_rows_that_would_crash_training_are_rejected_at_load_time(tok):
    """Issue #13 item 5: a multiple-choice row with one choice (eq. 1 divides by log 1 = 0) and a seq2seq row whose
    target has no token once tokenised and truncated (the token-mean loss divides by 0) are refused when the split
    is tokenised, naming the task, the field and the row, instead of crashing mid-run."""
    rows = datasets.Dataset.from_dict({"question": ["what is red", "who is there", "why"],
                                       "choices": [["the sun", "a cat"], ["a dog"], ["rain", "sun"]], "label": [0, 0, 1]})
    with pytest.raises(ValueError, match=r"task 'mc': field 'choices': row 2 has 1 choice"):
        tokenize_task(TaskSpec(name="mc", kind="multiple_choice", dataset=rows), rows, tok)
    # a tokenizer that adds no special tokens to targets (GPT-2-like): an empty target gives no label at all
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    word_level = Tokenizer(models.WordLevel(tok.get_vocab(), unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    bare = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]", pad_token="[PAD]")
    rows = datasets.Dataset.from_dict({"source": ["the cat", "a dog", "hi"], "target": ["cat", "dog", ""]})
    with pytest.raises(ValueError, match=r"task 'summ': field 'target': row 3 .*no target token"):
        tokenize_task(TaskSpec(name="summ", kind="seq2seq", dataset=rows), rows, bare)
    # with special tokens, a target truncated to them alone has no content left: refused too
    rows = datasets.Dataset.from_dict({"source": ["the cat", "a dog"], "target": ["cat", "   "]})
    with pytest.raises(ValueError, match=r"task 'summ': field 'target': row 2 "):
        tokenize_task(TaskSpec(name="summ", kind="seq2seq", dataset=rows), rows, tok)
    ok = datasets.Dataset.from_dict({"source": ["the cat"], "target": ["cat"]})
    assert len(tokenize_task(TaskSpec(name="summ", kind="seq2seq", dataset=ok), ok, bare)) == 1


def test_collator_rejects_mixed_or_unknown_tasks(tok):
    a = {"input_ids": [2, 3], "attention_mask": [1, 1], "labels": 0, "task_name": "a"}
    b = dict(a, task_name="b")
    with pytest.raises(ValueError, match="one task"):
        MultiTaskCollator(tok, ["a", "b"])([a, b])
    with pytest.raises(ValueError, match="task 'b': field 'task_name'"):
        MultiTaskCollator(tok, ["a"])([b])


def test_each_split_is_tokenised_once(tok, monkeypatch):
    calls = []
    real = data_module.tokenize_task

    def counting(task, dataset, tokenizer, **kwargs):
        calls.append(len(dataset))
        return real(task, dataset, tokenizer, **kwargs)

    monkeypatch.setattr(data_module, "tokenize_task", counting)
    rows = datasets.Dataset.from_dict({"text": ["good", "bad", "fun"], "label": [1, 0, 1]})
    task = TaskSpec(name="s", kind="classification", num_labels=2, dataset=rows)
    tokenized = TokenizedTask(task, datasets.DatasetDict(train=rows, validation=rows.select([0])), tok)
    for _ in range(3):
        assert len(tokenized["train"]) == 3 and len(tokenized["validation"]) == 1
    assert calls == [3, 1]
    with pytest.raises(KeyError, match="task 's' has no 'test' split"):
        tokenized["test"]


def test_mlm_masking_rates_and_special_tokens(tok):
    ids = torch.randint(5, len(tok), (64, 128))
    ids[:, 0], ids[:, -1] = tok.cls_token_id, tok.sep_token_id
    generator = torch.Generator().manual_seed(0)
    special = special_tokens_mask_for(ids, tok)
    masked, labels = mask_tokens_for_mlm(ids, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                         special_tokens_mask=special, generator=generator)
    chosen = labels != -100
    assert not chosen[:, 0].any() and not chosen[:, -1].any()
    assert abs(chosen[:, 1:-1].float().mean().item() - 0.15) < 0.01
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(masked[~chosen], ids[~chosen])
    as_mask = (masked[chosen] == tok.mask_token_id).float().mean().item()
    unchanged = (masked[chosen] == ids[chosen]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.03 and 0.07 < unchanged < 0.14  # 10% kept (+ random hits of the same token)


def test_group_texts_and_mlm_collator(tok):
    text = datasets.Dataset.from_dict({"text": ["the movie was great and i love it " * 4, "bad plot", ""]})
    blocks = group_texts_for_mlm(text, tok, block_size=12)
    assert all(len(b) == 12 and b[0] == tok.cls_token_id and b[-1] == tok.sep_token_id for b in blocks["input_ids"])
    batch = MLMCollator(tok, return_original=True)(list(blocks))
    assert batch["input_ids"].shape == batch["original_input_ids"].shape == batch["labels"].shape
    with pytest.raises(ValueError, match="field 'text_column'"):
        group_texts_for_mlm(text, tok, text_column="body")
    with pytest.raises(ValueError, match="fewer than 500 tokens"):
        group_texts_for_mlm(text, tok, block_size=500)


def test_the_collator_names_the_task_on_the_host_and_refuses_a_one_choice_example(tok):
    """The batch carries its task's name beside task_ids (a trainer reads the task without a device read), and a
    multiple-choice example with one choice is refused as it is padded (eq. 1 divides by log n; on an accelerator
    scale_losses leaves that check to the collator)."""
    rows = datasets.Dataset.from_dict({"question": ["what is red", "who is there"],
                                       "choices": [["the sun", "a cat"], ["a dog", "the party"]], "label": [0, 1]})
    out = list(tokenize_task(TaskSpec(name="mc", kind="multiple_choice", dataset=rows), rows, tok))
    batch = MultiTaskCollator(tok, ["other", "mc"])(out)
    assert batch["task"] == "mc" and batch["task_ids"].tolist() == [1, 1]
    out[1] = {**out[1], "input_ids": out[1]["input_ids"][:1], "attention_mask": out[1]["attention_mask"][:1],
              **({"token_type_ids": out[1]["token_type_ids"][:1]} if "token_type_ids" in out[1] else {})}
    with pytest.raises(ValueError, match=r"task 'mc': field 'choices': an example has 1 choice"):
        MultiTaskCollator(tok, ["mc"])(out)
