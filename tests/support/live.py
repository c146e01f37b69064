"""Driving a live ``serve`` process from tests: its management commands,
and HTTP requests with multipart bodies."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import subprocess
import sys
import time
import uuid

import pytest

from tests.support import stalls
from tests.support.server import ROOT, LiveServer


def manage(server: LiveServer, *args: str, env: dict | None = None) -> str:
    """Run ``manage.py <args>`` against the server's database and store; its stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=dict(server.env, **(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def multipart(
    fields: dict[str, str], payload: bytes, filename: str = "model.onnx", data: dict[str, bytes] | None = None
) -> tuple[bytes, str]:
    """(body, content type) of a form with ``fields``, the file field
    ``file`` and one field ``data`` per external data file (name -> bytes)."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    for field, name, content in [("file", filename, payload), *(("data", n, c) for n, c in (data or {}).items())]:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
            + content
            + b"\r\n"
        )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def request(server: LiveServer, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    """(status, parsed JSON or raw bytes) of one HTTP request."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        kind = response.getheader("Content-Type", "")
        return response.status, json.loads(data) if kind.startswith("application/json") else data
    finally:
        conn.close()


def web_session(server: LiveServer, username: str, password: str) -> str:
    """The Cookie header of ``username``'s web UI session, signed in through the sign-in form."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/accounts/login/")
        page = conn.getresponse()
        html = page.read().decode()
        csrf = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie")).group(1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
        form = f"csrfmiddlewaretoken={token}&username={username}&password={password}&next=/models/"
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"csrftoken={csrf}"}
        conn.request("POST", "/accounts/login/", body=form.encode(), headers=headers)
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 302, answer.status
        return "; ".join(c.split(";", 1)[0] for c in answer.headers.get_all("Set-Cookie"))
    finally:
        conn.close()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def upload(
    server: LiveServer, token: str, model: str, payload: bytes, team: str | None = None, data: dict | None = None
):
    """Upload a model file (and its external ``data`` files: name -> bytes)
    through the management API: (status, answer)."""
    body, kind = multipart({"team": team} if team else {}, payload, data=data)
    return request(server, "POST", f"/api/models/{model}/versions/", body, {**bearer(token), "Content-Type": kind})


def infer_json(server: LiveServer, token: str | None, model: str, x, version: str | None = None):
    """POST a V2 JSON inference of FP32 input ``x`` named "x": (status, answer)."""
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    headers = {"Content-Type": "application/json", **(bearer(token) if token else {})}
    return request(server, "POST", path, json.dumps(body).encode(), headers)


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass
    (False), the machine's stalls meanwhile not counted (tests/support/stalls.py)."""
    deadline = stalls.Deadline(timeout)
    while not deadline.passed():
        if predicate():
            return True
        time.sleep(interval)
    return False


def in_time(scenario, attempts: int = 3) -> None:
    """Run ``scenario`` until it could assert: it returns False when the
    machine stalled so long that what it times did not happen in the order
    it set up (a later request reached a queue after the batching window of
    earlier ones: nothing to assert then); skip if it never could."""
    for _ in range(attempts):
        if scenario():
            return
    pytest.skip(f"the machine stalled past the timing the test sets up in all {attempts} attempts")


def token_server(tmp_path_factory, poll_seconds: float):
    """A live server requiring API tokens for inference, following the
    registry every ``poll_seconds``, with one operator-owned model ("legacy":
    y = x + 1), webhooks to 127.0.0.1 allowed; a generator for a module
    fixture (stops the server after)."""
    from tests.support import onnx_models as m

    repository = tmp_path_factory.mktemp("token-repository")
    m.write_model(repository, "legacy", m.affine(1.0, 1.0))
    live = LiveServer(
        repository,
        tmp_path_factory.mktemp("token-live"),
        extra_env={
            "INFERENCE_REQUIRE_TOKEN": "true",
            "REGISTRY_POLL_SECONDS": str(poll_seconds),
            "WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
        },
    )
    live.start()
    yield live
    assert live.stop() == 0, live.log()


_PEOPLE_SCRIPT = """
import json, os, secrets
from models_store.accounts import services as accounts
tokens = {}
for name, teams in json.loads(os.environ["MODELHOST_TEST_PEOPLE"]).items():
    superuser = teams == "superuser"
    user = accounts.user_create(
        username=name, password=secrets.token_urlsafe(12), teams=[] if superuser else teams, superuser=superuser
    )
    tokens[name] = accounts.token_create(user=user, name="script")[1]
print(json.dumps(tokens))
"""


def people_with_tokens(server: LiveServer, **teams) -> dict[str, str]:
    """Create each user (value: their team, a tuple of teams, "" for none, or
    "superuser") with an API token named "script", in one ``manage.py
    shell``; the tokens by user name."""
    wanted = {
        name: team if team == "superuser" else ([team] if isinstance(team, str) and team else list(team))
        for name, team in teams.items()
    }
    output = manage(server, "shell", "-c", _PEOPLE_SCRIPT, env={"MODELHOST_TEST_PEOPLE": json.dumps(wanted)})
    tokens = json.loads(output.strip().splitlines()[-1])
    for token in tokens.values():
        assert wait_for(lambda token=token: _known_everywhere(server, token), timeout=30), "a new token stays unknown"
    return tokens


def _known_everywhere(server: LiveServer, token: str, tries: int = 4) -> bool:
    """Whether REST and gRPC processes accept ``token`` (a read that checks
    any token: the shared-memory status; ``tries`` calls each, on new
    connections, so that most likely every process answers). Every process
    knows a new token at once (a miss reads the registry's change stamp:
    models_store.accounts.authorizer), so this is a check, not a wait."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    for _ in range(tries):
        if request(server, "GET", "/v2/systemsharedmemory/status", b"", bearer(token))[0] != 200:
            return False
        with grpc.insecure_channel(server.grpc_url) as channel:
            try:
                pb_grpc.GRPCInferenceServiceStub(channel).SystemSharedMemoryStatus(
                    pb.SystemSharedMemoryStatusRequest(), metadata=(("authorization", f"Bearer {token}"),), timeout=10
                )
            except grpc.RpcError:
                return False
    return True


def run_coroutine(coroutine):
    """Run ``coroutine`` to its end on an event loop of its own, in a thread
    (the browser tests leave an event loop running in the test thread)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
