"""Protobuf messages of the OIP gRPC service <-> protocol types.

Inputs come either all in ``raw_input_contents`` (one entry per input, the
binary layout of the binary tensor data extension; numeric tensors become
views of the received bytes) or each in its typed ``InferTensorContents``
field (FP16 is raw only). Outputs always go in ``raw_output_contents``, as
Triton does. Spec: OIP gRPC "ModelInfer", "Tensor Data"
(https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md). Trace and log
settings map between Triton's messages and the data plane's dicts (the
values of Triton's JSON form, checked by the data plane).

Decoding checks every declared shape against the data present before it
allocates a tensor; :func:`decodes_inline` tells the servicer whether a
request is small enough to decode on the event loop.
"""

from __future__ import annotations

import math

import numpy as np
from google.protobuf import json_format

from inference import runtime_settings
from inference.codecs import binary
from inference.codecs.tensor import MAX_DIMS, check_shape
from inference.grpc.proto import oip_pb2 as pb
from inference.protocol import triton_texts
from inference.protocol.datatypes import BY_NAME, Datatype
from inference.protocol.errors import DataMismatch, InvalidInput, RequestTooLarge
from inference.protocol.types import (
    SHARED_MEMORY_REGION,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    RequestedOutput,
    RequestInput,
)

#: Decoding stays on the event loop up to this many inputs, bytes of raw numeric
#: tensor data (viewed in place after the one copy protobuf makes) and elements
#: decoded one by one (BYTES elements, typed contents values: 0.05 to 1 us each).
INLINE_INPUTS = 64
INLINE_RAW_BYTES = 1 << 20
INLINE_ELEMENTS = 2048
#: Typed contents are converted this many values at a time (see _converted).
CHUNK = 16384

_CONTENT_FIELDS = tuple(pb.InferTensorContents.DESCRIPTOR.fields_by_name)
#: Element type of each typed contents field, as the proto declares it.
_FIELD_DTYPES = {
    "bool_contents": np.bool_,
    "int_contents": np.int32,
    "int64_contents": np.int64,
    "uint_contents": np.uint32,
    "uint64_contents": np.uint64,
    "fp32_contents": np.float32,
    "fp64_contents": np.float64,
}


def parameters_from_proto(params) -> dict:
    """A ``map<string, InferParameter>`` as a dict of Python values."""
    if not params:  # most requests have none: no iteration over the map
        return {}
    out = {}
    for key, value in params.items():
        choice = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, choice) if choice else None
    return out


def parameters_to_proto(values: dict, target) -> None:
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if value < 2**63:
                param.int64_param = value
            else:
                param.uint64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


def _converted(values, dtype) -> np.ndarray:
    """A repeated field as a flat array of ``dtype``, converted CHUNK values
    at a time: numpy holds the GIL through one conversion, and in between
    the event loop gets it back (a large request is decoded in a thread)."""
    array = np.empty(len(values), dtype=dtype)
    if len(array) <= CHUNK:
        array[:] = values
    else:
        for start in range(0, len(array), CHUNK):
            array[start : start + CHUNK] = values[start : start + CHUNK]
    return array


def _typed(where: str, datatype: Datatype, shape: tuple[int, ...], contents) -> np.ndarray:
    field = datatype.contents
    if not field:
        raise InvalidInput(f"{where}: FP16 data can only be sent in raw_input_contents")
    used = [name for name in _CONTENT_FIELDS if len(getattr(contents, name))]
    if used and used != [field]:
        raise InvalidInput(f"{where}: {datatype.name} data goes in contents.{field}, got {', '.join(used)}")
    values = getattr(contents, field)
    count = math.prod(shape)
    if len(values) != count:  # before anything is allocated
        raise InvalidInput(
            f"{where}: contents.{field} has {len(values)} elements but shape {list(shape)} needs {count}"
        )
    if datatype.is_bytes:
        return _converted(values, np.dtype(object)).reshape(shape)
    # The field's own element type (uint64_contents -> uint64, ...): an untyped
    # np.array would pass values >= 2**63 through a signed or float array.
    wide = _converted(values, _FIELD_DTYPES[field])
    if wide.size and datatype.numpy.kind in "iu" and wide.dtype != datatype.numpy:
        info = np.iinfo(datatype.numpy)
        if wide.min() < info.min or wide.max() > info.max:
            raise InvalidInput(f"{where}: a value is out of range for {datatype.name} [{info.min}, {info.max}]")
    return wide.astype(datatype.numpy, copy=False).reshape(shape)


def decodes_inline(message: pb.ModelInferRequest) -> bool:
    """Whether decoding ``message`` is cheap enough for the event loop (see
    the INLINE_* limits), judged by its declared shapes without reading its
    data (decoding checks them against the data)."""
    inputs = message.inputs
    if len(inputs) > INLINE_INPUTS:
        return False
    raw = len(message.raw_input_contents) > 0
    nbytes = elements = 0
    for tensor in inputs:
        dims = tensor.shape
        if len(dims) > MAX_DIMS:
            continue  # refused by the decode at once
        count = math.prod(dims)
        datatype = BY_NAME.get(tensor.datatype)
        if raw and datatype is not None and not datatype.is_bytes:
            nbytes += count * datatype.itemsize
        else:
            elements += count
    return nbytes <= INLINE_RAW_BYTES and elements <= INLINE_ELEMENTS


def infer_request_from_proto(message: pb.ModelInferRequest, max_bytes: int) -> tuple[InferenceRequest, int]:
    """Decode a ModelInferRequest: (the request, bytes of its raw contents).
    Inputs naming a ``shared_memory_region`` get no data here (the data
    plane reads their region); the raw contents are those of the others, in
    order. Each shape is checked against the data present before a tensor is
    allocated. Raises InvalidInput / RequestTooLarge naming the input."""
    raw = list(message.raw_input_contents)  # upb copies a bytes field on each access: once
    total = 0
    in_regions = {i for i, t in enumerate(message.inputs) if SHARED_MEMORY_REGION in t.parameters}
    if raw:
        for tensor in message.inputs:  # first, as Triton checks it (infer_handler.cc, InferGRPCToInput)
            if tensor.HasField("contents"):
                raise triton_texts.contents_with_raw(tensor.name, message.model_name)
        if len(raw) != len(message.inputs) - len(in_regions):
            raise InvalidInput(
                f"raw_input_contents has {len(raw)} entries but the request has "
                f"{len(message.inputs) - len(in_regions)} inputs not in shared memory"
            )
        total = sum(map(len, raw))
        if total > max_bytes:
            raise RequestTooLarge(f"raw_input_contents hold {total} bytes, more than the limit of {max_bytes} bytes")
    inputs = []
    next_raw = 0
    mismatch = None  # the last input whose data does not fill its shape, named as Triton does
    for index, tensor in enumerate(message.inputs):
        where = f"input '{tensor.name}'"
        datatype = BY_NAME.get(tensor.datatype)
        if datatype is None:
            raise InvalidInput(f"{where}: unknown datatype {tensor.datatype!r}")
        shape = check_shape(list(tensor.shape[: MAX_DIMS + 1]), where, max_bytes, datatype.itemsize, json=False)
        if index in in_regions:
            if tensor.HasField("contents"):
                raise InvalidInput(f"{where}: has both contents and parameters.{SHARED_MEMORY_REGION}")
            data = None  # read from the region by the data plane, once the caller's regions are known
        elif raw:
            try:
                data = binary.tensor_from_buffer(
                    f"{where} for model '{message.model_name}'", datatype, shape, memoryview(raw[next_raw])
                )
            except DataMismatch as exc:
                mismatch, data = exc, None
            next_raw += 1
        else:
            data = _typed(where, datatype, shape, tensor.contents)
        inputs.append(RequestInput(tensor.name, datatype.name, shape, data, parameters_from_proto(tensor.parameters)))
    if mismatch is not None:
        raise mismatch
    outputs = None
    if message.outputs:
        outputs = [RequestedOutput(o.name, parameters_from_proto(o.parameters)) for o in message.outputs]
    request = InferenceRequest(
        model_name=message.model_name,
        model_version=message.model_version or None,
        id=message.id or None,
        parameters=parameters_from_proto(message.parameters),
        inputs=inputs,
        outputs=outputs,
    )
    return request, total


def infer_response_to_proto(response: InferenceResponse, message=None) -> pb.ModelInferResponse:
    """Encode outputs in ``raw_output_contents`` (one copy into the message);
    into ``message`` when given (an empty ModelInferResponse, e.g. a stream
    answer's ``infer_response``), else into a new one. Returns the message."""
    if message is None:
        message = pb.ModelInferResponse()
    message.model_name = response.model_name
    message.model_version = response.model_version
    message.id = response.id or ""
    raw = []
    for output in response.outputs:
        tensor = message.outputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
        if output.in_region:  # written into a shared-memory region: an empty entry, as Triton sends
            raw.append(b"")
            continue
        if output.parameters:
            parameters_to_proto(output.parameters, tensor.parameters)
        raw.append(bytes(binary.tensor_to_buffer(output.data, BY_NAME[output.datatype])))
    message.raw_output_contents.extend(raw)
    if response.parameters:
        parameters_to_proto(response.parameters, message.parameters)
    return message


def model_metadata_to_proto(meta: ModelMetadata) -> pb.ModelMetadataResponse:
    message = pb.ModelMetadataResponse(name=meta.name, versions=list(meta.versions), platform=meta.platform)
    for target, tensors in ((message.inputs, meta.inputs), (message.outputs, meta.outputs)):
        for t in tensors:
            target.add(name=t.name, datatype=t.datatype, shape=t.shape)
    return message


def model_config_to_proto(config: dict) -> pb.ModelConfigResponse:
    """The data plane's model configuration (Triton's JSON form) as a message
    wire-compatible with Triton's ``inference.ModelConfig``."""
    message = pb.ModelConfigResponse()
    json_format.ParseDict(config, message.config, ignore_unknown_fields=True)
    return message


def statistics_to_proto(stats) -> pb.ModelStatisticsResponse:
    message = pb.ModelStatisticsResponse()
    for s in stats:
        item = message.model_stats.add(
            name=s.name,
            version=s.version,
            last_inference=s.last_inference,
            inference_count=s.inference_count,
            execution_count=s.execution_count,
        )
        for stage, duration in s.stages.items():
            target = getattr(item.inference_stats, stage)
            target.count, target.ns = duration.count, duration.ns
        for size, stages in s.batch_stats:
            batch = item.batch_stats.add(batch_size=size)
            for stage, duration in stages.items():
                target = getattr(batch, stage)
                target.count, target.ns = duration.count, duration.ns
    return message


def repository_parameters(params) -> dict:
    """A ``map<string, ModelRepositoryParameter>`` as a dict of Python values."""
    out = {}
    for key, value in params.items():
        choice = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, choice) if choice else None
    return out


# -- trace and logging extensions -------------------------------------------------
def trace_settings_from_proto(settings) -> dict | None:
    """A ``TraceSettingRequest``'s settings as the data plane's update, in the
    form of Triton's JSON (a list for a list-valued setting, trace_level; one
    string for the others; ``None`` for a setting sent without a value, which
    clears a model's own); ``None`` when there are none: a read."""
    if not settings:
        return None
    update: dict = {}
    for key, setting in settings.items():
        values = list(setting.value)
        if not values:
            update[key] = None
        elif len(values) == 1 and not isinstance(runtime_settings.TRACE_DEFAULTS.get(key), list):
            update[key] = values[0]
        else:
            update[key] = values  # several values for a one-value setting: the data plane refuses them
    return update


def trace_settings_to_proto(settings: dict) -> pb.TraceSettingResponse:
    message = pb.TraceSettingResponse()
    for key, value in settings.items():
        message.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
    return message


def log_settings_from_proto(settings) -> dict | None:
    """A ``LogSettingsRequest``'s settings (bool, uint32 or string each; an
    unset one is ``None``, refused by the data plane); ``None`` when there
    are none: a read."""
    return parameters_from_proto(settings) or None


def log_settings_to_proto(settings: dict) -> pb.LogSettingsResponse:
    message = pb.LogSettingsResponse()
    for key, value in settings.items():
        if isinstance(value, bool):
            message.settings[key].bool_param = value
        elif isinstance(value, int):
            message.settings[key].uint32_param = value
        else:
            message.settings[key].string_param = str(value)
    return message
