"""DRF parser and content negotiation for V2 inference requests.

The body is a JSON ``$inference_request``, optionally followed by binary
tensor data (``Inference-Header-Content-Length`` gives the JSON length), or
just one input's bytes (``Inference-Header-Content-Length: 0``, the raw
binary request). Clients such as ``tritonclient`` send no Content-Type, so
the parser accepts any media type and the negotiation always picks it.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser

from inference.codecs import binary, large_json, message
from inference.protocol.errors import InvalidInput, RequestTooLarge
from inference.rest import compression


class FirstChoiceNegotiation(BaseContentNegotiation):
    """Use the view's first parser and renderer whatever the headers say."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def declared_length(request, limit: int) -> int:
    """The body's Content-Length; raises InvalidInput when it is not an
    integer and RequestTooLarge above ``limit`` (before reading anything)."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared = int(length)
    except ValueError:
        raise InvalidInput(f"Content-Length is not an integer: {length!r}") from None
    if declared > limit:
        raise RequestTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    return declared


def read_body(request, allow_empty: bool = False) -> bytes:
    """The request body, refusing one above MAX_REQUEST_BYTES before reading it.

    ``request`` is a Django HttpRequest. A gzip/deflate body is inflated
    (inference/rest/compression.py). Raises RequestTooLarge, and
    InvalidInput for a body shorter than its Content-Length or an empty body
    unless ``allow_empty``.
    """
    limit = settings.MAX_REQUEST_BYTES
    declared = declared_length(request, limit)  # refuses an oversized body before reading it
    raw = request.body
    if len(raw) < declared:  # the client stopped sending (half-closed): never decode what came
        raise InvalidInput(f"the request body is shorter than its Content-Length ({len(raw)} of {declared} bytes)")
    body = compression.decompress(raw, request.META.get("HTTP_CONTENT_ENCODING"), limit)
    if not body and not allow_empty:
        raise InvalidInput("the request body is empty; it must hold an inference request")
    return body


def _may_hold_booleans(text: bytes) -> bool:
    """Whether numeric JSON data must be scanned for booleans. Small bodies:
    a text search decides (a stray match only costs the scan). Large ones
    (simdjson's typed export refuses booleans itself): always, since the
    search is slow on long runs of numbers with exponents."""
    if len(text) >= large_json.THRESHOLD:
        return True
    return b"true" in text or b"false" in text


def read_split(request, header_length: int) -> tuple[bytes, bytes]:
    """Read the JSON header and the binary tail of a body as two reads.

    The tail is then a bytes object of its own, whose data CPython aligns, so
    the numeric tensors viewed in it are aligned and ONNX Runtime uses them in
    place: one copy from the socket to the session. Raises like read_body.
    """
    limit = settings.MAX_REQUEST_BYTES
    declared = declared_length(request, limit)
    if header_length < 0:
        raise InvalidInput(f"Inference-Header-Content-Length is negative ({header_length})")
    if header_length > declared:
        raise InvalidInput(
            f"Inference-Header-Content-Length ({header_length}) is larger than the body ({declared} bytes)"
        )
    head = request.read(header_length)
    tail = request.read(declared - header_length)
    if len(head) != header_length or len(head) + len(tail) != declared:
        raise InvalidInput("the request body is shorter than its Content-Length")
    return head, tail


class InferenceRequestParser(BaseParser):
    """Parses a V2 inference body into an :class:`InferenceRequest`."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        view = parser_context["view"]
        django_request = parser_context["request"]._request
        kwargs = parser_context["kwargs"]
        name, version = kwargs["model_name"], kwargs.get("model_version")
        meta = django_request.META
        header_length = binary.parse_header_length(meta.get("HTTP_INFERENCE_HEADER_CONTENT_LENGTH"))
        if header_length and not meta.get("HTTP_CONTENT_ENCODING"):
            head, tail = read_split(django_request, header_length)
            check_bools = _may_hold_booleans(head)
            return message.decode_request(
                message.load_request_json(head),
                memoryview(tail),
                name,
                version,
                settings.MAX_REQUEST_BYTES,
                check_bools,
            )
        body = read_body(django_request)
        if header_length == 0:
            entry = view.version_entry
            if len(entry.inputs) != 1:
                raise InvalidInput(
                    f"a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly one "
                    f"input; model '{name}' has {len(entry.inputs)}"
                )
            return message.decode_raw_request(
                memoryview(body), name, version, entry.inputs[0], entry.max_batch_size > 0
            )
        header, tail = binary.split_body(body, header_length)
        check_bools = _may_hold_booleans(body)
        return message.decode_request(
            message.load_request_json(header), tail, name, version, settings.MAX_REQUEST_BYTES, check_bools
        )
