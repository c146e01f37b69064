"""Who may do what: the one permission table of the model store.

Each person has a role in each of their teams (:class:`Role`, on the
membership): **viewer** (sees the team's models and calls them),
**maintainer** (also uploads, moves labels and traffic, runs rollouts,
retires, restores and deletes versions, deletes models, changes a model's settings),
**owner** (also the team's members, service accounts and their tokens,
webhooks and limits). The platform **operator** (an active superuser) may
do everything, and alone changes the models that have no team and the
platform's own settings. A service account acts in its one team, at most
with the role its token carries; any API token may carry a role, which caps
its user's (a team token reaches only its team).

:data:`PERMISSIONS` maps every action to the least :class:`Level` it needs.
Every check goes through :func:`level` and :func:`allows` /
:func:`require`: the registry's and the teams' actions (web UI and
management API alike), the webhooks', and the serving side's token scopes
(:mod:`models_store.accounts.authorizer`: inference needs ``model.call``,
the repository extension's load/unload ``model.load``).

Adding an endpoint (say, the rollouts API):

1. add its actions to :data:`PERMISSIONS` (e.g. ``"rollout.start": Level.MAINTAINER``);
2. call :func:`require` (or a selector built on it) in the action the view calls;
3. declare which action each method of the endpoint is: ``permission_actions =
   {"POST": "rollout.start"}`` on a DRF view, ``@endpoint(POST="rollout.start")``
   on a web UI view. ``tests/models_store/test_permission_matrix.py`` walks every
   URL pattern and fails for an endpoint that declares nothing, then checks each
   declared action for every role against the table.
"""

from __future__ import annotations

from enum import IntEnum

from models_store.accounts.models import Role
from models_store.errors import AccessDenied


class Level(IntEnum):
    """How much someone may do in one team: none, a role, or the operator's all."""

    NONE = 0
    VIEWER = 1
    MAINTAINER = 2
    OWNER = 3
    OPERATOR = 4


ROLE_LEVELS = {Role.VIEWER: Level.VIEWER, Role.MAINTAINER: Level.MAINTAINER, Role.OWNER: Level.OWNER}

#: Action -> the least level it needs in the team it concerns (a model's team, a webhook's, ...).
PERMISSIONS: dict[str, Level] = {
    # anyone signed in (a session or an API token): answers only what they may see, or their own
    "models.list": Level.NONE,  # the model list (filtered by model.view)
    "teams.list": Level.NONE,  # the teams page (the caller's teams)
    "webhooks.list": Level.NONE,  # the webhooks page (of the teams where the caller has webhook.view)
    "token.own": Level.NONE,  # a person's own API tokens (a team token: of a team they belong to)
    # a team's models (seeing them is everyone's while INFERENCE_REQUIRE_TOKEN is off)
    "model.view": Level.VIEWER,  # a model, its versions, audit log and charts
    "model.call": Level.VIEWER,  # inference (V2 REST and gRPC, TF Serving)
    "model.create": Level.MAINTAINER,  # the first upload of a new model for the team
    "model.update": Level.MAINTAINER,  # description, tags, version policy, instance group, payload logging
    "model.load": Level.MAINTAINER,  # Triton's repository extension: load, unload
    "model.delete": Level.MAINTAINER,  # the model with every version (refused while something uses it: 409)
    "version.upload": Level.MAINTAINER,
    "version.retire": Level.MAINTAINER,
    "version.restore": Level.MAINTAINER,
    "version.promote": Level.MAINTAINER,  # release a held version
    "version.delete": Level.MAINTAINER,
    "version.update": Level.MAINTAINER,  # a version's description and tags
    "label.set": Level.MAINTAINER,
    "label.delete": Level.MAINTAINER,
    "traffic.set": Level.MAINTAINER,
    "traffic.promote": Level.MAINTAINER,
    "traffic.rollback": Level.MAINTAINER,
    "rollout.manage": Level.MAINTAINER,
    "shadow.set": Level.MAINTAINER,  # shadow traffic: set, change, clear
    # the team itself
    "team.view": Level.VIEWER,  # its members and their roles
    "member.manage": Level.OWNER,  # add, change the role of, remove members
    "service_account.view": Level.OWNER,
    "service_account.manage": Level.OWNER,  # create, deactivate; create and revoke their tokens
    "webhook.view": Level.MAINTAINER,  # subscriptions, deliveries
    "webhook.manage": Level.OWNER,  # subscribe, pause, delete, redeliver
    "team.limits": Level.OWNER,
    # the platform
    "platform.settings": Level.OPERATOR,  # Triton's trace and log settings
}


def needs(action: str) -> Level:
    """The least level ``action`` needs; KeyError for an action not in the table."""
    return PERMISSIONS[action]


def role_level(role: str | None) -> Level:
    """The level of a role's name (None or unknown: NONE)."""
    return ROLE_LEVELS.get(role, Level.NONE) if role else Level.NONE


def is_operator(user) -> bool:
    """True for an active superuser (the operator of the platform)."""
    return bool(user is not None and user.is_active and user.is_superuser)


def team_levels(user) -> dict[int, Level]:
    """Team id -> ``user``'s level in it, from their memberships (a service
    account: owner of its team, capped by its token's role); cached on the user object."""
    if user is None or not user.is_authenticated:
        return {}
    cached = getattr(user, "_modelhost_team_levels", None)
    if cached is None:
        cached = {team: role_level(role) for team, role in user.team_memberships.values_list("team_id", "role")}
        account = getattr(user, "service_account", None) if user.pk else None
        if account is not None:
            cached[account.team_id] = Level.OWNER
        user._modelhost_team_levels = cached
    return cached


def cap(base: Level, token_team_id: int | None, token_role: str | None, team_id: int | None) -> Level:
    """``base`` as a token may use it in team ``team_id``: nothing outside
    the token's team (when it has one), at most the token's role (when it carries one)."""
    if token_team_id is not None and token_team_id != team_id:
        return Level.NONE
    if token_role:
        return min(base, role_level(token_role))
    return base


def level(user, team_id: int | None, token=None) -> Level:
    """What ``user`` (through ``token``, an ApiToken, when given) may do in
    team ``team_id`` (None: the operators' models, which no team owns)."""
    if user is None or not user.is_active:
        return Level.NONE
    if is_operator(user):
        base = Level.OPERATOR
    else:
        base = team_levels(user).get(team_id, Level.NONE) if team_id is not None else Level.NONE
    if token is None:
        return base
    return cap(base, token.team_id, token.role, team_id)


def allows(user, action: str, team_id: int | None, token=None) -> bool:
    """Whether ``user`` (through ``token``) may do ``action`` in team ``team_id``."""
    return level(user, team_id, token) >= needs(action)


def refusal(user, action: str, team_name: str | None, team_id: int | None, token=None) -> str:
    """Why ``user`` may not do ``action`` (one sentence)."""
    need = needs(action)
    if team_id is None:
        return f"{action} here is the operators' alone (no team owns it)"
    if token is not None and token.team_id is not None and token.team_id != team_id:
        return f"this API token is limited to another team; {action} concerns team {team_name}"
    have = level(user, team_id, None)
    if have == Level.NONE:
        return f"you are not a member of team {team_name}; {action} needs its {need.name.lower()} role"
    if token is not None and token.role and role_level(token.role) < need:
        return f"this API token carries the {token.role} role; {action} needs {need.name.lower()} in team {team_name}"
    return f"{action} needs the {need.name.lower()} role in team {team_name}; yours is {have.name.lower()}"


def require(user, action: str, team, token=None) -> None:
    """Raise AccessDenied (403) unless ``user`` (through ``token``) may do
    ``action`` in ``team`` (a Team, or None: operator-owned)."""
    team_id = team.pk if team is not None else None
    if not allows(user, action, team_id, token):
        raise AccessDenied(refusal(user, action, team.name if team is not None else None, team_id, token))


def endpoint(**methods: str | dict[str, str]):
    """Declare which action each HTTP method of a web UI view is
    (``@endpoint(POST="label.set")``; a view with an ``action`` URL argument:
    ``POST={"promote": "traffic.promote", ...}``, by that argument): the
    permission matrix test reads it. The check itself is the action's (:func:`require`)."""
    for declared in methods.values():
        for action in declared.values() if isinstance(declared, dict) else (declared,):
            needs(action)  # an action the table lacks fails at import

    def declare(view):
        view.permission_actions = dict(methods)
        return view

    return declare
