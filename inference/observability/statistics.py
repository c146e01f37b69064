"""Triton's statistics extension, counted across every server process at once.

Each process adds its counts to its own table of counters in memory the
machine's processes share (:mod:`inference.observability.statistics_local`: a lock and a
few additions per request), before the answer leaves; a statistics read sums
the tables of every process of the machine, so it includes every inference
this machine answered before the read began (REST and gRPC processes alike;
a process that ended is folded into the machine's retired table, never
counted twice). For other machines, a daemon thread adds each process's new
counts to a shared :class:`~inference.ports.StatisticsStore` every
``flush_seconds`` under the machine's id (the composition root plugs in the
database: :mod:`inference.observability.statistics_db`); a read adds what the other
machines flushed, so their counts appear within one flush interval.
Durations are nanoseconds.

Counted as Triton counts them: ``inference_count`` counts inferences (batch
rows), ``execution_count`` model executions (a dynamic batch is one), and
``batch_stats`` one entry per execution under its batch size.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from inference.observability import statistics_local as local
from inference.observability.outage import DependencyWatch
from inference.observability.rollups import MinuteRollups
from inference.protocol.errors import DeadlineExceeded, ModelNotReady

logger = logging.getLogger(__name__)

#: Why a request failed, as Triton's ``nv_inference_request_failure{reason}`` says it (Triton 2.49+):
#: REJECTED its deadline or queue timeout passed before it ran, CANCELED the client cancelled it,
#: BACKEND the model's run failed, OTHER anything else (a request that did not fit the model, an ensemble).
REJECTED, CANCELED, BACKEND, OTHER = "REJECTED", "CANCELED", "BACKEND", "OTHER"
FAILURE_REASONS = (REJECTED, CANCELED, BACKEND, OTHER)

#: The stages of ``inference_stats``, as Triton names them.
STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
BATCH_STAGES = ("compute_input", "compute_infer", "compute_output")


class _Counters:
    """Named integer counters (a dataclass's fields) that add up."""

    def add(self, other) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class VersionCounters(_Counters):
    """Counter deltas (or totals) of one model version."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    fail_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_ns: int = 0


@dataclass
class BatchCounters(_Counters):
    """Counter deltas (or totals) of one model version's executions of one batch size."""

    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0


@dataclass(frozen=True)
class Duration:
    count: int = 0
    ns: int = 0


@dataclass(frozen=True)
class ModelStatistics:
    """One version's statistics, shaped like Triton's ``ModelStatistics``."""

    name: str
    version: str
    last_inference: int  # ms since the epoch, 0 if none
    inference_count: int
    execution_count: int
    stages: dict[str, Duration]  # success, fail, queue, compute_input, compute_infer, compute_output, cache_hit/miss
    batch_stats: list[tuple[int, dict[str, Duration]]]  # (batch size, compute stages)


class StatisticsRecorder:
    """Counts of this process in its :class:`~inference.observability.statistics_local.CounterTable`
    (in ``directory``, where every server process of the machine keeps one,
    so that a read sums them all at once; anonymous memory without one),
    flushed as deltas to ``store`` every ``flush_seconds`` under this
    machine's id for the other machines' reads (None: no store). With a
    ``rollup_store`` it also counts per-minute rollups for the charts
    (:mod:`inference.observability.rollups`) and writes them there every ``rollup_seconds``
    from the same flush thread."""

    def __init__(
        self, store=None, flush_seconds: float = 1.0, directory: Path | None = None, name: str = "",
        rollup_store=None, rollup_seconds: float = 10.0,
    ):  # fmt: skip
        """``name``: the table's file name in ``directory`` (default: this
        process's pid and start time; tests name several recorders of one process).
        ``rollup_store``: has ``write(writer, cells)`` (:mod:`inference.observability.rollups_db`)."""
        self.store = store
        self.rollup_store = rollup_store
        self.rollup_seconds = rollup_seconds
        self.rollups = MinuteRollups() if rollup_store is not None else None
        self._rollups_written = 0.0
        self.flush_seconds = flush_seconds
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self.machine = local.machine_id(directory)
            self._table = local.CounterTable(directory / name if name else local.table_path(directory))
        else:
            self.machine = os.urandom(8).hex()
            self._table = local.CounterTable(None)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._flushed: dict[local.Key, np.ndarray] = {}  # this process's counts the store has
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record_failure(self, model: str, version: int, total_ns: int, reason: str = OTHER) -> None:
        """Count one failed request; ``reason``: one of :data:`FAILURE_REASONS` (see :func:`failure_reason`)."""
        with self._lock:
            if self.rollups is not None:
                self.rollups.failure(time.time(), model, version)
            table = self._table
            start = table.slot((model, version, 0))
            words = table.words
            words[start + _FAIL_COUNT] += 1
            words[start + _FAIL_NS] += total_ns
            if reason in _REASON_AT:
                words[start + _REASON_AT[reason]] += 1
            words[start + local.LAST] = int(time.time() * 1000)

    def record_success(
        self, model: str, version: int, *, rows: int, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
        output_ns: int, batch_size: int, executed: bool,
    ) -> None:  # fmt: skip
        """Count one successful request of ``rows`` inferences. It ran in an
        execution of ``batch_size`` rows; ``executed`` for the one request
        that counts that execution (and its batch_stats entry)."""
        seconds = time.time()
        now = int(seconds * 1000)
        with self._lock:
            if self.rollups is not None:
                compute_ns = input_ns + infer_ns + output_ns
                self.rollups.success(seconds, model, version, rows, queue_ns, compute_ns, batch_size, executed)
            table = self._table
            start = table.slot((model, version, 0))
            words = table.words
            words[start + _INFERENCES] += rows
            words[start + _SUCCESS_COUNT] += 1
            words[start + _SUCCESS_NS] += total_ns
            words[start + _QUEUE_NS] += queue_ns
            words[start + _INPUT_NS] += input_ns
            words[start + _INFER_NS] += infer_ns
            words[start + _OUTPUT_NS] += output_ns
            words[start + local.LAST] = now
            if executed:
                words[start + _EXECUTIONS] += 1
                batch = table.slot((model, version, batch_size))
                words[batch + _SUCCESS_COUNT] += 1
                words[batch + _INPUT_NS] += input_ns
                words[batch + _INFER_NS] += infer_ns
                words[batch + _OUTPUT_NS] += output_ns

    def record_cache_hit(self, model: str, version: int, *, total_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """Count one request answered from the response cache, as Triton does:
        a success (with its time and queue time) and a cache hit (the lookup's
        time); no inference, execution or compute."""
        with self._lock:
            if self.rollups is not None:
                self.rollups.success(time.time(), model, version, 0, queue_ns, lookup_ns, 0, False)
            table = self._table
            start = table.slot((model, version, 0))
            words = table.words
            words[start + _SUCCESS_COUNT] += 1
            words[start + _SUCCESS_NS] += total_ns
            words[start + _QUEUE_NS] += queue_ns
            words[start + _HIT_COUNT] += 1
            words[start + _HIT_NS] += lookup_ns
            words[start + local.LAST] = int(time.time() * 1000)

    def record_cache_miss(self, model: str, version: int, ns: int) -> None:
        """Count one response-cache miss: ``ns``, the lookup's and the insertion's time."""
        with self._lock:
            table = self._table
            start = table.slot((model, version, 0))
            words = table.words
            words[start + _MISS_COUNT] += 1
            words[start + _MISS_NS] += ns

    # -- persistence -----------------------------------------------------
    def flush(self) -> None:
        """Add what this process counted since the last flush to the store
        (kept for the next flush when it fails); then retire the tables of
        the machine's processes that ended."""
        with self._flush_lock:
            if self.store is not None:
                with self._lock:
                    now = self._table.snapshot()
                versions, batches, last = _deltas(now, self._flushed)
                if versions or batches:
                    self.store.add(self.machine, versions, batches, last)
                self._flushed = now
            if self.directory is not None:
                local.retire_dead(self.directory)
            if self.rollup_store is not None and time.monotonic() - self._rollups_written >= self.rollup_seconds:
                self.flush_rollups()

    def flush_rollups(self) -> None:
        """Write the rollups' changed minutes to the rollup store (kept for the next flush when it fails)."""
        rollups = self.rollups
        if rollups is None:
            return
        with self._lock:
            cells = rollups.pending()
        if cells:
            self.rollup_store.write(f"{self.machine}-{os.getpid()}", cells)  # this process's rows
        with self._lock:
            rollups.written(cells, time.time())
        self._rollups_written = time.monotonic()

    def start(self) -> None:
        if self.flush_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stats-flush", daemon=True)
            self._thread.start()
            if self.rollups is not None:
                atexit.register(self._last_rollups)

    def _last_rollups(self) -> None:
        """At exit: the open minutes' last counts (a process that ends normally loses none)."""
        try:
            self.flush_rollups()
        except Exception as exc:  # the database may be gone already
            logger.warning("the charts' last minutes of this process were not written: %s", exc)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        watch = DependencyWatch("the statistics' database", logger)
        while not self._stop.wait(self.flush_seconds):
            try:
                self.flush()
            except Exception as exc:
                watch.failed(exc, f"counters are kept and flushed when it is back (every {self.flush_seconds:g} s)")
            else:
                watch.ok()

    # -- reading ---------------------------------------------------------
    def machine_counters(self) -> dict[local.Key, np.ndarray]:
        """Cumulative counters of this machine's processes by (model, version,
        batch size; 0: the version's own), as :meth:`read` sums them before
        adding other machines': the source of Triton's per-server metrics
        (:mod:`inference.observability.triton_metrics`). Fields at
        :data:`~inference.observability.statistics_local.INDEX`."""
        if self.directory is not None:
            return local.machine_totals(self.directory)
        with self._lock:
            return self._table.snapshot()

    def read(self, keys: list[tuple[str, int]]) -> list[ModelStatistics]:
        """Statistics of the given (model, version) pairs: every inference
        this machine answered before the call (its processes' tables), plus
        what other machines have flushed to the store (at most
        ``flush_seconds`` behind)."""
        totals = self.machine_counters()
        if self.store is not None:
            versions, batches, last = self.store.read(keys, exclude_machine=self.machine)
            _add_remote(totals, versions, batches, last)
        out = []
        for model, version in keys:
            c = totals.get((model, version, 0), _ZERO)
            stages = {s: Duration(int(c[_STAGE_AT[s][0]]), int(c[_STAGE_AT[s][1]])) for s in STAGES}
            computed = int(c[_SUCCESS_COUNT] - c[_HIT_COUNT])  # answers from the cache computed nothing
            for stage in BATCH_STAGES:
                stages[stage] = Duration(computed, stages[stage].ns)
            sizes = sorted(size for (m, v, size) in totals if (m, v) == (model, version) and size > 0)
            batch_stats = [
                (size, {s: Duration(int(b[_STAGE_AT[s][0]]), int(b[_STAGE_AT[s][1]])) for s in BATCH_STAGES})
                for size in sizes
                for b in (totals[(model, version, size)],)
            ]  # fmt: skip
            counts = int(c[local.LAST]), int(c[_INFERENCES]), int(c[_EXECUTIONS])
            out.append(ModelStatistics(model, str(version), *counts, stages, batch_stats))
        return out


_I = local.INDEX
_INFERENCES, _EXECUTIONS = _I["inference_count"], _I["execution_count"]
_SUCCESS_COUNT, _SUCCESS_NS = _I["success_count"], _I["success_ns"]
_FAIL_COUNT, _FAIL_NS = _I["fail_count"], _I["fail_ns"]
_QUEUE_NS, _INPUT_NS, _INFER_NS, _OUTPUT_NS = (
    _I["queue_ns"], _I["compute_input_ns"], _I["compute_infer_ns"], _I["compute_output_ns"]
)  # fmt: skip
_HIT_COUNT, _HIT_NS, _MISS_COUNT, _MISS_NS = (
    _I["cache_hit_count"], _I["cache_hit_ns"], _I["cache_miss_count"], _I["cache_miss_ns"]
)  # fmt: skip
#: Where a stage's count and time are in a slot (queue and compute are counted once per success).
_STAGE_AT = {
    "success": (_SUCCESS_COUNT, _SUCCESS_NS), "fail": (_FAIL_COUNT, _FAIL_NS), "queue": (_SUCCESS_COUNT, _QUEUE_NS),
    "compute_input": (_SUCCESS_COUNT, _INPUT_NS), "compute_infer": (_SUCCESS_COUNT, _INFER_NS),
    "compute_output": (_SUCCESS_COUNT, _OUTPUT_NS), "cache_hit": (_HIT_COUNT, _HIT_NS),
    "cache_miss": (_MISS_COUNT, _MISS_NS),
}  # fmt: skip
_REASON_AT = {
    REJECTED: _I["fail_rejected_count"],
    CANCELED: _I["fail_canceled_count"],
    BACKEND: _I["fail_backend_count"],
}  # fmt: skip  (OTHER: the rest of fail_count)
_ZERO = np.zeros(local.WIDTH, np.int64)
_VERSION_FIELDS = [f.name for f in fields(VersionCounters)]
_BATCH_FIELDS = [f.name for f in fields(BatchCounters)]


#: Where each field of the store's counters is in a slot (the queue and compute counts are the success count).
_COUNTER_AT = {**_I, **{f"{stage}_count": _SUCCESS_COUNT for stage in ("queue", *BATCH_STAGES)}}
#: The fields a slot is rebuilt from, read back from the store.
_VERSION_SOURCES = ("inference_count", "execution_count", "success_count", "success_ns", "fail_count", "fail_ns",
                    "queue_ns", "compute_input_ns", "compute_infer_ns", "compute_output_ns",
                    "cache_hit_count", "cache_hit_ns", "cache_miss_count", "cache_miss_ns")  # fmt: skip
_BATCH_SOURCES = ("compute_infer_count", "compute_input_ns", "compute_infer_ns", "compute_output_ns")


def _deltas(now: dict, flushed: dict) -> tuple[dict, dict, dict]:
    """Counter deltas since ``flushed`` as the store takes them:
    ({(model, version): VersionCounters}, {(model, version, size): BatchCounters},
    {(model, version): last inference ms})."""
    versions, batches, last = {}, {}, {}
    for key, counters in now.items():
        before = flushed.get(key)
        delta = counters if before is None else counters - before
        if not delta[: local.LAST].any() and not delta[local.LAST + 1 :].any():
            continue
        model, version, size = key
        if size == 0:
            versions[(model, version)] = VersionCounters(**{f: int(delta[_COUNTER_AT[f]]) for f in _VERSION_FIELDS})
            last[(model, version)] = int(counters[local.LAST])
        else:
            batches[key] = BatchCounters(**{f: int(delta[_COUNTER_AT[f]]) for f in _BATCH_FIELDS})
    return versions, batches, last


def _add_remote(totals: dict, versions: dict, batches: dict, last: dict) -> None:
    """Add the store's totals of other machines to this machine's ``totals``."""
    for (model, version), counters in versions.items():
        total = totals.setdefault((model, version, 0), np.zeros(local.WIDTH, np.int64))
        for name in _VERSION_SOURCES:
            total[_COUNTER_AT[name]] += getattr(counters, name)
        total[local.LAST] = max(total[local.LAST], last.get((model, version), 0))
    for key, counters in batches.items():
        total = totals.setdefault(key, np.zeros(local.WIDTH, np.int64))
        for name in _BATCH_SOURCES:
            total[_COUNTER_AT[name]] += getattr(counters, name)


def failure_reason(exc: BaseException, ran: bool) -> str:
    """Triton's reason for a failed request (:data:`FAILURE_REASONS`): ``exc``
    what it raised, ``ran`` whether it failed in the model's run (the
    executor) rather than before it. A deadline (or queue timeout) is
    REJECTED, a cancellation CANCELED, any other error of the run BACKEND
    (but a version unloaded meanwhile), everything else OTHER."""
    if isinstance(exc, DeadlineExceeded):
        return REJECTED
    if isinstance(exc, asyncio.CancelledError):
        return CANCELED
    if ran and not isinstance(exc, ModelNotReady):
        return BACKEND
    return OTHER
