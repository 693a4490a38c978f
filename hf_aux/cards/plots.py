"""The figures of hf_aux's model cards and outputs: loss curves, task weights and mixture weights over training,
drawn with matplotlib (Agg: files only) from a Trainer's log history. The cards (`hf_aux.cards.model_card`) show them;
the trainers draw them into the output folder."""

from __future__ import annotations

import math
import os
from pathlib import Path


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


TRAINING_OBJECTIVE = "training objective, as optimised"
EVALUATION_LOSS = "evaluation loss"


def loss_panels(series: dict[str, list[tuple[float, float]]], keys: tuple = ("loss", "eval_loss"),
                title: str = "Loss", same_scale: bool = False) -> list[tuple[str, dict[str, list[tuple[float, float]]]]]:
    """Split loss series into panels a person can read: the overall panel first (`keys`), then the trainer's other
    named loss parts ('rtd_loss', ...), then one panel per family of per-task keys ('loss/<task>',
    'eval_<task>_loss', ...), none with more than `MAX_SERIES_PER_PANEL` series (a larger family is cut into several
    panels, '(1/3)' ...). Unless `same_scale` (the training loss is the evaluation loss's quantity, as a plain
    fine-tuning's cross entropy), the overall training objective (`keys[0]`: MUPPET's eq. 1-scaled sum, TARTAN's
    weighted sum, ...) and the evaluation loss (`keys[1]`) get a panel each, side by side: on one axis the
    evaluation would look far worse than training only because the two are different quantities."""
    families: dict[str, dict[str, list[tuple[float, float]]]] = {"": {}}
    for name in [k for k in keys if k in series] + sorted(k for k in series if k not in keys):
        families.setdefault(_series_family(name, keys), {})[name] = series[name]
    if not same_scale and len(families[""]) > 1:
        training, *evaluation = families.pop("")
        overall = {series_name: series[series_name] for series_name in evaluation}
        families = {f"{title}: {TRAINING_OBJECTIVE}": {training: series[training]},
                    f"{title}: {EVALUATION_LOSS}": overall, **families}
    panels = []
    # overall, parts, training families ('loss/' first), then evaluation families ('eval_mlm_loss/' after 'mlm_loss/')
    split = [f for f in families if f.startswith(f"{title}: ")]  # the overall panel, split in two: first
    order = split + sorted((f for f in families if f not in split),
                           key=lambda f: (f != "", f != "parts", f.startswith("eval_"), f != "loss/", f))
    for family in order:
        members = families[family]
        if not members:
            continue
        label = family if family in split else (
            f"{title}: {_FAMILY_TITLES.get(family, family + '*' if family.endswith('/') else family)}" if family
            else title)
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
                     title: str = "Loss", exclude_prefixes: tuple = (), same_scale: bool = False) -> Path:
    """Plot the losses logged in `trainer.state.log_history` against the step and save a PNG at `path`.

    Every logged loss is drawn (a key with "loss" as one of its words: "loss", "eval_loss", "loss/sst2", "rtd_loss",
    "eval_imdb_loss", ...) in the small multiples of `loss_panels`, legends beside the axes. Keys starting with one
    of `exclude_prefixes` are left out (e.g. MUPPET's "scaled_loss/": the same curves as "loss/", rescaled). Raises
    ValueError when nothing loss-like was logged.
    """
    series = {name: points for name, points in logged_series(log_history, "").items()
              if _is_loss_key(name) and not name.startswith(exclude_prefixes)}
    if not series:
        raise ValueError("No loss was logged: trainer.state.log_history has no entry with a '*loss' key and a step")
    panels = loss_panels(series, keys, title, same_scale)
    # the objective as optimised (MUPPET's is eq. 1-scaled, unitless); the evaluation loss, the parts and per-task
    # losses are cross entropies in nats (a regression task's, MSE in its label's units)
    labels = {f"{title}: {TRAINING_OBJECTIVE}": "objective (as optimised)", f"{title}: {EVALUATION_LOSS}": "loss",
              title: "loss"}
    return plot_panels(panels, path, ylabel={name: labels.get(name, "loss (nats)") for name, _ in panels})


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
