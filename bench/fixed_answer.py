"""Fixed-answer servers: the transport floor of the hot-path profile.

The same HTTP server as ``manage.py serve`` (granian, WSGI, the same workers,
threads and options) and the same gRPC server (grpc.aio, SO_REUSEPORT, grpc core's
experiments as `profile_hot_path.py` passes them (GRPC_EXPERIMENTS), the
same number of processes), running an application that reads the whole
request body and answers fixed bytes: what is left of a request when the
application costs nothing. ``FIXED_ANSWER_FILE`` holds the answer (a real
answer of ``serve``, captured by bench/profile_hot_path.py).

    granian --interface wsgi ... bench.fixed_answer:application   # REST
    granian --interface rsgi ... bench.fixed_answer:rsgi_application   # REST, granian's async interface
    python -m bench.fixed_answer --grpc-port P                    # one gRPC process
"""

from __future__ import annotations

import argparse
import asyncio
import os

_ANSWER = open(os.environ["FIXED_ANSWER_FILE"], "rb").read() if os.environ.get("FIXED_ANSWER_FILE") else b""
_HEADERS = [
    ("Content-Type", "application/octet-stream"),
    ("Content-Length", str(len(_ANSWER))),
    *([("Inference-Header-Content-Length", h)] if (h := os.environ.get("FIXED_ANSWER_HEADER_LENGTH")) else []),
]


def application(environ, start_response):
    """WSGI: reads the body, answers ``FIXED_ANSWER_FILE``."""
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", _HEADERS)
    return [_ANSWER]


async def rsgi_application(scope, protocol) -> None:
    """RSGI (granian's own async interface): reads the body, answers
    ``FIXED_ANSWER_FILE`` (the floor of serving REST through RSGI; see
    bench/README.md, "Fewer Python threads")."""
    await protocol()
    protocol.response_bytes(200, _HEADERS, _ANSWER)


async def _serve_grpc(port: int) -> None:
    import grpc

    async def model_infer(request: bytes, context) -> bytes:
        return _ANSWER

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService",
        {"ModelInfer": grpc.unary_unary_rpc_method_handler(model_infer)},  # raw bytes in and out
    )
    server = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--grpc-port", type=int, required=True)
    asyncio.run(_serve_grpc(parser.parse_args().grpc_port))
