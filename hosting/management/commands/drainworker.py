"""``manage.py drainworker <worker id>``: drain an inference worker and stop
it, from any machine of the deployment (as SIGTERM does on its own).

The worker (ids as its heartbeat and the front ends' log name them,
``<host>-<pid>``) reads the request with its next heartbeat (within a
second), takes no new request (front ends send elsewhere), answers every
request it holds (at most WORKER_DRAIN_SECONDS) and exits. The command
waits for that unless ``--no-wait``; it exits 1 if the worker is not live or
has not stopped within ``--timeout`` seconds.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.workers.placement import read_workers
from inference.workers.server.heartbeat import DRAIN_REQUEST_TTL_MS, drain_key


class Command(BaseCommand):
    help = "Drain an inference worker (no new request, answer those it holds) and stop it; needs REDIS_URL."

    def add_arguments(self, parser):
        parser.add_argument("worker", help="the worker's id (<host>-<pid>, as in its heartbeat)")
        parser.add_argument("--no-wait", action="store_true", help="return once the worker was asked")
        parser.add_argument(
            "--timeout", type=float, default=settings.WORKER_DRAIN_SECONDS + 15,
            help="seconds to wait for it to stop (default: WORKER_DRAIN_SECONDS + 15)",
        )  # fmt: skip

    def handle(self, *args, worker, no_wait, timeout, **options):
        if not settings.REDIS_URL:
            raise CommandError("drainworker needs REDIS_URL (the workers' heartbeats)")
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=5, socket_timeout=10)
        try:
            live = read_workers(client)
            if worker not in live:
                ids = ", ".join(sorted(live)) or "none"
                raise CommandError(f"no live worker {worker} (live workers: {ids})")
            client.set(drain_key(worker), b"1", px=DRAIN_REQUEST_TTL_MS)
            self.stdout.write(f"asked worker {worker} to drain")
            if no_wait:
                return
            deadline = time.monotonic() + timeout
            told = False
            while time.monotonic() < deadline:
                current = read_workers(client).get(worker)
                if current is None:
                    self.stdout.write(f"worker {worker} drained and stopped")
                    return
                if current.announcement.draining and not told:
                    told = True
                    held = current.announcement.busy
                    self.stdout.write(f"worker {worker} is draining: {held} request(s) held, no new one taken")
                time.sleep(0.2)
        except redis.RedisError as exc:
            raise CommandError(f"Redis at {settings.REDIS_URL} is unreachable: {exc}") from None
        raise CommandError(f"worker {worker} has not stopped within {timeout:g} s")
