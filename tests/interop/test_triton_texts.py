"""The error texts Triton's own example clients match (triton-inference-server/
client, ``src/python/examples``), as those clients check them: each
message starts with Triton's words, then ours."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.live import run_coroutine

pytestmark = pytest.mark.interop


def _simple_inputs(module):
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def test_http_infer_clients_wrong_model_name(model_server):
    """simple_http_infer_client.py and simple_http_aio_infer_client.py:
    ``ex.message().startswith("Request for unknown model")``."""
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("wrong_model_name", _simple_inputs(httpclient)).get_response()
    assert info.value.message().startswith("Request for unknown model"), info.value.message()
    assert info.value.message() == "Request for unknown model: 'wrong_model_name' is not found"

    async def aio():
        async with aiohttpclient.InferenceServerClient(model_server.http_url) as client:
            await client.infer("wrong_model_name", _simple_inputs(aiohttpclient))

    with pytest.raises(InferenceServerException) as info:
        run_coroutine(aio())
    assert info.value.message().startswith("Request for unknown model")


def _explicit_request() -> pb.ModelInferRequest:
    """The explicit-content clients' request: INT32 inputs in ``int_contents``."""
    request = pb.ModelInferRequest(model_name="simple", model_version="", id="my request id")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents[:] = list(range(16))
    return request


def test_grpc_explicit_content_clients(model_server):
    """grpc_explicit_int_content_client.py: raw plus typed contents give
    "contents field must not be specified when using raw_input_contents for
    'INPUT0' for model 'simple'"; grpc_explicit_int8_content_client.py: a
    wrong version gives "failed to get model version from specified version
    string 'wrong_specification'" (both checked in ``e.__str__()``)."""
    with grpc.insecure_channel(model_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answer = stub.ModelInfer(_explicit_request())
        np.testing.assert_array_equal(np.frombuffer(answer.raw_output_contents[0], np.int32), 2 * np.arange(16))
        both = _explicit_request()
        both.raw_input_contents.extend([np.arange(8, dtype=np.int32).tobytes()])
        both.inputs[0].contents.int_contents[:] = list(range(8, 16))
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(both)
        assert (
            "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"
            in info.value.__str__()
        )
        wrong = _explicit_request()
        wrong.model_version = "wrong_specification"
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(wrong)
        assert "failed to get model version from specified version string 'wrong_specification'" in str(info.value)
        wrong.model_version = "-1"
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(wrong)
        assert info.value.details().startswith("invalid model version specified '-1' , version should be")


@pytest.mark.parametrize("version", ["latest", "1.0", "99999999999999999999"])
def test_a_version_that_is_not_a_whole_number_in_triton_words_everywhere(model_server, version):
    """REST and gRPC alike (no version can have such a name: 404 / NOT_FOUND)."""
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.get_model_metadata("simple", version)
    assert info.value.status() == "404"
    assert info.value.message().startswith("failed to get model version from specified version string")


# -- Triton's own QA tests (server qa/L0_input_validation, qa/L0_http), on ONNX stand-ins --------------


def _grpc_error(module_client, *args, **kwargs) -> str:
    with pytest.raises(InferenceServerException) as info:
        module_client(*args, **kwargs)
    return str(info.value)


def test_unexpected_input_and_data_type_in_triton_words_over_both_transports(model_server):
    x = np.arange(8, dtype=np.float64).reshape(2, 4)
    for module, url in ((httpclient, model_server.http_url), (grpcclient, model_server.grpc_url)):
        with module.InferenceServerClient(url) as client:
            wrong_name = module.InferInput("inputX", [2, 4], "FP32")
            wrong_name.set_data_from_numpy(x.astype(np.float32))
            message = _grpc_error(client.infer, "affine", [wrong_name])
            assert "unexpected inference input 'inputX' for model 'affine'" in message, message
            wrong_type = module.InferInput("x", [2, 4], "FP64")
            wrong_type.set_data_from_numpy(x)
            message = _grpc_error(client.infer, "affine", [wrong_type])
            assert "inference input 'x' data-type is 'FP64', but model 'affine' expects 'FP32'" in message, message


def test_input_counts_as_triton_counts_them(model_server):
    """``test_input_validation_required_empty`` / ``_required_missing`` /
    ``_optional`` (gRPC, the exact texts)."""
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        message = _grpc_error(client.infer, model_name="simple", inputs=[])
        assert (
            "expected 2 inputs but got 0 inputs for model 'simple'. Got input(s) [], but missing required "
            "input(s) ['INPUT0','INPUT1']. Please provide all required input(s)." in message
        ), message
        one = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
        one.set_data_from_numpy(np.zeros((1, 16), np.int32))
        message = _grpc_error(client.infer, model_name="simple", inputs=[one])
        assert (
            "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT1'], but missing required "
            "input(s) ['INPUT0']. Please provide all required input(s)." in message
        ), message
        message = _grpc_error(client.infer, model_name="optional_scale", inputs=[])
        assert (
            "expected number of inputs between 1 and 2 but got 0 inputs for model 'optional_scale'. Got input(s) [], "
            "but missing required input(s) ['x']. Please provide all required input(s)." in message
        ), message


def test_duplicate_output_names_in_triton_words(model_server):
    """qa/L0_http ``test_duplicate_output_names`` (400, and the server stays live)."""
    import requests

    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [[0.0, 1.0, 2.0, 3.0]]}],
        "outputs": [{"name": "y"}, {"name": "y"}],
    }
    answer = requests.post(f"http://{model_server.http_url}/v2/models/affine/infer", json=body, timeout=30)
    assert answer.status_code == 400
    assert "output 'y' already exists in request" in answer.json()["error"]
    assert requests.get(f"http://{model_server.http_url}/v2/health/live", timeout=30).status_code == 200


def test_byte_size_mismatch_names_the_input_and_model(model_server):
    """``test_input_shape_validation``: 10 FP32 values sent as shape [1, 8]."""
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        data = np.arange(10, dtype=np.float32)[None]
        tensor = grpcclient.InferInput("INPUT0", data.shape, "FP32")
        tensor.set_data_from_numpy(data)
        tensor.set_shape((1, 8))
        message = _grpc_error(client.infer, model_name="identity_fp32", inputs=[tensor])
    assert "input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. Expected 32, got 40" in message


@pytest.mark.parametrize("count", [14, 18])
def test_string_element_counts_name_the_input_triton_names(model_server, count):
    """``test_input_string_shape_validation``: both BYTES inputs of 14 (18)
    elements sent as shape [1, 16]; Triton names INPUT1 (it checks the
    inputs in reverse order)."""
    text = np.array([[str(i % 100) for i in range(count)]], dtype=object)
    inputs = [grpcclient.InferInput(name, text.shape, "BYTES") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(text)
        tensor.set_shape((1, 16))
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        message = _grpc_error(client.infer, model_name="simple_string", inputs=inputs)
    if count < 16:
        expected = f"expected 16 string elements for inference input 'INPUT1' for model 'simple_string', got {count}"
    else:
        expected = "unexpected number of string elements 17 for inference input 'INPUT1' for model 'simple_string', expecting 16"
    assert expected in message, message


TRAVERSAL_NAMES = ["../etc", "a/../b", "../../etc/passwd", "model/..", "..", "/etc/passwd", "model/", " ..", ".. "]


def test_model_names_triton_refuses_to_load(model_server):
    """``ModelNameValidationTest`` (gRPC): traversal characters, empty, only
    whitespace are refused at load; unload does not check names that way."""
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        for name in TRAVERSAL_NAMES:
            message = _grpc_error(client.load_model, name)
            assert "model name must not contain path traversal characters" in message, (name, message)
            assert f"invalid model name '{name}'" in message
        for name in ["", " ", "\t", "\n", " \t \n "]:
            message = _grpc_error(client.load_model, name)
            assert "Model name cannot be empty. Please enter a valid name to deploy." in message, (name, message)
        for name in TRAVERSAL_NAMES:
            with pytest.raises(InferenceServerException) as info:
                client.unload_model(name)
            assert "path traversal" not in str(info.value)
        for name in ["model.version1", "...", "..my_model", "model..1"]:
            message = _grpc_error(client.load_model, name)
            assert "path traversal" not in message and "cannot be empty" not in message, message
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.load_model("  ")
        assert info.value.status() == "400"
        assert "Model name cannot be empty" in info.value.message()
