"""Zero-error rollouts (issue 24): clients calling a model without a version
over REST and gRPC while the serving version changes ten times, and while
Redis restarts empty, get no error: a version that stops serving keeps
running for VERSION_DRAIN_SECONDS (front ends that have not seen the change
yet still route to it), and the workers' directory keeps a worker whose
heartbeat vanished with Redis until that heartbeat would have expired.

In process and in worker mode, with a Redis of the test's own (it is
restarted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import bearer, manage, request, wait_for
from tests.support.server import LiveServer, free_port

pytestmark = pytest.mark.workers

SCALES = {1: 2.0, 2: 3.0, 3: 5.0}  # version -> y = scale * x + 1


@pytest.fixture(scope="module", params=["inprocess", "workers"])
def fleet(request, tmp_path_factory):
    port = free_port()
    directory = tmp_path_factory.mktemp("redis")
    command = [shutil.which("redis-server") or "/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", str(directory)]  # fmt: skip

    def start_redis() -> subprocess.Popen:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: _pings(port), timeout=10)
        return process

    redis_process = start_redis()
    repo = tmp_path_factory.mktemp("rollout-repo")
    for version, scale in SCALES.items():
        m.write_model(repo, "rolling", m.affine(scale, 1.0), version=version)
    (repo / "rolling" / "config.pbtxt").write_text("version_policy: { specific: { versions: [ 1 ] } }\n")
    env = {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "REGISTRY_POLL_SECONDS": "1.0", "HTTP_THREADS": "8"}
    devices: tuple[str, ...] = ()
    if request.param == "workers":
        env["INFERENCE_EXECUTOR"] = "workers"
        devices = ("cpu",)
    live = LiveServer(repo, tmp_path_factory.mktemp(f"rollout-{request.param}"), extra_env=env, devices=devices)
    live.start()
    if devices:
        live.wait_for_workers()
    manage(live, "create_user", "ops", "--superuser")
    live.token = manage(live, "create_token", "ops", "rollouts").strip()
    live.mode, live.redis_port, live.start_redis = request.param, port, start_redis
    live.redis_process = redis_process
    try:
        yield live
    finally:
        code = live.stop()
        live.redis_process.terminate()
        live.redis_process.wait(10)
        assert code == 0, live.log()


def _pings(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=1).ping()
    except redis.RedisError:
        return False


class Load:
    """Clients calling "rolling" without a version, 2 over REST and 2 over
    gRPC, until stopped; each answer checked against the version it names."""

    def __init__(self, live: LiveServer):
        self.live = live
        self.answers: dict[int, int] = {}
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in ("http", "http", "grpc", "grpc")]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self.threads:
            thread.join(30)

    def _run(self, transport: str) -> None:
        module = grpcclient if transport == "grpc" else httpclient
        client = module.InferenceServerClient(self.live.grpc_url if transport == "grpc" else self.live.http_url)
        rng = np.random.default_rng(abs(hash(threading.current_thread().name)) % 2**32)
        while not self._stop.is_set():
            x = rng.standard_normal((2, 4)).astype(np.float32)
            inp = module.InferInput("x", [2, 4], "FP32")
            inp.set_data_from_numpy(x)
            try:
                result = client.infer("rolling", [inp])
            except InferenceServerException as exc:
                with self._lock:
                    self.failures.append(f"{transport}: {exc.status()} {exc.message()}")
                continue
            response = result.get_response()
            version = int(response["model_version"] if transport == "http" else response.model_version)
            if not np.allclose(result.as_numpy("y"), SCALES[version] * x + 1, rtol=1e-5):
                with self._lock:
                    self.failures.append(f"{transport}: a wrong answer for version {version}")
            with self._lock:
                self.answers[version] = self.answers.get(version, 0) + 1


def _serve_only(live: LiveServer, version: int) -> None:
    """Make ``version`` the only serving version (Triton's load with a config override)."""
    config = json.dumps({"version_policy": {"specific": {"versions": [version]}}})
    status, body = request(
        live, "POST", "/v2/repository/models/rolling/load", json.dumps({"parameters": {"config": config}}).encode(),
        {**bearer(live.token), "Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 200, body


def test_ten_version_changes_under_load_fail_no_request(fleet):
    with Load(fleet) as load:
        time.sleep(1.0)
        for change in range(10):
            _serve_only(fleet, (change + 1) % 3 + 1)  # 2, 3, 1, 2, ...
            time.sleep(0.6)
        time.sleep(1.0)
    assert load.failures == [], load.failures[:5]
    assert set(load.answers) == {1, 2, 3} and sum(load.answers.values()) > 100, load.answers


def test_redis_restarted_empty_fails_no_request(fleet):
    if fleet.mode == "inprocess":
        pytest.skip("in process, Redis holds no worker heartbeats (only shared rate limits)")
    with Load(fleet) as load:
        time.sleep(1.0)
        fleet.redis_process.kill()
        fleet.redis_process.wait()
        time.sleep(0.3)
        fleet.redis_process = fleet.start_redis()  # empty: no heartbeat until the worker's next beat
        time.sleep(3.0)
    assert load.failures == [], load.failures[:5]
    assert sum(load.answers.values()) > 100
