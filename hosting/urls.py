"""Root URLs: the V2 and TF Serving inference APIs, the management API
(``/api/``), the web UI, the admin."""

from django.contrib import admin
from django.http import HttpResponse, HttpResponseNotFound
from django.urls import include, path

from inference.codecs.message import dumps

urlpatterns = [
    path("", include("inference.rest.urls")),
    path("", include("inference.tfserving.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("models_store.api_urls")),
    path("", include("models_store.urls")),
]


def not_found(request, exception=None) -> HttpResponse:
    """JSON 404 for the protocol APIs and the management API, plain for the rest."""
    if request.path.startswith(("/v1/", "/v2", "/api/")):
        return HttpResponse(
            dumps({"error": f"not found: {request.method} {request.path}"}),
            status=404,
            content_type="application/json",
        )
    return HttpResponseNotFound("<h1>Not found</h1>")


handler404 = not_found
