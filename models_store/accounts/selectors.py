"""Reads of people: teams, API tokens, and who may see and change what.

Seeing: every signed-in user (web UI) and every API token (management API)
may read every model, its versions and audit log (the platform is shared,
and people need to see what is serving), unless ``INFERENCE_REQUIRE_TOKEN``
is on: then, as on the data plane, each sees only the models it may call,
those of its teams (of the token's team for a token limited to one);
operators (superusers, through a token not limited to a team) see every
model. Anonymous callers see nothing (the management API and the web UI
need a signed-in user or a token).

Changing a model (uploading a version, labels, version policy, retiring,
deleting) needs membership of the model's team; a model without a team is
operator-owned and only superusers change it. Superusers change everything.
An API token with a team only reaches that team's models, whoever its user is.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from models_store.accounts.models import ApiToken, Team, TeamMembership
from models_store.accounts.tokens import hash_token
from models_store.errors import AccessDenied, NotFound


# -- teams, tokens, users ----------------------------------------------------------
def team_get(name: str) -> Team | None:
    """The team called ``name``, or None."""
    return Team.objects.filter(name=name).first()


def team_names(team_ids=None) -> list[str]:
    """The names of the teams ``team_ids`` (every team when None), sorted."""
    teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=team_ids)
    return list(teams.order_by("name").values_list("name", flat=True))


def teams_for_user(user) -> QuerySet[Team]:
    """The teams a user may create models for: all for a superuser, else theirs."""
    if user.is_superuser:
        return Team.objects.order_by("name")
    return Team.objects.filter(memberships__user=user).order_by("name")


def tokens_for_user(user) -> QuerySet[ApiToken]:
    """A user's API tokens, active first, newest first."""
    return ApiToken.objects.filter(user=user).select_related("team").order_by("revoked_at", "-created_at")


def token_by_hash(key_hash: str) -> ApiToken | None:
    """The unrevoked token with this hash whose user is active, or None (the
    caller refuses it when it has expired: ``token.expired``)."""
    return (
        ApiToken.objects.select_related("user", "team")
        .filter(key_hash=key_hash, revoked_at__isnull=True, user__is_active=True)
        .first()
    )


def token_by_secret(secret: str) -> ApiToken | None:
    """:func:`token_by_hash` of the token ``secret`` a caller presents."""
    return token_by_hash(hash_token(secret))


def token_get(token_id: int) -> ApiToken | None:
    return ApiToken.objects.select_related("user", "team").filter(pk=token_id).first()


def token_of(user, token_id: int) -> ApiToken:
    """One of ``user``'s own API tokens (a superuser: anyone's); NotFound otherwise."""
    token = token_get(token_id)
    if token is None or (token.user_id != user.pk and not user.is_superuser):
        raise NotFound("no such API token")
    return token


def user_get(user_id: int | None):
    """The user with this id, or None."""
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()


@dataclass(frozen=True)
class InferenceAccess:
    tokens: list[ApiToken]  # unrevoked tokens of active users (also expired ones: refused by name), with .user
    memberships: dict[int, frozenset[int]]  # user id -> team ids
    team_names: dict[int, str]
    team_limits: dict[int, tuple]  # team id -> (rate_limit_rps, rate_limit_burst, max_in_flight), None: not set


def inference_access() -> InferenceAccess:
    """What the inference token checker needs of people, in three queries
    (the models' teams: :func:`models_store.registry.selectors.model_teams`)."""
    tokens = list(ApiToken.objects.select_related("user").filter(revoked_at__isnull=True, user__is_active=True))
    teams = list(Team.objects.values_list("id", "name", "rate_limit_rps", "rate_limit_burst", "max_in_flight"))
    members: dict[int, set[int]] = {}
    for user_id, team_id in TeamMembership.objects.values_list("user_id", "team_id"):
        members.setdefault(user_id, set()).add(team_id)
    return InferenceAccess(
        tokens=tokens,
        memberships={user: frozenset(teams) for user, teams in members.items()},
        team_names={team_id: name for team_id, name, *_limits in teams},
        team_limits={team_id: tuple(limits) for team_id, _name, *limits in teams if limits != [None, None, None]},
    )


# -- who may see and change what ----------------------------------------------------
def is_operator(user) -> bool:
    """True for an active superuser (the operator of the platform)."""
    return bool(user is not None and user.is_active and user.is_superuser)


def member_team_ids(user) -> frozenset[int]:
    """Ids of the teams ``user`` belongs to (cached on the user object)."""
    if user is None or not user.is_authenticated:
        return frozenset()
    cached = getattr(user, "_modelhost_team_ids", None)
    if cached is None:
        cached = frozenset(user.team_memberships.values_list("team_id", flat=True))
        user._modelhost_team_ids = cached
    return cached


def can_use_team(user, team_id: int | None, token: ApiToken | None = None) -> bool:
    """Whether ``user`` (through ``token`` when given) may change models of
    team ``team_id`` (None: operator-owned models)."""
    if user is None or not user.is_active:
        return False
    if token is not None and token.team_id is not None and token.team_id != team_id:
        return False
    if is_operator(user):
        return True
    return team_id is not None and team_id in member_team_ids(user)


def can_change_model(user, model, token: ApiToken | None = None) -> bool:
    return can_use_team(user, model.team_id, token)


def require_change_model(user, model, token: ApiToken | None = None) -> None:
    """Raise AccessDenied unless ``user`` may change ``model``."""
    if can_change_model(user, model, token):
        return
    if model.team_id is None:
        raise AccessDenied(f"model '{model.name}' is operator-owned (no team): only administrators may change it")
    if token is not None and token.team_id is not None and token.team_id != model.team_id:
        raise AccessDenied(f"this API token is limited to another team; model '{model.name}' belongs to {model.team}")
    raise AccessDenied(f"model '{model.name}' belongs to team {model.team}; only its members may change it")


def require_team(user, team: Team, token: ApiToken | None = None) -> None:
    """Raise AccessDenied unless ``user`` may create models for ``team``."""
    if not can_use_team(user, team.pk, token):
        raise AccessDenied(f"you are not a member of team {team.name} (or your API token is limited to another team)")


def visible_team_ids(user, token: ApiToken | None = None) -> frozenset[int] | None:
    """The teams whose models ``user`` (through ``token`` when given) may
    see, or None for every model (operator-owned ones too): None unless
    INFERENCE_REQUIRE_TOKEN is on (see the module doc)."""
    if not settings.INFERENCE_REQUIRE_TOKEN:
        return None
    if user is None or not user.is_active:
        return frozenset()
    if token is not None and token.team_id is not None:
        return frozenset({token.team_id}) if can_use_team(user, token.team_id, token) else frozenset()
    if is_operator(user):
        return None
    return member_team_ids(user)


def can_see_model(user, model, token: ApiToken | None = None) -> bool:
    """Whether ``user`` (through ``token``) may see ``model``, its versions and audit log."""
    teams = visible_team_ids(user, token)
    return teams is None or model.team_id in teams
