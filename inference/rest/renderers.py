"""HTTP responses of the V2 REST API: JSON, or JSON header + binary data."""

from __future__ import annotations

from django.http import HttpResponse

from inference.codecs.message import dumps


def json_response(obj, status: int = 200) -> HttpResponse:
    """``application/json`` response from a dict (numpy arrays allowed)."""
    return HttpResponse(dumps(obj), status=status, content_type="application/json")


def inference_response(body: bytes, header_length: int | None) -> HttpResponse:
    """A JSON-only body is ``application/json``; with binary outputs the body
    is ``application/octet-stream`` with ``Inference-Header-Content-Length``."""
    if header_length is None:
        return HttpResponse(body, content_type="application/json")
    response = HttpResponse(body, content_type="application/octet-stream")
    response["Inference-Header-Content-Length"] = str(header_length)
    return response
