"""Request bodies that arrive slowly, short, or not at all.

granian 2.8.7 calls the WSGI application as soon as a request's headers are
in; the application then reads the body with blocking reads on its thread,
and granian has no body read timeout (``--http1-header-read-timeout`` covers
headers only; ``--backpressure`` only caps requests in flight). Measured on
``serve`` (2 processes x 4 threads): 8 connections that send
``Content-Length: 100`` and then one byte per second held every thread, and
every other request waited until they had finished. Serving through
granian's async interface (RSGI) would read bodies on the event loop, but its
hop to a thread pool cost 135 us per request on the tiny model (230 -> 365 us
p50, 3,600 -> 2,200 req/s), so the server stays WSGI and :class:`BodyGate`
wraps the application instead:

- **Work slots.** granian runs ``HTTP_THREADS + HTTP_BODY_THREADS`` threads
  per process, but at most ``HTTP_THREADS`` of them do work at once. A
  request takes its slot only once its body has been read to the end (a
  request without a body: at once), so a body that trickles in holds one of
  the waiting threads, never one that runs inferences. The slots are a
  fair-share gate (:mod:`inference.admission.fair_share`): when all are taken, requests
  wait in their caller's flow (its team, from the bearer token) and slots go
  to the flows in turn, so one team's flood does not queue ahead of
  everyone; a flow with ``queue_per_flow`` requests waiting already is
  answered 429 with ``Retry-After`` (:class:`SlotRefused`).
- **A deadline per body.** Every read is watched by one thread per process:
  a body that has not arrived ``BODY_READ_TIMEOUT_SECONDS`` after its request
  started (plus one second per ``BODY_MIN_BYTES_PER_SECOND`` bytes received
  or being read, so that large bodies over slow links finish) is answered ``408`` with
  ``Connection: close`` at the deadline, and the request never runs. granian
  cannot abort a blocked read, so the waiting thread is released when the
  client finishes or goes away; see docs/security.md.
- **Short bodies.** A body that ends before its Content-Length (the client
  half-closed its side) raises :class:`IncompleteBody`: a 400, never a
  result computed from part of a request.
- **Early answers.** An answer given before the body was read (a 404 for an
  unknown model version) is sent only after the rest of the body was read
  and dropped (up to ``MAX_REQUEST_BYTES``), so that a client still sending
  gets it instead of a broken pipe.
- **Chunked bodies.** A body sent with ``Transfer-Encoding: chunked`` has no
  Content-Length, and Django reads only as many bytes as that says (none).
  granian hands the application the decoded chunks; the gate reads them
  first (watched like any body, counted as they arrive: past
  ``chunked_limit`` bytes, ``MAX_REQUEST_BYTES``, the request is answered
  413 and the rest is not read), then hands the application the body with
  its Content-Length, as if it had been sent so.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time

from django.core.exceptions import BadRequest

from inference.admission import auth
from inference.admission.fair_share import ANONYMOUS_FLOW, FairShare, Gate
from inference.protocol.errors import InvalidInput, RateLimited, RequestTooLarge

logger = logging.getLogger(__name__)

#: Size of the reads that drop the unread rest of a body.
DRAIN_CHUNK = 1 << 20
#: Size of the reads of a chunked body (each adds its bytes' time at the minimum rate to the deadline).
CHUNKED_READ = 64 * 1024


class IncompleteBody(InvalidInput, BadRequest):
    """The body ended before its Content-Length: HTTP 400 (the inference
    views answer it as INVALID_ARGUMENT, the rest of the site as Django's
    bad request; the gate answers ``{"error": ...}`` either way)."""

    status = 400


class SlotRefused(RateLimited, BadRequest):
    """A flow has too many requests waiting for this process's work slots:
    HTTP 429 with ``Retry-After`` (the answer replaces whatever the
    application made of the exception)."""

    status = 429


class BodyTimeout(IncompleteBody):
    """The body did not arrive in time: HTTP 408."""

    status = 408


class ChunkedTooLarge(RequestTooLarge, BadRequest):
    """A chunked body grew past the gate's ``chunked_limit``: HTTP 413 (the
    rest is not read; the connection closes)."""

    status = 413


def _chunked(environ) -> bool:
    """Whether the request's body comes in chunks without a Content-Length."""
    return not environ.get("CONTENT_LENGTH") and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()


def content_length(environ) -> int:
    """The declared body length; 0 when absent or malformed (the application
    refuses a malformed one itself)."""
    try:
        return max(0, int(environ.get("CONTENT_LENGTH") or 0))
    except ValueError:
        return 0


def _granian_runner(frame):
    """granian's request frame (``granian.wsgi._runner(proto, scope)``) that
    called the application, or None under another server. Its ``proto``
    sends a response from any thread, which is how a request whose read is
    blocked gets its 408 at the deadline."""
    if frame is not None and frame.f_code.co_name == "_runner" and "granian" in frame.f_code.co_filename:
        return frame
    return None


class WatchedInput:
    """``wsgi.input`` of a request with a body: counts, watches and refuses
    short bodies (see the module docstring). Reads never go past the
    Content-Length."""

    def __init__(self, gate: BodyGate, stream, length: int, caller_frame=None, environ=None, chunked: bool = False):
        self.gate = gate
        self.chunked = chunked  # a chunked body: ``length`` is a bound, a short read is its end
        self.environ = environ  # for the caller's flow when it must wait for a work slot
        self.stream = stream
        self.length = length
        self.remaining = length
        self.received = 0
        self.pending = 0  # bytes asked for by the read in progress
        self.started = time.monotonic()
        self.failure: IncompleteBody | None = None
        self.holds_slot = False
        self.draining = False
        self._runner_frame = caller_frame  # granian's request frame, checked only when needed

    def deadline(self) -> float:
        """Monotonic time by which the bytes read so far, and those of the read
        in progress, must have arrived: the timeout, plus one second per
        ``min_rate`` of them (a large body gets the time it needs at that rate;
        one read at a time, so no copy is added)."""
        gate = self.gate
        return self.started + gate.timeout + (self.received + self.pending) / gate.min_rate

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all the rest for -1/None); b"" at the end.
        Raises IncompleteBody (BodyTimeout) when the body ended short (came too late)."""
        if self.failure is not None:
            raise self.failure
        count = self.remaining if size is None or size < 0 else min(size, self.remaining)
        if count <= 0:
            return b""
        return self._watched(self.stream.read, count)

    def readline(self, size: int | None = -1) -> bytes:
        if self.failure is not None:
            raise self.failure
        if self.remaining <= 0:
            return b""
        line = self._watched(lambda _count: self.stream.readline(), None)
        return line if size is None or size < 0 else line[:size]

    def __iter__(self):
        while line := self.readline():
            yield line

    def close(self) -> None:
        """Nothing to close: the server's stream is the server's (Django closes
        a request's stream once it has read the body)."""

    def _watched(self, read, count: int | None) -> bytes:
        gate = self.gate
        key = id(self)
        self.pending = count or 0
        gate.reading[key] = self
        try:
            data = read(count)
        finally:
            gate.reading.pop(key, None)
            self.pending = 0
        self.received += len(data)
        self.remaining -= len(data)
        if self.chunked:
            if self.failure is not None:  # late (the watchdog answered 408)
                raise self.failure
            return data
        if self.failure is None and ((count is not None and len(data) < count) or not data):
            self.failure = IncompleteBody(
                f"the request body ended after {self.received} of its {self.length} bytes (Content-Length)"
            )
        if self.failure is not None:
            raise self.failure
        if self.remaining <= 0 and not self.draining and not self.holds_slot:
            try:
                gate.acquire(self.environ)  # the body is here: now this request may work
            except RateLimited as exc:
                self.failure = SlotRefused(exc.message, exc.retry_after)
                raise self.failure from None
            self.holds_slot = True
        return data

    def drain(self) -> None:
        """Read and drop the rest of the body (watched like any read)."""
        self.draining = True
        while self.remaining > 0:
            self.read(DRAIN_CHUNK)

    def expire(self, now: float) -> None:
        """Called by the watchdog (only) past the deadline, once: mark the
        body late and answer 408 now when the server lets us (granian)."""
        self.failure = BodyTimeout(
            f"the request body did not arrive in time: {self.received} of its {self.length} bytes after "
            f"{now - self.started:.1f} s (BODY_READ_TIMEOUT_SECONDS is {self.gate.timeout:g})"
        )
        frame = _granian_runner(self._runner_frame)
        proto = frame.f_locals.get("proto") if frame is not None else None
        if proto is not None:
            status, headers, body = error_answer(self.failure)
            try:
                proto.response_bytes(status, headers, body)
            except Exception:  # the request ended meanwhile
                logger.debug("could not answer a late body early", exc_info=True)

    def finish(self) -> None:
        """The request is over: drop the reference to granian's frame."""
        self._runner_frame = None


def error_answer(exc: IncompleteBody | SlotRefused | ChunkedTooLarge) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of the answer to a short, late or too large
    body, or to a refused work slot."""
    body = json.dumps({"error": str(exc)}).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if isinstance(exc, SlotRefused):
        headers.append(("Retry-After", exc.retry_after_header))  # the connection stays: the body was read
    else:
        headers.append(("Connection", "close"))
    return exc.status, headers, body


REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large", 429: "Too Many Requests"}


def flow_of_request(environ) -> str:
    """The flow of a request's caller for the work slots
    (:mod:`inference.admission.fair_share`): the owner of its bearer token's
    shared-memory regions (its team when it has one, else its user), the
    anonymous callers' flow without a token, one flow for every unknown
    token. Answers from memory."""
    token = auth.bearer_token(environ.get("HTTP_AUTHORIZATION"))
    if token is None:
        return ANONYMOUS_FLOW
    return auth.region_owner(token) or "unknown-token"


class BodyGate:
    """WSGI middleware: work slots, body deadlines, short bodies, early
    answers (see the module docstring).

    ``slots``: requests of this process that may work at once (HTTP_THREADS);
    ``timeout`` (s) and ``min_rate`` (bytes/s): the body deadline;
    ``drain_limit`` (bytes): the most of an unread body read after an early answer;
    ``queue_per_flow``: requests one flow may have waiting for a slot (more: 429);
    ``flow(environ)``: a request's flow (asked only when it must wait);
    ``chunked_limit`` (bytes): the largest chunked body read (more: 413;
    default ``drain_limit``).
    """

    def __init__(
        self, app, *, slots: int, timeout: float, min_rate: float, drain_limit: int, queue_per_flow: int = 16,
        flow=flow_of_request, chunked_limit: int | None = None,
    ):  # fmt: skip
        self.app = app
        self.chunked_limit = drain_limit if chunked_limit is None else chunked_limit
        self.slots = Gate("the work slots of this HTTP process", max(1, slots), FairShare(queue_per_flow))
        self.flow = flow
        self.timeout = timeout
        self.min_rate = max(1.0, min_rate)
        self.drain_limit = drain_limit
        self.reading: dict[int, WatchedInput] = {}  # bodies being read now
        self._watchdog: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        if _chunked(environ):
            try:
                self._read_chunks(environ, sys._getframe(1))
            except (IncompleteBody, ChunkedTooLarge) as exc:
                status, headers, payload = error_answer(exc)
                start_response(f"{status} {REASONS[status]}", headers)
                return [payload]
        length = content_length(environ)
        if not length:
            try:
                self.acquire(environ)
            except RateLimited as exc:
                status, headers, payload = error_answer(SlotRefused(exc.message, exc.retry_after))
                start_response(f"{status} {REASONS[status]}", headers)
                return [payload]
            try:
                return self.app(environ, start_response)
            finally:
                self.release()
        if self._watchdog is None:
            self._start_watchdog()
        body = WatchedInput(self, environ["wsgi.input"], length, sys._getframe(1), environ)
        environ["wsgi.input"] = body
        try:
            result = self.app(environ, start_response)
        except IncompleteBody:
            if body.failure is None:
                raise
            result = []  # answered below (Django turns it into a response itself; other apps may not)
        finally:
            if body.holds_slot:
                body.holds_slot = False
                self.release()
        try:
            if body.failure is None and 0 < body.remaining <= self.drain_limit:
                try:
                    body.drain()
                except IncompleteBody:
                    pass
            if body.failure is None:
                return result
            if hasattr(result, "close"):
                result.close()
            status, headers, payload = error_answer(body.failure)
            start_response(f"{status} {REASONS[status]}", headers, sys.exc_info())
            return [payload]
        finally:
            body.finish()

    def _read_chunks(self, environ, caller_frame) -> None:
        """Read a chunked body (watched, counted as it arrives) and hand it on
        with its Content-Length. Raises ChunkedTooLarge past
        ``chunked_limit`` bytes, IncompleteBody (BodyTimeout) when late."""
        if self._watchdog is None:
            self._start_watchdog()
        limit = self.chunked_limit
        body = WatchedInput(self, environ["wsgi.input"], limit + 1, caller_frame, environ, chunked=True)
        parts, size = [], 0
        try:
            while data := body.read(min(CHUNKED_READ, limit + 1 - size)):
                size += len(data)
                if size > limit:
                    raise ChunkedTooLarge(f"the chunked request body exceeds the limit of {limit} bytes")
                parts.append(data)
        finally:
            body.finish()
        content = b"".join(parts)
        environ["CONTENT_LENGTH"] = str(len(content))
        environ["wsgi.input"] = io.BytesIO(content)

    def acquire(self, environ=None) -> None:
        """Take a work slot: at once when one is free and nobody waits, else
        in turn with the other flows. Raises RateLimited when the request's
        flow has ``queue_per_flow`` requests waiting already."""
        if not self.slots.try_enter():
            self.slots.enter(self.flow(environ or {}))

    def release(self) -> None:
        self.slots.leave()

    def free_slots(self) -> int:
        return self.slots.free

    def _start_watchdog(self) -> None:
        with self._lock:
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch, name="body-watchdog", daemon=True)
                self._watchdog.start()

    def _watch(self) -> None:
        tick = min(1.0, max(0.05, self.timeout / 10))
        while True:
            time.sleep(tick)
            now = time.monotonic()
            for body in list(self.reading.values()):
                if body.failure is None and now > body.deadline():
                    try:
                        body.expire(now)
                    except Exception:
                        logger.exception("answering a late request body failed")
