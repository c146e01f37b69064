"""ONNX stand-ins of the models Triton's QA tests name (bench/triton_qa.py).

Same names, inputs, outputs, datatypes, dims and batching as Triton's (its
``qa/common/gen_qa_identity_models.py`` and ``gen_qa_models.py`` repositories,
the examples of ``docs/examples/model_repository`` and the Python/PyTorch/
TensorRT models its ``test.sh`` scripts write), each computing what the test
checks: the ``onnx_zero_*`` identities pass their inputs through, ``simple*``
add and subtract, ``input_*`` sum their inputs. Where Triton's model is not
ONNX (Python backend, PyTorch, TensorRT shape tensors, a custom sequence
backend), the stand-in is an ONNX model of the same signature; TensorRT's
shape-tensor flag has no ONNX meaning and is left out.
"""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

from tests.support import onnx_models as m
from tests.support.repository import SEQUENCE_MODELS


def _config(name: str, inputs, outputs, max_batch_size: int = 8, extra: str = "") -> str:
    """config.pbtxt with ``inputs``/``outputs`` as (name, TYPE_x, dims[, optional])."""

    def tensors(items) -> str:
        parts = []
        for item in items:
            tensor_name, data_type, dims = item[:3]
            optional = " optional: true" if len(item) > 3 and item[3] else ""
            parts.append(f'{{ name: "{tensor_name}" data_type: {data_type} dims: {list(dims)}{optional} }}')
        return ", ".join(parts)

    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {tensors(inputs)} ]\noutput [ {tensors(outputs)} ]\n{extra}"
    )


def _identities(count: int, datatype: str, rank: int) -> bytes:
    """INPUTi -> OUTPUTi (Identity) for i < ``count``, shapes of ``rank`` symbolic dims."""
    shape = tuple(f"d{i}" for i in range(rank))
    return m._model(
        [helper.make_node("Identity", [f"INPUT{i}"], [f"OUTPUT{i}"]) for i in range(count)],
        [m._vi(f"INPUT{i}", datatype, shape) for i in range(count)],
        [m._vi(f"OUTPUT{i}", datatype, shape) for i in range(count)],
    )


_TYPES = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "BYTES": "TYPE_STRING", "INT64": "TYPE_INT64"}


def zero(name: str, count: int, datatype: str, dims, extra: str = "", max_batch_size: int = 8):
    """Triton's ``onnx_zero_<count>_<type>`` identity models (gen_qa_identity_models.py)."""
    rank = len(dims) + (1 if max_batch_size else 0)
    io = [(f"INPUT{i}", _TYPES[datatype], dims) for i in range(count)]
    out = [(f"OUTPUT{i}", _TYPES[datatype], dims) for i in range(count)]
    return _identities(count, datatype, rank), _config(name, io, out, max_batch_size, extra)


def _sum_of_inputs(optional: tuple[bool, ...]) -> bytes:
    """OUTPUT0 [1] = the sum of every element of INPUT0..INPUTn (FP32 [-1]); an
    ``optional`` input has a default value (ONNX Runtime's overridable
    initializer: [0.0]), so a request may leave it out."""
    names = [f"INPUT{i}" for i in range(len(optional))]
    nodes = [helper.make_node("ReduceSum", [n], [f"{n}_sum"], keepdims=1) for n in names]
    total = f"{names[0]}_sum"
    for i, name in enumerate(names[1:], 1):
        nodes.append(helper.make_node("Add", [total, f"{name}_sum"], [f"partial{i}"]))
        total = f"partial{i}"
    nodes.append(helper.make_node("Identity", [total], ["OUTPUT0"]))
    initializers = [helper.make_tensor(n, TensorProto.FLOAT, [1], [0.0]) for n, o in zip(names, optional) if o]
    graph = helper.make_graph(
        nodes,
        "g",
        [m._vi(n, "FP32", ("N",)) for n in names],
        [m._vi("OUTPUT0", "FP32", (1,))],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="triton-qa")
    model.ir_version = 8
    return model.SerializeToString()


def input_validation(name: str, optional: tuple[bool, ...]):
    """qa/L0_input_validation's Python models: FP32 [-1] inputs (some optional), OUTPUT0 [1]."""
    inputs = [(f"INPUT{i}", "TYPE_FP32", [-1], flag) for i, flag in enumerate(optional)]
    payload = _sum_of_inputs(optional)
    return payload, _config(name, inputs, [("OUTPUT0", "TYPE_FP32", [1])], max_batch_size=0)


def strings_to_int32() -> bytes:
    """``onnx_object_int32_int32`` (gen_qa_models.py): BYTES INPUT0/INPUT1 [16]
    holding integers in text; OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32)."""
    shape = ("N", 16)
    return m._model(
        [
            helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
            helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
            helper.make_node("Add", ["a", "b"], ["OUTPUT0"]),
            helper.make_node("Sub", ["a", "b"], ["OUTPUT1"]),
        ],
        [m._vi("INPUT0", "BYTES", shape), m._vi("INPUT1", "BYTES", shape)],
        [m._vi("OUTPUT0", "INT32", shape), m._vi("OUTPUT1", "INT32", shape)],
    )


def shape_tensor(name: str, max_batch_size: int):
    """TensorRT's ``plan_*zero_1_float32_int32`` shape-tensor models: DUMMY_INPUT0
    FP32 and INPUT0 INT32 [2] passed through (no shape-tensor flag: TensorRT's)."""
    rank = 2
    payload = m._model(
        [
            helper.make_node("Identity", ["DUMMY_INPUT0"], ["DUMMY_OUTPUT0"]),
            helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"]),
        ],
        [
            m._vi("DUMMY_INPUT0", "FP32", ("a", "b", "c")[: rank + (1 if max_batch_size else 0)]),
            m._vi("INPUT0", "INT32", (2,)),
        ],
        [
            m._vi("DUMMY_OUTPUT0", "FP32", ("a", "b", "c")[: rank + (1 if max_batch_size else 0)]),
            m._vi("OUTPUT0", "INT32", (2,)),
        ],
    )
    dims = [-1] * (rank + (1 if max_batch_size else 0))
    config = _config(
        name,
        [("DUMMY_INPUT0", "TYPE_FP32", dims), ("INPUT0", "TYPE_INT32", [2])],
        [("DUMMY_OUTPUT0", "TYPE_FP32", dims), ("OUTPUT0", "TYPE_INT32", [2])],
        max_batch_size=0,
    )
    return payload, config


def densenet() -> tuple[bytes, str]:
    """``densenet_onnx``'s signature (data_0 [1, 3, 224, 224] -> fc6_1 [1, 1000, 1, 1]):
    the channel means, tiled (only loaded and listed by the tests)."""
    payload = m._model(
        [
            helper.make_node("ReduceMean", ["data_0"], ["means"], axes=[2, 3], keepdims=1),
            helper.make_node("ReduceMean", ["means"], ["mean"], axes=[1], keepdims=1),
            helper.make_node(
                "Constant", [], ["repeats"], value=helper.make_tensor("r", TensorProto.INT64, [4], [1, 1000, 1, 1])
            ),
            helper.make_node("Tile", ["mean", "repeats"], ["fc6_1"]),
        ],
        [m._vi("data_0", "FP32", (1, 3, 224, 224))],
        [m._vi("fc6_1", "FP32", (1, 1000, 1, 1))],
        opset=13,
    )
    config = _config(
        "densenet_onnx", [("data_0", "TYPE_FP32", [1, 3, 224, 224])], [("fc6_1", "TYPE_FP32", [1, 1000, 1, 1])], 0
    )
    return payload, config


_QUEUE = """dynamic_batching {
    max_queue_delay_microseconds: 1000000
    preferred_batch_size: [ 8 ]
    default_queue_policy {
        max_queue_size: 1
    }
}
"""

_PT_IDENTITY_BATCHING = "dynamic_batching {\n    max_queue_delay_microseconds: 1000000\n}\n"


def _simple(name: str, datatype: str) -> tuple[bytes, str]:
    io = [(f"INPUT{i}", f"TYPE_{datatype}", [16]) for i in range(2)]
    out = [(f"OUTPUT{i}", f"TYPE_{datatype}", [16]) for i in range(2)]
    return m.add_sub(datatype), _config(name, io, out)


def _example_strings() -> tuple[bytes, str]:
    io = [(f"INPUT{i}", "TYPE_STRING", [16]) for i in range(2)]
    out = [(f"OUTPUT{i}", "TYPE_STRING", [16]) for i in range(2)]
    return m.add_sub_strings(), _config("simple_string", io, out)


def _identity_of(name: str, datatype: str, dims, max_batch_size: int = 8) -> tuple[bytes, str]:
    payload, config = zero(name, 1, datatype, dims, max_batch_size=max_batch_size)
    return payload, config


#: name -> a function giving (model.onnx bytes, config.pbtxt text).
STAND_INS = {
    "onnx_zero_1_float32": lambda: zero("onnx_zero_1_float32", 1, "FP32", [-1]),
    "onnx_zero_1_float32_queue": lambda: zero("onnx_zero_1_float32_queue", 1, "FP32", [-1], extra=_QUEUE),
    "onnx_zero_1_float16": lambda: zero("onnx_zero_1_float16", 1, "FP16", [-1, -1]),
    "onnx_zero_3_float32": lambda: zero("onnx_zero_3_float32", 3, "FP32", [-1]),
    "onnx_zero_1_object": lambda: zero("onnx_zero_1_object", 1, "BYTES", [-1]),
    "onnx_zero_1_object_1_element": lambda: zero("onnx_zero_1_object_1_element", 1, "BYTES", [1]),
    "simple_identity": lambda: _identity_of("simple_identity", "BYTES", [-1]),
    "simple_identity_int64": lambda: _identity_of("simple_identity_int64", "INT64", [-1]),
    "string_identity": lambda: _identity_of("string_identity", "BYTES", [8], max_batch_size=0),
    "simple": lambda: _simple("simple", "INT32"),
    "simple_int8": lambda: _simple("simple_int8", "INT8"),
    "simple_string": _example_strings,
    "densenet_onnx": densenet,
    "input_all_required": lambda: input_validation("input_all_required", (False, False, False)),
    "input_optional": lambda: input_validation("input_optional", (False, False, False, True)),
    "input_all_optional": lambda: input_validation("input_all_optional", (True, True, True)),
    "pt_identity": lambda: (
        _identities(1, "FP32", 2),
        _config(
            "pt_identity", [("INPUT0", "TYPE_FP32", [8])], [("OUTPUT0", "TYPE_FP32", [8])], 8, _PT_IDENTITY_BATCHING
        ),
    ),
    "onnx_object_int32_int32": lambda: (
        strings_to_int32(),
        _config(
            "onnx_object_int32_int32",
            [("INPUT0", "TYPE_STRING", [16]), ("INPUT1", "TYPE_STRING", [16])],
            [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])],
        ),
    ),
    "plan_nobatch_zero_1_float32_int32": lambda: shape_tensor("plan_nobatch_zero_1_float32_int32", 0),
    "plan_zero_1_float32_int32": lambda: shape_tensor("plan_zero_1_float32_int32", 8),
    **{name: (lambda item=item: item) for name, item in SEQUENCE_MODELS.items() if name.startswith("simple")},
}


def write(root: Path, name: str) -> None:
    """``root/name/config.pbtxt`` and ``root/name/1/model.onnx``."""
    payload, config = STAND_INS[name]()
    m.write_model(root, name, payload, config=config)
