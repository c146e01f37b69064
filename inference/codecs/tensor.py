"""Checks shared by every transport's tensor decoding."""

from __future__ import annotations

import math
from typing import Any

from inference.protocol.errors import InvalidInput, RequestTooLarge


def check_shape(value: Any, where: str, max_bytes: int, itemsize: int) -> tuple[int, ...]:
    """A tensor shape as a tuple of non-negative ints.

    ``value`` is a list (from JSON, or a gRPC repeated int64 field turned
    into one). Raises InvalidInput for anything else, and RequestTooLarge when
    the shape needs more than ``max_bytes`` (``itemsize`` 0, for BYTES,
    counts one byte per element as a lower bound).
    """
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: 'shape' must be a JSON array of non-negative integers")
    for dim in value:
        if type(dim) is not int or dim < 0:
            raise InvalidInput(f"{where}: 'shape' {value} must hold non-negative integers")
    shape = tuple(value)
    size = math.prod(shape) * max(itemsize, 1)
    if size > max_bytes:
        raise RequestTooLarge(
            f"{where}: shape {list(shape)} needs {size} bytes, more than the request limit of {max_bytes} bytes"
        )
    return shape
