"""Triton Inference Server as a peer: the ``tritonserver`` binary shipped in
the ``nvidia-pytriton`` wheel (Triton 2.51 in 0.5.14), in its own
virtualenv, serving each benchmark model through the Python backend with a
model.py that runs ONNX Runtime (``triton_model.py``).

Set-up, done here rather than by pytriton's own launcher:

* the wheel keeps one backend stub per Python version under
  ``pytriton/tritonserver/python_backend_stubs/<X.Y>/``; the venv's
  post-install copies the one of this Python next to ``libtriton_python.so``
  (as pytriton does in its workspace);
* ``LD_LIBRARY_PATH``: the running Python's lib directory (the stub links
  libpython) and the wheel's ``nvidia_pytriton.libs``;
* ``BENCH_SITE_PACKAGES``: the venv's site-packages, put first on the
  model's sys.path (see triton_model.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bench.models import BenchModel, model_path
from bench.peers.base import PeerTarget
from bench.peers.venvs import PY_VERSION, PeerVenv, our_onnxruntime
from bench.targets import ort_env

PYTRITON = "nvidia-pytriton==0.5.14"  # ships tritonserver 2.51.0
MODEL_PY = Path(__file__).with_name("triton_model.py")


def _install_stub(venv: PeerVenv) -> None:
    dist = venv.site_packages / "pytriton" / "tritonserver"
    stub = dist / "python_backend_stubs" / PY_VERSION / "triton_python_backend_stub"
    if not stub.exists():
        raise RuntimeError(f"{PYTRITON} has no Python backend stub for Python {PY_VERSION} ({stub})")
    shutil.copy2(stub, dist / "backends" / "python" / "triton_python_backend_stub")


def triton_venv(peers_dir: Path) -> PeerVenv:
    return PeerVenv("triton", [PYTRITON, f"onnxruntime=={our_onnxruntime()}"], peers_dir, _install_stub)


def python_libdir(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def config_pbtxt(model: BenchModel, onnx_path: Path, instances: int) -> str:
    """Every input and output with its data type and the request's exact dims (max_batch_size 0)."""

    def tensors(specs) -> str:
        return ",\n  ".join(
            f'{{ name: "{t.name}" data_type: {t.triton_type} dims: [ {", ".join(str(d) for d in t.shape)} ] }}'
            for t in specs
        )

    return f"""name: "{model.name}"
backend: "python"
max_batch_size: 0
input [
  {tensors(model.inputs)}
]
output [
  {tensors(model.outputs)}
]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
parameters: {{ key: "onnx_path" value: {{ string_value: "{onnx_path}" }} }}
"""


class TritonTarget(PeerTarget):
    transports = ("rest-json", "rest-binary", "grpc", "grpc-stream")
    log_name = "tritonserver.log"

    def __init__(self, onnx_repository: Path, work_dir: Path, models: list[BenchModel], instances: int = 2):
        super().__init__("triton", triton_venv(work_dir / "peers"), onnx_repository, work_dir, models)
        self.instances = instances

    @property
    def dist(self) -> Path:
        return self.venv.site_packages / "pytriton" / "tritonserver"

    def prepare(self) -> None:
        """Build the virtualenv (cached) and write the Python-backend model repository."""
        self.venv.ensure()
        repository = self.run_dir / "repository"
        for model in self.models:
            version = repository / model.name / "1"
            version.mkdir(parents=True, exist_ok=True)
            onnx_path = model_path(self.onnx_repository, model).resolve()
            (repository / model.name / "config.pbtxt").write_text(config_pbtxt(model, onnx_path, self.instances))
            shutil.copy2(MODEL_PY, version / "model.py")

    def command(self) -> list[str]:
        return [
            str(self.dist / "bin" / "tritonserver"),
            "--model-repository", str(self.run_dir / "repository"),
            "--backend-directory", str(self.dist / "backends"),
            "--http-address", "127.0.0.1", "--http-port", str(self.http_port),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(self.grpc_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
            "--exit-timeout-secs", "10",
            "--log-verbose", "0",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        libs = [python_libdir(self.venv.python), str(self.venv.site_packages / "nvidia_pytriton.libs")]
        if env.get("LD_LIBRARY_PATH"):
            libs.append(env["LD_LIBRARY_PATH"])
        env.update(LD_LIBRARY_PATH=":".join(libs), BENCH_SITE_PACKAGES=str(self.venv.site_packages), **ort_env())
        env.pop("PYTHONPATH", None)
        return env

    def settings(self) -> dict[str, str]:
        return {
            "server": f"tritonserver {self.server_version or '?'} from {PYTRITON} (C++ HTTP and gRPC front ends)",
            "inference": f"Python backend, model.py running ONNX Runtime; instance_group KIND_CPU count "
            f"{self.instances} (stub processes per model), max_batch_size 0, no dynamic batching",
            **self.venv_settings("onnxruntime", "numpy"),
            "LD_LIBRARY_PATH": self.env()["LD_LIBRARY_PATH"],
        }
