"""The statistics recorder on the real databases: several recorders (as
several processes) add up in the shared rows."""

import pytest

from inference.statistics import StatisticsRecorder

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


def test_recorders_add_up_across_processes():
    a, b = StatisticsRecorder(0), StatisticsRecorder(0)
    a.record("m", 1, ok=True, batch=4, total_ns=100, input_ns=10, infer_ns=80, output_ns=10)
    a.record("m", 1, ok=False, batch=0, total_ns=7)
    b.record("m", 1, ok=True, batch=1, total_ns=50, input_ns=5, infer_ns=40, output_ns=5)
    b.record("m", 2, ok=True, batch=1, total_ns=1, infer_ns=1)
    a.flush()
    (stats,) = b.read([("m", 1)])  # read() flushes b first
    assert (stats.inference_count, stats.execution_count) == (5, 2)
    assert (stats.stages["success"].count, stats.stages["success"].ns) == (2, 150)
    assert (stats.stages["fail"].count, stats.stages["fail"].ns) == (1, 7)
    assert stats.stages["compute_infer"].ns == 120
    assert dict((size, s["compute_infer"].count) for size, s in stats.batch_stats) == {1: 1, 4: 1}
    assert stats.last_inference > 0
    (empty,) = a.read([("other", 3)])
    assert (empty.inference_count, empty.stages["success"].count, empty.last_inference) == (0, 0, 0)
    a.record("m", 1, ok=True, batch=1, total_ns=1)
    a.flush()
    (again,) = a.read([("m", 1)])
    assert again.execution_count == 3
