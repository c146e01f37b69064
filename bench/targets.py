"""Targets: the servers under test. Each has a name, the transports it
speaks, where each transport is served, and start/stop.

* :class:`ServeTarget` runs this project's ``manage.py serve`` (REST and
  gRPC) as a subprocess with its own fresh VAR_DIR, inference in process.
* :class:`WorkerServeTarget` is the same server in worker mode
  (``INFERENCE_EXECUTOR=workers``, Redis database 12) plus one
  ``manage.py runworker --device cpu`` process, reached over its Unix
  socket (``link="unix"``, as on one machine) or over TCP with mutual TLS
  (``link="tls"``, as from another machine).
* The peers, Triton and MLServer, are in ``bench/peers/``.

Every server gets ONNX Runtime's thread counts from the environment
(``ORT_INTRA_OP_THREADS``, ``ORT_INTER_OP_THREADS``; :func:`ort_env`).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.server import free_port, http_ok, kill_session, port_open, serve_command

ROOT = Path(__file__).resolve().parents[1]

#: Redis database of the worker-mode runs (the tests use others).
WORKER_REDIS_URL = "redis://127.0.0.1:6379/12"
#: The TLS worker-mode target's own database (its worker must not be seen by the other's front ends).
TLS_REDIS_URL = "redis://127.0.0.1:6379/15"
#: The baseline checkout's worker-mode target's database.
BASELINE_REDIS_URL = "redis://127.0.0.1:6379/14"


def ort_env() -> dict[str, str]:
    """ONNX Runtime threads for every server: the caller's environment, else 1 and 1."""
    return {
        "ORT_INTRA_OP_THREADS": os.environ.get("ORT_INTRA_OP_THREADS", "1"),
        "ORT_INTER_OP_THREADS": os.environ.get("ORT_INTER_OP_THREADS", "1"),
    }


def http_server() -> str:
    """The HTTP server ``serve`` runs for REST, read from its source (it has changed before)."""
    source = (ROOT / "hosting" / "management" / "commands" / "serve.py").read_text()
    for name in ("granian", "gunicorn", "uvicorn"):
        if f'"{name}"' in source:
            try:
                from importlib import metadata

                return f"{name} {metadata.version(name)}"
            except Exception:
                return name
    return "its HTTP server"


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Target:
    """Base of the servers under test.

    ``ours``: this project's server (its rows get ratios against the peers).
    """

    name = ""
    transports: tuple[str, ...] = ()
    ours = False

    @property
    def base_url(self) -> str:
        """Where the REST transports are served."""
        raise NotImplementedError

    @property
    def grpc_address(self) -> str:
        """host:port of the gRPC service."""
        raise NotImplementedError

    def url_for(self, transport: str) -> str:
        """The loader's base URL for a transport (gRPC: h2c on the gRPC port)."""
        return f"http://{self.grpc_address}" if transport.startswith("grpc") else self.base_url

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
        """Settings and versions worth recording next to the results."""
        return {}

    def log_tail(self, lines: int = 40) -> str:
        return ""


def run_dir(work_dir: Path, name: str) -> Path:
    """A fresh directory name for one server's files in one run: ``var-<name>-<time>-<pid>``."""
    return work_dir / f"var-{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


class ProcessTarget(Target):
    """A target that is one server process started here (in its own session,
    so that stopping it can also reap whatever it started), with a log file,
    an HTTP readiness URL and a gRPC port."""

    def __init__(self, name: str, log_path: Path):
        self.name = name
        self.log_path = log_path
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def spawn(self, command: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> subprocess.Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:  # a restart appends
            return subprocess.Popen(
                command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self, timeout: float, ready_path: str = "/v2/health/ready") -> None:
        """Until REST answers 200 on ``ready_path`` and the gRPC port accepts connections."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = self.process.returncode if self.process else None
                raise RuntimeError(f"{self.name} exited early (status {code}):\n{self.log_tail()}")
            if http_ok(self.base_url + ready_path) and port_open(self.grpc_port):
                return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready in {timeout:.0f}s:\n{self.log_tail()}")

    @staticmethod
    def terminate(process: subprocess.Popen | None, timeout: float = 30) -> None:
        """SIGTERM the process; after ``timeout``, SIGKILL its whole session (ours)."""
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)
            process.wait()

    def stop(self) -> None:
        self.terminate(self.process)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_info(self) -> str:
        if self.process is None or self.process.returncode is None:
            return ""
        code = self.process.returncode
        how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return f"{how}; log: {os.path.relpath(self.log_path, ROOT)}"

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


class ServeTarget(ProcessTarget):
    """``manage.py serve --model-repository <repo> --http-port P --grpc-port Q``
    with VAR_DIR under ``work_dir`` and the ONNX Runtime threads of :func:`ort_env`.

    ``workers``/``threads`` (None: the server's defaults, HTTP_WORKERS /
    HTTP_THREADS from settings) are passed as ``--workers``/``--threads``.
    """

    transports = ("rest-json", "rest-binary", "grpc", "grpc-stream")
    ours = True

    def __init__(
        self,
        repository: Path,
        work_dir: Path,
        name: str = "serve",
        workers: int | None = None,
        threads: int | None = None,
        extra_env: dict[str, str] | None = None,
        root: Path = ROOT,
        python: str | None = None,
    ):
        self.var_dir = run_dir(work_dir, name)
        self.python = python or sys.executable  # the interpreter of manage.py (and its worker)
        super().__init__(name, self.var_dir / "serve.log")
        self.root = root  # the checkout whose manage.py runs (another for a baseline)
        self.repository = repository
        self.workers = workers
        self.threads = threads
        self.env = dict(os.environ)
        for key in ("DATABASE_URL", "HTTP_BIND", "REDIS_URL", "INFERENCE_EXECUTOR"):
            self.env.pop(key, None)
        self.env.update({"VAR_DIR": str(self.var_dir), **ort_env(), **(extra_env or {})})  # a variant's own ORT_* win
        self._resolved: dict[str, str] = {}
        self._commit = ""

    def command(self) -> list[str]:
        extra = []
        if self.workers is not None:
            extra += ["--workers", str(self.workers)]
        if self.threads is not None:
            extra += ["--threads", str(self.threads)]
        return serve_command(self.repository, self.http_port, self.grpc_port, *extra, python=self.python)

    #: Server settings recorded next to the results, as the server resolves them.
    RECORDED = ("HTTP_WORKERS", "HTTP_THREADS", "GRPC_PROCESSES", "GRPC_THREADS")

    def _server_defaults(self) -> dict[str, str]:
        """RECORDED settings as the server resolves them (absent ones are left out)."""
        code = (
            "import json; from django.conf import settings as s; "
            f"print(json.dumps({{k: str(getattr(s, k)) for k in {self.RECORDED!r} if hasattr(s, k)}}))"
        )
        out = subprocess.run(
            [self.python, "manage.py", "shell", "-c", code],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        try:
            return json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {}

    def start(self, timeout: float = 120) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self._resolved = self._server_defaults()
        # The code that runs is the code at start (others may commit during a long run).
        self._commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=self.root, capture_output=True, text=True
        ).stdout.strip()
        self.process = self.spawn(self.command(), self.env, self.root, self.log_path)
        self.wait_ready(timeout)

    def settings(self) -> dict[str, str]:
        resolved = dict(self._resolved)
        if self.workers is not None:
            resolved["HTTP_WORKERS"] = str(self.workers)
        if self.threads is not None:
            resolved["HTTP_THREADS"] = str(self.threads)
        commit = self._commit
        return {
            "server": f"manage.py serve: REST in {http_server()}, gRPC (grpcio) in separate processes",
            "version": f"{'this repository' if self.root == ROOT else self.root} at {commit or 'unknown'} "
            "(when the server started)",
            "inference": "in process (ONNX Runtime in every REST and gRPC process)",
            **resolved,
            "ORT_INTRA_OP_THREADS": self.env["ORT_INTRA_OP_THREADS"],
            "ORT_INTER_OP_THREADS": self.env["ORT_INTER_OP_THREADS"],
            "VAR_DIR": os.path.relpath(self.var_dir, ROOT),
        }


class WorkerServeTarget(ServeTarget):
    """The same server in worker mode: ``INFERENCE_EXECUTOR=workers`` with
    REDIS_URL (database 12, flushed first) and one ``manage.py runworker
    --device cpu`` process with the same environment, started once the
    server is ready. Ready means an inference has gone through.

    ``link``: ``unix`` (the worker's Unix socket, shared memory for large
    tensors: front end and worker on one machine) or ``tls`` (TCP with
    mutual TLS, certificates made in VAR_DIR: as across machines).
    ``transport``: for a baseline checkout, its WORKER_TRANSPORT (``celery``:
    from before persistent connections; ``direct``; ``direct-tcp``: direct
    over TCP, forced by a VAR_DIR too long for a Unix socket's path, the
    plain link before TLS)."""

    def __init__(
        self,
        repository: Path,
        work_dir: Path,
        name: str = "serve-workers",
        redis_url: str = WORKER_REDIS_URL,
        link: str = "unix",
        transport: str = "",
        **kwargs,
    ):
        executor = "celery" if transport == "celery" else "workers"  # celery: a baseline checkout's Celery tasks
        env = {"INFERENCE_EXECUTOR": executor, "REDIS_URL": redis_url, "SECRET_KEY": secrets.token_urlsafe(50)}
        env.update(kwargs.pop("extra_env", None) or {})  # front end and worker alike
        if transport:
            env["WORKER_TRANSPORT"] = transport.removesuffix("-tcp")
        super().__init__(repository, work_dir, name=name, extra_env=env, **kwargs)
        if transport == "direct-tcp":  # the old worker made no Unix socket for a path of 100 bytes or more
            self.var_dir = self.var_dir.with_name(self.var_dir.name + "-" + "x" * 100)
            self.env["VAR_DIR"] = str(self.var_dir)
            self.log_path = self.var_dir / "serve.log"
        self.link = link
        self.transport = transport
        self.redis_url = redis_url
        self.worker_log_path = self.var_dir / "worker-cpu.log"
        self.worker_env = dict(self.env)
        if link == "tls":
            from hosting import worker_certs

            certs = self.var_dir / "worker-tls"
            worker_certs.write_set(certs, "modelhost-worker", days=2)
            self.env.update(worker_certs.environment(certs, "frontend"))
            self.worker_env.update(
                worker_certs.environment(certs, "worker"), WORKER_LISTEN="127.0.0.1:0", WORKER_UNIX_SOCKET="false"
            )
        self.worker: subprocess.Popen | None = None
        self.probe: tuple[str, bytes, dict[str, str]] | None = None  # (path, body, headers), set by run.py

    def flush_redis(self) -> None:
        import redis

        redis.Redis.from_url(self.redis_url, socket_connect_timeout=3).flushdb()

    def worker_command(self) -> list[str]:
        command = [self.python, "manage.py", "runworker", "--device", "cpu"]
        return command + (["--concurrency", "4"] if self.transport == "celery" else [])

    def start(self, timeout: float = 120) -> None:
        self.flush_redis()
        super().start(timeout)
        self.worker = self.spawn(self.worker_command(), self.worker_env, self.root, self.worker_log_path)
        self.wait_inference(timeout)

    def wait_inference(self, timeout: float) -> None:
        """Until one inference request answers 200 (the worker has registered and loaded)."""
        if self.probe is None:
            return
        path, body, headers = self.probe
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited while waiting for its worker ({self.exit_info()})")
            request = urllib.request.Request(self.base_url + path, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:200]!r}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name}: no inference succeeded in {timeout:.0f}s ({last}):\n{self.log_tail()}")

    def worker_report(self) -> dict | None:
        """The worker's heartbeat (served requests, RSS), or None."""
        import json

        import redis

        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=3)
        for key in client.scan_iter("modelhost:worker:*"):
            value = client.get(key)
            report = json.loads(value) if value else None
            if isinstance(report, dict):  # (a baseline checkout's heartbeat may be a bare timestamp)
                return report
        return None

    def after_prime(self) -> None:
        """Remember the worker's memory once every model is loaded (the baseline of its growth)."""
        self.memory_start = self.worker_report()

    def stop(self) -> None:
        if getattr(self, "memory_start", None) and self.alive():
            self.memory_end = self.worker_report()
        self.terminate(self.worker)
        super().stop()

    def memory_text(self) -> str:
        start, end = getattr(self, "memory_start", None), getattr(self, "memory_end", None)
        if not start or not end or not start.get("rss_bytes"):
            return "not measured"
        grown = end["rss_bytes"] / start["rss_bytes"] - 1
        return (
            f"{start['rss_bytes'] / 2**20:.1f} MiB after priming ({start['served']:,} requests) -> "
            f"{end['rss_bytes'] / 2**20:.1f} MiB after {end['served'] - start['served']:,} more requests "
            f"({grown:+.1%})"
        )

    def alive(self) -> bool:
        return super().alive() and self.worker is not None and self.worker.poll() is None

    def exit_info(self) -> str:
        if self.worker is not None and self.worker.returncode is not None:
            return f"the worker ended with status {self.worker.returncode}; log: " + os.path.relpath(
                self.worker_log_path, ROOT
            )
        return super().exit_info()

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        link = {"unix": "its Unix socket (shared memory for large tensors)", "tls": "TCP with mutual TLS"}[self.link]
        if self.transport:
            link = f"WORKER_TRANSPORT={self.transport} (a checkout from before TLS)"
        settings["inference"] = (
            f"worker mode: INFERENCE_EXECUTOR=workers, REDIS_URL={self.redis_url} (flushed at start), one "
            f"`manage.py runworker --device cpu` reached over {link}"
        )
        settings["worker log"] = os.path.relpath(self.worker_log_path, ROOT)
        settings["worker RSS"] = self.memory_text()
        return settings

    def log_tail(self, lines: int = 40) -> str:
        return f"{super().log_tail(lines)}\n--- worker ---\n{tail(self.worker_log_path, lines)}"
