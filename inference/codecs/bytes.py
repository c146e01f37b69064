"""BYTES tensors in their binary form: each element is a 4-byte little-endian
unsigned length followed by that many bytes, elements back to back in
row-major order ("Binary Tensor Request":
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md;
OIP gRPC raw contents: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md).

In memory a BYTES tensor is a numpy ``object`` array of ``bytes``.
"""

from __future__ import annotations

import struct

import numpy as np

from inference.protocol.errors import InvalidInput

_LEN = struct.Struct("<I")
_MAX_ELEMENT = 0xFFFFFFFF
#: Bytes of an element's length prefix: the least an element takes.
PREFIX = _LEN.size


def serialize(array: np.ndarray) -> bytes:
    """Length-prefixed serialization of a BYTES tensor (any shape).

    ``str`` elements are encoded as UTF-8. Raises InvalidInput if an element
    is longer than 2**32 - 1 bytes or is neither ``bytes`` nor ``str``.
    """
    pack = _LEN.pack
    parts = []
    append = parts.append
    for item in array.flat:
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif isinstance(item, (bytearray, memoryview)):
            item = bytes(item)  # len() of a memoryview counts items, not bytes
        elif not isinstance(item, bytes):
            raise InvalidInput(f"BYTES element of type {type(item).__name__} is neither bytes nor str")
        if len(item) > _MAX_ELEMENT:
            raise InvalidInput("BYTES element longer than 2**32 - 1 bytes")
        append(pack(len(item)))
        append(item)
    return b"".join(parts)


def deserialize(buffer: bytes | memoryview, count: int, where: str) -> np.ndarray:
    """Parse exactly ``count`` length-prefixed elements that fill ``buffer``.

    Returns a flat ``object`` array of ``bytes``. ``where`` names the tensor in
    error messages. Raises InvalidInput when the buffer is too short for
    ``count`` length prefixes (checked before anything is allocated: a
    declared shape never sizes memory the data does not fill), when an
    element runs past the end, when fewer or more elements than ``count``
    are present, or when bytes are left over.
    """
    view = memoryview(buffer)
    end = len(view)
    if count * PREFIX > end:
        raise InvalidInput(
            f"{where}: {end} bytes of BYTES data cannot hold the {count} elements of its shape "
            f"(each takes at least its {PREFIX}-byte length)"
        )
    out = np.empty(count, dtype=object)
    unpack = _LEN.unpack_from
    offset = 0
    for i in range(count):
        if offset + 4 > end:
            raise InvalidInput(f"{where}: BYTES data holds {i} elements, but its shape needs {count}")
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidInput(f"{where}: BYTES element {i} declares {length} bytes but only {end - offset} remain")
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != end:
        raise InvalidInput(f"{where}: {end - offset} bytes remain after the {count} BYTES elements its shape holds")
    return out
