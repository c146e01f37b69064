"""Dependencies a test can stop and start again: a PostgreSQL cluster of
the test's own (initdb + pg_ctl in a temporary directory, on a free port;
never the machine's shared server) and a TCP switch in front of a server
(moto's S3) that refuses connections while it is off, and can hold new
connections until released."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading

from tests.support.server import free_port


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else (shutil.which(name) or name)


class PrivatePostgres:
    """A PostgreSQL cluster in a temporary directory on a free port
    (trust authentication on 127.0.0.1, database ``modelhost``). Run as the
    ``postgres`` user when the tests run as root (initdb refuses root).
    ``stop()`` shuts it down at once (``-m fast``: clients are disconnected),
    ``start()`` brings it back with its data."""

    def __init__(self):
        self.port = free_port()
        self.directory = tempfile.mkdtemp(prefix="test-pg-")
        self.data = os.path.join(self.directory, "data")
        self._user = None
        if os.geteuid() == 0:
            self._user = pwd.getpwnam("postgres")
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self._run(_pg_bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        self._run(_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "modelhost")

    @property
    def held(self) -> int:
        return len(self.held_requests)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/modelhost"

    def _run(self, *command: str) -> None:
        if self._user is not None:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.directory)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} -c fsync=off"
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-o", options, "-l", f"{self.directory}/log", "-w", "start")

    def stop(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop")

    def close(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.directory, ignore_errors=True)


class Switch:
    """A TCP relay on 127.0.0.1:``port`` to ``target``. ``off()``: the port
    refuses connections and open ones are cut (a server that went away);
    ``on()``: it accepts again. ``hold()``: new connections wait, not relayed,
    until ``release()`` (``held``: how many wait; ``held_requests``: the first
    line each sent, e.g. ``b"PUT /bucket/key HTTP/1.1"``, to tell whose)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = free_port()
        self.held_requests: list[bytes] = []
        self._gate = threading.Event()
        self._gate.set()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.on()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def on(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def off(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self._cut()

    def hold(self) -> None:
        self._gate.clear()
        self._cut()  # pooled connections go too: the next request opens a new one, which waits

    def release(self) -> None:
        self._gate.set()

    def _cut(self) -> None:
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with self._lock:
            self._open.add(client)
        if not self._gate.is_set():
            first = self._first_line(client)
            with self._lock:
                self.held_requests.append(first)
            self._gate.wait()
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.add(upstream)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _first_line(client: socket.socket) -> bytes:
        """The first line the client sent, left unread (b"" if none within 5 s)."""
        client.settimeout(5)
        try:
            return client.recv(1024, socket.MSG_PEEK).split(b"\r\n", 1)[0]
        except OSError:
            return b""
        finally:
            client.settimeout(None)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
