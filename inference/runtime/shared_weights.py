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
renamed into place whole). Measured in ``bench/shared_weights.py``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, numpy_helper

ALIGNMENT = 64 * 1024  # the allocation granularity of every platform ONNX Runtime maps files on
MIN_TENSOR_BYTES = 64 * 1024  # smaller initializers stay inside the model file
MODEL_FILENAME = "model.onnx"
WEIGHTS_FILENAME = "weights.bin"


def artifact_bytes(path: Path) -> int:
    """Bytes of a model file and the files beside it (its external data)."""
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())


def machine_copy(path: Path, sha256: str, root: Path, min_bytes: int) -> Path:
    """The model file a session should load for the artifact at ``path``
    (content ``sha256``): ``path`` itself below ``min_bytes`` (or when
    ``min_bytes`` is 0), else this machine's copy with aligned external
    weights under ``root`` (made now if no process of the machine made it
    yet). Raises OSError or onnx's errors when the copy cannot be written."""
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
            write_aligned(path, staging)
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


def write_aligned(source: Path, directory: Path) -> None:
    """Write the model at ``source`` (and its external data) into
    ``directory`` as ``model.onnx`` + ``weights.bin``: each initializer of at
    least MIN_TENSOR_BYTES in ``weights.bin`` at an offset that is a multiple
    of ALIGNMENT, the rest inside the model file. Holds the model in memory
    once while it writes."""
    model = onnx.load(str(source), load_external_data=True)
    offset = 0
    with open(directory / WEIGHTS_FILENAME, "wb") as weights:
        for tensor in _initializers(model.graph):
            if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
                continue
            data = tensor.raw_data if tensor.HasField("raw_data") else None
            if data is None:
                data = numpy_helper.to_array(tensor).tobytes()
            if len(data) < MIN_TENSOR_BYTES:
                continue
            padding = -offset % ALIGNMENT
            weights.write(b"\0" * padding)
            offset += padding
            weights.write(data)
            dims, name, data_type = list(tensor.dims), tensor.name, tensor.data_type
            tensor.Clear()
            tensor.name, tensor.data_type = name, data_type
            tensor.dims.extend(dims)
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", WEIGHTS_FILENAME), ("offset", offset), ("length", len(data))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            offset += len(data)
        weights.flush()
        os.fsync(weights.fileno())
    onnx.save(model, str(directory / MODEL_FILENAME))
