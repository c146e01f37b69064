"""Unit tests for inference/codecs/tfserving.py: what a small body may
make the server allocate. ``context`` is merged into every example of a
``:classify`` / ``:regress`` request, so a few values repeated over many
examples are refused before they are copied."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from inference.codecs import tfserving
from inference.protocol.errors import RequestTooLarge
from inference.protocol.types import MetadataTensor

INPUTS = (MetadataTensor("a", "FP32", (-1, 2)), MetadataTensor("b", "FP32", (-1, 1000)))


def test_context_is_merged_into_every_example():
    doc = {"context": {"b": [0.25] * 1000}, "examples": [{"a": [1, 2]}, {"a": [3, 4]}]}
    a, b = tfserving.decode_examples(doc, INPUTS, "classify", 64 << 20)
    np.testing.assert_array_equal(a.data, np.array([[1, 2], [3, 4]], np.float32))
    np.testing.assert_array_equal(b.data, np.full((2, 1000), 0.25, np.float32))


def test_context_copied_past_the_limit_is_refused_before_it_is_copied():
    """A 3 MB body: 1,000 context values x 100,000 examples would be 10**8
    values (400 MB as FP32, more on the way through Python lists)."""
    doc = {"context": {"b": [0.25] * 1000}, "examples": [{"a": [1, 2]}] * 100_000}
    assert len(json.dumps(doc)) < 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(RequestTooLarge) as err:
            tfserving.decode_examples(doc, INPUTS, "regress", 64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.message == (
        "'context' feature 'b' (1000 values) copied into each of the 100000 examples needs 400000000 bytes, "
        "more than the request limit of 67108864 bytes"
    )
    assert peak < 1 << 20, peak


def test_context_exactly_at_the_limit_is_accepted():
    doc = {"context": {"b": [0.0] * 1000}, "examples": [{"a": [1, 2]}] * 4}
    assert tfserving.decode_examples(doc, INPUTS, "regress", 16000)[1].data.shape == (4, 1000)
    with pytest.raises(RequestTooLarge):
        tfserving.decode_examples(doc, INPUTS, "regress", 15999)


def test_context_values_are_counted_at_any_depth():
    doc = {"context": {"b": [[[0.5] * 10] * 10] * 10}, "examples": [{"a": [1, 2]}] * 3}
    with pytest.raises(RequestTooLarge, match=r"\(1000 values\) copied into each of the 3 examples needs 12000 bytes"):
        tfserving.decode_examples(doc, INPUTS, "classify", 11999)
    doc = {"context": {"a": 1.5}, "examples": [{"b": [0.0] * 1000}] * 3}  # a scalar counts one value
    with pytest.raises(RequestTooLarge, match=r"'a' \(1 values\) copied into each of the 3 examples needs 12 bytes"):
        tfserving.decode_examples(doc, INPUTS, "classify", 11)
