"""``model_warmup`` run at load, as Triton runs it (all modes, CPU too).

Triton's samples (``model_config.proto`` ``ModelWarmup``; core
``TritonModelInstance::GenerateWarmupData`` / ``WarmUp``): each sample names
its inputs with ``dims`` (without the batch dimension), a ``data_type`` and
one of ``zero_data``, ``random_data`` (zeros for TYPE_STRING) or
``input_data_file`` (raw row-major bytes in the model directory's
``warmup/`` folder; TYPE_STRING elements each a 4-byte length and the
bytes); ``batch_size`` requests of one row run as one batch (``batch_size``
0: skipped), ``count`` times (0: once), on every model instance, before the
version serves. A sample that fails fails the load ("failed to run warmup
sample '<name>'"); a sample must give every input the model needs (control
inputs of a sequence model are the server's, filled here as at a sequence's
start).

Beyond Triton, with dynamic batching a zero sample per preferred batch size
the config's samples do not cover (so the first batch of each size does not
pay cuDNN's algorithm search and the arena's growth), when the inputs'
shapes are fixed but for the batch dimension. The model store keeps only
the model file and its external data, so a sample whose ``input_data_file``
is not next to the model is skipped with a warning. Each sample run is one
log line; the runner counts them (``counts["warmups"]``). Warm-up runs are
not inference requests: the statistics extension counts clients' requests
only.

A version without ``model_warmup`` gets one run of zeros per instance at
load instead (:func:`first_runs`, SESSION_FIRST_RUN; beyond Triton, whose
default is none): a failure there does not fail the load.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference.protocol.datatypes import BY_NAME, BY_TRITON
from inference.protocol.errors import ModelNotReady
from inference.runtime import cuda
from inference.runtime.onnx import describe_tensors

logger = logging.getLogger(__name__)

ZERO, RANDOM, FILE = "zero", "random", "file"


@dataclass(frozen=True)
class WarmupInput:
    name: str
    datatype: str  # protocol name (FP32, BYTES, ...)
    dims: tuple[int, ...]  # without the batch dimension
    source: str = ZERO  # zero, random or file
    file: str = ""  # input_data_file, under the model's warmup/ folder


@dataclass(frozen=True)
class WarmupSample:
    name: str
    batch_size: int
    count: int
    inputs: tuple[WarmupInput, ...]
    batched: bool = True  # the model's max_batch_size > 0: a batch dimension of batch_size rows first


class WarmupFailed(ModelNotReady):
    """A warm-up sample failed: the version does not load (Triton's rule)."""


def samples_for(raw, batching=None, signature=(), max_batch_size: int = 0) -> tuple[WarmupSample, ...]:
    """The samples of a config's ``model_warmup`` (Triton's JSON form; a
    batch dimension first when ``max_batch_size`` > 0, as Triton adds it), then
    one zero sample per preferred batch size of ``batching`` (a
    BatchingPolicy) not covered, when ``signature``'s inputs
    (MetadataTensors, batch dimension first) are fixed but for it. An
    input's unset ``data_type`` is the signature's."""
    types = {t.name: t.datatype for t in signature}
    samples = []
    for sample in raw or ():
        inputs = []
        for name, spec in (sample.get("inputs") or {}).items():
            datatype = BY_TRITON.get(spec.get("data_type", ""))
            source = FILE if spec.get("input_data_file") else RANDOM if spec.get("random_data") else ZERO
            inputs.append(
                WarmupInput(
                    name, datatype.name if datatype else types.get(name, "FP32"),
                    tuple(int(d) for d in spec.get("dims") or ()), source, spec.get("input_data_file", ""),
                )
            )  # fmt: skip
        samples.append(
            WarmupSample(
                sample.get("name") or f"sample_{len(samples)}", int(sample.get("batch_size") or 0),
                max(1, int(sample.get("count") or 0)), tuple(inputs), max_batch_size > 0,
            )
        )  # fmt: skip
    if batching is not None and batching.max_batch_size > 0 and signature:
        covered = {s.batch_size for s in samples}
        fixed = all(len(t.shape) >= 1 and all(d >= 0 for d in t.shape[1:]) for t in signature)
        for size in batching.preferred_batch_sizes:
            if size not in covered and fixed:
                inputs = tuple(WarmupInput(t.name, t.datatype, tuple(t.shape[1:])) for t in signature)
                samples.append(WarmupSample(f"preferred_batch_size_{size}", size, 1, inputs))
    return tuple(samples)


def _array(spec: WarmupInput, shape: tuple[int, ...], directory: Path | None, rng) -> np.ndarray | None:
    datatype = BY_NAME[spec.datatype]
    if spec.source == FILE:
        path = (directory or Path(".")) / "warmup" / spec.file
        if directory is None or not path.is_file():
            return None
        data = path.read_bytes()
        if datatype.is_bytes:
            items, offset = [], 0
            while offset + 4 <= len(data) and len(items) < int(np.prod(shape)):
                length = int.from_bytes(data[offset : offset + 4], "little")
                items.append(data[offset + 4 : offset + 4 + length])
                offset += 4 + length
            return np.array(items, dtype=object).reshape(shape)
        need = int(np.prod(shape)) * datatype.itemsize
        if len(data) < need:
            raise WarmupFailed(f"warmup setting expects {need} bytes, but {spec.file} only has {len(data)} bytes")
        return np.frombuffer(data[:need], dtype=datatype.numpy).reshape(shape)
    if datatype.is_bytes:
        return np.full(shape, b"", dtype=object)
    if spec.source == RANDOM:
        raw = rng.integers(0, 256, size=int(np.prod(shape)) * datatype.itemsize, dtype=np.uint8)
        array = raw.view(datatype.numpy).reshape(shape)
        return np.nan_to_num(array) if array.dtype.kind == "f" else array
    return np.zeros(shape, dtype=datatype.numpy)


def feeds(sample: WarmupSample, target, session, directory: Path | None = None) -> dict | None:
    """The inputs of one run of ``sample`` on ``session`` (its
    ``get_inputs()``): ``batch_size`` rows when the model batches; None when
    a file of the sample is missing (skipped). Raises WarmupFailed for an
    input the sample lacks or a file too short."""
    batched = sample.batched
    rows = sample.batch_size
    rng = np.random.default_rng(0)
    out = {}
    for spec in sample.inputs:
        shape = ((rows,) if batched else ()) + spec.dims
        array = _array(spec, shape, directory, rng)
        if array is None:
            return None
        out[spec.name] = array
    if target.sequence is not None:
        policy = target.sequence
        for name, array in {**policy.controls_for(True, True, True, 1), **policy.initial_states()}.items():
            out.setdefault(name, np.repeat(array, rows, axis=0) if policy.batched and rows > 1 else array)
    optional = {a.name for a in session.get_overridable_initializers()}
    missing = [a.name for a in session.get_inputs() if a.name not in out and a.name not in optional]
    if missing:
        raise WarmupFailed(f"it gives no data for input(s) {', '.join(missing)} (a sample names every input)")
    return out


def warm_up(instance, target, where: str = "") -> int:
    """Run ``target.warmup``'s samples on one model instance (an OnnxModel:
    its ``session`` and ``directory``); the runs made. Raises WarmupFailed
    naming the sample."""
    runs = 0
    outputs = [o.name for o in instance.session.get_outputs()]
    for number, sample in enumerate(target.warmup):
        if sample.batch_size <= 0:
            logger.info("%s: skipping batch 0 warm-up sample '%s'", target.describe(), sample.name)
            continue
        try:
            given = feeds(sample, target, instance.session, getattr(instance, "directory", None))
            if given is None:
                logger.warning(
                    "%s: warm-up sample '%s' skipped: its input_data_file is not next to the model (the model "
                    "store keeps the model file only)", target.describe(), sample.name,
                )  # fmt: skip
                continue
            for iteration in range(sample.count):
                instance.run(given, outputs)
                runs += 1
                logger.info(
                    "%s%s: warm-up sample '%s' (%d of %d, batch size %d) iteration %d ran",
                    target.describe(), where, sample.name, number + 1, len(target.warmup), sample.batch_size,
                    iteration + 1,
                )  # fmt: skip
        except (cuda.DeviceFailed, cuda.GpuOutOfMemory):
            raise  # the GPU's, not the sample's: the worker goes, or the load is tried again
        except Exception as exc:
            reason = getattr(exc, "message", None) or str(exc)
            raise WarmupFailed(f"failed to run warmup sample '{sample.name}': {reason}") from None
    return runs


#: The most input bytes a first run (:func:`first_runs`) allocates; a model that takes more is not warmed.
FIRST_RUN_MAX_BYTES = 16 * 1024 * 1024
#: Versions this big (bytes) get no first run: one run of theirs costs far more than what a first run saves
#: (their load is bench/shared_weights.py's, which a run of zeros would lengthen).
FIRST_RUN_MAX_MODEL_BYTES = 256 * 1024 * 1024


def first_runs(instances, target) -> int:
    """One run of zeros on each freshly loaded instance (OnnxModels of one
    version) of a version without ``model_warmup`` (SESSION_FIRST_RUN), so
    that ONNX Runtime's first-run work (allocation planning, the arena's
    growth, kernels' lazy set-up) is done at load, not in a caller's request
    or in the compute latency a rollout's analysis compares. Only for
    versions under FIRST_RUN_MAX_MODEL_BYTES (``target.size``) with numeric
    inputs (a symbolic dim counts as 1) of at most FIRST_RUN_MAX_BYTES in
    all; a run that fails (a model that zeros do not suit) is skipped with a
    debug line: the version loads either way. GPU failures are raised as for
    any run. Returns the runs made."""
    if target.size >= FIRST_RUN_MAX_MODEL_BYTES or not instances:
        return 0
    session = instances[0].session
    try:
        inputs = describe_tensors(session.get_inputs(), "input")
    except TypeError:  # a type the protocol cannot carry: no request could feed it either
        return 0
    shapes = {t.name: (BY_NAME[t.datatype], tuple(max(d, 1) for d in t.shape)) for t in inputs}
    if any(datatype.is_bytes for datatype, _ in shapes.values()):
        return 0
    if sum(math.prod(shape) * datatype.itemsize for datatype, shape in shapes.values()) > FIRST_RUN_MAX_BYTES:
        return 0  # checked before anything is allocated
    given = {name: np.zeros(shape, dtype=datatype.numpy) for name, (datatype, shape) in shapes.items()}
    outputs = [o.name for o in session.get_outputs()]
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # a failed run is expected of some models: no ONNX Runtime error line
    runs = 0
    for instance in instances:
        try:
            instance.run(given, outputs, quiet)
        except (cuda.DeviceFailed, cuda.GpuOutOfMemory):
            raise
        except Exception as exc:
            logger.debug("%s: no first run of zeros (%s)", target.describe(), exc)
            return runs
        runs += 1
    return runs
