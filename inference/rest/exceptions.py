"""Protocol errors to HTTP for the V2 REST API: ``{"error": "<message>"}``.

INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND
404, RESOURCE_EXHAUSTED 413, UNIMPLEMENTED 501, UNAVAILABLE 503,
DEADLINE_EXCEEDED 504; an unknown Content-Encoding 415 with
``Accept-Encoding: gzip, deflate``; anything unexpected is logged and
answered 500 without internals.
"""

from __future__ import annotations

import logging

from django.http import Http404, HttpResponse
from rest_framework.exceptions import APIException

from inference.codecs.message import dumps
from inference.protocol.errors import InferenceError
from inference.rest.compression import UnsupportedEncoding

logger = logging.getLogger(__name__)

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "NOT_FOUND": 404,
    "UNAVAILABLE": 503,
    "RESOURCE_EXHAUSTED": 413,
    "DEADLINE_EXCEEDED": 504,
    "UNIMPLEMENTED": 501,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "INTERNAL": 500,
}


def error_response(status: int, message: str, **extra) -> HttpResponse:
    return HttpResponse(dumps({"error": message, **extra}), status=status, content_type="application/json")


def exception_handler(exc: Exception, context) -> HttpResponse:
    """DRF exception handler of the inference views (also used by TF Serving)."""
    if isinstance(exc, UnsupportedEncoding):
        response = error_response(415, exc.message)
        response["Accept-Encoding"] = "gzip, deflate"
        return response
    if isinstance(exc, InferenceError):
        return error_response(HTTP_STATUS.get(exc.code, 500), exc.message)
    if isinstance(exc, APIException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        response = error_response(exc.status_code, detail)
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(int(exc.wait))
        return response
    if isinstance(exc, Http404):
        return error_response(404, "not found")
    logger.exception("unexpected error in %s", type(context.get("view")).__name__)
    return error_response(500, f"internal error ({type(exc).__name__}); see the server log")


def not_found(request, exception=None) -> HttpResponse:
    """JSON 404 for a URL no protocol route matches."""
    return error_response(404, f"not found: {request.method} {request.path}")
