"""Writes for people: users (also those the identity provider signs in),
teams, memberships, team limits and API tokens; each takes keyword arguments only.

Changes that affect who may call which model (tokens, team limits;
memberships and users through :mod:`models_store.accounts.signals`) bump
the registry change stamp, so that every server process reloads its token
scopes; every change is recorded in the audit log.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from models_store import audit
from models_store.accounts import permissions, tokens
from models_store.accounts.models import ApiToken, Role, Team, TeamMembership
from models_store.accounts.oidc import access_tokens, groups
from models_store.errors import Conflict, RegistryError
from models_store.identifiers import team_name_validator
from models_store.stamp import bump_stamp

logger = logging.getLogger(__name__)


@transaction.atomic
def team_get_or_create(*, name: str, actor=None) -> Team:
    """The team called ``name``, created if needed. Raises RegistryError for a malformed name."""
    try:
        team_name_validator(name)
    except DjangoValidationError as exc:
        raise RegistryError(exc.messages[0]) from None
    team, created = Team.objects.get_or_create(name=name)
    if created:
        audit.record(actor, "team.create", team=name)
    return team


def _role(role: str) -> str:
    if role not in Role.values:
        raise RegistryError(f"unknown role '{role}': one of {', '.join(Role.values)}")
    return role


@transaction.atomic
def membership_add(*, team: Team, user, role: str = Role.OWNER, actor=None, source: str = "local") -> TeamMembership:
    """Make ``user`` a member of ``team`` with ``role``, or set the role of
    a member (audited ``team.join`` / ``team.role``). RegistryError for an
    unknown role; Conflict for a service account (it belongs to its own team only)."""
    _role(role)
    if hasattr(user, "service_account"):
        raise Conflict(f"{user.get_username()} is a service account: it acts in its own team only")
    membership, created = TeamMembership.objects.get_or_create(
        team=team, user=user, defaults={"role": role, "source": source}
    )  # bumps the stamp (signals)
    if created:
        audit.record(actor, "team.join", team=team.name, user=user.get_username(), role=role, source=source)
    elif membership.role != role or membership.source != source:
        before = membership.role
        membership.role, membership.source = role, source
        membership.save(update_fields=["role", "source"])
        audit.record(actor, "team.role", team=team.name, user=user.get_username(), role=role, was=before, source=source)
    return membership


@transaction.atomic
def membership_remove(*, membership: TeamMembership, actor=None) -> None:
    """End a membership (audited ``team.leave``); the member's tokens stop
    reaching the team's models at the next check (the stamp moves)."""
    audit.record(
        actor, "team.leave", team=membership.team.name, user=membership.user.get_username(), role=membership.role,
        source=membership.source,
    )  # fmt: skip
    membership.delete()


@transaction.atomic
def memberships_sync(*, user, roles: dict[str, str], operator: bool | None = None) -> list[str]:
    """Apply what the identity provider's groups give ``user`` at a sign-in:
    exactly ``roles`` (team name -> role) among the memberships the provider
    manages (``source`` oidc; teams created when missing; a local membership
    of a mapped team passes to the provider), removing the provider's others;
    ``operator`` (None: no group maps to operators) sets the platform
    operator flags of an account without a local password. Each change is
    audited (``team.join``, ``team.role``, ``team.leave``, ``user.operator``)
    with the user as actor and ``source: oidc``; returns what changed."""
    changes = []
    current = {m.team.name: m for m in user.team_memberships.select_related("team")}
    for team_name, role in sorted(roles.items()):
        membership = current.get(team_name)
        if membership is None or (membership.role, membership.source) != (role, "oidc"):
            membership_add(team=team_get_or_create(name=team_name, actor=user), user=user, role=role, actor=user,
                           source="oidc")  # fmt: skip
            changes.append(f"{team_name}:{role}")
    for team_name, membership in sorted(current.items()):
        if membership.source == "oidc" and team_name not in roles:
            membership_remove(membership=membership, actor=user)
            changes.append(f"-{team_name}")
    if operator is not None and not user.has_usable_password() and user.is_superuser != operator:
        user.is_superuser = user.is_staff = operator
        user.save(update_fields=["is_superuser", "is_staff"])
        audit.record(user, "user.operator", user=user.get_username(), operator=operator, source="oidc")
        changes.append("operator" if operator else "-operator")
    user._modelhost_team_levels = None  # what permissions cached of the user is stale
    return changes


@transaction.atomic
def user_create(
    *, username: str, password: str, teams: list[str] = (), email: str = "", superuser: bool = False,
    role: str = Role.OWNER,
):  # fmt: skip
    """Create a user with ``password`` and team memberships with ``role``
    (teams are created when missing). Raises RegistryError when the username is taken."""
    model = get_user_model()
    if model.objects.filter(username=username).exists():
        raise RegistryError(f"user '{username}' already exists")
    create = model.objects.create_superuser if superuser else model.objects.create_user
    user = create(username=username, email=email, password=password)
    audit.record(None, "user.create", user=username, superuser=superuser)
    for name in teams:
        membership_add(team=team_get_or_create(name=name), user=user, role=role)
    return user


@transaction.atomic
def user_create_from_provider(*, username: str, email: str = ""):
    """A user signing in through the identity provider for the first time:
    no local password (audited ``user.create`` with ``source: oidc``)."""
    user = get_user_model()(username=username, email=email)
    user.set_unusable_password()
    user.save()
    audit.record(None, "user.create", user=username, superuser=False, source="oidc")
    return user


@transaction.atomic
def user_deactivate(*, user, actor=None):
    """Deactivate a person (they leave the company): no more sign-in; their
    personal API tokens are refused by the management API at once and by
    every server process at the next check (the stamp moves; at the latest
    within INFERENCE_TOKEN_CACHE_SECONDS). Their service accounts' tokens,
    which belong to teams, keep working."""
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])  # bumps the stamp (signals)
        audit.record(actor, "user.deactivate", user=user.get_username())
    return user


@transaction.atomic
def team_set_limits(*, team: Team, rate: float | None, burst: int | None, in_flight: int | None, actor=None) -> Team:
    """Set a team's own inference limits (operators): requests per second,
    burst, inferences in flight; None: the default (RATE_LIMIT_TEAM_*), 0:
    unlimited. Raises RegistryError for a negative value."""
    for name, value in (("rate", rate), ("burst", burst), ("in_flight", in_flight)):
        if value is not None and value < 0:
            raise RegistryError(f"{name} may not be negative")
    locked = Team.objects.select_for_update().get(pk=team.pk)
    locked.rate_limit_rps, locked.rate_limit_burst, locked.max_in_flight = rate, burst, in_flight
    locked.save(update_fields=["rate_limit_rps", "rate_limit_burst", "max_in_flight"])
    audit.record(actor, "team.limits", None, team=locked.name, rate=rate, burst=burst, in_flight=in_flight)
    bump_stamp(changed=[])  # the token scopes' (team limits), no model's record
    return locked


@transaction.atomic
def token_create(
    *, user, name: str, team: Team | None = None, expires_in: timedelta | None = None, role: str | None = None,
    actor=None,
) -> tuple[ApiToken, str]:  # fmt: skip
    """A new API token for ``user`` (limited to ``team`` when given; the user
    must belong to it unless a superuser), expiring ``expires_in`` from now
    when given, carrying ``role`` when given (it then does at most what that
    role may). ``actor``: who creates it (default ``user``; a service
    account's owner). Returns the row and the token itself, which is never
    stored: show it once.

    Raises RegistryError for an empty name, a team the user is not in, an
    unknown role, or an expiry that is not in the future.
    """
    name = name.strip()
    if not name:
        raise RegistryError("give the token a name (e.g. the script that uses it)")
    if team is not None and not permissions.allows(user, "model.call", team.pk):
        raise RegistryError(f"you are not a member of team {team.name}")
    if role is not None:
        _role(role)
    if expires_in is not None and expires_in <= timedelta(0):
        raise RegistryError("a token's lifetime must be positive")
    expires_at = timezone.now() + expires_in if expires_in is not None else None
    plain = tokens.generate()
    token = ApiToken.objects.create(
        user=user,
        name=name[:64],
        team=team,
        prefix=tokens.display_prefix(plain),
        key_hash=tokens.hash_token(plain),
        expires_at=expires_at,
        role=role,
    )
    audit.record(
        actor or user,
        "token.create",
        token=token.name,
        prefix=token.prefix,
        owner=user.get_username(),
        team=team.name if team else "",
        role=role or "",
        expires_at=expires_at.isoformat() if expires_at else "",
    )
    bump_stamp(changed=[])  # the token scopes', no model's record
    return token, plain


@transaction.atomic
def token_revoke(*, token: ApiToken, actor) -> ApiToken:
    """Revoke a token (idempotent); it stops working everywhere within about
    REGISTRY_POLL_SECONDS."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(actor, "token.revoke", token=token.name, prefix=token.prefix, owner=token.user.get_username())
        bump_stamp(changed=[])  # the token scopes', no model's record
    return token


def token_touch(*, token: ApiToken) -> None:
    """Note that a token was used (management API), at most once a minute."""
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


#: The identity provider's token is refused (401) / its keys cannot be read (503).
ProviderTokenRefused = access_tokens.TokenRefused
ProviderKeysUnavailable = access_tokens.KeysUnavailable


# -- people from the identity provider (single sign-on, docs/sso.md) ------------------
def provider_username(*, claims: dict) -> str:
    """The username the claims give (OIDC_USERNAME_CLAIM); SuspiciousOperation when missing."""
    value = claims.get(settings.OIDC_USERNAME_CLAIM)
    if not isinstance(value, str) or not value.strip():
        raise SuspiciousOperation(f"the identity provider sent no {settings.OIDC_USERNAME_CLAIM} claim")
    return value.strip()[:150]


def provider_groups_apply(*, user, claims: dict) -> list[str]:
    """Rewrite the user's provider-managed teams and roles from the groups claim (audited)."""
    mapping = groups.parse_map(settings.OIDC_GROUP_MAP)
    granted = groups.grants(claims.get(settings.OIDC_GROUPS_CLAIM, []), mapping)
    operator_mapped = any(groups.OPERATOR in targets for targets in mapping.values())
    changes = memberships_sync(user=user, roles=granted.roles, operator=granted.operator if operator_mapped else None)
    if changes:
        logger.info("sign-in of %s: teams and roles from the provider's groups: %s", user, ", ".join(changes))
    return changes


def user_for_provider_claims(*, claims: dict):
    """The active user the claims name (created at their first sign-in, with
    no local password), their groups applied; SuspiciousOperation for a
    service account's name or a deactivated user (the provider's word does
    not bring back whom an operator deactivated)."""
    username = provider_username(claims=claims)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        user = user_create_from_provider(username=username, email=str(claims.get("email", ""))[:254])
    if hasattr(user, "service_account"):
        raise SuspiciousOperation(f"{username} is a service account: it cannot sign in")
    if not user.is_active:
        raise SuspiciousOperation(f"{username} is deactivated")
    provider_groups_apply(user=user, claims=claims)
    return user


def provider_token_user(*, token: str):
    """The user an identity provider's access token (a JWT, validated by
    :mod:`models_store.accounts.oidc.access_tokens`) stands for, their groups
    applied as at a sign-in; None when ``token`` is not a JWT or single
    sign-on is off. Raises ProviderTokenRefused (401: invalid, or its user
    deactivated) or ProviderKeysUnavailable (503)."""
    if not settings.OIDC_ENABLED or not access_tokens.looks_like_jwt(token):
        return None
    claims = access_tokens.validate(token)
    try:
        return user_for_provider_claims(claims=claims)
    except SuspiciousOperation as exc:  # no username claim, a deactivated user, a service account
        raise ProviderTokenRefused(str(exc)) from None
