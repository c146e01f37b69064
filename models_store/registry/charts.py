"""What the charts of the web UI draw, from the per-minute rollups
(:mod:`inference.observability.rollups`, rows of :class:`inference.models.MinuteRollupRow`).

:func:`model_charts` answers the model page's ``charts.json``: over the last
hour (1-minute steps), day (5-minute steps) or week (1-hour steps), per
(version, transport) series: requests (answered and failed) and errors per
step and per second,
queue and compute latency percentiles (p50, p95, p99, milliseconds; from the
steps' summed histograms), executions and the mean batch size; the same for
``all`` (every series together); or over any ``from``/``to`` window
(:func:`custom_window`: the step grows with the span, at most
:data:`MAX_STEPS` steps). :func:`sparklines` answers the models
list's: requests per minute over the last hour per model.

See docs/charts.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from inference.models import MinuteRollupRow
from inference.observability.rollups import add_histograms, percentile
from inference.observability.rollups_db import COMPACT_AFTER_HOURS

#: range name -> (seconds shown, seconds per step)
_ROW_FIELDS = ("minute", "version", "transport", "successes", "errors", "inferences", "executions",
               "queue_histogram", "compute_histogram", "batch_sizes")  # fmt: skip
RANGES = {"hour": (3600, 60), "day": (86400, 300), "week": (7 * 86400, 3600)}
#: A custom window's step: the first of these (seconds) that draws it in at most MAX_STEPS steps.
CUSTOM_STEPS = (60, 300, 900, 3600, 6 * 3600, 86400)
MAX_STEPS = 400
MAX_CUSTOM_SPAN = 400 * 86400  # seconds: a little over a year of daily steps
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


def parse_time(text: str, name: str) -> int:
    """A ``from``/``to`` parameter: seconds since the epoch, or ISO 8601
    (``2026-11-27T10:00``; UTC unless it names its offset). ValueError naming ``name``."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            raise ValueError(f"{name} is seconds since the epoch or an ISO 8601 time, not {text!r}") from None
        seconds = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    if not 0 <= seconds < 2**40:
        raise ValueError(f"{name} is out of range")
    return int(seconds)


def custom_window(start_s: int, end_s: int, now_s: float | None = None) -> tuple[int, int, int]:
    """(start, end, step) of a custom window: the step the first of
    :data:`CUSTOM_STEPS` that draws ``start_s``..``end_s`` (seconds) in at
    most :data:`MAX_STEPS` steps, and at least an hour when the window
    reaches back past the minutes the upkeep folds into hours (older than
    COMPACT_AFTER_HOURS before ``now_s``, default now), the window widened
    to whole steps. ValueError when ``end_s`` is not after ``start_s`` or
    the span exceeds :data:`MAX_CUSTOM_SPAN`."""
    if end_s <= start_s:
        raise ValueError("to must be after from")
    if end_s - start_s > MAX_CUSTOM_SPAN:
        raise ValueError(f"a custom range spans at most {MAX_CUSTOM_SPAN // 86400} days")
    now_s = time.time() if now_s is None else now_s
    least = 3600 if start_s < now_s - COMPACT_AFTER_HOURS * 3600 else 60  # hour rows: rollups_db.compact
    step = next(s for s in CUSTOM_STEPS if (end_s - start_s) / s <= MAX_STEPS and s >= least)
    start = start_s // step * step
    end = -(-end_s // step) * step
    return start, end, step


def window(params, now_s: float | None = None) -> tuple[str, int, int, int]:
    """(range name, start, end, step) from query parameters: ``from`` and
    ``to`` (both; :func:`parse_time`) for a custom window (range ``custom``),
    else ``range`` (``hour`` by default, ``day``, ``week``) ending with the
    current step. ValueError for an unknown range, one of from/to alone, or a bad window."""
    start_text, end_text = params.get("from", "").strip(), params.get("to", "").strip()
    if start_text or end_text:
        if not (start_text and end_text):
            raise ValueError("a custom range needs both from and to")
        return ("custom", *custom_window(parse_time(start_text, "from"), parse_time(end_text, "to"), now_s))
    range_name = params.get("range", "hour")
    if range_name not in RANGES:
        raise ValueError(f"unknown range '{range_name}': one of {', '.join(RANGES)}, or from and to")
    span, step = RANGES[range_name]
    now_s = time.time() if now_s is None else now_s
    end = (int(now_s) // step + 1) * step  # the end of the current step
    return range_name, end - span, end, step


def model_charts(
    model_name: str, range_name: str = "hour", now_s: float | None = None, *, params=None, version: int | None = None
) -> dict:
    """The charts of ``model_name`` over ``range_name`` (``hour``, ``day``,
    ``week``; ValueError otherwise) ending at ``now_s`` (default now), or
    over the window of query ``params`` when given (:func:`window`): step
    start times (``times``, seconds since the epoch), and ``series`` (one per
    (version, transport) that has traffic, named "v<version> <transport>",
    then ``all``), each with lists aligned with ``times``. ``version``: only
    that version's traffic."""
    range_name, start, end, step = window(params if params is not None else {"range": range_name}, now_s)
    count = (end - start) // step
    rows = MinuteRollupRow.objects.filter(model_name=model_name, minute__gte=start // 60, minute__lt=end // 60)
    if version is not None:
        rows = rows.filter(version=version)
    rows = rows.only(*_ROW_FIELDS)
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
