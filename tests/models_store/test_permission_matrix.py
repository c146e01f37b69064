"""The permission matrix: every endpoint of the management API and every
page of the web UI, for each subject (viewer, maintainer and owner of team
ml, the operator, an owner of another team, anonymous), answers the status
that the one permission table (models_store.accounts.permissions.PERMISSIONS)
says, through Django's test client (a live server would add nothing: the
checks are the views' and the actions').

The endpoints are found by walking the URL patterns: one that declares no
``permission_actions`` fails :func:`test_every_endpoint_declares_its_actions`,
and one whose declared action has no request below (:data:`REQUESTS`) fails
:func:`test_every_declared_action_has_a_request`; so a new endpoint cannot
slip past the matrix. INFERENCE_REQUIRE_TOKEN is on, so that seeing a
model is a permission too (another team's model answers 404, as one that
does not exist).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from models_store.accounts import permissions, service_accounts, services
from models_store.accounts.permissions import Level
from models_store.models import ModelVersion, RegisteredModel, Role, Rollout, VersionLabel, WebhookDelivery
from models_store.registry.services import models as model_services
from models_store.webhooks import delivery as webhook_delivery
from models_store.webhooks import services as webhook_services
from tests.support import onnx_models as m
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db]

#: Routes that are not the model store's to guard: sign-in and out, the API's schema and docs (public).
EXEMPT = {"home", "login", "logout", "api-schema", "api-docs", "oidc_authentication_init",
          "oidc_authentication_callback", "oidc_logout"}  # fmt: skip

SUBJECTS = ("viewer", "maintainer", "owner", "operator", "other", "anonymous")
#: Each subject's level in team ml (the team of every object the requests touch).
LEVELS = {
    "viewer": Level.VIEWER, "maintainer": Level.MAINTAINER, "owner": Level.OWNER,
    "operator": Level.OPERATOR, "other": Level.NONE, "anonymous": Level.NONE,
}  # fmt: skip
SIGNATURE = [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]


# -- the endpoints ------------------------------------------------------------------
def _patterns():
    """(route, name, callback) of every URL pattern of the web UI and the management API
    (the URL configurations the root includes from the model store; the inference protocols
    and the admin guard themselves)."""
    for entry in get_resolver().url_patterns:
        module = getattr(getattr(entry, "urlconf_name", None), "__name__", None)
        if isinstance(entry, URLResolver) and module in ("models_store.urls", "models_store.api_urls"):
            for pattern in entry.url_patterns:
                assert isinstance(pattern, URLPattern)
                yield str(entry.pattern) + str(pattern.pattern), pattern.name, pattern.callback


def _declared(callback) -> dict:
    view_class = getattr(callback, "view_class", None)
    return getattr(view_class or callback, "permission_actions", None)


def _endpoints() -> list[tuple[str, str, str, str | None]]:
    """(url name, method, action, the ``action`` URL argument or None) of every declared endpoint."""
    found = []
    for _route, name, callback in _patterns():
        for method, declared in (_declared(callback) or {}).items():
            if isinstance(declared, dict):
                found += [(name, method, action, argument) for argument, action in declared.items()]
            else:
                found.append((name, method, declared, None))
    return found


def test_every_endpoint_declares_its_actions():
    patterns = list(_patterns())
    assert len(patterns) > 40
    missing = [(route, name) for route, name, callback in patterns if name not in EXEMPT and not _declared(callback)]
    assert missing == [], "endpoints without permission_actions (models_store.accounts.permissions)"


def test_every_declared_action_is_in_the_table_and_has_a_request():
    endpoints = _endpoints()
    assert {action for _n, _m, action, _a in endpoints} <= set(permissions.PERMISSIONS)
    missing = [(name, method, argument) for name, method, _action, argument in endpoints
               if (name, method, argument) not in REQUESTS]  # fmt: skip
    assert missing == [], "declared endpoints the matrix has no request for: add them to REQUESTS"


# -- the world ------------------------------------------------------------------------
@dataclass
class World:
    users: dict
    tokens: dict = field(default_factory=dict)  # subject -> (ApiToken, plaintext)
    ids: dict = field(default_factory=dict)


def _version(model, number: int, state: str = ModelVersion.State.READY, actor=None, held=False) -> ModelVersion:
    return ModelVersion.objects.create(
        model=model, number=number, artifact=f"missing/{model.name}-{number}.onnx", sha256=f"{number:064x}", size=1,
        inputs=SIGNATURE, outputs=SIGNATURE, state=state, uploaded_by=actor, held=held,
    )  # fmt: skip


@pytest.fixture
def world(settings, monkeypatch):
    """Team ml: viewer, maintainer, owner (and bystander, a viewer to remove);
    team vision: other (owner); operator (superuser). Model m of ml with
    versions 1 (stable), 2 (canary), 3 (READY, unlabelled), 4 (retired), 5 (held), a
    running rollout of version 2 (canary; a row: labels and split untouched),
    shadow traffic to version 1 (10%); a
    webhook of ml with one delivery (deliveries are not sent: no timer); a
    service account bot of ml with a token; a personal token of each subject."""
    settings.INFERENCE_REQUIRE_TOKEN = True
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setattr(webhook_delivery, "_start_timer", lambda delay, delivery_id: None)
    users = {name: person(name, "ml") for name in ("viewer", "maintainer", "owner", "bystander")}
    for name, role in (("viewer", Role.VIEWER), ("maintainer", Role.MAINTAINER), ("bystander", Role.VIEWER)):
        services.membership_add(team=users[name].teams.get(), user=users[name], role=role)
    users["other"] = person("other", "vision")
    users["operator"] = person("operator", superuser=True)
    team = users["owner"].teams.get()
    model = model_services.model_get_or_create(name="m", team=team, actor=users["owner"])
    versions = {n: _version(model, n, actor=users["owner"]) for n in (1, 2, 3)}
    _version(model, 4, ModelVersion.State.UNAVAILABLE)
    _version(model, 5, held=True)
    RegisteredModel.objects.filter(pk=model.pk).update(
        last_version_number=5, shadow_version=versions[1], shadow_percent=10
    )
    rollout = Rollout.objects.create(model=model, canary_version=2, stable_version=1, steps=[50, 100])
    VersionLabel.objects.create(model=model, name="stable", version=versions[1])
    VersionLabel.objects.create(model=model, name="canary", version=versions[2])
    hook = webhook_services.subscription_create(
        team=team, url="http://127.0.0.1:9/hook", events=["version.ready"], actor=users["owner"]
    )
    delivered = WebhookDelivery.objects.create(subscription=hook, message_id="msg_1", event="version.ready")
    account = service_accounts.service_account_create(team=team, name="bot", actor=users["owner"])
    bot_token, _ = service_accounts.service_account_token_create(
        account=account, name="app", role=Role.VIEWER, expires_in=service_accounts.MAX_TOKEN_LIFETIME,
        actor=users["owner"],
    )  # fmt: skip
    found = World(users, ids={"webhook": hook.pk, "delivery": delivered.pk, "account": account.pk,
                              "account_token": bot_token.pk, "rollout": rollout.pk})  # fmt: skip
    for name in SUBJECTS[:-1]:
        found.tokens[name] = services.token_create(user=users[name], name="matrix")
    return found


# -- the requests ---------------------------------------------------------------------
def _file(payload: bytes) -> io.BytesIO:
    handle = io.BytesIO(payload)
    handle.name = "model.onnx"
    return handle


@dataclass(frozen=True)
class Request:
    """How to call one endpoint so that an allowed caller succeeds (``ok``).
    ``path``: with ``{webhook}``-style ids of the world; ``body``: JSON (API),
    form fields (web UI), or a callable giving them; ``hidden``: the status of
    a caller who may not see the object (None: 403 like any refusal)."""

    path: str
    ok: int
    body: object = None
    hidden: int | None = None


def _web_hidden(path: str) -> int | None:
    return 404 if path.startswith("/models/m") else None


M = "/api/models/m"
H = "/api/teams/ml/webhooks/{webhook}"
A = "/api/teams/ml/service-accounts/{account}"
W = "/webhooks/{webhook}"
T = "/teams/ml/service-accounts/{account}"
ROLLOUT_FORM = {"canary_version": "3", "steps": "50, 100", "pause_seconds": "60", "max_error_rate": "5",
                "max_p99_ratio": "1.5", "min_requests": "50"}  # fmt: skip
SETTINGS_FORM = {"description": "d", "version_policy": "latest", "latest_versions": "1", "instance_kind": "",
                 "payload_log_rate": "0", "payload_log_max_bytes": "65536"}  # fmt: skip

#: (url name, method, ``action`` URL argument) -> the request.
REQUESTS: dict[tuple, Request] = {
    ("api-model-list", "GET", None): Request("/api/models/", 200),
    ("api-model-detail", "GET", None): Request(f"{M}/", 200, hidden=404),
    ("api-model-detail", "PATCH", None): Request(f"{M}/", 200, {"description": "x"}, hidden=404),
    # 409: a rollout runs and shadow traffic is on (the permission passed; a refusal would be 403/404)
    ("api-model-detail", "DELETE", None): Request(f"{M}/", 409, hidden=404),
    ("api-version-list", "GET", None): Request(f"{M}/versions/", 200, hidden=404),
    # 202: validated after the answer (on commit, which the test's rolled-back transaction never reaches)
    ("api-version-list", "POST", None): Request(
        f"{M}/versions/", 202, lambda: {"file": _file(m.affine(3.0, 0.0))}, hidden=409
    ),
    ("api-version-detail", "GET", None): Request(f"{M}/versions/1/", 200, hidden=404),
    ("api-version-detail", "DELETE", None): Request(f"{M}/versions/3/", 204, hidden=404),
    ("api-version-detail", "PATCH", None): Request(
        f"{M}/versions/1/", 200, {"description": "d", "tags": [{"key": "owner", "value": "ml"}]}, hidden=404
    ),
    ("api-version-compare", "GET", None): Request(f"{M}/versions/compare?a=1&b=2", 200, hidden=404),
    ("api-version-retire", "POST", None): Request(f"{M}/versions/3/retire", 200, hidden=404),
    ("api-version-restore", "POST", None): Request(f"{M}/versions/4/restore", 200, hidden=404),
    ("api-version-promote", "POST", None): Request(f"{M}/versions/5/promote", 200, hidden=404),
    ("api-label", "PUT", None): Request(f"{M}/labels/beta/", 200, {"version": 3}, hidden=404),
    ("api-label", "DELETE", None): Request(f"{M}/labels/canary/", 204, hidden=404),
    ("api-audit", "GET", None): Request(f"{M}/audit/", 200, hidden=404),
    ("api-traffic", "PUT", None): Request(f"{M}/traffic/", 200, {"weights": {"stable": 90, "canary": 10}}, hidden=404),
    ("api-traffic-promote", "POST", None): Request(f"{M}/traffic/promote", 200, {}, hidden=404),
    ("api-traffic-rollback", "POST", None): Request(f"{M}/traffic/rollback", 200, {}, hidden=404),
    ("api-rollout-list", "GET", None): Request(f"{M}/rollouts/", 200, hidden=404),
    # 409: one rollout per model runs already (the permission passed; a refusal would be 403/404)
    ("api-rollout-list", "POST", None): Request(f"{M}/rollouts/", 409, {"canary_version": 3}, hidden=404),
    ("api-rollout-detail", "GET", None): Request(f"{M}/rollouts/{{rollout}}/", 200, hidden=404),
    ("api-rollout-pause", "POST", None): Request(f"{M}/rollouts/{{rollout}}/pause", 200, {}, hidden=404),
    ("api-rollout-resume", "POST", None): Request(f"{M}/rollouts/{{rollout}}/resume", 409, {}, hidden=404),  # runs
    ("api-rollout-promote", "POST", None): Request(f"{M}/rollouts/{{rollout}}/promote", 200, {}, hidden=404),
    ("api-rollout-abort", "POST", None): Request(f"{M}/rollouts/{{rollout}}/abort", 200, {}, hidden=404),
    ("api-shadow", "GET", None): Request(f"{M}/shadow/", 200, hidden=404),
    ("api-shadow", "PUT", None): Request(f"{M}/shadow/", 200, {"version": 1, "percent": 20}, hidden=404),
    ("api-shadow", "DELETE", None): Request(f"{M}/shadow/", 204, hidden=404),
    ("api-webhook-list", "GET", None): Request("/api/teams/ml/webhooks/", 200),
    ("api-webhook-list", "POST", None): Request(
        "/api/teams/ml/webhooks/", 201, {"url": "http://127.0.0.1:9/other", "events": ["label.moved"]}
    ),
    ("api-webhook-detail", "GET", None): Request(f"{H}/", 200),
    ("api-webhook-detail", "PATCH", None): Request(f"{H}/", 200, {"active": False}),
    ("api-webhook-detail", "DELETE", None): Request(f"{H}/", 204),
    ("api-webhook-deliveries", "GET", None): Request(f"{H}/deliveries/", 200),
    ("api-webhook-redeliver", "POST", None): Request(f"{H}/deliveries/{{delivery}}/redeliver", 202, {}),
    ("api-member-list", "GET", None): Request("/api/teams/ml/members/", 200),
    ("api-member-detail", "PUT", None): Request("/api/teams/ml/members/other/", 200, {"role": "viewer"}),
    ("api-member-detail", "DELETE", None): Request("/api/teams/ml/members/bystander/", 204),
    ("api-account-list", "GET", None): Request("/api/teams/ml/service-accounts/", 200),
    ("api-account-list", "POST", None): Request("/api/teams/ml/service-accounts/", 201, {"name": "bot2"}),
    ("api-account-detail", "GET", None): Request(f"{A}/", 200),
    ("api-account-deactivate", "POST", None): Request(f"{A}/deactivate", 200, {}),
    ("api-account-tokens", "POST", None): Request(
        f"{A}/tokens/", 201, {"name": "t2", "role": "maintainer", "expires_in_days": 7}
    ),
    ("api-account-token-detail", "DELETE", None): Request(f"{A}/tokens/{{account_token}}/", 204),
    # the web UI
    ("model-list", "GET", None): Request("/models/", 200),
    ("upload", "GET", None): Request("/upload/", 200),
    ("upload", "POST", None): Request(
        "/upload/", 302, lambda: {"file": _file(m.affine(5.0, 0.0)), "name": "fresh", "team": "ml"}
    ),
    ("model-detail", "GET", None): Request("/models/m/", 200),
    ("model-charts", "GET", None): Request("/models/m/charts.json", 200),
    ("model-settings", "POST", None): Request("/models/m/settings", 302, SETTINGS_FORM),
    ("model-delete", "GET", None): Request("/models/m/delete", 200),  # the confirmation page
    ("model-delete", "POST", None): Request("/models/m/delete", 409, {}),  # a rollout runs, shadow traffic is on
    ("label-set", "POST", None): Request("/models/m/labels", 302, {"label": "beta", "version": "3"}),
    ("label-delete", "POST", None): Request("/models/m/labels/canary/delete", 302, {}),
    ("traffic-set", "POST", None): Request("/models/m/traffic", 302, {"weight-stable": "90", "weight-canary": "10"}),
    ("traffic-action", "POST", "promote"): Request("/models/m/traffic/promote", 302, {}),
    ("traffic-action", "POST", "rollback"): Request("/models/m/traffic/rollback", 302, {}),
    ("upload-version", "GET", None): Request("/models/m/upload/", 200),
    ("upload-version", "POST", None): Request("/models/m/upload/", 302, lambda: {"file": _file(m.affine(6.0, 0.0))}),
    ("version-detail", "GET", None): Request("/models/m/versions/1/", 200),
    ("rollout-list", "GET", None): Request("/models/m/rollouts/", 200),
    ("shadow-set", "POST", None): Request("/models/m/shadow", 302, {"version": "1", "percent": "20"}),
    ("shadow-clear", "POST", None): Request("/models/m/shadow/stop", 302, {}),
    ("shadow-comparison", "GET", None): Request("/models/m/versions/1/shadow.json", 200),
    ("version-compare", "GET", None): Request("/models/m/compare/?a=1&b=2", 200),
    ("version-compare-json", "GET", None): Request("/models/m/compare.json?a=1&b=2", 200),
    ("version-notes", "POST", None): Request("/models/m/versions/1/notes", 302, {"description": "d", "tags": "a=b"}),
    ("rollout-start", "POST", None): Request("/models/m/rollouts/start", 409, ROLLOUT_FORM),  # one runs already
    ("rollout-change", "POST", None): Request("/models/m/rollouts/{rollout}/pause", 302, {}),
    ("version-action", "POST", "retire"): Request("/models/m/versions/3/retire", 302, {}),
    ("version-action", "POST", "restore"): Request("/models/m/versions/4/restore", 302, {}),
    ("version-action", "POST", "promote"): Request("/models/m/versions/5/promote", 302, {}),
    ("version-action", "POST", "delete"): Request("/models/m/versions/3/delete", 302, {}),
    ("token-list", "GET", None): Request("/tokens/", 200),
    ("token-list", "POST", None): Request("/tokens/", 302, {"name": "mine", "team": "", "expires_in": ""}),
    ("token-revoke", "POST", None): Request("/tokens/{own_token}/revoke", 302, {}),
    ("team-list", "GET", None): Request("/teams/", 200),
    ("team-detail", "GET", None): Request("/teams/ml/", 200),
    ("team-member-set", "POST", None): Request("/teams/ml/members", 302, {"username": "other", "role": "viewer"}),
    ("team-member-remove", "POST", None): Request("/teams/ml/members/bystander/remove", 302, {}),
    ("team-account-create", "POST", None): Request("/teams/ml/service-accounts", 302, {"name": "bot2"}),
    ("team-account-deactivate", "POST", None): Request(f"{T}/deactivate", 302, {}),
    ("team-account-token-create", "POST", None): Request(
        f"{T}/tokens", 302, {"name": "t2", "role": "viewer", "expires_in": "7d"}
    ),
    ("team-account-token-revoke", "POST", None): Request(f"{T}/tokens/{{account_token}}/revoke", 302, {}),
    ("webhook-list", "GET", None): Request("/webhooks/", 200),
    ("webhook-list", "POST", None): Request(
        "/webhooks/", 302, {"team": "ml", "url": "http://127.0.0.1:9/x", "events": ["label.moved"], "description": ""}
    ),
    ("webhook-detail", "GET", None): Request(f"{W}/", 200),
    ("webhook-delete", "POST", None): Request(f"{W}/delete", 302, {}),
    ("webhook-pause", "POST", None): Request(f"{W}/pause", 302, {}),
    ("webhook-redeliver", "POST", None): Request(f"{W}/deliveries/{{delivery}}/redeliver", 302, {}),
}


def expected(subject: str, action: str, request: Request, api: bool, visible_with: str | None) -> int:
    """The status the permission table says ``subject`` gets."""
    if subject == "anonymous":
        return 401 if api else 302
    if LEVELS[subject] >= permissions.needs(action):
        return request.ok
    if visible_with is not None and LEVELS[subject] < permissions.needs(visible_with):
        return request.hidden or 404
    return 403


def _visible_with(name: str, api: bool, request: Request) -> str | None:
    """The action without which the object is hidden (404) rather than refused (403)."""
    if request.hidden is not None or (not api and request.path.startswith("/models/m")):
        return "model.view"
    if not api and request.path.startswith("/webhooks/{webhook}"):
        return "webhook.view"
    return None


CASES = sorted((*key, subject) for key in REQUESTS for subject in SUBJECTS)


@pytest.mark.parametrize("name, method, argument, subject", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_matrix(world, name, method, argument, subject):
    declared = {(n, me, a): action for n, me, action, a in _endpoints()}
    action = declared[(name, method, argument)]
    request = REQUESTS[(name, method, argument)]
    ids = dict(world.ids)
    if subject != "anonymous":
        ids["own_token"] = world.tokens[subject][0].pk
    else:
        ids["own_token"] = world.tokens["owner"][0].pk
    path = request.path.format(**ids)
    api = path.startswith("/api/")
    body = request.body() if callable(request.body) else request.body
    client = Client()
    headers = {}
    if subject != "anonymous":
        if api:
            headers["HTTP_AUTHORIZATION"] = f"Bearer {world.tokens[subject][1]}"
        else:
            client.force_login(world.users[subject])
    call = getattr(client, method.lower())
    if method == "GET":
        response = call(path, **headers)
    elif api and not (isinstance(body, dict) and "file" in body):
        response = call(path, body, content_type="application/json", **headers)
    else:
        response = call(path, body or {}, **headers)
    want = expected(subject, action, request, api, _visible_with(name, api, request))
    detail = getattr(response, "content", b"")[:300]
    assert response.status_code == want, f"{subject} {method} {path} ({action}): {detail!r}"
    if want == 302 and subject == "anonymous":
        assert response["Location"].startswith("/accounts/login/")
