"""What the model store answers and does when a dependency fails (issue 24):
a full disk is 507 (never 400 "interrupted"), a dependency's failure is 503
with Retry-After (:func:`models_store.outages.http_answer`), and the reaper
takes versions left UPLOADED or VALIDATING past VALIDATION_DEADLINE_SECONDS
(the live outage tests are tests/workers/test_outages.py)."""

from __future__ import annotations

import io
import os
from datetime import timedelta
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from models_store import maintenance, outages, storage
from models_store.accounts import services as accounts
from models_store.models import ModelVersion, RegisteredModel
from models_store.registry.services import states
from tests.support import onnx_models as m
from tests.support import stalls
from tests.support.store import PASSWORD, person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def full_disk(monkeypatch):
    """Staging directories whose model file is /dev/full: every write fails
    with the kernel's ENOSPC, as on a full disk."""
    made = []
    real = storage.new_staging_dir

    def staging_on_a_full_disk(prefix: str):
        directory = real(prefix)
        os.symlink("/dev/full", directory / storage.MODEL_FILENAME)
        made.append(directory)
        return directory

    monkeypatch.setattr(storage, "new_staging_dir", staging_on_a_full_disk)
    return made


def _file(payload: bytes) -> io.BytesIO:
    handle = io.BytesIO(payload)
    handle.name = "model.onnx"
    return handle


def test_a_full_disk_answers_507_and_leaves_nothing(full_disk):
    user = person("alice", "ml")
    token = accounts.token_create(user=user, name="script")[1]
    payload = m.affine(2.0, 1.0)
    response = Client().post(
        "/api/models/full/versions/", {"file": _file(payload), "team": "ml"}, HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 507, response.content
    assert response.json() == {"error": "the server has no space left to store this upload; try again later"}
    assert full_disk and not any(d.exists() for d in full_disk)  # the staging directory went with the answer
    assert not RegisteredModel.objects.filter(name="full").exists()
    # The web UI's upload (XHR) answers the same.
    browser = Client()
    assert browser.login(username="alice", password=PASSWORD)
    response = browser.post(
        "/upload/", {"file": _file(payload), "name": "full", "team": "ml"}, HTTP_X_REQUESTED_WITH="XMLHttpRequest"
    )
    assert response.status_code == 507, response.content
    assert "no space left" in response.json()["error"]


def test_which_failures_are_a_dependencys():
    down = outages.http_answer(OperationalError("connection refused"))
    assert down == (
        503,
        f"the database is unavailable (OperationalError); nothing was changed, try again in "
        f"{outages.RETRY_AFTER_SECONDS} s",
        {"Retry-After": str(outages.RETRY_AFTER_SECONDS)},
    )
    s3 = outages.http_answer(EndpointConnectionError(endpoint_url="http://s3"))
    assert s3[0] == 503 and s3[1].startswith("the storage backend is unavailable (EndpointConnectionError)")
    busy = ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject")
    assert outages.transient(busy)
    denied = ClientError({"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "PutObject")
    assert not outages.transient(denied) and outages.http_answer(denied) is None
    assert outages.http_answer(ValueError("a bug")) is None
    try:  # raised from a dependency's failure: still the dependency's
        try:
            raise OperationalError("gone")
        except OperationalError as exc:
            raise RuntimeError("while saving") from exc
    except RuntimeError as wrapped:
        assert outages.http_answer(wrapped)[0] == 503
    assert outages.http_answer(OSError(28, "No space left on device"))[0] == 507


def test_the_reaper_revalidates_versions_left_behind(settings):
    """A version left UPLOADED (its task lost) and one left VALIDATING (its
    worker killed) past the deadline are validated again: READY; a younger
    one is left alone."""
    settings.VALIDATION_DEADLINE_SECONDS = 60
    team = person("alice", "ml").teams.first()
    model = RegisteredModel.objects.create(name="left", team=team)
    versions = []
    for index, state in enumerate((ModelVersion.State.UPLOADED, ModelVersion.State.VALIDATING)):
        stored = storage.store_files("left", _write(m.affine(1.0 + index, 0.0)))
        version = states.version_create(
            model=model, artifact=stored.relpath, sha256=stored.sha256, size=stored.size,
            state=ModelVersion.State.UPLOADED, action="test",
        )  # fmt: skip
        if state == ModelVersion.State.VALIDATING:  # a worker took it, then was killed
            version = states.transition(version=version, change="validate")
        versions.append(version)
    ModelVersion.objects.filter(pk__in=[v.pk for v in versions]).update(
        updated_at=timezone.now() - timedelta(minutes=5)
    )
    young = states.version_create(
        model=model,
        artifact=versions[0].artifact,
        sha256="0" * 64,
        size=1,
        state=ModelVersion.State.UPLOADED,
        action="test",
    )
    requeued, _ = maintenance.run_once()
    assert sorted(requeued) == [v.pk for v in versions]
    for version in versions:
        version.refresh_from_db()
        assert version.state == ModelVersion.State.READY, version.log
        assert version.log[0].startswith("validated on "), version.log
    young.refresh_from_db()
    assert young.state == ModelVersion.State.UPLOADED


def _write(payload: bytes):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "model.onnx"
    path.write_bytes(payload)
    return path


#: Run in a process of its own: the server's gRPC stubs cannot be imported
#: beside tritonclient's (the same proto package), which the suite imports.
_GRPC_OUTAGE = """
import asyncio, json, os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
import django
django.setup()
import grpc
from django.db import OperationalError
from inference.grpc.proto import oip_pb2 as pb
from inference.grpc.servicer import InferenceServicer

class Repository:
    def unload(self, name, parameters, token):
        raise OperationalError("connection to server at 127.0.0.1, port 5432 failed: Connection refused")

class Extensions:
    repository = Repository()

class Aborted(Exception):
    pass

class Context:
    def invocation_metadata(self):
        return (("authorization", "Bearer t"),)
    async def abort(self, code, details, trailing_metadata=()):
        print(json.dumps([code.name, details, [list(m) for m in trailing_metadata]]))
        raise Aborted

try:
    asyncio.run(InferenceServicer(None, Extensions(), 1 << 20).RepositoryModelUnload(
        pb.RepositoryModelUnloadRequest(model_name="pgv"), Context()))
except Aborted:
    sys.exit(0)
sys.exit("the call was not aborted")
"""


@pytest.fixture
def scopes_unreadable(monkeypatch):
    """The installed authorizer's token scopes dropped (a registry change
    noticed while the database went away) and every reload failing as with
    PostgreSQL stopped."""
    from inference import ports

    cache = ports.container.authorizer.cache

    def database_down():
        raise OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')

    monkeypatch.setattr(cache, "_loader", database_down)
    monkeypatch.setattr(cache, "_scopes", None)
    return cache


def test_an_outage_met_checking_a_token_is_503_over_rest(scopes_unreadable):
    """A model control call whose token cannot be checked because the
    database is down is a dependency's outage: 503 with Retry-After, never
    500 (the adapters' last-resort handler asks the ``outage_error`` port)."""
    token = "not-checked-while-the-database-is-down"
    response = Client().post("/v2/repository/models/pgv/unload", b"{}", "application/json",
                             HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert response.status_code == 503, response.content
    assert response.json() == {"error": _OUTAGE_MESSAGE}
    assert response["Retry-After"] == str(outages.RETRY_AFTER_SECONDS)


_OUTAGE_MESSAGE = (
    f"the database is unavailable (OperationalError); nothing was changed, try again in {outages.RETRY_AFTER_SECONDS} s"
)


def test_an_outage_escaping_a_grpc_handler_is_unavailable(tmp_path):
    """The same over gRPC: an outage no handler expected is UNAVAILABLE with
    ``retry-after``, never INTERNAL (CI met INTERNAL on an unload while
    PostgreSQL was stopped: tests/workers/test_outages.py)."""
    import json
    import sys

    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["VAR_DIR"] = str(tmp_path)
    done = stalls.run(
        [sys.executable, "-c", _GRPC_OUTAGE], timeout=120, env=env, cwd=Path(__file__).resolve().parents[2]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    code, details, trailing = json.loads(done.stdout.strip().splitlines()[-1])
    assert (code, details, trailing) == (
        "UNAVAILABLE",
        _OUTAGE_MESSAGE,
        [["retry-after", str(outages.RETRY_AFTER_SECONDS)]],
    )
