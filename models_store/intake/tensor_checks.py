"""The tensor checks of a validation (:mod:`models_store.intake.validation`):
sizes against what a request may carry, the memory a warm-up on zero inputs
would take (estimated from the graph), the zero inputs themselves, and the
computed outputs' shapes against the ones the graph declares. Sizes in
bytes; a variable dimension (-1) counts 1.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx

from inference.protocol.datatypes import BY_NAME, BY_ONNX
from inference.protocol.types import MetadataTensor
from inference.runtime.sequences.policy import SequencePolicy
from models_store.config.triton import TritonConfig

logger = logging.getLogger(__name__)

#: Bytes counted per element of a string tensor (its object pointer).
STRING_ELEMENT_BYTES = 8


class ValidationError(ValueError):
    """The artifact cannot serve; the message says why."""


def _declared_dims(type_proto: onnx.TypeProto) -> list[int] | None:
    """A tensor type's dims as the graph declares them (-1: symbolic or
    unknown); None when it declares no shape (or is not a tensor)."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else -1 for d in type_proto.tensor_type.shape.dim]


def element_bytes(elem_type: int) -> int:
    datatype = BY_ONNX.get(elem_type)
    if datatype is not None:
        return datatype.itemsize or STRING_ELEMENT_BYTES
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize or STRING_ELEMENT_BYTES
    except (KeyError, TypeError, ValueError):
        return STRING_ELEMENT_BYTES


def _size(dims, element_bytes: int) -> int:
    """Bytes of a tensor with ``dims`` (-1, variable, counted as 1)."""
    return math.prod(d if d >= 0 else 1 for d in dims) * element_bytes


def _metadata_bytes(tensor: MetadataTensor) -> int:
    return _size(tensor.shape, BY_NAME[tensor.datatype].itemsize or STRING_ELEMENT_BYTES)


def check_input_sizes(inputs: tuple[MetadataTensor, ...], limit: int) -> None:
    """Raise ValidationError for an input that takes more than ``limit``
    bytes (MAX_REQUEST_BYTES) with every variable dimension at 1: no request
    could carry it."""
    for tensor in inputs:
        size = _metadata_bytes(tensor)
        if size > limit:
            raise ValidationError(
                f"input '{tensor.name}' {list(tensor.shape)} {tensor.datatype} takes {size} bytes even with every "
                f"variable dimension at 1: more than MAX_REQUEST_BYTES ({limit}), so no request could carry it"
            )


def warm_up_estimate(model: onnx.ModelProto, inputs: tuple[MetadataTensor, ...]) -> tuple[int, str]:
    """(bytes, description of the largest tensor) a warm-up on zero inputs
    would allocate at least: the inputs as fed (variable dims at 1), the
    outputs and the largest intermediate tensor whose shapes the graph
    declares or ONNX shape inference derives. Tensors of unknown shape count 0."""
    tensors = [(f"input '{t.name}'", list(t.shape), _metadata_bytes(t)) for t in inputs]
    graph = model.graph
    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # shape inference is best effort; the declared shapes remain
        logger.debug("shape inference failed during validation", exc_info=True)
    outputs, intermediates = [], []
    for kind, infos, into in (("output", graph.output, outputs), ("intermediate", graph.value_info, intermediates)):
        for info in infos:
            dims = _declared_dims(info.type)
            if dims is not None:
                into.append(
                    (f"{kind} '{info.name}'", dims, _size(dims, element_bytes(info.type.tensor_type.elem_type)))
                )
    largest_intermediate = max(intermediates, key=lambda t: t[2], default=None)
    counted = tensors + outputs + ([largest_intermediate] if largest_intermediate else [])
    if not counted:
        return 0, "nothing"
    name, dims, size = max(counted, key=lambda t: t[2])
    return sum(t[2] for t in counted), f"{name} {dims} alone takes {size} bytes"


def check_output_shapes(model: onnx.ModelProto, names: list[str], results: list) -> None:
    """Raise ValidationError when a computed output contradicts the shape
    the graph declares for it: another rank, or another size of a fixed
    dimension (symbolic dimensions match anything)."""
    declared = {info.name: _declared_dims(info.type) for info in model.graph.output}
    for name, result in zip(names, results, strict=True):
        dims = declared.get(name)
        computed = list(np.shape(result))
        if dims is None:
            continue
        if len(dims) != len(computed) or any(d >= 0 and d != c for d, c in zip(dims, computed, strict=False)):
            raise ValidationError(
                f"output '{name}': the graph declares shape {dims} but computes {computed} "
                "(warm-up on zero inputs, variable dimensions at 1)"
            )


def _zero_feed(tensor: MetadataTensor) -> np.ndarray:
    shape = tuple(d if d >= 0 else 1 for d in tensor.shape)
    if tensor.datatype == "BYTES":
        return np.full(shape, "", dtype=object)
    return np.zeros(shape, dtype=BY_NAME[tensor.datatype].numpy)


def warm_up_feeds(inputs, config: TritonConfig | None) -> dict[str, np.ndarray]:
    """Zeros for every input; a sequence model's control and state inputs as
    the server supplies them to a one-request sequence (START, END and READY
    true, correlation ID 1 or "1", the initial state)."""
    feeds = {t.name: _zero_feed(t) for t in inputs}
    if config is not None and config.sequence_batching is not None:
        policy = SequencePolicy.from_config(config.sequence_batching, config.max_batch_size, config.name)
        corrid = "1" if any(c.datatype == "BYTES" for _, cs in policy.control_inputs for c in cs) else 1
        feeds.update(policy.controls_for(True, True, True, corrid))
        feeds.update(policy.initial_states())
    return feeds
