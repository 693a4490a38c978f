"""Tiny, locally built models and tokenizer for the tests: no network, no downloads, seconds on 2 cores.

Every architecture uses the same small WordPiece vocabulary; model configs are hidden 32, 2 layers.
"""

import string

import torch
from transformers import AutoConfig, BertTokenizer, TrainerCallback

WORDS = (
    "the a an and or but not no yes is are was were be been this that these those it its i you he she we they "
    "me my your his her our their what which who when where why how good bad great terrible movie film story "
    "actor plot love hate fun boring best worst very really too so of in on at to from with for by as about "
    "question answer context paris france capital city river long short news tweet party speech hello hi "
    "thanks bye weather today sun rain cat dog red blue green one two three four five"
).split()


def tiny_tokenizer() -> BertTokenizer:
    """An uncased WordPiece tokenizer over ~160 words plus single characters (so nothing maps to [UNK])."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = ["##" + c for c in string.ascii_lowercase + string.digits]
    tokens = specials + sorted(set(WORDS)) + chars + pieces
    vocab = {token: index for index, token in enumerate(dict.fromkeys(tokens))}
    return BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=128)


# The encoder families every command is tried on (tests/test_families.py): AutoConfig model types
ENCODER_FAMILIES = ("bert", "roberta", "deberta-v2", "electra", "xlm-roberta", "albert", "distilbert", "mpnet",
                    "modernbert")
FAMILY_OVERRIDES = {  # what a family needs beyond the shared sizes (its own field names, small inner sizes)
    "electra": dict(embedding_size=32),
    "roberta": dict(max_position_embeddings=130),  # RoBERTa offsets positions by pad_token_id + 1
    "xlm-roberta": dict(max_position_embeddings=130),
    "mpnet": dict(max_position_embeddings=130),
    "albert": dict(embedding_size=16),  # ALBERT factorises its embeddings (E < H)
    "distilbert": dict(hidden_dim=64),  # DistilBERT's FFN width (intermediate_size is not one of its fields)
    "deberta-v2": dict(relative_attention=True, position_buckets=16, max_relative_positions=32,
                       pos_att_type=["p2c", "c2p"], position_biased_input=False),  # DeBERTa-v3's attention
    "modernbert": dict(global_attn_every_n_layers=2, local_attention=16),
}


def tiny_config(model_type: str = "bert", tokenizer=None, **overrides):
    """A hidden-32, 2-layer config of `model_type` (ENCODER_FAMILIES, bart, t5)."""
    tokenizer = tokenizer or tiny_tokenizer()
    common = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    if model_type == "t5":  # T5 starts decoding from the pad token
        kwargs = dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
                      relative_attention_num_buckets=8, eos_token_id=tokenizer.sep_token_id,
                      decoder_start_token_id=tokenizer.pad_token_id)
    elif model_type == "funnel":  # its depth is block_sizes (pooled between blocks), its width d_model
        kwargs = dict(d_model=32, n_head=2, d_head=16, d_inner=64, block_sizes=[1, 1], num_decoder_layers=1,
                      max_position_embeddings=128)
    elif model_type == "bart":
        kwargs = dict(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
            bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
            decoder_start_token_id=tokenizer.sep_token_id, forced_eos_token_id=None,
        )
    else:
        kwargs = dict(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128,
        )
        kwargs.update(FAMILY_OVERRIDES.get(model_type, {}))
        if model_type == "modernbert":  # its special ids default to its own 50k vocabulary's
            kwargs.update(bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                          cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
    kwargs.update(common)
    kwargs.update(overrides)
    return AutoConfig.for_model(model_type, **kwargs)


def free_port() -> int:
    """A free local TCP port (for torchrun's --master_port)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed_all(seed: int = 0) -> None:
    torch.manual_seed(seed)


def save_tiny_bert(folder) -> str:
    """A seeded tiny BertModel and its tokenizer saved in `folder` (a local checkpoint for the run scripts)."""
    from transformers import AutoModel

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


# ---- the commands' own small data: a tiny BERT checkpoint, labelled rows, a mixture file, plain text -------------
COMMAND_WORDS = "the movie film story actor plot was very really good bad fun boring".split()


def write_command_data(folder, base_id: str):
    """A command's inputs in `folder`: tiny_bert/ (a tiny BertForMaskedLM whose config names `base_id` as its origin),
    train/validation.jsonl (text, label), choice.jsonl (multiple choice), mixture.json (both) and text.txt."""
    import json
    import random
    from pathlib import Path

    from transformers import AutoModelForMaskedLM

    folder = Path(folder)
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model_dir = folder / "tiny_bert"
    AutoModelForMaskedLM.from_config(tiny_config("bert", tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "_name_or_path": base_id}))
    rng = random.Random(0)
    rows = [{"text": " ".join(rng.choices(COMMAND_WORDS, k=6)), "label": rng.randrange(2)} for _ in range(32)]
    for split, part in (("train", rows[:24]), ("validation", rows[24:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    choices = [{"question": "what is it", "choices": rng.choices(COMMAND_WORDS, k=3), "label": rng.randrange(3)}
               for _ in range(16)]
    (folder / "choice.jsonl").write_text("".join(json.dumps(r) + "\n" for r in choices))
    (folder / "mixture.json").write_text(json.dumps({"tasks": [
        {"name": "sent", "kind": "classification", "num_labels": 2, "data_files": str(folder / "train.jsonl")},
        {"name": "choice", "kind": "multiple_choice", "data_files": str(folder / "choice.jsonl")}]}))
    (folder / "text.txt").write_text("".join(" ".join(rng.choices(COMMAND_WORDS, k=12)) + "\n" for _ in range(60)))
    return folder


def write_own_files(folder):
    """The files a user brings on a first try, beside write_command_data's (whose choice.jsonl mix.yaml names):
    train.csv / dev.csv (text, string labels), corpus.txt, mix.yaml (a CSV task and the multiple-choice one, no kind
    or classes named), labelled.yaml (one task), and end.csv / end.yaml (an end task with rows of its own)."""
    import random
    from pathlib import Path

    folder = Path(folder)
    rng = random.Random(1)
    for name, size in (("train", 40), ("dev", 16)):
        rows = ["text,label"] + [f"{' '.join(rng.choices(COMMAND_WORDS, k=6))},{rng.choice(['neg', 'pos'])}"
                                 for _ in range(size)]
        (folder / f"{name}.csv").write_text("\n".join(rows) + "\n")
    (folder / "corpus.txt").write_text("".join(" ".join(rng.choices(COMMAND_WORDS, k=40)) + "\n" for _ in range(80)))
    (folder / "mix.yaml").write_text(f"tasks:\n  - name: sentiment\n    data_files: {folder / 'train.csv'}\n"
                                     f"    validation_fraction: 0.25\n  - name: pick\n"
                                     f"    data_files: {folder / 'choice.jsonl'}\n")
    (folder / "labelled.yaml").write_text(f"tasks:\n  - name: sentiment\n    data_files: {folder / 'train.csv'}\n")
    rows = ["text,label"] + [f"{' '.join(rng.choices(COMMAND_WORDS, k=6))},{rng.choice(['neg', 'pos'])}"
                             for _ in range(48)]
    (folder / "end.csv").write_text("\n".join(rows) + "\n")
    (folder / "end.yaml").write_text(f"name: end\ndata_files: {folder / 'end.csv'}\nvalidation_fraction: 0.25\n")
    return folder


def command_args(script: str, data, out, quiet, meta_objective: str = "hard") -> list[str]:
    """A few-second job of `script` (run_muppet, run_amos, ...) on write_command_data's files, checkpoints every 2
    steps; the meta-learned LM on Two Moons (hard/soft) or on text.txt (mlm)."""
    model = ["--model_name_or_path", str(data / "tiny_bert")]
    common = ["--output_dir", str(out), "--do_train", "--save_strategy", "steps", "--save_steps", "2", *quiet]
    if script == "run_muppet":
        return [*model, "--mixture_file", str(data / "mixture.json"), "--max_seq_length", "16",
                "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", *common]
    if script == "run_amos":  # pre-training from scratch: no base model
        return ["--train_file", str(data / "text.txt"), "--tokenizer_name", str(data / "tiny_bert"),
                "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2",
                "--intermediate_size", "64", "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2",
                "--max_seq_length", "16", "--validation_split_percentage", "20", "--per_device_train_batch_size", "8",
                *common]
    if script == "run_tartan":
        return [*model, "--train_file", str(data / "train.jsonl"), "--validation_file",
                str(data / "validation.jsonl"), "--auxiliary", "tapt=tapt", "--mode", "mt", "--max_seq_length", "16",
                "--per_device_train_batch_size", "4", *common]
    if script == "run_meta_lm" and meta_objective == "mlm":
        return [*model, "--train_file", str(data / "text.txt"), "--objective", "mlm", "--block_size", "16",
                "--validation_split_percentage", "20", "--per_device_train_batch_size", "4", "--seed", "0", *common]
    if script == "run_meta_lm":
        return [*model, "--two_moons", "--two_moons_num_unlabelled", "40", "--two_moons_finetune_size", "10",
                "--validation_split_percentage", "20", "--per_device_train_batch_size", "4", "--objective",
                meta_objective, "--seed", "0", *common]
    return [*model, "--train_file", str(data / "train.jsonl"), "--validation_file", str(data / "validation.jsonl"),
            "--task_kind", "classification", "--per_device_train_batch_size", "4", *common]


class StopAfter(TrainerCallback):
    """Stops training after optimizer step `step` (its checkpoint saved as save_steps says): the first half of a
    straight-vs-resumed comparison."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


# ---- streamed corpora (tests/test_streaming*.py) -----------------------------------------------------------------


def write_corpus(path, documents: int, seed: int = 0) -> None:
    """A text file of `documents` lines of 3-30 random WORDS (one document a line)."""
    import random

    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(documents):
            handle.write(" ".join(rng.choices(WORDS, k=rng.randint(3, 30))) + "\n")


def write_large_corpus(path, size: int = 200_000_000) -> None:
    """A text file of about `size` bytes (one 40-word line repeated), written a line at a time."""
    import os

    line = " ".join(WORDS[:40]) + "\n"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(line * (size // len(line)))
    assert os.path.getsize(path) > 0.95 * size


PEAK_RSS = """
import resource, sys
from hf_aux.__main__ import main
main(sys.argv[1:])
print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_mb(folder, argv: list[str], name: str) -> float:
    """The peak RSS (MB) of `hf-aux <argv>` run to its end in a fresh process (the installed command's entry point,
    hf_aux.__main__.main), with a datasets cache of its own under `folder` (so that every run does the same
    work, the data files' line checks included)."""
    import os
    import subprocess
    import sys

    script = os.path.join(folder, "peak_rss.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(PEAK_RSS)
    env = {**os.environ, "HF_DATASETS_CACHE": os.path.join(folder, f"cache-{name}")}
    done = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split("PEAK_KB")[-1]) / 1024


HOLD_LOCK = ("import sys, time; from hf_aux.runtime.run_guard import acquire_lock; acquire_lock(sys.argv[1]); "
             "print('held', flush=True); time.sleep(600)")


def hold_lock(out):
    """A live process holding `out`'s lock (run_guard.acquire_lock): the output folder is in use (kill the process
    after)."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n", "the holder could not lock the folder"
    holder.stdout.close()
    return holder
