"""Start-up checks of a worker-mode deployment: one SECRET_KEY that cannot
be guessed, the worker link's TLS files, and connection limits that fit
together (a front end's pool never above a worker's per-peer limit).

In worker mode the processes of a deployment run on several machines and
share the database: SECRET_KEY signs every web UI session and CSRF token
any front end accepts, so it must be one value set for every process, never
a placeholder from the example manifests, never short, and never the key a
machine generated for itself (``$VAR_DIR/secret_key``, which differs per
machine). ``runworker`` and ``serve`` (in worker mode) refuse to start
otherwise, saying why.
"""

from __future__ import annotations

import logging

from django.conf import settings

from inference.workers.link import LinkConfigError, TLSFiles

#: The placeholders of deploy/kubernetes and the docs' examples (docs/worker-mode.md).
PLACEHOLDERS = frozenset({"CHANGE-ME-generate-with-python-secrets-token-urlsafe-50", "REPLACE_ME-a-long-random-string"})
_PLACEHOLDER_MARKS = ("change-me", "change_me", "replace-me", "replace_me", "changeme", "replaceme")
#: Django's own deployment check asks for at least 50 characters and 5 different ones.
MIN_LENGTH, MIN_UNIQUE = 50, 5
_GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


class DeploymentError(ValueError):
    """A setting that a worker-mode deployment cannot run with (the message says which and why)."""


def secret_key_problem(key: str, generated: bool) -> str | None:
    """Why ``key`` cannot be a worker-mode deployment's SECRET_KEY, or None."""
    if generated:
        return (
            "SECRET_KEY is not set, so this machine generated its own ($VAR_DIR/secret_key); in worker mode "
            f"every process of the deployment needs the same one: set SECRET_KEY (e.g. {_GENERATE})"
        )
    lowered = key.lower()
    if key in PLACEHOLDERS or any(mark in lowered for mark in _PLACEHOLDER_MARKS):
        return f"SECRET_KEY is the example's placeholder: generate one ({_GENERATE})"
    if len(key) < MIN_LENGTH or len(set(key)) < MIN_UNIQUE:
        return (
            f"SECRET_KEY is too easy to guess ({len(key)} characters, {len(set(key))} different; at least "
            f"{MIN_LENGTH} and {MIN_UNIQUE}): generate one ({_GENERATE})"
        )
    return None


def worker_tls() -> TLSFiles | None:
    """The worker link's TLS files from settings (None: none set). Raises
    DeploymentError when they are incomplete or do not load."""
    try:
        return TLSFiles.from_settings(
            settings.WORKER_TLS_CA, settings.WORKER_TLS_CERT, settings.WORKER_TLS_KEY, settings.WORKER_TLS_SERVER_NAME
        )
    except LinkConfigError as exc:
        raise DeploymentError(str(exc)) from None


def connection_limits_problem(per_process: int, per_peer: int) -> str | None:
    """Why a front end's pool (``per_process`` connections to a worker) and a
    worker's per-peer limit (``per_peer``) cannot go together, or None: the
    worker must never refuse a connection a front end's pool may open."""
    if per_process < 1:
        return f"WORKER_CONNECTIONS_PER_PROCESS is {per_process}: a front end needs at least 1 connection per worker"
    if per_peer < per_process:
        return (
            f"WORKER_MAX_CONNECTIONS_PER_PEER ({per_peer}) is below WORKER_CONNECTIONS_PER_PROCESS ({per_process}): "
            "a worker would refuse connections a front end's pool opens; keep it several times larger"
        )
    return None


def check_worker_mode() -> TLSFiles | None:
    """Everything a worker-mode process checks at start-up; its TLS files.
    Raises DeploymentError."""
    problem = secret_key_problem(settings.SECRET_KEY, settings.SECRET_KEY_GENERATED) or connection_limits_problem(
        settings.WORKER_CONNECTIONS_PER_PROCESS, settings.WORKER_MAX_CONNECTIONS_PER_PEER
    )
    if problem:
        raise DeploymentError(problem)
    return worker_tls()


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit (worker
    mode: a front-end process keeps up to one connection per thread to each
    worker, e.g. 16 gRPC threads x 100 workers = 1,600 sockets, above the
    usual soft limit of 1,024). Returns the (soft, hard) limits now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            logging.getLogger(__name__).warning("could not raise the open files limit from %s to %s", soft, hard)
    return soft, hard
