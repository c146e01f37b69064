"""The tests' Redis: real servers, never a mock.

Every module that needs Redis takes a database of its own (its number from
an environment variable, with a default) on the machine's Redis at
127.0.0.1:6379, or, when the tests run in several pytest-xdist workers, on a
``redis-server`` of the worker's own (started by tests/conftest.py), so that
two workers never flush each other's databases.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time


def url(variable: str, default: int) -> str:
    """``redis://`` URL of the database named by ``variable`` (else ``default``) on the tests' Redis."""
    return f"redis://127.0.0.1:{os.environ.get('TEST_REDIS_PORT', '6379')}/{os.environ.get(variable, default)}"


def start_private_server() -> int:
    """Start a redis-server of this process's own (nothing on disk; stopped
    at exit) and return its port."""
    directory = tempfile.mkdtemp(prefix="test-redis-")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", directory, "--databases", "16"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def stop() -> None:
        process.terminate()
        process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)

    atexit.register(stop)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server did not start on port {port}")
