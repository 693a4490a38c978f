"""The first hour on your own data and machine (issue #60), each through the installed `hf-aux` command as a user
runs it:

- (3) cards: the loading code of a card runs as written from the folder the user trained in, naming the output
  folder as they gave it (a relative one with "./", so transformers never looks it up on the Hub), with a
  `SentenceTransformer` block for a sentence-transformers body; `MultiTaskModel.from_pretrained` returns eval mode.
- (4) bad data: a label far rarer than every other class stops before training naming the file's 1-based row;
  every row a message names is the file's own; a run with nothing to evaluate says so; a missing reporting
  integration is refused in one line before any work.
- (5) a full disk (torch.save's report at a checkpoint, the card's write at the final save, a real tmpfs where one
  can be mounted): one line naming the folder, the bytes needed and free, what is intact; the same command resumes.
- (6) finishing a finished run builds its own model (no "fresh heads" line); `hf-aux tasks --search sentiment` finds
  the offline demo tasks first; MUPPET's loss figure keeps the scaled objective and the raw evaluation loss apart.
- (2) `hf-aux compare` prints its plan (fine-tunings, estimated time) before the first fine-tuning, and its report's
  first lines answer "this checkpoint vs the baseline at fine-tuning noise" and "is the method shown".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import tiny_tokenizer, write_command_data, write_own_files

HF_AUX = str(Path(sys.executable).parent / "hf-aux")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


def hf_aux(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([HF_AUX, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("hf-aux ")]


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """The user's files (tiny.write_own_files) and st_body/: a tiny BERT saved by sentence-transformers itself
    (the transformer at the root, mean pooling, normalisation), as all-MiniLM-L6-v2 is."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    from tiny import tiny_config

    folder = write_own_files(write_command_data(tmp_path_factory.mktemp("own"), "hf-aux-tests/tiny-bert"))
    torch.manual_seed(0)
    plain = folder / "plain_body"
    BertModel(tiny_config()).save_pretrained(plain)
    tiny_tokenizer().save_pretrained(plain)
    transformer = models.Transformer(str(plain))
    pooling = models.Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(folder / "st_body"))
    return folder


# ---- (3) cards whose code runs as written --------------------------------------------------------------------
def card_blocks(out: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (out / "README.md").read_text(), flags=re.S)


def run_blocks(blocks: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The blocks as a user pastes them, one after another into one fresh interpreter started in `cwd`."""
    script = "".join(f"exec(compile({block!r}, 'card block {k}', 'exec'), {{}})\n" for k, block in enumerate(blocks))
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("command, given", [("finetune", "runs/ft-topics"), ("muppet", "ft-mix")])
def test_the_cards_code_runs_as_written_from_where_you_trained(command, given, own, tmp_path):
    """The output folder as the user typed it (runs/ft-topics reads as a Hub id `user/name`, a bare ft-mix as a
    Hub repository): the card names "./runs/ft-topics", and every python block of it runs from that folder; the
    body from sentence-transformers also loads as a SentenceTransformer, as the card shows."""
    data = (["--train_file", own / "train.csv", "--validation_file", own / "dev.csv"] if command == "finetune"
            else ["--mixture_file", own / "mix.yaml"])
    done = hf_aux(command, "--model_name_or_path", own / "st_body", *data, "--max_steps", "2", "--output_dir", given,
                  cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    out = tmp_path / given
    blocks = card_blocks(out)
    code = "\n".join(blocks)
    assert f'from_pretrained("./{given}")  # the output folder, relative to where you trained' in code
    assert f'"{Path(given).name}"' not in code  # the bare name, which transformers looks up on the Hub
    assert f'SentenceTransformer("./{given}")' in code
    ran = run_blocks(blocks, tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    elsewhere = run_blocks(blocks[:1], own)  # from another folder: a path error, never "couldn't connect"
    assert elsewhere.returncode != 0 and "huggingface.co" not in elsewhere.stderr, elsewhere.stderr[-2000:]


def test_a_card_for_the_hub_names_the_repository_and_an_absolute_folder_as_given(own, tmp_path):
    from hf_aux.cards.model_card import card_model_id

    assert card_model_id("runs/x", "someone/x") == ("someone/x", None)
    assert card_model_id(tmp_path / "out")[0] == str(tmp_path / "out")
    assert card_model_id("out")[0] == "./out" and card_model_id("../out")[0] == "../out"


def test_multitask_model_from_pretrained_is_in_eval_mode_as_transformers_models_are(own, tmp_path):
    """Dropout off after from_pretrained: two forward passes agree without .eval() (logits were off by ~0.1)."""
    from transformers import AutoTokenizer

    from hf_aux import MultiTaskModel

    task = {"name": "topic", "kind": "classification", "num_labels": 3}
    model = MultiTaskModel.from_pretrained(str(own / "tiny_bert"), tasks=[task], classifier_dropout=0.5)
    assert not any(module.training for module in model.modules())
    model.save_pretrained(tmp_path / "saved")
    loaded = MultiTaskModel.from_pretrained(tmp_path / "saved")
    assert not any(module.training for module in loaded.modules())
    batch = AutoTokenizer.from_pretrained(own / "tiny_bert")(["the movie was good"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch, task="topic").logits, loaded(**batch, task="topic").logits)


# ---- (4) bad data named by the file's own rows ---------------------------------------------------------------
def write_topics(folder: Path, typo_row: int = 37, rows: int = 200) -> Path:
    """A user's 3-class CSV of `rows` rows with one misspelt label ('sprots') in data row `typo_row` (1-based)."""
    import random

    rng = random.Random(0)
    lines = ["text,label"]
    for number in range(1, rows + 1):
        label = "sprots" if number == typo_row else rng.choice(["sports", "politics", "tech"])
        lines.append(f"the {rng.choice(['movie', 'plot', 'actor', 'game'])} was {rng.choice(['good', 'bad'])},{label}")
    path = folder / "topics.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_label_far_rarer_than_every_other_stops_before_training_naming_its_row(own, tmp_path):
    """No label_names (the documented default): 'sprots' in 1 of 200 rows beside classes of ~60 stops before any
    model is loaded, naming the file, its 1-based row (and line, under the header), the value and how to keep it;
    naming the classes keeps it and trains."""
    data = write_topics(tmp_path)
    done = hf_aux("finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", data, "--max_steps", "1",
                  "--output_dir", "out", cwd=tmp_path)
    lines = error_lines(done)
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"label 'sprots' is in 1 of 200 rows, first {data} row 37 (line 38)" in lines[0], lines[0]
    assert "(--task_label_names or --num_labels): politics sports sprots tech" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(f"tasks:\n  - name: topics\n    data_files: {data}\n")
    done = hf_aux("muppet", "--model_name_or_path", own / "tiny_bert", "--mixture_file", mixture, "--max_steps", "1",
                  "--output_dir", "out", cwd=tmp_path)
    assert done.returncode == 2 and "first " + str(data) + " row 37 (line 38)" in error_lines(done)[0]
    kept = hf_aux("finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", data, "--task_label_names",
                  "politics", "sports", "sprots", "tech", "--max_steps", "1", "--output_dir", "out", cwd=tmp_path)
    assert kept.returncode == 0, (kept.stdout + kept.stderr)[-3000:]
    # a run with nothing to evaluate says so in its summary (it said nothing)
    assert ("not evaluated (the data has no validation split); to evaluate, pass --validation_file, or "
            "--validation_fraction 0.1") in kept.stdout, kept.stdout[-2000:]


def test_every_row_a_message_names_is_the_files_own_1_based_row(own, tmp_path):
    """With label_names, a label outside them in data row 37 of the file: the message names that row, not its place
    in the shuffled train split left after holding out validation rows, nor a 0-based index; the same for a JSON
    Lines file (its row is its line) and for a text cell that is empty, on either side of the split."""
    import json as json_module

    data = write_topics(tmp_path)
    done = hf_aux("finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", data, "--task_label_names",
                  "politics", "sports", "tech", "--validation_fraction", "0.2", "--max_steps", "1", "--output_dir",
                  "out", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"{data} row 37 (line 38): label 'sprots' is not one of label_names" in error_lines(done)[0]
    rows = [{"text": f"words {n}", "label": n % 2} for n in range(1, 41)]
    rows[11]["text"] = None  # row 12, line 12
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json_module.dumps(row) + "\n" for row in rows))
    for fraction in ("0.5", "0.01"):  # the row lands in train or in the held-out validation rows
        done = hf_aux("finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", jsonl,
                      "--validation_fraction", fraction, "--max_steps", "1", "--output_dir", "out", cwd=tmp_path)
        assert done.returncode == 2 and f"{jsonl} row 12: column 'text' is empty" in error_lines(done)[0], \
            done.stderr[-2000:]


@pytest.mark.parametrize("integration, expected", [
    ("wandb", "wandb needs the wandb package, which is not installed: pip install wandb, or pass --report_to none"),
    ("comet_ml", "comet_ml needs the comet_ml package, which is not installed: pip install comet_ml"),
    ("mlflow", "mlflow needs the mlflow package, which is not installed: pip install mlflow"),
    ("clearml", "clearml needs the clearml package"),
    ("dagshub", "dagshub needs the dagshub and mlflow packages, which are not installed: pip install dagshub mlflow"),
    ("comet", "'comet' is not an integration Trainer knows; did you mean 'comet_ml'?"),
])
def test_a_reporting_integration_that_is_not_installed_is_refused_in_one_line_before_any_work(
        integration, expected, own, tmp_path):
    import importlib.util

    if integration != "comet" and all(importlib.util.find_spec(m) for m in integration.split()):
        pytest.skip(f"{integration} is installed here")
    done = hf_aux("finetune", "--train_file", own / "train.csv", "--report_to", integration, "--output_dir", "out",
                  cwd=tmp_path)
    lines = error_lines(done)
    assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


# ---- (5) a full disk, in one line ----------------------------------------------------------------------------
FAULTS = """
import errno, os
fault = os.environ.get("HF_AUX_TEST_FAULT")
if fault == "checkpoint":  # the Nth optimizer.pt that Trainer's checkpoint writes fails as torch.save reports it
    import torch
    real, calls = torch.save, []
    def save(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):
            calls.append(f)
            if len(calls) == int(os.environ["HF_AUX_TEST_FAULT_AT"]):
                with open(f, "wb") as handle:
                    handle.write(b"PK\\x03\\x04 half")
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9664 vs 9556")
        return real(obj, f, *args, **kwargs)
    torch.save = save
elif fault == "compare":  # the Nth rewrite of compare.json finds no room
    real_replace, replaced = os.replace, []
    def replace(source, target, *args, **kwargs):
        if str(target).endswith("compare.json"):
            replaced.append(target)
            if len(replaced) == int(os.environ["HF_AUX_TEST_FAULT_AT"]):
                raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return real_replace(source, target, *args, **kwargs)
    os.replace = replace
elif fault == "card":  # the final save's model card finds no room
    from huggingface_hub import ModelCard
    def save(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    ModelCard.save = save
"""


def with_fault(tmp_path: Path, fault: str, at: int = 0) -> dict:
    folder = tmp_path / "faults"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(FAULTS)
    return {"PYTHONPATH": str(folder), "HF_AUX_TEST_FAULT": fault, "HF_AUX_TEST_FAULT_AT": str(at)}


def hf_aux_env(*args, cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([HF_AUX, *map(str, args)], cwd=cwd, env={**ENV, **env}, capture_output=True, text=True,
                          timeout=600)


def test_the_three_ways_a_full_disk_is_reported_are_recognised():
    from hf_aux.runtime.disk import disk_full_error

    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9664 vs 9556")
    oserror = OSError(28, "No space left on device", "/x/model.safetensors")
    safetensors_error = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    wrapped = ValueError("saving failed")
    wrapped.__cause__ = oserror
    for error in (torch_error, oserror, safetensors_error, wrapped):
        assert disk_full_error(error) is not None, error
    assert disk_full_error(RuntimeError("CUDA out of memory")) is None
    assert disk_full_error(OSError(13, "Permission denied")) is None


def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_same_command_resumes(own, tmp_path):
    """torch.save's own report of a full disk while writing checkpoint-2: one line naming the folder, the bytes
    needed (the last checkpoint's size) and free, that checkpoint-1 is intact; the half-written checkpoint-2 is
    removed; the same command then resumes from checkpoint-1 and finishes."""
    argv = ["finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", own / "train.csv",
            "--validation_file", own / "dev.csv", "--max_steps", "3", "--save_steps", "1", "--output_dir", "ft"]
    done = hf_aux_env(*argv, cwd=tmp_path, env=with_fault(tmp_path, "checkpoint", at=2))
    lines = error_lines(done)
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = lines[0]
    assert line.startswith("hf-aux finetune: error: the disk holding ft is full"), line
    assert re.search(r"about [\d.]+ kB needed \(the size of the last checkpoint, checkpoint-1\), [\d.]+ [kMG]?B free",
                     line), line
    assert "the last complete checkpoint, ft/checkpoint-1, is intact (the half-written checkpoint-2 was removed)" \
        in line and "run the same command again: it resumes from there" in line, line
    assert not (tmp_path / "ft" / "checkpoint-2").exists()
    again = hf_aux(*argv, cwd=tmp_path)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "Resuming from ft/checkpoint-1" in again.stdout + again.stderr
    assert json.loads((tmp_path / "ft" / "trainer_state.json").read_text())["global_step"] == 3


def test_a_full_disk_at_the_final_save_keeps_the_trained_model_and_the_same_command_finishes_it(own, tmp_path):
    argv = ["finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", own / "train.csv",
            "--validation_file", own / "dev.csv", "--max_steps", "2", "--output_dir", "ft"]
    done = hf_aux_env(*argv, cwd=tmp_path, env=with_fault(tmp_path, "card"))
    lines = error_lines(done)
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "the disk holding ft is full (writing ft/README.md: No space left on device)" in lines[0], lines[0]
    assert "The trained model in ft is intact" in lines[0] and "finishes the run" in lines[0], lines[0]
    again = hf_aux(*argv, cwd=tmp_path)
    assert again.returncode == 0 and (tmp_path / "ft" / "README.md").is_file(), (again.stdout + again.stderr)[-3000:]
    assert "finishing it without training: model card" in again.stdout


def test_a_full_disk_during_a_comparison_keeps_what_finished_and_the_same_command_continues(own, tmp_path):
    import shutil

    shutil.copytree(own / "tiny_bert", tmp_path / "copy")
    argv = ["compare", "--arm", f"base={own / 'tiny_bert'}", "--arm", f"again={tmp_path / 'copy'}", "--train_file",
            own / "train.csv", "--validation_file", own / "dev.csv", "--seeds", "1", "--max_steps", "1",
            "--output_dir", "cmp"]
    done = hf_aux_env(*argv, cwd=tmp_path, env=with_fault(tmp_path, "compare", at=3))  # the 2nd fine-tuning's
    lines = error_lines(done)
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("hf-aux compare: error: the disk holding cmp is full (writing cmp/compare.json") and \
        "Every finished fine-tuning is in compare.json" in lines[0] and "it continues with the others" in lines[0], \
        lines[0]
    again = hf_aux(*argv, cwd=tmp_path)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "2 fine-tunings (2 arms x 2 models in all x 1 seed), 1 to run" in again.stdout


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 700 kB tmpfs (root and mount permitted), else the test is skipped."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_real_full_disk_between_checkpoints(own, tmp_path, small_tmpfs):
    """On a 700 kB tmpfs the tiny model's first checkpoint (~420 kB) fits and the second does not: torch.save's
    report becomes the one line; more room (a remount) and the same command resumes and finishes."""
    argv = ["finetune", "--model_name_or_path", own / "tiny_bert", "--train_file", own / "train.csv",
            "--validation_file", own / "dev.csv", "--max_steps", "3", "--save_steps", "1", "--output_dir",
            small_tmpfs / "ft"]
    done = hf_aux(*argv, cwd=tmp_path)
    lines = error_lines(done)
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert f"the disk holding {small_tmpfs / 'ft'} is full" in lines[0] and "checkpoint-1, is intact" in lines[0]
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_tmpfs)], check=True)
    again = hf_aux(*argv, cwd=tmp_path)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert json.loads((small_tmpfs / "ft" / "trainer_state.json").read_text())["global_step"] == 3


# ---- (6) the smaller items ------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["finetune", "muppet"])
def test_finishing_a_finished_run_builds_its_own_model_not_fresh_heads(command, own, tmp_path):
    """A finished run whose card is missing is finished without training; it used to log "fresh (randomly
    initialised) heads" for the base model first, although it then evaluated the finished model."""
    data = (["--train_file", own / "train.csv", "--validation_file", own / "dev.csv"] if command == "finetune"
            else ["--mixture_file", own / "mix.yaml"])
    argv = [command, "--model_name_or_path", own / "tiny_bert", *data, "--max_steps", "2", "--output_dir", "out"]
    first = hf_aux(*argv, cwd=tmp_path)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert "fresh (randomly initialised) heads" in first.stdout + first.stderr  # the base model's, when training
    (tmp_path / "out" / "README.md").unlink()
    again = hf_aux(*argv, cwd=tmp_path)
    output = again.stdout + again.stderr
    assert again.returncode == 0 and "finishing it without training: model card" in output, output[-3000:]
    assert "fresh (randomly initialised) heads" not in output and (tmp_path / "out" / "README.md").is_file()
    if command == "finetune":  # the card still says how the head was trained
        assert "head was freshly initialised" in (tmp_path / "out" / "README.md").read_text()


def test_tasks_search_sentiment_finds_the_two_offline_sentiment_tasks_first(tmp_path):
    done = hf_aux("tasks", "--search", "sentiment", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = [line.split()[0] for line in done.stdout.splitlines()[:2]]
    assert first == ["demo/imdb", "demo/rotten_tomatoes"], done.stdout[:500]
    shown = hf_aux("tasks", "demo/rotten_tomatoes", cwd=tmp_path)
    assert "# what to decide: sentiment of a one-sentence movie review" in shown.stdout


def test_the_muppet_loss_figure_keeps_the_scaled_objective_and_the_raw_evaluation_loss_apart(own, tmp_path):
    """MUPPET's training loss is eq. 1-scaled, its evaluation loss the tasks' raw losses: a panel each, labelled;
    a fine-tuning's (one cross entropy) stay on one axis."""
    import matplotlib.image

    done = hf_aux("muppet", "--model_name_or_path", own / "tiny_bert", "--mixture_file", own / "mix.yaml",
                  "--max_steps", "4", "--logging_steps", "1", "--eval_strategy", "steps", "--eval_steps", "2",
                  "--output_dir", "out", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    height, width = matplotlib.image.imread(tmp_path / "out" / "loss_curve.png").shape[:2]
    assert (width, height) == (1280, 640)  # objective | evaluation loss; per-task training | evaluation
    assert "in panels of their own, not one axis" in (tmp_path / "out" / "README.md").read_text()


# ---- (2) hf-aux compare answers both questions first, and says what it will cost --------------------------------
def test_compare_says_its_plan_first_and_answers_the_checkpoint_and_the_method_questions_first(own, tmp_path):
    """One checkpoint against the base: the report's first lines say whether THIS checkpoint fine-tunes better at
    fine-tuning noise (with the interval) and that the method is not shown (one training run; 3 are needed); a plan
    line (how many fine-tunings, about how long) comes before the first fine-tuning."""
    from transformers import AutoModel

    for unit in (1, 2, 3):
        torch.manual_seed(unit)
        model = AutoModel.from_pretrained(own / "tiny_bert")
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        model.save_pretrained(tmp_path / f"unit{unit}")
        tiny_tokenizer().save_pretrained(tmp_path / f"unit{unit}")
    done = hf_aux("compare", "--arm", f"base={own / 'tiny_bert'}", "--arm", f"mine={tmp_path / 'unit1'}", "--arm",
                  f"two={tmp_path / 'unit2'},{tmp_path / 'unit3'}", "--train_file", own / "train.csv",
                  "--validation_file", own / "dev.csv", "--seeds", "2", "--max_steps", "3",
                  "--per_device_train_batch_size", "8", "--output_dir", "cmp", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("hf-aux compare: plan: "))
    assert re.match(r"hf-aux compare: plan: 8 fine-tunings \(3 arms x 4 models in all x 2 seeds\), 8 to run; "
                    r"about [\d.]+ (s|min) each, [\d.]+ (s|min|h) in all \(estimated from the model's", lines[plan]), \
        lines[plan]
    assert "the first fine-tuning took" in done.stdout + done.stderr  # the estimate is then measured
    first = next(i for i, line in enumerate(lines) if line.startswith("This checkpoint: "))
    assert first > plan
    report = lines[first:first + 4]
    checkpoint = re.compile(r"This checkpoint: (mine|two) \(.*unit\d\) vs base on task, accuracy on validation, at "
                            r"fine-tuning noise \(2 vs 2 fine-tunings\): [+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]: "
                            r"(better than base|worse than base|no difference shown)")
    assert all(checkpoint.match(line) for line in report[:3]), report
    assert report[3].startswith("The method behind mine: not shown either way: this comparison has 1 training run "
                                "of it; whether the method helps needs 3 or more independent training runs"), report
    markdown = (tmp_path / "cmp" / "compare.md").read_text().splitlines()
    assert markdown[2].startswith("- This checkpoint: mine") and any(
        line.startswith("- The method behind two: not shown either way: this comparison has 2 training runs")
        for line in markdown[2:8]), markdown[:8]
