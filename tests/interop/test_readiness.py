"""``/v2/health/ready`` of ``serve`` with gRPC means both transports listen:
an orchestrator (or a client) that takes "ready" literally can call gRPC at
once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import tritonclient.grpc as grpcclient

from tests.support import onnx_models as m
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.interop


def _ready(server: LiveServer) -> tuple[int, dict, str | None] | None:
    """(status, JSON, Retry-After) of the HTTP ready route, None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=2) as response:
            return response.status, json.loads(response.read()), response.headers.get("Retry-After")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers.get("Retry-After")
    except OSError:
        return None


def test_ready_means_grpc_answers_too(tmp_path):
    repository = tmp_path / "repository"
    m.write_model(repository, "identity_fp32", m.identity("FP32"))
    server = LiveServer(repository, tmp_path / "var")
    server.var_dir.mkdir(parents=True)
    command = [
        sys.executable, "manage.py", "serve", "--model-repository", str(repository),
        "--http-port", str(server.http_port), "--grpc-port", str(server.grpc_port),
    ]  # fmt: skip
    with open(server.log_path, "wb") as log:
        server.process = subprocess.Popen(command, cwd=ROOT, env=server.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        not_ready = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            answer = _ready(server)
            if answer is not None and answer[0] == 200:
                break
            if answer is not None:
                not_ready.append(answer)
            assert server.process.poll() is None, server.log()
            time.sleep(0.01)
        else:
            pytest.fail(f"never ready:\n{server.log()}")
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:  # at once: no retry, no wait
            assert client.is_server_ready(client_timeout=2)
        finally:
            client.close()
        for status, payload, retry_after in not_ready:
            assert status == 503 and payload["ready"] is False and payload["error"], payload
            assert retry_after == "1", payload  # a load balancer's probe may come back in a second
    finally:
        assert server.stop() == 0, server.log()
