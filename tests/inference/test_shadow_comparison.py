"""The arithmetic of shadow comparisons (inference/shadow/comparison.py), each
figure computed here with numpy over the same arrays: exact matches
(bitwise), max and mean absolute difference over every element of every
request, argmax agreement per row of a classifier's output; shape and
dtype mismatches, non-finite differences, non-numeric outputs; sums that
add up across cells (minutes, processes) and through their JSON form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inference.shadow.comparison import OutputComparison, compare


def _pairs(seed: int = 3, requests: int = 40):
    """Classifier-like [batch, 5] float32 outputs, live and shadow: some requests equal, some nudged."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(requests):
        live = rng.normal(size=(int(rng.integers(1, 4)), 5)).astype(np.float32)
        shadow = live.copy() if i % 3 == 0 else (live + rng.normal(scale=0.5, size=live.shape)).astype(np.float32)
        pairs.append((live, shadow))
    return pairs


def test_exact_matches_differences_and_argmax_agreement_equal_numpys():
    pairs = _pairs()
    counts = OutputComparison()
    for live, shadow in pairs:
        counts.add(live, shadow)
    diffs = np.concatenate([np.abs(a.astype(np.float64) - b.astype(np.float64)).ravel() for a, b in pairs])
    exact = sum(a.tobytes() == b.tobytes() for a, b in pairs)
    argmax_live = np.concatenate([a.argmax(axis=1) for a, _ in pairs])
    argmax_shadow = np.concatenate([b.argmax(axis=1) for _, b in pairs])
    summary = counts.summary()
    assert summary["compared"] == len(pairs) and summary["exact_matches"] == exact == 14
    assert summary["exact_match_share"] == exact / len(pairs)
    assert summary["elements"] == diffs.size
    assert summary["max_abs_diff"] == diffs.max()
    assert summary["mean_abs_diff"] == pytest.approx(diffs.mean(), rel=1e-12)
    assert summary["argmax_rows"] == argmax_live.size
    agreement = np.mean(argmax_live == argmax_shadow)
    assert summary["argmax_agreement"] == pytest.approx(agreement, rel=1e-12) and 0.3 < agreement < 1.0
    assert summary["mismatched_shapes"] == summary["nonfinite_diffs"] == 0


def test_cells_add_up_through_json_as_one_would():
    pairs = _pairs(seed=8)
    whole, first, second = OutputComparison(), OutputComparison(), OutputComparison()
    for i, (live, shadow) in enumerate(pairs):
        whole.add(live, shadow)
        (first if i < 17 else second).add(live, shadow)
    stored = [OutputComparison.from_dict(json.loads(json.dumps(c.as_dict()))) for c in (first, second)]
    merged = stored[0].merge(stored[1]).summary()
    expected = whole.summary()
    assert merged.pop("mean_abs_diff") == pytest.approx(expected.pop("mean_abs_diff"), rel=1e-12)
    assert merged == expected


def test_mismatched_shapes_and_dtypes_are_counted_not_diffed():
    counts = OutputComparison()
    counts.add(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    counts.add(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float64))
    counts.add(np.ones((2, 3), np.float32), np.full((2, 3), 1.5, np.float32))
    summary = counts.summary()
    assert (summary["compared"], summary["mismatched_shapes"], summary["exact_matches"]) == (3, 2, 0)
    assert (summary["elements"], summary["max_abs_diff"], summary["mean_abs_diff"]) == (6, 0.5, 0.5)
    assert summary["argmax_rows"] == 2 and summary["argmax_agreement"] == 1.0  # all-equal rows: the first index


def test_non_finite_differences_are_left_out_and_counted():
    live = np.array([[1.0, np.nan, np.inf, 2.0]], np.float32)
    shadow = np.array([[1.5, 0.0, np.inf, 2.0]], np.float32)  # inf - inf is NaN
    counts = OutputComparison()
    counts.add(live, shadow)
    with np.errstate(invalid="ignore"):
        finite = np.abs(live.astype(np.float64) - shadow)[np.isfinite(live - shadow)]
    summary = counts.summary()
    assert summary["nonfinite_diffs"] == 2 and summary["elements"] == finite.size == 2
    assert summary["max_abs_diff"] == finite.max() == 0.5 and summary["mean_abs_diff"] == finite.mean()
    nan = np.array([np.nan], np.float32)
    same = OutputComparison()
    same.add(nan, nan.copy())  # the same NaN bits: an exact match
    assert same.exact == 1


def test_integers_booleans_and_strings():
    counts = OutputComparison()
    counts.add(np.array([3, -7, 2**40], np.int64), np.array([5, -7, 2**40], np.int64))
    assert (counts.exact, counts.elements, counts.max_abs, counts.abs_sum, counts.rows) == (0, 3, 2.0, 2.0, 0)
    flags = OutputComparison()
    flags.add(np.array([True, False]), np.array([True, True]))
    assert (flags.max_abs, flags.abs_sum) == (1.0, 1.0)
    text = OutputComparison()
    text.add(np.array([b"a", b"b"], dtype=object), np.array([b"a", b"b"], dtype=object))
    text.add(np.array([b"a", b"b"], dtype=object), np.array([b"a", b"c"], dtype=object))
    assert (text.compared, text.exact, text.elements) == (2, 1, 0)


def test_views_and_empty_arrays():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    counts = OutputComparison()
    counts.add(base.T, base.T.copy())  # a non-contiguous view equal to its copy
    counts.add(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    counts.add(np.zeros((0, 4), np.float32), np.ones((0, 4), np.float32))  # no bytes: equal
    assert (counts.compared, counts.exact, counts.elements) == (3, 3, 12)


def test_compare_counts_the_outputs_both_answers_have():
    into: dict[str, OutputComparison] = {}
    live = {"y": np.ones(2, np.float32), "only_live": np.ones(1, np.float32)}
    compare(live, {"y": np.full(2, 3.0, np.float32), "only_shadow": np.ones(1, np.float32)}, into)
    compare(live, {"y": np.ones(2, np.float32)}, into)
    assert set(into) == {"y"} and into["y"].compared == 2 and into["y"].exact == 1 and into["y"].max_abs == 2.0
