"""Targets: the servers under test. Each has a name, a base URL, the
transports it speaks, and start/stop.

:class:`ServeTarget` runs this project's ``manage.py serve`` as a
subprocess with its own fresh VAR_DIR. Peers (Triton, MLServer) or a
worker-mode variant would be further Target subclasses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Target:
    """Base of the servers under test."""

    name = ""
    transports: tuple[str, ...] = ()

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return True

    def exit_info(self) -> str:
        """How the server ended, when it ended on its own."""
        return ""

    def settings(self) -> dict[str, str]:
        """Settings worth recording next to the results."""
        return {}

    def log_tail(self, lines: int = 40) -> str:
        return ""


class ServeTarget(Target):
    """``manage.py serve --model-repository <repo> --http-port <free port>``
    with VAR_DIR under ``work_dir`` and one ONNX Runtime thread per session.

    ``workers``/``threads`` (None: the server's defaults, HTTP_WORKERS /
    HTTP_THREADS from settings) are passed as ``--workers``/``--threads``.
    """

    transports = ("rest-json", "rest-binary")

    def __init__(
        self,
        repository: Path,
        work_dir: Path,
        name: str = "serve",
        workers: int | None = None,
        threads: int | None = None,
        extra_env: dict[str, str] | None = None,
    ):
        self.name = name
        self.repository = repository
        self.port = free_port()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.var_dir = work_dir / f"var-{name}-{stamp}-{os.getpid()}"
        self.log_path = self.var_dir / "serve.log"
        self.workers = workers
        self.threads = threads
        self.env = dict(os.environ)
        for key in ("DATABASE_URL", "HTTP_BIND"):
            self.env.pop(key, None)
        self.env.update(
            VAR_DIR=str(self.var_dir),
            ORT_INTRA_OP_THREADS="1",
            ORT_INTER_OP_THREADS="1",
            **(extra_env or {}),
        )
        self.process: subprocess.Popen | None = None
        self._resolved: dict[str, str] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        command = [
            sys.executable, "manage.py", "serve",
            "--model-repository", str(self.repository),
            "--http-port", str(self.port),
        ]  # fmt: skip
        if self.workers is not None:
            command += ["--workers", str(self.workers)]
        if self.threads is not None:
            command += ["--threads", str(self.threads)]
        return command

    def _server_defaults(self) -> dict[str, str]:
        """HTTP_WORKERS / HTTP_THREADS as the server's settings resolve them."""
        code = "from django.conf import settings as s; print(s.HTTP_WORKERS, s.HTTP_THREADS)"
        out = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        try:
            workers, threads = out.stdout.split()[-2:]
        except ValueError:
            return {}
        return {"HTTP_WORKERS": workers, "HTTP_THREADS": threads}

    def start(self, timeout: float = 120) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self._resolved = self._server_defaults()
        log = open(self.log_path, "ab")  # a restart appends
        self.process = subprocess.Popen(self.command(), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited early (status {self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/v2/health/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"serve did not become ready in {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 30) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_info(self) -> str:
        if self.process is None or self.process.returncode is None:
            return ""
        code = self.process.returncode
        how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return f"{how}; log: {os.path.relpath(self.log_path, ROOT)}"

    def settings(self) -> dict[str, str]:
        workers = str(self.workers) if self.workers is not None else self._resolved.get("HTTP_WORKERS", "default")
        threads = str(self.threads) if self.threads is not None else self._resolved.get("HTTP_THREADS", "default")
        return {
            "server": "manage.py serve (gunicorn, " + ("gthread" if threads not in ("1",) else "sync") + " workers)",
            "HTTP_WORKERS": workers,
            "HTTP_THREADS": threads,
            "ORT_INTRA_OP_THREADS": self.env["ORT_INTRA_OP_THREADS"],
            "ORT_INTER_OP_THREADS": self.env["ORT_INTER_OP_THREADS"],
            "VAR_DIR": os.path.relpath(self.var_dir, ROOT),
        }

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
