"""hosting/body_gate.py in process, with a fake ``wsgi.input``: when a request
takes its work slot, short and late bodies, early answers. (The live tests
in tests/interop/test_hostile_clients.py drive it through granian.)"""

from __future__ import annotations

import json
import threading
import time

import pytest

from hosting.body_gate import BodyGate, IncompleteBody


class Stream:
    """A body that arrives in ``chunks``; each read waits for ``gate`` when given."""

    def __init__(self, data: bytes, stall: threading.Event | None = None, truncate: int | None = None):
        self.data = data if truncate is None else data[:truncate]
        self.stall = stall
        self.reads = 0

    def read(self, size: int) -> bytes:
        self.reads += 1
        if self.stall is not None:
            self.stall.wait()
        chunk, self.data = self.data[:size], self.data[size:]
        return chunk

    def readline(self) -> bytes:
        return self.read(len(self.data))


def _call(gate: BodyGate, body: Stream | None, length: int):
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/x", "CONTENT_LENGTH": str(length), "wsgi.input": body}
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, dict(headers)

    payload = b"".join(gate(environ, start_response))
    return answer["status"], answer["headers"], payload


def _gate(app, slots=1, timeout=5.0, drain_limit=4 << 20):
    return BodyGate(app, slots=slots, timeout=timeout, min_rate=65536, drain_limit=drain_limit)


def test_the_work_slot_is_taken_once_the_body_is_complete():
    seen = {}

    def app(environ, start_response):
        stream = environ["wsgi.input"]
        first = stream.read(3)
        seen["free while reading"] = gate.free_slots()
        rest = stream.read()
        seen["free after the body"] = gate.free_slots()
        start_response("200 OK", [])
        return [first + rest]

    gate = _gate(app)
    status, _, payload = _call(gate, Stream(b"abcdef"), 6)
    assert (status, payload) == ("200 OK", b"abcdef")
    assert seen == {"free while reading": 1, "free after the body": 0}
    assert gate.free_slots() == 1


def test_a_short_body_is_refused_never_answered():
    def app(environ, start_response):
        try:
            body = environ["wsgi.input"].read()
        except IncompleteBody:
            body = b"partial"  # an application that swallows the error still cannot answer 200
        start_response("200 OK", [])
        return [b"result of " + body]

    status, headers, payload = _call(_gate(app), Stream(b"0123456789", truncate=4), 10)
    assert status == "400 Bad Request" and headers["Connection"] == "close"
    assert json.loads(payload) == {"error": "the request body ended after 4 of its 10 bytes (Content-Length)"}


def test_an_early_answer_waits_for_the_rest_of_the_body():
    def app(environ, start_response):
        start_response("404 Not Found", [])
        return [b"no such model"]

    stream = Stream(b"x" * (3 << 20))
    status, _, payload = _call(_gate(app), stream, 3 << 20)
    assert (status, payload) == ("404 Not Found", b"no such model")
    assert stream.data == b"" and stream.reads == 3  # read (1 MiB at a time) and dropped
    above = Stream(b"x" * (5 << 20))  # above the drain limit (MAX_REQUEST_BYTES): left unread
    assert _call(_gate(app), above, 5 << 20)[0] == "404 Not Found" and above.reads == 0


def test_a_late_body_is_answered_408_and_never_runs():
    ran = []

    def app(environ, start_response):
        environ["wsgi.input"].read()
        ran.append(True)
        start_response("200 OK", [])
        return [b"ok"]

    stall = threading.Event()
    threading.Timer(1.5, stall.set).start()  # the body comes, but too late
    started = time.monotonic()
    status, _, payload = _call(_gate(app, timeout=0.5), Stream(b"abc", stall=stall), 3)
    assert status == "408 Request Timeout" and "did not arrive in time" in json.loads(payload)["error"]
    assert not ran and time.monotonic() - started >= 1.4


@pytest.mark.parametrize("length", ["", "0", "abc"])
def test_requests_without_a_body_take_a_slot_at_once(length):
    def app(environ, start_response):
        assert gate.free_slots() == 0
        start_response("200 OK", [])
        return [b"ok"]

    gate = _gate(app)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/x", "CONTENT_LENGTH": length, "wsgi.input": None}
    assert b"".join(gate(environ, lambda *a: None)) == b"ok"


def test_a_large_body_gets_time_at_the_minimum_rate():
    """The deadline grows with the bytes received or being read
    (BODY_MIN_BYTES_PER_SECOND): a body read in chunks that each arrive
    slowly, but steadily, is accepted although the whole took longer than
    the base timeout; at a high minimum rate it is late."""

    class Steady(Stream):
        def read(self, size):
            time.sleep(0.3)
            return super().read(size)

    def app(environ, start_response):
        stream, parts = environ["wsgi.input"], []
        while chunk := stream.read(4):  # as Django's multipart parser reads (in 64 KiB chunks)
            parts.append(chunk)
        start_response("200 OK", [])
        return [b"".join(parts)]

    gate = BodyGate(app, slots=1, timeout=0.5, min_rate=4, drain_limit=1 << 20)  # +1 s per 4 bytes
    status, _, payload = _call(gate, Steady(b"0123456789ab"), 12)  # 3 chunks, 0.9 s > 0.5 s
    assert (status, payload) == ("200 OK", b"0123456789ab")
    strict = BodyGate(app, slots=1, timeout=0.5, min_rate=1 << 20, drain_limit=1 << 20)
    assert _call(strict, Steady(b"0123456789ab"), 12)[0] == "408 Request Timeout"


def _call_chunked(gate: BodyGate, body: Stream):
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/x", "HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input": body}
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, dict(headers)

    payload = b"".join(gate(environ, start_response))
    return answer["status"], answer["headers"], payload


def _echo(seen):
    def app(environ, start_response):
        seen["length"] = environ["CONTENT_LENGTH"]
        body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"] or 0))
        seen["free while running"] = gate_of[0].free_slots()
        start_response("200 OK", [])
        return [body]

    gate_of = []
    return app, gate_of


def test_a_chunked_body_is_read_and_handed_on_with_its_length():
    """Transfer-Encoding: chunked (no Content-Length): the application sees
    the whole body and its Content-Length, and works in a slot."""
    seen = {}
    app, gate_of = _echo(seen)
    gate = BodyGate(app, slots=1, timeout=5.0, min_rate=65536, drain_limit=1 << 20, chunked_limit=100)
    gate_of.append(gate)
    body = bytes(range(100))
    status, _, payload = _call_chunked(gate, Stream(body))
    assert (status, payload) == ("200 OK", body)
    assert seen == {"length": "100", "free while running": 0}
    assert gate.free_slots() == 1
    status, _, payload = _call_chunked(gate, Stream(b""))  # an empty chunked body: no body
    assert (status, payload, seen["length"]) == ("200 OK", b"", "0")


def test_a_chunked_body_past_the_limit_is_413_before_more_is_read():
    ran = []

    def app(environ, start_response):
        ran.append(True)
        start_response("200 OK", [])
        return [b"ok"]

    gate = BodyGate(app, slots=1, timeout=5.0, min_rate=65536, drain_limit=1 << 20, chunked_limit=100)
    stream = Stream(b"x" * 10_000)
    status, headers, payload = _call_chunked(gate, stream)
    assert status == "413 Content Too Large" and headers["Connection"] == "close"
    assert json.loads(payload) == {"error": "the chunked request body exceeds the limit of 100 bytes"}
    assert not ran
    assert len(stream.data) == 10_000 - 101  # counted as it came: one byte past the limit, no more
    assert gate.free_slots() == 1


def test_a_late_chunked_body_is_408():
    stall = threading.Event()
    threading.Timer(1.5, stall.set).start()
    ran = []

    def app(environ, start_response):
        ran.append(True)
        start_response("200 OK", [])
        return [b"never"]

    gate = BodyGate(app, slots=1, timeout=0.5, min_rate=1 << 20, drain_limit=1 << 20)
    status, _, payload = _call_chunked(gate, Stream(b"abc", stall=stall))
    assert not ran
    assert status == "408 Request Timeout" and "did not arrive in time" in json.loads(payload)["error"]
