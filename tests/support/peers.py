"""Hostile and measuring peers of the worker link, for the attack tests:
a rogue worker, a relay between a front end and a worker that records or
tampers, and readings of other processes from /proc and ``ss``."""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import threading
from collections import Counter
from pathlib import Path


class _Server:
    """A TCP server on 127.0.0.1 that serves each connection in a thread."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self._serve(sock)

    def _serve(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class RogueWorker(_Server):
    """A TCP server that poses as a worker: with ``context`` it completes TLS
    handshakes where the client lets it and reads application data; without,
    it records whatever arrives. ``accepted`` counts connections, ``data``
    holds the application bytes received (decrypted when TLS got that far)."""

    def __init__(self, context: ssl.SSLContext | None = None):
        self.context = context
        self.accepted = 0
        self.handshakes = 0
        self.data = bytearray()
        super().__init__()

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self.accepted += 1
        threading.Thread(target=self._pose, args=(sock,), daemon=True).start()

    def _pose(self, sock: socket.socket) -> None:
        sock.settimeout(5)
        try:
            if self.context is None:  # no TLS: take what the client sends first, then close
                chunk = sock.recv(65536)
                with self._lock:
                    self.data += chunk
                return
            sock = self.context.wrap_socket(sock, server_side=True)
            with self._lock:
                self.handshakes += 1
            while chunk := sock.recv(65536):
                with self._lock:
                    self.data += chunk
        except (OSError, ssl.SSLError):
            pass
        finally:
            sock.close()


class Relay(_Server):
    """A TCP relay to ``target`` that records what passes each way
    (``sent``: from the front end; ``received``: from the worker) and, once
    the front end's bytes reach ``tamper_at`` (a position in ``sent``),
    flips one bit there."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.sent = bytearray()
        self.received = bytearray()
        self.tamper_at: int | None = None
        self.tampered = 0
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_front_end: bool) -> None:
        try:
            while chunk := source.recv(65536):
                chunk = bytearray(chunk)
                with self._lock:
                    if not from_front_end:
                        self.received += chunk
                    else:
                        start, at = len(self.sent), self.tamper_at
                        if at is not None and start <= at < start + len(chunk):
                            chunk[at - start] ^= 0x01
                            self.tampered += 1
                        self.sent += chunk
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def rss_mib(pid: int) -> float:
    """The process's resident memory, MiB."""
    return _status(pid, "VmRSS") / 1024


def threads(pid: int) -> int:
    return _status(pid, "Threads")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process used so far, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def unix_connections(path: str) -> Counter:
    """The connections to the Unix socket listening at ``path`` now, counted
    by the pid of the process at the other end, as the kernel lists them
    (``ss -xpn``: the accepted socket names the path and its peer's inode)."""
    listing = subprocess.run(["ss", "-xpn"], capture_output=True, text=True, timeout=10, check=True).stdout
    owner: dict[str, int] = {}
    accepted: list[str] = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[0] != "u_str":
            continue
        local, inode, peer = fields[4], fields[5], fields[7]
        if found := re.search(r"pid=(\d+)", line):
            owner[inode] = int(found.group(1))
        if local == path:
            accepted.append(peer)
    return Counter(owner.get(peer, 0) for peer in accepted)
