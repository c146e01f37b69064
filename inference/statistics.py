"""Triton's statistics extension, counted across every server process.

Each process keeps its new counts in memory (:meth:`StatisticsRecorder.record`
costs a lock and a few additions) and a daemon thread adds them to the
database every ``STATISTICS_FLUSH_SECONDS`` with ``F()`` increments, so the
REST workers and the gRPC process all contribute to the same rows. A
statistics request flushes its own process first; counts of other processes
appear within one flush interval. Durations are nanoseconds.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import F

logger = logging.getLogger(__name__)

#: Slots of the per-version delta list.
_SLOTS = (
    "inference_count",
    "execution_count",
    "success_count",
    "success_ns",
    "fail_count",
    "fail_ns",
    "queue_count",
    "queue_ns",
    "compute_input_count",
    "compute_input_ns",
    "compute_infer_count",
    "compute_infer_ns",
    "compute_output_count",
    "compute_output_ns",
)
_BATCH_SLOTS = _SLOTS[8:]


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
    """In-memory deltas per (model, version) and per batch size, flushed to the DB."""

    def __init__(self, flush_seconds: float = 1.0):
        self.flush_seconds = flush_seconds
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._deltas: dict[tuple[str, int], list[int]] = {}
        self._batches: dict[tuple[str, int, int], list[int]] = {}
        self._last: dict[tuple[str, int], int] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record(
        self,
        model: str,
        version: int,
        *,
        ok: bool,
        batch: int,
        total_ns: int,
        queue_ns: int = 0,
        input_ns: int = 0,
        infer_ns: int = 0,
        output_ns: int = 0,
    ) -> None:
        """Count one request. ``batch`` is the number of inferences it held
        (the batch size for batching models, else 1)."""
        key = (model, version)
        now_ms = int(time.time() * 1000)
        with self._lock:
            d = self._deltas.get(key)
            if d is None:
                d = self._deltas[key] = [0] * len(_SLOTS)
            self._last[key] = now_ms
            if not ok:
                d[4] += 1
                d[5] += total_ns
                return
            d[0] += batch
            d[1] += 1
            d[2] += 1
            d[3] += total_ns
            d[6] += 1
            d[7] += queue_ns
            d[8] += 1
            d[9] += input_ns
            d[10] += 1
            d[11] += infer_ns
            d[12] += 1
            d[13] += output_ns
            bkey = (model, version, batch)
            b = self._batches.get(bkey)
            if b is None:
                b = self._batches[bkey] = [0] * len(_BATCH_SLOTS)
            b[0] += 1
            b[1] += input_ns
            b[2] += 1
            b[3] += infer_ns
            b[4] += 1
            b[5] += output_ns

    # -- persistence -----------------------------------------------------
    def flush(self) -> None:
        """Add the pending deltas to the database (one transaction)."""
        from inference.models import BatchStatisticsRow, ModelStatisticsRow

        with self._flush_lock:
            with self._lock:
                deltas, self._deltas = self._deltas, {}
                batches, self._batches = self._batches, {}
                last, self._last = self._last, {}
            if not deltas and not batches:
                return
            try:
                with transaction.atomic():
                    for (model, version), d in deltas.items():
                        changes = {name: F(name) + value for name, value in zip(_SLOTS, d, strict=True) if value}
                        changes["last_inference_ms"] = last.get((model, version), 0)
                        _add(ModelStatisticsRow, {"model_name": model, "version": version}, changes)
                    for (model, version, size), b in batches.items():
                        changes = {name: F(name) + value for name, value in zip(_BATCH_SLOTS, b, strict=True)}
                        _add(BatchStatisticsRow, {"model_name": model, "version": version, "batch_size": size}, changes)
            except Exception:
                with self._lock:  # keep the counts for the next flush
                    for key, d in deltas.items():
                        mine = self._deltas.setdefault(key, [0] * len(_SLOTS))
                        for i, value in enumerate(d):
                            mine[i] += value
                    for key, b in batches.items():
                        mine = self._batches.setdefault(key, [0] * len(_BATCH_SLOTS))
                        for i, value in enumerate(b):
                            mine[i] += value
                    for key, value in last.items():
                        self._last[key] = max(self._last.get(key, 0), value)
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
            finally:
                close_old_connections()

    # -- reading ---------------------------------------------------------
    def read(self, keys: list[tuple[str, int]]) -> list[ModelStatistics]:
        """Statistics of the given (model, version) pairs, after flushing this process."""
        from inference.models import STAGES, BatchStatisticsRow, ModelStatisticsRow

        self.flush()
        names = {m for m, _ in keys}
        rows = {(r.model_name, r.version): r for r in ModelStatisticsRow.objects.filter(model_name__in=names)}
        batch_rows: dict[tuple[str, int], list] = {}
        for r in BatchStatisticsRow.objects.filter(model_name__in=names).order_by("batch_size"):
            batch_rows.setdefault((r.model_name, r.version), []).append(r)
        out = []
        for model, version in keys:
            row = rows.get((model, version))
            stages = {
                stage: Duration(getattr(row, f"{stage}_count"), getattr(row, f"{stage}_ns")) if row else Duration()
                for stage in STAGES
            }
            batches = [
                (
                    b.batch_size,
                    {
                        s: Duration(getattr(b, f"{s}_count"), getattr(b, f"{s}_ns"))
                        for s in ("compute_input", "compute_infer", "compute_output")
                    },
                )
                for b in batch_rows.get((model, version), [])
            ]
            out.append(
                ModelStatistics(
                    name=model,
                    version=str(version),
                    last_inference=row.last_inference_ms if row else 0,
                    inference_count=row.inference_count if row else 0,
                    execution_count=row.execution_count if row else 0,
                    stages=stages,
                    batch_stats=batches,
                )
            )
        return out


def _add(model_class, key: dict, changes: dict) -> None:
    """UPDATE ... SET x = x + delta, creating the row first when it is missing."""
    last = changes.pop("last_inference_ms", None)
    if last is not None:
        from django.db.models.functions import Greatest

        changes["last_inference_ms"] = Greatest(F("last_inference_ms"), last)
    if model_class.objects.filter(**key).update(**changes):
        return
    try:
        with transaction.atomic():
            model_class.objects.create(**key)
    except IntegrityError:
        pass  # another process created it meanwhile
    model_class.objects.filter(**key).update(**changes)
