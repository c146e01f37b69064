"""Webhooks of teams: events of a team's models POSTed to its subscriptions,
signed as Standard Webhooks (https://www.standardwebhooks.com/, spec:
https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md).

:func:`emit` is called by the services in the transaction of the change
(``version.ready``, ``version.failed``, ``label.moved``, ``traffic.changed``,
``model.deleted``): it writes one :class:`~models_store.models.WebhookDelivery`
per subscription that asked for the event (so a delivery exists exactly when
the change committed), and schedules its first attempt after commit.

An attempt POSTs the payload (``{"type", "timestamp", "data"}``, JSON) with
the headers ``webhook-id`` (the delivery's ``msg_...`` id, the same on every
attempt: at-least-once, receivers deduplicate with it), ``webhook-timestamp``
(Unix seconds of this attempt) and ``webhook-signature`` (``v1,<base64
HMAC-SHA256>`` by the ``standardwebhooks`` library with the subscription's
secret). Each attempt and its answer (status, the first
WEBHOOK_RESPONSE_BODY_BYTES of the body, duration, error) is kept. A 2xx
answer ends the delivery (SUCCEEDED); anything else is retried after
WEBHOOK_RETRY_SECONDS doubling up to WEBHOOK_RETRY_MAX_SECONDS, for
WEBHOOK_RETRY_WINDOW_SECONDS (a day) after the event (or the redeliver),
then the delivery is FAILED. :func:`redeliver` sends any delivery again.

Where attempts run: a background thread of this process where it validates
uploads itself (:func:`models_store.validating.validates_here`: the embedded
server, or no Celery worker answers), else the Celery task
``models_store.deliver_webhook`` (worker mode). An attempt is claimed by one
runner only (a conditional update); :func:`reschedule_stale` (the upkeep
timer) picks up deliveries whose runner ended (a restart) so none is lost.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError
from standardwebhooks import Webhook

from models_store import audit
from models_store.models import WebhookAttempt, WebhookDelivery, WebhookEvent, WebhookSubscription
from models_store.webhooks import targets as webhook_targets

logger = logging.getLogger(__name__)

EVENTS: tuple[str, ...] = tuple(WebhookEvent.values)
Delivery = WebhookDelivery.State

_delivers_here: Callable[[], bool] = lambda: True  # noqa: E731
_queue: Callable[[int, float], None] | None = None


def configure(
    delivers_here: Callable[[], bool] | None = None, queue: Callable[[int, float], None] | None = None
) -> None:
    """Set (the composition root does) whether this process runs attempts
    itself, on a thread (``delivers_here()``; the default), or queues them
    with ``queue(delivery_id, delay_seconds)`` (the Celery task)."""
    global _delivers_here, _queue
    if delivers_here is not None:
        _delivers_here = delivers_here
    if queue is not None:
        _queue = queue


def new_secret() -> str:
    """A subscription's signing secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(16)


def emit(team_id: int | None, event: str, model_name: str, data: dict) -> list[int]:
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


class SubscriptionRefused(ValueError):
    """A subscription that may not be created (HTTP 400): the message says why."""


@transaction.atomic
def subscription_create(team, url: str, events: list[str], actor, description: str = "") -> WebhookSubscription:
    """Subscribe ``url`` to ``events`` of team ``team``'s models, with a new
    secret (the caller shows it once). Raises SubscriptionRefused for an
    unknown or missing event, or a URL :func:`webhook_targets.check` refuses.
    Audited (``webhook.create``, without the secret)."""
    unknown = sorted(set(events) - set(EVENTS))
    if unknown or not events:
        not_these = f"; not {', '.join(unknown)}" if unknown else ""
        raise SubscriptionRefused(f"events are one or more of {', '.join(EVENTS)}{not_these}")
    try:
        webhook_targets.check(url)
    except webhook_targets.TargetRefused as exc:
        raise SubscriptionRefused(str(exc)) from None
    events = [event for event in EVENTS if event in events]
    subscription = WebhookSubscription.objects.create(
        team=team, url=url, events=events, description=description, secret=new_secret(), created_by=actor
    )
    audit.record(actor, "webhook.create", None, team=team.name, webhook=subscription.pk, url=url, events=events)
    return subscription


@transaction.atomic
def subscription_update(
    subscription: WebhookSubscription,
    actor,
    *,
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
def subscription_delete(subscription: WebhookSubscription, actor) -> None:
    """Delete a subscription with its deliveries. Audited (``webhook.delete``)."""
    audit.record(
        actor, "webhook.delete", None, team=subscription.team.name, webhook=subscription.pk, url=subscription.url
    )
    subscription.delete()


def model_event(model, event: str, **data) -> list[int]:
    """:func:`emit` ``event`` of ``model``: its ``data`` names the model and
    its team first (``{"model": ..., "team": ..., **data}``)."""
    team = model.team.name if model.team_id is not None else None
    return emit(model.team_id, event, model.name, {"model": model.name, "team": team, **data})


def retry_delay(failures: int) -> float:
    """Seconds before the next attempt after ``failures`` failed attempts
    (1: the first failed): WEBHOOK_RETRY_SECONDS doubling up to WEBHOOK_RETRY_MAX_SECONDS."""
    return min(settings.WEBHOOK_RETRY_MAX_SECONDS, settings.WEBHOOK_RETRY_SECONDS * 2 ** max(0, failures - 1))


def sign(secret: str, message_id: str, when: datetime, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of ``body`` sent at ``when``."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, when, body),
    }


def _claim(delivery_id: int) -> WebhookDelivery | None:
    """The delivery, if its attempt is due and this runner took it (its
    ``next_attempt_at`` cleared by a conditional update), else None."""
    now = timezone.now()
    taken = WebhookDelivery.objects.filter(
        pk=delivery_id, state=Delivery.PENDING, next_attempt_at__isnull=False, next_attempt_at__lte=now
    ).update(next_attempt_at=None, updated_at=now)
    if not taken:
        return None
    return WebhookDelivery.objects.select_related("subscription").get(pk=delivery_id)


def attempt(delivery_id: int) -> float | None:
    """Make the due attempt of a delivery (none when it is not due or another
    runner took it) and keep it; returns the seconds until the next attempt
    when it failed and the retries go on, else None."""
    delivery = _claim(delivery_id)
    if delivery is None:
        return None
    subscription = delivery.subscription
    body = json.dumps(delivery.payload, separators=(",", ":"))
    started = timezone.now()
    status, text, duration, error = None, "", 0.0, ""
    try:
        target = webhook_targets.check(subscription.url)
        headers = sign(subscription.secret, delivery.message_id, started, body)
        headers["User-Agent"] = "modelhost-webhooks"
        answer = webhook_targets.post(
            target, body.encode(), headers, settings.WEBHOOK_TIMEOUT_SECONDS, settings.WEBHOOK_RESPONSE_BODY_BYTES
        )
        status, text, duration = answer.status, answer.body, answer.duration_ms
    except webhook_targets.TargetRefused as exc:
        error = f"refused: {exc}"
    except Exception as exc:  # connection refused, timeout, TLS, a malformed answer
        error = f"{type(exc).__name__}: {exc}"
        duration = (timezone.now() - started).total_seconds() * 1000
    return _record(delivery, started, status, text, duration, error)


@transaction.atomic
def _record(delivery: WebhookDelivery, started, status, text, duration, error) -> float | None:
    delivery = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
    number = delivery.attempt_count + 1
    requested = delivery.requested_by
    WebhookAttempt.objects.create(
        delivery=delivery, number=number, started_at=started, status_code=status,
        response_body=text.replace("\x00", ""), duration_ms=round(duration, 3), error=error, requested_by=requested,
    )  # fmt: skip
    delivery.attempt_count = number
    delivery.requested_by = ""
    delay = None
    if status is not None and 200 <= status < 300:
        delivery.state, delivery.next_attempt_at = Delivery.SUCCEEDED, None
    else:
        failures = delivery.attempts.filter(started_at__gte=delivery.retry_from).count()
        delay = retry_delay(failures)
        due = timezone.now() + timedelta(seconds=delay)
        if due > delivery.retry_from + timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS):
            delivery.state, delivery.next_attempt_at, delay = Delivery.FAILED, None, None
        else:
            delivery.next_attempt_at = due
    delivery.save(update_fields=["attempt_count", "requested_by", "state", "next_attempt_at", "updated_at"])
    logger.info(
        "webhook %s (%s) attempt %d to %s: %s; %s", delivery.message_id, delivery.event, number,
        delivery.subscription.url, status or error, delivery.state if delay is None else f"retry in {delay:g} s",
    )  # fmt: skip
    return delay


def run(delivery_id: int) -> None:
    """Make the due attempt and schedule the next one when it failed (what
    the thread and the Celery task run)."""
    delay = attempt(delivery_id)
    if delay is not None:
        schedule(delivery_id, delay)


def schedule(delivery_id: int, delay: float = 0.0) -> None:
    """Run the delivery's attempt after ``delay`` seconds: on a thread of
    this process, or queued (the Celery task; see the module doc); when the
    broker cannot take the task, on a thread."""
    try:
        here = _queue is None or _delivers_here()
    except Exception:  # who takes tasks cannot be told: the broker is down
        here = True
    if not here:
        try:
            _queue(delivery_id, delay)
            return
        except (OperationalError, ConnectionError) as exc:
            logger.warning("could not queue webhook delivery id %s (%s); delivering it here", delivery_id, exc)
    _start_timer(delay, delivery_id)


def _start_timer(delay: float, delivery_id: int) -> None:
    timer = threading.Timer(delay, _run_in_thread, (delivery_id,))
    timer.daemon = True
    timer.name = f"webhook-{delivery_id}"
    timer.start()


def _run_in_thread(delivery_id: int) -> None:
    from django.db import connection

    try:
        run(delivery_id)
    except Exception:
        logger.exception("webhook delivery id %s crashed", delivery_id)
    finally:
        close_old_connections()
        connection.close()


def redeliver(delivery: WebhookDelivery, actor=None) -> WebhookDelivery:
    """Send a delivery again now (whatever its state; same ``webhook-id``),
    with a fresh retry window; the attempt records who asked. Audited
    (``webhook.redeliver``)."""
    now = timezone.now()
    with transaction.atomic():
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            state=Delivery.PENDING, next_attempt_at=now, retry_from=now, updated_at=now,
            requested_by=actor.get_username() if actor is not None else audit.SYSTEM,
        )  # fmt: skip
        subscription = delivery.subscription
        audit.record(
            actor, "webhook.redeliver", None, team=subscription.team.name, webhook=subscription.pk,
            delivery=delivery.message_id, event=delivery.event, model_name=delivery.model_name,
        )  # fmt: skip
        transaction.on_commit(lambda: schedule(delivery.pk), robust=True)
    delivery.refresh_from_db()
    return delivery


def reschedule_stale(grace_seconds: float = 60.0) -> list[int]:
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
