"""The wire format between the front end and inference workers.

msgpack for the structure; every numpy tensor travels as a msgpack extension
holding a small header and the raw little-endian bytes (BYTES tensors in the
binary tensor data layout: 4-byte little-endian length + bytes per element).
Decoded numeric tensors are read-only views of the received message (no
copy). Never pickle: a worker cannot be made to run code by a message.

Registered with kombu as the ``modelhost`` serializer (content type
``application/x-modelhost``) for Celery task messages.
"""

from __future__ import annotations

import struct

import msgpack
import numpy as np
from kombu.serialization import register

from inference.codecs import bytes as bytes_codec

CONTENT_TYPE = "application/x-modelhost"
_NUMERIC = 1
_BYTES = 2
_HEADER = struct.Struct("<B")  # ndim; then ndim x uint64 dims; then dtype string (numeric)


def _pack_array(array: np.ndarray) -> msgpack.ExtType:
    shape = array.shape
    head = _HEADER.pack(len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
    if array.dtype.kind in "OUS":
        return msgpack.ExtType(_BYTES, head + bytes_codec.serialize(array))
    le = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    data = np.ascontiguousarray(array, dtype=le)
    code = le.str.encode()
    return msgpack.ExtType(_NUMERIC, head + bytes([len(code)]) + code + data.tobytes())


def _default(obj):
    if isinstance(obj, np.ndarray):
        return _pack_array(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__} to a worker")


def _ext_hook(code: int, data: bytes):
    view = memoryview(data)
    (ndim,) = _HEADER.unpack_from(view, 0)
    offset = 1 + 8 * ndim
    shape = struct.unpack_from(f"<{ndim}Q", view, 1)
    if code == _BYTES:
        count = int(np.prod(shape)) if shape else 1
        return bytes_codec.deserialize(view[offset:], count, "worker message").reshape(shape)
    if code == _NUMERIC:
        size = view[offset]
        dtype = np.dtype(bytes(view[offset + 1 : offset + 1 + size]).decode())
        return np.frombuffer(view[offset + 1 + size :], dtype=dtype).reshape(shape)
    return msgpack.ExtType(code, data)


def dumps(obj) -> bytes:
    """Encode a message (dicts, lists, scalars, str, bytes, numpy arrays)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def loads(data: bytes | memoryview):
    """Decode a message; tensors come back as numpy arrays."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


register("modelhost", dumps, loads, content_type=CONTENT_TYPE, content_encoding="binary")
