"""A model is callable through every server process as soon as the write that
made it servable has answered, not only after the next registry poll.

The server here polls the registry's change stamp once an hour, so only the
catch-up on a miss (``ModelRegistry.catch_up``, ``TokenCache.catch_up``) can
make a model written by another process servable: an import by the
``import_repository`` command (its own process) reaches every HTTP and gRPC
process; an upload through one HTTP process reaches the gRPC process and the
other HTTP process. Tokens are required, so the token scopes must catch up
too (a team token may only call models its snapshot knows)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support import onnx_models as m
from tests.support.live import bearer, infer_json, manage, multipart, people_with_tokens, request, token_server

pytestmark = pytest.mark.interop

CALLS = 8  # new connections each: spread over both HTTP processes


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from token_server(tmp_path_factory, poll_seconds=3600)


@pytest.fixture(scope="module")
def tokens(server):
    return people_with_tokens(server, alice="ml", root="superuser")


_rest = infer_json


def _grpc(server, token, model, x, version=""):
    tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        headers = {"authorization": f"Bearer {token}"}
        ready = client.is_model_ready(model, version, headers=headers)
        result = client.infer(model, [tensor], model_version=version, headers=headers)
        return ready, result.get_response().model_version, result.as_numpy("y")


def _everywhere(server, token, model, x, expected, version=None):
    """Every transport answers ``expected`` for ``x`` at once (no retries)."""
    for _ in range(CALLS):
        status, answer = _rest(server, token, model, x, version)
        assert status == 200, answer
        np.testing.assert_allclose(answer["outputs"][0]["data"], expected.ravel())
        assert answer["model_version"] == (version or "1")
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version else "") + ":predict"
    status, answer = request(server, "POST", path, json.dumps({"instances": x.tolist()}).encode(), bearer(token))
    assert status == 200, answer
    np.testing.assert_allclose(answer["predictions"], expected)
    ready, served, y = _grpc(server, token, model, x, version or "")
    assert (ready, served) == (True, version or "1")
    np.testing.assert_allclose(y, expected)


def test_an_import_by_another_process_is_callable_at_once(server, tokens, tmp_path):
    m.write_model(tmp_path, "imported", m.affine(3.0, -1.0))
    manage(server, "import_repository", str(tmp_path), "--team", "ml")
    x = np.array([[1.0, 2.0, -0.5, 4.0]], dtype=np.float32)
    _everywhere(server, tokens["alice"], "imported", x, 3 * x - 1)
    _everywhere(server, tokens["root"], "imported", x, 3 * x - 1)


def test_an_upload_is_callable_at_once_and_so_is_its_next_version(server, tokens):
    x = np.array([[0.5, -1.0, 2.0, 3.25]], dtype=np.float32)
    for number, (scale, shift) in enumerate([(2.0, 1.0), (-1.0, 0.5)], start=1):
        body, kind = multipart({"team": "ml"}, m.affine(scale, shift))
        headers = {**bearer(tokens["alice"]), "Content-Type": kind}
        status, answer = request(server, "POST", "/api/models/uploaded/versions/", body, headers)
        assert (status, answer["number"], answer["state"]) == (201, number, "READY"), answer
        _everywhere(server, tokens["alice"], "uploaded", x, scale * x + shift, version=str(number))


def test_unknown_models_are_still_not_found(server, tokens):
    x = np.ones((1, 4), dtype=np.float32)
    status, answer = _rest(server, tokens["root"], "never-uploaded", x)
    assert (status, answer) == (404, {"error": "Request for unknown model: 'never-uploaded' is not found"})
    status, answer = _rest(server, tokens["alice"], "never-uploaded", x)
    assert status == 403 and "may not call model 'never-uploaded'" in answer["error"]
    status, answer = _rest(server, tokens["root"], "legacy", x, version="7")
    assert (status, answer) == (
        404,
        {"error": "Request for unknown model: 'legacy' version 7 is not found (versions of the model: 1)"},
    )
    assert request(server, "GET", "/v2/health/ready")[0] == 200
