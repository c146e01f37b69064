"""Validate an ONNX artifact and extract its signature.

:func:`validate_artifact` runs, in order: the external-data safety check (no file outside the model's
directory, nor the model's own file), the ONNX checker, ONNX Runtime session creation (on the given
execution providers: a worker's device, CPU by default), signature extraction, the check against a
Triton ``config.pbtxt`` when one is given, the size check (no input larger than a request may be), and a
warm-up inference on zero inputs whose output shapes must agree with the ones the graph declares (a
warm-up that fails is a warning in the log, never a refusal: Triton loads such a model, its own example
``simple_string`` among them). Any other failure raises :class:`ValidationError` whose message is the
reason shown to users for a FAILED version: the model's directory (a worker's cache, the store) shown as
``<model dir>``, never as the absolute path of a server.

The warm-up is bounded: a 76-byte model may declare a fixed [40000, 40000]
FP32 input (6.4 GB). Its memory is estimated from the graph first (inputs,
outputs and the largest intermediate tensor whose shape is known, variable
dimensions at 1); above ``VALIDATION_WARMUP_MAX_BYTES`` it is skipped, and
the validation log says why.

A model at least as big as the machine shares (``sharing``,
:mod:`inference.runtime.shared_weights`) gets this machine's copy with
memory-mapped weights written right after the external-data check, from
the model already parsed, and the session is made from that copy (what the
server's processes will load): a READY version's first request only maps it.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from django.conf import settings
from onnx import external_data_helper

from inference.protocol.types import MetadataTensor
from inference.runtime import cuda
from inference.runtime import onnx as onnx_runtime
from inference.runtime.sequences.policy import SequencePolicy
from inference.runtime.shared_weights import Sharing
from models_store.config.triton import TritonConfig
from models_store.intake.tensor_checks import (  # ValidationError re-exported: callers raise and catch it from here
    ValidationError,
    check_input_sizes,
    check_output_shapes,
    element_bytes,
    warm_up_estimate,
    warm_up_feeds,
)

logger = logging.getLogger(__name__)

#: Control characters (C0, DEL, C1; NUL among them): never in a name that becomes a path.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: How a reason shows the model's directory.
MODEL_DIR = "<model dir>"


@dataclass
class Signature:
    """What validation learned: tensors (config dims applied) and model properties."""

    inputs: tuple[MetadataTensor, ...]
    outputs: tuple[MetadataTensor, ...]
    properties: dict = field(default_factory=dict)
    log: list[str] = field(default_factory=list)


def _all_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


#: Initializers larger than this lose their contents in the copy of the model
#: that validation keeps (:func:`without_weights`).
_WEIGHT_BYTES = 64 * 1024


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose large initializers (and tensor attributes)
    keep their name, type and dims but not their contents: what the
    signature, shape inference (no data propagation), labels and properties
    read, at the size of the graph rather than of the weights. The copy is
    parsed anew, so that dropping ``model`` returns the weights' memory
    (protobuf keeps a message's memory until the whole message goes)."""
    for tensor in _all_tensors(model.graph):
        # From dims and type: ByteSize() or reading raw_data would copy the contents.
        if tensor.data_location != onnx.TensorProto.EXTERNAL and (
            math.prod(tensor.dims) * element_bytes(tensor.data_type) > _WEIGHT_BYTES
        ):
            name, data_type, dims = tensor.name, tensor.data_type, list(tensor.dims)
            tensor.Clear()
            tensor.name, tensor.data_type = name, data_type
            tensor.dims.extend(dims)
    copy = onnx.ModelProto()
    copy.ParseFromString(model.SerializeToString())
    return copy


def external_data_files(model: onnx.ModelProto, model_dir: Path) -> list[Path]:
    """The files a model's external-data tensors reference, all inside ``model_dir``.

    Raises ValidationError for a location holding a control character
    (checked before any path is made of it), an absolute location, a ``..``
    component, a symlink, a path resolving outside ``model_dir``, or a
    missing file: ONNX Runtime would otherwise read arbitrary files of the
    server's disk.
    """
    root = model_dir.resolve()
    files: list[Path] = []
    for tensor in _all_tensors(model.graph):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        location = info.location
        if CONTROL_CHARACTERS.search(location):
            raise ValidationError(
                f"tensor '{tensor.name}' references external data at {location!r}: a location may not hold "
                "control characters"
            )
        parts = Path(location).parts
        if not location or os.path.isabs(location) or ".." in parts or location.startswith(("/", "\\")):
            raise ValidationError(
                f"tensor '{tensor.name}' references external data at {location!r}, outside the model's directory"
            )
        candidate = model_dir / location
        if candidate.is_symlink() or any((model_dir / Path(*parts[:i])).is_symlink() for i in range(1, len(parts))):
            raise ValidationError(f"tensor '{tensor.name}' references external data through a symlink ({location!r})")
        resolved = candidate.resolve()
        if not resolved.is_relative_to(root):
            raise ValidationError(
                f"tensor '{tensor.name}' references external data at {location!r}, outside the model's directory"
            )
        if not resolved.is_file():
            raise ValidationError(f"tensor '{tensor.name}' references missing external data file {location!r}")
        if resolved not in files:
            files.append(resolved)
    return files


def _apply_config(
    tensors: tuple[MetadataTensor, ...], configured, max_batch_size: int, kind: str
) -> tuple[MetadataTensor, ...]:
    """Check config.pbtxt tensors against the graph; config dims win where given."""
    by_name = {t.name: t for t in tensors}
    merged = dict(by_name)
    for conf in configured:
        tensor = by_name.get(conf.name)
        if tensor is None:
            raise ValidationError(
                f"config.pbtxt declares {kind} '{conf.name}', which the model does not have "
                f"(model {kind}s: {', '.join(by_name) or 'none'})"
            )
        if conf.datatype and conf.datatype != tensor.datatype:
            raise ValidationError(
                f"config.pbtxt declares {kind} '{conf.name}' as {conf.datatype}, the model has {tensor.datatype}"
            )
        if not conf.dims:
            continue
        dims = ((-1,) if max_batch_size > 0 else ()) + tuple(conf.dims)
        if len(dims) != len(tensor.shape) or any(
            m >= 0 and c >= 0 and m != c for m, c in zip(tensor.shape, dims, strict=True)
        ):
            raise ValidationError(
                f"config.pbtxt dims of {kind} '{conf.name}' {list(dims)} (batch dimension included) "
                f"do not match the model's shape {list(tensor.shape)}"
            )
        merged[conf.name] = MetadataTensor(
            tensor.name, tensor.datatype, tuple(m if m >= 0 else c for m, c in zip(tensor.shape, dims, strict=True))
        )
    return tuple(merged[t.name] for t in tensors)


def check_sequence_tensors(config: TritonConfig, inputs, outputs) -> None:
    """A sequence model's control inputs and state tensors must be graph
    tensors of the configured datatype (a state's rank: its dims, plus the
    batch dimension when the model batches), and control and state inputs
    are the server's: config.pbtxt may not list them as inputs."""
    if config.sequence_batching is None:
        return
    policy = SequencePolicy.from_config(config.sequence_batching, config.max_batch_size, config.name)
    graph_in = {t.name: t for t in inputs}
    graph_out = {t.name: t for t in outputs}
    listed = {t.name for t in config.inputs}
    wanted = [(name, c.datatype, None, graph_in, "control input") for name, cs in policy.control_inputs for c in cs]
    batch = 1 if policy.batched else 0
    for state in policy.states:
        rank = len(state.dims) + batch
        wanted.append((state.input_name, state.datatype, rank, graph_in, "state input"))
        wanted.append((state.output_name, state.datatype, rank, graph_out, "state output"))
    for name, datatype, rank, graph, kind in wanted:
        tensor = graph.get(name)
        if tensor is None:
            raise ValidationError(
                f"sequence_batching {kind} '{name}' is not a tensor of the model ({', '.join(graph) or 'none'})"
            )
        if tensor.datatype != datatype:
            raise ValidationError(f"sequence_batching {kind} '{name}' is {datatype}, the model has {tensor.datatype}")
        if rank is not None and len(tensor.shape) != rank:
            raise ValidationError(
                f"sequence_batching {kind} '{name}' has {rank} dimension(s) with the batch dimension, "
                f"the model's has shape {list(tensor.shape)}"
            )
        if kind != "state output" and name in listed:
            raise ValidationError(
                f"config.pbtxt lists '{name}' as an input, but it is a sequence_batching {kind} the server supplies"
            )


def _optional_inputs(session, inputs: tuple[MetadataTensor, ...], config: TritonConfig) -> tuple[MetadataTensor, ...]:
    """The inputs config.pbtxt marks ``optional`` that the graph lets a
    caller leave out: ONNX initializers a feed may override (ONNX Runtime's
    overridable initializers), which the session's inputs do not list.
    Raises ValidationError for an optional input the graph requires."""
    if not any(conf.optional for conf in config.inputs):
        return ()
    required = {t.name for t in inputs}
    try:
        defaults = {t.name: t for t in onnx_runtime.describe_tensors(session.get_overridable_initializers(), "input")}
    except TypeError as exc:
        raise ValidationError(str(exc)) from None
    found = []
    for conf in config.inputs:
        if not conf.optional:
            continue
        if conf.name in required:
            raise ValidationError(
                f"config.pbtxt marks input '{conf.name}' optional, but the model requires it: only an input "
                "with a default value (an ONNX initializer) can be left out"
            )
        if conf.name in defaults:
            found.append(defaults[conf.name])
    return tuple(found)


def class_labels(model: onnx.ModelProto) -> list[str]:
    """Class labels of a classifier, in output column order.

    From the model's metadata property ``labels`` (a JSON array, or one label
    per line) when present, else from an ``ai.onnx.ml`` classifier node's
    ``classlabels_strings`` / ``classlabels_int64s`` (scikit-learn exports).
    Empty when neither exists.
    """
    for prop in model.metadata_props:
        if prop.key == "labels":
            text = prop.value.strip()
            if text.startswith("["):
                try:
                    return [str(v) for v in json.loads(text)]
                except ValueError:
                    pass
            return [line.strip() for line in text.splitlines() if line.strip()]
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.name == "classlabels_strings" and attr.strings:
                return [v.decode("utf-8", "replace") for v in attr.strings]
            if attr.name in ("classlabels_int64s", "classlabels_ints") and attr.ints:
                return [str(v) for v in attr.ints]
    return []


def _extensions_hint(model: onnx.ModelProto, extensions: bool) -> str:
    """What to do when a session fails over operators of ONNX Runtime
    Extensions' domain that the model's config did not ask for."""
    domains = {imp.domain for imp in model.opset_import} | {node.domain for node in model.graph.node}
    if extensions or "ai.onnx.contrib" not in domains:
        return ""
    return (
        " (the model uses operators of the ai.onnx.contrib domain, ONNX Runtime Extensions: its config.pbtxt must "
        f'ask for them with parameters {{ key: "{onnx_runtime.EXTENSIONS_PARAMETER}" '
        'value: { string_value: "true" } })'
    )


def validate_artifact(
    path: Path,
    config: TritonConfig | None = None,
    log: list[str] | None = None,
    providers: list | None = None,
    sharing: Sharing | None = None,
    sha256: str = "",
) -> Signature:
    """Validate the ONNX file at ``path`` (see module docstring).

    ``providers``: ONNX Runtime execution providers of the session (names or
    ``(name, options)`` pairs, as :func:`inference.runtime.onnx.provider_list`
    gives them; default CPU), so that a GPU worker's warm-up runs on its GPU.
    ``sharing`` and ``sha256`` (the artifact's content hash): write this
    machine's copy with shared weights of a big model now and validate the
    session the servers will make from it (None: the artifact itself).

    Returns the Signature; raises ValidationError with a user-facing reason
    (:func:`without_model_dir`), OSError (no space left) when the copy
    cannot be written for a full disk. Each step that passed is appended to
    ``log`` when given (so that a caller sees how far a failed validation
    got) and to ``Signature.log``.
    """
    try:
        return _validate(path, config, [] if log is None else log, providers, sharing if sha256 else None, sha256)
    except ValidationError as exc:
        raise ValidationError(without_model_dir(str(exc), path.parent)) from None


def without_model_dir(text: str, model_dir: Path) -> str:
    """``text`` with the absolute path of ``model_dir`` (as given, and
    resolved) shown as :data:`MODEL_DIR`."""
    for shown in sorted({str(model_dir), str(model_dir.resolve())}, key=len, reverse=True):
        if os.path.isabs(shown):
            text = text.replace(shown, MODEL_DIR)
    return text


def _shared_copy(path: Path, model: onnx.ModelProto, sharing: Sharing, sha256: str, log: list[str]) -> Path:
    """This machine's copy of a big model with memory-mapped weights
    (written now, from ``model``, unless a process of the machine did), or
    ``path`` for a model below the threshold or one whose copy cannot be
    written (the checker or ONNX Runtime then says what is wrong with it).
    Raises OSError for a full disk (the validation is retried)."""
    started = time.monotonic()
    existed = (sharing.root / sha256).is_dir()
    try:
        copy = sharing.model_file(path, sha256, model)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise
        logger.warning("%s: this machine's copy with shared weights could not be written: %s", path, exc)
        return path
    except Exception as exc:  # a malformed model: the steps below report it
        logger.info("%s: no copy with shared weights (%s: %s)", path, type(exc).__name__, exc)
        return path
    if copy != path:
        how = "was there" if existed else f"written in {time.monotonic() - started:.1f} s"
        log.append(f"this machine's copy with shared weights {how} (SHARED_WEIGHTS_MIN_MB; the servers map it)")
    return copy


def _validate(
    path: Path,
    config: TritonConfig | None,
    log: list[str],
    providers: list | None,
    sharing: Sharing | None,
    sha256: str,
) -> Signature:
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, ValueError, OSError...
        raise ValidationError(f"not a readable ONNX model: {exc}") from None
    if path.resolve() in external_data_files(model, path.parent):  # ONNX Runtime would read the model as a weight
        raise ValidationError(f"the model references its own file {path.name!r} as external data")
    session_path = path if sharing is None else _shared_copy(path, model, sharing, sha256, log)
    model = without_weights(model)  # memory: the checker and the session read the file themselves
    try:  # the copy's model file holds the same graph with its weights referenced: checked without reading them
        onnx.checker.check_model(str(session_path))
    except Exception as exc:
        if session_path == path:
            raise ValidationError(f"ONNX checker: {exc}") from None
        try:
            onnx.checker.check_model(str(path))  # the reason, about the model's own file
        except Exception as reason:
            raise ValidationError(f"ONNX checker: {reason}") from None
        logger.warning("%s: the ONNX checker refused this machine's copy, not the model: %s", path, exc)
    log.append("ONNX checker passed")
    extensions = config is not None and onnx_runtime.asks_for_extensions(config.parameters)
    providers = providers or ["CPUExecutionProvider"]
    try:
        try:
            shared = session_path != path and not sharing.prepack
            session = onnx_runtime.create_session(session_path, None, providers, extensions, shared)
        except Exception:
            if session_path == path:
                raise
            session = onnx_runtime.create_session(path, None, providers, extensions)  # its error names the model
            logger.warning("%s: a session of this machine's copy failed where the model's own did not", path)
    except cuda.GPU_BUSY:
        raise  # the GPU's state, not the model's: validation is retried (models_store/intake/validating.py)
    except Exception as exc:
        hint = _extensions_hint(model, extensions)
        raise ValidationError(f"ONNX Runtime could not create a session: {exc}{hint}") from None
    if extensions:
        log.append("ONNX Runtime Extensions' operators registered (parameter onnxruntime_extensions)")
    log.append(f"ONNX Runtime session created ({', '.join(session.get_providers())})")
    try:
        inputs, outputs = onnx_runtime.signature(session)
    except TypeError as exc:
        raise ValidationError(str(exc)) from None
    if config is not None:
        inputs = inputs + _optional_inputs(session, inputs, config)
        inputs = _apply_config(inputs, config.inputs, config.max_batch_size, "input")
        outputs = _apply_config(outputs, config.outputs, config.max_batch_size, "output")
        if config.max_batch_size > 0:
            for tensor in inputs + outputs:
                if not tensor.shape or tensor.shape[0] >= 0:
                    raise ValidationError(
                        f"max_batch_size is {config.max_batch_size} but '{tensor.name}' has no variable "
                        f"first (batch) dimension: {list(tensor.shape)}"
                    )
        check_sequence_tensors(config, inputs, outputs)
    log.append(
        "signature: inputs "
        + ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in inputs)
        + "; outputs "
        + ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in outputs)
    )
    check_input_sizes(inputs, settings.MAX_REQUEST_BYTES)
    cap = settings.VALIDATION_WARMUP_MAX_BYTES
    estimate, largest = warm_up_estimate(model, inputs)
    if estimate > cap:
        line = (
            f"warm-up skipped: it would allocate at least {estimate} bytes ({largest}), more than "
            f"VALIDATION_WARMUP_MAX_BYTES ({cap}); the graph was checked without running it"
        )
        logger.info("%s: %s", path, line)
        log.append(line)
    else:
        names = [t.name for t in outputs]
        try:
            model_runner = onnx_runtime.OnnxModel(session)
            results = model_runner.run(warm_up_feeds(inputs, config), names)
        except cuda.GPU_BUSY:
            raise
        except Exception as exc:
            # Synthetic data proves nothing about the model (Triton warms up only on its
            # model_warmup samples): its own example simple_string casts "" to a number.
            line = (
                f"warning: warm-up inference on zero inputs failed: {exc}; the version serves all the same "
                "(as in Triton: give model_warmup samples in config.pbtxt for a warm-up that must pass)"
            )
            logger.warning("%s: %s", path, line)
            log.append(without_model_dir(line, path.parent))
        else:
            check_output_shapes(model, names, results)
            log.append(
                "warm-up inference on zero inputs: "
                + ", ".join(f"{r.shape}" for r in results)
                + " (the shapes the graph declares)"
            )
    properties = {
        "ir_version": model.ir_version,
        "opsets": {imp.domain or "ai.onnx": imp.version for imp in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "metadata": {p.key: p.value for p in model.metadata_props},
        "labels": class_labels(model),
    }
    return Signature(inputs, outputs, properties, log)
