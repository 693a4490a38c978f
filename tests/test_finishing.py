"""A finished run is never trained again, but it can still be finished (run_guard.finishing_steps): a model card
lost to a kill between the final save and the card, evaluation or prediction newly asked for, a push added later.
Each method's command loads its final model from the folder (several files: MUPPET's heads, AMOS's generator, the
meta-learned LM's teacher, TARTAN's auxiliary heads), does only the missing steps, and leaves the weights, the
train metrics and the trainer state as they were."""

import hashlib
import json

import pytest
from huggingface_hub import ModelCard
from script_loader import load_run_script
from tiny import command_args, write_command_data

QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--seed", "0", "--max_steps", "2", "--logging_steps", "1"]
KEPT = ("model.safetensors", "train_results.json", "trainer_state.json", "hf_aux_run.json")


def _metric_names(card: dict) -> list:
    return [(result["dataset"].get("name"), sorted(m["type"] for m in result["metrics"]))
            for entry in card.get("model-index", []) for result in entry["results"]]


def _digests(folder, names):
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in names}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("data"), "tiny-base")


@pytest.mark.parametrize("script", ["run_muppet", "run_amos", "run_tartan", "run_meta_lm"])
def test_a_finished_run_without_its_card_gets_it_without_training(script, data, tmp_path, capsys):
    module = load_run_script(script)
    out = tmp_path / "out"
    argv = command_args(script, data, out, QUIET)
    module.main(*module.parse_args(argv))
    card = ModelCard.load(out / "README.md").data.to_dict()
    before = _digests(out, KEPT)
    (out / "README.md").unlink()  # killed after the final save, before the card
    capsys.readouterr()
    module.main(*module.parse_args(argv))
    printed = capsys.readouterr().out
    assert "finishing it without training: model card" in printed
    assert _digests(out, KEPT) == before  # no step, no save, the same record
    again = ModelCard.load(out / "README.md").data.to_dict()
    # the same metadata: base model, tags, the model-index's metric names (their values come from the evaluation,
    # run again as asked: AMOS's masks and replacements are drawn afresh)
    assert {k: v for k, v in again.items() if k != "model-index"} == {k: v for k, v in card.items()
                                                                       if k != "model-index"}
    assert _metric_names(again) == _metric_names(card)
    capsys.readouterr()
    module.main(*module.parse_args(argv))
    assert "nothing to do" in capsys.readouterr().out


def test_evaluation_asked_after_the_run_uses_the_trained_model(data, tmp_path, capsys):
    """Fine-tuning trained without --do_eval; asked again with it, the trained head and body are evaluated (the
    same accuracy as the trained model reloaded by hand), and nothing else changes."""
    import torch

    from hf_aux import MultiTaskModel

    module = load_run_script("run_finetune")
    out = tmp_path / "out"
    argv = command_args("run_finetune", data, out, QUIET)
    module.main(*module.parse_args([*argv, "--do_eval", "false"]))
    assert not (out / "eval_results.json").exists()
    before = _digests(out, (*KEPT, "multitask_heads.safetensors"))
    results = module.main(*module.parse_args([*argv, "--do_eval"]))
    assert "finishing it without training: evaluation" in capsys.readouterr().out
    assert _digests(out, (*KEPT, "multitask_heads.safetensors")) == before
    evaluated = json.loads((out / "eval_results.json").read_text())
    assert evaluated["eval_accuracy"] == results["eval_accuracy"]
    model = MultiTaskModel.from_pretrained(out).eval()  # by hand: the saved model on the validation rows
    rows = [json.loads(line) for line in (data / "validation.jsonl").read_text().splitlines()]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer([r["text"] for r in rows], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch, task=model.task_names[0]).logits
    labels = torch.tensor([r["label"] for r in rows])
    accuracy = float((logits.argmax(-1) == labels).float().mean())
    assert evaluated["eval_accuracy"] == pytest.approx(accuracy)
    # the loss tells a trained model from a fresh one (2 steps at 5e-5 move it by more than this tolerance)
    assert evaluated["eval_loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, labels)), abs=1e-5)


def test_license_flag_reaches_the_card_and_a_base_without_one_states_none(data, tmp_path):
    module = load_run_script("run_tartan")
    module.main(*module.parse_args(command_args("run_tartan", data, tmp_path / "given", [*QUIET, "--license", "mit"])))
    card = ModelCard.load(tmp_path / "given" / "README.md").data
    assert (card.license, card.pipeline_tag) == ("mit", "text-classification")
    module.main(*module.parse_args(command_args("run_tartan", data, tmp_path / "plain", QUIET)))
    assert ModelCard.load(tmp_path / "plain" / "README.md").data.license is None  # the tiny base states none


def _muppet_with_validation(data, argv):
    """MUPPET's command_args mixture has no validation split: the same tasks with a quarter held out."""
    mixture = json.loads((data / "mixture.json").read_text())
    for task in mixture["tasks"]:
        task["validation_fraction"] = 0.25
    path = data / "mixture_validated.json"
    path.write_text(json.dumps(mixture))
    return [str(path) if item == str(data / "mixture.json") else item for item in argv]


@pytest.mark.parametrize("script", ["run_muppet", "run_amos", "run_tartan", "run_meta_lm", "run_finetune"])
def test_evaluation_alone_in_a_finished_folder_evaluates_the_finished_model(script, data, tmp_path, capsys):
    """A finished train-only run, then the same command with --do_eval and without --do_train: the run's own model
    is evaluated (the numbers the documented finishing, --do_train kept, gives), not the base model with fresh
    heads; the weights, train metrics and trainer state stay as they were."""
    import shutil

    module = load_run_script(script)
    trained = command_args(script, data, tmp_path / "out", QUIET)
    if script == "run_muppet":
        trained = _muppet_with_validation(data, trained)
    evaluate = [item for item in trained if item != "--do_train"] + ["--do_eval"]
    module.main(*module.parse_args([*trained, "--do_eval", "false"]))
    out = tmp_path / "out"
    assert not (out / "eval_results.json").exists()
    before = _digests(out, KEPT)
    shutil.copytree(out, tmp_path / "kept")
    capsys.readouterr()

    module.main(*module.parse_args(evaluate))
    assert "finishing it without training: evaluation" in capsys.readouterr().out
    assert _digests(out, KEPT) == before
    evaluated = json.loads((out / "eval_results.json").read_text())
    assert json.loads((out / "all_results.json").read_text())["train_loss"] == \
        json.loads((out / "train_results.json").read_text())["train_loss"]  # the run's, kept beside the evaluation

    # the documented finishing (--do_train kept) of a copy: the same model, the same evaluation
    module.main(*module.parse_args([*[str(tmp_path / "kept") if item == str(out) else item for item in trained],
                                    "--do_eval"]))
    finished = json.loads((tmp_path / "kept" / "eval_results.json").read_text())
    assert evaluated["eval_loss"] == pytest.approx(finished["eval_loss"], abs=1e-6)
    # and not the base model's (evaluated alone in a folder of its own)
    module.main(*module.parse_args([str(tmp_path / "base") if item == str(out) else item for item in evaluate]))
    base = json.loads((tmp_path / "base" / "eval_results.json").read_text())
    assert evaluated["eval_loss"] != pytest.approx(base["eval_loss"], abs=1e-6)
    capsys.readouterr()
    module.main(*module.parse_args(evaluate))
    assert "nothing to do" in capsys.readouterr().out


def test_evaluation_alone_of_another_model_in_a_run_folder_is_refused(data, tmp_path):
    """Evaluation without training in a folder holding a run it would not evaluate (another configuration, an
    unfinished run) is an error saying so and what to do; nothing in the folder changes."""
    from hf_aux.runtime.run_guard import OutputDirError

    module = load_run_script("run_finetune")
    out = tmp_path / "out"
    trained = command_args("run_finetune", data, out, QUIET)
    module.main(*module.parse_args([*trained, "--do_eval", "false"]))
    evaluate = [item for item in trained if item != "--do_train"] + ["--do_eval"]
    files = sorted(path.name for path in out.iterdir())
    with pytest.raises(OutputDirError, match=r"finished run of another configuration \(learning_rate: 5e-05 -> "
                                             r"0\.001\).*trains nothing.*choose another --output_dir"):
        module.main(*module.parse_args([*evaluate, "--learning_rate", "1e-3"]))
    assert sorted(path.name for path in out.iterdir()) == files
    (out / "model.safetensors").unlink()  # the final save lost: checkpoint-2 remains, an unfinished run
    with pytest.raises(OutputDirError, match="unfinished run \\(last checkpoint: checkpoint-2\\).*--do_train resumes"):
        module.main(*module.parse_args(evaluate))
    assert not (out / "eval_results.json").exists()


def test_the_same_data_given_by_another_relative_path_is_the_same_run(data, tmp_path, monkeypatch, capsys):
    """The guard compares the paths it records resolved: `train.jsonl`, `./train.jsonl` and `../data0/train.jsonl`
    are one file, so the finished run is recognised (nothing to do), not refused as another configuration; a record
    written before paths were resolved (relative ones) matches too."""
    module = load_run_script("run_finetune")
    out = tmp_path / "out"
    monkeypatch.chdir(data)
    argv = command_args("run_finetune", data, out, QUIET)

    def relative(train, validation):
        swap = {str(data / "train.jsonl"): train, str(data / "validation.jsonl"): validation}
        return [swap.get(item, item) for item in argv]

    module.main(*module.parse_args(relative("train.jsonl", "validation.jsonl")))
    record = json.loads((out / "hf_aux_run.json").read_text())["configuration"]
    assert record["train_file"] == str((data / "train.jsonl").resolve())
    capsys.readouterr()
    module.main(*module.parse_args(relative("./train.jsonl", f"../{data.name}/validation.jsonl")))
    assert "nothing to do" in capsys.readouterr().out
    older = {**record, "train_file": "train.jsonl", "validation_file": "./validation.jsonl"}  # as recorded before
    (out / "hf_aux_run.json").write_text(json.dumps({"configuration": older}))
    module.main(*module.parse_args(argv))
    assert "nothing to do" in capsys.readouterr().out
