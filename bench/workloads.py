"""Transports (how a request is encoded on the wire and which loader drives
it) and Workloads (model x transport x concurrency).

A transport builds one fixed request for a model's sample input, and decodes
a response for the correctness check. The load generator sends the same
prebuilt body over and over. Adding a transport means a new Transport
subclass with its own ``loader`` name and a loader in loads.py.

Transports: ``rest-json`` and ``rest-binary`` (HTTP/1.1, wrk) and ``grpc``
(HTTP/2, h2load: one gRPC-framed ``ModelInferRequest`` built with
tritonclient's own protobuf module, the input in ``raw_input_contents``).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

from bench.models import BenchModel


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

    def build_request(self, model: BenchModel, x: np.ndarray) -> Request:
        raise NotImplementedError

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> np.ndarray:
        """The output tensor of a 200 response; raises ValueError when malformed."""
        raise NotImplementedError


def _infer_path(model: BenchModel) -> str:
    return f"/v2/models/{model.name}/infer"


def _find_output(header: dict, model: BenchModel) -> dict:
    for out in header.get("outputs", []):
        if out.get("name") == model.output_name:
            return out
    raise ValueError(f"the response has no output {model.output_name!r}: {header}")


class RestJson(Transport):
    """V2 REST, tensor data as JSON arrays both ways."""

    name = "rest-json"
    loader = "wrk"

    def build_request(self, model: BenchModel, x: np.ndarray) -> Request:
        payload = {
            "inputs": [
                {
                    "name": model.input_name,
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.reshape(-1).tolist(),
                }
            ]
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        return Request(_infer_path(model), body, {"Content-Type": "application/json"})

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> np.ndarray:
        out = _find_output(json.loads(body), model)
        return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


class RestBinary(Transport):
    """V2 REST with the binary tensor data extension: the input as raw bytes
    after the JSON header, outputs requested binary (``binary_data_output``)."""

    name = "rest-binary"
    loader = "wrk"

    def build_request(self, model: BenchModel, x: np.ndarray) -> Request:
        data = np.ascontiguousarray(x, dtype="<f4").tobytes()
        header = {
            "inputs": [
                {
                    "name": model.input_name,
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
        head = json.dumps(header, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
        return Request(_infer_path(model), head + data, headers)

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> np.ndarray:
        lowered = {k.lower(): v for k, v in headers.items()}
        length = lowered.get("inference-header-content-length")
        if length is None:
            raise ValueError("binary response without an Inference-Header-Content-Length header")
        header = json.loads(body[: int(length)])
        tail = body[int(length) :]
        offset = 0
        for out in header.get("outputs", []):
            size = int((out.get("parameters") or {}).get("binary_data_size", -1))
            if size < 0:
                raise ValueError(f"output {out.get('name')!r} is not binary: {out}")
            if out["name"] == model.output_name:
                if out.get("datatype") != "FP32":
                    raise ValueError(f"output datatype {out.get('datatype')!r}, expected FP32")
                return np.frombuffer(tail[offset : offset + size], dtype="<f4").reshape(out["shape"])
            offset += size
        raise ValueError(f"the response has no output {model.output_name!r}: {header}")


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
    """V2 gRPC ``ModelInfer`` as raw HTTP/2: the serialized request (input in
    ``raw_input_contents``, all outputs returned) in one gRPC frame, with
    ``content-type: application/grpc`` and ``te: trailers``."""

    name = "grpc"
    loader = "h2load"

    @staticmethod
    def pb():
        """tritonclient's protobuf module for the V2 gRPC messages (imported lazily:
        it registers the ``inference.*`` protobuf names process-wide)."""
        from tritonclient.grpc import service_pb2

        return service_pb2

    def message(self, model: BenchModel, x: np.ndarray) -> bytes:
        pb = self.pb()
        request = pb.ModelInferRequest(model_name=model.name)
        tensor = request.inputs.add(name=model.input_name, datatype="FP32")
        tensor.shape.extend(x.shape)
        request.raw_input_contents.append(np.ascontiguousarray(x, dtype="<f4").tobytes())
        return request.SerializeToString()

    def build_request(self, model: BenchModel, x: np.ndarray) -> Request:
        headers = {"content-type": "application/grpc", "te": "trailers"}
        return Request(GRPC_INFER_PATH, grpc_frame(self.message(model, x)), headers)

    def decode_message(self, model: BenchModel, message: bytes) -> np.ndarray:
        """The output tensor of a serialized ModelInferResponse (raw or typed contents)."""
        response = self.pb().ModelInferResponse.FromString(message)
        for index, out in enumerate(response.outputs):
            if out.name != model.output_name:
                continue
            if out.datatype != "FP32":
                raise ValueError(f"output datatype {out.datatype!r}, expected FP32")
            if response.raw_output_contents:
                data = np.frombuffer(response.raw_output_contents[index], dtype="<f4")
            else:
                data = np.asarray(out.contents.fp32_contents, dtype=np.float32)
            return data.reshape(list(out.shape))
        raise ValueError(f"the response has no output {model.output_name!r}: {[o.name for o in response.outputs]}")

    def decode_response(self, model: BenchModel, headers: dict[str, str], body: bytes) -> np.ndarray:
        return self.decode_message(model, grpc_unframe(body))


TRANSPORTS: dict[str, Transport] = {t.name: t for t in (RestJson(), RestBinary(), Grpc())}


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
