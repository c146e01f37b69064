"""V2 REST inference messages: the JSON ``$inference_request`` (with inputs in
JSON or in the binary tail) to :class:`InferenceRequest`, and
:class:`InferenceResponse` to a JSON body or a JSON header + binary tail.

Spec: OIP REST "Inference Request JSON Object" / "Inference Response JSON
Object" (https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md);
the binary tensor data extension's ``binary_data_size``, ``binary_data``,
``binary_data_output`` and the raw binary request (https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from inference.codecs import binary, deep_json, large_json
from inference.codecs import json as json_codec
from inference.codecs.tensor import check_shape
from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import DataMismatch, InvalidInput
from inference.protocol.types import (
    SHARED_MEMORY_REGION,
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    RequestedOutput,
    RequestInput,
)

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def load_json(data: bytes | memoryview, what: str = "request body", deep: bool = False) -> Any:
    """Parse JSON text; raises InvalidInput naming ``what`` on malformed JSON.
    ``deep``: a document nested deeper than orjson goes (1024 levels) is
    parsed anyway (inference/codecs/deep_json.py), for bodies whose values
    are judged after parsing as Triton judges them."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if deep:
            try:
                return deep_json.loads(bytes(data).decode("utf-8"))
            except (deep_json.DeepJSONError, UnicodeDecodeError):
                pass
        raise InvalidInput(f"malformed JSON in the {what}: {exc}") from None


def load_request_json(data: bytes | memoryview) -> Any:
    """An inference request's JSON: orjson for small bodies; for large ones
    simdjson, whose tensor data the JSON codec exports without Python objects
    (inference/codecs/large_json.py)."""
    if len(data) < large_json.THRESHOLD:
        return load_json(data)
    try:
        return large_json.loads(data)
    except (ValueError, RuntimeError):  # simdjson: RuntimeError for DEPTH_ERROR (nested too deep)
        return load_json(data)  # the error message orjson gives


def dumps(obj: Any) -> bytes:
    """Serialize a response object (numpy arrays allowed) to JSON bytes."""
    return orjson.dumps(obj, option=_DUMPS_OPTIONS)


def _parameters(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}: 'parameters' must be a JSON object")
    for key, item in value.items():
        if not isinstance(item, (str, int, float, bool)):
            raise InvalidInput(f"{where}: parameter '{key}' must be a string, number or boolean")
    return value


def decode_request(
    header: Any,
    tail: memoryview,
    model_name: str,
    model_version: str | None,
    max_bytes: int,
    check_bools: bool = True,
) -> InferenceRequest:
    """Build an InferenceRequest from the parsed JSON header and the binary tail.

    Inputs with ``parameters.binary_data_size`` take consecutive bytes of
    ``tail`` (numeric tensors stay views of it); the others carry JSON
    ``data``; inputs naming a ``shared_memory_region`` in their parameters
    get no data here (the data plane reads their region).
    ``binary_data_size`` is removed from the input parameters.
    ``check_bools=False`` tells the JSON decoder that the text holds no
    ``true``/``false`` token, so numeric data needs no scan for booleans.
    Raises InvalidInput for any malformed part, with the input named.
    """
    if not isinstance(header, dict):
        raise InvalidInput("the inference request must be a JSON object")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidInput("the inference request needs an 'inputs' array")
    request_id = header.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidInput("'id' must be a string")
    parameters = _parameters(header.get("parameters"), "request")
    if not isinstance(parameters.get("binary_data_output", False), bool):
        raise InvalidInput("parameter 'binary_data_output' must be a boolean")
    reader = binary.BinaryTail(tail)
    inputs = []
    mismatch = None  # the last input whose data does not fill its shape, named as Triton does
    for index, raw in enumerate(raw_inputs):
        if not isinstance(raw, dict):
            raise InvalidInput(f"inputs[{index}] must be a JSON object")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidInput(f"inputs[{index}] needs a string 'name'")
        where = f"input '{name}'"
        dt_name = raw.get("datatype")
        datatype = BY_NAME.get(dt_name) if isinstance(dt_name, str) else None
        if datatype is None:
            raise InvalidInput(f"{where}: unknown datatype {dt_name!r}")
        shape = check_shape(raw.get("shape"), where, max_bytes, datatype.itemsize)
        in_params = _parameters(raw.get("parameters"), where)
        size = in_params.get("binary_data_size")
        if size is not None:
            if "data" in raw:
                raise InvalidInput(f"{where}: has both 'data' and parameters.binary_data_size")
            if SHARED_MEMORY_REGION in in_params:
                raise InvalidInput(
                    f"{where}: has both parameters.binary_data_size and parameters.{SHARED_MEMORY_REGION}"
                )
            if type(size) is not int or size < 0:
                raise InvalidInput(f"{where}: binary_data_size must be a non-negative integer")
            in_params = {k: v for k, v in in_params.items() if k != "binary_data_size"}
            view = reader.take(size, where)
            try:
                data = binary.tensor_from_buffer(f"{where} for model '{model_name}'", datatype, shape, view)
            except DataMismatch as exc:
                mismatch, data = exc, None
        elif SHARED_MEMORY_REGION in in_params:
            if "data" in raw:
                raise InvalidInput(f"{where}: has both 'data' and parameters.{SHARED_MEMORY_REGION}")
            data = None  # read from the region by the data plane, once the caller's regions are known
        elif "data" in raw:
            data = json_codec.tensor_from_json(where, datatype, shape, raw["data"], check_bools)
        else:
            raise InvalidInput(
                f"{where}: needs 'data' or parameters.binary_data_size (or parameters.{SHARED_MEMORY_REGION})"
            )
        inputs.append(RequestInput(name, datatype.name, shape, data, in_params))
    reader.finish()
    if mismatch is not None:
        raise mismatch
    outputs = None
    raw_outputs = header.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise InvalidInput("'outputs' must be a JSON array")
        outputs = []
        for index, raw in enumerate(raw_outputs):
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                raise InvalidInput(f"outputs[{index}] must be an object with a string 'name'")
            where = f"output '{raw['name']}'"
            out_params = _parameters(raw.get("parameters"), where)
            if not isinstance(out_params.get("binary_data", False), bool):
                raise InvalidInput(f"{where}: parameter 'binary_data' must be a boolean")
            outputs.append(RequestedOutput(raw["name"], out_params))
    return InferenceRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        parameters=parameters,
        inputs=inputs,
        outputs=outputs,
    )


def decode_raw_request(
    body: memoryview,
    model_name: str,
    model_version: str | None,
    tensor: MetadataTensor,
    batched: bool,
) -> InferenceRequest:
    """The raw binary request (``Inference-Header-Content-Length: 0``).

    The body is the single input ``tensor``'s data. Numeric types: at most one
    variable dimension, derived from the byte size (a batching model's batch
    dimension is 1). BYTES: shape [1] (no variable dimension, as Triton
    requires), the body is that one element's bytes without a length prefix
    (as Triton does). All outputs are returned as
    binary data. Raises InvalidInput when the model
    does not qualify or the size does not divide evenly.
    """
    datatype = BY_NAME[tensor.datatype]
    dims = list(tensor.shape)
    if batched and dims:
        dims[0] = 1
    where = f"raw binary request for input '{tensor.name}'"
    if datatype.is_bytes:
        if any(d != 1 for d in dims):  # a variable dimension too: Triton's Normalize
            raise InvalidInput(
                f"For BYTE datatype raw input '{tensor.name}', the model must have input shape [1] "
                f"(the model declares {list(tensor.shape)})"
            )
        shape = tuple(1 for _ in dims)
        data = np.empty(shape, dtype=object)
        data.reshape(-1)[0] = bytes(body)
    else:
        variable = [i for i, d in enumerate(dims) if d < 0]
        if len(variable) > 1:
            raise InvalidInput(  # Triton's text (core infer_request.cc, Normalize)
                f"The shape of the raw input '{tensor.name}' can not be deduced because there are more than one "
                f"variable-sized dimension (the model declares {list(tensor.shape)})"
            )
        if variable:
            fixed = math.prod(d for d in dims if d >= 0) * datatype.itemsize
            if fixed == 0 or len(body) % fixed:
                raise InvalidInput(f"{where}: {len(body)} bytes is not a whole number of elements of shape {dims}")
            dims[variable[0]] = len(body) // fixed
        shape = tuple(dims)
        data = binary.tensor_from_buffer(f"input '{tensor.name}' for model '{model_name}'", datatype, shape, body)
    return InferenceRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=[RequestInput(tensor.name, datatype.name, shape, data, {})],
        parameters={"binary_data_output": True},
    )


def encode_response(
    response: InferenceResponse,
    requested: list[RequestedOutput] | None,
    binary_default: bool,
) -> tuple[bytes, int | None]:
    """Encode a response as JSON, or JSON header + binary tail.

    An output is binary when its RequestedOutput has ``binary_data: true``,
    or when it has no such parameter and ``binary_default`` (the request's
    ``binary_data_output``) is true; an output written into a shared-memory
    region has neither, nor parameters (Triton's C++ client, perf_analyzer,
    reads ``binary_data_size`` from any output's parameters). Returns (body, header length)
    where the header length is None for a JSON-only body.
    """
    flags: dict[str, Any] = {}
    if requested:
        for out in requested:
            flag = out.parameters.get("binary_data")
            if flag is not None:
                flags[out.name] = bool(flag)
    outputs = []
    buffers = []
    for out in response.outputs:
        datatype = BY_NAME[out.datatype]
        entry: dict[str, Any] = {"name": out.name, "datatype": out.datatype, "shape": out.shape}
        params = dict(out.parameters) if out.parameters else None
        if out.in_region:
            params = None  # written into a shared-memory region: no data, no parameters (as Triton's clients expect)
        elif flags.get(out.name, binary_default):
            buffer = binary.tensor_to_buffer(out.data, datatype)
            buffers.append(buffer)
            params = params or {}
            params["binary_data_size"] = memoryview(buffer).nbytes
        else:
            entry["data"] = json_codec.tensor_to_json(out.data, datatype)
        if params:
            entry["parameters"] = params
        outputs.append(entry)
    body: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id is not None:
        body["id"] = response.id
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    header = dumps(body)
    if not buffers:
        return header, None
    return b"".join([header, *buffers]), len(header)
