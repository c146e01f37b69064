"""Triton's ``ModelStreamInfer``: many inference requests over one
bidirectional gRPC stream.

Behaviour, as Triton's server (``src/grpc/stream_infer_handler.cc``) has it
for models that are not decoupled (this server has none):

- every request read from the stream is answered by one
  ``ModelStreamInferResponse``, in the order the requests arrived (Triton
  queues the responses of a non-decoupled model in request order);
- a request that fails is answered by ``error_message`` (the message a
  unary call's status would carry) and an ``infer_response`` holding only
  its ``id``, ``model_name`` and ``model_version``; the stream goes on;
- every answer carries the response parameter ``triton_final_response:
  true`` (one response per request);
- with the call metadata ``triton_grpc_error: true`` the first error ends
  the stream instead, with that error's status (Triton's opt-in mode);
- the stream ends with OK once the client has closed its side and every
  request is answered.

Each request goes through the path of a unary ``ModelInfer`` (the
servicer's ``infer_one``): the call's ``authorization`` metadata admits it
(token, team rate limits, in-flight caps) before any of its tensors is
decoded, its ``timeout`` parameter bounds it, a request naming no version is
routed by the model's traffic split, and it is observed in metrics and the
request log as a unary call is. Requests are read ahead while earlier ones
run, up to :data:`WINDOW` per stream: they may run concurrently (a
dynamically batched model batches them together) and are answered in order.
"""

from __future__ import annotations

import asyncio
import contextlib

from inference.grpc.proto import oip_pb2 as pb
from inference.protocol.errors import InferenceError

#: Requests of one stream read ahead and in flight at once; beyond it the
#: stream is not read (gRPC's flow control then holds the client back).
WINDOW = 16

_END = object()


def new_answer() -> pb.ModelStreamInferResponse:
    """An empty answer whose ``infer_response`` the servicer fills in place
    (no copy of the outputs), marked as the request's final response."""
    answer = pb.ModelStreamInferResponse()
    answer.infer_response.parameters["triton_final_response"].bool_param = True
    return answer


def error_answer(request: pb.ModelInferRequest, error: InferenceError) -> pb.ModelStreamInferResponse:
    """The answer to a request that failed: its error's message and the
    request's id, model name and version (so that the client knows which
    request failed); an error after which a retry can succeed (UNAVAILABLE,
    a rate limit) says when, as a unary call's ``retry-after`` metadata."""
    message = error.message
    if error.retry_after is not None:
        message = f"{message} (retry after {error.retry_after_header} s)"
    answer = new_answer()
    answer.error_message = message
    response = answer.infer_response
    response.id, response.model_name, response.model_version = request.id, request.model_name, request.model_version
    return answer


def _grpc_error_mode(context) -> bool:
    """Triton's ``triton_grpc_error: true`` call metadata: the first error ends the stream."""
    return any(key == "triton_grpc_error" and value == "true" for key, value in context.invocation_metadata())


async def answers(infer_one, requests, context, abort):
    """Answer every request of ``requests`` (an async iterator of
    ModelInferRequest), in order: an async generator of
    ModelStreamInferResponse. ``infer_one(request, context, streamed=True)``
    returns (answer, None) or (None, error); ``abort(context, error)`` ends
    the call with the error's status (``triton_grpc_error`` mode).

    A reader task reads ahead up to WINDOW requests. A request that is alone
    in the window runs here, inline (the usual case: one request in flight
    per stream); several that are waiting run together as tasks, answered in
    order."""
    window: asyncio.Queue = asyncio.Queue(maxsize=WINDOW)
    broken: list[BaseException] = []

    async def answer(request):
        result, error = await infer_one(request, context, streamed=True)
        return result if error is None else error_answer(request, error), error

    async def read():
        try:
            async for request in requests:
                await window.put(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream broke: answer what was read, then fail the call
            broken.append(exc)
        await window.put(_END)

    reader = asyncio.ensure_future(read())
    stop_on_error = _grpc_error_mode(context)
    running: list[asyncio.Future] = []
    try:
        ended = False
        while not ended:
            request = await window.get()
            if request is _END:
                break
            if window.empty():
                outcomes = [await answer(request)]
            else:
                batch = [request]
                while not window.empty() and not ended:
                    item = window.get_nowait()
                    if item is _END:
                        ended = True
                    else:
                        batch.append(item)
                running = [asyncio.ensure_future(answer(r)) for r in batch]
                outcomes = running
            for outcome in outcomes:
                result, error = (await outcome) if isinstance(outcome, asyncio.Future) else outcome
                if error is not None and stop_on_error:
                    await abort(context, error)
                yield result
            running = []
        if broken:
            raise broken[0]
    finally:
        reader.cancel()
        for task in running:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
