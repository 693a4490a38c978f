"""hf_aux.tasks.metrics against hand computations, scikit-learn and scipy; QA post-processing through tokenize_task."""

import subprocess
import sys

import numpy as np
import pytest
from datasets import Dataset
from scipy.stats import pearsonr, rankdata, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef, roc_auc_score
from tiny import tiny_tokenizer

from hf_aux.tasks import metrics
from hf_aux.tasks.data import tokenize_task
from hf_aux.tasks.metrics import (
                                  PRIMARY_METRIC,
                                  average_ranks,
                                  binned_auc,
                                  classification_metrics,
                                  compute_task_metrics,
                                  majority_baseline,
                                  multiple_choice_metrics,
                                  postprocess_qa_predictions,
                                  qa_metrics,
                                  regression_metrics,
                                  roc_auc,
                                  rouge_metrics,
                                  )
from hf_aux.tasks.loading import TASK_KINDS, TaskSpec


def one_hot_logits(predictions, num_classes):
    logits = np.zeros((len(predictions), num_classes))
    logits[np.arange(len(predictions)), predictions] = 1.0
    return logits


def test_classification_by_hand():
    # labels 0 0 1 1 2, predictions 0 1 1 1 0: accuracy 3/5
    # class 0: tp 1 fp 1 fn 1 -> F1 1/2; class 1: tp 2 fp 1 fn 0 -> 4/5; class 2: tp 0 fp 0 fn 1 -> 0
    labels = np.array([0, 0, 1, 1, 2])
    result = classification_metrics(one_hot_logits([0, 1, 1, 1, 0], 3), labels)
    assert result["accuracy"] == pytest.approx(0.6)
    assert result["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    # MCC: c=3, n=5, t=(2,2,1), p=(2,3,0): (15 - 10) / sqrt((25 - 13)(25 - 9)) = 5 / sqrt(192)
    assert result["matthews_correlation"] == pytest.approx(5 / np.sqrt(192))


@pytest.mark.parametrize("num_classes,seed", [(2, 0), (3, 1), (5, 2), (4, 3)])
def test_classification_matches_sklearn(num_classes, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(200, num_classes))
    labels = rng.integers(0, num_classes, size=200)
    labels[:3] = 0  # at least one class present
    predictions = logits.argmax(-1)
    result = classification_metrics(logits, labels)
    assert result["accuracy"] == pytest.approx(np.mean(predictions == labels))
    assert result["macro_f1"] == pytest.approx(f1_score(labels, predictions, average="macro"))
    assert result["matthews_correlation"] == pytest.approx(matthews_corrcoef(labels, predictions))


def test_classification_class_never_seen_and_constant_predictions():
    # class 2 of 3 never appears on either side: the macro average is over classes 0 and 1 (sklearn's default)
    labels = np.array([0, 1, 1, 0])
    logits = one_hot_logits([0, 1, 0, 0], 3)
    result = classification_metrics(logits, labels)
    assert result["macro_f1"] == pytest.approx(f1_score(labels, logits.argmax(-1), average="macro"))
    # a constant predictor has MCC 0 (sklearn agrees)
    constant = classification_metrics(one_hot_logits([1, 1, 1, 1], 2), labels)
    assert constant["matthews_correlation"] == 0.0 == matthews_corrcoef(labels, [1, 1, 1, 1])


def test_classification_bad_inputs():
    with pytest.raises(ValueError, match="labels"):
        classification_metrics(np.zeros((3, 2)), [0, 1, 2])
    with pytest.raises(ValueError, match="labels"):
        classification_metrics(np.zeros((3, 2)), [0, 1])
    with pytest.raises(ValueError, match="logits"):
        classification_metrics(np.zeros(3), [0, 1, 1])


def test_regression_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, size=60).astype(float)  # many ties
    predictions = labels + rng.normal(scale=2.0, size=60)
    predictions[:10] = 1.5  # ties on the prediction side too
    result = regression_metrics(predictions, labels)
    assert result["pearson"] == pytest.approx(pearsonr(predictions, labels)[0])
    assert result["spearman"] == pytest.approx(spearmanr(predictions, labels)[0])
    assert result["mse"] == pytest.approx(np.mean((predictions - labels) ** 2))
    np.testing.assert_allclose(average_ranks(labels), rankdata(labels))


def test_regression_by_hand_and_edge_cases():
    result = regression_metrics(np.array([[1.0], [2.0], [3.0]]), [2.0, 4.0, 7.0])  # [N, 1] is accepted
    # x centred (-1, 0, 1), y centred (-7/3, -1/3, 8/3): x.y = 5, x.x = 2, y.y = 114/9
    assert result["pearson"] == pytest.approx(5 / np.sqrt(2 * 114 / 9))
    assert result["spearman"] == pytest.approx(1.0)
    assert result["mse"] == pytest.approx((1 + 4 + 16) / 3)
    assert np.isnan(regression_metrics([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["pearson"])
    with pytest.raises(ValueError, match="predictions"):
        regression_metrics([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="finite"):
        regression_metrics([1.0, np.nan], [1.0, 2.0])


def test_multiple_choice_with_masked_choices():
    very_negative = np.finfo(np.float32).min
    logits = np.array([[0.1, 0.9, very_negative], [2.0, 1.0, 0.5], [0.0, very_negative, very_negative]])
    assert multiple_choice_metrics(logits, [1, 2, 0]) == {"accuracy": pytest.approx(2 / 3)}


def test_dispatch_and_primary_metric():
    assert set(PRIMARY_METRIC) == set(TASK_KINDS)
    logits = one_hot_logits([0, 1, 1], 2)
    assert compute_task_metrics("classification", logits, [0, 1, 0]) == classification_metrics(logits, [0, 1, 0])
    assert "pearson" in compute_task_metrics("regression", [1.0, 2.0, 3.0], [1.0, 2.5, 2.0])
    for kind in ("classification", "regression", "multiple_choice"):
        out = compute_task_metrics(kind, logits if kind != "regression" else [1.0, 2.0, 3.0], [0, 1, 0])
        assert PRIMARY_METRIC[kind] in out
    with pytest.raises(ValueError, match="qa_metrics"):
        compute_task_metrics("extractive_qa", logits, [0, 1, 0])
    with pytest.raises(ValueError, match="unknown kind"):
        compute_task_metrics("ranking", logits, [0, 1, 0])


def test_majority_baseline():
    assert majority_baseline([1, 1, 0, 2, 1]) == pytest.approx(0.6)
    assert majority_baseline(["pos", "neg", "neg"]) == pytest.approx(2 / 3)
    # the train split's majority (0) scored on the evaluation labels
    assert majority_baseline([1, 1, 0, 1], train_labels=[0, 0, 1]) == pytest.approx(0.25)
    assert majority_baseline([0, 1]) == pytest.approx(0.5)  # tie -> smallest label
    with pytest.raises(ValueError):
        majority_baseline([])


def test_qa_metrics_squad_rules():
    predictions = ["The Eiffel Tower!", "in paris", "", "something", "blue cat"]
    golds = [["Eiffel tower"], {"text": ["Paris", "in Paris, France"], "answer_start": [0, 0]}, [], [], ["a red cat"]]
    result = qa_metrics(predictions, golds)
    # EM: 1 (normalised equal), 1 (matches "in paris"? no: "in paris" vs "in paris france" and "paris" -> 0), ...
    # example 2: "in paris" vs "paris" -> F1 2*(1/2*1)/(1/2+1) = 2/3; vs "in paris france" -> P=1, R=2/3 -> 0.8
    # example 3: unanswerable, empty prediction -> 1/1; example 4: unanswerable, non-empty -> 0/0
    # example 5: "blue cat" vs "red cat" -> P=1/2 R=1/2 -> F1 1/2, EM 0
    assert result["exact_match"] == pytest.approx((1 + 0 + 1 + 0 + 0) / 5)
    assert result["f1"] == pytest.approx((1 + 0.8 + 1 + 0 + 0.5) / 5)
    with pytest.raises(ValueError, match="answers_lists"):
        qa_metrics(["a"], [])
    with pytest.raises(ValueError, match="list of answers"):
        qa_metrics(["a"], ["a"])


# --------------------------------------------------------------------------------------------------------------
# QA post-processing: windows from tokenize_task with a stride map back to the answer text
# --------------------------------------------------------------------------------------------------------------

CONTEXT = ("the cat is red and the dog is blue . the news is good today . the river is long and the sun is hot . "
           "paris is the capital city of france . what a great movie that was")
QA_ROWS = {
    "question": ["what is the capital of france", "what is the capital of france", "who is the best actor"],
    "context": [CONTEXT, "the capital of france is paris", CONTEXT],
    "answers": [
        {"text": ["paris"], "answer_start": [CONTEXT.index("paris")]},
        {"text": ["paris"], "answer_start": [25]},
        {"text": [], "answer_start": []},
    ],
}


def qa_features():
    task = TaskSpec(name="toy_qa", kind="extractive_qa", dataset=Dataset.from_dict(QA_ROWS))
    examples = Dataset.from_dict(QA_ROWS)
    features = tokenize_task(task, examples, tiny_tokenizer(), max_length=32, doc_stride=8, keep_qa_offsets=True)
    return examples, features


def gold_logits(features, null_everywhere=False, pad_to=None):
    """Logits that are +5 at each window's gold start/end (position 0 for windows without the answer), small
    noise elsewhere; rows padded with Trainer's -100 to `pad_to`."""
    rng = np.random.default_rng(0)
    length = pad_to or max(len(ids) for ids in features["input_ids"])
    starts = np.full((len(features), length), -100.0)
    ends = np.full((len(features), length), -100.0)
    for i, (ids, s, e) in enumerate(zip(features["input_ids"], features["start_positions"], features["end_positions"])):
        starts[i, : len(ids)] = rng.normal(scale=0.1, size=len(ids))
        ends[i, : len(ids)] = rng.normal(scale=0.1, size=len(ids))
        starts[i, 0 if null_everywhere else s] += 5.0
        ends[i, 0 if null_everywhere else e] += 5.0
    return starts, ends


def test_qa_postprocessing_over_strided_windows():
    examples, features = qa_features()
    windows = np.bincount(features["example_index"], minlength=3)
    assert windows[0] > 1 and windows[2] > 1  # the long context really is split into overlapping windows
    inside = [s > 0 for s, ex in zip(features["start_positions"], features["example_index"]) if ex == 0]
    assert any(inside) and not all(inside)  # the answer lies in some windows only
    starts, ends = gold_logits(features, pad_to=40)
    predictions = postprocess_qa_predictions(examples, features, starts, ends)
    assert predictions == ["paris", "paris", ""]
    assert qa_metrics(predictions, examples["answers"]) == {"exact_match": 1.0, "f1": 1.0}
    # without the null option the unanswerable question gets some span instead
    forced = postprocess_qa_predictions(examples, features, starts, ends, allow_null=False)
    assert forced[:2] == ["paris", "paris"] and forced[2] != ""


def test_qa_postprocessing_span_rules():
    examples, features = qa_features()
    starts, ends = gold_logits(features, null_everywhere=True)
    assert postprocess_qa_predictions(examples, features, starts, ends) == ["", "", ""]
    # example 1 (one window): "the capital of france is paris"; make the best end fall before the best start
    row = features["example_index"].index(1)
    offsets = features["offset_mapping"][row]
    context_positions = [i for i, (a, _) in enumerate(offsets) if a >= 0]
    first, last = context_positions[0], context_positions[-1]
    starts[row] = -30.0  # only "paris" is a plausible start
    ends[row] = -1.0
    starts[row, last] = 10.0  # start on "paris"
    ends[row, first] = 20.0  # end on "the" (invalid: before the start)
    ends[row, last] = 3.0
    text = postprocess_qa_predictions(examples, features, starts, ends, allow_null=False)[1]
    assert text == "paris"
    # a question token (non-context) can never start a span, however high its logit
    starts[row, 1] = 50.0
    assert postprocess_qa_predictions(examples, features, starts, ends, allow_null=False)[1] == "paris"
    # max_answer_length: the whole context from "the" to "paris" is 6 tokens
    starts[row] = -1.0
    starts[row, first] = 10.0
    ends[row] = -1.0
    ends[row, last] = 10.0
    assert postprocess_qa_predictions(examples, features, starts, ends, allow_null=False)[1] == \
        "the capital of france is paris"
    shorter = postprocess_qa_predictions(examples, features, starts, ends, allow_null=False, max_answer_length=5)[1]
    assert shorter != "the capital of france is paris" and len(shorter.split()) <= 5


def test_qa_postprocessing_bad_inputs():
    examples, features = qa_features()
    starts, ends = gold_logits(features)
    with pytest.raises(ValueError, match="keep_qa_offsets"):
        postprocess_qa_predictions(examples, features.remove_columns("offset_mapping"), starts, ends)
    with pytest.raises(ValueError, match="rows of logits"):
        postprocess_qa_predictions(examples, features, starts[:-1], ends[:-1])


# --------------------------------------------------------------------------------------------------------------
# ROUGE and the evaluate wrapper
# --------------------------------------------------------------------------------------------------------------


def test_rouge_by_hand():
    pytest.importorskip("rouge_score")
    # prediction "the cat sat" vs reference "the cat sat down": unigram P=1 R=3/4 -> F 6/7; bigrams 2 of 3 -> P=1
    # R=2/3 -> F 0.8; LCS 3 -> same as unigrams
    result = rouge_metrics(["the cat sat", "a b"], ["the cat sat down", ["x y", "a b"]])
    assert result["rouge1"] == pytest.approx((6 / 7 + 1.0) / 2)
    assert result["rouge2"] == pytest.approx((0.8 + 1.0) / 2)
    assert result["rougeL"] == pytest.approx((6 / 7 + 1.0) / 2)


def test_rouge_missing_package_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("rouge_score"):
            raise ImportError("no rouge_score")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"hf_aux\[test\]"):
        rouge_metrics(["a"], ["a"])


def test_evaluate_metric_wrapper_offline(tmp_path):
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(12, 3)), rng.integers(0, 3, size=12)
    metric = metrics.HfAuxMetric("classification", cache_dir=str(tmp_path))
    metric.add_batch(predictions=logits[:6], references=labels[:6])
    metric.add_batch(predictions=logits[6:], references=labels[6:])
    assert metric.compute() == pytest.approx(classification_metrics(logits, labels))
    with pytest.raises(ValueError, match="config_name"):
        metrics.HfAuxMetric("extractive_qa", cache_dir=str(tmp_path))


def test_evaluate_metric_without_evaluate_names_the_extra():
    """evaluate is an extra: without it the metric functions work and HfAuxMetric names what to install."""
    probe = ("import sys; sys.modules['evaluate'] = None\n"
             "from hf_aux.tasks import metrics\n"
             "print(metrics.compute_task_metrics('classification', [[0.0, 1.0]], [1])['accuracy'])\n"
             "try:\n    metrics.HfAuxMetric\nexcept ImportError as error:\n    print(error)")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert out.splitlines() == ["1.0", "HfAuxMetric needs the `evaluate` package: pip install 'hf_aux[evaluate]' (or "
                                       "evaluate itself); the metric functions of hf_aux.tasks.metrics need nothing"]


def test_roc_auc_by_hand_and_against_sklearn():
    # 2 positives x 2 negatives: 0.35 beats 0.1 only, 0.8 beats both: 3 of 4 pairs
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # a tie counts one half: positive 1.0 vs negative 1.0 (0.5), positive 2.0 vs it (1)
    assert roc_auc([1.0, 1.0, 2.0], [0, 1, 1]) == pytest.approx(0.75)
    assert np.isnan(roc_auc([0.2, 0.3], [1, 1]))
    rng = np.random.default_rng(0)
    for _ in range(5):
        labels = rng.integers(0, 2, 300)
        scores = np.round(rng.normal(labels * 0.7, 1.0), 1)  # rounded: many ties
        assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    with pytest.raises(ValueError, match="roc_auc"):
        roc_auc([0.1, 0.2], [1])


def test_binned_auc_by_hand_and_against_exact():
    # bins ordered low to high; negatives 2, 1, 0 and positives 0, 1, 1: the positive in bin 1 beats 2 negatives
    # and ties 1 (2.5), the one in bin 2 beats all 3: (2.5 + 3) / (2 * 3)
    assert binned_auc([[2, 1, 0], [0, 1, 1]]) == pytest.approx(5.5 / 6)
    assert np.isnan(binned_auc([[1, 2], [0, 0]]))
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 500)
    bins = rng.integers(0, 40, 500) + 3 * labels  # one score per bin: binned equals exact
    histogram = np.stack([np.bincount(bins[labels == c], minlength=50) for c in (0, 1)])
    assert binned_auc(histogram) == pytest.approx(roc_auc_score(labels, bins), abs=1e-12)


def test_majority_baselines_of_a_mixture_by_hand():
    """MUPPET's per-task baseline: the train split's majority class (string labels mapped to their index) scored
    on the tokenised evaluation labels; tasks not scored by accuracy get none."""
    from hf_aux.tasks.metrics import majority_baselines

    sentiment = TaskSpec(name="sentiment", kind="classification", label_names=["neg", "pos"], data_files="x.jsonl")
    score = TaskSpec(name="score", kind="regression", data_files="x.jsonl")
    from datasets import Dataset

    from hf_aux.tasks.metrics import train_labels

    raw = {"sentiment": {"train": {"label": ["pos", "pos", "neg"]}}, "score": {"train": {"label": [0.5, 1.0]}}}
    eval_data = {"sentiment": {"labels": [0, 1, 1, 1]}, "score": {"labels": [0.2, 0.4]}}
    # majority of train = "pos" = class 1; it is right on 3 of the 4 evaluation rows
    labels = train_labels([sentiment, score], {}, raw)
    assert labels["sentiment"] == [1, 1, 0]
    assert majority_baselines([sentiment, score], labels, eval_data) == {"eval_sentiment_majority_baseline": 0.75}
    # tokenised for training: its labels column (indices already), whatever the raw rows hold
    tokenised = {"sentiment": Dataset.from_dict({"input_ids": [[1], [2], [3]], "labels": [0, 0, 1]})}
    assert train_labels([sentiment], tokenised, {"sentiment": {}})["sentiment"].tolist() == [0, 0, 1]
    assert majority_baselines([sentiment], train_labels([sentiment], tokenised, {}), eval_data) == {
        "eval_sentiment_majority_baseline": 0.25}
    # no train split: the evaluation labels' own majority (1), again 3 of 4
    assert majority_baselines([sentiment], train_labels([sentiment], {}, {"sentiment": {}}), eval_data) == {
        "eval_sentiment_majority_baseline": 0.75}
