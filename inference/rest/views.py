"""V2 REST endpoints (seed 002) and Triton's extensions (model repository,
model configuration, statistics): thin DRF views over the DataPlane.

Each view decodes with the codecs, calls one DataPlane method, and encodes
the answer; errors go through :func:`inference.rest.exceptions.exception_handler`.
Model not ready answers 503 with ``{"error", "name", "ready": false}``.
"""

from __future__ import annotations

import time

from django.http import HttpResponse
from rest_framework.views import APIView

from inference import observability
from inference.auth import authorize, bearer_token
from inference.codecs import message
from inference.dataplane import get_dataplane
from inference.protocol.errors import InvalidInput, ModelNotReady
from inference.protocol.types import InferenceRequest, MetadataTensor
from inference.rest import compression
from inference.rest.exceptions import error_response, exception_handler
from inference.rest.parsers import FirstChoiceNegotiation, InferenceRequestParser, read_body
from inference.rest.renderers import inference_response, json_response


class ProtocolView(APIView):
    """Base of the protocol views: no authentication, throttling or content
    negotiation work, protocol errors as ``{"error": ...}``."""

    authentication_classes: list = []
    permission_classes: list = []
    throttle_classes: list = []
    content_negotiation_class = FirstChoiceNegotiation
    parser_classes = [InferenceRequestParser]

    @property
    def dataplane(self):
        return get_dataplane()

    def get_exception_handler(self):
        return exception_handler

    # The protocol views use no authentication classes, permissions,
    # throttling, versioning or content negotiation: skip DRF's per-request
    # steps for them (access control is inference/auth.py).
    def initial(self, request, *args, **kwargs):
        pass

    @property
    def default_response_headers(self):
        return {}


def _tensors(tensors: tuple[MetadataTensor, ...]) -> list[dict]:
    return [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in tensors]


class ServerMetadataView(ProtocolView):
    """GET /v2 -> ``$metadata_server_response``."""

    def get(self, request):
        meta = self.dataplane.server_metadata()
        return json_response({"name": meta.name, "version": meta.version, "extensions": meta.extensions})


class ServerLiveView(ProtocolView):
    """GET /v2/health/live -> 200 ``{"live": true}``."""

    def get(self, request):
        return json_response({"live": self.dataplane.live()})


class ServerReadyView(ProtocolView):
    """GET /v2/health/ready -> 200 ``{"ready": true}``, or 503 while not ready."""

    def get(self, request):
        if self.dataplane.ready():
            return json_response({"ready": True})
        return error_response(503, "the server is not ready: the model registry is not loaded", ready=False)


class ModelReadyView(ProtocolView):
    """GET /v2/models/<m>[/versions/<v>]/ready -> 200 ``{"name", "ready": true}``;
    503 when not ready; 404 for an unknown model or version."""

    def get(self, request, model_name, model_version=None):
        try:
            self.dataplane.registry.resolve(model_name, model_version)
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


#: HTTP status -> the outcome label of metrics and request logs.
OUTCOMES = {
    200: "success",
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    413: "resource_exhausted",
    415: "invalid_argument",
    501: "unimplemented",
    503: "unavailable",
    504: "deadline_exceeded",
}


class ObservedView(ProtocolView):
    """Records every POST in metrics and the request log (inference/observability.py)."""

    protocol = "rest"
    version_entry = None
    request_id = None

    def dispatch(self, request, *args, **kwargs):
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        started = time.perf_counter()
        response = super().dispatch(request, *args, **kwargs)
        entry = self.version_entry
        observability.observe(
            self.protocol,
            entry.model_name if entry else "",
            str(entry.number) if entry else "",
            OUTCOMES.get(response.status_code, "internal"),
            time.perf_counter() - started,
            int(request.META.get("CONTENT_LENGTH") or 0),
            len(response.content),
            response.status_code,
            self.request_id or request.META.get("HTTP_X_REQUEST_ID"),
        )
        return response


class InferView(ObservedView):
    """POST /v2/models/<m>[/versions/<v>]/infer: JSON or binary tensor data in,
    JSON or JSON + binary out (seeds 000, 001, 002); gzip/deflate both ways."""

    def post(self, request, model_name, model_version=None):
        authorize(bearer_token(request.META.get("HTTP_AUTHORIZATION")), model_name)
        self.version_entry = self.dataplane.model_version(model_name, model_version)  # 404/503 before the body
        infer_request = request.data
        if not isinstance(infer_request, InferenceRequest):
            raise InvalidInput("the request body is empty; it must hold an inference request")
        self.request_id = infer_request.id
        response = self.dataplane.infer(infer_request)
        binary_default = bool(infer_request.parameters.get("binary_data_output", False))
        body, header_length = message.encode_response(response, infer_request.outputs, binary_default)
        coding = compression.choose(request.META.get("HTTP_ACCEPT_ENCODING"))
        if coding is None:
            return inference_response(body, header_length)
        http_response = inference_response(compression.compress(body, coding), header_length)
        http_response["Content-Encoding"] = coding
        http_response["Vary"] = "Accept-Encoding"
        return http_response


def _json_object(request) -> dict:
    """An optional JSON object body (repository API); {} when empty."""
    body = read_body(request._request, allow_empty=True)
    if not body.strip():
        return {}
    doc = message.load_json(body)
    if not isinstance(doc, dict):
        raise InvalidInput("the request body must be a JSON object")
    return doc


def _parameters(doc: dict) -> dict:
    params = doc.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    return params


class RepositoryIndexView(ProtocolView):
    """POST /v2/repository/index, optional ``{"ready": bool}``: every model
    version as ``{"name", "version", "state", "reason"}``."""

    def post(self, request):
        doc = _json_object(request)
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput("'ready' must be a boolean")
        entries = []
        for e in self.dataplane.repository_index(ready):
            item = {"name": e.name, "version": e.version, "state": e.state}
            if e.reason:
                item["reason"] = e.reason
            entries.append(item)
        return json_response(entries)


class RepositoryLoadView(ProtocolView):
    """POST /v2/repository/models/<m>/load: serve the model again in every process."""

    def post(self, request, model_name):
        self.dataplane.load(model_name, _parameters(_json_object(request)))
        return HttpResponse(status=200)


class RepositoryUnloadView(ProtocolView):
    """POST /v2/repository/models/<m>/unload (``unload_dependents`` accepted):
    stop serving it in every process; stored versions stay."""

    def post(self, request, model_name):
        self.dataplane.unload(model_name, _parameters(_json_object(request)))
        return HttpResponse(status=200)


class ModelConfigView(ProtocolView):
    """GET /v2/models/<m>[/versions/<v>]/config: Triton's model configuration."""

    def get(self, request, model_name, model_version=None):
        return json_response(self.dataplane.model_config(model_name, model_version))


def statistics_json(stats) -> dict:
    """Triton's statistics JSON (``{"model_stats": [...]}``)."""

    def duration(d):
        return {"count": d.count, "ns": d.ns}

    empty = {"count": 0, "ns": 0}
    return {
        "model_stats": [
            {
                "name": s.name,
                "version": s.version,
                "last_inference": s.last_inference,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {
                    **{stage: duration(d) for stage, d in s.stages.items()},
                    "cache_hit": empty,
                    "cache_miss": empty,
                },
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
        return json_response(statistics_json(self.dataplane.model_statistics(model_name, model_version)))


def metrics_view(request):
    """GET /metrics: Prometheus exposition (all server processes)."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return HttpResponse(observability.render_metrics(), content_type=CONTENT_TYPE_LATEST)
