"""The statistics recorder: the processes of one machine add up at once
through their shared tables; machines add up through the real databases'
rows; counted as Triton counts."""

import os

import numpy as np
import pytest

from inference.observability import statistics_local as local
from inference.observability.statistics import StatisticsRecorder
from inference.observability.statistics_db import DatabaseStatistics

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


def _ok(recorder, model, version, rows, *, batch_size=None, executed=True, infer_ns=80, input_ns=10, output_ns=10):
    recorder.record_success(
        model, version, rows=rows, total_ns=input_ns + infer_ns + output_ns, queue_ns=5, input_ns=input_ns,
        infer_ns=infer_ns, output_ns=output_ns, batch_size=batch_size or rows, executed=executed,
    )  # fmt: skip


def test_recorders_add_up_across_machines():
    """Recorders without a shared directory are machines of their own: each
    reads its own counts at once and the others' once they flushed."""
    a, b = StatisticsRecorder(DatabaseStatistics(), 0), StatisticsRecorder(DatabaseStatistics(), 0)
    _ok(a, "m", 1, 4)
    a.record_failure("m", 1, 7)
    _ok(b, "m", 1, 1, infer_ns=40, input_ns=5, output_ns=5)
    _ok(b, "m", 2, 1, infer_ns=1)
    (alone,) = b.read([("m", 1)])
    assert (alone.inference_count, alone.stages["success"].count) == (1, 1)  # a has not flushed yet
    a.flush()
    b.flush()
    b.flush()  # nothing new: nothing added twice
    (stats,) = b.read([("m", 1)])
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


def test_the_processes_of_a_machine_add_up_at_once_and_never_twice(tmp_path):
    """Two processes of one machine (one statistics directory): a read by
    either sees both at once, before any flush; flushed rows of the machine
    are not counted again; a process that ended is folded into the retired
    table without changing a read; a third machine sees the flushed counts."""
    store = DatabaseStatistics()
    a = StatisticsRecorder(store, 0, tmp_path, name="4194303-1.stats")  # no such process: it "ended"
    b = StatisticsRecorder(store, 0, tmp_path, name=f"{os.getpid()}-{local._start_ticks(os.getpid())}.stats")
    _ok(a, "m", 1, 3, batch_size=3)
    _ok(b, "m", 1, 1)
    b.record_failure("m", 1, 9)
    for reader in (a, b):
        (stats,) = reader.read([("m", 1)])
        assert (stats.inference_count, stats.execution_count) == (4, 2)
        assert (stats.stages["success"].count, stats.stages["fail"].count, stats.stages["fail"].ns) == (2, 1, 9)
        assert {size: s["compute_infer"].count for size, s in stats.batch_stats} == {1: 1, 3: 1}
    a.flush()  # a's table is a dead process's: folded into retired.stats
    b.flush()
    assert not (tmp_path / "4194303-1.stats").exists() and (tmp_path / local.RETIRED).exists()
    (after,) = b.read([("m", 1)])
    assert (after.inference_count, after.execution_count, after.stages["fail"].count) == (4, 2, 1)
    other = StatisticsRecorder(store, 0)  # another machine
    (remote,) = other.read([("m", 1)])
    assert (remote.inference_count, remote.execution_count, remote.stages["fail"].ns) == (4, 2, 9)


def test_a_table_grows_and_readers_see_every_key(tmp_path):
    table = local.CounterTable(tmp_path / "7-7.stats", capacity=2)
    for i in range(40):
        start = table.slot((f"model-{i}", 1 + i % 3, 0))
        table.add(start, ((local.INDEX["success_count"], i + 1),))
    assert table.capacity >= 40
    totals = local.machine_totals(tmp_path)
    assert {key[0]: int(c[local.INDEX["success_count"]]) for key, c in totals.items()} == {
        f"model-{i}": i + 1 for i in range(40)
    }
    (tmp_path / "garbage.stats").write_bytes(b"not a table")  # ignored, never a crash
    assert len(local.machine_totals(tmp_path)) == 40
    assert np.array_equal(table.snapshot()[("model-5", 3, 0)], totals[("model-5", 3, 0)])


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="row locks: PostgreSQL (DATABASE_URL)"
)
def test_processes_of_a_machine_flushing_the_same_rows_at_once_never_deadlock():
    """Six flushers of one machine (each its own connection and transactions,
    as the machine's processes are) add overlapping counters at once, each
    in its own dict order, 25 times: none fails (before: PostgreSQL's
    "deadlock detected"), and every row holds exactly the sum."""
    import random
    import threading

    from django.db import connection

    from inference.observability.statistics import BatchCounters, VersionCounters

    flushers, rounds = 6, 25
    keys = [(f"model-{i}", 1 + i % 2) for i in range(12)]
    barrier, failures = threading.Barrier(flushers), []

    def flush(seed: int) -> None:
        order = random.Random(seed)
        try:
            barrier.wait()
            for _ in range(rounds):
                mine = order.sample(keys, len(keys))  # another order each time: the dict order of a process
                versions = {k: VersionCounters(inference_count=seed + 1, execution_count=1) for k in mine}
                batches = {(*k, 4): BatchCounters(compute_infer_count=1, compute_infer_ns=seed) for k in reversed(mine)}
                DatabaseStatistics().add("machine-a", versions, batches, {k: 1000 + seed for k in mine})
        except Exception as exc:  # each failure is reported below
            failures.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=flush, args=(seed,)) for seed in range(flushers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    versions, batches, last = DatabaseStatistics().read(keys)
    assert {k: (c.inference_count, c.execution_count) for k, c in versions.items()} == {
        k: (rounds * sum(range(1, flushers + 1)), rounds * flushers) for k in keys
    }
    assert {k: (c.compute_infer_count, c.compute_infer_ns) for k, c in batches.items()} == {
        (*k, 4): (rounds * flushers, rounds * sum(range(flushers))) for k in keys
    }
    assert last == {k: 1000 + flushers - 1 for k in keys}
