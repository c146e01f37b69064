"""Certificates of the worker link for tests: one deployment CA per
directory, made by the same code as ``manage.py make_worker_certs``."""

from __future__ import annotations

from pathlib import Path

from hosting import worker_certs


def worker_link(directory: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(front-end settings, worker settings): the WORKER_TLS_* files of each
    role, all from one new CA in ``directory``."""
    worker_certs.write_set(directory, "modelhost-worker", days=2)
    return worker_certs.environment(directory, "frontend"), worker_certs.environment(directory, "worker")
