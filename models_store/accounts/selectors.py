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
deleting) needs a role in the model's team, the one the permission table
(:mod:`models_store.accounts.permissions`) names for the change; a model
without a team is operator-owned and only superusers change it. Superusers
change everything. An API token with a team only reaches that team's
models, whoever its user is; a token with a role does at most what the role may.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from models_store.accounts import permissions
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
    levels: dict[int, dict[int, permissions.Level]]  # user id -> {team id: level} (memberships, service accounts)
    team_names: dict[int, str]
    team_limits: dict[int, tuple]  # team id -> (rate_limit_rps, rate_limit_burst, max_in_flight), None: not set


def inference_access() -> InferenceAccess:
    """What the inference token checker needs of people, in three queries
    (the models' teams: :func:`models_store.registry.selectors.model_teams`)."""
    tokens = list(
        ApiToken.objects.select_related("user", "user__service_account").filter(
            revoked_at__isnull=True, user__is_active=True
        )
    )
    teams = list(Team.objects.values_list("id", "name", "rate_limit_rps", "rate_limit_burst", "max_in_flight"))
    levels: dict[int, dict[int, permissions.Level]] = {}
    for user_id, team_id, role in TeamMembership.objects.values_list("user_id", "team_id", "role"):
        levels.setdefault(user_id, {})[team_id] = permissions.role_level(role)
    for token in tokens:
        account = getattr(token.user, "service_account", None)
        if account is not None:  # in its own team only, capped by each token's role
            levels[token.user_id] = {account.team_id: permissions.Level.OWNER}
    return InferenceAccess(
        tokens=tokens,
        levels=levels,
        team_names={team_id: name for team_id, name, *_limits in teams},
        team_limits={team_id: tuple(limits) for team_id, _name, *limits in teams if limits != [None, None, None]},
    )


# -- who may see and change what (through the one table: permissions) --------------
is_operator = permissions.is_operator
#: The other packages' views declare their endpoints' actions with it (see permissions' module doc).
endpoint = permissions.endpoint
#: Why someone may not do an action (one sentence).
refusal = permissions.refusal


def member_team_ids(user) -> frozenset[int]:
    """Ids of the teams ``user`` belongs to, in any role (a service account: its team)."""
    return frozenset(permissions.team_levels(user))


def teams_allowing(user, action: str) -> QuerySet[Team]:
    """The teams in which ``user`` may do ``action`` (all for an operator), by name."""
    if is_operator(user):
        return Team.objects.order_by("name")
    need = permissions.needs(action)
    ids = [team for team, level in permissions.team_levels(user).items() if level >= need]
    return Team.objects.filter(pk__in=ids).order_by("name")


def teams_for_user(user) -> QuerySet[Team]:
    """The teams a user may create models for (``model.create``): all for a superuser."""
    return teams_allowing(user, "model.create")


def can_use_team(user, team_id: int | None, token: ApiToken | None = None, action: str = "model.update") -> bool:
    """Whether ``user`` (through ``token`` when given) may do ``action`` in
    team ``team_id`` (None: operator-owned models)."""
    return permissions.allows(user, action, team_id, token)


def can_change_model(user, model, token: ApiToken | None = None, action: str = "model.update") -> bool:
    return permissions.allows(user, action, model.team_id, token)


def require_change_model(user, model, token: ApiToken | None = None, action: str = "model.update") -> None:
    """Raise AccessDenied unless ``user`` may do ``action`` to ``model``."""
    if permissions.allows(user, action, model.team_id, token):
        return
    if model.team_id is None:
        raise AccessDenied(f"model '{model.name}' is operator-owned (no team): only administrators may change it")
    if token is not None and token.team_id is not None and token.team_id != model.team_id:
        raise AccessDenied(f"this API token is limited to another team; model '{model.name}' belongs to {model.team}")
    if permissions.level(user, model.team_id) == permissions.Level.NONE:
        raise AccessDenied(f"model '{model.name}' belongs to team {model.team}; only its members may change it")
    raise AccessDenied(
        f"model '{model.name}' of team {model.team}: "
        + permissions.refusal(user, action, model.team.name, model.team_id, token)
    )


def require_team(user, team: Team, token: ApiToken | None = None, action: str = "model.create") -> None:
    """Raise AccessDenied unless ``user`` may do ``action`` in ``team`` (by default: create models for it)."""
    permissions.require(user, action, team, token)


def visible_team_ids(user, token: ApiToken | None = None) -> frozenset[int] | None:
    """The teams whose models ``user`` (through ``token`` when given) may
    see (``model.view``), or None for every model (operator-owned ones too):
    None unless INFERENCE_REQUIRE_TOKEN is on (see the module doc)."""
    if not settings.INFERENCE_REQUIRE_TOKEN:
        return None
    if user is None or not user.is_active:
        return frozenset()
    if token is not None and token.team_id is not None:
        return (
            frozenset({token.team_id}) if permissions.allows(user, "model.view", token.team_id, token) else frozenset()
        )
    if is_operator(user):
        return None
    need = permissions.needs("model.view")
    return frozenset(team for team, level in permissions.team_levels(user).items() if level >= need)


def can_see_model(user, model, token: ApiToken | None = None) -> bool:
    """Whether ``user`` (through ``token``) may see ``model``, its versions and audit log."""
    teams = visible_team_ids(user, token)
    return teams is None or model.team_id in teams
