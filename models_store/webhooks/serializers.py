"""Serializers of the management API's webhooks (docs/webhooks.md)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from models_store.web.fields import Boolean, TextField
from models_store.webhooks import targets
from models_store.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent, WebhookSubscription

#: The longest webhook URL (the model field's max_length).
MAX_URL_CHARS = 2048


@extend_schema_field(
    {
        "type": "string",
        "format": "uri",
        "pattern": targets.URL_PATTERN,
        "maxLength": MAX_URL_CHARS,
        "description": "Where the events are POSTed: http(s), a host name (labels of at most 63 letters, digits "
        "or hyphens) or an IP address (IPv6 in brackets), an optional port and path. Its host must also resolve "
        "to public addresses, unless WEBHOOK_ALLOWED_HOSTS lists it (400 otherwise, naming the address).",
    }
)
class WebhookUrlField(serializers.CharField):
    """A webhook's target URL: exactly the strings its schema's ``pattern``
    allows (:data:`~models_store.webhooks.targets.URL_PATTERN`), taken as
    sent (no whitespace trimmed); 400 naming the field otherwise."""

    def __init__(self, **kwargs):
        super().__init__(max_length=MAX_URL_CHARS, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not targets.well_formed(value):
            raise serializers.ValidationError(targets.URL_SHAPE)
        return value


class WebhookCreateSerializer(serializers.Serializer):
    """A new subscription: ``url`` (http or https, a host whose addresses are
    public unless WEBHOOK_ALLOWED_HOSTS lists it) and the ``events`` it gets."""

    url = WebhookUrlField()
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.values),
        min_length=1,
        max_length=len(WebhookEvent.values),
        help_text="The events to send.",
    )
    description = TextField(max_length=200, required=False, allow_blank=True, default="")


class WebhookUpdateSerializer(serializers.Serializer):
    """What may change on a subscription (each optional): ``active`` (false:
    paused, no new deliveries), ``events``, ``description``. To change the
    URL, make a new subscription (it gets a new secret)."""

    active = Boolean(required=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.values),
        min_length=1,
        max_length=len(WebhookEvent.values),
        required=False,
    )
    description = TextField(max_length=200, required=False, allow_blank=True)


class WebhookSerializer(serializers.ModelSerializer):
    """A team's webhook subscription (its secret is only in the creation's answer)."""

    team = serializers.CharField(source="team.name", read_only=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=WebhookEvent.values), read_only=True)
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = WebhookSubscription
        fields = ["id", "team", "url", "events", "description", "active", "created_by", "created_at"]
        read_only_fields = fields

    def get_created_by(self, subscription) -> str | None:
        """Who created it (null: the user is gone)."""
        return subscription.created_by.get_username() if subscription.created_by else None


class WebhookCreatedSerializer(WebhookSerializer):
    """The new subscription with its signing ``secret`` (``whsec_...``): shown this once."""

    secret = serializers.CharField(read_only=True, help_text="The Standard Webhooks signing secret; shown once.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookAttemptSerializer(serializers.ModelSerializer):
    """One attempt: the answer's ``status_code`` (null: none, see ``error``),
    the first bytes of its body, ``duration_ms``, and who asked for it
    (``requested_by``: empty for the event's own attempts and retries)."""

    class Meta:
        model = WebhookAttempt
        fields = ["number", "started_at", "status_code", "response_body", "duration_ms", "error", "requested_by"]
        read_only_fields = fields


class WebhookDeliverySerializer(serializers.ModelSerializer):
    """One event sent to one subscription: ``message_id`` is its
    ``webhook-id`` header (the same on every attempt); ``state`` PENDING
    (``next_attempt_at`` says when), SUCCEEDED or FAILED; ``payload`` the body sent."""

    model = serializers.CharField(source="model_name", read_only=True)
    payload = serializers.DictField(read_only=True)
    attempts = WebhookAttemptSerializer(many=True, read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id", "message_id", "event", "model", "state", "attempt_count", "next_attempt_at", "created_at",
            "payload", "attempts",
        ]  # fmt: skip
        read_only_fields = fields
