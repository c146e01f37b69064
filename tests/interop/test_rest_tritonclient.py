"""tritonclient.http against a live ``serve``: every datatype, binary and JSON,
health, metadata, versions, and real scikit-learn models."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.onnx_models import ALL_DATATYPES, expected_identity_input

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def client(model_server):
    with httpclient.InferenceServerClient(model_server.http_url) as c:
        yield c


def _infer_identity(client, datatype, data, binary_in, binary_out):
    inp = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    inp.set_data_from_numpy(data, binary_data=binary_in)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)
    return client.infer(f"identity_{datatype.lower()}", [inp], outputs=[out], request_id="r-1")


@pytest.mark.parametrize("datatype", ALL_DATATYPES)
@pytest.mark.parametrize("binary_in,binary_out", [(True, True), (False, False), (True, False), (False, True)])
def test_identity_every_datatype(client, datatype, binary_in, binary_out):
    data = expected_identity_input(datatype, shape=(2, 3), seed=len(datatype))
    if datatype == "FP16" and not (binary_in and binary_out):
        with pytest.raises(InferenceServerException, match="FP16") as info:
            _infer_identity(client, datatype, data, binary_in, binary_out)
        assert info.value.status() == "400"
        return
    result = _infer_identity(client, datatype, data, binary_in, binary_out)
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (2, 3)
    assert result.get_response()["id"] == "r-1"
    assert result.get_response()["model_name"] == f"identity_{datatype.lower()}"
    assert result.get_response()["model_version"] == "1"
    if datatype == "BYTES":
        assert [bytes(x) if not isinstance(x, str) else x.encode() for x in got.flat] == list(data.flat)
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)


def test_all_outputs_binary_by_default(client):
    """tritonclient sends binary_data_output: true when no outputs are listed."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    outputs = result.get_response()["outputs"]
    assert all("binary_data_size" in o["parameters"] for o in outputs)


def test_output_subset(client):
    a = np.ones((2, 16), dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"), httpclient.InferInput("INPUT1", [2, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a * 5)
    result = client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a * 5)
    assert result.as_numpy("OUTPUT0") is None


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "modelhost"
    assert "binary_tensor_data" in meta["extensions"]


def test_model_metadata_and_readiness(client):
    meta = client.get_model_metadata("affine")
    assert meta == {
        "name": "affine",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
    }
    assert client.is_model_ready("affine")
    assert client.is_model_ready("affine", "1")
    assert not client.is_model_ready("broken")
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("no_such_model")
    assert info.value.status() == "404"


def test_versions_and_policy(client):
    """versioned: v1 = x + 1, v2 = x + 2, policy all; the default is the highest."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = httpclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    default = client.infer("versioned", [inp])
    assert default.get_response()["model_version"] == "2"
    np.testing.assert_allclose(default.as_numpy("y"), x + 2)
    first = client.infer("versioned", [inp], model_version="1")
    np.testing.assert_allclose(first.as_numpy("y"), x + 1)
    assert client.get_model_metadata("versioned")["versions"] == ["2", "1"]
    with pytest.raises(InferenceServerException) as info:
        client.infer("versioned", [inp], model_version="9")
    assert info.value.status() == "404"


def test_batching_model_limits(client):
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    inp = httpclient.InferInput("x", [8, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("affine", [inp]).as_numpy("y"), 2 * x + 1, rtol=1e-6)
    big = httpclient.InferInput("x", [9, 4], "FP32")
    big.set_data_from_numpy(np.zeros((9, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="max_batch_size 8") as info:
        client.infer("affine", [big])
    assert info.value.status() == "400"


def test_strings_reach_the_model_as_text(client):
    words = np.array([["héllo ✓".encode(), b"", "日本".encode()]], dtype=object).reshape(3)
    for binary in (True, False):
        inp = httpclient.InferInput("text", [3], "BYTES")
        inp.set_data_from_numpy(words, binary_data=binary)
        got = client.infer("strings", [inp]).as_numpy("out")
        assert [bytes(x) for x in got] == [w + b"!" for w in words]


def test_invalid_utf8_is_refused_with_the_input_named(client):
    inp = httpclient.InferInput("text", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"\xff\xfe"], dtype=object))
    with pytest.raises(InferenceServerException, match=r"input 'text'.*UTF-8") as info:
        client.infer("strings", [inp])
    assert info.value.status() == "400"


def test_cnn_sized_input(client):
    image = np.random.default_rng(2).random((1, 3, 224, 224), dtype=np.float32)
    inp = httpclient.InferInput("image", [1, 3, 224, 224], "FP32")
    inp.set_data_from_numpy(image)
    got = client.infer("image", [inp]).as_numpy("mean")
    np.testing.assert_allclose(got, image.mean(axis=(2, 3)), rtol=1e-5)


def test_iris_classifier_matches_scikit_learn(client):
    """The served iris model agrees with the estimator trained the same way."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    data = load_iris()
    features = data.data.astype(np.float32)
    expected = LogisticRegression(max_iter=1000).fit(features, data.target)
    inp = httpclient.InferInput("input", [len(features[:40]), 4], "FP32")
    inp.set_data_from_numpy(features[:40])
    result = client.infer("iris", [inp])
    np.testing.assert_array_equal(result.as_numpy("label"), expected.predict(features[:40]))
    np.testing.assert_allclose(result.as_numpy("probabilities"), expected.predict_proba(features[:40]), atol=1e-5)
