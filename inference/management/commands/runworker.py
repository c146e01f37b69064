"""``manage.py runworker --device cuda:0`` (or ``cpu``): a Celery inference
worker pinned to one device, consuming only that device's queue."""

from __future__ import annotations

import os
import socket

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Run an inference worker for one device (cpu or cuda:<n>); needs REDIS_URL."

    def add_arguments(self, parser):
        parser.add_argument("--device", required=True, help="cpu or cuda:<n>")
        parser.add_argument("--concurrency", type=int, default=settings.WORKER_CONCURRENCY)
        parser.add_argument("--hostname", default=socket.gethostname())

    def handle(self, *args, device, concurrency, hostname, **options):
        import redis

        from hosting.celery import app
        from inference.changes import beacon_at
        from inference.registry import ModelRegistry
        from inference.runtime import onnx as onnx_runtime
        from inference.runtime import worker
        from inference.runtime.placement import DeviceError, Heartbeat, parse_device, queue_for

        try:
            kind, _ = parse_device(device)
            queue = queue_for(device)
        except DeviceError as exc:
            raise CommandError(str(exc)) from None
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        if not settings.REDIS_URL:
            raise CommandError("runworker needs REDIS_URL (e.g. redis://127.0.0.1:6379/0)")
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=5)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise CommandError(f"Redis at {settings.REDIS_URL} is unreachable: {exc}") from None
        if kind == "cuda":
            # Device numbers as nvidia-smi shows them; ONNX Runtime gets device_id.
            os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        try:
            providers = worker.providers_for(device, settings.WORKER_CPU_FALLBACK)
        except worker.DeviceUnavailable as exc:
            raise CommandError(str(exc)) from None
        options = onnx_runtime.session_options(
            settings.ORT_INTRA_OP_THREADS, settings.ORT_INTER_OP_THREADS, settings.ORT_GRAPH_OPTIMIZATION
        )
        runtime = worker.WorkerRuntime(
            device,
            providers,
            settings.WORKER_CACHE_DIR,
            settings.WORKER_MEMORY_BUDGET_MB * 1024 * 1024,
            client,
            options,
        )
        worker.runtime = runtime
        registry = ModelRegistry(poll_seconds=settings.REGISTRY_POLL_SECONDS, beacon=beacon_at(settings.VAR_DIR))
        registry.add_listener(runtime.on_snapshot)
        registry.start()
        heartbeat = Heartbeat(client, queue, hostname)
        heartbeat.start()
        self.stdout.write(f"worker for {device} on queue {queue} (concurrency {concurrency}, providers {providers})")
        self.stdout.flush()
        try:
            app.worker_main(
                [
                    "worker",
                    "--queues", queue,
                    "--concurrency", str(concurrency),
                    "--pool", "threads",
                    "--hostname", f"{device}@{hostname}",
                    "--prefetch-multiplier", "1",
                    "--without-gossip", "--without-mingle", "--without-heartbeat",
                    "--loglevel", settings.LOG_LEVEL,
                ]
            )  # fmt: skip
        finally:
            heartbeat.stop()
            registry.stop()
