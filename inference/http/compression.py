"""HTTP compression of inference bodies, as Triton does it.

Requests: ``Content-Encoding: gzip`` or ``deflate`` (zlib-wrapped, as
tritonclient sends it; either framing is accepted for both); the inflated
body is bounded by MAX_REQUEST_BYTES. Responses: compressed when the
client's ``Accept-Encoding`` asks for gzip or deflate (q-values honoured,
ties to the first listed); ``Inference-Header-Content-Length`` still gives
the uncompressed JSON length.
"""

from __future__ import annotations

import gzip
import zlib

from inference.protocol.errors import InvalidInput, RequestTooLarge, Unsupported

SUPPORTED = ("gzip", "deflate")


class UnsupportedEncoding(Unsupported):
    """A Content-Encoding this server cannot decode (HTTP 415 with Accept-Encoding)."""


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The decoded request body. Raises UnsupportedEncoding, InvalidInput
    (corrupt data), RequestTooLarge (inflates beyond ``limit``)."""
    if not encoding or encoding.strip().lower() == "identity":
        return body
    coding = encoding.strip().lower()
    if coding not in SUPPORTED:
        raise UnsupportedEncoding(f"Unsupported compression type '{encoding}'; this server accepts gzip and deflate")
    inflater = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    try:
        data = inflater.decompress(body, limit + 1)
        if len(data) > limit or inflater.unconsumed_tail:
            raise RequestTooLarge(f"the {coding} body inflates beyond the limit of {limit} bytes")
        data += inflater.flush()
    except zlib.error as exc:
        raise InvalidInput(f"the request body is not valid {coding} data: {exc}") from None
    if not inflater.eof:
        raise InvalidInput(f"the request body is not valid {coding} data: truncated stream")
    return data


def choose(accept_encoding: str | None) -> str | None:
    """gzip, deflate or None (identity) for an Accept-Encoding header."""
    if not accept_encoding:
        return None
    best, best_q = None, 0.0
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        coding = coding.strip().lower()
        q = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        if coding in ("gzip", "deflate", "identity") and q > best_q:
            best, best_q = coding, q
    return None if best == "identity" else best


def compress(body: bytes, coding: str) -> bytes:
    if coding == "gzip":
        return gzip.compress(body, compresslevel=1)
    return zlib.compress(body, 1)
