"""``manage.py make_worker_certs DIR``: a CA and certificates for the worker link.

Writes into DIR (PEM; keys mode 0600):

- ``ca.crt``, ``ca.key``: the deployment's CA (reused when DIR already holds one);
- ``worker.crt``, ``worker.key``: for every ``runworker`` (serverAuth, DNS name
  ``--server-name``, default ``modelhost-worker``, what front ends check);
- ``frontend.crt``, ``frontend.key``: for every front end (``serve``, clientAuth).

Workers get ``WORKER_TLS_CA=DIR/ca.crt WORKER_TLS_CERT=DIR/worker.crt
WORKER_TLS_KEY=DIR/worker.key``; front ends the same with ``frontend.*``.
With ``--kubernetes`` it also writes ``worker-tls-secrets.yaml``: the
Secrets ``modelhost-worker-tls`` and ``modelhost-frontend-tls`` (type
kubernetes.io/tls with ``ca.crt``) that deploy/kubernetes mounts. Keys are
ECDSA P-256 made by the ``cryptography`` package; ``ca.key`` need not be
kept on any machine that runs the deployment.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from hosting.worker_certs import CertificateError, environment, kubernetes_secrets, write_set


class Command(BaseCommand):
    help = "Make the worker link's CA and the worker and front-end certificates (mutual TLS) in DIR."

    def add_arguments(self, parser):
        parser.add_argument("directory")
        parser.add_argument(
            "--server-name", default=settings.WORKER_TLS_SERVER_NAME, help="the name front ends check on workers"
        )
        parser.add_argument("--days", type=int, default=825, help="validity of the worker and front-end certificates")
        parser.add_argument("--ca-days", type=int, default=3650, help="validity of a new CA")
        parser.add_argument("--kubernetes", action="store_true", help="also write worker-tls-secrets.yaml")

    def handle(self, *args, directory, server_name, days, ca_days, kubernetes, **options):
        out = Path(directory)
        try:
            made, pems = write_set(out, server_name, days, ca_days)
        except CertificateError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{'made a' if made else 'used the'} CA {out / 'ca.crt'}")
        self.stdout.write(f"made {', '.join(f'{out / role}.crt and .key' for role in pems)}")
        if kubernetes:
            path = out / "worker-tls-secrets.yaml"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as secret_file:
                secret_file.write(kubernetes_secrets(out, pems))
            self.stdout.write(f"made {path} (kubectl apply -f it)")
        for role, who in (("worker", "workers"), ("frontend", "front ends")):
            settings_line = " ".join(f"{k}={v}" for k, v in environment(out, role).items())
            self.stdout.write(f"{who}: {settings_line}")
