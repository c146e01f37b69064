"""Driving a live ``serve`` process from tests: its management commands,
and HTTP requests with multipart bodies."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
import uuid

from tests.support.server import ROOT, LiveServer


def manage(server: LiveServer, *args: str, env: dict | None = None) -> str:
    """Run ``manage.py <args>`` against the server's database and store; its stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=dict(server.env, **(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def multipart(fields: dict[str, str], payload: bytes, filename: str = "model.onnx") -> tuple[bytes, str]:
    """(body, content type) of a form with ``fields`` and the file field ``file``."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def request(server: LiveServer, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    """(status, parsed JSON or raw bytes) of one HTTP request."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        kind = response.getheader("Content-Type", "")
        return response.status, json.loads(data) if kind.startswith("application/json") else data
    finally:
        conn.close()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
