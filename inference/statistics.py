"""Triton's statistics extension, counted across every server process.

Each process keeps its new counts in memory (:meth:`StatisticsRecorder.record`
costs a lock and a few additions) and a daemon thread adds them to a shared
:class:`~inference.ports.StatisticsStore` every ``flush_seconds`` (the
composition root plugs in the database: :mod:`inference.statistics_db`), so
the REST workers and the gRPC process all contribute to the same totals. A
statistics request flushes its own process first; counts of other processes
appear within one flush interval. Durations are nanoseconds.

Counted as Triton counts them: ``inference_count`` counts inferences (batch
rows), ``execution_count`` model executions (a dynamic batch is one), and
``batch_stats`` one entry per execution under its batch size.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, fields

logger = logging.getLogger(__name__)

#: The stages of ``inference_stats``, as Triton names them.
STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
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
    stages: dict[str, Duration]  # success, fail, queue, compute_input, compute_infer, compute_output
    batch_stats: list[tuple[int, dict[str, Duration]]]  # (batch size, compute stages)


class StatisticsRecorder:
    """In-memory deltas per (model, version) and per batch size, flushed to
    ``store`` (None: kept in this process only)."""

    def __init__(self, store=None, flush_seconds: float = 1.0):
        self.store = store
        self.flush_seconds = flush_seconds
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._versions: dict[tuple[str, int], VersionCounters] = {}
        self._batches: dict[tuple[str, int, int], BatchCounters] = {}
        self._last: dict[tuple[str, int], int] = {}
        # Without a store, flushed counts accumulate here.
        self._totals: tuple[dict, dict, dict] = ({}, {}, {})
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record_failure(self, model: str, version: int, total_ns: int) -> None:
        """Count one failed request."""
        key = (model, version)
        with self._lock:
            counters = self._versions.get(key) or self._versions.setdefault(key, VersionCounters())
            counters.fail_count += 1
            counters.fail_ns += total_ns
            self._last[key] = int(time.time() * 1000)

    def record_success(
        self, model: str, version: int, *, rows: int, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
        output_ns: int, batch_size: int, executed: bool,
    ) -> None:  # fmt: skip
        """Count one successful request of ``rows`` inferences. It ran in an
        execution of ``batch_size`` rows; ``executed`` for the one request
        that counts that execution (and its batch_stats entry)."""
        key = (model, version)
        with self._lock:
            c = self._versions.get(key) or self._versions.setdefault(key, VersionCounters())
            self._last[key] = int(time.time() * 1000)
            c.inference_count += rows
            c.success_count += 1
            c.success_ns += total_ns
            c.queue_count += 1
            c.queue_ns += queue_ns
            c.compute_input_count += 1
            c.compute_input_ns += input_ns
            c.compute_infer_count += 1
            c.compute_infer_ns += infer_ns
            c.compute_output_count += 1
            c.compute_output_ns += output_ns
            if executed:
                c.execution_count += 1
                bkey = (model, version, batch_size)
                b = self._batches.get(bkey) or self._batches.setdefault(bkey, BatchCounters())
                b.compute_input_count += 1
                b.compute_input_ns += input_ns
                b.compute_infer_count += 1
                b.compute_infer_ns += infer_ns
                b.compute_output_count += 1
                b.compute_output_ns += output_ns

    # -- persistence -----------------------------------------------------
    def flush(self) -> None:
        """Add the pending deltas to the store (kept for the next flush when it fails)."""
        with self._flush_lock:
            with self._lock:
                versions, self._versions = self._versions, {}
                batches, self._batches = self._batches, {}
                last, self._last = self._last, {}
            if not versions and not batches:
                return
            try:
                if self.store is None:
                    _merge(self._totals, versions, batches, last)
                else:
                    self.store.add(versions, batches, last)
            except Exception:
                with self._lock:  # keep the counts for the next flush
                    _merge((self._versions, self._batches, self._last), versions, batches, last)
                raise

    def start(self) -> None:
        if self.flush_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stats-flush", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            try:
                self.flush()
            except Exception:
                logger.exception("flushing inference statistics failed; will retry")

    # -- reading ---------------------------------------------------------
    def read(self, keys: list[tuple[str, int]]) -> list[ModelStatistics]:
        """Statistics of the given (model, version) pairs, after flushing this process."""
        self.flush()
        if self.store is None:
            versions, batches, last = self._totals
        else:
            versions, batches, last = self.store.read(keys)
        out = []
        for model, version in keys:
            c = versions.get((model, version)) or VersionCounters()
            stages = {s: Duration(getattr(c, f"{s}_count"), getattr(c, f"{s}_ns")) for s in STAGES}
            sizes = sorted(size for (m, v, size) in batches if (m, v) == (model, version))
            batch_stats = [
                (size, {s: Duration(getattr(b, f"{s}_count"), getattr(b, f"{s}_ns")) for s in BATCH_STAGES})
                for size in sizes
                for b in (batches[(model, version, size)],)
            ]
            last_ms = last.get((model, version), 0)
            out.append(
                ModelStatistics(model, str(version), last_ms, c.inference_count, c.execution_count, stages, batch_stats)
            )
        return out


def _merge(into: tuple[dict, dict, dict], versions: dict, batches: dict, last: dict) -> None:
    """Add counter deltas to ``into`` = (versions, batches, last)."""
    into_versions, into_batches, into_last = into
    for key, counters in versions.items():
        into_versions.setdefault(key, VersionCounters()).add(counters)
    for key, counters in batches.items():
        into_batches.setdefault(key, BatchCounters()).add(counters)
    for key, value in last.items():
        into_last[key] = max(into_last.get(key, 0), value)
