"""Offline evaluation metrics for every task kind (no `evaluate.load`, no Hub access).

Pure numpy/python functions; every score is on a 0-1 scale (accuracy, F1, correlations, exact match, ROUGE),
so per-task tables and majority baselines compare directly. (SQuAD's official script reports EM/F1 x 100.)

    kind               function                                         primary metric (PRIMARY_METRIC)
    classification     classification_metrics(logits [N, C], labels)    accuracy (also macro_f1, matthews_correlation)
    regression         regression_metrics(predictions [N], labels)      pearson (also spearman, mse)
    multiple_choice    multiple_choice_metrics(logits [N, C], labels)   accuracy
    extractive_qa      postprocess_qa_predictions(...) -> qa_metrics    f1 (also exact_match)
    seq2seq            rouge_metrics(predictions, references)           rougeL (also rouge1, rouge2)
    token_classif.     token_classification_metrics(logits [N, L, T],   f1: entity-level, seqeval's default
                       labels [N, L], label_names)                      (also precision, recall, token accuracy)

`compute_task_metrics(kind, predictions, labels)` dispatches the four array-based kinds; `majority_baseline`
gives the accuracy of always predicting the most frequent label. `HfAuxMetric` wraps the same functions as an
`evaluate.Metric` that is instantiated directly (offline), for code written against `evaluate`:
`HfAuxMetric("classification").compute(predictions=logits, references=labels)` (built on first access: importing
`evaluate` takes seconds; it needs the `evaluate` extra, pip install 'hf_aux[evaluate]', which `test` includes).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import numpy as np

PRIMARY_METRIC = {
    "classification": "accuracy",
    "regression": "pearson",
    "multiple_choice": "accuracy",
    "extractive_qa": "f1",
    "seq2seq": "rougeL",
    "token_classification": "f1",
}
# every metric each kind reports (compute_task_metrics, qa_metrics, rouge_metrics), the primary one among them
METRIC_NAMES = {
    "classification": ("accuracy", "macro_f1", "matthews_correlation"),
    "regression": ("pearson", "spearman", "mse"),
    "multiple_choice": ("accuracy",),
    "extractive_qa": ("exact_match", "f1"),
    "seq2seq": ("rouge1", "rouge2", "rougeL"),
    "token_classification": ("precision", "recall", "f1", "accuracy"),
}


# --------------------------------------------------------------------------------------------------------------
# Classification, regression, multiple choice
# --------------------------------------------------------------------------------------------------------------


def _logits_and_labels(name: str, logits, labels) -> tuple[np.ndarray, np.ndarray]:
    logits, labels = np.asarray(logits), np.asarray(labels)
    if logits.ndim != 2:
        raise ValueError(f"{name}: field 'logits': expected shape [N, C], got {logits.shape}")
    if labels.ndim != 1 or labels.shape[0] != logits.shape[0]:
        raise ValueError(f"{name}: field 'labels': expected shape [{logits.shape[0]}], got {labels.shape}")
    if labels.shape[0] == 0:
        raise ValueError(f"{name}: field 'labels': no examples")
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.all(np.equal(np.mod(labels, 1), 0)):
            raise ValueError(f"{name}: field 'labels': class indices must be integers")
        labels = labels.astype(np.int64)
    if labels.min() < 0 or labels.max() >= logits.shape[1]:
        raise ValueError(f"{name}: field 'labels': indices must lie in [0, {logits.shape[1]}), got "
                         f"[{labels.min()}, {labels.max()}]")
    return logits, labels


def _confusion_matrix(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """[true class, predicted class] -> count."""
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (labels, predictions), 1)
    return matrix


def macro_f1(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> float:
    """Unweighted mean of per-class F1 = 2 TP / (2 TP + FP + FN), over the classes that occur among the labels or
    the predictions (scikit-learn's default `f1_score(average="macro")`)."""
    matrix = _confusion_matrix(labels, predictions, num_classes)
    tp = np.diag(matrix).astype(np.float64)
    fp = matrix.sum(axis=0) - tp
    fn = matrix.sum(axis=1) - tp
    present = (tp + fp + fn) > 0  # a class absent from both sides has no F1
    return float(np.mean(2 * tp[present] / (2 * tp[present] + fp[present] + fn[present])))


def matthews_correlation(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> float:
    """Multi-class Matthews correlation (Gorodkin's R_K, from the confusion matrix C with n samples):
    (c * n - p . t) / sqrt((n^2 - p . p)(n^2 - t . t)), c = trace(C), t / p = true / predicted class counts.
    0 when either side is constant (the formula is 0/0 there)."""
    matrix = _confusion_matrix(labels, predictions, num_classes).astype(np.float64)
    true_counts, predicted_counts = matrix.sum(axis=1), matrix.sum(axis=0)
    correct, n = np.trace(matrix), matrix.sum()
    covariance = correct * n - predicted_counts @ true_counts
    variance_predicted = n * n - predicted_counts @ predicted_counts
    variance_true = n * n - true_counts @ true_counts
    if variance_predicted == 0 or variance_true == 0:
        return 0.0
    return float(covariance / np.sqrt(variance_predicted * variance_true))


def classification_metrics(logits, labels) -> dict[str, float]:
    """logits [N, C] (argmax is the prediction), labels [N] class indices ->
    {"accuracy", "macro_f1", "matthews_correlation"}."""
    logits, labels = _logits_and_labels("classification_metrics", logits, labels)
    predictions = logits.argmax(axis=-1)
    num_classes = logits.shape[1]
    return {
        "accuracy": float(np.mean(predictions == labels)),
        "macro_f1": macro_f1(labels, predictions, num_classes),
        "matthews_correlation": matthews_correlation(labels, predictions, num_classes),
    }


def multiple_choice_metrics(logits, labels) -> dict[str, float]:
    """logits [N, choices] (padding choices carry a very negative score), labels [N] -> {"accuracy"}."""
    logits, labels = _logits_and_labels("multiple_choice_metrics", logits, labels)
    return {"accuracy": float(np.mean(logits.argmax(axis=-1) == labels))}


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N, ties sharing the mean of the ranks they span (scipy's rankdata(method="average"))."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts_group = np.r_[True, ordered[1:] != ordered[:-1]]
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.r_[starts[1:], len(values)]  # exclusive
    mean_rank = (starts + ends - 1) / 2.0 + 1.0
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve of `scores` (higher = more likely positive) for binary `labels` (1 = positive):
    the probability that a random positive scores above a random negative, ties counting one half (Mann-Whitney U
    from average ranks; sklearn's roc_auc_score). NaN when one class is absent."""
    scores, labels = np.asarray(scores, dtype=np.float64).ravel(), np.asarray(labels).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"roc_auc: fields 'scores'/'labels': {scores.shape} vs {labels.shape} values")
    positive = labels == 1
    num_positive, num_negative = int(positive.sum()), int((~positive).sum())
    if num_positive == 0 or num_negative == 0:
        return float("nan")
    rank_sum = average_ranks(scores)[positive].sum()
    return float((rank_sum - num_positive * (num_positive + 1) / 2.0) / (num_positive * num_negative))


def binned_auc(histogram) -> float:
    """roc_auc from score histograms: `histogram` [2, B] holds the (weighted) counts of negatives (row 0) and
    positives (row 1) in B ordered score bins. Pairs in the same bin count one half, so this equals roc_auc when no
    bin holds two different scores, and differs from it by at most half the share of pairs that share a bin.
    NaN when one class is absent."""
    negative, positive = (np.asarray(row, dtype=np.float64) for row in np.asarray(histogram))
    total = positive.sum() * negative.sum()
    if total <= 0:
        return float("nan")
    below = np.cumsum(negative) - negative  # negatives in lower bins
    return float((positive * (below + 0.5 * negative)).sum() / total)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN when either side is constant (undefined, as scipy)."""
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    if denominator == 0:
        return float("nan")
    return float(np.clip((x @ y) / denominator, -1.0, 1.0))


def regression_metrics(predictions, labels) -> dict[str, float]:
    """predictions [N] (or [N, 1]), labels [N] -> {"pearson", "spearman", "mse"}. The correlations are NaN when
    predictions or labels are constant (undefined)."""
    predictions = np.asarray(predictions, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if predictions.ndim == 2 and predictions.shape[1] == 1:
        predictions = predictions[:, 0]
    if predictions.ndim != 1 or predictions.shape != labels.shape:
        raise ValueError(f"regression_metrics: field 'predictions': expected shape {labels.shape} like the labels, "
                         f"got {predictions.shape}")
    if len(labels) < 2:
        raise ValueError("regression_metrics: field 'labels': correlations need at least 2 examples")
    if not (np.isfinite(predictions).all() and np.isfinite(labels).all()):
        raise ValueError("regression_metrics: field 'predictions': predictions and labels must be finite")
    return {
        "pearson": pearson(predictions, labels),
        "spearman": pearson(average_ranks(predictions), average_ranks(labels)),
        "mse": float(np.mean((predictions - labels) ** 2)),
    }


# --------------------------------------------------------------------------------------------------------------
# Token classification: entity-level precision / recall / F1 (seqeval's default, conlleval's chunks), token accuracy
# --------------------------------------------------------------------------------------------------------------

def _split_tag(tag: str) -> tuple[str, str]:
    """"B-PER" -> ("B", "PER"); "O" -> ("O", ""); a tag without a B-/I-/E-/S- prefix ("PER", IO tagging) is
    inside a chunk of its own type: ("I", "PER")."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if dash and prefix in ("B", "I", "E", "S"):
        return prefix, kind
    return "I", tag


def _chunk_ends(previous: str, tag: str, previous_type: str, tag_type: str) -> bool:
    """Whether the chunk open at the previous tag ends before this one (conlleval's endOfChunk)."""
    return (previous in ("E", "S") or (previous in ("B", "I") and tag in ("B", "S", "O"))
            or (previous != "O" and previous_type != tag_type))


def _chunk_starts(previous: str, tag: str, previous_type: str, tag_type: str) -> bool:
    """Whether a chunk starts at this tag (conlleval's startOfChunk): at B-/S-, at I-/E- after O, E- or S-, and
    at any tag whose type differs from the previous one's."""
    return (tag in ("B", "S") or (previous in ("E", "S", "O") and tag in ("E", "I"))
            or (tag != "O" and previous_type != tag_type))


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entity mentions of one tagged sequence as (type, first word, last word + 1), chunked as conlleval and
    seqeval's default mode do for IOB1, IOB2 and IOBES tags: a chunk starts at B-X, and also at I-X after O or
    after a chunk of another type; it ends where a tag of another type, B-, S- or O follows, or after E-/S-."""
    spans, start, previous, previous_type = [], None, "O", ""
    for position, tag in enumerate([*tags, "O"]):  # the final O closes a chunk that runs to the end
        prefix, tag_type = _split_tag(tag)
        if start is not None and _chunk_ends(previous, prefix, previous_type, tag_type):
            spans.append((previous_type, start, position))
            start = None
        if _chunk_starts(previous, prefix, previous_type, tag_type):
            start = position
        previous, previous_type = prefix, tag_type
    return spans


def entity_metrics(true_tags: Sequence[Sequence[str]], predicted_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level precision, recall and F1 (seqeval's `classification_report` micro average, its default): a
    predicted mention counts only when a true mention of the same sequence has the same type and span. With no
    predicted (or no true) mention, precision (recall) is 0, as seqeval's zero_division default."""
    if len(true_tags) != len(predicted_tags):
        raise ValueError(f"entity_metrics: field 'predicted_tags': {len(predicted_tags)} sequences for "
                         f"{len(true_tags)} true ones")
    true_count = predicted_count = correct = 0
    for row, (truth, predicted) in enumerate(zip(true_tags, predicted_tags)):
        if len(truth) != len(predicted):
            raise ValueError(f"entity_metrics: field 'predicted_tags': sequence {row} has {len(predicted)} tags, "
                             f"the truth {len(truth)}")
        true_spans, predicted_spans = set(entity_spans(truth)), set(entity_spans(predicted))
        true_count, predicted_count = true_count + len(true_spans), predicted_count + len(predicted_spans)
        correct += len(true_spans & predicted_spans)
    precision = correct / predicted_count if predicted_count else 0.0
    recall = correct / true_count if true_count else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def token_classification_metrics(logits, labels, label_names: Sequence[str] | None = None) -> dict[str, float]:
    """logits [N, L, T] (argmax is the predicted tag), labels [N, L] tag ids with -100 where no word starts (later
    sub-tokens, special tokens, padding) -> {"precision", "recall", "f1"} of the entities (`entity_metrics` on the
    tag names `label_names`; without them the ids' strings "0", "1", ..., each its own entity type) and
    "accuracy" over the tagged tokens."""
    logits, labels = np.asarray(logits), np.asarray(labels)
    if logits.ndim != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(f"token_classification_metrics: fields 'logits'/'labels': expected [N, L, T] and [N, L], "
                         f"got {logits.shape} and {labels.shape}")
    names = list(label_names) if label_names is not None else [str(i) for i in range(logits.shape[-1])]
    if len(names) != logits.shape[-1]:
        raise ValueError(f"token_classification_metrics: field 'label_names': {len(names)} names for "
                         f"{logits.shape[-1]} tags")
    tagged = labels != -100
    if not tagged.any():
        raise ValueError("token_classification_metrics: field 'labels': no tagged token (all -100)")
    if labels[tagged].min() < 0 or labels[tagged].max() >= len(names):
        raise ValueError(f"token_classification_metrics: field 'labels': tag ids must lie in [0, {len(names)}) "
                         "or be -100")
    predictions = logits.argmax(axis=-1)
    true_tags = [[names[t] for t in row[mask]] for row, mask in zip(labels, tagged)]
    predicted_tags = [[names[t] for t in row[mask]] for row, mask in zip(predictions, tagged)]
    return {**entity_metrics(true_tags, predicted_tags),
            "accuracy": float(np.mean(predictions[tagged] == labels[tagged]))}


_ARRAY_METRICS = {"classification": classification_metrics, "regression": regression_metrics,
                  "multiple_choice": multiple_choice_metrics}


def compute_task_metrics(kind: str, predictions, labels, label_names: Sequence[str] | None = None) -> dict[str, float]:
    """Metrics of one task from its model outputs: logits for classification / multiple_choice / token
    classification (whose entities read `label_names`, the tag names), values for regression. Extractive QA and
    seq2seq need the raw texts: use `postprocess_qa_predictions` + `qa_metrics` and `rouge_metrics`."""
    if kind == "token_classification":
        return token_classification_metrics(predictions, labels, label_names)
    if kind in _ARRAY_METRICS:
        return _ARRAY_METRICS[kind](predictions, labels)
    if kind in ("extractive_qa", "seq2seq"):
        use = "postprocess_qa_predictions and qa_metrics" if kind == "extractive_qa" else "rouge_metrics"
        raise ValueError(f"compute_task_metrics: field 'kind': {kind} metrics need the raw texts; use {use}")
    raise ValueError(f"compute_task_metrics: field 'kind': unknown kind {kind!r}; expected one of "
                     f"{list(PRIMARY_METRIC)}")


def majority_baseline(labels, train_labels=None) -> float:
    """Accuracy of always predicting the most frequent label: the majority of `train_labels` when given (the
    honest baseline), else of `labels` itself; scored on `labels`. Ties pick the smallest label."""
    labels = list(np.asarray(labels).tolist())
    if not labels:
        raise ValueError("majority_baseline: field 'labels': no examples")
    source = labels if train_labels is None else list(np.asarray(train_labels).tolist())
    if not source:
        raise ValueError("majority_baseline: field 'train_labels': no examples")
    counts = collections.Counter(source)
    top = max(counts.values())
    majority = min(label for label, count in counts.items() if count == top)
    return sum(label == majority for label in labels) / len(labels)


def label_indices(task, split) -> list:
    """A split's labels as the model sees them: class indices (string labels -> their index in
    `task.label_names`), choice indices or values."""
    labels = split[task.label_column]
    if task.kind == "classification" and task.label_names:
        index = {name: i for i, name in enumerate(task.label_names)}
        return [index[x] if isinstance(x, str) else int(x) for x in labels]
    return list(labels)


def baseline_metrics(task, train_raw, eval_raw) -> dict[str, float]:
    """A trivial predictor's score on one task's evaluation split (the number a fine-tuned model must beat),
    fitted on the train split when there is one: the majority class (classification, multiple choice), always
    answering "" (extractive QA), the train mean (regression, as an MSE), the most frequent tag's token accuracy
    over the words (token classification: its entity F1 is 0 unless that tag opens entities)."""
    if task.kind == "token_classification":
        index = {name: i for i, name in enumerate(task.label_names or [])}
        word_tags = lambda split: [index[t] if isinstance(t, str) else int(t)  # noqa: E731
                                   for tags in split[task.tags_column] for t in tags]
        train_tags = word_tags(train_raw) if train_raw is not None else None
        return {"majority_tag_accuracy": majority_baseline(word_tags(eval_raw), train_labels=train_tags)}
    if task.kind == "extractive_qa":
        answers = eval_raw[task.answers_column]
        return {"null_answer_baseline": qa_metrics([""] * len(answers), answers)[PRIMARY_METRIC["extractive_qa"]]}
    labels = label_indices(task, eval_raw)
    train_labels = label_indices(task, train_raw) if train_raw is not None else None
    if task.kind == "regression":
        mean = np.mean(train_labels if train_labels is not None else labels)
        return {"mean_baseline_mse": float(np.mean((np.asarray(labels, dtype=np.float64) - mean) ** 2))}
    return {"majority_baseline": majority_baseline(labels, train_labels=train_labels)}


def majority_baselines(tasks, train_labels: dict, eval_data: dict) -> dict[str, float]:
    """`eval_<task>_majority_baseline` for every task of a mixture scored by accuracy: the majority class of
    its train labels (`train_labels[task.name]`, class indices as the model sees them; None or absent: the
    evaluation labels' own) on its tokenised evaluation labels."""
    return {f"eval_{task.name}_majority_baseline": majority_baseline(eval_data[task.name]["labels"],
                                                                     train_labels.get(task.name))
            for task in tasks if task.name in eval_data and PRIMARY_METRIC[task.kind] == "accuracy"}


def train_labels(tasks, train_data: dict, raw: dict) -> dict:
    """Each accuracy-scored task's train labels as the model sees them: the tokenised train split's `labels` column
    where the task was tokenised for training (read as one array, no per-row conversion), else its raw train
    split's (`label_indices`), else None."""
    labels = {}
    for task in tasks:
        if PRIMARY_METRIC[task.kind] != "accuracy":  # only majority_baselines reads them
            continue
        if task.name in train_data and "labels" in train_data[task.name].column_names:
            labels[task.name] = train_data[task.name].with_format("numpy")["labels"][:]  # one array
        elif "train" in raw.get(task.name, {}):
            labels[task.name] = label_indices(task, raw[task.name]["train"])
    return labels


# --------------------------------------------------------------------------------------------------------------
# Extractive QA: window logits -> answer text -> SQuAD exact match / F1
# --------------------------------------------------------------------------------------------------------------


def postprocess_qa_predictions(examples, features, start_logits, end_logits, n_best: int = 20,
                               max_answer_length: int = 30, context_column: str = "context",
                               allow_null: bool = True) -> list[str]:
    """Answer text for every example, from the span logits of its windows.

    examples: the raw split (rows with `context_column`). features: the same split through
    `tokenize_task(..., keep_qa_offsets=True)`, in the order of the logits: `example_index` (row of `examples`)
    and `offset_mapping` (character span per token, [-1, -1] for non-context tokens).
    start_logits / end_logits: [num_features, length] (rows may be padded past a feature's length, e.g. with
    Trainer's -100: only the feature's own tokens are read).
    For each example: over all its windows, the `n_best` start and end positions of each window form candidate
    spans (both context tokens, end >= start, at most `max_answer_length` tokens) scored start + end logit. The
    null score is the smallest start[0] + end[0] over the windows (the window most sure an answer is in it); with
    `allow_null`, the prediction is "" when the null score beats the best span (SQuAD 2.0 style).
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if start_logits.shape != end_logits.shape or start_logits.ndim != 2:
        raise ValueError(f"postprocess_qa_predictions: field 'start_logits': expected two equal [features, length] "
                         f"arrays, got {start_logits.shape} and {end_logits.shape}")
    columns = features.column_names if hasattr(features, "column_names") else list(features[0])
    for column in ("example_index", "offset_mapping"):
        if column not in columns:
            raise ValueError(f"postprocess_qa_predictions: field 'features': no {column!r} column; tokenize with "
                             "tokenize_task(..., keep_qa_offsets=True)")
    example_indices, offsets_all = _column(features, "example_index"), _column(features, "offset_mapping")
    if len(example_indices) != len(start_logits):
        raise ValueError(f"postprocess_qa_predictions: field 'features': {len(example_indices)} features but "
                         f"{len(start_logits)} rows of logits")
    contexts = _column(examples, context_column)
    windows = collections.defaultdict(list)
    for feature, example in enumerate(example_indices):
        if not 0 <= example < len(contexts):
            raise ValueError(f"postprocess_qa_predictions: field 'features': example_index {example} out of range "
                             f"for {len(contexts)} examples")
        windows[example].append(feature)

    predictions = []
    for example, context in enumerate(contexts):
        best_score, best_text, null_score = -np.inf, "", np.inf
        for feature in windows.get(example, []):
            offsets = offsets_all[feature]
            length = min(len(offsets), start_logits.shape[1])
            starts, ends = start_logits[feature, :length], end_logits[feature, :length]
            null_score = min(null_score, float(starts[0] + ends[0]))
            top_starts = np.argsort(starts)[::-1][:n_best]
            top_ends = np.argsort(ends)[::-1][:n_best]
            for s in top_starts:
                if offsets[s][0] < 0:
                    continue
                for e in top_ends:
                    if offsets[e][0] < 0 or e < s or e - s + 1 > max_answer_length:
                        continue
                    score = float(starts[s] + ends[e])
                    if score > best_score:
                        best_score, best_text = score, context[offsets[s][0] : offsets[e][1]]
        if allow_null and null_score > best_score:
            best_text = ""
        predictions.append(best_text)
    return predictions


def _column(rows, name: str) -> list:
    """Column `name` of a `datasets.Dataset` or of a list of row dicts."""
    return list(rows[name]) if hasattr(rows, "column_names") else [row[name] for row in rows]


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, gold: str) -> float:
    predicted_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    common = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def qa_metrics(predicted_texts: Sequence[str], answers_lists: Sequence) -> dict[str, float]:
    """SQuAD exact match and token F1 on a 0-1 scale (the official script's numbers / 100), each the max over an
    example's gold answers, averaged over examples. `answers_lists`: per example a list of gold strings or a
    SQuAD answers dict ({"text": [...], ...}). Unanswerable (empty gold list): EM = F1 = 1 iff the prediction is
    empty after normalisation (SQuAD 2.0's rule), else 0."""
    if len(predicted_texts) != len(answers_lists):
        raise ValueError(f"qa_metrics: field 'answers_lists': {len(answers_lists)} gold entries for "
                         f"{len(predicted_texts)} predictions")
    if not predicted_texts:
        raise ValueError("qa_metrics: field 'predicted_texts': no examples")
    exact, f1 = [], []
    for prediction, answers in zip(predicted_texts, answers_lists):
        golds = answers["text"] if isinstance(answers, dict) else answers
        if isinstance(golds, str):
            raise ValueError("qa_metrics: field 'answers_lists': each entry must be a list of answers, not a string")
        golds = list(golds) or [""]
        exact.append(max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds))
        f1.append(max(_token_f1(prediction, g) for g in golds))
    return {"exact_match": float(np.mean(exact)), "f1": float(np.mean(f1))}


# --------------------------------------------------------------------------------------------------------------
# Seq2seq
# --------------------------------------------------------------------------------------------------------------


def rouge_metrics(predictions: Sequence[str], references: Sequence) -> dict[str, float]:
    """Mean ROUGE-1/2/L F-measure (0-1) with Porter stemming, from the `rouge_score` package (the `test` and
    `demo` extras). A reference may be a list of strings: the best-matching one counts."""
    try:
        from rouge_score import rouge_scorer
    except ImportError as error:
        raise ImportError("rouge_metrics needs the `rouge_score` package: pip install 'hf_aux[test]' (or "
                          "'hf_aux[demo]', or rouge_score itself)") from error
    if len(predictions) != len(references):
        raise ValueError(f"rouge_metrics: field 'references': {len(references)} references for "
                         f"{len(predictions)} predictions")
    if not predictions:
        raise ValueError("rouge_metrics: field 'predictions': no examples")
    keys = METRIC_NAMES["seq2seq"]
    scorer = rouge_scorer.RougeScorer(list(keys), use_stemmer=True)
    scores = [scorer.score(reference, prediction) if isinstance(reference, str)
              else scorer.score_multi(list(reference), prediction)
              for prediction, reference in zip(predictions, references)]
    return {key: sum(score[key].fmeasure for score in scores) / len(predictions) for key in keys}


# --------------------------------------------------------------------------------------------------------------
# The same metrics as an `evaluate.Metric`, instantiated directly (never through evaluate.load, which needs the Hub)
# --------------------------------------------------------------------------------------------------------------

def _build_evaluate_metric():
    import datasets
    try:
        import evaluate
    except ImportError as error:
        raise ImportError("HfAuxMetric needs the `evaluate` package: pip install 'hf_aux[evaluate]' (or evaluate "
                          "itself); the metric functions of hf_aux.tasks.metrics need nothing") from error

    class HfAuxMetric(evaluate.Metric):
        """`HfAuxMetric(kind)` for kind in classification / regression / multiple_choice: `add_batch` /
        `compute(predictions=..., references=...)` as any `evaluate` metric; predictions are logits rows
        (regression: values). Results are `compute_task_metrics(kind, ...)`."""

        def __init__(self, config_name: str = "classification", **kwargs):
            if config_name not in _ARRAY_METRICS:
                raise ValueError(f"HfAuxMetric: field 'config_name': {config_name!r} is not one of "
                                 f"{list(_ARRAY_METRICS)}; QA and seq2seq use qa_metrics / rouge_metrics")
            super().__init__(config_name=config_name, **kwargs)

        def _info(self):
            regression = self.config_name == "regression"
            predictions = datasets.Value("float64") if regression else datasets.Sequence(datasets.Value("float64"))
            references = datasets.Value("float64") if regression else datasets.Value("int64")
            return evaluate.MetricInfo(
                description=f"hf_aux offline {self.config_name} metrics",
                citation="", inputs_description="predictions: logits [N, C] (regression: values [N]); references [N]",
                features=datasets.Features({"predictions": predictions, "references": references}))

        def _compute(self, predictions=None, references=None):
            return compute_task_metrics(self.config_name, np.asarray(predictions), np.asarray(references))

    return HfAuxMetric


def __getattr__(name: str):
    if name == "HfAuxMetric":
        cls = _build_evaluate_metric()
        globals()["HfAuxMetric"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
