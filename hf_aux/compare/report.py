"""What `hf-aux compare` tells its user, from compare.json alone: the learning rate each arm picked on validation,
each arm against the baseline (hf_aux.compare.statistics), compare.md, compare.png and the printed summary."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from .statistics import MIN_UNITS, compare_arms, mean_sd, verdict_words, with_q_values


def picked_rates(content: dict) -> dict[str, float]:
    """Each arm's learning rate: its best mean validation metric (one rule for every arm), or the only one given."""
    metric, higher = content["task"]["metric"], content["task"]["higher_is_better"]
    by_arm: dict = defaultdict(lambda: defaultdict(list))
    for f in content["finetunings"]:
        if f["status"] == "ok" and "validation" in f:
            by_arm[f["arm"]][f["learning_rate"]].append(f["validation"][metric])
    rates, picked = content["settings"].get("learning_rate"), {}
    for arm in content["arms"]:
        means = {rate: sum(v) / len(v) for rate, v in by_arm[arm["name"]].items()}
        if not isinstance(rates, list) or len(rates) == 1:  # one rate given: no choice
            picked[arm["name"]] = rates[0] if isinstance(rates, list) else rates
        elif means:
            picked[arm["name"]] = (max if higher else min)(means, key=means.get)
    return picked


def unit_values(content: dict, arm: dict, rate, split: str) -> tuple[dict, dict]:
    """({unit model: [metric of each fine-tuning]}, {unit model: failed count}) of an arm at one learning rate.
    A unit with a failed fine-tuning is reported as failed and left out of the interval, not averaged in."""
    metric = content["task"]["metric"]
    values, failed = defaultdict(list), defaultdict(int)
    wanted = {(model, seed) for model in arm["models"] for seed in content["seeds"]}
    for f in content["finetunings"]:
        if f["arm"] != arm["name"] or (f["model"], f["seed"]) not in wanted or not math.isclose(
                f["learning_rate"], rate, rel_tol=1e-9):
            continue
        if f["status"] == "ok":
            values[f["model"]].append(f[split][metric])
        else:
            failed[f["model"]] += 1
    return {m: v for m, v in values.items() if not failed[m]}, dict(failed)


def _against_baseline(content: dict) -> tuple[str, dict, list[tuple[str, dict, dict]]]:
    """(the baseline's name, its unit values, [(name, arm, unit values)] of every other arm with a picked rate), on
    the compared split at each arm's picked rate."""
    split = content["task"]["compared_split"]
    rates = picked_rates(content)
    arms = {arm["name"]: arm for arm in content["arms"]}
    base = arms[content["baseline"]]
    base_values, _ = unit_values(content, base, rates.get(base["name"], float("nan")), split)
    compared = [(name, arm, unit_values(content, arm, rates[name], split)[0]) for name, arm in arms.items()
                if name != base["name"] and name in rates]
    return base["name"], base_values, compared


def comparisons(content: dict) -> list[dict]:
    """Every arm minus the baseline on the compared split at each arm's picked rate, q values over these arms."""
    base_name, base_values, compared = _against_baseline(content)
    found = [compare_arms(name, values, base_name, base_values) for name, _, values in compared
             if values and base_values]
    return [{"arm": c.arm, "baseline": c.baseline, "difference": c.interval.difference,
             "ci95": [c.interval.low, c.interval.high], "p_value": c.interval.p_value, "q_value": c.q_value,
             "dof": c.interval.dof, "n_units": c.n_units, "n_baseline_units": c.n_baseline_units, "flag": c.flag,
             "verdict": verdict_words(c, content["task"]["higher_is_better"])}
            for c in with_q_values(found)]


def checkpoint_comparisons(content: dict) -> list[dict]:
    """Each model of each compared arm (one checkpoint) minus the baseline at its picked rate, over their
    fine-tunings: the question "does THIS checkpoint fine-tune better than the baseline here?", which fine-tuning
    noise answers (statistics.compare_arms on the one model: its fine-tunings against the baseline's)."""
    base_name, base_values, compared = _against_baseline(content)
    found = []
    for name, arm, values in compared:
        for model in arm["models"]:
            if values.get(model) and base_values:
                c = compare_arms(name, {model: values[model]}, base_name, base_values)
                found.append({"arm": name, "model": model, "difference": c.interval.difference,
                              "ci95": [c.interval.low, c.interval.high], "n_finetunings": len(values[model]),
                              "n_baseline_finetunings": sum(len(v) for v in base_values.values())})
    return found


def _checkpoint_words(c: dict, baseline: str, higher_is_better: bool) -> str:
    low, high = c["ci95"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no interval (fewer than 2 fine-tunings on a side)"
    if low <= 0 <= high:
        return "no difference shown (the interval contains 0)"
    return f"{'better' if (low > 0) == higher_is_better else 'worse'} than {baseline} (the interval excludes 0)"


def headline_lines(content: dict, found: list[dict], limit: int = 5) -> list[str]:
    """The report's first lines, one answer to each question it can be asked: this checkpoint against the baseline
    at fine-tuning noise (better / worse / no difference shown, with the interval), then whether the method behind
    each arm is shown, which needs several independent training runs of it (statistics.MIN_UNITS)."""
    task, metric, split = content["task"], content["task"]["metric"], content["task"]["compared_split"]
    base, higher = content["baseline"], task["higher_is_better"]
    seeds = len(content["seeds"])
    checkpoints = checkpoint_comparisons(content)
    lines = [f"This checkpoint: {c['arm']} ({c['model']}) vs {base} on {task['name']}, {metric} on {split}, "
             f"at fine-tuning noise ({c['n_finetunings']} vs {c['n_baseline_finetunings']} fine-tunings): "
             f"{_difference(c)}: {_checkpoint_words(c, base, higher)}." for c in checkpoints[:limit]]
    if len(checkpoints) > limit:
        lines.append(f"  ... and {len(checkpoints) - limit} more checkpoints (compare.md).")
    for c in found:
        if c["n_units"] < MIN_UNITS:
            runs = f"{c['n_units']} training run{'s' if c['n_units'] != 1 else ''}"
            lines.append(f"The method behind {c['arm']}: not shown either way: this comparison has {runs} of it; "
                         f"whether the method helps needs {MIN_UNITS} or more independent training runs "
                         f"(--arm {c['arm']}=RUN1,RUN2,RUN3), each fine-tuned with these {seeds} seeds.")
        else:
            lines.append(f"The method behind {c['arm']} ({c['n_units']} training runs) vs {base}: {_difference(c)}: "
                         f"{c['verdict']}.")
    return lines


def _number(value, digits: int = 3, sign: bool = False) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:{'+' if sign else ''}.{digits}f}"


def _difference(c: dict) -> str:
    """"+0.011 [-0.017, +0.038]": a comparison's difference and its 95% interval."""
    low, high = (_number(value, sign=True) for value in c["ci95"])
    return f"{_number(c['difference'], sign=True)} [{low}, {high}]"


def arm_rows(content: dict) -> list[dict]:
    """Per arm: units, fine-tunings, failures, the mean +- sd of its values on each split at its picked rate."""
    rates = picked_rates(content)
    rows = []
    for arm in content["arms"]:
        rate = rates.get(arm["name"], float("nan"))
        row = {"arm": arm["name"], "units": len(arm["models"]), "rate": rate}
        for split in ("validation", "test"):
            values, failed = unit_values(content, arm, rate, split) if split in content["task"]["splits"] else ({}, {})
            flat = [v for vs in values.values() for v in vs]
            means = [sum(vs) / len(vs) for vs in values.values()]
            row[split] = mean_sd(means if len(means) > 1 else flat)
            row["finetunings"], row["failed"] = len(flat), sum(failed.values())
        rows.append(row)
    return rows


def render_markdown(content: dict, found: list[dict]) -> str:
    task, metric = content["task"], content["task"]["metric"]
    split = task["compared_split"]
    lines = [f"# hf-aux compare: {task['name']} ({task['kind']}), {metric} on {split}", "",
             *[f"- {line}" for line in headline_lines(content, found)], "",
             f"Baseline: **{content['baseline']}**. {len(content['seeds'])} fine-tuning seeds per model "
             f"({', '.join(map(str, content['seeds']))}); train rows {task['splits'].get('train')}, "
             f"validation {task['splits'].get('validation', '-')}, test {task['splits'].get('test', '-')}. "
             "Every arm fine-tuned with the same settings (compare.json's `settings`).", "",
             "| arm | units | fine-tunings (failed) | learning rate | validation mean ± sd | test mean ± sd |",
             "|---|---|---|---|---|---|"]
    for row in arm_rows(content):
        cells = [f"{_number(row[s][0])} ± {_number(row[s][1])}" for s in ("validation", "test")]
        lines.append(f"| {row['arm']} | {row['units']} | {row['finetunings']} ({row['failed']}) | {row['rate']:g} | "
                     f"{cells[0]} | {cells[1]} |")
    lines += ["", f"| arm - {content['baseline']} | difference [95% CI] | p | q (BH) | units | verdict |",
              "|---|---|---|---|---|---|"]
    for c in found:
        lines.append(f"| {c['arm']} | {_difference(c)} | {_number(c['p_value'])} | {_number(c['q_value'])} | "
                     f"{c['n_units']} vs {c['n_baseline_units']} | {c['verdict']} |")
    lines += ["", "How to read it: a unit is one training run of an arm (one model folder), its value the mean of its "
              "fine-tunings; the interval is Welch's over both arms' units, so it counts the training and fine-tuning "
              "noise of both. A compared arm of one model describes that checkpoint, not its method (flagged, no "
              f"verdict). q: Benjamini-Hochberg over the {len(found)} comparisons of this table. "
              "Details: docs/compare.md.", "", "## Every fine-tuning", "",
              "| arm | model | seed | learning rate | validation | test | status | wall s |",
              "|---|---|---|---|---|---|---|---|"]
    for f in content["finetunings"]:
        values = [_number(f.get(s, {}).get(metric)) for s in ("validation", "test")]
        lines.append(f"| {f['arm']} | {f['model']} | {f['seed']} | {f['learning_rate']:g} | {values[0]} | {values[1]} "
                     f"| {f['status'] if f['status'] == 'ok' else 'failed: ' + f.get('error', '')} | {f['wall_s']} |")
    return "\n".join(lines) + "\n"


def plot(content: dict, found: list[dict], path: Path) -> None:
    """Left: every fine-tuning as a dot by arm and unit, unit means as bars. Right: arm - baseline, 95% CI."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure state

    task, metric, split = content["task"], content["task"]["metric"], content["task"]["compared_split"]
    rates = picked_rates(content)
    figure = Figure(figsize=(11, 4.2))
    left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    ticks, labels, x = [], [], 0.0
    for index, arm in enumerate(content["arms"]):
        values, _ = unit_values(content, arm, rates.get(arm["name"], float("nan")), split)
        start = x
        for unit, model in enumerate(arm["models"]):
            points = values.get(model, [])
            left.scatter([x] * len(points), points, s=22, color=f"C{index}", alpha=0.75, zorder=3)
            if points:
                left.hlines(sum(points) / len(points), x - 0.3, x + 0.3, color=f"C{index}", lw=2)
            x += 1
        ticks.append((start + x - 1) / 2)
        labels.append(f"{arm['name']}\n({len(arm['models'])} unit{'s' if len(arm['models']) > 1 else ''})")
        x += 0.8
    floors = {f[split].get("majority_baseline") for f in content["finetunings"] if f["status"] == "ok"} - {None}
    if len(floors) == 1 and metric == "accuracy":  # the accuracy of always answering the commonest class
        left.axhline(floors.pop(), color="0.4", ls=":", lw=1, label="majority class")
        left.legend(loc="lower right", fontsize=8)
    left.set_xticks(ticks, labels)
    left.set_ylabel(f"{split} {metric}")
    left.set_title("each dot one fine-tuning; bars: unit means", fontsize=9)
    left.grid(axis="y", alpha=0.3)
    for row, c in enumerate(found):
        low, high = c["ci95"]
        color = "0.5" if c["flag"] else "C3"
        if math.isfinite(low):
            right.plot([low, high], [row, row], color=color, lw=2)
        right.plot([c["difference"]], [row], "o", color=color)
    right.axvline(0.0, color="k", lw=1, ls="--")
    right.set_yticks(range(len(found)), [c["arm"] + (" *" if c["flag"] else "") for c in found])
    right.set_ylim(max(len(found) - 0.3, 0.7), -0.7)  # the first comparison on top
    right.set_xlabel(f"{metric} minus {content['baseline']} (95% CI)")
    right.set_title("* one training run: fine-tuning noise only" if any(c["flag"] for c in found) else
                    "Welch interval over units", fontsize=9)
    figure.suptitle(f"{task['name']}: {len(content['seeds'])} seeds per model, "
                    f"train rows {task['splits'].get('train')}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def summary_lines(content: dict, found: list[dict]) -> list[str]:
    metric, split = content["task"]["metric"], content["task"]["compared_split"]
    lines = [*headline_lines(content, found),
             f"{content['task']['name']}: {metric} on {split}, each arm minus {content['baseline']}:"]
    for c in found:
        lines.append(f"  {c['arm']}: {_difference(c)}, q {_number(c['q_value'])}: {c['verdict']}")
    return lines
