"""Checkpoints written by the OLD module layout (hf_aux.modeling.*, hf_aux.trainers.*; hf_aux commit 9d9fb06) still
load with today's code through the public names, and give the outputs the old code computed (tests/data/old_layout,
tiny random models; expected.json holds the input and the outputs). A MUPPET Trainer checkpoint of the old code,
whose training_args.bin pickles the old class path hf_aux.trainers.muppet_config.MuppetConfig, still resumes."""

import json
import shutil
from pathlib import Path

import datasets
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, TrainerCallback

from hf_aux import AmosModel, MetaLMTeacher, MultiTaskModel, MuppetConfig, MuppetTrainer, TartanModel

DATA = Path(__file__).parent / "data" / "old_layout"
EXPECTED = json.loads((DATA / "expected.json").read_text())
TOLERANCE = EXPECTED["tolerance"]  # 1e-5; the stored values are rounded to 6 decimals
INPUTS = {key: torch.tensor(EXPECTED["input"][key]) for key in ("input_ids", "attention_mask")}


def assert_matches(actual: torch.Tensor, expected, what: str) -> None:
    torch.testing.assert_close(actual.detach().double(), torch.tensor(expected, dtype=torch.float64),
                               atol=TOLERANCE, rtol=0, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize(("folder", "key"), [("muppet", "muppet"), ("muppet/checkpoint-2", "muppet_checkpoint_2")])
def test_muppet_checkpoint_loads_and_reproduces_each_task_head(folder, key):
    expected = EXPECTED[key] if key == "muppet" else EXPECTED[key]["logits"]
    model = MultiTaskModel.from_pretrained(DATA / folder).eval()
    assert model.task_names == list(expected) == ["topic", "score"]
    assert model.config.task("topic")["label_names"] == ["red", "blue", "green"]
    with torch.no_grad():
        for task, logits in expected.items():
            assert_matches(model(**INPUTS, task=task).logits, logits, f"{folder} task {task}")
    tokenizer = AutoTokenizer.from_pretrained(DATA / folder)
    assert tokenizer(EXPECTED["input"]["texts"], padding=True)["input_ids"] == EXPECTED["input"]["input_ids"]


@pytest.mark.parametrize("folder", ["muppet", "muppet/checkpoint-2"])
def test_muppet_body_loads_with_plain_automodel(folder):
    """The MUPPET-style checkpoint promise: the body is a plain transformers checkpoint, no hf_aux needed."""
    body, info = AutoModel.from_pretrained(DATA / folder, output_loading_info=True)
    assert type(body).__name__ == "BertModel"
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    model = MultiTaskModel.from_pretrained(DATA / folder)
    for name, tensor in model.body.state_dict().items():
        assert torch.equal(body.state_dict()[name], tensor), name


def test_amos_checkpoint_loads_and_reproduces_generator_and_discriminator():
    expected = EXPECTED["amos"]
    model = AmosModel.from_pretrained(str(DATA / "amos")).eval()
    assert model.generator.get_input_embeddings() is model.discriminator.get_input_embeddings()  # shared, re-tied
    with torch.no_grad():
        assert_matches(model.discriminator(**INPUTS).logits, expected["discriminator_logits"], "RTD logits")
        generated = model.generator(INPUTS["input_ids"], attention_mask=INPUTS["attention_mask"],
                                    masked_positions=INPUTS["attention_mask"].bool())
        assert_matches(generated.logits, expected["generator_logits"], "generator logits")
    assert_matches(model.generator.mixture, expected["mixture"], "mixture vector v")


def test_tartan_checkpoint_loads_and_reproduces_end_task_and_mlm_head():
    expected = EXPECTED["tartan"]
    model = TartanModel.from_pretrained(str(DATA / "tartan"))
    model.eval()
    assert model.auxiliary_tasks == ["tapt"]
    with torch.no_grad():
        assert_matches(model(**INPUTS).logits, expected["logits"], "end-task logits")
        loss = model.mlm_loss("tapt", {**INPUTS, "labels": torch.tensor(expected["mlm_labels"])})
    assert_matches(loss, expected["tapt_mlm_loss"], "tapt MLM loss")


def test_meta_lm_teacher_loads_and_reproduces_both_heads():
    expected = EXPECTED["meta_lm"]
    teacher = MetaLMTeacher.from_pretrained(DATA / "meta_lm").eval()
    assert teacher.get_input_embeddings().num_embeddings == expected["vocab_size"]
    with torch.no_grad():
        out = teacher(**INPUTS)
    assert_matches(out.input_logits, expected["input_logits"], "x-hat logits")
    assert_matches(out.output_logits, expected["output_logits"], "y-hat logits")


def test_old_training_args_unpickle_into_todays_muppet_config():
    args = torch.load(DATA / "muppet" / "checkpoint-2" / "training_args.bin", weights_only=False)
    assert isinstance(args, MuppetConfig)
    assert (args.max_steps, args.save_steps, args.gradient_accumulation_steps) == (2, 2, 2)
    assert args.batching == "heterogeneous"


class _StepProbe(TrainerCallback):
    """Records the steps run and, at the first, the model's eval-mode outputs (what resume restored)."""

    def __init__(self):
        self.steps, self.restored = [], None

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if self.restored is None:
            model.eval()
            with torch.no_grad():
                self.restored = {task: model(**INPUTS, task=task).logits for task in model.task_names}
            model.train()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def test_training_resumes_from_the_old_muppet_checkpoint(tmp_path):
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(DATA / "muppet" / "checkpoint-2", checkpoint)  # resume never writes into tests/data
    saved = EXPECTED["muppet_checkpoint_2"]
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == saved["global_step"] == 2
    tokenizer = AutoTokenizer.from_pretrained(DATA / "muppet")
    model = MultiTaskModel.from_pretrained(DATA / "muppet")  # the untrained weights: resume replaces them
    train = {task: datasets.Dataset.from_list(rows) for task, rows in saved["train_rows"].items()}
    settings = saved["training"]
    args = MuppetConfig(output_dir=str(tmp_path / "out"), max_steps=3, save_strategy="no",
                        per_device_train_batch_size=settings["per_device_train_batch_size"],
                        gradient_accumulation_steps=settings["gradient_accumulation_steps"],
                        learning_rate=settings["learning_rate"], seed=settings["seed"], logging_steps=1,
                        report_to="none", use_cpu=True, disable_tqdm=True)
    probe = _StepProbe()
    trainer = MuppetTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                            callbacks=[probe])
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert trainer.state.global_step == 3
    assert probe.steps == [3]  # one update after the restored two, not three from scratch
    for task, logits in saved["logits"].items():  # step 3 started from checkpoint-2's body and heads
        assert_matches(probe.restored[task], logits, f"resumed task {task}")
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3]
