"""Celery tasks of the model store. Thin: each calls one service.

Embedded mode (no REDIS_URL): the server validates uploads itself
(:func:`models_store.intake.validating.validate_here`), so these run in workers
only (``manage.py runworker``, or ``celery -A hosting worker``).

A validation task is acknowledged late (after it ran: a worker killed
mid-validation leaves it in the broker for another one) and, when a
dependency fails (database, storage backend, broker, disk space), retried
with back-off (VALIDATION_RETRY_SECONDS doubling up to
VALIDATION_RETRY_MAX_SECONDS) for as long as it takes; the version is
never FAILED for it (:class:`~models_store.intake.validating.ValidationInterrupted`).
"""

from __future__ import annotations

from celery import shared_task

from models_store import outages
from models_store.intake import validating
from models_store.webhooks import delivery


@shared_task(
    bind=True,
    name="models_store.validate_version",
    ignore_result=True,  # the state is in the registry
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,  # retried for as long as the outage lasts
)
def validate_version(self, version_id: int, resume: bool = False) -> str | None:
    """Validate an uploaded version (see validating.version_validate); returns
    its final state, or None when the version was deleted meanwhile.
    ``resume``: a retry, which also takes a version left VALIDATING."""
    try:
        version = validating.version_validate(version_id, resume=resume or self.request.retries > 0)
    except Exception as exc:
        if not (isinstance(exc, validating.ValidationInterrupted) or outages.transient(exc)):
            raise
        delay = validating.retry_delay(self.request.retries)
        validating.note_interrupted(version_id, exc, delay)
        raise self.retry(args=(version_id,), kwargs={"resume": True}, countdown=delay) from None
    return version.state if version is not None else None


@shared_task(name="models_store.deliver_webhook", ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def deliver_webhook(delivery_id: int) -> None:
    """Make the due attempt of a webhook delivery and schedule the next one
    when it failed (see delivery.run; a delivery not due is left alone)."""
    delivery.run(delivery_id)
