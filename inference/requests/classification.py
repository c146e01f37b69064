"""Triton's classification extension: an output requested with the parameter
``classification: N`` comes back as its top N entries, as BYTES strings
``"<value>:<index>"`` or ``"<value>:<index>:<label>"``.

A model with ``max_batch_size > 0`` is classified per batch row (result shape
``[batch, min(N, row size)]``); with ``max_batch_size == 0`` the whole output
tensor is one row (shape ``[min(N, size)]``, indices into the flattened
tensor). Values print as C's ``std::to_string`` does (floats with six
decimals). Ties keep the lower index first.
"""

from __future__ import annotations

import numpy as np

from inference.protocol.errors import InvalidInput

CLASSIFIABLE = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")
)


def requested_count(name: str, datatype: str, parameters: dict) -> int:
    """N from an output's ``classification`` parameter (0 when absent).

    Raises InvalidInput for a value that is not a positive integer or for
    an output whose datatype cannot be classified (BOOL, BYTES).
    """
    value = parameters.get("classification")
    if value is None:
        return 0
    if type(value) is not int or value < 1:
        raise InvalidInput(f"output '{name}': classification must be a positive integer, got {value!r}")
    if datatype not in CLASSIFIABLE:
        raise InvalidInput(f"output '{name}': a {datatype} output cannot be classified")
    return value


def classify(array: np.ndarray, count: int, batched: bool, labels: list[str]) -> np.ndarray:
    """Top ``count`` entries of ``array`` as an object array of bytes."""
    rows = array.reshape(array.shape[0], -1) if batched and array.ndim > 0 else array.reshape(1, -1)
    k = min(count, rows.shape[1])
    floats = rows.dtype.kind == "f"
    out = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            value = f"{float(row[index]):f}" if floats else str(int(row[index]))
            text = f"{value}:{index}"
            if index < len(labels):
                text += f":{labels[index]}"
            out[r, c] = text.encode("utf-8")
    return out if batched and array.ndim > 0 else out.reshape(k)
