"""Routes of the web UI (``/models/``, ``/upload/``, ``/tokens/``, ``/webhooks/``, sign in and out)."""

from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from models_store.accounts import views as account_views
from models_store.registry import shadow_pages, views
from models_store.webhooks import views as webhook_views

_MODEL = "models/<str:name>"
_VERSION = "models/<str:name>/versions/<int:number>"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="model-list"), name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("models/", views.model_list, name="model-list"),
    path("upload/", views.upload, name="upload"),
    path(f"{_MODEL}/", views.model_detail, name="model-detail"),
    path(f"{_MODEL}/charts.json", views.model_charts, name="model-charts"),
    path(f"{_MODEL}/settings", views.model_settings, name="model-settings"),
    path(f"{_MODEL}/labels", views.label_set, name="label-set"),
    path(f"{_MODEL}/labels/<str:label>/delete", views.label_delete, name="label-delete"),
    path(f"{_MODEL}/traffic", views.traffic_set, name="traffic-set"),
    path(f"{_MODEL}/traffic/<str:action>", views.traffic_action, name="traffic-action"),
    path(f"{_MODEL}/shadow", shadow_pages.shadow_set, name="shadow-set"),
    path(f"{_MODEL}/shadow/stop", shadow_pages.shadow_clear, name="shadow-clear"),
    path(f"{_MODEL}/upload/", views.upload, name="upload-version"),
    path(f"{_VERSION}/", views.version_detail, name="version-detail"),
    path(f"{_VERSION}/shadow.json", shadow_pages.shadow_comparison, name="shadow-comparison"),
    path(f"{_VERSION}/<str:action>", views.version_action, name="version-action"),
    path("tokens/", account_views.token_list, name="token-list"),
    path("tokens/<int:token_id>/revoke", account_views.token_revoke, name="token-revoke"),
    path("webhooks/", webhook_views.webhook_list, name="webhook-list"),
    path("webhooks/<int:webhook_id>/", webhook_views.webhook_detail, name="webhook-detail"),
    path("webhooks/<int:webhook_id>/delete", webhook_views.webhook_delete, name="webhook-delete"),
    path("webhooks/<int:webhook_id>/pause", webhook_views.webhook_pause, name="webhook-pause"),
    path(
        "webhooks/<int:webhook_id>/deliveries/<int:delivery_id>/redeliver",
        webhook_views.webhook_redeliver,
        name="webhook-redeliver",
    ),
]
