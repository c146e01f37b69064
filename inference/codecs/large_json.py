"""Large V2 JSON request bodies: parsed with simdjson, numeric tensor data
exported straight into typed buffers (no Python float objects).

``orjson`` builds a Python object per number: for an image-sized tensor that
is most of the request's time. Above ``THRESHOLD`` bytes the body is parsed
with simdjson instead; every input's ``data`` stays a :class:`LazyData` that
the JSON tensor codec decodes with :meth:`LazyData.numeric` when it can, and
with :meth:`LazyData.as_list` (the general path, same rules, same errors)
otherwise.
"""

from __future__ import annotations

import threading

import numpy as np
import simdjson

THRESHOLD = 64 * 1024
_local = threading.local()
_EXPORT = {"f": "d", "i": "i", "u": "u"}  # numpy kind -> simdjson buffer type
_BUFFER_DTYPE = {"d": np.float64, "i": np.int64, "u": np.uint64}


def _parser() -> simdjson.Parser:
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


class LazyData:
    """An input's ``data`` array, not yet converted to Python objects.

    Valid while the request is being decoded (the thread's parser owns it).
    """

    __slots__ = ("_array",)

    def __init__(self, array):
        self._array = array

    def as_list(self) -> list:
        return self._array.as_list()

    def numeric(self, dtype: np.dtype) -> np.ndarray | None:
        """The data as a flat array of ``dtype`` (integers range-checked),
        or None when the general path must decide (wrong JSON types, ragged
        nesting, numbers outside the type): it gives the exact error."""
        of_type = _EXPORT.get(dtype.kind)
        if of_type is None:
            return None
        array = self._array
        try:
            flat = np.frombuffer(array.as_buffer(of_type=of_type), dtype=_BUFFER_DTYPE[of_type])
        except (TypeError, ValueError):
            return None
        if not _regular(array, flat.size):
            return None
        if dtype.kind in "iu" and flat.size and flat.dtype != dtype:
            info = np.iinfo(dtype)
            if flat.min() < info.min or flat.max() > info.max:
                return None
        return flat.astype(dtype)


def _regular(array, count: int) -> bool:
    """Regular nesting: the lengths along the first path explain both the
    element count and the number of lists (simdjson flattens ragged data)."""
    dims = []
    node = array
    while isinstance(node, simdjson.Array):
        dims.append(len(node))
        if not dims[-1]:
            break
        node = node[0]
    lists, product = 0, 1
    for dim in dims:
        lists += product
        product *= dim
    if product != count:
        return False
    return len(dims) == 1 or array.mini.count(b"[") == lists


def loads(body: bytes | memoryview):
    """The request document: Python objects, except that every input's
    ``data`` is a LazyData. Raises ValueError for malformed JSON."""
    document = _parser().parse(body)
    if not isinstance(document, simdjson.Object):
        return document.as_list() if isinstance(document, simdjson.Array) else document
    out = {}
    for key in document.keys():
        value = document[key]
        if key == "inputs" and isinstance(value, simdjson.Array):
            out[key] = [_input(item) for item in value]
        else:
            out[key] = _plain(value)
    return out


def _input(item):
    if not isinstance(item, simdjson.Object):
        return _plain(item)
    fields = {}
    for key in item.keys():
        value = item[key]
        fields[key] = LazyData(value) if key == "data" and isinstance(value, simdjson.Array) else _plain(value)
    return fields


def _plain(value):
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value
