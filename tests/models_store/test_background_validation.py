"""The embedded server validates a big upload off the request: the upload
answers 202 and the version becomes READY (or FAILED) on its own
(VALIDATE_IN_REQUEST_MAX_BYTES; here 0, so every upload is big)."""

from __future__ import annotations

import io
import threading
import time

import pytest
from django.test import Client

from models_store.accounts import services as accounts
from models_store.intake import validating
from models_store.models import ModelVersion
from tests.support import onnx_models as m
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


def _upload(api: Client, name: str, payload: bytes):
    handle = io.BytesIO(payload)
    handle.name = "model.onnx"
    return api.post(f"/api/models/{name}/versions/", {"file": handle, "team": "ml"})


@pytest.fixture
def after_the_answer(monkeypatch):
    """The background validation starts once the test has the upload's answer
    (``.set()``): the tests' shared-cache SQLite locks a whole table while a
    thread writes, which a file database or PostgreSQL does not."""
    answered = threading.Event()
    original = validating._validate_in_background

    def delayed(version_id: int) -> None:
        answered.wait(30)
        original(version_id)

    monkeypatch.setattr(validating, "_validate_in_background", delayed)
    return answered


def _settle(api: Client, location: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    body = {}
    while time.monotonic() < deadline:
        response = api.get(location)
        if response.status_code == 503:  # Retry-After: the test database (shared-cache SQLite) was busy
            time.sleep(0.05)
            continue
        body = response.json()
        if body["state"] not in (ModelVersion.State.UPLOADED, ModelVersion.State.VALIDATING):
            return body
        time.sleep(0.05)
    raise AssertionError(f"still {body.get('state')} after {timeout} s: {body.get('log')}")


def test_a_big_upload_answers_202_and_validates_in_the_background(settings, after_the_answer):
    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 0
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=person('alice', 'ml'), name='ci')[1]}")
    accepted = _upload(api, "big", m.affine(2.0, 1.0))
    after_the_answer.set()
    assert accepted.status_code == 202, accepted.content
    assert accepted.json()["state"] in ("UPLOADED", "VALIDATING")
    version = _settle(api, accepted["Location"])
    assert version["state"] == "READY" and "ONNX checker passed" in version["log"]
    assert version["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    after_the_answer.clear()
    failed = _upload(api, "broken", m.failing_model())
    after_the_answer.set()
    assert failed.status_code == 202
    assert _settle(api, failed["Location"])["state"] == "FAILED"


def test_a_small_upload_is_still_validated_before_the_answer(settings):
    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 1024 * 1024
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=person('alice', 'ml'), name='ci')[1]}")
    answer = _upload(api, "small", m.affine(2.0, 1.0))
    assert answer.status_code == 201 and answer.json()["state"] == "READY"


def test_an_upload_validated_off_the_request_reads_no_model_in_it(settings, after_the_answer, monkeypatch):
    """The request streams, hashes and stores: ``onnx.load`` (or any other reader of the model) runs only in
    the validation after the answer; what the model holds is validation's to refuse, on the version."""
    import onnx

    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 0
    loads: list[str] = []
    original = onnx.load
    monkeypatch.setattr(onnx, "load", lambda *a, **k: loads.append(str(a[0])) or original(*a, **k))
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=person('alice', 'ml'), name='ci')[1]}")
    accepted = _upload(api, "big", m.affine(2.0, 1.0))
    assert accepted.status_code == 202 and loads == [], loads
    body = accepted.json()
    assert body["state"] == "UPLOADED" and accepted["Location"] == "/api/models/big/versions/1/"
    after_the_answer.set()
    assert _settle(api, accepted["Location"])["state"] == "READY" and loads  # read by the validation


@pytest.mark.parametrize(
    "payload, reason",
    [
        # the outline of a model (ir_version, a graph field) around bytes that are no GraphProto
        (b"\x08\x07\x3a\x03abc", "not a readable ONNX model"),
        # a weight in external data at the model's own file: there is no other file beside it
        (m.external_data_model("model.onnx"), "references its own file 'model.onnx' as external data"),
        (m.external_data_model("w.bin"), "references missing external data file 'w.bin'"),
        (m.external_data_model("../../etc/passwd"), "outside the model's directory"),
    ],
    ids=["not-a-graph", "itself", "missing-data", "etc-passwd"],
)
def test_a_bad_model_accepted_off_the_request_ends_failed_with_the_reason(settings, after_the_answer, payload, reason):
    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 0
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=person('alice', 'ml'), name='ci')[1]}")
    accepted = _upload(api, "bad", payload)
    after_the_answer.set()
    assert accepted.status_code == 202, accepted.content
    version = _settle(api, accepted["Location"])
    assert version["state"] == "FAILED" and reason in version["reason"], version
    assert "/" + "tmp" not in version["reason"] and str(settings.VAR_DIR) not in version["reason"]


@pytest.mark.parametrize(
    "payload, error",
    [
        (b"", "the file is empty"),
        (b"GIF89a not a model", "not an ONNX model"),
        (b"\x08\x07", "not an ONNX model: the file holds no ONNX graph"),
        (m.affine(2.0, 1.0)[:-5], "not an ONNX model: the file ends inside a field"),
    ],
    ids=["empty", "gif", "no-graph", "truncated"],
)
def test_a_file_not_shaped_like_a_model_is_refused_at_once_off_the_request_too(settings, payload, error):
    """The outline of the bytes as they streamed in (no parse): 400, no version, nothing stored."""
    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 0
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=person('alice', 'ml'), name='ci')[1]}")
    answer = _upload(api, "junk", payload)
    assert answer.status_code == 400 and error in answer.json()["error"], answer.content
    assert not ModelVersion.objects.filter(model__name="junk").exists()
