"""Streamed unlabelled corpora (hf_aux.tasks.streaming, `hf-aux amos --streaming`): the same blocks as the loaded
corpus,
an exact resume (the interrupted and resumed run ends with the uninterrupted run's parameters, and a resume at the
wrong position does not), clear errors, and a peak memory that does not grow with the corpus."""

import copy
import itertools
import json
import shutil

import datasets
import pytest
import torch
from hf_aux.amos import command as run_amos
from safetensors.torch import load_file
from tiny import peak_rss_mb, tiny_tokenizer, write_corpus, write_large_corpus

from hf_aux.tasks.data import group_texts_for_mlm
from hf_aux.tasks.batches import BatchStream
from hf_aux.tasks.streaming import ResumableStream, StreamBatches, stream_corpus, stream_mlm_blocks


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

    everything = [row["input_ids"] for row in blocks().source]  # one pass
    first = blocks()
    reader = iter(first)
    for _ in range(140):  # read ahead of the 123 "consumed" ones, as a data loader prefetches
        next(reader)
    state = json.loads(json.dumps(first.state_at(123)))  # through a checkpoint's JSON
    resumed = blocks()
    resumed.load_state_dict(state)
    reader = iter(resumed)
    rest = [row["input_ids"] for row in itertools.islice(reader, len(everything) - 123)]
    assert rest == everything[123:] and resumed.yielded == len(everything)
    assert next(reader)["input_ids"] == everything[0]  # endless: the next pass follows at once
    with pytest.raises(ValueError, match="no longer kept"):
        first.state_at(5000)


def test_a_resumed_stream_starts_its_next_pass_at_the_corpus_start(tmp_path):
    """datasets starts every pass of a stream at a loaded state; after the resumed pass the next one must start at the
    corpus' start, as the uninterrupted run's second pass does."""
    write_corpus(tmp_path / "text.txt", 300)
    blocks = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "text.txt")), tiny_tokenizer(),
                               block_size=16)
    everything = [row["input_ids"] for row in blocks]
    first = ResumableStream(blocks)
    reader = iter(first)
    for _ in range(10):
        next(reader)
    resumed = ResumableStream(copy.deepcopy(blocks))
    resumed.load_state_dict(json.loads(json.dumps(first.state_at(10))))
    reader = iter(resumed)
    assert [row["input_ids"] for row in itertools.islice(reader, len(everything) - 10)] == everything[10:]
    assert [row["input_ids"] for row in itertools.islice(reader, len(everything))] == everything
    assert resumed.yielded == 2 * len(everything)  # counted from the resumed position, 10


def test_a_resumable_stream_over_no_block_is_an_error_not_an_endless_loop(tmp_path):
    (tmp_path / "short.txt").write_text("good movie\n")
    blocks = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "short.txt")), tiny_tokenizer(),
                               block_size=16)
    with pytest.raises(ValueError, match="a whole pass over a streamed corpus gave no example"):
        next(iter(ResumableStream(blocks)))


def collect_ids(rows, generator):
    return [row["input_ids"] for row in rows]


def test_stream_batches_read_the_blocks_in_order_pass_after_pass_and_resume_exactly(tmp_path):
    """StreamBatches (TARTAN's streamed auxiliary tasks, meta-LM's streamed MLM support/query batches): the blocks of
    group_texts_for_mlm in corpus order, batches spanning the end of a pass; N ranks draw what one process draws
    (rank r every N-th batch); a position through JSON continues exactly, also across a pass boundary; a reader of its
    own, so two readers of one corpus do not move each other."""
    write_corpus(tmp_path / "text.txt", 300)
    tokenizer = tiny_tokenizer()
    loaded = datasets.load_dataset("text", data_files=str(tmp_path / "text.txt"), split="train")
    expected = list(group_texts_for_mlm(loaded, tokenizer, block_size=16)["input_ids"])
    blocks = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "text.txt")), tokenizer,
                               block_size=16)
    size = 7
    one = StreamBatches(blocks, size, collect_ids, seed=0)
    draws = 2 * len(expected) // size + 3  # more than two passes
    read = [one.next() for _ in range(draws)]
    assert [row for batch in read for row in batch] == (expected * 3)[:draws * size] and one.draws == draws

    ranks = [StreamBatches(blocks, size, collect_ids, seed=0, rank=r, world_size=2) for r in (0, 1)]
    dealt = [ranks[d % 2].next() for d in range(20)]  # rank 0's draw k is batch 2k, rank 1's batch 2k + 1
    assert dealt == read[:20]

    for cut in (3, len(expected) // size + 1):  # mid-pass, and just after the first pass ended
        first = StreamBatches(blocks, size, collect_ids, seed=0)
        for _ in range(cut):
            first.next()
        state = json.loads(json.dumps(first.state_dict()))
        resumed = StreamBatches(blocks, size, collect_ids, seed=0)
        resumed.load_state_dict(state)
        assert [resumed.next() for _ in range(draws - cut)] == read[cut:], cut
    # the test can fail: a position taken from another place of the stream continues elsewhere
    wrong = StreamBatches(blocks, size, collect_ids, seed=0)
    wrong.load_state_dict(state | {"draws": 3})
    assert wrong.next() != read[3]


def test_stream_batches_seed_the_collate_generator_as_batch_streams_do(tmp_path):
    """The collate function's generator is seeded by (seed, batch position), as hf_aux.tasks.batches.BatchStream seeds
    it, so the masks of a batch do not depend on how the stream was reached (resume, ranks)."""
    write_corpus(tmp_path / "text.txt", 100)
    blocks = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "text.txt")), tiny_tokenizer(),
                               block_size=16)
    blocks_in_memory = datasets.Dataset.from_list(list(blocks))
    draw_numbers = lambda rows, generator: torch.rand(3, generator=generator)  # noqa: E731
    streamed = StreamBatches(blocks, 2, draw_numbers, seed=5, rank=1, world_size=2)
    batch_stream = BatchStream(blocks_in_memory, 2, draw_numbers, seed=5, rank=1, world_size=2)
    for _ in range(4):
        assert torch.equal(streamed.next(), batch_stream.next())


def test_an_empty_stream_is_an_error_when_read(tmp_path):
    (tmp_path / "short.txt").write_text("good movie\n")
    blocks = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "short.txt")), tiny_tokenizer(),
                               block_size=16)
    with pytest.raises(ValueError, match="a whole pass over a streamed corpus gave no example"):
        StreamBatches(blocks, 2, collect_ids, seed=0).next()


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


def test_amos_streaming_resumes_exactly_after_the_corpus_wrapped_inside_a_batch(tmp_path):
    """A corpus shorter than the blocks the steps read: passes follow each other inside batches (no short batch at
    a pass's end, after which the consumed count would no longer be the stream's position), and a run resumed at a
    checkpoint after the wrap ends with the uninterrupted run's weights."""
    tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    write_corpus(tmp_path / "text.txt", 12)
    per_pass = len(list(stream_mlm_blocks(stream_corpus("text", "t", train_file=str(tmp_path / "text.txt")),
                                          tiny_tokenizer(), block_size=16)))
    assert 8 < per_pass < 24 and per_pass % 8  # the first pass ends inside a batch, before checkpoint-3
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run_amos.main(*run_amos.parse_args(amos_args(tmp_path / "text.txt", whole, "--max_steps", "6")))
    assert json.loads((whole / "checkpoint-3" / "stream_state.json").read_text())["yielded"] == 24
    run_amos.main(*run_amos.parse_args(amos_args(tmp_path / "text.txt", resumed, "--max_steps", "6",
                                                 "--resume_from_checkpoint", str(whole / "checkpoint-3"))))
    expected, got = load_file(whole / "model.safetensors"), load_file(resumed / "model.safetensors")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=name)


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
    with pytest.raises(ValueError, match="train row 6: column 'text' holds NoneType None, not text"):
        list(stream)


def test_a_corpus_larger_than_the_memory_budget_streams_in_bounded_memory(tmp_path):
    """The budget: the run on a 200 MB corpus may peak at most 50 MB above the same run on a 20 kB one (loading the
    corpus would take its 200 MB as Arrow and more as Python strings for the checks)."""
    tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    write_corpus(tmp_path / "small.txt", 100)
    write_large_corpus(tmp_path / "large.txt")

    def peak(name):
        args = amos_args(tmp_path / f"{name}.txt", tmp_path / name, "--max_steps", "3", "--save_strategy", "no")
        return peak_rss_mb(tmp_path, ["amos", *args], name)

    small, large = peak("small"), peak("large")
    print(f"peak RSS: 20 kB corpus {small:.1f} MB, 200 MB corpus {large:.1f} MB")
    assert large - small < 50, (small, large)
