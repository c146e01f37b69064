"""The GRPCInferenceService servicer (grpc.aio): decode, call the DataPlane,
encode.

Each method is a few lines; one decorator (:func:`rpc`) maps protocol errors
to gRPC statuses with the messages REST gives (each error's
``grpc_status``: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, DEADLINE_EXCEEDED,
UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED); a dependency's outage
met anywhere is UNAVAILABLE (the ``outage_error`` port); other unexpected
errors are logged and INTERNAL. Calls that may touch the database (statistics, load and
unload, listing with tokens, trace and log settings) run in a thread: Django forbids queries on the
event loop. An inference is admitted (token, rate limits) before any of its
tensors is decoded; a large request is decoded in a thread
(:func:`converters.decodes_inline`); inference runs inline when it cannot
block (in process, no batching) and in a thread otherwise
(:meth:`DataPlane.infer_async`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import grpc

from inference import ports
from inference.admission.auth import bearer_token
from inference.extensions.repository import EncodedIndex
from inference.grpc import converters, streaming
from inference.grpc.proto import oip_pb2 as pb
from inference.grpc.proto import oip_pb2_grpc
from inference.observability import metrics as observability
from inference.observability import rollups, tracing
from inference.protocol.errors import InferenceError, Unsupported

logger = logging.getLogger(__name__)


def status_of(exc: InferenceError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, exc.grpc_status, grpc.StatusCode.INTERNAL)


async def abort(context, exc: InferenceError):
    """Abort the call with the error's status and message (an error after
    which a retry can succeed, UNAVAILABLE or a rate limit's
    RESOURCE_EXHAUSTED, also with ``retry-after`` trailing metadata, in
    seconds, as REST's ``Retry-After``)."""
    trailing = (("retry-after", exc.retry_after_header),) if exc.retry_after is not None else ()
    await context.abort(status_of(exc), exc.message, trailing_metadata=trailing)


def _unexpected(exc: Exception, where: str) -> InferenceError:
    """The error to answer for an exception no handler expected: a
    dependency's outage is UNAVAILABLE with ``retry-after``
    (:func:`inference.ports.outage_error`), anything else INTERNAL, logged."""
    error = ports.outage_error(exc)
    if error is not None:
        logger.warning("%s answered UNAVAILABLE: %s: %s", where, type(exc).__name__, exc)
        return error
    logger.exception("unexpected error in %s", where)
    return InferenceError("internal error; see the server log")


def rpc(method):
    """Await the handler; protocol errors become statuses, a dependency's
    outage UNAVAILABLE, anything else INTERNAL (:func:`_unexpected`)."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        try:
            return await method(self, request, context)
        except InferenceError as exc:
            await abort(context, exc)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort(context, _unexpected(exc, method.__name__))

    return wrapper


def _bearer(context) -> str | None:
    """The bearer token of the call's ``authorization`` metadata, if any."""
    for key, value in context.invocation_metadata():
        if key == "authorization":
            return bearer_token(value)
    return None


def _index_response(entries) -> pb.RepositoryIndexResponse:
    response = pb.RepositoryIndexResponse()
    for entry in entries:
        response.models.add(name=entry.name, version=entry.version, state=entry.state, reason=entry.reason)
    return response


def _one_repository(request) -> None:
    if request.repository_name:
        raise Unsupported("repository_name is not supported: this server has one model repository")


class InferenceServicer(oip_pb2_grpc.GRPCInferenceServiceServicer):
    """Thin adapter from ``inference.GRPCInferenceService`` to a DataPlane."""

    def __init__(self, dataplane, extensions, max_request_bytes: int):
        self.dataplane = dataplane
        self.extensions = extensions  # Triton's other extensions (inference/extensions)
        self.max_request_bytes = max_request_bytes
        self._index = EncodedIndex()  # the shared repository index's response message

    @rpc
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=self.dataplane.live())

    @rpc
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    @rpc
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=self.dataplane.model_ready(request.name, request.version or None))

    @rpc
    async def ServerMetadata(self, request, context):
        meta = self.dataplane.server_metadata()
        return pb.ServerMetadataResponse(name=meta.name, version=meta.version, extensions=list(meta.extensions))

    @rpc
    async def ModelMetadata(self, request, context):
        return converters.model_metadata_to_proto(self.dataplane.model_metadata(request.name, request.version or None))

    async def ModelInfer(self, request, context):
        """Inference, observed in metrics and the request log, and traced
        (when tracing is on) under the client's ``traceparent`` metadata."""
        response, error = await self.infer_one(request, context)
        if error is not None:
            await abort(context, error)
        return response

    async def ModelStreamInfer(self, request_iterator, context):
        """Triton's bidirectional stream: each request is answered, in order,
        by a ModelStreamInferResponse (its response, or its error, after
        which the stream goes on); see :mod:`inference.grpc.streaming`."""
        async for answer in streaming.answers(self.infer_one, request_iterator, context, abort):
            yield answer

    async def infer_one(self, request, context, streamed: bool = False) -> tuple:
        """One inference request of a call (unary, or one message of a stream
        when ``streamed``): (its ModelInferResponse, or with ``streamed`` its
        ModelStreamInferResponse, and None) or (None, its InferenceError);
        admitted with the call's token, observed in metrics and the request
        log, traced."""
        if tracing.ENABLED:
            metadata = dict(context.invocation_metadata())
            span = tracing.inference_span(
                "grpc", request.model_name, metadata.get("traceparent"), metadata.get("tracestate")
            )
            with span:
                return await self._infer_observed(request, _bearer(context), streamed)
        return await self._infer_observed(request, _bearer(context), streamed)

    async def _infer_observed(self, request, token, streamed: bool):
        started = time.perf_counter()
        rollups.TRANSPORT.set("grpc")  # the charts count the request under its transport
        outcome, version, response, received, error, answer = "internal", "", None, 0, None, None
        try:
            admission = await self.dataplane.admit_async(token, request.model_name)
            async with admission:  # the caller is admitted: its tensors may now be decoded
                if converters.decodes_inline(request):  # small: on the loop, no span object while untraced
                    infer_request, received = tracing.in_step(
                        "decode", converters.infer_request_from_proto, request, self.max_request_bytes
                    )
                else:  # large: in a thread
                    with tracing.step("decode"):
                        infer_request, received = await asyncio.to_thread(
                            converters.infer_request_from_proto, request, self.max_request_bytes
                        )
                result = await self.dataplane.infer_async(admission, infer_request)
            answer = streaming.new_answer() if streamed else None
            into = None if answer is None else answer.infer_response
            response = tracing.in_step("encode", converters.infer_response_to_proto, result, into)
            outcome, version = "success", response.model_version
        except InferenceError as exc:
            outcome, error, version = exc.code.lower(), exc, exc.served_version
        except Exception as exc:
            error = _unexpected(exc, "ModelInfer")
            outcome = error.code.lower()
        finally:
            observability.observe(
                "grpc",
                # a version answered: its model is known; else labelled only when it exists
                request.model_name if version or self.dataplane.knows(request.model_name) else "",
                version,
                outcome,
                time.perf_counter() - started,
                received,  # raw contents decoded (0 for a call refused before)
                sum(map(len, response.raw_output_contents)) if response is not None else 0,
                outcome,
                request.id,
            )
        if error is not None:
            return None, error
        return (answer if streamed else response), None

    # -- extensions ----------------------------------------------------------
    @rpc
    async def ModelConfig(self, request, context):
        config = self.extensions.configuration.config(request.name, request.version or None)
        return converters.model_config_to_proto(config)

    @rpc
    async def ModelStatistics(self, request, context):
        stats = await asyncio.to_thread(
            self.extensions.statistics.model_statistics, request.name or None, request.version or None, _bearer(context)
        )
        return converters.statistics_to_proto(stats)

    @rpc
    async def RepositoryIndex(self, request, context):
        _one_repository(request)
        entries = await asyncio.to_thread(self.extensions.repository.index, request.ready, _bearer(context))
        return self._index.encoded(entries, _index_response)

    @rpc
    async def RepositoryModelLoad(self, request, context):
        _one_repository(request)
        parameters = converters.repository_parameters(request.parameters)
        await asyncio.to_thread(self.extensions.repository.load, request.model_name, parameters, _bearer(context))
        return pb.RepositoryModelLoadResponse()

    @rpc
    async def RepositoryModelUnload(self, request, context):
        _one_repository(request)
        parameters = converters.repository_parameters(request.parameters)
        await asyncio.to_thread(self.extensions.repository.unload, request.model_name, parameters, _bearer(context))
        return pb.RepositoryModelUnloadResponse()

    # -- shared-memory extensions (inference/shared_memory/regions.py) ---------------------
    @rpc
    async def SystemSharedMemoryStatus(self, request, context):
        regions = await asyncio.to_thread(self.extensions.shared_memory.status, _bearer(context), request.name or None)
        response = pb.SystemSharedMemoryStatusResponse()
        for region in regions:
            status = response.regions[region.name]
            status.name, status.key, status.offset, status.byte_size = (
                region.name, region.key, region.offset, region.byte_size,
            )  # fmt: skip
        return response

    @rpc
    async def SystemSharedMemoryRegister(self, request, context):
        await asyncio.to_thread(
            self.extensions.shared_memory.register, _bearer(context), request.name, request.key, request.offset,
            request.byte_size,
        )  # fmt: skip
        return pb.SystemSharedMemoryRegisterResponse()

    @rpc
    async def SystemSharedMemoryUnregister(self, request, context):
        await asyncio.to_thread(self.extensions.shared_memory.unregister, _bearer(context), request.name or None)
        return pb.SystemSharedMemoryUnregisterResponse()

    @rpc
    async def CudaSharedMemoryStatus(self, request, context):
        await asyncio.to_thread(self.extensions.shared_memory.cuda_status, _bearer(context), request.name or None)
        return pb.CudaSharedMemoryStatusResponse()

    @rpc
    async def CudaSharedMemoryRegister(self, request, context):
        await asyncio.to_thread(self.extensions.shared_memory.cuda_register, _bearer(context), request.name)
        return pb.CudaSharedMemoryRegisterResponse()

    @rpc
    async def CudaSharedMemoryUnregister(self, request, context):
        await asyncio.to_thread(self.extensions.shared_memory.cuda_unregister, _bearer(context), request.name or None)
        return pb.CudaSharedMemoryUnregisterResponse()

    @rpc
    async def TraceSetting(self, request, context):
        update = converters.trace_settings_from_proto(request.settings)
        current = await asyncio.to_thread(
            self.extensions.settings.trace_settings, _bearer(context), request.model_name or None, update
        )
        return converters.trace_settings_to_proto(current)

    @rpc
    async def LogSettings(self, request, context):
        update = converters.log_settings_from_proto(request.settings)
        current = await asyncio.to_thread(self.extensions.settings.log_settings, _bearer(context), update)
        return converters.log_settings_to_proto(current)
