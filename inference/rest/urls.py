"""V2 REST routes (seed 002), each model route with and without /versions/<v>."""

from django.urls import path

from inference.rest import views

_MODEL = "v2/models/<str:model_name>"
_VERSION = "v2/models/<str:model_name>/versions/<str:model_version>"

urlpatterns = [
    path("v2", views.ServerMetadataView.as_view(), name="v2-server-metadata"),
    path("v2/health/live", views.ServerLiveView.as_view(), name="v2-live"),
    path("v2/health/ready", views.ServerReadyView.as_view(), name="v2-ready"),
    path("v2/repository/index", views.RepositoryIndexView.as_view(), name="v2-repository-index"),
    path("v2/repository/models/<str:model_name>/load", views.RepositoryLoadView.as_view(), name="v2-load"),
    path("v2/repository/models/<str:model_name>/unload", views.RepositoryUnloadView.as_view(), name="v2-unload"),
    path("v2/models/stats", views.ModelStatisticsView.as_view(), name="v2-stats-all"),
    path("metrics", views.metrics_view, name="metrics"),
]
for prefix, suffix in ((_MODEL, ""), (_VERSION, "-version")):
    urlpatterns += [
        path(prefix, views.ModelMetadataView.as_view(), name=f"v2-model-metadata{suffix}"),
        path(f"{prefix}/ready", views.ModelReadyView.as_view(), name=f"v2-model-ready{suffix}"),
        path(f"{prefix}/infer", views.InferView.as_view(), name=f"v2-infer{suffix}"),
        path(f"{prefix}/config", views.ModelConfigView.as_view(), name=f"v2-model-config{suffix}"),
        path(f"{prefix}/stats", views.ModelStatisticsView.as_view(), name=f"v2-stats{suffix}"),
    ]
