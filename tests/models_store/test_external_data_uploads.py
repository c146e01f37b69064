"""Uploads of models with external data (ONNX's way past 2 GB,
https://onnx.ai/onnx/repo-docs/ExternalData.html): the model file in the
multipart field ``file``, each data file in a field ``data`` under the name
the model references. Through the management API with a token."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import onnxruntime as ort
import pytest

from models_store import storage
from models_store.accounts import services as accounts
from models_store.models import ModelVersion
from tests.models_store.test_api import Api, _error
from tests.support import onnx_models as m
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

W1 = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
W2 = np.array([10.0, 20.0, 30.0, 40.0], np.float32)


def _named(content: bytes, name: str) -> io.BytesIO:
    handle = io.BytesIO(content)
    handle.name = name
    return handle


def _upload(api: Api, model: str, payload: bytes, data: dict[str, bytes], **fields):
    files = {"file": _named(payload, "model.onnx"), "data": [_named(c, n) for n, c in data.items()]}
    return api.client.post(f"/api/models/{model}/versions/", {**files, **fields}, **api.auth)


@pytest.fixture
def api():
    return Api(accounts.token_create(user=person("alice", "ml"), name="script")[1])


def test_a_model_with_two_data_files_uploads_validates_and_runs(api):
    payload = m.external_data_sum({"w1.bin": W1, "weights.two.bin": W2})
    data = {"weights.two.bin": W2.tobytes(), "w1.bin": W1.tobytes()}  # any order in the form
    response = _upload(api, "ext", payload, data, team="ml")
    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["state"] == "READY"
    # The store's digest: the model file, then its data files in the order the model references them.
    assert answer["sha256"] == hashlib.sha256(payload + W1.tobytes() + W2.tobytes()).hexdigest()
    assert answer["size"] == len(payload) + W1.nbytes + W2.nbytes
    stored = storage.artifact_path(ModelVersion.objects.get(model__name="ext", number=1).artifact)
    assert sorted(p.name for p in stored.parent.iterdir()) == ["model.onnx", "w1.bin", "weights.two.bin"]
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    (y,) = ort.InferenceSession(str(stored), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + W1 + W2)
    again = _upload(api, "ext", payload, data)
    assert "already has these bytes" in _error(again, 409)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({}, "references missing external data file 'w1.bin' (send each data file as multipart field 'data'"),
        ({"w1.bin": W1.tobytes()}, "references missing external data file 'weights.two.bin'"),
        (
            {"w1.bin": W1.tobytes(), "weights.two.bin": W2.tobytes(), "extra.bin": b"1234"},
            "the model does not reference the data file(s) extra.bin",
        ),
        ({"w 1.bin": W1.tobytes()}, "external data file 'w 1.bin' is not a plain file name"),
        ({"model.onnx": W1.tobytes()}, "external data file 'model.onnx' is taken"),
    ],
)
def test_data_files_that_do_not_match_the_model_are_refused_and_nothing_is_kept(api, data, needle):
    payload = m.external_data_sum({"w1.bin": W1, "weights.two.bin": W2})
    error = _error(_upload(api, "ext", payload, data, team="ml"), 400)
    assert needle in error, error
    assert not ModelVersion.objects.exists()
    staging = storage.store_root() / storage.STAGING_DIRNAME
    assert not staging.exists() or not any(staging.iterdir())
    assert not (storage.store_root() / "ext").exists()


def test_a_data_file_name_given_twice_is_refused(api):
    payload = m.external_data_sum({"w1.bin": W1})
    files = {"file": _named(payload, "model.onnx"), "data": [_named(W1.tobytes(), "w1.bin"), _named(b"x", "w1.bin")]}
    response = api.client.post("/api/models/ext/versions/", {**files, "team": "ml"}, **api.auth)
    assert "external data file 'w1.bin' is taken" in _error(response, 400)


def test_the_upload_limit_counts_the_data_files_too(api, settings):
    payload = m.external_data_sum({"w1.bin": W1})
    settings.MAX_UPLOAD_BYTES = len(payload) + W1.nbytes - 1
    response = _upload(api, "ext", payload, {"w1.bin": W1.tobytes()}, team="ml")
    assert "larger than the upload limit" in _error(response, 413)
    settings.MAX_UPLOAD_BYTES = len(payload) + W1.nbytes
    assert _upload(api, "ext", payload, {"w1.bin": W1.tobytes()}, team="ml").status_code == 201
