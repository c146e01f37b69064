"""Triton's inference metrics, with Triton's names, labels, units and meaning
(Triton 2.5x, ``docs/user_guide/metrics.md``), derived at scrape time from the
counters the statistics extension keeps (:mod:`inference.observability.statistics`),
so that they agree exactly with ``GET /v2/models/<m>/stats`` of the same
machine: each is a cumulative counter per model version, labels ``model`` and
``version`` (``nv_inference_request_failure`` also ``reason``), written as
Triton's Prometheus library writes them (no ``_total`` suffix):

========================================== ==================================================
``nv_inference_request_success``          requests answered (cache hits too): ``success.count``
``nv_inference_request_failure{reason}``   failed requests by reason (REJECTED, CANCELED,
                                           BACKEND, OTHER; see
                                           :func:`~inference.observability.statistics.failure_reason`);
                                           the four add up to ``fail.count``
``nv_inference_count``                     inferences (batch rows; no cache hits): ``inference_count``
``nv_inference_exec_count``                model executions (a dynamic batch is one): ``execution_count``
``nv_inference_request_duration_us``       ``success.ns`` // 1000 (cache hits included)
``nv_inference_queue_duration_us``         ``queue.ns`` // 1000
``nv_inference_compute_input_duration_us`` ``compute_input.ns`` // 1000 (and ``_infer_``, ``_output_``)
``nv_cache_num_hits_per_model``            ``cache_hit.count``; ``nv_cache_hit_duration_per_model``: its ns // 1000
``nv_cache_num_misses_per_model``          ``cache_miss.count``; ``nv_cache_miss_duration_per_model``: its ns // 1000
========================================== ==================================================

Like Triton, every served version has its series from the start (zeros), the
four failure reasons each, and the ``nv_cache_*`` series only for models with
the response cache on (or with cache counts). Values are this machine's
(every server process of it; Triton's metrics are one server's): a
Prometheus that scrapes every machine sums them to what the statistics
extension answers across machines. ``nv_inference_pending_request_count`` is
a gauge of the request path (:func:`inference.observability.metrics.pending`).
Triton's CPU metrics come from ``/proc`` (:class:`HostMetrics`); its GPU and
pinned-memory metrics and its optional summaries and histograms are not exported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from inference.observability import statistics_local as local
from inference.observability.statistics import BACKEND, CANCELED, FAILURE_REASONS, OTHER, REJECTED

_I = local.INDEX

#: (name, help, the counter of a version it reads, its divisor: 1000 from ns to µs), in Triton's order and words.
_REQUEST_FAMILIES = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes", "success_count", 1),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)", "inference_count", 1),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)",
     "execution_count", 1),
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)", "success_ns", 1000),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)", "queue_ns", 1000),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)", "compute_input_ns", 1000),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)", "compute_infer_ns",
     1000),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached requests)",
     "compute_output_ns", 1000),
)  # fmt: skip
_CACHE_FAMILIES = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", "cache_hit_count", 1),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds", "cache_hit_ns", 1000),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", "cache_miss_count", 1),
    ("nv_cache_miss_duration_per_model", "Total cache miss (insert+lookup) duration per model, in microseconds",
     "cache_miss_ns", 1000),
)  # fmt: skip
_FAILURE = ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes")
_REASON_FIELDS = {REJECTED: "fail_rejected_count", CANCELED: "fail_canceled_count", BACKEND: "fail_backend_count"}


def failures(counters) -> dict[str, int]:
    """A version's failed requests by Triton's reason (OTHER: the failures no other reason counts)."""
    by_reason = {reason: int(counters[_I[field]]) for reason, field in _REASON_FIELDS.items()}
    by_reason[OTHER] = int(counters[_I["fail_count"]]) - sum(by_reason.values())
    return {reason: by_reason[reason] for reason in FAILURE_REASONS}


class TritonMetrics:
    """Renders Triton's metrics from ``counters()`` (a StatisticsRecorder's
    :meth:`~inference.observability.statistics.StatisticsRecorder.machine_counters`)
    and ``versions()``: the served versions, (model, version number, response
    cache on) triples, which have series before their first request."""

    def __init__(self, counters: Callable[[], dict], versions: Callable[[], Iterable[tuple[str, int, bool]]]):
        self.counters = counters
        self.versions = versions

    def render(self) -> bytes:
        """The exposition text of the families in the module doc (Prometheus text format 0.0.4)."""
        totals = self.counters()
        zero = [0] * local.WIDTH
        cached: dict[tuple[str, int], bool] = {}
        for model, number, cache in self.versions():
            cached[(model, number)] = cache
        for model, number, size in totals:
            if size == 0:
                counters = totals[(model, number, 0)]
                hits = counters[_I["cache_hit_count"]] or counters[_I["cache_miss_count"]]
                cached[(model, number)] = cached.get((model, number), False) or bool(hits)
        keys = sorted(cached)
        lines: list[str] = []

        def family(name: str, help_text: str, samples: Iterable[tuple[str, int]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} counter")
            lines.extend(f"{name}{{{labels}}} {int(value)}" for labels, value in samples)

        def labels(model: str, number: int, reason: str = "") -> str:
            more = f',reason="{reason}"' if reason else ""
            return f'model="{_escape(model)}"{more},version="{number}"'

        def counters(spec: tuple, versions: list) -> None:
            name, help_text, field, divisor = spec
            at = _I[field]
            family(name, help_text, ((labels(*k), totals.get((*k, 0), zero)[at] // divisor) for k in versions))

        counters(_REQUEST_FAMILIES[0], keys)
        family(*_FAILURE, (
            (labels(*k, reason), n) for k in keys for reason, n in failures(totals.get((*k, 0), zero)).items()
        ))  # fmt: skip
        for spec in _REQUEST_FAMILIES[1:]:
            counters(spec, keys)
        with_cache = [k for k in keys if cached[k]]
        for spec in _CACHE_FAMILIES if with_cache else ():
            counters(spec, with_cache)
        return ("\n".join(lines) + "\n").encode()


class HostMetrics:
    """Triton's CPU metrics of the machine, read from ``/proc`` (Linux) at each
    scrape: ``nv_cpu_utilization`` (busy share of all cores since this
    process's previous scrape, 0..1: user, nice, system, irq, softirq and
    steal time over those and idle and iowait, as Triton computes it; 0 at
    the first scrape), ``nv_cpu_memory_total_bytes`` and
    ``nv_cpu_memory_used_bytes`` (MemTotal - MemAvailable). Nothing where
    ``/proc`` cannot be read."""

    def __init__(self, proc: str = "/proc"):
        self.proc = proc
        self._last: tuple[int, int] | None = None  # (busy, idle) jiffies at the previous scrape
        self._lock = threading.Lock()

    def render(self) -> bytes:
        try:
            with open(f"{self.proc}/stat") as stat:
                first = stat.readline().split()
            with open(f"{self.proc}/meminfo") as meminfo:
                memory = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo if line.count(":") == 1}
            user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in first[1:9])
            total, available = memory["MemTotal"], memory["MemAvailable"]
        except (OSError, ValueError, KeyError, IndexError):
            return b""
        busy, idle_time = user + nice + system + irq + softirq + steal, idle + iowait
        with self._lock:
            last, self._last = self._last, (busy, idle_time)
        share = 0.0
        if last is not None:
            busy_delta, idle_delta = max(0, busy - last[0]), max(0, idle_time - last[1])
            share = busy_delta / (busy_delta + idle_delta) if busy_delta + idle_delta else 0.0
        lines = []
        for name, help_text, number in (
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", repr(share)),
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", str(total)),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", str(max(0, total - available))),
        ):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {number}"]
        return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    """A label value as the text format writes it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
