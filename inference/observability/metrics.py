"""Per-request observability shared by every transport: Prometheus metrics and
one structured log line per request (never tensor contents).

Metrics (``prometheus_client``; multiprocess mode when
``PROMETHEUS_MULTIPROC_DIR`` is set, which ``manage.py serve`` does so that
REST workers and the gRPC process add up):

- ``modelhost_inference_requests_total{model, version, protocol, outcome}``
- ``modelhost_inference_request_duration_seconds{model, version, protocol, outcome}`` (histogram)
- ``modelhost_inference_request_bytes_total{protocol, direction}`` (REST and
  TF Serving: bodies; gRPC: raw tensor contents of requests decoded)
- ``modelhost_model_load_duration_seconds{model, version}`` (histogram)
- ``modelhost_loaded_sessions`` (gauge, summed over live processes)
- ``modelhost_model_evictions_total{model, version}`` (versions unloaded for
  the memory budget), ``modelhost_session_memory_charged_bytes`` (gauge,
  summed over live processes: what the loaded versions took, see
  inference/runtime/residency.py), ``modelhost_model_load_wait_seconds{kind}``
  (histogram: how long requests waited for a load; ``kind`` ``resident`` or
  ``transient``, a version run outside the budget)
- ``modelhost_worker_queue_depth{queue}`` (gauge, worker mode: requests the
  device's workers hold, running or waiting for a model instance, as their
  heartbeats report)
- ``modelhost_worker_busy_fraction{queue, worker, host, pool}`` (gauge,
  worker mode: each live worker's busy fraction over its last 10 s, 0..1,
  from its heartbeat; see inference/workers/server/runtime.py BusyMeter); only live workers
  appear. ``pool`` is the worker's WORKER_POOL (e.g. its Deployment)
- ``modelhost_workers{queue, pool}`` (gauge, worker mode: live workers)
- ``modelhost_worker_pool_depth{pool}`` (gauge, worker mode: requests held
  by the workers of a pool, as ``modelhost_worker_queue_depth`` per queue)
- ``modelhost_throttled_requests_total{team, limit}`` (requests refused by a
  rate limit or an in-flight cap; inference/admission/ratelimit.py)
- ``modelhost_payload_log_records_total{outcome}`` (payload logging:
  ``written``, ``dropped`` when its queue is full, ``failed``)
- ``modelhost_shadow_requests_total{model, version, outcome}`` (shadow
  traffic, ``version`` the shadow version: ``compared``, ``error``,
  ``dropped`` when the shadow queue is full, ``busy`` when not run under
  load; inference/shadow/traffic.py)

- ``nv_inference_pending_request_count{model, version}`` (gauge, summed over
  live processes: Triton's pending requests, here the requests of a version
  waiting for their turn at its seats, :mod:`inference.admission.fair_share`)

An ensemble's composing models count a request for each step they run in
``modelhost_inference_requests_total`` and its histogram, under the
ensemble request's ``protocol`` (Triton counts them too; the ensemble's own
request is counted once by its adapter).

Triton's other metrics (``nv_inference_request_success`` ...) come from the
statistics' counters at scrape time (:mod:`inference.observability.triton_metrics`),
added to this exposition by :func:`add_exposition`.

``outcome`` is ``success`` or the protocol error code in lower case
(``invalid_argument``, ``not_found``, ``unavailable``, ...). Requests for a
model that does not exist are counted under ``model=""`` so that clients
cannot inflate the label set.

The request log line goes to the ``inference.request`` logger at
``REQUEST_LOG_LEVEL`` (default DEBUG, i.e. off under LOG_LEVEL=INFO), as
``key=value`` pairs: protocol, model, version, status, outcome, latency_ms,
bytes_in, bytes_out, id.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

from inference.observability.outage import REFUSALS

request_logger = logging.getLogger("inference.request")

_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Counter("modelhost_inference_requests", "Inference requests", ["model", "version", "protocol", "outcome"])
LATENCY = Histogram(
    "modelhost_inference_request_duration_seconds",
    "Inference request latency inside the server",
    ["model", "version", "protocol", "outcome"],
    buckets=_BUCKETS,
)
BYTES = Counter("modelhost_inference_request_bytes", "Request and response body bytes", ["protocol", "direction"])
LOAD_TIME = Histogram(
    "modelhost_model_load_duration_seconds",
    "Time to create an ONNX Runtime session",
    ["model", "version"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
EVICTIONS = Counter("modelhost_model_evictions", "Versions unloaded for the memory budget", ["model", "version"])
CHARGED_BYTES = Gauge(
    "modelhost_session_memory_charged_bytes", "Memory charged for loaded versions", multiprocess_mode="livesum"
)
LOAD_WAIT = Histogram(
    "modelhost_model_load_wait_seconds",
    "Time requests waited for their model version to load",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
LOADED_SESSIONS = Gauge("modelhost_loaded_sessions", "ONNX Runtime sessions loaded", multiprocess_mode="livesum")
QUEUE_DEPTH = Gauge(
    "modelhost_worker_queue_depth",
    "Requests held by a device's workers, running or waiting (worker mode)",
    ["queue"],
    multiprocess_mode="max",
)

THROTTLED = Counter(
    "modelhost_throttled_requests",
    "Inference requests refused by a rate limit or an in-flight cap",
    ["team", "limit"],
)

PAYLOAD_RECORDS = Counter(
    "modelhost_payload_log_records",
    "Payload log records by outcome: written, dropped (queue full), failed (sink error)",
    ["outcome"],
)

SHADOW_REQUESTS = Counter(
    "modelhost_shadow_requests",
    "Shadow copies of inference requests by outcome: compared, error, dropped (queue full), busy (not run under load)",
    ["model", "version", "outcome"],
)

PENDING = Gauge(
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
    ["model", "version"],
    multiprocess_mode="livesum",
)

_children: dict[tuple, tuple] = {}
_bytes_children: dict[str, tuple] = {}
_level: int | None = None


def _series(model: str, version: str, protocol: str, outcome: str) -> tuple:
    """The request counter's and latency histogram's values of one label set:
    (count, sum, buckets, upper bounds). The values are prometheus_client's
    own (``_value``, ``_sum``, ``_buckets``: a lock and, in multiprocess mode,
    an mmap write each), updated without the children's per-call checks
    (observe's 3.5 us per request in multiprocess mode become 2.8 us;
    prometheus_client is pinned, and tests/inference/test_request_metrics.py
    reads the exposition)."""
    key = (model, version, protocol, outcome)
    series = _children.get(key)
    if series is None:
        counter, histogram = REQUESTS.labels(*key), LATENCY.labels(*key)
        series = _children[key] = (counter._value, histogram._sum, histogram._buckets, histogram._upper_bounds)
    return series


def _count(series: tuple, seconds: float) -> None:
    """One request of ``seconds`` in ``series`` (:func:`_series`): the counter, the histogram's sum and
    the first bucket whose upper bound holds it (as ``Histogram.observe``)."""
    count, total, buckets, bounds = series
    count.inc(1)
    total.inc(seconds)
    buckets[bisect_left(bounds, seconds)].inc(1)


def _bytes(protocol: str) -> tuple:
    """The byte counters' values of ``protocol`` (in, out), as :func:`_series`'s."""
    pair = _bytes_children.get(protocol)
    if pair is None:
        pair = _bytes_children[protocol] = (BYTES.labels(protocol, "in")._value, BYTES.labels(protocol, "out")._value)
    return pair


#: Outcomes summed up in the log while they happen (the server's or its dependencies' trouble, rate limits).
REFUSED = frozenset({"unavailable", "deadline_exceeded", "rate_limited", "internal", "resource_exhausted"})


#: [seconds, requests]: the inference requests answered in this process, their
#: latencies summed and their number. The seconds' growth over an interval
#: divided by the interval is the mean number of requests in flight then
#: (Little's law); the number's, their rate (hosting/processes/affinity.py reads both).
#: Updated without a lock: a lost update under a thread switch only blurs them.
SERVED: list = [0.0, 0]


def observe(
    protocol: str,
    model: str,
    version: str,
    outcome: str,
    seconds: float,
    bytes_in: int,
    bytes_out: int,
    status: int | str = "",
    request_id: str | None = None,
) -> None:
    """Record one inference request (metrics, the log line when enabled, and
    a refused one in the summary of refusals, :data:`outage.REFUSALS`)."""
    SERVED[0] += seconds
    SERVED[1] += 1
    series = _series(model, version, protocol, outcome)
    if outcome in REFUSED:
        REFUSALS.record(outcome.upper(), model)
    _count(series, seconds)
    counted_in, counted_out = _bytes(protocol)
    if bytes_in:
        counted_in.inc(bytes_in)
    if bytes_out:
        counted_out.inc(bytes_out)
    level = _level if _level is not None else _log_level()
    if request_logger.isEnabledFor(level):
        request_logger.log(
            level,
            "protocol=%s model=%s version=%s status=%s outcome=%s latency_ms=%.3f bytes_in=%d bytes_out=%d id=%s",
            protocol,
            model or "-",
            version or "-",
            status,
            outcome,
            seconds * 1e3,
            bytes_in,
            bytes_out,
            request_id or "-",
        )


def count_step(protocol: str, model: str, version: str, outcome: str, seconds: float) -> None:
    """Count one request an ensemble sent to a composing model (``version``
    its pinned version; ``protocol``: the ensemble request's transport;
    ``outcome`` as :func:`observe`'s) in the request counter and histogram;
    no log line or bytes."""
    _count(_series(model, version, protocol, outcome), seconds)


_pending_children: dict[tuple[str, str], object] = {}


def pending(model: str, version: str):
    """The pending-request gauge of a model version (``inc``/``dec`` around its wait; 0 from its first request)."""
    child = _pending_children.get((model, version))
    if child is None:
        child = _pending_children[(model, version)] = PENDING.labels(model, version)
    return child


def throttled(team: str, limit: str) -> None:
    """Count one request refused by a rate limit (``team``: the caller's team,
    ``anonymous``, or "" for none; ``limit``: which, e.g. ``team_rate``,
    ``token_in_flight``, ``anonymous_rate``)."""
    THROTTLED.labels(team, limit).inc()


def _log_level() -> int:
    global _level
    _level = logging.getLevelName(settings.REQUEST_LOG_LEVEL.upper())
    return _level


class _WorkerCollector:
    """Per-worker gauges read from this process's view of the live workers
    at scrape time (so a worker that went away leaves no stale series)."""

    def __init__(self):
        self.view = None  # () -> list of placement.Worker

    def collect(self):
        if self.view is None:
            return
        busy = GaugeMetricFamily(
            "modelhost_worker_busy_fraction",
            "Share of the worker's model instances in use, averaged over its last 10 s (worker mode)",
            labels=["queue", "worker", "host", "pool"],
        )
        count = GaugeMetricFamily("modelhost_workers", "Live inference workers (worker mode)", labels=["queue", "pool"])
        depth = GaugeMetricFamily(
            "modelhost_worker_pool_depth", "Requests held by a pool's workers (worker mode)", labels=["pool"]
        )
        workers: dict[tuple, int] = {}
        depths: dict[str, int] = {}
        for worker in self.view():
            announced = worker.announcement
            pool, fraction, held = announced.pool, announced.busy_fraction, announced.busy
            busy.add_metric([worker.queue, worker.id, announced.host, pool], fraction)
            workers[(worker.queue, pool)] = workers.get((worker.queue, pool), 0) + 1
            depths[pool] = depths.get(pool, 0) + held
        for labels, n in sorted(workers.items()):
            count.add_metric(list(labels), n)
        for pool, n in sorted(depths.items()):
            depth.add_metric([pool], n)
        yield busy
        yield count
        yield depth


_workers = _WorkerCollector()
_workers_registry = CollectorRegistry(auto_describe=False)
_workers_registry.register(_workers)


_expositions: list = []


def add_exposition(render) -> None:
    """Add ``render() -> bytes`` (more exposition text, e.g. Triton's metrics) to :func:`render_metrics`."""
    if render not in _expositions:
        _expositions.append(render)


def watch_workers(view) -> None:
    """Export the live workers ``view()`` returns (worker mode's front ends)."""
    _workers.view = view


def render_metrics() -> bytes:
    """The Prometheus exposition text for this server (all processes in
    multiprocess mode), and the live workers as this process sees them."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY as registry
    text = generate_latest(registry)
    if _workers.view is not None:
        text += generate_latest(_workers_registry)
    for render in _expositions:
        text += render()
    return text


def mark_process_dead(pid: int) -> None:
    """Drop a dead process's live gauges (Prometheus multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)
