"""What the servers report: OpenTelemetry traces, payload logging, the
request log, inference statistics and the charts' per-minute rollups."""

from __future__ import annotations

from hosting.settings.base import env

# --- Tracing (inference/observability/tracing.py) ------------------------------------------------
#: OpenTelemetry traces go to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318,
#: Jaeger's); empty: tracing is off and costs nothing. The exporter also reads the
#: other OTEL_EXPORTER_OTLP_* variables (headers, timeout, ...).
OTEL_EXPORTER_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_SERVICE_NAME = env.str("OTEL_SERVICE_NAME", default="modelhost")
#: Spans also (or only) as JSON lines in this file: a collector stand-in for tests and debugging.
TRACE_SPAN_FILE = env.str("TRACE_SPAN_FILE", default="")

# --- Payload logging (inference/observability/payload_log.py) -----------------------------------
#: Where models that opt in (payload_log_rate) send their sampled request/response
#: pairs: a file path (JSON lines) or an http(s):// URL (one POST per pair); empty: nowhere.
PAYLOAD_LOG_SINK = env.str("PAYLOAD_LOG_SINK", default="")
#: Pairs waiting for the sink per process; beyond, pairs are dropped (and counted).
PAYLOAD_LOG_QUEUE = env.int("PAYLOAD_LOG_QUEUE", default=1000)

#: Level of the one-line-per-request log (logger inference.request); DEBUG keeps
#: it quiet under LOG_LEVEL=INFO.
REQUEST_LOG_LEVEL = env.str("REQUEST_LOG_LEVEL", default="DEBUG")
#: Serve /metrics (ours and Triton's, docs/metrics.md); ``serve --allow-metrics false`` sets it false.
METRICS_ENABLED = env.bool("METRICS_ENABLED", default=True)
#: How often each process adds its inference statistics to the database (s).
STATISTICS_FLUSH_SECONDS = env.float("STATISTICS_FLUSH_SECONDS", default=1.0)
# --- Charts (inference/observability/rollups.py, docs/charts.md) ----------------------------------
#: Count per-minute rollups of requests, errors, latencies and batch sizes for the charts.
CHART_ROLLUPS = env.bool("CHART_ROLLUPS", default=True)
#: How often each process writes its open minutes to the database (s; at most a
#: minute's worth of a process's counts is lost when it is killed).
CHART_FLUSH_SECONDS = env.float("CHART_FLUSH_SECONDS", default=10.0)
#: Minutes older than this are deleted by the scheduled upkeep (MAINTENANCE_SECONDS).
CHART_RETENTION_DAYS = env.float("CHART_RETENTION_DAYS", default=8.0)
