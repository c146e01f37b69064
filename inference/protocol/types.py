"""Protocol types of the Open Inference Protocol (V2), shared by every transport.

Tensors are numpy arrays already shaped to the declared ``shape``; BYTES
tensors are ``object`` arrays of ``bytes``. Parameters are plain dicts of
``str -> str | int | float | bool`` (OIP "Parameters").

Spec: OIP REST (https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md)
"Inference Request JSON Object", "Request Input", "Request Output",
"Inference Response JSON Object", "Response Output", "Model Metadata",
"Server Metadata"; OIP gRPC (https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md)
messages of the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Parameters = dict[str, Any]

#: Parameters of a tensor in a shared-memory region (Triton's shared-memory extensions,
#: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_shared_memory.md).
SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY_OFFSET = "shared_memory_offset"


@dataclass(slots=True)
class RequestInput:
    """One input tensor: ``data`` has ``shape`` and the numpy dtype of
    ``datatype``; None (until the data plane reads it) for an input sent in a
    shared-memory region (``parameters`` name it)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asks for; transport options live in ``parameters``."""

    name: str
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferenceRequest:
    """A decoded inference request.

    ``model_version`` is ``None`` when the client named no version (the
    registry then picks the default version); ``outputs`` is ``None`` when
    the client asked for every output.
    """

    model_name: str
    inputs: list[RequestInput]
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters = field(default_factory=dict)
    outputs: list[RequestedOutput] | None = None


@dataclass(slots=True)
class ResponseOutput:
    """One output tensor as produced by the model; ``parameters`` name a
    shared-memory region when it was written there (:attr:`in_region`: the
    transports then send no data for it)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)

    @property
    def in_region(self) -> bool:
        return bool(self.parameters) and SHARED_MEMORY_REGION in self.parameters


@dataclass(slots=True)
class InferenceResponse:
    """The result of :meth:`DataPlane.infer`; ``model_version`` is the version that ran."""

    model_name: str
    model_version: str
    outputs: list[ResponseOutput]
    id: str | None = None
    parameters: Parameters = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataTensor:
    """Tensor metadata; variable-size dimensions are ``-1``."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[MetadataTensor, ...]
    outputs: tuple[MetadataTensor, ...]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]
