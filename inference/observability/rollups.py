"""Per-minute rollups of inference traffic, for the charts of the web UI.

Per (minute, model, version, transport), each server process counts in memory
what its data plane already measures (:class:`~inference.observability.statistics.StatisticsRecorder`
calls :meth:`MinuteRollups.success` / :meth:`MinuteRollups.failure` under its
lock: a few dictionary increments per request, no I/O): requests answered,
requests failed, inferences (batch rows), executions and the batch sizes they
ran with, and the queue and compute times of successes as histograms over
fixed logarithmic buckets (:func:`bucket`), which add up across processes,
machines and minutes, so that percentiles of any range come from summed
buckets (:func:`percentile`) rather than from averaged percentiles. The
statistics' flush thread hands :meth:`MinuteRollups.pending` to a store
(the database: :mod:`inference.observability.rollups_db`), which keeps one row per minute
per process, overwritten until the minute closes.

Transport: ``rest``, ``tfserving`` or ``grpc``, from :data:`TRANSPORT`, which
the adapters set around each request (a context variable: it follows a
request into ``asyncio.to_thread``); ``other`` when no adapter set it (a data
plane driven directly, e.g. by tests).

Durations are nanoseconds; minutes are whole minutes since the Unix epoch (UTC).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

#: The transport of the request being answered (set by the REST, TF Serving and gRPC adapters).
TRANSPORT: contextvars.ContextVar[str] = contextvars.ContextVar("inference_transport", default="other")

#: Sub-buckets per power of two: a bucket spans at most 1/8 of its lower bound (12.5 %).
SUB_BUCKETS = 8
_SUB_BITS = 3
#: Durations below this many ns have a bucket each (width 1).
_LINEAR = 2 * SUB_BUCKETS
#: The last bucket holds everything from about 2**40 ns (18 minutes) on.
MAX_BUCKET = _LINEAR + (40 - 4) * SUB_BUCKETS + SUB_BUCKETS - 1


def bucket(ns: int) -> int:
    """The histogram bucket of a duration of ``ns`` nanoseconds (int >= 0;
    negative counts as 0): ``ns`` itself below 16, above that 8 buckets per
    power of two (HDR-histogram style: the top 4 bits of ``ns``), at most
    :data:`MAX_BUCKET`."""
    if ns < _LINEAR:
        return ns if ns > 0 else 0
    octave = ns.bit_length() - 1  # ns in [2**octave, 2**(octave + 1))
    index = _LINEAR + (octave - 4) * SUB_BUCKETS + ((ns >> (octave - _SUB_BITS)) & (SUB_BUCKETS - 1))
    return index if index < MAX_BUCKET else MAX_BUCKET


_bucket = bucket


def bucket_bounds(index: int) -> tuple[int, int]:
    """[low, high) in nanoseconds of bucket ``index`` (the last bucket's high is its low doubled)."""
    if index < _LINEAR:
        return index, index + 1
    octave, sub = divmod(index - _LINEAR, SUB_BUCKETS)
    shift = octave + 4 - _SUB_BITS
    low = (SUB_BUCKETS + sub) << shift
    return low, low + (1 << shift)


def percentile(histogram: dict[int, int], q: float) -> float | None:
    """The ``q``-th percentile (0..100) in nanoseconds of the durations counted
    in ``histogram`` ({bucket: count}), as numpy's default ``linear`` method
    would place it, interpolated linearly inside its bucket (so within one
    bucket's width, 12.5 %, of the exact value); None for an empty histogram."""
    total = sum(histogram.values())
    if total <= 0:
        return None
    rank = q / 100.0 * (total - 1)  # 0-based position among the sorted durations
    seen = 0
    for index in sorted(histogram):
        count = histogram[index]
        if count <= 0:
            continue
        if rank < seen + count:
            low, high = bucket_bounds(index)
            # the bucket's ``count`` durations spread evenly over [low, high)
            return low + (rank - seen + 0.5) / count * (high - low)
        seen += count
    return float(bucket_bounds(max(histogram))[1])


def add_histograms(into: dict[int, int], other: dict) -> dict[int, int]:
    """Add ``other`` ({bucket: count}, keys ints or their strings as JSON has them) into ``into``."""
    for index, count in other.items():
        index = int(index)
        into[index] = into.get(index, 0) + count
    return into


@dataclass(slots=True)
class Cell:
    """One (minute, model, version, transport) of one process."""

    successes: int = 0  # requests answered
    errors: int = 0  # failed (an InferenceError after the version was known)
    inferences: int = 0  # batch rows of the answered requests
    executions: int = 0  # model executions (a dynamic batch is one)
    queue: dict[int, int] = field(default_factory=dict)  # bucket -> successes
    compute: dict[int, int] = field(default_factory=dict)  # bucket -> successes
    batches: dict[int, int] = field(default_factory=dict)  # batch size -> executions
    queue_ns: int = 0
    compute_ns: int = 0
    changed: bool = True


Key = tuple[int, str, int, str]  # (minute, model, version, transport)


class MinuteRollups:
    """This process's open minutes (see module doc). Not thread-safe: the
    statistics recorder calls it under its lock (:meth:`pending` and
    :meth:`written` too)."""

    def __init__(self):
        self.cells: dict[Key, Cell] = {}

    def _cell(self, now_s: float, model: str, version: int) -> Cell:
        key = (int(now_s // 60), model, version, TRANSPORT.get())
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = Cell()
        cell.changed = True
        return cell

    def success(
        self, now_s: float, model: str, version: int, rows: int, queue_ns: int, compute_ns: int, batch_size: int,
        executed: bool,
    ) -> None:  # fmt: skip
        """Count one answered request at ``now_s`` (seconds since the epoch) of
        ``rows`` inferences; ``executed`` for the one request of an execution
        of ``batch_size`` rows that counts that execution."""
        key = (int(now_s // 60), model, version, TRANSPORT.get())
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = Cell()
        cell.changed = True
        cell.successes += 1
        cell.inferences += rows
        cell.queue_ns += queue_ns
        cell.compute_ns += compute_ns
        histogram = cell.queue
        b = _bucket(queue_ns)
        histogram[b] = histogram.get(b, 0) + 1
        histogram = cell.compute
        b = _bucket(compute_ns)
        histogram[b] = histogram.get(b, 0) + 1
        if executed:
            cell.executions += 1
            cell.batches[batch_size] = cell.batches.get(batch_size, 0) + 1

    def failure(self, now_s: float, model: str, version: int) -> None:
        """Count one failed request at ``now_s``."""
        self._cell(now_s, model, version).errors += 1

    def pending(self) -> dict[Key, Cell]:
        """Copies of the cells changed since the last :meth:`written`."""
        return {
            key: Cell(c.successes, c.errors, c.inferences, c.executions, dict(c.queue), dict(c.compute),
                      dict(c.batches), c.queue_ns, c.compute_ns)
            for key, c in self.cells.items()
            if c.changed
        }  # fmt: skip

    def written(self, cells: dict[Key, Cell], now_s: float) -> None:
        """``cells`` (from :meth:`pending`) are stored: unchanged since, they
        need no new write; minutes over two minutes old are closed (no request
        still counts in them) and dropped."""
        for key, copy in cells.items():
            cell = self.cells.get(key)
            if cell is not None and cell.successes == copy.successes and cell.errors == copy.errors:
                cell.changed = False
        oldest = int(now_s // 60) - 2
        for key in [k for k, c in self.cells.items() if k[0] <= oldest and not c.changed]:
            del self.cells[key]
