"""Validation in a Celery worker (REDIS_URL set): the upload answers 202 with
the version UPLOADED, and the worker takes it to READY or FAILED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import redis

from tests.support import onnx_models as m
from tests.support.live import bearer, manage, multipart, request, wait_for
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.interop

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")  # a database of its own


@pytest.fixture(scope="module")
def redis_url():
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip(f"no Redis at {REDIS_URL} (CI starts one; set TEST_REDIS_URL)")
    client.flushdb()
    yield REDIS_URL
    client.flushdb()


@pytest.fixture(scope="module")
def worker_server(redis_url, tmp_path_factory):
    repository = tmp_path_factory.mktemp("worker-repository")
    live = LiveServer(repository, tmp_path_factory.mktemp("worker-live"), extra_env={"REDIS_URL": redis_url})
    live.start()
    log = open(live.var_dir / "worker.log", "wb")  # closed at teardown
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "hosting", "worker", "--pool", "solo", "--loglevel", "INFO"],
        cwd=ROOT,
        env=live.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    manage(live, "create_user", "alice", "--team", "ml")
    live.token = manage(live, "create_token", "alice", "ci").strip()
    yield live
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    log.close()
    assert live.stop() == 0, live.log()


def _version(server, model, number):
    return request(server, "GET", f"/api/models/{model}/versions/{number}/", headers=bearer(server.token))[1]


def test_a_worker_validates_uploads(worker_server):
    server = worker_server
    for model, payload in (("good", m.affine(2.0, 1.0)), ("bad", m.failing_model())):
        body, kind = multipart({"team": "ml"}, payload)
        status, answer = request(
            server, "POST", f"/api/models/{model}/versions/", body, {**bearer(server.token), "Content-Type": kind}
        )
        assert status == 202, answer
        assert answer["state"] in ("UPLOADED", "VALIDATING") and answer["log"] == []
    assert wait_for(lambda: _version(server, "good", 1)["state"] == "READY", timeout=60), (
        server.var_dir / "worker.log"
    ).read_text()
    good = _version(server, "good", 1)
    assert good["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert good["log"][-1].startswith("warm-up inference")
    assert wait_for(lambda: _version(server, "bad", 1)["state"] == "FAILED", timeout=60)
    assert _version(server, "bad", 1)["reason"].startswith("ONNX checker:")
