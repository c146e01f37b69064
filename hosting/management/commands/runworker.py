"""``manage.py runworker --device cuda:0`` (or ``cpu``): an inference worker
pinned to one device.

It accepts front-end connections (inference requests arrive there, see
inference/workers/client/executor.py): on its Unix socket in ``$VAR_DIR/run/`` from
front ends of this machine and, with ``WORKER_LISTEN`` and the
``WORKER_TLS_*`` files, over mutual TLS from other machines. It announces
itself with a Redis heartbeat, follows the registry, and consumes the model
store's control tasks (validation of uploaded versions, queue
``modelhost.control``) with Celery.

A GPU worker first proves its sessions run on its GPU (a probe session,
inference/workers/server/gpu.py) or refuses to start naming the cause; a
CUDA error that persists later makes it leave the directory and exit with
status 75 (its orchestrator restarts it).

SIGTERM (or SIGINT, or ``manage.py drainworker <id>``) drains it: it takes no
new request (front ends are told over their connections and by its
heartbeat, and send elsewhere), answers every request it holds (at most
WORKER_DRAIN_SECONDS), then exits (inference/workers/server/drain.py).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import redis
from celery.signals import worker_shutting_down
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from hosting import composition
from hosting.celery import CONTROL_QUEUE, app
from hosting.deployment import DeploymentError, check_worker_mode
from inference.runtime import cuda
from inference.runtime.residency import rss_bytes
from inference.workers.link import LinkConfigError, unix_socket_path
from inference.workers.messages import Announcement
from inference.workers.placement import DeviceError, DeviceUnavailable, parse_device, providers_for, queue_for
from inference.workers.server import gpu
from inference.workers.server.drain import Drain
from inference.workers.server.heartbeat import Heartbeat
from inference.workers.server.socket_server import Limits, WorkerServer
from models_store import maintenance


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"not a host:port address: {text!r}")
    return host.strip("[]"), int(port)


#: The exit status of a worker whose GPU context is lost (a CUDA error that persists): its orchestrator restarts it.
DEVICE_FAILED_EXIT = 75


def _leave(heartbeat: Heartbeat, server: WorkerServer, reason: str) -> None:
    """A CUDA error persists: leave the directory at once (no new request comes), close the connections
    (front ends send the requests held elsewhere) and exit non-zero without running CUDA's teardown, which
    may hang on a lost context."""
    import sys

    sys.stderr.write(f"the worker stops: {reason}\n")
    sys.stderr.flush()
    threading.Thread(target=lambda: (time.sleep(10), os._exit(DEVICE_FAILED_EXIT)), daemon=True).start()
    try:
        heartbeat.stop()  # its key goes: front ends drop it at their next read
        server.stop(grace=0.0)
    finally:
        os._exit(DEVICE_FAILED_EXIT)


class Command(BaseCommand):
    help = "Run an inference worker for one device (cpu or cuda:<n>); needs REDIS_URL."

    def add_arguments(self, parser):
        parser.add_argument("--device", required=True, help="cpu or cuda:<n>")
        parser.add_argument("--hostname", default=socket.gethostname())
        parser.add_argument(
            "--listen", default=settings.WORKER_LISTEN,
            help="host:port for front ends of other machines, over mutual TLS (port 0: any free port); empty: none",
        )  # fmt: skip
        parser.add_argument("--advertise", default=settings.WORKER_ADVERTISE, help="host:port front ends connect to")
        parser.add_argument(
            "--no-control", action="store_true", help="do not run control tasks (validation of uploads)"
        )
        parser.add_argument(
            "--pool", default=settings.WORKER_POOL, help="the pool it belongs to, for autoscaling (e.g. gpu-a100)"
        )

    def handle(self, *args, device, hostname, listen, advertise, no_control, pool, **options):
        try:
            kind, _ = parse_device(device)
            queue = queue_for(device)
        except DeviceError as exc:
            raise CommandError(str(exc)) from None
        started = None
        if kind == "cuda":  # first, before anything else: a worker not on its GPU never starts
            try:
                started = gpu.start(
                    device, composition.cuda_options(tensorrt=settings.WORKER_TENSORRT),
                    ordinal=settings.WORKER_GPU_ORDINAL if settings.WORKER_GPU_ORDINAL >= 0 else None,
                    fallback=settings.WORKER_CPU_FALLBACK,
                )  # fmt: skip
            except (gpu.PinningError, cuda.GpuUnavailable) as exc:
                raise CommandError(str(exc)) from None
        if not settings.REDIS_URL:
            raise CommandError("runworker needs REDIS_URL (e.g. redis://127.0.0.1:6379/0)")
        try:
            tls = check_worker_mode()
        except DeploymentError as exc:
            raise CommandError(str(exc)) from None
        if listen and tls is None:
            raise CommandError(
                f"--listen {listen} (WORKER_LISTEN) needs the worker link's TLS files: WORKER_TLS_CA, WORKER_TLS_CERT "
                "and WORKER_TLS_KEY (manage.py make_worker_certs makes a development set)"
            )
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=5, socket_timeout=10)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise CommandError(f"Redis at {settings.REDIS_URL} is unreachable: {exc}") from None
        if started is not None:
            providers, got = started.providers, started.got
        else:
            try:
                providers = got = providers_for(device)
            except DeviceUnavailable as exc:
                raise CommandError(str(exc)) from None
        worker_id = f"{hostname}-{os.getpid()}"
        runtime = composition.build_worker(
            device, providers, where=f"{hostname} by the {device} worker {worker_id}",
            gpu_ordinal=started.pinning.ordinal if started is not None and started.on_gpu else None,
        )  # fmt: skip
        unix_path = unix_socket_path(Path(settings.VAR_DIR), worker_id) if settings.WORKER_UNIX_SOCKET else None
        try:
            server = WorkerServer(
                runtime.handle, worker_id=worker_id, device=device, max_frame=2 * settings.MAX_REQUEST_BYTES,
                address=_address(listen) if listen else None, tls=tls, unix_path=unix_path,
                limits=Limits(
                    connections=settings.WORKER_MAX_CONNECTIONS, per_peer=settings.WORKER_MAX_CONNECTIONS_PER_PEER,
                    idle_seconds=settings.WORKER_IDLE_SECONDS,
                ),
            )  # fmt: skip
        except LinkConfigError as exc:
            raise CommandError(f"{exc} (WORKER_LISTEN, WORKER_UNIX_SOCKET)") from None
        except OSError as exc:
            raise CommandError(f"cannot listen on {listen or unix_path}: {exc}") from None
        server.start()
        if server.address is not None and not advertise:
            host, port = server.address
            advertise = f"{hostname if host in ('0.0.0.0', '::') else host}:{port}"
        heartbeat = Heartbeat(
            client, queue, worker_id,
            lambda: Announcement(
                device, beat_ms=int(time.time() * 1000), address=advertise if server.address is not None else "",
                unix=server.unix_path or "", machine=socket.gethostname(), host=hostname, pid=os.getpid(),
                busy=server.busy, busy_fraction=round(runtime.meter.fraction(), 4), served=server.served,
                connections=server.connections, draining=server.draining, rss_bytes=rss_bytes(),
                control=not no_control, pool=pool, providers=list(got),
                gpu_ordinal=started.pinning.ordinal if started is not None else -1,
            ),
            on_drain=lambda: os.kill(os.getpid(), signal.SIGTERM),  # manage.py drainworker: as SIGTERM
        )  # fmt: skip
        drain = Drain(server, heartbeat, settings.WORKER_DRAIN_SECONDS)
        runtime.on_device_failed = lambda reason: _leave(heartbeat, server, reason)
        heartbeat.start()
        where = ", ".join(x for x in (f"{advertise} (TLS)" if server.address else "", server.unix_path or "") if x)
        on = (
            ""
            if started is None
            else f", GPU ordinal {started.pinning.ordinal} in this process"
            + ("" if started.on_gpu else ", ON THE CPU (WORKER_CPU_FALLBACK)")
        )
        self.stdout.write(f"worker {worker_id} for {device} on {where} (sessions on {', '.join(got)}{on})")
        self.stdout.flush()
        try:
            if no_control:
                stopped = threading.Event()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, lambda *_: stopped.set())
                stopped.wait()
            else:
                # Celery handles SIGTERM (a warm shutdown: the control task at hand finishes); the drain
                # starts at once, beside it.
                worker_shutting_down.connect(lambda **_: drain.start(), weak=False)
                maintenance.start(settings.WORKER_CACHE_DIR)  # the reaper and the cleanup, on a timer (daemon)
                app.worker_main(
                    [
                        "worker", "--queues", CONTROL_QUEUE, "--pool", "threads", "--concurrency", "1",
                        "--hostname", f"{device}@{worker_id}", "--without-gossip", "--without-mingle",
                        "--without-heartbeat", "--loglevel", settings.LOG_LEVEL,
                    ]
                )  # fmt: skip
            drain.wait()
        finally:
            heartbeat.stop()
            server.stop(grace=0.0 if drain.over else settings.WORKER_DRAIN_SECONDS)
            runtime.registry.stop()
