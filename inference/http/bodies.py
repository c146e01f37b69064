"""Reading request bodies: the size limit checked before reading, gzip/deflate."""

from __future__ import annotations

from django.conf import settings

from inference.http import compression
from inference.protocol.errors import InvalidInput, RequestTooLarge


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
    (inference/http/compression.py). Raises RequestTooLarge, and
    InvalidInput for a body shorter than its Content-Length or an empty body
    unless ``allow_empty``.
    """
    limit = settings.MAX_REQUEST_BYTES
    declared = declared_length(request, limit)  # refuses an oversized body before reading it
    raw = request.read(declared)  # the body, read once (Django's ``body`` would keep a second stream over it)
    if len(raw) < declared:  # the client stopped sending (half-closed): never decode what came
        raise InvalidInput(f"the request body is shorter than its Content-Length ({len(raw)} of {declared} bytes)")
    body = compression.decompress(raw, request.META.get("HTTP_CONTENT_ENCODING"), limit)
    if not body and not allow_empty:
        raise InvalidInput("the request body is empty; it must hold an inference request")
    return body


#: Bodies up to this size are read in one read and split by copying: a read from the server costs more
#: than copying a small body (measured live through granian: ~9 us per read; bench/README.md, make profile).
ONE_READ_BYTES = 64 * 1024


def read_split(request, header_length: int) -> tuple[bytes, bytes]:
    """The JSON header and the binary tail of a body, each a bytes object of
    its own, whose data CPython aligns, so the numeric tensors viewed in the
    tail are aligned and ONNX Runtime uses them in place. A body above
    :data:`ONE_READ_BYTES` is read as two reads (one copy from the socket to
    the session); a smaller one in one read, then split. Raises like read_body.
    """
    limit = settings.MAX_REQUEST_BYTES
    declared = declared_length(request, limit)
    if header_length < 0:
        raise InvalidInput(f"Inference-Header-Content-Length is negative ({header_length})")
    if header_length > declared:
        raise InvalidInput(
            f"Inference-Header-Content-Length ({header_length}) is larger than the body ({declared} bytes)"
        )
    if declared <= ONE_READ_BYTES:
        body = request.read(declared)
        if len(body) != declared:
            raise InvalidInput("the request body is shorter than its Content-Length")
        return body[:header_length], body[header_length:]
    head = request.read(header_length)
    tail = request.read(declared - header_length)
    if len(head) != header_length or len(head) + len(tail) != declared:
        raise InvalidInput("the request body is shorter than its Content-Length")
    return head, tail
