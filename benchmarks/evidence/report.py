"""What the evidence studies' reports share (benchmarks/evidence/<method>.py `--report`): number and mean ± sd text,
markdown tables, and the figures: a grid of panels saved under the setting as its title, a forest panel of
differences with their intervals, curves over units with a band, and each unit's value per arm. The statistics
behind them live in common.py."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from benchmarks.evidence.common import NO_VERDICT, NOT_TESTABLE, RETIRED, mean_sd, unit_ci

VERDICT_COLOURS = {"reproduced": "tab:green", "not reproduced": "tab:red", "inconclusive": "tab:gray",
                   NO_VERDICT: "tab:purple", NOT_TESTABLE: "black", RETIRED: "tab:brown"}


def fmt(value, digits: int = 3) -> str:
    """A number with `digits` decimals; "-" for None or nan."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def mean_sd_text(values, digits: int = 3, n: bool = False) -> str:
    """"mean ± sd" over the values (the mean alone for one value, "-" for none); `n`: " (N)" after it."""
    values = list(values)
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return fmt(mean, digits) + ("" if len(values) < 2 else f" ± {fmt(sd, digits)}") + (f" ({len(values)})" if n else "")


def counted(n: int, word: str) -> str:
    """"1 unit", "3 units": a count and its noun."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def markdown_table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table's lines and a blank line after it (None cells empty)."""
    return [f"| {' | '.join(header)} |", "|" + "---|" * len(header),
            *("| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in rows), ""]


def _pyplot():
    from hf_aux.cards.plots import _pyplot as pyplot  # matplotlib with the file-only backend

    return pyplot()


def figure(panels: int, columns: int, width: float, height: float, **options):
    """A figure of `panels` axes of width x height inches, `columns` to a row (spare ones hidden; `options`: of
    plt.subplots): (the figure, its axes in reading order)."""
    rows = math.ceil(panels / columns)
    fig, axes = _pyplot().subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False, **options)
    for axis in axes.flat[panels:]:
        axis.set_visible(False)
    return fig, list(axes.flat)


def save_figure(fig, path, title: str, fontsize="large", dpi: int = 100, wrap: int | None = None,
                legend_columns: int = 0, bottom: float = 0.0) -> str:
    """Save a figure as PNG under its title (the setting; wrapped at `wrap` characters), close it, and return its file
    name. `legend_columns`: one legend for every panel (each label once), in that many columns, under the panels, in
    the lowest `bottom` of the figure."""
    if legend_columns:
        handles = {}
        for axis in fig.axes:
            for handle, label in zip(*axis.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=legend_columns,
                   bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(textwrap.fill(title, wrap) if wrap else title, fontsize=fontsize)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return Path(path).name


def forest_panel(ax, rows: list[tuple], title: str, xlabel: str | None = None, fontsize=None) -> None:
    """One row per comparison, top down, (label, per-unit differences, (mean, low, high) or None, colour): the units
    as grey dots, the mean with its 95% interval, a line at 0."""
    for y, (_, units, interval, colour) in enumerate(rows):
        if len(units):
            ax.scatter(units, [y] * len(units), color="0.6", s=12, zorder=2)
        if interval:
            mean, low, high = interval
            ax.errorbar([mean], [y], xerr=[[mean - low], [high - mean]], fmt="o", color=colour, capsize=3, zorder=3)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [row[0] for row in rows], fontsize=fontsize)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=fontsize)
    ax.set_xlabel(xlabel or "")
    ax.grid(axis="x", alpha=0.3)


def curves_panel(ax, series, ylabel: str, title: str, xlabel: str = "step", band: str = "sd", line=None,
                 fontsize: float = 8, legend_outside: bool = False) -> None:
    """Per series (label, colour or None, line style, per-unit curves [(step, value), ...]): the mean over units at
    the steps every curve has, with a band of ± sd (`band` "sd") or from the lowest unit to the highest ("range"), n
    in the legend; `line`: a reference (value, label)."""
    for label, colour, style, curves in series:
        curves = [dict(curve) for curve in curves if curve]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(curve) for curve in curves)))
        values = [[curve[step] for curve in curves] for step in steps]
        mean = [mean_sd(at)[0] for at in values]
        if band == "range":
            low, high = [min(at) for at in values], [max(at) for at in values]
        else:
            sd = [s if math.isfinite(s) else 0.0 for s in (mean_sd(at)[1] for at in values)]
            low, high = [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)]
        drawn, = ax.plot(steps, mean, style, color=colour, marker="o" if len(steps) < 12 else None, markersize=3,
                         label=f"{label} (n={len(curves)})")
        ax.fill_between(steps, low, high, color=drawn.get_color(), alpha=0.15)
    if line:
        ax.axhline(line[0], color="gray", linestyle="--", linewidth=0.8, label=line[1])
    ax.set_xlabel(xlabel, fontsize=fontsize)
    ax.set_ylabel(ylabel, fontsize=fontsize)
    ax.set_title(title, fontsize=fontsize)
    ax.legend(fontsize=fontsize - 2, **({"loc": "upper left", "bbox_to_anchor": (1.0, 1.0)} if legend_outside else {}))
    ax.grid(alpha=0.3)


def units_panel(ax, values: dict[str, list[float]], ylabel: str, title: str, joined=False, line=None) -> None:
    """Each unit's value per arm ({label: values}; `joined`: the lists are paired by seed and joined by a line), the
    arm mean with its 95% t interval over units (black), and a reference line (value, label) such as the floor."""
    for x, (label, found) in enumerate(values.items()):
        if not joined:
            ax.scatter([x] * len(found), found, color="tab:blue", alpha=0.6, s=18, zorder=3)
        mean, lo, hi = unit_ci(found)
        ax.errorbar([x + 0.15], [mean], yerr=[[mean - lo], [hi - mean]] if math.isfinite(lo) else None, fmt="o",
                    color="black", capsize=3)
    for unit in zip(*values.values()) if joined else ():
        ax.plot(range(len(unit)), unit, "-o", color="tab:blue", alpha=0.5, markersize=4)
    if line:
        ax.axhline(line[0], color="tab:red", linestyle="--", linewidth=1, label=line[1])
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(list(values), rotation=20, ha="right", fontsize=7)
    ax.set_xlim(-0.5, len(values) - 0.5)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=7)
    ax.grid(axis="y", alpha=0.3)
