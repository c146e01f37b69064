"""Outages of the dependencies (issue 24): a front end and an inference
worker on two "machines" sharing a PostgreSQL cluster of the test's own
(stopped and started again here), a Redis server of its own, and moto's S3 behind a switch
that the test turns off and on. Each outage lasts a few seconds:

- PostgreSQL stopped as the worker takes a validation task, and S3 gone
  while the worker fetches the artifact to validate it: the version is
  READY once they are back, with no manual step (never FAILED);
- PostgreSQL stopped during an upload's S3 write: the upload answers 503,
  and what it left (S3 object, local copy) is gone within the cleanup
  period (ORPHAN_MIN_AGE_SECONDS);
- meanwhile uploads and label moves answer 503 with Retry-After (repository
  control over gRPC: UNAVAILABLE), never 500;
- the logs of each outage are a few lines, one of them "recovered", and no
  traceback.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import threading
import time
import uuid

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.certs import worker_link
from tests.support.live import bearer, manage, multipart, request, wait_for
from tests.support.outages import PrivatePostgres, Switch
from tests.support.s3 import keys, s3_env
from tests.support.server import LiveServer

pytestmark = pytest.mark.workers

ORPHAN_MIN_AGE = 2.0
OUTAGE_SECONDS = 2.5


@pytest.fixture(scope="module")
def postgres():
    cluster = PrivatePostgres()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def s3_switch(s3_server):
    endpoint, _ = s3_server
    host, port = endpoint.removeprefix("http://").split(":")
    switch = Switch((host, int(port)))
    yield switch
    switch.off()


@pytest.fixture(scope="module")
def machines(postgres, s3_switch, tmp_path_factory):
    """A front end (``serve``, worker mode) and a worker machine, with short
    back-offs and cleanup periods."""
    redis_url = f"redis://127.0.0.1:{redis_db.start_private_server()}/0"  # no other test's workers
    front_dir = tmp_path_factory.mktemp("outage-front")
    worker_dir = tmp_path_factory.mktemp("outage-worker")
    front_end_tls, worker_tls = worker_link(tmp_path_factory.mktemp("outage-tls"))
    shared = {
        "DATABASE_URL": postgres.url,
        "REDIS_URL": redis_url,
        "INFERENCE_EXECUTOR": "workers",
        "SECRET_KEY": "outages-" + uuid.uuid4().hex + uuid.uuid4().hex,
        "REGISTRY_POLL_SECONDS": "0.5",
        "VALIDATION_RETRY_SECONDS": "0.5",
        "VALIDATION_RETRY_MAX_SECONDS": "1",
        "VALIDATION_DEADLINE_SECONDS": "60",
        "ORPHAN_MIN_AGE_SECONDS": str(ORPHAN_MIN_AGE),
        "MAINTENANCE_SECONDS": "1",
        **s3_env(s3_switch.url),
        # boto3's own retries would stretch each failed call over seconds; ours are the back-off.
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_RETRY_MODE": "standard",
    }
    live = LiveServer(
        front_dir / "repository",
        front_dir / "var",
        extra_env={**shared, **front_end_tls, "MODEL_STORE_DIR": str(front_dir / "store")},
        workers=1,
    )
    live.repository.mkdir()
    live.start()
    worker_env = {
        **worker_tls,
        "WORKER_LISTEN": "127.0.0.1:0",
        "WORKER_UNIX_SOCKET": "false",
        "VAR_DIR": str(worker_dir / "var"),
        "MODEL_STORE_DIR": str(worker_dir / "store"),
        "WORKER_CACHE_DIR": str(worker_dir / "cache"),
    }
    live.start_worker("cpu", worker_env, args=("--hostname", "worker-machine"))
    live.devices = ("cpu",)
    live.front_dir, live.worker_dir = front_dir, worker_dir
    try:
        manage(live, "create_user", "alice", "--team", "ml")
        live.token = manage(live, "create_token", "alice", "ci").strip()
        live.wait_for_workers()
        yield live
    finally:
        stopped = live.stop()
        shutil.rmtree(worker_dir, ignore_errors=True)
    assert stopped == 0, live.log()


def call(server, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    """(status, headers, parsed JSON body) of one HTTP request."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read() or b"null")
    finally:
        conn.close()


def upload(server, model: str, payload: bytes):
    body, kind = multipart({"team": "ml"}, payload)
    return call(server, "POST", f"/api/models/{model}/versions/", body, {**bearer(server.token), "Content-Type": kind})


def version(server, model: str, number: int = 1) -> dict:
    status, body = request(server, "GET", f"/api/models/{model}/versions/{number}/", headers=bearer(server.token))
    assert status == 200, body
    return body


def worker_log(server) -> str:
    return server.worker_log_path("cpu").read_text(errors="replace")


def assert_unavailable(answer) -> None:
    status, headers, body = answer
    assert status == 503, answer
    assert int(headers["retry-after"]) >= 1 and "unavailable" in body["error"], answer


def validation_outage(server, model: str, payload: bytes, stop):
    """Upload while the worker is paused (it stays in the directory: the
    validation is queued for it), ``stop`` a dependency, resume the worker
    (it takes the task now, and meets the outage), wait OUTAGE_SECONDS."""
    worker = server.worker_processes["cpu"]
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        status, _, answer = upload(server, model, payload)
        assert status == 202 and answer["state"] == "UPLOADED", answer
        assert "1 inference worker(s) take validation tasks" in answer["log"][0], answer
        stop()
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    time.sleep(OUTAGE_SECONDS)
    return answer


def test_postgres_stopped_as_the_worker_takes_the_validation(machines, postgres, s3_server):
    server = machines
    _, s3 = s3_server
    payload = m.affine(2.0, 1.0)
    outage: dict = {}

    def stop():
        postgres.stop()
        # What callers see meanwhile: 503 with Retry-After, never 500; gRPC UNAVAILABLE.
        outage["upload"] = upload(server, "other", m.affine(3.0, 0.0))
        label = json.dumps({"version": 1}).encode()
        headers = {**bearer(server.token), "Content-Type": "application/json"}
        outage["label"] = call(server, "PUT", "/api/models/pgv/labels/stable/", label, headers)
        with pytest.raises(InferenceServerException) as unload:
            grpcclient.InferenceServerClient(server.grpc_url).unload_model(
                "pgv", headers={"authorization": f"Bearer {server.token}"}
            )
        outage["grpc"] = unload.value

    validation_outage(server, "pgv", payload, stop)
    assert call(server, "GET", "/api/models/pgv/versions/1/", headers=bearer(server.token))[0] == 503
    postgres.start()
    assert wait_for(lambda: version(server, "pgv")["state"] == "READY", timeout=30), (
        version(server, "pgv"),
        worker_log(server),
    )
    assert_unavailable(outage["upload"])
    assert outage["upload"][2]["error"].startswith("the database is unavailable (OperationalError)")
    assert_unavailable(outage["label"])
    assert outage["grpc"].status() == "StatusCode.UNAVAILABLE", outage["grpc"].message()
    done = version(server, "pgv")
    assert done["reason"] == "" and done["log"][0].startswith("validated on worker-machine"), done
    assert not any(k.startswith("other/") for k in keys(s3))  # the refused upload stored nothing

    # The logs: a line when the database went away and one when it came back, per process; no traceback.
    recovered = "the model registry's database recovered after"
    assert wait_for(lambda: recovered in server.log() and recovered in worker_log(server), timeout=10)
    front, back = server.log(), worker_log(server)
    for log in (front, back):
        assert "Traceback" not in log, log
        went = log.count("the model registry's database is unreachable")
        assert 1 <= went <= 4 and log.count("the model registry's database recovered after") == went, log
    assert "the database (validation) is unreachable" in back and "the database (validation) recovered" in back, back


def test_s3_gone_while_the_worker_fetches_the_artifact(machines, s3_switch):
    server = machines
    payload = m.affine(-1.0, 0.5)
    validation_outage(server, "s3v", payload, s3_switch.off)
    during = version(server, "s3v")
    assert during["state"] in ("UPLOADED", "VALIDATING"), during  # retried, not FAILED
    assert any("the storage backend failed (EndpointConnectionError)" in line for line in during["log"]), during
    assert_unavailable(upload(server, "other", m.affine(4.0, 0.0)))  # the upload cannot publish its artifact
    s3_switch.on()
    assert wait_for(lambda: version(server, "s3v")["state"] == "READY", timeout=30), worker_log(server)
    # The recovery line follows the validation's commit (a busy machine may write it a moment after READY).
    recovered = "the storage backend (validation) recovered after"
    assert wait_for(lambda: recovered in worker_log(server), timeout=10), worker_log(server)
    back = worker_log(server)
    assert back.count("the storage backend (validation) is unreachable") == 1, back
    assert "Traceback" not in back, back
    # The refused upload's local copy is removed by the front end's cleanup timer.
    assert wait_for(lambda: not (server.front_dir / "store" / "other").exists(), timeout=ORPHAN_MIN_AGE + 10)


def test_postgres_stopped_during_an_uploads_s3_write_leaves_no_orphan(machines, postgres, s3_switch, s3_server):
    server = machines
    _, s3 = s3_server
    s3_switch.hold()  # the upload's S3 write waits in the switch ...
    answers = []
    uploading = threading.Thread(target=lambda: answers.append(upload(server, "half", m.affine(5.0, 5.0))))
    uploading.start()
    try:
        # The upload's own write (another process's S3 call, e.g. a cleanup sweep, may be held first).
        assert wait_for(lambda: any(b"half/" in line for line in s3_switch.held_requests), timeout=20), (
            s3_switch.held_requests
        )
        postgres.stop()  # ... while PostgreSQL goes away
    finally:
        s3_switch.release()
    uploading.join(60)
    assert_unavailable(answers[0])
    time.sleep(OUTAGE_SECONDS)
    # Half-written: the S3 object is there, its row is not (and cannot be cleaned up while the database is away).
    assert any(k.startswith("half/") for k in keys(s3)), keys(s3)
    postgres.start()
    # Within the cleanup period, nothing of it is left: no S3 object, no local file, no row.
    assert wait_for(
        lambda: not any(k.startswith("half/") for k in keys(s3)) and not (server.front_dir / "store" / "half").exists(),
        timeout=ORPHAN_MIN_AGE + 15,
    ), (keys(s3), server.log())
    assert call(server, "GET", "/api/models/half/", headers=bearer(server.token))[0] == 404
    staging = server.front_dir / "store" / ".tmp"
    assert not staging.exists() or not any(staging.iterdir())
