"""Triton model configuration (``config.pbtxt``, or its JSON form) read and
checked.

:func:`parse_config` reads protobuf text format, :func:`parse_config_json`
Triton's JSON form (the ``config`` parameter of a repository load); both
return a :class:`TritonConfig`. Every field of Triton's ModelConfig parses
(inference/grpc/proto/model_config.proto holds all of them); a field this
server does not support, given with a value other than its default, is
refused by name (:data:`SUPPORTED`), never dropped: :class:`ConfigError`
says which field and why. Unknown field names and malformed text are
refused with the parser's line and column. ``sequence_batching`` is checked
with Triton's rules (inference/runtime/sequences/policy.py), and so are
``dynamic_batching``'s priority levels and queue policies
(inference/runtime/queue_policy.py).

What is kept: ``TritonConfig.raw``, the whole message in Triton's JSON form
(:func:`triton_json`: proto field names, every field with its default,
64-bit integers as numbers), stored on the model and returned (with the
registry's own state and the versions' signatures) by the configuration
extension (inference/serving/model_config.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor

from inference.grpc.proto import model_config_pb2 as pb
from inference.runtime.queue_policy import PriorityLevels, QueuePolicyError
from inference.runtime.sequences.policy import SequenceConfigError, SequencePolicy
from inference.serving import instance_groups

__all__ = [
    "ENSEMBLE",
    "MAX_CONFIG_CHARS",
    "ConfigError",
    "EnsembleStepConfig",
    "TensorConfig",
    "TritonConfig",
    "config_from_raw",
    "parse_config",
    "parse_config_json",
    "pb",
    "same_config",
    "triton_json",
    "unsupported",
]

#: Longest config.pbtxt text an upload may carry (characters).
MAX_CONFIG_CHARS = 1 << 20

#: The platform and backend names of an ONNX Runtime model (empty: not given).
PLATFORMS = ("", "onnxruntime_onnx")
BACKENDS = ("", "onnxruntime")
#: The platform of an ensemble (Triton's): a graph of other models' versions, no model file.
ENSEMBLE = "ensemble"
#: What an ensemble's configuration may not have (Triton refuses these for ensembles too, or they need a model file).
NOT_FOR_ENSEMBLES = (
    "dynamic_batching", "sequence_batching", "instance_group", "default_model_filename", "model_warmup",
    "response_cache", "backend",
)  # fmt: skip


class ConfigError(ValueError):
    """The configuration is malformed or asks for something this server does not support."""


#: The fields this server supports, as a tree: a name maps to the subtree of
#: its message's supported fields, or to ALL (every field below it). A field
#: outside the tree may appear only with its default value. Repeated fields
#: and maps are checked item by item.
ALL = "all"
SUPPORTED: dict = {
    "name": ALL,
    "platform": ALL,
    "backend": ALL,
    "version_policy": ALL,
    "max_batch_size": ALL,
    "input": {"name": ALL, "data_type": ALL, "format": ALL, "dims": ALL, "optional": ALL},
    "output": {"name": ALL, "data_type": ALL, "dims": ALL, "label_filename": ALL},
    "instance_group": {"name": ALL, "kind": ALL, "count": ALL, "gpus": ALL},
    "dynamic_batching": ALL,  # priority levels and queue policies too (inference/runtime/queue_policy.py)
    "sequence_batching": ALL,  # sequence batching (inference/runtime/sequences/policy.py) reads it
    "default_model_filename": ALL,
    "parameters": ALL,
    "model_warmup": ALL,
    "model_transaction_policy": {},  # decoupled: false only
    "response_cache": ALL,  # enable: the response cache (inference/response_cache.py)
    # platform "ensemble": the steps (inference/ensembles/plan.py; models_store/intake/ensembles.py pins their versions)
    "ensemble_scheduling": {"step": {"model_name": ALL, "model_version": ALL, "input_map": ALL, "output_map": ALL}},
}

#: Why a field is not supported, for the fields a Triton user is likely to write.
WHY = {
    "runtime": "this server runs ONNX models with ONNX Runtime",
    "optimization": "ONNX Runtime's execution providers follow the worker's device, set by instance_group",
    "batch_input": "ragged batching is not supported",
    "batch_output": "ragged batching is not supported",
    "input.allow_ragged_batch": "ragged batching is not supported",
    "input.is_shape_tensor": "shape tensors are only supported for TensorRT platform, as in Triton",
    "output.is_shape_tensor": "shape tensors are only supported for TensorRT platform, as in Triton",
    "input.is_non_linear_format_io": "non-linear formats are a TensorRT feature",
    "output.is_non_linear_format_io": "non-linear formats are a TensorRT feature",
    "input.reshape": "give the model's own shape in dims",
    "output.reshape": "give the model's own shape in dims",
    "ensemble_scheduling.step.model_namespace": "model namespaces are not supported",
    "model_transaction_policy.decoupled": "decoupled models are not supported: one response per request",
    "instance_group.rate_limiter": "rate limiter resources are not supported; teams have rate limits",
    "instance_group.secondary_devices": "secondary devices are not supported",
    "instance_group.profile": "TensorRT profiles are not supported",
    "instance_group.passive": "passive instances are not supported",
    "instance_group.host_policy": "host policies are not supported",
    "cc_model_filenames": "models per compute capability are not supported",
    "metric_tags": "per-model metric tags are not supported",
    "model_operations": "custom operation libraries are not supported",
    "model_repository_agents": "repository agents are not supported",
    "model_metrics": "per-model metrics settings are not supported",
}


@dataclass(frozen=True)
class TensorConfig:
    name: str
    datatype: str | None  # OIP datatype name (FP32 ...), None when not given
    dims: tuple[int, ...]  # without the batch dimension when max_batch_size > 0
    label_filename: str = ""
    format: str = "FORMAT_NONE"  # inputs: FORMAT_NONE, FORMAT_NHWC, FORMAT_NCHW
    optional: bool = False  # inputs: may be left out (ONNX: an input with a default value)


@dataclass(frozen=True)
class EnsembleStepConfig:
    """One step of ``ensemble_scheduling`` as configured: ``model_version``
    -1 means the version serving when the ensemble version is created;
    ``input_map``: the step model's input name -> the ensemble tensor it
    reads; ``output_map``: the step model's output name -> the ensemble
    tensor it writes."""

    model_name: str
    model_version: int
    input_map: dict
    output_map: dict


@dataclass(frozen=True)
class TritonConfig:
    name: str = ""
    platform: str = ""
    backend: str = ""
    max_batch_size: int = 0
    policy: str = "latest"  # latest | all | specific
    latest_versions: int = 1
    specific_versions: tuple[int, ...] = ()
    inputs: tuple[TensorConfig, ...] = ()
    outputs: tuple[TensorConfig, ...] = ()
    instance_group: tuple[dict, ...] = ()
    default_model_filename: str = ""
    parameters: dict = field(default_factory=dict)
    sequence_batching: dict | None = None  # Triton's message as JSON (MessageToDict); None: no sequences
    response_cache: bool = False  # response_cache { enable: true }
    ensemble: tuple[EnsembleStepConfig, ...] = ()  # platform "ensemble": its steps, in config order
    raw: dict = field(default_factory=dict)  # the whole parsed message, as JSON


def unsupported(message, tree: dict | str = SUPPORTED, path: str = "") -> list[str]:
    """The dotted paths of the fields set in ``message`` (a ModelConfig or
    one of its parts) that ``tree`` does not support, in field order."""
    if tree == ALL:
        return []
    found = []
    for descriptor, value in message.ListFields():
        name = descriptor.name
        where = f"{path}.{name}" if path else name
        if name not in tree:
            found.append(where)
            continue
        subtree = tree[name]
        if descriptor.message_type is None or subtree == ALL:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            valued = descriptor.message_type.fields_by_name["value"].message_type is not None
            items = [value[key] for key in value] if valued else []
        elif descriptor.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            for bad in unsupported(item, subtree, where):
                if bad not in found:
                    found.append(bad)
    return found


def _refuse_unsupported(message: pb.ModelConfig, source: str) -> None:
    bad = unsupported(message)
    if bad:
        reasons = "; ".join(f"'{path}'" + (f": {WHY[path]}" if path in WHY else "") for path in bad)
        raise ConfigError(f"{source}: not supported by this server: {reasons}")


def _datatype(value: int) -> str | None:
    if value == pb.TYPE_INVALID:
        return None
    name = pb.DataType.Name(value)[len("TYPE_") :]
    return "BYTES" if name == "STRING" else name


_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _fix_int64(descriptor, doc: dict) -> None:
    """Protobuf's JSON writes 64-bit integers as strings; Triton's
    ModelConfigToJson writes numbers: convert in place (map keys stay strings)."""
    for field_descriptor in descriptor.fields:
        value = doc.get(field_descriptor.name)
        if value is None:
            continue
        message_type = field_descriptor.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            value_field = message_type.fields_by_name["value"]
            if value_field.message_type is not None:
                for item in value.values():
                    _fix_int64(value_field.message_type, item)
        elif message_type is not None:
            for item in value if isinstance(value, list) else [value]:
                _fix_int64(message_type, item)
        elif field_descriptor.type in _INT64_TYPES:
            doc[field_descriptor.name] = [int(v) for v in value] if isinstance(value, list) else int(value)


def triton_json(message) -> dict:
    """A ModelConfig (or one of its parts) as Triton's REST API writes it
    (core ``ModelConfigToJson``): proto field names, every field that has no
    presence printed with its default, enums by name, 64-bit integers as
    numbers."""
    doc = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _fix_int64(message.DESCRIPTOR, doc)
    return doc


_NO_FIELD = re.compile(r'Message type "modelhost\.config\.(\w+)" has no field named "(\w+)"')
_NO_VALUE = re.compile(r'Enum type "modelhost\.config\.([\w.]+)" has no value named (\w+)\.?')


def _parse_error(source: str, exc: Exception) -> ConfigError:
    text = str(exc)
    found = _NO_FIELD.search(text)
    if found:  # name the field in Triton's terms (its message), not our proto package's
        where = text[: found.start()].strip().rstrip(":").strip()
        prefix = f"{where}: " if where else ""
        text = f"{prefix}{found.group(1)} has no field '{found.group(2)}' (not a Triton model configuration field)"
    found = _NO_VALUE.search(text)
    if found:  # the same for an enum, with the values it has
        enum = pb.DESCRIPTOR.pool.FindEnumTypeByName(f"modelhost.config.{found.group(1)}")
        names = ", ".join(value.name for value in enum.values)
        text = f"{text[: found.start()]}{found.group(1)} has no value '{found.group(2)}' (one of {names})"
    return ConfigError(f"{source}: {text}")


def _checked(message: pb.ModelConfig, source: str, refuse: bool = True) -> TritonConfig:
    """The TritonConfig of a parsed message, after the checks every source
    shares (with ``refuse``: the supported fields too)."""
    if refuse:
        _refuse_unsupported(message, source)
    steps = _ensemble_steps(message, source)
    if not steps and (message.platform not in PLATFORMS or message.backend not in BACKENDS):
        what = message.platform or message.backend
        raise ConfigError(
            f"{source} asks for {what!r}; this server runs ONNX models (platform onnxruntime_onnx) "
            "and ensembles of them (platform ensemble)"
        )
    if message.max_batch_size < 0:
        raise ConfigError(f"{source}: max_batch_size must not be negative")
    for tensor in message.input:
        if tensor.format != pb.ModelInput.FORMAT_NONE and tensor.dims and len(tensor.dims) != 3:
            raise ConfigError(f"{source}: model input NHWC/NCHW require 3 dims (input '{tensor.name}')")
    if message.HasField("dynamic_batching"):
        _check_dynamic_batching(message, source)
    choice = message.version_policy.WhichOneof("policy_choice") or "latest"
    latest = message.version_policy.latest.num_versions if choice == "latest" else 1
    if choice == "latest" and latest == 0:
        latest = 1  # Triton: num_versions defaults to 1
    sequence = None
    if message.HasField("sequence_batching"):
        sequence = json_format.MessageToDict(message.sequence_batching, preserving_proto_field_name=True)
        try:
            SequencePolicy.from_config(sequence, message.max_batch_size, message.name)
        except SequenceConfigError as exc:
            raise ConfigError(f"config.pbtxt: {exc}") from None
    groups = [
        {"name": g.name, "kind": pb.ModelInstanceGroup.Kind.Name(g.kind), "count": g.count, "gpus": list(g.gpus)}
        for g in message.instance_group
    ]
    groups = [group.as_dict() for group in instance_groups.read(groups)]  # Triton's defaults
    return TritonConfig(
        name=message.name,
        platform=message.platform,
        backend=message.backend,
        max_batch_size=message.max_batch_size,
        policy=choice,
        latest_versions=latest,
        specific_versions=tuple(message.version_policy.specific.versions),
        inputs=tuple(
            TensorConfig(
                t.name, _datatype(t.data_type), tuple(t.dims), "", pb.ModelInput.Format.Name(t.format), t.optional
            )
            for t in message.input
        ),
        outputs=tuple(
            TensorConfig(t.name, _datatype(t.data_type), tuple(t.dims), t.label_filename) for t in message.output
        ),
        instance_group=tuple(groups),
        default_model_filename=message.default_model_filename,
        parameters={k: v.string_value for k, v in message.parameters.items()},
        sequence_batching=sequence,
        response_cache=message.response_cache.enable,
        ensemble=steps,
        raw=triton_json(message),
    )


def _check_dynamic_batching(message: pb.ModelConfig, source: str) -> None:
    """Triton's checks of ``dynamic_batching``: no optional inputs; its
    priority levels and queue policies (:class:`PriorityLevels`). Raises ConfigError."""
    if any(t.optional for t in message.input):
        raise ConfigError(f"{source}: optional inputs cannot be dynamically batched (input left out by some requests)")
    batching = message.dynamic_batching
    try:
        PriorityLevels.from_config(
            json_format.MessageToDict(batching, preserving_proto_field_name=True), batching.preserve_ordering
        )
    except QueuePolicyError as exc:
        raise ConfigError(f"{source}: dynamic_batching: {exc}") from None


_MESSAGE_FIELDS = ("dynamic_batching", "sequence_batching", "response_cache")
_LISTS = ("instance_group", "model_warmup")


def _ensemble_steps(message: pb.ModelConfig, source: str) -> tuple[EnsembleStepConfig, ...]:
    """The steps of an ensemble's configuration (() for another platform),
    after Triton's checks of an ensemble's own fields. Raises ConfigError."""
    scheduled = message.HasField("ensemble_scheduling")
    if message.platform != ENSEMBLE:
        if scheduled:
            raise ConfigError(f'{source}: ensemble_scheduling is for platform "ensemble" only')
        return ()
    if not scheduled or not message.ensemble_scheduling.step:
        raise ConfigError(f"{source}: an ensemble needs ensemble_scheduling with at least one step")
    for name in NOT_FOR_ENSEMBLES:
        value = getattr(message, name)
        given = message.HasField(name) if name in _MESSAGE_FIELDS else bool(len(value) if name in _LISTS else value)
        if given:
            raise ConfigError(f"{source}: an ensemble may not set '{name}' (its steps' models have their own)")
    for kind, tensors in (("input", message.input), ("output", message.output)):
        if not tensors:
            raise ConfigError(f"{source}: an ensemble declares its {kind}s (name, data_type, dims)")
        for tensor in tensors:
            if tensor.data_type == pb.TYPE_INVALID or not (tensor.dims or message.max_batch_size > 0):
                raise ConfigError(f"{source}: ensemble {kind} '{tensor.name}' needs its data_type and dims")
    steps = []
    for number, step in enumerate(message.ensemble_scheduling.step, 1):
        where = f"{source}: ensemble step {number}"
        if not step.model_name:
            raise ConfigError(f"{where} names no model (model_name)")
        if step.model_version < -1 or step.model_version == 0:
            raise ConfigError(f"{where}: model_version is -1 (the version serving now) or a version number")
        if not step.input_map or not step.output_map:
            raise ConfigError(f"{where} (model '{step.model_name}') needs an input_map and an output_map")
        steps.append(
            EnsembleStepConfig(step.model_name, int(step.model_version), dict(step.input_map), dict(step.output_map))
        )
    return tuple(steps)


def parse_config(text: str, source: str = "config.pbtxt") -> TritonConfig:
    """Parse config.pbtxt text (protobuf text format). Raises ConfigError
    (``source`` first) for malformed text, an unknown field, or a field this
    server does not support."""
    message = pb.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise _parse_error(source, exc) from None
    return _checked(message, source)


def parse_config_json(text: str, source: str = "config") -> TritonConfig:
    """Parse Triton's JSON form of a model configuration (as Triton's
    ``JsonToModelConfig``: proto or JSON field names, unknown fields
    refused). Raises ConfigError like :func:`parse_config`."""
    message = pb.ModelConfig()
    try:
        json_format.Parse(text, message, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return _checked(message, source)


def same_config(a: dict, b: dict) -> bool:
    """Whether two configs kept as JSON say the same (whatever their JSON
    form: with or without defaults, 64-bit integers as strings or numbers)."""
    if a == b:
        return True
    try:
        parsed = [json_format.ParseDict(doc or {}, pb.ModelConfig(), ignore_unknown_fields=True) for doc in (a, b)]
    except json_format.ParseError:
        return False
    return parsed[0] == parsed[1]


def config_from_raw(raw: dict) -> TritonConfig | None:
    """The TritonConfig of a config kept as JSON (``TritonConfig.raw``, as
    stored on RegisteredModel.config: checked when it was stored); None for
    an empty one."""
    if not raw:
        return None
    message = json_format.ParseDict(raw, pb.ModelConfig(), ignore_unknown_fields=True)
    return _checked(message, "config", refuse=False)
