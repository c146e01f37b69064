"""The tests' own table of V2 datatypes (OIP REST "Tensor Data Types":
https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md) and the
little-endian numpy dtypes their binary form uses (https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md), written out
here so that codec tests do not check the codecs against the codecs' table."""

#: V2 datatype -> little-endian numpy dtype string; BYTES holds Python objects.
LE = {
    "BOOL": "|b1",
    "UINT8": "|u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "|i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
    "BYTES": "O",
}
