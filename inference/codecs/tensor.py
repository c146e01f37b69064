"""Checks shared by every transport's tensor decoding.

A declared shape is checked here before anything is allocated: a list of at
most :data:`MAX_DIMS` non-negative integers describing at most the request
limit. Each decoder then checks the shape against the data actually present
before it allocates the tensor (binary: the byte count, BYTES at least
:data:`inference.codecs.bytes.PREFIX` bytes an element; JSON and gRPC typed
contents: the element count), so that a short request cannot declare a large
tensor into memory.
"""

from __future__ import annotations

import math
from typing import Any

from inference.protocol.errors import InvalidInput, RequestTooLarge

#: The most dimensions a tensor may have (numpy's limit).
MAX_DIMS = 64
#: The most elements, and bytes, a tensor's shape may describe (Triton's int64 sizes).
INT64_MAX = 2**63 - 1


#: Triton's HTTP front end's words for a shape with a negative (or non-integer) dimension.
_UNSIGNED = "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer: "


def check_shape(value: Any, where: str, max_bytes: int, itemsize: int, json: bool = True) -> tuple[int, ...]:
    """A tensor shape as a tuple of at most MAX_DIMS non-negative ints.

    ``value`` is a list (from JSON, or a gRPC repeated int64 field turned
    into one). Raises InvalidInput for anything else (a shape whose
    dimensions other than 0 multiply past ``max_bytes`` included: no tensor
    has them; a shape whose element count or byte size overflows 64 bits,
    in Triton's words), and RequestTooLarge when the shape needs more than
    ``max_bytes`` (``itemsize`` 0, for BYTES, counts one byte per element:
    the decoders check BYTES data against the bytes present). ``json``: the
    shape came in JSON (a negative dimension is refused in Triton's words).
    """
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: 'shape' must be a JSON array of non-negative integers")
    if len(value) > MAX_DIMS:
        raise InvalidInput(f"{where}: 'shape' has more than the {MAX_DIMS} dimensions a tensor may have")
    for dim in value:
        if type(dim) is not int or dim < 0:
            raise InvalidInput(f"{_UNSIGNED if json else ''}{where}: 'shape' {value} must hold non-negative integers")
    shape = tuple(value)
    count = math.prod(shape)
    if count > INT64_MAX:  # Triton's texts (server src/http_server.cc): a 400, not a request too large
        raise InvalidInput(
            f"invalid shape for {where}: shape {list(shape)} causes total element count to exceed maximum size "
            f"of {INT64_MAX}"
        )
    if itemsize > 1 and count > INT64_MAX // itemsize:
        raise InvalidInput(
            f"byte size overflow for {where}: element count ({count}) * data type size ({itemsize}) exceeds "
            f"maximum allowed size ({INT64_MAX})"
        )
    size = count * max(itemsize, 1)
    if size > max_bytes:
        raise RequestTooLarge(
            f"{where}: shape {list(shape)} needs {size} bytes, more than the request limit of {max_bytes} bytes"
        )
    if not size and math.prod(d for d in shape if d) > max_bytes:  # empty, but numpy could not even lay it out
        raise InvalidInput(f"{where}: shape {list(shape)} has dimensions larger than any request can carry")
    return shape
