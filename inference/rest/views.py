"""V2 REST endpoints (seed 002): thin DRF views over the DataPlane.

Each view decodes with the codecs, calls one DataPlane method, and encodes
the answer; errors go through :func:`inference.rest.exceptions.exception_handler`.
Model not ready answers 503 with ``{"error", "name", "ready": false}``.
"""

from __future__ import annotations

from rest_framework.views import APIView

from inference.auth import authorize, bearer_token
from inference.codecs import message
from inference.dataplane import get_dataplane
from inference.protocol.errors import InvalidInput, ModelNotReady
from inference.protocol.types import InferenceRequest, MetadataTensor
from inference.rest.exceptions import error_response, exception_handler
from inference.rest.parsers import FirstChoiceNegotiation, InferenceRequestParser
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


class InferView(ProtocolView):
    """POST /v2/models/<m>[/versions/<v>]/infer: JSON or binary tensor data in,
    JSON or JSON + binary out (seeds 000, 001, 002)."""

    def post(self, request, model_name, model_version=None):
        authorize(bearer_token(request.META.get("HTTP_AUTHORIZATION")), model_name)
        self.version_entry = self.dataplane.model_version(model_name, model_version)  # 404/503 before the body
        infer_request = request.data
        if not isinstance(infer_request, InferenceRequest):
            raise InvalidInput("the request body is empty; it must hold an inference request")
        response = self.dataplane.infer(infer_request)
        binary_default = bool(infer_request.parameters.get("binary_data_output", False))
        body, header_length = message.encode_response(response, infer_request.outputs, binary_default)
        return inference_response(body, header_length)
