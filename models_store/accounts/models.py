"""The tables of people: teams, team memberships and API tokens (users are Django's own)."""

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
