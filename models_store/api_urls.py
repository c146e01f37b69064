"""Routes of the management API under ``/api/``, its OpenAPI schema and docs."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from models_store.accounts import apis as team_apis
from models_store.registry.api import compare, models, routes, shadow, versions
from models_store.rollouts import api as rollout_apis
from models_store.webhooks import apis as webhook_apis

_MODEL = "models/<str:name>"
_VERSION = "models/<str:name>/versions/<int:number>"
_WEBHOOK = "teams/<str:team>/webhooks/<int:webhook>"
_ACCOUNT = "teams/<str:team>/service-accounts/<int:account>"
_ROLLOUT = "models/<str:name>/rollouts/<int:rollout>"

urlpatterns = [
    path("models/", models.ModelListView.as_view(), name="api-model-list"),
    path(f"{_MODEL}/", models.ModelDetailView.as_view(), name="api-model-detail"),
    path(f"{_MODEL}/versions/", versions.VersionListView.as_view(), name="api-version-list"),
    path(f"{_MODEL}/versions/compare", compare.VersionCompareView.as_view(), name="api-version-compare"),
    path(f"{_VERSION}/", versions.VersionDetailView.as_view(), name="api-version-detail"),
    path(f"{_VERSION}/retire", versions.VersionRetireView.as_view(), name="api-version-retire"),
    path(f"{_VERSION}/restore", versions.VersionRestoreView.as_view(), name="api-version-restore"),
    path(f"{_VERSION}/promote", versions.VersionPromoteView.as_view(), name="api-version-promote"),
    path(f"{_MODEL}/labels/<str:label>/", routes.LabelView.as_view(), name="api-label"),
    path(f"{_MODEL}/audit/", models.AuditView.as_view(), name="api-audit"),
    path(f"{_MODEL}/traffic/", routes.TrafficView.as_view(), name="api-traffic"),
    path(f"{_MODEL}/traffic/promote", routes.TrafficPromoteView.as_view(), name="api-traffic-promote"),
    path(f"{_MODEL}/traffic/rollback", routes.TrafficRollbackView.as_view(), name="api-traffic-rollback"),
    path(f"{_MODEL}/shadow/", shadow.ShadowView.as_view(), name="api-shadow"),
    path(f"{_MODEL}/rollouts/", rollout_apis.RolloutListView.as_view(), name="api-rollout-list"),
    path(f"{_ROLLOUT}/", rollout_apis.RolloutDetailView.as_view(), name="api-rollout-detail"),
    path(f"{_ROLLOUT}/pause", rollout_apis.RolloutPauseView.as_view(), name="api-rollout-pause"),
    path(f"{_ROLLOUT}/resume", rollout_apis.RolloutResumeView.as_view(), name="api-rollout-resume"),
    path(f"{_ROLLOUT}/promote", rollout_apis.RolloutPromoteView.as_view(), name="api-rollout-promote"),
    path(f"{_ROLLOUT}/abort", rollout_apis.RolloutAbortView.as_view(), name="api-rollout-abort"),
    path("teams/<str:team>/webhooks/", webhook_apis.WebhookListView.as_view(), name="api-webhook-list"),
    path(f"{_WEBHOOK}/", webhook_apis.WebhookDetailView.as_view(), name="api-webhook-detail"),
    path(f"{_WEBHOOK}/deliveries/", webhook_apis.DeliveryListView.as_view(), name="api-webhook-deliveries"),
    path(
        f"{_WEBHOOK}/deliveries/<int:delivery>/redeliver",
        webhook_apis.RedeliverView.as_view(),
        name="api-webhook-redeliver",
    ),
    path("teams/<str:team>/members/", team_apis.MemberListView.as_view(), name="api-member-list"),
    path("teams/<str:team>/members/<str:username>/", team_apis.MemberDetailView.as_view(), name="api-member-detail"),
    path("teams/<str:team>/service-accounts/", team_apis.ServiceAccountListView.as_view(), name="api-account-list"),
    path(f"{_ACCOUNT}/", team_apis.ServiceAccountDetailView.as_view(), name="api-account-detail"),
    path(f"{_ACCOUNT}/deactivate", team_apis.ServiceAccountDeactivateView.as_view(), name="api-account-deactivate"),
    path(f"{_ACCOUNT}/tokens/", team_apis.ServiceAccountTokenListView.as_view(), name="api-account-tokens"),
    path(
        f"{_ACCOUNT}/tokens/<int:token_id>/",
        team_apis.ServiceAccountTokenDetailView.as_view(),
        name="api-account-token-detail",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI with its script served apart and no inline style: the Content-Security-Policy allows no inline code.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="models_store/swagger_ui.html"),
        name="api-docs",
    ),
]
