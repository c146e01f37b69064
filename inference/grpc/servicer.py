"""The GRPCInferenceService servicer (grpc.aio): converts messages and calls
the DataPlane.

Handlers are coroutines that do the (CPU-bound, short) work inline: with the
in-process executor a thread hop would only add latency. When the executor
waits on I/O (worker mode), inference runs in a thread pool instead so the
event loop keeps serving.

Protocol errors become gRPC statuses with the same messages REST gives:
INVALID_ARGUMENT (bad input, including a request above MAX_REQUEST_BYTES),
NOT_FOUND (unknown model or version), UNAVAILABLE (not ready),
DEADLINE_EXCEEDED, UNIMPLEMENTED; unexpected errors are logged and INTERNAL.

A call that misses the registry snapshot (unknown model or version, a version
not serving) is answered once more after the registry caught up with the
database from a thread, so a model uploaded through another process is
callable at once (see ``ModelRegistry.catch_up``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import grpc
from django.conf import settings

from inference import observability
from inference.auth import authorize, bearer_token
from inference.grpc import converters
from inference.grpc.proto import oip_pb2 as pb
from inference.grpc.proto import oip_pb2_grpc
from inference.protocol.errors import InferenceError, ModelNotFound, ModelNotReady, Unsupported

logger = logging.getLogger(__name__)

GRPC_STATUS = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    # A request above the configured limit is the client's mistake (the gRPC
    # transport's own, higher, limit still answers RESOURCE_EXHAUSTED).
    "RESOURCE_EXHAUSTED": grpc.StatusCode.INVALID_ARGUMENT,
    "DEADLINE_EXCEEDED": grpc.StatusCode.DEADLINE_EXCEEDED,
    "UNIMPLEMENTED": grpc.StatusCode.UNIMPLEMENTED,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}


def _rpc(method=None, *, database: bool = False):
    """Run a handler body; map protocol errors to statuses and never leak an
    unexpected exception. ``database=True`` runs it in a thread: Django's ORM
    may not be used from the event loop's thread."""
    if method is None:
        return functools.partial(_rpc, database=database)

    @functools.wraps(method)
    async def wrapper(self, request, context):
        try:
            if database:
                return await asyncio.to_thread(method, self, request, context)
            return await _after_catch_up(self.dataplane.registry, method, self, request, context)
        except InferenceError as exc:
            await context.abort(GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL), exc.message)
        except Exception:
            logger.exception("unexpected error in %s", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")

    return wrapper


async def _after_catch_up(registry, call, *args):
    """``call(*args)`` on the event loop; on a registry miss, once more if the
    registry caught up (from a thread: Django forbids queries on the loop)."""
    seen = registry.models
    try:
        return call(*args)
    except (ModelNotFound, ModelNotReady):
        if not await asyncio.to_thread(registry.catch_up, seen):
            raise
    return call(*args)


def _bearer(context) -> str | None:
    """The bearer token of the call's ``authorization`` metadata, if any."""
    for key, value in context.invocation_metadata():
        if key == "authorization":
            return bearer_token(value)
    return None


class InferenceServicer(oip_pb2_grpc.GRPCInferenceServiceServicer):
    """Thin adapter from ``inference.GRPCInferenceService`` to a DataPlane."""

    def __init__(self, dataplane, max_request_bytes: int, pool=None):
        """``pool``: a thread pool for inference when the executor blocks on
        I/O (worker mode); None runs it inline."""
        self.dataplane = dataplane
        self.max_request_bytes = max_request_bytes
        self.pool = pool

    @_rpc
    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=self.dataplane.live())

    @_rpc
    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    @_rpc(database=True)  # a miss may read the registry's change stamp
    def ModelReady(self, request, context):
        try:
            self.dataplane.model_version(request.name, request.version or None)
        except ModelNotReady:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    @_rpc
    def ServerMetadata(self, request, context):
        meta = self.dataplane.server_metadata()
        return pb.ServerMetadataResponse(name=meta.name, version=meta.version, extensions=list(meta.extensions))

    @_rpc
    def ModelMetadata(self, request, context):
        meta = self.dataplane.model_metadata(request.name, request.version or None)
        return converters.model_metadata_to_proto(meta)

    async def ModelInfer(self, request, context):
        """Inference, observed in metrics and the request log."""
        started = time.perf_counter()
        outcome, version, response = "internal", "", None
        try:
            if settings.INFERENCE_REQUIRE_TOKEN:
                # The token checker may reload its snapshot with the ORM: not on the event loop.
                await asyncio.to_thread(authorize, _bearer(context), request.model_name)
            if self.pool is None:
                response = await _after_catch_up(self.dataplane.registry, self._infer, request, context)
            else:
                response = await asyncio.get_running_loop().run_in_executor(self.pool, self._infer, request, context)
            outcome, version = "success", response.model_version
            return response
        except InferenceError as exc:
            outcome = exc.code.lower()
            await context.abort(GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL), exc.message)
        except grpc.aio.AbortError:
            raise
        except Exception:
            logger.exception("unexpected error in ModelInfer")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")
        finally:
            known = request.model_name in self.dataplane.registry.models
            observability.observe(
                "grpc",
                request.model_name if known else "",
                version,
                outcome,
                time.perf_counter() - started,
                sum(map(len, request.raw_input_contents)),
                sum(map(len, response.raw_output_contents)) if response is not None else 0,
                outcome,
                request.id,
            )

    def _infer(self, request, context):
        infer_request = converters.infer_request_from_proto(request, self.max_request_bytes)
        return converters.infer_response_to_proto(self.dataplane.infer(infer_request))

    # -- extensions ----------------------------------------------------------
    @_rpc
    def ModelConfig(self, request, context):
        return converters.model_config_to_proto(self.dataplane.model_config(request.name, request.version or None))

    @_rpc(database=True)
    def ModelStatistics(self, request, context):
        stats = self.dataplane.model_statistics(request.name or None, request.version or None)
        return converters.statistics_to_proto(stats)

    @_rpc
    def RepositoryIndex(self, request, context):
        if request.repository_name:
            raise Unsupported("repository_name is not supported: this server has one model repository")
        response = pb.RepositoryIndexResponse()
        for entry in self.dataplane.repository_index(request.ready):
            response.models.add(name=entry.name, version=entry.version, state=entry.state, reason=entry.reason)
        return response

    @_rpc(database=True)
    def RepositoryModelLoad(self, request, context):
        if request.repository_name:
            raise Unsupported("repository_name is not supported: this server has one model repository")
        self.dataplane.load(request.model_name, converters.repository_parameters(request.parameters))
        return pb.RepositoryModelLoadResponse()

    @_rpc(database=True)
    def RepositoryModelUnload(self, request, context):
        if request.repository_name:
            raise Unsupported("repository_name is not supported: this server has one model repository")
        self.dataplane.unload(request.model_name, converters.repository_parameters(request.parameters))
        return pb.RepositoryModelUnloadResponse()
