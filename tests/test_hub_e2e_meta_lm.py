"""run_meta_lm.py against the local Hub server (tests/hub_server.py), in-process, on a reduced Two Moons setting
(the paper's 2-layer, hidden-8 model; 3 meta steps): the output folder is pushed with its card, comes back byte
for byte, the student loads through the server with plain `AutoModelForMaskedLM` and the teacher from its subfolder,
the card's model-index carries the evaluation results, and the token is in no pushed file, log, request body or
training_args.bin. A second run starts from the pushed student by Hub id, writes its card without pushing, and
works offline from the cache; missing repositories and offline misses name the argument."""

import hashlib
import json
import logging
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, snapshot_download
from transformers import AutoModelForMaskedLM

from hf_aux.runtime.hub import HubDownloadError, find_token_in_files
from hf_aux.meta_lm.teacher import MetaLMTeacher
from hub_server import DEFAULT_USER, local_hub  # noqa: F401 - `local_hub` is a fixture
from hf_aux.meta_lm import command as run_meta_lm

TOKEN = "hf_MetaLmE2eTokenNeverSaved0123456789"
REPO = f"{DEFAULT_USER}/meta-lm-moons"




def moons_args(out, *extra):
    """40 unlabelled sequences (8 held out), 10 labelled points, 3 meta steps with soft labels."""
    return ["--two_moons", "--two_moons_num_unlabelled", "40", "--two_moons_finetune_size", "10",
            "--validation_split_percentage", "20", "--per_device_train_batch_size", "4",
            "--per_device_eval_batch_size", "8", "--max_steps", "3", "--logging_steps", "1", "--learning_rate", "1e-2",
            "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--seed", "0",
            "--output_dir", str(out), *extra]


def digest(folder: Path, skip=("checkpoint-", "runs/", ".gitattributes", ".hf_aux_push.json")) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.relative_to(folder).as_posix().startswith(skip)}


def test_run_meta_lm_pushes_the_student_and_teacher_and_they_load_back(local_hub, tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO)
    local_hub.accept_only(TOKEN)
    out = tmp_path / "meta-lm"
    trainer = run_meta_lm.main(*run_meta_lm.parse_args(moons_args(
        out, "--do_train", "--do_eval", "--objective", "soft", "--push_to_hub", "--hub_model_id", REPO,
        "--hub_token", TOKEN)))

    # the output folder (student, teacher/, tokenizer, card, figure, results, training_args.bin) was pushed as is
    local = digest(out)
    assert {"config.json", "model.safetensors", "teacher/config.json", "teacher/model.safetensors", "README.md",
            "loss_curve.png", "training_args.bin", "eval_results.json", "tokenizer.json"} <= set(local)
    pushed = {path: hashlib.sha256(content).hexdigest() for path, content in local_hub.files(REPO).items()}
    assert {path: pushed.get(path) for path in local} == local

    # the token: in no pushed file, local file (training_args.bin included), request body or log line
    assert [path for path, content in local_hub.files(REPO).items() if TOKEN.encode() in content] == []
    assert find_token_in_files(out, TOKEN) == []
    assert torch.load(out / "training_args.bin", weights_only=False).hub_token is None
    assert trainer.args.hub_token == TOKEN  # the live arguments kept it for pushing
    assert not any(TOKEN.encode() in request.body for request in local_hub.requests)
    assert TOKEN not in caplog.text + capsys.readouterr().out

    # snapshot_download brings the same bytes back; plain transformers loads the student through the server
    downloaded = Path(snapshot_download(REPO))
    assert digest(downloaded) == local
    student = AutoModelForMaskedLM.from_pretrained(REPO).eval()
    trained = trainer.model.eval()
    for (name, value), loaded in zip(trained.state_dict().items(), student.state_dict().values()):
        assert torch.equal(value, loaded), name
    ids = torch.tensor([[2, 20, 30, 40, 50, 3]])
    # the student trains with eager attention (double backward); a plain load picks transformers' default (sdpa),
    # the same function up to float rounding, and loaded with the student's own attention it is bit-equal
    same_attention = AutoModelForMaskedLM.from_pretrained(REPO, attn_implementation="eager").eval()
    with torch.no_grad():
        assert torch.equal(same_attention(input_ids=ids).logits, trained(input_ids=ids).logits)
        torch.testing.assert_close(student(input_ids=ids).logits, trained(input_ids=ids).logits, rtol=1e-5, atol=1e-6)
    teacher = MetaLMTeacher.from_pretrained(REPO, subfolder="teacher")
    for (name, value), loaded in zip(trainer.teacher.state_dict().items(), teacher.state_dict().values()):
        assert torch.equal(value, loaded), name

    # the card: metadata parses; its model-index holds the evaluation results; objective, teacher, figure shown
    card = ModelCard.load(downloaded / "README.md")
    assert card.data.tags[:2] == ["hf_aux", "meta_lm"] and "soft-labels" in card.data.tags
    assert card.data.library_name == "transformers"
    eval_results = json.loads((out / "eval_results.json").read_text())
    assert card.data.eval_results is None and card.data.pipeline_tag == "fill-mask"  # Two Moons: not a Hub dataset
    row = next(line for line in card.text.splitlines() if line.startswith("| two_moons |"))
    assert f"| {eval_results['eval_loss']:.6g} |" in row and f"| {eval_results['perplexity']:.6g} |" in row
    assert "| objective | soft |" in card.text
    assert "| moon | classification | 10 |" in card.text  # the labelled task behind the support/query batches
    assert f'AutoModelForMaskedLM.from_pretrained("{REPO}")' in card.text
    assert f'MetaLMTeacher.from_pretrained("{REPO}", subfolder="teacher")' in card.text
    assert "](loss_curve.png)" in card.text


def test_hub_ids_as_inputs_card_without_push_offline_and_missing_repositories(local_hub, tmp_path, monkeypatch):
    from huggingface_hub import constants

    # a student and a teacher on the Hub (as a previous hard-label run would have pushed them)
    seed_out = tmp_path / "seed"
    run_meta_lm.main(*run_meta_lm.parse_args(moons_args(seed_out, "--do_train", "--objective", "hard", "--max_steps",
                                                   "1")))
    local_hub.seed(REPO, seed_out)
    teacher_repo = f"{DEFAULT_USER}/meta-lm-teacher"
    local_hub.seed(teacher_repo, seed_out / "teacher")

    # start from them by Hub id; no push: the card is written all the same and names the base model
    sent = len(local_hub.requests)
    out = tmp_path / "from-hub"
    hub_inputs = ["--model_name_or_path", REPO, "--teacher_name_or_path", teacher_repo]
    trainer = run_meta_lm.main(*run_meta_lm.parse_args(moons_args(out, "--do_train", "--do_eval", "false",
                                                             "--objective", "hard", "--max_steps", "1", *hub_inputs)))
    assert len(local_hub.requests) > sent and not any(r.method in ("POST", "PUT") for r in local_hub.requests[sent:])
    assert not trainer.args.push_to_hub
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == REPO and "hard-labels" in card.data.tags
    assert card.data.eval_results is None  # --do_eval false: nothing to report

    # offline: the cached repositories are used without a single request; an uncached one names the argument
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sent = len(local_hub.requests)
    run_meta_lm.main(*run_meta_lm.parse_args(moons_args(tmp_path / "offline", "--do_train", "--objective", "hard",
                                                   "--max_steps", "1", *hub_inputs)))
    assert len(local_hub.requests) == sent
    assert (tmp_path / "offline" / "README.md").is_file()
    with pytest.raises(HubDownloadError, match="field 'teacher_name_or_path': cannot load .*offline mode is on"):
        run_meta_lm.main(*run_meta_lm.parse_args(moons_args(
            tmp_path / "e", "--do_train", "--model_name_or_path", REPO,
            "--teacher_name_or_path", f"{DEFAULT_USER}/never-downloaded")))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(HubDownloadError, match=f"field 'model_name_or_path': cannot load '{DEFAULT_USER}/nope': "
                                               "there is no repository"):
        run_meta_lm.main(*run_meta_lm.parse_args(moons_args(tmp_path / "f", "--do_train",
                                                       "--model_name_or_path", f"{DEFAULT_USER}/nope")))
