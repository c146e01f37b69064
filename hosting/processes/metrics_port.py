"""The metrics port (``serve --metrics-port``, Triton's 8002): ``GET /metrics``
answers the exposition of ``/metrics`` on the HTTP port (ours and Triton's
metrics, every server process), fetched from it per scrape, so that both say
the same; anything else is 404. It runs in ``serve``'s own process (a thread
of :class:`http.server.ThreadingHTTPServer`), beside the supervisor; while
the HTTP server is restarting it answers 503.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger(__name__)

#: Seconds a scrape waits for the HTTP port's answer.
FETCH_TIMEOUT_SECONDS = 10.0


def local_address(host: str) -> str:
    """Where this machine reaches a server bound to ``host`` (a wildcard: the loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class MetricsPort:
    """The metrics port's server on ``host``:``port`` relaying ``source_url``
    (the HTTP port's ``/metrics``). :meth:`start` binds (OSError when the
    port is taken) and serves in a daemon thread; :meth:`stop` closes it."""

    def __init__(self, host: str, port: int, source_url: str):
        self.source_url = source_url
        handler = type("Handler", (_Handler,), {"source_url": source_url})
        self.server = ThreadingHTTPServer((host, port), handler, bind_and_activate=False)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsPort:
        self.server.allow_reuse_address = True
        self.server.server_bind()
        self.server.server_activate()
        self._thread = threading.Thread(target=self.server.serve_forever, name="metrics-port", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    source_url = ""
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self._answer(404, b"application/json", json.dumps({"error": f"no such path: {self.path}"}).encode())
            return
        try:
            with urllib.request.urlopen(self.source_url, timeout=FETCH_TIMEOUT_SECONDS) as answer:
                self._answer(answer.status, answer.headers.get("Content-Type", "text/plain").encode(), answer.read())
        except urllib.error.HTTPError as exc:  # e.g. 404 with --allow-metrics false
            self._answer(exc.code, exc.headers.get("Content-Type", "application/json").encode(), exc.read())
        except OSError as exc:
            body = json.dumps({"error": f"the HTTP server did not answer /metrics: {exc}"}).encode()
            self._answer(503, b"application/json", body)

    def _answer(self, status: int, content_type: bytes, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type.decode())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:
        logger.debug("metrics port: " + format, *args)


def start(options: dict, out) -> MetricsPort | None:
    """The metrics port of ``serve``'s ``options`` (``allow_metrics``,
    ``metrics_port``, ``http_address`` or else ``host``: the HTTP server's
    address, which Triton's metrics port binds too; ``http_port``), started,
    or None when metrics are off or the port is taken (said on ``out``, a
    stream: the HTTP port's ``/metrics`` still answers)."""
    if not options["allow_metrics"]:
        return None
    host, port = options.get("http_address") or options["host"], options["metrics_port"]
    source = f"http://{local_address(host)}:{options['http_port']}/metrics"
    try:
        server = MetricsPort(host, port, source).start()
    except OSError as exc:
        out.write(f"not serving metrics on {host}:{port}: {exc} (they stay at {source})\n")
        return None
    out.write(f"serving metrics on http://{host}:{port}/metrics\n")
    return server
