"""Triton model configuration (``config.pbtxt``) read as protobuf text format.

:func:`parse_config` returns a :class:`TritonConfig` with the fields this
platform uses (platform, backend, max_batch_size, version policy, inputs and
outputs with dims, instance groups, default model filename, parameters,
sequence batching, checked with Triton's rules); unknown fields are
ignored. Raises :class:`ConfigError` with the parser's line and column for
malformed text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from google.protobuf import json_format, text_format

from inference.grpc.proto import model_config_pb2 as pb
from inference.runtime.sequences import SequenceConfigError, SequencePolicy

__all__ = ["ConfigError", "TensorConfig", "TritonConfig", "config_from_raw", "parse_config", "pb"]


class ConfigError(ValueError):
    """config.pbtxt is not valid protobuf text format for a model configuration."""


@dataclass(frozen=True)
class TensorConfig:
    name: str
    datatype: str | None  # OIP datatype name (FP32 ...), None when not given
    dims: tuple[int, ...]  # without the batch dimension when max_batch_size > 0
    label_filename: str = ""


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
    raw: dict = field(default_factory=dict)  # the whole parsed message, as JSON


# An unknown repeated field written without a colon (``model_warmup [ {...} ]``)
# cannot be skipped by protobuf's parser; with a colon it can. Strings and
# comments are matched first so that they are left untouched.
_LIST_WITHOUT_COLON = re.compile(r'("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*)|\b([A-Za-z_]\w*)(\s*)\[')


def _add_list_colons(text: str) -> str:
    def fix(match: re.Match) -> str:
        if match.group(1):
            return match.group(1)
        return f"{match.group(2)}:{match.group(3)}["

    return _LIST_WITHOUT_COLON.sub(fix, text)


def _datatype(value: int) -> str | None:
    if value == pb.TYPE_INVALID:
        return None
    name = pb.DataType.Name(value)[len("TYPE_") :]
    return "BYTES" if name == "STRING" else name


def parse_config(text: str) -> TritonConfig:
    """Parse config.pbtxt text. Unknown fields are ignored."""
    message = pb.ModelConfig()
    try:
        text_format.Parse(_add_list_colons(text), message, allow_unknown_field=True)
    except text_format.ParseError as exc:
        raise ConfigError(f"config.pbtxt: {exc}") from None
    if message.max_batch_size < 0:
        raise ConfigError("config.pbtxt: max_batch_size must not be negative")
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
    groups = []
    for group in message.instance_group:
        groups.append(
            {
                "name": group.name,
                "kind": pb.ModelInstanceGroup.Kind.Name(group.kind),
                "count": group.count or 1,
                "gpus": list(group.gpus),
            }
        )
    return TritonConfig(
        name=message.name,
        platform=message.platform,
        backend=message.backend,
        max_batch_size=message.max_batch_size,
        policy=choice,
        latest_versions=latest,
        specific_versions=tuple(message.version_policy.specific.versions),
        inputs=tuple(TensorConfig(t.name, _datatype(t.data_type), tuple(t.dims)) for t in message.input),
        outputs=tuple(
            TensorConfig(t.name, _datatype(t.data_type), tuple(t.dims), t.label_filename) for t in message.output
        ),
        instance_group=tuple(groups),
        default_model_filename=message.default_model_filename,
        parameters={k: v.string_value for k, v in message.parameters.items()},
        sequence_batching=sequence,
        raw=json_format.MessageToDict(message, preserving_proto_field_name=True),
    )


def config_from_raw(raw: dict) -> TritonConfig | None:
    """The TritonConfig of a config kept as JSON (``TritonConfig.raw``, as
    stored on RegisteredModel.config); None for an empty one."""
    if not raw:
        return None
    message = json_format.ParseDict(raw, pb.ModelConfig(), ignore_unknown_fields=True)
    return parse_config(text_format.MessageToString(message))
