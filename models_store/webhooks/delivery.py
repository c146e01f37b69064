"""Attempts of webhook deliveries (docs/webhooks.md): one POST per attempt,
retried with back-off until an answer is 2xx or the retry window ends.

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
then the delivery is FAILED.

Where attempts run: a background thread of this process where it validates
uploads itself (:func:`models_store.intake.validating.validates_here`: the embedded
server, or no Celery worker answers), else the Celery task
``models_store.deliver_webhook`` (worker mode); the composition root sets
which (:func:`configure`). An attempt is claimed by one runner only (a
conditional update).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError
from standardwebhooks import Webhook

from models_store.webhooks import targets
from models_store.webhooks.models import WebhookAttempt, WebhookDelivery

logger = logging.getLogger(__name__)

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
        target = targets.check(subscription.url)
        headers = sign(subscription.secret, delivery.message_id, started, body)
        headers["User-Agent"] = "modelhost-webhooks"
        answer = targets.post(
            target, body.encode(), headers, settings.WEBHOOK_TIMEOUT_SECONDS, settings.WEBHOOK_RESPONSE_BODY_BYTES
        )
        status, text, duration = answer.status, answer.body, answer.duration_ms
    except targets.TargetRefused as exc:
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
