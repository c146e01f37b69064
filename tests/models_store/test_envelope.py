"""The outline of an ONNX file as its bytes stream in (models_store/intake/envelope.py):
what onnx parses as a model with a graph passes at any chunking; junk, a
truncated file and a file without a graph do not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from models_store.intake.envelope import Envelope
from tests.support import onnx_models as m


def _outline(data: bytes, chunk: int) -> str:
    envelope = Envelope()
    for start in range(0, len(data), chunk):
        envelope.feed(data[start : start + chunk])
    return envelope.problem()


def _with_weight() -> bytes:
    """A model of a 1 MiB initializer (lengths of several varint bytes), with metadata fields around the graph."""
    model = onnx.load_from_string(m.affine(2.0, 1.0))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.arange(2**18, dtype=np.float32), "big"))
    model.producer_name, model.doc_string = "test", "x" * 300
    model.metadata_props.add(key="k", value="v")
    return model.SerializeToString()


@pytest.mark.parametrize("chunk", [1, 3, 4096, 2**30])
@pytest.mark.parametrize(
    "payload", [m.affine(2.0, 1.0), m.identity("FP32"), _with_weight()], ids=["affine", "id", "big"]
)
def test_a_model_has_the_outline_at_any_chunking(payload, chunk):
    parsed = onnx.load_from_string(payload)  # what onnx itself reads: a model with a graph
    assert parsed.ir_version and parsed.HasField("graph")
    assert _outline(payload, chunk) == ""


@pytest.mark.parametrize(
    "payload, problem",
    [
        (b"GIF89a", "is no protobuf field tag"),
        (b"\x08\x07", "the file holds no ONNX graph"),
        (b"\x3a\x00", "the file has no ir_version"),
        (b"\x08", "the file ends inside a field"),
        (b"\x3a\x05abc", "the file ends inside a field"),
        (b"\x08" + b"\xff" * 11, "a varint longer than 10 bytes"),
        (b"\x0a\x00\x3a\x00", "field 1 has the wrong wire type 2"),
        (b"\x08\x07\x3a\x00" + b"\x28\x01" * 100_001, "more than 100000 top-level fields"),
    ],
)
def test_what_is_not_shaped_like_a_model(payload, problem):
    assert problem in _outline(payload, 1)
    assert problem in _outline(payload, 1 << 20)


def test_a_truncated_model_is_found_out():
    payload = _with_weight()
    assert "ends inside a field" in _outline(payload[: len(payload) // 2], 4096)
