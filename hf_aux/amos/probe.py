"""A cheap, fixed check of what a run did to an encoder: a linear probe of its sentence features, before and after.

`downstream_probe(start, end, tokenizer)` encodes a fixed set of real Rotten Tomatoes reviews (hf_aux.tasks.demo: 400
train and 200 validation sentences of the seed-42 split) with each encoder, mean-pools the last hidden states
(mask-aware, `hf_aux.modeling.pooling`), fits a logistic regression on the train features and scores validation
accuracy. The same rows, the same probe, no gradient through the encoder: about a minute on 2 CPU cores for a
MiniLM-sized pair. It is a probe, not a fine-tuning: it says whether the features the run left behind separate
sentiment as well as those it started from, which is what a user who continues pretraining an encoder must not
lose.
"""

from __future__ import annotations

import torch

PROBE_TASK = "rotten_tomatoes"
PROBE_TRAIN, PROBE_EVAL = 400, 200


@torch.no_grad()
def sentence_features(encoder, tokenizer, texts: list[str], max_length: int = 64, batch_size: int = 32):
    """Mean-pooled last hidden states [N, hidden] (float32 numpy) of `encoder` (any model whose output has
    `last_hidden_state` or `hidden_states`)."""
    from ..modeling.pooling import pool

    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    rows = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], truncation=True, max_length=max_length, padding=True,
                          return_tensors="pt").to(device)
        output = encoder(**batch, output_hidden_states=True, return_dict=True)
        hidden = getattr(output, "last_hidden_state", None)
        if hidden is None:
            hidden = output.hidden_states[-1]
        rows.append(pool(hidden.float(), batch["attention_mask"], "mean").cpu())
    encoder.train(was_training)
    return torch.cat(rows).numpy()


def probe_accuracy(encoder, tokenizer, data) -> float:
    """Validation accuracy of a logistic regression fitted on `encoder`'s features of the probe's train rows."""
    from sklearn.linear_model import LogisticRegression

    train, valid = data
    classifier = LogisticRegression(max_iter=2000)
    classifier.fit(sentence_features(encoder, tokenizer, train["text"]), train["label"])
    return float(classifier.score(sentence_features(encoder, tokenizer, valid["text"]), valid["label"]))


def probe_data():
    """The probe's fixed rows: (train, validation) dicts of text and label lists."""
    from ..tasks.demo import demo_task

    task = demo_task(PROBE_TASK, seed=42, max_train_samples=PROBE_TRAIN, max_eval_samples=PROBE_EVAL)
    return tuple({"text": list(split[task.text_columns[0]]), "label": list(split[task.label_column])}
                 for split in (task.dataset["train"], task.dataset["validation"]))


def downstream_probe(start, end, tokenizer) -> dict:
    """{"probe_start_accuracy", "probe_end_accuracy", "probe_difference", "probe_task"} for two encoders."""
    data = probe_data()
    before, after = probe_accuracy(start, tokenizer, data), probe_accuracy(end, tokenizer, data)
    return {"probe_task": PROBE_TASK, "probe_start_accuracy": before, "probe_end_accuracy": after,
            "probe_difference": after - before}


def describe_probe(result: dict, start_name: str) -> str:
    """One paragraph for the run's printed summary."""
    before, after, difference = (result[k] for k in ("probe_start_accuracy", "probe_end_accuracy",
                                                     "probe_difference"))
    verdict = ("the encoder kept what it knew on this probe" if difference >= -0.01 else
               "continued pretraining made the encoder WORSE on this probe: try a lower --learning_rate or fewer "
               "steps (docs/amos.md)")
    return (f"Downstream probe ({PROBE_TASK} sentiment, a logistic regression on mean-pooled features; "
            f"{PROBE_TRAIN} train / {PROBE_EVAL} validation reviews): {start_name} (start) {before:.3f}, this run "
            f"{after:.3f} ({difference:+.3f}): {verdict}.")
