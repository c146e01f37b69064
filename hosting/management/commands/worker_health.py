"""``manage.py worker_health --device cuda:0``: exit 0 when a worker of this
host for the device keeps its heartbeat in Redis, 1 otherwise (a container
health check)."""

import socket

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.workers.placement import DeviceError, heartbeat_key, queue_for


class Command(BaseCommand):
    help = "Health check of an inference worker (its Redis heartbeat)."

    def add_arguments(self, parser):
        parser.add_argument("--device", required=True)
        parser.add_argument("--hostname", default=socket.gethostname())

    def handle(self, *args, device, hostname, **options):
        try:
            pattern = heartbeat_key(queue_for(device), hostname) + "-*"  # worker ids: <hostname>-<pid>
        except DeviceError as exc:
            raise CommandError(str(exc)) from None
        try:
            client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3)
            alive = any(True for _ in client.scan_iter(match=pattern, count=500))
        except redis.RedisError as exc:
            raise CommandError(f"Redis unreachable: {exc}") from None
        if not alive:
            raise CommandError(f"no heartbeat for {device} on {hostname}")
        self.stdout.write("alive")
