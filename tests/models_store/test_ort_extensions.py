"""ONNX Runtime Extensions' operators only for a model whose config asks for
them (parameter ``onnxruntime_extensions``), through the management API."""

from __future__ import annotations

import numpy as np
import pytest

from inference.runtime import onnx as onnx_runtime
from models_store.accounts import services as accounts
from models_store.management import demo_text
from tests.models_store.test_api import Api, _error
from tests.support.store import person

pytestmark = pytest.mark.django_db(transaction=True)

ASKS = 'parameters { key: "onnxruntime_extensions" value: { string_value: "true" } }\n'


@pytest.fixture
def api():
    return Api(accounts.token_create(user=person("alice", "ml"), name="script")[1])


def test_a_model_with_the_parameter_validates_and_says_so(api):
    response = api.upload("encoder", demo_text.build_sentence_encoder(), team="ml", config=ASKS)
    assert response.status_code == 201, response.content
    version = response.json()
    assert version["state"] == "READY", version
    assert "ONNX Runtime Extensions' operators registered (parameter onnxruntime_extensions)" in version["log"]
    assert version["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [1]}]


@pytest.mark.parametrize(
    "config", ["", ASKS.replace('"true"', '"false"'), ASKS.replace("onnxruntime_extensions", "ort_ext")]
)
def test_without_the_parameter_the_operators_are_unknown_and_the_error_says_what_to_set(api, config):
    response = api.upload("encoder", demo_text.build_sentence_encoder(), team="ml", config=config)
    error = _error(response, 422)
    assert "ai.onnx.contrib" in error and 'key: "onnxruntime_extensions"' in error, error
    assert response.json()["version"]["state"] == "FAILED"


@pytest.mark.parametrize(
    ("parameters", "asks"),
    [
        ({"onnxruntime_extensions": "true"}, True),
        ({"onnxruntime_extensions": " YES "}, True),
        ({"onnxruntime_extensions": {"string_value": "1"}}, True),
        ({"onnxruntime_extensions": "false"}, False),
        ({"onnxruntime_extensions": {"string_value": ""}}, False),
        ({"other": "true"}, False),
        ({}, False),
    ],
)
def test_which_values_ask_for_the_extensions(parameters, asks):
    assert onnx_runtime.asks_for_extensions(parameters) is asks


def test_the_extensions_keep_the_sessions_threads_and_optimization(tmp_path):
    base = onnx_runtime.session_options(intra_op=3, inter_op=2, optimization="basic")
    copy = onnx_runtime.with_extensions(base)
    assert (copy.intra_op_num_threads, copy.inter_op_num_threads) == (3, 2)
    assert copy.graph_optimization_level == base.graph_optimization_level
    path = tmp_path / "model.onnx"
    path.write_bytes(demo_text.build_sentence_encoder())
    session = onnx_runtime.create_session(path, base, extensions=True)
    (embedding,) = session.run(None, {"text": np.array(["hello world"], dtype=object)})
    assert embedding.shape == (1, demo_text.WIDTH) and abs(float(np.linalg.norm(embedding)) - 1.0) < 1e-5
