"""Start ``manage.py serve`` as a real subprocess for interop tests."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support import stalls

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout: float = 2) -> bool:
    """Whether GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:  # URLError and HTTPError included
        return False


def serve_command(repository: Path, http_port: int, grpc_port: int, *extra: str, python: str = "") -> list[str]:
    """``manage.py serve`` on a model repository and two ports (the tests' and the benchmark's),
    run by ``python`` (default: this interpreter)."""
    return [
        python or sys.executable, "manage.py", "serve", "--model-repository", str(repository),
        "--http-port", str(http_port), "--grpc-port", str(grpc_port), *extra,
    ]  # fmt: skip


class LiveServer:
    """A ``serve`` process on free ports with its own VAR_DIR (SQLite, store)."""

    def __init__(
        self,
        repository: Path,
        var_dir: Path,
        extra_env: dict | None = None,
        workers: int = 2,
        devices: tuple[str, ...] = (),
        worker_env: dict | None = None,
        args: tuple[str, ...] = (),
    ):
        """``args``: more ``serve`` options (e.g. ``--model-control-mode explicit``).
        ``devices``: inference workers (``runworker --device``) to start too;
        give ``extra_env`` INFERENCE_EXECUTOR=workers and REDIS_URL with them
        (and ``worker_env``: what only the workers get, e.g. their TLS files).
        Every process gets one SECRET_KEY of this server's (worker mode refuses
        a generated one)."""
        self.args = tuple(args)
        self.devices = devices
        self.worker_env = dict(worker_env or {})
        self.worker_processes: dict[str, subprocess.Popen] = {}
        self.worker_devices: dict[str, str] = {}
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()  # never Triton's 8002: servers of parallel tests would share it
        self.repository = repository
        self.var_dir = var_dir
        self.log_path = var_dir / "serve.log"
        self.env = dict(os.environ, VAR_DIR=str(var_dir), HTTP_WORKERS=str(workers))
        self.env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
        self.env.pop("DATABASE_URL", None)
        self.env.update(extra_env or {})
        self.process: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float | None = None, attempts: int = 3) -> LiveServer:
        """Start serve and wait until both transports answer (``timeout`` s; default
        ``$LIVE_SERVER_START_SECONDS`` or 180: a shared, loaded machine starts a
        server slowly; a start is not what these tests time). A port that
        another process took between :func:`free_port` and the bind (another
        pytest worker's server, or a client connection's ephemeral port) is
        retried on new ports, ``attempts`` times in all."""
        if timeout is None:
            timeout = float(os.environ.get("LIVE_SERVER_START_SECONDS", "180"))
        self.var_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        ports = ("--metrics-port", str(self.metrics_port))
        command = serve_command(self.repository, self.http_port, self.grpc_port, *ports, *self.args)
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = stalls.Deadline(timeout)  # the machine's stalls not counted
        while not deadline.passed():
            if self.process.poll() is not None:
                _kill_group(self.process.pid)  # children it left behind
                if attempts > 1 and "Address already in use" in self.log():
                    self.http_port, self.grpc_port = free_port(), free_port()
                    return self.start(timeout, attempts - 1)
                raise RuntimeError(f"serve exited early:\n{self.log()}")
            if http_ok(f"http://{self.http_url}/v2/health/ready") and port_open(self.grpc_port):
                for device in self.devices:
                    self.start_worker(device)
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"serve did not become ready in {timeout}s:\n{self.log()}")

    def worker_log_path(self, name: str) -> Path:
        return self.var_dir / f"worker-{name.replace(':', '')}.log"

    def start_worker(
        self, device: str, extra_env: dict | None = None, *, name: str | None = None, args: tuple[str, ...] = ()
    ) -> subprocess.Popen:
        """Start (or restart) a worker for ``device`` (``name``: its key in
        ``worker_processes`` and its log's name, default the device; ``args``:
        more runworker options, e.g. ``--hostname``); returns its process."""
        name = name or device
        log = open(self.worker_log_path(name), "ab")
        env = {**self.env, **self.worker_env, **(extra_env or {})}
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "--device", device, *args],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.worker_processes[name] = process
        self.worker_devices[name] = device
        return process

    def wait_for_workers(self, names: tuple[str, ...] | None = None, timeout: float = 60) -> None:
        """Until the heartbeat of every started worker process named (default:
        ``devices``; its worker id ends with its pid) is in Redis and the front
        end has seen it."""
        import redis

        from inference.workers.placement import HEARTBEAT_PREFIX, queue_for

        client = redis.Redis.from_url(self.env["REDIS_URL"])
        wanted = {(queue_for(self.worker_devices[n]), self.worker_processes[n].pid) for n in (names or self.devices)}
        deadline = stalls.Deadline(timeout)
        while not deadline.passed():
            live = set()
            for key in client.scan_iter(f"{HEARTBEAT_PREFIX}*"):
                queue, _, worker_id = key.decode()[len(HEARTBEAT_PREFIX) :].partition(":")
                live.add((queue, int(worker_id.rsplit("-", 1)[1])))
            if wanted <= live:
                time.sleep(1.0)  # the front end refreshes its view every 0.5 s
                return
            for device, process in self.worker_processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"worker {device} exited:\n{self.worker_log_path(device).read_text()}")
            time.sleep(0.2)
        raise RuntimeError(f"workers {sorted(wanted)} did not start in {timeout}s")

    def stop_workers(self) -> None:
        for process in self.worker_processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.worker_processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30) -> int | None:
        self.stop_workers()
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (a process started with
    ``start_new_session``: its pid), also those in process groups of their
    own (``serve``'s children, hosting/processes/supervisor.py) and those whose parent
    is gone."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            session = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[4])
        except (OSError, ValueError, IndexError):  # exited meanwhile
            continue
        if session == sid:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


_kill_group = kill_session


def serve_live(repository: Path, var_dir: Path, env: dict, workers_redis: str | None = None):
    """A started LiveServer; with ``workers_redis``, its inference in one CPU
    worker over Redis at that URL (flushed first), whose heartbeat the front
    end has seen, reached over TCP with the worker link's mutual TLS (as
    from another machine; certificates of a new CA in ``var_dir``). A
    generator for fixtures: stops the server after and asserts it exited
    cleanly."""
    devices: tuple[str, ...] = ()
    worker_env: dict[str, str] = {}
    if workers_redis:
        import redis

        from tests.support.certs import worker_link

        redis.Redis.from_url(workers_redis).flushdb()
        front_end_tls, worker_env = worker_link(var_dir / "worker-tls")
        env = {**env, "INFERENCE_EXECUTOR": "workers", "REDIS_URL": workers_redis, **front_end_tls}
        worker_env.update(WORKER_LISTEN="127.0.0.1:0", WORKER_UNIX_SOCKET="false")
        devices = ("cpu",)
    server = LiveServer(repository, var_dir, extra_env=env, devices=devices, worker_env=worker_env)
    server.start()
    if devices:
        server.wait_for_workers()
    yield server
    code = server.stop()
    assert code == 0, f"serve did not stop cleanly on SIGTERM (status {code}):\n{server.log()}"
