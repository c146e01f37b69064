"""The HTTP and gRPC servers: processes and threads, request bodies (the
body gate: hosting/body_gate.py), readiness, and the log of refused requests."""

from __future__ import annotations

from hosting.settings.base import env

#: Largest request body (and largest single tensor) accepted, in bytes (Triton: 64 MiB).
MAX_REQUEST_BYTES = env.int("MAX_REQUEST_BYTES", default=64 * 1024 * 1024)
#: HTTP server (granian) processes and threads per process.
HTTP_WORKERS = env.int("HTTP_WORKERS", default=2)
HTTP_THREADS = env.int("HTTP_THREADS", default=4)
#: More threads per HTTP process that only wait for request bodies: a body
#: that trickles in holds one of these, never one of the HTTP_THREADS that
#: work (hosting/body_gate.py).
HTTP_BODY_THREADS = env.int("HTTP_BODY_THREADS", default=32)
#: A request body must have arrived this many seconds after its request
#: started (else 408), plus one second per BODY_MIN_BYTES_PER_SECOND bytes
#: received or being read (large bodies over slow links).
BODY_READ_TIMEOUT_SECONDS = env.float("BODY_READ_TIMEOUT_SECONDS", default=30.0)
BODY_MIN_BYTES_PER_SECOND = env.int("BODY_MIN_BYTES_PER_SECOND", default=64 * 1024)

#: gRPC server processes (sharing the port), threads per process for worker
#: mode, and the grace period for in-flight calls on stop (s).
GRPC_PROCESSES = env.int("GRPC_PROCESSES", default=2)
GRPC_THREADS = env.int("GRPC_THREADS", default=16)
GRPC_GRACE_SECONDS = env.float("GRPC_GRACE_SECONDS", default=10.0)
#: grpc core's experiments for the gRPC server processes (grpc's own
#: GRPC_EXPERIMENTS variable, which `rungrpc` and `serve` set for them): the
#: default turns off the EventEngine listener and endpoints and the EventEngine
#: poller for Python, which on grpcio 1.81 cost a small request ~80 us more CPU
#: and ~20% of its rate (bench/README.md, "grpc core's experiments"); "" keeps
#: grpcio's defaults.
GRPC_EXPERIMENTS = env.str(
    "GRPC_EXPERIMENTS",
    default="-event_engine_listener,-event_engine_for_all_other_endpoints,-event_engine_poller_for_python",
)
#: The gRPC server processes' event loop: "asyncio" (the standard library's)
#: or "uvloop" (libuv's, the uvloop package: a small request's rate +8-14% at
#: concurrency 8, but team B's turn after a burst came later on a loaded
#: machine; bench/README.md, "The gRPC processes' event loop").
GRPC_EVENT_LOOP = env.str("GRPC_EVENT_LOOP", default="asyncio")
#: Where the HTTP (granian) worker processes run: "soft" keeps each one's
#: threads on a CPU of its own while it serves one request at a time, and on
#: every CPU while its requests overlap, another process holds that CPU, or
#: a probe finds that a full CPU serves fewer requests than every CPU
#: (hosting/processes/affinity.py); "off" leaves placement to the kernel. Tiny REST at
#: concurrency 1: +13-18% req/s (bench/README.md, "CPU affinity").
HTTP_CPU_AFFINITY = env.str("HTTP_CPU_AFFINITY", default="soft")
#: The same for the gRPC server processes (the probe is what finds one
#: channel's overlapping calls, which no request count shows). Tiny gRPC at
#: concurrency 1: +20-25% req/s.
GRPC_CPU_AFFINITY = env.str("GRPC_CPU_AFFINITY", default="soft")
#: Set by `serve --grpc-port` for its children: the gRPC server creates this
#: file once it listens (and removes it on stop), and the HTTP ready route
#: answers 503 while it is missing, so that "ready" means both transports.
GRPC_READY_FILE = env.str("GRPC_READY_FILE", default="")

#: Triton's model control mode (none, poll, explicit; "": not given, as
#: before: load and unload allowed), set by `serve --model-control-mode` for
#: its children: the repository extension refuses load and unload in none
#: and poll (docs/command-line.md).
MODEL_CONTROL_MODE = env.str("MODEL_CONTROL_MODE", default="")

#: Refused inference requests (5xx, 429) are summed up in one log line per this many seconds.
REFUSAL_LOG_SECONDS = env.float("REFUSAL_LOG_SECONDS", default=10.0)
