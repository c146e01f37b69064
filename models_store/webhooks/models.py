"""The tables of webhooks: subscriptions of teams, deliveries of events, and their attempts (docs/webhooks.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class WebhookEvent(models.TextChoices):
    """The events a webhook subscription may ask for (docs/webhooks.md)."""

    VERSION_READY = "version.ready", "A version passed validation (READY)"
    VERSION_FAILED = "version.failed", "A version failed validation (FAILED)"
    VERSION_HELD = "version.held", "A READY version was held: it would break the default route's callers"
    LABEL_MOVED = "label.moved", "A version label was set, moved or removed"
    TRAFFIC_CHANGED = "traffic.changed", "A traffic split changed (set, promote, rollback)"
    MODEL_DELETED = "model.deleted", "A model was deleted"
    ROLLOUT_STARTED = "rollout.started", "A progressive rollout started"
    ROLLOUT_ADVANCED = "rollout.advanced", "A rollout passed a step and moved to the next weight"
    ROLLOUT_PROMOTED = "rollout.promoted", "A rollout promoted its version (label stable moved)"
    ROLLOUT_ROLLED_BACK = "rollout.rolled_back", "A rollout was rolled back (a failed analysis, or aborted)"


class WebhookSubscription(models.Model):
    """A team's webhook: the events of the team's models in ``events`` are
    POSTed to ``url``, signed as Standard Webhooks with ``secret``
    (``whsec_<base64>``, shown once when the subscription is created)."""

    team = models.ForeignKey("models_store.Team", related_name="webhooks", on_delete=models.CASCADE)
    url = models.URLField(max_length=2048)
    events = models.JSONField(default=list)
    description = models.CharField(max_length=200, blank=True)
    secret = models.CharField(max_length=128)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "id"]

    def __str__(self) -> str:
        return f"{self.team.name}: {self.url}"


class WebhookDelivery(models.Model):
    """One event for one subscription: ``message_id`` is its ``webhook-id``
    (the same on every attempt: receivers deduplicate with it), ``payload``
    the JSON body. PENDING until an attempt is answered 2xx (SUCCEEDED), or
    until the retries end (FAILED). ``next_attempt_at``: when the next
    attempt is due (None: none is)."""

    class State(models.TextChoices):
        PENDING = "PENDING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    subscription = models.ForeignKey(WebhookSubscription, related_name="deliveries", on_delete=models.CASCADE)
    message_id = models.CharField(max_length=64, unique=True)
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    model_name = models.CharField(max_length=128, blank=True, db_index=True)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    #: The retries end WEBHOOK_RETRY_WINDOW_SECONDS after this: the event, or the last redeliver.
    retry_from = models.DateTimeField(default=timezone.now)
    #: Who asked for the next attempt by a redeliver ("" : the event itself).
    requested_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} {self.message_id} ({self.state})"


class WebhookAttempt(models.Model):
    """One HTTP attempt of a delivery and its answer: ``status_code`` (None:
    no answer), the answer's first bytes (``response_body``), ``duration_ms``
    and ``error`` (a refused address, a timeout, a connection error)."""

    delivery = models.ForeignKey(WebhookDelivery, related_name="attempts", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)
    duration_ms = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    #: Who asked for this attempt: "" (the first attempt or a retry) or the user who redelivered.
    requested_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["delivery_id", "number"]

    def __str__(self) -> str:
        return f"{self.delivery.message_id} #{self.number}: {self.status_code or self.error}"

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
