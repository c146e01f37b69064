"""The protocol handler's direct route for ``POST .../infer`` (hosting/wsgi_dispatch.py):
a lean request object, answers sent as RawResponse there and as Django's
HttpResponse everywhere else. (The live tests in tests/interop/test_rest_wire.py
and test_rest_tritonclient.py drive it through granian.)"""

from __future__ import annotations

import io
import json

import pytest
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse

from hosting.body_gate import BodyGate
from hosting.wsgi_dispatch import DirectRequest, ProtocolHandler
from inference.http.bodies import ONE_READ_BYTES, read_split
from inference.http.responses import RawResponse, inference_response
from inference.http.views import DirectPostView


def _environ(path: str, body: bytes = b"", **extra) -> dict:
    return {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "h", "SERVER_PORT": "8000",
        "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http", **extra,
    }  # fmt: skip


class Answering(DirectPostView):
    """Answers 7 bytes of JSON header and 3 of binary data."""

    def post(self, request, model_name):
        return inference_response(b'{"a":1}XYZ', 7)


def test_a_raw_response_goes_out_as_it_is_only_on_the_direct_route():
    view = Answering.as_view()
    direct = view(DirectRequest(_environ("/v2/models/m/infer"), "/v2/models/m/infer"), model_name="m")
    assert type(direct) is RawResponse
    assert (direct.status_line, direct.content) == ("200 OK", b'{"a":1}XYZ')
    assert direct.headers == [("Content-Type", "application/octet-stream"), ("Inference-Header-Content-Length", "7")]
    # Through Django's own handler (middleware, the test client): the same answer as an HttpResponse.
    django = view(WSGIRequest(_environ("/v2/models/m/infer")), model_name="m")
    assert isinstance(django, HttpResponse)
    assert (django.status_code, django.content) == (200, b'{"a":1}XYZ')
    assert django["Content-Type"] == "application/octet-stream"
    assert django["Inference-Header-Content-Length"] == "7"


def test_the_lean_request_reads_its_body_through_the_gate_and_parses_its_content_type_when_asked():
    seen = {}

    def app(environ, start_response):
        request = DirectRequest(environ, environ["PATH_INFO"])
        seen["stream"] = type(request._stream).__name__
        seen["body"] = request.read()
        seen["content_type"] = (request.content_type, request.content_params)
        start_response("200 OK", [])
        return [b""]

    gate = BodyGate(app, slots=1, timeout=5, min_rate=65536, drain_limit=1 << 20)
    environ = _environ("/v2/models/m/infer", b"0123456789", CONTENT_TYPE="application/json; charset=utf-8")
    b"".join(gate(environ, lambda status, headers, exc_info=None: None))
    assert seen == {
        "stream": "WatchedInput",  # bounded by its Content-Length already: no LimitedStream around it
        "body": b"0123456789",
        "content_type": ("application/json", {"charset": "utf-8"}),
    }
    # Without the gate (another WSGI server), reads stop at the Content-Length all the same.
    environ = _environ("/v2/models/m/infer", b"0123456789")
    environ["wsgi.input"] = io.BytesIO(b"0123456789 and the next request")
    assert DirectRequest(environ, "/v2/models/m/infer").read() == b"0123456789"


@pytest.mark.parametrize("size", [ONE_READ_BYTES, ONE_READ_BYTES + 1])
def test_a_body_splits_into_its_header_and_an_aligned_tail_whatever_its_size(size):
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    reads = []

    class Counted(io.BytesIO):
        def read(self, n=-1):
            reads.append(n)
            return super().read(n)

    environ = _environ("/v2/models/m/infer", body)
    environ["wsgi.input"] = Counted(body)
    head, tail = read_split(DirectRequest(environ, "/v2/models/m/infer"), 1001)
    assert (head, tail) == (body[:1001], body[1001:])
    assert type(tail) is bytes  # a bytes object of its own: CPython aligns its data
    assert reads == ([size] if size <= ONE_READ_BYTES else [1001, size - 1001])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "name"),
    [("/v2/models/nowhere/infer", "nowhere"), ("/v2/models/z\xc3\xbcrich/versions/2/infer", "zürich")],
)
def test_an_unknown_model_is_404_on_the_direct_route_and_a_non_ascii_path_is_decoded(path, name):
    # PATH_INFO as WSGI gives it: the path's UTF-8 bytes as latin-1 characters; a non-ASCII path takes
    # Django's own request, which decodes it.
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, dict(headers)

    body = b"".join(ProtocolHandler()(_environ(path, b"{}"), start_response))
    assert answer["status"] == "404 Not Found"
    assert answer["headers"]["Content-Type"] == "application/json"
    assert name in json.loads(body)["error"]
