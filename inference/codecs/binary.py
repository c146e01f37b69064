"""Binary tensor data extension: split a body into its JSON header and binary
tail, view input tensors in the tail without copying, and lay out outputs.

Spec: "Binary Tensor Data Extension",
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md
(little-endian, row-major, no padding; BOOL one byte; BYTES length-prefixed; FP16 native) and the
``Inference-Header-Content-Length`` header.
"""

from __future__ import annotations

import math
import re

import numpy as np

from inference.codecs import bytes as bytes_codec
from inference.protocol import triton_texts
from inference.protocol.datatypes import Datatype
from inference.protocol.errors import InvalidInput

_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)


def split_body(body: bytes | memoryview, header_length: int | None) -> tuple[memoryview, memoryview]:
    """Split ``body`` at ``header_length`` (the ``Inference-Header-Content-Length``).

    Returns (JSON header, binary tail) as memoryviews of ``body`` (no copy).
    ``None`` means the whole body is JSON. Raises InvalidInput when the
    length is negative or larger than the body.
    """
    view = memoryview(body)
    if header_length is None:
        return view, view[len(view) :]
    if header_length < 0:
        raise InvalidInput(f"Inference-Header-Content-Length is negative ({header_length})")
    if header_length > len(view):
        raise InvalidInput(
            f"Inference-Header-Content-Length ({header_length}) is larger than the body ({len(view)} bytes)"
        )
    return view[:header_length], view[header_length:]


def parse_header_length(value: str | None) -> int | None:
    """Parse the ``Inference-Header-Content-Length`` header value (None if absent)."""
    if value is None:
        return None
    text = value.strip()
    if not _INTEGER.fullmatch(text):
        raise InvalidInput(f"Inference-Header-Content-Length is not an integer: {value!r}")
    return int(text)


class BinaryTail:
    """Hands out consecutive slices of the binary part of a request body.

    Inputs claim their bytes in the order they appear in the JSON header;
    :meth:`finish` rejects bytes that no input claimed.
    """

    __slots__ = ("_offset", "_view")

    def __init__(self, view: memoryview):
        self._view = view
        self._offset = 0

    def take(self, size: int, where: str) -> memoryview:
        remaining = len(self._view) - self._offset
        if size > remaining:
            raise InvalidInput(
                f"{where}: binary_data_size is {size} but only {remaining} bytes of binary data remain in the body"
            )
        start = self._offset
        self._offset = start + size
        return self._view[start : self._offset]

    def finish(self) -> None:
        left = len(self._view) - self._offset
        if left:
            raise InvalidInput(
                f"{left} bytes of binary data after the inputs are not claimed by any input's binary_data_size"
            )


def check_byte_size(where: str, datatype: Datatype, shape: tuple[int, ...], nbytes: int) -> None:
    """Raise InvalidInput unless ``nbytes`` is exactly the size of a numeric
    tensor of ``shape`` and ``datatype`` (Triton's "input byte size
    mismatch for input 'x' for model 'm'. Expected ..., got ...";
    ``where``: "input 'x' for model 'm'")."""
    expected = math.prod(shape) * datatype.itemsize
    if nbytes != expected:
        raise triton_texts.byte_size_mismatch(where, expected, nbytes)


def tensor_from_buffer(where: str, datatype: Datatype, shape: tuple[int, ...], view: memoryview) -> np.ndarray:
    """View ``view`` as a tensor of ``shape``; numeric data is not copied.

    Raises InvalidInput if the byte size does not match shape x datatype
    (for BYTES: if the elements do not fill exactly ``prod(shape)`` entries).
    """
    if datatype.is_bytes:
        return bytes_codec.deserialize(view, math.prod(shape), where).reshape(shape)
    check_byte_size(where, datatype, shape, len(view))
    array = np.frombuffer(view, dtype=datatype.numpy).reshape(shape)
    if not array.flags.aligned:
        # ONNX Runtime converts misaligned input element by element (~7x
        # slower than one copy); an aligned copy is the cheaper single copy.
        array = array.copy()
    return array


def tensor_to_buffer(array: np.ndarray, datatype: Datatype) -> bytes | memoryview:
    """Binary form of an output tensor (a view when the array is already
    little-endian and C-contiguous, else one copy)."""
    if datatype.is_bytes:
        return bytes_codec.serialize(array)
    if array.dtype != datatype.numpy or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array, dtype=datatype.numpy)
    if array.size == 0:
        return b""
    return memoryview(array.reshape(-1)).cast("B")
