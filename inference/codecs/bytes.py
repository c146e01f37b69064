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

from inference.protocol import triton_texts
from inference.protocol.errors import DataMismatch, InvalidInput

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
    error messages ("input 'x' for model 'm'"). Raises InvalidInput, in
    Triton's words where Triton checks the same (core ``infer_request.cc``
    ``ValidateBytesInputs``), when the buffer is too short for ``count``
    length prefixes (checked before anything is allocated: a declared shape
    never sizes memory the data does not fill), when a length prefix is cut
    short, when fewer or more elements than ``count`` are present, or when
    an element runs past the end.
    """
    view = memoryview(buffer)
    end = len(view)
    if count * PREFIX > end:
        raise _short(view, count, where)
    out = np.empty(count, dtype=object)
    unpack = _LEN.unpack_from
    offset = 0
    for i in range(count):
        if offset + PREFIX > end:
            raise _incomplete(where, end - offset) if offset < end else triton_texts.too_few_strings(where, count, i)
        (length,) = unpack(view, offset)
        offset += PREFIX
        if offset + length > end:
            if i + 1 < count:
                raise triton_texts.too_few_strings(where, count, i + 1)
            raise InvalidInput(f"{where}: BYTES element {i} declares {length} bytes but only {end - offset} remain")
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != end:
        if end - offset < PREFIX:
            raise _incomplete(where, end - offset)
        raise triton_texts.too_many_strings(where, count)
    return out


def _incomplete(where: str, available: int) -> DataMismatch:
    return DataMismatch(
        f"incomplete string length indicator for inference {where}, expecting {PREFIX} bytes but only "
        f"{available} bytes available"
    )


def _short(view: memoryview, count: int, where: str) -> DataMismatch:
    """The error for data too short for ``count`` length prefixes: the
    elements it does hold counted, without allocating any."""
    end = len(view)
    offset = found = 0
    while offset < end:
        if end - offset < PREFIX:
            return _incomplete(where, end - offset)
        found += 1
        offset += PREFIX + _LEN.unpack_from(view, offset)[0]
    return triton_texts.too_few_strings(where, count, found)
