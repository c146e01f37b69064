"""Clients that misbehave on the wire, against a live ``serve``: JSON nested
absurdly deep, bodies shorter than their Content-Length (the client
half-closes), errors answered before the body is read, and bodies that
arrive one byte per second. Each gets a 4xx with ``{"error": ...}``, never a
result or a 500, and the server keeps answering everyone else."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest

from tests.support.live import request, wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.interop


def _status_and_json(raw: bytes) -> tuple[int, dict]:
    """(status, JSON body) of one raw HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else {}


def _send_and_half_close(address: str, data: bytes, timeout: float = 20) -> bytes:
    """Send ``data``, close our sending side (the server reads EOF), return all it answers."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _post(address: str, path: str, body: bytes, headers: dict | None = None):
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# -- JSON nested too deep -------------------------------------------------------
DEEP = 100_000


def _nest(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


V2_INFER = "/v2/models/identity_fp32/infer"
DEEP_BODIES = [
    ("v2 data 100000 deep", V2_INFER, b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":' + _nest(DEEP) + b"}]}"),
    ("v2 document 100000 deep", V2_INFER, _nest(DEEP)),
    ("v2 data 1000 deep", V2_INFER, b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":' + _nest(1000) + b"}]}"),
    ("v2 parameters 1000 deep", V2_INFER, b'{"parameters":{"p":' + _nest(1000) + b'},"inputs":[]}'),
    ("tfs instances 100000 deep", "/v1/models/half_plus_two:predict", b'{"instances":' + _nest(DEEP) + b"}"),
    ("tfs instances 1000 deep", "/v1/models/half_plus_two:predict", b'{"instances":' + _nest(1000) + b"}"),
    ("tfs inputs 1000 deep NaN", "/v1/models/half_plus_two:predict", b'{"inputs":' + _nest(1000, b"NaN") + b"}"),
    ("tfs classify 1000 deep", "/v1/models/iris:classify", b'{"examples":[{"input":' + _nest(1000) + b"}]}"),
    ("tfs document 100000 deep", "/v1/models/half_plus_two:predict", _nest(DEEP)),
    # Within the JSON parsers' own limits, beyond the 64 dimensions a tensor may have.
    ("v2 data 900 deep", V2_INFER, b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":' + _nest(900) + b"}]}"),
    ("v2 data 900 deep, a boolean", V2_INFER, b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":' + _nest(900, b"true") + b'}],"parameters":{"binary_data_output":false}}'),
    ("v2 bytes 900 deep", "/v2/models/identity_bytes/infer", b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"BYTES","data":' + _nest(900, b'"a"') + b"}]}"),
    ("tfs instances 900 deep", "/v1/models/half_plus_two:predict", b'{"instances":' + _nest(900) + b"}"),
    ("tfs inputs 900 deep NaN", "/v1/models/half_plus_two:predict", b'{"inputs":' + _nest(900, b"NaN") + b"}"),
    ("tfs b64 900 deep", "/v1/models/identity_bytes:predict", b'{"instances":' + _nest(900, b'{"b64":"YQ=="}') + b"}"),
    ("tfs rows 900 deep", "/v1/models/pair_classifier:predict", b'{"instances":[{"a":' + _nest(900) + b',"b":1}]}'),
]  # fmt: skip


@pytest.mark.parametrize("path,body", [d[1:] for d in DEEP_BODIES], ids=[d[0] for d in DEEP_BODIES])
def test_json_nested_too_deep_is_a_400(model_server, path, body):
    status, payload = _post(model_server.http_url, path, body)
    assert status == 400, payload
    assert isinstance(payload.get("error"), str) and payload["error"]
    assert request(model_server, "GET", "/v2/health/ready")[0] == 200


# -- bodies shorter than their Content-Length -----------------------------------
def _infer_head(length: int, path: str = V2_INFER, **headers) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: test", f"Content-Length: {length}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _json_request(values) -> bytes:
    tensor = {"name": "INPUT0", "shape": [1, len(values)], "datatype": "FP32", "data": values}
    return json.dumps({"inputs": [tensor]}).encode()


def _binary_request(values: np.ndarray) -> tuple[bytes, int]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(values.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": values.nbytes},
                }
            ]
        }
    ).encode()
    return header + values.astype("<f4").tobytes(), len(header)


TRUNCATED = [
    # A complete JSON request with room to spare: the missing bytes would be whitespace.
    ("json, 10 bytes missing", lambda: (_json_request([1.0, 2.0]), 10, {})),
    ("binary extension, tail cut", lambda: _cut(*_binary_request(np.arange(8, dtype=np.float32).reshape(2, 4)), 5)),
    ("binary extension, header cut", lambda: _cut(*_binary_request(np.arange(8, dtype=np.float32).reshape(2, 4)), 40)),
    (
        "raw binary request",
        lambda: (
            np.arange(4, dtype="<f4").tobytes(),
            8,
            {"Inference_Header_Content_Length": "0", "path": "/v2/models/half_plus_two/infer"},
        ),
    ),
]


def _cut(body: bytes, header_length: int, missing: int):
    return body[:-missing], missing, {"Inference_Header_Content_Length": str(header_length)}


@pytest.mark.parametrize("build", [t[1] for t in TRUNCATED], ids=[t[0] for t in TRUNCATED])
def test_a_body_shorter_than_its_content_length_is_a_400(model_server, build):
    """The client declares more bytes than it sends, then half-closes: the
    server must refuse the request, never run the model on what it got."""
    sent, missing, headers = build()
    raw = _send_and_half_close(model_server.http_url, _infer_head(len(sent) + missing, **headers) + sent)
    status, payload = _status_and_json(raw)
    assert status == 400, raw
    assert "outputs" not in payload and "Content-Length" in payload["error"], payload


# -- errors answered before the body is read -----------------------------------
@pytest.mark.parametrize(
    "path,status",
    [
        ("/v2/models/identity_fp32/versions/abc/infer", 404),
        ("/v2/models/no_such_model/infer", 404),
        ("/v1/models/no_such_model:predict", 404),
    ],
)
def test_an_early_error_reaches_a_client_still_sending(model_server, path, status):
    """A 4 MiB body to a URL refused before its body is read: the client
    gets the error, not a broken pipe (the server reads the body first)."""
    body = json.dumps({"instances": [0.0] * 10}).encode().ljust(4 << 20)
    for _ in range(3):
        got, payload = _post(model_server.http_url, path, body)
        assert got == status and payload["error"], payload


# -- bodies that arrive one byte per second ---------------------------------------
BODY_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def gated_server(tmp_path_factory):
    """A server whose request bodies must arrive within BODY_TIMEOUT seconds."""
    from tests.support import onnx_models as m

    repository = tmp_path_factory.mktemp("gated-repository")
    m.write_model(repository, "identity_fp32", m.identity("FP32"))
    live = LiveServer(
        repository, tmp_path_factory.mktemp("gated-live"), extra_env={"BODY_READ_TIMEOUT_SECONDS": str(BODY_TIMEOUT)}
    )
    live.start()
    yield live
    assert live.stop() == 0, live.log()


class SlowBody(threading.Thread):
    """Declares a 100-byte body, then sends one byte per second and records
    the answer (status, JSON, seconds after the headers) when one comes."""

    def __init__(self, address: str, path: str = V2_INFER):
        super().__init__(daemon=True)
        host, port = address.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.path = path
        self.stop = threading.Event()
        self.answer: tuple[int, dict, float] | None = None

    def run(self) -> None:
        sock = self.sock
        sock.sendall(f"POST {self.path} HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n".encode())
        started = time.monotonic()
        sock.settimeout(1.0)
        received = b""
        for _ in range(100):
            if self.stop.is_set():
                break
            try:
                sock.sendall(b" ")
            except OSError:
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            received += chunk
            if not chunk or b"\r\n\r\n" in received:
                break
        if received:
            status, payload = _status_and_json(received)
            self.answer = (status, payload, time.monotonic() - started)
        sock.close()


def test_slow_bodies_do_not_starve_other_requests(gated_server):
    """12 connections trickle their bodies at one byte per second (more than
    the 2 x 4 threads that run requests): inference keeps answering at once,
    and each slow client gets a 408 at the deadline."""
    slow = [SlowBody(gated_server.http_url) for _ in range(12)]
    for client in slow:
        client.start()
    try:
        time.sleep(1.0)  # every slow request is now waiting for its body
        values = np.arange(8, dtype=np.float32)
        latencies = []
        for _ in range(8):
            started = time.monotonic()
            status, payload = _post(
                gated_server.http_url,
                V2_INFER,
                json.dumps(
                    {"inputs": [{"name": "INPUT0", "shape": [1, 8], "datatype": "FP32", "data": values.tolist()}]}
                ).encode(),
            )
            latencies.append(time.monotonic() - started)
            assert status == 200, payload
            np.testing.assert_array_equal(np.array(payload["outputs"][0]["data"], dtype=np.float32), values)
            time.sleep(0.2)
        assert max(latencies) < 1.5, latencies
        print(f"inference while 12 bodies trickle: max {max(latencies) * 1000:.0f} ms over {len(latencies)} requests")
        for client in slow:
            client.join(BODY_TIMEOUT + 10)
        answers = [client.answer for client in slow]
        assert all(a is not None for a in answers), answers
        for status, payload, after in answers:
            assert status == 408 and "did not arrive in time" in payload["error"], payload
            assert BODY_TIMEOUT - 0.5 <= after <= BODY_TIMEOUT + 3, after
    finally:
        for client in slow:
            client.stop.set()
    assert wait_for(lambda: request(gated_server, "GET", "/v2/health/ready")[0] == 200)
