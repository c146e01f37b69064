"""URLconf of the inference protocols: V2 REST (and Triton's extensions), TF
Serving v1, and /metrics. The protocol handler (hosting/wsgi.py) resolves
against this list only; the full site's URLconf includes it too.

Flat and hottest first (inference, then TF Serving), since Django tries the
patterns in order.
"""

import re

from django.urls import re_path

from inference.http.responses import not_found
from inference.rest import views
from inference.tfserving.views import TFServingView

_M = r"^v2/models/(?P<model_name>[^/]+)"
_V = r"^v2/models/(?P<model_name>[^/]+)/versions/(?P<model_version>[^/]+)"

#: The inference view, shared with the protocol handler's direct route.
infer_view = views.InferView.as_view()

#: ``POST .../infer`` paths (PATH_INFO, leading slash) as the protocol handler
#: routes them without URL resolution: the same two patterns as below.
INFER_PATH = re.compile(r"/v2/models/(?P<model_name>[^/]+)(?:/versions/(?P<model_version>[^/]+))?/infer")

urlpatterns = [
    re_path(_M + r"/infer$", infer_view, name="v2-infer"),
    re_path(_V + r"/infer$", infer_view, name="v2-infer-version"),
    re_path(r"^v1(?P<path>/.*)?$", TFServingView.as_view(), name="tfserving"),
    re_path(r"^v2/health/live$", views.ServerLiveView.as_view(), name="v2-live"),
    re_path(r"^v2/health/ready$", views.ServerReadyView.as_view(), name="v2-ready"),
    re_path(r"^v2$", views.ServerMetadataView.as_view(), name="v2-server-metadata"),
    re_path(r"^v2/repository/index$", views.RepositoryIndexView.as_view(), name="v2-repository-index"),
    re_path(r"^v2/repository/models/(?P<model_name>[^/]+)/load$", views.RepositoryLoadView.as_view(), name="v2-load"),
    re_path(
        r"^v2/repository/models/(?P<model_name>[^/]+)/unload$", views.RepositoryUnloadView.as_view(), name="v2-unload"
    ),
    re_path(r"^v2/models/stats$", views.ModelStatisticsView.as_view(), name="v2-stats-all"),
    re_path(r"^metrics$", views.metrics_view, name="metrics"),
    re_path(r"^v2/trace/setting$", views.TraceSettingView.as_view(), name="v2-trace-setting"),
    re_path(_M + r"/trace/setting$", views.TraceSettingView.as_view(), name="v2-model-trace-setting"),
    re_path(r"^v2/logging$", views.LogSettingsView.as_view(), name="v2-logging"),
]
for kind, prefix in (("system", "System"), ("cuda", "Cuda")):
    _R = rf"^v2/{kind}sharedmemory/region/(?P<region_name>[^/]+)"
    status = getattr(views, f"{prefix}SharedMemoryStatusView").as_view()
    unregister = getattr(views, f"{prefix}SharedMemoryUnregisterView").as_view()
    urlpatterns += [
        re_path(rf"^v2/{kind}sharedmemory/status$", status, name=f"v2-{kind}-shm-status-all"),
        re_path(_R + r"/status$", status, name=f"v2-{kind}-shm-status"),
        re_path(
            _R + r"/register$",
            getattr(views, f"{prefix}SharedMemoryRegisterView").as_view(),
            name=f"v2-{kind}-shm-register",
        ),
        re_path(rf"^v2/{kind}sharedmemory/unregister$", unregister, name=f"v2-{kind}-shm-unregister-all"),
        re_path(_R + r"/unregister$", unregister, name=f"v2-{kind}-shm-unregister"),
    ]
for prefix, suffix in ((_M, ""), (_V, "-version")):
    urlpatterns += [
        re_path(prefix + "$", views.ModelMetadataView.as_view(), name=f"v2-model-metadata{suffix}"),
        re_path(prefix + "/ready$", views.ModelReadyView.as_view(), name=f"v2-model-ready{suffix}"),
        re_path(prefix + "/config$", views.ModelConfigView.as_view(), name=f"v2-model-config{suffix}"),
        re_path(prefix + "/stats$", views.ModelStatisticsView.as_view(), name=f"v2-stats{suffix}"),
    ]

handler404 = not_found
