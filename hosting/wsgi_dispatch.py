"""Two Django handlers behind one WSGI callable.

Requests for the inference protocols (``/v2...``, ``/v1/...``, ``/metrics``)
go to :class:`ProtocolHandler`: the same Django project, but no middleware
(the protocol views use no sessions, CSRF, user authentication, messages or
page security headers) and the protocol-only URLconf ``inference.urls``. This
keeps per-request work on the inference path to what the protocol needs.
Everything else (web UI, admin, management API) goes to Django's standard
handler with the full middleware stack.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.core.handlers.wsgi import LimitedStream, WSGIHandler, WSGIRequest

from hosting.body_gate import WatchedInput, content_length
from inference.http.responses import RawResponse
from inference.rest.views import NOT_READY_RETRY_SECONDS
from inference.urls import INFER_PATH, infer_view

PROTOCOL_PREFIXES = ("/v2", "/v1/", "/metrics")
PROTOCOL_URLCONF = "inference.urls"


class DirectRequest(WSGIRequest):
    """The WSGIRequest of an inference request on the direct route, built
    with what the inference view reads (``META``, ``path``, ``method`` and
    the body) and nothing more: its path is ASCII and there is no script
    prefix (the handler checks), so ``PATH_INFO`` needs no decoding; a body
    behind the body gate is already bounded by its Content-Length, so it is
    read without Django's LimitedStream; ``content_type`` is parsed only if
    asked for. Its view may answer with a RawResponse (``takes_raw_response``)."""

    takes_raw_response = True

    def __init__(self, environ: dict, path_info: str):
        self.environ = self.META = environ
        self.path_info = self.path = path_info
        self.method = "POST"
        stream = environ["wsgi.input"]
        if type(stream) is not WatchedInput:
            stream = LimitedStream(stream, content_length(environ))
        self._stream = stream
        self._read_started = False
        self.resolver_match = None

    def __getattr__(self, name: str):
        if name in ("content_type", "content_params"):
            self._set_content_type_params(self.environ)
            return self.__dict__[name]
        raise AttributeError(name)


class ProtocolHandler(WSGIHandler):
    """Django's WSGI handler without middleware, resolving ``inference.urls``.

    Inference requests (``POST .../infer``) skip the parts of Django's request
    cycle they do not use: the script prefix (they reverse no URL), the
    request_started / request_finished signals, whose receivers recycle
    database connections (inference never touches the database; the registry
    and statistics threads manage their own), and URL resolution: one regular
    expression (``inference.urls.INFER_PATH``) routes them to the inference
    view, with Django's own exception-to-response conversion; an ASCII path
    without a script prefix gets a :class:`DirectRequest`, and a
    RawResponse answer goes out as it is. Every other protocol route keeps
    the full cycle.
    """

    def __init__(self):
        super().__init__()
        self._infer_path = INFER_PATH
        self._infer_view = infer_view
        self._prefixed = settings.FORCE_SCRIPT_NAME is not None

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "POST" or not path.endswith("/infer"):
            return super().__call__(environ, start_response)
        if path.isascii() and not self._prefixed and not environ.get("SCRIPT_NAME"):
            request = DirectRequest(environ, path)
        else:
            request = self.request_class(environ)
        match = self._infer_path.fullmatch(request.path_info)
        if match is None:
            response = self.get_response(request)  # Django's 404 (or another route's answer)
        else:
            request.urlconf = PROTOCOL_URLCONF
            try:
                if match["model_version"] is None:
                    response = self._infer_view(request, model_name=match["model_name"])
                else:
                    response = self._infer_view(request, **match.groupdict())
            except Exception as exc:  # as Django's handler does: its 500 page / error log
                response = response_for_exception(request, exc)
        if type(response) is RawResponse:
            start_response(response.status_line, response.headers)
            return [response.content]
        start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
        return [response.content]

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(self._get_response)

    def get_response(self, request):
        request.urlconf = PROTOCOL_URLCONF
        return super().get_response(request)


READY_PATH = "/v2/health/ready"
GRPC_NOT_READY = b'{"error":"the server is not ready: its gRPC server is not listening yet","ready":false}'


class Dispatcher:
    """WSGI callable: protocol paths to the lean handler, the rest to the full one.

    ``grpc_ready_file`` (``serve --grpc-port`` sets GRPC_READY_FILE): the
    ready route answers 503 while that file is missing, i.e. until the gRPC
    server listens, so that "ready" means both transports.
    """

    def __init__(self, protocol, site, grpc_ready_file: str = ""):
        self.protocol = protocol
        self.site = site
        self.grpc_ready_file = grpc_ready_file

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith(PROTOCOL_PREFIXES):
            if path == READY_PATH and self.grpc_ready_file and not os.path.exists(self.grpc_ready_file):
                start_response(
                    "503 Service Unavailable",
                    [("Content-Type", "application/json"), ("Retry-After", str(NOT_READY_RETRY_SECONDS))],
                )
                return [GRPC_NOT_READY]
            return self.protocol(environ, start_response)
        return self.site(environ, start_response)
