"""ONNX Runtime on an NVIDIA GPU: one concept, a session that really runs on
its GPU or a load that fails saying why.

- **Provider options** (:class:`CudaOptions`, from settings): the CUDA
  execution provider's ``device_id``, ``gpu_mem_limit`` (bytes per session:
  per model instance), ``arena_extend_strategy`` (``kSameAsRequested``: the
  arena grows by what is asked, not to the next power of two),
  ``cudnn_conv_algo_search`` (``HEURISTIC``: no exhaustive benchmark per new
  input shape) and ``do_copy_in_default_stream``; the TensorRT execution
  provider in front of it, opt-in, with an engine cache directory
  (https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html,
  .../TensorRT-ExecutionProvider.html).
- **The check** (:func:`require_providers`): ONNX Runtime builds a CPU
  session, with only a warning, when the CUDA provider's libraries do not
  load, and its Python wrapper retries on the CPU when a session on the GPU
  cannot be created. Every session asked for a GPU provider must have it
  first in ``session.get_providers()``, or the load fails
  (:class:`NotOnDevice`). The seam is the session itself: anything with
  ``get_providers()``.
- **The probe** (:func:`probe`): a worker of a GPU creates one tiny session
  at start-up and refuses to start (:class:`GpuUnavailable`) when it is not
  on its GPU, naming the cause (:func:`diagnose`): a wheel without CUDA,
  libraries that do not load, an ordinal out of range.
- **Errors** (:func:`classify`): a GPU out of memory (retry later, elsewhere)
  and a CUDA error that persists in the process's context (the worker must
  go: :class:`DeviceFailed`).
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from inference.protocol.errors import ModelNotReady

CUDA, TENSORRT, CPU = "CUDAExecutionProvider", "TensorrtExecutionProvider", "CPUExecutionProvider"
ARENA_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")
CONV_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


@dataclass(frozen=True)
class CudaOptions:
    """The GPU providers' options (settings ``ORT_CUDA_*``, ``WORKER_TENSORRT*``).

    ``mem_limit_bytes``: ``gpu_mem_limit`` of each session's arena (0: ONNX
    Runtime's default, no limit); ``tensorrt``: put the TensorRT provider
    first, caching engines in ``tensorrt_cache`` (built once per model, input
    shape and GPU; the first load of a model takes minutes without it)."""

    mem_limit_bytes: int = 0
    arena_extend_strategy: str = "kSameAsRequested"
    cudnn_conv_algo_search: str = "HEURISTIC"
    copy_in_default_stream: bool = True
    tensorrt: bool = False
    tensorrt_cache: str = ""
    tensorrt_fp16: bool = False

    def __post_init__(self) -> None:
        if self.arena_extend_strategy not in ARENA_STRATEGIES:
            raise ValueError(f"arena_extend_strategy must be one of {', '.join(ARENA_STRATEGIES)}")
        if self.cudnn_conv_algo_search not in CONV_SEARCHES:
            raise ValueError(f"cudnn_conv_algo_search must be one of {', '.join(CONV_SEARCHES)}")
        if self.mem_limit_bytes < 0:
            raise ValueError("gpu_mem_limit must be 0 (no limit) or a number of bytes")
        if self.tensorrt and not self.tensorrt_cache:
            raise ValueError("the TensorRT provider needs an engine cache directory")


def cuda_options(ordinal: int, options: CudaOptions = CudaOptions()) -> dict:
    """The CUDA provider's options for GPU ``ordinal`` (as the process sees it)."""
    given = {
        "device_id": ordinal,
        "arena_extend_strategy": options.arena_extend_strategy,
        "cudnn_conv_algo_search": options.cudnn_conv_algo_search,
        "do_copy_in_default_stream": options.copy_in_default_stream,
    }
    if options.mem_limit_bytes:
        given["gpu_mem_limit"] = options.mem_limit_bytes
    return given


def tensorrt_options(ordinal: int, options: CudaOptions) -> dict:
    """The TensorRT provider's options: engines and timings cached in ``options.tensorrt_cache``."""
    return {
        "device_id": ordinal,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": options.tensorrt_cache,
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": options.tensorrt_cache,
        "trt_fp16_enable": options.tensorrt_fp16,
    }


def gpu_providers(ordinal: int, options: CudaOptions = CudaOptions()) -> list:
    """``(name, options)`` pairs for a session on GPU ``ordinal`` (as the
    process sees it): TensorRT (opt-in), CUDA, then the CPU for the
    operators neither runs. Nothing is checked here (:func:`probe` does)."""
    first = [(TENSORRT, tensorrt_options(ordinal, options))] if options.tensorrt else []
    return [*first, (CUDA, cuda_options(ordinal, options)), CPU]


def provider_name(provider) -> str:
    """The name of a provider given as a name or a ``(name, options)`` pair."""
    return provider if isinstance(provider, str) else provider[0]


def device_providers(providers) -> list[str]:
    """The names of the providers asked for that are not the CPU's, in order."""
    return [name for name in map(provider_name, providers or ()) if name != CPU]


class NotOnDevice(ModelNotReady):
    """A session asked for a GPU provider came out without it (ONNX Runtime fell back to the CPU)."""


def require_providers(session, providers, what: str = "the session") -> list[str]:
    """The providers of ``session`` (anything with ``get_providers()``);
    raises NotOnDevice unless those asked for that are not the CPU's come
    first, in order (e.g. ``["CUDAExecutionProvider", "CPUExecutionProvider"]``
    for a CUDA session)."""
    got = list(session.get_providers())
    wanted = device_providers(providers)
    if got[: len(wanted)] != wanted:
        raise NotOnDevice(
            f"{what} runs on {', '.join(got) or 'no provider'} instead of {', '.join(wanted)}: ONNX Runtime "
            "fell back to the CPU, which a GPU worker never serves on (see the worker's start-up line and "
            "docs/worker-mode.md, first run on a GPU)"
        )
    return got


class GpuUnavailable(RuntimeError):
    """A GPU worker's probe session is not on its GPU; the message names the cause."""


def visible_gpus(environ=os.environ, count_devices=None) -> int | None:
    """GPUs this process may see: the entries of ``CUDA_VISIBLE_DEVICES``
    when it is set (CUDA stops at the first invalid one; not checked here),
    else ``count_devices()`` (NVML's count, :mod:`inference.runtime.gpu_memory`);
    None when neither can tell."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([entry for entry in listed.split(",") if entry.strip()])
    if count_devices is None:
        return None
    try:
        return count_devices()
    except Exception:
        return None


def _capi_dir() -> Path:
    return Path(ort.__file__).parent / "capi"


def cuda_build() -> str:
    """The CUDA version this ONNX Runtime was built with ("" when it does not say)."""
    try:
        from onnxruntime.capi import build_and_package_info as info
    except ImportError:
        return ""
    return str(getattr(info, "cuda_version", "") or "")


def library_problem(capi_dir: Path | None = None) -> str:
    """Why the CUDA provider's library does not load (the dynamic loader's
    message, naming the missing CUDA or cuDNN library), or "" when it loads."""
    library = (capi_dir or _capi_dir()) / "libonnxruntime_providers_cuda.so"
    if not library.exists():
        return f"{library.name} is not in this ONNX Runtime"
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return str(exc)
    return ""


def diagnose(
    ordinal: int, error: str = "", available=None, library: str | None = None, visible: int | None = None
) -> str:
    """The cause, in words, of a probe session that is not on GPU ``ordinal``.

    ``error``: what ONNX Runtime raised ("" when it built a CPU session);
    ``available``: ``ort.get_available_providers()``; ``library``:
    :func:`library_problem`; ``visible``: :func:`visible_gpus`. Each is read
    from this process when not given (the seams the unit tests use)."""
    available = ort.get_available_providers() if available is None else available
    if CUDA not in available:
        return (
            f"this ONNX Runtime ({ort.__version__}) is built without CUDA (providers: {', '.join(available)}): "
            "install onnxruntime-gpu of the same version instead of onnxruntime (the GPU image does)"
        )
    if visible is not None and ordinal >= visible:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f"CUDA_VISIBLE_DEVICES={shown!r}" if shown is not None else "NVML"
        return (
            f"GPU ordinal {ordinal} is out of range: this process sees {visible} GPU(s) ({where}); inside a "
            "container that reserves one GPU the ordinal is 0 (WORKER_GPU_ORDINAL, docs/worker-mode.md)"
        )
    if "invalid device ordinal" in error.lower():
        return f"GPU ordinal {ordinal} is out of range ({error.strip()})"
    library = library_problem() if library is None else library
    if library:
        build = cuda_build()
        needs = f"CUDA {build.split('.')[0]}.x and cuDNN 9" if build else "its CUDA and cuDNN"
        return (
            f"the CUDA provider's libraries do not load: {library}; this onnxruntime-gpu needs {needs} "
            "(pip install 'onnxruntime-gpu[cuda,cudnn]', or a base image with them) and a driver that supports them"
        )
    if error:
        return f"ONNX Runtime could not create a session on GPU {ordinal}: {error.strip()}"
    return (
        f"ONNX Runtime created a CPU session for GPU {ordinal} without an error (its warnings above say why: "
        "driver, device or libraries)"
    )


def _probe_model() -> bytes:
    """A one-node ONNX model (y = x + x, FP32 [1, 4]) built in code."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def probe(ordinal: int, providers: list, count_devices=None) -> list[str]:
    """Create and run one tiny session on ``providers`` (the worker's) and
    return its providers; raises GpuUnavailable naming the cause when it is
    not on GPU ``ordinal``. Loads the CUDA and cuDNN libraries of the
    ``nvidia-*`` wheels first when ONNX Runtime offers it (``preload_dlls``)."""
    import numpy as np

    available = ort.get_available_providers()
    if CUDA not in available:
        raise GpuUnavailable(diagnose(ordinal, available=available))
    if hasattr(ort, "preload_dlls"):
        try:
            ort.preload_dlls()
        except Exception:  # a missing library is named by the probe's diagnosis
            pass
    error = ""
    try:
        session = ort.InferenceSession(_probe_model(), providers=providers, enable_fallback=0)
        got = require_providers(session, providers, "the probe session")
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        y = session.run(["y"], {"x": x})[0]
        if not np.array_equal(y, x + x):
            raise GpuUnavailable(f"the probe session on GPU {ordinal} computed {y.tolist()} for x + x")
        return got
    except NotOnDevice:
        pass
    except GpuUnavailable:
        raise
    except Exception as exc:
        error = str(exc)
    raise GpuUnavailable(diagnose(ordinal, error, visible=visible_gpus(count_devices=count_devices)))


# -- errors -------------------------------------------------------------------

#: CUDA error codes that leave the process's context unusable ("sticky"): every later call fails.
_STICKY_CODES = {700, 710, 714, 715, 716, 719, 214, 46, 999}
_STICKY_TEXT = (
    "illegal memory access", "unspecified launch failure", "device-side assert", "misaligned address",
    "illegal instruction", "uncorrectable ecc", "fallen off the bus", "cudaerrorillegaladdress",
    "cudaerrorlaunchfailure", "cuda_error_illegal_address", "cudaerrordevicesunavailable",
)  # fmt: skip
_OOM_TEXT = (
    "out of memory", "cuda_error_out_of_memory", "cudaerrormemoryallocation", "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed", "failed to allocate memory",
)  # fmt: skip
_CUDA_FAILURE = re.compile(r"CUDA (?:failure|error) (\d+)", re.IGNORECASE)

OUT_OF_MEMORY, PERSISTENT = "out_of_memory", "persistent"


def classify(message: str) -> str | None:
    """What an error of ONNX Runtime on a GPU means: PERSISTENT (a sticky
    CUDA error: the context is lost, the process must go), OUT_OF_MEMORY
    (the GPU's memory is taken: retry later or elsewhere), or None (anything
    else, e.g. inputs the model refuses)."""
    text = message.lower()
    code = _CUDA_FAILURE.search(message)
    if (code is not None and int(code.group(1)) in _STICKY_CODES) or any(t in text for t in _STICKY_TEXT):
        return PERSISTENT
    if (code is not None and int(code.group(1)) == 2) or any(t in text for t in _OOM_TEXT):
        return OUT_OF_MEMORY
    return None


class DeviceFailed(ModelNotReady):
    """A CUDA error that persists: this process's GPU context is lost; the worker leaves and exits."""


class GpuOutOfMemory(ModelNotReady):
    """The GPU had no memory for the request (or the load); another try may find it."""


def raise_for_gpu_error(message: str, where: str) -> None:
    """Raise DeviceFailed or GpuOutOfMemory when ``message`` (ONNX Runtime's)
    is one (:func:`classify`); return otherwise."""
    kind = classify(message)
    if kind == PERSISTENT:
        raise DeviceFailed(f"{where}: a CUDA error that persists ({message.strip()}); the worker restarts")
    if kind == OUT_OF_MEMORY:
        raise GpuOutOfMemory(f"{where}: the GPU is out of memory ({message.strip()}); try again later")


#: Errors of the GPU's state, not of the model: a validation that meets one is retried later, never FAILED for it
#: (a session that falls back to the CPU, NotOnDevice, does fail it).
GPU_BUSY = (GpuOutOfMemory, DeviceFailed)
