"""ONNX Runtime sessions: options and execution providers from settings, the
model signature, and one :class:`OnnxModel` per loaded model version.

Execution providers come from ``ORT_EXECUTION_PROVIDERS`` (in order of
preference); ``CUDAExecutionProvider`` gets ``device_id`` from
``ORT_DEVICE_ID`` and the options of :mod:`inference.runtime.cuda`; a
session asked for a GPU provider is on it or fails to load.
Threads: ``ORT_INTRA_OP_THREADS`` / ``ORT_INTER_OP_THREADS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference.protocol.datatypes import BY_ORT
from inference.protocol.errors import DeadlineExceeded, InvalidInput
from inference.protocol.types import MetadataTensor
from inference.runtime import cuda

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


#: The model config parameter (``parameters { key: "onnxruntime_extensions" value: { string_value: "true" } }``)
#: that lets a model use ONNX Runtime Extensions' operators.
EXTENSIONS_PARAMETER = "onnxruntime_extensions"


def config_flag(parameters: dict, name: str) -> bool:
    """Whether a model config's ``parameters`` (name -> string value, or
    Triton's JSON form name -> ``{"string_value": ...}``) set ``name`` to
    ``true``, ``yes`` or ``1``, in any case."""
    value = parameters.get(name, "")
    if isinstance(value, dict):
        value = value.get("string_value", "")
    return str(value).strip().lower() in {"true", "yes", "1"}


def asks_for_extensions(parameters: dict) -> bool:
    """Whether a model config's ``parameters`` turn ONNX Runtime Extensions on (:func:`config_flag`)."""
    return config_flag(parameters, EXTENSIONS_PARAMETER)


class ProviderError(RuntimeError):
    """The configured execution providers are not available in this ONNX Runtime."""


def session_options(intra_op: int = 1, inter_op: int = 1, optimization: str = "all") -> ort.SessionOptions:
    """SessionOptions with the given thread counts (0 lets ONNX Runtime choose)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op
    options.inter_op_num_threads = inter_op
    options.graph_optimization_level = _OPT_LEVELS[optimization]
    options.log_severity_level = 3
    return options


def provider_list(names: Sequence[str], device_id: int = 0, options: cuda.CudaOptions | None = None) -> list:
    """Providers with their options (CUDA and TensorRT: ``device_id`` and
    ``options``, :mod:`inference.runtime.cuda`), refusing names this build lacks.

    Raises ProviderError naming the missing providers and those available.
    """
    available = ort.get_available_providers()
    missing = [name for name in names if name not in available]
    if missing:
        raise ProviderError(
            f"execution provider(s) {', '.join(missing)} not available in this ONNX Runtime "
            f"(available: {', '.join(available)})"
        )
    providers: list = []
    for name in names:
        if name == cuda.CUDA:
            providers.append((name, cuda.cuda_options(device_id, options or cuda.CudaOptions())))
        elif name == cuda.TENSORRT and options is not None and options.tensorrt_cache:
            providers.append((name, cuda.tensorrt_options(device_id, options)))
        else:
            providers.append(name)
    return providers


def with_extensions(options: ort.SessionOptions | None) -> ort.SessionOptions:
    """A copy of ``options`` (threads, optimization level, log level) with the
    custom operators of ONNX Runtime Extensions registered: tokenizers, string
    and audio/image operators of the ``ai.onnx.contrib`` domain
    (https://github.com/microsoft/onnxruntime-extensions/blob/main/docs/custom_ops.md).
    Only the library of the installed ``onnxruntime-extensions`` package is
    ever registered, never a library named by a model or an upload.

    Raises ProviderError when the package is not installed."""
    return variant(options, extensions=True)


def variant(options: ort.SessionOptions | None, extensions: bool = False, shared_weights: bool = False):
    """``options`` for one model: unchanged for neither; otherwise a copy
    (threads, optimization level, log level) that registers ONNX Runtime
    Extensions' operators (``extensions``, see :func:`with_extensions`)
    and/or reads weights where they lie (``shared_weights``:
    ``session.disable_prepacking``, so that memory-mapped weights stay shared
    by the machine's processes, :mod:`inference.runtime.shared_weights`).
    Raises ProviderError when the extensions are asked for but not installed."""
    base = options or session_options()
    if not (extensions or shared_weights):
        return base
    copy = ort.SessionOptions()
    copy.intra_op_num_threads = base.intra_op_num_threads
    copy.inter_op_num_threads = base.inter_op_num_threads
    copy.graph_optimization_level = base.graph_optimization_level
    copy.log_severity_level = base.log_severity_level
    if shared_weights:
        copy.add_session_config_entry("session.disable_prepacking", "1")
    if extensions:
        try:
            import onnxruntime_extensions
        except ImportError:
            raise ProviderError("the model asks for ONNX Runtime Extensions, which are not installed") from None
        copy.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    return copy


def create_session(
    path: str | Path,
    options: ort.SessionOptions | None = None,
    providers: list | None = None,
    extensions: bool = False,
    shared_weights: bool = False,
):
    """An InferenceSession for the model file at ``path`` with ``options``
    made :func:`variant` for the model (``extensions``: its config's
    ``onnxruntime_extensions`` parameter; ``shared_weights``: its weights are
    memory-mapped external data to keep shared).

    With a GPU provider asked for (:mod:`inference.runtime.cuda`), the
    session is on it or none is made: raises NotOnDevice when ONNX Runtime
    built it on the CPU, GpuOutOfMemory / DeviceFailed for those CUDA errors."""
    options = variant(options, extensions, shared_weights)
    providers = providers or ["CPUExecutionProvider"]
    if not cuda.device_providers(providers):
        return ort.InferenceSession(str(path), sess_options=options, providers=providers)
    try:  # on a GPU: no silent retry on the CPU, at creation or at run (ONNX Runtime's fallback)
        session = ort.InferenceSession(str(path), sess_options=options, providers=providers, enable_fallback=0)
    except Exception as exc:
        cuda.raise_for_gpu_error(str(exc), f"creating a session of {Path(path).name}")
        raise
    session.disable_fallback()
    cuda.require_providers(session, providers, f"the session of {Path(path).name}")
    return session


def _dims(shape) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)


def describe_tensors(args, kind: str) -> tuple[MetadataTensor, ...]:
    """ONNX Runtime's NodeArgs (``session.get_inputs()`` ...) as protocol
    metadata (-1 for symbolic dims). Raises TypeError for a tensor whose type
    the protocol cannot carry (sequences, maps, optional types, bfloat16, ...)."""
    out = []
    for arg in args:
        datatype = BY_ORT.get(arg.type)
        if datatype is None:
            raise TypeError(
                f"{kind} '{arg.name}' has type {arg.type}, which the inference protocol cannot carry "
                "(for scikit-learn classifiers export with zipmap=False)"
            )
        out.append(MetadataTensor(arg.name, datatype.name, _dims(arg.shape)))
    return tuple(out)


def signature(session) -> tuple[tuple[MetadataTensor, ...], tuple[MetadataTensor, ...]]:
    """Inputs and outputs of a session as protocol metadata (-1 for symbolic dims).

    Raises TypeError for a tensor whose type the protocol cannot carry
    (sequences, maps, optional types, bfloat16, ...).
    """
    return describe_tensors(session.get_inputs(), "input"), describe_tensors(session.get_outputs(), "output")


_STATE = ort.capi.onnxruntime_pybind11_state
#: What ``session.run`` raises for a failed run (EPFail: an execution provider's, e.g. a CUDA error).
_RUN_ERRORS = (_STATE.InvalidArgument, _STATE.Fail, *((_STATE.EPFail,) if hasattr(_STATE, "EPFail") else ()))


class OnnxModel:
    """A loaded model version: runs ONNX Runtime with protocol-shaped tensors.

    BYTES inputs (``object`` arrays of ``bytes``) are decoded as UTF-8 text
    for ONNX Runtime's string tensors; string outputs come back as ``object``
    arrays of ``str``. Thread-safe (``InferenceSession.run`` is).
    """

    def __init__(self, session):
        self.session = session
        self.directory = None  # the model file's directory, when known (warm-up samples' files)
        inputs, _ = signature(session)
        defaults = [a for a in session.get_overridable_initializers() if a.type in BY_ORT]
        inputs += describe_tensors(defaults, "input")  # what a request may give for an optional input
        self.string_inputs = frozenset(t.name for t in inputs if t.datatype == "BYTES")
        # The binding's own run (``InferenceSession._sess``) where there is one: the Python wrapper's
        # checks on every call repeat the request checks (required inputs) or do not apply here (OrtValue
        # feeds, WebGPU graph capture), ~2% of a small request; and on an execution provider's failure
        # the wrapper would move the session to the CPU and run again, where a GPU must fail loudly.
        binding = getattr(session, "_sess", None)
        self._run = binding.run if binding is not None else session.run

    def run(self, feeds: dict[str, np.ndarray], output_names: list[str], run_options=None) -> list[np.ndarray]:
        """Run the model; raises InvalidInput for BYTES input that is not UTF-8
        and for errors ONNX Runtime reports about the inputs, DeadlineExceeded
        when ``run_options`` was terminated by the deadline watchdog, and on a
        GPU GpuOutOfMemory or DeviceFailed (:func:`inference.runtime.cuda.classify`)."""
        if self.string_inputs:
            feeds = dict(feeds)
            for name in self.string_inputs:
                if name in feeds:  # an optional input may be left out
                    feeds[name] = _to_text(name, feeds[name])
        try:
            return self._run(output_names, feeds, run_options)
        except _RUN_ERRORS as exc:
            if run_options is not None and run_options.terminate:
                raise DeadlineExceeded("the request's deadline passed while the model was running") from None
            cuda.raise_for_gpu_error(str(exc), "the model's run")
            raise InvalidInput(f"the model rejected the inputs: {exc}") from None


def _to_text(name: str, array: np.ndarray) -> np.ndarray:
    out = np.empty(array.shape, dtype=object)
    flat_out = out.reshape(-1)
    try:
        for i, item in enumerate(array.flat):
            flat_out[i] = item if isinstance(item, str) else bytes(item).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"inference input '{name}': BYTES element {i} is not valid UTF-8 ({exc.reason} at byte {exc.start}): "
            "string tensors hold text here (ONNX Runtime's Python API decodes every string it returns as UTF-8; "
            "docs/v2-rest.md, Strings)"
        ) from None
    return out
