"""What the management API's views share (DRF): authentication (an API
token, ``Authorization: Bearer <token>``, or the web UI's session with
CSRF), JSON, pagination, and the one error shape.

Every 4xx answers ``{"error": "<one sentence>", "fields": {<field>:
[<messages>]}}`` (declared once in the schema:
:class:`~models_store.web.fields.ErrorSerializer`), with ``fields`` only for
validation errors; the store's refusals carry their status
(:mod:`models_store.errors`); a dependency that is down answers 503 with
``Retry-After``, a full disk 507 (:func:`models_store.outages.http_answer`).
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from drf_spectacular.utils import OpenApiParameter
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from models_store import outages
from models_store.errors import http_status
from models_store.web.authentication import BearerTokenAuthentication
from models_store.web.openapi import ManagementAutoSchema
from models_store.web.pagination import DEFAULT_LIMIT, MAX_LIMIT, ListPage

logger = logging.getLogger(__name__)


def field_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested validation errors as ``{"field.index.subfield": [messages]}``."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            for name, messages in field_errors(value, f"{prefix}.{key}" if prefix else str(key)).items():
                flat.setdefault(name, []).extend(messages)
    elif isinstance(detail, list):
        for index, item in enumerate(detail):
            if isinstance(item, (dict, list)):
                nested = field_errors(item, f"{prefix}.{index}" if prefix else str(index))
                for name, messages in nested.items():
                    flat.setdefault(name, []).extend(messages)
            else:
                flat.setdefault(prefix, []).append(str(item))
    else:
        flat.setdefault(prefix, []).append(str(detail))
    return flat


def validation_error_body(exc: ValidationError) -> dict:
    """``{"error": "<one sentence>", "fields": {...}}`` of a DRF validation error;
    errors that concern no field go into the sentence only."""
    flat = field_errors(exc.detail)
    general = flat.pop("", []) + flat.pop(api_settings.NON_FIELD_ERRORS_KEY, [])
    if not flat:
        return {"error": " ".join(general) or "invalid request"}
    if len(flat) == 1 and not general:
        ((name, messages),) = flat.items()
        sentence = f"{name}: {' '.join(messages)}"
    else:
        sentence = " ".join([*general, f"invalid fields: {', '.join(flat)}"])
    return {"error": sentence, "fields": flat}


def api_exception_handler(exc, context) -> Response:
    """Every error as ``{"error": ...}`` (validation errors with ``fields``):
    the store's refusals with their status, DRF's own (401, 403, 404, 405, 415,
    parse errors), Django's refusals of a form body beyond its limits (400,
    413); a dependency that is down 503 with ``Retry-After``, a full disk
    507 (:func:`models_store.outages.http_answer`); anything unexpected is
    logged and answered 500."""
    code = http_status(exc)
    if code is not None:
        body = {"error": str(exc)}
        if getattr(exc, "differences", None):  # the signature guard's
            body["differences"] = exc.differences
        return Response(body, status=code)
    if isinstance(exc, SuspiciousOperation):  # Django's limits on a form body (fields, files, size)
        return Response({"error": str(exc)}, status=413 if isinstance(exc, RequestDataTooBig) else 400)
    response = drf_exception_handler(exc, context)
    if response is None:
        outage = outages.http_answer(exc)
        if outage is not None:  # a dependency is down, or the disk is full: not the request's fault
            status, message, headers = outage
            logger.warning("management API answered %s: %s: %s", status, type(exc).__name__, exc)
            return Response({"error": message}, status=status, headers=headers)
        logger.exception("unexpected error in the management API", exc_info=exc)
        return Response({"error": f"internal error ({type(exc).__name__}); see the server log"}, status=500)
    if isinstance(exc, ValidationError):
        response.data = validation_error_body(exc)
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"error": str(response.data["detail"])}
    else:
        response.data = {"error": str(exc)}
    return response


PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit", {"type": "integer", "minimum": 1},
        description=f"Items per page (default {DEFAULT_LIMIT}; more than {MAX_LIMIT}: {MAX_LIMIT}).",
    ),
    OpenApiParameter("offset", {"type": "integer", "minimum": 0}, description="Items to skip (default 0)."),
]  # fmt: skip
#: A keyset list's parameters: ``after`` besides ``limit`` and ``offset``.
KEYSET_PAGE_PARAMETERS = [
    *PAGE_PARAMETERS,
    OpenApiParameter(
        "after", str,
        description="The page of the items that follow this one (a model's name), in the list's order: found through "
        "the order's index, so a deep page costs what the first does; with it, offset skips that many more. "
        "Empty: the first page.",
    ),
]  # fmt: skip


class ManagementView(APIView):
    """Base of the management API's views: token or session authentication,
    JSON, the one error shape, the management API's schema class."""

    # The session is the web UI's (its scripts call the API); DRF enforces CSRF for it.
    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]
    schema = ManagementAutoSchema()

    def get_exception_handler(self):
        return api_exception_handler

    @property
    def token(self):
        """The caller's ApiToken (BearerTokenAuthentication's ``request.auth``); None for the web UI's session."""
        return self.request.auth

    def page(self, items, serializer_class, keyset=None) -> Response:
        """One page of ``items`` (a query or a list) as :class:`ListPage` answers it
        (``keyset``: the query's :class:`~models_store.web.pagination.Keyset`, for ``after=`` pages)."""
        paginator = ListPage()
        page = paginator.paginate_queryset(items, self.request, view=self, keyset=keyset)
        return paginator.get_paginated_response(serializer_class(page, many=True).data)
