"""Root URLs: the V2 and TF Serving inference APIs, the management API
(``/api/``), the web UI, the admin."""

from django.contrib import admin
from django.http import HttpResponse, HttpResponseNotFound
from django.urls import include, path

from hosting.wsgi_dispatch import PROTOCOL_PREFIXES
from inference.http.responses import not_found as protocol_not_found

urlpatterns = [
    path("", include("inference.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("models_store.api_urls")),
    path("", include("models_store.urls")),
]


def not_found(request, exception=None) -> HttpResponse:
    """JSON 404 for the protocol APIs and the management API, plain for the rest."""
    if request.path.startswith((*PROTOCOL_PREFIXES, "/api/")):
        return protocol_not_found(request, exception)
    return HttpResponseNotFound("<h1>Not found</h1>")


handler404 = not_found
