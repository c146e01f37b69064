"""TF Serving v1 REST against a live server: the request/response examples of
TF Serving's REST API documentation (https://www.tensorflow.org/tfx/serving/api_rest), both formats, b64, NaN/Infinity,
labels, status, metadata, classify/regress, and the bad-input cases.
Expected values are computed independently with numpy / scikit-learn."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.interop.test_rest_wire import Wire
from tests.support.server import ROOT

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def wire(model_server):
    return Wire(model_server.http_url)


def post(wire, path: str, body) -> tuple[int, object]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, headers, payload = wire.request("POST", path, raw, {"Content-Type": "application/json"})
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(payload)  # Python's json accepts NaN / Infinity tokens


def get(wire, path: str) -> tuple[int, object]:
    status, headers, payload = wire.request("GET", path)
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(payload)


# -- the documented examples ---------------------------------------------------
def test_doc_example_row_and_columnar(wire):
    """TF Serving's REST doc: half_plus_two, instances [1, 2, 5] -> [2.5, 3, 4.5]."""
    assert post(wire, "/v1/models/half_plus_two:predict", {"instances": [1.0, 2.0, 5.0]}) == (
        200,
        {"predictions": [2.5, 3.0, 4.5]},
    )
    assert post(wire, "/v1/models/half_plus_two:predict", {"inputs": [3.0, 4.0]}) == (200, {"outputs": [3.5, 4.0]})
    assert post(
        wire, "/v1/models/half_plus_two/versions/1:predict", {"signature_name": "serving_default", "instances": [0]}
    ) == (
        200,
        {"predictions": [2.0]},
    )
    status, body = post(wire, "/v1/models/half_plus_two_2d:predict", {"instances": [[1.0, 2.0], [3.0, 4.0]]})
    assert (status, body) == (200, {"predictions": [[2.5, 3.0], [3.5, 4.0]]})


def test_multi_input_instances(wire):
    """TF Serving REST API example (api_rest "Specifying input tensors in row format"): two instances of three
    named inputs (tag, signal, sensor)."""
    request = {
        "instances": [
            {"tag": ["foo"], "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]},
            {"tag": ["bar"], "signal": [3, 4, 1, 2, 5], "sensor": [[4, 5], [6, 8]]},
        ]
    }
    status, body = post(wire, "/v1/models/tag_signal_sensor:predict", request)
    assert status == 200
    signal = np.array([[1, 2, 3, 4, 5], [3, 4, 1, 2, 5]], dtype=np.float32)
    sensor = np.array([[[1, 2], [3, 4]], [[4, 5], [6, 8]]], dtype=np.float32)
    assert body == {
        "predictions": [
            {
                "tag_bytes": [{"b64": base64.b64encode(tag).decode()}],  # name ends in _bytes: base64 out
                "signal_sum": float(signal[i].sum()),
                "sensor_max": float(sensor[i].max()),
            }
            for i, tag in enumerate([b"foo", b"bar"])
        ]
    }
    columnar = {
        "inputs": {
            "tag": [["foo"], [{"b64": base64.b64encode("bïn".encode()).decode()}]],
            "signal": signal.tolist(),
            "sensor": sensor.tolist(),
        }
    }
    status, body = post(wire, "/v1/models/tag_signal_sensor:predict", columnar)
    assert status == 200
    assert body["outputs"]["tag_bytes"] == [[{"b64": "Zm9v"}], [{"b64": base64.b64encode("bïn".encode()).decode()}]]
    assert body["outputs"]["signal_sum"] == signal.sum(axis=1).tolist()
    assert body["outputs"]["sensor_max"] == sensor.max(axis=(1, 2)).tolist()


def test_b64_strings_reach_the_model_as_text(wire):
    request = {"instances": [{"b64": base64.b64encode("héllo".encode()).decode()}, "plain"]}
    assert post(wire, "/v1/models/strings:predict", request) == (200, {"predictions": ["héllo!", "plain!"]})


def test_nan_and_infinity_in_and_out(wire):
    body = b'{"instances": [[1.5, NaN], [Infinity, -Infinity]]}'
    status, _, payload = wire.request("POST", "/v1/models/identity_fp32:predict", body)
    assert status == 200
    assert payload == b'{"predictions":[[1.5,NaN],[Infinity,-Infinity]]}'
    status, _, payload = wire.request("POST", "/v1/models/half_plus_two:predict", b'{"inputs": [NaN, -Infinity, 2.0]}')
    assert status == 200
    assert payload == b'{"outputs":[NaN,-Infinity,3.0]}'


def test_classify_with_context_and_labels(wire):
    """Examples are rows of the model's inputs; context is merged into each."""
    a = np.array([[1.0, 0.0], [0.0, 3.0]], dtype=np.float32)
    b = np.array([0.5, 0.5], dtype=np.float32)
    request = {"context": {"b": b.tolist()}, "examples": [{"a": a[0].tolist()}, {"a": a[1].tolist()}]}
    status, body = post(wire, "/v1/models/pair_classifier:classify", request)
    assert status == 200
    logits = a + b
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert [[label for label, _ in row] for row in body["results"]] == [["neg", "pos"], ["neg", "pos"]]
    np.testing.assert_allclose([[score for _, score in row] for row in body["results"]], probs, rtol=1e-5)


def test_classify_iris_uses_classifier_labels(wire):
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    data = load_iris()
    x = data.data.astype(np.float32)
    expected = LogisticRegression(max_iter=1000).fit(x, data.target).predict_proba(x[:3])
    status, body = post(wire, "/v1/models/iris:classify", {"examples": [{"input": row.tolist()} for row in x[:3]]})
    assert status == 200
    assert [label for label, _ in body["results"][0]] == ["0", "1", "2"]
    np.testing.assert_allclose([[s for _, s in row] for row in body["results"]], expected, atol=1e-5)


def test_regress_matches_scikit_learn(wire):
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import LinearRegression

    data = load_diabetes()
    x = data.data.astype(np.float32)
    expected = LinearRegression().fit(x, data.target).predict(x[:4])
    status, body = post(wire, "/v1/models/diabetes:regress", {"examples": [{"input": row.tolist()} for row in x[:4]]})
    assert status == 200 and len(body["results"]) == 4
    np.testing.assert_allclose(body["results"], expected, rtol=1e-4)
    status, body = post(wire, "/v1/models/strings:regress", {"examples": [{"text": "x"}]})
    assert status == 400 and "no regression output" in body["error"]


# -- status, metadata, labels ---------------------------------------------------
def test_model_status(wire):
    assert get(wire, "/v1/models/versioned") == (
        200,
        {
            "model_version_status": [
                {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
                {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
            ]
        },
    )
    status, body = get(wire, "/v1/models/versioned/versions/1")
    assert status == 200
    assert [v["version"] for v in body["model_version_status"]] == ["1"]
    status, body = get(wire, "/v1/models/broken")
    assert status == 200
    (entry,) = body["model_version_status"]
    assert entry["state"] == "END" and entry["status"]["error_code"] == "UNKNOWN"
    assert "ONNX" in entry["status"]["error_message"]
    assert get(wire, "/v1/models/versioned/versions/7") == (
        404,
        {"error": "Could not find version 7 of model versioned"},
    )
    assert get(wire, "/v1/models/nope") == (404, {"error": "Could not find any versions of model nope"})


def test_metadata(wire):
    status, body = get(wire, "/v1/models/half_plus_two_2d/metadata")
    assert status == 200
    assert body == {
        "model_spec": {"name": "half_plus_two_2d", "signature_name": "", "version": "1"},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": {
                            "x": {
                                "dtype": "DT_FLOAT",
                                "tensor_shape": {
                                    "dim": [{"size": "-1", "name": ""}, {"size": "-1", "name": ""}],
                                    "unknown_rank": False,
                                },
                                "name": "x",
                            }
                        },
                        "outputs": {
                            "y": {
                                "dtype": "DT_FLOAT",
                                "tensor_shape": {
                                    "dim": [{"size": "-1", "name": ""}, {"size": "-1", "name": ""}],
                                    "unknown_rank": False,
                                },
                                "name": "y",
                            }
                        },
                        "method_name": "tensorflow/serving/predict",
                        "defaults": {},
                    }
                }
            }
        },
    }
    status, body = get(wire, "/v1/models/tag_signal_sensor/metadata")
    inputs = body["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    assert inputs["tag"]["dtype"] == "DT_STRING" and inputs["sensor"]["tensor_shape"]["dim"][2] == {
        "size": "2",
        "name": "",
    }


def _manage(model_server, *args):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=model_server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_labels(wire, model_server):
    done = _manage(model_server, "label", "versioned", "stable", "1")
    assert done.returncode == 0, done.stderr
    _manage(model_server, "label", "versioned", "canary", "2")
    refused = _manage(model_server, "label", "broken", "stable", "1")
    assert refused.returncode != 0 and "may only point at a READY version" in refused.stderr
    missing = _manage(model_server, "label", "versioned", "x", "9")
    assert missing.returncode != 0 and "no version 9" in missing.stderr
    x = [[1.0, 2.0, 3.0, 4.0]]

    # Known at once by every HTTP process: the label command answered after they all could see it.
    assert all(
        post(wire, f"/v1/models/versioned/labels/{label}:predict", {"instances": x})[0] == 200
        for _ in range(4)
        for label in ("stable", "canary")
    )
    status, body = post(wire, "/v1/models/versioned/labels/stable:predict", {"instances": x})
    assert (status, body) == (200, {"predictions": [[2.0, 3.0, 4.0, 5.0]]})  # version 1: x + 1
    assert post(wire, "/v1/models/versioned/labels/canary:predict", {"instances": x}) == (
        200,
        {"predictions": [[3.0, 4.0, 5.0, 6.0]]},
    )
    status, body = get(wire, "/v1/models/versioned/labels/stable")
    assert [v["version"] for v in body["model_version_status"]] == ["1"]
    status, body = get(wire, "/v1/models/versioned/labels/canary/metadata")
    assert body["model_spec"]["version"] == "2"
    # An unknown label is InvalidArgument in TF Serving: 400, its message; the status route too.
    status, body = post(wire, "/v1/models/versioned/labels/nightly:predict", {"instances": x})
    assert (status, body) == (400, {"error": "Unrecognized servable version label: nightly"})
    assert get(wire, "/v1/models/versioned/labels/nightly") == (400, body)
    status, body = post(wire, "/v1/models/no_such_model/labels/stable:predict", {"instances": x})
    assert status == 404  # an unknown model stays NOT_FOUND


# -- bad input ------------------------------------------------------------------
BAD = [
    ("both", "half_plus_two", {"instances": [1.0], "inputs": [1.0]}, 400, "only one of 'inputs' or 'instances'"),
    ("neither", "half_plus_two", {"signature_name": "serving_default"}, 400, "Missing 'inputs' or 'instances' key"),
    ("empty instances", "half_plus_two", {"instances": []}, 400, "No values in 'instances'"),
    ("instances not a list", "half_plus_two", {"instances": 3}, 400, "to be a list"),
    ("ragged", "half_plus_two_2d", {"instances": [[1.0, 2.0], [3.0]]}, 400, "ragged"),
    (
        "ragged objects",
        "tag_signal_sensor",
        {
            "instances": [
                {"tag": ["a"], "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]},
                {"tag": ["b"], "signal": [1, 2, 3], "sensor": [[1, 2], [3, 4]]},
            ]
        },
        400,
        "input 'signal'",
    ),
    (
        "inconsistent batch",
        "pair_classifier",
        {"inputs": {"a": [[1.0, 2.0]], "b": [[1.0, 2.0], [3.0, 4.0]]}},
        400,
        "disagree on the batch size",
    ),
    (
        "unknown input name",
        "pair_classifier",
        {"instances": [{"a": [1, 2], "b": [1, 2], "c": [1]}]},
        400,
        "unknown input name(s) c",
    ),
    ("missing input", "pair_classifier", {"instances": [{"a": [1, 2]}]}, 400, "missing input(s) b"),
    ("plain list for two inputs", "pair_classifier", {"instances": [[1, 2]]}, 400, "plain list"),
    ("unknown input name columnar", "pair_classifier", {"inputs": {"a": [[1, 2]], "b": [[1, 2]], "zz": 1}}, 400, "zz"),
    ("string for float", "half_plus_two", {"instances": ["abc"]}, 400, "not valid FP32"),
    ("float for int", "identity_int32", {"instances": [[1.5]]}, 400, "not valid INT32"),
    ("bad base64", "strings", {"instances": [{"b64": "***"}]}, 400, "Unable to base64 decode"),
    ("urlsafe base64", "strings", {"instances": [{"b64": "_-8="}]}, 400, "Unable to base64 decode"),
    ("unknown signature", "half_plus_two", {"signature_name": "predict_images", "instances": [1.0]}, 400, "not found"),
    ("signature not a string", "half_plus_two", {"signature_name": 3, "instances": [1.0]}, 400, "must be a string"),
    ("wrong shape for model", "half_plus_two", {"instances": [[1.0, 2.0]]}, 400, "expects [-1]"),
    ("malformed json", "half_plus_two", b'{"instances": [1.0,', 400, "JSON Parse error"),
    ("empty body", "half_plus_two", b"", 400, "JSON Parse error"),
    ("not an object", "half_plus_two", [1, 2], 400, "JSON object"),
    ("unknown model", "nope", {"instances": [1.0]}, 404, "Request for unknown model: 'nope' is not found"),
    ("model not ready", "broken", {"instances": [1.0]}, 503, "FAILED"),
    ("classify without examples", "pair_classifier:classify", {"instances": []}, 400, "'examples' is expected"),
    (
        "classify context clash",
        "pair_classifier:classify",
        {"context": {"a": [1, 2]}, "examples": [{"a": [1, 2], "b": [1, 2]}]},
        400,
        "also appear in 'context'",
    ),
    ("classify without scores", "strings:classify", {"examples": [{"text": "x"}]}, 400, "no class-score output"),
]


@pytest.mark.parametrize("name,model,body,status,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_requests(wire, name, model, body, status, needle):
    verb = "" if ":" in model else ":predict"
    got_status, got = post(wire, f"/v1/models/{model}{verb}", body)
    assert got_status == status, got
    assert set(got) == {"error"} and needle in got["error"], got["error"]


@pytest.mark.parametrize(
    "method,path,needle",
    [
        ("POST", "/v1/models/half_plus_two:PREDICT", "Malformed request: POST /v1/models/half_plus_two:PREDICT"),
        ("POST", "/v1/models/half_plus_two:explain", "Malformed request"),
        ("POST", "/v1/models", "Malformed request"),
        ("POST", "/v1/models/half_plus_two/metadata", "Malformed request"),
        ("GET", "/v1/models/half_plus_two:predict", "Malformed request"),
        ("GET", "/v1/models/half_plus_two/version/1", "Malformed request"),
        ("PUT", "/v1/models/half_plus_two:predict", "Malformed request: PUT"),
        ("DELETE", "/v1/models/half_plus_two", "Malformed request: DELETE"),
        ("GET", "/v1/models", "Missing model name in request."),
    ],
)
def test_malformed_paths(wire, method, path, needle):
    status, _headers, payload = wire.request(method, path, b'{"instances": [1]}' if method != "GET" else b"")
    assert status == 400
    assert needle in json.loads(payload)["error"]


def test_still_serving_after_bad_input(wire):
    for _, model, body, _, _ in BAD:
        verb = "" if ":" in model else ":predict"
        wire.request(
            "POST", f"/v1/models/{model}{verb}", body if isinstance(body, bytes) else json.dumps(body).encode()
        )
    assert post(wire, "/v1/models/half_plus_two:predict", {"instances": [4.0]}) == (200, {"predictions": [4.0]})
