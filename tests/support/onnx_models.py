"""Real ONNX models built in code for the tests (no downloads).

Each builder returns serialized ONNX bytes. Datatype names are the protocol's
(FP32, BYTES, ...).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from inference.protocol.datatypes import BY_NAME, DATATYPES

ALL_DATATYPES = [d.name for d in DATATYPES]


def _model(nodes, inputs, outputs, opset: int = 17, initializers=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = 9 if opset >= 20 else 8
    return model.SerializeToString()


def _vi(name: str, datatype: str, shape) -> object:
    return helper.make_tensor_value_info(name, BY_NAME[datatype].onnx, list(shape))


def identity(datatype: str, shape=("N", "M")) -> bytes:
    """INPUT0 -> OUTPUT0 (Identity), any ``datatype``; default shape [-1, -1]."""
    return _model(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        [_vi("INPUT0", datatype, shape)],
        [_vi("OUTPUT0", datatype, shape)],
    )


def add_sub(datatype: str = "INT32", width: int = 16) -> bytes:
    """Triton's "simple": OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, shape [-1, width]."""
    shape = ("N", width)
    return _model(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [_vi("INPUT0", datatype, shape), _vi("INPUT1", datatype, shape)],
        [_vi("OUTPUT0", datatype, shape), _vi("OUTPUT1", datatype, shape)],
    )


def affine(scale: float, offset: float, width: int = 4, batch="N") -> bytes:
    """FP32 y = scale * x + offset, shape [batch, width]."""
    shape = (batch, width)
    init = [
        helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor("offset", TensorProto.FLOAT, [], [offset]),
    ]
    return _model(
        [helper.make_node("Mul", ["x", "scale"], ["t"]), helper.make_node("Add", ["t", "offset"], ["y"])],
        [_vi("x", "FP32", shape)],
        [_vi("y", "FP32", shape)],
        initializers=init,
    )


def affine_failing_from(scale: float, offset: float, limit: int = 2, width: int = 4) -> bytes:
    """FP32 y = scale * x + offset, shape [N, width], as :func:`affine`, but the
    run fails (ONNX Runtime: Gather index out of bounds) when an element of
    ``x`` is ``limit`` or more (or below -``limit``): a Gather from a table of
    ``limit`` zeros indexed by the input cast to INT64, added to y."""
    shape = ("N", width)
    init = [
        helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor("offset", TensorProto.FLOAT, [], [offset]),
        helper.make_tensor("zeros", TensorProto.FLOAT, [limit], [0.0] * limit),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["t"]),
        helper.make_node("Add", ["t", "offset"], ["u"]),
        helper.make_node("Cast", ["x"], ["index"], to=TensorProto.INT64),
        helper.make_node("Gather", ["zeros", "index"], ["nothing"], axis=0),
        helper.make_node("Add", ["u", "nothing"], ["y"]),
    ]
    return _model(nodes, [_vi("x", "FP32", shape)], [_vi("y", "FP32", shape)], initializers=init)


def relu_scores(scale: float, weights) -> bytes:
    """FP32 x [N, 4] -> ``y`` = Relu(scale * x) [N, 4] and ``scores`` = x @ weights [N, classes]
    (a classifier's logits; ``weights`` [4, classes]). Two versions with other scales and weights
    differ in a known way (shadow traffic's comparisons)."""
    w = np.asarray(weights, dtype=np.float32)
    init = [helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]), numpy_helper.from_array(w, "w")]
    return _model(
        [
            helper.make_node("Mul", ["x", "scale"], ["t"]),
            helper.make_node("Relu", ["t"], ["y"]),
            helper.make_node("MatMul", ["x", "w"], ["scores"]),
        ],
        [_vi("x", "FP32", ("N", 4))],
        [_vi("y", "FP32", ("N", 4)), _vi("scores", "FP32", ("N", w.shape[1]))],
        initializers=init,
    )


def string_suffix(suffix: str = "!", shape=("N",)) -> bytes:
    """BYTES text -> text + suffix (StringConcat), shape [-1] (or ``shape``): proves the model sees the text."""
    const = helper.make_node(
        "Constant", [], ["s"], value=helper.make_tensor("s", TensorProto.STRING, [], [suffix.encode()])
    )
    return _model(
        [const, helper.make_node("StringConcat", ["text", "s"], ["out"])],
        [_vi("text", "BYTES", shape)],
        [_vi("out", "BYTES", shape)],
        opset=20,
    )


def add_sub_strings(width: int = 16) -> bytes:
    """Triton's "simple_string": BYTES integers in text; OUTPUT0 = INPUT0 + INPUT1,
    OUTPUT1 = INPUT0 - INPUT1 as text (Cast to INT32 and back), shape [-1, width]."""
    shape = ("N", width)
    cast = TensorProto.INT32
    empty, zero = (helper.make_tensor(n, TensorProto.STRING, [], [v]) for n, v in (("e", b""), ("z", b"0")))
    return _model(
        [
            helper.make_node("Constant", [], ["empty"], value=empty),
            helper.make_node("Constant", [], ["zero"], value=zero),
            *(  # an empty string (warm-up's zero data) is 0
                node
                for name in ("INPUT0", "INPUT1")
                for node in (
                    helper.make_node("Equal", [name, "empty"], [f"{name}_empty"]),
                    helper.make_node("Where", [f"{name}_empty", "zero", name], [f"{name}_text"]),
                )
            ),
            helper.make_node("Cast", ["INPUT0_text"], ["a"], to=cast),
            helper.make_node("Cast", ["INPUT1_text"], ["b"], to=cast),
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Sub", ["a", "b"], ["diff"]),
            helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
            helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=TensorProto.STRING),
        ],
        [_vi("INPUT0", "BYTES", shape), _vi("INPUT1", "BYTES", shape)],
        [_vi("OUTPUT0", "BYTES", shape), _vi("OUTPUT1", "BYTES", shape)],
        opset=20,
    )


def fixed_image(channels: int = 3, size: int = 224) -> bytes:
    """FP32 [1, C, H, W] -> per-channel mean [1, C] (a CNN-sized input)."""
    return _model(
        [helper.make_node("ReduceMean", ["image"], ["mean"], axes=[2, 3], keepdims=0)],
        [_vi("image", "FP32", (1, channels, size, size))],
        [_vi("mean", "FP32", (1, channels))],
        opset=17,
    )


def expected_identity_input(datatype: str, shape=(2, 3), seed: int = 0) -> np.ndarray:
    """Deterministic sample data of ``datatype`` (BYTES: object array of bytes)."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    dt = BY_NAME[datatype]
    if datatype == "BYTES":
        words = [f"wörd-{i}✓".encode() for i in range(count)]
        return np.array(words, dtype=object).reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.numpy.kind == "f":
        return rng.standard_normal(shape).astype(dt.numpy)
    info = np.iinfo(dt.numpy)
    low, high = max(info.min, -1000), min(info.max, 1000)
    return rng.integers(low, high, size=shape, endpoint=True).astype(dt.numpy)


def write_model(root: Path, name: str, payload: bytes, version: int = 1, config: str | None = None) -> Path:
    """Write ``root/name/version/model.onnx`` (and config.pbtxt when given)."""
    target = root / name / str(version) / "model.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(payload)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    return target


def half_plus_two(rank: int = 1) -> bytes:
    """TF Serving's example model: y = 0.5 x + 2, FP32, shape [-1] (rank 1) or [-1, -1]."""
    shape = ("N",) if rank == 1 else ("N", "M")
    init = [
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
    ]
    return _model(
        [helper.make_node("Mul", ["x", "half"], ["t"]), helper.make_node("Add", ["t", "two"], ["y"])],
        [_vi("x", "FP32", shape)],
        [_vi("y", "FP32", shape)],
        initializers=init,
    )


def tag_signal_sensor() -> bytes:
    """TF Serving's REST API three-input example (https://www.tensorflow.org/tfx/serving/api_rest):
    tag BYTES [N,1], signal FP32 [N,5],
    sensor FP32 [N,2,2] -> tag_bytes (= tag), signal_sum [N], sensor_max [N]."""
    axes1 = helper.make_tensor("axes1", TensorProto.INT64, [1], [1])
    axes12 = helper.make_tensor("axes12", TensorProto.INT64, [2], [1, 2])
    return _model(
        [
            helper.make_node("Identity", ["tag"], ["tag_bytes"]),
            helper.make_node("ReduceSum", ["signal", "axes1"], ["signal_sum"], keepdims=0),
            helper.make_node("ReduceMax", ["sensor", "axes12"], ["sensor_max"], keepdims=0),
        ],
        [_vi("tag", "BYTES", ("N", 1)), _vi("signal", "FP32", ("N", 5)), _vi("sensor", "FP32", ("N", 2, 2))],
        [_vi("tag_bytes", "BYTES", ("N", 1)), _vi("signal_sum", "FP32", ("N",)), _vi("sensor_max", "FP32", ("N",))],
        opset=18,
        initializers=[axes1, axes12],
    )


def two_input_classifier(labels=("neg", "pos")) -> bytes:
    """scores = softmax(a + b) over 2 classes, a and b FP32 [N, 2]; class labels in metadata."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Softmax", ["s"], ["scores"], axis=1)],
        "g",
        [_vi("a", "FP32", ("N", 2)), _vi("b", "FP32", ("N", 2))],
        [_vi("scores", "FP32", ("N", 2))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    helper.set_model_props(model, {"labels": "\n".join(labels)})
    return model.SerializeToString()


def _slow_weight(width: int) -> np.ndarray:
    return (np.random.default_rng(0).standard_normal((width, width)) / width).astype(np.float32)


def slow_loop_expected(x: np.ndarray, n: int, width: int = 256) -> np.ndarray:
    """What :func:`slow_loop` answers for ``x`` ([1, width] FP32) and ``n``, in numpy."""
    weight, y = _slow_weight(width), x.astype(np.float32)
    for _ in range(n):
        y = np.tanh(y @ weight)
    return y


def slow_loop(width: int = 256) -> bytes:
    """y = tanh(tanh(x W) W ...), ``n`` (INT64 scalar input) iterations: a
    model whose run time the caller chooses (about n x 20 us here)."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [width, width], _slow_weight(width).ravel())
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["y_in", "W"], ["m"]),
            helper.make_node("Tanh", ["m"], ["y_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [1, width]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [1, width]),
        ],
    )
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    return _model(
        [helper.make_node("Loop", ["n", "cond", "x"], ["y"], body=body)],
        [_vi("x", "FP32", (1, width)), _vi("n", "INT64", ())],
        [_vi("y", "FP32", (1, width))],
        initializers=[weight, cond],
    )


def external_data_model(location: str) -> bytes:
    """y = x + w, FP32 [4], the weight ``w`` in external data at ``location``
    (e.g. ``data/w.bin``, or a crafted ``../../etc/passwd``)."""
    weights = numpy_helper.from_array(np.ones((4,), dtype=np.float32), name="w")
    external_data_helper.set_external_data(weights, location=location, offset=0, length=16)
    weights.ClearField("raw_data")
    weights.data_location = TensorProto.EXTERNAL
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [_vi("x", "FP32", [4])],
        [_vi("y", "FP32", [4])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def external_data_sum(weights: dict[str, np.ndarray]) -> bytes:
    """y = x + the sum of ``weights`` (location -> FP32 [4]), each weight in
    external data at its location (write ``w.tobytes()`` there)."""
    initializers, names = [], []
    for index, (location, value) in enumerate(weights.items()):
        array = np.asarray(value, dtype=np.float32)
        tensor = numpy_helper.from_array(array, name=f"w{index}")
        external_data_helper.set_external_data(tensor, location=location, offset=0, length=array.nbytes)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        initializers.append(tensor)
        names.append(f"w{index}")
    nodes, last = [], "x"
    for index, name in enumerate(names):
        out = "y" if index == len(names) - 1 else f"s{index}"
        nodes.append(helper.make_node("Add", [last, name], [out]))
        last = out
    graph = helper.make_graph(nodes, "g", [_vi("x", "FP32", [4])], [_vi("y", "FP32", [4])], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def failing_model() -> bytes:
    """Parses as ONNX but fails the ONNX checker: a node of an unknown operator."""
    return _model([helper.make_node("NoSuchOperator", ["x"], ["y"])], [_vi("x", "FP32", [2])], [_vi("y", "FP32", [2])])


def unknown_domain_operator() -> bytes:
    """Passes the ONNX checker (an operator of a domain it does not know) but
    not ONNX Runtime, whose error names the file it loaded."""
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="example.custom")
    graph = helper.make_graph([node], "g", [_vi("x", "FP32", [2])], [_vi("y", "FP32", [2])])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)]
    )
    model.ir_version = 8
    return model.SerializeToString()


def gather_table(table=(0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5)) -> bytes:
    """FP32 y[n, k] = table[idx[n, k]] for INT64 idx of shape [N, K]; an index
    outside the table makes ONNX Runtime fail the whole run."""
    values = helper.make_tensor("table", TensorProto.FLOAT, [len(table)], list(table))
    return _model(
        [helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)],
        [_vi("idx", "INT64", ("N", "K"))],
        [_vi("y", "FP32", ("N", "K"))],
        initializers=[values],
    )


def declared_shapes(input_shape, output_shape, datatype: str = "FP32") -> bytes:
    """y = Identity(x), with x declared ``input_shape`` and y declared
    ``output_shape`` (which may contradict what the graph computes)."""
    return _model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [_vi("x", datatype, input_shape)],
        [_vi("y", datatype, output_shape)],
    )


def expand_to(shape) -> bytes:
    """y = x broadcast to the fixed ``shape`` (Expand): a one-element FP32
    input whose output is as large as ``shape`` says."""
    target = helper.make_tensor("shape", TensorProto.INT64, [len(shape)], list(shape))
    return _model(
        [helper.make_node("Expand", ["x", "shape"], ["y"])],
        [_vi("x", "FP32", [1])],
        [_vi("y", "FP32", shape)],
        initializers=[target],
    )


# -- stateful models (sequence batching) ----------------------------------------------


def _as_int32(name: str, out: str) -> object:
    return helper.make_node("Cast", [name], [out], to=TensorProto.INT32)


def sequence_simple(control: str = "INT32", batch="N", corrid: str | None = None, echo: bool = False) -> bytes:
    """Triton's ``simple_sequence`` (docs/examples/model_repository): OUTPUT =
    (INPUT + START) * READY, INT32 [batch, 1], the controls START and READY
    of datatype ``control`` (INT32, FP32 or BOOL: cast to INT32 inside).
    With ``corrid`` (UINT64, INT64, UINT32, INT32 or BYTES: numeric text),
    Triton's ``simple_dyna_sequence``: OUTPUT = (INPUT + START + END *
    CORRID) * READY, with an END control too; with ``echo`` instead,
    CORRID_OUT returns the correlation ID the server supplied and OUTPUT is
    as without ``corrid``. ``batch=None``: no batch dimension
    (max_batch_size 0), shapes [1]."""
    dims = ([batch] if batch else []) + [1]
    nodes = [
        _as_int32("START", "start"),
        _as_int32("READY", "ready"),
        helper.make_node("Add", ["INPUT", "start"], ["s"]),
    ]
    inputs = [_vi("INPUT", "INT32", dims), _vi("START", control, dims), _vi("READY", control, dims)]
    outputs = [_vi("OUTPUT", "INT32", dims)]
    total = "s"
    if corrid:
        inputs += [_vi("END", control, dims), _vi("CORRID", corrid, dims)]
    if corrid and echo:
        outputs.append(_vi("CORRID_OUT", corrid, dims))
        nodes.append(helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]))
    elif corrid:
        nodes += [
            _as_int32("END", "end"),
            _as_int32("CORRID", "corrid"),
            helper.make_node("Mul", ["end", "corrid"], ["tail"]),
            helper.make_node("Add", ["s", "tail"], ["s2"]),
        ]
        total = "s2"
    nodes.append(helper.make_node("Mul", [total, "ready"], ["OUTPUT"]))
    return _model(nodes, inputs, outputs)


def sequence_accumulator(start_control: bool = True, batch="N") -> bytes:
    """An accumulator with implicit state (Triton's ``create_onnx_modelfile_wo_initial_state``
    in spirit): OUTPUT_STATE = INPUT + INPUT_STATE * (1 - START) (with
    ``start_control``; else INPUT + INPUT_STATE, for a zero initial state),
    OUTPUT = OUTPUT_STATE; INT32 [batch, 1]."""
    dims = ([batch] if batch else []) + [1]
    inputs = [_vi("INPUT", "INT32", dims), _vi("INPUT_STATE", "INT32", dims)]
    nodes = []
    state = "INPUT_STATE"
    if start_control:
        inputs.append(_vi("START", "INT32", dims))
        one = helper.make_tensor("one", TensorProto.INT32, [], [1])
        nodes += [
            helper.make_node("Sub", ["one", "START"], ["keep"]),
            helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        ]
        state = "kept"
    nodes += [
        helper.make_node("Add", ["INPUT", state], ["OUTPUT_STATE"]),
        helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
    ]
    outputs = [_vi("OUTPUT", "INT32", dims), _vi("OUTPUT_STATE", "INT32", dims)]
    return _model(nodes, inputs, outputs, initializers=[one] if start_control else ())


def sequence_string_accumulator() -> bytes:
    """Triton's ``simple_string_dyna_sequence`` (its client examples with -d):
    OUTPUT accumulates INPUT over the sequence (START resets it, through
    implicit state: INPUT_STATE, OUTPUT_STATE), and the request with END
    adds the string correlation ID read as a number: OUTPUT = (state + END *
    int(CORRID)) * READY; INT32 [N, 1], CORRID BYTES [N, 1]."""
    dims = ["N", 1]
    names = ("INPUT", "INPUT_STATE", "START", "END", "READY")
    inputs = [_vi(name, "INT32", dims) for name in names] + [_vi("CORRID", "BYTES", dims)]
    one = helper.make_tensor("one", TensorProto.INT32, [], [1])
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["keep"]),
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        helper.make_node("Add", ["INPUT", "kept"], ["OUTPUT_STATE"]),
        _as_int32("CORRID", "corrid"),
        helper.make_node("Mul", ["END", "corrid"], ["tail"]),
        helper.make_node("Add", ["OUTPUT_STATE", "tail"], ["total"]),
        helper.make_node("Mul", ["total", "READY"], ["OUTPUT"]),
    ]
    outputs = [_vi("OUTPUT", "INT32", dims), _vi("OUTPUT_STATE", "INT32", dims)]
    return _model(nodes, inputs, outputs, initializers=[one])


def sequence_config(
    name: str, *, strategy: str = "", controls: str = "int32_false_true", kinds=("START", "READY"),
    corrid: str | None = None, idle_us: int = 0, max_batch_size: int = 8, state: str = "", extra: str = "",
) -> str:  # fmt: skip
    """config.pbtxt of the sequence models above: a control input per name
    of ``kinds`` (START, READY, END; ``controls``: int32_false_true,
    fp32_false_true or bool_false_true), CORRID of TYPE_``corrid``, a
    ``state`` block, a strategy block (``strategy``: e.g. ``oldest {
    max_candidate_sequences: 4 }``), ``extra`` lines after."""
    values = {"int32_false_true": "[ 0, 1 ]", "fp32_false_true": "[ 0, 1 ]", "bool_false_true": "[ false, true ]"}
    items = [
        f'{{ name: "{k}" control [ {{ kind: CONTROL_SEQUENCE_{k} {controls}: {values[controls]} }} ] }}' for k in kinds
    ]
    if corrid:
        items.append(f'{{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_{corrid} }} ] }}')
    idle = f"max_sequence_idle_microseconds: {idle_us}" if idle_us else ""
    body = f"{idle} {strategy} control_input [ {', '.join(items)} ] {state}"
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        f"sequence_batching {{ {body} }}\n{extra}"
    )


def channel_classifier(classes: int = 4, channels: int = 3) -> bytes:
    """An image classifier in NCHW layout: FP32 image [N, C, H, W] -> scores
    [N, classes] = (mean of each channel) @ W, W[c, k] = c + k + 1."""
    weight = np.array([[c + k + 1 for k in range(classes)] for c in range(channels)], dtype=np.float32)
    return _model(
        [
            helper.make_node("ReduceMean", ["image"], ["means"], axes=[2, 3], keepdims=0),
            helper.make_node("MatMul", ["means", "W"], ["scores"]),
        ],
        [_vi("image", "FP32", ("N", channels, "H", "W"))],
        [_vi("scores", "FP32", ("N", classes))],
        initializers=[numpy_helper.from_array(weight, "W")],
    )


def scaled_by_default(default: float = 2.0) -> bytes:
    """FP32 y = x * scale, x [-1, 4]; ``scale`` [1] is an input with a
    default value (an initializer listed as a graph input: ONNX Runtime's
    overridable initializer), so a request may leave it out."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        "g",
        [_vi("x", "FP32", ("N", 4)), _vi("scale", "FP32", (1,))],
        [_vi("y", "FP32", ("N", 4))],
        initializer=[helper.make_tensor("scale", TensorProto.FLOAT, [1], [default])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    return model.SerializeToString()


# -- ensembles (tests/interop/test_ensembles.py): preprocess -> classifier -> postprocess, and a join --
#: The preprocessing step's constants: features = (raw - MEAN) / SCALE.
ENSEMBLE_MEAN = np.array([5.8, 3.0, 3.8, 1.2], dtype=np.float32)
ENSEMBLE_SCALE = np.array([0.8, 0.4, 1.8, 0.8], dtype=np.float32)
#: The classifier step's weights: logits = features @ WEIGHTS + BIAS (4 features, 3 classes).
ENSEMBLE_WEIGHTS = np.array(
    [[-1.0, 0.2, 0.9], [1.1, -0.6, -0.4], [-1.7, 0.3, 1.5], [-1.6, -0.1, 1.8]], dtype=np.float32
)
ENSEMBLE_BIAS = np.array([0.3, 0.9, -1.1], dtype=np.float32)


def standardize(batch=("N",)) -> bytes:
    """FP32 ``raw`` [batch, 4] -> ``features`` = (raw - ENSEMBLE_MEAN) / ENSEMBLE_SCALE."""
    init = [numpy_helper.from_array(ENSEMBLE_MEAN, "mean"), numpy_helper.from_array(ENSEMBLE_SCALE, "scale")]
    return _model(
        [
            helper.make_node("Sub", ["raw", "mean"], ["centred"]),
            helper.make_node("Div", ["centred", "scale"], ["features"]),
        ],
        [_vi("raw", "FP32", (*batch, 4))],
        [_vi("features", "FP32", (*batch, 4))],
        initializers=init,
    )


def linear_classifier(batch="N") -> bytes:
    """FP32 ``features`` [batch, 4] -> ``logits`` [batch, 3] = features @ ENSEMBLE_WEIGHTS + ENSEMBLE_BIAS."""
    init = [numpy_helper.from_array(ENSEMBLE_WEIGHTS, "w"), numpy_helper.from_array(ENSEMBLE_BIAS, "b")]
    return _model(
        [
            helper.make_node("MatMul", ["features", "w"], ["product"]),
            helper.make_node("Add", ["product", "b"], ["logits"]),
        ],
        [_vi("features", "FP32", (batch, 4))],
        [_vi("logits", "FP32", (batch, 3))],
        initializers=init,
    )


def softmax_argmax() -> bytes:
    """FP32 ``logits`` [N, 3] -> ``probabilities`` (softmax over the last axis) and INT64 ``label`` [N] (argmax)."""
    return _model(
        [
            helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
            helper.make_node("ArgMax", ["logits"], ["label"], axis=-1, keepdims=0),
        ],
        [_vi("logits", "FP32", ("N", 3))],
        [_vi("probabilities", "FP32", ("N", 3)), _vi("label", "INT64", ("N",))],
    )


def add_pair(width: int = 4) -> bytes:
    """FP32 ``a`` + ``b`` -> ``sum``, shape [N, width] (the join of a diamond)."""
    return _model(
        [helper.make_node("Add", ["a", "b"], ["sum"])],
        [_vi("a", "FP32", ("N", width)), _vi("b", "FP32", ("N", width))],
        [_vi("sum", "FP32", ("N", width))],
    )


def passthrough(inputs, outputs) -> bytes:
    """A model with these ``inputs`` (name, datatype, shape) whose every
    output (name, datatype) is its first input passed through (Identity):
    a model of a given signature, for the signature guard's tests."""
    first, _, shape = inputs[0]
    nodes = [helper.make_node("Identity", [first], [name]) for name, _ in outputs]
    return _model(nodes, [_vi(n, d, s) for n, d, s in inputs], [_vi(n, d, shape) for n, d in outputs])


def matmul(side: int, seed: int = 0) -> bytes:
    """x FP32 [N, side] -> y = x @ W, W FP32 [side, side] drawn from
    ``np.random.default_rng(seed).standard_normal`` (``4 side^2`` bytes of
    weights: a model of a given size, distinct per seed)."""
    weight = np.random.default_rng(seed).standard_normal((side, side), dtype=np.float32)
    return _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [_vi("x", "FP32", ("N", side))],
        [_vi("y", "FP32", ("N", side))],
        initializers=[numpy_helper.from_array(weight, "w")],
    )
