"""The one datatype table of the Open Inference Protocol (V2).

Every other mapping (numpy dtype, ONNX Runtime type string, ONNX ``TensorProto``
element type, Triton model-config ``TYPE_*``, TensorFlow ``DT_*``) is derived
from :data:`DATATYPES` so that the names cannot drift apart.

Spec: OIP REST "Tensor Data Types"
(https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md#tensor-data-types)
and gRPC "Tensor Data Types"
(https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md).
``BYTES`` elements are variable length (at most 2**32 - 1 bytes); their
in-memory form is a numpy ``object`` array of ``bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Datatype:
    """One row of the datatype table.

    ``itemsize`` is the element size in bytes on the wire (0 for BYTES,
    whose elements carry a 4-byte little-endian length prefix instead).
    ``numpy`` is the little-endian numpy dtype used for binary views.
    """

    name: str
    numpy: np.dtype
    itemsize: int
    onnx: int  # onnx.TensorProto.DataType value
    ort: str  # ONNX Runtime NodeArg.type
    triton: str  # Triton model configuration DataType
    tf: str  # TensorFlow DataType enum name
    contents: str  # gRPC InferTensorContents field ("" for FP16: raw contents only)

    @property
    def is_bytes(self) -> bool:
        return self.itemsize == 0


def _dt(spec: str) -> np.dtype:
    return np.dtype(spec)


DATATYPES: tuple[Datatype, ...] = (
    Datatype("BOOL", _dt("?"), 1, 9, "tensor(bool)", "TYPE_BOOL", "DT_BOOL", "bool_contents"),
    Datatype("UINT8", _dt("u1"), 1, 2, "tensor(uint8)", "TYPE_UINT8", "DT_UINT8", "uint_contents"),
    Datatype("UINT16", _dt("<u2"), 2, 4, "tensor(uint16)", "TYPE_UINT16", "DT_UINT16", "uint_contents"),
    Datatype("UINT32", _dt("<u4"), 4, 12, "tensor(uint32)", "TYPE_UINT32", "DT_UINT32", "uint_contents"),
    Datatype("UINT64", _dt("<u8"), 8, 13, "tensor(uint64)", "TYPE_UINT64", "DT_UINT64", "uint64_contents"),
    Datatype("INT8", _dt("i1"), 1, 3, "tensor(int8)", "TYPE_INT8", "DT_INT8", "int_contents"),
    Datatype("INT16", _dt("<i2"), 2, 5, "tensor(int16)", "TYPE_INT16", "DT_INT16", "int_contents"),
    Datatype("INT32", _dt("<i4"), 4, 6, "tensor(int32)", "TYPE_INT32", "DT_INT32", "int_contents"),
    Datatype("INT64", _dt("<i8"), 8, 7, "tensor(int64)", "TYPE_INT64", "DT_INT64", "int64_contents"),
    Datatype("FP16", _dt("<f2"), 2, 10, "tensor(float16)", "TYPE_FP16", "DT_HALF", ""),
    Datatype("FP32", _dt("<f4"), 4, 1, "tensor(float)", "TYPE_FP32", "DT_FLOAT", "fp32_contents"),
    Datatype("FP64", _dt("<f8"), 8, 11, "tensor(double)", "TYPE_FP64", "DT_DOUBLE", "fp64_contents"),
    Datatype("BYTES", _dt("O"), 0, 8, "tensor(string)", "TYPE_STRING", "DT_STRING", "bytes_contents"),
)

BY_NAME: dict[str, Datatype] = {d.name: d for d in DATATYPES}
BY_ORT: dict[str, Datatype] = {d.ort: d for d in DATATYPES}
BY_ONNX: dict[int, Datatype] = {d.onnx: d for d in DATATYPES}
BY_TRITON: dict[str, Datatype] = {d.triton: d for d in DATATYPES}
#: numpy dtype -> Datatype; native-order and str dtypes map too (outputs of ORT).
BY_NUMPY: dict[np.dtype, Datatype] = {}
for _d in DATATYPES:
    BY_NUMPY[_d.numpy] = _d
    BY_NUMPY[_d.numpy.newbyteorder("=")] = _d
BY_NUMPY[np.dtype("U")] = BY_NAME["BYTES"]
BY_NUMPY[np.dtype("S")] = BY_NAME["BYTES"]

BYTES = BY_NAME["BYTES"]
BOOL = BY_NAME["BOOL"]
FP16 = BY_NAME["FP16"]


def from_numpy(dtype: np.dtype) -> Datatype:
    """Datatype for a numpy dtype; ``str``/``bytes`` kinds map to BYTES.

    Raises KeyError for dtypes outside the table (e.g. complex).
    """
    if dtype.kind in "OUS":
        return BYTES
    return BY_NUMPY[dtype]
