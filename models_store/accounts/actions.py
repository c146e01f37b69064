"""What people do to a team, shared by the web UI and the management API:
look the team up, check the permission table
(:mod:`models_store.accounts.permissions`: ``team.view`` its members,
``member.manage`` and ``service_account.*`` its owners; operators), call
one service. Errors: NotFound (404: no such team, member, service account
or token), AccessDenied (403), RegistryError (400), Conflict (409)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model

from models_store.accounts import permissions, selectors, service_accounts, services
from models_store.accounts.models import Role, Team, TeamMembership
from models_store.errors import Conflict, NotFound
from models_store.identifiers import MAX_ROW_ID


def team_for(user, token, team_name: str, action: str) -> Team:
    """The team ``team_name`` if ``user`` (through ``token``) may do ``action`` in it."""
    team = selectors.team_get(team_name)
    if team is None:
        raise NotFound(f"unknown team '{team_name}'")
    permissions.require(user, action, team, token)
    return team


def members(user, token, team_name: str):
    """The team's memberships (with their users), by username."""
    team = team_for(user, token, team_name, "team.view")
    return team.memberships.select_related("user", "team").order_by("user__username")


def member_set(user, token, team_name: str, username: str, role: str) -> TeamMembership:
    """Add ``username`` to the team with ``role``, or change their role."""
    team = team_for(user, token, team_name, "member.manage")
    person = get_user_model().objects.filter(username=username).first()
    if person is None:
        raise NotFound(f"unknown user '{username}'")
    return services.membership_add(team=team, user=person, role=role, actor=user)


def member_remove(user, token, team_name: str, username: str) -> None:
    """Remove ``username`` from the team. An owner cannot remove the last owner (Conflict)."""
    team = team_for(user, token, team_name, "member.manage")
    membership = team.memberships.select_related("user", "team").filter(user__username=username).first()
    if membership is None:
        raise NotFound(f"{username} is not a member of team {team.name}")
    owners = team.memberships.filter(role=Role.OWNER)
    if membership.role == Role.OWNER and owners.count() == 1 and not permissions.is_operator(user):
        raise Conflict(f"{username} is the last owner of team {team.name}: make another member owner first")
    services.membership_remove(membership=membership, actor=user)


def service_account_list(user, token, team_name: str):
    """The team's service accounts, by name."""
    return service_accounts.service_accounts_of(team_for(user, token, team_name, "service_account.view"))


def service_account_get(user, token, team_name: str, account_id: int, action: str = "service_account.view"):
    """One of the team's service accounts (NotFound: none with this id in this team)."""
    team = team_for(user, token, team_name, action)
    found = service_accounts.service_account_of(team, account_id) if 0 < account_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"team {team.name} has no service account {account_id}")
    return found


def service_account_create(user, token, team_name: str, name: str, description: str = ""):
    team = team_for(user, token, team_name, "service_account.manage")
    return service_accounts.service_account_create(team=team, name=name, description=description, actor=user)


def service_account_deactivate(user, token, team_name: str, account_id: int):
    account = service_account_get(user, token, team_name, account_id, "service_account.manage")
    return service_accounts.service_account_deactivate(account=account, actor=user)


def service_account_token_create(
    user, token, team_name: str, account_id: int, name: str, role: str, expires_in: timedelta
):
    """A token of the service account: (the row, the token, shown once)."""
    account = service_account_get(user, token, team_name, account_id, "service_account.manage")
    return service_accounts.service_account_token_create(
        account=account, name=name, role=role, expires_in=expires_in, actor=user
    )


def service_account_token_revoke(user, token, team_name: str, account_id: int, token_id: int):
    account = service_account_get(user, token, team_name, account_id, "service_account.manage")
    found = service_accounts.tokens_of(account).filter(pk=token_id).first() if 0 < token_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"service account '{account.name}' has no token {token_id}")
    return services.token_revoke(token=found, actor=user)
