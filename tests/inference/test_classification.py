import numpy as np
import pytest

from inference.protocol.errors import InvalidInput
from inference.requests.classification import classify, requested_count


def test_batched_rows_with_labels():
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]], dtype=np.float32)
    out = classify(scores, 2, batched=True, labels=["cat", "dog"])
    assert out.shape == (2, 2)
    assert [[v.decode() for v in row] for row in out] == [
        ["0.700000:1:dog", "0.200000:2"],
        ["0.500000:0:cat", "0.250000:1:dog"],  # tie: the lower index first
    ]


def test_whole_tensor_indices_into_the_flattened_tensor():
    values = np.array([[3, 9], [7, 1]], dtype=np.int32)
    out = classify(values, 5, batched=False, labels=[])
    assert out.shape == (4,)
    assert [v.decode() for v in out] == ["9:1", "7:2", "3:0", "1:3"]


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_bad_counts(value):
    with pytest.raises(InvalidInput, match="positive integer"):
        requested_count("y", "FP32", {"classification": value})


def test_unclassifiable_types():
    assert requested_count("y", "FP32", {}) == 0
    with pytest.raises(InvalidInput, match="BYTES output cannot be classified"):
        requested_count("y", "BYTES", {"classification": 1})
