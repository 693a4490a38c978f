"""`hf-aux tartan --streaming`: auxiliary MLM tasks given as corpus files are read as streams (hf_aux.tasks.streaming.
StreamBatches): the same blocks as the loaded corpus, in corpus order (without --streaming: the same blocks, shuffled
per epoch); an exact resume (the interrupted and resumed run ends with the uninterrupted run's parameters and stream
position, and a resume at the wrong position does not); clear refusals; a peak memory that does not grow with the
corpus."""

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
from hf_aux.tartan import command as run_tartan
from hf_aux.tartan import trainer as tartan_trainer

SEED = 3
DAPT_STREAM_SEED = SEED + 17 * 2  # TartanTrainer's seed of its second auxiliary task's training stream
DAPT_WARMUP_SEED = SEED + 23 * 2  # and of that task's MLM head warm-up stream


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny BERT, a two-class end task (40 train, 16 validation rows) and a 3,000-document corpus."""
    folder = tmp_path_factory.mktemp("tartan_streaming")
    save_tiny_bert(folder / "bert")
    words = "good great fun best love bad boring worst hate terrible".split()
    for split, rows in (("train", 40), ("validation", 16)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for i in range(rows):
                text = " ".join(words[(i * 7 + k) % 5 + 5 * (i % 2)] for k in range(6))
                handle.write(json.dumps({"text": f"the movie was {text}", "label": i % 2}) + "\n")
    write_corpus(folder / "corpus.txt", 3000)
    return folder


def tartan_args(folder, corpus, output_dir, *extra, streaming: bool = True) -> list[str]:
    return ["--train_file", str(folder / "train.jsonl"), "--validation_file", str(folder / "validation.jsonl"),
            "--model_name_or_path", str(folder / "bert"), "--auxiliary", "tapt=tapt", f"dapt={corpus}",
            *(["--streaming"] if streaming else []), "--max_seq_length", "16", "--do_train",
            "--per_device_train_batch_size", "4", "--auxiliary_batch_size", "3", "--learning_rate", "1e-3",
            "--eval_strategy", "no", "--logging_steps", "3", "--seed", str(SEED), "--report_to", "none", "--use_cpu",
            "--output_dir", str(output_dir), *extra]


def run(args: list[str]) -> None:
    run_tartan.main(*run_tartan.parse_args(args))


def recording_streams(monkeypatch) -> dict[int, list]:
    """{stream seed: the unmasked input_ids rows of every batch that stream gave}, for every auxiliary batch stream
    the trainer builds (training streams and MLM head warm-up streams)."""
    recorded: dict[int, list] = {}
    build = tartan_trainer._batch_stream

    def spy(data, batch_size, collate, seed, **place):
        rows = recorded.setdefault(seed, [])

        def recording(features, generator):
            rows.extend(list(f["input_ids"]) for f in features)
            return collate(features, generator)

        return build(data, batch_size, recording, seed, **place)

    monkeypatch.setattr(tartan_trainer, "_batch_stream", spy)
    return recorded


def test_streamed_auxiliary_task_reads_the_loaded_corpus_blocks_in_order(folder, tmp_path, monkeypatch):
    """The same blocks as without --streaming (group_texts_for_mlm of the file); what differs: streamed, they come in
    corpus order (from its start, for training and again for the MLM head warm-up), loaded, shuffled per epoch.
    A stream does not set the run's length: the end task's epoch does (10 steps of 4 of 40 rows)."""
    loaded = datasets.load_dataset("text", data_files=str(folder / "corpus.txt"), split="train")
    blocks = [list(row) for row in group_texts_for_mlm(loaded, tiny_tokenizer(), block_size=16)["input_ids"]]

    recorded = recording_streams(monkeypatch)
    run(tartan_args(folder, folder / "corpus.txt", tmp_path / "streamed", "--mode", "mt", "--num_train_epochs", "1",
                    "--mlm_head_warmup_steps", "2", "--save_strategy", "no"))
    state = json.loads((tmp_path / "streamed" / "trainer_state.json").read_text())
    assert state["global_step"] == 10
    streamed = recorded[DAPT_STREAM_SEED]
    assert len(streamed) == 10 * 3 and streamed == blocks[:30]
    assert recorded[DAPT_WARMUP_SEED] == blocks[:2 * 3]

    recorded = recording_streams(monkeypatch)
    run(tartan_args(folder, folder / "corpus.txt", tmp_path / "loaded", "--mode", "mt", "--max_steps", "10",
                    "--save_strategy", "no", streaming=False))
    shuffled = recorded[DAPT_STREAM_SEED]
    assert len(shuffled) == 30 and all(row in blocks for row in shuffled) and shuffled != blocks[:30]


def test_meta_tartan_streaming_resume_ends_where_the_uninterrupted_run_ends(folder, tmp_path):
    """Interrupted at step 3 of 6 and resumed: the classifier, the MLM heads, the task weights and the stream's
    position are the uninterrupted run's. The checkpoint holds the position after exactly its 3 draws of 3 blocks."""
    corpus = folder / "corpus.txt"
    extra = ("--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3", "--mlm_head_warmup_steps", "2")
    whole, resumed, wrong = tmp_path / "whole", tmp_path / "resumed", tmp_path / "wrong"
    run(tartan_args(folder, corpus, whole, *extra))
    saved = json.loads((whole / "checkpoint-3" / "trainer_state.json").read_text())
    position = saved["stateful_callbacks"]["TaskWeightsCallback"]["attributes"]["stream_positions"]["dapt"]
    assert position["draws"] == 3 and position["stream"]["yielded"] == 3 * 3

    run(tartan_args(folder, corpus, resumed, *extra, "--resume_from_checkpoint", str(whole / "checkpoint-3")))

    def final(output_dir):
        state = json.loads((output_dir / "trainer_state.json").read_text())
        weights = state["stateful_callbacks"]["TaskWeightsCallback"]["attributes"]
        tensors = {**load_file(output_dir / "model.safetensors"),
                   **{f"heads.{k}": v for k, v in load_file(output_dir / "tartan_heads.safetensors").items()}}
        return tensors, weights

    expected, expected_state = final(whole)
    got, got_state = final(resumed)
    assert got_state["stream_positions"] == expected_state["stream_positions"]
    assert expected_state["stream_positions"]["dapt"]["stream"]["yielded"] == 6 * 3
    torch.testing.assert_close(torch.tensor(got_state["weights"]), torch.tensor(expected_state["weights"]),
                               atol=1e-6, rtol=0)
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=0, msg=name)

    # the test can fail: the same checkpoint with the stream positioned at the corpus' start ends elsewhere
    shutil.copytree(whole / "checkpoint-3", tmp_path / "checkpoint-3")
    state_file = tmp_path / "checkpoint-3" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["stateful_callbacks"]["TaskWeightsCallback"]["attributes"]["stream_positions"]["dapt"]["stream"] = None
    state_file.write_text(json.dumps(state))
    run(tartan_args(folder, corpus, wrong, *extra, "--resume_from_checkpoint", str(tmp_path / "checkpoint-3")))
    other, _ = final(wrong)
    assert any(not torch.allclose(other[name], expected[name], atol=1e-6, rtol=0) for name in expected)


def test_streaming_refusals_name_the_field(folder, tmp_path):
    # through the installed command: a non-zero exit naming the field
    hf_aux = os.path.join(os.path.dirname(sys.executable), "hf-aux")
    args = tartan_args(folder, folder / "corpus.txt", tmp_path / "out", "--max_steps", "2")
    no_corpus = [a if not a.startswith("dapt=") else "dapt=demo:imdb" for a in args]
    done = subprocess.run([hf_aux, "tartan", *no_corpus], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "DataTrainingArguments: field 'streaming': streams the auxiliary corpora given as files" in done.stderr
    assert "drop --streaming" in done.stderr
    with pytest.raises(ValueError, match="field 'streaming'"):
        run_tartan.parse_args([*args[:args.index("--auxiliary") + 1], "none", *args[args.index("--auxiliary") + 3:]])
    missing = [a if not a.startswith("dapt=") else f"dapt={tmp_path / 'absent.txt'}" for a in args]
    with pytest.raises(ValueError, match=r"task 'dapt': field 'auxiliary' \(.*absent.txt'\): file .* does not exist"):
        run(missing)


def test_a_checkpoint_without_the_stream_position_is_refused_on_resume(folder):
    """A checkpoint written without --streaming counts the task's draws but holds no position in the corpus."""
    from hf_aux.tasks.streaming import StreamBatches, stream_corpus, stream_mlm_blocks
    from hf_aux.tartan.weighting import TaskWeightsCallback

    blocks = stream_mlm_blocks(stream_corpus("text", "t", train_file=str(folder / "corpus.txt")), tiny_tokenizer(),
                               block_size=16)
    state = TaskWeightsCallback(["end_task", "dapt"], [0.5, 0.5], stream_draws={"dapt": 3})
    with pytest.raises(ValueError, match="holds no position of the streamed task 'dapt'.*resume without --streaming"):
        state.draw({"dapt": StreamBatches(blocks, 2, lambda rows, generator: rows, seed=0)}, "dapt")


def test_a_corpus_larger_than_the_memory_budget_streams_in_bounded_memory(folder, tmp_path):
    """The budget: the run with a 200 MB auxiliary corpus may peak at most 50 MB above the same run with a 20 kB one
    (loading it would take its 200 MB as Arrow and more as Python strings for the checks)."""
    write_corpus(tmp_path / "small.txt", 100)
    write_large_corpus(tmp_path / "large.txt")

    def peak(name):
        args = tartan_args(folder, tmp_path / f"{name}.txt", tmp_path / name, "--max_steps", "3", "--save_strategy",
                           "no")
        return peak_rss_mb(tmp_path, ["tartan", *args], name)

    small, large = peak("small"), peak("large")
    print(f"peak RSS: 20 kB corpus {small:.1f} MB, 200 MB corpus {large:.1f} MB")
    assert large - small < 50, (small, large)
