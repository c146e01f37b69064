"""TensorFlow Serving v1 REST JSON: requests to protocol tensors and results
to JSON, as TF Serving's RESTful API does (https://www.tensorflow.org/tfx/serving/api_rest,
and TF Serving's own behaviour where that page is thin).

- ``:predict`` row format (``instances``: values of the single input, or
  objects keyed by input name) and columnar format (``inputs``: a value, or an
  object keyed by input name); responses ``{"predictions": ...}`` (row) and
  ``{"outputs": ...}`` (columnar), unnamed for one output, keyed by output
  name for several.
- ``:classify`` / ``:regress`` ``examples`` (with ``context`` merged into each)
  become rows of the model's inputs, matched by name.
- ``{"b64": "..."}`` (standard base64) wherever a BYTES value may stand;
  BYTES outputs whose name ends in ``_bytes`` are written as ``{"b64": ...}``.
- ``NaN``, ``Infinity``, ``-Infinity`` are accepted in requests and written
  as those bare tokens in responses. orjson is the fast path both ways; the
  standard library handles documents with non-finite numbers.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import numpy as np
import orjson

from inference.codecs.json import nested_leaves, typed_array
from inference.protocol.datatypes import BY_NAME, Datatype
from inference.protocol.errors import InvalidInput, RequestTooLarge
from inference.protocol.types import MetadataTensor, RequestInput, ResponseOutput

_INT_KINDS = frozenset("iu")


# -- JSON text ---------------------------------------------------------------
def loads(body: bytes) -> Any:
    """Parse a request body; accepts NaN / Infinity / -Infinity tokens.

    Raises InvalidInput("JSON Parse error: ...") for malformed JSON.
    """
    if not body:
        raise InvalidInput("JSON Parse error: The document is empty")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"JSON Parse error: {exc}") from None
    except RecursionError:  # orjson refused it first (its limit is 1024 levels); json recursed
        raise InvalidInput("JSON Parse error: the document is nested too deeply") from None


def _has_non_finite(obj: Any) -> bool:
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind == "f" and not np.isfinite(obj).all()
    if isinstance(obj, dict):
        return any(_has_non_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_non_finite(v) for v in obj)
    if isinstance(obj, (float, np.floating)):
        return not np.isfinite(obj)
    return False


def _plain(obj: Any) -> Any:
    """numpy -> Python values (float32 keeps its shortest decimal form)."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "f":
            return np.vectorize(lambda s: float(s), otypes=[object])(obj.astype(str)).tolist()
        return obj.tolist()
    if isinstance(obj, np.generic):
        return _plain(np.asarray(obj))
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    """Serialize a response; non-finite floats become bare NaN/Infinity/-Infinity."""
    if _has_non_finite(obj):
        return json.dumps(_plain(obj), allow_nan=True, separators=(",", ":")).encode()
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


# -- values to tensors -------------------------------------------------------
def is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def _b64decode(where: str, value: dict) -> bytes:
    text = value["b64"]
    if not isinstance(text, str):
        raise InvalidInput(f"{where}: the value of a b64 object must be a string")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{where}: Unable to base64 decode {text[:40]!r} (standard base64 alphabet)") from None


def to_array(where: str, datatype: Datatype, value: Any) -> np.ndarray:
    """A JSON value (scalar or nested list) as an array of ``datatype``.

    Rules (TF Serving's): integers for INT/UINT (range-checked), numbers or
    NaN/Infinity for FP16/32/64, true/false for BOOL, strings or b64 objects
    for BYTES. Raises InvalidInput naming ``where`` for ragged nesting and
    values that cannot be converted.
    """
    if datatype.is_bytes:

        def leaf(item: Any) -> bytes:
            if isinstance(item, str):
                return item.encode("utf-8")
            if is_b64(item):
                return _b64decode(where, item)
            raise InvalidInput(f"{where}: {json.dumps(item)[:40]} is not a string or a b64 object")

        leaves, shape = nested_leaves(where, value, leaf)
        array = np.empty(len(leaves), dtype=object)
        array[:] = leaves
        return array.reshape(shape)
    return typed_array(where, datatype, value, "the value")


def _check_signature_name(doc: dict) -> None:
    name = doc.get("signature_name", "serving_default")
    if not isinstance(name, str):
        raise InvalidInput("'signature_name' key must be a string value")
    if name != "serving_default":
        raise InvalidInput(f'Serving signature name: "{name}" not found in signature def (only serving_default)')


def _rows(key: str, rows: list, inputs: tuple[MetadataTensor, ...], context: dict | None = None) -> list[RequestInput]:
    """Row objects keyed by input name -> one batched tensor per input."""
    names = [t.name for t in inputs]
    wanted = set(names)
    columns: dict[str, list] = {name: [] for name in names}
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or is_b64(row):
            raise InvalidInput(f"Expecting object but got {type(row).__name__} at item {index} of '{key}'")
        if context:
            both = sorted(set(context) & set(row))
            if both:
                raise InvalidInput(f"feature(s) {', '.join(both)} of example {index} also appear in 'context'")
            row = {**context, **row}
        unknown = sorted(set(row) - wanted)
        if unknown:
            raise InvalidInput(
                f"item {index} of '{key}': unknown input name(s) {', '.join(unknown)} (inputs: {', '.join(names)})"
            )
        missing = [name for name in names if name not in row]
        if missing:
            raise InvalidInput(f"item {index} of '{key}': missing input(s) {', '.join(missing)}")
        for name in names:
            columns[name].append(row[name])
    return [_input(t, f"input '{t.name}' of '{key}'", columns[t.name]) for t in inputs]


def _input(tensor: MetadataTensor, where: str, value: Any) -> RequestInput:
    array = to_array(where, BY_NAME[tensor.datatype], value)
    return RequestInput(tensor.name, tensor.datatype, array.shape, array)


def _check_batch(inputs: tuple[MetadataTensor, ...], decoded: list[RequestInput]) -> None:
    """Columnar inputs of a model whose inputs are all batched must agree on dim 0."""
    if len(decoded) < 2 or not all(t.shape and t.shape[0] == -1 for t in inputs):
        return
    sizes = {d.name: (d.shape[0] if d.shape else None) for d in decoded}
    if len(set(sizes.values())) > 1:
        detail = ", ".join(f"{name}: {size}" for name, size in sizes.items())
        raise InvalidInput(f"inputs disagree on the batch size (first dimension): {detail}")


def decode_predict(doc: Any, inputs: tuple[MetadataTensor, ...]) -> tuple[list[RequestInput], str]:
    """``:predict`` body -> (inputs, "row" | "columnar"); raises InvalidInput."""
    if not isinstance(doc, dict):
        raise InvalidInput("the request must be a JSON object")
    _check_signature_name(doc)
    if "instances" in doc and "inputs" in doc:
        raise InvalidInput("expecting only one of 'inputs' or 'instances' keys, got both")
    if "instances" in doc:
        instances = doc["instances"]
        if not isinstance(instances, list):
            raise InvalidInput("Expecting 'instances' to be a list/array")
        if not instances:
            raise InvalidInput("No values in 'instances' array")
        first = instances[0]
        if isinstance(first, dict) and not is_b64(first):
            return _rows("instances", instances, inputs), "row"
        if len(inputs) != 1:
            raise InvalidInput(
                f"instances is a plain list, but the model has {len(inputs)} inputs "
                f"({', '.join(t.name for t in inputs)}): send a list of objects keyed by input name"
            )
        if any(isinstance(item, dict) and not is_b64(item) for item in instances):
            raise InvalidInput("Expecting value/list but got object in 'instances' (mixed formats)")
        return [_input(inputs[0], f"input '{inputs[0].name}' of 'instances'", instances)], "row"
    if "inputs" in doc:
        value = doc["inputs"]
        if isinstance(value, dict) and not is_b64(value):
            unknown = sorted(set(value) - {t.name for t in inputs})
            if unknown:
                raise InvalidInput(
                    f"unknown input name(s) {', '.join(unknown)} in 'inputs' "
                    f"(inputs: {', '.join(t.name for t in inputs)})"
                )
            missing = [t.name for t in inputs if t.name not in value]
            if missing:
                raise InvalidInput(f"Missing named input: {', '.join(missing)} in 'inputs' object")
            decoded = [_input(t, f"input '{t.name}' of 'inputs'", value[t.name]) for t in inputs]
            _check_batch(inputs, decoded)
            return decoded, "columnar"
        if len(inputs) != 1:
            raise InvalidInput(
                f"inputs is a plain value/list, but the model has {len(inputs)} inputs: "
                "send an object keyed by input name"
            )
        return [_input(inputs[0], f"input '{inputs[0].name}' of 'inputs'", value)], "columnar"
    raise InvalidInput("Missing 'inputs' or 'instances' key")


def _leaf_count(value: Any) -> int:
    """The values (non-lists) in a nested JSON list, or 1 for a value (iterative: any depth)."""
    if not isinstance(value, list):
        return 1
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        lists = [element for element in item if isinstance(element, list)]
        count += len(item) - len(lists)
        stack.extend(lists)
    return count


def _check_context_size(context: dict, examples: int, inputs: tuple[MetadataTensor, ...], max_bytes: int) -> None:
    """``context`` is copied into every example: refuse, before anything is
    copied, a feature whose copies would hold more than ``max_bytes`` (its
    values x the examples x the input's element size, BYTES counted at one
    byte)."""
    for tensor in inputs:
        if tensor.name in context:
            values = _leaf_count(context[tensor.name])
            size = values * examples * max(BY_NAME[tensor.datatype].itemsize, 1)
            if size > max_bytes:
                raise RequestTooLarge(
                    f"'context' feature '{tensor.name}' ({values} values) copied into each of the {examples} "
                    f"examples needs {size} bytes, more than the request limit of {max_bytes} bytes"
                )


def decode_examples(doc: Any, inputs: tuple[MetadataTensor, ...], verb: str, max_bytes: int) -> list[RequestInput]:
    """``:classify`` / ``:regress`` body: each example (features keyed by input
    name, ``context`` merged in) is one batch row of the model's inputs.
    Raises InvalidInput, and RequestTooLarge when ``context``, copied into
    every example, would need more than ``max_bytes``."""
    if not isinstance(doc, dict):
        raise InvalidInput("the request must be a JSON object")
    _check_signature_name(doc)
    if "examples" not in doc:
        raise InvalidInput(f"When method is {verb}, key 'examples' is expected and was not found")
    examples = doc["examples"]
    if not isinstance(examples, list):
        raise InvalidInput("Expecting 'examples' value to be a list/array")
    if not examples:
        raise InvalidInput("'examples' value is an empty array")
    context = doc.get("context")
    if context is not None and not isinstance(context, dict):
        raise InvalidInput("'context' must be a JSON object (one example's features)")
    if context:
        _check_context_size(context, len(examples), inputs, max_bytes)
    return _rows("examples", examples, inputs, context or None)


# -- results -----------------------------------------------------------------
def _value(output: ResponseOutput) -> Any:
    """JSON form of one output: numpy for numbers, str or {"b64"} for BYTES."""
    data = output.data
    if output.datatype != "BYTES":
        canonical = BY_NAME[output.datatype].numpy
        # ONNX Runtime's int64 is numpy.longlong, whose scalars orjson refuses.
        return data if data.dtype.type is canonical.type else data.view(canonical)
    as_b64 = output.name.endswith("_bytes")
    flat = []
    for item in data.reshape(-1):
        raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        if as_b64:
            flat.append({"b64": base64.b64encode(raw).decode("ascii")})
        else:
            flat.append(item if isinstance(item, str) else raw.decode("utf-8", errors="replace"))
    nested = np.empty(len(flat), dtype=object)
    nested[:] = flat
    return nested.reshape(data.shape).tolist()


def encode_predict(outputs: list[ResponseOutput], fmt: str, extra: dict | None = None) -> bytes:
    """``{"predictions": ...}`` for row requests, ``{"outputs": ...}`` for columnar
    (plus the keys of ``extra``, e.g. ``model_spec``).

    Row results need every output batched alike (rank >= 1, one dim 0);
    raises InvalidInput otherwise, as TF Serving does.
    """
    extra = extra or {}
    if fmt == "columnar":
        if len(outputs) == 1:
            return dumps({"outputs": _value(outputs[0]), **extra})
        return dumps({"outputs": {o.name: _value(o) for o in outputs}, **extra})
    batch = None
    for output in outputs:
        if not output.shape:
            raise InvalidInput(f"Tensor name: {output.name} has no shape information (a row result needs a batch)")
        if batch is not None and output.shape[0] != batch:
            raise InvalidInput(
                f"Tensor name: {output.name} has inconsistent batch size: {output.shape[0]} expecting: {batch}"
            )
        batch = output.shape[0]
    if len(outputs) == 1:
        return dumps({"predictions": _value(outputs[0]), **extra})
    values = {o.name: _value(o) for o in outputs}
    rows = [{name: value[i] for name, value in values.items()} for i in range(batch or 0)]
    return dumps({"predictions": rows, **extra})


def encode_classify(scores: np.ndarray, labels: list[str], extra: dict | None = None) -> bytes:
    """``{"results": [[[label, score], ...] per example]}`` from scores [N, C]."""
    results = [[[labels[j], row[j]] for j in range(row.shape[0])] for row in scores]
    return dumps({"results": results, **(extra or {})})


def encode_regress(values: np.ndarray, extra: dict | None = None) -> bytes:
    """``{"results": [value per example]}`` from values [N] or [N, 1]."""
    return dumps({"results": values.reshape(values.shape[0]), **(extra or {})})
