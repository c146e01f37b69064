"""Reads of webhooks: a team's subscriptions, their deliveries, and the deliveries of a model's events."""

from __future__ import annotations

from django.db.models import QuerySet

from models_store.accounts import selectors as accounts
from models_store.registry import selectors as registry
from models_store.webhooks.models import WebhookDelivery, WebhookSubscription


def subscriptions_of(team) -> QuerySet[WebhookSubscription]:
    """The subscriptions of ``team`` (a Team), oldest first, with their team and creator."""
    return team.webhooks.select_related("team", "created_by").order_by("id")


def subscriptions_of_teams(team_names: list[str]) -> QuerySet[WebhookSubscription]:
    """The subscriptions of the teams called ``team_names``, with their team and creator."""
    return WebhookSubscription.objects.filter(team__name__in=team_names).select_related("team", "created_by")


def subscription_get(subscription_id: int) -> WebhookSubscription | None:
    """The subscription with this id (with its team), or None."""
    return WebhookSubscription.objects.select_related("team").filter(pk=subscription_id).first()


def subscription_of_team(team, subscription_id: int) -> WebhookSubscription | None:
    """``team``'s subscription with this id, or None (another team's, or none)."""
    return team.webhooks.filter(pk=subscription_id).first()


def deliveries(subscription: WebhookSubscription) -> QuerySet[WebhookDelivery]:
    """A subscription's deliveries, newest first, each with its attempts."""
    return subscription.deliveries.prefetch_related("attempts")


def with_model_pages(deliveries) -> list[WebhookDelivery]:
    """``deliveries`` (a list or query set), each with ``model_exists``:
    whether a model called its ``model_name`` is in the registry now (a
    delivery of a deleted model names it without a link to a missing page)."""
    found = list(deliveries)
    names = {delivery.model_name for delivery in found if delivery.model_name}
    existing = registry.existing_names(names)
    for delivery in found:
        delivery.model_exists = delivery.model_name in existing
    return found


def delivery_of(subscription: WebhookSubscription, delivery_id: int) -> WebhookDelivery | None:
    """The subscription's delivery with this id, or None."""
    return subscription.deliveries.filter(pk=delivery_id).first()


def deliveries_for_model(user, model, limit: int = 10) -> list[WebhookDelivery]:
    """The newest ``limit`` deliveries of ``model``'s events (a
    RegisteredModel) to its team's webhooks (each with ``last_attempt``),
    if ``user`` may see that team's webhooks (the model page), else []."""
    if model.team is None or not accounts.can_use_team(user, model.team_id, action="webhook.view"):
        return []
    found = list(
        WebhookDelivery.objects.filter(subscription__team_id=model.team_id, model_name=model.name)
        .select_related("subscription")
        .prefetch_related("attempts")[:limit]
    )
    for delivery in found:
        attempts = list(delivery.attempts.all())
        delivery.last_attempt = attempts[-1] if attempts else None
    return found
