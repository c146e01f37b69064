"""Root URLs: the V2 inference API, the admin."""

from django.contrib import admin
from django.http import HttpResponse, HttpResponseNotFound
from django.urls import include, path

from inference.codecs.message import dumps

urlpatterns = [
    path("", include("inference.rest.urls")),
    path("", include("inference.tfserving.urls")),
    path("admin/", admin.site.urls),
]


def not_found(request, exception=None) -> HttpResponse:
    """JSON 404 for the protocol APIs, plain for the rest."""
    if request.path.startswith(("/v1/", "/v2")):
        return HttpResponse(
            dumps({"error": f"not found: {request.method} {request.path}"}),
            status=404,
            content_type="application/json",
        )
    return HttpResponseNotFound("<h1>Not found</h1>")


handler404 = not_found
