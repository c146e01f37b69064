"""Base views of the protocol adapters: no authentication, throttling or
content negotiation work in DRF (access control is the DataPlane's), protocol
errors as ``{"error": ...}``, and every POST observed in metrics and the
request log (inference/observability/metrics.py)."""

from __future__ import annotations

import time

from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.views import APIView

from inference.admission.auth import bearer_token
from inference.dataplane import get_dataplane
from inference.extensions import get_extensions
from inference.http.responses import RawResponse, exception_handler
from inference.observability import metrics as observability
from inference.observability import rollups


class FirstChoiceNegotiation(BaseContentNegotiation):
    """Use the view's first parser and renderer whatever the headers say."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ProtocolView(APIView):
    """Base of the protocol views."""

    authentication_classes: list = []
    permission_classes: list = []
    throttle_classes: list = []
    content_negotiation_class = FirstChoiceNegotiation
    parser_classes: list = []  # bodies are read by the views themselves (inference/http/bodies.py)

    @property
    def dataplane(self):
        return get_dataplane()

    @property
    def extensions(self):
        return get_extensions()

    def get_exception_handler(self):
        return exception_handler

    # The protocol views use no authentication classes, permissions,
    # throttling, versioning or content negotiation: skip DRF's per-request
    # steps for them.
    def initial(self, request, *args, **kwargs):
        pass

    @property
    def default_response_headers(self):
        return {}

    @staticmethod
    def token(request) -> str | None:
        """The request's bearer token (``Authorization: Bearer <token>``), if any."""
        return bearer_token(request.META.get("HTTP_AUTHORIZATION"))


#: HTTP status -> the outcome label of metrics and request logs.
OUTCOMES = {
    200: "success",
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    413: "resource_exhausted",
    415: "invalid_argument",
    429: "rate_limited",
    501: "unimplemented",
    503: "unavailable",
    504: "deadline_exceeded",
}


class ObservedView(ProtocolView):
    """Records every POST in metrics and the request log; a view sets
    ``served`` (the VersionEntry that ran) and ``request_id``."""

    protocol = "rest"
    served = None
    request_id = None

    def dispatch(self, request, *args, **kwargs):
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        started = time.perf_counter()
        rollups.TRANSPORT.set(self.protocol)  # the charts count the request under its transport
        response = self.dispatch_post(request, *args, **kwargs)
        served = self.served
        observability.observe(
            self.protocol,
            served.model_name if served else "",
            served.version if served else "",
            OUTCOMES.get(response.status_code, "internal"),
            time.perf_counter() - started,
            int(request.META.get("CONTENT_LENGTH") or 0),
            len(response.content),
            response.status_code,
            self.request_id or request.META.get("HTTP_X_REQUEST_ID"),
        )
        return response

    def dispatch_post(self, request, *args, **kwargs):
        """The POST through DRF's dispatch (its Request wrapper, the handler,
        the exception handler)."""
        return super().dispatch(request, *args, **kwargs)


class DirectPostView(ObservedView):
    """An observed view whose ``post`` takes Django's HttpRequest itself: DRF's
    per-request wrapping (a ``rest_framework.request.Request`` with parsers,
    authenticators and a negotiator, then ``finalize_response``) does nothing
    for a view that uses none of them, and costs about as much as reading the
    request (measured: bench/PROFILE.md). Errors still go through the DRF
    exception handler (:meth:`handle_exception`), so they answer exactly as
    the other protocol views do.

    A ``post`` may return a :class:`~inference.http.responses.RawResponse`:
    it goes out as it is on the protocol handler's direct route (a request
    whose class has ``takes_raw_response``), else as Django's HttpResponse.
    """

    def dispatch(self, request, *args, **kwargs):
        response = super().dispatch(request, *args, **kwargs)
        if type(response) is RawResponse and not getattr(request, "takes_raw_response", False):
            return response.as_django()
        return response

    def dispatch_post(self, request, *args, **kwargs):
        self.args, self.kwargs, self.request, self.headers = args, kwargs, request, {}
        try:
            return self.post(request, *args, **kwargs)
        except Exception as exc:
            return self.handle_exception(exc)
