"""``manage.py serve``: migrate, import a model repository, and serve.

The REST server runs as a gunicorn child process (see hosting/gunicorn_conf.py);
this process supervises it: SIGTERM or SIGINT stops it cleanly, and serve
exits with the child's status when it ends on its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from models_store.repository import import_repository


class Command(BaseCommand):
    help = "Migrate, import --model-repository, and serve V2 REST (and gRPC with --grpc-port)."

    def add_arguments(self, parser):
        parser.add_argument("--model-repository", type=Path, help="Triton-style repository to import first")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--http-port", type=int, default=8000)
        parser.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
        parser.add_argument("--workers", type=int, default=settings.HTTP_WORKERS, help="HTTP server processes")
        parser.add_argument("--threads", type=int, default=settings.HTTP_THREADS, help="threads per process")

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        repository = options["model_repository"]
        if repository is not None:
            try:
                results = import_repository(repository)
            except FileNotFoundError as exc:
                raise CommandError(str(exc)) from None
            for result in results:
                self.stdout.write(str(result))
        connections.close_all()
        env = dict(
            os.environ,
            HTTP_BIND=f"{options['host']}:{options['http_port']}",
            HTTP_WORKERS=str(options["workers"]),
            HTTP_THREADS=str(options["threads"]),
            DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "hosting.settings"),
        )
        base = Path(settings.BASE_DIR)
        conf = str(base / "hosting" / "gunicorn_conf.py")
        http = [sys.executable, "-m", "gunicorn", "-c", conf, "hosting.wsgi:application"]
        self.stdout.write(f"serving V2 REST on http://{options['host']}:{options['http_port']}")
        sys.stdout.flush()
        child = subprocess.Popen(http, cwd=base, env=env)

        def stop(signum, frame):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        code = child.wait()
        if code not in (0, -signal.SIGTERM):
            raise CommandError(f"the HTTP server exited with status {code}")
