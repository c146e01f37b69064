"""Build and run the gRPC server (``manage.py rungrpc``)."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures

import grpc
from django.conf import settings

from inference.dataplane import get_dataplane
from inference.grpc.proto import oip_pb2_grpc
from inference.grpc.servicer import InferenceServicer

logger = logging.getLogger(__name__)


def build_server(address: str, threads: int | None = None) -> tuple[grpc.Server, int]:
    """A server bound to ``address``, not yet started; returns (server, port).

    The transport's message limit is twice MAX_REQUEST_BYTES so that requests
    between the two get the servicer's clear INVALID_ARGUMENT.
    """
    limit = 2 * settings.MAX_REQUEST_BYTES
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 1),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads or settings.GRPC_THREADS, thread_name_prefix="grpc"),
        options=options,
    )
    servicer = InferenceServicer(get_dataplane(), settings.MAX_REQUEST_BYTES)
    oip_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the gRPC server to {address}")
    return server, port


def serve_forever(address: str, threads: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then stop gracefully (in-flight calls finish)."""
    server, _ = build_server(address, threads)
    stopped = threading.Event()

    def stop(signum, frame):
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.start()
    logger.info("serving OIP gRPC on %s", address)
    stopped.wait()
    server.stop(grace=settings.GRPC_GRACE_SECONDS).wait()
