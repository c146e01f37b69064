"""Large request bodies go through simdjson (inference/codecs/large_json.py):
they must decode exactly as small ones do (orjson), errors included."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.codecs import large_json, message
from inference.protocol.errors import InvalidInput

LIMIT = 1 << 30
PAD = "x" * (large_json.THRESHOLD + 10)  # an id long enough to make the body large


def decode(request: dict, large: bool):
    if large:
        request = {**request, "id": PAD}
    body = json.dumps(request).encode()
    assert (len(body) >= large_json.THRESHOLD) == large
    check_bools = b"true" in body or b"false" in body
    return message.decode_request(message.load_request_json(body), memoryview(b""), "m", None, LIMIT, check_bools)


def both(request: dict):
    """(small result or error message, large result or error message)."""
    out = []
    for large in (False, True):
        try:
            decoded = decode(request, large)
            out.append([(i.name, i.datatype, i.shape, i.data.dtype.str, i.data.tolist()) for i in decoded.inputs])
        except InvalidInput as exc:
            out.append(("error", exc.message))
    return out


def one(datatype, shape, data):
    return {"inputs": [{"name": "t", "datatype": datatype, "shape": shape, "data": data}]}


CASES = [
    one("FP32", [2, 3], [1, 2.5, -3, 4e-3, 5, 6]),
    one("FP32", [2, 3], [[1, 2, 3], [4, 5, 6]]),
    one("FP64", [1, 2, 2], [[[0.1, 0.2], [0.3, 0.4]]]),
    one("INT8", [3], [-128, 0, 127]),
    one("INT8", [3], [-129, 0, 127]),  # out of range
    one("UINT8", [2], [0, 256]),
    one("UINT64", [2], [18446744073709551615, 0]),
    one("INT64", [2], [-9223372036854775808, 9223372036854775807]),
    one("INT32", [2], [1.0, 2]),  # floats for an integer type
    one("FP32", [2], [1, True]),  # a boolean among numbers
    one("FP32", [2], [1, "a"]),
    one("FP32", [2], [1, None]),
    one("FP32", [3], [[1, 2], [3]]),  # ragged, right count
    one("FP32", [2, 2], [[1, [2]], [3, 4]]),  # a list where a number belongs
    one("FP32", [4], [[1, 2], [3, [4]]]),
    one("FP32", [5], [1, 2, 3]),  # count mismatch
    one("FP32", [0], []),
    one("BOOL", [3], [True, False, True]),
    one("BYTES", [2], ["a", "é"]),
    one("FP16", [1], [1.0]),
    one("UINT32", [2], [-1, 2]),
]


@pytest.mark.parametrize("request_", CASES)
def test_large_bodies_decode_like_small_ones(request_):
    small, large = both(request_)
    assert small == large


def test_large_numeric_data_is_not_built_from_python_objects():
    x = np.random.default_rng(0).random((3, 64, 64)).astype(np.float32)
    request = one("FP32", list(x.shape), x.ravel().tolist())
    body = json.dumps(request).encode()
    doc = message.load_request_json(body)
    assert isinstance(doc["inputs"][0]["data"], large_json.LazyData)
    decoded = message.decode_request(doc, memoryview(b""), "m", None, LIMIT, False)
    np.testing.assert_array_equal(decoded.inputs[0].data, x)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["FP32", "FP64", "INT16", "UINT16", "INT64"]),
    st.lists(st.integers(-70000, 70000), min_size=1, max_size=30),
    st.booleans(),
)
def test_equivalence_property(datatype, values, nested):
    data = [values[i : i + 1] for i in range(len(values))] if nested else values
    shape = [len(values), 1] if nested else [len(values)]
    small, large = both(one(datatype, shape, data))
    assert small == large
