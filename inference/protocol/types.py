"""Protocol types of the Open Inference Protocol (V2), shared by every transport.

Tensors are numpy arrays already shaped to the declared ``shape``; BYTES
tensors are ``object`` arrays of ``bytes``. Parameters are plain dicts of
``str -> str | int | float | bool`` (OIP "Parameters").

Spec: seed 002 "Inference Request JSON Object", "Request Input",
"Request Output", "Inference Response JSON Object", "Response Output",
"Model Metadata", "Server Metadata"; seed 003 messages of the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Parameters = dict[str, Any]


@dataclass(slots=True)
class RequestInput:
    """One input tensor: ``data`` has ``shape`` and the numpy dtype of ``datatype``."""

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
    """One output tensor as produced by the model."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)


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
