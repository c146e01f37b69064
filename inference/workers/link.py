"""Who may use the worker link, and how each end proves it.

- **Across machines: mutual TLS** (Python's ``ssl``, TLS 1.3 only). Every
  worker has a certificate for the name ``WORKER_TLS_SERVER_NAME`` with the
  serverAuth extended key usage, every front end one with clientAuth, both
  issued by the deployment's own CA (``manage.py make_worker_certs``,
  cert-manager or ``openssl``). A front end verifies the worker's
  certificate (chain to the CA, name, usage) before it sends anything; a
  worker verifies the front end's before it reads a frame. A Redis
  heartbeat alone is therefore never enough to receive requests, and the
  tensors travel encrypted with per-record integrity.
- **On one machine: the Unix socket** (mode 0600), whose peer the kernel
  names (``SO_PEERCRED``): each end accepts only a peer running as its own
  user. Not encrypted (nothing leaves the machine).

No TLS settings: the worker has no TCP listener and front ends reach only
workers on their own machine.
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import struct
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

#: The name in every worker certificate that front ends check.
DEFAULT_SERVER_NAME = "modelhost-worker"


class LinkRefused(ConnectionError):
    """The other end is not one of this deployment's (its reason is the message)."""


class LinkConfigError(ValueError):
    """The worker link's settings are incomplete or unreadable."""


@dataclass(frozen=True)
class TLSFiles:
    """The deployment CA and this process's certificate and key (PEM file
    paths), and the name worker certificates carry."""

    ca: str
    cert: str
    key: str
    server_name: str = DEFAULT_SERVER_NAME

    @classmethod
    def from_settings(cls, ca: str, cert: str, key: str, server_name: str = "") -> TLSFiles | None:
        """None when none of the three files is set; raises LinkConfigError
        when only some are, or when they do not load (a missing file, a key
        that does not match its certificate)."""
        given = [bool(ca), bool(cert), bool(key)]
        if not any(given):
            return None
        if not all(given):
            raise LinkConfigError("worker link TLS needs all of WORKER_TLS_CA, WORKER_TLS_CERT and WORKER_TLS_KEY")
        files = cls(ca, cert, key, server_name or DEFAULT_SERVER_NAME)
        try:
            files.server_context  # noqa: B018  (loads every file once, here, with a clear error)
        except (OSError, ssl.SSLError) as exc:
            raise LinkConfigError(f"the worker link's TLS files do not load: {exc}") from None
        return files

    def _context(self, protocol: int) -> ssl.SSLContext:
        context = ssl.SSLContext(protocol)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.verify_mode = ssl.CERT_REQUIRED
        context.verify_flags |= ssl.VERIFY_X509_STRICT
        context.load_verify_locations(cafile=self.ca)  # this deployment's CA only, never the system's
        context.load_cert_chain(self.cert, self.key)
        return context

    @cached_property
    def server_context(self) -> ssl.SSLContext:
        """A worker's: it requires a client certificate of the CA (OpenSSL
        checks its extended key usage allows clientAuth)."""
        context = self._context(ssl.PROTOCOL_TLS_SERVER)
        context.num_tickets = 0  # connections are long-lived; nothing to resume
        return context

    @cached_property
    def client_context(self) -> ssl.SSLContext:
        """A front end's: the worker's certificate must chain to the CA,
        name ``server_name`` and allow serverAuth."""
        context = self._context(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = True
        return context


_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket, as the
    kernel recorded it when the connection was made."""
    pid, uid, _ = _CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return pid, uid


def check_local_peer(sock: socket.socket, uid: int) -> int:
    """The pid of a Unix socket's peer; raises LinkRefused unless it runs as ``uid``."""
    pid, peer_uid = peer_credentials(sock)
    if peer_uid != uid:
        raise LinkRefused(f"its process {pid} runs as uid {peer_uid}, not {uid}")
    return pid


def refusal_reason(exc: BaseException) -> str:
    """Why a TLS handshake with the other end failed, in words an operator
    can act on."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its certificate is not one of this deployment's ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or str(exc)).lower().replace("_", " ")
        if "certificate" in reason or "unknown ca" in reason or "alert" in reason:
            return f"it refused this end's certificate ({reason})"
        return f"TLS failed ({reason})"
    return str(exc) or type(exc).__name__


#: sun_path holds 108 bytes; leave room.
_UNIX_PATH_MAX = 100


def unix_socket_path(var_dir: Path, worker_id: str) -> str | None:
    """Where a worker's Unix socket goes: ``$VAR_DIR/run/worker-<id>.sock``,
    or, when that path is too long for a socket, a short one in a directory
    of this user's only (``/tmp/modelhost-<uid>/``, mode 0700, refused if it
    is anyone else's); None when neither can be had."""
    preferred = Path(var_dir).resolve() / "run" / f"worker-{worker_id}.sock"
    preferred.parent.mkdir(parents=True, exist_ok=True)
    if len(str(preferred)) < _UNIX_PATH_MAX:
        return str(preferred)
    directory = Path(tempfile.gettempdir()) / f"modelhost-{os.getuid()}"
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        owner = directory.lstat()
        if owner.st_uid != os.getuid() or owner.st_mode & 0o077 or directory.is_symlink():
            return None
    except OSError:
        return None
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:16]
    short = directory / f"{digest}.sock"
    return str(short) if len(str(short)) < _UNIX_PATH_MAX else None


def unix_listener(path: str) -> socket.socket:
    """A Unix socket at ``path`` that only this user can connect to (0600
    from the start: the umask covers the window before chmod)."""
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(512)
    return listener
