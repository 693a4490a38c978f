"""The encoder a user brings (issue #58): every command through the installed `hf-aux` on a tiny random model of each
encoder family, and every output loaded the way its card says, by plain transformers.

One row per family (tiny.ENCODER_FAMILIES and Funnel: 2 layers, hidden 32, the shared tiny tokenizer, saved as
the family's *ForMaskedLM), one column per command at 2 steps on the user's own small files. A cell is "ok" (exit 0,
and each client below loads the output) or the one-line refusal EXPECTED names. Clients:

- finetune: the card's loading code as written, run from the folder the user trained in; the family's own
  `AutoModelForSequenceClassification` class without remote code (cls pooling, the default for a body without
  sentence-transformers files) and `pipeline("text-classification")`, with logits equal to hf_aux's own
  `MultiTaskModel` within 1e-5; the mean-pooling head through the shipped modeling file (`trust_remote_code`).
- muppet: AutoModel (the family's class) and `MultiTaskModel.from_pretrained` with the mixture's heads.
- amos (continued pretraining of the family's body, and from scratch): AutoModel's class, and `AmosModel` restores.
- tartan, meta-lm: AutoModel / AutoModelForMaskedLM.

docs/families.md is this table: `python tests/test_families.py` rewrites it from EXPECTED and CLIENT_CLASSES, and
test_the_docs_table_is_this_tests_data keeps the two the same.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny import ENCODER_FAMILIES, tiny_config, tiny_tokenizer, write_command_data, write_own_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "families.md"
HF_AUX = str(Path(sys.executable).parent / "hf-aux")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}
SIZES = ["--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2", "--intermediate_size", "64"]
COMMANDS = {  # column -> the command line a user types, on their files (`d`) and the family's folder (`d / family`)
    "finetune": lambda d, f: ["finetune", "--model_name_or_path", d / f, "--train_file", d / "train.csv",
                              "--validation_file", d / "dev.csv", "--max_steps", "2"],
    "muppet": lambda d, f: ["muppet", "--model_name_or_path", d / f, "--mixture_file", d / "mix.yaml", "--max_steps",
                            "2"],
    "amos": lambda d, f: ["amos", "--encoder_name_or_path", d / f, "--train_file", d / "corpus.txt",
                          "--generator_num_hidden_layers", "1", "--mlm_layers", "1", "--max_seq_length", "32",
                          "--max_steps", "2"],
    "amos scratch": lambda d, f: ["amos", "--encoder_name_or_path", "none", "--model_type", f, "--tokenizer_name",
                                  d / f, "--train_file", d / "corpus.txt", *SIZES, "--generator_num_hidden_layers",
                                  "2", "--mlm_layers", "1", "2", "--max_seq_length", "32", "--max_steps", "2"],
    "tartan": lambda d, f: ["tartan", "--model_name_or_path", d / f, "--train_file", d / "train.csv",
                            "--validation_file", d / "dev.csv", "--auxiliary", f"tapt={d / 'corpus.txt'}",
                            "--max_steps", "2"],
    "meta-lm": lambda d, f: ["meta-lm", "--model_name_or_path", d / f, "--train_file", d / "corpus.txt", "--mixture",
                             d / "labelled.yaml", "--max_steps", "2"],
}
# the nine families every method serves, and Funnel, whose depth is block_sizes (pooled between blocks)
FAMILIES = (*ENCODER_FAMILIES, "funnel")
FUNNEL_DEPTH = "whose depth is not one num_hidden_layers (Funnel's block_sizes)"
# (family, command) -> the refusal's text where the family cannot run the command (every other cell is "ok")
EXPECTED: dict[tuple[str, str], str] = {
    ("funnel", "amos"): FUNNEL_DEPTH,
    ("funnel", "amos scratch"): FUNNEL_DEPTH,
    ("funnel", "tartan"): "cannot map FunnelForMaskedLM's MLM head",
}
REMOTE_CODE = {"funnel"}  # families whose *ForSequenceClassification computes no head hf_aux trains


def classes(family: str) -> dict[str, str]:
    """The transformers classes plain transformers builds for a family's outputs (the table's "ok" cells)."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto as auto

    config = type(AutoConfig.for_model(family))

    def name(mapping) -> str:  # Funnel's AutoModel is the first of (FunnelModel, FunnelBaseModel)
        found = mapping[config]
        return (found[0] if isinstance(found, (tuple, list)) else found).__name__

    return {"AutoModel": name(auto.MODEL_MAPPING),
            "AutoModelForSequenceClassification": name(auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING),
            "AutoModelForMaskedLM": name(auto.MODEL_FOR_MASKED_LM_MAPPING)}


def cell_text(family: str, command: str) -> str:
    """A cell of docs/families.md: what plain transformers builds from the output, or the refusal."""
    if (family, command) in EXPECTED:
        return f"refused: {EXPECTED[family, command]}"
    found = classes(family)
    if command == "finetune" and family in REMOTE_CODE:
        return "ok: the shipped HfAuxSequenceClassifier (trust_remote_code), pipeline"
    if command == "finetune":
        mean = "its class too" if family == "modernbert" else "trust_remote_code"
        return f"ok: {found['AutoModelForSequenceClassification']}, pipeline (mean pooling: {mean})"
    if command == "muppet":
        return f"ok: {found['AutoModel']} + heads"
    if command.startswith("amos"):
        electra = family in ("bert", "electra") and command == "amos"
        return f"ok: {'ElectraForPreTraining' if electra else found['AutoModel'] + ' + RTD head'}"
    if command == "meta-lm":
        return f"ok: {found['AutoModelForMaskedLM']}"
    return f"ok: {found['AutoModel']}"


def render() -> str:
    header = ["family", *COMMANDS]
    rows = [[f"`{family}`", *(cell_text(family, command) for command in COMMANDS)] for family in FAMILIES]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def docs_table(text: str) -> str:
    start, end = text.index("<!-- matrix: start -->"), text.index("<!-- matrix: end -->")
    return text[start + len("<!-- matrix: start -->"):end].strip()


# ---------------------------------------------------------------------------------------------------------- runs

@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's files (tiny.write_own_files) and one folder per family: its tiny *ForMaskedLM and the tokenizer."""
    from transformers import AutoModelForMaskedLM

    folder = write_own_files(write_command_data(tmp_path_factory.mktemp("user"), "hf-aux-tests/tiny-bert"))
    tokenizer = tiny_tokenizer()
    for family in FAMILIES:
        torch.manual_seed(0)
        AutoModelForMaskedLM.from_config(tiny_config(family, tokenizer)).save_pretrained(folder / family)
        tokenizer.save_pretrained(folder / family)
    return folder


def hf_aux(args, cwd) -> subprocess.CompletedProcess:
    """The installed command, run from `cwd` (where the user trains), with a datasets cache of its own: two runs at
    once read the same files."""
    env = {**ENV, "HF_DATASETS_CACHE": str(Path(cwd) / "datasets_cache")}
    return subprocess.run([HF_AUX, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def cell_folder(user: Path, family: str, command: str) -> Path:
    """Where a cell's user trains: its output is `out/` inside (and the mean-pooling fine-tuning's `mean/`)."""
    return user / "cells" / f"{family}-{command.replace(' ', '_')}"


@pytest.fixture(scope="module")
def runs(user, request):
    """Every selected cell's command (and the mean-pooling fine-tunings), started at once on two workers (each run
    uses one thread): (family, command) -> Future of its CompletedProcess."""
    from concurrent.futures import ThreadPoolExecutor

    selected = {(item.callspec.params["family"], item.callspec.params["command"]) for item in request.session.items
                if item.originalname == "test_every_command_on_every_family"}
    jobs = {}
    for family, command in sorted(selected):
        argv, cwd = COMMANDS[command](user, family), cell_folder(user, family, command)
        cwd.mkdir(parents=True)
        jobs[family, command] = ([*argv, "--output_dir", "out"], cwd)
        if command == "finetune":
            jobs[family, "finetune mean"] = ([*argv, "--pooling", "mean", "--output_dir", "mean"], cwd)
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {key: pool.submit(hf_aux, argv, cwd) for key, (argv, cwd) in jobs.items()}


def texts_batch(folder: Path) -> dict:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer(["the movie was really good", "a boring plot and a bad actor"], padding=True,
                     return_tensors="pt")


def card_code(folder: Path) -> list[str]:
    """The python blocks of the output's model card (README.md), as written."""
    return re.findall(r"```python\n(.*?)```", (folder / "README.md").read_text(), flags=re.S)


def run_card_code(out: Path, cwd: Path) -> None:
    """The card's python blocks, run in order as a user pastes them, from the folder the user trained in: one fresh
    interpreter for the card, each block in a namespace of its own; it must exit 0."""
    blocks = card_code(out)
    assert blocks, f"{out}/README.md has no python block"
    script = "".join(f"exec(compile({block!r}, 'card block {k}', 'exec'), {{}})\n" for k, block in enumerate(blocks))
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{out}/README.md's code failed:\n{done.stderr[-3000:]}"


def check_finetune(out: Path, family: str, runs, cwd: Path) -> None:
    from transformers import AutoModelForSequenceClassification, pipeline

    from hf_aux import MultiTaskModel

    config = json.loads((out / "config.json").read_text())
    remote = family in REMOTE_CODE
    assert config["architectures"] == (["HfAuxSequenceClassifier"] if remote else [
        classes(family)["AutoModelForSequenceClassification"]])  # the family's own class: no remote code
    assert ("auto_map" in config) == remote
    run_card_code(out, cwd)
    batch = texts_batch(out)
    own = MultiTaskModel.from_pretrained(out).eval()
    plain = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=remote).eval()
    assert type(plain).__name__ == ("HfAuxSequenceClassifier" if remote else
                                    classes(family)["AutoModelForSequenceClassification"])
    inputs = {k: v for k, v in batch.items() if k in inspect.signature(plain.forward).parameters}
    with torch.no_grad():
        expected = own(**batch, task=own.task_names[0]).logits
        torch.testing.assert_close(plain(**inputs).logits, expected, atol=1e-5, rtol=0)
    labels = pipeline("text-classification", model=str(out), trust_remote_code=remote)(["the movie was really good"])
    assert labels[0]["label"] == own.config.tasks[0]["label_names"][int(expected[0].argmax())]
    # the same body read with mean pooling: no family class pools so (ModernBERT's does), the shipped file does
    mean = cwd / "mean"
    done = runs[family, "finetune mean"].result()
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    mean_remote = family != "modernbert"  # ModernBertForSequenceClassification pools by mean itself
    plain = AutoModelForSequenceClassification.from_pretrained(mean, trust_remote_code=mean_remote).eval()
    own = MultiTaskModel.from_pretrained(mean).eval()
    inputs = {k: v for k, v in batch.items() if k != "token_type_ids" or mean_remote}
    with torch.no_grad():
        torch.testing.assert_close(plain(**inputs).logits,
                                   own(**batch, task=own.task_names[0]).logits, atol=1e-5, rtol=0)
    run_card_code(mean, cwd)


def check_output(command: str, out: Path, family: str, runs, cwd: Path) -> None:
    from transformers import AutoModel, AutoModelForMaskedLM

    found = classes(family)
    if command == "finetune":
        return check_finetune(out, family, runs, cwd)
    if command == "meta-lm":
        assert type(AutoModelForMaskedLM.from_pretrained(out)).__name__ == found["AutoModelForMaskedLM"]
        return None
    body = AutoModel.from_pretrained(out)
    if command.startswith("amos"):
        from hf_aux.amos.model import AmosModel

        electra = family in ("bert", "electra") and command == "amos"
        assert type(body).__name__ == ("ElectraModel" if electra else found["AutoModel"])
        AmosModel.from_pretrained(str(out))  # generator and discriminator restore (resume, further pretraining)
        return None
    assert type(body).__name__ == found["AutoModel"]
    if command == "muppet":
        from hf_aux import MultiTaskModel

        assert MultiTaskModel.from_pretrained(out).task_names == ["sentiment", "pick"]
    run_card_code(out, cwd)
    return None


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_every_command_on_every_family(family, command, user, runs):
    cwd = cell_folder(user, family, command)
    out = cwd / "out"
    done = runs[family, command].result()
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-5000:]
    if (family, command) in EXPECTED:
        lines = [line for line in done.stderr.splitlines() if line.startswith("hf-aux ")]
        assert done.returncode == 2 and len(lines) == 1 and EXPECTED[family, command] in lines[0], output[-3000:]
        return
    assert done.returncode == 0, output[-5000:]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2  # it trained
    check_output(command, out, family, runs, cwd)


def test_the_docs_table_is_this_tests_data():
    assert docs_table(DOCS.read_text()) == render(), "run `python tests/test_families.py` to rewrite docs/families.md"


if __name__ == "__main__":
    text = DOCS.read_text()
    start, end = text.index("<!-- matrix: start -->"), text.index("<!-- matrix: end -->")
    DOCS.write_text(text[:start] + "<!-- matrix: start -->\n" + render() + "\n" + text[end:])
    print(f"wrote {DOCS}")


# ---------------------------------------------------------------------------------------------------- unit checks

@pytest.mark.parametrize("family", ["electra", "distilbert", "modernbert"])
def test_a_head_saved_before_heads_followed_the_family_keeps_its_tanh(family, tmp_path):
    """multitask_config.json without `classifier_head` (hf_aux before this change): the heads load as the tanh head
    they were trained as, and the one-task export goes through the shipped file (the family class computes another
    function), stored under names the family class does not read."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    from hf_aux import MultiTaskModel
    from hf_aux.modeling.multitask import MULTITASK_CONFIG_NAME, MultiTaskModelConfig

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config(family, tokenizer))
    task = {"name": "sent", "kind": "classification", "num_labels": 2, "label_names": ["neg", "pos"]}
    old = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], pooling="cls",
                                              classifier_head={"activation": "tanh", "dense_bias": True,
                                                               "norm_eps": None, "norm_bias": True}), body=body).eval()
    old.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    metadata = json.loads((tmp_path / MULTITASK_CONFIG_NAME).read_text())
    del metadata["classifier_head"]
    (tmp_path / MULTITASK_CONFIG_NAME).write_text(json.dumps(metadata))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["HfAuxSequenceClassifier"] and "auto_map" in config
    batch = texts_batch(tmp_path)
    if family != "bert":
        batch.pop("token_type_ids", None)
    reloaded = MultiTaskModel.from_pretrained(tmp_path).eval()
    assert reloaded.config.classifier_head["activation"] == "tanh"
    with torch.no_grad():
        expected = old(**batch, task="sent").logits
        torch.testing.assert_close(reloaded(**batch, task="sent").logits, expected, atol=0, rtol=0)
        remote = AutoModelForSequenceClassification.from_pretrained(tmp_path, trust_remote_code=True).eval()
        torch.testing.assert_close(remote(**batch).logits, expected, atol=1e-5, rtol=0)
    from safetensors.torch import load_file

    keys = set(load_file(tmp_path / "model.safetensors"))
    family_class = AutoModelForSequenceClassification.from_config(AutoModel.from_config(body.config).config)
    assert not keys & {k for k in family_class.state_dict() if not k.startswith(family_class.base_model_prefix)}


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_a_fresh_head_is_the_family_classifier_and_round_trips(family, tmp_path):
    """A fresh head has the family's function, recorded in multitask_config.json; every head parameter is written
    under the family class's names and read back exactly (values compared), and a training step moves them."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoModelForSequenceClassification

    from hf_aux import MultiTaskModel
    from hf_aux.modeling.heads import family_head
    from hf_aux.modeling.multitask import MULTITASK_CONFIG_NAME, MultiTaskModelConfig

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    body = AutoModel.from_config(tiny_config(family, tokenizer))
    task = {"name": "sent", "kind": "classification", "num_labels": 3, "label_names": ["a", "b", "c"]}
    model = MultiTaskModel(MultiTaskModelConfig(encoder=body.config, tasks=[task], pooling="cls"), body=body)
    head = model.classification_heads["sent"]
    before = {k: v.clone() for k, v in head.state_dict().items()}
    batch = texts_batch_from(tokenizer)
    out = model(**batch, task="sent", labels=torch.tensor([0, 2]))
    out.loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    assert all(not torch.equal(before[k], v) for k, v in head.state_dict().items())  # every head tensor moved
    model.eval().save_pretrained(tmp_path)
    assert json.loads((tmp_path / MULTITASK_CONFIG_NAME).read_text())["classifier_head"] == family_head(body.config)
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    plain_state, saved = plain.state_dict(), load_file(tmp_path / "model.safetensors")
    head_keys = [k for k in plain_state if not k.startswith(plain.base_model_prefix + ".")]
    assert head_keys and all(torch.equal(plain_state[k], saved[k]) for k in head_keys)
    with torch.no_grad():
        torch.testing.assert_close(plain(**{k: v for k, v in batch.items() if k in inspect.signature(
            plain.forward).parameters}).logits, model(**batch, task="sent").logits, atol=1e-5, rtol=0)


def texts_batch_from(tokenizer) -> dict:
    return tokenizer(["the movie was really good", "a boring plot and a bad actor"], padding=True, return_tensors="pt")


@pytest.mark.parametrize("family", ["electra", "distilbert", "deberta-v2", "modernbert"])
def test_the_head_is_the_familys_only_where_the_family_class_pools_so(family):
    """cls (and ModernBERT's mean) reads the body as the family's class does: its head function. Any other pooling
    goes through the shipped class whatever the head: the tanh head of every family (the function fine-tunings had
    before heads followed the family, so earlier measurements stay comparable)."""
    from hf_aux import MultiTaskModel
    from hf_aux.modeling.multitask import MultiTaskModelConfig

    body = tiny_config(family)
    task = {"name": "sent", "kind": "classification", "num_labels": 2}
    heads = {pooling: MultiTaskModel(MultiTaskModelConfig(encoder=body, tasks=[task], pooling=pooling)).config
             .classifier_head["activation"] for pooling in ("cls", "mean", "max")}
    own = {"electra": "gelu", "distilbert": "relu", "deberta-v2": body.to_dict().get("pooler_hidden_act", "gelu"),
           "modernbert": "gelu"}[family]
    assert heads == {"cls": own, "mean": own if family == "modernbert" else "tanh", "max": "tanh"}
