"""Reading a V2 inference request from an HTTP request.

The body is a JSON ``$inference_request``, optionally followed by binary
tensor data (``Inference-Header-Content-Length`` gives the JSON length), or
just one input's bytes (``Inference-Header-Content-Length: 0``, the raw
binary request). Clients such as ``tritonclient`` send no Content-Type, so
any media type is accepted.
"""

from __future__ import annotations

from django.conf import settings

from inference.codecs import binary, large_json, message
from inference.http.bodies import read_body, read_split
from inference.protocol.errors import InvalidInput
from inference.protocol.types import InferenceRequest


def _may_hold_booleans(text: bytes) -> bool:
    """Whether numeric JSON data must be scanned for booleans. Small bodies:
    a text search decides (a stray match only costs the scan). Large ones
    (simdjson's typed export refuses booleans itself): always, since the
    search is slow on long runs of numbers with exponents."""
    if len(text) >= large_json.THRESHOLD:
        return True
    return b"true" in text or b"false" in text


def parse_infer_request(request, name: str, version: str | None, served) -> InferenceRequest:
    """The InferenceRequest of a Django HttpRequest to ``.../infer``.

    ``served`` is the resolved model version (the raw binary request takes
    its one input's signature). Raises InvalidInput, RequestTooLarge.
    """
    meta = request.META
    header_length = binary.parse_header_length(meta.get("HTTP_INFERENCE_HEADER_CONTENT_LENGTH"))
    if header_length and not meta.get("HTTP_CONTENT_ENCODING"):
        head, tail = read_split(request, header_length)
        return message.decode_request(
            message.load_request_json(head),
            memoryview(tail),
            name,
            version,
            settings.MAX_REQUEST_BYTES,
            _may_hold_booleans(head),
        )
    body = read_body(request)
    if header_length == 0:
        if len(served.inputs) != 1:
            raise InvalidInput(  # Triton's text (core infer_request.cc, Normalize)
                f"Raw request must only have 1 input (found 1) to be deduced but got {len(served.inputs)} inputs "
                f"in '{name}' model configuration (Inference-Header-Content-Length: 0)"
            )
        return message.decode_raw_request(memoryview(body), name, version, served.inputs[0], served.max_batch_size > 0)
    header, tail = binary.split_body(body, header_length)
    return message.decode_request(
        message.load_request_json(header), tail, name, version, settings.MAX_REQUEST_BYTES, _may_hold_booleans(body)
    )
