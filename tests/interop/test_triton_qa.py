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


def _post_json(address: str, path: str, body: bytes | str, headers: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*_host_port(address), timeout=120)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def _nested(depth: int, value: str):
    for _ in range(depth):
        value = f"[{value}]"
    return json.loads(value)


@pytest.mark.parametrize(
    ("model", "datatype", "value"), [("identity_bytes", "BYTES", '"hello"'), ("identity_int64", "INT64", "123")]
)
def test_json_data_nested_100_lists_deep_is_refused_in_triton_words(model_server, model, datatype, value):
    """qa/L0_http ``test_json_recursion_depth_limit``: shape [1, 1] with its
    one value 50 lists deep is read (Triton counts elements, not levels);
    100 or more lists deep is Triton's 400."""
    for depth, ok in ((50, True), (100, False), (120, False)):
        body = {"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [1, 1], "data": _nested(depth, value)}]}
        status, answer = _post_json(model_server.http_url, f"/v2/models/{model}/infer", json.dumps(body))
        if ok:
            assert status == 200, (depth, answer)
            assert answer["outputs"][0]["data"] == [json.loads(value)]
        else:
            assert status == 400, (depth, answer)
            assert "JSON nesting depth exceeds maximum allowed limit (100)" in answer["error"], answer


def test_a_deeply_nested_repository_index_body_is_judged_as_triton_judges_it(model_server):
    """qa/L0_http ``test_repository_index_deeply_nested_json``: 250000 levels
    where the boolean belongs: Triton's 400 text, and the server stays live."""
    depth = 250_000
    status, answer = _post_json(
        model_server.http_url, "/v2/repository/index", '{"ready":' + "[" * depth + "true" + "]" * depth + "}"
    )
    assert status == 400 and answer["error"] == "Invalid value for 'ready': expected a boolean", answer
    status, answer = _post_json(model_server.http_url, "/v2/repository/index", '{"ready": [true]}')
    assert status == 400 and answer["error"] == "Invalid value for 'ready': expected a boolean"
    status, answer = _post_json(model_server.http_url, "/v2/repository/index", '{"ready": true')
    assert status == 400 and answer["error"].startswith("malformed JSON in the request body")
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        assert client.is_server_live()
        names = {entry["name"] for entry in client.get_model_repository_index()}
    assert {"simple", "affine"} <= names


def test_an_empty_trace_settings_update_needs_no_token(model_server):
    """The aio clients' ``update_trace_settings()`` (no settings) changes
    nothing: a read, answered without a token over both transports; a change
    still needs an operator's."""
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        before = client.get_trace_settings()
        assert client.update_trace_settings() == before
        with pytest.raises(InferenceServerException) as info:
            client.update_trace_settings(settings={"trace_rate": "7"})
        assert info.value.status() == "401"
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        client.update_trace_settings()


def test_a_shared_memory_input_of_the_wrong_size_names_the_model(model_server):
    """qa/L0_input_validation ``test_wrong_input_shape_tensor_size``: Triton's text, naming the model."""
    import tritonclient.utils.shared_memory as shm

    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    handle = shm.create_shared_memory_region("qa_short", "/qa_short_region", data.nbytes - 4)
    try:
        shm.set_shared_memory_region(handle, [data.reshape(-1)[:-1]])
        with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
            client.register_system_shared_memory("qa_short", "/qa_short_region", data.nbytes - 4)
            try:
                inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
                inputs[0].set_data_from_numpy(data)
                inputs[1].set_shared_memory("qa_short", data.nbytes - 4)
                with pytest.raises(InferenceServerException) as info:
                    client.infer("simple", inputs)
            finally:
                client.unregister_system_shared_memory("qa_short")
    finally:
        shm.destroy_shared_memory_region(handle)
    assert "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60" in str(info.value)


# -- repository load with file: parameters (Triton's model file override) -------------------------------


def _scaled_identity(factor: float) -> bytes:
    """FP32 INPUT0 [N, M] -> OUTPUT0 = factor * INPUT0: the signature of the test repository's ``file_loaded``."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "factor"], ["OUTPUT0"])],
        "scaled",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N", "M"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N", "M"])],
        initializer=[helper.make_tensor("factor", TensorProto.FLOAT, [], [factor])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


_FILE_CONFIG = json.dumps(
    {
        "name": "file_loaded",
        "backend": "onnxruntime",
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1, -1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1, -1]}],
    }
)


_X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _infer_file_loaded(client, module):
    """(OUTPUT0 for _X, the response) of ``file_loaded``'s default version."""
    tensor = module.InferInput("INPUT0", [2, 3], "FP32")
    tensor.set_data_from_numpy(_X)
    result = client.infer("file_loaded", [tensor])
    return result.as_numpy("OUTPUT0"), result.get_response()


@pytest.fixture(scope="module")
def loader(model_server):
    from tests.support.live import people_with_tokens

    token = people_with_tokens(model_server, file_loader="superuser")["file_loader"]
    return {"authorization": f"Bearer {token}"}


def test_a_load_with_a_model_file_adds_a_version_through_the_registry(model_server, loader):
    """Triton's ``config`` + ``file:<version>/model.onnx`` (base64 over HTTP,
    bytes over gRPC): the file becomes the model's next version, validated
    like an upload and audited with the caller; it serves once the load
    returns."""
    import base64

    from tests.support.live import request

    with httpclient.InferenceServerClient(model_server.http_url) as client:
        client.load_model(
            "file_loaded", headers=loader, config=_FILE_CONFIG, files={"file:1/model.onnx": _scaled_identity(3.0)}
        )
        metadata = client.get_model_metadata("file_loaded")
        assert metadata["versions"][-1] == "2"
        output, response = _infer_file_loaded(client, httpclient)
        assert response["model_version"] == "2"
        np.testing.assert_allclose(output, 3.0 * _X)
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        client.load_model(
            "file_loaded", headers=loader, config=_FILE_CONFIG, files={"file:7/model.onnx": _scaled_identity(5.0)}
        )
        output, response = _infer_file_loaded(client, grpcclient)
        assert response.model_version == "3"  # the registry numbers versions; the directory's 7 is not kept
        np.testing.assert_allclose(output, 5.0 * _X)
    status, events = request(model_server, "GET", "/api/models/file_loaded/audit/", headers=loader)
    assert status == 200
    uploads = [e for e in events["results"] if e["action"] == "version.upload"]
    assert [e["actor_name"] for e in uploads] == ["file_loader", "file_loader"]
    # The same bytes again: no new version, the load succeeds.
    body = json.dumps(
        {"parameters": {"config": _FILE_CONFIG, "file:1/model.onnx": base64.b64encode(_scaled_identity(5.0)).decode()}}
    )
    status, answer = _post_json(model_server.http_url, "/v2/repository/models/file_loaded/load", body, loader)
    assert status == 200, answer
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        assert client.get_model_metadata("file_loaded")["versions"][-1] == "3"


@pytest.mark.parametrize(
    ("parameters", "needle"),
    [
        ({"file:1/model.onnx": "AAAA"}, "file: parameters need the 'config' parameter"),
        (
            {"config": _FILE_CONFIG, "file:1/model.onnx": "not base64!"},
            "parameter 'file:1/model.onnx' is not valid base64",
        ),
        ({"config": _FILE_CONFIG, "file:" + "A" * 256: "YQ=="}, "must name '<version>/model.onnx'"),
        (
            {"config": _FILE_CONFIG, "file:1/model.onnx": "AAAA", "file:1/weights.bin": "AAAA"},
            "give one file: parameter",
        ),
        ({"config": _FILE_CONFIG, "file:1/model.onnx": "bm90IGFuIG9ubng="}, "failed to load 'file_loaded', "),
    ],
)
def test_a_load_with_files_the_registry_cannot_take_is_400_and_adds_nothing(model_server, loader, parameters, needle):
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        before = client.get_model_metadata("file_loaded")["versions"]
    status, answer = _post_json(
        model_server.http_url, "/v2/repository/models/file_loaded/load", json.dumps({"parameters": parameters}), loader
    )
    assert status == 400 and needle in answer["error"], answer
    assert answer["error"].startswith("failed to load 'file_loaded', ")
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        assert client.get_model_metadata("file_loaded")["versions"] == before


def test_a_load_with_a_model_file_needs_a_credential(model_server):
    import base64

    body = json.dumps(
        {"parameters": {"config": _FILE_CONFIG, "file:1/model.onnx": base64.b64encode(_scaled_identity(9.0)).decode()}}
    )
    status, answer = _post_json(model_server.http_url, "/v2/repository/models/file_loaded/load", body)
    assert status == 401, answer
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.load_model("file_loaded", config=_FILE_CONFIG, files={"file:1/model.onnx": _scaled_identity(9.0)})
    assert info.value.status() == "StatusCode.UNAUTHENTICATED"
