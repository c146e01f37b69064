"""Validation's warm-up on synthetic inputs warns, never refuses: Triton
warms a model up only on its ``model_warmup`` samples, and loads models
that zero data breaks, its own example ``simple_string`` (a Cast of text to
INT32, which fails on the empty strings of a synthetic warm-up) among them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from models_store.intake import validation


def _text_sum(path) -> None:
    """Triton's simple_string graph: OUTPUT0 = int(INPUT0) + int(INPUT1) as text, shape [-1, 16]."""
    shape = ["N", 16]
    nodes = [
        helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
        helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
    ]
    graph = helper.make_graph(
        nodes,
        "simple_string",
        [helper.make_tensor_value_info(n, TensorProto.STRING, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_model_that_synthetic_data_breaks_is_valid_with_a_warning(tmp_path):
    path = tmp_path / "model.onnx"
    _text_sum(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    a = np.array([[str(i) for i in range(16)]], dtype=object)
    np.testing.assert_array_equal(session.run(None, {"INPUT0": a, "INPUT1": a})[0], [[str(2 * i) for i in range(16)]])
    signature = validation.validate_artifact(path)
    assert [(t.name, t.datatype, t.shape) for t in signature.inputs] == [
        ("INPUT0", "BYTES", (-1, 16)),
        ("INPUT1", "BYTES", (-1, 16)),
    ]
    warnings = [line for line in signature.log if line.startswith("warning: warm-up inference on zero inputs failed")]
    assert len(warnings) == 1, signature.log
    assert "the version serves all the same" in warnings[0] and str(tmp_path) not in warnings[0]
    assert not any(line.startswith("warm-up inference on zero inputs:") for line in signature.log)
