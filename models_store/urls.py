"""Routes of the web UI (``/models/``, ``/upload/``, ``/tokens/``, ``/teams/``, ``/webhooks/``, sign in
and out, single sign-on's ``/oidc/``)."""

from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from models_store.accounts import team_views
from models_store.accounts import views as account_views
from models_store.accounts.oidc import views as oidc_views
from models_store.registry import upload_views, views
from models_store.registry.pages import compare as compare_pages
from models_store.registry.pages import delete as delete_pages
from models_store.registry.pages import shadow as shadow_pages
from models_store.rollouts import views as rollout_views
from models_store.webhooks import views as webhook_views

_MODEL = "models/<str:name>"
_VERSION = "models/<str:name>/versions/<int:number>"
_ACCOUNT = "teams/<str:team>/service-accounts/<int:account>"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="model-list"), name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", oidc_views.SignOutView.as_view(), name="logout"),
    path("oidc/authenticate/", oidc_views.SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc_views.CallbackView.as_view(), name="oidc_authentication_callback"),
    path("models/", views.model_list, name="model-list"),
    path("upload/", upload_views.upload, name="upload"),
    path(f"{_MODEL}/", views.model_detail, name="model-detail"),
    path(f"{_MODEL}/charts.json", views.model_charts, name="model-charts"),
    path(f"{_MODEL}/compare/", compare_pages.compare_page, name="version-compare"),
    path(f"{_MODEL}/compare.json", compare_pages.compare_json, name="version-compare-json"),
    path(f"{_MODEL}/settings", views.model_settings, name="model-settings"),
    path(f"{_MODEL}/delete", delete_pages.model_delete, name="model-delete"),
    path(f"{_MODEL}/labels", views.label_set, name="label-set"),
    path(f"{_MODEL}/labels/<str:label>/delete", views.label_delete, name="label-delete"),
    path(f"{_MODEL}/traffic", views.traffic_set, name="traffic-set"),
    path(f"{_MODEL}/traffic/<str:action>", views.traffic_action, name="traffic-action"),
    path(f"{_MODEL}/rollouts/", rollout_views.rollout_list, name="rollout-list"),
    path(f"{_MODEL}/rollouts/start", rollout_views.rollout_start, name="rollout-start"),
    path(f"{_MODEL}/rollouts/<int:rollout_id>/<str:change>", rollout_views.rollout_change, name="rollout-change"),
    path(f"{_MODEL}/shadow", shadow_pages.shadow_set, name="shadow-set"),
    path(f"{_MODEL}/shadow/stop", shadow_pages.shadow_clear, name="shadow-clear"),
    path(f"{_MODEL}/upload/", upload_views.upload_version, name="upload-version"),
    path(f"{_VERSION}/", views.version_detail, name="version-detail"),
    path(f"{_VERSION}/shadow.json", shadow_pages.shadow_comparison, name="shadow-comparison"),
    path(f"{_VERSION}/notes", compare_pages.version_notes, name="version-notes"),
    path(f"{_VERSION}/<str:action>", views.version_action, name="version-action"),
    path("tokens/", account_views.token_list, name="token-list"),
    path("tokens/<int:token_id>/revoke", account_views.token_revoke, name="token-revoke"),
    path("teams/", team_views.team_list, name="team-list"),
    path("teams/<str:team>/", team_views.team_detail, name="team-detail"),
    path("teams/<str:team>/members", team_views.member_set, name="team-member-set"),
    path("teams/<str:team>/members/<str:username>/remove", team_views.member_remove, name="team-member-remove"),
    path("teams/<str:team>/service-accounts", team_views.account_create, name="team-account-create"),
    path(f"{_ACCOUNT}/deactivate", team_views.account_deactivate, name="team-account-deactivate"),
    path(f"{_ACCOUNT}/tokens", team_views.account_token_create, name="team-account-token-create"),
    path(f"{_ACCOUNT}/tokens/<int:token_id>/revoke", team_views.account_token_revoke, name="team-account-token-revoke"),
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
