"""Artifacts in S3-compatible object storage (MODEL_STORAGE=s3): published
before the version row commits, fetched by machines that lack them, removed
with the version. A real S3 API server (moto's standalone server stands in
for MinIO here), and a worker with its own empty disk serving a model."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import redis
import tritonclient.http as httpclient
from django.core.files.storage import storages

from models_store import storage
from models_store.intake import services as intake
from models_store.registry.services import states
from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.s3 import BUCKET, keys, s3_env
from tests.support.server import LiveServer

pytestmark = pytest.mark.workers


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
    url = redis_db.url("TEST_STORAGE_REDIS_DB", 11)
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


@pytest.mark.django_db(transaction=True)
def test_cleanup_store_on_a_machine_without_the_artifacts(s3_settings, settings, tmp_path, capsys):
    """cleanup_store needs only the database and S3: it removes artifacts no
    version uses from S3 (and from this machine's worker cache), and reports
    versions whose artifact S3 lacks, whatever this machine's disk holds."""
    from django.core.management import call_command

    from tests.support.store import person, stage

    client = s3_settings
    alice = person("alice", "ml")
    kept = intake.version_upload(model_name="kept", staged=stage(m.affine(1, 1)), actor=alice, team=alice.teams.get())
    storage.commit_staged("ghost", stage(m.affine(6, 6)).directory, "e" * 64, 10)  # a row never committed
    assert f"ghost/{'e' * 64}/model.onnx" in keys(client)
    settings.MODEL_STORE_DIR = tmp_path / "another-machine"  # nothing of it on this disk
    cache = tmp_path / "worker-cache"
    settings.WORKER_CACHE_DIR = cache
    (cache / kept.sha256).mkdir(parents=True)
    (cache / ("d" * 64)).mkdir()  # a deleted version's cached copy
    call_command("cleanup_store", "--min-age", "3600")
    assert capsys.readouterr().out.splitlines()[-1] == "0 orphan(s) removed, 0 missing artifact(s)"
    call_command("cleanup_store", "--min-age", "0")
    out = capsys.readouterr().out.splitlines()
    assert sorted(out[:-1]) == sorted(
        [f"removed ghost/{'e' * 64}/ from the storage backend", f"removed {cache / ('d' * 64)} from the worker cache"]
    ), out
    assert out[-1] == "2 orphan(s) removed, 0 missing artifact(s)"
    assert not any(k.startswith("ghost/") for k in keys(client)) and kept.artifact in keys(client)
    assert sorted(p.name for p in cache.iterdir()) == [kept.sha256]
    client.delete_object(Bucket=BUCKET, Key=kept.artifact)
    call_command("cleanup_store", "--min-age", "0")
    assert f"missing artifact of a version: {kept.artifact}" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_a_validation_the_storage_backend_interrupts_is_retried_in_process(settings, s3_server, tmp_path, monkeypatch):
    """The server validating itself (embedded mode, no validating worker):
    S3 gone while it fetches the artifact -> the version is UPLOADED again
    with the reason in its log, never FAILED, and a retry in the process
    after VALIDATION_RETRY_SECONDS makes it READY once S3 is back."""
    from models_store.intake import validating
    from models_store.models import ModelVersion, RegisteredModel
    from tests.support.live import wait_for
    from tests.support.outages import Switch
    from tests.support.store import person

    endpoint, _ = s3_server
    host, port = endpoint.removeprefix("http://").split(":")
    switch = Switch((host, int(port)))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # our back-off, not boto3's
    settings.STORAGES = {
        **settings.STORAGES,
        "models": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {"bucket_name": BUCKET, "endpoint_url": switch.url, "access_key": "k", "secret_key": "s",
                        "region_name": "us-east-1", "file_overwrite": True, "default_acl": None},
        },
    }  # fmt: skip
    storages._storages.clear()
    settings.VALIDATION_RETRY_SECONDS, settings.VALIDATION_RETRY_MAX_SECONDS = 0.3, 0.5
    try:
        source = tmp_path / "model.onnx"
        source.write_bytes(m.affine(3.0, 1.0))
        stored = storage.store_files("retried", source)
        settings.MODEL_STORE_DIR = tmp_path / "a-machine-without-the-file"
        model = RegisteredModel.objects.create(name="retried", team=person("alice", "ml").teams.first())
        version = states.version_create(
            model=model,
            artifact=stored.relpath,
            sha256=stored.sha256,
            size=stored.size,
            state="UPLOADED",
            action="test",
        )
        switch.off()
        assert validating.validate_here(version.pk) is None  # interrupted: a retry is scheduled
        version.refresh_from_db()
        assert version.state == ModelVersion.State.UPLOADED, version.log
        assert version.log[-1].endswith("the storage backend failed (EndpointConnectionError); validation is retried")
        switch.on()
        assert wait_for(lambda: _state(version.pk) == "READY", timeout=15)
        version.refresh_from_db()
        assert version.inputs == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    finally:
        switch.off()
        storages._storages.clear()


def _state(pk: int) -> str | None:
    """A version's state, or None while the retry's thread holds the table:
    the test database is shared-cache in-memory SQLite, whose table locks
    fail at once ("database table is locked") rather than wait like a file."""
    from django.db import OperationalError

    from models_store.models import ModelVersion

    try:
        return ModelVersion.objects.get(pk=pk).state
    except OperationalError as error:
        if "locked" not in str(error):
            raise
        return None
