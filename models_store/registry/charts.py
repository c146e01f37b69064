"""What the charts of the web UI draw, from the per-minute rollups
(:mod:`inference.observability.rollups`, rows of :class:`inference.models.MinuteRollupRow`).

:func:`model_charts` answers the model page's ``charts.json``: over the last
hour (1-minute steps), day (5-minute steps) or week (1-hour steps), per
(version, transport) series: requests (answered and failed) and errors per
step and per second,
queue and compute latency percentiles (p50, p95, p99, milliseconds; from the
steps' summed histograms), executions and the mean batch size; the same for
``all`` (every series together). :func:`sparklines` answers the models
list's: requests per minute over the last hour per model.

See docs/charts.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from inference.models import MinuteRollupRow
from inference.observability.rollups import add_histograms, percentile

#: range name -> (seconds shown, seconds per step)
_ROW_FIELDS = ("minute", "version", "transport", "successes", "errors", "inferences", "executions",
               "queue_histogram", "compute_histogram", "batch_sizes")  # fmt: skip
RANGES = {"hour": (3600, 60), "day": (86400, 300), "week": (7 * 86400, 3600)}
PERCENTILES = (50, 95, 99)


@dataclass
class _Step:
    requests: int = 0  # answered and failed
    errors: int = 0
    inferences: int = 0
    executions: int = 0
    batch_rows: int = 0
    queue: dict = field(default_factory=dict)
    compute: dict = field(default_factory=dict)

    def add(self, row) -> None:
        self.requests += row.successes + row.errors
        self.errors += row.errors
        self.inferences += row.inferences
        self.executions += row.executions
        self.batch_rows += sum(int(size) * count for size, count in row.batch_sizes.items())
        add_histograms(self.queue, row.queue_histogram)
        add_histograms(self.compute, row.compute_histogram)


def _ms(histogram: dict, q: float) -> float | None:
    ns = percentile(histogram, q)
    return None if ns is None else round(ns / 1e6, 4)


def _series(name: str, version: int | None, transport: str, steps: list[_Step], step_seconds: int) -> dict:
    out = {
        "name": name,
        "version": version,
        "transport": transport,
        "requests": [s.requests for s in steps],
        "errors": [s.errors for s in steps],
        "requests_per_second": [round(s.requests / step_seconds, 4) for s in steps],
        "errors_per_second": [round(s.errors / step_seconds, 4) for s in steps],
        "inferences": [s.inferences for s in steps],
        "executions": [s.executions for s in steps],
        "mean_batch_size": [round(s.batch_rows / s.executions, 3) if s.executions else None for s in steps],
        "total_requests": sum(s.requests for s in steps),
        "total_errors": sum(s.errors for s in steps),
    }
    for kind in ("queue", "compute"):
        for q in PERCENTILES:
            out[f"{kind}_p{q}_ms"] = [_ms(getattr(s, kind), q) for s in steps]
    return out


def model_charts(model_name: str, range_name: str, now_s: float | None = None) -> dict:
    """The charts of ``model_name`` over ``range_name`` (``hour``, ``day``,
    ``week``; ValueError otherwise) ending at ``now_s`` (default now): step
    start times (``times``, seconds since the epoch), and ``series`` (one per
    (version, transport) that has traffic, named "v<version> <transport>",
    then ``all``), each with lists aligned with ``times``."""
    if range_name not in RANGES:
        raise ValueError(f"unknown range '{range_name}': one of {', '.join(RANGES)}")
    span, step = RANGES[range_name]
    now_s = time.time() if now_s is None else now_s
    end = (int(now_s) // step + 1) * step  # the end of the current step
    start = end - span
    count = span // step
    rows = MinuteRollupRow.objects.filter(model_name=model_name, minute__gte=start // 60, minute__lt=end // 60).only(
        *_ROW_FIELDS
    )
    by_series: dict[tuple[int, str], list[_Step]] = {}
    everything = [_Step() for _ in range(count)]
    for row in rows:
        index = (row.minute * 60 - start) // step
        steps = by_series.get((row.version, row.transport))
        if steps is None:
            steps = by_series[(row.version, row.transport)] = [_Step() for _ in range(count)]
        steps[index].add(row)
        everything[index].add(row)
    series = [_series(f"v{v} {t}", v, t, steps, step) for (v, t), steps in sorted(by_series.items())]
    series.append(_series("all", None, "", everything, step))
    return {
        "model": model_name,
        "range": range_name,
        "step_seconds": step,
        "start": start,
        "end": end,
        "times": [start + i * step for i in range(count)],
        "series": series,
    }


def sparklines(model_names: list[str], now_s: float | None = None) -> dict[str, list[int]]:
    """Requests (answered and failed) per minute over the last hour, oldest first, per model name."""
    now_s = time.time() if now_s is None else now_s
    last = int(now_s) // 60
    first = last - 59
    lines = {name: [0] * 60 for name in model_names}
    rows = MinuteRollupRow.objects.filter(model_name__in=model_names, minute__gte=first, minute__lte=last)
    for name, minute, successes, errors in rows.values_list("model_name", "minute", "successes", "errors"):
        lines[name][minute - first] += successes + errors
    return lines
