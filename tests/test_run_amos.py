"""run_amos.py's continued-pretraining mode (--encoder_name_or_path): a pretrained BERT encoder becomes the
discriminator (ElectraForPreTraining) and the generator's lower layers; the run logs the RTD AUC, and plain
transformers loading the saved discriminator sees the same separation as the trained AmosModel."""

import random

import torch
from hf_aux.amos import command as run_amos
from tiny import WORDS, tiny_config, tiny_tokenizer
from transformers import AutoModel, AutoModelForPreTraining

from hf_aux.tasks.metrics import roc_auc
from hf_aux.amos.model import AmosModel



def test_continued_pretraining_of_an_encoder_logs_auc_and_plain_transformers_sees_the_same(tmp_path, capsys):
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    encoder_dir = tmp_path / "encoder"
    AutoModel.from_config(tiny_config("bert", tokenizer, num_hidden_layers=3)).save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    rng = random.Random(0)
    (tmp_path / "text.txt").write_text("".join(" ".join(rng.choices(WORDS, k=12)) + "\n" for _ in range(60)))
    out = tmp_path / "out"
    results = run_amos.main(*run_amos.parse_args([
        "--encoder_name_or_path", str(encoder_dir), "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2",
        "--train_file", str(tmp_path / "text.txt"), "--max_seq_length", "16", "--validation_split_percentage", "20",
        "--do_train", "--do_eval", "--max_steps", "4", "--logging_steps", "2", "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-3", "--report_to", "none", "--save_strategy", "no", "--output_dir", str(out)]))
    assert 0 <= results["eval_rtd_auc"] <= 1 and "eval_rtd_auc/layer_1" in results
    printed = capsys.readouterr().out
    assert "rtd_auc" in printed and "each head's samples alone" in printed
    assert (out / "rtd_auc.png").is_file()
    card = (out / "README.md").read_text()
    assert f"base_model: {encoder_dir}" not in card  # a local folder is not a Hub id

    # the saved discriminator, loaded by plain transformers, scores the replaced tokens exactly as the AmosModel does
    amos = AmosModel.from_pretrained(str(out)).eval()
    plain = AutoModelForPreTraining.from_pretrained(str(out)).eval()
    assert type(plain).__name__ == "ElectraForPreTraining"
    ids = torch.tensor([tokenizer.encode(" ".join(rng.choices(WORDS, k=14))) for _ in range(8)])
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) < 0.3
    chosen[:, 0] = chosen[:, -1] = False
    labels[chosen] = ids[chosen]
    masked = ids.masked_fill(chosen, tokenizer.mask_token_id)
    with torch.no_grad():
        outputs = amos(masked, labels=labels, original_input_ids=ids)
        plain_logits = plain(input_ids=outputs.replaced_input_ids).logits
    torch.testing.assert_close(plain_logits, outputs.rtd_logits, rtol=1e-5, atol=1e-5)
    assert roc_auc(plain_logits.flatten(), outputs.rtd_labels.flatten()) == roc_auc(
        outputs.rtd_logits.flatten(), outputs.rtd_labels.flatten())


def test_continued_pretraining_ends_with_the_downstream_probe_against_the_start(tmp_path, capsys):
    """At the demo's budget (200 steps) the command tells where the encoder ended against where it started: the
    probe's accuracies are what hf_aux.amos.probe computes on the starting encoder and on the saved discriminator; a
    shorter run (the other tests') and --downstream_probe false skip it."""
    from hf_aux.amos.probe import downstream_probe

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    encoder_dir = tmp_path / "encoder"
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    rng = random.Random(0)
    (tmp_path / "text.txt").write_text("".join(" ".join(rng.choices(WORDS, k=24)) + "\n" for _ in range(80)))
    argv = ["--encoder_name_or_path", str(encoder_dir), "--generator_num_hidden_layers", "1", "--mlm_layers", "1",
            "--train_file", str(tmp_path / "text.txt"), "--max_seq_length", "16", "--per_device_train_batch_size",
            "2", "--logging_steps", "100", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true"]
    out = tmp_path / "out"
    results = run_amos.main(*run_amos.parse_args([*argv, "--max_steps", "200", "--output_dir", str(out)]))
    printed = capsys.readouterr().out
    assert "Downstream probe (rotten_tomatoes sentiment" in printed
    expected = downstream_probe(AutoModel.from_pretrained(encoder_dir), AutoModel.from_pretrained(out), tokenizer)
    assert results["probe_start_accuracy"] == expected["probe_start_accuracy"]
    assert results["probe_end_accuracy"] == expected["probe_end_accuracy"]
    assert (out / "probe_results.json").is_file()
    for extra in (["--max_steps", "4"], ["--max_steps", "200", "--downstream_probe", "false"]):
        results = run_amos.main(*run_amos.parse_args([*argv, *extra, "--output_dir", str(tmp_path / extra[-1])]))
        assert "probe_end_accuracy" not in results and "Downstream probe" not in capsys.readouterr().out


def test_continued_pretraining_defaults_to_its_own_rate_and_a_given_rate_wins(tmp_path):
    """The paper's 5e-4 is a from-scratch rate: continuing a pretrained encoder (the embedded default, or any
    --encoder_name_or_path) defaults to CONTINUED_PRETRAINING_RATE; a rate the user gives, on the command line or in
    a --config file, is kept; from scratch keeps 5e-4."""
    out = ["--output_dir", str(tmp_path / "out")]
    assert run_amos.parse_args(out)[2].learning_rate == run_amos.CONTINUED_PRETRAINING_RATE == 2e-5  # the demo
    assert run_amos.parse_args([*out, "--learning_rate", "1e-4"])[2].learning_rate == 1e-4
    config = tmp_path / "args.yaml"
    config.write_text("learning_rate: 3.0e-5\n")
    assert run_amos.parse_args([*out, "--config", str(config)])[2].learning_rate == 3e-5
    text = tmp_path / "text.txt"
    text.write_text("the movie was good\n" * 20)
    own = run_amos.parse_args([*out, "--train_file", str(text), "--encoder_name_or_path", "my/encoder"])
    assert own[2].learning_rate == 2e-5
    scratch = run_amos.parse_args([*out, "--train_file", str(text), "--tokenizer_name", "my/tokenizer"])
    assert scratch[0].encoder_name_or_path is None and scratch[2].learning_rate == 5e-4
