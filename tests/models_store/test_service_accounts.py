"""Roles and service accounts: the migration that made every member an
owner, tokens that carry a role and an expiry, a service account's token
that outlives its creator, a deactivated person's personal tokens refused
(at once by the management API, within INFERENCE_TOKEN_CACHE_SECONDS by the
inference token checker, whose scopes are the real TokenCache's)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from inference.protocol.errors import PermissionDenied, Unauthenticated
from models_store import errors
from models_store.accounts import authorizer as token_authorizer
from models_store.accounts import service_accounts, services
from models_store.models import ApiToken, AuditEvent, ModelVersion, RegisteredModel, Role, TeamMembership
from models_store.registry.services import models as model_services
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

SIGNATURE = [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]


class Api:
    def __init__(self, token: str):
        self.client = Client()
        self.auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def get(self, path):
        return self.client.get(path, **self.auth)

    def send(self, method, path, body=None):
        return getattr(self.client, method)(path, body, content_type="application/json", **self.auth)


@pytest.fixture
def team_ml():
    """Owner olga and maintainer max of team ml; model m of ml with a READY version 1."""
    olga = person("olga", "ml")
    max_ = person("max", "ml")
    team = olga.teams.get()
    services.membership_add(team=team, user=max_, role=Role.MAINTAINER)
    model = model_services.model_get_or_create(name="m", team=team, actor=olga)
    ModelVersion.objects.create(
        model=model, number=1, artifact="missing.onnx", sha256="1" * 64, size=1, inputs=SIGNATURE,
        outputs=SIGNATURE, state=ModelVersion.State.READY,
    )  # fmt: skip
    RegisteredModel.objects.filter(pk=model.pk).update(last_version_number=1)
    return team, olga, max_


def _checker(ttl: float = 3600):
    return token_authorizer.InferenceTokenChecker(token_authorizer.TokenCache(ttl=ttl))


def test_existing_members_become_owners_and_new_ones_default_to_viewer():
    executor = MigrationExecutor(connection)
    executor.migrate([("models_store", "0011_webhooks")])
    old = executor.loader.project_state([("models_store", "0011_webhooks")]).apps
    user = old.get_model("auth", "User").objects.create(username="early")
    team = old.get_model("models_store", "Team").objects.create(name="founders")
    old.get_model("models_store", "TeamMembership").objects.create(team=team, user=user)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert TeamMembership.objects.get(user__username="early").role == "owner"
    late = get_user_model().objects.create(username="late")
    assert TeamMembership.objects.create(team_id=team.pk, user=late).role == "viewer"


def test_owners_manage_service_accounts_through_the_api_and_everything_is_audited(team_ml):
    _team, olga, max_ = team_ml
    owner = Api(services.token_create(user=olga, name="o")[1])
    maintainer = Api(services.token_create(user=max_, name="m")[1])
    assert maintainer.send("post", "/api/teams/ml/service-accounts/", {"name": "recommender"}).status_code == 403
    created = owner.send("post", "/api/teams/ml/service-accounts/", {"name": "recommender"})
    assert created.status_code == 201
    account = created.json()
    assert (account["username"], account["created_by"], account["active"]) == ("recommender@ml.service", "olga", True)
    assert owner.send("post", "/api/teams/ml/service-accounts/", {"name": "recommender"}).status_code == 409
    path = f"/api/teams/ml/service-accounts/{account['id']}/tokens/"
    assert owner.send("post", path, {"name": "t", "role": "admin", "expires_in_days": 7}).status_code == 400
    assert owner.send("post", path, {"name": "t", "role": "viewer", "expires_in_days": 367}).status_code == 400
    assert owner.send("post", path, {"name": "t", "role": "viewer"}).status_code == 400  # an expiry is required
    assert owner.send("post", path, {"name": "  ", "role": "viewer", "expires_in_days": 1}).status_code == 400
    before = timezone.now()
    answer = owner.send("post", path, {"name": "app", "role": "viewer", "expires_in_days": 30})
    assert answer.status_code == 201
    token = answer.json()
    assert token["token"].startswith("mh_") and token["role"] == "viewer"
    expires = timezone.datetime.fromisoformat(token["expires_at"])
    assert before + timedelta(days=30) <= expires <= timezone.now() + timedelta(days=30)
    listed = owner.get(f"/api/teams/ml/service-accounts/{account['id']}/").json()
    assert [(t["name"], t["role"], t["active"]) for t in listed["tokens"]] == [("app", "viewer", True)]
    assert "token" not in listed["tokens"][0]
    assert owner.send("delete", f"{path}{token['id']}/").status_code == 204
    deactivated = owner.send("post", f"/api/teams/ml/service-accounts/{account['id']}/deactivate")
    assert deactivated.status_code == 200 and deactivated.json()["active"] is False
    assert owner.send("post", path, {"name": "x", "role": "viewer", "expires_in_days": 1}).status_code == 409
    events = list(AuditEvent.objects.filter(actor_name="olga").order_by("id").values_list("action", flat=True))
    assert events[-4:] == ["service_account.create", "token.create", "token.revoke", "service_account.deactivate"]


def test_a_service_accounts_token_carries_its_role_and_outlives_its_creator(team_ml):
    team, olga, _max = team_ml
    account = service_accounts.service_account_create(team=team, name="ci", actor=olga)
    _, viewer = service_accounts.service_account_token_create(
        account=account, name="reader", role=Role.VIEWER, expires_in=timedelta(days=1), actor=olga
    )
    _, maintainer = service_accounts.service_account_token_create(
        account=account, name="deployer", role=Role.MAINTAINER, expires_in=timedelta(days=1), actor=olga
    )
    _, personal = services.token_create(user=olga, name="laptop")
    label = {"version": 1}
    assert Api(viewer).send("put", "/api/models/m/labels/stable/", label).status_code == 403
    assert Api(viewer).get("/api/teams/ml/service-accounts/").status_code == 403  # owners only
    assert Api(maintainer).send("put", "/api/models/m/labels/stable/", label).status_code == 200
    checker = _checker()
    checker(viewer, "m")  # the data plane: any role calls its team's models
    # olga leaves the company
    services.user_deactivate(user=olga, actor=None)
    assert Api(maintainer).send("put", "/api/models/m/labels/prod/", label).status_code == 200
    assert Api(personal).get("/api/models/").status_code == 401
    checker.cache.catch_up()  # the stamp moved (the deactivation): what every process does at its next check
    checker(viewer, "m")
    checker(maintainer, "m")
    with pytest.raises(Unauthenticated):
        checker(personal, "m")
    # the account cannot sign in, nor join another team
    assert not account.user.has_usable_password()
    with pytest.raises(errors.Conflict, match="service account"):
        services.membership_add(team=person("vic", "vision").teams.get(), user=account.user, role=Role.VIEWER)


def test_a_service_accounts_token_reaches_its_team_only_and_expires(team_ml):
    team, olga, _max = team_ml
    other = model_services.model_get_or_create(name="theirs", team=person("vic", "vision").teams.get(), actor=None)
    account = service_accounts.service_account_create(team=team, name="ci", actor=olga)
    row, plain = service_accounts.service_account_token_create(
        account=account, name="app", role=Role.OWNER, expires_in=timedelta(hours=1), actor=olga
    )
    checker = _checker()
    checker(plain, "m")
    with pytest.raises(PermissionDenied):
        checker(plain, other.name)
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    checker.cache.refresh()
    with pytest.raises(Unauthenticated, match="expired"):
        checker(plain, "m")
    assert Api(plain).get("/api/models/").status_code == 401


def test_a_deactivated_persons_token_is_refused_within_the_cache_ttl_even_behind_the_services_back(team_ml):
    _team, _olga, max_ = team_ml
    ttl = 0.5
    checker = _checker(ttl)
    _, plain = services.token_create(user=max_, name="script")
    checker(plain, "m")
    # a change no signal sees (an UPDATE: no post_save, no change stamp): only the TTL bounds it
    get_user_model().objects.filter(pk=max_.pk).update(is_active=False)
    deactivated = time.monotonic()
    while True:
        try:
            checker(plain, "m")
        except Unauthenticated:
            break
        assert time.monotonic() - deactivated < ttl + 0.5, "still accepted past INFERENCE_TOKEN_CACHE_SECONDS"
        time.sleep(0.05)
    assert Api(plain).get("/api/models/").status_code == 401  # the management API reads the database


def test_a_member_removed_from_the_team_loses_its_models_at_the_next_check(team_ml):
    team, _olga, max_ = team_ml
    _, plain = services.token_create(user=max_, name="script")
    checker = _checker()
    checker(plain, "m")
    services.membership_remove(membership=TeamMembership.objects.get(team=team, user=max_), actor=None)
    checker.cache.catch_up()
    with pytest.raises(PermissionDenied):
        checker(plain, "m")
    assert AuditEvent.objects.filter(action="team.leave").get().detail["user"] == "max"
