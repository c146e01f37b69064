"""The embedded server validates a big upload off the request: the upload
answers 202 and the version becomes READY (or FAILED) on its own
(VALIDATE_IN_REQUEST_MAX_BYTES; here 0, so every upload is big)."""

from __future__ import annotations

import io
import time

import pytest
from django.test import Client

from models_store import accounts
from models_store.models import ModelVersion
from tests.support import onnx_models as m
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


def _upload(api: Client, name: str, payload: bytes):
    """POST the upload; a 503 (Retry-After: the shared-cache SQLite of the
    tests locks a table while the background validation writes) is retried,
    as a client does."""
    for _ in range(100):
        handle = io.BytesIO(payload)
        handle.name = "model.onnx"
        response = api.post(f"/api/models/{name}/versions/", {"file": handle, "team": "ml"})
        if response.status_code != 503:
            return response
        time.sleep(0.05)
    return response


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


def test_a_big_upload_answers_202_and_validates_in_the_background(settings):
    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 0
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(person('alice', 'ml'), 'ci')[1]}")
    accepted = _upload(api, "big", m.affine(2.0, 1.0))
    assert accepted.status_code == 202, accepted.content
    assert accepted.json()["state"] in ("UPLOADED", "VALIDATING")
    version = _settle(api, accepted["Location"])
    assert version["state"] == "READY" and "ONNX checker passed" in version["log"]
    assert version["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    failed = _upload(api, "broken", m.failing_model())
    assert failed.status_code == 202
    assert _settle(api, failed["Location"])["state"] == "FAILED"


def test_a_small_upload_is_still_validated_before_the_answer(settings):
    settings.VALIDATE_IN_REQUEST_MAX_BYTES = 1024 * 1024
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(person('alice', 'ml'), 'ci')[1]}")
    answer = _upload(api, "small", m.affine(2.0, 1.0))
    assert answer.status_code == 201 and answer.json()["state"] == "READY"
