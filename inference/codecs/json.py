"""V2 JSON tensor data: decode a request's ``data`` into a numpy array and
encode an output for the JSON response.

Spec: seed 002 "Tensor Data" (row-major, nested or flat), "Tensor Data Types".
Type rules: integers for INT/UINT (range-checked), numbers for FP32/FP64,
``true``/``false`` for BOOL, strings for BYTES (sent to the model as their
UTF-8 bytes). FP16 has no JSON form and is refused: use binary data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inference.protocol.datatypes import Datatype
from inference.protocol.errors import InvalidInput

_INT_KINDS = frozenset("iu")
_FLOAT_KINDS = frozenset("iuf")


def _flatten_strings(data: list, where: str) -> list[bytes]:
    out: list[bytes] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, str):
                out.append(item.encode("utf-8"))
            elif isinstance(item, list):
                stack.append(iter(item))
                break
            else:
                raise InvalidInput(f"{where}: BYTES data must be strings, got {type(item).__name__}")
        else:
            stack.pop()
    return out


def tensor_from_json(where: str, datatype: Datatype, shape: tuple[int, ...], data: Any) -> np.ndarray:
    """Decode JSON ``data`` (nested or flat list) into an array of ``shape``.

    Raises InvalidInput for FP16, non-list data, ragged nesting, values of the
    wrong JSON type, integers out of the datatype's range, and an element
    count that differs from ``prod(shape)``.
    """
    if datatype.name == "FP16":
        raise InvalidInput(
            f"{where}: FP16 data cannot be sent as JSON; send it as binary data "
            "(parameters.binary_data_size, binary tensor data extension)"
        )
    if not isinstance(data, list):
        raise InvalidInput(f"{where}: 'data' must be a JSON array, got {type(data).__name__}")
    count = math.prod(shape)
    if datatype.is_bytes:
        flat = _flatten_strings(data, where)
        if len(flat) != count:
            raise _count_mismatch(where, len(flat), shape, count)
        array = np.empty(count, dtype=object)
        array[:] = flat
        return array.reshape(shape)
    try:
        array = np.array(data)
    except (ValueError, TypeError, OverflowError):
        raise InvalidInput(
            f"{where}: 'data' is not a regular array of {datatype.name} values (ragged nesting or mixed types)"
        ) from None
    if array.size != count:
        raise _count_mismatch(where, array.size, shape, count)
    if count == 0:
        return np.zeros(shape, dtype=datatype.numpy)
    kind = array.dtype.kind
    target = datatype.numpy
    if target.kind == "b":
        ok = kind == "b"
    elif target.kind in _INT_KINDS:
        ok = kind in _INT_KINDS
        if ok and array.dtype != target:
            info = np.iinfo(target)
            if array.min() < info.min or array.max() > info.max:
                raise InvalidInput(f"{where}: a value is out of range for {datatype.name} [{info.min}, {info.max}]")
    else:
        ok = kind in _FLOAT_KINDS
    if not ok:
        raise InvalidInput(
            f"{where}: 'data' holds {_json_kind(kind)} values, which are not valid {datatype.name} values"
        )
    return array.astype(target, copy=False).reshape(shape)


def _json_kind(kind: str) -> str:
    return {"b": "boolean", "i": "integer", "u": "integer", "f": "floating-point", "U": "string"}.get(
        kind, "mixed or non-numeric"
    )


def _count_mismatch(where: str, got: int, shape: tuple[int, ...], count: int) -> InvalidInput:
    return InvalidInput(f"{where}: 'data' has {got} elements but shape {list(shape)} needs {count}")


def tensor_to_json(array: np.ndarray, datatype: Datatype) -> Any:
    """Flat, row-major JSON form of an output tensor.

    Numeric tensors stay numpy arrays (serialized natively by orjson with
    ``OPT_SERIALIZE_NUMPY``); BYTES become a list of str. Raises InvalidInput
    for FP16 (no JSON form, as in Triton) and for BYTES elements that are not
    valid UTF-8: the client must ask for binary data.
    """
    if datatype.name == "FP16":
        raise InvalidInput(
            "FP16 outputs cannot be returned as JSON; request them with parameters.binary_data: true "
            "(or binary_data_output: true)"
        )
    if datatype.is_bytes:
        out = []
        for item in array.flat:
            if isinstance(item, str):
                out.append(item)
                continue
            try:
                out.append(bytes(item).decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidInput(
                    "a BYTES output holds bytes that are not valid UTF-8; request it with binary_data: true"
                ) from None
        return out
    flat = array.reshape(-1)
    if not flat.flags.c_contiguous or flat.dtype.byteorder == ">":
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return flat
