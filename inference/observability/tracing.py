"""OpenTelemetry traces of inferences.

**Off unless configured.** The composition root calls :func:`configure` when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (or ``TRACE_SPAN_FILE``, a JSON-lines
file exporter for tests and debugging); until then :data:`ENABLED` is False
and every helper here returns at its first line: no span, no context, no
propagation header. Spans go to the OTLP/HTTP exporter in batches.

**One trace per inference**, parented to the client's W3C ``traceparent``
(HTTP header, gRPC metadata), with these spans::

    infer <model>            SERVER, the front end (attributes: model, version, protocol)
      decode                 the request's codec
      run                    the executor (in worker mode: the frame's round trip)
        worker <device>      SERVER, the inference worker (worker mode; parented through the frame header)
          queue wait         waiting for a model instance or a batch
          batch formation    concatenating a dynamic batch's inputs (batching models)
          session.run        ONNX Runtime
      encode                 the response's codec

The worker mode carries the context in the frame header (``traceparent``),
only for sampled requests. Queue wait, batch formation and session.run are
recorded after the fact from the runner's own timings (RunResult), so the
runner needs no tracing code.

**Sampling** follows the trace settings (:mod:`inference.runtime_settings`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

from inference import runtime_settings

logger = logging.getLogger(__name__)

#: True once configure() ran: the guard of every helper (tracing off costs one attribute read).
ENABLED = False

_service = "modelhost"
_provider = None
_tracer = None
_lock = threading.Lock()


class _Noop:
    """The context manager of a span not made."""

    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


NOOP = _Noop()


def configure(service: str, exporters: list) -> None:
    """Turn tracing on in this process: a tracer provider (the global one, so
    that the Django, Celery and gRPC instrumentations use it too) with one
    processor per exporter factory (``() -> (exporter, immediate)``:
    immediate ones export each span as it ends, the others in batches from a
    thread the SDK restarts in forked children)."""
    global ENABLED, _service, _provider, _tracer
    if not exporters:
        return
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    with _lock:
        if _provider is None:
            _service = service
            # The trace settings decide for inferences (inference_span); a client's
            # traceparent that did not sample may still be traced (trace_rate).
            sampler = ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON)
            provider = TracerProvider(resource=Resource.create({"service.name": service}), sampler=sampler)
            for make in exporters:
                exporter, immediate = make()
                provider.add_span_processor(
                    SimpleSpanProcessor(exporter) if immediate else BatchSpanProcessor(exporter)
                )
            trace.set_tracer_provider(provider)
            _provider = provider
            _tracer = provider.get_tracer("modelhost")
        ENABLED = True


def tracer():
    """This process's tracer."""
    return _tracer


def provider():
    return _provider


def file_exporter(path: str):
    """A span exporter appending each span as one JSON line to ``path``
    (``TRACE_SPAN_FILE``: a collector stand-in for tests and debugging)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class FileSpanExporter(SpanExporter):
        def export(self, spans) -> SpanExportResult:
            lines = "".join(json.dumps(json.loads(span.to_json())) + "\n" for span in spans)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    return FileSpanExporter()


def _propagator():
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def inference_span(protocol: str, model: str, traceparent: str | None, tracestate: str | None = None):
    """The root span of one inference (a context manager; NOOP when tracing is
    off or the request is not sampled): a child of the client's
    ``traceparent``."""
    if not ENABLED:
        return NOOP
    from opentelemetry import trace

    context = None
    client_sampled = False
    if traceparent:
        carrier = {"traceparent": traceparent}
        if tracestate:
            carrier["tracestate"] = tracestate
        context = _propagator().extract(carrier)
        parent = trace.get_current_span(context).get_span_context()
        client_sampled = parent.is_valid and parent.trace_flags.sampled
    settings = runtime_settings.installed()
    if settings is not None and not settings.sample(model, client_sampled):
        return NOOP
    return tracer().start_as_current_span(
        f"infer {model}",
        context=context,
        kind=trace.SpanKind.SERVER,
        attributes={"model": model, "protocol": protocol},
    )


def recording() -> bool:
    """Whether the current span records (this request is traced)."""
    if not ENABLED:
        return False
    from opentelemetry import trace

    return trace.get_current_span().is_recording()


def step(name: str, **attributes):
    """A child span of the current one (NOOP unless this request is traced)."""
    if not ENABLED or not recording():
        return NOOP
    return tracer().start_as_current_span(name, attributes=attributes or None)


def in_step(name: str, function, *args):
    """``function(*args)`` inside :func:`step` ``name``; called directly,
    without even a no-op span, while tracing is off (the hot path's steps)."""
    if not ENABLED:
        return function(*args)
    with step(name):
        return function(*args)


def annotate(**attributes) -> None:
    """Set attributes on the current span (when traced)."""
    if ENABLED and recording():
        from opentelemetry import trace

        trace.get_current_span().set_attributes({k: v for k, v in attributes.items() if v is not None})


def traceparent() -> str | None:
    """The W3C traceparent of the current span, when traced (for the worker frame)."""
    if not ENABLED or not recording():
        return None
    carrier: dict = {}
    _propagator().inject(carrier)
    return carrier.get("traceparent")


def remote_span(name: str, traceparent_value: str | None, **attributes):
    """A worker's span under the front end's ``traceparent`` (NOOP without one)."""
    if not ENABLED or not traceparent_value:
        return NOOP
    from opentelemetry import trace

    context = _propagator().extract({"traceparent": traceparent_value})
    return tracer().start_as_current_span(name, context=context, kind=trace.SpanKind.SERVER, attributes=attributes)


def record_run(started_ns: int, queue_ns: int, form_ns: int, infer_ns: int, batch_size: int) -> None:
    """Queue wait, batch formation and session.run as children of the current
    span, from the runner's timings; ``started_ns``: epoch ns when the run was
    asked for."""
    if not ENABLED or not recording():
        return
    t = tracer()
    queue_end = started_ns + queue_ns
    t.start_span("queue wait", start_time=started_ns).end(end_time=queue_end)
    run_start = queue_end
    if form_ns:
        span = t.start_span("batch formation", start_time=queue_end, attributes={"batch_size": batch_size})
        span.end(end_time=queue_end + form_ns)
        run_start = queue_end + form_ns
    span = t.start_span("session.run", start_time=run_start, attributes={"batch_size": batch_size})
    span.end(end_time=run_start + infer_ns)


def epoch_ns() -> int:
    return time.time_ns()


def traced_run(executor, entry, job):
    """``executor.run`` of a checked job (:class:`inference.requests.jobs.Job`) of
    model version ``entry`` under a ``run`` span; in process, with the
    runner's queue wait, batch formation and session.run (a worker records
    its own). Returns the RunResult."""
    annotate(version=str(entry.number))
    with step("run", model=entry.model_name, version=str(entry.number)):
        asked = epoch_ns()
        run = executor.run(
            entry.target, job.feeds, job.names, job.rows, job.deadline, entry.instance_group, **job.options
        )
        if not executor.remote:
            record_run(asked, run.queue_ns, run.form_ns, run.infer_ns, run.batch_size)
    return run
