"""The charts' per-minute rollups: bucket arithmetic, percentiles from summed
buckets against numpy on the same samples, and the recorder's minutes
written to (and rewritten in) the real database, summed by the chart reader."""

import numpy as np
import pytest

from inference.models import MinuteRollupRow
from inference.observability import rollups
from inference.observability.rollups import MAX_BUCKET, MinuteRollups, bucket, bucket_bounds, percentile
from inference.observability.rollups_db import COMPACT_AFTER_HOURS, HOURLY, DatabaseRollups, compact, prune
from inference.observability.statistics import StatisticsRecorder
from models_store.registry import charts


def _histogram(samples) -> dict[int, int]:
    counts: dict[int, int] = {}
    for ns in samples:
        b = bucket(int(ns))
        counts[b] = counts.get(b, 0) + 1
    return counts


def test_buckets_tile_the_durations_without_gaps():
    for index in range(MAX_BUCKET + 1):
        low, high = bucket_bounds(index)
        assert bucket(low) == index and bucket(high - 1) == index
        assert high - low <= max(1, low / 8)  # at most 12.5 % wide
        if index < MAX_BUCKET:
            assert bucket(high) == index + 1
    assert bucket(-5) == 0 and bucket(10**15) == MAX_BUCKET


@pytest.mark.parametrize(
    "samples",
    [
        np.random.default_rng(1).lognormal(13, 1.2, 20_000),  # ~0.4 ms, heavy tail
        np.random.default_rng(2).uniform(50_000, 60_000, 5_000),  # narrow
        np.random.default_rng(3).exponential(2e6, 1_000) + 10_000,
        np.concatenate([np.full(900, 200_000.0), np.full(100, 9_000_000.0)]),  # two modes
    ],
)
def test_percentiles_from_buckets_match_numpy_within_a_bucket(samples):
    samples = samples.astype(np.int64)
    histogram = _histogram(samples)
    for q in (50, 95, 99):
        exact = float(np.percentile(samples, q))
        estimate = percentile(histogram, q)
        assert abs(estimate - exact) <= exact / 8 + 1, (q, estimate, exact)


def test_histograms_merge_like_the_samples_they_count():
    """Per-minute histograms summed give the percentiles of all the minutes' samples."""
    rng = np.random.default_rng(4)
    minutes = [rng.lognormal(12 + i / 3, 0.8, 500).astype(np.int64) for i in range(6)]
    merged: dict[int, int] = {}
    for samples in minutes:
        rollups.add_histograms(merged, {str(k): v for k, v in _histogram(samples).items()})  # as JSON keeps them
    everything = np.concatenate(minutes)
    assert merged == _histogram(everything)
    for q in (50, 95, 99):
        exact = float(np.percentile(everything, q))
        assert abs(percentile(merged, q) - exact) <= exact / 8


def test_an_empty_histogram_has_no_percentile():
    assert percentile({}, 50) is None


def test_cells_per_minute_version_and_transport():
    r = MinuteRollups()
    t0 = 60 * 1_000_000 + 5.0
    r.success(t0, "m", 1, 4, 1000, 2000, 4, True)
    r.success(t0 + 1, "m", 1, 1, 1000, 2000, 4, False)  # rode in the same execution
    token = rollups.TRANSPORT.set("grpc")
    try:
        r.failure(t0 + 2, "m", 1)
    finally:
        rollups.TRANSPORT.reset(token)
    r.failure(t0 + 60, "m", 2)
    cells = r.pending()
    assert set(cells) == {(1_000_000, "m", 1, "other"), (1_000_000, "m", 1, "grpc"), (1_000_001, "m", 2, "other")}
    first = cells[(1_000_000, "m", 1, "other")]
    assert (first.successes, first.errors, first.inferences, first.executions, first.batches) == (2, 0, 5, 1, {4: 1})
    r.written(cells, t0 + 61)
    assert r.pending() == {}  # nothing changed since
    r.written({}, t0 + 200)
    assert r.cells == {}  # closed minutes dropped once written


@pytest.mark.db
@pytest.mark.django_db(transaction=True)
def test_the_recorder_writes_its_minutes_and_the_charts_sum_them():
    """Two processes' rows (two recorders) of the same minutes add up in the
    chart data; a rewrite of an open minute replaces its row, never adds."""
    a = StatisticsRecorder(None, 0, rollup_store=DatabaseRollups(), rollup_seconds=0)
    b = StatisticsRecorder(None, 0, rollup_store=DatabaseRollups(), rollup_seconds=0)
    queue = np.random.default_rng(5).integers(1_000, 5_000_000, 300)
    for i, q in enumerate(queue):
        recorder = a if i % 2 else b
        recorder.record_success(
            "m", 1, rows=2, total_ns=int(q) + 300, queue_ns=int(q), input_ns=100, infer_ns=100, output_ns=100,
            batch_size=2, executed=True,
        )  # fmt: skip
        if i == 100:
            a.flush()  # an early write of the open minute, rewritten later
    for _ in range(7):
        a.record_failure("m", 1, 10)
    a.flush()
    b.flush()
    assert len({r.writer for r in MinuteRollupRow.objects.filter(model_name="m")}) == 2  # a row per process
    data = charts.model_charts("m", "hour")
    (v1,) = [s for s in data["series"] if s["version"] == 1]
    assert (v1["total_requests"], v1["total_errors"]) == (307, 7)
    assert sum(v1["inferences"]) == 600 and sum(v1["executions"]) == 300
    assert {size for size in v1["mean_batch_size"] if size is not None} == {2.0}
    # one minute (or two, when the test straddled a minute): percentiles of the summed buckets
    busy = [i for i, n in enumerate(v1["requests"]) if n]
    if len(busy) == 1:
        for q in (50, 95, 99):
            exact = float(np.percentile(queue, q)) / 1e6
            assert abs(v1[f"queue_p{q}_ms"][busy[0]] - exact) <= exact / 8
            assert abs(v1[f"compute_p{q}_ms"][busy[0]] - 300 / 1e6) <= 300 / 8e6


@pytest.mark.db
@pytest.mark.django_db(transaction=True)
def test_retention_prunes_old_minutes():
    now = 1_800_000_000.0
    for days in (0, 3, 9):
        MinuteRollupRow.objects.create(
            minute=int((now - days * 86400) // 60), model_name="m", version=1, transport="rest", writer="w"
        )
    assert prune(8, now) == 1
    assert sorted(MinuteRollupRow.objects.values_list("minute", flat=True)) == sorted(
        int((now - d * 86400) // 60) for d in (0, 3)
    )


@pytest.mark.db
@pytest.mark.django_db(transaction=True)
def test_old_minutes_fold_into_hours_without_changing_the_week():
    """Minutes over a day old become one row per hour and series; the week's
    chart (1-hour steps) is the same before and after, percentiles included."""
    now = 1_800_000_000.0
    rng = np.random.default_rng(6)
    old_hour = (int(now) // 3600 - COMPACT_AFTER_HOURS - 3) * 60  # first minute of an hour to fold
    for minute in (old_hour, old_hour + 1, old_hour + 59, old_hour + 60, int(now) // 60 - 5):  # the last stays
        for writer in ("a-1", "b-2"):
            samples = rng.lognormal(12, 1, 50).astype(np.int64)
            MinuteRollupRow.objects.create(
                minute=minute, model_name="m", version=1, transport="rest", writer=writer, successes=50, errors=2,
                inferences=60, executions=40, queue_histogram=_histogram(samples), compute_histogram=_histogram(samples),
                batch_sizes={1: 30, 2: 10},
            )  # fmt: skip
    before = charts.model_charts("m", "week", now_s=now)
    assert compact(now) == 2 and compact(now) == 0
    after = charts.model_charts("m", "week", now_s=now)
    assert after == before
    rows = MinuteRollupRow.objects.order_by("minute")
    assert [(r.minute, r.writer) for r in rows][:2] == [(old_hour, HOURLY), (old_hour + 60, HOURLY)]
    assert rows.count() == 4  # two hour rows, and the recent minute's two writers
    assert rows.first().successes == 3 * 2 * 50 and rows.first().batch_sizes == {"1": 180, "2": 60}


@pytest.mark.db
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    not __import__("os").environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="row locks: PostgreSQL (DATABASE_URL)",
)
def test_processes_folding_the_same_hours_at_once_neither_fail_nor_count_twice():
    """Four processes' upkeep (each its own connection) folds the same six
    hours of three series at once: none fails, each hour is folded once
    (one hour row per series and hour), and the totals are unchanged."""
    import threading

    from django.db import connection

    now = 1_800_000_000.0
    first = (int(now) // 3600 - COMPACT_AFTER_HOURS - 8) * 60
    series = ("a", "b", "c")
    for hour in range(6):
        for minute in range(0, 60, 7):
            for model in series:
                for writer in ("w-1", "w-2"):
                    MinuteRollupRow.objects.create(
                        minute=first + hour * 60 + minute, model_name=model, version=1, transport="rest",
                        writer=writer, successes=hour + 1, inferences=2, queue_histogram={3: 1},
                        compute_histogram={4: 2}, batch_sizes={1: 1},
                    )  # fmt: skip
    minutes_per_hour = len(range(0, 60, 7))
    barrier, failures = threading.Barrier(4), []

    def upkeep() -> None:
        try:
            barrier.wait()
            compact(now)
        except Exception as exc:  # each failure is reported below
            failures.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=upkeep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    rows = list(MinuteRollupRow.objects.order_by("model_name", "minute"))
    assert [(r.model_name, r.minute, r.writer) for r in rows] == [
        (model, first + hour * 60, HOURLY) for model in series for hour in range(6)
    ]
    assert [r.successes for r in rows] == [2 * minutes_per_hour * (hour + 1) for _ in series for hour in range(6)]
    assert all(r.compute_histogram == {"4": 2 * 2 * minutes_per_hour} for r in rows)
