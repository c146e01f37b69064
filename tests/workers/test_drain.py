"""Draining a worker without failing a request (issue 34, T6): two real
``runworker`` processes on the cpu device under steady load (REST and gRPC
threads), one stopped with SIGTERM, later another with ``manage.py
drainworker``: no request fails, every answer is right, and each stopped
worker exits 0 after answering what it held."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.live import wait_for
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.workers

REDIS_URL = redis_db.url("TEST_DRAIN_REDIS_DB", 15)
ITERATIONS = 5_000  # about 50-100 ms a run: several requests are held whenever a worker is stopped


class Load:
    """Three REST and three gRPC clients calling "slow" back to back until
    stopped; every outcome kept (answers checked against the numpy value)."""

    def __init__(self, live: LiveServer, x: np.ndarray, expected: np.ndarray):
        self.live, self.x, self.expected = live, x, expected
        self.answered = 0
        self.failures: list = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in ("http", "grpc") * 3]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self.threads:
            thread.join(60)

    def _run(self, transport: str) -> None:
        module = grpcclient if transport == "grpc" else httpclient
        client = (
            grpcclient.InferenceServerClient(self.live.grpc_url)
            if transport == "grpc"
            else httpclient.InferenceServerClient(self.live.http_url, network_timeout=60)
        )
        while not self._stop.is_set():
            inputs = [module.InferInput("x", [1, 256], "FP32"), module.InferInput("n", [], "INT64")]
            inputs[0].set_data_from_numpy(self.x)
            inputs[1].set_data_from_numpy(np.array(ITERATIONS, dtype=np.int64))
            try:
                y = client.infer("slow", inputs).as_numpy("y")
            except InferenceServerException as exc:
                with self._lock:
                    self.failures.append((transport, exc.status(), exc.message()))
                continue
            if np.allclose(y, self.expected, rtol=1e-4, atol=1e-6):
                with self._lock:
                    self.answered += 1
            else:
                with self._lock:
                    self.failures.append((transport, "wrong answer", y[0, :4]))

    def wait_answers(self, more: int, timeout: float = 30) -> None:
        """Until ``more`` answers came after now."""
        target = self.answered + more
        assert wait_for(lambda: self.answered >= target, timeout=timeout), (self.answered, self.failures[:3])


def _start_worker(live: LiveServer, host: str, *args: str) -> subprocess.Popen:
    log = open(live.var_dir / f"{host}.log", "ab")
    return subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--device", "cpu", "--hostname", host, *args],
        cwd=ROOT, env=live.env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _held_at_drain(live: LiveServer, host: str) -> int:
    """The requests the worker held when it began to drain (its log says)."""
    found = re.search(r"draining: no new request is taken; (\d+) held", (live.var_dir / f"{host}.log").read_text())
    assert found, (live.var_dir / f"{host}.log").read_text()[-2000:]
    return int(found.group(1))


def test_a_stopped_worker_fails_no_request(tmp_path):
    """Two cpu workers under load. SIGTERM to host-a (which consumes control
    tasks: Celery's warm shutdown runs beside the drain): no request fails
    while it drains and after; it answered what it held and exits 0 with
    its key gone. Then host-c starts, and ``manage.py drainworker`` stops
    host-b (a worker without control tasks, which its SIGTERM handler
    serves) the same way."""
    repo = tmp_path / "repo"
    m.write_model(repo, "slow", m.slow_loop(), config="instance_group [ { kind: KIND_CPU count: 2 } ]\n")
    redis.Redis.from_url(REDIS_URL).flushdb()
    live = LiveServer(repo, tmp_path / "live", extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": REDIS_URL})
    live.start()
    client = redis.Redis.from_url(REDIS_URL)
    workers = {}

    def keys() -> set[str]:
        return {key.decode().rsplit(":", 1)[1] for key in client.scan_iter("modelhost:worker:infer.cpu:*")}

    try:
        workers["host-a"] = _start_worker(live, "host-a")
        workers["host-b"] = _start_worker(live, "host-b", "--no-control")
        assert wait_for(lambda: len(keys()) == 2, timeout=60)
        time.sleep(1.0)  # the front ends' directories refresh every 0.5 s
        x = np.full((1, 256), 0.25, dtype=np.float32)
        with Load(live, x, m.slow_loop_expected(x, ITERATIONS)) as load:
            load.wait_answers(20)
            workers["host-a"].send_signal(signal.SIGTERM)
            assert workers["host-a"].wait(30) == 0
            assert f"host-a-{workers['host-a'].pid}" not in keys()
            load.wait_answers(20)  # host-b alone

            workers["host-c"] = _start_worker(live, "host-c", "--no-control")
            assert wait_for(lambda: len(keys()) == 2, timeout=60)
            load.wait_answers(20)
            drained = subprocess.run(
                [sys.executable, "manage.py", "drainworker", f"host-b-{workers['host-b'].pid}"],
                cwd=ROOT, env=live.env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert drained.returncode == 0, drained.stderr
            assert "drained and stopped" in drained.stdout, drained.stdout
            assert workers["host-b"].wait(30) == 0
            load.wait_answers(20)  # host-c alone
        assert not load.failures, load.failures[:5]
        for host in ("host-a", "host-b"):
            assert _held_at_drain(live, host) >= 1  # it was stopped while it held requests ...
            assert "drained: every request it held was answered" in (live.var_dir / f"{host}.log").read_text()
        missing = subprocess.run(
            [sys.executable, "manage.py", "drainworker", "host-z-1"],
            cwd=ROOT, env=live.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert missing.returncode != 0 and "no live worker host-z-1" in missing.stderr
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        assert live.stop() == 0
