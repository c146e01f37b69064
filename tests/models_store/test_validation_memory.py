"""Validation keeps a copy of the model without its weights (memory: about
2 x the file at peak instead of 6 x; bench/validation_memory.py), and what
it reads from that copy is what the whole model says."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from models_store.intake import tensor_checks, validation


def _model(path) -> onnx.ModelProto:
    """x [N, 256] @ W [256, 512] (512 KiB, large) -> Reshape by a small shape
    constant -> y [N, 2, 256]; labels in the metadata."""
    weight = np.random.default_rng(1).standard_normal((256, 512)).astype(np.float32)
    shape = np.array([-1, 2, 256], dtype=np.int64)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Reshape", ["h", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 256])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(shape, "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    helper.set_model_props(model, {"labels": '["a", "b"]'})
    onnx.save(model, path)
    return model


def test_the_copy_keeps_names_types_and_dims_and_drops_only_large_contents(tmp_path):
    full = _model(tmp_path / "model.onnx")
    copy = validation.without_weights(onnx.load(str(tmp_path / "model.onnx")))
    weights = {t.name: t for t in copy.graph.initializer}
    assert list(weights["w"].dims) == [256, 512] and weights["w"].data_type == TensorProto.FLOAT
    assert weights["w"].raw_data == b"" and not weights["w"].float_data
    np.testing.assert_array_equal(numpy_helper.to_array(weights["s"]), [-1, 2, 256])  # small: kept
    assert copy.ByteSize() < 4096 < full.ByteSize()
    inputs = (validation.MetadataTensor("x", "FP32", (-1, 256)),)
    assert tensor_checks.warm_up_estimate(copy, inputs) == tensor_checks.warm_up_estimate(full, inputs)
    assert validation.class_labels(copy) == ["a", "b"]


def test_validation_reads_the_same_signature_and_properties(tmp_path):
    _model(tmp_path / "model.onnx")
    signature = validation.validate_artifact(tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [(t.name, t.shape) for t in signature.inputs] == [(i.name, (-1, 256)) for i in session.get_inputs()]
    assert [(t.name, t.shape) for t in signature.outputs] == [(o.name, (-1, 2, 256)) for o in session.get_outputs()]
    assert signature.properties["labels"] == ["a", "b"] and signature.properties["producer"] == "tests"
    assert signature.properties["opsets"] == {"ai.onnx": 17} and signature.properties["ir_version"] == 8
    assert any(line.startswith("warm-up inference on zero inputs: (1, 2, 256)") for line in signature.log)
