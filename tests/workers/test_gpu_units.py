"""GPU workers without a GPU (issue 40): what this CPU-only machine can
prove. The provider check with session stand-ins (the documented seam: any
object with ``get_providers()``), the diagnosis with its inputs given, the
label/ordinal pinning, KIND_AUTO's placement and what the configuration
extension reports for it, the provider options built from settings, the
GPU budget's arithmetic with fake NVML readings, the classification of CUDA
errors, and a real ``runworker --device cuda:0`` refusing to start."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import onnxruntime as ort
import pytest
from django.test import override_settings

from hosting import composition
from inference.protocol.errors import InvalidInput, ModelNotReady
from inference.runtime import cuda
from inference.runtime.execution import RunTarget
from inference.runtime.gpu_memory import GpuCosts, budget_bytes, nvml_index
from inference.runtime.onnx import OnnxModel
from inference.runtime.runner import ModelRunner
from inference.serving.instance_groups import allowed_devices, triton_form
from inference.workers.server import gpu
from tests.support import stalls
from tests.support.server import ROOT


class Session:
    """A session stand-in: the providers ONNX Runtime would report."""

    def __init__(self, providers):
        self.providers = providers

    def get_providers(self):
        return self.providers


CUDA_SESSION = ["CUDAExecutionProvider", "CPUExecutionProvider"]


class FailingSession:
    """A session stand-in whose run raises ONNX Runtime's own Fail with ``message``."""

    def __init__(self, message: str):
        self.message = message

    def get_inputs(self):
        return []

    def get_outputs(self):
        return []

    def get_overridable_initializers(self):
        return []

    def run(self, names, feeds, run_options=None):
        raise ort.capi.onnxruntime_pybind11_state.Fail(self.message)


def test_a_session_asked_for_cuda_must_have_it_first():
    asked = cuda.gpu_providers(0)
    assert cuda.require_providers(Session(CUDA_SESSION), asked) == CUDA_SESSION
    for fallen in (["CPUExecutionProvider"], ["CPUExecutionProvider", "CUDAExecutionProvider"], []):
        with pytest.raises(cuda.NotOnDevice, match="instead of CUDAExecutionProvider: ONNX Runtime fell back"):
            cuda.require_providers(Session(fallen), asked)
    # TensorRT opt-in: both GPU providers, in order; CUDA alone is a fallback too.
    trt = cuda.gpu_providers(0, cuda.CudaOptions(tensorrt=True, tensorrt_cache="/c"))
    assert cuda.require_providers(Session(["TensorrtExecutionProvider", *CUDA_SESSION]), trt)
    with pytest.raises(cuda.NotOnDevice):
        cuda.require_providers(Session(CUDA_SESSION), trt)
    # A CPU session asked for the CPU only needs nothing.
    assert cuda.require_providers(Session(["CPUExecutionProvider"]), ["CPUExecutionProvider"])
    assert issubclass(cuda.NotOnDevice, ModelNotReady)  # a load that fails: 503, never a CPU answer


def test_a_real_session_on_this_cpu_only_onnxruntime_is_refused(tmp_path):
    """create_session asked for CUDA on this machine's CPU wheel: ONNX
    Runtime builds a CPU session (a warning only); the load fails."""
    from inference.runtime.onnx import create_session
    from tests.support import onnx_models as m

    path = tmp_path / "model.onnx"
    path.write_bytes(m.affine(2.0, 1.0))
    with pytest.raises(cuda.NotOnDevice, match="runs on CPUExecutionProvider instead of CUDAExecutionProvider"):
        create_session(path, providers=cuda.gpu_providers(0))
    assert create_session(path).get_providers() == ["CPUExecutionProvider"]


def test_the_cause_is_named():
    with_cuda = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    wheel = cuda.diagnose(0, available=["CPUExecutionProvider"])
    assert "built without CUDA" in wheel and "install onnxruntime-gpu" in wheel
    out_of_range = cuda.diagnose(2, available=with_cuda, library="", visible=1)
    assert "GPU ordinal 2 is out of range: this process sees 1 GPU(s)" in out_of_range
    assert "ordinal is 0" in out_of_range
    error = cuda.diagnose(0, "CUDA failure 101: invalid device ordinal", available=with_cuda, library="")
    assert "out of range" in error
    libraries = cuda.diagnose(
        0, available=with_cuda, library="libcudnn.so.9: cannot open shared object file", visible=1
    )
    assert "libraries do not load: libcudnn.so.9: cannot open shared object file" in libraries
    other = cuda.diagnose(0, "no CUDA-capable device is detected", available=with_cuda, library="", visible=1)
    assert "could not create a session on GPU 0: no CUDA-capable device is detected" in other
    # This machine: the wheel, read from the process itself.
    with pytest.raises(cuda.GpuUnavailable, match="built without CUDA"):
        cuda.probe(0, cuda.gpu_providers(0))
    assert "libonnxruntime_providers_cuda.so is not in this ONNX Runtime" == cuda.library_problem()


def test_visible_gpus():
    assert cuda.visible_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}) == 2
    assert cuda.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert cuda.visible_gpus({}, count_devices=lambda: 8) == 8
    assert cuda.visible_gpus({}) is None
    assert cuda.visible_gpus({}, count_devices=lambda: 1 / 0) is None


def test_label_and_ordinal():
    """The label (queue, heartbeat) and the ordinal (device_id) cannot disagree."""
    env: dict = {}
    assert gpu.pin("cuda:1", env) == gpu.Pinning("cuda:1", 0, "1")  # bare metal: sees GPU 1 only, as 0
    assert gpu.pin("cuda:3", {"CUDA_VISIBLE_DEVICES": "2,3"}) == gpu.Pinning("cuda:3", 1, None)
    assert gpu.pin("cuda:1", {}, ordinal=0) == gpu.Pinning("cuda:1", 0, None)  # a container with one GPU
    assert gpu.pin("cuda:0", {"CUDA_VISIBLE_DEVICES": "GPU-8e1f"}, ordinal=0).ordinal == 0
    with pytest.raises(gpu.PinningError, match="CUDA_VISIBLE_DEVICES='0' does not list"):
        gpu.pin("cuda:1", {"CUDA_VISIBLE_DEVICES": "0"})
    with pytest.raises(gpu.PinningError):
        gpu.pin("cuda:0", {}, ordinal=-2)
    with pytest.raises(gpu.DeviceError):
        gpu.pin("cpu", {})
    # start(): CUDA_VISIBLE_DEVICES set before CUDA starts; refused here, or on the CPU with the fallback.
    environ: dict = {}
    with pytest.raises(cuda.GpuUnavailable, match=r"cuda:2 \(ordinal 0 in this process\): this ONNX Runtime"):
        gpu.start("cuda:2", cuda.CudaOptions(), environ=environ)
    assert environ == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    fallen = gpu.start("cuda:2", cuda.CudaOptions(), fallback=True, environ={})
    assert fallen.got == ["CPUExecutionProvider"] and not fallen.on_gpu and fallen.pinning.label == "cuda:2"


def test_nvml_index_follows_cuda_visible_devices():
    assert nvml_index(0, {}) == 0 and nvml_index(1, {}) == 1
    assert nvml_index(0, {"CUDA_VISIBLE_DEVICES": "3"}) == 3
    assert nvml_index(1, {"CUDA_VISIBLE_DEVICES": "2,5"}) == 5
    assert nvml_index(0, {"CUDA_VISIBLE_DEVICES": "GPU-8e1f"}) == "GPU-8e1f"


def test_kind_auto_runs_on_the_gpus_while_any_serves():
    both, cpu_only, gpus_only = {"cpu", "cuda:0", "cuda:1"}, {"cpu"}, {"cuda:1"}
    for groups in ([], [{"kind": "KIND_AUTO", "count": 2}], [{"kind": "KIND_MODEL"}]):
        assert allowed_devices(groups, both) == ["cuda:0", "cuda:1"]
        assert allowed_devices(groups, cpu_only) == ["cpu"]
        assert allowed_devices(groups, gpus_only) == ["cuda:1"]
        assert allowed_devices(groups, set()) == []
    # Explicit groups keep their devices: a GPU group and a CPU group serve on both.
    assert allowed_devices([{"kind": "KIND_GPU"}, {"kind": "KIND_CPU"}], both) == ["cuda:0", "cuda:1", "cpu"]
    assert allowed_devices([{"kind": "KIND_CPU"}, {"kind": "KIND_AUTO"}], both) == ["cpu", "cuda:0", "cuda:1"]


@pytest.mark.parametrize("live", [{"cpu"}, {"cpu", "cuda:0"}, {"cuda:0", "cuda:2"}, {"cpu", "cuda:1"}])
def test_the_configuration_extension_reports_what_runs(live):
    """triton_form's kind (given the live GPUs, as the executor's gpus()
    gives them) matches where placement sends a KIND_AUTO model's requests."""
    from inference.serving.instance_groups import gpu_number

    numbers = [gpu_number(d) for d in live if d != "cpu"]
    (reported,) = triton_form("m", [], numbers)
    runs_on = allowed_devices([], live)
    assert reported["kind"] == ("KIND_GPU" if any(d != "cpu" for d in runs_on) else "KIND_CPU")
    assert sorted(reported["gpus"]) == sorted(gpu_number(d) for d in runs_on if d != "cpu")


@override_settings(
    ORT_CUDA_MEM_LIMIT_MB=2048, ORT_CUDA_ARENA_EXTEND_STRATEGY="kSameAsRequested",
    ORT_CUDA_CUDNN_CONV_ALGO_SEARCH="HEURISTIC", ORT_CUDA_COPY_IN_DEFAULT_STREAM=False,
    WORKER_TENSORRT_CACHE_DIR="/var/cache/trt", WORKER_TENSORRT_FP16=True,
)  # fmt: skip
def test_provider_options_from_settings():
    providers = cuda.gpu_providers(1, composition.cuda_options())
    assert providers == [
        ("CUDAExecutionProvider", {
            "device_id": 1, "gpu_mem_limit": 2048 * 1024 * 1024, "arena_extend_strategy": "kSameAsRequested",
            "cudnn_conv_algo_search": "HEURISTIC", "do_copy_in_default_stream": False,
        }),
        "CPUExecutionProvider",
    ]  # fmt: skip
    trt = cuda.gpu_providers(0, composition.cuda_options(tensorrt=True))
    assert [cuda.provider_name(p) for p in trt] == ["TensorrtExecutionProvider", *CUDA_SESSION]
    assert trt[0][1]["trt_engine_cache_enable"] is True and trt[0][1]["trt_engine_cache_path"] == "/var/cache/trt"
    assert trt[0][1]["trt_fp16_enable"] is True and trt[0][1]["device_id"] == 0
    with pytest.raises(ValueError, match="cudnn_conv_algo_search"):
        cuda.CudaOptions(cudnn_conv_algo_search="FAST")
    with pytest.raises(ValueError, match="engine cache"):
        cuda.CudaOptions(tensorrt=True)


def test_defaults_are_the_sane_ones():
    options = cuda.cuda_options(0)
    assert options == {
        "device_id": 0,
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": "HEURISTIC",
        "do_copy_in_default_stream": True,
    }  # fmt: skip  (no gpu_mem_limit: ONNX Runtime's unlimited arena)


MIB = 2**20


def test_gpu_budget_arithmetic():
    assert budget_bytes(12000, 0, 0) == 12000 * MIB  # the setting wins
    assert budget_bytes(0, 80_000 * MIB, 500 * MIB) == int(80_000 * MIB * 0.9) - 500 * MIB
    assert budget_bytes(0, 0, 0) == 0  # nothing known: no budget
    costs = GpuCosts(per_instance=1024 * MIB)
    assert costs.estimate(("m", 1, "s"), 10 * MIB, 3) == 3 * 1024 * MIB  # gpu_mem_limit x instances
    assert costs.charge(("m", 1, "s"), 10 * MIB, 3, grown=5000 * MIB) == 5000 * MIB  # measured more: charged
    assert costs.charge(("n", 1, "s"), 10 * MIB, 2, grown=100 * MIB) == 2048 * MIB


def test_a_gpu_worker_s_runner_charges_the_gpu_readings(tmp_path):
    """The runner's memory seam fed fake NVML readings (bytes used on the
    GPU before and after each load): a version is charged the growth, or
    gpu_mem_limit x instances when that is more; the budget evicts on it."""
    readings = iter([1000 * MIB, 1900 * MIB, 1900 * MIB, 2100 * MIB])  # before/after load 1, before/after load 2

    class Model:
        def run(self, feeds, names, run_options=None):
            return [feeds["x"]]

    runner = ModelRunner(
        lambda target: Model(), budget_bytes=1200 * MIB, memory=lambda: next(readings),
        costs=GpuCosts(per_instance=256 * MIB),
    )  # fmt: skip
    big = RunTarget("big", 1, "a", "a", size=MIB, instances=1)
    small = RunTarget("small", 1, "b", "b", size=MIB, instances=2)
    x = np.ones((1, 4), dtype=np.float32)
    runner.run(big, {"x": x}, ["y"])
    assert runner.used == 900 * MIB  # measured: 1900 - 1000
    runner.run(small, {"x": x}, ["y"])  # grew 200 MiB < 2 x 256 MiB: charged 512; 900 + 512 > 1200: big goes
    assert runner.used == 512 * MIB and [t.model for t in runner.loaded()] == ["small"]


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("CUDA failure 700: an illegal memory access was encountered ; GPU=0 ; hostname=w ; expr=cudaMemcpy", "persistent"),
        ("CUDA error cudaErrorLaunchFailure:unspecified launch failure", "persistent"),
        ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : device-side assert triggered", "persistent"),
        ("CUDA failure 2: out of memory ; GPU=0", "out_of_memory"),
        ("Failed to allocate memory for requested buffer of size 1073741824", "out_of_memory"),
        ("CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED", "out_of_memory"),
        ("Got invalid dimensions for input: x for the following indices", None),
        ("CUDA failure 101: invalid device ordinal", None),
    ],
)  # fmt: skip
def test_cuda_errors_are_classified(message, kind):
    assert cuda.classify(message) == kind


def test_a_run_s_cuda_error_is_not_the_caller_s_fault():
    """session.run raising ONNX Runtime's Fail: a sticky CUDA error is
    DeviceFailed (the worker goes), an out-of-memory GpuOutOfMemory (503),
    anything else still the inputs' fault (400)."""
    with pytest.raises(cuda.DeviceFailed, match="a CUDA error that persists"):
        OnnxModel(FailingSession("CUDA failure 700: an illegal memory access was encountered")).run({}, ["y"])
    with pytest.raises(cuda.GpuOutOfMemory, match="out of memory"):
        OnnxModel(FailingSession("CUDA failure 2: out of memory")).run({}, ["y"])
    with pytest.raises(InvalidInput):
        OnnxModel(FailingSession("Got invalid dimensions for input: x")).run({}, ["y"])


def test_runworker_on_a_gpu_refuses_to_start_on_this_machine(tmp_path):
    """No GPU and the CPU wheel here: ``runworker --device cuda:0`` exits at
    once, non-zero, naming the cause, before it reaches Redis."""
    env = dict(os.environ, VAR_DIR=str(tmp_path), SECRET_KEY="x" * 50, REDIS_URL="redis://127.0.0.1:1/0")
    env.pop("WORKER_CPU_FALLBACK", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = stalls.run([sys.executable, "manage.py", "runworker", "--device", "cuda:0"], 60, cwd=ROOT, env=env)
    assert done.returncode != 0
    assert "cuda:0 (ordinal 0 in this process): this ONNX Runtime" in done.stderr, done.stderr
    assert "is built without CUDA" in done.stderr and "the worker does not start" in done.stderr
    assert "unreachable" not in done.stderr  # refused before Redis
    disagree = stalls.run(
        [sys.executable, "manage.py", "runworker", "--device", "cuda:1"], 60,
        cwd=ROOT, env=dict(env, CUDA_VISIBLE_DEVICES="0"),
    )  # fmt: skip
    assert disagree.returncode != 0 and "CUDA_VISIBLE_DEVICES='0' does not list" in disagree.stderr


def test_a_persistent_cuda_error_makes_the_worker_leave_once():
    """A run that meets a sticky CUDA error (ONNX Runtime's Fail, classified
    by the real OnnxModel) answers UNAVAILABLE and calls the worker's
    on_device_failed once (runworker: leave the directory, exit 75); an
    out-of-memory answers UNAVAILABLE and keeps the worker."""
    import types

    from inference.workers import frames, messages
    from inference.workers.server.runtime import WorkerRuntime

    session = FailingSession("CUDA failure 700: an illegal memory access was encountered ; GPU=0")
    registry = types.SimpleNamespace(models={}, catch_up=lambda: False)
    runtime = WorkerRuntime("cuda:0", ModelRunner(lambda target: OnnxModel(session)), registry)
    target = RunTarget("m", 1, "s", "a", size=1)
    runtime._targets[target.key] = target  # as on_snapshot sets it for a serving version
    failed = []
    runtime.on_device_failed = failed.append
    request = messages.RunRequest("m", 1, "s", ["y"], 1, time.time() + 10)

    def answer(worker) -> bytes:  # the answer frame's bytes (an ErrorAnswer: its code and message)
        body = memoryview(b"".join(bytes(part) for part in frames.encode(request)))  # the frame as it arrives
        return b"".join(bytes(part) for part in worker.handle(request, body))

    for _ in range(2):
        assert b"UNAVAILABLE" in answer(runtime)
    assert len(failed) == 1 and "a CUDA error that persists (CUDA failure 700" in failed[0]
    session.message = "CUDA failure 2: out of memory"
    fresh = WorkerRuntime("cuda:0", ModelRunner(lambda target: OnnxModel(session)), registry)
    fresh._targets[target.key] = target
    fresh.on_device_failed = failed.append
    reply = answer(fresh)
    assert b"UNAVAILABLE" in reply and b"out of memory" in reply and len(failed) == 1
