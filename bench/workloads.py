"""Transports (how a request is encoded on the wire and which loader drives
it) and Workloads (model x transport x concurrency).

A transport builds one fixed request for a model's sample inputs (any
number, any V2 datatype: FP32, INT64, ...), and decodes a response's
outputs for the correctness check. The load generator sends the same
prebuilt body over and over. Adding a transport means a new Transport
subclass with its own ``loader`` name and a loader in loads.py.

Transports: ``rest-json`` and ``rest-binary`` (HTTP/1.1, wrk), ``grpc``
(HTTP/2, h2load: one gRPC-framed ``ModelInferRequest`` built with
tritonclient's own protobuf module, the inputs in ``raw_input_contents``)
and ``grpc-stream`` (gRPC ``ModelStreamInfer``, driven by Triton's
perf_analyzer ``--streaming``: bench/perf_analyzer.py).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

from bench.models import BenchModel, Tensor


@dataclass(frozen=True)
class Request:
    """One prebuilt request: method, path, headers and body bytes."""

    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    #: Bytes of response body every successful answer carries (gRPC: the
    #: framed ModelInferResponse, measured by the correctness check); 0 when
    #: unknown. h2load cannot see grpc-status, but a failed call has no
    #: message, so the loader counts answers short of this size as errors.
    response_bytes: int = 0


class Transport:
    """Base of the transports. ``name`` appears in the table."""

    name = ""
    loader = ""  # key in loads.LOADERS

    def build_request(self, model: BenchModel, inputs: dict[str, np.ndarray]) -> Request:
        """The request for ``inputs`` (input name -> array, every input of the model, in its order)."""
        raise NotImplementedError

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> dict[str, np.ndarray]:
        """Every output of the model from a 200 response; raises ValueError when malformed."""
        raise NotImplementedError


def _infer_path(model: BenchModel) -> str:
    return f"/v2/models/{model.name}/infer"


def _ordered(model: BenchModel, inputs: dict[str, np.ndarray]) -> list[tuple[Tensor, np.ndarray]]:
    """The model's inputs in its order, each converted to the declared little-endian dtype."""
    return [(spec, np.ascontiguousarray(inputs[spec.name], dtype=spec.dtype)) for spec in model.inputs]


def _check_datatype(spec: Tensor, datatype: str | None) -> None:
    if datatype != spec.datatype:
        raise ValueError(f"output {spec.name!r} has datatype {datatype!r}, expected {spec.datatype}")


def _outputs_by_name(header: dict, model: BenchModel) -> dict[str, dict]:
    found = {out.get("name"): out for out in header.get("outputs", [])}
    missing = [name for name in model.output_names if name not in found]
    if missing:
        raise ValueError(f"the response has no output {missing}: {str(header)[:300]}")
    return found


class RestJson(Transport):
    """V2 REST, tensor data as JSON arrays both ways."""

    name = "rest-json"
    loader = "wrk"

    def build_request(self, model: BenchModel, inputs: dict[str, np.ndarray]) -> Request:
        payload = {
            "inputs": [
                {"name": spec.name, "shape": list(x.shape), "datatype": spec.datatype, "data": x.reshape(-1).tolist()}
                for spec, x in _ordered(model, inputs)
            ]
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        return Request(_infer_path(model), body, {"Content-Type": "application/json"})

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> dict[str, np.ndarray]:
        found = _outputs_by_name(json.loads(body), model)
        result = {}
        for spec in model.outputs:
            out = found[spec.name]
            _check_datatype(spec, out.get("datatype"))
            result[spec.name] = np.asarray(out["data"], dtype=spec.dtype).reshape(out["shape"])
        return result


class RestBinary(Transport):
    """V2 REST with the binary tensor data extension: the inputs as raw
    little-endian bytes after the JSON header, in order, outputs requested
    binary (``binary_data_output``)."""

    name = "rest-binary"
    loader = "wrk"

    def build_request(self, model: BenchModel, inputs: dict[str, np.ndarray]) -> Request:
        tensors, blobs = [], []
        for spec, x in _ordered(model, inputs):
            data = x.tobytes()
            blobs.append(data)
            tensors.append(
                {
                    "name": spec.name,
                    "shape": list(x.shape),
                    "datatype": spec.datatype,
                    "parameters": {"binary_data_size": len(data)},
                }
            )
        header = {"inputs": tensors, "parameters": {"binary_data_output": True}}
        head = json.dumps(header, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
        return Request(_infer_path(model), head + b"".join(blobs), headers)

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> dict[str, np.ndarray]:
        lowered = {k.lower(): v for k, v in headers.items()}
        length = lowered.get("inference-header-content-length")
        if length is None:
            raise ValueError("binary response without an Inference-Header-Content-Length header")
        header = json.loads(body[: int(length)])
        tail = body[int(length) :]
        wanted = {spec.name: spec for spec in model.outputs}
        result = {}
        offset = 0
        for out in header.get("outputs", []):
            size = int((out.get("parameters") or {}).get("binary_data_size", -1))
            if size < 0:
                raise ValueError(f"output {out.get('name')!r} is not binary: {out}")
            spec = wanted.get(out.get("name"))
            if spec is not None:
                _check_datatype(spec, out.get("datatype"))
                result[spec.name] = np.frombuffer(tail[offset : offset + size], dtype=spec.dtype).reshape(out["shape"])
            offset += size
        if offset != len(tail):
            raise ValueError(f"the outputs' binary_data_size add up to {offset} B, the body has {len(tail)} B")
        missing = [name for name in wanted if name not in result]
        if missing:
            raise ValueError(f"the response has no output {missing}: {header}")
        return result


GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


def grpc_frame(message: bytes) -> bytes:
    """gRPC length-prefixed message: compressed flag 0, 4-byte big-endian length, message."""
    return struct.pack(">BI", 0, len(message)) + message


def grpc_unframe(body: bytes) -> bytes:
    """The single message of a gRPC-framed body; ValueError when malformed."""
    if len(body) < 5:
        raise ValueError(f"gRPC body of {len(body)} bytes has no message prefix")
    flag, length = struct.unpack(">BI", body[:5])
    if flag != 0:
        raise ValueError(f"compressed gRPC message (flag {flag})")
    if len(body) != 5 + length:
        raise ValueError(f"gRPC frame says {length} bytes, the body has {len(body) - 5}")
    return body[5:]


class Grpc(Transport):
    """V2 gRPC ``ModelInfer`` as raw HTTP/2: the serialized request (inputs
    in ``raw_input_contents``, in order; all outputs returned) in one gRPC
    frame, with ``content-type: application/grpc`` and ``te: trailers``."""

    name = "grpc"
    loader = "h2load"

    @staticmethod
    def pb():
        """tritonclient's protobuf module for the V2 gRPC messages (imported lazily:
        it registers the ``inference.*`` protobuf names process-wide)."""
        from tritonclient.grpc import service_pb2

        return service_pb2

    def message(self, model: BenchModel, inputs: dict[str, np.ndarray]) -> bytes:
        pb = self.pb()
        request = pb.ModelInferRequest(model_name=model.name)
        for spec, x in _ordered(model, inputs):
            tensor = request.inputs.add(name=spec.name, datatype=spec.datatype)
            tensor.shape.extend(x.shape)
            request.raw_input_contents.append(x.tobytes())
        return request.SerializeToString()

    def build_request(self, model: BenchModel, inputs: dict[str, np.ndarray]) -> Request:
        headers = {"content-type": "application/grpc", "te": "trailers"}
        return Request(GRPC_INFER_PATH, grpc_frame(self.message(model, inputs)), headers)

    def decode_message(self, model: BenchModel, message: bytes) -> dict[str, np.ndarray]:
        """Every output of the model from a serialized ModelInferResponse (raw or typed contents)."""
        response = self.pb().ModelInferResponse.FromString(message)
        wanted = {spec.name: spec for spec in model.outputs}
        result = {}
        for index, out in enumerate(response.outputs):
            spec = wanted.get(out.name)
            if spec is None:
                continue
            _check_datatype(spec, out.datatype)
            if response.raw_output_contents:
                data = np.frombuffer(response.raw_output_contents[index], dtype=spec.dtype)
            else:
                typed = getattr(out.contents, spec.grpc_contents)
                data = np.asarray(typed, dtype=spec.dtype)
            result[spec.name] = data.reshape(list(out.shape))
        missing = [name for name in wanted if name not in result]
        if missing:
            raise ValueError(f"the response has no output {missing}: {[o.name for o in response.outputs]}")
        return result

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> dict[str, np.ndarray]:
        return self.decode_message(model, grpc_unframe(body))


#: Arguments of a perf_analyzer "request" (bench/perf_analyzer.py), carried as its headers.
PA_MODEL, PA_SHAPE = "x-model", "x-shape-"


class GrpcStream(Transport):
    """gRPC ``ModelStreamInfer`` (Triton's bidirectional streaming): each
    client keeps a stream open and sends its requests on it, one in flight
    at a time. perf_analyzer sends zero-filled inputs of the sample inputs'
    shapes (the "request" carries the model name and the shapes; the
    correctness check sends the sample inputs on a stream itself)."""

    name = "grpc-stream"
    loader = "perf_analyzer"

    def build_request(self, model: BenchModel, inputs: dict[str, np.ndarray]) -> Request:
        headers = {PA_MODEL: model.name}
        headers.update({f"{PA_SHAPE}{spec.name}": ",".join(map(str, x.shape)) for spec, x in _ordered(model, inputs)})
        return Request(f"/{model.name}", b"", headers)

    def decode_message(self, model: BenchModel, message: bytes) -> dict[str, np.ndarray]:
        return Grpc().decode_message(model, message)


TRANSPORTS: dict[str, Transport] = {t.name: t for t in (RestJson(), RestBinary(), Grpc(), GrpcStream())}


@dataclass(frozen=True)
class Workload:
    """A model sent over a transport by ``concurrency`` connections."""

    model: BenchModel
    transport: Transport
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.model.name}/{self.transport.name}/c{self.concurrency}"


def workloads(models: list[BenchModel], transports: list[Transport], concurrencies: list[int]) -> list[Workload]:
    """Every model x transport x concurrency, in that order (the order of the table)."""
    return [Workload(m, t, c) for m in models for t in transports for c in concurrencies]
