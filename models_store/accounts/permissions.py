"""Who may see and change what.

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

from django.conf import settings

from models_store.models import ApiToken, RegisteredModel, Team


class AccessDenied(PermissionError):
    """The user (or token) may not make this change; the message says why."""


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


def can_change_model(user, model: RegisteredModel, token: ApiToken | None = None) -> bool:
    return can_use_team(user, model.team_id, token)


def require_change_model(user, model: RegisteredModel, token: ApiToken | None = None) -> None:
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


def can_see_model(user, model: RegisteredModel, token: ApiToken | None = None) -> bool:
    """Whether ``user`` (through ``token``) may see ``model``, its versions and audit log."""
    teams = visible_team_ids(user, token)
    return teams is None or model.team_id in teams
