"""What the peers have in common: a server started from its own virtualenv,
with its files in a fresh run directory, serving the benchmark's ONNX files."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from bench.models import BenchModel
from bench.peers.venvs import PeerVenv
from bench.targets import ROOT, ProcessTarget, free_port, run_dir


class PeerTarget(ProcessTarget):
    """A peer: subclasses write their files in ``prepare`` and give their
    ``command`` and ``env``; ``start`` runs it and reads its V2 server version."""

    log_name = "server.log"

    def __init__(self, name: str, venv: PeerVenv, onnx_repository: Path, work_dir: Path, models: list[BenchModel]):
        self.run_dir = run_dir(work_dir, name)
        super().__init__(name, self.run_dir / self.log_name)
        self.venv = venv
        self.onnx_repository = onnx_repository
        self.models = models
        self.metrics_port = free_port()
        self.server_version = ""

    def prepare(self) -> None:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def start(self, timeout: float = 180) -> None:
        self.prepare()
        self.process = self.spawn(self.command(), self.env(), self.run_dir, self.log_path)
        self.wait_ready(timeout)
        with urllib.request.urlopen(self.base_url + "/v2", timeout=5) as response:
            self.server_version = json.loads(response.read()).get("version", "")

    def venv_settings(self, *packages: str) -> dict[str, str]:
        """The virtualenv, the ONNX Runtime threads and the log, for ``settings``."""
        env = self.env()
        versions = ", ".join(f"{package} {self.venv.version(package)}" for package in packages)
        return {
            "virtualenv": f"{os.path.relpath(self.venv.path, ROOT)} (Python {sys.version.split()[0]}, {versions})",
            "ORT_INTRA_OP_THREADS": env["ORT_INTRA_OP_THREADS"],
            "ORT_INTER_OP_THREADS": env["ORT_INTER_OP_THREADS"],
            "log": os.path.relpath(self.log_path, ROOT),
        }
