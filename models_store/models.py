"""The model registry: registered models, their versions, and a change stamp.

Writes go through :mod:`models_store.services`, reads through
:mod:`models_store.selectors`. Every write bumps :class:`RegistryStamp` in the
same transaction so that server processes notice the change (see
``inference/registry.py``).
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

MODEL_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
model_name_validator = RegexValidator(
    MODEL_NAME_RE,
    "A model name starts with a letter or digit and holds only letters, digits, '_', '.' and '-' "
    "(at most 128 characters).",
)

PLATFORM_ONNX = "onnxruntime_onnx"


class VersionPolicy(models.TextChoices):
    """Triton's version policy: which versions of a model are served."""

    LATEST = "latest", "Latest N"
    ALL = "all", "All"
    SPECIFIC = "specific", "Specific"


team_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
    "A team name starts with a letter or digit and holds only letters, digits, '_', '.' and '-' "
    "(at most 64 characters).",
)


class Team(models.Model):
    """A group of people who own models: its members upload and change them."""

    name = models.CharField(max_length=64, unique=True, validators=[team_name_validator])
    description = models.TextField(blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="TeamMembership", related_name="teams")
    #: The team's own inference limits, set by operators (empty: RATE_LIMIT_TEAM_* apply; 0: unlimited).
    rate_limit_rps = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Inference requests per second of the whole team (empty: the default).",
    )
    rate_limit_burst = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests the team may send at once above its rate (empty: the default)."
    )
    max_in_flight = models.PositiveIntegerField(
        null=True, blank=True, help_text="Inferences of the team running at once (empty: the default)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    """A user's membership of a team."""

    team = models.ForeignKey(Team, related_name="memberships", on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="team_memberships", on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="unique_team_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


class RegisteredModel(models.Model):
    """A named model; its versions hold the artifacts.

    ``version_policy`` with ``latest_versions`` / ``specific_versions`` decides
    which READY versions serve; ``max_batch_size`` and ``instance_group``
    follow Triton's model configuration; ``config`` keeps the imported
    config.pbtxt as JSON. ``traffic`` splits requests that name no version
    between version labels by weight. ``last_version_number`` only grows, so version
    numbers are never reused, even after a delete. ``team`` owns the model
    (its members change it); a model without a team is operator-owned:
    only superusers change it.
    """

    name = models.CharField(max_length=128, unique=True, validators=[model_name_validator])
    description = models.TextField(blank=True)
    team = models.ForeignKey(Team, related_name="models", null=True, blank=True, on_delete=models.PROTECT)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    platform = models.CharField(max_length=64, default=PLATFORM_ONNX)
    max_batch_size = models.PositiveIntegerField(default=0)
    version_policy = models.CharField(max_length=16, choices=VersionPolicy.choices, default=VersionPolicy.LATEST)
    latest_versions = models.PositiveIntegerField(default=1)
    specific_versions = models.JSONField(default=list, blank=True)
    instance_group = models.JSONField(default=list, blank=True)
    config = models.JSONField(default=dict, blank=True)
    #: Class labels of outputs, read from the files config.pbtxt names in an
    #: output's ``label_filename`` (one label per line): output name -> labels.
    output_labels = models.JSONField(default=dict, blank=True)
    #: False after a repository "unload": nothing serves until "load"; no version is deleted.
    loaded = models.BooleanField(default=True)
    #: Traffic split of requests that name no version: version label -> weight
    #: (integers summing to 100), e.g. {"stable": 90, "canary": 10}; {} : none.
    traffic = models.JSONField(default=dict, blank=True)
    #: Payload logging (opt-in): the share of inferences whose request and
    #: response are sent to the operators' sink (PAYLOAD_LOG_SINK); 0: off.
    payload_log_rate = models.FloatField(default=0.0, validators=[MinValueValidator(0), MaxValueValidator(1)])
    #: A logged pair holds its tensors only up to this many bytes (else their shapes only).
    payload_log_max_bytes = models.PositiveIntegerField(default=65536)
    last_version_number = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    """One immutable artifact of a model, numbered by the registry.

    ``artifact`` is a path relative to MODEL_STORE_DIR (content-addressed by
    sha256). ``inputs``/``outputs`` are the signature extracted from the ONNX
    graph: lists of ``{"name", "datatype", "shape"}`` with ``-1`` for
    variable dimensions. ``reason`` explains a FAILED or UNAVAILABLE state;
    ``log`` holds the validation steps (one line each). An upload goes
    UPLOADED -> VALIDATING -> READY or FAILED; a retired version is
    UNAVAILABLE.
    """

    class State(models.TextChoices):
        UPLOADED = "UPLOADED"
        VALIDATING = "VALIDATING"
        LOADING = "LOADING"
        READY = "READY"
        FAILED = "FAILED"
        UNAVAILABLE = "UNAVAILABLE"

    model = models.ForeignKey(RegisteredModel, related_name="versions", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    artifact = models.CharField(max_length=512)
    sha256 = models.CharField(max_length=64, db_index=True)
    size = models.BigIntegerField()
    platform = models.CharField(max_length=64, default=PLATFORM_ONNX)
    inputs = models.JSONField(default=list, blank=True)
    outputs = models.JSONField(default=list, blank=True)
    properties = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UPLOADED, db_index=True)
    reason = models.TextField(blank=True)
    log = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=1024, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="unique_version_number"),
            models.UniqueConstraint(fields=["model", "sha256"], name="unique_version_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.number}"


class RegistryStamp(models.Model):
    """A single row whose ``counter`` grows with every registry write."""

    counter = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)


label_validator = RegexValidator(
    r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}$",
    "A version label holds letters, digits, '_' and '-' (at most 64 characters).",
)


class VersionLabel(models.Model):
    """A name (``stable``, ``canary``) for one version of a model, as TF
    Serving's version labels. It may only be set on a READY version."""

    model = models.ForeignKey(RegisteredModel, related_name="labels", on_delete=models.CASCADE)
    name = models.CharField(max_length=64, validators=[label_validator])
    version = models.ForeignKey(ModelVersion, related_name="labels", on_delete=models.CASCADE)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="unique_label_per_model")]

    def __str__(self) -> str:
        return f"{self.model.name}@{self.name}"


class ApiToken(models.Model):
    """A personal API token for scripts: the management API and inference.

    Only the sha256 of the token is stored (``key_hash``); ``prefix`` (its
    first characters) identifies it in lists. With ``team`` set the token
    only reaches that team's models; otherwise every model its user may
    reach. A revoked token (``revoked_at`` set) is refused, and so is one
    past its ``expires_at`` (None: it does not expire).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="api_tokens", on_delete=models.CASCADE)
    name = models.CharField(max_length=64)
    team = models.ForeignKey(Team, related_name="+", null=True, blank=True, on_delete=models.CASCADE)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["user__username", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.user})"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def active(self) -> bool:
        """Neither revoked nor expired."""
        return self.revoked_at is None and not self.expired


class AuditEvent(models.Model):
    """Who changed what, when. Written by the services in the transaction of
    the change; ``actor_name`` keeps the name after a user is deleted and
    ``model_name`` after a model is."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="+", null=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=32, db_index=True)
    model = models.ForeignKey(
        RegisteredModel, related_name="audit_events", null=True, blank=True, on_delete=models.SET_NULL
    )
    model_name = models.CharField(max_length=128, blank=True, db_index=True)
    version_number = models.PositiveIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        target = self.model_name + (f":{self.version_number}" if self.version_number else "")
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {target}".strip()


class WebhookEvent(models.TextChoices):
    """The events a webhook subscription may ask for (docs/webhooks.md)."""

    VERSION_READY = "version.ready", "A version passed validation (READY)"
    VERSION_FAILED = "version.failed", "A version failed validation (FAILED)"
    LABEL_MOVED = "label.moved", "A version label was set, moved or removed"
    TRAFFIC_CHANGED = "traffic.changed", "A traffic split changed (set, promote, rollback)"
    MODEL_DELETED = "model.deleted", "A model was deleted"


class WebhookSubscription(models.Model):
    """A team's webhook: the events of the team's models in ``events`` are
    POSTed to ``url``, signed as Standard Webhooks with ``secret``
    (``whsec_<base64>``, shown once when the subscription is created)."""

    team = models.ForeignKey(Team, related_name="webhooks", on_delete=models.CASCADE)
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
