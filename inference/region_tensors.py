"""Tensors in system shared-memory regions (Triton's shared-memory extension:
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_shared_memory.md):
the tensor parameters that name a region (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``; :func:`tensor_reference`),
reading an input from its region and writing an output into one, and
mapping a checked span in an inference worker (:func:`map_span`).

A tensor's bytes are the binary tensor data layout (BYTES: 4-byte
little-endian length, then the bytes, per element). The registered regions
themselves are :mod:`inference.shared_memory`.
"""

from __future__ import annotations

import mmap
import os
import stat
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
    machine maps it (:func:`map_span`)."""

    key: str
    offset: int
    nbytes: int


@dataclass
class RegionPlan:
    """One request's tensors in shared-memory regions, for an executor whose
    worker, on this machine, maps them itself: numeric inputs (name -> span;
    the feed gives dtype and shape) and requested outputs (name -> the room
    in the region)."""

    inputs: dict[str, ObjectSpan] = field(default_factory=dict)
    outputs: dict[str, ObjectSpan] = field(default_factory=dict)


def map_span(span: ObjectSpan) -> memoryview:
    """Map a span of a shared-memory object in this process (an inference
    worker on the front end's machine, which checked the span against the
    caller's region): a writable view, mapped while it lives. The object is
    opened without following links and must be a regular file holding the
    span. Raises InvalidInput."""
    try:
        fd = os.open(object_path(span.key), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInput(f"Unable to open shared memory region: '{span.key}' ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        end = span.offset + span.nbytes
        if not stat.S_ISREG(info.st_mode) or info.st_size < end:
            raise InvalidInput(f"Invalid shared memory region: '{span.key}' (it does not hold {end} bytes)")
        if not span.nbytes:
            return memoryview(bytearray())
        start = span.offset - span.offset % mmap.ALLOCATIONGRANULARITY
        return memoryview(mmap.mmap(fd, end - start, offset=start))[span.offset - start :]
    finally:
        os.close(fd)


def written_output(
    name: str, datatype: str, reference: TensorReference, view: memoryview, shape: tuple, size: int
) -> ResponseOutput:
    """An output an inference worker wrote into its region (``size`` bytes
    of ``shape`` at the start of ``view``, the span ``reference`` names): a
    view of it there (for the payload log), marked written."""
    array = binary.tensor_from_buffer(f"output '{name}'", BY_NAME[datatype], shape, view[:size])
    output = ResponseOutput(name, datatype, shape, array)
    mark_written(output, reference, size)
    return output


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


def read_input(registry, owner: str, tensor: RequestInput, reference: TensorReference) -> tuple[np.ndarray, ObjectSpan]:
    """The data of an input sent in a region: a view of the mapping for
    numeric datatypes (no copy), the length-prefixed elements for BYTES; and
    where it lies in its object. ``shared_memory_byte_size`` must be exactly
    the tensor's bytes. ``registry``: the machine's RegionRegistry
    (:meth:`inference.shared_memory.RegionRegistry.span`). Raises InvalidInput naming the input."""
    where = f"input '{tensor.name}'"
    located, view = registry.span(owner, reference, where)
    return binary.tensor_from_buffer(where, BY_NAME[tensor.datatype], tensor.shape, view), located


def check_room(name: str, room: int, size: int) -> None:
    """Raise InvalidInput (Triton's text) unless ``size`` bytes of output ``name`` fit in ``room`` bytes."""
    if size > room:
        raise InvalidInput(
            f"shared memory size specified with the request for output '{name}' "
            f"({room} bytes) should be at least {size} bytes to hold the results"
        )


def write_output(output: ResponseOutput, reference: TensorReference, view: memoryview) -> None:
    """Write an output's binary form into ``view`` (the span ``reference``
    names, :meth:`RegionRegistry.view`) and mark it so (parameters
    ``shared_memory_region``, ``shared_memory_byte_size``: the bytes written,
    ``shared_memory_offset`` when not 0: for the payload log and the
    transports, which send neither data nor parameters for it, as Triton).
    Raises InvalidInput when the span is too small for the result (Triton's
    text)."""
    buffer = binary.tensor_to_buffer(output.data, BY_NAME[output.datatype])
    size = memoryview(buffer).nbytes
    check_room(output.name, reference.byte_size, size)
    if size:
        view[:size] = memoryview(buffer).cast("B")
    mark_written(output, reference, size)
