"""Start ``manage.py serve`` as a real subprocess for interop tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    """A ``serve`` process on free ports with its own VAR_DIR (SQLite, store)."""

    def __init__(self, repository: Path, var_dir: Path, extra_env: dict | None = None, workers: int = 2):
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.repository = repository
        self.var_dir = var_dir
        self.log_path = var_dir / "serve.log"
        self.env = dict(os.environ, VAR_DIR=str(var_dir), HTTP_WORKERS=str(workers), **(extra_env or {}))
        self.env.pop("DATABASE_URL", None)
        self.env.update(extra_env or {})
        self.process: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 90) -> LiveServer:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        command = [
            sys.executable, "manage.py", "serve",
            "--model-repository", str(self.repository),
            "--http-port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as response:
                    if response.status == 200 and self._grpc_listening():
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"serve did not become ready in {timeout}s:\n{self.log()}")

    def _grpc_listening(self) -> bool:
        """The gRPC child starts independently of the HTTP one: wait for both."""
        try:
            with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1):
                return True
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
