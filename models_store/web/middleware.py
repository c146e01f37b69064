"""Django middleware of the model store."""

from __future__ import annotations

import logging

from django.http import HttpResponse, JsonResponse

from models_store import outages

logger = logging.getLogger(__name__)


class DependencyOutageMiddleware:
    """A dependency's outage met by a web UI page (the database, S3, the
    broker; a full disk) is answered 503 with ``Retry-After`` (507 for the
    disk), not 500: JSON for the page's scripts, a line of text otherwise.
    The management API and the inference routes answer it themselves."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        answer = outages.http_answer(exception)
        if answer is None:
            return None
        status, message, headers = answer
        logger.warning("%s %s answered %s: %s: %s", request.method, request.path, status, type(exception).__name__,
                       exception)  # fmt: skip
        if request.headers.get("X-Requested-With") == "XMLHttpRequest":
            response = JsonResponse({"error": message}, status=status)
        else:
            response = HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
        for key, value in headers.items():
            response[key] = value
        return response
