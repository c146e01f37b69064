"""The whole model configuration, as Triton's clients read it: every field
this server accepts in config.pbtxt comes back from ``GET
/v2/models/<m>/config`` and gRPC ``ModelConfig`` as Triton returns it
(tritonclient over HTTP and gRPC), and the fields behave: an NCHW input as
Triton's image_client expects it, an output's label file in
classification, an optional input left out. In process and, with
MODELHOST_TEST_EXECUTOR=workers, through a worker."""

from __future__ import annotations

import json
import re
from http.client import HTTPConnection

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.model_config_pb2 as mc
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models_store.config.triton import triton_json
from tests.support.live import people_with_tokens, request
from tests.support.repository import CLASSIFIER_LABELS

pytestmark = pytest.mark.interop

#: classifier_nchw's configuration as Triton writes it (its config.pbtxt,
#: tests/support/repository.py, normalized): written out here by hand.
CLASSIFIER = {
    "name": "classifier_nchw",
    "platform": "onnxruntime_onnx",
    "backend": "onnxruntime",
    "runtime": "",
    "version_policy": {"specific": {"versions": [1]}},
    "max_batch_size": 4,
    "input": [
        {
            "name": "image",
            "data_type": "TYPE_FP32",
            "format": "FORMAT_NCHW",
            "dims": [3, 8, 8],
            "is_shape_tensor": False,
            "allow_ragged_batch": False,
            "optional": False,
            "is_non_linear_format_io": False,
        }
    ],
    "output": [
        {
            "name": "scores",
            "data_type": "TYPE_FP32",
            "dims": [4],
            "label_filename": "classes.txt",
            "is_shape_tensor": False,
            "is_non_linear_format_io": False,
        }
    ],
    "batch_input": [],
    "batch_output": [],
    "dynamic_batching": {
        "preferred_batch_size": [2, 4],
        "max_queue_delay_microseconds": 500,
        "preserve_ordering": True,
        "priority_levels": 0,
        "default_priority_level": 0,
        "priority_queue_policy": {},
    },
    "instance_group": [
        {
            "name": "pair",
            "kind": "KIND_CPU",
            "count": 2,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ],
    "default_model_filename": "model.onnx",
    "cc_model_filenames": {},
    "metric_tags": {},
    "parameters": {"note": {"string_value": "made in a test"}},
    "model_warmup": [
        {
            "name": "zeros",
            "batch_size": 2,
            "inputs": {"image": {"data_type": "TYPE_FP32", "dims": [3, 8, 8], "zero_data": True}},
            "count": 1,
        }
    ],
    "model_transaction_policy": {"decoupled": False},
    "response_cache": {"enable": False},
}


@pytest.fixture(scope="module")
def http(model_server):
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        yield client


@pytest.fixture(scope="module")
def wire_url(model_server):
    return model_server.http_url


def _post(url: str, path: str, doc: dict, headers: dict) -> tuple[int, dict]:
    host, port = url.split(":")
    conn = HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST", path, body=json.dumps(doc).encode(), headers={"Content-Type": "application/json", **headers}
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def grpc_client(model_server):
    client = grpcclient.InferenceServerClient(model_server.grpc_url)
    yield client
    client.close()


def test_every_field_comes_back_over_rest_and_grpc(http, grpc_client):
    """The REST answer is Triton's JSON form of the config, field for field;
    gRPC's ModelConfig (Triton's own message, as tritonclient decodes it)
    holds the same values."""
    assert http.get_model_config("classifier_nchw") == CLASSIFIER
    assert http.get_model_config("classifier_nchw", "1") == CLASSIFIER
    message = grpc_client.get_model_config("classifier_nchw").config
    assert triton_json(message) == CLASSIFIER  # every field, defaults included, 64-bit integers as numbers
    assert message.input[0].format == mc.ModelInput.FORMAT_NCHW
    assert message.dynamic_batching.max_queue_delay_microseconds == 500
    assert message.model_warmup[0].inputs["image"].zero_data is True
    assert message.parameters["note"].string_value == "made in a test"


def _image_client_parse(metadata: dict, config) -> tuple:
    """What Triton's image_client checks before it sends an image (its
    ``parse_model``): one input of 3 dims besides the batch, NCHW or NHWC;
    one FP32 output. Returns (max batch, input, output, c, h, w, format)."""
    (inp,) = metadata["inputs"]
    (out,) = metadata["outputs"]
    assert out["datatype"] == "FP32"
    batching = config["max_batch_size"] > 0
    assert len(inp["shape"]) == 3 + batching
    fmt = config["input"][0]["format"]
    if isinstance(fmt, int):
        fmt = mc.ModelInput.Format.Name(fmt)
    assert fmt in ("FORMAT_NCHW", "FORMAT_NHWC"), f"unexpected input format {fmt}"
    c, h, w = inp["shape"][1:] if fmt == "FORMAT_NCHW" else [inp["shape"][3], *inp["shape"][1:3]]
    return config["max_batch_size"], inp["name"], out["name"], c, h, w, fmt


def _expected_top2(images: np.ndarray) -> list[list[str]]:
    """Classification "value:index:label" of the top 2 classes, by numpy."""
    weight = np.array([[c + k + 1 for k in range(4)] for c in range(3)], dtype=np.float32)
    scores = images.mean(axis=(2, 3)) @ weight
    rows = []
    for row in scores:
        order = np.argsort(-row, kind="stable")[:2]
        rows.append([f"{row[i]:.6f}:{i}:{CLASSIFIER_LABELS[i]}" for i in order])
    return rows


def test_triton_image_client_flow(http, grpc_client):
    """image_client's steps on both transports: metadata and config say a
    batching NCHW image model (the config gave FORMAT_NCHW; it came back
    FORMAT_NONE before); the preprocessed batch is classified with the
    labels of the output's label file."""
    rest = _image_client_parse(http.get_model_metadata("classifier_nchw"), http.get_model_config("classifier_nchw"))
    grpc_meta = grpc_client.get_model_metadata("classifier_nchw", as_json=True)
    grpc_config = grpc_client.get_model_config("classifier_nchw", as_json=True)["config"]
    grpc_meta["inputs"][0]["shape"] = [int(d) for d in grpc_meta["inputs"][0]["shape"]]
    assert _image_client_parse(grpc_meta, grpc_config) == rest == (4, "image", "scores", 3, 8, 8, "FORMAT_NCHW")
    rng = np.random.default_rng(11)
    images = rng.uniform(0, 255, size=(2, 3, 8, 8)).astype(np.float32)  # CHW, as image_client transposes
    expected = _expected_top2(images)
    for module, client in ((httpclient, http), (grpcclient, grpc_client)):
        inp = module.InferInput("image", list(images.shape), "FP32")
        inp.set_data_from_numpy(images)
        result = client.infer("classifier_nchw", [inp], outputs=[module.InferRequestedOutput("scores", class_count=2)])
        got = [[item.decode() for item in row] for row in result.as_numpy("scores")]
        assert got == expected, (module.__name__, got)


def test_an_optional_input_may_be_left_out(http, grpc_client):
    """``optional: true`` on an input with a default value (an ONNX
    initializer): left out, the model uses its default (x * 2); given, the
    request's (x * 3). The config and the metadata list it."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for module, client in ((httpclient, http), (grpcclient, grpc_client)):
        inp = module.InferInput("x", [2, 4], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("optional_scale", [inp]).as_numpy("y"), x * 2)
        scale = module.InferInput("scale", [1], "FP32")
        scale.set_data_from_numpy(np.array([3.0], np.float32))
        np.testing.assert_array_equal(client.infer("optional_scale", [inp, scale]).as_numpy("y"), x * 3)
        with pytest.raises(
            InferenceServerException,
            match=re.escape(
                "expected number of inputs between 1 and 2 but got 1 inputs for model 'optional_scale'. "
                "Got input(s) ['scale'], but missing required input(s) ['x']. Please provide all required input(s)."
            ),
        ):
            client.infer("optional_scale", [scale])
    config = http.get_model_config("optional_scale")
    assert [(i["name"], i["optional"], i["dims"]) for i in config["input"]] == [
        ("x", False, [-1, 4]),
        ("scale", True, [1]),
    ]
    message = grpc_client.get_model_config("optional_scale").config
    assert [(i.name, i.optional) for i in message.input] == [("x", False), ("scale", True)]
    assert [i["name"] for i in http.get_model_metadata("optional_scale")["inputs"]] == ["x", "scale"]


# -- a repository load with a config (Triton's model control API) ------------------------------
@pytest.fixture(scope="module")
def ops(model_server):
    """An operator's token headers (the test repository's models belong to no team)."""
    return {"authorization": f"Bearer {people_with_tokens(model_server, config_ops='superuser')['config_ops']}"}


def _batch(module, rows: int):
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    inp = module.InferInput("x", [rows, 4], "FP32")
    inp.set_data_from_numpy(x)
    return x, [inp]


def test_load_with_a_config_replaces_the_configuration_as_triton_does(http, grpc_client, ops, model_server):
    """Triton's simple_model_control steps: a malformed config fails with
    "failed to load"; ``{"max_batch_size":"16"}`` loads with max_batch_size
    16 (it was 8), and, the config being the model's whole configuration,
    the fields it leaves out take their defaults; audited with its actor."""
    for client in (http, grpc_client):
        with pytest.raises(InferenceServerException) as info:
            client.load_model(
                "reconfigured", config='"parameters": {"config": {{"max_batch_size": "16"}}}', headers=ops
            )
        assert info.value.message().startswith("failed to load 'reconfigured', invalid config override"), info.value
        assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert http.get_model_config("reconfigured")["max_batch_size"] == 8

    grpc_client.load_model("reconfigured", config='{"max_batch_size":"16"}', headers=ops)
    config = http.get_model_config("reconfigured")
    assert config["max_batch_size"] == 16 and grpc_client.get_model_config("reconfigured").config.max_batch_size == 16
    assert "dynamic_batching" not in config and config["parameters"] == {}
    assert config["instance_group"][0]["count"] == 1 and config["input"][0]["dims"] == [4]
    for module, client in ((httpclient, http), (grpcclient, grpc_client)):
        x, inputs = _batch(module, 16)
        np.testing.assert_array_equal(client.infer("reconfigured", inputs).as_numpy("y"), x + 0.5)
        with pytest.raises(InferenceServerException, match="more than the model's max_batch_size 16"):
            client.infer("reconfigured", _batch(module, 17)[1])

    status, events = request(model_server, "GET", "/api/models/reconfigured/audit/", headers=ops)
    assert status == 200, events
    event = next(e for e in events["results"] if e["action"] == "model.config")
    assert event["actor_name"] == "config_ops" and event["detail"]["config"]["max_batch_size"] == 16

    original = {
        "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
        "dynamic_batching": {"max_queue_delay_microseconds": 100},
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
        "parameters": {"p": {"string_value": "v"}},
    }
    http.load_model("reconfigured", config=json.dumps(original), headers=ops)
    config = grpc_client.get_model_config("reconfigured", as_json=True)["config"]
    assert config["max_batch_size"] == 8 and config["dynamic_batching"]["max_queue_delay_microseconds"] == "100"
    assert config["instance_group"][0]["count"] == 2 and config["parameters"] == {"p": {"string_value": "v"}}


@pytest.mark.parametrize(
    "config,needle",
    [
        ({"max_batch_size": 8, "input": [{"name": "x", "dims": [5]}]}, "input 'x' of version 1 has dims [4], not [5]"),
        ({"input": [{"name": "z"}]}, "version 1 has no input 'z'"),
        ({"output": [{"name": "y", "data_type": "TYPE_INT32"}]}, "output 'y' of version 1 is FP32, not INT32"),
        ({"name": "someone_else"}, "the config names the model 'someone_else', not 'reconfigured'"),
        ({"optimization": {"priority": "PRIORITY_MAX"}}, "not supported by this server: 'optimization'"),
        ({"model_transaction_policy": {"decoupled": True}}, "'model_transaction_policy.decoupled': decoupled"),
        ({"max_batch": 16}, 'no field named "max_batch"'),
        ({"version_policy": {"specific": {"versions": [9]}}}, "model 'reconfigured' has no version 9"),
        ({"output": [{"name": "y", "label_filename": "l.txt"}]}, "label files are read when the model's repository"),
        ({"input": [{"name": "x", "optional": True}]}, "input 'x' was not validated as optional"),
    ],
)
def test_what_a_load_cannot_change_is_refused_and_changes_nothing(http, grpc_client, ops, config, needle):
    before = http.get_model_config("reconfigured")
    for client in (http, grpc_client):
        with pytest.raises(InferenceServerException) as info:
            client.load_model("reconfigured", config=json.dumps(config), headers=ops)
        message = info.value.message()
        assert message.startswith("failed to load 'reconfigured', invalid config override: ") and needle in message
    assert http.get_model_config("reconfigured") == before


def test_load_errors_in_triton_words(http, grpc_client, ops, wire_url):
    """Triton's model control clients check "failed to load" for an unknown
    model; a config that is not a string is refused in Triton's words."""
    for client in (http, grpc_client):
        with pytest.raises(InferenceServerException) as info:
            client.load_model("wrong_model_name", headers=ops)
        assert "failed to load" in info.value.message()
        assert info.value.message().startswith(
            "failed to load 'wrong_model_name', failed to poll from model repository"
        )
    status, body = _post(wire_url, "/v2/repository/models/reconfigured/load", {"parameters": {"config": {"a": 1}}}, ops)
    assert status == 400
    assert (
        body["error"] == "failed to load 'reconfigured', Config parameter 'config' must have string type for its value"
    )
