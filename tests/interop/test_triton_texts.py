"""The error texts Triton's own example clients match (triton-inference-server/
client, ``src/python/examples``), as those clients check them: each
message starts with Triton's words, then ours."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
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
