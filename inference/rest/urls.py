"""V2 REST routes (seed 002), each model route with and without /versions/<v>."""

from django.urls import path

from inference.rest import views

_MODEL = "v2/models/<str:model_name>"
_VERSION = "v2/models/<str:model_name>/versions/<str:model_version>"

urlpatterns = [
    path("v2", views.ServerMetadataView.as_view(), name="v2-server-metadata"),
    path("v2/health/live", views.ServerLiveView.as_view(), name="v2-live"),
    path("v2/health/ready", views.ServerReadyView.as_view(), name="v2-ready"),
]
for prefix, suffix in ((_MODEL, ""), (_VERSION, "-version")):
    urlpatterns += [
        path(prefix, views.ModelMetadataView.as_view(), name=f"v2-model-metadata{suffix}"),
        path(f"{prefix}/ready", views.ModelReadyView.as_view(), name=f"v2-model-ready{suffix}"),
        path(f"{prefix}/infer", views.InferView.as_view(), name=f"v2-infer{suffix}"),
    ]
