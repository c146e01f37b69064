"""V2 REST endpoints (Open Inference Protocol, HTTP/REST:
https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md)
and Triton's extensions (model repository, model configuration, statistics,
shared memory: https://github.com/triton-inference-server/server/blob/main/docs/protocol/):
thin DRF views over the DataPlane and the extensions.

Each view decodes with the codecs, calls one DataPlane method (or one
method of an extension, :mod:`inference.extensions`), and encodes the answer;
errors go through :func:`inference.http.responses.exception_handler`.
Model not ready answers 503 with ``{"error", "name", "ready": false}``.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST

from inference.codecs import message
from inference.dataplane import get_dataplane
from inference.extensions.repository import EncodedIndex
from inference.http import compression
from inference.http.bodies import read_body
from inference.http.responses import error_response, inference_response, json_response
from inference.http.views import DirectPostView, ProtocolView
from inference.observability import metrics as observability
from inference.observability import tracing
from inference.protocol.errors import InvalidInput, ModelNotReady
from inference.protocol.types import MetadataTensor
from inference.rest.parsers import parse_infer_request


def _tensors(tensors: tuple[MetadataTensor, ...]) -> list[dict]:
    return [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in tensors]


class ServerMetadataView(ProtocolView):
    """GET /v2 -> ``$metadata_server_response``."""

    def get(self, request):
        meta = self.dataplane.server_metadata()
        return json_response({"name": meta.name, "version": meta.version, "extensions": meta.extensions})


#: ``Retry-After`` (s) of a 503 from the readiness probe: the registry is retried about this often.
NOT_READY_RETRY_SECONDS = 1


class ServerLiveView(ProtocolView):
    """GET /v2/health/live -> 200 ``{"live": true}``."""

    def get(self, request):
        return json_response({"live": self.dataplane.live()})


class ServerReadyView(ProtocolView):
    """GET /v2/health/ready -> 200 ``{"ready": true}``, or 503 while not ready
    (``Retry-After``: :data:`NOT_READY_RETRY_SECONDS`)."""

    def get(self, request):
        if self.dataplane.ready():
            return json_response({"ready": True})
        response = error_response(503, "the server is not ready: the model registry is not loaded", ready=False)
        response["Retry-After"] = str(NOT_READY_RETRY_SECONDS)
        return response


class ModelReadyView(ProtocolView):
    """GET /v2/models/<m>[/versions/<v>]/ready -> 200 ``{"name", "ready": true}``;
    503 when not ready; 404 for an unknown model or version."""

    def get(self, request, model_name, model_version=None):
        try:
            self.dataplane.resolve(model_name, model_version)
        except ModelNotReady as exc:
            return error_response(503, exc.message, name=model_name, ready=False)
        return json_response({"name": model_name, "ready": True})


class ModelMetadataView(ProtocolView):
    """GET /v2/models/<m>[/versions/<v>] -> ``$metadata_model_response``."""

    def get(self, request, model_name, model_version=None):
        meta = self.dataplane.model_metadata(model_name, model_version)
        return json_response(
            {
                "name": meta.name,
                "versions": meta.versions,
                "platform": meta.platform,
                "inputs": _tensors(meta.inputs),
                "outputs": _tensors(meta.outputs),
            }
        )


class InferView(DirectPostView):
    """POST /v2/models/<m>[/versions/<v>]/infer: JSON or binary tensor data in,
    JSON or JSON + binary out (OIP REST and the binary tensor data extension); gzip/deflate both ways.
    ``post`` gets Django's HttpRequest (:class:`~inference.http.views.DirectPostView`)."""

    def post(self, request, model_name, model_version=None):
        if tracing.ENABLED:  # one trace per sampled request, under the client's traceparent
            meta = request.META
            with tracing.inference_span("rest", model_name, meta.get("HTTP_TRACEPARENT"), meta.get("HTTP_TRACESTATE")):
                return self._infer(request, model_name, model_version)
        return self._infer(request, model_name, model_version)

    def _infer(self, request, model_name, model_version):
        dataplane = self.dataplane
        with dataplane.admit(self.token(request), model_name) as admission:  # 401/403/429 before the body
            served = self.served = dataplane.route(model_name, model_version)  # 404/503 before the body
            infer_request = tracing.in_step("decode", parse_infer_request, request, model_name, model_version, served)
            self.request_id = infer_request.id
            response = dataplane.infer(admission, infer_request, served)
        binary_default = bool(infer_request.parameters.get("binary_data_output", False))
        body, header_length = tracing.in_step(
            "encode", message.encode_response, response, infer_request.outputs, binary_default
        )
        coding = compression.choose(request.META.get("HTTP_ACCEPT_ENCODING"))
        if coding is None:
            return inference_response(body, header_length)
        http_response = inference_response(compression.compress(body, coding), header_length)
        http_response["Content-Encoding"] = coding
        http_response["Vary"] = "Accept-Encoding"
        return http_response


def _json_object(request, deep: bool = False) -> dict:
    """An optional JSON object body (repository API); {} when empty;
    ``deep``: nested to any depth (:func:`message.load_json`)."""
    body = read_body(request._request, allow_empty=True)
    if not body.strip():
        return {}
    doc = message.load_json(body, deep=deep)
    if not isinstance(doc, dict):
        raise InvalidInput("the request body must be a JSON object")
    return doc


def _parameters(doc: dict) -> dict:
    params = doc.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    return params


def _index_json(entries) -> bytes:
    """The repository index's JSON body (``reason`` only where there is one)."""
    items = []
    for e in entries:
        item = {"name": e.name, "version": e.version, "state": e.state}
        if e.reason:
            item["reason"] = e.reason
        items.append(item)
    return message.dumps(items)


class RepositoryIndexView(ProtocolView):
    """POST /v2/repository/index, optional ``{"ready": bool}``: every model
    version as ``{"name", "version", "state", "reason"}`` (Triton's answer:
    one array, unpaginated, as tritonclient reads it). The encoded answer
    is kept while the extension answers with the same index (one registry
    snapshot, every model visible): 10,000 models are encoded once."""

    _encoded = EncodedIndex()  # the shared index's JSON; the class's: one per process

    def post(self, request):
        doc = _json_object(request, deep=True)  # a deep value where the boolean belongs: Triton's text
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput("Invalid value for 'ready': expected a boolean")
        entries = self.extensions.repository.index(ready, self.token(request))
        return HttpResponse(RepositoryIndexView._encoded.encoded(entries, _index_json), content_type="application/json")


class RepositoryLoadView(ProtocolView):
    """POST /v2/repository/models/<m>/load: serve the model again in every
    process (needs a token of the model's team or an operator's)."""

    def post(self, request, model_name):
        self.extensions.repository.load(model_name, _parameters(_json_object(request)), self.token(request))
        return HttpResponse(status=200)


class RepositoryUnloadView(ProtocolView):
    """POST /v2/repository/models/<m>/unload (``unload_dependents`` accepted):
    stop serving it in every process; stored versions stay (needs a token
    like load)."""

    def post(self, request, model_name):
        self.extensions.repository.unload(model_name, _parameters(_json_object(request)), self.token(request))
        return HttpResponse(status=200)


class ModelConfigView(ProtocolView):
    """GET /v2/models/<m>[/versions/<v>]/config: Triton's model configuration."""

    def get(self, request, model_name, model_version=None):
        return json_response(self.extensions.configuration.config(model_name, model_version))


def statistics_json(stats) -> dict:
    """Triton's statistics JSON (``{"model_stats": [...]}``)."""

    def duration(d):
        return {"count": d.count, "ns": d.ns}

    return {
        "model_stats": [
            {
                "name": s.name,
                "version": s.version,
                "last_inference": s.last_inference,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {stage: duration(d) for stage, d in s.stages.items()},
                "batch_stats": [
                    {"batch_size": size, **{stage: duration(d) for stage, d in stages.items()}}
                    for size, stages in s.batch_stats
                ],
            }
            for s in stats
        ]
    }


class ModelStatisticsView(ProtocolView):
    """GET /v2/models[/<m>[/versions/<v>]]/stats, counted across all processes."""

    def get(self, request, model_name=None, model_version=None):
        stats = self.extensions.statistics.model_statistics(model_name, model_version, self.token(request))
        return json_response(statistics_json(stats))


def _region_json(region) -> dict:
    return {"name": region.name, "key": region.key, "offset": region.offset, "byte_size": region.byte_size}


class SystemSharedMemoryStatusView(ProtocolView):
    """GET /v2/systemsharedmemory[/region/<r>]/status: the caller's regions
    as ``[{"name", "key", "offset", "byte_size"}]`` (404 for an unknown one)."""

    def get(self, request, region_name=None):
        regions = self.extensions.shared_memory.status(self.token(request), region_name)
        return json_response([_region_json(r) for r in regions])


class SystemSharedMemoryRegisterView(ProtocolView):
    """POST /v2/systemsharedmemory/region/<r>/register ``{"key", "offset", "byte_size"}``."""

    def post(self, request, region_name):
        doc = _json_object(request)
        self.extensions.shared_memory.register(
            self.token(request), region_name, doc.get("key"), doc.get("offset", 0), doc.get("byte_size")
        )
        return HttpResponse(status=200)


class SystemSharedMemoryUnregisterView(ProtocolView):
    """POST /v2/systemsharedmemory[/region/<r>]/unregister: one region, or all
    of the caller's."""

    def post(self, request, region_name=None):
        self.extensions.shared_memory.unregister(self.token(request), region_name)
        return HttpResponse(status=200)


class CudaSharedMemoryStatusView(ProtocolView):
    """GET /v2/cudasharedmemory[/region/<r>]/status: ``[]`` (not supported)."""

    def get(self, request, region_name=None):
        return json_response(self.extensions.shared_memory.cuda_status(self.token(request), region_name))


class CudaSharedMemoryRegisterView(ProtocolView):
    """POST /v2/cudasharedmemory/region/<r>/register: 400, not supported."""

    def post(self, request, region_name):
        self.extensions.shared_memory.cuda_register(self.token(request), region_name)
        return HttpResponse(status=200)


class CudaSharedMemoryUnregisterView(ProtocolView):
    """POST /v2/cudasharedmemory[/region/<r>]/unregister: nothing to unregister."""

    def post(self, request, region_name=None):
        self.extensions.shared_memory.cuda_unregister(self.token(request), region_name)
        return HttpResponse(status=200)


class TraceSettingView(ProtocolView):
    """GET/POST /v2/trace/setting and /v2/models/<m>/trace/setting: Triton's
    trace extension (sampling of OpenTelemetry traces); operators only."""

    def get(self, request, model_name=None):
        return json_response(self.extensions.settings.trace_settings(self.token(request), model_name))

    def post(self, request, model_name=None):
        update = _json_object(request)
        return json_response(self.extensions.settings.trace_settings(self.token(request), model_name, update))


class LogSettingsView(ProtocolView):
    """GET/POST /v2/logging: Triton's logging extension (log levels of every
    process of the machine); operators only."""

    def get(self, request):
        return json_response(self.extensions.settings.log_settings(self.token(request)))

    def post(self, request):
        return json_response(self.extensions.settings.log_settings(self.token(request), _json_object(request)))


def metrics_view(request):
    """GET /metrics: Prometheus exposition (all server processes): ours and
    Triton's (the data plane built first: it adds Triton's); 404 with
    ``--allow-metrics false`` (METRICS_ENABLED)."""
    if not settings.METRICS_ENABLED:
        return error_response(404, "metrics are disabled (--allow-metrics false)")
    get_dataplane()
    return HttpResponse(observability.render_metrics(), content_type=CONTENT_TYPE_LATEST)
