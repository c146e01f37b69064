"""What people do to a team's webhooks, shared by the web UI and the
management API: look up, check that the user (through an API token when
given) may (the permission table: ``webhook.view`` maintainers,
``webhook.manage`` owners; operators; a team token: its own team),
call one service. Errors: NotFound (no such team, webhook or delivery),
AccessDenied (another team's), SubscriptionRefused (400)."""

from __future__ import annotations

from models_store.accounts import selectors as accounts
from models_store.errors import NotFound
from models_store.identifiers import MAX_ROW_ID
from models_store.webhooks import selectors, services


def webhook_team(user, token, team_name: str, action: str = "webhook.view"):
    """The team ``team_name`` if ``user`` (through ``token``) may do
    ``action`` to its webhooks (``webhook.view``: maintainers; ``webhook.manage``:
    owners; operators): NotFound for no such team, AccessDenied otherwise."""
    team = accounts.team_get(team_name)
    if team is None:
        raise NotFound(f"unknown team '{team_name}'")
    accounts.require_team(user, team, token, action)
    return team


def webhook_get(user, token, team_name: str, webhook_id: int, action: str = "webhook.view"):
    """One of the team's subscriptions (NotFound: none with this id in this team)."""
    team = webhook_team(user, token, team_name, action)
    found = selectors.subscription_of_team(team, webhook_id) if 0 < webhook_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"team {team.name} has no webhook {webhook_id}")
    return found


def webhook_create(user, token, team_name: str, url: str, events: list[str], description: str = ""):
    team = webhook_team(user, token, team_name, "webhook.manage")
    return services.subscription_create(team=team, url=url, events=events, actor=user, description=description)


def webhook_update(user, token, team_name: str, webhook_id: int, **changes):
    """Pause or resume a subscription, or change its events or description (see services.subscription_update)."""
    subscription = webhook_get(user, token, team_name, webhook_id, "webhook.manage")
    return services.subscription_update(subscription=subscription, actor=user, **changes)


def webhook_delete(user, token, team_name: str, webhook_id: int) -> None:
    services.subscription_delete(
        subscription=webhook_get(user, token, team_name, webhook_id, "webhook.manage"), actor=user
    )


def webhook_redeliver(user, token, team_name: str, webhook_id: int, delivery_id: int):
    """Send one of the subscription's deliveries again (NotFound: not one of its deliveries)."""
    subscription = webhook_get(user, token, team_name, webhook_id, "webhook.manage")
    found = selectors.delivery_of(subscription, delivery_id) if 0 < delivery_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"webhook {webhook_id} has no delivery {delivery_id}")
    return services.redeliver(delivery=found, actor=user)
