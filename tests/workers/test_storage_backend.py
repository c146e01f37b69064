"""Artifacts in S3-compatible object storage (MODEL_STORAGE=s3): published
before the version row commits, fetched by machines that lack them, removed
with the version. A real S3 API server (moto's standalone server stands in
for MinIO here), and a worker with its own empty disk serving a model."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import numpy as np
import pytest
import redis
import tritonclient.http as httpclient
from django.core.files.storage import storages

from models_store import storage
from tests.support import onnx_models as m
from tests.support.server import LiveServer, free_port

BUCKET = "models"


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    port = free_port()
    binary = Path(sys.executable).parent / "moto_server"
    process = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    process.terminate()
    process.wait()


def s3_env(endpoint: str) -> dict:
    return {
        "MODEL_STORAGE": "s3",
        "MODEL_STORAGE_BUCKET": BUCKET,
        "MODEL_STORAGE_ENDPOINT": endpoint,
        "MODEL_STORAGE_ACCESS_KEY": "k",
        "MODEL_STORAGE_SECRET_KEY": "s",
    }


@pytest.fixture
def s3_settings(settings, s3_server):
    endpoint, client = s3_server
    settings.STORAGES = {
        **settings.STORAGES,
        "models": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {"bucket_name": BUCKET, "endpoint_url": endpoint, "access_key": "k", "secret_key": "s",
                        "region_name": "us-east-1", "file_overwrite": True, "default_acl": None},
        },
    }  # fmt: skip
    storages._storages.clear()
    yield client
    storages._storages.clear()


def keys(client) -> set[str]:
    return {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def test_publish_fetch_remove(s3_settings, settings, tmp_path):
    client = s3_settings
    source = tmp_path / "src" / "1"
    (source / "data").mkdir(parents=True)
    (source / "data" / "w.bin").write_bytes(b"weights")
    (source / "model.onnx").write_bytes(m.identity("FP32"))
    stored = storage.store_files("published", source / "model.onnx", [(source / "data" / "w.bin").resolve()])
    prefix = f"published/{stored.sha256}"
    assert {f"{prefix}/model.onnx", f"{prefix}/data/w.bin"} <= keys(client)  # on S3 before any row exists
    # Another machine: an empty local store fetches it.
    settings.MODEL_STORE_DIR = tmp_path / "elsewhere"
    fetched = storage.local_artifact(stored.relpath)
    assert fetched == tmp_path / "elsewhere" / stored.relpath
    assert fetched.read_bytes() == (source / "model.onnx").read_bytes()
    assert (fetched.parent / "data" / "w.bin").read_bytes() == b"weights"
    cached = storage.copy_artifact(stored.relpath, tmp_path / "cache" / stored.sha256)
    assert cached.read_bytes() == fetched.read_bytes()
    storage.remove_artifact(stored.relpath)
    assert not any(k.startswith(prefix) for k in keys(client))
    with pytest.raises(FileNotFoundError):
        storage.copy_artifact(stored.relpath, tmp_path / "cache2" / stored.sha256)


def test_worker_on_another_disk_fetches_from_object_storage(s3_server, tmp_path):
    endpoint, client = s3_server
    repo = tmp_path / "repo"
    m.write_model(repo, "remote", m.affine(4.0, 0.5))
    url = "redis://127.0.0.1:6379/11"
    redis.Redis.from_url(url).flushdb()
    live = LiveServer(
        repo,
        tmp_path / "front",
        extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": url, **s3_env(endpoint)},
    )
    live.start()
    other_disk = tmp_path / "worker-machine"
    try:
        live.start_worker(
            "cpu",
            {"MODEL_STORE_DIR": str(other_disk / "store"), "WORKER_CACHE_DIR": str(other_disk / "cache")},
        )
        live.devices = ("cpu",)
        live.wait_for_workers()
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        inp = httpclient.InferInput("x", [2, 4], "FP32")
        inp.set_data_from_numpy(x)
        result = httpclient.InferenceServerClient(live.http_url).infer("remote", [inp])
        np.testing.assert_allclose(result.as_numpy("y"), 4 * x + 0.5)
        cached = list((other_disk / "cache").glob("*/model.onnx"))
        assert len(cached) == 1 and cached[0].read_bytes() == (repo / "remote" / "1" / "model.onnx").read_bytes()
        assert not (other_disk / "store").exists() or not any((other_disk / "store").rglob("model.onnx"))
        assert any(k.startswith("remote/") for k in keys(client))
    finally:
        assert live.stop() == 0
        shutil.rmtree(other_disk, ignore_errors=True)
