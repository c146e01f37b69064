"""Correctness before load: every server's answers must match in-process
ONNX Runtime (``numpy.allclose``, every output, same dtype and shape) on
every model and transport it is loaded with, or it is not measured. Inputs
are the model's sample inputs (any number, any datatype).

* REST (``rest-json``, ``rest-binary``): the exact prebuilt request the load
  generator sends, over urllib; HTTP 200 and the decoded output.
* gRPC: (1) a real gRPC client, ``tritonclient.grpc``, builds its own
  request; (2) the exact framed body h2load sends goes through Python's
  grpc library (``unary_unary`` with identity serializers: the frame prefix
  is checked, the message sent as is) a few times: grpc-status OK and the
  output. The size of the framed answer is returned: the h2load loader
  counts answers without that many message bytes as errors (h2load itself
  cannot see grpc-status).
* gRPC streaming: ``tritonclient.grpc``'s ``start_stream`` sends the sample
  inputs three times on one stream; every answer must carry its id and the
  output.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import numpy as np

from bench.models import BenchModel
from bench.targets import Target
from bench.workloads import Grpc, GrpcStream, Transport, grpc_frame, grpc_unframe


class CheckFailed(RuntimeError):
    pass


def _compare(what: str, got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    for name, want in expected.items():
        value = got.get(name)
        if value is None:
            raise CheckFailed(f"{what}: no output {name!r}")
        if value.shape != want.shape or value.dtype != want.dtype or not np.allclose(value, want, rtol=1e-5, atol=1e-5):
            raise CheckFailed(
                f"{what}: output {name!r} differs from in-process ONNX Runtime\n"
                f"  got      {value.dtype} {value.shape} {value.ravel()[:8]}\n"
                f"  expected {want.dtype} {want.shape} {want.ravel()[:8]}"
            )


def _shapes(got: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{name} {list(value.shape)}" for name, value in got.items())


def check_rest(
    target: Target,
    transport: Transport,
    model: BenchModel,
    inputs: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
) -> str:
    """One request, the one wrk sends; returns a description of what was checked."""
    request = transport.build_request(model, inputs)
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
    return f"output {_shapes(got)} matches onnxruntime"


def _grpc_inputs(grpcclient, model: BenchModel, inputs: dict[str, np.ndarray]) -> list:
    """tritonclient.grpc InferInputs of the sample inputs, in the model's order."""
    tensors = []
    for spec in model.inputs:
        tensor = grpcclient.InferInput(spec.name, list(inputs[spec.name].shape), spec.datatype)
        tensor.set_data_from_numpy(np.ascontiguousarray(inputs[spec.name], dtype=spec.dtype))
        tensors.append(tensor)
    return tensors


def check_grpc(
    target: Target,
    transport: Grpc,
    model: BenchModel,
    inputs: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    raw_calls: int = 3,
) -> tuple[str, int]:
    """tritonclient.grpc, then the exact h2load body through grpcio; returns
    (description, bytes of the framed answer)."""
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    what = f"{target.name}/{model.name}/{transport.name}"
    client = grpcclient.InferenceServerClient(target.grpc_address)
    try:
        result = client.infer(model.name, _grpc_inputs(grpcclient, model, inputs), client_timeout=60)
        got = {name: value for name in model.output_names if (value := result.as_numpy(name)) is not None}
    except InferenceServerException as exc:
        raise CheckFailed(f"{what}: tritonclient.grpc: {exc}") from None
    finally:
        client.close()
    _compare(f"{what} (tritonclient.grpc)", got, expected)

    request = transport.build_request(model, inputs)
    try:
        message = grpc_unframe(request.body)
    except ValueError as exc:
        raise CheckFailed(f"{what}: the prebuilt body is not one gRPC frame: {exc}") from None
    sizes = []
    with grpc.insecure_channel(
        target.grpc_address,
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    ) as channel:
        call = channel.unary_unary(request.path)  # identity (de)serializers
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
    if max(sizes) != framed:
        raise CheckFailed(f"{what}: answers of different sizes {sizes}; the load could not tell failed calls")
    return (
        f"tritonclient.grpc and {raw_calls} calls with the h2load body: grpc-status OK, "
        f"output {_shapes(got)} matches onnxruntime, answer {framed} B",
        framed,
    )


def check_grpc_stream(
    target: Target,
    transport: GrpcStream,
    model: BenchModel,
    inputs: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    requests: int = 3,
) -> str:
    """``requests`` inferences on one ModelStreamInfer stream (tritonclient.grpc)."""
    import queue

    import tritonclient.grpc as grpcclient

    what = f"{target.name}/{model.name}/{transport.name}"
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(target.grpc_address)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for i in range(requests):
            client.async_stream_infer(model.name, _grpc_inputs(grpcclient, model, inputs), request_id=str(i))
        for i in range(requests):
            try:
                result, error = answers.get(timeout=60)
            except queue.Empty:
                raise CheckFailed(f"{what}: no answer on the stream in 60 s") from None
            if error is not None:
                raise CheckFailed(f"{what}: {error}")
            if result.get_response().id != str(i):
                raise CheckFailed(f"{what}: answer {i} has id {result.get_response().id!r}")
            got = {name: value for name in model.output_names if (value := result.as_numpy(name)) is not None}
            _compare(what, got, expected)
    finally:
        client.stop_stream()
        client.close()
    return f"{requests} requests on one stream (tritonclient.grpc): output {_shapes(got)} matches onnxruntime"
