"""The response cache's key and its byte budget (unit)."""

from __future__ import annotations

import numpy as np
import pytest

from inference.protocol.types import RequestInput
from inference.response_cache import ResponseCache, request_key


def _input(name="x", datatype="FP32", shape=(2, 2), data=None):
    data = np.arange(4, dtype=np.float32).reshape(shape) if data is None else data
    return RequestInput(name, datatype, tuple(shape), data)


def _key(**changes):
    request = {"model": "m", "version": 1, "sha256": "a" * 64, "inputs": [_input()], "output_names": ["y"]}
    request.update(changes)
    return request_key(**request)


def test_the_key_covers_everything_that_decides_the_answer():
    base = _key()
    assert _key() == base and len(base) == 32
    variants = {
        "model": _key(model="m2"),
        "version": _key(version=2),
        "artifact": _key(sha256="b" * 64),
        "input name": _key(inputs=[_input(name="z")]),
        "datatype": _key(inputs=[_input(datatype="INT32", data=np.arange(4, dtype=np.int32).reshape(2, 2))]),
        "shape (same bytes)": _key(inputs=[_input(shape=(4, 1), data=np.arange(4, dtype=np.float32).reshape(4, 1))]),
        "bytes": _key(inputs=[_input(data=np.arange(1, 5, dtype=np.float32).reshape(2, 2))]),
        "outputs": _key(output_names=["y", "p"]),
    }
    assert len({base, *variants.values()}) == len(variants) + 1, variants
    # Input order and output order do not matter; BYTES elements are delimited.
    two = [_input("a"), _input("b")]
    assert _key(inputs=two) == _key(inputs=two[::-1])
    assert _key(output_names=["y", "p"]) == _key(output_names=["p", "y"])
    words = [np.array([b"ab", b"c"], dtype=object), np.array([b"a", b"bc"], dtype=object)]
    keys = {_key(inputs=[RequestInput("t", "BYTES", (2,), w)]) for w in words}
    assert len(keys) == 2


def test_a_noncontiguous_input_hashes_as_its_values():
    data = np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2]
    assert _key(inputs=[_input(data=data)]) == _key(inputs=[_input(data=np.ascontiguousarray(data))])


def test_least_recently_used_answers_go_first_under_the_budget():
    cache = ResponseCache(budget_bytes=8 * (400 + 256))
    answers = {i: (np.full(100, i, dtype=np.float32),) for i in range(12)}  # 400 B + 256 each
    for i in range(8):
        assert cache.put(bytes([i]), answers[i])
    assert len(cache) == 8 and cache.used == 8 * 656
    cache.get(bytes([0]))  # 0 is the most recent now
    cache.put(bytes([8]), answers[8])
    assert cache.get(bytes([1])) is None and cache.evictions == 1  # 1 was the least recent
    kept = cache.get(bytes([0]))
    np.testing.assert_array_equal(kept[0], answers[0][0])
    with pytest.raises(ValueError):
        kept[0][0] = 5  # read-only: nobody changes a cached answer
    answers[8][0][:] = -1  # the caller's array changing later changes nothing
    assert cache.get(bytes([8]))[0][0] == 8


def test_an_answer_over_an_eighth_of_the_budget_is_not_kept():
    cache = ResponseCache(budget_bytes=8000)
    assert not cache.put(b"big", (np.zeros(1000, dtype=np.float32),))
    assert cache.get(b"big") is None and cache.used == 0
