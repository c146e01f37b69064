"""V2 JSON tensor data: decode a request's ``data`` into a numpy array and
encode an output for the JSON response.

Spec: OIP REST "Tensor Data" (row-major, nested or flat), "Tensor Data Types"
(https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md).
Type rules: integers for INT/UINT (range-checked), numbers for FP32/FP64,
``true``/``false`` for BOOL, strings for BYTES (sent to the model as their
UTF-8 bytes). FP16 has no JSON form and is refused: use binary data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inference.codecs.large_json import LazyData
from inference.codecs.tensor import MAX_DIMS
from inference.protocol import triton_texts
from inference.protocol.datatypes import Datatype
from inference.protocol.errors import InvalidInput

_INT_KINDS = frozenset("iu")
_FLOAT_KINDS = frozenset("iuf")
_PY_KINDS = {float: "floating-point", bool: "boolean", str: "string", dict: "object", type(None): "null"}


def nested_leaves(where: str, value: Any, leaf) -> tuple[list, list[int]]:
    """Flatten a regularly nested JSON list: (leaves mapped by ``leaf``, shape).

    A scalar gives shape []. Raises InvalidInput for ragged nesting (lists of
    different lengths at one level, or values and lists mixed) and for
    nesting deeper than the MAX_DIMS dimensions a tensor may have.
    """
    shape: list[int] = []
    out: list = []
    append = out.append

    def walk(item: Any, depth: int) -> None:
        if isinstance(item, list):
            if depth == len(shape):
                if out:
                    raise InvalidInput(f"{where}: ragged nesting (a list where a value was expected)")
                if depth == MAX_DIMS:
                    raise InvalidInput(f"{where}: nested deeper than the {MAX_DIMS} dimensions a tensor may have")
                shape.append(len(item))
            elif shape[depth] != len(item):
                raise InvalidInput(
                    f"{where}: ragged nesting: a list of {len(item)} where {shape[depth]} were expected (level {depth})"
                )
            for element in item:
                walk(element, depth + 1)
        elif depth != len(shape):
            raise InvalidInput(f"{where}: ragged nesting (a value where a list was expected)")
        else:
            append(leaf(item))

    walk(value, 0)
    return out, shape


def _text(where: str):
    def leaf(item: Any) -> bytes:
        if isinstance(item, str):
            return item.encode("utf-8")
        raise InvalidInput(f"{where}: BYTES data must be strings, got {type(item).__name__}")

    return leaf


def contains_bool(value: Any) -> bool:
    """Whether a nested JSON list holds a boolean anywhere (iterative: any depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool):
            return True
    return False


def exact_integers(where: str, datatype: Datatype, value: Any, field: str = "'data'") -> np.ndarray:
    """Integer data that numpy cannot type on its own (e.g. UINT64 values on
    both sides of 2**63): checked element by element (the slow path)."""
    info = np.iinfo(datatype.numpy)

    def leaf(item: Any) -> int:
        if type(item) is not int:
            kind = _PY_KINDS.get(type(item), "non-numeric")
            raise InvalidInput(f"{where}: {field} holds {kind} values, which are not valid {datatype.name} values")
        if not info.min <= item <= info.max:
            raise InvalidInput(f"{where}: a value is out of range for {datatype.name} [{info.min}, {info.max}]")
        return item

    flat, _ = nested_leaves(where, value, leaf)
    return np.array(flat, dtype=datatype.numpy)


def check_nesting(where: str, data: list) -> None:
    """Raise InvalidInput (Triton's text) when ``data`` is nested
    ``triton_texts.MAX_JSON_NESTING`` lists deep or more (along its first
    elements: deeper nesting elsewhere is ragged, refused by the decoders)."""
    depth, item = 0, data
    while isinstance(item, list):
        depth += 1
        if depth >= triton_texts.MAX_JSON_NESTING:
            raise triton_texts.json_nesting(where, depth)
        if not item:
            return
        item = item[0]


def tensor_from_json(
    where: str, datatype: Datatype, shape: tuple[int, ...], data: Any, check_bools: bool = True
) -> np.ndarray:
    """Decode JSON ``data`` (nested or flat list) into an array of ``shape``.

    Raises InvalidInput for FP16, non-list data, ragged nesting, values of the
    wrong JSON type (booleans among numbers included), integers out of the
    datatype's range, and an element count that differs from ``prod(shape)``.
    ``check_bools=False`` skips the scan for booleans among numbers (a
    caller that saw no ``true``/``false`` token in the JSON text).
    """
    if datatype.name == "FP16":
        raise InvalidInput(
            f"{where}: FP16 data cannot be sent as JSON; send it as binary data "
            "(parameters.binary_data_size, binary tensor data extension)"
        )
    if isinstance(data, LazyData):  # a large body parsed with simdjson
        flat = data.numeric(datatype.numpy) if datatype.numpy.kind in "iuf" else None
        if flat is not None:
            if flat.size != math.prod(shape):
                raise _count_mismatch(where, flat.size, shape, math.prod(shape))
            return flat.reshape(shape)
        data = data.as_list()
    if not isinstance(data, list):
        raise InvalidInput(f"{where}: 'data' must be a JSON array, got {type(data).__name__}")
    check_nesting(where, data)
    count = math.prod(shape)
    if datatype.is_bytes:
        flat, _ = nested_leaves(where, data, _text(where))
        if len(flat) != count:
            raise _count_mismatch(where, len(flat), shape, count)
        array = np.empty(count, dtype=object)
        array[:] = flat
        return array.reshape(shape)
    array = typed_array(where, datatype, data, "'data'", check_bools)
    if array.size != count:
        raise _count_mismatch(where, array.size, shape, count)
    return array.reshape(shape)


def typed_array(where: str, datatype: Datatype, value: Any, field: str, check_bools: bool = True) -> np.ndarray:
    """A parsed JSON value (number, boolean, or regularly nested lists of
    them) as an array of a numeric or BOOL ``datatype``, shaped by its nesting.

    Rules shared by the V2 and TF Serving JSON APIs: integers for INT/UINT
    (range-checked, also across 2**63), numbers for FP16/32/64, ``true`` /
    ``false`` for BOOL, no booleans among numbers (``check_bools=False``
    skips that scan when the caller knows the text holds no boolean).
    ``field`` names the value in messages. Raises InvalidInput.
    """
    try:
        array = np.array(value)
    except (ValueError, TypeError, OverflowError):
        raise InvalidInput(
            f"{where}: {field} is not a regular array of {datatype.name} values (ragged nesting or mixed types)"
        ) from None
    target = datatype.numpy
    if array.size == 0:
        return array.astype(target)
    kind = array.dtype.kind
    if target.kind in _INT_KINDS and kind in "fO":
        array = exact_integers(where, datatype, value, field).reshape(array.shape if kind == "f" else -1)
        kind = array.dtype.kind
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
            f"{where}: {field} holds {_json_kind(kind)} values, which are not valid {datatype.name} values"
        )
    if target.kind != "b" and check_bools and contains_bool(value):
        raise InvalidInput(f"{where}: {field} mixes booleans with numbers, which are not valid {datatype.name} values")
    return array.astype(target, copy=False)


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
