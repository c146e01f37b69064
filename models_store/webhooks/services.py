"""Webhooks of teams: the subscriptions (a team's URL and the events it
wants) and the events of a team's models, signed as Standard Webhooks
(https://www.standardwebhooks.com/, spec:
https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md).

:func:`emit` (through :func:`model_event`) is called by the registry's
services in the transaction of the change (``version.ready``,
``version.failed``, ``label.moved``, ``traffic.changed``,
``model.deleted``): it writes one
:class:`~models_store.webhooks.models.WebhookDelivery` per subscription
that asked for the event (so a delivery exists exactly when the change
committed), and schedules its first attempt after commit
(:mod:`models_store.webhooks.delivery` makes the attempts and the
retries). :func:`redeliver` sends any delivery again;
:func:`reschedule_stale` (the upkeep timer) picks up deliveries whose
runner ended (a restart) so none is lost. Each service takes keyword
arguments only.
"""

from __future__ import annotations

import base64
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from models_store import audit
from models_store.errors import RegistryError
from models_store.webhooks import targets
from models_store.webhooks.delivery import schedule
from models_store.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription

EVENTS: tuple[str, ...] = tuple(WebhookEvent.values)
Delivery = WebhookDelivery.State


def new_secret() -> str:
    """A subscription's signing secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(16)


class SubscriptionRefused(RegistryError):
    """A subscription that may not be created (HTTP 400): the message says why."""


def emit(*, team_id: int | None, event: str, model_name: str, data: dict) -> list[int]:
    """Record ``event`` (one of :data:`EVENTS`) of a model of team ``team_id``
    for every active subscription of the team that asked for it, and
    schedule the attempts when the current transaction commits. ``data``:
    the payload's ``data`` (JSON-able). Returns the deliveries' ids."""
    if team_id is None:
        return []
    subscriptions = [
        s for s in WebhookSubscription.objects.filter(team_id=team_id, active=True) if event in (s.events or [])
    ]
    if not subscriptions:
        return []
    now = timezone.now()
    payload = {"type": event, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data}
    ids = []
    for subscription in subscriptions:
        delivery = WebhookDelivery.objects.create(
            subscription=subscription, message_id=new_message_id(), event=event, model_name=model_name,
            payload=payload, next_attempt_at=now, retry_from=now,
        )  # fmt: skip
        ids.append(delivery.pk)
    transaction.on_commit(lambda: [schedule(pk) for pk in ids], robust=True)
    return ids


@transaction.atomic
def subscription_create(*, team, url: str, events: list[str], actor, description: str = "") -> WebhookSubscription:
    """Subscribe ``url`` to ``events`` of team ``team``'s models, with a new
    secret (the caller shows it once). Raises SubscriptionRefused for an
    unknown or missing event, or a URL :func:`targets.check` refuses.
    Audited (``webhook.create``, without the secret)."""
    unknown = sorted(set(events) - set(EVENTS))
    if unknown or not events:
        not_these = f"; not {', '.join(unknown)}" if unknown else ""
        raise SubscriptionRefused(f"events are one or more of {', '.join(EVENTS)}{not_these}")
    try:
        targets.check(url)
    except targets.TargetRefused as exc:
        raise SubscriptionRefused(str(exc)) from None
    events = [event for event in EVENTS if event in events]
    subscription = WebhookSubscription.objects.create(
        team=team, url=url, events=events, description=description, secret=new_secret(), created_by=actor
    )
    audit.record(actor, "webhook.create", None, team=team.name, webhook=subscription.pk, url=url, events=events)
    return subscription


@transaction.atomic
def subscription_update(
    *,
    subscription: WebhookSubscription,
    actor,
    active: bool | None = None,
    events: list[str] | None = None,
    description: str | None = None,
) -> WebhookSubscription:
    """Pause or resume a subscription (``active``: a paused one gets no new
    deliveries), change its events or description (None: unchanged). Raises
    SubscriptionRefused for unknown or no events. Audited (``webhook.update``)."""
    changed = {}
    if events is not None:
        unknown = sorted(set(events) - set(EVENTS))
        if unknown or not events:
            not_these = f"; not {', '.join(unknown)}" if unknown else ""
            raise SubscriptionRefused(f"events are one or more of {', '.join(EVENTS)}{not_these}")
        changed["events"] = [event for event in EVENTS if event in events]
    if active is not None:
        changed["active"] = active
    if description is not None:
        changed["description"] = description
    changed = {key: value for key, value in changed.items() if getattr(subscription, key) != value}
    if changed:
        for key, value in changed.items():
            setattr(subscription, key, value)
        subscription.save(update_fields=list(changed))
        audit.record(actor, "webhook.update", None, team=subscription.team.name, webhook=subscription.pk, **changed)
    return subscription


@transaction.atomic
def subscription_delete(*, subscription: WebhookSubscription, actor) -> None:
    """Delete a subscription with its deliveries. Audited (``webhook.delete``)."""
    audit.record(
        actor, "webhook.delete", None, team=subscription.team.name, webhook=subscription.pk, url=subscription.url
    )
    subscription.delete()


def model_event(*, model, event: str, **data) -> list[int]:
    """:func:`emit` ``event`` of ``model``: its ``data`` names the model and
    its team first (``{"model": ..., "team": ..., **data}``)."""
    team = model.team.name if model.team_id is not None else None
    return emit(
        team_id=model.team_id, event=event, model_name=model.name, data={"model": model.name, "team": team, **data}
    )


def redeliver(*, delivery: WebhookDelivery, actor=None) -> WebhookDelivery:
    """Send a delivery again now (whatever its state; same ``webhook-id``),
    with a fresh retry window; the attempt records who asked. Audited
    (``webhook.redeliver``)."""
    now = timezone.now()
    with transaction.atomic():
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            state=Delivery.PENDING, next_attempt_at=now, retry_from=now, updated_at=now,
            requested_by=audit.actor_name(actor),
        )  # fmt: skip
        subscription = delivery.subscription
        audit.record(
            actor, "webhook.redeliver", None, team=subscription.team.name, webhook=subscription.pk,
            delivery=delivery.message_id, event=delivery.event, model_name=delivery.model_name,
        )  # fmt: skip
        transaction.on_commit(lambda: schedule(delivery.pk), robust=True)
    delivery.refresh_from_db()
    return delivery


def reschedule_stale(*, grace_seconds: float = 60.0) -> list[int]:
    """Deliveries whose attempt is overdue by ``grace_seconds`` (their
    runner's process ended), or claimed but unanswered for longer than an
    attempt may take: due again, and scheduled. Returns their ids."""
    now = timezone.now()
    overdue = now - timedelta(seconds=grace_seconds)
    stuck = now - timedelta(seconds=grace_seconds + settings.WEBHOOK_TIMEOUT_SECONDS)
    pending = WebhookDelivery.objects.filter(state=Delivery.PENDING)
    ids = list(pending.filter(next_attempt_at__lt=overdue).values_list("pk", flat=True))
    for pk in pending.filter(next_attempt_at__isnull=True, updated_at__lt=stuck).values_list("pk", flat=True):
        if WebhookDelivery.objects.filter(pk=pk, next_attempt_at__isnull=True, updated_at__lt=stuck).update(
            next_attempt_at=now, updated_at=now
        ):
            ids.append(pk)
    for pk in ids:
        schedule(pk)
    return ids
