"""The model store against a live ``serve`` that requires API tokens for
inference: uploads over HTTP, team scoping of tokens on REST, TF Serving and
gRPC, revocation reaching every process, the client snippets run as written,
and uploads killed mid-body (a client that disconnects, a worker that dies)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from models_store.registry.snippets import snippets
from tests.support import onnx_models as m
from tests.support import stalls
from tests.support.live import (
    bearer,
    infer_json,
    manage,
    multipart,
    people_with_tokens,
    request,
    token_server,
    upload,
    wait_for,
)

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server requiring tokens, with one operator-owned model ("legacy": y = x + 1)."""
    yield from token_server(tmp_path_factory, poll_seconds=0.2)


@pytest.fixture(scope="module")
def tokens(server):
    """API tokens: alice (team ml), bob (team vision), root (superuser)."""
    return people_with_tokens(server, alice="ml", bob="vision", root="superuser")


@pytest.fixture(scope="module")
def uploaded(server, tokens):
    """Model "double" (y = 2x + 1, team ml) uploaded by alice through the API."""
    body, kind = multipart({"team": "ml"}, m.affine(2.0, 1.0))
    status, answer = request(
        server, "POST", "/api/models/double/versions/", body, {**bearer(tokens["alice"]), "Content-Type": kind}
    )
    assert status == 201, answer
    return answer


_infer = infer_json


def _store(server) -> Path:
    return server.var_dir / "models"


def test_upload_over_http_then_infer_with_a_token(server, tokens, uploaded):
    assert (uploaded["state"], uploaded["number"], uploaded["uploaded_by"]) == ("READY", 1, "alice")
    x = np.array([[0.5, -1.0, 2.0, 3.25]], dtype=np.float32)
    status, answer = _infer(server, tokens["alice"], "double", x)
    assert status == 200, answer
    np.testing.assert_allclose(answer["outputs"][0]["data"], (2 * x + 1).ravel().tolist())


def test_a_model_with_external_data_uploads_and_serves(server, tokens):
    """The model file and its data file in one upload, served at once (the
    data file travels with the model into the store and the session)."""
    w = np.array([1.5, -2.0, 0.25, 8.0], np.float32)
    status, answer = upload(
        server, tokens["alice"], "external", m.external_data_sum({"w.bin": w}), "ml", {"w.bin": w.tobytes()}
    )
    assert status == 201 and answer["state"] == "READY", answer
    x = np.array([0.5, -1.0, 2.0, 3.25], dtype=np.float32)
    status, answer = _infer(server, tokens["alice"], "external", x)
    assert status == 200, answer
    np.testing.assert_array_equal(np.array(answer["outputs"][0]["data"], np.float32), x + w)


def test_rest_and_tfserving_scoping(server, tokens, uploaded):
    x = np.ones((1, 4), dtype=np.float32)
    status, answer = _infer(server, None, "double", x)
    assert status == 401 and "inference requires an API token" in answer["error"]
    status, answer = _infer(server, "mh_forged", "double", x)
    assert status == 401 and answer["error"] == "invalid or revoked API token"
    status, answer = _infer(server, tokens["bob"], "double", x)
    assert status == 403 and answer["error"] == (
        "API token 'script' of bob may not call model 'double'; it may call models of team vision"
    )
    assert _infer(server, tokens["alice"], "legacy", x)[0] == 403  # operator-owned
    status, answer = _infer(server, tokens["root"], "legacy", x)
    assert status == 200 and answer["outputs"][0]["data"] == [2.0] * 4
    body = b'{"instances": [[1, 2, 3, 4]]}'
    assert request(server, "POST", "/v1/models/double:predict", body)[0] == 401
    assert request(server, "POST", "/v1/models/double:predict", body, bearer(tokens["bob"]))[0] == 403
    status, answer = request(server, "POST", "/v1/models/double:predict", body, bearer(tokens["alice"]))
    assert (status, answer) == (200, {"predictions": [[3.0, 5.0, 7.0, 9.0]]})


def _grpc_status(client, tensor, headers) -> str:
    try:
        client.infer("double", [tensor], headers=headers)
        return "OK"
    except InferenceServerException as exc:
        return exc.status()


def _settles(probe, expected: str, timeout: float = 10.0, calls: int = 6) -> set:
    """Statuses of ``calls`` consecutive calls, once they all equal ``expected``
    (several server processes each follow token changes within about a
    second), or the last ones seen at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        seen = {probe() for _ in range(calls)}
        if seen == {expected} or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


def test_grpc_scoping(server, tokens, uploaded):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.full((2, 4), 3.0, dtype=np.float32)
    tensor = grpcclient.InferInput("x", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    alice = {"authorization": f"Bearer {tokens['alice']}"}
    try:
        result = client.infer("double", [tensor], headers=alice)
        np.testing.assert_array_equal(result.as_numpy("y"), 2 * x + 1)
        for headers, code in (
            ({}, grpc.StatusCode.UNAUTHENTICATED),
            ({"authorization": f"Bearer {tokens['bob']}"}, grpc.StatusCode.PERMISSION_DENIED),
        ):
            assert _settles(lambda h=headers: _grpc_status(client, tensor, h), str(code)) == {str(code)}
    finally:
        client.close()


def test_revocation_reaches_every_server_process(server, tokens, uploaded):
    token = manage(server, "create_token", "alice", "short-lived").strip()
    x = np.ones((1, 4), dtype=np.float32)
    assert _settles(lambda: _infer(server, token, "double", x)[0], 200) == {200}  # every process knows it
    manage(server, "shell", "-c", (
        "from models_store.accounts import selectors, services; "
        f"services.token_revoke(token=selectors.token_by_secret('{token}'), actor=None)"
    ))  # fmt: skip
    deadline = time.monotonic() + 10
    statuses = set()
    while time.monotonic() < deadline:
        statuses = {_infer(server, token, "double", x)[0] for _ in range(6)}  # reaches both HTTP workers
        if statuses == {401}:
            break
        time.sleep(0.2)
    assert statuses == {401}
    tensor = grpcclient.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(x)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:  # every gRPC process follows too
        revoked = {"authorization": f"Bearer {token}"}
        unauthenticated = str(grpc.StatusCode.UNAUTHENTICATED)
        assert _settles(lambda: _grpc_status(client, tensor, revoked), unauthenticated) == {unauthenticated}
        with pytest.raises(InferenceServerException, match="invalid or revoked"):
            client.infer("double", [tensor], headers=revoked)


def test_client_snippets_run_as_written(server, tokens, uploaded):
    """Each snippet, run as a user would (bash / python), prints the model's
    answer for its example input (zeros): y = 2 * 0 + 1."""
    expected = 2 * np.zeros((1, 4), dtype=np.float32) + 1
    env = dict(os.environ, MODELHOST_TOKEN=tokens["alice"])
    for snippet in snippets(
        "double", 1, uploaded["inputs"], uploaded["outputs"], server.http_url, server.grpc_url, token=True
    ):
        command = ["bash", "-c", snippet.code] if snippet.language == "shell" else [sys.executable, "-c", snippet.code]
        result = stalls.run(command, timeout=60, env=env)
        assert result.returncode == 0, (snippet.key, result.stderr)
        if snippet.key == "curl-v2":
            assert '"data":[1.0,1.0,1.0,1.0]' in result.stdout, result.stdout
        elif snippet.key == "curl-tfserving":
            assert result.stdout.strip() == '{"outputs":[[1.0,1.0,1.0,1.0]]}', result.stdout
        else:
            assert result.stdout.strip() == str(expected), (snippet.key, result.stdout)


def _staging(server) -> list[str]:
    directory = _store(server) / ".tmp"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def _start_upload(server, token, model: str, size: int) -> tuple[socket.socket, bytes]:
    """Open a connection and send the headers and the first half of an upload of ``size`` bytes."""
    payload = np.random.default_rng(0).bytes(size)
    body, kind = multipart({"team": "ml"}, payload)
    host, port = server.http_url.split(":")
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST /api/models/{model}/versions/ HTTP/1.1\r\nHost: {server.http_url}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body[: len(body) // 2])
    return sock, body


def test_a_client_that_disconnects_mid_upload_leaves_nothing(server, tokens):
    sock, _ = _start_upload(server, tokens["alice"], "killed", 8 * 1024 * 1024)
    assert wait_for(lambda: _staging(server) != []), "the upload never reached the staging area"
    sock.close()  # the client goes away mid-body
    assert wait_for(lambda: _staging(server) == []), f"staged files left behind: {_staging(server)}"
    assert request(server, "GET", "/api/models/killed/", headers=bearer(tokens["alice"]))[0] == 404
    assert not (_store(server) / "killed").exists()
    assert _infer(server, tokens["alice"], "double", np.ones((1, 4), np.float32))[0] in (200, 403, 404)  # still up


def _worker_holding(path_prefix: Path) -> int | None:
    """The pid of the process with a file under ``path_prefix`` open (the HTTP worker receiving the upload)."""
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                if os.readlink(fd).startswith(str(path_prefix)):
                    return int(fd_dir.parent.name)
        except OSError:
            continue
    return None


def test_an_http_worker_killed_mid_upload_leaves_an_orphan_that_cleanup_store_removes(server, tokens):
    sock, _body = _start_upload(server, tokens["alice"], "crashed", 8 * 1024 * 1024)
    try:
        assert wait_for(lambda: _staging(server) != [])
        pid = _worker_holding(_store(server) / ".tmp")
        assert pid is not None and pid != server.process.pid
        os.kill(pid, signal.SIGKILL)  # the gunicorn worker dies mid-upload (gunicorn starts a new one)
        staged = _staging(server)
        assert len(staged) == 1
    finally:
        sock.close()
    out = manage(server, "cleanup_store", "--min-age", "0")
    assert out.splitlines() == [f"removed .tmp/{staged[0]}", "1 orphan(s) removed, 0 missing artifact(s)"]
    assert _staging(server) == []
    assert request(server, "GET", "/api/models/crashed/", headers=bearer(tokens["alice"]))[0] == 404
    assert wait_for(lambda: request(server, "GET", "/v2/health/ready")[0] == 200)
