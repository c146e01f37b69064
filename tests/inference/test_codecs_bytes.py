"""Unit tests for inference/codecs/bytes.py: BYTES tensors in binary form.

Wire format ("Binary Tensor Data Extension", https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md): each element is a
4-byte little-endian unsigned length followed by that many bytes, elements
back to back in row-major order. Expected wire bytes are always built here
with ``struct`` and never with the code under test.
"""

from __future__ import annotations

import array
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inference.codecs import bytes as bytes_codec
from inference.protocol.errors import InvalidInput

FAST = settings(max_examples=60, deadline=None)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def wire(elements) -> bytes:
    """Independent length-prefixed encoding of an iterable of bytes."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def object_array(items, shape=None) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out if shape is None else out.reshape(shape)


@st.composite
def bytes_tensors(draw):
    shape = draw(SHAPES)
    return draw(hnp.arrays(object, shape, elements=st.binary(max_size=24)))


# ---------------------------------------------------------------- serialize


@FAST
@given(bytes_tensors())
def test_serialize_matches_independent_wire_format(x):
    assert bytes_codec.serialize(x) == wire(list(x.flat))


@FAST
@given(bytes_tensors())
def test_serialize_then_deserialize_round_trip(x):
    buffer = bytes_codec.serialize(x)
    back = bytes_codec.deserialize(buffer, x.size, "input 't'")
    assert back.dtype == object
    assert back.shape == (x.size,)
    assert list(back) == list(x.flat)
    assert all(type(item) is bytes for item in back)


def test_serialize_is_row_major():
    x = object_array([b"a", b"bb", b"ccc", b"dddd", b"", b"f"], (2, 3))
    expected = wire([b"a", b"bb", b"ccc", b"dddd", b"", b"f"])
    assert bytes_codec.serialize(x) == expected
    # The transpose is a different row-major order.
    assert bytes_codec.serialize(x.T) == wire([b"a", b"dddd", b"bb", b"", b"ccc", b"f"])


def test_serialize_exact_bytes_of_a_known_tensor():
    x = object_array([b"hi", b""])
    assert bytes_codec.serialize(x) == b"\x02\x00\x00\x00hi\x00\x00\x00\x00"


def test_serialize_empty_tensor_is_empty():
    assert bytes_codec.serialize(np.empty((0, 3), dtype=object)) == b""


@FAST
@given(st.lists(st.text(max_size=12), max_size=8))
def test_serialize_encodes_str_as_utf8(texts):
    x = object_array(texts)
    assert bytes_codec.serialize(x) == wire([t.encode("utf-8") for t in texts])


def test_serialize_numpy_str_and_bytes_arrays():
    assert bytes_codec.serialize(np.array(["é", "ab"])) == wire(["é".encode(), b"ab"])
    assert bytes_codec.serialize(np.array([b"xy", b"z"])) == wire([b"xy", b"z"])


def test_serialize_accepts_bytearray_and_byte_memoryview():
    x = object_array([bytearray(b"abc"), memoryview(b"de")])
    assert bytes_codec.serialize(x) == wire([b"abc", b"de"])


def test_serialize_memoryview_of_wide_items_uses_byte_length():
    item = memoryview(array.array("i", [1, 2]))  # 2 items, 8 bytes
    x = object_array([item])
    assert bytes_codec.serialize(x) == struct.pack("<I", 8) + item.tobytes()


@pytest.mark.parametrize("bad", [1, 1.5, None, True, ["a"], {"a": 1}])
def test_serialize_refuses_non_bytes_elements(bad):
    x = object_array([b"ok", bad])
    with pytest.raises(InvalidInput) as err:
        bytes_codec.serialize(x)
    assert type(bad).__name__ in err.value.message
    assert "neither bytes nor str" in err.value.message


def test_serialize_refuses_element_longer_than_4_gib():
    class Huge(bytes):
        """A bytes whose reported length exceeds the 4-byte length prefix."""

        def __len__(self):
            return 2**32

    with pytest.raises(InvalidInput, match=r"longer than 2\*\*32 - 1 bytes"):
        bytes_codec.serialize(object_array([Huge(b"x")]))


# -------------------------------------------------------------- deserialize


@FAST
@given(st.lists(st.binary(max_size=24), max_size=12), st.integers(0, 3))
def test_deserialize_independent_wire_bytes(items, pad):
    buffer = b"\xee" * pad + wire(items)
    view = memoryview(buffer)[pad:]  # works on a slice of a larger buffer
    out = bytes_codec.deserialize(view, len(items), "input 'x'")
    assert out.shape == (len(items),)
    assert out.dtype == object
    assert list(out) == items
    assert all(type(item) is bytes for item in out)


def test_deserialize_accepts_bytes_and_memoryview():
    buf = wire([b"a", b"bc"])
    assert list(bytes_codec.deserialize(buf, 2, "w")) == [b"a", b"bc"]
    assert list(bytes_codec.deserialize(memoryview(buf), 2, "w")) == [b"a", b"bc"]


def test_deserialize_zero_elements_from_empty_buffer():
    out = bytes_codec.deserialize(b"", 0, "input 'e'")
    assert out.shape == (0,)
    assert out.dtype == object


def test_deserialize_zero_length_elements():
    out = bytes_codec.deserialize(b"\x00" * 12, 3, "w")
    assert list(out) == [b"", b"", b""]


def test_deserialize_element_values_do_not_alias_the_buffer():
    buf = bytearray(wire([b"abc"]))
    out = bytes_codec.deserialize(buf, 1, "w")
    buf[4:7] = b"xyz"
    assert out[0] == b"abc"


def test_deserialize_truncated_element_names_tensor():
    buf = struct.pack("<I", 10) + b"abc"
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(buf, 1, "input 'words'")
    msg = err.value.message
    assert msg.startswith("input 'words':")
    assert "element 0 declares 10 bytes but only 3 remain" in msg


def test_deserialize_huge_declared_length():
    buf = b"\xff\xff\xff\xff" + b"ab"
    with pytest.raises(InvalidInput, match=r"input 'w': BYTES element 0 declares 4294967295 bytes but only 2 remain"):
        bytes_codec.deserialize(buf, 1, "input 'w'")


def test_deserialize_second_element_truncated():
    buf = wire([b"ok"]) + struct.pack("<I", 5) + b"1234"
    with pytest.raises(InvalidInput, match=r"input 'w': BYTES element 1 declares 5 bytes but only 4 remain"):
        bytes_codec.deserialize(buf, 2, "input 'w'")


def test_deserialize_an_element_cut_short_before_the_last_is_too_few_elements_as_triton_counts():
    buf = wire([b"ok"]) + struct.pack("<I", 5) + b"1234"  # Triton's walk: 2 prefixes read, data ends
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(buf, 3, "input 'w' for model 'm'")
    assert err.value.message == "expected 3 string elements for inference input 'w' for model 'm', got 2"


def test_deserialize_too_few_elements():
    with pytest.raises(InvalidInput) as err:  # 16 bytes: room for 3 length prefixes, but 2 elements
        bytes_codec.deserialize(wire([b"aaaa", b"bbbb"]), 3, "input 'w' for model 'm'")
    assert err.value.message == "expected 3 string elements for inference input 'w' for model 'm', got 2"


def test_deserialize_truncated_length_prefix():
    buf = wire([b"abcd"]) + b"\x01\x00"  # only 2 of the 4 prefix bytes of the second element
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(buf, 2, "input 'w'")
    assert err.value.message == (
        "incomplete string length indicator for inference input 'w', expecting 4 bytes but only 2 bytes available"
    )


def test_deserialize_too_many_elements():
    buf = wire([b"a", b"b", b"c"])
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(buf, 2, "input 'w' for model 'm'")
    assert err.value.message == (
        "unexpected number of string elements 3 for inference input 'w' for model 'm', expecting 2"
    )


def test_deserialize_trailing_garbage():
    with pytest.raises(InvalidInput, match=r"^incomplete string length indicator for inference input 'w', "):
        bytes_codec.deserialize(wire([b"abc"]) + b"!", 1, "input 'w'")


def test_deserialize_zero_count_with_data_left():
    with pytest.raises(
        InvalidInput, match=r"^unexpected number of string elements 1 for inference input 'w', expecting 0"
    ):
        bytes_codec.deserialize(b"\x00\x00\x00\x00", 0, "input 'w'")


# ------------------------------------------- a shape the bytes cannot fill


def test_deserialize_refuses_more_elements_than_length_prefixes_fit():
    message = "incomplete string length indicator for inference input 'w', expecting 4 bytes but only 3 bytes available"
    with pytest.raises(InvalidInput) as err:  # Triton's walk: two empty elements, then 3 bytes of a prefix
        bytes_codec.deserialize(b"\x00" * 11, 3, "input 'w'")
    assert err.value.message == message
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(b"\x00" * 8, 3, "input 'w'")
    assert err.value.message == "expected 3 string elements for inference input 'w', got 2"
    assert bytes_codec.deserialize(b"\x00" * 12, 3, "input 'w'").tolist() == [b"", b"", b""]  # the boundary


def test_a_declared_shape_never_sizes_memory_the_data_does_not_fill():
    """The attack of issue 22 F1/F2: 4 bytes of data declared as 2**26
    elements used to allocate a 512 MiB object array before failing."""
    import tracemalloc  # numpy reports its allocations to tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match="expected 67108864 string elements for inference input 'w', got 1"):
            bytes_codec.deserialize(struct.pack("<I", 0), 1 << 26, "input 'w'")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, peak


@FAST
@given(st.integers(0, 64), st.integers(1, 1 << 40))
def test_deserialize_refuses_any_count_beyond_the_prefixes_present(size, extra):
    count = size // 4 + extra
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(b"\x00" * size, count, "input 'w'")
    if size % 4:
        assert err.value.message.startswith("incomplete string length indicator for inference input 'w'")
    else:
        assert err.value.message == f"expected {count} string elements for inference input 'w', got {size // 4}"


@FAST
@given(st.lists(st.binary(max_size=10), min_size=1, max_size=6), st.data())
def test_deserialize_any_truncation_is_refused(items, data):
    buf = wire(items)
    cut = data.draw(st.integers(0, len(buf) - 1))
    with pytest.raises(InvalidInput) as err:
        bytes_codec.deserialize(buf[:cut], len(items), "input 'cut'")
    assert "input 'cut'" in err.value.message
