"""Single sign-on's pieces without a provider: OIDC_GROUP_MAP, the groups
claim applied at a sign-in (added, changed, removed, audited; local
memberships of other teams left alone; operators), who may not sign in, and
the ID token's checks (RSA keys made here, tokens signed with PyJWT)."""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import SuspiciousOperation

from models_store.accounts import service_accounts, services
from models_store.accounts.oidc import backend, discovery, groups
from models_store.models import AuditEvent, Role, TeamMembership
from tests.support.store import person

GROUP_MAP = "ml-devs=ml:maintainer,ml-leads=ml:owner,readers=ml:viewer,readers=vision:viewer,admins=operator"


def test_the_map_in_both_forms_and_its_refusals():
    assert groups.parse_map(GROUP_MAP) == {
        "ml-devs": ["ml:maintainer"], "ml-leads": ["ml:owner"], "readers": ["ml:viewer", "vision:viewer"],
        "admins": ["operator"],
    }  # fmt: skip
    assert groups.parse_map('{"cn=a,ou=g": ["ml:owner", "operator"], "/x/y": "vision:viewer"}') == {
        "cn=a,ou=g": ["ml:owner", "operator"], "/x/y": ["vision:viewer"],
    }  # fmt: skip
    assert groups.parse_map("org:team=ml:viewer") == {"org:team": ["ml:viewer"]}
    assert groups.parse_map("  ") == {}
    for bad in ("ml-devs", "g=ml:admin", "g=ml", "g=bad team:viewer", "=ml:viewer"):
        with pytest.raises(ValueError, match="OIDC_GROUP_MAP"):
            groups.parse_map(bad)


def test_the_highest_role_of_a_persons_groups_wins():
    mapping = groups.parse_map(GROUP_MAP)
    assert groups.grants(["readers", "ml-devs", "unmapped"], mapping) == groups.Grants(
        {"ml": "maintainer", "vision": "viewer"}, False
    )
    assert groups.grants(["ml-leads", "readers"], mapping).roles == {"ml": "owner", "vision": "viewer"}
    assert groups.grants("admins", mapping) == groups.Grants({}, True)
    assert groups.grants(None, mapping) == groups.Grants({}, False)


@pytest.mark.django_db
def test_each_sign_in_rewrites_the_providers_memberships_and_audits_it(settings):
    settings.OIDC_GROUP_MAP = GROUP_MAP
    settings.OIDC_USERNAME_CLAIM = "preferred_username"
    settings.OIDC_GROUPS_CLAIM = "groups"
    first = services.user_for_provider_claims(claims={"preferred_username": "ana", "groups": ["ml-devs", "readers"]})
    assert not first.has_usable_password()
    services.membership_add(team=person("olga", "misc").teams.get(), user=first, role=Role.VIEWER)  # by hand
    memberships = lambda: {  # noqa: E731
        (m.team.name, m.role, m.source) for m in TeamMembership.objects.filter(user__username="ana")
    }
    assert memberships() == {("ml", "maintainer", "oidc"), ("vision", "viewer", "oidc"), ("misc", "viewer", "local")}
    again = services.user_for_provider_claims(claims={"preferred_username": "ana", "groups": ["ml-leads"]})
    assert again.pk == first.pk
    assert memberships() == {("ml", "owner", "oidc"), ("misc", "viewer", "local")}
    events = [
        (e.action, e.actor_name, e.detail.get("team"), e.detail.get("role"))
        for e in AuditEvent.objects.filter(detail__source="oidc").order_by("id")
    ]
    assert events[0] == ("user.create", "system", None, None)
    assert events[1:] == [
        ("team.join", "ana", "ml", "maintainer"),
        ("team.join", "ana", "vision", "viewer"),
        ("team.role", "ana", "ml", "owner"),
        ("team.leave", "ana", "vision", "viewer"),
    ]
    services.user_for_provider_claims(claims={"preferred_username": "ana", "groups": []})
    assert memberships() == {("misc", "viewer", "local")}


@pytest.mark.django_db
def test_operators_come_and_go_with_their_group_but_not_a_local_account(settings):
    settings.OIDC_GROUP_MAP = GROUP_MAP
    ops = services.user_for_provider_claims(claims={"preferred_username": "ops", "groups": ["admins"]})
    assert ops.is_superuser and ops.is_staff
    ops = services.user_for_provider_claims(claims={"preferred_username": "ops", "groups": []})
    assert not ops.is_superuser and not ops.is_staff
    local = person("root", superuser=True)  # a break-glass operator with a password
    assert services.user_for_provider_claims(claims={"preferred_username": "root", "groups": []}).is_superuser
    assert local.has_usable_password()


@pytest.mark.django_db
def test_who_may_not_sign_in(settings):
    settings.OIDC_GROUP_MAP = GROUP_MAP
    gone = person("gone", "ml")
    services.user_deactivate(user=gone, actor=None)
    with pytest.raises(SuspiciousOperation, match="deactivated"):
        services.user_for_provider_claims(claims={"preferred_username": "gone", "groups": ["ml-leads"]})
    account = service_accounts.service_account_create(team=gone.teams.get(), name="bot", actor=None)
    with pytest.raises(SuspiciousOperation, match="service account"):
        services.user_for_provider_claims(claims={"preferred_username": account.user.username})
    with pytest.raises(SuspiciousOperation, match="no preferred_username claim"):
        services.user_for_provider_claims(claims={"sub": "x"})


@pytest.fixture
def issuer(settings, monkeypatch):
    """An issuer whose discovery document is known (no provider needed to check a token's claims)."""
    settings.OIDC_RP_CLIENT_ID = "modelhost"
    monkeypatch.setattr(discovery, "_document", {"issuer": "https://idp.example.com"})
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key


def _token(key, **claims) -> str:
    now = int(time.time())
    payload = {"iss": "https://idp.example.com", "aud": "modelhost", "sub": "ana", "iat": now, "exp": now + 60}
    payload.update(claims)
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, key, algorithm="RS256")


def test_an_id_token_is_checked_for_its_signature_issuer_audience_and_expiry(issuer):
    public = issuer.public_key()
    assert backend.validate_id_token(_token(issuer), public, "RS256")["sub"] == "ana"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refusals = {
        "Signature verification failed": _token(other_key),
        "Invalid issuer": _token(issuer, iss="https://evil.example.com"),
        "Audience doesn't match": _token(issuer, aud="another-app"),
        "Signature has expired": _token(issuer, exp=int(time.time()) - 120),
        'Token is missing the "iat" claim': _token(issuer, iat=None),
    }
    for words, token in refusals.items():
        with pytest.raises(SuspiciousOperation, match=words):
            backend.validate_id_token(token, public, "RS256")
