"""Tensors in system shared-memory regions (Triton's shared-memory extension:
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_shared_memory.md):
the tensor parameters that name a region (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``; :func:`tensor_reference`),
reading an input from its region and writing an output into one, and
opening a checked span in an inference worker on the front end's machine
(:func:`open_span`), which reads and writes its request's regions itself.

Regions are never mapped: their bytes are read into arrays of ours and
written from them through the object's descriptor
(:mod:`inference.shared_memory.region_io`), so a client that shrinks its object gets an
InvalidInput naming the region, never a process killed by SIGBUS.

A tensor's bytes are the binary tensor data layout (BYTES: 4-byte
little-endian length, then the bytes, per element). The registered regions
themselves are :mod:`inference.shared_memory.regions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inference.codecs import binary
from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import InvalidInput
from inference.protocol.types import (
    SHARED_MEMORY_BYTE_SIZE,
    SHARED_MEMORY_OFFSET,
    SHARED_MEMORY_REGION,
    RequestInput,
    ResponseOutput,
)
from inference.shared_memory.region_io import ObjectFile, Span

#: Where POSIX shared-memory objects live (``shm_open`` names, without their leading "/").
SHM_DIR = Path("/dev/shm")
#: Longest region name and key accepted (bytes of UTF-8).
MAX_NAME = 255

PARAM_REGION, PARAM_SIZE, PARAM_OFFSET = SHARED_MEMORY_REGION, SHARED_MEMORY_BYTE_SIZE, SHARED_MEMORY_OFFSET


@dataclass(frozen=True)
class TensorReference:
    """A tensor in a region: ``byte_size`` bytes from ``offset`` within it."""

    region: str
    byte_size: int
    offset: int


@dataclass(frozen=True)
class ObjectSpan:
    """``nbytes`` bytes of the shared-memory object ``key`` from ``offset``
    (from the object's start): a checked tensor span, as a worker on this
    machine opens it (:func:`open_span`)."""

    key: str
    offset: int
    nbytes: int


@dataclass
class RegionPlan:
    """One request's tensors in shared-memory regions, for an executor whose
    worker, on this machine, reads and writes them itself: numeric inputs
    (name -> span; the feed is a stand-in of its dtype and shape,
    :func:`unread`) and requested outputs (name -> the room in the region).
    For a worker elsewhere, :meth:`read_inputs` reads the inputs here."""

    inputs: dict[str, Span] = field(default_factory=dict)
    outputs: dict[str, Span] = field(default_factory=dict)

    def read_inputs(self, feeds: dict) -> dict:
        """``feeds`` with the planned inputs read from their regions (new
        arrays of the stand-ins' dtypes and shapes: one copy each). Raises
        InvalidInput (a region that shrank)."""
        read = {name: span.read(feeds[name].dtype, feeds[name].shape) for name, span in self.inputs.items()}
        return {**feeds, **read}


def unread(dtype, shape: tuple) -> np.ndarray:
    """The stand-in of a tensor left in its region (an input a worker on
    this machine reads itself, an output it wrote): its dtype and shape,
    zeros, read-only, no memory."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def open_span(span: ObjectSpan, where: str) -> Span:
    """Open a span of a shared-memory object in this process (an inference
    worker on the front end's machine, which checked the span against the
    caller's region): a :class:`~inference.shared_memory.region_io.Span` to read or write
    it, never a mapping, open while it lives. The object is opened without
    following links and must be a regular file holding the span. Raises
    InvalidInput."""
    file = ObjectFile(object_path(span.key), span.key)
    opened = Span(file, span.offset, span.nbytes, span.offset + span.nbytes, f"{where}: shared memory region")
    opened.check()
    return opened


def read_span(span: ObjectSpan, where: str) -> np.ndarray:
    """The bytes of a span, read in this process (:func:`open_span`) into a
    new uint8 array: one copy. Raises InvalidInput."""
    return open_span(span, where).read(np.uint8, (span.nbytes,))


def written_output(name: str, datatype: str, reference: TensorReference, shape: tuple, size: int) -> ResponseOutput:
    """An output an inference worker wrote into its region (``size`` bytes
    of ``shape`` at the start of the span ``reference`` names), marked
    written; its data a stand-in (:func:`unread`; :func:`read_for_log`
    reads it when the payload log wants it)."""
    kind = BY_NAME[datatype]
    output = ResponseOutput(name, datatype, shape, unread(object if kind.is_bytes else kind.numpy, shape))
    mark_written(output, reference, size)
    return output


def read_for_log(
    plan: RegionPlan | None, inputs: list[RequestInput], outputs: list[ResponseOutput], written: dict | None
) -> bool:
    """Read what a worker on this machine read or wrote itself for the
    payload log: the planned ``inputs``' data, the ``outputs`` it wrote
    (``written``: their names). False when a region no longer holds them
    (the request was answered; its record is left out)."""
    if plan is None:
        return True
    try:
        for tensor in inputs:
            span = plan.inputs.get(tensor.name)
            if span is not None:
                tensor.data = span.read(tensor.data.dtype, tensor.shape)
        for output in outputs:
            if written and output.name in written:
                size = output.parameters[PARAM_SIZE]
                buffer = plan.outputs[output.name].first(size).read(np.uint8, (size,))
                where = f"output '{output.name}'"
                output.data = binary.tensor_from_buffer(where, BY_NAME[output.datatype], output.shape, buffer.data)
    except InvalidInput:
        return False
    return True


def mark_written(output: ResponseOutput, reference: TensorReference, size: int) -> None:
    """Mark an output as written into its region (``size`` bytes), as :func:`write_output` does."""
    output.parameters = {**output.parameters, PARAM_REGION: reference.region, PARAM_SIZE: size}
    if reference.offset:
        output.parameters[PARAM_OFFSET] = reference.offset


def non_negative(value, what: str) -> int:
    """``value`` when a non-negative integer; else InvalidInput naming ``what``."""
    if type(value) is not int or value < 0:
        raise InvalidInput(f"{what} must be a non-negative integer, got {value!r}")
    return value


def check_name(value, what: str) -> str:
    """``value`` when a non-empty string of at most MAX_NAME bytes without NUL; else InvalidInput."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME or "\0" in value:
        raise InvalidInput(f"{what} must be at most {MAX_NAME} bytes without NUL characters")
    return value


def object_path(key: str) -> Path:
    """The file of a shared-memory key (``shm_open``'s name: leading slashes
    are dropped, no other slash is allowed). Raises InvalidInput."""
    check_name(key, "'key'")
    name = key.lstrip("/")
    if not name or "/" in name or name in (".", ".."):
        raise InvalidInput(f"invalid shared memory key '{key}': a POSIX shared memory name such as '/my_region'")
    return SHM_DIR / name


def tensor_reference(parameters: dict, where: str) -> TensorReference | None:
    """The shared-memory reference of an input's or requested output's
    ``parameters``, or None when it names no region. ``shared_memory_region``
    and ``shared_memory_byte_size`` are required together,
    ``shared_memory_offset`` defaults to 0. Raises InvalidInput."""
    if not parameters:
        return None
    region = parameters.get(PARAM_REGION)
    if region is None:
        if PARAM_SIZE in parameters or PARAM_OFFSET in parameters:
            raise InvalidInput(f"{where}: '{PARAM_SIZE}' and '{PARAM_OFFSET}' need '{PARAM_REGION}'")
        return None
    if not isinstance(region, str) or not region:
        raise InvalidInput(f"{where}: '{PARAM_REGION}' must be a non-empty string")
    if PARAM_SIZE not in parameters:
        raise InvalidInput(f"{where}: '{PARAM_REGION}' needs '{PARAM_SIZE}'")
    size = non_negative(parameters[PARAM_SIZE], f"{where}: '{PARAM_SIZE}'")
    offset = non_negative(parameters.get(PARAM_OFFSET, 0), f"{where}: '{PARAM_OFFSET}'")
    return TensorReference(region, size, offset)


def read_input(
    registry, owner: str, tensor: RequestInput, reference: TensorReference, defer: bool = False, model: str = ""
) -> tuple[np.ndarray, Span]:
    """The data of an input sent in a region, read into a new array (one
    copy; allocated only once ``shared_memory_byte_size``, which must be
    exactly the tensor's bytes, was checked against the region and the
    region against its object's current size), and its span. ``defer``: a
    numeric input a worker on this machine reads itself is not read here
    (its data a stand-in, :func:`unread`). ``registry``: the machine's
    RegionRegistry (:meth:`inference.shared_memory.regions.RegionRegistry.span`).
    Raises InvalidInput naming the input, ``model`` (Triton's "input byte
    size mismatch for input 'x' for model 'm'") and the region."""
    where = f"input '{tensor.name}'" + (f" for model '{model}'" if model else "")
    datatype = BY_NAME[tensor.datatype]
    span = registry.span(owner, reference, where)
    if datatype.is_bytes:
        buffer = span.read(np.uint8, (reference.byte_size,))
        return binary.tensor_from_buffer(where, datatype, tensor.shape, buffer.data), span
    binary.check_byte_size(where, datatype, tensor.shape, reference.byte_size)
    if defer:
        return unread(datatype.numpy, tensor.shape), span
    return span.read(datatype.numpy, tensor.shape), span


def check_room(name: str, room: int, size: int) -> None:
    """Raise InvalidInput (Triton's text) unless ``size`` bytes of output ``name`` fit in ``room`` bytes."""
    if size > room:
        raise InvalidInput(
            f"shared memory size specified with the request for output '{name}' "
            f"({room} bytes) should be at least {size} bytes to hold the results"
        )


def write_output(output: ResponseOutput, reference: TensorReference, span: Span) -> None:
    """Write an output's binary form into its region (``span``, the room
    ``reference`` names, :meth:`RegionRegistry.span`; ``pwrite``, never a
    mapping) and mark it so (parameters ``shared_memory_region``,
    ``shared_memory_byte_size``: the bytes written, ``shared_memory_offset``
    when not 0: for the payload log and the transports, which send neither
    data nor parameters for it, as Triton). Raises InvalidInput when the
    room is too small for the result (Triton's text) or the region shrank."""
    buffer = binary.tensor_to_buffer(output.data, BY_NAME[output.datatype])
    size = memoryview(buffer).nbytes
    check_room(output.name, reference.byte_size, size)
    if size:
        span.write(buffer)
    mark_written(output, reference, size)
