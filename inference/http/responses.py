"""HTTP responses of the protocol adapters: JSON, JSON + binary data, errors.

Errors are ``{"error": "<message>"}`` with each protocol error's
``http_status`` (:mod:`inference.protocol.errors`; a 503 or a rate limit's
429 with ``Retry-After``: the error's ``retry_after``); an unknown
Content-Encoding is 415 with ``Accept-Encoding: gzip, deflate``; a
dependency's outage met anywhere is 503 with ``Retry-After`` (the
``outage_error`` port); anything else unexpected is logged and answered 500
without internals.
"""

from __future__ import annotations

import logging

from django.http import Http404, HttpResponse
from rest_framework.exceptions import APIException

from inference import ports
from inference.codecs.message import dumps
from inference.http.compression import UnsupportedEncoding
from inference.protocol.errors import InferenceError

logger = logging.getLogger(__name__)


def json_response(obj, status: int = 200) -> HttpResponse:
    """``application/json`` response from a dict (numpy arrays allowed)."""
    return HttpResponse(dumps(obj), status=status, content_type="application/json")


class RawResponse:
    """A 200 answer of an inference view as plain values: ``status_code``,
    ``headers`` (a list of ``(name, value)`` in the order sent) and
    ``content`` (bytes). The protocol handler's direct route
    (hosting/wsgi_dispatch.py) sends it as it is; anywhere else the view hands
    Django :meth:`as_django` (Django's HttpResponse costs ~7 us to build and
    read back, ~6% of a small request: bench/README.md, make profile)."""

    __slots__ = ("content", "headers", "status_code")

    status_line = "200 OK"

    def __init__(self, content: bytes, headers: list[tuple[str, str]]):
        self.status_code = 200
        self.content = content
        self.headers = headers

    def __setitem__(self, name: str, value: str) -> None:
        self.headers.append((name, value))

    def as_django(self) -> HttpResponse:
        """The same answer as Django's HttpResponse (for middleware and the test client)."""
        return HttpResponse(self.content, status=self.status_code, headers=dict(self.headers))


def inference_response(body: bytes, header_length: int | None) -> RawResponse:
    """A JSON-only body is ``application/json``; with binary outputs the body
    is ``application/octet-stream`` with ``Inference-Header-Content-Length``
    (the binary tensor data extension). A :class:`RawResponse`."""
    if header_length is None:
        return RawResponse(body, [("Content-Type", "application/json")])
    return RawResponse(
        body, [("Content-Type", "application/octet-stream"), ("Inference-Header-Content-Length", str(header_length))]
    )


def error_response(status: int, message: str, **extra) -> HttpResponse:
    return HttpResponse(dumps({"error": message, **extra}), status=status, content_type="application/json")


def exception_handler(exc: Exception, context) -> HttpResponse:
    """DRF exception handler of the protocol views (V2 REST and TF Serving)."""
    if isinstance(exc, UnsupportedEncoding):
        response = error_response(415, exc.message)
        response["Accept-Encoding"] = "gzip, deflate"
        return response
    if isinstance(exc, InferenceError):
        response = error_response(exc.http_status, exc.message)
        if exc.retry_after is not None:
            response["Retry-After"] = exc.retry_after_header
        return response
    if isinstance(exc, APIException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        response = error_response(exc.status_code, detail)
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(int(exc.wait))
        return response
    if isinstance(exc, Http404):
        return error_response(404, "not found")
    outage = ports.outage_error(exc)
    if outage is not None:  # a dependency's outage: 503 with Retry-After
        logger.warning("%s answered 503: %s: %s", type(context.get("view")).__name__, type(exc).__name__, exc)
        return exception_handler(outage, context)
    logger.exception("unexpected error in %s", type(context.get("view")).__name__)
    return error_response(500, f"internal error ({type(exc).__name__}); see the server log")


def not_found(request, exception=None) -> HttpResponse:
    """JSON 404 for a URL no protocol route matches."""
    return error_response(404, f"not found: {request.method} {request.path}")
