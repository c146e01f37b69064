"""MLServer as a peer: ``mlserver start <dir>`` from its own virtualenv, each
benchmark model served by the custom runtime ``mlserver_runtime.OnnxRuntime``
(a thin wrapper around ``onnxruntime.InferenceSession``).

MLServer speaks V2 REST with JSON tensors and V2 gRPC; it has no binary
tensor data extension, so it has no ``rest-binary`` rows.

``parallel_workers`` is 0 by default (inference in the server process):
MLServer's own default, 1, sends every request to an inference-pool process
and measured about half as fast on this 2-core machine (tiny REST JSON,
alternating runs: ~1,100-1,700 vs ~500-750 req/s at concurrency 1); the
figures issue 8 quotes match 0. ``bench/run.py --mlserver-workers 1``
measures MLServer's default.

``uvloop`` is pinned below 0.22: with uvloop 0.22+ MLServer 1.7.1's inference
pool workers die at start (``asyncio.get_event_loop()`` raises "There is no
current event loop") and no model loads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bench.models import BenchModel, model_path
from bench.peers.base import PeerTarget
from bench.peers.venvs import PeerVenv, our_onnxruntime
from bench.targets import ort_env

MLSERVER = "mlserver==1.7.1"
RUNTIME_PY = Path(__file__).with_name("mlserver_runtime.py")


def mlserver_venv(peers_dir: Path) -> PeerVenv:
    return PeerVenv("mlserver", [MLSERVER, f"onnxruntime=={our_onnxruntime()}", "uvloop<0.22"], peers_dir)


class MLServerTarget(PeerTarget):
    transports = ("rest-json", "grpc")
    log_name = "mlserver.log"

    def __init__(self, onnx_repository: Path, work_dir: Path, models: list[BenchModel], parallel_workers: int = 0):
        super().__init__("mlserver", mlserver_venv(work_dir / "peers"), onnx_repository, work_dir, models)
        self.parallel_workers = parallel_workers

    @property
    def models_dir(self) -> Path:
        return self.run_dir / "models"

    def prepare(self) -> None:
        """Build the virtualenv (cached); write settings.json, the runtime and one model-settings.json per model
        (its inputs and outputs with their datatypes and shapes)."""
        self.venv.ensure()
        self.models_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(RUNTIME_PY, self.models_dir / RUNTIME_PY.name)
        settings = {
            "host": "127.0.0.1",
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "metrics_port": self.metrics_port,
            "parallel_workers": self.parallel_workers,
            "debug": False,
        }
        (self.models_dir / "settings.json").write_text(json.dumps(settings, indent=2))
        for model in self.models:
            folder = self.models_dir / model.name
            folder.mkdir(exist_ok=True)
            model_settings = {
                "name": model.name,
                "implementation": "mlserver_runtime.OnnxRuntime",
                "parameters": {"uri": str(model_path(self.onnx_repository, model).resolve())},
                # Metadata only (GET /v2/models/<name>); the runtime decodes each input by its datatype.
                "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in model.inputs],
                "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in model.outputs],
            }
            (folder / "model-settings.json").write_text(json.dumps(model_settings, indent=2))

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(PYTHONPATH=str(self.models_dir), **ort_env())
        return env

    def command(self) -> list[str]:
        return [str(self.venv.path / "bin" / "mlserver"), "start", str(self.models_dir)]

    def settings(self) -> dict[str, str]:
        return {
            "server": f"MLServer {self.server_version or '?'} (FastAPI/uvicorn REST, grpcio aio gRPC)",
            "inference": f"custom runtime around onnxruntime.InferenceSession (bench/peers/{RUNTIME_PY.name}); "
            f"parallel_workers {self.parallel_workers} "
            + ("(inference in the server process)" if self.parallel_workers == 0 else "(inference pool processes)"),
            **self.venv_settings("onnxruntime", "numpy", "uvloop"),
        }
