"""AMOS across encoder families (issue #58). Continued pretraining of a pretrained encoder of every family with a
masked-LM class keeps the family's own classes (BERT and ELECTRA bodies still become an ElectraForPreTraining:
tests/test_amos_model.py, tests/test_run_amos.py), and AMOS from scratch sizes every family. Through the installed
`hf-aux amos` at 2 steps: it trains, the saved discriminator loads with plain AutoModel /
AutoModelForSequenceClassification as the family's own model with exactly the trained body, AmosModel.from_pretrained
restores both models; refusals are one line and exit status 2. On AmosModel itself, for every family: one optimizer
step moves the discriminator body, the RTD head, the generator's MLM head and the mixture v; the heads read the
states between blocks (ALBERT: between calls of its shared layer group) and the stop-gradient cuts there; the
discriminator's inputs_embeds path equals its input_ids path; the generator's dropout switch covers the family's own
dropout fields."""

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_first_try import ENV, HF_AUX
from tiny import ENCODER_FAMILIES, tiny_config, tiny_tokenizer, write_command_data
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

from hf_aux.amos.encoder import _load_exactly
from hf_aux.amos.model import GENERATOR_DROPOUT_FIELDS, AmosModel, AmosModelConfig, _token_embeddings
from hf_aux.errors import UserInputError
from hf_aux.tasks.data import MLMCollator

CONVERTED = ("bert", "electra")  # continued pretraining maps these onto ElectraForPreTraining (unchanged here)
CONTINUED = [family for family in ENCODER_FAMILIES if family not in CONVERTED]
OWN_EMBEDDING_WIDTH = {"albert": 16, "deberta-v2": 16}  # E < H: ALBERT's factorisation, DeBERTa's embed_proj
TEXTS = ["the movie was really good and the plot was great fun to watch", "a terrible film with a boring story",
         "she said hello to the cat"]  # three lengths: padded batches


def family_config(family, tok, layers=3, **overrides):
    """tiny_config of `family` with `layers` layers (and a token-embedding width below the hidden size where the
    family has one of its own)."""
    extra = {"embedding_size": OWN_EMBEDDING_WIDTH[family]} if family in OWN_EMBEDDING_WIDTH else {}
    return tiny_config(family, tok, num_hidden_layers=layers, **{**extra, **overrides})


def batch(tok, seed=0):
    torch.manual_seed(seed)
    return MLMCollator(tok, mlm_probability=0.3, return_original=True)([{"input_ids": ids}
                                                                        for ids in tok(TEXTS)["input_ids"]])


def discriminator_body(model):
    return model.discriminator.electra if model.config.discriminator.model_type == "electra" else \
        model.discriminator.body


# ---- the installed command, every family: runs started at once, two at a time -----------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """write_command_data's files, one tiny pretrained AutoModelForMaskedLM (+ the tiny tokenizer) per family of
    CONTINUED and the refusals' inputs (a BART, an ALBERT with two layer groups)."""
    folder = write_command_data(tmp_path_factory.mktemp("amos_families"), "hf-aux-tests/tiny-bert")
    tok = tiny_tokenizer()
    for family in CONTINUED:
        torch.manual_seed(0)
        AutoModelForMaskedLM.from_config(family_config(family, tok)).save_pretrained(folder / family)
        tok.save_pretrained(folder / family)
    AutoModel.from_config(tiny_config("bart", tok)).save_pretrained(folder / "bart")
    tok.save_pretrained(folder / "bart")
    AutoModelForMaskedLM.from_config(family_config("albert", tok, num_hidden_groups=3)).save_pretrained(
        folder / "albert_groups")
    return folder


def command(work, name, *flags):
    """`hf-aux amos` on text.txt at 2 steps, writing `work/out/<name>`."""
    return ["amos", "--train_file", work / "text.txt", "--max_seq_length", "16", "--per_device_train_batch_size", "8",
            "--max_steps", "2", "--learning_rate", "1e-3", "--validation_split_percentage", "0", "--report_to", "none",
            "--disable_tqdm", "true", "--output_dir", work / "out" / name, *flags]


def continued(work, family):
    return command(work, f"continued-{family}", "--encoder_name_or_path", work / family,
                   "--generator_num_hidden_layers", "2", "--mlm_layers", "1", "2")


def from_scratch(work, family):
    width = ["--embedding_size", str(OWN_EMBEDDING_WIDTH[family])] if family in OWN_EMBEDDING_WIDTH else []
    return command(work, f"scratch-{family}", "--encoder_name_or_path", "none", "--model_type", family,
                   "--tokenizer_name", work / "tiny_bert", "--hidden_size", "32", "--num_hidden_layers", "3",
                   "--num_attention_heads", "2", "--intermediate_size", "64", "--generator_num_hidden_layers", "2",
                   "--mlm_layers", "1", "2", *width)


REFUSALS = {  # name -> (its command, what the one line says)
    "encoder-decoder": (lambda w: command(w, "r1", "--encoder_name_or_path", w / "bart"),
                        "field 'encoder_name_or_path'", "encoder-decoder"),
    "from-scratch-t5": (lambda w: command(w, "r3", "--encoder_name_or_path", "none", "--model_type", "t5",
                                          "--tokenizer_name", w / "tiny_bert"),
                        "field 'model_type'", "encoder-decoder"),
}


def hf_aux(name, argv, work) -> subprocess.CompletedProcess:
    """The installed `hf-aux` with a datasets cache of its own (two runs at once read the same text.txt)."""
    env = {**ENV, "HF_DATASETS_CACHE": str(work / "cache" / name)}
    return subprocess.run([HF_AUX, *map(str, argv)], cwd=work, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(work):
    """Every command run of this file, started at once on two workers; name -> Future of its CompletedProcess."""
    jobs = {f"continued-{family}": continued(work, family) for family in CONTINUED}
    jobs.update({f"scratch-{family}": from_scratch(work, family) for family in ENCODER_FAMILIES})
    jobs.update({f"refusal-{name}": spec[0](work) for name, spec in REFUSALS.items()})
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(hf_aux, name, argv, work) for name, argv in jobs.items()}


def finished(runs, name, work):
    done = runs[name].result()
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    out = work / "out" / name
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    return out


@pytest.mark.parametrize("family", CONTINUED)
def test_continued_pretraining_keeps_the_familys_own_classes(family, work, runs):
    out = finished(runs, f"continued-{family}", work)
    tok = tiny_tokenizer()
    own_class = type(AutoModel.from_config(family_config(family, tok)))
    amos = AmosModel.from_pretrained(str(out)).eval()  # resume: generator + discriminator, embeddings re-shared
    assert amos.config.discriminator.model_type == family
    assert amos.generator.get_input_embeddings() is amos.get_input_embeddings()
    trained = discriminator_body(amos)
    assert type(trained) is own_class

    plain = AutoModel.from_pretrained(out).eval()  # the family's own body, exactly the trained weights
    assert type(plain) is own_class
    state = trained.state_dict()
    assert plain.state_dict().keys() == state.keys()
    for key, value in plain.state_dict().items():
        assert torch.equal(value, state[key]), key
    start = AutoModel.from_pretrained(work / family).state_dict()  # (a MaskedLM checkpoint has no pooler)
    assert any(not torch.equal(start[key], state[key]) for key in state if "pooler." not in key)  # it trained
    inputs = batch(tok)
    with torch.no_grad():
        ours = trained(input_ids=inputs["original_input_ids"], attention_mask=inputs["attention_mask"])[0]
        theirs = plain(input_ids=inputs["original_input_ids"], attention_mask=inputs["attention_mask"])[0]
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-6)

    classifier, info = AutoModelForSequenceClassification.from_pretrained(out, num_labels=2,
                                                                          output_loading_info=True)
    prefix = classifier.base_model_prefix
    assert prefix == trained.base_model_prefix
    assert not [key for key in info["missing_keys"] if key.startswith(f"{prefix}.")]  # only the task head is new
    body = getattr(classifier, prefix).state_dict()
    for key, value in body.items():
        assert torch.equal(value, state[key]), key


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_from_scratch_trains_every_family(family, work, runs):
    out = finished(runs, f"scratch-{family}", work)
    amos = AmosModel.from_pretrained(str(out))
    assert amos.config.discriminator.model_type == family and amos.mlm_layers == [1, 2]
    plain = AutoModel.from_pretrained(out)
    assert plain.config.model_type == family
    assert type(plain) is type(discriminator_body(amos))
    sized = amos.config.generator.body
    assert (sized.hidden_size, sized.num_hidden_layers, sized.num_attention_heads) == (32, 2, 2)
    assert getattr(sized, "hidden_dim" if family == "distilbert" else "intermediate_size") == 64  # the FFN width
    if family in OWN_EMBEDDING_WIDTH:
        assert amos.get_input_embeddings().embedding_dim == OWN_EMBEDDING_WIDTH[family]
    assert all(getattr(sized, key) == 0.0 for key in GENERATOR_DROPOUT_FIELDS if key in sized.to_dict())


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_a_refusal_is_one_line_with_status_2(name, runs):
    done = runs[f"refusal-{name}"].result()
    _, field, says = REFUSALS[name]
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("hf-aux amos: error: ")]
    assert len(errors) == 1 and field in errors[0] and says in errors[0], done.stderr[-3000:]


# ---- AmosModel itself, every family ------------------------------------------------------------------------------


def from_scratch_model(family, tok, **kwargs):
    torch.manual_seed(0)
    config = AmosModelConfig.from_configs(family_config(family, tok, layers=2), family_config(family, tok),
                                          mlm_layers=[1, 2], **kwargs)
    return AmosModel(config)


@pytest.mark.parametrize("start", [f"scratch-{family}" for family in ENCODER_FAMILIES]
                         + [f"continued-{family}" for family in CONTINUED])
def test_one_step_moves_the_discriminator_the_rtd_head_the_generator_head_and_v(start, work):
    kind, family = start.split("-", 1)
    tok = tiny_tokenizer()
    if kind == "scratch":
        model = from_scratch_model(family, tok)
    else:
        torch.manual_seed(0)
        model = AmosModel.from_pretrained_encoder(str(work / family), 2, mlm_layers=[1, 2])
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model(**batch(tok)).loss.backward()
    optimizer.step()
    moved = {name for name, value in model.named_parameters() if not torch.equal(value, before[name])}
    unused = ("pooler.",)  # no pooled output in AMOS
    body_prefix = "discriminator." + discriminator_body(model).base_model_prefix + "."
    body = [name for name in before if name.startswith(body_prefix) and not any(u in name for u in unused)]
    assert body and set(body) <= moved, sorted(set(body) - moved)
    for name in ("discriminator.discriminator_predictions.dense.weight",
                 "discriminator.discriminator_predictions.dense_prediction.weight",
                 "generator.mlm_head.dense.weight", "generator.mlm_head.LayerNorm.weight", "generator.mlm_head.bias",
                 "generator.mixture"):
        assert name in moved, name
    generator = [name for name in before if name.startswith("generator.body.") and not any(u in name for u in unused)]
    assert set(generator) <= moved, sorted(set(generator) - moved)


@pytest.mark.parametrize("separate", [False, True], ids=["one-generator", "separate-generators"])
@pytest.mark.parametrize("family", CONTINUED)
def test_continued_pretraining_copies_the_encoder_into_both_models(family, separate, work):
    """The discriminator body is the encoder's own (every weight); each generator body holds the encoder's
    embeddings, its weights outside the blocks (DeBERTa's rel_embeddings, MPNet's relative_attention_bias,
    ModernBERT's final_norm) and its first blocks, no more (ALBERT: its one shared group); embeddings shared."""
    torch.manual_seed(0)
    model = AmosModel.from_pretrained_encoder(str(work / family), 2, mlm_layers=[1, 2, 2] if separate else [1, 2],
                                              separate_generators=separate)
    trained = discriminator_body(model)
    source = trained.state_dict()  # (its pooler, where the family has one, is AutoModel's own fresh one)
    encoder = AutoModel.from_pretrained(work / family).eval()
    for key, value in encoder.state_dict().items():
        if "pooler." not in key:
            assert torch.equal(value, source[key]), key
    tok = tiny_tokenizer()
    inputs = batch(tok)
    trained.eval()
    with torch.no_grad():
        torch.testing.assert_close(trained(input_ids=inputs["original_input_ids"])[0],
                                   encoder(input_ids=inputs["original_input_ids"])[0], rtol=0, atol=0)
    for body, depth in zip(model.generator.generator_bodies, [1, 2, 2] if separate else [2]):
        assert body.config.num_hidden_layers == depth and type(body) is type(trained)
        state = body.state_dict()
        for key, value in state.items():
            assert torch.equal(value, source[key]), key
        dropped = set(source) - set(state)
        assert bool(dropped) is (family != "albert"), sorted(dropped)[:5]  # the blocks from `depth` on
        assert body.get_input_embeddings() is model.get_input_embeddings()
        with torch.no_grad():  # the generator computes the encoder's first `depth` layers
            states = encoder(input_ids=inputs["original_input_ids"], output_hidden_states=True).hidden_states
            ours = body(input_ids=inputs["original_input_ids"], output_hidden_states=True).hidden_states
        # (ModernBERT reports its last layer after its final norm: the generator's last is the encoder's middle)
        for layer in range(depth if family == "modernbert" else depth + 1):
            torch.testing.assert_close(ours[layer], states[layer], rtol=0, atol=0)


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_heads_read_the_states_between_blocks_and_the_stop_gradient_cuts_there(family):
    """Head d reads the output of the d-th block call (ALBERT: the d-th call of its shared layer group), what the
    body itself reports as hidden_states[d]; with the stop-gradient the deepest head's loss sends nothing to the
    embeddings below the cut (but the shared token table, its output matrix), without it it does."""
    tok = tiny_tokenizer()
    inputs = batch(tok)
    masked = inputs["labels"] != -100
    for stop_gradient in (True, False):
        model = from_scratch_model(family, tok, stop_gradient=stop_gradient).eval()
        generator = model.generator
        out = generator(inputs["input_ids"], inputs["attention_mask"], masked_positions=masked)
        with torch.no_grad():
            states = generator.body(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    output_hidden_states=True)
        torch.testing.assert_close(out.features[0], states.hidden_states[1][masked], rtol=0, atol=0)
        torch.testing.assert_close(out.features[1], states.last_hidden_state[masked], rtol=0, atol=0)
        table = generator.get_input_embeddings().weight
        below = [p for p in generator.body.embeddings.parameters() if p is not table]
        if family == "albert":
            below += list(generator.body.encoder.embedding_hidden_mapping_in.parameters())
        deepest = torch.nn.functional.cross_entropy(out.logits[1], inputs["labels"][masked])
        grads = torch.autograd.grad(deepest, below, allow_unused=True)
        reached = any(g is not None and g.abs().sum() > 0 for g in grads)
        assert reached is not stop_gradient, (family, stop_gradient)


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_the_discriminator_reads_inputs_embeds_as_it_reads_input_ids(family):
    """AMOS feeds the discriminator the shared table's rows of the replaced ids (inputs_embeds, E wide: DeBERTa's
    embed_proj, ALBERT's mapping to H follow); at every non-pad position that equals reading the ids."""
    tok = tiny_tokenizer()
    model = from_scratch_model(family, tok).eval()
    inputs = batch(tok)
    ids, mask = inputs["original_input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        by_ids = model.discriminator(input_ids=ids, attention_mask=mask).logits
        by_embeds = model.discriminator(inputs_embeds=model.get_input_embeddings()(ids), attention_mask=mask).logits
    assert (mask == 0).any()
    torch.testing.assert_close(by_embeds[mask.bool()], by_ids[mask.bool()], rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_the_generator_dropout_switch_covers_the_familys_own_dropout_fields(family):
    tok = tiny_tokenizer()
    config = family_config(family, tok, layers=2)
    fields = [key for key in GENERATOR_DROPOUT_FIELDS if key in config.to_dict()]
    assert fields, family
    for key in fields:
        setattr(config, key, 0.3)
    inputs = batch(tok)
    masked = inputs["labels"] != -100
    for keep, differs in ((False, False), (True, True)):
        torch.manual_seed(0)
        model = AmosModel(AmosModelConfig.from_configs(config, family_config(family, tok), mlm_layers=[1, 2],
                                                       generator_dropout=keep)).train()
        twice = [model.generator(inputs["input_ids"], inputs["attention_mask"], masked_positions=masked).logits
                 for _ in range(2)]
        assert (not torch.equal(*twice)) is differs, (family, keep)


def test_refusals_name_the_field_and_what_works(work):
    with pytest.raises(UserInputError, match=r"field 'generator_num_hidden_layers': 4 is not in 1\.\.3"):
        AmosModel.from_pretrained_encoder(str(work / "roberta"), 4)
    with pytest.raises(UserInputError, match="num_hidden_groups=3.*one shared layer group"):
        AmosModel.from_pretrained_encoder(str(work / "albert_groups"), 2)
    with pytest.raises(UserInputError, match="field 'encoder_name_or_path'.*encoder-decoder.*roberta"):
        AmosModel.from_pretrained_encoder(str(work / "bart"), 1)
    gpt2 = AutoConfig.for_model("gpt2", n_embd=32, n_layer=2, n_head=2, vocab_size=len(tiny_tokenizer()))
    AutoModel.from_config(gpt2).save_pretrained(work / "gpt2")
    with pytest.raises(UserInputError, match="'gpt2' model without a masked-LM class"):
        AmosModel.from_pretrained_encoder(str(work / "gpt2"), 1)
    vision = AutoModel.from_config(AutoConfig.for_model("vit", hidden_size=32, num_hidden_layers=1,
                                                        num_attention_heads=2, intermediate_size=64, image_size=8,
                                                        patch_size=4))
    with pytest.raises(UserInputError, match="'vit' body .* has no token-embedding table"):
        _token_embeddings(vision)  # (from_pretrained_encoder refuses a ViT earlier: no masked-LM class)
    target = torch.nn.Linear(2, 2)
    with pytest.raises(UserInputError, match=r"missing \['bias'\], unexpected \['other'\]"):
        _load_exactly(target, {"weight": torch.zeros(2, 2), "other": torch.zeros(1)}, "enc", "discriminator")
