"""Unit tests for inference/codecs/binary.py (binary tensor data extension).

Seeds 000/001: little-endian, row-major, no padding; BOOL is one byte (1 for
true, 0 for false); BYTES elements carry a 4-byte little-endian length prefix;
FP16 is the native IEEE half. The expected wire bytes are built independently
in this file (``struct`` for integers/BOOL, explicit little-endian numpy dtype
strings for floats), never with the code under test.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inference.codecs import binary
from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import InvalidInput

FAST = settings(max_examples=30, deadline=None)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)

#: datatype -> (struct format character, explicit little-endian numpy dtype).
WIRE = {
    "BOOL": ("?", "|b1"),
    "UINT8": ("B", "|u1"),
    "UINT16": ("H", "<u2"),
    "UINT32": ("I", "<u4"),
    "UINT64": ("Q", "<u8"),
    "INT8": ("b", "|i1"),
    "INT16": ("h", "<i2"),
    "INT32": ("i", "<i4"),
    "INT64": ("q", "<i8"),
    "FP16": (None, "<f2"),
    "FP32": (None, "<f4"),
    "FP64": (None, "<f8"),
    "BYTES": (None, "O"),
}
ALL_TYPES = list(WIRE)
NUMERIC_TYPES = [t for t in ALL_TYPES if t != "BYTES"]
ITEMSIZE = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2}
ITEMSIZE.update({"UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8})


def test_the_table_covers_the_13_datatypes():
    assert sorted(WIRE) == sorted(BY_NAME)
    assert len(WIRE) == 13


def expected_wire(name: str, x: np.ndarray) -> bytes:
    """The spec's byte layout of ``x`` as ``name``, computed independently."""
    code, le = WIRE[name]
    if name == "BYTES":
        return b"".join(struct.pack("<I", len(e)) + e for e in x.flat)
    if name == "BOOL":
        return bytes(1 if v else 0 for v in x.flat)
    if code is not None:
        values = [int(v) for v in x.flat]
        return struct.pack(f"<{len(values)}{code}", *values)
    return np.asarray(x, dtype=le).tobytes(order="C")


@st.composite
def tensors(draw, name: str, shapes=SHAPES):
    """A random tensor of datatype ``name``: full integer ranges, floats with NaN/inf."""
    shape = draw(shapes)
    if name == "BYTES":
        return draw(hnp.arrays(object, shape, elements=st.binary(max_size=12)))
    dtype = np.dtype(WIRE[name][1])
    if dtype.kind == "f":
        elements = st.floats(width=dtype.itemsize * 8, allow_nan=True, allow_infinity=True)
        return draw(hnp.arrays(dtype, shape, elements=elements))
    return draw(hnp.arrays(dtype, shape))


def assert_same_tensor(got: np.ndarray, want: np.ndarray, name: str):
    assert got.shape == want.shape
    if name == "BYTES":
        assert got.dtype == object
        assert list(got.flat) == list(want.flat)
        assert all(type(v) is bytes for v in got.flat)
    else:
        assert got.dtype == np.dtype(WIRE[name][1])
        # Bit-exact (keeps NaN payloads and the sign of zero).
        assert got.tobytes() == np.asarray(want, dtype=WIRE[name][1]).tobytes()
        np.testing.assert_array_equal(got, want)


# -------------------------------------------------------- independent layout


def test_known_layouts_from_the_spec():
    """Hand-written bytes, not derived from numpy at all."""
    assert expected_wire("BOOL", np.array([True, False, True])) == b"\x01\x00\x01"
    assert expected_wire("UINT16", np.array([1, 0x0203], dtype="<u2")) == b"\x01\x00\x03\x02"
    assert expected_wire("INT32", np.array([-2], dtype="<i4")) == b"\xfe\xff\xff\xff"
    assert expected_wire("FP16", np.array([1.0, -2.0], dtype="<f2")) == b"\x00\x3c\x00\xc0"
    assert expected_wire("FP32", np.array([1.0], dtype="<f4")) == b"\x00\x00\x80\x3f"


@pytest.mark.parametrize(
    ("name", "values", "raw"),
    [
        ("BOOL", [True, False, True], b"\x01\x00\x01"),
        ("UINT8", [0, 255], b"\x00\xff"),
        ("INT8", [-128, 127], b"\x80\x7f"),
        ("UINT16", [0x0102], b"\x02\x01"),
        ("INT16", [-1, -32768], b"\xff\xff\x00\x80"),
        ("UINT32", [0xFFFFFFFF], b"\xff\xff\xff\xff"),
        ("INT32", [1, -2], b"\x01\x00\x00\x00\xfe\xff\xff\xff"),
        ("UINT64", [2**64 - 1], b"\xff" * 8),
        ("INT64", [-(2**63)], b"\x00" * 7 + b"\x80"),
        ("FP16", [1.0, -2.0], b"\x00\x3c\x00\xc0"),
        ("FP32", [1.0], b"\x00\x00\x80\x3f"),
        ("FP64", [-0.0], b"\x00" * 7 + b"\x80"),
        ("BYTES", [b"hi", b""], b"\x02\x00\x00\x00hi\x00\x00\x00\x00"),
    ],
)
def test_hand_written_wire_bytes_both_ways(name, values, raw):
    datatype = BY_NAME[name]
    if name == "BYTES":
        x = np.empty(len(values), dtype=object)
        x[:] = values
    else:
        x = np.array(values, dtype=WIRE[name][1])
    assert bytes(binary.tensor_to_buffer(x, datatype)) == raw
    got = binary.tensor_from_buffer("input 'k'", datatype, (len(values),), memoryview(raw))
    assert_same_tensor(got, x, name)


# ---------------------------------------------------------- tensor_to_buffer


@pytest.mark.parametrize("name", ALL_TYPES)
@FAST
@given(data=st.data())
def test_tensor_to_buffer_matches_independent_bytes(name, data):
    x = data.draw(tensors(name, SHAPES))
    out = binary.tensor_to_buffer(x, BY_NAME[name])
    assert bytes(out) == expected_wire(name, x)
    assert memoryview(out).nbytes == len(expected_wire(name, x))


@pytest.mark.parametrize("name", ALL_TYPES)
@FAST
@given(data=st.data())
def test_tensor_from_buffer_round_trip(name, data):
    x = data.draw(tensors(name))
    raw = expected_wire(name, x)
    pad = data.draw(st.integers(0, 3))
    body = b"\xaa" * pad + raw + b"\xbb" * 2
    view = memoryview(body)[pad : pad + len(raw)]  # a slice at any alignment
    got = binary.tensor_from_buffer("input 'x'", BY_NAME[name], x.shape, view)
    assert_same_tensor(got, x, name)


@pytest.mark.parametrize("name", NUMERIC_TYPES)
@pytest.mark.parametrize("which", ["min", "max"])
def test_integer_and_float_limits(name, which):
    le = WIRE[name][1]
    dtype = np.dtype(le)
    if dtype.kind == "b":
        value = which == "max"
    elif dtype.kind == "f":
        value = getattr(np.finfo(dtype), which)
    else:
        value = getattr(np.iinfo(dtype), which)
    x = np.array([value, value], dtype=le)
    raw = expected_wire(name, x)
    assert bytes(binary.tensor_to_buffer(x, BY_NAME[name])) == raw
    got = binary.tensor_from_buffer("input 'x'", BY_NAME[name], (2,), memoryview(raw))
    assert_same_tensor(got, x, name)


@pytest.mark.parametrize("name", ["FP16", "FP32", "FP64"])
def test_nan_and_infinities(name):
    le = WIRE[name][1]
    x = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=le)
    raw = np.asarray(x, dtype=le).tobytes()
    assert bytes(binary.tensor_to_buffer(x, BY_NAME[name])) == raw
    got = binary.tensor_from_buffer("input 'x'", BY_NAME[name], (4,), memoryview(raw))
    assert np.isnan(got[0])
    assert got[1] == np.inf and got[2] == -np.inf
    assert got[3] == 0 and np.signbit(got[3])


@pytest.mark.parametrize("name", [t for t in NUMERIC_TYPES if t != "BOOL"])
def test_tensor_to_buffer_converts_big_endian_input(name):
    le = WIRE[name][1]
    x = np.arange(6).astype(le).reshape(2, 3)
    big = x.astype(np.dtype(le).newbyteorder(">"))
    assert bytes(binary.tensor_to_buffer(big, BY_NAME[name])) == expected_wire(name, x)


@pytest.mark.parametrize("name", NUMERIC_TYPES)
def test_tensor_to_buffer_non_contiguous_and_fortran(name):
    le = WIRE[name][1]
    base = (np.arange(24) % 2 == 1) if name == "BOOL" else np.arange(24).astype(le)
    base = base.reshape(4, 6)
    strided = base[::2, 1::2]  # non-contiguous
    fortran = np.asfortranarray(base)
    transposed = base.T
    for x in (strided, fortran, transposed):
        assert bytes(binary.tensor_to_buffer(x, BY_NAME[name])) == expected_wire(name, x)


@pytest.mark.parametrize("name", NUMERIC_TYPES)
def test_tensor_to_buffer_zero_sized_one_dimensional(name):
    x = np.zeros((0,), dtype=WIRE[name][1])
    assert bytes(binary.tensor_to_buffer(x, BY_NAME[name])) == b""


@pytest.mark.parametrize(
    ("name", "shape"),
    [(name, (2, 0)) for name in NUMERIC_TYPES] + [("FP32", (0, 0)), ("FP32", (0, 3)), ("INT64", (3, 0, 2))],
)
def test_tensor_to_buffer_zero_sized_multi_dimensional(name, shape):
    x = np.zeros(shape, dtype=WIRE[name][1])
    assert bytes(binary.tensor_to_buffer(x, BY_NAME[name])) == b""


def test_tensor_to_buffer_bytes_zero_sized_multi_dimensional():
    assert binary.tensor_to_buffer(np.empty((2, 0), dtype=object), BY_NAME["BYTES"]) == b""


def test_tensor_to_buffer_casts_a_wrong_dtype_to_the_datatype():
    x = np.array([[1, -2], [3, 4]], dtype=np.int64)
    assert bytes(binary.tensor_to_buffer(x, BY_NAME["INT32"])) == struct.pack("<4i", 1, -2, 3, 4)
    f = np.array([0.5, 2.0], dtype=np.float64)
    assert bytes(binary.tensor_to_buffer(f, BY_NAME["FP16"])) == np.array([0.5, 2.0], dtype="<f2").tobytes()


def test_tensor_to_buffer_is_a_view_of_a_contiguous_little_endian_array():
    x = np.arange(4, dtype="<f4")
    out = binary.tensor_to_buffer(x, BY_NAME["FP32"])
    x[0] = 9.0  # the buffer reflects the array: no copy was made
    assert bytes(out)[:4] == struct.pack("<f", 9.0)


def test_tensor_to_buffer_scalar_tensor():
    x = np.array(7, dtype="<i4")
    assert bytes(binary.tensor_to_buffer(x, BY_NAME["INT32"])) == struct.pack("<i", 7)
    s = np.empty((), dtype=object)
    s[()] = b"abc"
    assert bytes(binary.tensor_to_buffer(s, BY_NAME["BYTES"])) == b"\x03\x00\x00\x00abc"


def test_tensor_to_buffer_bytes_from_str_array():
    x = np.array([["ab", "é"]])
    assert bytes(binary.tensor_to_buffer(x, BY_NAME["BYTES"])) == (
        struct.pack("<I", 2) + b"ab" + struct.pack("<I", 2) + "é".encode()
    )


def test_tensor_to_buffer_bytes_refuses_non_bytes():
    x = np.array([1, 2], dtype=object)
    with pytest.raises(InvalidInput, match="neither bytes nor str"):
        binary.tensor_to_buffer(x, BY_NAME["BYTES"])


# -------------------------------------------------------- tensor_from_buffer


def test_tensor_from_buffer_does_not_copy_numeric_data():
    body = bytearray(struct.pack("<4i", 1, 2, 3, 4))
    got = binary.tensor_from_buffer("input 'x'", BY_NAME["INT32"], (2, 2), memoryview(body))
    body[0:4] = struct.pack("<i", 42)
    assert got[0, 0] == 42
    assert got.tolist() == [[42, 2], [3, 4]]


@pytest.mark.parametrize("name", NUMERIC_TYPES)
def test_tensor_from_buffer_size_mismatch(name):
    datatype = BY_NAME[name]
    size = ITEMSIZE[name]
    for nbytes in (0, 2 * 3 * size - 1, 2 * 3 * size + 1, 2 * 3 * size + size):
        with pytest.raises(InvalidInput) as err:
            binary.tensor_from_buffer("input 'img'", datatype, (2, 3), memoryview(b"\x00" * nbytes))
        assert err.value.message == f"input byte size mismatch for input 'img'. Expected {6 * size}, got {nbytes}"


@pytest.mark.parametrize("name", NUMERIC_TYPES)
def test_tensor_from_buffer_zero_sized(name):
    got = binary.tensor_from_buffer("input 'z'", BY_NAME[name], (3, 0, 2), memoryview(b""))
    assert got.shape == (3, 0, 2)
    assert got.dtype == np.dtype(WIRE[name][1])
    with pytest.raises(InvalidInput, match=r"^input byte size mismatch for input 'z'. Expected 0, got 1$"):
        binary.tensor_from_buffer("input 'z'", BY_NAME[name], (3, 0, 2), memoryview(b"\x00"))


def test_tensor_from_buffer_scalar_shape():
    got = binary.tensor_from_buffer("input 's'", BY_NAME["FP64"], (), memoryview(struct.pack("<d", 2.5)))
    assert got.shape == ()
    assert got[()] == 2.5


def test_tensor_from_buffer_bytes_reshaped_row_major():
    items = [b"a", b"bb", b"", b"dddd", b"e", b"ff"]
    raw = b"".join(struct.pack("<I", len(e)) + e for e in items)
    got = binary.tensor_from_buffer("input 'b'", BY_NAME["BYTES"], (2, 3), memoryview(raw))
    assert got.shape == (2, 3)
    assert got.tolist() == [[b"a", b"bb", b""], [b"dddd", b"e", b"ff"]]


def test_tensor_from_buffer_bytes_errors_name_the_tensor():
    raw = struct.pack("<I", 3) + b"ab"
    with pytest.raises(InvalidInput, match=r"^input 'b': BYTES element 0 declares 3 bytes but only 2 remain"):
        binary.tensor_from_buffer("input 'b'", BY_NAME["BYTES"], (1,), memoryview(raw))
    raw = struct.pack("<I", 5) + b"abcde"
    with pytest.raises(InvalidInput, match=r"^expected 2 string elements for inference input 'b', got 1$"):
        binary.tensor_from_buffer("input 'b'", BY_NAME["BYTES"], (2,), memoryview(raw))
    with pytest.raises(InvalidInput, match=r"^expected 3 string elements for inference input 'b', got 1$"):
        binary.tensor_from_buffer("input 'b'", BY_NAME["BYTES"], (3,), memoryview(raw))
    with pytest.raises(
        InvalidInput, match=r"^unexpected number of string elements 2 for inference input 'b', expecting 1$"
    ):
        binary.tensor_from_buffer("input 'b'", BY_NAME["BYTES"], (1,), memoryview(raw + raw))


# ---------------------------------------------------------------- split_body


def test_split_body_none_is_all_json():
    body = b'{"a": 1}'
    header, tail = binary.split_body(body, None)
    assert bytes(header) == body
    assert len(tail) == 0


@pytest.mark.parametrize("n", [0, 1, 5, 8])
def test_split_body_at_header_length(n):
    body = b"01234567"
    header, tail = binary.split_body(body, n)
    assert bytes(header) == body[:n]
    assert bytes(tail) == body[n:]


def test_split_body_returns_views_without_copy():
    body = bytearray(b"HEADERtail")
    header, tail = binary.split_body(body, 6)
    body[6] = ord("T")
    assert bytes(tail) == b"Tail"
    assert isinstance(header, memoryview) and isinstance(tail, memoryview)


def test_split_body_accepts_memoryview():
    header, tail = binary.split_body(memoryview(b"abcdef"), 2)
    assert (bytes(header), bytes(tail)) == (b"ab", b"cdef")


def test_split_body_negative_header_length():
    with pytest.raises(InvalidInput) as err:
        binary.split_body(b"abc", -1)
    assert err.value.message == "Inference-Header-Content-Length is negative (-1)"


def test_split_body_header_length_beyond_body():
    with pytest.raises(InvalidInput) as err:
        binary.split_body(b"abc", 4)
    assert err.value.message == "Inference-Header-Content-Length (4) is larger than the body (3 bytes)"


# ------------------------------------------------------- parse_header_length


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("0", 0), ("17", 17), (" 42 ", 42), ("-3", -3)])
def test_parse_header_length(value, expected):
    assert binary.parse_header_length(value) == expected


@pytest.mark.parametrize("value", ["", "abc", "1.5", "0x10", "12 34"])
def test_parse_header_length_refuses_non_integers(value):
    with pytest.raises(InvalidInput) as err:
        binary.parse_header_length(value)
    assert err.value.message == f"Inference-Header-Content-Length is not an integer: {value!r}"


# ---------------------------------------------------------------- BinaryTail


def test_binary_tail_hands_out_consecutive_slices():
    tail = binary.BinaryTail(memoryview(b"aabbbcccc"))
    assert bytes(tail.take(2, "input 'a'")) == b"aa"
    assert bytes(tail.take(0, "input 'empty'")) == b""
    assert bytes(tail.take(3, "input 'b'")) == b"bbb"
    assert bytes(tail.take(4, "input 'c'")) == b"cccc"
    tail.finish()  # everything claimed


def test_binary_tail_take_more_than_remains():
    tail = binary.BinaryTail(memoryview(b"abcde"))
    tail.take(3, "input 'a'")
    with pytest.raises(InvalidInput) as err:
        tail.take(3, "input 'b'")
    assert err.value.message == ("input 'b': binary_data_size is 3 but only 2 bytes of binary data remain in the body")


def test_binary_tail_finish_refuses_unclaimed_bytes():
    tail = binary.BinaryTail(memoryview(b"abcde"))
    tail.take(2, "input 'a'")
    with pytest.raises(InvalidInput) as err:
        tail.finish()
    assert err.value.message == (
        "3 bytes of binary data after the inputs are not claimed by any input's binary_data_size"
    )


def test_binary_tail_empty():
    binary.BinaryTail(memoryview(b"")).finish()
    with pytest.raises(InvalidInput, match=r"^input 'x': binary_data_size is 1 but only 0 bytes"):
        binary.BinaryTail(memoryview(b"")).take(1, "input 'x'")


@FAST
@given(st.lists(st.binary(max_size=9), max_size=6), st.binary(max_size=3))
def test_binary_tail_slices_partition_the_body(parts, extra):
    tail = binary.BinaryTail(memoryview(b"".join(parts) + extra))
    for i, part in enumerate(parts):
        assert bytes(tail.take(len(part), f"input '{i}'")) == part
    if extra:
        with pytest.raises(InvalidInput, match=f"^{len(extra)} bytes of binary data"):
            tail.finish()
    else:
        tail.finish()
