"""Model cards (hf_aux.cards.model_card): every method's card renders, its metadata parses and carries the metrics, the
hyper-parameters never hold the token, the figures are real PNGs, and the templates (and the demo configs) ship in
the wheel."""

import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from transformers import TrainingArguments

from hf_aux.cards.model_card import PAPERS, TaskSummary, render_model_card
from hf_aux import registry
from hf_aux.runtime.config import hyperparameters_from_args
from hf_aux.cards.plots import (MAX_SERIES_PER_PANEL, loss_panels, one_value_per_step, plot_loss_curves,
                                plot_weights_over_time)

ROOT = Path(__file__).resolve().parent.parent
METHODS = [record.package for record in registry.methods() if record.trainer_class]  # a new method is in
TASKS = [
    TaskSummary("rotten_tomatoes", "classification", train_size=500, eval_size=100,
                metrics={"accuracy": 0.8125, "f1": 0.79}, dataset="cornell-movie-review-data/rotten_tomatoes"),
    TaskSummary("chitchat_next_turn", "multiple_choice", train_size=1000, eval_size=200, metrics={"accuracy": 0.4375},
                source="local data: chitchat.jsonl"),
    TaskSummary("wiki_mlm", "mlm", train_size=2000, metrics={}),
]


def card_for(method, **overrides):
    kwargs = dict(model_name=f"{method}-tiny", base_model="sentence-transformers/all-MiniLM-L6-v2",
                  datasets=["cornell-movie-review-data/rotten_tomatoes"], tasks=TASKS,
                  hyperparameters={"learning_rate": 2e-5, "seed": 7, "hub_token": "hf_secret"},
                  figures={"figures/loss.png": "Training loss"}, model_id=f"someone/{method}-tiny",
                  hf_aux_class="hf_aux.modeling.multitask.MultiTaskModel")
    kwargs.update(overrides)
    return render_model_card(method, **kwargs)


@pytest.mark.parametrize("method", METHODS)
def test_card_metadata_parses_and_carries_the_metrics(method, tmp_path):
    card = card_for(method)
    card.save(tmp_path / "README.md")
    loaded = ModelCard.load(tmp_path / "README.md")  # what the Hub and from_pretrained users read back
    data = loaded.data
    assert data.library_name == "transformers"
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert data.datasets == ["cornell-movie-review-data/rotten_tomatoes"]
    paper = PAPERS[method]
    assert data.tags[:2] == ["hf_aux", method]
    assert (f"arxiv:{paper.arxiv_id}" in data.tags) == (paper.arxiv_id is not None)
    # model-index: one result per (task, metric) of the tasks whose data came from a Hub dataset (its id is what
    # the Hub links); local data is named with its source in the task table instead; tasks without metrics add none
    results = {(r.dataset_name, r.metric_type): (r.metric_value, r.task_type, r.dataset_type)
               for r in data.eval_results}
    assert results == {
        ("rotten_tomatoes", "accuracy"): (0.8125, "text-classification", "cornell-movie-review-data/rotten_tomatoes"),
        ("rotten_tomatoes", "f1"): (0.79, "text-classification", "cornell-movie-review-data/rotten_tomatoes"),
    }
    assert data.model_name == f"{method}-tiny"

    text = loaded.text
    assert paper.title in text and paper.bibtex in text
    assert "hf_secret" not in str(loaded) and "hub_token" not in str(loaded)
    assert "| learning_rate | 2e-05 |" in text and "| seed | 7 |" in text
    assert "![Training loss](figures/loss.png)" in text
    assert f'AutoModel.from_pretrained("someone/{method}-tiny")' in text
    assert 'MultiTaskModel.from_pretrained("someone/' in text
    assert "| rotten_tomatoes ([cornell-movie-review-data/rotten_tomatoes]" in text
    assert "| chitchat_next_turn (local data: chitchat.jsonl) | multiple_choice | 1000 | 200 | 0.4375 | - |" in text
    assert "| wiki_mlm | mlm | 2000 | - | - | - |" in text
    assert "- transformers " in text and "- hf_aux 0.1.0" in text
    assert "{{" not in text and "{%" not in text


@pytest.mark.parametrize("method,adapter_auto_class", [("muppet", "AutoModel"), ("tartan", None)])
def test_lora_card_says_the_folder_holds_adapters_and_how_to_load_them(method, adapter_auto_class, tmp_path):
    card = card_for(method, adapter=True, adapter_auto_class=adapter_auto_class, merged_subfolder="merged",
                    auto_class="AutoModelForSequenceClassification" if method == "tartan" else "AutoModel")
    card.save(tmp_path / "README.md")
    loaded = ModelCard.load(tmp_path / "README.md")
    assert loaded.data.library_name == "peft" and "lora" in loaded.data.tags
    assert loaded.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    text = loaded.text
    assert "LoRA adapters" in text and "not the base weights" in text
    auto = "AutoModelForSequenceClassification" if method == "tartan" else "AutoModel"
    assert f'{auto}.from_pretrained("someone/{method}-tiny", subfolder="merged")' in text
    # the plain-transformers snippet of a full checkpoint would be wrong here: the folder has no base weights
    assert f'{auto}.from_pretrained("someone/{method}-tiny")' not in text
    assert ("PeftModel.from_pretrained(AutoModel.from_pretrained(\"sentence-transformers/all-MiniLM-L6-v2\"), "
            f'"someone/{method}-tiny")' in text) == (adapter_auto_class is not None)
    assert 'MultiTaskModel.from_pretrained("someone/' in text
    # without a merged export the card does not point at a merged folder
    bare = card_for(method, adapter=True, adapter_auto_class=adapter_auto_class).text
    assert "subfolder=" not in bare and "LoRA adapters" in bare


def test_licence_and_pipeline_round_trip_and_the_licence_is_inherited(tmp_path):
    """`license` and `pipeline_tag` survive huggingface_hub's ModelCard round trip; the licence a run's card
    states by default is the one its base model's card (or config) states; the install line is the README's."""
    from hf_aux.cards.model_card import base_model_license, body_pipeline_tag

    card = card_for("muppet", license="apache-2.0", pipeline_tag="sentence-similarity")
    card.save(tmp_path / "README.md")
    data = ModelCard.load(tmp_path / "README.md").data
    assert (data.license, data.pipeline_tag) == ("apache-2.0", "sentence-similarity")
    assert "pip install hf_aux" not in card.text and "`pip install .` in a clone" in card.text
    base = tmp_path / "base"
    base.mkdir()
    assert base_model_license(str(base)) is None  # states nothing
    (base / "config.json").write_text(json.dumps({"license": "mit"}))
    assert base_model_license(str(base)) == "mit"
    (base / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# base\n")
    assert base_model_license(str(base)) == "cc-by-4.0"  # the card first
    from hf_aux.tasks.demo import minilm_path

    assert base_model_license(str(minilm_path())) == "apache-2.0"  # the real MiniLM's card
    assert body_pipeline_tag(base) == "feature-extraction"
    assert body_pipeline_tag(minilm_path()) == "sentence-similarity"  # a sentence-transformers folder


def test_card_without_optional_parts():
    card = render_model_card("amos", model_name="amos-from-scratch", versions={"hf_aux": "0.1.0"})
    assert card.data.base_model is None and card.data.eval_results is None
    assert "from scratch" in card.text and "No task list was recorded" in card.text
    assert "With hf_aux" not in card.text and "## Figures" not in card.text


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="Unknown method 'electra'"):
        render_model_card("electra", model_name="x")
    with pytest.raises(ValueError, match="task 'sst2': field 'kind'"):
        TaskSummary("sst2", "sentiment")
    with pytest.raises(ValueError, match="task 'sst2': field 'metrics': accuracy = nan"):
        TaskSummary("sst2", "classification", metrics={"accuracy": float("nan")})
    with pytest.raises(ValueError, match="TaskSummary"):
        render_model_card("muppet", model_name="x", tasks=[{"name": "sst2"}])


@dataclass
class MethodConfig(TrainingArguments):
    task_weight_lr: float = field(default=0.1, metadata={"help": "A method setting."})


def test_hyperparameters_from_args_keep_method_fields_and_changes_but_never_the_token(tmp_path):
    args = MethodConfig(output_dir=str(tmp_path), learning_rate=3e-4, adam_beta2=0.98, hub_token="hf_secret",
                        push_to_hub=False, report_to=[], task_weight_lr=0.25)
    chosen = hyperparameters_from_args(args)
    assert chosen["task_weight_lr"] == 0.25  # the method's own field
    assert chosen["learning_rate"] == 3e-4 and chosen["seed"] == 42  # the key fields, even at their default
    assert chosen["adam_beta2"] == 0.98  # a base field moved away from its default
    assert "adam_beta1" not in chosen and "output_dir" not in chosen and "logging_steps" not in chosen
    assert not any(name.endswith("_token") for name in chosen) and "hf_secret" not in json.dumps(chosen, default=str)
    assert chosen["lr_scheduler_type"] == "linear"  # enums as their values


def _png_size(path: Path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_loss_curve_and_weights_figures(tmp_path):
    import matplotlib.image

    log_history = [{"loss": 2.0 - 0.1 * step, "loss_rt": 1.0, "step": step} for step in range(1, 11)]
    log_history += [{"eval_loss": 1.5, "step": 10}, {"train_loss": 1.7, "train_runtime": 3.0, "step": 10}]
    path = plot_loss_curves(log_history, tmp_path / "figures" / "loss.png")
    assert _png_size(path) == (1280, 640)  # three panels: loss, eval_loss (not one axis: see below), loss_rt
    same = plot_loss_curves(log_history, tmp_path / "figures" / "same.png", same_scale=True)
    assert _png_size(same) == (1280, 320)  # one quantity (a fine-tuning's cross entropy): loss and eval_loss together
    pixels = matplotlib.image.imread(path)[..., :3]
    blue = (abs(pixels - [31 / 255, 119 / 255, 180 / 255]).sum(-1) < 0.05).sum()  # matplotlib's first line colour
    assert blue > 100

    weights = {"tapt_mlm": [(step, 0.5 + 0.01 * step) for step in range(20)],
               "dapt_mlm": [(step, 0.5 - 0.01 * step) for step in range(20)]}
    other = plot_weights_over_time(weights, tmp_path / "figures" / "weights.png", title="TARTAN task weights")
    assert _png_size(other) == (640, 320) and other.read_bytes() != path.read_bytes()
    with pytest.raises(ValueError, match="No loss was logged"):
        plot_loss_curves([{"learning_rate": 0.1, "step": 1}], tmp_path / "none.png")
    with pytest.raises(ValueError, match="every series is empty"):
        plot_weights_over_time({"a": []}, tmp_path / "none.png")


def test_a_value_logged_twice_at_one_step_is_drawn_once():
    """The last evaluation during training and the closing evaluate() share the last step: the later value wins."""
    assert one_value_per_step([(6, 7.2), (1, 9.0), (6, 7.0)]) == [(1, 9.0), (6, 7.0)]


def test_many_task_losses_become_small_multiples(tmp_path):
    """Nine tasks' training and evaluation losses: the overall panel first, then per-task panels of at most six
    lines (balanced 5 + 4), training before evaluation, the excluded prefix left out."""
    tasks = [f"task{i}" for i in range(9)]
    series = {"loss": [(1, 1.0)], "eval_loss": [(1, 1.0)], "rtd_loss": [(1, 1.0)]}
    series.update({f"loss/{t}": [(1, 1.0)] for t in tasks})
    series.update({f"eval_{t}_loss": [(1, 1.0)] for t in tasks})
    panels = loss_panels(series, title="MUPPET losses")
    assert [title for title, _ in panels] == [
        "MUPPET losses: training objective, as optimised", "MUPPET losses: evaluation loss",
        "MUPPET losses: loss parts", "MUPPET losses: training loss per task (1/2)",
        "MUPPET losses: training loss per task (2/2)", "MUPPET losses: evaluation loss per task (1/2)",
        "MUPPET losses: evaluation loss per task (2/2)"]
    # the scaled objective and the raw evaluation loss are different quantities: not one axis (issue #60)
    assert list(panels[0][1]) == ["loss"] and list(panels[1][1]) == ["eval_loss"]
    assert list(panels[2][1]) == ["rtd_loss"]  # a named part (~0.5) beside a total (~50) would look flat
    assert [len(s) for _, s in panels] == [1, 1, 1, 5, 4, 5, 4] and \
        max(len(s) for _, s in panels) <= MAX_SERIES_PER_PANEL
    assert list(panels[3][1]) == tasks[:5] and list(panels[6][1]) == tasks[5:]  # legends name the task alone
    assert [title for title, _ in loss_panels(series, title="X", same_scale=True)][0] == "X"  # one quantity

    history = [{"step": step, "loss": 1.0 / step, **{f"loss/{t}": 1.0 / step for t in tasks},
                **{f"scaled_loss/{t}": 0.5 / step for t in tasks}} for step in range(1, 6)]
    path = plot_loss_curves(history, tmp_path / "many.png", exclude_prefixes=("scaled_loss/",))
    assert _png_size(path) == (1280, 640)  # three panels, two columns, two rows
    weights = plot_weights_over_time({t: [(1, 0.1), (2, 0.2)] for t in tasks}, tmp_path / "w.png")
    assert _png_size(weights) == (1280, 320)  # nine series -> two panels side by side


def test_templates_ship_in_the_wheel_and_render_from_it(tmp_path):
    """Build a wheel non-editably from a copy of the sources, install it into a folder, render every card there."""
    source = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    source.mkdir()
    for name in ("setup.cfg", "setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("hf_aux", "model_cards"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            str(source), "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("hf_aux-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for template in ["_base.md"] + [f"{method}.md" for method in METHODS]:
        assert f"hf_aux/model_cards/{template}" in names
    for method in registry.METHOD_PACKAGES:  # `hf-aux <method>`'s demo configs
        assert f"hf_aux/{method}/demo.yaml" in names
    assert "hf_aux/task_registry_data/tasksource.json" in names  # the task registry's data and licence notice
    assert "hf_aux/task_registry_data/TASKSOURCE_LICENSE" in names
    assert "is absent from the `packages` configuration" not in build.stderr  # every data folder is declared
    packages = {path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "hf_aux").rglob("__init__.py")}
    assert {f"{package}/__init__.py" for package in packages} <= set(names)  # every package folder ships

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = (
        "import importlib.resources, sys\n"
        "from hf_aux.cards.model_card import render_model_card\n"
        "root = importlib.resources.files('hf_aux.model_cards')\n"
        f"assert str(root).startswith({str(target)!r}), root\n"
        f"for method in {METHODS!r}:\n"
        "    card = render_model_card(method, model_name='m', versions={})\n"
        "    assert card.data.tags[1] == method\n"
        "print('rendered from', root)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target),
                         "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "rendered from" in run.stdout


def test_hyperparameters_list_only_what_was_set_and_the_method_fields():
    from hf_aux.muppet.trainer import MuppetConfig

    chosen = hyperparameters_from_args(MuppetConfig(output_dir="unused", learning_rate=3e-5, adam_beta2=0.98,
                                                    hub_token="hf_secret"))
    assert chosen["learning_rate"] == 3e-5 and chosen["adam_beta2"] == 0.98
    assert chosen["batching"] == "heterogeneous" and chosen["loss_scaling"] is True  # the method's own fields
    for untouched in ("accelerator_config", "debug", "adam_beta1", "logging_steps"):
        assert untouched not in chosen
    assert not any(name.endswith("_token") for name in chosen)


def test_hyperparameters_do_not_reset_a_running_accelerator():
    """Trainer.save_model writes the card mid-run when pushing; building a TrainingArguments there reset
    accelerate's global state and broke the next accelerator.prepare."""
    import torch
    from accelerate import Accelerator

    from hf_aux.muppet.trainer import MuppetConfig

    args = MuppetConfig(output_dir="unused", use_cpu=True)
    accelerator = Accelerator(cpu=True)  # as a running Trainer holds one
    hyperparameters_from_args(args)
    loader = accelerator.prepare(torch.utils.data.DataLoader(list(range(4)), batch_size=2))  # what failed
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]


@pytest.mark.parametrize("method", METHODS)
def test_each_trainer_declares_its_card_and_shares_one_renderer(method):
    """trl's pattern: the trainer states name, tags, paper and template; ModelCardMixin.create_model_card renders."""
    from hf_aux.cards.model_card import METHOD_NAMES
    from hf_aux.runtime.trainer import ModelCardMixin

    trainer_class = registry.method(method).load(registry.method(method).trainer_class)
    assert issubclass(trainer_class, ModelCardMixin)
    assert trainer_class.create_model_card is ModelCardMixin.create_model_card  # no override of its own
    record = trainer_class._method  # the method's one record (hf_aux/<method>/__init__.py)
    assert record is registry.method(method)
    assert record.paper is PAPERS[method]
    assert record.tags == ("hf_aux", method)
    assert record.card_template == f"{method}.md"
    assert record.card_name == METHOD_NAMES[method]  # render_model_card(method) says the same


def test_tartan_task_weights_figure_shows_the_mixture_and_each_task_on_its_own_scale(tmp_path):
    """META-TARTAN's weights move by thousandths: the first panel shows the mixture on 0-1, then each task's alpha
    gets a panel scaled to its own range, legends outside the axes."""
    import matplotlib.image

    from hf_aux.tartan.trainer import plot_task_weights

    history = [[step, 0.9 - 0.001 * step, 0.05 + 0.0006 * step, 0.05 + 0.0004 * step] for step in range(1, 31)]
    path = tmp_path / "task_weights.png"
    plot_task_weights(history, ["end_task", "tapt", "dapt"], str(path), title="META-TARTAN task weights")
    assert _png_size(path) == (1280, 640)  # four panels: the mixture, then end_task, tapt, dapt
    pixels = matplotlib.image.imread(path)[..., :3]

    def rows_spanned(panel, colour):  # inside the axes only (the legend sits right of them)
        hits = (abs(panel[:, 60:450] - colour).sum(-1) < 0.05).any(axis=1).nonzero()[0]
        return int(hits.max() - hits.min()) if hits.size else 0

    blue, orange = [31 / 255, 119 / 255, 180 / 255], [1.0, 127 / 255, 14 / 255]  # matplotlib's first two colours
    # tapt rises by 0.018 over the run: flat on the 0-1 mixture panel (top left, tapt second, orange), a full
    # diagonal in its own panel (bottom left, its only line, blue)
    flat, diagonal = rows_spanned(pixels[:320, :640], orange), rows_spanned(pixels[320:, :640], blue)
    assert diagonal > 150 and flat < diagonal / 5, (flat, diagonal)


def test_a_licence_is_checked_against_the_hubs_identifiers(tmp_path):
    """--license takes the Hub's licence identifiers only (hf_aux.cards.licenses, from the Hub's documentation);
    anything else is an error naming the accepted form; `other` goes with --license_name, which the card states."""
    from hf_aux.cards.licenses import HUB_LICENSES, license_problem
    from hf_aux.tartan import command as tartan

    assert {"apache-2.0", "mit", "cc-by-4.0", "other"} <= set(HUB_LICENSES)
    assert license_problem(None) is None and license_problem("mit") is None
    assert license_problem("other", "my-lab-licence") is None
    assert "closest: apache-2.0" in license_problem("Apache-2.0")
    base = ["--train_file", str(tmp_path / "train.jsonl"), "--validation_file", str(tmp_path / "dev.jsonl"),
            "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"field 'license': 'not a licence!!' is not a licence identifier the Hub "
                                         r"accepts.*apache-2.0, mit, cc-by-4.0.*--license other with --license_name"):
        tartan.parse_args([*base, "--license", "not a licence!!"])
    with pytest.raises(ValueError, match="'other' needs --license_name"):
        tartan.parse_args([*base, "--license", "other"])
    with pytest.raises(ValueError, match="--license_name .* with --license other"):
        tartan.parse_args([*base, "--license", "mit", "--license_name", "mine"])
    model_args = tartan.parse_args([*base, "--license", "other", "--license_name", "my-lab-licence"])[0]
    assert (model_args.license, model_args.license_name) == ("other", "my-lab-licence")
    card = card_for("tartan", license="other", license_name="my-lab-licence")
    card.save(tmp_path / "README.md")
    data = ModelCard.load(tmp_path / "README.md").data
    assert (data.license, data.license_name) == ("other", "my-lab-licence")


def test_a_sentence_transformers_body_is_a_sentence_transformers_model_on_the_hub(tmp_path):
    """library_name says which library loads the top level: sentence-transformers beside the sentence-similarity
    pipeline (a sentence-transformers body), transformers otherwise, peft for adapters."""
    def library(**overrides):
        return card_for("muppet", **overrides).data.to_dict()["library_name"]

    assert library(pipeline_tag="sentence-similarity") == "sentence-transformers"
    assert library(pipeline_tag="feature-extraction") == "transformers"
    assert library(pipeline_tag="sentence-similarity", adapter=True) == "peft"


def test_the_model_index_names_the_dataset_configuration():
    """glue has one configuration per task: the model-index says which (rte), from the task or from the
    configuration a command passes with its Hub dataset (dataset_args, as for Trainer's card)."""
    from hf_aux.runtime.trainer import _with_configs

    rte = TaskSummary("rte", "classification", metrics={"accuracy": 0.625}, dataset="nyu-mll/glue",
                      dataset_config="rte")
    results = card_for("finetune", tasks=[rte]).data.to_dict()["model-index"][0]["results"]
    assert results[0]["dataset"] == {"name": "rte", "type": "nyu-mll/glue", "config": "rte", "split": "validation"}
    plain = TaskSummary("text", "mlm", metrics={"loss": 2.0}, dataset="wikitext")
    local = TaskSummary("mine", "mlm", metrics={"loss": 2.0}, source="local data: text.txt")
    assert [t.dataset_config for t in _with_configs([plain, local, rte], ["wikitext"], ["wikitext-2-raw-v1"])] == [
        "wikitext-2-raw-v1", None, "rte"]
    assert _with_configs([plain], ["wikitext"], [None]) == [plain]


def test_amos_from_the_packaged_minilm_states_its_licence_offline(tmp_path, monkeypatch):
    """AMOS continued from --encoder_name_or_path minilm: the card's base_model is MiniLM's Hub id and its licence
    the one the packaged folder's card states (apache-2.0), read offline, not looked up on the Hub by that id."""
    import random

    from tiny import WORDS

    from hf_aux.amos import command as amos

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rng = random.Random(0)
    (tmp_path / "text.txt").write_text("".join(" ".join(rng.choices(WORDS, k=12)) + "\n" for _ in range(24)))
    out = tmp_path / "out"
    amos.main(*amos.parse_args([
        "--encoder_name_or_path", "minilm", "--generator_num_hidden_layers", "1", "--mlm_layers", "1",
        "--train_file", str(tmp_path / "text.txt"), "--max_seq_length", "16", "--validation_split_percentage", "0",
        "--do_train", "--max_steps", "1", "--per_device_train_batch_size", "4", "--report_to", "none",
        "--save_strategy", "no", "--downstream_probe", "false", "--output_dir", str(out)]))
    data = ModelCard.load(out / "README.md").data
    assert (data.base_model, data.license) == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
