"""The worker link alone: requests of one CNN-sized tensor (FP32 [1, 3, 224, 224],
602,112 bytes) through ``RemoteExecutor.run`` to a ``WorkerServer`` in another
process whose handler answers at once (10 floats), so only the link is
measured: framing, the socket, and TLS.

    .venv/bin/python bench/link.py [--baseline DIR] [--grpc] [--seconds 4] [--rounds 3]

Rows, interleaved per round, medians printed:

* ``tls``: this checkout's link over TCP with mutual TLS (certificates made
  in a temporary directory);
* ``unix``: this checkout's link over the worker's Unix socket (shared memory);
* ``baseline-tcp``: with ``--baseline DIR``, a checkout from before TLS over
  its plain TCP link (its HMAC handshake);
* ``grpc-tls`` / ``grpc-plain``: with ``--grpc``, a unary grpcio call carrying
  the same bytes, with mutual TLS (BoringSSL) and without: the alternative the
  issue named.

Concurrency 1 and 8 (client threads). Every process runs on this machine, so
both ends' CPU is counted on the same cores.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBYTES = 3 * 224 * 224 * 4


def _django(root: Path) -> None:
    sys.path.insert(0, str(root))
    os.chdir(root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")


def serve(root: Path, kind: str, certs: Path, port_file: Path) -> None:
    """The worker end (a child process): prints nothing, writes its port or path."""
    _django(root)
    import numpy as np

    from inference.workers import frames

    answer = np.ones((1, 10), np.float32)
    if kind in ("tls", "unix"):
        from inference.workers import link, messages
        from inference.workers.server.socket_server import WorkerServer

        def handle(request, body, shared=None):
            frames.tensors(request, body, "request", shared)
            return frames.encode(messages.RunAnswer(1, True, 0, 0), [("y", answer)])

        if kind == "tls":
            tls = link.TLSFiles(str(certs / "ca.crt"), str(certs / "worker.crt"), str(certs / "worker.key"))
            server = WorkerServer(handle, worker_id="w-1", device="cpu", max_frame=1 << 26,
                                  address=("127.0.0.1", 0), tls=tls)  # fmt: skip
            where = str(server.address[1])
        else:
            where = str(certs / "worker.sock")
            server = WorkerServer(handle, worker_id="w-1", device="cpu", max_frame=1 << 26, unix_path=where)
    elif kind == "baseline-tcp":  # a checkout from before TLS
        from inference.workers.server.socket_server import WorkerServer

        def handle(header, body, shared=None):
            frames.tensors(header, body, "request", shared)
            return frames.encode({"batch": 1, "executed": True, "queue_ns": 0, "infer_ns": 0}, [("y", answer)])

        server = WorkerServer(("127.0.0.1", 0), b"k" * 32, handle, 1 << 26)
        where = str(server.address[1])
    else:  # grpc-tls, grpc-plain
        server, where = _grpc_server(kind, certs)
    server.start()
    port_file.write_text(where)
    signal.sigwait([signal.SIGTERM])


def _grpc_server(kind: str, certs: Path):
    from concurrent import futures

    import grpc

    handler = grpc.method_handlers_generic_handler(
        "bench.Link", {"Run": grpc.unary_unary_rpc_method_handler(lambda request, context: bytes(40))}
    )
    options = [("grpc.max_receive_message_length", 64 << 20)]
    server = grpc.server(futures.ThreadPoolExecutor(16), options=options)
    server.add_generic_rpc_handlers((handler,))
    if kind == "grpc-tls":
        credentials = grpc.ssl_server_credentials(
            [((certs / "worker.key").read_bytes(), (certs / "worker.crt").read_bytes())],
            root_certificates=(certs / "ca.crt").read_bytes(), require_client_auth=True,
        )  # fmt: skip
        port = server.add_secure_port("127.0.0.1:0", credentials)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    return server, str(port)


def _caller(root: Path, kind: str, certs: Path, where: str):
    """A function that sends one request and waits for its answer."""
    _django(root)
    import numpy as np

    image = np.ones((1, 3, 224, 224), np.float32)
    if kind.startswith("grpc"):
        import grpc

        options = [("grpc.max_send_message_length", 64 << 20)]
        if kind == "grpc-tls":
            credentials = grpc.ssl_channel_credentials(
                (certs / "ca.crt").read_bytes(), (certs / "frontend.key").read_bytes(),
                (certs / "frontend.crt").read_bytes(),
            )  # fmt: skip
            channel = grpc.secure_channel(
                f"127.0.0.1:{where}",
                credentials,
                options=[*options, ("grpc.ssl_target_name_override", "modelhost-worker")],
            )
        else:
            channel = grpc.insecure_channel(f"127.0.0.1:{where}", options=options)
        call = channel.unary_unary("/bench.Link/Run")
        payload = image.tobytes()
        return lambda: call(payload)
    from inference.runtime.execution import RunTarget
    from inference.workers.client.executor import RemoteExecutor
    from inference.workers.placement import Worker

    class Directory:
        error = ""

        def __init__(self, worker):
            self.worker = worker

        def candidates(self, placement):
            return [self.worker]

        def pick(self, key, workers):
            return workers[0]

        def is_live(self, worker_id):
            return True

        accepts = is_live

        def drop(self, worker_id):
            pass

    if kind == "baseline-tcp":
        worker = Worker("w-1", "infer.cpu", ("127.0.0.1", int(where)), {"address": f"127.0.0.1:{where}"})
        executor = RemoteExecutor(Directory(worker), b"k" * 32, 1 << 26)
    else:
        from inference.workers import link
        from inference.workers.messages import Announcement

        if kind == "tls":
            announced = Announcement("cpu", address=f"127.0.0.1:{where}")
        else:
            announced = Announcement("cpu", unix=where, machine=os.uname().nodename)
        worker = Worker("w-1", "infer.cpu", ("127.0.0.1", int(where)) if kind == "tls" else None, announced)
        tls = link.TLSFiles(str(certs / "ca.crt"), str(certs / "frontend.crt"), str(certs / "frontend.key"))
        executor = RemoteExecutor(Directory(worker), 1 << 26, tls=tls)
    target = RunTarget("m", 1, "0" * 64, "", 0)
    return lambda: executor.run(target, {"x": image}, ["y"])


def load(root: Path, kind: str, certs: Path, where: str, concurrency: int, seconds: float) -> None:
    """The front-end end (a child process): prints requests per second."""
    call = _caller(root, kind, certs, where)
    call()
    counts = [0] * concurrency
    stop = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            call()
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(sum(counts) / seconds)


def measure(root: Path, kind: str, certs: Path, concurrency: int, seconds: float) -> float:
    python = str(root / ".venv" / "bin" / "python")
    port_file = certs / f"where-{kind}"
    port_file.unlink(missing_ok=True)
    worker = subprocess.Popen([python, __file__, "serve", str(root), kind, str(certs), str(port_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(300):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        done = subprocess.run(
            [python, __file__, "load", str(root), kind, str(certs), port_file.read_text(), str(concurrency),
             str(seconds)], capture_output=True, text=True, check=True,
        )  # fmt: skip
        return float(done.stdout.strip().splitlines()[-1])
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(10)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]))
    if len(sys.argv) > 1 and sys.argv[1] == "load":
        root, kind, certs, where, concurrency, seconds = sys.argv[2:8]
        return load(Path(root), kind, Path(certs), where, int(concurrency), float(seconds))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="", help="a checkout from before TLS (git worktree), for baseline-tcp")
    parser.add_argument("--grpc", action="store_true", help="also grpcio unary calls, with and without mutual TLS")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    _django(ROOT)
    import django

    django.setup()
    from hosting import worker_certs

    certs = Path(tempfile.mkdtemp(prefix="bench-link-"))
    worker_certs.write_set(certs, "modelhost-worker", days=1)
    rows = [(ROOT, "tls"), (ROOT, "unix")]
    if args.baseline:
        rows.append((Path(args.baseline).resolve(), "baseline-tcp"))
    if args.grpc:
        rows += [(ROOT, "grpc-tls"), (ROOT, "grpc-plain")]
    results: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.rounds):
        for concurrency in (1, 8):
            for root, kind in rows:
                rate = measure(root, kind, certs, concurrency, args.seconds)
                results.setdefault((kind, concurrency), []).append(rate)
                print(f"round {round_ + 1}  {kind:13} c{concurrency}  {rate:,.0f} req/s", flush=True)
    print(f"\n| link | c | req/s (median of {args.rounds}) | rounds |\n|---|---|---|---|")
    for (kind, concurrency), rates in results.items():
        rounds = " / ".join(f"{r:,.0f}" for r in rates)
        print(f"| {kind} | {concurrency} | {statistics.median(rates):,.0f} | {rounds} |")


if __name__ == "__main__":
    main()
