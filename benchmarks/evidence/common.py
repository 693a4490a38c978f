"""Small generic helpers shared by the evidence studies (benchmarks/evidence/<method>.py): the JSON run cache,
run metadata, and the claims list (../shared/EVIDENCE.md) on the statistics of `hf-aux compare`
(hf_aux.compare.statistics): intervals over independent units (paired by seed for two trained arms, Welch's for a
baseline that is one fixed model, so its fine-tuning noise counts), the verdict against the paper's predicted sign,
Benjamini-Hochberg q values over one study's claims list and the multiplicity statement of every report; and the
numbers reports state about them: a difference with its interval, the units an inconclusive claim would need, whether
a training curve has flattened. The markdown and figure helpers are in report.py.

The cache is one JSON file `{"runs": [...], "claims": [...]}`; each finished run appends its object atomically
(temp file + rename, under a lock), so an interrupted study continues where it stopped and a reader never sees half
a file. The claims are recomputed from the runs by the study's report step (`claim_record`, `write_claims`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

from hf_aux.compare.statistics import (benjamini_hochberg, compare_arms, mean_sd, one_sample_interval,  # noqa: F401
                                       t_quantile, welch_interval)


def load_runs(path) -> list[dict]:
    """Every run object in the cache file (an empty list when the file does not exist yet)."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path) as handle:
        content = json.load(handle)
    runs = content.get("runs") if isinstance(content, dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"{path}: field 'runs': expected a list of run objects")
    return runs


def _update(path, change) -> None:
    """Rewrite the cache file as `change(content)` (content: the whole JSON object), atomically (a temp file beside
    it, then rename), holding a lock beside it so that processes sharing a study cannot lose each other's writes."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        content = {"runs": load_runs(path)}
        if path.is_file():
            content = {**json.loads(path.read_text()), **content}
        content = change(content)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(content, out, indent=1)
                out.write("\n")
            os.replace(temp, path)
        except BaseException:
            if os.path.exists(temp):
                os.remove(temp)
            raise


def append_run(path, run: dict) -> None:
    """Append one run object to the cache file (atomically, under the lock; the claims list is kept)."""
    _update(path, lambda content: {**content, "runs": content["runs"] + [run]})


def write_claims(path, claims: list[dict]) -> None:
    """Replace the cache file's claims list (`claim_record` objects), keeping its runs."""
    _update(path, lambda content: {**content, "claims": list(claims)})


def load_claims(path) -> list[dict]:
    """The cache file's claims list (empty when there is none yet)."""
    path = Path(path)
    return list(json.loads(path.read_text()).get("claims", [])) if path.is_file() else []


def matching(runs, **keys) -> list[dict]:
    """The cached runs that match every given key/value."""
    return [run for run in runs if all(run.get(k) == v for k, v in keys.items())]


def has_run(runs, **keys) -> bool:
    """Whether a cached run matches every given key/value."""
    return bool(matching(runs, **keys))


def run_meta() -> dict:
    """Where and how a run ran: the repository commit, device, 1-minute load average at start, torch threads."""
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"commit": commit, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "load_avg": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads()}


def clock():
    """A reader of the wall and CPU seconds since the call: the cost every run object records."""
    wall, cpu = time.time(), time.process_time()
    return lambda: {"wall_s": round(time.time() - wall, 1), "cpu_s": round(time.process_time() - cpu, 1)}


_t_quantile = t_quantile  # the name one study's tests use


def paired_ci(a, b, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean of a - b, lower, upper): the t interval over paired values (e.g. units of two trained arms that share a
    seed). Needs at least two pairs."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b):
        raise ValueError(f"paired_ci: fields 'a', 'b': {len(a)} and {len(b)} values are not paired")
    if len(a) < 2:
        raise ValueError(f"paired_ci: field 'a': a t interval needs at least 2 pairs, got {len(a)}")
    found = one_sample_interval([x - y for x, y in zip(a, b)], confidence)
    return found.difference, found.low, found.high


def verdict(lo: float, hi: float, expected_sign: int) -> str:
    """'reproduced' when the interval lies entirely on the paper's side of 0, 'not reproduced' when it lies
    entirely on the other side, 'inconclusive' when it includes 0."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    if expected_sign not in (1, -1):
        raise ValueError(f"verdict: field 'expected_sign': must be 1 or -1, got {expected_sign}")
    if lo > 0 or hi < 0:
        return "reproduced" if (lo > 0) == (expected_sign > 0) else "not reproduced"
    return "inconclusive"


def unit_differences(arm: dict, base: dict) -> dict:
    """Per unit, the mean over its fine-tuning seeds of arm - other, for two TRAINED arms paired by seed.

    arm: {(unit, seed): value}; base: {seed: value}, the other arm's run of the same unit seed, or {(unit, seed):
    value} where the other arm has units of its own (paired by unit and seed). Not for a baseline that is one fixed
    model fine-tuned with a few seeds shared by every unit: its fine-tuning noise would become an offset the interval
    never sees; `model_baseline_record` is that comparison."""
    units: dict = {}
    for (unit, seed), value in arm.items():
        key = (unit, seed) if (unit, seed) in base else seed
        if key in base:
            units.setdefault(unit, []).append(float(value) - float(base[key]))
    return {unit: sum(values) / len(values) for unit, values in units.items()}


def by_unit(values: dict) -> dict:
    """{(unit, seed): value} or, for one fixed model, {seed: value} -> {unit: [value per fine-tuning seed]}."""
    units: dict = {}
    for key, value in values.items():
        units.setdefault(key[0] if isinstance(key, tuple) else None, []).append(float(value))
    return units


# The labels (../shared/EVIDENCE.md: labels say why), fixed before any outcome is read:
# - NOT_TESTABLE: what this scale cannot measure (too few real tasks, no data, a model or budget a CPU cannot train);
#   `claim_record(..., reason=...)` with the measured reason.
# - RETIRED: a setting that was broken, untuned or superseded (`retirement_reason`, read from its configuration and
#   its validation curves, never from a test result); the comparison is rerun in a fixed setting, not judged here.
# - NO_VERDICT: a comparison the paper predicts no sign for (or makes no claim about).
# All three stay outside the Benjamini-Hochberg family (no p value). A fine-tuning that did not train (`training_gate`:
# its TRAINING accuracy at or below its training set's majority class) is one missing data point, never a label.
NOT_TESTABLE = "not testable here"
RETIRED = "setting retired (rerun)"
NO_VERDICT = "no verdict"  # a comparison the paper predicts no sign for (or that the rules cannot judge)


def retirement_reason(untuned: str | None = None, unflattened: str | None = None, superseded_by: str | None = None,
                      broken: str | None = None) -> str | None:
    """THE rule that retires a setting (every study calls it, before judging): its arms were not tuned alike
    (`untuned`: the same learning-rate search on validation for every arm of a comparison, none searched counting as
    untuned), its budget had not flattened (`unflattened`: an arm's validation curve still moving over the last third,
    without best-validation checkpoints for every arm), it was `broken` (a defect of the setting, e.g. a pooling that
    misreads the body), or it is `superseded_by` a rerun of the same comparison with the defect fixed. Each argument
    is the measured text read from configurations and validation curves; None when no condition holds."""
    parts = [f"broken: {broken}" if broken else None, f"untuned: {untuned}" if untuned else None,
             f"budget not flattened: {unflattened}" if unflattened else None,
             f"superseded by {superseded_by}" if superseded_by else None]
    return "; ".join(p for p in parts if p) or None


def retire(record: dict, reason: str) -> dict:
    """A claim record of a retired setting: its difference and interval stay visible, outside the BH family."""
    return {**record, "verdict": RETIRED, "reason": reason, "p_value": None}


def training_gate(fine_tunings) -> dict:
    """THE training-accuracy gate of every study: `fine_tunings` are (key, label, training accuracy, its training
    set's majority-class accuracy) with None where not recorded. A fine-tuning whose training accuracy is at or below
    that majority did not train: it is one missing data point (`failed`, to be left out of its unit), never a void
    claim. Where training accuracy was not recorded the gate cannot be applied (`unchecked`); it is never read from
    the test result being compared. Returns {"failed": [(key, label, accuracy, majority)], "checked": n,
    "unchecked": n}."""
    failed, checked, unchecked = [], 0, 0
    for key, label, accuracy, majority in fine_tunings:
        if accuracy is None or majority is None:
            unchecked += 1
            continue
        checked += 1
        if float(accuracy) <= float(majority):
            failed.append((key, label, float(accuracy), float(majority)))
    return {"failed": failed, "checked": checked, "unchecked": unchecked}


def gate_note(gate: dict) -> str | None:
    """The gate's outcome in words for a claim record (None when every fine-tuning was checked and trained)."""
    parts = []
    if gate["failed"]:
        parts.append(f"{len(gate['failed'])} fine-tuning{'s' if len(gate['failed']) > 1 else ''} did not train and "
                     "left out as missing points (" + "; ".join(f"{label}: training {acc:.3g} <= majority {maj:.3g}"
                                                             for _, label, acc, maj in gate["failed"]) + ")")
    if gate["unchecked"]:
        parts.append(f"training accuracy not recorded for {gate['unchecked']} of "
                     f"{gate['unchecked'] + gate['checked']} fine-tunings: the gate was not applied to them (it is "
                     "never read from the test result)")
    return "; ".join(parts) or None


def claim_record(claim: str, paper: str, predicted_sign: int, unit: str, differences,
                 reason: str | None = None, **extra) -> dict:
    """One entry of the claims list (../shared/EVIDENCE.md): `differences` are the per-unit differences of two
    trained arms paired by seed (`unit_differences`), whose sign the paper predicts (`predicted_sign` in THIS
    setting). The verdict follows mechanically from the 95% t interval over units; with `reason` (the measured
    reason), or fewer than 3 units, it is "not testable here" / "inconclusive" and says why. `extra`: further
    fields (setting, arms). A baseline that is one fixed model: `model_baseline_record`."""
    values = [float(v) for v in differences]
    return _record(claim, paper, predicted_sign, unit, one_sample_interval(values), len(values), reason, extra)


def model_baseline_record(claim: str, paper: str, predicted_sign: int, unit: str, arm: dict, baseline: dict,
                          reason: str | None = None, **extra) -> dict:
    """A claim of arm - baseline where the baseline is ONE fixed model (e.g. base MiniLM) fine-tuned with some
    seeds: Welch's interval over the arm's units (each the mean of its fine-tuning seeds) and the baseline's
    fine-tunings (hf_aux.compare.statistics), so the baseline's own fine-tuning noise is in the interval.
    arm: {(unit, seed): value}; baseline: {seed: value}."""
    units = by_unit(arm)
    found = compare_arms("arm", units, "baseline", by_unit(baseline)).interval if units and baseline else None
    if found is not None and len(units) < 2:  # one unit: an interval over its fine-tunings is not one over units
        found = one_sample_interval([found.difference])
    return _record(claim, paper, predicted_sign, unit, found, len(units), reason, extra)


def _record(claim, paper, predicted_sign, unit, found, n_units, reason, extra) -> dict:
    def rounded(value):
        return None if value is None or not math.isfinite(value) else round(value, 6)

    record = {"claim": claim, "paper": paper, "predicted_sign": predicted_sign, "unit": unit, "n_units": n_units,
              "difference": rounded(found.difference) if found else None,
              "ci95": [rounded(found.low), rounded(found.high)] if found and math.isfinite(found.low) else None,
              "p_value": rounded(found.p_value) if found else None, **extra}
    if reason is not None:
        return {**record, "verdict": NOT_TESTABLE, "reason": reason}
    if n_units < 3:
        return {**record, "verdict": "inconclusive", "reason": f"{n_units} of the 3 units needed"}
    return {**record, "verdict": verdict(*(record["ci95"] or (math.nan, math.nan)), predicted_sign)}


def no_verdict(record: dict, reason: str, keep_sign: bool = False) -> dict:
    """A claim record the rules give no verdict: its difference and interval stay visible, outside the BH family
    (no p value); the predicted sign goes unless `keep_sign` (the paper predicts one, the data cannot be judged)."""
    return {**record, **({} if keep_sign else {"predicted_sign": None}), "verdict": NO_VERDICT, "reason": reason,
            "p_value": None}


JUDGED = ("reproduced", "not reproduced", "inconclusive")


def with_q_values(records: list[dict], alpha: float = 0.05) -> list[dict]:
    """The claims list with Benjamini-Hochberg q values: the family is the list's judged claims that have an interval
    (a verdict of reproduced / not reproduced / inconclusive; "not testable here" and "no verdict" claims are not
    tests). A decided verdict gets `survives_bh` (q <= alpha)."""
    family = [i for i, r in enumerate(records) if r["verdict"] in JUDGED and r.get("p_value") is not None]
    q = benjamini_hochberg([records[i]["p_value"] for i in family])
    found = [dict(r) for r in records]
    for i, value in zip(family, q):
        found[i]["q_value"] = round(value, 6)
        if found[i]["verdict"] in ("reproduced", "not reproduced"):
            found[i]["survives_bh"] = value <= alpha
    return found


def multiplicity_lines(records: list[dict], alpha: float = 0.05) -> list[str]:
    """How many claims were judged and decided, how many a 5% error rate would decide by chance, which decided
    verdicts survive Benjamini-Hochberg (records from `with_q_values`), and what stayed outside the family."""
    judged = [r for r in records if "q_value" in r]
    decided = [r for r in judged if r["verdict"] in ("reproduced", "not reproduced")]
    kept = [r for r in decided if r["survives_bh"]]
    outside = {label: sum(r["verdict"] == label for r in records) for label in (NOT_TESTABLE, RETIRED, NO_VERDICT)}
    lines = ["## Multiplicity", "",
             f"{len(judged)} claims judged (with an interval); {len(decided)} decided; a 5% error rate would decide "
             f"about {alpha * len(judged):.1f} of them by chance when nothing differs. Benjamini-Hochberg at "
             f"{alpha:g} over this list: {len(kept)} of the {len(decided)} decided verdicts survive. Outside the "
             "family (labels fixed before judging, common.py): " + ", ".join(
                 f"{n} {label}" for label, n in outside.items()) + "."]
    if decided:
        lines += ["", "| claim | setting | verdict | p | q | survives BH |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['claim']} | {r.get('setting', '')} | {r['verdict']} | {r['p_value']:.3g} | {r['q_value']:.3f} "
                  f"| {'yes' if r['survives_bh'] else '**no**'} |" for r in decided]
    return lines + [""]


PRIMARIES_PATH = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "primaries.json"


def load_primaries(method: str, path=PRIMARIES_PATH) -> dict:
    """The method's entry of the committed, dated primaries file (docs/evidence/primaries.json): "primary" (the
    records that are its primary claims, each {"match": {field: value}}), "answer" (the records the README's plain
    answer reads, each with "favours": the sign of the difference that favours the method; default: the primaries),
    "context" (records shown beside the answer) and "instead" (alternatives, each a name and the records that measure
    it with the sign that favours the alternative). {} when the file or the method is absent."""
    path = Path(path)
    if not path.is_file():
        return {}
    return json.loads(path.read_text()).get("methods", {}).get(method, {})


def matches(record: dict, match: dict) -> bool:
    """Whether a claim record has every field of `match` (a primaries-file entry's "match")."""
    return all(record.get(key) == value for key, value in match.items())


def mark_primaries(records: list[dict], method: str, path=PRIMARIES_PATH) -> list[dict]:
    """The claims list with "primary": True on the records the primaries file names for `method` (and on no other)."""
    chosen = [entry["match"] for entry in load_primaries(method, path).get("primary", [])]
    return [{**{k: v for k, v in r.items() if k != "primary"},
             **({"primary": True} if any(matches(r, m) for m in chosen) else {})} for r in records]


def primary_paragraph(records: list[dict], why: str, label=lambda record: record["claim"]) -> list[str]:
    """A report's paragraph on its primary claims (../shared/EVIDENCE.md: one or two per method, named from the
    paper's reading in docs/evidence/primaries.json, dated): `why` they test the paper's headline best here, then each
    one's verdict now with its unadjusted p and its q (`label` names a record). Nothing when no record is primary."""
    chosen = [record for record in records if record.get("primary")]
    if not chosen:
        return []

    def tested(r):
        return "".join(f", {name} {r[key]:.3g}" for name, key in (("p", "p_value"), ("q", "q_value"))
                       if r.get(key) is not None)

    return ["", "**Primary claims** (marked in the table; named in docs/evidence/primaries.json, chosen from the "
            "paper's reading, not from the results, though after the runs): " + why + " Now: "
            + "; ".join(f"{label(r)}: {r['verdict']} ({difference_text(r)}{tested(r)})" for r in chosen) + ".", ""]


def difference_text(item: dict, digits: int = 3) -> str:
    """A claim record's difference with its 95% interval, "+0.051 [+0.022, +0.080]" ("-" without a difference)."""
    if item.get("difference") is None:
        return "-"
    text = f"{item['difference']:+.{digits}f}"
    if item.get("ci95"):
        text += f" [{item['ci95'][0]:+.{digits}f}, {item['ci95'][1]:+.{digits}f}]"
    return text


def attribution_text(record: dict) -> str | None:
    """What a record's attribution control (`record["control"]`: the same pipeline with the method's updates removed,
    e.g. its command at learning rate 0) says about the record's difference, by one rule: the control decided on the
    same side as the difference (its interval excludes 0 there) -> the pipeline alone moves it, not attributed to the
    method; the control's interval excludes a difference half the record's -> the pipeline does not explain it;
    otherwise the control is too wide to separate them. A control needs 3 units, and the arm's own pipeline (a
    `differs` text says how it does not run it: then it attributes nothing). None without a control or a
    difference."""
    control, difference = record.get("control"), record.get("difference")
    if not control or difference is None or control.get("difference") is None:
        return None
    text = f"the control, {control.get('label') or control['claim']}: {difference_text(control)}"
    if control["n_units"] < 3 or not control.get("ci95"):
        return text + f" ({control['n_units']} unit{'s' if control['n_units'] != 1 else ''} of the 3 needed)"
    if control.get("differs"):  # it does not run the arm's pipeline: it controls something else
        return text + f": not comparable ({control['differs']}), so it attributes nothing"
    low, high, half = control["ci95"][0], control["ci95"][1], difference / 2
    if (difference < 0 and high < 0) or (difference > 0 and low > 0):
        return text + ": the pipeline alone already moves it, so the difference is not attributed to the method"
    if (difference < 0 and low > half) or (difference > 0 and high < half):
        return text + (f", whose interval excludes a difference half the arm's ({half:+.3f}): the pipeline does not "
                       "explain it, the method's updates do")
    return text + f": too wide to exclude half the arm's difference ({half:+.3f}), so it cannot separate the two"


def claims_table(claims: list[dict], link: str) -> list[str]:
    """The README's Evidence rows of one method's claims: claim | verdict | difference [95% CI] | link."""
    return [f"| {item['claim']} | {item['verdict']} | {difference_text(item)} ({item['n_units']} units) | {link} |"
            for item in claims]


def unit_ci(differences, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, lower, upper): the t interval over independent units' differences (`unit_differences`); nan bounds
    for fewer than two units."""
    found = one_sample_interval([float(v) for v in differences], confidence)
    return found.difference, found.low, found.high


def interval_text(differences, digits: int = 3, n: bool = False, min_units: int = 2) -> str:
    """Per-unit differences as their mean with its 95% t interval, "+0.051 [+0.022, +0.080]" (the mean alone below
    `min_units` units, "-" for none); `n`: " (n = N)" after it."""
    values = [float(v) for v in differences]
    if not values:
        return "-"
    mean, low, high = unit_ci(values)
    text = difference_text({"difference": mean, "ci95": [low, high] if len(values) >= min_units else None}, digits)
    return text + (f" (n = {len(values)})" if n else "")


def paired_text(a, b, sign: int) -> tuple[str, str]:
    """The paired difference a - b over seeds as `interval_text` with n, and its verdict against `sign` (below 3
    pairs no interval and no verdict: "incomplete")."""
    differences = [float(x) - float(y) for x, y in zip(a, b)]
    text = interval_text(differences, n=True, min_units=3)
    if len(differences) < 3:
        return text, f"incomplete: {len(differences)} seed{'s' if len(differences) != 1 else ''} so far"
    return text, verdict(*unit_ci(differences)[1:], sign)


def units_needed(item: dict, limit: int = 50) -> int | str | None:
    """The fewest units whose 95% t interval would exclude 0 if the per-unit differences of a claim record kept their
    mean and sd (the sd read back from its interval); "> limit" above it; None without an interval or a difference.
    A planning figure, not a prediction; a difference of 0 is never decided ("> limit")."""
    if not item.get("ci95") or item.get("difference") is None or item["n_units"] < 2:
        return None
    n, mean = item["n_units"], abs(item["difference"])
    sd = (item["ci95"][1] - item["ci95"][0]) / 2 / t_quantile(0.975, n - 1) * math.sqrt(n)
    return next((units for units in range(3, limit + 1)
                 if t_quantile(0.975, units - 1) * sd / math.sqrt(units) < mean), f"> {limit}")


def last_third_movement(curves: list[list[tuple[float, float]]]) -> tuple[float, float, float, float] | None:
    """(mean over units of the change over the last third of training, seed-to-seed sd of the final value, the step
    the last third starts at, the final step) for per-unit curves [(step, value), ...]; None for fewer than 2 units.
    A curve has not flattened when |change| > sd."""
    curves = [sorted(c) for c in curves if c]
    if len(curves) < 2:
        return None
    end = min(c[-1][0] for c in curves)
    start = next(step for step, _ in curves[0] if step >= end * 2 / 3)

    def at(curve, step):
        return next(value for s, value in curve if s >= step)

    return (mean_sd([at(c, end) - at(c, start) for c in curves])[0], mean_sd([at(c, end) for c in curves])[1], start,
            end)


def pooled_final_sd(arms_curves: list[list[list[tuple[float, float]]]]) -> float:
    """The seed-to-seed sd of the curves' final values, pooled over arms (each a list of per-unit curves): the root
    mean of their variances, since three units per arm give too noisy an sd alone."""
    variances = [mean_sd(finals)[1] ** 2 for finals in ([sorted(c)[-1][1] for c in curves if c]
                                                         for curves in arms_curves) if len(finals) >= 2]
    return math.sqrt(sum(variances) / len(variances)) if variances else float("nan")
