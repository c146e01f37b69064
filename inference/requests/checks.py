"""Checks of an inference request against its model version's signature,
before anything runs: inputs, requested outputs, and the request parameters
that bound the run (``timeout``, ``priority``, reserved names).

Every failure raises :class:`~inference.protocol.errors.InvalidInput` (HTTP
400, gRPC INVALID_ARGUMENT) with Triton's wording where clients depend on it.

Spec: the Open Inference Protocol, "Inference" (request JSON object and
parameters: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md#inference-request-json-object);
Triton's parameters and classification extensions
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_parameters.md,
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_classification.md).
"""

from __future__ import annotations

import time

from inference.protocol import triton_texts
from inference.protocol.errors import InvalidInput
from inference.protocol.types import InferenceRequest
from inference.requests import classification
from inference.runtime.queue_policy import UINT64_END, PriorityLevels, Schedule
from inference.serving.snapshot import VersionEntry

#: Reserved names Triton accepts (gRPC clients such as perf_analyzer send it); ignored here.
ALLOWED_RESERVED = frozenset({"triton_enable_empty_final_response"})

_now = time.perf_counter_ns


def deadline(
    parameters: dict, started_ns: int, timeout_seconds: float, levels: PriorityLevels | None = None
) -> float | None:
    """The run's deadline on the ``time.monotonic()`` clock, or None: the
    server's ``timeout_seconds`` (0: none), or the request's ``timeout``
    parameter (microseconds) when shorter, unless the request's level of a
    dynamic batcher's ``levels`` allows a timeout override: the timeout is
    then its queue timeout (Triton's schedule policy extension), not a
    deadline. ``started_ns``: when the request arrived, on
    ``time.perf_counter_ns()``. Raises InvalidInput for a reserved
    ``triton_`` name, a ``priority`` or ``timeout`` that is not an
    unsigned 64-bit integer."""
    timeout = timeout_seconds
    if parameters:
        for key in parameters:
            if key.startswith("triton_") and key not in ALLOWED_RESERVED:
                raise InvalidInput(
                    f"parameter '{key}': parameter keys starting with 'triton_' are reserved "
                    "for Triton usage and should not be specified"
                )
        priority = parameters.get("priority")
        if priority is not None and (type(priority) is not int or not 0 <= priority < UINT64_END):
            raise InvalidInput(f"parameter 'priority' must be a non-negative integer, got {priority!r}")
        micros = parameters.get("timeout")
        if micros is not None:
            if type(micros) is not int or not 0 <= micros < UINT64_END:
                raise InvalidInput(f"parameter 'timeout' must be a non-negative integer (microseconds), got {micros!r}")
            queued = levels is not None and levels.queue_timeout(priority or 0)
            if micros and not queued and (not timeout or micros / 1e6 < timeout):
                timeout = micros / 1e6
    if not timeout:
        return None
    return time.monotonic() - (_now() - started_ns) / 1e9 + timeout


def schedule(parameters: dict, levels: PriorityLevels | None) -> Schedule | None:
    """A request's place in a dynamic batcher with ``levels``: its
    ``priority`` and ``timeout`` parameters (checked by :func:`deadline`);
    None without a dynamic batcher or when it gives neither."""
    if levels is None or not parameters:
        return None
    priority, micros = parameters.get("priority") or 0, parameters.get("timeout") or 0
    return Schedule(priority, micros) if priority or micros else None


def check_inputs(entry: VersionEntry, request: InferenceRequest) -> tuple[dict, int]:
    """(feeds ``{name: ndarray}``, batch size) after checking the inputs
    against the signature, in Triton's order (core ``infer_request.cc``):
    each given once; as many as the model requires and at most as many as
    it has; each known, with the model's datatype and a compatible shape
    (fixed dimensions equal, -1 any; the batch at most ``max_batch_size``
    and the same in every input). Raises InvalidInput (Triton's texts:
    :mod:`inference.protocol.triton_texts`)."""
    specs = entry.input_specs
    given = [tensor.name for tensor in request.inputs]
    if len(set(given)) != len(given):
        raise triton_texts.duplicate_input(next(name for name in given if given.count(name) > 1))
    required = len(specs) - len(entry.optional_inputs)
    if not required <= len(given) <= len(specs):
        raise triton_texts.input_count(entry.model_name, given, list(specs), entry.optional_inputs)
    feeds = {}
    batch = None
    for tensor in request.inputs:
        spec = specs.get(tensor.name)
        if spec is None:
            raise triton_texts.unexpected_input(tensor.name, entry.model_name, list(specs))
        if tensor.datatype != spec.datatype.name:
            raise triton_texts.datatype_mismatch(tensor.name, tensor.datatype, entry.model_name, spec.datatype.name)
        shape = tensor.shape
        expected = spec.shape
        fits = len(shape) == len(expected)
        if fits:
            for size, wanted in zip(shape, expected):  # a loop: no generator per request
                if wanted >= 0 and wanted != size:
                    fits = False
                    break
        if not fits:
            raise InvalidInput(
                f"input '{tensor.name}' has shape {list(shape)}, but model '{entry.model_name}' "
                f"expects {list(expected)} (-1: any size)"
            )
        if entry.max_batch_size > 0:
            if shape[0] > entry.max_batch_size:
                raise InvalidInput(
                    f"input '{tensor.name}' has batch size {shape[0]}, more than the model's "
                    f"max_batch_size {entry.max_batch_size}"
                )
            if batch is not None and shape[0] != batch:
                raise InvalidInput(f"inputs disagree on the batch size ({batch} and {shape[0]})")
            batch = shape[0]
        feeds[tensor.name] = tensor.data
    # every input given (names are unique and known by now) needs no search for a missing one
    if len(feeds) < len(specs) and any(name not in feeds and name not in entry.optional_inputs for name in specs):
        raise triton_texts.input_count(entry.model_name, given, list(specs), entry.optional_inputs)
    return feeds, (batch if batch is not None else 1)


def check_outputs(entry: VersionEntry, request: InferenceRequest) -> tuple[list[str], dict[str, int]]:
    """(output names to run, ``{name: classification count}``): every
    output without ``outputs`` in the request; else the requested ones,
    each known and requested once. Raises InvalidInput."""
    if request.outputs is None:
        return entry.output_names, {}
    names: list[str] = []
    classify: dict[str, int] = {}
    for output in request.outputs:
        datatype = entry.output_types.get(output.name)
        if datatype is None:
            raise triton_texts.unexpected_output(output.name, entry.model_name, entry.output_names)
        if output.name in names:
            raise triton_texts.duplicate_output(output.name)
        names.append(output.name)
        if output.parameters:
            count = classification.requested_count(output.name, datatype, output.parameters)
            if count:
                classify[output.name] = count
    return names, classify
