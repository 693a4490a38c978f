"""The local Hub server (tests/hub_server.py) with the real clients, and hf_aux.runtime.hub on top of it.

Everything talks to 127.0.0.1 only: the `local_hub` fixture starts a server on a free port and points the
imported huggingface_hub / transformers / datasets at it (see hub_server's module docstring).
"""

import copy
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from huggingface_hub import (
                             HfApi, ModelCard, hf_hub_download, list_repo_files, snapshot_download,
                             )
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError
from transformers import AutoModel, BertForSequenceClassification, BertModel, Trainer, TrainingArguments

from hf_aux.runtime.hub import HubPushError, HubTokenSafeArgsMixin, find_token_in_files, push_folder_to_hub
from hub_server import DEFAULT_USER, local_hub  # noqa: F401 - `local_hub` is a fixture
from tiny import tiny_config, tiny_tokenizer

TOKEN = "hf_TestTokenThatMustNeverBeSaved0123456789"
REPO = f"{DEFAULT_USER}/tiny-bert"


def tiny_bert(seed=0):
    torch.manual_seed(seed)
    return BertModel(tiny_config("bert", tiny_tokenizer())).eval()


def same_outputs(a, b):
    ids = torch.tensor([[2, 10, 20, 30, 3]])
    with torch.no_grad():
        return torch.equal(a(input_ids=ids).last_hidden_state, b(input_ids=ids).last_hidden_state)


def digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- the server with the real clients --------------------------------------------------------------------------
def test_push_to_hub_then_snapshot_download_and_from_pretrained(local_hub, tmp_path):
    model, tokenizer = tiny_bert(), tiny_tokenizer()
    model.push_to_hub(REPO, token=TOKEN)
    tokenizer.push_to_hub(REPO, token=TOKEN)
    model.save_pretrained(tmp_path / "local")
    tokenizer.save_pretrained(tmp_path / "local")

    files = set(list_repo_files(REPO))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    # The weights went through the LFS batch API and its upload URL, the config inline in the commit.
    paths = [(r.method, r.path) for r in local_hub.requests]
    assert ("POST", f"/{REPO}.git/info/lfs/objects/batch") in paths
    assert any(m == "PUT" and p.startswith("/lfs-upload/") for m, p in paths)
    assert all(r.token == TOKEN for r in local_hub.requests if r.method == "POST" and "/commit/" in r.path)

    downloaded = Path(snapshot_download(REPO))
    local = tmp_path / "local"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (downloaded / name).read_bytes() == (local / name).read_bytes(), name

    loaded = AutoModel.from_pretrained(REPO).eval()
    assert type(loaded) is BertModel
    assert same_outputs(model, loaded)
    assert not same_outputs(tiny_bert(seed=1), loaded)  # the comparison can fail


def test_seeded_repository_is_a_hub_download_source(local_hub, tmp_path):
    model = tiny_bert(seed=3)
    model.save_pretrained(tmp_path / "seed")
    tiny_tokenizer().save_pretrained(tmp_path / "seed")
    local_hub.seed(f"{DEFAULT_USER}/seeded", tmp_path / "seed")

    assert same_outputs(model, AutoModel.from_pretrained(f"{DEFAULT_USER}/seeded").eval())
    path = hf_hub_download(f"{DEFAULT_USER}/seeded", "config.json")
    assert json.loads(Path(path).read_text())["hidden_size"] == 32
    # Range requests (resumed downloads) answer the requested bytes.
    import httpx2

    url = f"{local_hub.url}/{DEFAULT_USER}/seeded/resolve/main/config.json"
    response = httpx2.get(url, headers={"Range": "bytes=2-9"})
    assert response.status_code == 206
    assert response.content == (tmp_path / "seed" / "config.json").read_bytes()[2:10]


def test_missing_repository_and_file_give_clear_errors(local_hub):
    with pytest.raises(RepositoryNotFoundError, match="Repository Not Found"):
        hf_hub_download(f"{DEFAULT_USER}/does-not-exist", "config.json")
    tiny_bert().push_to_hub(REPO, token=TOKEN)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "no_such_file.json")
    with pytest.raises(OSError, match="not a valid model identifier|does-not-exist"):
        AutoModel.from_pretrained(f"{DEFAULT_USER}/does-not-exist")
    missing = [r for r in local_hub.requests if r.path.endswith("/no_such_file.json")]
    assert missing and all(r.method in ("HEAD", "GET") for r in missing)


def test_rejected_token_answers_401(local_hub):
    local_hub.accept_only("hf_good")
    with pytest.raises(HfHubHTTPError) as error:
        HfApi().create_repo(f"{DEFAULT_USER}/private-thing", token="hf_bad")
    assert error.value.response.status_code == 401
    HfApi().create_repo(f"{DEFAULT_USER}/private-thing", token="hf_good")
    assert [r.token for r in local_hub.requests if r.path == "/api/repos/create"] == ["hf_bad", "hf_good"]


def test_model_card_push_is_validated(local_hub):
    HfApi().create_repo(REPO, token=TOKEN)
    card = ModelCard("---\nlibrary_name: transformers\ntags:\n- hf_aux\n---\n\n# A card\n")
    card.push_to_hub(REPO, token=TOKEN)
    pushed = ModelCard(local_hub.files(REPO)["README.md"].decode())
    assert pushed.data.tags == ["hf_aux"]
    assert HfApi().model_info(REPO).card_data.library_name == "transformers"
    # Metadata that does not parse is refused, as the Hub refuses it (ModelCard itself would not build it).
    import httpx2

    answer = httpx2.post(f"{local_hub.url}/api/validate-yaml",
                         json={"repoType": "model", "content": "---\ntags: [unclosed\n---\n\ntext\n"})
    assert answer.status_code == 400 and "Invalid YAML" in answer.text


def test_dataset_repository_with_load_dataset(local_hub, tmp_path):
    import datasets

    api = HfApi()
    api.create_repo(f"{DEFAULT_USER}/tiny-data", repo_type="dataset", token=TOKEN)
    rows = [{"text": f"sentence {i}", "label": i % 2} for i in range(6)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    api.upload_file(path_or_fileobj=str(tmp_path / "train.jsonl"), path_in_repo="train.jsonl",
                    repo_id=f"{DEFAULT_USER}/tiny-data", repo_type="dataset", token=TOKEN)
    loaded = datasets.load_dataset(f"{DEFAULT_USER}/tiny-data", split="train")
    assert loaded.to_list() == rows


def test_subprocess_clients_use_the_server_through_the_environment(local_hub, tmp_path):
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "notes.txt").write_text("hello\n")
    local_hub.seed(f"{DEFAULT_USER}/for-subprocess", tmp_path / "small")
    code = f"from huggingface_hub import list_repo_files; print(sorted(list_repo_files('{DEFAULT_USER}/for-subprocess')))"
    out = subprocess.run([sys.executable, "-c", code], env=local_hub.client_env(tmp_path / "sub_home"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "notes.txt" in out.stdout and ".gitattributes" in out.stdout


# ---- hf_aux.runtime.hub: the token never leaves the process ----------------------------------------------------------
@dataclass
class SafeArgs(HubTokenSafeArgsMixin, TrainingArguments):
    """What every hf_aux trainer config does: the mixin first, then TrainingArguments, then its own fields."""

    aux_weight: float = field(default=0.5, metadata={"help": "A method setting, to check it survives pickling."})


def train_and_push(tmp_path, args_class):
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config("bert", tokenizer))
    data = [dict(input_ids=[2, 10 + i, 11, 3], attention_mask=[1] * 4, labels=i % 2) for i in range(8)]
    args = args_class(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, report_to=[],
                      save_strategy="steps", save_steps=1, push_to_hub=True, hub_model_id=REPO, hub_token=TOKEN,
                      hub_strategy="checkpoint", use_cpu=True, dataloader_pin_memory=False)
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    trainer.train()
    trainer.push_to_hub()
    return trainer


def test_plain_trainer_pushes_the_token_in_training_args_bin(local_hub, tmp_path):
    """The problem hf_aux fixes, as transformers 5.23 behaves: if this starts failing, transformers fixed it."""
    train_and_push(tmp_path, TrainingArguments)
    leaked = sorted(path for path, content in local_hub.files(REPO).items() if TOKEN.encode() in content)
    assert "training_args.bin" in leaked


def test_token_safe_args_keep_the_token_out_of_every_saved_and_pushed_file(local_hub, tmp_path):
    trainer = train_and_push(tmp_path, SafeArgs)
    pushed = local_hub.files(REPO)
    assert "last-checkpoint/training_args.bin" in pushed and "training_args.bin" in pushed  # checkpoints went up
    assert [path for path, content in pushed.items() if TOKEN.encode() in content] == []
    assert find_token_in_files(tmp_path / "out", TOKEN) == []  # checkpoints, state, card, logs on disk too
    # Every request body the server received is free of it too (headers carry it, as they must).
    assert not any(TOKEN.encode() in r.body for r in local_hub.requests)

    saved = torch.load(tmp_path / "out" / "training_args.bin", weights_only=False)
    assert type(saved) is SafeArgs and saved.hub_token is None
    assert saved.aux_weight == 0.5 and saved.max_steps == 2 and saved.hub_model_id == REPO
    # The live arguments still hold the token, and copies of them too.
    assert trainer.args.hub_token == TOKEN
    assert copy.deepcopy(trainer.args).hub_token == TOKEN and copy.copy(trainer.args).hub_token == TOKEN


# ---- hf_aux.runtime.hub.push_folder_to_hub ---------------------------------------------------------------------------
def saved_output_folder(tmp_path: Path) -> Path:
    """A run script's output folder: save_pretrained files, card, figure, results, plus things never pushed."""
    folder = tmp_path / "run"
    tiny_bert().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (folder / "README.md").write_text("---\ntags:\n- hf_aux\n---\n\n# card\n")
    (folder / "figures").mkdir()
    (folder / "figures" / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (folder / "all_results.json").write_text('{"eval_loss": 0.5}')
    (folder / "checkpoint-2").mkdir()
    (folder / "checkpoint-2" / "optimizer.pt").write_bytes(b"\0" * 64)
    (folder / "runs").mkdir()
    (folder / "runs" / "events.out").write_bytes(b"event")
    return folder


def test_push_folder_to_hub_pushes_exactly_the_saved_files(local_hub, tmp_path):
    folder = saved_output_folder(tmp_path)
    commit = push_folder_to_hub(folder, REPO, token=TOKEN, commit_message="End of training")
    pushed = local_hub.files(REPO)
    expected = {path for path in digest(folder) if not path.startswith(("checkpoint-2/", "runs/"))}
    assert set(pushed) == expected | {".gitattributes"}
    assert all(pushed[path] == (folder / path).read_bytes() for path in expected)
    assert commit.oid == HfApi().model_info(REPO).sha
    # A second push of the same folder to an existing repository works (create_repo with exist_ok).
    push_folder_to_hub(folder, REPO, token=TOKEN, commit_message="again")


def test_push_folder_to_hub_refuses_files_holding_the_token(local_hub, tmp_path):
    folder = saved_output_folder(tmp_path)
    (folder / "notes.txt").write_text(f"token={TOKEN}\n")
    with pytest.raises(ValueError, match="notes.txt"):
        push_folder_to_hub(folder, REPO, token=TOKEN)
    assert local_hub.requests == []  # nothing was sent


def test_the_token_scan_reads_exactly_the_files_that_are_pushed_in_one_commit(local_hub, tmp_path):
    """A token in an ignored file (a checkpoint, TensorBoard's runs/, a hidden file) does not stop the push; the
    rest goes up in one commit (one /commit/ request)."""
    folder = saved_output_folder(tmp_path)
    for ignored in ("checkpoint-2/notes.txt", "runs/notes.txt", ".env", "figures/.hidden"):
        (folder / ignored).write_text(f"token={TOKEN}\n")
    push_folder_to_hub(folder, REPO, token=TOKEN)
    pushed = local_hub.files(REPO)
    assert not {"checkpoint-2/notes.txt", "runs/notes.txt", ".env", "figures/.hidden"} & set(pushed)
    assert [path for path, content in pushed.items() if TOKEN.encode() in content] == []
    assert len([r for r in local_hub.requests if "/commit/" in r.path]) == 1
    assert [c.title for c in local_hub.repos[("model", REPO)].commits] == ["initial commit", "End of training"]


@pytest.mark.parametrize("failure", ["rejected_token", "server_down"])
def test_failed_push_says_what_failed_and_leaves_the_folder_intact(local_hub, tmp_path, failure, caplog):
    folder = saved_output_folder(tmp_path)
    before = digest(folder)
    if failure == "rejected_token":
        local_hub.accept_only("hf_some_other_token")
        expected = "rejected the token \\(401"
    else:
        local_hub.stop()
        expected = "could not connect to http://127.0.0.1"
    with pytest.raises(HubPushError, match=expected) as error:
        push_folder_to_hub(folder, REPO, token=TOKEN)
    assert str(folder) in str(error.value) and "intact" in str(error.value)
    assert TOKEN not in str(error.value) and TOKEN not in caplog.text
    assert any("failed" in record.message for record in caplog.records)
    assert digest(folder) == before
