"""Validation in a Celery worker (REDIS_URL set): the upload answers 202 with
the version UPLOADED, and the worker takes it to READY or FAILED; webhook
deliveries are attempted there too (the Celery task ``deliver_webhook``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import redis

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.live import bearer, manage, multipart, request, wait_for
from tests.support.server import ROOT, LiveServer, free_port
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.interop

REDIS_URL = os.environ.get("TEST_REDIS_URL") or redis_db.url("TEST_CELERY_REDIS_DB", 13)  # a database of its own


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
    hooks = {"WEBHOOK_ALLOWED_HOSTS": "127.0.0.1", "WEBHOOK_RETRY_SECONDS": "0.3"}
    live = LiveServer(repository, tmp_path_factory.mktemp("worker-live"), extra_env={"REDIS_URL": redis_url, **hooks})
    live.start()
    log = open(live.var_dir / "worker.log", "wb")  # closed at teardown
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "hosting", "worker", "--pool", "solo", "--loglevel", "INFO"],
        cwd=ROOT,
        env=live.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        manage(live, "create_user", "alice", "--team", "ml")
        live.token = manage(live, "create_token", "alice", "ci").strip()
        # The server queues validations once a Celery worker answers its ping (else it validates them itself).
        worker_log = live.var_dir / "worker.log"
        assert wait_for(lambda: " ready." in worker_log.read_text(), timeout=60), worker_log.read_text()
        yield live
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        log.close()
        stopped = live.stop()
    assert stopped == 0, live.log()


def _version(server, model, number):
    return request(server, "GET", f"/api/models/{model}/versions/{number}/", headers=bearer(server.token))[1]


def test_a_worker_validates_uploads(worker_server):
    server = worker_server
    for model, payload in (("good", m.affine(2.0, 1.0)), ("bad", m.failing_model())):
        body, kind = multipart({"team": "ml"}, payload)
        status, answer = request(
            server, "POST", f"/api/models/{model}/versions/", body, {**bearer(server.token), "Content-Type": kind}
        )
        # 202 while the worker has not finished; it may win the race (422 FAILED for the bad one, which fails in
        # milliseconds, 201 READY for the good one): the answer gives the version's state when it is sent
        if status == 422:
            assert answer["version"]["state"] == "FAILED", answer
        elif status == 201:
            assert model == "good" and answer["state"] == "READY", answer
        else:
            assert status == 202 and answer["state"] in ("UPLOADED", "VALIDATING"), answer
            if answer["state"] == "UPLOADED":  # where it stands: queued, for a Celery worker
                assert answer["log"] == [
                    "queued for validation on queue modelhost.control: a Celery worker (celery -A hosting worker) "
                    "takes it"
                ], answer
    assert wait_for(lambda: _version(server, "good", 1)["state"] == "READY", timeout=60), (
        server.var_dir / "worker.log"
    ).read_text()
    good = _version(server, "good", 1)
    assert good["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert good["log"][-1].startswith("warm-up inference")
    assert good["log"][0].startswith("validated on "), good  # the Celery worker's host and process
    assert wait_for(lambda: _version(server, "bad", 1)["state"] == "FAILED", timeout=60)
    assert _version(server, "bad", 1)["reason"].startswith("ONNX checker:")
    assert "could not queue the validation" not in server.log()  # the worker validated both


def test_uploads_are_validated_in_process_while_the_broker_is_down(tmp_path):
    """REDIS_URL names a port where nothing listens: the validation cannot be
    queued, so the uploading process validates (201, READY or FAILED with
    its reason) instead of leaving the version UPLOADED for ever."""
    repository = tmp_path / "repository"
    repository.mkdir()
    live = LiveServer(repository, tmp_path / "live", extra_env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    live.start()
    try:
        manage(live, "create_user", "alice", "--team", "ml")
        live.token = manage(live, "create_token", "alice", "ci").strip()
        for model, payload, expected in (("good", m.affine(2.0, 1.0), 201), ("bad", m.failing_model(), 422)):
            body, kind = multipart({"team": "ml"}, payload)
            headers = {**bearer(live.token), "Content-Type": kind}
            status, answer = request(live, "POST", f"/api/models/{model}/versions/", body, headers)
            assert status == expected, answer  # as in embedded mode: the answer waited for the validation
        assert _version(live, "good", 1)["state"] == "READY"
        bad = _version(live, "bad", 1)
        assert bad["state"] == "FAILED" and bad["reason"].startswith("ONNX checker:")
        assert answer["error"].startswith("version 1 of 'bad' failed validation: ONNX checker:")
        x = [[1.0, 2.0, 3.0, 4.0]]
        body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x}]}
        status, answer = request(
            live, "POST", "/v2/models/good/infer", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        assert (status, answer["outputs"][0]["data"]) == (200, [3.0, 5.0, 7.0, 9.0])
        assert "uploads are validated in this process" in live.log()
    finally:
        assert live.stop() == 0, live.log()


def test_the_server_validates_itself_when_no_worker_takes_validation_tasks(tmp_path):
    """Process mode with REDIS_URL set (e.g. only to share rate limits) and no
    Celery worker: the server validates uploads itself (201 READY, 422
    FAILED) instead of queueing them for nobody (they stayed UPLOADED)."""
    url = redis_db.url("TEST_CELERY_IDLE_REDIS_DB", 14)  # a database no Celery worker consumes
    try:
        redis.Redis.from_url(url).flushdb()
    except redis.ConnectionError:
        pytest.skip(f"no Redis at {url}")
    (tmp_path / "repository").mkdir()
    live = LiveServer(tmp_path / "repository", tmp_path / "live", extra_env={"REDIS_URL": url}, workers=1)
    live.start()
    try:
        manage(live, "create_user", "alice", "--team", "ml")
        live.token = manage(live, "create_token", "alice", "ci").strip()
        for model, payload, expected in (("good", m.affine(2.0, 1.0), 201), ("bad", m.failing_model(), 422)):
            body, kind = multipart({"team": "ml"}, payload)
            headers = {**bearer(live.token), "Content-Type": kind}
            status, answer = request(live, "POST", f"/api/models/{model}/versions/", body, headers)
            assert status == expected, answer
        assert _version(live, "good", 1)["state"] == "READY"
        assert _version(live, "bad", 1)["state"] == "FAILED"
        assert redis.Redis.from_url(url).llen("modelhost.control") == 0  # nothing was queued
    finally:
        stopped = live.stop()
    assert stopped == 0, live.log()


def test_a_worker_delivers_webhooks(worker_server):
    """The worker validates, emits version.ready and makes the attempts (500,
    then 200 after the back-off); a redeliver from the API is queued as the
    Celery task: the worker's log has every attempt, the server's none."""
    server = worker_server
    from standardwebhooks import Webhook

    headers = {**bearer(server.token), "Content-Type": "application/json"}
    with Receiver([500]) as hooks:
        body = json.dumps({"url": hooks.url, "events": ["version.ready"]}).encode()
        status, created = request(server, "POST", "/api/teams/ml/webhooks/", body, headers)
        assert status == 201, created
        upload, kind = multipart({"team": "ml"}, m.affine(7.0, 1.0))
        status, version = request(
            server, "POST", "/api/models/hooked/versions/", upload, {**bearer(server.token), "Content-Type": kind}
        )
        assert status in (201, 202) and version["state"] in ("UPLOADED", "VALIDATING", "READY"), version  # 201: won
        received = hooks.wait_for(2, timeout=60)
        message_id = received[0].headers["webhook-id"]
        assert received[1].headers["webhook-id"] == message_id
        assert Webhook(created["secret"]).verify(received[1].body, received[1].headers)["data"]["model"] == "hooked"
        path = f"/api/teams/ml/webhooks/{created['id']}/deliveries/"
        (delivery,) = request(server, "GET", path, headers=bearer(server.token))[1]["results"]
        status, _ = request(server, "POST", f"{path}{delivery['id']}/redeliver", b"", headers)
        assert status == 202
        assert hooks.wait_for(3, timeout=60)[2].headers["webhook-id"] == message_id
    worker_log = (server.var_dir / "worker.log").read_text()
    assert wait_for(lambda: f"webhook {message_id} (version.ready) attempt 3" in
                    (server.var_dir / "worker.log").read_text()), worker_log  # fmt: skip
    for number in (1, 2):
        assert f"webhook {message_id} (version.ready) attempt {number}" in worker_log
    assert message_id not in server.log()
