"""Unit tests for inference/codecs/json.py (V2 JSON tensor data).

Seed 002 "Tensor Data": row-major, nested or flat. Module rules: integers for
INT/UINT (range-checked), numbers for FP32/FP64, ``true``/``false`` for BOOL,
strings for BYTES (UTF-8 bytes in memory); FP16 has no JSON form and is
refused both ways.

Requests are written with Python's own ``json`` module from plain lists and
parsed with the codec's ``load_json``; responses are serialized by the codec
and read back with ``json.loads``; results are compared with numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inference.codecs import json as json_codec
from inference.codecs.message import dumps, load_json
from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import InvalidInput
from tests.support.datatypes import LE

FAST = settings(max_examples=30, deadline=None)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)

JSON_TYPES = [t for t in LE if t != "FP16"]
INT_TYPES = [t for t in LE if t.startswith(("INT", "UINT"))]
WHERE = "input 'x'"


def test_all_13_datatypes_are_covered():
    assert sorted(LE) == sorted(BY_NAME)


def via_json(data):
    """``data`` written by the stdlib json module and read back by the codec."""
    text = json.dumps({"data": data}).encode()
    return load_json(text)["data"]


def decode(name: str, shape, data, where: str = WHERE) -> np.ndarray:
    return json_codec.tensor_from_json(where, BY_NAME[name], tuple(shape), data)


def as_json_data(x: np.ndarray, nested: bool):
    """Plain nested or flat Python lists of ``x`` (a list even for a scalar)."""
    if nested and x.ndim >= 1:
        return x.tolist()
    return x.reshape(-1).tolist()


def elements_for(name: str):
    dtype = np.dtype(LE[name])
    if name == "FP32":
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    if name == "FP64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if name == "BOOL":
        return st.booleans()
    info = np.iinfo(dtype)
    return st.integers(int(info.min), int(info.max))


@st.composite
def json_tensors(draw, name: str):
    shape = draw(SHAPES)
    if name == "BYTES":
        texts = draw(hnp.arrays(object, shape, elements=st.text(max_size=8)))
        return texts
    elements = elements_for(name)
    return draw(hnp.arrays(np.dtype(LE[name]), shape, elements=elements))


# ------------------------------------------------------------ decode (request)


@pytest.mark.parametrize("name", JSON_TYPES)
@FAST
@given(data=st.data())
def test_json_decode_round_trip(name, data):
    x = data.draw(json_tensors(name))
    nested = data.draw(st.booleans())
    got = decode(name, x.shape, via_json(as_json_data(x, nested)))
    assert got.shape == x.shape
    if name == "BYTES":
        assert got.dtype == object
        expected = [t.encode("utf-8") for t in x.flat]
        assert list(got.flat) == expected
        assert all(type(v) is bytes for v in got.flat)
    else:
        assert got.dtype == np.dtype(LE[name])
        np.testing.assert_array_equal(got, x)
        assert got.tobytes() == x.tobytes()  # bit-exact, incl. the sign of zero


@pytest.mark.parametrize("name", INT_TYPES)
def test_json_integer_limits_are_accepted(name):
    info = np.iinfo(np.dtype(LE[name]))
    low, high = int(info.min), int(info.max)
    for values in ([low], [high], [high, high], [low, low]):
        got = decode(name, (len(values),), via_json(values))
        assert [int(v) for v in got] == values
        assert got.dtype == np.dtype(LE[name])
    if name != "UINT64":  # see test_uint64_values_on_both_sides_of_2_63
        got = decode(name, (2,), via_json([low, high]))
        assert [int(v) for v in got] == [low, high]


@pytest.mark.parametrize(
    "values",
    [[2**64 - 1, 0], [0, 2**64 - 1], [2**63, 1], [[2**63], [5]]],
)
def test_uint64_values_on_both_sides_of_2_63(values):
    flat = list(np.array(values, dtype=object).reshape(-1))
    got = decode("UINT64", (len(flat),), via_json(values))
    assert [int(v) for v in got] == flat


@FAST
@given(
    st.integers(2**63, 2**64 - 1),
    st.integers(0, 2**63 - 1),
    st.lists(st.integers(0, 2**64 - 1), max_size=6),
    st.randoms(use_true_random=False),
)
def test_uint64_full_range_round_trip(high, low, rest, rnd):
    values = [high, low, *rest]
    rnd.shuffle(values)
    got = decode("UINT64", (len(values),), via_json(values))
    assert [int(v) for v in got] == values


@pytest.mark.parametrize("name", INT_TYPES)
def test_json_integers_out_of_range(name):
    info = np.iinfo(np.dtype(LE[name]))
    for bad in (int(info.min) - 1, int(info.max) + 1):
        with pytest.raises(InvalidInput) as err:
            decode(name, (2,), [0, bad])
        msg = err.value.message
        assert msg.startswith(f"{WHERE}: ")
        if name in ("INT64", "UINT64"):
            # Beyond 64 bits, or mixed with a value of the other sign of 2**63,
            # numpy cannot hold the data as integers: refused as not-integers.
            assert f"out of range for {name}" in msg or f"not valid {name} values" in msg
        else:
            assert f"out of range for {name} [{info.min}, {info.max}]" in msg
    if name == "UINT64":
        with pytest.raises(InvalidInput, match=r"^input 'x': a value is out of range for UINT64 \[0, "):
            decode(name, (2,), [5, -1])
    if name == "INT64":
        with pytest.raises(InvalidInput, match=r"^input 'x': a value is out of range for INT64 \[-"):
            decode(name, (2,), [2**63, 2**63 + 1])


@pytest.mark.parametrize(("name", "bad"), [("UINT8", 256), ("UINT8", -1), ("INT8", 128), ("INT8", -129)])
def test_json_small_int_out_of_range_via_json_text(name, bad):
    with pytest.raises(InvalidInput, match=rf"^input 'x': a value is out of range for {name}"):
        decode(name, (3,), via_json([[1], [bad], [2]]))


@pytest.mark.parametrize("name", ["FP32", "FP64"])
def test_json_integers_are_numbers_for_floats(name):
    got = decode(name, (2, 2), via_json([[1, 2.5], [-3, 0]]))
    assert got.dtype == np.dtype(LE[name])
    assert got.tolist() == [[1.0, 2.5], [-3.0, 0.0]]
    got = decode(name, (2,), via_json([7, -8]))
    assert got.tolist() == [7.0, -8.0]


def test_json_nested_and_flat_give_the_same_tensor():
    nested = decode("INT32", (2, 3), via_json([[1, 2, 3], [4, 5, 6]]))
    flat = decode("INT32", (2, 3), via_json([1, 2, 3, 4, 5, 6]))
    assert nested.shape == flat.shape == (2, 3)
    assert nested.tolist() == flat.tolist() == [[1, 2, 3], [4, 5, 6]]
    words = decode("BYTES", (2, 1), via_json([["a"], ["é"]]))
    assert words.tolist() == [[b"a"], ["é".encode()]]


def test_json_scalar_shape():
    got = decode("FP64", (), via_json([2.5]))
    assert got.shape == ()
    assert got[()] == 2.5
    got = decode("BYTES", (), via_json(["s"]))
    assert got.shape == () and got[()] == b"s"


@pytest.mark.parametrize("name", JSON_TYPES)
def test_json_zero_sized(name):
    got = decode(name, (2, 0), via_json([[], []]))
    assert got.shape == (2, 0)
    assert got.dtype == np.dtype(LE[name])
    got = decode(name, (0, 3), via_json([]))
    assert got.shape == (0, 3)


def test_json_bool_values():
    got = decode("BOOL", (3,), via_json([True, False, True]))
    assert got.dtype == np.bool_
    assert got.tolist() == [True, False, True]


# ------------------------------------------------------ decode: refused data


@pytest.mark.parametrize("shape", [(2,), (0,), ()])
def test_json_fp16_refused(shape):
    with pytest.raises(InvalidInput) as err:
        decode("FP16", shape, via_json([1.0, 2.0]))
    msg = err.value.message
    assert msg.startswith(f"{WHERE}: FP16 data cannot be sent as JSON")
    assert "binary_data_size" in msg


@pytest.mark.parametrize("name", JSON_TYPES)
@pytest.mark.parametrize("data", [5, "abc", {"a": 1}, None, 1.5, True])
def test_json_data_must_be_a_list(name, data):
    with pytest.raises(InvalidInput) as err:
        decode(name, (1,), data)
    assert err.value.message == f"{WHERE}: 'data' must be a JSON array, got {type(data).__name__}"


@pytest.mark.parametrize("name", [t for t in JSON_TYPES if t != "BYTES"])
@pytest.mark.parametrize("data", [[[1, 2], [3]], [1, [2, 3]], [[1], [[2]]]])
def test_json_ragged_numeric(name, data):
    if name == "BOOL":
        data = json.loads(json.dumps(data).replace("1", "true").replace("2", "false").replace("3", "true"))
    with pytest.raises(InvalidInput) as err:
        decode(name, (3,), via_json(data))
    assert err.value.message.startswith(f"{WHERE}: ")
    assert f"not a regular array of {name} values" in err.value.message


@pytest.mark.parametrize("data", [[["a", "b"], ["c"]], ["a", ["b", "c"]]])
def test_json_ragged_bytes(data):
    with pytest.raises(InvalidInput, match=r"^input 'x': "):
        decode("BYTES", (3,), via_json(data))


@pytest.mark.parametrize("name", JSON_TYPES)
@pytest.mark.parametrize(("shape", "count"), [((2, 2), 3), ((2, 2), 5), ((1,), 0), ((0,), 1)])
def test_json_element_count_mismatch(name, shape, count):
    value = {"BOOL": True, "BYTES": "s"}.get(name, 1)
    with pytest.raises(InvalidInput) as err:
        decode(name, shape, via_json([value] * count))
    need = int(np.prod(shape))
    assert err.value.message == f"{WHERE}: 'data' has {count} elements but shape {list(shape)} needs {need}"


@pytest.mark.parametrize("name", INT_TYPES)
@pytest.mark.parametrize("data", [[1.0], [1, 2.5], [[0.5], [1]]])
def test_json_floats_refused_for_integers(name, data):
    with pytest.raises(InvalidInput) as err:
        decode(name, (len(data),), via_json(data))
    assert err.value.message == (f"{WHERE}: 'data' holds floating-point values, which are not valid {name} values")


@pytest.mark.parametrize("name", [*INT_TYPES, "FP32", "FP64"])
def test_json_bools_refused_for_numbers(name):
    """Only numbers for INT/UINT/FP (module docstring): all-boolean data is refused."""
    with pytest.raises(InvalidInput) as err:
        decode(name, (2,), via_json([True, False]))
    assert err.value.message == f"{WHERE}: 'data' holds boolean values, which are not valid {name} values"


@pytest.mark.parametrize(("name", "data"), [("INT32", [1, True]), ("UINT8", [False, 2]), ("FP32", [1.5, True])])
def test_json_bools_mixed_with_numbers_refused(name, data):
    with pytest.raises(InvalidInput, match=r"^input 'x': "):
        decode(name, (2,), via_json(data))


@pytest.mark.parametrize(("data", "kind"), [([1, 0], "integer"), ([0.0, 1.0], "floating-point")])
def test_json_numbers_refused_for_bool(data, kind):
    with pytest.raises(InvalidInput) as err:
        decode("BOOL", (2,), via_json(data))
    assert err.value.message == f"{WHERE}: 'data' holds {kind} values, which are not valid BOOL values"


def test_json_bool_mixed_with_number_refused_for_bool():
    with pytest.raises(InvalidInput, match=r"^input 'x': 'data' holds integer values, which are not valid BOOL"):
        decode("BOOL", (2,), via_json([True, 1]))


@pytest.mark.parametrize("name", [t for t in JSON_TYPES if t != "BYTES"])
@pytest.mark.parametrize("data", [["1"], ["a", "b"], [1, "2"]])
def test_json_strings_refused_for_numbers_and_bool(name, data):
    with pytest.raises(InvalidInput) as err:
        decode(name, (len(data),), via_json(data))
    assert err.value.message == f"{WHERE}: 'data' holds string values, which are not valid {name} values"


@pytest.mark.parametrize("name", [t for t in JSON_TYPES if t != "BYTES"])
@pytest.mark.parametrize("data", [[None], [1, None], [{"a": 1}], [[1], {"b": 2}]])
def test_json_null_and_objects_refused_for_numbers(name, data):
    with pytest.raises(InvalidInput) as err:
        decode(name, (len(data),), via_json(data))
    assert err.value.message.startswith(f"{WHERE}: ")


@pytest.mark.parametrize(
    ("data", "typename"),
    [([1], "int"), (["a", None], "NoneType"), ([["a"], [True]], "bool"), (["a", {"k": "v"}], "dict"), ([1.5], "float")],
)
def test_json_bytes_must_be_strings(data, typename):
    with pytest.raises(InvalidInput) as err:
        decode("BYTES", (len(data),), via_json(data))
    assert err.value.message == f"{WHERE}: BYTES data must be strings, got {typename}"


def test_json_bytes_are_utf8_of_the_strings():
    got = decode("BYTES", (3,), via_json(["plain", "ünïcødé", "\u0000nul"]))
    assert got.tolist() == [b"plain", "ünïcødé".encode(), b"\x00nul"]


def test_json_errors_use_the_given_location():
    with pytest.raises(InvalidInput, match=r"^input 'image/0': 'data' has 1 elements"):
        json_codec.tensor_from_json("input 'image/0'", BY_NAME["FP32"], (2,), [1.0])


# ----------------------------------------------------------- encode (response)


@st.composite
def output_tensors(draw, name: str):
    shape = draw(SHAPES)
    if name == "BYTES":
        texts = draw(hnp.arrays(object, shape, elements=st.text(max_size=8)))
        out = np.empty(shape, dtype=object)
        for index in np.ndindex(shape):
            out[index] = texts[index].encode("utf-8")
        return out, texts
    if name == "UINT64":
        x = draw(hnp.arrays(np.dtype(LE[name]), shape))  # full range: encoding has no such bug
    else:
        x = draw(hnp.arrays(np.dtype(LE[name]), shape, elements=elements_for(name)))
    return x, x


@pytest.mark.parametrize("name", JSON_TYPES)
@FAST
@given(data=st.data())
def test_json_encode_round_trip(name, data):
    x, expected = data.draw(output_tensors(name))
    out = json_codec.tensor_to_json(x, BY_NAME[name])
    parsed = json.loads(dumps({"data": out}))["data"]
    assert isinstance(parsed, list)
    assert len(parsed) == x.size  # always flat
    if name == "BYTES":
        assert parsed == list(expected.flat)
    elif name == "BOOL":
        assert all(type(v) is bool for v in parsed)
        assert parsed == [bool(v) for v in x.flat]
    elif name.startswith(("INT", "UINT")):
        assert all(type(v) is int for v in parsed)
        assert parsed == [int(v) for v in x.flat]
    else:
        back = np.asarray(parsed, dtype=LE[name])
        assert back.tobytes() == np.ascontiguousarray(x.reshape(-1)).tobytes()


@pytest.mark.parametrize("shape", [(2,), (0,), (), (2, 0)])
def test_json_encode_fp16_refused(shape):
    with pytest.raises(InvalidInput) as err:
        json_codec.tensor_to_json(np.zeros(shape, dtype="<f2"), BY_NAME["FP16"])
    assert err.value.message.startswith("FP16 outputs cannot be returned as JSON")
    assert "binary_data" in err.value.message


def test_json_encode_is_row_major_for_strided_and_fortran_arrays():
    base = np.arange(12, dtype="<i4").reshape(3, 4)
    for x in (base.T, np.asfortranarray(base), base[::2, 1::2]):
        parsed = json.loads(dumps(json_codec.tensor_to_json(x, BY_NAME["INT32"])))
        assert parsed == x.reshape(-1).tolist()


@pytest.mark.parametrize("name", ["INT32", "UINT16", "FP64", "INT64"])
def test_json_encode_big_endian_arrays(name):
    x = np.array([[1, 2], [300, 4]], dtype=np.dtype(LE[name]).newbyteorder(">"))
    parsed = json.loads(dumps(json_codec.tensor_to_json(x, BY_NAME[name])))
    assert parsed == [1, 2, 300, 4]


def test_json_encode_bytes_str_and_numpy_string_arrays():
    assert json_codec.tensor_to_json(np.array([["a", "é"]]), BY_NAME["BYTES"]) == ["a", "é"]
    assert json_codec.tensor_to_json(np.array([b"x", b"yz"]), BY_NAME["BYTES"]) == ["x", "yz"]
    mixed = np.array(["s", b"b", bytearray(b"ba")], dtype=object)
    assert json_codec.tensor_to_json(mixed, BY_NAME["BYTES"]) == ["s", "b", "ba"]


def test_json_encode_bytes_refuses_invalid_utf8():
    x = np.array([b"ok", b"\xff\xfe"], dtype=object)
    with pytest.raises(InvalidInput) as err:
        json_codec.tensor_to_json(x, BY_NAME["BYTES"])
    assert "not valid UTF-8" in err.value.message
    assert "binary_data: true" in err.value.message


@pytest.mark.parametrize("datatype", ["BYTES", "INT64", "FP32"])
def test_data_nested_100_lists_deep_is_refused_in_triton_words(datatype):
    """Triton's HTTP front end refuses 'data' nested 100 lists deep or more
    (server src/http_server.cc, HTTP_MAX_JSON_NESTING_DEPTH); 60 is read, as
    its one value for shape [1, 1] (Triton counts elements, not levels; numbers
    nested past numpy's 64 dimensions are refused as ragged here)."""
    value = "x" if datatype == "BYTES" else 7
    shallow = value
    for _ in range(60):
        shallow = [shallow]
    deep = shallow
    for _ in range(40):
        deep = [deep]
    array = json_codec.tensor_from_json("input 'a'", BY_NAME[datatype], (1, 1), shallow)
    assert array.shape == (1, 1) and array[0, 0] == (b"x" if datatype == "BYTES" else 7)
    with pytest.raises(InvalidInput) as err:
        json_codec.tensor_from_json("input 'a'", BY_NAME[datatype], (1, 1), deep)
    assert err.value.message.startswith("JSON nesting depth exceeds maximum allowed limit (100): input 'a'")
