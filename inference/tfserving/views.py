"""TensorFlow Serving v1 REST API (https://www.tensorflow.org/tfx/serving/api_rest) over the DataPlane.

One DRF view matches TF Serving's own URL grammar, so that a malformed path
gets TF Serving's ``400 Malformed request: <METHOD> <path>``:

- ``GET  /v1/models/<m>[/versions/<v>|/labels/<l>]``           model status
- ``GET  /v1/models/<m>[/versions/<v>|/labels/<l>]/metadata``  signature (GetModelMetadataResponse)
- ``POST /v1/models/<m>[/versions/<v>|/labels/<l>]:predict|:classify|:regress``

Errors are ``{"error": "..."}``: invalid argument 400, not found 404,
unavailable 503 (each error's ``http_status``, inference/protocol/errors.py);
an unknown version label is 400 "Unrecognized servable version label", as
in TF Serving.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.http import HttpResponse

from inference.admission.caller import Admission
from inference.codecs import tfserving as codec
from inference.http.bodies import read_body
from inference.http.responses import json_response
from inference.http.views import DirectPostView
from inference.observability import tracing
from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import InvalidInput, ModelNotFound
from inference.protocol.types import InferenceRequest, RequestedOutput
from inference.serving.snapshot import VersionEntry

_SPEC = r"(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
POST_PATH = re.compile(r"(?i)/v1/models/([^/:]+)" + _SPEC + r":(classify|regress|predict)")
GET_PATH = re.compile(r"(?i)/v1/models(?:/([^/:]+))?" + _SPEC + r"(?:/(metadata))?")

#: Output names preferred for :classify scores and :regress values.
SCORE_NAMES = ("probabilities", "scores", "probability", "output_probability")
VALUE_NAMES = ("variable", "predictions", "outputs", "value")


def _malformed(request) -> InvalidInput:
    return InvalidInput(f"Malformed request: {request.method} {request.path}")


def _pick(outputs, names: tuple[str, ...], accept) -> str | None:
    candidates = [t for t in outputs if t.datatype in ("FP32", "FP64", "FP16") and accept(t.shape)]
    for name in names:
        for tensor in candidates:
            if tensor.name == name:
                return tensor.name
    return candidates[0].name if candidates else None


def _version_status(entry: VersionEntry) -> dict:
    """TF Serving's ModelVersionStatus for a registry version."""
    if entry.serving:
        state, code, message = "AVAILABLE", "OK", ""
    elif entry.state in ("UPLOADED", "VALIDATING", "LOADING"):
        state, code, message = "LOADING", "OK", ""
    elif entry.state == "FAILED":
        state, code, message = "END", "UNKNOWN", entry.reason
    else:  # retired, or READY but not served by the version policy
        state, code, message = "END", "OK", ""
    return {"version": str(entry.number), "state": state, "status": {"error_code": code, "error_message": message}}


def _tensor_info(tensor) -> dict:
    return {
        "dtype": BY_NAME[tensor.datatype].tf,
        "tensor_shape": {"dim": [{"size": str(d), "name": ""} for d in tensor.shape], "unknown_rank": False},
        "name": tensor.name,
    }


class TFServingView(DirectPostView):
    """All of ``/v1/...``; dispatches on TF Serving's path grammar."""

    protocol = "tfserving"
    drawn = False  # the model's traffic split drew the version that answers (the request named none)

    def http_method_not_allowed(self, request, *args, **kwargs):
        raise _malformed(request)

    def _version(self, name: str, version: str | None, label: str | None) -> str | None:
        if label is not None:
            return self.dataplane.version_for_label(name, label)
        return version

    # -- GET: status and metadata ------------------------------------------
    def get(self, request, path=""):
        match = GET_PATH.fullmatch(request.path)
        if match is None:
            raise _malformed(request)
        name, version, label, sub = match.groups()
        if not name:
            raise InvalidInput("Missing model name in request.")
        if sub == "metadata":
            return self._metadata(name, self._version(name, version, label))
        return self._status(name, self._version(name, version, label))

    def _status(self, name: str, version: str | None) -> HttpResponse:
        try:
            versions = self.dataplane.model_versions(name)
        except ModelNotFound:
            raise ModelNotFound(f"Could not find any versions of model {name}") from None
        if version is not None:
            versions = [v for v in versions if str(v.number) == str(int(version))]
            if not versions:
                raise ModelNotFound(f"Could not find version {version} of model {name}")
        return json_response({"model_version_status": [_version_status(v) for v in versions]})

    def _metadata(self, name: str, version: str | None) -> HttpResponse:
        entry = self.dataplane.resolve(name, version)
        signature = {
            "inputs": {t.name: _tensor_info(t) for t in entry.inputs},
            "outputs": {t.name: _tensor_info(t) for t in entry.outputs},
            "method_name": "tensorflow/serving/predict",
            "defaults": {},
        }
        return json_response(
            {
                "model_spec": {"name": name, "signature_name": "", "version": str(entry.number)},
                "metadata": {"signature_def": {"signature_def": {"serving_default": signature}}},
            }
        )

    # -- POST: predict, classify, regress ----------------------------------
    def post(self, request, path=""):
        match = POST_PATH.fullmatch(request.path)
        if match is None or match.group(4) not in ("predict", "classify", "regress"):
            raise _malformed(request)
        name, version, label, verb = match.groups()
        if tracing.ENABLED:  # one trace per sampled request, under the client's traceparent
            meta = request.META
            with tracing.inference_span("tfserving", name, meta.get("HTTP_TRACEPARENT"), meta.get("HTTP_TRACESTATE")):
                return self._post(request, name, version, label, verb)
        return self._post(request, name, version, label, verb)

    def _post(self, request, name, version, label, verb):
        with self.dataplane.admit(self.token(request), name) as admission:  # 401/403/429 before the body
            with tracing.step("decode"):
                doc = codec.loads(read_body(request, allow_empty=True))
            asked = self._version(name, version, label)
            entry = self.served = self.dataplane.route(name, asked)
            self.drawn = asked is None and self.dataplane.splits_traffic(name)
            return getattr(self, f"_{verb}")(admission, entry, doc)

    def _run(self, admission: Admission, entry: VersionEntry, inputs, outputs=None):
        request = InferenceRequest(entry.model_name, inputs, model_version=entry.version, outputs=outputs)
        return self.dataplane.infer(admission, request, entry).outputs

    def _spec(self, entry: VersionEntry) -> dict | None:
        """``model_spec`` (naming the version that answered) for a request the
        model's traffic split routed; TF Serving's REST answers carry none
        otherwise."""
        if not self.drawn:
            return None
        return {"model_spec": {"name": entry.model_name, "signature_name": "serving_default", "version": entry.version}}

    def _predict(self, admission: Admission, entry: VersionEntry, doc) -> HttpResponse:
        inputs, fmt = codec.decode_predict(doc, entry.inputs)
        body = codec.encode_predict(self._run(admission, entry, inputs), fmt, self._spec(entry))
        return HttpResponse(body, content_type="application/json")

    def _classify(self, admission: Admission, entry: VersionEntry, doc) -> HttpResponse:
        inputs = codec.decode_examples(doc, entry.inputs, "classify", settings.MAX_REQUEST_BYTES)
        score = _pick(entry.outputs, SCORE_NAMES, lambda shape: len(shape) == 2)
        if score is None:
            raise InvalidInput(
                f"model '{entry.model_name}' has no class-score output (a float output of shape [batch, classes]) "
                "for :classify"
            )
        (scores,) = self._run(admission, entry, inputs, [RequestedOutput(score)])
        classes = scores.shape[1]
        labels = list(entry.class_labels)
        if len(labels) != classes:
            labels = [str(j) for j in range(classes)]
        body = codec.encode_classify(scores.data, labels, self._spec(entry))
        return HttpResponse(body, content_type="application/json")

    def _regress(self, admission: Admission, entry: VersionEntry, doc) -> HttpResponse:
        inputs = codec.decode_examples(doc, entry.inputs, "regress", settings.MAX_REQUEST_BYTES)
        value = _pick(entry.outputs, VALUE_NAMES, lambda s: len(s) == 1 or (len(s) == 2 and s[1] == 1))
        if value is None:
            raise InvalidInput(
                f"model '{entry.model_name}' has no regression output (a float output of shape [batch] or [batch, 1]) "
                "for :regress"
            )
        (values,) = self._run(admission, entry, inputs, [RequestedOutput(value)])
        return HttpResponse(codec.encode_regress(values.data, self._spec(entry)), content_type="application/json")
