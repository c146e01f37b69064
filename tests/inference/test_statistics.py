"""The statistics recorder on the real databases: several recorders (as
several processes) add up in the shared rows, counted as Triton counts."""

import pytest

from inference.statistics import StatisticsRecorder
from inference.statistics_db import DatabaseStatistics

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


def _ok(recorder, model, version, rows, *, batch_size=None, executed=True, infer_ns=80, input_ns=10, output_ns=10):
    recorder.record_success(
        model, version, rows=rows, total_ns=input_ns + infer_ns + output_ns, queue_ns=5, input_ns=input_ns,
        infer_ns=infer_ns, output_ns=output_ns, batch_size=batch_size or rows, executed=executed,
    )  # fmt: skip


def test_recorders_add_up_across_processes():
    a, b = StatisticsRecorder(DatabaseStatistics(), 0), StatisticsRecorder(DatabaseStatistics(), 0)
    _ok(a, "m", 1, 4)
    a.record_failure("m", 1, 7)
    _ok(b, "m", 1, 1, infer_ns=40, input_ns=5, output_ns=5)
    _ok(b, "m", 2, 1, infer_ns=1)
    a.flush()
    (stats,) = b.read([("m", 1)])  # read() flushes b first
    assert (stats.inference_count, stats.execution_count) == (5, 2)
    assert (stats.stages["success"].count, stats.stages["success"].ns) == (2, 150)
    assert (stats.stages["fail"].count, stats.stages["fail"].ns) == (1, 7)
    assert (stats.stages["queue"].count, stats.stages["queue"].ns) == (2, 10)
    assert stats.stages["compute_infer"].ns == 120
    assert dict((size, s["compute_infer"].count) for size, s in stats.batch_stats) == {1: 1, 4: 1}
    assert stats.last_inference > 0
    (empty,) = a.read([("other", 3)])
    assert (empty.inference_count, empty.stages["success"].count, empty.last_inference) == (0, 0, 0)
    _ok(a, "m", 1, 1)
    a.flush()
    (again,) = a.read([("m", 1)])
    assert again.execution_count == 3


def test_a_dynamic_batch_counts_one_execution_and_every_inference():
    """Three requests (1 + 2 + 1 rows) that ran as one batch of 4: inference_count
    4, execution_count 1, one batch_stats entry of size 4; each request counts
    its own success, queue and compute times."""
    recorder = StatisticsRecorder(DatabaseStatistics(), 0)
    _ok(recorder, "b", 1, 1, batch_size=4, executed=True)
    _ok(recorder, "b", 1, 2, batch_size=4, executed=False)
    _ok(recorder, "b", 1, 1, batch_size=4, executed=False)
    (stats,) = recorder.read([("b", 1)])
    assert (stats.inference_count, stats.execution_count, stats.stages["success"].count) == (4, 1, 3)
    assert [(size, s["compute_infer"].count) for size, s in stats.batch_stats] == [(4, 1)]


def test_without_a_store_the_counts_stay_in_the_process():
    recorder = StatisticsRecorder(None, 0)
    _ok(recorder, "m", 1, 2)
    (stats,) = recorder.read([("m", 1)])
    assert (stats.inference_count, stats.execution_count) == (2, 1)
