"""Who may hold an inference worker's connections, and how many
(:class:`~inference.workers.server.socket_server.WorkerServer` asks, under its lock).

Two budgets, so that connections nobody authenticated never crowd out the
front ends that authenticate:

- **Handshakes** (a TCP connection until its TLS handshake completes): at
  most ``pending_per_address`` from one source address and ``pending`` in
  all. When ``pending`` are in progress, a new one takes the place of the
  oldest handshake of the address holding the most, provided that address
  holds more than the newcomer's would (else the newcomer is refused): so a
  few addresses that open connections and send nothing cannot keep a front
  end from completing its handshake, and flooders only displace each other.
  Each handshake has one deadline (``handshake_seconds``, the server's
  watchdog). A Unix socket's peer is known when it connects (the kernel's
  ``SO_PEERCRED``): it takes no handshake.
- **Authenticated connections**, counted per authenticated front end: a
  process on this machine (its uid and pid) or, over TLS, its certificate
  at its address; at most ``per_peer`` each, ``connections`` in all. A
  front end's pool holds at most WORKER_CONNECTIONS_PER_PROCESS (32) per
  process, so the default ``per_peer`` (256) is never reached by one
  process, nor by eight behind one certificate and address.
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """How many connections a worker holds, and for how long."""

    connections: int = 1024
    per_peer: int = 256
    pending: int = 64
    pending_per_address: int = 16
    handshake_seconds: float = 5.0
    idle_seconds: float = 300.0


def local_identity(pid: int, uid: int) -> str:
    """The identity of a front-end process on this machine (its Unix socket's peer)."""
    return f"process {pid} (uid {uid}) on this machine"


def tls_identity(sock: ssl.SSLSocket, address: str) -> str:
    """The identity of a TLS peer: its certificate's common name and
    fingerprint, at its address."""
    der = sock.getpeercert(binary_form=True) or b""
    subject = dict(item for rdn in (sock.getpeercert() or {}).get("subject", ()) for item in rdn)
    return f"{subject.get('commonName', '?')} (certificate sha256:{hashlib.sha256(der).hexdigest()[:16]}) at {address}"


class Admission:
    """The worker's handshake and connection budgets (see module doc); not
    thread-safe: the server calls it under its lock. A record is any object
    with ``peer`` (its source address), ``started`` and ``identity`` (set
    here once it authenticated)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._handshakes: dict[str, list] = {}  # source address -> its records in their handshake, oldest first
        self._pending = 0
        self._peers: dict[str, int] = {}  # identity -> authenticated connections
        self.authenticated = 0

    def handshake(self, record) -> tuple[bool, object | None]:
        """Whether a new TCP connection may start its handshake, and the
        handshake it displaces (to cut), if any."""
        limits = self.limits
        mine = self._handshakes.get(record.peer, [])
        if len(mine) >= limits.pending_per_address:
            return False, None
        displaced = None
        if self._pending >= limits.pending:
            address, held = max(self._handshakes.items(), key=lambda item: (len(item[1]), -item[1][0].started))
            if len(held) <= len(mine) + 1:
                return False, None
            displaced = held.pop(0)
            if not held:
                del self._handshakes[address]
            self._pending -= 1
        self._handshakes.setdefault(record.peer, []).append(record)
        self._pending += 1
        return True, displaced

    def handshake_over(self, record) -> None:
        """The record's handshake ended (or it was displaced, or cut)."""
        held = self._handshakes.get(record.peer)
        if held is not None and record in held:
            held.remove(record)
            self._pending -= 1
            if not held:
                del self._handshakes[record.peer]

    def authenticate(self, record, identity: str) -> str | None:
        """Count an authenticated connection of ``identity``; or why it is
        refused (at a limit)."""
        limits = self.limits
        if self.authenticated >= limits.connections:
            return f"the worker holds {self.authenticated} connections (WORKER_MAX_CONNECTIONS)"
        held = self._peers.get(identity, 0)
        if held >= limits.per_peer:
            return f"{identity} holds {held} connections to it (WORKER_MAX_CONNECTIONS_PER_PEER)"
        self._peers[identity] = held + 1
        self.authenticated += 1
        record.identity = identity
        return None

    def forget(self, record) -> None:
        """The record's connection closed."""
        self.handshake_over(record)
        identity = record.identity
        if identity is None:
            return
        record.identity = None
        self.authenticated -= 1
        left = self._peers[identity] - 1
        if left:
            self._peers[identity] = left
        else:
            del self._peers[identity]

    def held(self, identity: str) -> int:
        """Authenticated connections of ``identity`` now."""
        return self._peers.get(identity, 0)
