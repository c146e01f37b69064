"""A real HTTP receiver of webhooks on 127.0.0.1 (http.server in a thread):
it answers the statuses of its script in turn (then 200) and keeps every
request it got (headers, body), for the tests to verify with the
``standardwebhooks`` library."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


class Receiver:
    """``with Receiver([500, 500]) as hooks: ... hooks.url`` ; ``hooks.received``."""

    def __init__(self, statuses: list[int] | None = None):
        self.statuses = list(statuses or [])
        self.received: list[Received] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                answer = f"answer {status} to request {len(receiver.received)}".encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        """The requests once at least ``count`` arrived (AssertionError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.received)} webhook request(s) after {timeout} s, expected {count}")


def deliver_inline(settings, monkeypatch, retry_max_seconds: float) -> None:
    """For a test: 127.0.0.1 allowed, a small back-off (0.05 s doubling up to
    ``retry_max_seconds``), and each attempt run in the caller's thread after
    its delay (no timer thread, no Celery)."""
    from models_store.webhooks import delivery

    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.WEBHOOK_RETRY_SECONDS = 0.05
    settings.WEBHOOK_RETRY_MAX_SECONDS = retry_max_seconds

    def inline(delay: float, delivery_id: int) -> None:
        time.sleep(delay)
        delivery.run(delivery_id)

    monkeypatch.setattr(delivery, "_start_timer", inline)
    monkeypatch.setattr(delivery, "_delivers_here", lambda: True)
