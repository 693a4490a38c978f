"""Streamed unlabelled corpora (hf_aux.streaming, `hf-aux amos --streaming`): the same blocks as the loaded corpus,
an exact resume (the interrupted and resumed run ends with the uninterrupted run's parameters, and a resume at the
wrong position does not), clear errors, and a peak memory that does not grow with the corpus."""

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

import datasets
import pytest
import torch
from hf_aux.amos import command as run_amos
from safetensors.torch import load_file
from tiny import WORDS, tiny_tokenizer

from hf_aux.data import group_texts_for_mlm
from hf_aux.streaming import ResumableStream, stream_corpus, stream_mlm_blocks


def write_corpus(path, documents: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(documents):
            handle.write(" ".join(rng.choices(WORDS, k=rng.randint(3, 30))) + "\n")


def test_streamed_blocks_are_the_blocks_of_the_loaded_corpus(tmp_path):
    write_corpus(tmp_path / "text.txt", 2500)
    tokenizer = tiny_tokenizer()
    loaded = datasets.load_dataset("text", data_files=str(tmp_path / "text.txt"), split="train")
    expected = group_texts_for_mlm(loaded, tokenizer, block_size=16)["input_ids"]
    streamed = stream_mlm_blocks(stream_corpus("text", "test", train_file=str(tmp_path / "text.txt")), tokenizer,
                                 block_size=16)
    assert [row["input_ids"] for row in streamed] == list(expected) and len(expected) > 300


def test_resumable_stream_continues_after_exactly_the_consumed_examples(tmp_path):
    write_corpus(tmp_path / "text.txt", 2500)
    tokenizer = tiny_tokenizer()

    def blocks():
        return ResumableStream(stream_mlm_blocks(stream_corpus("text", "test", train_file=str(tmp_path / "text.txt")),
                                                 tokenizer, block_size=16))

    everything = [row["input_ids"] for row in blocks()]
    first = blocks()
    reader = iter(first)
    for _ in range(140):  # read ahead of the 123 "consumed" ones, as a data loader prefetches
        next(reader)
    state = json.loads(json.dumps(first.state_at(123)))  # through a checkpoint's JSON
    resumed = blocks()
    resumed.load_state_dict(state)
    rest = [row["input_ids"] for row in resumed]
    assert rest == everything[123:] and resumed.yielded == len(everything)
    with pytest.raises(ValueError, match="no longer kept"):
        first.state_at(5000)


def amos_args(corpus, output_dir, *extra):
    return ["--train_file", str(corpus), "--streaming", "--tokenizer_name", str(output_dir.parent / "tokenizer"),
            "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2", "--intermediate_size",
            "64", "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2", "--max_seq_length", "16",
            "--do_train", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
            "--learning_rate", "1e-3", "--report_to", "none", "--save_strategy", "steps", "--save_steps", "3",
            "--logging_steps", "3", "--seed", "3", "--use_cpu", "--output_dir", str(output_dir), *extra]


def test_amos_streaming_resume_ends_where_the_uninterrupted_run_ends(tmp_path):
    tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    write_corpus(tmp_path / "text.txt", 3000)
    whole = tmp_path / "whole"
    run_amos.main(*run_amos.parse_args(amos_args(tmp_path / "text.txt", whole, "--max_steps", "6")))
    state = json.loads((whole / "checkpoint-3" / "stream_state.json").read_text())
    assert state["yielded"] == 3 * 2 * 4  # the blocks of 3 updates of 2 micro-batches of 4, not the prefetched ones

    resumed = tmp_path / "resumed"
    run_amos.main(*run_amos.parse_args(amos_args(tmp_path / "text.txt", resumed, "--max_steps", "6",
                                                 "--resume_from_checkpoint", str(whole / "checkpoint-3"))))
    expected, got = load_file(whole / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=name)

    # the test can fail: resuming at the wrong position of the stream (its start, counted as 24 blocks) ends elsewhere
    wrong = tmp_path / "wrong"
    shutil.copytree(whole / "checkpoint-3", tmp_path / "checkpoint-3")
    start = ResumableStream(stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "text.txt")),
                                              tiny_tokenizer(), block_size=16))
    next(iter(start))
    (tmp_path / "checkpoint-3" / "stream_state.json").write_text(json.dumps(start.state_at(0) | {"yielded": 24}))
    run_amos.main(*run_amos.parse_args(amos_args(tmp_path / "text.txt", wrong, "--max_steps", "6",
                                                 "--resume_from_checkpoint", str(tmp_path / "checkpoint-3"))))
    other = load_file(wrong / "model.safetensors")
    assert any(not torch.equal(other[name], expected[name]) for name in expected)


def test_streaming_needs_max_steps_and_a_corpus(tmp_path):
    tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    write_corpus(tmp_path / "text.txt", 50)
    args = amos_args(tmp_path / "text.txt", tmp_path / "out")
    with pytest.raises(ValueError, match="field 'max_steps': --streaming needs --max_steps"):
        run_amos.main(*run_amos.parse_args(args))
    without_corpus = [a for a in args if a not in ("--train_file", str(tmp_path / "text.txt"))]
    with pytest.raises(ValueError, match="field 'streaming': streams --train_file or --dataset_name"):
        run_amos.main(*run_amos.parse_args([*without_corpus, "--max_steps", "2"]))


def test_a_document_that_is_not_text_is_named_when_the_stream_reaches_it(tmp_path):
    rows = [{"text": "good movie"}] * 5 + [{"text": None}]
    (tmp_path / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stream = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "text.jsonl")), tiny_tokenizer(),
                               block_size=4)
    with pytest.raises(ValueError, match="train row 5: column 'text' holds NoneType None, not text"):
        list(stream)


PEAK_RSS = textwrap.dedent("""
    import os, resource, sys
    sys.path.insert(0, {tests!r})
    from hf_aux.amos import command as run_amos
    run_amos.main(*run_amos.parse_args(sys.argv[1:]))
    print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""")


def peak_rss_mb(tmp_path, corpus, name: str) -> float:
    script = tmp_path / "peak.py"
    script.write_text(PEAK_RSS.format(tests=os.path.dirname(__file__)))
    args = amos_args(corpus, tmp_path / name, "--max_steps", "3", "--save_strategy", "no")
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / f"cache-{name}")}
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split("PEAK_KB")[-1]) / 1024


def test_a_corpus_larger_than_the_memory_budget_streams_in_bounded_memory(tmp_path):
    """The budget: the run on a 200 MB corpus may peak at most 50 MB above the same run on a 20 kB one (loading the
    corpus would take its 200 MB as Arrow and more as Python strings for the checks)."""
    tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    write_corpus(tmp_path / "small.txt", 100)
    line = " ".join(WORDS[:40]) + "\n"
    with open(tmp_path / "large.txt", "w", encoding="utf-8") as handle:
        handle.write(line * (200_000_000 // len(line)))
    assert os.path.getsize(tmp_path / "large.txt") > 190e6
    small = peak_rss_mb(tmp_path, tmp_path / "small.txt", "small")
    large = peak_rss_mb(tmp_path, tmp_path / "large.txt", "large")
    assert large - small < 50, (small, large)
