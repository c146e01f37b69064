"""Writes and reads of service accounts: identities owned by a team, not a
person, whose API tokens carry a role and an expiry (apps call with them).

A service account is a Django user named ``<name>@<team>.service`` with no
usable password (it cannot sign in), plus a :class:`ServiceAccount` row
naming its team; it acts in that team only, at most with its token's role
(:mod:`models_store.accounts.permissions`). Its tokens keep working after
the person who created them leaves (they belong to the account, not to the
person); deactivating the account refuses them all. Every change is
audited with its actor (a team owner or an operator); who may make it is
the actions' to check (:mod:`models_store.accounts.actions`).
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import QuerySet

from models_store import audit
from models_store.accounts import services
from models_store.accounts.models import ApiToken, ServiceAccount, Team
from models_store.errors import Conflict, RegistryError
from models_store.identifiers import check_whole, team_name_validator

#: The longest a service account's token may live (its lifetime is always given).
MAX_TOKEN_LIFETIME = timedelta(days=366)


def username_of(team: Team, name: str) -> str:
    """The Django username of service account ``name`` of ``team``."""
    return f"{name}@{team.name}.service"


@transaction.atomic
def service_account_create(*, team: Team, name: str, description: str = "", actor) -> ServiceAccount:
    """A new service account ``name`` of ``team`` (audited
    ``service_account.create``). RegistryError for a malformed name,
    Conflict when the team has one of that name."""
    try:
        check_whole(team_name_validator, name)
    except DjangoValidationError:
        raise RegistryError(
            "a service account's name starts with a letter or digit and holds only letters, digits, "
            "'_', '.' and '-' (at most 64 characters)"
        ) from None
    users = get_user_model()
    username = username_of(team, name)
    if ServiceAccount.objects.filter(team=team, name=name).exists() or users.objects.filter(username=username).exists():
        raise Conflict(f"team {team.name} already has a service account '{name}'")
    user = users(username=username)
    user.set_unusable_password()
    user.save()
    account = ServiceAccount.objects.create(team=team, name=name, description=description, user=user, created_by=actor)
    audit.record(actor, "service_account.create", team=team.name, service_account=name)
    return account


@transaction.atomic
def service_account_deactivate(*, account: ServiceAccount, actor) -> ServiceAccount:
    """Deactivate a service account (idempotent; audited
    ``service_account.deactivate``): every token of it is refused, by the
    management API at once and by every server process at the next check."""
    user = account.user
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])  # bumps the stamp (signals)
        audit.record(actor, "service_account.deactivate", team=account.team.name, service_account=account.name)
    return account


def service_account_token_create(
    *, account: ServiceAccount, name: str, role: str, expires_in: timedelta, actor
) -> tuple[ApiToken, str]:
    """A token of ``account`` limited to its team, carrying ``role`` and
    expiring ``expires_in`` from now (at most :data:`MAX_TOKEN_LIFETIME`);
    audited ``token.create`` with ``actor``. Returns the row and the token
    (shown once). RegistryError for a bad name, role or lifetime; Conflict
    for a deactivated account."""
    if not account.user.is_active:
        raise Conflict(f"service account '{account.name}' is deactivated")
    if expires_in > MAX_TOKEN_LIFETIME:
        raise RegistryError(f"a service account's token lives at most {MAX_TOKEN_LIFETIME.days} days")
    return services.token_create(
        user=account.user, name=name, team=account.team, expires_in=expires_in, role=role, actor=actor
    )


# -- reads ---------------------------------------------------------------------------
def service_accounts_of(team: Team) -> QuerySet[ServiceAccount]:
    """The team's service accounts, by name, with their user and creator."""
    return team.service_accounts.select_related("user", "created_by", "team").order_by("name")


def service_account_of(team: Team, account_id: int) -> ServiceAccount | None:
    """The team's service account with this id, or None."""
    return service_accounts_of(team).filter(pk=account_id).first()


def tokens_of(account: ServiceAccount) -> QuerySet[ApiToken]:
    """A service account's tokens, active first, newest first."""
    return ApiToken.objects.filter(user=account.user).order_by("revoked_at", "-created_at")
