"""Measure what worker mode asks of Redis and PostgreSQL (docs/scaling.md).

Starts a private redis-server (so that nobody else's traffic is counted), a
fresh PostgreSQL database, ``manage.py serve`` in worker mode (2 HTTP
processes, 2 gRPC processes) and then one ``runworker --device cpu``, and
reads Redis's INFO commandstats and byte counters:

1. idle, front ends only: the directory scans;
2. idle, with the worker: its heartbeat and Celery's control-queue consumer;
3. under load: N inferences over HTTP; Redis operations and bytes beyond
   the idle rate, per inference;
4. MONITOR for 2 s under load: the commands seen, by name;
5. PostgreSQL connections held by the front ends and by a worker;
6. the memory and threads of a worker holding many front-end connections;
7. redis-benchmark on this machine for the commands worker mode uses, with
   100 heartbeat keys of the real size in the database.

Usage: ``.venv/bin/python bench/scaling_redis.py [--requests 3000]``;
prints a Markdown report.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import onnx_models as m  # noqa: E402
from tests.support.server import LiveServer, free_port  # noqa: E402

PG_ADMIN = os.environ.get("PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")


class Report(list):
    """Lines of the report, printed as they come."""

    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)


def commandstats(client) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def net(client) -> tuple[int, int]:
    info = client.info("stats")
    return int(info["total_net_input_bytes"]), int(info["total_net_output_bytes"])


def diff(after: dict, before: dict) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}


def window(client, seconds: float) -> tuple[dict, float, int, int]:
    c0, (i0, o0), t0 = commandstats(client), net(client), time.monotonic()
    time.sleep(seconds)
    c1, (i1, o1), t1 = commandstats(client), net(client), time.monotonic()
    return diff(c1, c0), t1 - t0, i1 - i0, o1 - o0


def rates(counts: dict, seconds: float) -> str:
    return ", ".join(f"{k} {v / seconds:.1f}/s" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def pg_connections(database: str) -> int:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [database]).fetchone()[0]


def benchmark(port: int, *command: str, clients: int = 50, requests: int = 100_000) -> float:
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(requests), "-q", "--csv", *command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [row for row in csv.reader(done.stdout.splitlines()) if row]
    return float(rows[-1][1])


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        name, _, value = line.partition(":")
        if name in ("VmRSS", "Threads"):
            fields[name] = int(value.split()[0])
    return fields


def worker_connection_cost(env: dict, work: Path, n: int) -> str:
    """Memory and threads of a worker holding ``n`` front-end connections
    (TLS handshake done, hello read, idle): what many front-end threads cost a worker."""
    from hosting import worker_certs
    from inference.workers import frames, link, messages

    port = free_port()
    certs = work / "worker-tls"
    worker_certs.write_set(certs, "modelhost-worker", days=1)
    worker_env = dict(
        os.environ, **env, **worker_certs.environment(certs, "worker"), VAR_DIR=str(work / "var"),
        WORKER_LISTEN=f"127.0.0.1:{port}", WORKER_UNIX_SOCKET="false",
        WORKER_MAX_CONNECTIONS=str(n + 16), WORKER_MAX_CONNECTIONS_PER_PEER=str(n + 16),
    )  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--device", "cpu", "--no-control"],
        cwd=ROOT, env=worker_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    context = link.TLSFiles(*worker_certs.environment(certs, "frontend").values()).client_context
    sockets = []
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(2)
        before = _status(process.pid)
        for _ in range(n):
            raw = socket.create_connection(("127.0.0.1", port))
            sock = context.wrap_socket(raw, server_hostname="modelhost-worker")
            assert isinstance(frames.Reader(sock, 1 << 20, messages.to_front_end).frame()[0], messages.Hello)
            sockets.append(sock)
        time.sleep(2)
        after = _status(process.pid)
    finally:
        for sock in sockets:
            sock.close()
        process.terminate()
        process.wait(30)
    per = (after["VmRSS"] - before["VmRSS"]) / n
    return (
        f"- one worker holding {n} idle front-end connections: RSS {before['VmRSS'] / 1024:.0f} -> "
        f"{after['VmRSS'] / 1024:.0f} MiB ({per:.0f} KiB per connection), threads {before['Threads']} -> "
        f"{after['Threads']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=800, help="front-end connections opened to one worker")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="scaling-"))
    port = free_port()
    redis_server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    database = f"modelhost_scaling_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(PG_ADMIN, autocommit=True)
    admin.execute(f'CREATE DATABASE "{database}"')
    repository = work / "repository"
    m.write_model(repository, "tiny", m.affine(2.0, 1.0, width=16))
    client = redis.Redis(port=port)
    for _ in range(50):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    env = {
        "INFERENCE_EXECUTOR": "workers",
        "REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "DATABASE_URL": PG_ADMIN.rsplit("/", 1)[0] + f"/{database}",
        "SECRET_KEY": uuid.uuid4().hex + uuid.uuid4().hex,
    }
    live = LiveServer(repository, work / "var", extra_env=env)
    out = Report()
    try:
        live.start()
        time.sleep(2)
        counts, seconds, bytes_in, bytes_out = window(client, args.idle_seconds)
        out.append(f"- idle, front ends only (2 HTTP + 2 gRPC processes, no worker): {rates(counts, seconds)}; "
                   f"{bytes_in / seconds:.0f} B/s in, {bytes_out / seconds:.0f} B/s out")  # fmt: skip
        fe_pg = pg_connections(database)
        live.start_worker("cpu")
        live.devices = ("cpu",)
        live.wait_for_workers()
        time.sleep(2)
        idle, seconds, idle_in, idle_out = window(client, args.idle_seconds)
        out.append(f"- idle, with one worker: {rates(idle, seconds)}; "
                   f"{idle_in / seconds:.0f} B/s in, {idle_out / seconds:.0f} B/s out")  # fmt: skip
        beats = list(client.scan_iter(match="modelhost:worker:*"))
        heartbeat = client.get(beats[0])
        out.append(f"- one heartbeat value: {len(heartbeat)} bytes: `{heartbeat.decode()}`")
        import tritonclient.http as httpclient

        x = np.ones((1, 16), dtype=np.float32)
        monitor_counts: dict[str, int] = {}

        def monitor():
            with client.monitor() as mon:
                ends = time.monotonic() + 2.0
                for command in mon.listen():
                    name = command["command"].split(" ", 1)[0].upper()
                    monitor_counts[name] = monitor_counts.get(name, 0) + 1
                    if time.monotonic() > ends:
                        break

        def load(n: int, results: list):
            http = httpclient.InferenceServerClient(live.http_url)
            inp = httpclient.InferInput("x", [1, 16], "FP32")
            inp.set_data_from_numpy(x)
            for _ in range(n):
                y = http.infer("tiny", [inp]).as_numpy("y")
                assert np.allclose(y, 2 * x + 1)
            results.append(n)

        load(50, [])  # warm (session loaded on the worker)
        c0, (i0, o0), t0 = commandstats(client), net(client), time.monotonic()
        results: list = []
        threads = [threading.Thread(target=load, args=(args.requests // 4, results)) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        watcher = threading.Thread(target=monitor)
        watcher.start()
        for thread in threads:
            thread.join()
        watcher.join()
        c1, (i1, o1), t1 = commandstats(client), net(client), time.monotonic()
        served = sum(results)
        elapsed = t1 - t0
        loaded = diff(c1, c0)
        extra = {k: v - idle.get(k, 0) / seconds * elapsed for k, v in loaded.items()}
        per_request = sum(extra.values()) / served
        bytes_per = ((i1 - i0) - idle_in / seconds * elapsed + (o1 - o0) - idle_out / seconds * elapsed) / served
        out.append(f"- under load: {served} inferences in {elapsed:.1f} s ({served / elapsed:.0f}/s, 4 clients): "
                   f"Redis commands {rates(loaded, elapsed)}; beyond the idle rate: {per_request:+.4f} commands and "
                   f"{bytes_per:+.1f} bytes per inference")  # fmt: skip
        out.append(f"- MONITOR, 2 s under load: {json.dumps(dict(sorted(monitor_counts.items())))}")
        out.append(f"- PostgreSQL connections: front ends (serve: 2 HTTP + 2 gRPC processes, idle) {fe_pg}; "
                   f"with one worker after the load {pg_connections(database)}")  # fmt: skip
        live.stop()
        out.append(worker_connection_cost(env, work, args.connections))
        # redis-benchmark: the commands worker mode uses, 100 heartbeat keys of the real size in the database.
        client.flushdb()
        value = b"x" * (len(heartbeat) if "heartbeat" in locals() else 300)  # the size of a real one, CSV-safe
        for i in range(100):
            client.set(f"modelhost:worker:infer.cuda0:host{i}-1", value, px=600_000)
        keys = [f"modelhost:worker:infer.cuda0:host{i}-1" for i in range(100)]
        scan = ("SCAN", "0", "MATCH", "modelhost:worker:*", "COUNT", "1000")
        for line in (
            (
                "heartbeat SET PX",
                benchmark(port, "SET", "modelhost:worker:infer.cuda0:b-1", value.decode(), "PX", "5000"),
            ),
            ("directory SCAN over 100 heartbeats", benchmark(port, *scan, requests=20_000)),
            ("directory MGET of 100 heartbeats", benchmark(port, "MGET", *keys, requests=20_000)),
            ("PING (baseline)", benchmark(port, "PING")),
        ):
            out.append(f"- redis-benchmark, 50 clients: {line[0]}: {line[1]:,.0f} requests/s")
    finally:  # nothing left behind, even after a failure
        live.stop()
        redis_server.terminate()
        redis_server.wait()
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
