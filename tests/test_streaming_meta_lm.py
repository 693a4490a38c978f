"""`hf-aux meta-lm --streaming`: the unlabelled corpus is read as a stream, both the x_u batches (Trainer's train
dataset, hf_aux.tasks.streaming.ResumableStream) and the MLM task's support/query batches (their own pass,
hf_aux.tasks.streaming.StreamBatches): the same blocks as the loaded corpus, in corpus order (without --streaming: a
shuffled 95% share, support/query rows drawn at random); an exact resume (the interrupted and resumed run ends with
the uninterrupted run's student, teacher and stream positions, and a resume at the wrong position does not); clear
refusals; a peak memory that does not grow with the corpus."""

import json
import os
import shutil
import subprocess
import sys

import datasets
import pytest
import torch
from safetensors.torch import load_file
from tiny import peak_rss_mb, save_tiny_bert, tiny_tokenizer, write_corpus, write_large_corpus

from hf_aux.tasks.data import group_texts_for_mlm
from hf_aux.meta_lm import command as run_meta_lm
from hf_aux.meta_lm import trainer as meta_lm_trainer
from hf_aux.meta_lm.support_query import SupportQuerySampler
from hf_aux.tasks.streaming import ResumableStream, stream_corpus, stream_mlm_blocks

SIZES = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,max_position_embeddings=64"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny tokenizer (with a BERT beside it), a 3,000-document corpus and 200 held-out documents."""
    folder = tmp_path_factory.mktemp("meta_lm_streaming")
    save_tiny_bert(folder / "bert")
    write_corpus(folder / "corpus.txt", 3000)
    write_corpus(folder / "held_out.txt", 200, seed=1)
    return folder


def meta_lm_args(folder, corpus, output_dir, *extra, streaming: bool = True) -> list[str]:
    """Soft labels with every support/query pair an MLM task (no labelled mixture needed): x_u and the MLM
    support/query batches both come from the corpus."""
    return ["--train_file", str(corpus), *(["--streaming"] if streaming else []), "--tokenizer_name",
            str(folder / "bert"), "--config_overrides", SIZES, "--block_size", "16", "--objective", "soft",
            "--mlm_task_probability", "1", "--do_train", "--per_device_train_batch_size", "4", "--learning_rate",
            "1e-3", "--logging_steps", "3", "--seed", "3", "--report_to", "none", "--use_cpu", "--output_dir",
            str(output_dir), *extra]


def run(args: list[str]):
    return run_meta_lm.main(*run_meta_lm.parse_args(args))


def recording(monkeypatch) -> dict[str, list]:
    """{"x_u": the rows of every unlabelled batch Trainer's loader gave, "mlm": the rows of every MLM support/query
    batch}, unmasked."""
    recorded = {"x_u": [], "mlm": []}
    collate, pad = meta_lm_trainer.MetaLMCollator.__call__, SupportQuerySampler._pad

    def collate_spy(self, features):
        recorded["x_u"].extend(list(f["input_ids"]) for f in features)
        return collate(self, features)

    def pad_spy(self, rows):
        recorded["mlm"].extend(row.tolist() for row in rows)
        return pad(self, rows)

    monkeypatch.setattr(meta_lm_trainer.MetaLMCollator, "__call__", collate_spy)
    monkeypatch.setattr(SupportQuerySampler, "_pad", pad_spy)
    return recorded


def test_streamed_corpus_gives_the_loaded_corpus_blocks_in_order(folder, tmp_path, monkeypatch):
    """The same blocks as without --streaming (group_texts_for_mlm of the file). What differs: streamed, x_u reads
    every block in corpus order and the MLM support/query batches read their own pass from the corpus' start (support,
    then query, each step); loaded, x_u reads a shuffled 95% share (5% held out) and support/query rows are drawn at
    random. A stream has no held-out share: --validation_file is evaluated."""
    loaded = datasets.load_dataset("text", data_files=str(folder / "corpus.txt"), split="train")
    blocks = [list(row) for row in group_texts_for_mlm(loaded, tiny_tokenizer(), block_size=16)["input_ids"]]

    recorded = recording(monkeypatch)
    trainer = run(meta_lm_args(folder, folder / "corpus.txt", tmp_path / "streamed", "--max_steps", "4",
                               "--save_strategy", "no", "--validation_file", str(folder / "held_out.txt"),
                               "--do_eval"))
    held_out = datasets.load_dataset("text", data_files=str(folder / "held_out.txt"), split="train")
    held_out = [list(row) for row in group_texts_for_mlm(held_out, tiny_tokenizer(), block_size=16)["input_ids"]]
    train_rows = recorded["x_u"][:len(recorded["x_u"]) - len(held_out)]  # then the evaluation's batches
    assert recorded["x_u"][len(train_rows):] == held_out
    # 4 steps of 4 blocks, and the batch accelerate's loader fetches ahead
    assert len(train_rows) in (4 * 4, 5 * 4) and train_rows == blocks[:len(train_rows)]
    assert recorded["mlm"] == blocks[:4 * 2 * 4]
    results = json.loads((tmp_path / "streamed" / "all_results.json").read_text())
    assert results["eval_samples"] == len(trainer.eval_dataset) > 0 and "train_samples" not in results

    recorded = recording(monkeypatch)
    run(meta_lm_args(folder, folder / "corpus.txt", tmp_path / "loaded", "--max_steps", "4", "--save_strategy", "no",
                     streaming=False))
    for rows in recorded.values():
        assert len(rows) >= 16 and all(row in blocks for row in rows) and rows != blocks[:len(rows)]


def test_streaming_resume_ends_where_the_uninterrupted_run_ends(folder, tmp_path):
    """Interrupted at step 3 of 6 and resumed: the student, the teacher and both stream positions are the
    uninterrupted run's. The checkpoint holds the positions after exactly its steps' blocks (3 x 4 x_u blocks, not the
    ones the loader fetched ahead; 3 x 2 support/query batches of 4)."""
    corpus = folder / "corpus.txt"
    extra = ("--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3")
    whole, resumed, wrong = tmp_path / "whole", tmp_path / "resumed", tmp_path / "wrong"
    run(meta_lm_args(folder, corpus, whole, *extra))

    def positions(checkpoint):
        x_u = json.loads((checkpoint / "stream_state.json").read_text())
        support_query = torch.load(checkpoint / "meta_lm_state.pt", weights_only=True)["unlabelled_stream"]
        return x_u, support_query

    x_u, support_query = positions(whole / "checkpoint-3")
    assert x_u["yielded"] == 3 * 4 and support_query["draws"] == 3 * 2 and support_query["stream"]["yielded"] == 24

    run(meta_lm_args(folder, corpus, resumed, *extra, "--resume_from_checkpoint", str(whole / "checkpoint-3")))
    assert positions(resumed / "checkpoint-6") == positions(whole / "checkpoint-6")

    def parameters(output_dir):
        return {**load_file(output_dir / "model.safetensors"),
                **{f"teacher.{k}": v for k, v in load_file(output_dir / "teacher" / "model.safetensors").items()}}

    expected, got = parameters(whole), parameters(resumed)
    assert expected.keys() == got.keys() and any(name.startswith("teacher.") for name in expected)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=0, msg=name)

    # the test can fail: the x_u stream resumed at the corpus' start (counted as 12 blocks) ends elsewhere
    shutil.copytree(whole / "checkpoint-3", tmp_path / "checkpoint-3")
    start = ResumableStream(stream_mlm_blocks(stream_corpus("text", "t", train_file=str(corpus)), tiny_tokenizer(),
                                              block_size=16))
    next(iter(start))
    (tmp_path / "checkpoint-3" / "stream_state.json").write_text(json.dumps(start.state_at(0) | {"yielded": 12}))
    run(meta_lm_args(folder, corpus, wrong, *extra, "--resume_from_checkpoint", str(tmp_path / "checkpoint-3")))
    other = parameters(wrong)
    assert any(not torch.allclose(other[name], expected[name], atol=1e-6, rtol=0) for name in expected)


def test_streaming_refusals_name_the_field(folder, tmp_path):
    args = meta_lm_args(folder, folder / "corpus.txt", tmp_path / "out")
    # through the installed command: a non-zero exit naming the field
    hf_aux = os.path.join(os.path.dirname(sys.executable), "hf-aux")
    done = subprocess.run([hf_aux, "meta-lm", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "MetaLMConfig: field 'max_steps': --streaming needs --max_steps" in done.stderr
    with pytest.raises(ValueError, match="DataTrainingArguments: field 'streaming': streams --train_file or "
                                         "--dataset_name; the Two Moons data are built in memory"):
        run(["--two_moons", "--streaming", "--max_steps", "2", "--output_dir", str(tmp_path / "moons")])
    with pytest.raises(ValueError, match="DataTrainingArguments: field 'validation_file': --do_eval with --streaming "
                                         "needs held-out text"):
        run([*args, "--max_steps", "2", "--do_eval"])
    with pytest.raises(ValueError, match=r"DataTrainingArguments: field 'train_file': file .*absent.txt' does not"):
        run([*meta_lm_args(folder, tmp_path / "absent.txt", tmp_path / "absent"), "--max_steps", "2"])


def test_a_corpus_larger_than_the_memory_budget_streams_in_bounded_memory(folder, tmp_path):
    """The budget: the run on a 200 MB corpus may peak at most 50 MB above the same run on a 20 kB one (loading the
    corpus would take its 200 MB as Arrow and more as Python strings for the checks)."""
    write_corpus(tmp_path / "small.txt", 100)
    write_large_corpus(tmp_path / "large.txt")

    def peak(name):
        args = meta_lm_args(folder, tmp_path / f"{name}.txt", tmp_path / name, "--max_steps", "3",
                            "--save_strategy", "no")
        return peak_rss_mb(tmp_path, ["meta-lm", *args], name)

    small, large = peak("small"), peak("large")
    print(f"peak RSS: 20 kB corpus {small:.1f} MB, 200 MB corpus {large:.1f} MB")
    assert large - small < 50, (small, large)
