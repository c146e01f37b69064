"""What a person sees in the console (issue 37, console item 6): management
commands start without django-axes's banner, ``serve`` starts without
granian's thread-count warning, and stops (SIGTERM, or Ctrl-C: SIGINT to
the terminal's whole process group) with every granian worker stopping
gracefully, none killed."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request

import pytest

from tests.support import onnx_models as m
from tests.support import stalls
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.interop

NOISE = ("AXES: BEGIN", "seems quite high", "refused to gracefully stop", "Killing worker")


def test_a_management_command_prints_no_axes_banner(tmp_path):
    env = dict(os.environ, VAR_DIR=str(tmp_path / "var"))
    done = stalls.run([sys.executable, "manage.py", "check"], 120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "System check identified no issues" in output
    assert "AXES" not in output, output


def _infer(server: LiveServer) -> list:
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1.5, -2.0]}]})
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/identity_fp32/infer", body.encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["outputs"][0]["data"]


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_serve_starts_and_stops_quietly(tmp_path, how):
    repository = tmp_path / "repository"
    m.write_model(repository, "identity_fp32", m.identity("FP32"))
    server = LiveServer(repository, tmp_path / "var").start()
    try:
        assert _infer(server) == [1.5, -2.0]  # each worker may have served; they still stop gracefully
        assert _infer(server) == [1.5, -2.0]
        started = time.monotonic()
        if how == "SIGTERM":
            server.process.send_signal(signal.SIGTERM)
        else:  # a terminal's Ctrl-C reaches every process of its foreground group
            os.killpg(server.process.pid, signal.SIGINT)
        code = server.process.wait(60)
        took = time.monotonic() - started
    finally:
        server.stop()
    log = server.log()
    assert code == 0, log
    for noise in NOISE:
        assert noise not in log, log
    assert "Stopped worker-1" in log and "Stopped worker-2" in log, log
    assert took < 20, (took, log)  # no worker waited out a kill timeout
