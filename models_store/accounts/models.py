"""The tables of people: teams, team memberships (each with its role),
service accounts and API tokens (users are Django's own). What each role
may do: :mod:`models_store.accounts.permissions`."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from models_store.identifiers import team_name_validator


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


class Role(models.TextChoices):
    """A member's role in a team, from least to most (see :mod:`models_store.accounts.permissions`)."""

    VIEWER = "viewer", "viewer: sees the team's models and calls them"
    MAINTAINER = "maintainer", "maintainer: uploads, labels, traffic, rollouts, versions"
    OWNER = "owner", "owner: members, service accounts and tokens, webhooks, limits"


class TeamMembership(models.Model):
    """A user's membership of a team, with a role. ``source`` says who
    manages it: ``local`` (the admin, an owner, ``manage.py``) or ``oidc``
    (the identity provider's groups, rewritten at each sign-in)."""

    team = models.ForeignKey(Team, related_name="memberships", on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="team_memberships", on_delete=models.CASCADE)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    source = models.CharField(
        max_length=8, choices=[("local", "local"), ("oidc", "identity provider")], default="local"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="unique_team_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ServiceAccount(models.Model):
    """An identity owned by a team, not a person: apps call with its API
    tokens, which carry a role and an expiry and keep working whoever
    created them. Its ``user`` is a Django user with no usable password
    (it cannot sign in), named ``<team>+<name>@service``; deactivating the
    account deactivates that user (its tokens are then refused)."""

    team = models.ForeignKey(Team, related_name="service_accounts", on_delete=models.CASCADE)
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    user = models.OneToOneField(settings.AUTH_USER_MODEL, related_name="service_account", on_delete=models.CASCADE)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_service_account")]

    def __str__(self) -> str:
        return f"service account {self.name} of {self.team}"

    @property
    def active(self) -> bool:
        return self.user.is_active


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
    #: The most the token may do in its team (None: its user's role). A service account's tokens always have one.
    role = models.CharField(max_length=16, choices=Role.choices, null=True, blank=True)

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
