"""hf_aux.runtime.training_metrics.MetricAccumulator: means, ratios and totals by hand, one reduction over processes."""

import math

import pytest
import torch

from hf_aux.runtime.training_metrics import MetricAccumulator


class OneProcess:
    calls = 0

    def reduce(self, tensor, reduction):
        assert reduction == "sum"
        OneProcess.calls += 1
        return tensor


class TwoProcesses:
    """Stands in for accelerate's all-reduce: adds what the other rank's accumulator holds, key by key."""

    def __init__(self, other: MetricAccumulator):
        self.other = other

    def reduce(self, tensor, reduction):
        return tensor + self.other.stacked()


def test_mean_ratio_and_total_by_hand():
    metrics = MetricAccumulator()
    assert not metrics and metrics.reduce(OneProcess()) == {}
    for loss in (1.0, 2.0, 6.0):
        metrics.add("loss/a", torch.tensor(loss))
    metrics.add("accuracy", torch.tensor(3.0), count=torch.tensor(4))   # 3 hits of 4
    metrics.add("accuracy", torch.tensor(1.0), count=torch.tensor(4))   # 1 hit of 4
    metrics.add_total("skipped", torch.tensor(1.0))
    metrics.add_total("skipped", torch.tensor(0.0))
    metrics.add("empty", torch.tensor(0.0), count=0)
    assert metrics and metrics.last["loss/a"].item() == 6.0
    OneProcess.calls = 0
    logged = metrics.reduce(OneProcess())
    assert OneProcess.calls == 1  # one collective for every key
    assert logged["loss/a"] == pytest.approx(3.0)
    assert logged["accuracy"] == pytest.approx(0.5)
    assert logged["skipped"] == 1.0
    assert math.isnan(logged["empty"])
    assert list(logged) == ["loss/a", "accuracy", "skipped", "empty"]  # first-added order
    assert not metrics and metrics.reduce(OneProcess()) == {}  # cleared


def test_declared_keys_reduce_on_every_rank_and_unseen_ones_drop():
    tasks = ["loss/a", "loss/b"]
    rank0, rank1 = MetricAccumulator(tasks), MetricAccumulator(tasks)
    rank0.add("loss/a", torch.tensor(1.0))
    rank1.add("loss/a", torch.tensor(3.0))
    rank1.add("loss/a", torch.tensor(5.0))
    logged = rank0.reduce(TwoProcesses(rank1), drop_empty=True)
    assert logged == {"loss/a": pytest.approx(3.0)}  # (1 + 3 + 5) / 3 sub-batches; b seen by no rank
    assert list(rank0._sums) == tasks  # declared again, at zero, for the next log
    assert all(float(v) == 0.0 for v in rank0._sums.values())


def test_a_count_given_as_a_number_stays_on_the_host():
    """add(count=<number>) keeps the count a number (a device tensor made from it is a host-to-device copy, which
    stops the host on CUDA), tensors and numbers mix, and reduce gives the same means."""
    metrics = MetricAccumulator(keys=["declared"])
    metrics.add("loss", torch.tensor(2.0), count=2)
    metrics.add("loss", torch.tensor(4.0))
    assert isinstance(metrics._counts["loss"], float) and isinstance(metrics._counts["declared"], float)
    metrics.add("hits", torch.tensor(3.0), count=torch.tensor(4))
    metrics.add("hits", torch.tensor(1.0), count=4)
    assert metrics.stacked().tolist() == [[0.0, 6.0, 4.0], [0.0, 3.0, 8.0]]
    logged = metrics.reduce(OneProcess(), drop_empty=True)
    assert logged == {"loss": 2.0, "hits": 0.5}
