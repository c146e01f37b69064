"""Model weights shared by every process of a machine, through the page cache.

Each HTTP and gRPC process (and each CPU worker) of a machine runs its own
ONNX Runtime session of a model version. Loaded from an ONNX file whose
weights sit inside the protobuf, every session holds a private copy of
them. Loaded from a file whose weights are *external data* at offsets
aligned to :data:`ALIGNMENT`, ONNX Runtime memory-maps them instead
(https://onnxruntime.ai/docs/performance/model-optimizations/ort-format-models.html
and the external-data loader, ``tensorprotoutils.cc``), and the mapped
pages are the page cache's: one copy per machine, however many processes
serve the model. Weight pre-packing (which copies weights into a
kernel-specific layout per session) is turned off for such sessions
(``session.disable_prepacking``) so that the mapped weights stay the ones
the kernels read.

:func:`machine_copy` gives the file to load: the artifact itself when it is
smaller than the threshold; otherwise a copy with every initializer of at
least :data:`MIN_TENSOR_BYTES` in one ``weights.bin`` at aligned offsets,
built once per machine under ``root/<sha256>/`` (a file lock makes the
processes of the machine wait for the first one's copy; the copy is
renamed into place whole). Validation writes it (models_store/intake/
validation.py, with the model it has already parsed), so that a version is
READY with its copy on the validating machine and its first request only
maps it; a machine that did not validate the version writes it at its
first load. Weights held as external data are copied file to file
(``copy_file_range``), never through memory. Measured in
``bench/shared_weights.py``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, external_data_helper, numpy_helper

ALIGNMENT = 64 * 1024  # the allocation granularity of every platform ONNX Runtime maps files on
MIN_TENSOR_BYTES = 64 * 1024  # smaller initializers stay inside the model file
MODEL_FILENAME = "model.onnx"
WEIGHTS_FILENAME = "weights.bin"


@dataclass(frozen=True)
class Sharing:
    """How this machine shares big models' weights: copies under ``root``
    for artifacts of at least ``min_bytes``; ``prepack``: their sessions
    still pre-pack weights (SHARED_WEIGHTS_PREPACK)."""

    root: Path
    min_bytes: int
    prepack: bool = False

    def model_file(self, path: Path, sha256: str, model: onnx.ModelProto | None = None) -> Path:
        """:func:`machine_copy` of the artifact at ``path`` under this machine's settings."""
        return machine_copy(path, sha256, self.root, self.min_bytes, model)


def artifact_bytes(path: Path) -> int:
    """Bytes of a model file and the files beside it (its external data)."""
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())


def machine_copy(path: Path, sha256: str, root: Path, min_bytes: int, model: onnx.ModelProto | None = None) -> Path:
    """The model file a session should load for the artifact at ``path``
    (content ``sha256``): ``path`` itself below ``min_bytes`` (or when
    ``min_bytes`` is 0), else this machine's copy with aligned external
    weights under ``root`` (made now if no process of the machine made it
    yet). ``model``: ``path`` already parsed without its external data (a
    caller that holds it spares the parse); when the copy is written here its
    big initializers are moved out of it (they become references to
    ``weights.bin``: only their name, type and dims stay). Raises OSError or
    onnx's errors when the copy cannot be written."""
    if min_bytes <= 0 or artifact_bytes(path) < min_bytes:
        return path
    target = root / sha256 / MODEL_FILENAME
    if target.is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{sha256}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{sha256}-", dir=root))
        try:
            write_aligned(path, staging, model)
            os.rename(staging, target.parent)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _initializers(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _initializers(sub)


def _attribute_tensors(graph: onnx.GraphProto):
    """Tensors held by node attributes (Constant's value ...), in subgraphs too."""
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                yield attribute.t
            elif attribute.type == onnx.AttributeProto.TENSORS:
                yield from attribute.tensors
            elif attribute.type == onnx.AttributeProto.GRAPH:
                yield from _attribute_tensors(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _attribute_tensors(sub)


def _inline(tensor: onnx.TensorProto, base: Path) -> None:
    """Read a tensor's external data into it (its data then lives in the model file)."""
    external_data_helper.load_external_data_for_tensor(tensor, str(base))
    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT


def write_aligned(source: Path, directory: Path, model: onnx.ModelProto | None = None) -> None:
    """Write the model at ``source`` (and its external data) into
    ``directory`` as ``model.onnx`` + ``weights.bin``: each initializer of at
    least MIN_TENSOR_BYTES in ``weights.bin`` at an offset that is a multiple
    of ALIGNMENT, the rest inside the model file. ``model``: ``source``
    parsed without external data (parsed here when None); its big
    initializers are moved out of it. Inline weights are written from the
    parsed model; external ones are copied from their files, in the kernel
    (``os.copy_file_range``), never held in memory. ``weights.bin`` is
    fsynced before the model file is saved."""
    if model is None:
        model = onnx.load(str(source), load_external_data=False)
    base = source.parent
    for tensor in _attribute_tensors(model.graph):
        if external_data_helper.uses_external_data(tensor):
            _inline(tensor, base)
    spans = _raw_data_spans(source, len(model.graph.initializer))
    offset = 0
    with open(directory / WEIGHTS_FILENAME, "wb") as weights:
        for index, tensor in enumerate(_initializers(model.graph)):
            if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
                continue
            data = None
            if external_data_helper.uses_external_data(tensor):
                info = external_data_helper.ExternalDataInfo(tensor)
                file = base / info.location
                start = info.offset or 0
                length = info.length if info.length is not None else file.stat().st_size - start
                if length < MIN_TENSOR_BYTES:  # small: inline in the copy's model file
                    _inline(tensor, base)
                    continue
            elif index < len(spans) and spans[index] is not None and tensor.HasField("raw_data"):
                file, (start, length) = source, spans[index]  # copied from the file: no copy in memory
                if length < MIN_TENSOR_BYTES:
                    continue
            else:
                data = tensor.raw_data if tensor.HasField("raw_data") else None
                if data is None:
                    data = numpy_helper.to_array(tensor).tobytes()
                length = len(data)
                if length < MIN_TENSOR_BYTES:
                    continue
            padding = -offset % ALIGNMENT
            weights.write(b"\0" * padding)
            offset += padding
            if data is None:
                weights.flush()
                _copy_range(file, start, length, weights, offset)
                weights.seek(offset + length)
            else:
                weights.write(data)
                del data
            dims, name, data_type = list(tensor.dims), tensor.name, tensor.data_type
            tensor.Clear()
            tensor.name, tensor.data_type = name, data_type
            tensor.dims.extend(dims)
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", WEIGHTS_FILENAME), ("offset", offset), ("length", length)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            offset += length
        weights.flush()
        os.fsync(weights.fileno())
    onnx.save(model, str(directory / MODEL_FILENAME))


def _varint(file) -> int:
    result = shift = 0
    while True:
        byte = file.read(1)
        if not byte:
            raise EOFError("truncated protobuf")
        result |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return result
        shift += 7


def _fields(file, end: int):
    """(field number, offset, length) of each length-delimited field of the
    protobuf message from ``file``'s position to ``end``, the others skipped;
    the file is left after each field when the caller resumes."""
    while file.tell() < end:
        key = _varint(file)
        wire = key & 7
        if wire == 0:
            _varint(file)
        elif wire in (1, 5):
            file.seek(8 if wire == 1 else 4, os.SEEK_CUR)
        elif wire == 2:
            length = _varint(file)
            start = file.tell()
            yield key >> 3, start, length
            file.seek(start + length)
        else:
            raise ValueError(f"protobuf wire type {wire} unexpected in an ONNX model")


_GRAPH, _INITIALIZER, _RAW_DATA = 7, 5, 9  # ModelProto.graph, GraphProto.initializer, TensorProto.raw_data


def _raw_data_spans(source: Path, count: int) -> list[tuple[int, int] | None]:
    """Where the ``raw_data`` of each initializer of the main graph lies in
    the model file: (offset, length), or None for one without; read from the
    protobuf's framing alone (the weights themselves are skipped). An empty
    list when the file does not frame as expected (``count`` initializers
    in one graph field): the caller then reads the parsed model's bytes."""
    spans: list[tuple[int, int] | None] = []
    graphs = 0
    try:
        with open(source, "rb") as file:
            for number, start, length in _fields(file, source.stat().st_size):
                if number != _GRAPH:
                    continue
                graphs += 1
                for field, tensor_start, tensor_length in _fields(file, start + length):
                    if field != _INITIALIZER:
                        continue
                    span = None
                    for inner, data_start, data_length in _fields(file, tensor_start + tensor_length):
                        if inner == _RAW_DATA:
                            span = (data_start, data_length)
                    spans.append(span)
    except (OSError, EOFError, ValueError):
        return []
    return spans if graphs == 1 and len(spans) == count else []


def _copy_range(source: Path, start: int, length: int, target, at: int) -> None:
    """Copy ``length`` bytes of ``source`` from ``start`` into the open file
    ``target`` at ``at``: in the kernel where it can, else in 16 MiB reads.
    Raises OSError (EOFError-like ValueError when ``source`` is shorter)."""
    with open(source, "rb") as src:
        done = 0
        try:
            while done < length:
                n = os.copy_file_range(src.fileno(), target.fileno(), length - done, start + done, at + done)
                if n == 0:
                    raise ValueError(f"{source.name} ends before its external data ({start} + {length} bytes)")
                done += n
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
        except AttributeError:  # no copy_file_range on this platform
            pass
        src.seek(start + done)
        while done < length:
            chunk = src.read(min(16 << 20, length - done))
            if not chunk:
                raise ValueError(f"{source.name} ends before its external data ({start} + {length} bytes)")
            os.pwrite(target.fileno(), chunk, at + done)
            done += len(chunk)
