"""TARTAN and the meta-learned LM objective across encoder families (issue #58). Through the installed `hf-aux tartan`
(one mode per family: META on the families without SDPA and on ModernBERT, MT on the others) and `hf-aux meta-lm`
(one objective per family, each objective on three) at 2 steps on write_command_data's files: exit 0, the output
loads with plain transformers as the family's own class, every tensor that came from the checkpoint moved (but the
attention key biases, which get no gradient), the auxiliary MLM heads start as the checkpoint's own head, the saved
tokenizer is exactly the student's vocabulary. The other mode and objectives of every family run through the
command's entry point (hf_aux.__main__.main) in this process. On TartanModel itself, for every family: the copied
heads give the masked LM's own loss (ModernBERT's bias-less head tensor by tensor, ALBERT's gelu_new) and move with
the body in one step; phi* pools with the batch's attention mask. Refusals (an encoder-decoder, a model with the
Two Moons demo) are one line, exit status 2, before any work."""

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from safetensors.torch import load_file
from test_first_try import ENV, HF_AUX
from tiny import ENCODER_FAMILIES, tiny_config, tiny_tokenizer, write_command_data
from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification,
                          AutoTokenizer)

from hf_aux.__main__ import main as hf_aux_main
from hf_aux.errors import UserInputError
from hf_aux.meta_lm import command as meta_lm_command
from hf_aux.meta_lm.teacher import MetaLMTeacher
from hf_aux.tartan import command as tartan_command
from hf_aux.tartan.model import TartanModel
from hf_aux.tasks.data import MLMCollator

META_TARTAN = ("deberta-v2", "mpnet", "modernbert")  # the installed tartan runs in META mode (no SDPA; ModernBERT)
MODE = {family: "meta" if family in META_TARTAN else "mt" for family in ENCODER_FAMILIES}  # installed tartan runs
OBJECTIVE = {"bert": "hard", "electra": "hard", "albert": "hard", "deberta-v2": "soft", "mpnet": "soft",
             "modernbert": "soft", "roberta": "mlm", "xlm-roberta": "mlm", "distilbert": "mlm"}  # installed meta-lm
OBJECTIVES = ("hard", "soft", "mlm")
TEXTS = ["the movie was really good and the plot was great fun to watch", "a terrible film with a boring story",
         "she said hello to the cat"]  # three lengths: padded batches
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--save_strategy", "no"]
# attention key biases get no gradient (a softmax over keys is blind to a shift shared by all keys): they need not move
KEY_BIASES = ("key.bias", "k_lin.bias", ".k.bias", "key_proj.bias")


def must_move(name: str) -> bool:
    return not name.endswith(KEY_BIASES) and "pooler" not in name  # (no pooled output in an MLM loss)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """write_command_data's files, sent.json (its classification task alone: the meta-LM mixture), and per family a
    tiny AutoModelForMaskedLM (+ the tiny tokenizer) whose weights are perturbed, so that a copied head is unlike a
    fresh one; a BART and a T5 for the refusals."""
    folder = write_command_data(tmp_path_factory.mktemp("tartan_meta_lm_families"), "hf-aux-tests/tiny-bert")
    tok = tiny_tokenizer()
    for family in ENCODER_FAMILIES:
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_config(tiny_config(family, tok))
        with torch.no_grad():  # non-trivial LayerNorm weights and biases (the decoder stays tied)
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.save_pretrained(folder / family)
        tok.save_pretrained(folder / family)
    for family in ("bart", "t5"):
        AutoModelForSeq2SeqLM.from_config(tiny_config(family, tok)).save_pretrained(folder / family)
        tok.save_pretrained(folder / family)
    (folder / "sent.json").write_text(json.dumps({"tasks": [{"name": "sent", "kind": "classification",
                                                             "num_labels": 2,
                                                             "data_files": str(folder / "train.jsonl")}]}))
    return folder


def tartan(work, family, mode):
    return ["tartan", "--model_name_or_path", work / family, "--train_file", work / "train.jsonl", "--validation_file",
            work / "validation.jsonl", "--auxiliary", "tapt=tapt", "--mode", mode, "--max_seq_length", "16",
            "--per_device_train_batch_size", "4", "--max_steps", "2", "--output_dir",
            work / "out" / f"tartan-{mode}-{family}", *QUIET]


def meta_lm(work, family, objective):
    labelled = [] if objective == "mlm" else ["--mixture", work / "sent.json"]
    return ["meta-lm", "--model_name_or_path", work / family, "--train_file", work / "text.txt", *labelled,
            "--objective", objective, "--block_size", "16", "--validation_split_percentage", "20",
            "--per_device_train_batch_size", "4", "--max_steps", "2", "--output_dir",
            work / "out" / f"meta-lm-{objective}-{family}", *QUIET]


REFUSALS = {  # name -> (its command, the command's name, what its one line says)
    "meta-lm-demo-with-a-model": (lambda w: ["meta-lm", "--model_name_or_path", w / "bert", "--max_steps", "2",
                                             "--output_dir", w / "out" / "r1"],
                                  "meta-lm", ["field 'model_name_or_path'", "Two Moons demo", "--train_file"]),
    "tartan-encoder-decoder": (lambda w: tartan(w, "bart", "mt"), "tartan",
                               ["field 'model_name_or_path'", "encoder-decoder", "BartConfig"]),
}


def hf_aux(name, argv, work) -> subprocess.CompletedProcess:
    """The installed `hf-aux` with a datasets cache of its own (two runs at once read the same files)."""
    env = {**ENV, "HF_DATASETS_CACHE": str(work / "cache" / name)}
    return subprocess.run([HF_AUX, *map(str, argv)], cwd=work, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(work):
    """Every installed-command run of this file, started at once on two workers; name -> Future of its
    CompletedProcess."""
    jobs = {f"tartan-{mode}-{family}": tartan(work, family, mode) for family, mode in MODE.items()}
    jobs.update({f"meta-lm-{objective}-{family}": meta_lm(work, family, objective)
                 for family, objective in OBJECTIVE.items()})
    jobs.update({f"refusal-{name}": spec[0](work) for name, spec in REFUSALS.items()})
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(hf_aux, name, argv, work) for name, argv in jobs.items()}


def finished(runs, name, work):
    done = runs[name].result()
    assert done.returncode == 0, (f"exit {done.returncode}\n" + done.stdout + done.stderr)[-5000:]
    assert "Traceback" not in done.stderr
    return trained(work / "out" / name)


def trained(out):
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    return out


def assert_moved(start, out):
    """Every float tensor of checkpoint `start` that the output folder `out` also saves has changed (embedding
    matrices grown by new tokens: their first rows)."""
    before, after = load_file(start / "model.safetensors"), load_file(out / "model.safetensors")
    common = [key for key in before if key in after and before[key].is_floating_point() and must_move(key)]
    assert len(common) > 10, sorted(after)[:10]
    rows = {key: min(before[key].shape[0], after[key].shape[0]) for key in common}
    same = [key for key in common if before[key].shape[1:] == after[key].shape[1:]
            and torch.equal(before[key][:rows[key]], after[key][:rows[key]])]
    assert not same, same


def check_tartan_output(work, family, out):
    """A plain classifier of the family's own class that trained, with MLM heads that started as the checkpoint's
    own and moved."""
    classifier = AutoModelForSequenceClassification.from_pretrained(out)
    assert classifier.config.model_type == family
    assert type(AutoModel.from_pretrained(out)) is type(classifier.base_model)
    assert_moved(work / family, out)
    model = TartanModel.from_pretrained(str(out))
    assert model.auxiliary_tasks == ["tapt"]
    start = TartanModel(AutoModelForSequenceClassification.from_pretrained(work / family, num_labels=2), ["tapt"])
    assert start.load_pretrained_mlm_heads(str(work / family))
    assert model.mlm_hidden_act == start.mlm_hidden_act
    for (key, value), first in zip(model.mlm_heads["tapt"].state_dict().items(),
                                   start.mlm_heads["tapt"].state_dict().values()):
        torch.testing.assert_close(value, first, rtol=0, atol=2e-3, msg=key)  # the copy, after 2 small steps
        assert not torch.equal(value, first), key


def check_meta_lm_output(work, family, objective, out):
    """A plain masked LM of the family's own class that trained, beside a tokenizer of exactly its vocabulary, and a
    teacher for the meta objectives."""
    student = AutoModelForMaskedLM.from_pretrained(out)
    assert student.config.model_type == family
    assert len(AutoTokenizer.from_pretrained(out)) == student.get_input_embeddings().num_embeddings
    assert_moved(work / family, out)
    assert (out / "teacher").is_dir() is (objective != "mlm")
    if objective != "mlm":
        assert MetaLMTeacher.from_pretrained(str(out / "teacher")).config.vocab_size == student.config.vocab_size


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_tartan_through_the_installed_command(family, work, runs):
    check_tartan_output(work, family, finished(runs, f"tartan-{MODE[family]}-{family}", work))


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_meta_lm_through_the_installed_command(family, work, runs):
    objective = OBJECTIVE[family]
    check_meta_lm_output(work, family, objective, finished(runs, f"meta-lm-{objective}-{family}", work))


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_a_refusal_is_one_line_with_status_2_before_any_work(name, work, runs):
    done = runs[f"refusal-{name}"].result()
    make, command, says = REFUSALS[name]
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith(f"hf-aux {command}: error: ")]
    assert len(errors) == 1 and all(part in errors[0] for part in says), done.stderr[-3000:]
    argv = make(work)
    assert not argv[argv.index("--output_dir") + 1].exists()  # refused before any work


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_every_other_variant_through_the_commands_entry_point(family, work, capsys):
    """TARTAN's other mode and the two other meta-LM objectives, through hf_aux.__main__.main (the installed
    command's entry point) in this process."""
    variants = [("tartan", "mt" if MODE[family] == "meta" else "meta")]
    variants += [("meta-lm", objective) for objective in OBJECTIVES if objective != OBJECTIVE[family]]
    for command, variant in variants:
        argv = (tartan if command == "tartan" else meta_lm)(work, family, variant)
        try:
            hf_aux_main([str(a) for a in argv])
        except SystemExit as stopped:
            assert stopped.code in (0, None), capsys.readouterr().err[-3000:]
        out = trained(work / "out" / f"{command}-{variant}-{family}")
        if command == "tartan":
            check_tartan_output(work, family, out)
        else:
            check_meta_lm_output(work, family, variant, out)


# ---- refusals and the Two Moons demo's own tokenizer, in this process ---------------------------------------------


def test_meta_lm_refuses_what_is_no_masked_lm_encoder_before_any_work(work, tmp_path, capsys):
    out = ["--output_dir", str(tmp_path / "out")]
    text = ["--train_file", str(work / "text.txt"), "--objective", "mlm", *out]
    with pytest.raises(SystemExit) as stopped:  # the command's one line (what crashed mid-training before)
        hf_aux_main(["meta-lm", "--model_name_or_path", str(work / "bart"), *text])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("hf-aux meta-lm: error: ")] == [
        f"hf-aux meta-lm: error: ModelArguments: field 'model_name_or_path': hf-aux meta-lm trains a masked-LM "
        f"encoder (an AutoModelForMaskedLM such as BERT, RoBERTa, DeBERTa-v2, ELECTRA or ModernBERT); "
        f"'{work / 'bart'}' is an encoder-decoder (BartConfig: is_encoder_decoder=True)"]
    tokenizer = ["--tokenizer_name", str(work / "bert")]
    cases = [([*text, "--model_name_or_path", str(work / "t5")], r"field 'model_name_or_path'.*masked-LM encoder.*"
                                                                 r"is an encoder-decoder \(T5Config"),
             ([*text, *tokenizer, "--model_type", "t5"], r"field 'model_type'.*'t5' is an encoder-decoder"),
             ([*text, *tokenizer, "--model_type", "gpt2"], r"field 'model_type'.*no masked-LM class.*GPT2Config"),
             ([*text, *tokenizer, "--model_type", "nonsense"], r"field 'model_type': unknown model type 'nonsense'"),
             (["--two_moons", *tokenizer, *out], r"field 'tokenizer_name': the Two Moons data .* own 512-token"),
             (["--model_name_or_path", str(work / "bert"), *out], r"field 'model_name_or_path': without a data "
                                                                  r"source .* Two Moons demo")]
    for argv, message in cases:
        with pytest.raises(UserInputError, match=message):
            meta_lm_command.main(*meta_lm_command.parse_args(argv))
        assert not (tmp_path / "out").exists()
    with pytest.raises(UserInputError, match=r"field 'model_name_or_path'.*is an encoder-decoder \(T5Config"):
        tartan_command.main(*tartan_command.parse_args([str(a) for a in tartan(work, "t5", "mt")[1:]]))
    assert not (work / "out" / "tartan-mt-t5").exists()


def test_two_moons_asked_for_with_a_model_saves_a_tokenizer_of_its_vocabulary(work, tmp_path):
    """--two_moons given with a model (unlike the demo, which refuses one): the model's embeddings are resized to the
    Two Moons tokenizer's 512 tokens, down as well as up."""
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(tiny_config("bert", tok, vocab_size=600)).save_pretrained(tmp_path / "wide")
    out = tmp_path / "out"
    meta_lm_command.main(*meta_lm_command.parse_args([
        "--two_moons", "--model_name_or_path", str(tmp_path / "wide"), "--two_moons_num_unlabelled", "40",
        "--two_moons_finetune_size", "10", "--validation_split_percentage", "20", "--per_device_train_batch_size", "4",
        "--objective", "hard", "--max_steps", "1", "--output_dir", str(out), *QUIET]))
    student = AutoModelForMaskedLM.from_pretrained(out)
    assert student.get_input_embeddings().num_embeddings == student.config.vocab_size == 512
    assert len(AutoTokenizer.from_pretrained(out)) == 512


# ---- TartanModel on every family ---------------------------------------------------------------------------------


def mlm_batch(tok, seed=0):
    torch.manual_seed(seed)
    return MLMCollator(tok, mlm_probability=0.3)([{"input_ids": ids} for ids in tok(TEXTS)["input_ids"]])


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_copied_mlm_heads_give_the_masked_lms_own_loss_and_move_with_the_body(family, work):
    path = str(work / family)
    model = TartanModel.from_pretrained(path, auxiliary_tasks=["tapt"], num_labels=2).eval()
    masked_lm = AutoModelForMaskedLM.from_pretrained(path).eval()
    batch = mlm_batch(tiny_tokenizer())
    with torch.no_grad():
        torch.testing.assert_close(model.mlm_loss("tapt", batch), masked_lm(**batch).loss, rtol=1e-5, atol=1e-5)
    assert model.mlm_hidden_act == ("gelu_new" if family == "albert" else "gelu")  # ALBERT's hidden_act
    # one SGD step on the auxiliary loss moves every tensor of the head and of the body
    model.train()
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.mlm_loss("tapt", batch).backward()
    optimizer.step()
    moved = {name for name, value in model.named_parameters() if not torch.equal(value, before[name])}
    head = [name for name in before if name.startswith("mlm_heads.tapt.")]
    body = [f"classifier.{model.classifier.base_model_prefix}.{name}" for name, _ in model.body.named_parameters()
            if must_move(name)]
    assert len(head) == 5 and body and set(head + body) <= moved, sorted(set(head + body) - moved)


def test_copy_mlm_head_copies_modernberts_bias_less_head_tensor_by_tensor(work, tmp_path):
    path = str(work / "modernbert")
    masked_lm = AutoModelForMaskedLM.from_pretrained(path)
    source = masked_lm.head
    assert source.dense.bias is None and source.norm.bias is None  # what the copy used to trip over
    model = TartanModel.from_pretrained(path, auxiliary_tasks=["tapt", "dapt"], num_labels=2)
    for name in ("tapt", "dapt"):
        head = model.mlm_heads[name]
        assert set(head.state_dict()) == {"dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias", "bias"}
        assert torch.equal(head.dense.weight, source.dense.weight)
        assert torch.equal(head.dense.bias, torch.zeros_like(head.dense.bias))  # none in the source: 0
        assert torch.equal(head.layer_norm.weight, source.norm.weight)
        assert torch.equal(head.layer_norm.bias, torch.zeros_like(head.layer_norm.bias))
        assert torch.equal(head.bias, masked_lm.decoder.bias)
        assert head.layer_norm.eps == source.norm.eps == masked_lm.config.norm_eps
    model.save_pretrained(tmp_path / "saved")  # reloaded: the same heads, computing the same
    again = TartanModel.from_pretrained(str(tmp_path / "saved"))
    batch = mlm_batch(tiny_tokenizer())
    model.eval()
    again.eval()
    with torch.no_grad():
        assert torch.equal(model.mlm_loss("tapt", batch), again.mlm_loss("tapt", batch))


def test_the_copy_takes_the_heads_own_activation_and_refuses_a_head_it_cannot_reproduce(work, tmp_path):
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    config = tiny_config("modernbert", tok, classifier_activation="relu")
    AutoModelForMaskedLM.from_config(config).save_pretrained(tmp_path / "relu")
    model = TartanModel.from_pretrained(str(tmp_path / "relu"), auxiliary_tasks=["tapt"], num_labels=2)
    assert model.mlm_hidden_act == "relu"
    masked_lm = AutoModelForMaskedLM.from_pretrained(work / "modernbert")
    masked_lm.head.act = torch.nn.Tanh()  # no candidate activation
    fresh = TartanModel(AutoModelForSequenceClassification.from_pretrained(work / "modernbert", num_labels=2), ["a"])
    with pytest.raises(ValueError, match="masked_lm.*does not reproduce its logits"):
        fresh.copy_mlm_head(masked_lm)


def test_phi_star_pools_with_the_batchs_attention_mask(work):
    """ModernBERT's classifier_pooling='mean' averages over the attention mask: phi* (a copy of phi' here) gives the
    classifier's own logits on a padded batch only when it is handed the mask."""
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    classifier = AutoModelForSequenceClassification.from_config(
        tiny_config("modernbert", tok, num_labels=2, classifier_pooling="mean")).eval()
    model = TartanModel(classifier, ["tapt"]).eval()
    model.meta_head.model.load_state_dict(model.end_task_head_state_dict())
    batch = dict(tok(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False))
    batch["labels"] = torch.tensor([1, 0, 1])
    assert (batch["attention_mask"] == 0).any()
    with torch.no_grad():
        expected = classifier(**batch).logits
        features = model.body_outputs(batch)
        torch.testing.assert_close(model.meta_head(features, batch["labels"], batch["attention_mask"]).logits,
                                   expected, rtol=0, atol=1e-6)
        assert not torch.allclose(model.meta_head(features, batch["labels"]).logits, expected, atol=1e-4)
        torch.testing.assert_close(model.meta_loss(batch), classifier(**batch).loss, rtol=0, atol=1e-6)


def test_tartan_refuses_a_body_that_pools_the_sequence(tmp_path, capsys):
    """Funnel's classifier body (FunnelBaseModel) pools between its blocks: no state per masked token. Its MLM head
    (a bare decoder) cannot be copied, and with fresh heads the command refuses in one line before training."""
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(tiny_config("funnel", tok)).save_pretrained(tmp_path / "funnel")
    tok.save_pretrained(tmp_path / "funnel")
    write_command_data(tmp_path, "hf-aux-tests/tiny-bert")
    argv = tartan(tmp_path, "funnel", "mt")
    with pytest.raises(SystemExit) as stopped:
        hf_aux_main([*map(str, argv), "--mlm_heads", "fresh"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("hf-aux tartan: error: ")]
    assert len(errors) == 1 and "FunnelBaseModel gives 4 states for 8 tokens (block_sizes" in errors[0], err[-3000:]
    assert not (tmp_path / "out" / "tartan-mt-funnel" / "trainer_state.json").exists()
    model = TartanModel(AutoModelForSequenceClassification.from_pretrained(tmp_path / "funnel", num_labels=2), ["a"])
    with pytest.raises(ValueError, match="one state per token"):  # the library's own check, for direct use
        model.mlm_loss("a", mlm_batch(tok))
