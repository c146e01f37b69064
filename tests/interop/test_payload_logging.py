"""Payload logging against a live server: a model opts in through the
management API (audited); sampled request/response pairs land in the file
sink, each pair the one the client sent and got; tensors above the model's
size cap are left out; the HTTP sink gets CloudEvents (in process, with a
receiver on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from inference.observability.payload_log import HttpSink, PayloadLogger
from inference.protocol.types import InferenceRequest, RequestInput, ResponseOutput
from tests.conftest import EXECUTOR
from tests.support import onnx_models as m
from tests.support.live import bearer, multipart, people_with_tokens, request, wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if EXECUTOR != "inprocess":
        pytest.skip("payload logging is the front end's: the executor does not matter")
    repository = tmp_path_factory.mktemp("payload-repository")
    m.write_model(repository, "unlogged", m.affine(1.0, 0.0))
    var = tmp_path_factory.mktemp("payload-live")
    live = LiveServer(repository, var, extra_env={"PAYLOAD_LOG_SINK": str(var / "payloads" / "pairs.jsonl")})
    live.start()
    yield live
    assert live.stop() == 0, live.log()


@pytest.fixture(scope="module")
def alice(server):
    token = people_with_tokens(server, payload_alice="observers")["payload_alice"]
    body, kind = multipart({"team": "observers"}, m.affine(2.0, 1.0))
    status, answer = request(
        server, "POST", "/api/models/logged/versions/", body, {**bearer(token), "Content-Type": kind}
    )
    assert status == 201, answer
    return token


def _patch(server, token, doc):
    return request(
        server, "PATCH", "/api/models/logged/", json.dumps(doc).encode(),
        {**bearer(token), "Content-Type": "application/json"},
    )  # fmt: skip


def _records(server) -> list[dict]:
    path = server.var_dir / "payloads" / "pairs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _written(server) -> float:
    _status, body = request(server, "GET", "/metrics")
    found = re.search(r'modelhost_payload_log_records_total\{outcome="written"\} ([0-9.e+]+)', body.decode())
    return float(found.group(1)) if found else 0.0


def test_sampled_pairs_land_in_the_file_sink(server, alice):
    status, model = _patch(server, alice, {"payload_log_rate": 0.5, "payload_log_max_bytes": 64})
    assert status == 200 and (model["payload_log_rate"], model["payload_log_max_bytes"]) == (0.5, 64)
    status, events = request(server, "GET", "/api/models/logged/audit/", headers=bearer(alice))
    events = events["results"]
    assert (events[0]["action"], events[0]["actor_name"]) == ("model.payload_logging", "payload_alice")
    assert events[0]["detail"] == {"rate": 0.5, "max_bytes": 64}

    rng = np.random.default_rng(3)
    sent = {}
    for i in range(200):
        x = rng.uniform(-1, 1, size=(1, 4)).astype(np.float32)
        doc = {
            "id": f"r{i}",
            "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x.ravel().tolist()}],
        }
        status, answer = request(server, "POST", "/v2/models/logged/infer", json.dumps(doc).encode())
        assert status == 200
        sent[f"r{i}"] = (x, np.asarray(answer["outputs"][0]["data"], dtype=np.float32))
    request(server, "POST", "/v2/models/unlogged/infer", json.dumps(doc).encode())  # not opted in: never logged

    assert wait_for(lambda: _written(server) >= 40 and len(_records(server)) == _written(server), timeout=20)
    records = _records(server)
    print(f"payload log: {len(records)} of 200 pairs sampled at 0.5")
    assert 60 <= len(records) <= 140  # binomial(200, 0.5): 100 +- 5 standard deviations
    for record in records:
        x, y = sent[record["id"]]
        assert (record["model"], record["version"], record["truncated"]) == ("logged", "1", False)
        (inp,) = record["request"]["inputs"]
        (out,) = record["response"]["outputs"]
        assert (inp["name"], inp["datatype"], inp["shape"]) == ("x", "FP32", [1, 4])
        np.testing.assert_array_equal(np.asarray(inp["data"], dtype=np.float32), x.ravel())
        np.testing.assert_array_equal(np.asarray(out["data"], dtype=np.float32), y)
        np.testing.assert_allclose(y, 2 * x.ravel() + 1, rtol=1e-6)


def test_tensors_above_the_size_cap_are_left_out(server, alice):
    assert _patch(server, alice, {"payload_log_rate": 1.0})[0] == 200
    before = len(_records(server))
    doc = {"id": "big", "inputs": [{"name": "x", "shape": [8, 4], "datatype": "FP32", "data": [0.5] * 32}]}
    assert request(server, "POST", "/v2/models/logged/infer", json.dumps(doc).encode())[0] == 200
    assert wait_for(lambda: len(_records(server)) == before + 1, timeout=10)
    record = _records(server)[-1]
    assert record["id"] == "big" and record["truncated"] is True
    assert record["request"]["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [8, 4]}]
    assert record["response"]["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [8, 4]}]
    assert _patch(server, alice, {"payload_log_rate": 0})[0] == 200


def test_payload_logging_needs_the_models_team(server, alice):
    outsider = people_with_tokens(server, payload_bob="strangers")["payload_bob"]
    status, answer = _patch(server, outsider, {"payload_log_rate": 1.0})
    assert status == 403 and "error" in answer
    status, answer = _patch(server, alice, {"payload_log_rate": 1.5})
    assert status == 400 and "payload_log_rate" in answer["fields"]


def test_the_http_sink_gets_cloud_events():
    received: list = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((dict(self.headers), json.loads(body)))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args):
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        logger = PayloadLogger(HttpSink(f"http://127.0.0.1:{receiver.server_address[1]}/events"), capacity=10)
        x = np.array([["a", "é"]], dtype=object)
        request_ = InferenceRequest("words", [RequestInput("text", "BYTES", (1, 2), x)], id="w1")
        entry = type("Entry", (), {"model_name": "words", "number": 3})()
        outputs = [ResponseOutput("n", "INT64", (1,), np.array([2]))]
        logger.submit(entry, request_, outputs, 1024)
        assert logger.flush() and len(received) == 1
        headers, record = received[0]
        assert headers["Ce-Specversion"] == "1.0" and headers["Ce-Type"] == "modelhost.inference.pair"
        assert record["model"] == "words" and record["version"] == "3" and record["id"] == "w1"
        assert record["request"]["inputs"][0]["data"] == ["a", "é"]
        assert record["response"]["outputs"][0]["data"] == [2]
    finally:
        receiver.shutdown()
