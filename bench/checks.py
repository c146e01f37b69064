"""Correctness before load: every server's answers must match in-process
ONNX Runtime (``numpy.allclose``) on every model and transport it is loaded
with, or it is not measured.

* REST (``rest-json``, ``rest-binary``): the exact prebuilt request the load
  generator sends, over urllib; HTTP 200 and the decoded output.
* gRPC: (1) a real gRPC client, ``tritonclient.grpc``, builds its own
  request; (2) the exact framed body h2load sends goes through Python's
  grpc library (``unary_unary`` with identity serializers: the frame prefix
  is checked, the message sent as is) a few times: grpc-status OK and the
  output. The size of the framed answer is returned: the h2load loader
  counts answers without that many message bytes as errors (h2load itself
  cannot see grpc-status).
"""

from __future__ import annotations

import urllib.error
import urllib.request

import numpy as np

from bench.models import BenchModel
from bench.targets import Target
from bench.workloads import Grpc, Transport, grpc_frame, grpc_unframe


class CheckFailed(RuntimeError):
    pass


def _compare(what: str, got: np.ndarray, expected: np.ndarray) -> None:
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
        raise CheckFailed(
            f"{what}: the output differs from in-process ONNX Runtime\n"
            f"  got      {got.shape} {got.ravel()[:8]}\n  expected {expected.shape} {expected.ravel()[:8]}"
        )


def check_rest(target: Target, transport: Transport, model: BenchModel, expected: np.ndarray) -> str:
    """One request, the one wrk sends; returns a description of what was checked."""
    request = transport.build_request(model, model.sample_input())
    http = urllib.request.Request(
        target.url_for(transport.name) + request.path, data=request.body, headers=request.headers, method="POST"
    )
    what = f"{target.name}/{model.name}/{transport.name}"
    try:
        with urllib.request.urlopen(http, timeout=60) as response:
            status, headers, body = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, dict(exc.headers), exc.read()
    except OSError as exc:
        raise CheckFailed(f"{what}: {exc}") from None
    if status != 200:
        raise CheckFailed(f"{what}: HTTP {status}: {body[:500]!r}")
    try:
        got = transport.decode_response(model, headers, body)
    except (ValueError, KeyError) as exc:
        raise CheckFailed(f"{what}: cannot decode the response ({exc}): {body[:300]!r}") from None
    _compare(what, got, expected)
    return f"output {list(got.shape)} matches onnxruntime"


def check_grpc(
    target: Target, transport: Grpc, model: BenchModel, expected: np.ndarray, raw_calls: int = 3
) -> tuple[str, int]:
    """tritonclient.grpc, then the exact h2load body through grpcio; returns
    (description, bytes of the framed answer)."""
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    what = f"{target.name}/{model.name}/{transport.name}"
    x = model.sample_input()
    client = grpcclient.InferenceServerClient(target.grpc_address)
    try:
        tensor = grpcclient.InferInput(model.input_name, list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = client.infer(model.name, [tensor], client_timeout=60)
        got = result.as_numpy(model.output_name)
    except InferenceServerException as exc:
        raise CheckFailed(f"{what}: tritonclient.grpc: {exc}") from None
    finally:
        client.close()
    if got is None:
        raise CheckFailed(f"{what}: tritonclient.grpc: no output {model.output_name!r}")
    _compare(f"{what} (tritonclient.grpc)", got, expected)

    body = transport.build_request(model, x).body
    try:
        message = grpc_unframe(body)
    except ValueError as exc:
        raise CheckFailed(f"{what}: the prebuilt body is not one gRPC frame: {exc}") from None
    sizes = []
    with grpc.insecure_channel(
        target.grpc_address,
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    ) as channel:
        call = channel.unary_unary(transport.build_request(model, x).path)  # identity (de)serializers
        for _ in range(raw_calls):
            try:
                answer, status = call.with_call(message, timeout=60)
            except grpc.RpcError as exc:
                raise CheckFailed(f"{what}: the h2load body: grpc-status {exc.code().name}: {exc.details()}") from None
            if status.code() != grpc.StatusCode.OK:
                raise CheckFailed(f"{what}: the h2load body: grpc-status {status.code().name}")
            try:
                got = transport.decode_message(model, answer)
            except (ValueError, KeyError) as exc:
                raise CheckFailed(f"{what}: the h2load body: cannot decode the answer ({exc})") from None
            _compare(f"{what} (h2load body via grpcio)", got, expected)
            sizes.append(len(grpc_frame(answer)))
    framed = min(sizes)
    return (
        f"tritonclient.grpc and {raw_calls} calls with the h2load body: grpc-status OK, "
        f"output {list(got.shape)} matches onnxruntime, answer {framed} B",
        framed,
    )
