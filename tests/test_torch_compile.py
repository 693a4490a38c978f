"""`torch_compile=True` through each hf_aux trainer on a tiny model: 3 optimizer steps compiled against the same 3
steps eager (same seed), the logged losses agree, no graph breaks, and Dynamo recompiles a pinned number of times
(MUPPET: once per task, a guard on the task name). Then each trainer's model forward + loss compiled with
`fullgraph=True` (any graph break raises), against eager, over batches of varying lengths: the recompiles stay
bounded (docs/scaling.md, "torch.compile").

Inductor on CPU needs a C++ compiler: without one the file skips. Inductor's random numbers are made eager's
(`fallback_random`), so AMOS's Gumbel samples and the step losses are the eager ones."""

import logging
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

if shutil.which("g++") is None and shutil.which("c++") is None:
    pytest.skip("torch.compile's inductor backend needs a C++ compiler on CPU; neither g++ nor c++ is on PATH",
                allow_module_level=True)

import torch._dynamo  # noqa: E402
from torch._dynamo.eval_frame import OptimizedModule  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # the trainers' own tests build the tiny models and data

import test_amos_trainer as amos_tests  # noqa: E402
import test_meta_lm_trainer as meta_lm_tests  # noqa: E402
import test_muppet_trainer as muppet_tests  # noqa: E402
import test_tartan_trainer as tartan_tests  # noqa: E402

STEPS = dict(max_steps=3, logging_steps=1)
# Inductor for one case of each trainer; "aot_eager" (Dynamo's graphs, breaks and recompiles and AOT autograd, no C++
# code generation) for the rest, which keeps the file at 2 min 12 s on 2 busy cores with a cold inductor cache (all
# inductor: 4 min 42 s). HF_AUX_COMPILE_BACKEND=inductor runs every case with inductor.
INDUCTOR = {"finetune", "muppet", "amos", "tartan_meta"}


def compiled(compile_: bool, case: str) -> dict:
    """The trainer-config fields of an eager (False) or compiled run of `case`."""
    if not compile_:
        return dict(torch_compile=False)
    backend = os.environ.get("HF_AUX_COMPILE_BACKEND") or ("inductor" if case in INDUCTOR else "aot_eager")
    return dict(torch_compile=True, torch_compile_backend=backend)


TOLERANCE = dict(rel=1e-5, abs=1e-6)  # float32 sums reordered by inductor: measured <= 2e-7 relative (AMOS, TARTAN)
# Bounds measured over these 3 steps (torch 2.13); a change that adds recompiles or graph breaks fails here first.
# Before the static prediction slots (hf_aux.tasks.data.prediction_positions): AMOS 5 recompiles, 13 graph breaks;
# TARTAN MT 7 and 9.
AMOS_MAX_RECOMPILES, AMOS_MAX_GRAPH_BREAKS = 0, 0
TARTAN_BOUNDS = {"mt": (1, 0), "meta": (1, 0)}  # mode: (recompiles, graph breaks)
META_LM_MAX_RECOMPILES = {"hard": 1, "soft_first_order": 3}


class RecompileCounter(logging.Handler):
    """Counts Dynamo's "Recompiling function" records (the `recompiles` log artifact)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        self.count += "Recompiling function" in record.getMessage()


@pytest.fixture
def dynamo():
    """A fresh Dynamo cache and counters per test; eager random numbers inside compiled graphs."""
    torch._dynamo.reset()
    counters.clear()
    counter = RecompileCounter()
    logger = logging.getLogger("torch._dynamo")
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(counter)
    try:
        with torch._inductor.config.patch(fallback_random=True):
            yield counter
    finally:
        logger.removeHandler(counter)
        torch._logging.set_logs()
        torch._dynamo.reset()


def losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def compiled_against_eager(build, dynamo) -> dict:
    """Train `build(torch_compile)` eager, then compiled; the two loss curves, recompiles and graph breaks."""
    eager = build(False)
    eager.train()
    counters.clear()
    dynamo.count = 0
    trained = build(True)
    trained.train()
    assert isinstance(trained.model_wrapped, OptimizedModule)  # Trainer really ran a torch.compile'd wrapper
    breaks = sum(counters["graph_break"].values())
    return dict(eager=losses(eager), compiled=losses(trained), recompiles=dynamo.count, graph_breaks=breaks)


def check(result, max_recompiles, max_graph_breaks, tolerance=TOLERANCE):
    assert len(result["eager"]) == 3
    assert result["compiled"] == pytest.approx(result["eager"], **tolerance)
    assert result["recompiles"] <= max_recompiles
    assert result["graph_breaks"] <= max_graph_breaks


# ---- MUPPET (incl. R3F) and finetune: the multi-task model, one graph per task --------------------------------------
def muppet_trainer(tmp_path, compile_, case, tasks=("sent", "choice"), **config):
    tokenizer, _, train, model, args = muppet_tests._setup(tmp_path / str(compile_), dropout=0.0,
                                                           **compiled(compile_, case), **STEPS, **config)
    return muppet_tests.MuppetTrainer(model=model, args=args, train_dataset={t: train[t] for t in tasks},
                                      processing_class=tokenizer)


@pytest.mark.parametrize("robust", ["none", "r3f"])
def test_muppet_compiles_once_per_task_and_matches_eager(tmp_path, dynamo, robust):
    case = "muppet" if robust == "none" else "muppet_r3f"
    result = compiled_against_eager(lambda c: muppet_trainer(tmp_path, c, case, robust_finetuning=robust), dynamo)
    # the task name is a Python string the forward branches on: one graph per task (both drawn), none per sub-batch
    check(result, max_recompiles=1, max_graph_breaks=0)
    assert result["recompiles"] == 1


def test_finetune_compiles_one_graph_and_matches_eager(tmp_path, dynamo):
    from transformers import TrainingArguments

    from hf_aux.runtime.trainer import AuxTrainer
    from hf_aux.tasks.data import MultiTaskCollator

    def build(compile_):
        tokenizer, _, train, model, _ = muppet_tests._setup(tmp_path, dropout=0.0)
        args = TrainingArguments(output_dir=str(tmp_path / str(compile_)), per_device_train_batch_size=4,
                                 learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
                                 disable_tqdm=True, seed=0, remove_unused_columns=False,
                                 **compiled(compile_, "finetune"),
                                 **STEPS)
        return AuxTrainer(model=model, args=args, train_dataset=train["sent"], processing_class=tokenizer,
                          data_collator=MultiTaskCollator(tokenizer, ["sent"]))

    check(compiled_against_eager(build, dynamo), max_recompiles=0, max_graph_breaks=0)


# ---- AMOS -----------------------------------------------------------------------------------------------------------
def test_amos_runs_compiled_and_matches_eager(tmp_path, dynamo):
    from hf_aux.amos.model import AmosModel, AmosModelConfig

    def build(compile_):
        tokenizer = amos_tests.tiny_tokenizer()
        _, _, data = amos_tests.tiny_setup()
        torch.manual_seed(0)
        no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        config = AmosModelConfig.from_configs(amos_tests.tiny_config("electra", tokenizer, **no_dropout),
                                              amos_tests.tiny_config("electra", tokenizer, **no_dropout),
                                              mlm_layers=[1, 2])
        args = amos_tests.make_args(tmp_path / str(compile_), **compiled(compile_, "amos"), **STEPS)
        return amos_tests.AmosTrainer(model=AmosModel(config), args=args, train_dataset=data,
                                      processing_class=tokenizer)

    result = compiled_against_eager(build, dynamo)
    # one graph: the generator's hooks are registered at construction, the masked positions gathered into static
    # slots (no nonzero, no boolean indexing)
    check(result, max_recompiles=AMOS_MAX_RECOMPILES, max_graph_breaks=AMOS_MAX_GRAPH_BREAKS)


# ---- TARTAN (MT and META) -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tartan_data():
    return tartan_tests.data._get_wrapped_function()()


@pytest.mark.parametrize("mode", ["mt", "meta"])
def test_tartan_runs_compiled_and_matches_eager(tmp_path, dynamo, tartan_data, mode):
    def build(compile_):
        model = tartan_tests.make_model(tartan_data[0], dropout=0.0)
        return tartan_tests.make_trainer(tartan_data, tmp_path / str(compile_), model=model, mode=mode,
                                         **compiled(compile_, f"tartan_{mode}"), **STEPS)

    result = compiled_against_eager(build, dynamo)
    # no graph break: the auxiliary MLM heads read static slots; the recompile: the end-task batches' lengths vary
    check(result, *TARTAN_BOUNDS[mode])


# ---- meta-learned LM (hard, soft first order; soft second order is refused) ----------------------------------------
@pytest.fixture(scope="module")
def meta_lm_data():
    return meta_lm_tests.data._get_wrapped_function()()


@pytest.mark.parametrize("name", ["hard", "soft_first_order"])
def test_meta_lm_runs_compiled_and_matches_eager(tmp_path, dynamo, meta_lm_data, name):
    objective = dict(objective="hard") if name == "hard" else dict(objective="soft", first_order=True)

    def build(compile_):
        return meta_lm_tests.make_trainer(meta_lm_data, tmp_path / str(compile_),
                                          **compiled(compile_, f"meta_lm_{name}"), **objective, **STEPS)

    # the student's forward is compiled; the support and query batches are shorter than the corpus blocks (one
    # recompile), first order also feeds inputs_embeds and a frozen-bias pass (two more)
    # first order's forward difference divides by e = 1e-3 * ||w||: float32 rounding grows (measured 3e-6 relative)
    tolerance = TOLERANCE if name == "hard" else dict(rel=5e-5, abs=1e-6)
    check(compiled_against_eager(build, dynamo), META_LM_MAX_RECOMPILES[name], 0, tolerance)


def test_meta_lm_second_order_soft_labels_refuse_torch_compile(tmp_path):
    from hf_aux.errors import UserInputError

    with pytest.raises(UserInputError, match="torch_compile.*double backward"):
        meta_lm_tests.MetaLMConfig(output_dir=str(tmp_path), objective="soft", torch_compile=True, use_cpu=True)


# ---- every trainer's model forward + loss with fullgraph=True, over varying lengths --------------------------------
# (what each trainer compiles: Trainer wraps the model; MUPPET and fine-tuning call MultiTaskModel per task batch,
# AMOS AmosModel.forward, TARTAN TartanModel.forward with its auxiliary batches, the meta-LM trainer the student)
# Recompiles over LENGTHS: the second length makes Dynamo mark the sequence dimension dynamic, later lengths reuse it.
LENGTHS = (12, 16, 20)
FULLGRAPH_RECOMPILES = {"muppet": 1, "amos": 1, "tartan_mt": 1, "meta_lm": 1}


def fullgraph_against_eager(model, batches, loss_of, dynamo):
    """`loss_of(model, batch)` eager and through torch.compile(model, fullgraph=True) (a graph break raises) on each
    batch, same seed per batch; returns the compiled run's recompiles."""
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    dynamo.count = 0
    for batch in batches:
        torch.manual_seed(0)
        eager = loss_of(model, batch)
        torch.manual_seed(0)
        compiled_loss = loss_of(compiled_model, batch)
        assert compiled_loss.item() == pytest.approx(eager.item(), **TOLERANCE)
        compiled_loss.backward()
    return dynamo.count


def text_ids(tokenizer, rows, length, seed):
    ids = torch.randint(5, len(tokenizer), (rows, length), generator=torch.Generator().manual_seed(seed))
    ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    return ids


def mlm_batch(tokenizer, rows, length, seed):
    from hf_aux.tasks.data import mask_tokens_for_mlm, special_tokens_mask_for

    ids = text_ids(tokenizer, rows, length, seed)
    masked, labels = mask_tokens_for_mlm(ids, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                                         special_tokens_mask=special_tokens_mask_for(ids, tokenizer),
                                         generator=torch.Generator().manual_seed(seed))
    return dict(input_ids=masked, attention_mask=torch.ones_like(ids), labels=labels, original_input_ids=ids)


def test_muppet_and_finetune_model_compiles_fullgraph(tmp_path, dynamo):
    tokenizer, _, _, model, _ = muppet_tests._setup(tmp_path, dropout=0.0)
    batches = [dict(input_ids=text_ids(tokenizer, 4, length, length), attention_mask=torch.ones(4, length).long(),
                    labels=torch.tensor([0, 1, 1, 0]), task="sent") for length in LENGTHS]
    recompiles = fullgraph_against_eager(model, batches, lambda m, b: m(**b).loss, dynamo)
    assert recompiles == FULLGRAPH_RECOMPILES["muppet"]


@pytest.mark.parametrize("family", ["electra", "albert"])
def test_amos_model_compiles_fullgraph(dynamo, family):
    from hf_aux.amos.model import AmosModel, AmosModelConfig

    tokenizer = amos_tests.tiny_tokenizer()
    torch.manual_seed(0)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = AmosModelConfig.from_configs(amos_tests.tiny_config(family, tokenizer, **no_dropout),
                                          amos_tests.tiny_config(family, tokenizer, **no_dropout), mlm_layers=[1, 2])
    batches = [mlm_batch(tokenizer, 4, length, length) for length in LENGTHS]
    recompiles = fullgraph_against_eager(AmosModel(config), batches, lambda m, b: m(**b).loss, dynamo)
    assert recompiles == FULLGRAPH_RECOMPILES["amos"]


def test_tartan_model_compiles_fullgraph(dynamo, tartan_data):
    model = tartan_tests.make_model(tartan_data[0], dropout=0.0)
    model.mlm_probability = 0.15  # the auxiliary batches' masking rate: the heads read static slots
    tokenizer = tartan_data[0]
    batches = []
    for length in LENGTHS:
        auxiliary = {name: {k: v for k, v in mlm_batch(tokenizer, 3, length, length + k).items()
                            if k != "original_input_ids"} for k, name in enumerate(model.auxiliary_tasks)}
        batches.append(dict(input_ids=text_ids(tokenizer, 4, length, length),
                            attention_mask=torch.ones(4, length).long(), labels=torch.tensor([0, 1, 1, 0]),
                            auxiliary_batches=auxiliary))
    def loss_of(tartan, batch):  # MT-TARTAN's one forward: the end task and every auxiliary MLM loss
        outputs = tartan(**batch)
        return outputs.loss + outputs.auxiliary_losses.sum()

    recompiles = fullgraph_against_eager(model, batches, loss_of, dynamo)
    assert recompiles == FULLGRAPH_RECOMPILES["tartan_mt"]


def test_meta_lm_student_compiles_fullgraph(tmp_path, dynamo, meta_lm_data):
    from hf_aux.meta_lm.losses import token_cross_entropy

    trainer = meta_lm_tests.make_trainer(meta_lm_data, tmp_path, objective="hard")
    tokenizer = meta_lm_data[0]
    batches = [mlm_batch(tokenizer, 2, length, length) for length in LENGTHS]

    def loss_of(student, batch):
        logits = student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return token_cross_entropy(logits, batch["labels"])

    assert fullgraph_against_eager(trainer.model, batches, loss_of, dynamo) == FULLGRAPH_RECOMPILES["meta_lm"]


# ---- --torch_compile_mode ------------------------------------------------------------------------------------------
def test_torch_compile_mode_passes_through_and_is_refused_where_it_cannot_run(tmp_path):
    from hf_aux.amos.config import AmosConfig
    from hf_aux.errors import UserInputError

    def config(cls=AmosConfig, **settings):
        return cls(output_dir=str(tmp_path), use_cpu=True, report_to=[], **settings)

    args = config(torch_compile_mode="reduce-overhead")  # Trainer hands mode and backend to torch.compile
    assert (args.torch_compile, args.torch_compile_backend, args.torch_compile_mode) == \
        (True, "inductor", "reduce-overhead")
    with pytest.raises(UserInputError, match=r"'torch_compile_mode' \(--torch_compile_mode\): 'fast' is not one"):
        config(torch_compile_mode="fast")
    with pytest.raises(UserInputError, match="--torch_compile_mode.*needs the inductor backend"):
        config(torch_compile_mode="reduce-overhead", torch_compile_backend="aot_eager")

    class NoCapture(AmosConfig):  # a method whose step cannot be captured as CUDA graphs
        def cuda_graph_refusal(self):
            return "this step's host reads forbid"

    with pytest.raises(UserInputError, match="--torch_compile_mode.*captures CUDA graphs, which this step's host"):
        config(NoCapture, torch_compile_mode="max-autotune")
    assert config(NoCapture, torch_compile_mode="max-autotune-no-cudagraphs").torch_compile
    with pytest.raises(UserInputError, match="torch_compile.*double backward"):  # second order: no compile at all
        meta_lm_tests.MetaLMConfig(output_dir=str(tmp_path), objective="soft", torch_compile_mode="reduce-overhead",
                                   use_cpu=True)
