"""Where Triton's own QA tests (server ``qa/L0_http``, ``qa/L0_string_io``,
``qa/L0_input_validation`` and the HTTP/gRPC aio client tests) check its
behaviour, ours is the same: chunked request bodies, reading the trace
settings without a token, BYTES as bytes, Triton's status codes, the raw
binary request of a BYTES input, a model Triton loads, and ``file:`` load
parameters. (Triton's error texts: tests/interop/test_triton_texts.py.)"""

from __future__ import annotations

import http.client
import json
import socket

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.interop


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.split(":")
    return host, int(port)


def _chunks(data: bytes, size: int):
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _post_chunked(address: str, path: str, body: bytes, headers: dict, size: int = 7):
    """POST ``body`` with ``Transfer-Encoding: chunked`` (``size``-byte chunks, no Content-Length)."""
    conn = http.client.HTTPConnection(*_host_port(address), timeout=30)
    try:
        conn.request("POST", path, body=_chunks(body, size), headers=headers, encode_chunked=True)
        response = conn.getresponse()
        return response.status, response.msg, response.read()
    finally:
        conn.close()


def test_a_chunked_json_inference_request_is_read(model_server):
    """Proxies and streaming clients re-chunk bodies: the same answer as unchunked."""
    x = [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": x}]}).encode()
    status, _, answer = _post_chunked(model_server.http_url, "/v2/models/affine/infer", body, {})
    assert status == 200, answer
    np.testing.assert_array_equal(json.loads(answer)["outputs"][0]["data"], (2 * np.array(x) + 1).ravel())


def test_a_chunked_binary_extension_request_is_read(model_server):
    x = np.arange(4096, dtype=np.float32).reshape(256, 16)
    header = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [256, 16], "parameters": {"binary_data_size": x.nbytes}}
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    status, headers, answer = _post_chunked(
        model_server.http_url,
        "/v2/models/identity_fp32/infer",
        header + x.tobytes(),
        {"Inference-Header-Content-Length": str(len(header))},
        size=1000,
    )
    assert status == 200, answer
    length = int(headers["Inference-Header-Content-Length"])
    np.testing.assert_array_equal(np.frombuffer(answer[length:], np.float32).reshape(256, 16), x)


def test_a_chunked_raw_binary_request_over_a_raw_socket(model_server):
    """qa/L0_http ``test_content_encoding_chunked_manually``: one chunk, written by hand."""
    data = np.arange(4, dtype=np.float32).tobytes()
    chunked = f"{len(data):X}\r\n".encode() + data + b"\r\n0\r\n\r\n"
    host, port = _host_port(model_server.http_url)
    request = (
        f"POST /v2/models/affine/infer HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
        "Inference-Header-Content-Length: 0\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(request + chunked)
        answer = b""
        while part := sock.recv(65536):
            answer += part
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    length = int(headers.get("inference-header-content-length") or headers["Inference-Header-Content-Length"])
    np.testing.assert_array_equal(np.frombuffer(body[length:], np.float32), 2 * np.arange(4, dtype=np.float32) + 1)


def test_a_shape_whose_byte_size_overflows_is_400(model_server):
    """qa/L0_http ``test_buffer_size_overflow``: 400 with Triton's texts, the server stays live."""
    host, port = _host_port(model_server.http_url)
    for shape, needle in (
        ([2**4, 2**60 + 2], "causes total element count to exceed maximum size of"),
        ([2**2, 2**60 + 2], "byte size overflow for input"),
    ):
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": [1.0]}]})
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            conn.request("POST", "/v2/models/identity_fp32/infer", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            status, answer = response.status, json.loads(response.read())
        finally:
            conn.close()
        assert status == 400 and needle in answer["error"], (status, answer)


def test_grpc_register_of_a_missing_region_is_internal_with_triton_text(model_server):
    """The gRPC aio client test: Triton answers INTERNAL "Unable to open
    shared memory region: '<key>'"; over REST it stays a 400."""
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("missing", "/no_such_region_tritonqa", 64)
    assert info.value.status() == "StatusCode.INTERNAL"
    assert "Unable to open shared memory region: '/no_such_region_tritonqa'" in info.value.message()
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("missing", "/no_such_region_tritonqa", 64)
    assert info.value.status() == "400"
    assert "Unable to open shared memory region: '/no_such_region_tritonqa'" in info.value.message()
