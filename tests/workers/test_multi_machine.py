"""Worker mode across machines that share no disk: a front end and an
inference worker with different VAR_DIRs, MODEL_STORE_DIRs and
WORKER_CACHE_DIRs, sharing only PostgreSQL (a fresh database of the test's
own), Redis (database TEST_REDIS_DB, default 8) and S3 (moto's
server). An upload through the management API is validated by the worker,
served through it, and deleted from S3, the worker's cache and the front
end's local copy."""

from __future__ import annotations

import os
import shutil
import time
import uuid

import numpy as np
import psycopg
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.certs import worker_link
from tests.support.live import bearer, manage, multipart, request, wait_for
from tests.support.s3 import keys, s3_env
from tests.support.server import LiveServer

pytestmark = pytest.mark.workers

PG_ADMIN = os.environ.get("MULTI_MACHINE_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = redis_db.url("TEST_MACHINES_REDIS_DB", 8)


@pytest.fixture(scope="module")
def database():
    """A fresh PostgreSQL database for the two machines; dropped after."""
    name = f"modelhost_multi_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_ADMIN}: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def machines(database, s3_server, tmp_path_factory):
    """The front-end machine (``serve``: REST and gRPC) and a worker machine
    (``runworker --device cpu --hostname worker-machine``), which the front
    end reaches over TCP with mutual TLS (the worker has no Unix socket)."""
    endpoint, _ = s3_server
    redis.Redis.from_url(REDIS_URL).flushdb()
    front_dir = tmp_path_factory.mktemp("front-machine")
    worker_dir = tmp_path_factory.mktemp("worker-machine")
    front_end_tls, worker_tls = worker_link(tmp_path_factory.mktemp("worker-tls"))
    shared = {
        "DATABASE_URL": database,
        "REDIS_URL": REDIS_URL,
        "INFERENCE_EXECUTOR": "workers",
        "SECRET_KEY": "the-same-key-on-every-machine-" + uuid.uuid4().hex + uuid.uuid4().hex,
        "REGISTRY_POLL_SECONDS": "0.5",
        **s3_env(endpoint),
    }
    repository = front_dir / "repository"
    repository.mkdir()
    live = LiveServer(
        repository,
        front_dir / "var",
        extra_env={
            **shared, **front_end_tls, "MODEL_STORE_DIR": str(front_dir / "store"),
            "WORKER_CACHE_DIR": str(front_dir / "wc"),
        },
    )  # fmt: skip
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
    live.front_dir, live.worker_dir, live.worker_env = front_dir, worker_dir, worker_env
    try:
        manage(live, "create_user", "alice", "--team", "ml")
        live.token = manage(live, "create_token", "alice", "ci").strip()
        live.wait_for_workers()
        yield live
    finally:
        assert live.stop() == 0, live.log()
        shutil.rmtree(worker_dir, ignore_errors=True)


def _version(server, model: str, number: int) -> dict:
    status, body = request(server, "GET", f"/api/models/{model}/versions/{number}/", headers=bearer(server.token))
    assert status == 200, body
    return body


def test_upload_validate_serve_delete_without_a_shared_disk(machines, s3_server):
    server = machines
    _, s3 = s3_server
    started = time.monotonic()
    payload = m.affine(2.5, -1.0)
    body, kind = multipart({"team": "ml"}, payload)
    status, answer = request(
        server, "POST", "/api/models/far/versions/", body, {**bearer(server.token), "Content-Type": kind}
    )
    assert status in (201, 202), answer
    if status == 202:  # the truth about where it stands: queued, and who takes it
        assert answer["state"] in ("UPLOADED", "VALIDATING"), answer
        if answer["state"] == "UPLOADED":
            assert answer["log"] == [
                "queued for validation on queue modelhost.control: 1 inference worker(s) take validation tasks "
                f"(worker-machine-{server.worker_processes['cpu'].pid})"
            ], answer
    sha = answer["sha256"]
    assert wait_for(lambda: _version(server, "far", 1)["state"] == "READY", timeout=60), (
        _version(server, "far", 1),
        server.worker_log_path("cpu").read_text(),
    )
    version = _version(server, "far", 1)
    assert version["log"][0].startswith("validated on worker-machine by the cpu worker worker-machine-"), version
    assert "ONNX Runtime session created (CPUExecutionProvider)" in version["log"]
    assert version["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert f"far/{sha}/model.onnx" in keys(s3)
    cache = server.worker_dir / "cache"
    # The worker fetched the artifact from S3 into its cache (not into its own store) to validate it.
    assert (cache / sha / "model.onnx").read_bytes() == payload
    assert not any((server.worker_dir / "store").rglob("model.onnx"))

    x = np.random.default_rng(14).normal(size=(3, 4)).astype(np.float32)
    inp = httpclient.InferInput("x", [3, 4], "FP32")
    inp.set_data_from_numpy(x)
    result = httpclient.InferenceServerClient(server.http_url).infer("far", [inp])
    np.testing.assert_allclose(result.as_numpy("y"), 2.5 * x - 1.0, rtol=1e-6)
    ginp = grpcclient.InferInput("x", [3, 4], "FP32")
    ginp.set_data_from_numpy(x)
    gresult = grpcclient.InferenceServerClient(server.grpc_url).infer("far", [ginp])
    np.testing.assert_allclose(gresult.as_numpy("y"), 2.5 * x - 1.0, rtol=1e-6)
    assert "loaded far/1" in server.worker_log_path("cpu").read_text()

    status, _ = request(server, "DELETE", "/api/models/far/versions/1/", headers=bearer(server.token))
    assert status == 204
    assert not any(k.startswith("far/") for k in keys(s3))
    assert wait_for(lambda: not (cache / sha).exists(), timeout=10), list(cache.iterdir())
    assert wait_for(lambda: not (server.front_dir / "store" / "far" / sha).exists(), timeout=10)
    with pytest.raises(
        InferenceServerException,
        match=r"has no available versions: no version is ready to serve \(it has no versions\)",
    ):
        httpclient.InferenceServerClient(server.http_url).infer("far", [inp])
    # cleanup_store on the worker's machine: nothing left behind anywhere.
    out = manage(server, "cleanup_store", "--min-age", "0", env=server.worker_env)
    assert out.splitlines()[-1] == "0 orphan(s) removed, 0 missing artifact(s)", out
    assert time.monotonic() - started < 60


def test_a_model_with_external_data_reaches_a_worker_on_another_machine(machines, s3_server):
    """The model file and its data file uploaded together: both go to S3, the
    worker fetches both into its cache, validates and serves the model."""
    server = machines
    _, s3 = s3_server
    w = np.array([3.0, -0.5, 0.125, 7.0], np.float32)
    body, kind = multipart({"team": "ml"}, m.external_data_sum({"w.bin": w}), data={"w.bin": w.tobytes()})
    status, answer = request(
        server, "POST", "/api/models/far_data/versions/", body, {**bearer(server.token), "Content-Type": kind}
    )
    assert status in (201, 202), answer
    sha = answer["sha256"]
    assert wait_for(lambda: _version(server, "far_data", 1)["state"] == "READY", timeout=60), (
        _version(server, "far_data", 1),
        server.worker_log_path("cpu").read_text(),
    )
    assert {f"far_data/{sha}/model.onnx", f"far_data/{sha}/w.bin"} <= set(keys(s3))
    assert (server.worker_dir / "cache" / sha / "w.bin").read_bytes() == w.tobytes()
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    inp = grpcclient.InferInput("x", [4], "FP32")
    inp.set_data_from_numpy(x)
    result = grpcclient.InferenceServerClient(server.grpc_url).infer("far_data", [inp])
    np.testing.assert_array_equal(result.as_numpy("y"), x + w)
