"""Build and run the gRPC server (``manage.py rungrpc``): grpc.aio, one
process per ``--processes`` sharing the port (SO_REUSEPORT), chosen by
measurement over the thread-pool server (see bench/README.md)."""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent import futures
from pathlib import Path

import grpc
from django.conf import settings

from inference.dataplane import get_dataplane
from inference.extensions import get_extensions
from inference.grpc.proto import oip_pb2_grpc
from inference.grpc.servicer import InferenceServicer

logger = logging.getLogger(__name__)


def build_server(address: str) -> tuple[grpc.aio.Server, int]:
    """An aio server bound to ``address``, not yet started; returns (server, port).

    The transport's message limit is twice MAX_REQUEST_BYTES so that requests
    between the two get the servicer's clear INVALID_ARGUMENT.
    """
    limit = 2 * settings.MAX_REQUEST_BYTES
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 1),
    ]
    dataplane = get_dataplane()
    server = grpc.aio.server(options=options)
    oip_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceServicer(dataplane, get_extensions(), settings.MAX_REQUEST_BYTES), server
    )
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the gRPC server to {address}")
    return server, port


async def _serve(address: str, threads: int | None) -> None:
    loop = asyncio.get_running_loop()
    # Calls that wait (worker mode, batching, database reads) run in these threads.
    loop.set_default_executor(
        futures.ThreadPoolExecutor(max_workers=threads or settings.GRPC_THREADS, thread_name_prefix="grpc")
    )
    server, _ = build_server(address)
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    await server.start()
    logger.info("serving OIP gRPC on %s", address)
    ready_file = Path(settings.GRPC_READY_FILE) if settings.GRPC_READY_FILE else None
    if ready_file is not None:  # `serve` answers ready only once this exists
        ready_file.parent.mkdir(parents=True, exist_ok=True)
        ready_file.touch()
    await stopped.wait()
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)
    await server.stop(grace=settings.GRPC_GRACE_SECONDS)


def serve_forever(address: str, threads: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then stop gracefully (in-flight calls finish),
    on the event loop GRPC_EVENT_LOOP names (uvloop or asyncio)."""
    get_dataplane()  # loads the registry with the ORM, which refuses to run inside the event loop
    if settings.GRPC_EVENT_LOOP == "uvloop":
        import uvloop

        uvloop.run(_serve(address, threads))
    else:
        asyncio.run(_serve(address, threads))
