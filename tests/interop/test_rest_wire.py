"""The V2 REST API on the wire: hand-built bodies, headers, content types, the
raw binary request, and every bad-input case of the issue (4xx with
``{"error": ...}``, never 500, and the server stays ready)."""

from __future__ import annotations

import http.client
import json
import struct

import numpy as np
import pytest

pytestmark = pytest.mark.interop


class Wire:
    def __init__(self, address: str):
        host, port = address.split(":")
        self.host, self.port = host, int(port)

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.msg, response.read()  # headers: case-insensitive
        finally:
            conn.close()

    def post_json(self, path: str, obj) -> tuple[int, dict, bytes]:
        return self.request("POST", path, json.dumps(obj).encode(), {"Content-Type": "application/json"})


@pytest.fixture(scope="module")
def wire(model_server):
    return Wire(model_server.http_url)


def _error(status_headers_body, status: int) -> str:
    got_status, headers, body = status_headers_body
    assert got_status == status, body
    assert headers["Content-Type"] == "application/json"
    payload = json.loads(body)
    assert set(payload) >= {"error"} and isinstance(payload["error"], str) and payload["error"]
    return payload["error"]


def _split(headers: dict, body: bytes) -> tuple[dict, bytes]:
    length = int(headers["Inference-Header-Content-Length"])
    return json.loads(body[:length]), body[length:]


def _simple_request(**overrides):
    request = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
    request.update(overrides)
    return request


def test_json_request_gets_json_response(wire):
    status, headers, body = wire.post_json("/v2/models/simple/infer", _simple_request(id="abc"))
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert "Inference-Header-Content-Length" not in headers
    payload = json.loads(body)
    assert payload["id"] == "abc" and payload["model_name"] == "simple" and payload["model_version"] == "1"
    outputs = {o["name"]: o for o in payload["outputs"]}
    assert outputs["OUTPUT0"]["data"] == [i + 1 for i in range(16)]
    assert outputs["OUTPUT1"]["data"] == [i - 1 for i in range(16)]
    assert outputs["OUTPUT0"]["shape"] == [1, 16] and outputs["OUTPUT0"]["datatype"] == "INT32"


def test_mixed_binary_and_json_inputs_with_per_output_choice(wire):
    """The binary tensor data extension's example shape: binary + JSON inputs, one output binary, one JSON."""
    a = np.arange(16, dtype="<i4").reshape(1, 16)
    header = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [[2] * 16]},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}],
    }
    head = json.dumps(header).encode()
    status, headers, body = wire.request(
        "POST",
        "/v2/models/simple/versions/1/infer",
        head + a.tobytes(),
        {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"},
    )
    assert status == 200, body
    assert headers["Content-Type"] == "application/octet-stream"
    meta, tail = _split(headers, body)
    out0, out1 = meta["outputs"]
    assert out0["parameters"]["binary_data_size"] == 64 and len(tail) == 64
    np.testing.assert_array_equal(np.frombuffer(tail, dtype="<i4").reshape(1, 16), a + 2)
    assert out1["data"] == (a - 2).ravel().tolist()


def test_binary_data_output_with_per_output_override(wire):
    request = _simple_request(
        parameters={"binary_data_output": True},
        outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": False}}],
    )
    status, headers, body = wire.post_json("/v2/models/simple/infer", request)
    assert status == 200
    meta, tail = _split(headers, body)
    assert meta["outputs"][0]["parameters"] == {"binary_data_size": 64}
    assert np.frombuffer(tail, dtype="<i4").tolist() == [i + 1 for i in range(16)]
    assert meta["outputs"][1]["data"] == [i - 1 for i in range(16)]


def test_bytes_and_bool_binary_layout(wire):
    words = [b"alpha", b"", "βeta".encode()]
    payload = b"".join(struct.pack("<I", len(w)) + w for w in words)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 3],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(payload)},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    status, headers, body = wire.request(
        "POST", "/v2/models/identity_bytes/infer", head + payload, {"Inference-Header-Content-Length": str(len(head))}
    )
    assert status == 200, body
    _, tail = _split(headers, body)
    assert tail == payload
    bools = bytes([1, 0, 1, 1])
    head = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [2, 2], "datatype": "BOOL", "parameters": {"binary_data_size": 4}}],
            "outputs": [{"name": "OUTPUT0"}],
        }
    ).encode()
    status, headers, body = wire.request(
        "POST", "/v2/models/identity_bool/infer", head + bools, {"Inference-Header-Content-Length": str(len(head))}
    )
    assert status == 200
    assert json.loads(body)["outputs"][0]["data"] == [True, False, True, True]


def test_raw_binary_request(wire):
    """Inference-Header-Content-Length: 0: the body is one input; outputs binary."""
    x = np.array([[1, 2, 3, 4]], dtype="<f4")
    status, headers, body = wire.request(
        "POST", "/v2/models/affine/infer", x.tobytes(), {"Inference-Header-Content-Length": "0"}
    )
    assert status == 200, body
    assert headers["Content-Type"] == "application/octet-stream"
    meta, tail = _split(headers, body)
    assert meta["outputs"][0]["shape"] == [1, 4]
    np.testing.assert_allclose(np.frombuffer(tail, dtype="<f4"), (2 * x + 1).ravel())
    # BYTES: the body is the single element's bytes, without a length prefix.
    status, headers, body = wire.request(
        "POST", "/v2/models/strings_one/infer", "zürich".encode(), {"Inference-Header-Content-Length": "0"}
    )
    assert status == 200, body
    _, tail = _split(headers, body)
    assert tail == struct.pack("<I", len("zürich!".encode())) + "zürich!".encode()


@pytest.mark.parametrize(
    "path,body,headers,status,needle",
    [
        (
            "/v2/models/affine/infer",
            b"\x00" * 15,
            {"Inference-Header-Content-Length": "0"},
            400,
            "input byte size mismatch for input 'x' for model 'affine'. Expected 16, got 15",
        ),
        (
            "/v2/models/identity_fp32/infer",
            b"\x00" * 16,
            {"Inference-Header-Content-Length": "0"},
            400,
            "The shape of the raw input 'INPUT0' can not be deduced because there are more than one variable-sized "
            "dimension",
        ),
        (  # Triton's qa/L0_http test_byte_too_many_elements: BYTES of shape [-1]
            "/v2/models/identity_bytes/infer",
            b"427",
            {"Inference-Header-Content-Length": "0"},
            400,
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            "/v2/models/simple/infer",
            b"\x00" * 64,
            {"Inference-Header-Content-Length": "0"},
            400,
            "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'simple' model configuration",
        ),
    ],
)
def test_raw_binary_request_refusals(wire, path, body, headers, status, needle):
    assert needle in _error(wire.request("POST", path, body, headers), status)


def _binary_simple(size0=64, extra=b"", header_length=None, payload=None):
    head = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": size0}},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16},
            ]
        }
    ).encode()
    data = payload if payload is not None else bytes(64)
    length = len(head) if header_length is None else header_length
    return head + data + extra, {"Inference-Header-Content-Length": str(length)}


BAD_REQUESTS = [
    ("malformed JSON", b'{"inputs": [', {}, 400, "malformed JSON"),
    ("not an object", b"[1, 2]", {}, 400, "JSON object"),
    ("no inputs", b'{"inputs": []}', {}, 400, "expected 2 inputs but got 0 inputs for model 'simple'"),
    ("missing input", json.dumps({"inputs": _simple_request()["inputs"][:1]}).encode(), {}, 400, "INPUT1"),
    (
        "unknown input",
        json.dumps(
            {
                "inputs": [
                    *_simple_request()["inputs"],
                    {"name": "EXTRA", "shape": [1], "datatype": "INT32", "data": [1]},
                ]
            }
        ).encode(),
        {},
        400,
        "expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ['INPUT0','INPUT1','EXTRA']",
    ),
    (
        "unknown output",
        json.dumps(_simple_request(outputs=[{"name": "NOPE"}])).encode(),
        {},
        400,
        "unexpected inference output 'NOPE' for model 'simple'",
    ),
    (
        "wrong datatype",
        json.dumps({"inputs": [{**i, "datatype": "INT64"} for i in _simple_request()["inputs"]]}).encode(),
        {},
        400,
        "inference input 'INPUT0' data-type is 'INT64', but model 'simple' expects 'INT32'",
    ),
    (
        "unknown datatype",
        json.dumps({"inputs": [{**_simple_request()["inputs"][0], "datatype": "FLOAT"}]}).encode(),
        {},
        400,
        "unknown datatype",
    ),
    (
        "element count",
        json.dumps({"inputs": [{**i, "shape": [1, 15]} for i in _simple_request()["inputs"]]}).encode(),
        {},
        400,
        "needs 15",
    ),
    (
        "shape mismatch",
        json.dumps({"inputs": [{**i, "shape": [2, 8]} for i in _simple_request()["inputs"]]}).encode(),
        {},
        400,
        "expects [-1, 16]",
    ),
    (
        "float for int",
        json.dumps({"inputs": [{**i, "data": [0.5] * 16} for i in _simple_request()["inputs"]]}).encode(),
        {},
        400,
        "not valid INT32",
    ),
    ("binary size too big", *_binary_simple(size0=80), 400, "binary_data_size is 80"),
    (
        "binary size mismatch",
        *_binary_simple(size0=60, extra=b"\x00" * 0, payload=bytes(60)),
        400,
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    ("trailing bytes", *_binary_simple(extra=b"\x01\x02\x03"), 400, "3 bytes of binary data"),
    ("header length too big", *_binary_simple(header_length=10_000), 400, "larger than the body"),
    ("header length negative", *_binary_simple(header_length=-5), 400, "negative"),
    (
        "header length not a number",
        _binary_simple()[0],
        {"Inference-Header-Content-Length": "abc"},
        400,
        "not an integer",
    ),
    (
        "shape over the limit",
        json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [2**20, 2**20], "datatype": "INT32", "data": [1]}]}
        ).encode(),
        {},
        413,
        "request limit",
    ),
    (  # an element count past 64 bits: Triton's 400 and its text
        "shape overflowing 64 bits",
        json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [2**40, 2**40], "datatype": "INT32", "data": [1]}]}
        ).encode(),
        {},
        400,
        "causes total element count to exceed maximum size of 9223372036854775807",
    ),
    (
        "fp16 as json",
        json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP16", "data": [1.0]}]}).encode(),
        {},
        400,
        "FP16",
    ),
    ("id not a string", json.dumps(_simple_request(id=5)).encode(), {}, 400, "'id'"),
    ("empty body", b"", {}, 400, "empty"),
]


@pytest.mark.parametrize("name,body,headers,status,needle", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_4xx_with_error(wire, name, body, headers, status, needle):
    message = _error(wire.request("POST", "/v2/models/simple/infer", body, headers), status)
    assert needle in message, message


@pytest.mark.parametrize(
    "method,path,status,needle",
    [
        ("GET", "/v2/models/no_such_model", 404, "Request for unknown model: 'no_such_model' is not found"),
        ("POST", "/v2/models/no_such_model/infer", 404, "Request for unknown model: 'no_such_model'"),
        ("GET", "/v2/models/simple/versions/7", 404, "Request for unknown model: 'simple' version 7 is not found"),
        ("POST", "/v2/models/simple/versions/7/infer", 404, "'simple' version 7 is not found"),
        (
            "GET",
            "/v2/models/simple/versions/latest",
            404,
            "failed to get model version from specified version string 'latest'",
        ),
        ("GET", "/v2/models/broken/ready", 503, "FAILED"),
        ("POST", "/v2/models/broken/infer", 503, "not a readable ONNX model"),
        ("GET", "/v2/models/broken", 503, "Request for unknown model: 'broken' has no available versions"),
        ("GET", "/v2/models/simple/infer", 405, "GET"),
        ("GET", "/v2/nothing/here", 404, "not found"),
        # .../infer paths that are not the inference route (the protocol handler routes it directly)
        ("POST", "/v2/models/simple/extra/infer", 404, "not found: POST /v2/models/simple/extra/infer"),
        ("POST", "/v2/models//infer", 404, "not found: POST /v2/models//infer"),
        ("POST", "/v2/models/simple/versions//infer", 404, "not found"),
        ("POST", "/v2/infer", 404, "not found"),
    ],
)
def test_model_errors(wire, method, path, status, needle):
    message = _error(wire.request(method, path, b'{"inputs": []}' if method == "POST" else b""), status)
    assert needle in message, message


def test_oversized_body_is_refused_before_reading(wire):
    conn = http.client.HTTPConnection(wire.host, wire.port, timeout=30)
    try:
        conn.putrequest("POST", "/v2/models/simple/infer")
        conn.putheader("Content-Length", str(65 * 1024 * 1024))
        conn.endheaders()
        conn.send(b'{"inputs": ')
        response = conn.getresponse()
        assert response.status == 413
        assert "exceeds the limit" in json.loads(response.read())["error"]
    finally:
        conn.close()


def test_server_still_serves_after_bad_input(wire):
    for _name, body, headers, _status, _needle in BAD_REQUESTS:
        wire.request("POST", "/v2/models/simple/infer", body, headers)
    status, _, body = wire.request("GET", "/v2/health/ready")
    assert status == 200 and json.loads(body) == {"ready": True}
    status, _, body = wire.post_json("/v2/models/simple/infer", _simple_request())
    assert status == 200
    assert json.loads(body)["outputs"][0]["data"] == [i + 1 for i in range(16)]


def test_health_bodies(wire):
    assert wire.request("GET", "/v2/health/live")[0] == 200
    status, _, body = wire.request("GET", "/v2/models/simple/ready")
    assert status == 200 and json.loads(body) == {"name": "simple", "ready": True}
    status, _, body = wire.request("GET", "/v2/models/versioned/versions/1/ready")
    assert status == 200 and json.loads(body)["ready"] is True
