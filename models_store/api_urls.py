"""Routes of the management API under ``/api/``, its OpenAPI schema and docs."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from models_store import apis, webhook_apis

_MODEL = "models/<str:name>"
_VERSION = "models/<str:name>/versions/<int:number>"
_WEBHOOK = "teams/<str:team>/webhooks/<int:webhook>"

urlpatterns = [
    path("models/", apis.ModelListView.as_view(), name="api-model-list"),
    path(f"{_MODEL}/", apis.ModelDetailView.as_view(), name="api-model-detail"),
    path(f"{_MODEL}/versions/", apis.VersionListView.as_view(), name="api-version-list"),
    path(f"{_VERSION}/", apis.VersionDetailView.as_view(), name="api-version-detail"),
    path(f"{_VERSION}/retire", apis.VersionRetireView.as_view(), name="api-version-retire"),
    path(f"{_VERSION}/restore", apis.VersionRestoreView.as_view(), name="api-version-restore"),
    path(f"{_MODEL}/labels/<str:label>/", apis.LabelView.as_view(), name="api-label"),
    path(f"{_MODEL}/audit/", apis.AuditView.as_view(), name="api-audit"),
    path(f"{_MODEL}/traffic/", apis.TrafficView.as_view(), name="api-traffic"),
    path(f"{_MODEL}/traffic/promote", apis.TrafficPromoteView.as_view(), name="api-traffic-promote"),
    path(f"{_MODEL}/traffic/rollback", apis.TrafficRollbackView.as_view(), name="api-traffic-rollback"),
    path("teams/<str:team>/webhooks/", webhook_apis.WebhookListView.as_view(), name="api-webhook-list"),
    path(f"{_WEBHOOK}/", webhook_apis.WebhookDetailView.as_view(), name="api-webhook-detail"),
    path(f"{_WEBHOOK}/deliveries/", webhook_apis.DeliveryListView.as_view(), name="api-webhook-deliveries"),
    path(
        f"{_WEBHOOK}/deliveries/<int:delivery>/redeliver",
        webhook_apis.RedeliverView.as_view(),
        name="api-webhook-redeliver",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI with its script served apart and no inline style: the Content-Security-Policy allows no inline code.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="models_store/swagger_ui.html"),
        name="api-docs",
    ),
]
